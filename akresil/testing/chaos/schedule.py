"""The chaos soak's fault script, pure: ``generate_schedule(spec, seed)`` turns a seed into ``FaultEvent(at_ms,
fault, args, duration_ms)`` -- leader moves, throttles, dropped connections, node stops (with an optional
controller-style failover of the stopped node's partitions), response latency, a few Produce / Fetch requests
answered with a retriable error, and group members killed without leaving.  It simulates leadership and which
nodes are down, so the script never moves a partition to a stopped node or stops more nodes than allowed.
``timeline(events)`` expands it into the apply / undo steps a ``FaultRunner`` performs.
"""

from __future__ import annotations

import enum
import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from ... import errors
from ...types import TopicPartition
from ..control import Capability

__all__ = ["DEFAULT_FETCH_ERRORS", "DEFAULT_PRODUCE_ERRORS", "DEFAULT_WEIGHTS", "FAULT_NEEDS", "Fault", "FaultEvent",
           "ScheduleSpec", "Step", "generate_schedule", "timeline"]


class Fault(str, enum.Enum):
    MOVE_LEADER = "move_leader"
    THROTTLE = "throttle"
    DROP_CONNECTIONS = "drop_connections"
    STOP_NODE = "stop_node"
    LATENCY = "latency"
    FAIL_REQUESTS = "fail_requests"
    KILL_CONSUMER = "kill_consumer"


class FaultEvent(NamedTuple):
    """One scripted fault: when (ms from the script's start), what, its arguments, how long it lasts."""

    at_ms: float
    fault: Fault
    args: Mapping[str, Any]
    #: 0 for instant faults (move, drop, failed requests, kill); a stop's downtime, a latency window, a
    #: throttle's total mute
    duration_ms: float


Range = tuple[float, float]

#: what a broker's control must be able to do for a fault to be scripted against it (``BrokerControl.capabilities``;
#: a member kill needs nothing of the broker)
FAULT_NEEDS: Mapping[Fault, Capability | None] = {
    Fault.MOVE_LEADER: Capability.MOVE_LEADER, Fault.THROTTLE: Capability.THROTTLE,
    Fault.DROP_CONNECTIONS: Capability.DROP_CONNECTIONS, Fault.STOP_NODE: Capability.KILL_NODE,
    Fault.LATENCY: Capability.LATENCY, Fault.FAIL_REQUESTS: Capability.FAIL_REQUESTS, Fault.KILL_CONSUMER: None}

DEFAULT_WEIGHTS: Mapping[Fault, float] = {Fault.MOVE_LEADER: 3.0, Fault.THROTTLE: 2.0, Fault.DROP_CONNECTIONS: 2.0,
                                          Fault.STOP_NODE: 1.0, Fault.LATENCY: 2.0, Fault.FAIL_REQUESTS: 2.0,
                                          Fault.KILL_CONSUMER: 1.0}
PRODUCE, FETCH, LEAVE_GROUP = 0, 1, 13
#: retriable answers for a Produce (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS) and a Fetch
#: (NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR); the proxy answers without forwarding, so nothing is written
DEFAULT_PRODUCE_ERRORS: tuple[int, ...] = (6, 19)
DEFAULT_FETCH_ERRORS: tuple[int, ...] = (6, 56)


