"""Chaos soak: a seeded fault script over ``FaultProxy`` (or a real Apache Kafka cluster) and a driver that proves
no acknowledged record is lost.

Three layers, each testable on its own:

* **Schedule** (pure): ``generate_schedule(spec, seed)`` turns a seed into a list of ``FaultEvent(at_ms,
  fault, args, duration_ms)`` — leader moves, throttles, dropped connections, node stops (with an optional
  controller-style failover of the stopped node's partitions), response latency, a few Produce / Fetch
  requests answered with a retriable error, and group members killed without leaving. It simulates
  leadership and which nodes are down, so the script never moves a partition to a stopped node or stops more
  nodes than allowed. ``timeline(events)`` expands it into the apply / undo steps a runner performs.
* **Runner** (thin I/O): ``FaultRunner`` performs those steps on a ``ProxyControl`` (``FaultProxyControl``, or
  ``KafkaClusterControl`` for Apache Kafka itself, which takes only the faults a real cluster can) at their times (injected
  clock and sleep) and heals on the way out (restarts stopped nodes, removes latency), even when cancelled.
  A killed member is cancelled as a crash would end it (no commit, no LeaveGroup) and replaced at once, so
  the group rebalances once the broker gives up on it and its uncommitted records are delivered again.
* **Soak** (``run_soak``): idempotent producers (``send`` / ``enqueue`` / ``send_many`` mixed, explicit
  partitions, payloads carrying producer id and per-partition send sequence) and a 2-member consumer group
  run through the proxy (or straight to the cluster) while the script plays; then a fresh ``assign()``-ed consumer reads the whole log.
  ``judge`` (pure) compares what the application was told (``Ledger``) with the log and with what the group
  delivered (``Consumption``) and returns the counts of ``SoakReport``.

A record the group delivers twice at the *same* offset is an at-least-once redelivery after a rebalance
(``redelivered``, allowed); the same payload at two *offsets* is a duplicate in the log, an idempotence
failure (``duplicates``, never allowed). The soak runs on asyncio (task leak check via ``asyncio.all_tasks``).
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import logging
import math
import os
import random
import time
import uuid
from array import array
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import (TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Literal, Mapping, NamedTuple, Protocol,
                    Sequence)

import anyio
import anyio.abc

from .. import errors
from ..types import NewTopic, TopicPartition

if TYPE_CHECKING:
    from .kafka_cluster import KafkaCluster

log = logging.getLogger(__name__)

__all__ = ["Fault", "FaultEvent", "ScheduleSpec", "generate_schedule", "Step", "timeline", "ProxyControl",
           "MemberControl", "GroupMembers", "FaultProxyControl", "KafkaClusterControl", "FaultRunner", "encode_payload", "decode_payload", "Ledger",
           "Consumption", "LogImage", "judge", "SoakConfig", "SoakReport", "run_soak", "ResourceSnapshot", "leaked_fds"]


# ============================================================================================ schedule (pure)
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
            ms = uniform(spec.latency_ms)
            window = min(uniform(spec.latency_window_ms), round(end - t, 1))
            events.append(FaultEvent(t, kind, {"node": node, "ms": ms}, window))
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


# ============================================================================================ runner (I/O shell)
class ProxyControl(Protocol):
    """The operations a fault runner needs (``FaultProxyControl`` adapts a ``FaultProxy``; tests fake it)."""

    async def move_leader(self, topic: str, partition: int, to_node: int) -> None: ...
    async def throttle(self, node: int, ms: int, count: int) -> None: ...
    async def drop_connections(self, node: int) -> None: ...
    async def stop_node(self, node: int) -> None: ...
    async def start_node(self, node: int) -> None: ...
    async def add_latency(self, node: int, ms: float) -> None: ...
    async def remove_latency(self, node: int, ms: float) -> None: ...
    async def fail_requests(self, api_key: int, error_code: int, count: int, node: int) -> None: ...
    async def kill_consumer(self, member: int) -> None: ...


class MemberControl(Protocol):
    """Kills a consumer-group member without leaving and starts its replacement (the soak's ``_Members``)."""

    async def kill(self, member: int) -> None: ...


class GroupMembers(MemberControl, Protocol):
    """``MemberControl`` that also names its members' client ids (what a client quota or DescribeGroups sees)."""

    def client_id(self, member: int) -> str: ...
    def client_ids(self) -> list[str]: ...


class FaultProxyControl:
    """Drives a ``FaultProxy`` running on this event loop (``async with``) or on its own thread (``start()``),
    and, given ``members``, the group members ``kill_consumer`` faults kill.

    The thread form keeps the proxy's tasks out of the clients' loop, so a soak can count the clients' tasks.
    """

    def __init__(self, proxy: Any, members: MemberControl | None = None) -> None:
        self.proxy = proxy
        self.members = members

    async def _on_proxy_loop(self, make: Callable[[], Awaitable[Any]]) -> Any:
        loop = self.proxy._loop
        if loop is None:
            raise RuntimeError("FaultProxyControl: the proxy is not running")
        if loop is asyncio.get_running_loop():
            return await make()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(make(), loop))  # type: ignore[arg-type]

    async def move_leader(self, topic: str, partition: int, to_node: int) -> None:
        self.proxy.move_leader(topic, partition, to_node)

    async def throttle(self, node: int, ms: int, count: int) -> None:
        self.proxy.throttle(node, ms, count=count)

    async def drop_connections(self, node: int) -> None:
        await self._on_proxy_loop(lambda: self.proxy.adrop_connections(node))

    async def stop_node(self, node: int) -> None:
        await self._on_proxy_loop(lambda: self.proxy.astop_node(node))

    async def start_node(self, node: int) -> None:
        await self._on_proxy_loop(lambda: self.proxy.astart_node(node))

    async def add_latency(self, node: int, ms: float) -> None:
        self.proxy.add_latency(node, ms)

    async def remove_latency(self, node: int, ms: float) -> None:
        self.proxy.remove_latency(node, ms)

    async def fail_requests(self, api_key: int, error_code: int, count: int, node: int) -> None:
        self.proxy.fail_requests(api_key, error_code, count=count, node=node)

    async def kill_consumer(self, member: int) -> None:
        if self.members is None:
            raise RuntimeError("kill_consumer: this control was given no group members to kill")
        await self.members.kill(member)