@dataclass(frozen=True)
class ScheduleSpec:
    """What a fault script may contain. Times in ms; ``*_ms`` ranges are inclusive ``(low, high)``."""

    duration_ms: float
    nodes: Sequence[int]
    partitions: Sequence[TopicPartition]
    #: mean gap between faults (exponential gaps: bursts and lulls both happen)
    mean_interval_ms: float = 800.0
    weights: Mapping[Fault, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    stop_ms: Range = (300.0, 3000.0)
    #: a stopped node's partitions move to live nodes after this long (None: they wait for its restart)
    failover_ms: Range | None = (200.0, 1500.0)
    max_nodes_down: int = 1
    latency_ms: Range = (20.0, 300.0)
    latency_window_ms: Range = (300.0, 3000.0)
    throttle_ms: Range = (50.0, 800.0)
    throttle_count: tuple[int, int] = (1, 3)
    #: how many requests one ``fail_requests`` fault answers with an error
    fail_count: tuple[int, int] = (1, 5)
    produce_errors: Sequence[int] = DEFAULT_PRODUCE_ERRORS
    fetch_errors: Sequence[int] = DEFAULT_FETCH_ERRORS
    #: group members (slots 0..members-1) a ``kill_consumer`` fault may kill; 0: none (the fault never comes)
    members: int = 0
    #: at least this long between two kills: the broker notices a dead member only after its session timeout
    kill_gap_ms: float = 5_000.0
    #: no kill before this: a member killed before the group formed owned nothing, so nothing is redelivered
    kill_after_ms: float = 0.0
    #: no fault starts before this (lets clients connect and a group form)
    quiet_start_ms: float = 0.0

    def validate(self) -> None:
        def check_range(name: str, r: Any, *, positive: bool = False) -> None:
            if not (isinstance(r, tuple) and len(r) == 2 and all(isinstance(x, (int, float)) for x in r)):
                raise ValueError(f"{name}: expected a (low, high) pair of numbers, got {r!r}")
            if r[0] > r[1] or r[0] < 0 or (positive and r[0] <= 0):
                raise ValueError(f"{name}: need 0 {'<' if positive else '<='} low <= high, got {r!r}")

        if not self.duration_ms > 0:
            raise ValueError(f"duration_ms: must be > 0, got {self.duration_ms!r}")
        nodes = tuple(self.nodes)
        if not nodes or len(set(nodes)) != len(nodes) or not all(isinstance(n, int) and n >= 0 for n in nodes):
            raise ValueError(f"nodes: need distinct non-negative node ids, got {self.nodes!r}")
        if not self.partitions:
            raise ValueError("partitions: need at least one (topic, partition)")
        for tp in self.partitions:
            if not (isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and isinstance(tp[1], int)
                    and tp[1] >= 0):
                raise ValueError(f"partitions: expected (topic, partition >= 0) pairs, got {tp!r}")
        if not self.mean_interval_ms > 0:
            raise ValueError(f"mean_interval_ms: must be > 0, got {self.mean_interval_ms!r}")
        for key, w in self.weights.items():
            if not isinstance(key, Fault):
                raise ValueError(f"weights: unknown fault {key!r}; use one of {[f.value for f in Fault]}")
            if not isinstance(w, (int, float)) or w < 0:
                raise ValueError(f"weights: {key.value} must be a number >= 0, got {w!r}")
        if sum(self.weights.values()) <= 0:
            raise ValueError("weights: at least one fault needs a weight > 0")
        check_range("stop_ms", self.stop_ms, positive=True)
        if self.failover_ms is not None:
            check_range("failover_ms", self.failover_ms)
        check_range("latency_ms", self.latency_ms)
        check_range("latency_window_ms", self.latency_window_ms, positive=True)
        check_range("throttle_ms", self.throttle_ms, positive=True)
        for name in ("throttle_count", "fail_count"):
            pair = getattr(self, name)
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, int) for x in pair)
                    and 1 <= pair[0] <= pair[1]):
                raise ValueError(f"{name}: need ints 1 <= low <= high, got {pair!r}")
        for name in ("produce_errors", "fetch_errors"):
            codes = getattr(self, name)
            if not codes or isinstance(codes, (str, bytes)):
                raise ValueError(f"{name}: need a non-empty sequence of Kafka error codes, got {codes!r}")
            for code in codes:
                cls = (errors.error_for_code(code)
                       if isinstance(code, int) and not isinstance(code, bool) and code > 0 else None)
                if cls is None or not (cls.retriable or cls.invalid_metadata):
                    raise ValueError(f"{name}: {code!r} is not a retriable Kafka error code (a client would fail "
                                     f"the records instead of retrying)")
        if not isinstance(self.members, int) or isinstance(self.members, bool) or self.members < 0:
            raise ValueError(f"members: must be an int >= 0, got {self.members!r}")
        for name in ("kill_gap_ms", "kill_after_ms"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)!r}")
        if not any(w > 0 for k, w in self.weights.items() if k is not Fault.KILL_CONSUMER or self.members):
            raise ValueError("weights: kill_consumer is the only fault with a weight > 0 but members is 0")
        if not (isinstance(self.max_nodes_down, int) and 0 <= self.max_nodes_down < len(nodes)):
            raise ValueError(f"max_nodes_down: must be an int in 0..{len(nodes) - 1} (one node stays up), "
                             f"got {self.max_nodes_down!r}")
        if not 0 <= self.quiet_start_ms < self.duration_ms:
            raise ValueError(f"quiet_start_ms: must be in [0, duration_ms), got {self.quiet_start_ms!r}")