class KafkaClusterControl:
    """A ``ProxyControl`` acting on a real Apache Kafka ``KafkaCluster``: clients talk to the brokers directly.

    Each fault is what an operator or a failure does to a real cluster:

    * ``move_leader``: ``KafkaCluster.move_leader`` (replica reorder + preferred leader election; the epoch
      rises and the old leader answers NOT_LEADER_OR_FOLLOWER with Kafka's own KIP-951 hints);
    * ``stop_node`` / ``start_node``: the broker's JVM is killed (SIGKILL, no controlled shutdown) and started
      again with its data.  Kafka's controller moves the dead broker's leaderships once it fences it, so the
      script's own failover moves are off.  A broker takes 10-35 s to serve again on a loaded 2-core machine
      (JVM start, log recovery after the kill), far longer than a scripted downtime, so ``start_node`` starts
      it in the background and the script goes on; a move to that broker or the next kill waits for it, so
      one broker at most is down and every move finds its target in sync;
    * ``throttle``: a real client quota (KIP-219) of ``throttle_byte_rate`` bytes/s, produce and fetch, on every
      soak client for the fault's ``ms * count``, then lifted.  Quotas are per client id and each broker
      enforces them, so ``node`` is not used, and the broker decides how long each throttle lasts;
    * ``kill_consumer``: a group member crashes as with the proxy; describing the group right after the kill
      (DescribeGroups, or ConsumerGroupDescribe for a KIP-848 group) must still list it (a member that sent
      LeaveGroup is gone at once; counted in ``killed_left``). A group the coordinator cannot describe yet is
      not checked (``killed_unchecked``).

    A broker cannot be told to drop its connections, delay responses or answer a request with an error, so
    ``drop_connections``, ``add_latency`` / ``remove_latency`` and ``fail_requests`` (``UNSUPPORTED``) get
    zero weight in a soak with this control and raise if a script asks for them anyway.

    Use it as ``async with``: restarts and quota lifts run in its task group; leaving waits for the restarts
    and lifts what is still set.  A restart that fails is in ``errors`` (a soak reports it as a violation).
    """

    UNSUPPORTED: frozenset[Fault] = frozenset({Fault.DROP_CONNECTIONS, Fault.LATENCY, Fault.FAIL_REQUESTS})

    def __init__(self, cluster: KafkaCluster, *, throttle_byte_rate: float = 1024.0,
                 sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
        if not throttle_byte_rate > 0:
            raise ValueError(f"throttle_byte_rate: must be > 0 bytes/s, got {throttle_byte_rate!r}")
        self.cluster = cluster
        self.throttle_byte_rate = throttle_byte_rate
        self._sleep = sleep   # how a throttle window passes (tests inject one)
        self.members: GroupMembers | None = None
        self.group: str | None = None
        self.producer_ids: tuple[str, ...] = ()
        #: killed members DescribeGroups no longer listed right after the kill (they left instead of crashing),
        #: and kills it could not check (the group was not described)
        self.killed_left = 0
        self.killed_unchecked = 0
        #: background restarts that failed
        self.errors: list[str] = []
        self._throttled: dict[str, int] = {}   # client id -> windows in force
        self._lifts: set[anyio.CancelScope] = set()
        self._starting: dict[int, anyio.Event] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._tg_cm: Any = None

    @property
    def nodes(self) -> list[int]:
        return list(self.cluster.broker_ids)

    @property
    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    def attach(self, members: GroupMembers, group: str, producer_ids: Iterable[str]) -> None:
        """The soak's group and its members (for ``kill_consumer``, and with the producers' client ids, the
        clients a throttle applies to)."""
        self.members, self.group, self.producer_ids = members, group, tuple(producer_ids)

    def harness_fds(self) -> set[int]:
        """Fds this process holds for the cluster (each broker's watchdog pipe): a restarted broker's is new."""
        fds = set()
        for node in self.cluster.nodes.values():
            if node.proc is not None and node.proc.stdin is not None and not node.proc.stdin.closed:
                fds.add(node.proc.stdin.fileno())
        return fds

    async def create_topic(self, topic: str, partitions: int) -> None:
        """RF 3 (or every broker, if fewer), partition p led by ``nodes[p % N]``: where ``generate_schedule``
        assumes leadership starts, and a move or a dead broker keeps every partition available."""
        nodes = self.nodes
        rf = min(3, len(nodes))
        assignment = {p: [nodes[(p + i) % len(nodes)] for i in range(rf)] for p in range(partitions)}
        async with self.cluster.admin() as admin:
            await admin.create_topics([NewTopic(topic, replica_assignment=assignment)])

    async def __aenter__(self) -> KafkaClusterControl:
        self._tg_cm = anyio.create_task_group()
        self._tg = await self._tg_cm.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        assert self._tg is not None
        for scope in self._lifts:   # pending lifts: done below at once instead; restarts run to their end
            scope.cancel()
        try:
            return bool(await self._tg_cm.__aexit__(*exc_info))
        finally:
            self._tg = None
            with anyio.CancelScope(shield=True):
                await self._set_quota(sorted(self._throttled), None)
                self._throttled.clear()

    async def _restarted(self, nodes: Iterable[int]) -> None:
        for node in nodes:
            event = self._starting.get(node)
            if event is not None:
                await event.wait()

    async def move_leader(self, topic: str, partition: int, to_node: int) -> None:
        await self._restarted([to_node])
        # a restarted broker rejoins the ISR only once caught up, which a loaded machine can take a while over
        await self.cluster.move_leader(topic, partition, to_node, timeout_s=60.0)

    async def stop_node(self, node: int) -> None:
        await self._restarted(list(self._starting))
        await self.cluster.kill_broker(node)

    async def start_node(self, node: int) -> None:
        if self._tg is None:
            raise RuntimeError("KafkaClusterControl.start_node: use the control as `async with` (it waits for "
                               "the restarts it began)")
        if node in self._starting:
            return
        self._starting[node] = anyio.Event()
        self._tg.start_soon(self._start_in_background, node, name=f"chaos-start-broker-{node}")

    async def _start_in_background(self, node: int) -> None:
        try:
            await self.cluster.start_broker(node)
        except Exception as exc:
            self.errors.append(f"start_node {{'node': {node}}}: {type(exc).__name__}: {exc}")
            log.warning("chaos: restarting broker %d failed: %r", node, exc)
        finally:
            self._starting.pop(node).set()

    async def throttle(self, node: int, ms: int, count: int) -> None:
        if self._tg is None:
            raise RuntimeError("KafkaClusterControl.throttle: use the control as `async with` (it lifts quotas)")
        ids = sorted({*self.producer_ids, *(self.members.client_ids() if self.members is not None else ())})
        if not ids:
            return
        await self._set_quota([i for i in ids if not self._throttled.get(i)], self.throttle_byte_rate)
        for i in ids:
            self._throttled[i] = self._throttled.get(i, 0) + 1
        scope = anyio.CancelScope()
        self._lifts.add(scope)
        self._tg.start_soon(self._lift_later, ids, ms * count / 1000.0, scope, name="chaos-quota-lift")

    async def _lift_later(self, ids: list[str], after_s: float, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                await self._sleep(after_s)
        finally:
            self._lifts.discard(scope)
        if scope.cancel_called:
            return   # leaving the control lifts every quota still set
        for i in ids:
            self._throttled[i] -= 1
        done = [i for i in ids if not self._throttled[i]]
        for i in done:
            del self._throttled[i]
        await self._set_quota(done, None)

    async def _set_quota(self, client_ids: Sequence[str], rate: float | None) -> None:
        """One AlterClientQuotas for every id: set produce and fetch byte rates, or remove them (``None``)."""
        if not client_ids:
            return
        from ..admin_types import ClientQuotaEntity
        values = {"producer_byte_rate": rate, "consumer_byte_rate": rate}
        async with self.cluster.admin() as admin:
            (await admin.alter_client_quotas({ClientQuotaEntity(client_id=i): dict(values)
                                              for i in client_ids})).raise_on_error()

    async def kill_consumer(self, member: int) -> None:
        if self.members is None or self.group is None:
            raise RuntimeError("kill_consumer: this control was given no group members to kill (attach)")
        victim = self.members.client_id(member)
        await self.members.kill(member)
        async with self.cluster.admin() as admin:
            try:
                desc = (await admin.describe_consumer_groups([self.group]))[self.group]
            except errors.GroupIdNotFoundError:
                # a coordinator that just took over knows a group only once a generation of it completed
                self.killed_unchecked += 1
                return
        if victim not in {m.client_id for m in desc.members}:
            self.killed_left += 1

    async def _unsupported(self, fault: Fault) -> None:
        raise RuntimeError(f"{fault.value}: a real Kafka broker cannot be made to do this; a soak on "
                           "KafkaClusterControl gives the fault zero weight")

    async def drop_connections(self, node: int) -> None:
        await self._unsupported(Fault.DROP_CONNECTIONS)

    async def add_latency(self, node: int, ms: float) -> None:
        await self._unsupported(Fault.LATENCY)

    async def remove_latency(self, node: int, ms: float) -> None:
        await self._unsupported(Fault.LATENCY)

    async def fail_requests(self, api_key: int, error_code: int, count: int, node: int) -> None:
        await self._unsupported(Fault.FAIL_REQUESTS)


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class FaultRunner:
    """Plays a schedule's ``timeline`` on a ``ProxyControl``; always heals (restarts nodes, removes latency).

    ``clock`` returns ms, ``sleep`` takes seconds: inject both to run a script without waiting.
    A step that raises is recorded in ``errors`` and the script goes on (a soak reports it as a violation).
    """

    def __init__(self, control: ProxyControl, events: Sequence[FaultEvent], *,
                 clock: Callable[[], float] = _monotonic_ms,
                 sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
        self.control = control
        self.events = list(events)
        self.steps = timeline(self.events)
        self._clock, self._sleep = clock, sleep
        #: (ms since start when applied, step)
        self.applied: list[tuple[float, Step]] = []
        self.errors: list[str] = []
        self.faults: Counter[str] = Counter()
        self._down: set[int] = set()
        self._latency: list[tuple[int, float]] = []

    async def run(self) -> None:
        start = self._clock()
        try:
            for step in self.steps:
                delay = start + step.at_ms - self._clock()
                if delay > 0:
                    await self._sleep(delay / 1000.0)
                await self._apply(step, self._clock() - start)
        finally:
            with anyio.CancelScope(shield=True):
                await self.heal()

    async def heal(self) -> None:
        """Undo what is still in force: restart stopped nodes, remove latency rules."""
        for node in sorted(self._down):
            await self._apply(Step(0.0, "start_node", {"node": node}), None)
        for node, ms in list(self._latency):
            await self._apply(Step(0.0, "remove_latency", {"node": node, "ms": ms}), None)

    async def _apply(self, step: Step, at: float | None) -> None:
        a, c = step.args, self.control
        try:
            if step.action == "move_leader":
                await c.move_leader(a["topic"], a["partition"], a["to_node"])
            elif step.action == "throttle":
                await c.throttle(a["node"], a["ms"], a["count"])
            elif step.action == "drop_connections":
                await c.drop_connections(a["node"])
            elif step.action == "stop_node":
                await c.stop_node(a["node"])
                self._down.add(a["node"])
            elif step.action == "start_node":
                await c.start_node(a["node"])
                self._down.discard(a["node"])
            elif step.action == "latency":
                await c.add_latency(a["node"], a["ms"])
                self._latency.append((a["node"], a["ms"]))
            elif step.action == "remove_latency":
                await c.remove_latency(a["node"], a["ms"])
                self._latency.remove((a["node"], a["ms"]))
            elif step.action == "fail_requests":
                await c.fail_requests(a["api_key"], a["error_code"], a["count"], a["node"])
            elif step.action == "kill_consumer":
                await c.kill_consumer(a["member"])
            else:
                raise ValueError(f"unknown step action {step.action!r}")
        except Exception as exc:   # recorded: the soak reports harness failures instead of dying mid-run
            self.errors.append(f"{step.action} {dict(a)}: {type(exc).__name__}: {exc}")
            log.warning("chaos step %s %s failed: %r", step.action, dict(a), exc)
            return
        if at is not None:
            self.applied.append((at, step))
            self.faults[step.action] += 1


# ============================================================================================ payloads
_SEQ_BITS = 40
_MAX_PRODUCERS = 1 << 15


def encode_payload(producer: int, partition: int, seq: int, size: int = 0) -> bytes:
    """``b"<producer>.<partition>.<seq>|"`` padded with ``x`` to ``size`` bytes (shorter ids are not cut)."""
    head = b"%d.%d.%d|" % (producer, partition, seq)
    return head + b"x" * (size - len(head)) if size > len(head) else head


def decode_payload(value: bytes | None) -> tuple[int, int, int] | None:
    """(producer, partition, seq), or None for a value the soak did not write."""
    if not value:
        return None
    head, sep, _ = value.partition(b"|")
    parts = head.split(b".")
    if not sep or len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    producer, partition, seq = (int(p) for p in parts)
    if producer >= _MAX_PRODUCERS or seq >= 1 << _SEQ_BITS:
        return None
    return producer, partition, seq


def _pack(producer: int, seq: int) -> int:
    return producer << _SEQ_BITS | seq


def _unpack(packed: int) -> tuple[int, int]:
    return packed >> _SEQ_BITS, packed & ((1 << _SEQ_BITS) - 1)


# ============================================================================================ bookkeeping (pure)
PENDING, FAILED, ACKED_NO_OFFSET = -1, -2, -3


class Ledger:
    """Every record the application handed to a producer and what it was told: offset, error or nothing yet.

    Compact (8 bytes a record) so a long soak can track millions: per (producer, partition) an array indexed
    by send sequence holding the acknowledged offset or a negative status.
    """

    def __init__(self) -> None:
        self._out: dict[tuple[int, int], array[int]] = {}
        self.errors: Counter[str] = Counter()

    def next(self, producer: int, partition: int) -> int:
        """Register one more record; returns its per-partition send sequence."""
        if not 0 <= producer < _MAX_PRODUCERS:
            raise ValueError(f"producer: must be in 0..{_MAX_PRODUCERS - 1}, got {producer}")
        out = self._out.setdefault((producer, partition), array("q"))
        out.append(PENDING)
        return len(out) - 1

    def _set(self, producer: int, partition: int, seq: int, value: int) -> None:
        out = self._out[(producer, partition)]
        if out[seq] != PENDING:
            raise ValueError(f"record {producer}.{partition}.{seq} completed twice "
                             f"(had {out[seq]}, now {value})")
        out[seq] = value

    def ack(self, producer: int, partition: int, seq: int, offset: int) -> None:
        self._set(producer, partition, seq, offset if offset >= 0 else ACKED_NO_OFFSET)

    def fail(self, producer: int, partition: int, seq: int, exc: BaseException) -> None:
        self._set(producer, partition, seq, FAILED)
        self.errors[type(exc).__name__] += 1

    def status(self, producer: int, partition: int, seq: int) -> int:
        return self._out[(producer, partition)][seq]

    def streams(self) -> Iterable[tuple[tuple[int, int], array[int]]]:
        return self._out.items()

    def max_acked_offset(self) -> dict[int, int]:
        """Per partition, the highest acknowledged offset (-1 if none): the log holds at least that much."""
        top: dict[int, int] = {}
        for (_, partition), out in self._out.items():
            top[partition] = max(top.get(partition, -1), max(out, default=-1))
        return top

    @property
    def sent(self) -> int:
        return sum(len(o) for o in self._out.values())

    def count(self, status: int) -> int:
        return sum(o.count(status) for o in self._out.values())

    @property
    def acked(self) -> int:
        return sum(sum(1 for v in o if v >= 0 or v == ACKED_NO_OFFSET) for o in self._out.values())


class Consumption:
    """What the consumer group delivered to the application, per (partition, offset): the first payload seen
    there and how many times it was delivered."""

    def __init__(self) -> None:
        self.first: dict[int, array[int]] = {}
        self.times: dict[int, bytearray] = {}
        self.deliveries = 0
        self.foreign = 0

    def record(self, partition: int, offset: int, value: bytes | None) -> None:
        ids = decode_payload(value)
        self.deliveries += 1
        if ids is None:
            self.foreign += 1
            return
        first = self.first.setdefault(partition, array("q"))
        times = self.times.setdefault(partition, bytearray())
        if offset >= len(first):
            first.extend([-1] * (offset + 1 - len(first)))
            times.extend(b"\0" * (offset + 1 - len(times)))
        if times[offset] == 0:
            first[offset] = _pack(ids[0], ids[2]) if ids[1] == partition else -2
        times[offset] = min(255, times[offset] + 1)


class LogImage:
    """The partitions as a fresh reader found them: payload id per offset (-1 gap, -2 not the soak's)."""

    def __init__(self) -> None:
        self.ids: dict[int, array[int]] = {}
        self.misrouted = 0

    def add(self, partition: int, offset: int, value: bytes | None) -> None:
        ids = self.ids.setdefault(partition, array("q"))
        if offset < len(ids):
            raise ValueError(f"log image: partition {partition} offset {offset} read twice or out of order")
        ids.extend([-1] * (offset - len(ids)))
        decoded = decode_payload(value)
        if decoded is not None and decoded[1] != partition:
            self.misrouted += 1
            decoded = None
        ids.append(-2 if decoded is None else _pack(decoded[0], decoded[2]))

    def end_offset(self, partition: int) -> int:
        return len(self.ids.get(partition, ()))


def judge(ledger: Ledger, log_image: LogImage, consumption: Consumption,
          examples: dict[str, list[str]] | None = None, max_examples: int = 5) -> dict[str, int]:
    """Counts comparing what the application was told with the log and with the group's deliveries.

    ``lost``: acknowledged, not in the log. ``misplaced``: in the log at another offset than acknowledged (or
    another partition). ``duplicates``: extra copies of a payload in the log. ``reordered``: an acknowledged
    record stored after a later-sent acknowledged record of the same producer and partition. ``phantom``:
    log records the application never sent. ``unconsumed``: acknowledged records the group never delivered.
    ``consumer_mismatch``: deliveries whose payload differs from the log's at that offset. ``examples`` (if
    given) collects up to ``max_examples`` descriptions per broken count, to start a diagnosis from.
    """
    def example(kind: str, text: str) -> None:
        if examples is not None and len(examples.setdefault(kind, [])) < max_examples:
            examples[kind].append(text)

    # where each (producer, partition, seq) occurs in the log
    copies: dict[tuple[int, int], bytearray] = {}
    first_at: dict[tuple[int, int], array[int]] = {}
    phantom = foreign = reordered = reordered_unacked = 0
    streams = dict(ledger.streams())
    for partition, ids in log_image.ids.items():
        last_acked: dict[int, int] = {}
        last_any: dict[int, int] = {}
        for offset, packed in enumerate(ids):
            if packed == -1:
                continue
            if packed == -2:
                foreign += 1
                continue
            producer, seq = _unpack(packed)
            out = streams.get((producer, partition))
            if out is None or seq >= len(out):
                phantom += 1
                continue
            key = (producer, partition)
            c = copies.get(key)
            if c is None:
                c = copies[key] = bytearray(len(out))
                first_at[key] = array("q", [-1]) * len(out)
            c[seq] = min(255, c[seq] + 1)
            if c[seq] == 1:
                first_at[key][seq] = offset
            status = out[seq]
            if status >= 0 or status == ACKED_NO_OFFSET:
                if seq < last_acked.get(producer, -1):
                    reordered += 1
                    example("reordered", f"{producer}.{partition}.{seq} at offset {offset} after seq "
                                         f"{last_acked[producer]}")
                last_acked[producer] = max(seq, last_acked.get(producer, -1))
            elif seq < last_any.get(producer, -1):
                reordered_unacked += 1
            last_any[producer] = max(seq, last_any.get(producer, -1))
    duplicates = sum(max(0, n - 1) for c in copies.values() for n in c)
    lost = misplaced = failed_written = unconsumed = consumed = 0
    for key, out in streams.items():
        c = copies.get(key)
        at = first_at.get(key)
        partition = key[1]
        delivered = consumption.times.get(partition, bytearray())
        for seq, status in enumerate(out):
            n = c[seq] if c is not None else 0
            if status == FAILED:
                failed_written += n > 0
                continue
            if status == PENDING:
                continue
            if n == 0:
                lost += 1
                example("lost", f"{key[0]}.{partition}.{seq} acknowledged at offset {status}")
                continue
            assert at is not None
            offset = at[seq]
            if n > 1:
                example("duplicates", f"{key[0]}.{partition}.{seq} stored {n} times, first at offset {offset}")
            if status >= 0 and offset != status:
                misplaced += 1
                example("misplaced", f"{key[0]}.{partition}.{seq} acknowledged at offset {status}, "
                                     f"stored at {offset}")
            if offset < len(delivered) and delivered[offset]:
                consumed += 1
            else:
                unconsumed += 1
                example("unconsumed", f"{key[0]}.{partition}.{seq} at offset {offset}")
    mismatch = redelivered = 0
    for partition, first in consumption.first.items():
        ids = log_image.ids.get(partition, array("q"))
        times = consumption.times[partition]
        for offset, packed in enumerate(first):
            if times[offset] == 0:
                continue
            redelivered += times[offset] - 1
            if offset >= len(ids) or ids[offset] != packed:
                mismatch += 1
    return {"lost": lost, "misplaced": misplaced + log_image.misrouted, "duplicates": duplicates,
            "reordered": reordered, "reordered_unacked": reordered_unacked, "phantom": phantom,
            "foreign": foreign, "failed_but_written": failed_written, "consumed": consumed,
            "unconsumed": unconsumed, "redelivered": redelivered, "consumer_mismatch": mismatch}


# ============================================================================================ resources
class ResourceSnapshot(NamedTuple):
    """Live asyncio tasks (names by id) and open fds (fd -> readlink target) of this process."""

    tasks: Mapping[int, str]
    fds: Mapping[int, str]

    @classmethod
    def take(cls) -> ResourceSnapshot:
        current = asyncio.current_task()
        tasks = {id(t): t.get_name() for t in asyncio.all_tasks() if t is not current and not t.done()}
        fds: dict[int, str] = {}
        for name in os.listdir("/proc/self/fd"):
            try:
                fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
            except OSError:   # the listing's own fd, or closed meanwhile
                continue
        return cls(tasks, fds)


def tcp_sockets() -> dict[str, tuple[int, int, str]]:
    """socket inode -> (local port, remote port, state hex) from /proc/self/net/tcp{,6}."""
    table: dict[str, tuple[int, int, str]] = {}
    for path in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(path) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10:
                continue
            local, remote, state, inode = cols[1], cols[2], cols[3], cols[9]
            table[inode] = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16), state)
    return table


def leaked_fds(before: Mapping[int, str], after: Mapping[int, str], *, sockets: Mapping[str, tuple[int, int, str]],
               harness_ports: Iterable[int], upstream_port: int) -> list[str]:
    """Fds open after that were not before, minus the fault proxy's own sockets (its listeners and accepted
    connections are on ``harness_ports``; its upstream connections go to ``upstream_port``)."""
    ports = set(harness_ports)
    leaked = []
    for fd, target in sorted(after.items()):
        if before.get(fd) == target:
            continue
        if target.startswith("socket:["):
            info = sockets.get(target[8:-1])
            if info is not None and (info[0] in ports or info[1] == upstream_port):
                continue
            if info is not None:
                target = f"{target} local:{info[0]} remote:{info[1]} state:{info[2]}"
        leaked.append(f"fd {fd} -> {target}")
    return leaked


# ============================================================================================ soak
@dataclass(frozen=True)
class SoakConfig:
    """One soak run. ``duration_s``: how long producers send while faults play; ``drain_timeout_s``: how long
    the group may then take to consume everything. ``auto_commit=None``: chosen from the seed."""

    seed: int = 1
    duration_s: float = 20.0
    producers: int = 3
    partitions: int = 6
    nodes: int = 3
    consumers: int = 2
    records_per_s: float = 400.0     # per producer
    value_bytes: int = 100
    auto_commit: bool | None = None
    drain_timeout_s: float = 40.0
    delivery_timeout_ms: int = 30_000
    request_timeout_ms: int = 5_000
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1_000
    mean_fault_interval_ms: float = 800.0
    #: least time between two killed group members (each costs a session timeout before the group rebalances)
    kill_gap_ms: float = 5_000.0
    #: no member is killed before this (ms into the script): Tansu takes 6-8 s to form a 2-member group, and
    #: a member killed before it owns partitions leaves nothing to redeliver
    kill_after_ms: float = 8_000.0
    quiet_start_ms: float = 0.0
    weights: Mapping[Fault, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    #: the group's protocol: "classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848: the broker owns the
    #: session timeout and the heartbeat interval, so the two settings above are not sent)
    group_protocol: Literal["classic", "consumer"] = "classic"

    def validate(self) -> None:
        if self.group_protocol not in ("classic", "consumer"):
            raise ValueError(f"group_protocol: 'classic' or 'consumer', got {self.group_protocol!r}")
        for name in ("producers", "partitions", "nodes", "consumers", "value_bytes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}: must be an int >= 1, got {v!r}")
        if self.producers >= _MAX_PRODUCERS:
            raise ValueError(f"producers: at most {_MAX_PRODUCERS - 1}, got {self.producers}")
        for name in ("duration_s", "records_per_s", "drain_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)!r}")


@dataclass
class SoakReport:
    seed: int
    topic: str
    auto_commit: bool
    duration_s: float
    elapsed_s: float = 0.0
    drain_s: float = 0.0
    faults: dict[str, int] = field(default_factory=dict)
    fault_errors: list[str] = field(default_factory=list)
    sent: int = 0
    acked: int = 0
    acked_without_offset: int = 0
    failed: int = 0
    failed_by_error: dict[str, int] = field(default_factory=dict)
    pending_at_close: int = 0
    consumed: int = 0
    deliveries: int = 0
    redelivered: int = 0
    unconsumed: int = 0
    duplicates: int = 0
    reordered: int = 0
    reordered_unacked: int = 0
    lost: int = 0
    misplaced: int = 0
    phantom: int = 0
    foreign: int = 0
    failed_but_written: int = 0
    consumer_mismatch: int = 0
    log_records: int = 0
    committed_behind: dict[str, str] = field(default_factory=dict)
    rebalances: int = 0
    #: client ids of the group members killed without leaving, and how many LeaveGroup requests they sent
    #: anyway (a kill that left would be a graceful close, not the crash it stands for)
    killed_members: list[str] = field(default_factory=list)
    killed_members_left: int = 0
    commit_failures: dict[str, int] = field(default_factory=dict)
    consumer_errors: dict[str, int] = field(default_factory=dict)
    leaked_tasks: list[str] = field(default_factory=list)
    leaked_fds: list[str] = field(default_factory=list)
    #: a few instances per broken count (producer.partition.seq and offsets), for diagnosis
    examples: dict[str, list[str]] = field(default_factory=dict)

    def violations(self) -> list[str]:
        """Broken invariants, each as a sentence; empty when the soak passed."""
        found = []
        for name in ("lost", "duplicates", "reordered", "misplaced", "phantom", "unconsumed",
                     "consumer_mismatch", "pending_at_close"):
            if getattr(self, name):
                found.append(f"{name}: {getattr(self, name)}")
        if self.committed_behind:
            found.append(f"committed offsets behind the log end: {self.committed_behind}")
        if self.leaked_tasks:
            found.append(f"leaked tasks: {self.leaked_tasks}")
        if self.leaked_fds:
            found.append(f"leaked fds: {self.leaked_fds}")
        if self.fault_errors:
            found.append(f"fault steps failed: {self.fault_errors}")
        if self.killed_members_left:
            found.append(f"killed members sent {self.killed_members_left} LeaveGroup request(s): not a crash")
        if self.acked + self.failed + self.pending_at_close != self.sent:
            found.append(f"sent {self.sent} != acked {self.acked} + failed {self.failed} + pending "
                         f"{self.pending_at_close}")
        return found

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Shared:
    """State the soak's tasks share (one event loop: no locks)."""

    def __init__(self, cfg: SoakConfig, topic: str) -> None:
        self.cfg = cfg
        self.topic = topic
        self.ledger = Ledger()
        self.consumption = Consumption()
        self.producers_done = anyio.Event()
        self.stop_consuming = anyio.Event()
        self.caught_up: dict[int, bool] = {}
        self.assignments: dict[int, frozenset[TopicPartition]] = {}
        self.committed_members = 0
        self.all_committed = anyio.Event()
        #: per partition, the highest acknowledged offset, known once producers are done
        self.floor: dict[int, int] = {}
        self.rebalances = 0
        self.commit_failures: Counter[str] = Counter()
        self.consumer_errors: Counter[str] = Counter()


async def _produce(shared: _Shared, index: int, bootstrap: str, deadline: float) -> None:
    """One idempotent producer: a single task issuing send / enqueue / send_many, so append order is send order."""
    cfg, ledger, topic = shared.cfg, shared.ledger, shared.topic
    rng = random.Random(cfg.seed * 7919 + index)
    outstanding: list[tuple[int, int, Any]] = []   # (partition, seq, DeliveryFuture)

    def settle(partition: int, seq: int, result: Any) -> None:
        if isinstance(result, BaseException):
            ledger.fail(index, partition, seq, result)
        else:
            ledger.ack(index, partition, seq, result.offset)

    async def await_outstanding() -> None:
        for partition, seq, fut in outstanding:
            try:
                settle(partition, seq, await fut)
            except errors.KafkaError as exc:
                settle(partition, seq, exc)
        outstanding.clear()

    from ..producer import Producer
    async with Producer(bootstrap_servers=bootstrap, client_id=f"chaos-p{index}", enable_idempotence=True,
                        linger_ms=rng.choice((0, 2, 5, 10)), retry_backoff_ms=50, retry_backoff_max_ms=500,
                        request_timeout_ms=cfg.request_timeout_ms, delivery_timeout_ms=cfg.delivery_timeout_ms,
                        max_block_ms=cfg.delivery_timeout_ms, reconnect_backoff_ms=50,
                        reconnect_backoff_max_ms=500) as producer:
        while time.monotonic() < deadline:
            op = rng.random()
            partition = rng.randrange(cfg.partitions)
            if op < 0.3:
                n = 1
                seq = ledger.next(index, partition)
                try:
                    md = await producer.send(topic, encode_payload(index, partition, seq, cfg.value_bytes),
                                             partition=partition)
                    settle(partition, seq, md)
                except errors.KafkaError as exc:
                    settle(partition, seq, exc)
            elif op < 0.65:
                n = rng.randint(1, 20)
                for _ in range(n):
                    p = rng.randrange(cfg.partitions)
                    seq = ledger.next(index, p)
                    try:
                        fut = await producer.enqueue(topic, encode_payload(index, p, seq, cfg.value_bytes),
                                                     partition=p)
                    except errors.KafkaError as exc:
                        settle(p, seq, exc)
                    else:
                        outstanding.append((p, seq, fut))
                if rng.random() < 0.3:
                    await await_outstanding()
            else:
                n = rng.randint(1, 50)
                seqs = [ledger.next(index, partition) for _ in range(n)]
                try:
                    results = await producer.send_many(
                        topic, [(None, encode_payload(index, partition, s, cfg.value_bytes)) for s in seqs],
                        partition=partition, raise_on_error=False)
                except errors.KafkaError as exc:   # the call failed as a whole: no record is acknowledged
                    for s in seqs:
                        settle(partition, s, exc)
                else:
                    for s, result in zip(seqs, results):
                        settle(partition, s, result)
            await anyio.sleep(n / cfg.records_per_s)
    # after close every record must have an outcome: whatever is still not done counts as pending
    for partition, seq, fut in outstanding:
        if fut.done():
            exc = fut.exception()
            settle(partition, seq, exc if exc is not None else fut.result())


class _Listener:
    def __init__(self, shared: _Shared) -> None:
        self.shared = shared

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.shared.rebalances += 1

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        return None


async def _commit(shared: _Shared, consumer: Any, *, attempts: int = 1) -> bool:
    for i in range(attempts):
        try:
            with anyio.fail_after(shared.cfg.request_timeout_ms / 1000.0 * 2):
                await consumer.commit()
            return True
        except (errors.KafkaError, TimeoutError) as exc:
            shared.commit_failures[type(exc).__name__] += 1
            if i + 1 < attempts:
                await anyio.sleep(0.2)
    return False


async def _consume(shared: _Shared, index: int, bootstrap: str, group: str, auto_commit: bool,
                   client_id: str) -> None:
    """One group member: deliver, commit (manual mode: after every batch), report whether it caught up."""
    from ..consumer import Consumer
    cfg = shared.cfg
    timing: dict[str, Any] = {} if cfg.group_protocol == "consumer" else dict(
        session_timeout_ms=cfg.session_timeout_ms, heartbeat_interval_ms=cfg.heartbeat_interval_ms)
    async with Consumer(shared.topic, bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                        auto_offset_reset="earliest", enable_auto_commit=auto_commit, auto_commit_interval_ms=500,
                        group_protocol=cfg.group_protocol, **timing,
                        request_timeout_ms=max(cfg.request_timeout_ms, cfg.session_timeout_ms + 2_000),
                        retry_backoff_ms=50, retry_backoff_max_ms=500, reconnect_backoff_ms=50,
                        reconnect_backoff_max_ms=500, fetch_max_wait_ms=200,
                        listener=_Listener(shared)) as consumer:
        while not shared.stop_consuming.is_set():
            try:
                batches = await consumer.getmany(timeout_ms=200)
            except errors.KafkaError as exc:
                shared.consumer_errors[type(exc).__name__] += 1
                await anyio.sleep(0.1)
                continue
            for tp, records in batches.items():
                for r in records:
                    shared.consumption.record(tp.partition, r.offset, r.value)
            if batches and not auto_commit:
                await _commit(shared, consumer)
            shared.assignments[index] = consumer.assignment()
            if shared.producers_done.is_set():
                shared.caught_up[index] = await _caught_up(consumer, shared.floor)
        await _commit(shared, consumer, attempts=5)
        shared.committed_members += 1
        if shared.committed_members == cfg.consumers:
            shared.all_committed.set()
        with anyio.move_on_after(10):   # leave only after every member committed: no rebalance under a commit
            await shared.all_committed.wait()


class _Members:
    """The group's members by slot, each in its own cancel scope.  ``kill`` ends one as a crash would: its task
    is cancelled, so it neither commits nor sends LeaveGroup (the broker learns of it only when its session
    times out), and a replacement with a new client id takes the slot at once."""

    def __init__(self, shared: _Shared, bootstrap: str, group: str, auto_commit: bool) -> None:
        self.shared, self.bootstrap, self.group, self.auto_commit = shared, bootstrap, group, auto_commit
        self._tg: anyio.abc.TaskGroup | None = None
        self._running: dict[int, tuple[anyio.CancelScope, anyio.Event, str]] = {}
        self._generation: Counter[int] = Counter()
        #: client ids of the members killed so far, and how many partitions each owned then
        self.killed: list[str] = []
        self.owned_at_kill: list[int] = []

    def client_id(self, member: int) -> str:
        if member not in self._running:
            raise ValueError(f"no member in slot {member!r} (slots 0..{len(self._running) - 1})")
        return self._running[member][2]

    def client_ids(self) -> list[str]:
        return [client_id for _, _, client_id in self._running.values()]

    def start_all(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        for slot in range(self.shared.cfg.consumers):
            self._start(slot)

    def _start(self, slot: int) -> None:
        assert self._tg is not None
        generation = self._generation[slot]
        client_id = f"chaos-c{slot}" if generation == 0 else f"chaos-c{slot}-r{generation}"
        scope, done = anyio.CancelScope(), anyio.Event()
        self._running[slot] = (scope, done, client_id)
        self._tg.start_soon(self._run, slot, client_id, scope, done, name=f"chaos-consumer-{slot}-{generation}")

    async def _run(self, slot: int, client_id: str, scope: anyio.CancelScope, done: anyio.Event) -> None:
        try:
            with scope:
                await _consume(self.shared, slot, self.bootstrap, self.group, self.auto_commit, client_id)
        finally:
            done.set()

    async def kill(self, member: int) -> None:
        if member not in self._running:
            raise ValueError(f"kill_consumer: no member in slot {member!r} (slots 0..{len(self._running) - 1})")
        if self.shared.stop_consuming.is_set():
            raise RuntimeError("kill_consumer: the group is already draining; a kill now would only lose the "
                               "final commit")
        scope, done, client_id = self._running[member]
        scope.cancel()
        await done.wait()
        owned = self.shared.assignments.pop(member, frozenset())
        self.shared.caught_up.pop(member, None)
        self.killed.append(client_id)
        self.owned_at_kill.append(len(owned))
        self._generation[member] += 1
        self._start(member)


async def _caught_up(consumer: Any, floor: Mapping[int, int]) -> bool:
    for tp in consumer.assignment():
        hw = consumer.highwater(tp)
        if hw is None:
            return False
        with anyio.move_on_after(1.0):
            pos = await consumer.position(tp)
            if pos >= max(hw, floor.get(tp.partition, -1) + 1):
                continue
        return False
    return True


async def _read_log(bootstrap: str, topic: str, partitions: int, group: str, floor: Mapping[int, int],
                    timeout_s: float) -> tuple[LogImage, dict[int, int | None]]:
    """A fresh assign()-ed consumer: the group's committed offsets, then every partition from offset 0."""
    from ..consumer import Consumer
    image = LogImage()
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                        client_id="chaos-verify", auto_offset_reset="earliest") as reader:
        reader.assign(tps)
        committed = {tp.partition: await reader.committed(tp) for tp in tps}
        for tp in tps:
            reader.seek(tp, 0)
        next_offset = {tp: 0 for tp in tps}
        with anyio.move_on_after(timeout_s):
            while True:
                done = True
                for tp in tps:
                    hw = reader.highwater(tp)
                    if hw is None or next_offset[tp] < max(hw, floor.get(tp.partition, -1) + 1):
                        done = False
                if done:
                    break
                for tp, records in (await reader.getmany(timeout_ms=500, max_records=50_000)).items():
                    for r in records:
                        image.add(tp.partition, r.offset, r.value)
                        next_offset[tp] = r.offset + 1
    return image, committed


async def run_soak(cfg: SoakConfig, bootstrap_servers: str | None = None, *,
                   control: KafkaClusterControl | None = None) -> SoakReport:
    """Run one chaos soak: against the broker at ``bootstrap_servers`` with a FaultProxy put in front of it, or,
    given ``control``, straight against that Apache Kafka cluster (no proxy; the faults it cannot take get zero
    weight, and its controller does the failover the proxy's script otherwise emulates)."""
    cfg.validate()
    if (bootstrap_servers is None) == (control is None):
        raise ValueError("run_soak: give bootstrap_servers (a FaultProxy is put in front of that broker) or "
                         "control (a KafkaClusterControl: no proxy), exactly one of them")
    if control is not None:
        return await _run_soak_direct(cfg, control)
    assert bootstrap_servers is not None
    from ..admin import Admin
    from .proxy import FaultProxy
    auto_commit = cfg.auto_commit if cfg.auto_commit is not None else random.Random(cfg.seed).random() < 0.5
    topic = f"chaos-{cfg.seed}-{uuid.uuid4().hex[:8]}"
    group = f"{topic}-g"
    report = SoakReport(seed=cfg.seed, topic=topic, auto_commit=auto_commit, duration_s=cfg.duration_s)
    shared = _Shared(cfg, topic)
    proxy = FaultProxy(bootstrap_servers, nodes=cfg.nodes, inspect_responses=False)
    proxy.start()   # its own thread: its tasks stay out of this loop's count
    upstream_port = proxy.upstream_port
    harness_ports = [proxy.port(n) for n in proxy.node_ids]
    started = time.monotonic()
    try:
        before = ResourceSnapshot.take()
        bootstrap = proxy.bootstrap_servers
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, cfg.partitions)])
        spec = ScheduleSpec(duration_ms=cfg.duration_s * 1000.0, nodes=proxy.node_ids,
                            partitions=[TopicPartition(topic, p) for p in range(cfg.partitions)],
                            mean_interval_ms=cfg.mean_fault_interval_ms, weights=cfg.weights,
                            members=cfg.consumers, kill_gap_ms=cfg.kill_gap_ms, kill_after_ms=cfg.kill_after_ms,
                            quiet_start_ms=cfg.quiet_start_ms)
        members = _Members(shared, bootstrap, group, auto_commit)
        runner = FaultRunner(FaultProxyControl(proxy, members), generate_schedule(spec, cfg.seed))
        await _play(shared, members, runner, bootstrap, report)
        image, committed = await _read_log(bootstrap, topic, cfg.partitions, group, shared.floor, timeout_s=60.0)
        report.leaked_fds = await _leaks(before, harness_ports=harness_ports, upstream_port=upstream_port)
        report.leaked_tasks = sorted(name for tid, name in ResourceSnapshot.take().tasks.items()
                                     if tid not in before.tasks)
        report.killed_members = [f"{cid} (owned {n} partitions)" for cid, n in zip(members.killed,
                                                                                members.owned_at_kill)]
        report.killed_members_left = sum(len(proxy.requests(LEAVE_GROUP, client_id=cid)) for cid in members.killed)
    finally:
        proxy.stop()
    _finish(report, shared, runner, image, committed, started)
    return report


async def _run_soak_direct(cfg: SoakConfig, control: KafkaClusterControl) -> SoakReport:
    """``run_soak`` on a real cluster: the same clients and judge, the faults played by ``control``."""
    auto_commit = cfg.auto_commit if cfg.auto_commit is not None else random.Random(cfg.seed).random() < 0.5
    topic = f"chaos-{cfg.seed}-{uuid.uuid4().hex[:8]}"
    group = f"{topic}-g"
    report = SoakReport(seed=cfg.seed, topic=topic, auto_commit=auto_commit, duration_s=cfg.duration_s)
    shared = _Shared(cfg, topic)
    started = time.monotonic()
    bootstrap = control.bootstrap_servers
    await control.create_topic(topic, cfg.partitions)
    weights = {k: (0.0 if k in control.UNSUPPORTED else w) for k, w in cfg.weights.items()}
    spec = ScheduleSpec(duration_ms=cfg.duration_s * 1000.0, nodes=control.nodes,
                        partitions=[TopicPartition(topic, p) for p in range(cfg.partitions)],
                        mean_interval_ms=cfg.mean_fault_interval_ms, weights=weights, failover_ms=None,
                        members=cfg.consumers, kill_gap_ms=cfg.kill_gap_ms, kill_after_ms=cfg.kill_after_ms,
                        quiet_start_ms=cfg.quiet_start_ms)
    events = generate_schedule(spec, cfg.seed)
    before = ResourceSnapshot.take()
    members = _Members(shared, bootstrap, group, auto_commit)
    control.attach(members, group, [f"chaos-p{i}" for i in range(cfg.producers)])
    runner = FaultRunner(control, events)
    async with control:
        await _play(shared, members, runner, bootstrap, report)
    image, committed = await _read_log(bootstrap, topic, cfg.partitions, group, shared.floor, timeout_s=60.0)
    report.leaked_fds = await _leaks(before, ignore_fds=control.harness_fds)
    report.leaked_tasks = sorted(name for tid, name in ResourceSnapshot.take().tasks.items()
                                 if tid not in before.tasks)
    report.killed_members = [f"{cid} (owned {n} partitions)" for cid, n in zip(members.killed,
                                                                            members.owned_at_kill)]
    report.killed_members_left = control.killed_left
    _finish(report, shared, runner, image, committed, started)
    report.fault_errors += control.errors
    return report