def generate_schedule(spec: ScheduleSpec, seed: int) -> list[FaultEvent]:
    """The fault script for ``seed``: same spec and seed, same list. Every fault ends by ``duration_ms``.

    Leadership starts where FaultProxy puts it (partition p on ``nodes[p % N]``) and follows the script's
    own moves, so a move always changes the leader and never targets a node that is down at that moment.
    """
    spec.validate()
    rng = random.Random(seed)
    nodes = tuple(spec.nodes)
    kinds = [k for k in Fault if spec.weights.get(k, 0) > 0 and (k is not Fault.KILL_CONSUMER or spec.members)]
    weights = [float(spec.weights[k]) for k in kinds]
    leaders: dict[TopicPartition, int] = {TopicPartition(*tp): nodes[tp[1] % len(nodes)] for tp in spec.partitions}
    down_until: dict[int, float] = {}
    pending_moves: list[tuple[float, int, TopicPartition, int]] = []   # heap: (at, tiebreak, tp, node)
    events: list[FaultEvent] = []
    end = float(spec.duration_ms)
    t = float(spec.quiet_start_ms)
    last_kill = -math.inf

    def up_at(when: float) -> list[int]:
        return [n for n in nodes if down_until.get(n, -1.0) <= when]

    def uniform(r: Range) -> float:
        return round(rng.uniform(r[0], r[1]), 1)

    while True:
        t = round(t + rng.expovariate(1.0 / spec.mean_interval_ms), 1)
        if t >= end:
            break
        while pending_moves and pending_moves[0][0] <= t:
            _, _, tp, node = heapq.heappop(pending_moves)
            leaders[tp] = node
        for n in [n for n, until in down_until.items() if until <= t]:
            del down_until[n]
        up = up_at(t)
        kind = rng.choices(kinds, weights)[0]
        # a partition awaiting its failover is left alone, and its target stays up until it arrives
        failing_over = {m[2] for m in pending_moves}
        if kind is Fault.MOVE_LEADER:
            tp = TopicPartition(*rng.choice(list(spec.partitions)))
            if tp in failing_over:
                continue
            targets = [n for n in up if n != leaders[tp]]
            if not targets:
                continue
            to = rng.choice(targets)
            leaders[tp] = to
            events.append(FaultEvent(t, kind, {"topic": tp.topic, "partition": tp.partition, "to_node": to}, 0.0))
        elif kind is Fault.DROP_CONNECTIONS:
            events.append(FaultEvent(t, kind, {"node": rng.choice(up)}, 0.0))
        elif kind is Fault.THROTTLE:
            count = rng.randint(*spec.throttle_count)
            ms = int(min(uniform(spec.throttle_ms), (end - t) / count))   # the mutes end by the script's end
            if ms < 1:
                continue
            events.append(FaultEvent(t, kind, {"node": rng.choice(up), "ms": ms, "count": count}, float(ms * count)))
        elif kind is Fault.LATENCY:
            node = rng.choice(nodes)
            delay_ms = uniform(spec.latency_ms)
            window = min(uniform(spec.latency_window_ms), round(end - t, 1))
            events.append(FaultEvent(t, kind, {"node": node, "ms": delay_ms}, window))
        elif kind is Fault.FAIL_REQUESTS:
            api_key = rng.choice((PRODUCE, FETCH))
            code = rng.choice(list(spec.produce_errors if api_key == PRODUCE else spec.fetch_errors))
            events.append(FaultEvent(t, kind, {"api_key": api_key, "error_code": code,
                                               "count": rng.randint(*spec.fail_count), "node": rng.choice(up)}, 0.0))
        elif kind is Fault.KILL_CONSUMER:
            if t < spec.kill_after_ms or t - last_kill < spec.kill_gap_ms:
                continue
            last_kill = t
            events.append(FaultEvent(t, kind, {"member": rng.randrange(spec.members)}, 0.0))
        else:  # STOP_NODE
            if len(down_until) >= spec.max_nodes_down:
                continue
            candidates = [n for n in up if n not in {m[3] for m in pending_moves}]
            if not candidates:
                continue
            node = rng.choice(candidates)
            downtime = min(uniform(spec.stop_ms), round(end - t, 1))
            down_until[node] = t + downtime
            events.append(FaultEvent(t, kind, {"node": node}, downtime))
            if spec.failover_ms is not None:
                at = round(t + uniform(spec.failover_ms), 1)
                if at < t + downtime:
                    survivors = [n for n in up_at(at) if n != node]
                    for tp in sorted(tp for tp, lead in leaders.items() if lead == node):
                        if not survivors:
                            break
                        to = rng.choice(survivors)
                        heapq.heappush(pending_moves, (at, len(events), tp, to))
                        events.append(FaultEvent(at, Fault.MOVE_LEADER,
                                                 {"topic": tp.topic, "partition": tp.partition, "to_node": to,
                                                  "failover_from": node}, 0.0))
    events.sort(key=lambda e: e.at_ms)
    return events


class Step(NamedTuple):
    """One action a runner performs at ``at_ms``: apply a fault or undo one (``start_node``,
    ``remove_latency``)."""

    at_ms: float
    action: str
    args: Mapping[str, Any]


def timeline(events: Iterable[FaultEvent]) -> list[Step]:
    """Apply and undo steps in time order; at equal times undo first (a node restarts before it can stop again)."""
    keyed: list[tuple[float, int, int, Step]] = []
    for i, ev in enumerate(events):
        if not isinstance(ev.fault, Fault):
            raise ValueError(f"timeline: event {i} has unknown fault {ev.fault!r}")
        keyed.append((ev.at_ms, 1, i, Step(ev.at_ms, ev.fault.value, dict(ev.args))))
        if ev.fault is Fault.STOP_NODE:
            end = ev.at_ms + ev.duration_ms
            keyed.append((end, 0, i, Step(end, "start_node", {"node": ev.args["node"]})))
        elif ev.fault is Fault.LATENCY:
            end = ev.at_ms + ev.duration_ms
            keyed.append((end, 0, i, Step(end, "remove_latency", dict(ev.args))))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]