async def _leaks(before: ResourceSnapshot, *, harness_ports: Iterable[int] = (), upstream_port: int = -1,
                 ignore_fds: Callable[[], set[int]] = set) -> list[str]:
    """Fds opened since ``before`` and still open, less the harness's own; a transport closes its socket one
    loop turn after close(), so a short grace before anything counts as leaked."""
    def now() -> list[str]:
        after = ResourceSnapshot.take()
        ignored = ignore_fds()
        return leaked_fds(before.fds, {fd: t for fd, t in after.fds.items() if fd not in ignored},
                          sockets=tcp_sockets(), harness_ports=harness_ports, upstream_port=upstream_port)
    leaked = now()
    for _ in range(20):
        if not leaked:
            break
        await anyio.sleep(0.05)
        leaked = now()
    return leaked


async def _play(shared: _Shared, members: _Members, runner: FaultRunner, bootstrap: str,
                report: SoakReport) -> None:
    """Producers, the group and the fault script at once; returns when the group consumed everything acked
    (or the drain timed out) and every member committed and left."""
    cfg, topic = shared.cfg, shared.topic
    drain_started = 0.0

    async def producers() -> None:
        deadline = time.monotonic() + cfg.duration_s
        async with anyio.create_task_group() as tg:
            for i in range(cfg.producers):
                tg.start_soon(_produce, shared, i, bootstrap, deadline, name=f"chaos-producer-{i}")
        shared.floor = shared.ledger.max_acked_offset()
        shared.producers_done.set()

    async def monitor() -> None:
        nonlocal drain_started
        await shared.producers_done.wait()
        drain_started = time.monotonic()
        everything = frozenset(TopicPartition(topic, p) for p in range(cfg.partitions))
        stable_since: float | None = None
        with anyio.move_on_after(cfg.drain_timeout_s):
            while True:
                assigned = frozenset().union(*shared.assignments.values()) if shared.assignments else frozenset()
                ok = (assigned == everything and len(shared.caught_up) == cfg.consumers
                      and all(shared.caught_up.values()))
                now = time.monotonic()
                if not ok:
                    stable_since = None
                elif stable_since is None:
                    stable_since = now
                elif now - stable_since >= 1.0:   # caught up on two fresh fetch rounds, not one stale one
                    break
                await anyio.sleep(0.2)
        shared.stop_consuming.set()

    async with anyio.create_task_group() as tg:
        members.start_all(tg)
        tg.start_soon(runner.run, name="chaos-faults")
        tg.start_soon(producers, name="chaos-producers")
        tg.start_soon(monitor, name="chaos-monitor")
    report.drain_s = round(time.monotonic() - drain_started, 2) if drain_started else 0.0


def _finish(report: SoakReport, shared: _Shared, runner: FaultRunner, image: LogImage,
            committed: Mapping[int, int | None], started: float) -> None:
    ledger = shared.ledger
    report.elapsed_s = round(time.monotonic() - started, 2)
    report.faults = dict(runner.faults)
    report.fault_errors = list(runner.errors)
    report.sent = ledger.sent
    report.acked = ledger.acked
    report.acked_without_offset = ledger.count(ACKED_NO_OFFSET)
    report.failed = ledger.count(FAILED)
    report.failed_by_error = dict(ledger.errors)
    report.pending_at_close = ledger.count(PENDING)
    report.deliveries = shared.consumption.deliveries
    report.rebalances = shared.rebalances
    report.commit_failures = dict(shared.commit_failures)
    report.consumer_errors = dict(shared.consumer_errors)
    report.log_records = sum(len(ids) for ids in image.ids.values())
    for name, value in judge(ledger, image, shared.consumption, report.examples).items():
        setattr(report, name, value)
    for p in range(shared.cfg.partitions):
        end = image.end_offset(p)
        if committed.get(p) is None and end > 0 or (committed.get(p) or 0) < end:
            report.committed_behind[str(p)] = f"committed {committed.get(p)} < log end {end}"
