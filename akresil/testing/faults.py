"""The fault proxy's script state and the pure decisions it drives (sans-IO).

``FaultState`` holds what a test scripted (virtual leaders and epochs, throttles, latency, failing requests,
version caps) and answers the proxy's questions about one request or response: which partitions to answer
locally and with what error, how to rewrite a Metadata body, how long to throttle.  It never touches a socket
and takes ``now_ms`` explicitly, so these rules are unit-tested with plain dicts and a fake clock; the I/O
shell in ``proxy.py`` only moves bytes.

Bodies are the protocol codec's dicts (snake_case names of Kafka's JSON message specs).  Script methods are
called from the test's thread while the proxy reads on its loop thread, so every public method takes the lock.
"""

from __future__ import annotations

import enum
import math
import struct
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..errors import AuthenticationError
from .sasl_server import SaslServer, SaslUserTable, failure_message

TopicPartition = tuple[str, int]
Body = dict[str, Any]

# Kafka error codes the proxy synthesizes (facts from Kafka's protocol error table)
NONE = 0
NOT_LEADER_OR_FOLLOWER = 6
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 76

# API keys the proxy understands beyond their header
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 10, 11, 12, 13, 14
API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CLUSTER = 18, 19, 22, 60
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
# SASL error codes (Kafka's protocol error table)
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58
#: SASL versions the proxy answers itself when it authenticates clients (SaslAuthenticate v2 is flexible)
SASL_VERSIONS: dict[int, tuple[int, int]] = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}
#: largest frame accepted before authentication completes (Kafka bounds unauthenticated receives too)
SASL_MAX_RECEIVE_BYTES = 512 * 1024

#: first version whose response carries ``throttle_time_ms`` (from Kafka's message specs); others: from v0
THROTTLE_FIELD_SINCE: dict[int, int] = {
    0: 1, 1: 1, 2: 2, 3: 3, 8: 3, 9: 3, 10: 1, 11: 2, 12: 1, 13: 1, 14: 1, 15: 1, 16: 1, 18: 1, 19: 2, 20: 1,
    23: 2,
}
#: APIs whose responses have no ``throttle_time_ms`` in any version
NO_THROTTLE_FIELD: frozenset[int] = frozenset({4, 5, 6, 7, 17, 36})
#: first version from which a throttle means "the client mutes itself" (KIP-219); below it the broker delays
#: the response itself.  APIs newer than KIP-219 are absent: from v0.
KIP219_SINCE: dict[int, int] = {
    0: 6, 3: 6, 1: 8, 2: 3, 11: 3, 19: 3, 8: 4, 9: 4, 10: 2, 12: 2, 13: 2, 14: 2, 15: 2, 16: 2, 18: 2, 20: 2,
    22: 1, 21: 1, 37: 1,
}
#: first versions carrying KIP-951 leader hints (CurrentLeader + NodeEndpoints)
PRODUCE_HINT_SINCE = 10
FETCH_HINT_SINCE = 16
#: Produce v13+ / Fetch v13+ name topics by id
TOPIC_ID_SINCE = 13


def has_throttle_field(api_key: int, version: int) -> bool:
    return api_key not in NO_THROTTLE_FIELD and version >= THROTTLE_FIELD_SINCE.get(api_key, 0)


def throttle_mutes_client(api_key: int, version: int) -> bool:
    """True when the client itself honours the throttle (KIP-219), so the broker answers at once."""
    return version >= KIP219_SINCE.get(api_key, 0)


@dataclass(frozen=True, slots=True)
class Endpoint:
    node_id: int
    host: str
    port: int


@dataclass(slots=True)
class _Leadership:
    node_id: int
    bumps: int
    hint: bool


@dataclass(slots=True)
class _Stale:
    node_id: int
    epoch: int
    until_ms: float


@dataclass(slots=True)
class FailRule:
    api_key: int
    error_code: int
    remaining: int | None  # None: until clear()
    node_id: int | None
    partitions: frozenset[TopicPartition] | None


@dataclass(slots=True)
class ThrottleRule:
    node_id: int
    ms: int
    client_id: str | None
    remaining: int


@dataclass(frozen=True, slots=True)
class ThrottleWindow:
    """A throttle in force on ``node_id`` from ``start_ms`` to ``end_ms`` (proxy clock, ms): every response
    written inside it carries the time left, as a quota-violating broker reports it."""

    node_id: int
    start_ms: float
    end_ms: float
    client_id: str | None


@dataclass(frozen=True, slots=True)
class Throttle:
    """What ``take_throttle`` decided for one response: ``ms`` to put into it (0: none) and, for a throttle
    window, when that window ends (``None`` for a next-response rule, whose mute starts at the write)."""

    ms: int
    window_end_ms: float | None = None


NO_THROTTLE = Throttle(0)


@dataclass(slots=True)
class LatencyRule:
    node_id: int | None
    ms: float
    api_key: int | None


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    """The proxy's own answer for one partition of a Produce / Fetch request."""

    topic: str
    partition: int
    error_code: int
    #: KIP-951 hint (leader id, epoch) to include, or None
    hint: tuple[int, int] | None


@dataclass(slots=True)
class PartitionPlan:
    """How a Produce / Fetch request is handled: answered partitions and the body left to forward."""

    answers: list[PartitionAnswer]
    #: the request body with answered partitions removed; None when nothing is left to forward
    forward: Body | None
    #: the forwarded body differs from what the client sent (must be re-encoded)
    modified: bool


# ------------------------------------------------------------------------------------------ layout tables
# (topics key, topic-name key, partitions key, partition-index key) per API and direction
_REQ_LAYOUT = {PRODUCE: ("topic_data", "name", "partition_data", "index"),
               FETCH: ("topics", "topic", "partitions", "partition"),
               LIST_OFFSETS: ("topics", "name", "partitions", "partition_index")}
_RESP_LAYOUT = {PRODUCE: ("responses", "name", "partition_responses", "index"),
                FETCH: ("responses", "topic", "partitions", "partition_index"),
                LIST_OFFSETS: ("topics", "name", "partitions", "partition_index")}

#: APIs ``fail_requests`` can answer with a synthesized error (others would need a forwarded side effect)
FAILABLE_APIS: frozenset[int] = frozenset({
    PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT,
    LEAVE_GROUP, SYNC_GROUP, API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID})
PARTITIONED_APIS: frozenset[int] = frozenset({PRODUCE, FETCH})


class FaultState:
    """Scripted faults and virtual-cluster bookkeeping; every method is thread-safe and I/O-free."""

    def __init__(self, node_ids: Sequence[int], *, coordinator_node: int | None = None,
                 controller_node: int | None = None) -> None:
        ids = tuple(node_ids)
        if not ids:
            raise ValueError("nodes: need at least one virtual node")
        if len(set(ids)) != len(ids):
            raise ValueError(f"nodes: duplicate node ids in {ids}")
        for n in ids:
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise ValueError(f"nodes: node id {n!r} must be a non-negative int")
        self.node_ids: tuple[int, ...] = ids
        self._lock = threading.RLock()
        self._endpoints: dict[int, Endpoint] = {}
        self._real_epoch: dict[TopicPartition, int] = {}
        self._leaders: dict[TopicPartition, _Leadership] = {}
        self._stale: dict[TopicPartition, _Stale] = {}
        self._topic_names: dict[Any, str] = {}
        self._topic_ids: dict[str, Any] = {}
        self._partition_counts: dict[str, int] = {}
        self._fail_rules: list[FailRule] = []
        self._throttles: list[ThrottleRule] = []
        self._windows: list[ThrottleWindow] = []
        self._latency: list[LatencyRule] = []
        self._caps: dict[int, int] = {}
        self._coordinator = self._check_node(coordinator_node if coordinator_node is not None else ids[0],
                                             "coordinator_node")
        self._controller = self._check_node(controller_node if controller_node is not None else ids[0],
                                            "controller_node")

    # ------------------------------------------------------------------ topology
    def _check_node(self, node: int, what: str = "node") -> int:
        if node not in self.node_ids:
            raise ValueError(f"{what}: {node!r} is not a virtual node id (have {list(self.node_ids)})")
        return node

    def set_endpoint(self, node: int, host: str, port: int) -> None:
        with self._lock:
            self._endpoints[self._check_node(node)] = Endpoint(node, host, port)

    def endpoint(self, node: int) -> Endpoint | None:
        with self._lock:
            return self._endpoints.get(node)

    def endpoints(self) -> list[Endpoint]:
        with self._lock:
            return [self._endpoints[n] for n in self.node_ids if n in self._endpoints]

    def set_coordinator(self, node: int) -> None:
        with self._lock:
            self._coordinator = self._check_node(node, "coordinator")

    def set_controller(self, node: int) -> None:
        with self._lock:
            self._controller = self._check_node(node, "controller")

    @property
    def coordinator(self) -> int:
        return self._coordinator

    @property
    def controller(self) -> int:
        return self._controller

    # ------------------------------------------------------------------ leadership
    def _default_leader(self, partition: int) -> int:
        return self.node_ids[partition % len(self.node_ids)]

    def _leader_unlocked(self, tp: TopicPartition) -> tuple[int, int]:
        lead = self._leaders.get(tp)
        base = max(self._real_epoch.get(tp, 0), 0)
        if lead is None:
            return self._default_leader(tp[1]), base
        return lead.node_id, base + lead.bumps

    def leader(self, topic: str, partition: int) -> tuple[int, int]:
        """Current (leader node id, leader epoch) of a partition as the proxy presents it."""
        with self._lock:
            return self._leader_unlocked((topic, partition))

    def known_partitions(self) -> list[TopicPartition]:
        """Partitions seen in Metadata responses so far."""
        with self._lock:
            return [(t, p) for t, n in self._partition_counts.items() for p in range(n)]

    def move_leader(self, topic: str, partition: int, to_node: int, *, now_ms: float, hint: bool = True,
                    stale_metadata_for_ms: float = 0.0) -> int:
        """Make ``to_node`` the leader with a bumped epoch; returns the new epoch.

        Moved partitions are enforced on every node: any other node answers their Produce / Fetch with
        NOT_LEADER_OR_FOLLOWER.  With ``stale_metadata_for_ms`` Metadata keeps showing the previous leader
        and epoch for that long (a lagging metadata view), while the old leader already refuses.
        """
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic: must be a non-empty str, got {topic!r}")
        if not isinstance(partition, int) or partition < 0:
            raise ValueError(f"partition: must be an int >= 0, got {partition!r}")
        if stale_metadata_for_ms < 0:
            raise ValueError(f"stale_metadata_for_s: must be >= 0, got {stale_metadata_for_ms / 1000}")
        with self._lock:
            self._check_node(to_node, "to_node")
            tp = (topic, partition)
            old_node, old_epoch = self._leader_unlocked(tp)
            lead = self._leaders.get(tp)
            bumps = lead.bumps + 1 if lead else 1
            self._leaders[tp] = _Leadership(to_node, bumps, hint)
            if stale_metadata_for_ms > 0:
                prev = self._stale.get(tp)
                if prev is not None and prev.until_ms > now_ms:   # keep showing the oldest view
                    prev.until_ms = now_ms + stale_metadata_for_ms
                else:
                    self._stale[tp] = _Stale(old_node, old_epoch, now_ms + stale_metadata_for_ms)
            else:
                self._stale.pop(tp, None)
            return self._leader_unlocked(tp)[1]

    def move_all_leaders(self, to_node: int | None = None, *, now_ms: float, from_node: int | None = None,
                         topic: str | None = None, hint: bool = True,
                         stale_metadata_for_ms: float = 0.0) -> list[TopicPartition]:
        """Move every known partition (optionally only those led by ``from_node`` / of ``topic``).

        ``to_node=None`` rotates each partition to the next virtual node after its current leader.
        Returns the moved partitions.
        """
        with self._lock:
            if to_node is not None:
                self._check_node(to_node, "to_node")
            if from_node is not None:
                self._check_node(from_node, "from_node")
            moved: list[TopicPartition] = []
            for tp in self.known_partitions():
                if topic is not None and tp[0] != topic:
                    continue
                cur, _ = self._leader_unlocked(tp)
                if from_node is not None and cur != from_node:
                    continue
                target = to_node
                if target is None:
                    target = self.node_ids[(self.node_ids.index(cur) + 1) % len(self.node_ids)]
                if target == cur and to_node is not None:
                    continue
                self.move_leader(tp[0], tp[1], target, now_ms=now_ms, hint=hint,
                                 stale_metadata_for_ms=stale_metadata_for_ms)
                moved.append(tp)
            return moved

    def _metadata_view(self, tp: TopicPartition, now_ms: float) -> tuple[int, int]:
        stale = self._stale.get(tp)
        if stale is not None:
            if stale.until_ms > now_ms:
                return stale.node_id, stale.epoch
            del self._stale[tp]
        return self._leader_unlocked(tp)

    # ------------------------------------------------------------------ scripted rules
    def add_fail_rule(self, api_key: int, error_code: int, *, count: int | None = 1, node: int | None = None,
                      partitions: Iterable[TopicPartition] | None = None) -> None:
        if api_key not in FAILABLE_APIS:
            raise ValueError(f"fail_requests: api_key {api_key} is not supported; supported: "
                             f"{sorted(FAILABLE_APIS)}")
        if not isinstance(error_code, int) or not -32768 <= error_code <= 32767 or error_code == 0:
            raise ValueError(f"fail_requests: error_code must be a non-zero int16, got {error_code!r}")
        if count is not None and (not isinstance(count, int) or count < 1):
            raise ValueError(f"fail_requests: count must be an int >= 1 or None (forever), got {count!r}")
        parts: frozenset[TopicPartition] | None = None
        if partitions is not None:
            if api_key not in PARTITIONED_APIS:
                raise ValueError("fail_requests: partitions= only applies to Produce (0) and Fetch (1)")
            parts = frozenset((str(t), int(p)) for t, p in partitions)
        with self._lock:
            if node is not None:
                self._check_node(node)
            self._fail_rules.append(FailRule(api_key, error_code, count, node, parts))

    def add_throttle(self, node: int, ms: int, *, client_id: str | None = None, count: int = 1) -> None:
        if not isinstance(ms, int) or isinstance(ms, bool) or ms <= 0:
            raise ValueError(f"throttle: ms must be an int > 0, got {ms!r}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"throttle: count must be an int >= 1, got {count!r}")
        with self._lock:
            self._throttles.append(ThrottleRule(self._check_node(node), ms, client_id, count))

    def add_throttle_window(self, node: int, ms: int, *, start_ms: float,
                            client_id: str | None = None) -> ThrottleWindow:
        """Throttle ``node`` from ``start_ms`` for ``ms``: responses written inside carry the time left.

        Unlike ``add_throttle`` the window is fixed in time, so it starts where the script says and several
        windows never chain into a longer one."""
        if not isinstance(ms, int) or isinstance(ms, bool) or ms <= 0:
            raise ValueError(f"throttle window: ms must be an int > 0, got {ms!r}")
        if not isinstance(start_ms, (int, float)) or isinstance(start_ms, bool) or not math.isfinite(start_ms):
            raise ValueError(f"throttle window: start_ms must be a finite number, got {start_ms!r}")
        with self._lock:
            window = ThrottleWindow(self._check_node(node), float(start_ms), float(start_ms) + ms, client_id)
            self._windows.append(window)
            return window

    def add_latency(self, node: int | None, ms: float, *, api_key: int | None = None) -> None:
        if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not ms >= 0:
            raise ValueError(f"add_latency: ms must be a number >= 0, got {ms!r}")
        with self._lock:
            if node is not None:
                self._check_node(node)
            self._latency.append(LatencyRule(node, float(ms), api_key))

    def remove_latency(self, node: int | None, ms: float | None = None, *, api_key: int | None = None) -> int:
        """Remove latency added with the same ``node`` and ``api_key`` (None matches rules added with None):
        one rule of exactly ``ms``, or every such rule when ``ms`` is None.  Returns how many were removed;
        naming an ``ms`` no rule has is an error (a script that undoes what it never did has a bug)."""
        if ms is not None and (not isinstance(ms, (int, float)) or isinstance(ms, bool)):
            raise ValueError(f"remove_latency: ms must be a number or None, got {ms!r}")
        with self._lock:
            if node is not None:
                self._check_node(node)
            matching = [r for r in self._latency if r.node_id == node and r.api_key == api_key
                        and (ms is None or r.ms == float(ms))]
            if ms is not None:
                if not matching:
                    have = [(r.node_id, r.ms, r.api_key) for r in self._latency]
                    raise ValueError(f"remove_latency: no {ms} ms rule for node {node}, api_key {api_key} "
                                     f"(rules as (node, ms, api_key): {have})")
                matching = matching[:1]
            for rule in matching:
                self._latency.remove(rule)
            return len(matching)

    def cap_version(self, api_key: int, max_version: int | None) -> None:
        """Advertise at most ``max_version`` of an API in ApiVersions (-1 hides it, None removes the cap)."""
        if not isinstance(api_key, int) or api_key < 0:
            raise ValueError(f"cap_version: api_key must be an int >= 0, got {api_key!r}")
        with self._lock:
            if max_version is None:
                self._caps.pop(api_key, None)
            else:
                self._caps[api_key] = int(max_version)

    def clear(self) -> None:
        """Drop every scripted rule and restore default leadership (epochs keep rising: never go back)."""
        with self._lock:
            self._fail_rules.clear()
            self._throttles.clear()
            self._windows.clear()
            self._latency.clear()
            self._caps.clear()
            self._stale.clear()
            for tp, lead in list(self._leaders.items()):
                default = self._default_leader(tp[1])
                if lead.node_id != default:
                    lead.node_id = default
                    lead.bumps += 1
                lead.hint = True

    # ------------------------------------------------------------------ questions from the I/O shell
    def needs_partition_plan(self, api_key: int) -> bool:
        """Whether Produce / Fetch requests must be decoded to decide what to forward."""
        with self._lock:
            if self._leaders:
                return True
            return any(r.api_key == api_key for r in self._fail_rules)

    def take_fail(self, api_key: int, node: int) -> int | None:
        """Error code for a whole (non-partitioned) request, consuming one use of the matching rule."""
        with self._lock:
            for rule in self._fail_rules:
                if rule.api_key == api_key and (rule.node_id is None or rule.node_id == node):
                    self._consume(rule)
                    return rule.error_code
            return None

    def has_fail_rule(self, api_key: int) -> bool:
        with self._lock:
            return any(r.api_key == api_key for r in self._fail_rules)

    def _consume(self, rule: FailRule) -> None:
        if rule.remaining is not None:
            rule.remaining -= 1
            if rule.remaining <= 0:
                self._fail_rules.remove(rule)

    def latency_ms(self, node: int, api_key: int) -> float:
        with self._lock:
            return sum(r.ms for r in self._latency
                       if (r.node_id is None or r.node_id == node) and (r.api_key is None or r.api_key == api_key))

    def has_latency(self) -> bool:
        return bool(self._latency)

    def has_throttle(self) -> bool:
        return bool(self._throttles or self._windows)

    def take_throttle(self, node: int, client_id: str | None, api_key: int, version: int, *,
                      now_ms: float) -> Throttle:
        """The throttle to put into a response written at ``now_ms``: a window in force wins (its time left,
        at least 1 ms), else one use of a matching next-response rule is consumed.  Windows that ended are
        forgotten here."""
        if not (self._throttles or self._windows) or not has_throttle_field(api_key, version):
            return NO_THROTTLE
        with self._lock:
            if self._windows:
                self._windows = [w for w in self._windows if w.end_ms > now_ms]
                end = max((w.end_ms for w in self._windows
                           if w.node_id == node and w.start_ms <= now_ms
                           and (w.client_id is None or w.client_id == client_id)), default=None)
                if end is not None:
                    return Throttle(max(1, math.ceil(end - now_ms)), end)
            for rule in self._throttles:
                if rule.node_id == node and (rule.client_id is None or rule.client_id == client_id):
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._throttles.remove(rule)
                    return Throttle(rule.ms)
            return NO_THROTTLE

    # ------------------------------------------------------------------ topic names
    def topic_name(self, entry: Body, name_key: str, version: int) -> str | None:
        if version >= TOPIC_ID_SINCE and "topic_id" in entry:
            with self._lock:
                return self._topic_names.get(_id_key(entry["topic_id"]))
        name = entry.get(name_key)
        return name if isinstance(name, str) else None

    # ------------------------------------------------------------------ Produce / Fetch planning
    def plan_partitions(self, api_key: int, version: int, node: int, body: Body) -> PartitionPlan:
        """Split a Produce / Fetch request into partitions the proxy answers itself and the rest."""
        topics_key, name_key, parts_key, index_key = _REQ_LAYOUT[api_key]
        hint_ok = version >= (PRODUCE_HINT_SINCE if api_key == PRODUCE else FETCH_HINT_SINCE)
        answers: list[PartitionAnswer] = []
        kept_topics: list[Body] = []
        modified = False
        with self._lock:
            rules = [r for r in self._fail_rules if r.api_key == api_key and r.node_id in (None, node)]
            fired: set[int] = set()
            for entry in body.get(topics_key) or ():
                topic = self.topic_name(entry, name_key, version)
                kept: list[Body] = []
                for part in entry.get(parts_key) or ():
                    index = part[index_key]
                    answer = None
                    if topic is not None:
                        answer = self._answer_unlocked(api_key, node, (topic, index), part, hint_ok, rules, fired)
                    if answer is not None:
                        answers.append(answer)
                        modified = True
                        continue
                    if api_key == FETCH and topic is not None and (topic, index) in self._leaders \
                            and part.get("current_leader_epoch", -1) >= 0:
                        # the broker's real epoch differs from the virtual one: ask it not to check
                        part = dict(part, current_leader_epoch=-1)
                        modified = True
                    kept.append(part)
                if kept:
                    kept_topics.append(entry if len(kept) == len(entry.get(parts_key) or ()) and not modified
                                       else dict(entry, **{parts_key: kept}))
            for i in sorted(fired, reverse=True):
                self._consume(rules[i])
        if not modified:
            return PartitionPlan([], body, False)
        forward = dict(body, **{topics_key: kept_topics}) if kept_topics else None
        return PartitionPlan(answers, forward, True)

    def _answer_unlocked(self, api_key: int, node: int, tp: TopicPartition, part: Body, hint_ok: bool,
                         rules: list[FailRule], fired: set[int]) -> PartitionAnswer | None:
        lead = self._leaders.get(tp)
        if lead is not None:
            leader, epoch = self._leader_unlocked(tp)
            if leader != node:
                hint = (leader, epoch) if (lead.hint and hint_ok) else None
                return PartitionAnswer(tp[0], tp[1], NOT_LEADER_OR_FOLLOWER, hint)
            if api_key == FETCH:
                client_epoch = part.get("current_leader_epoch", -1)
                if 0 <= client_epoch < epoch:
                    return PartitionAnswer(tp[0], tp[1], FENCED_LEADER_EPOCH, None)
                if client_epoch > epoch:
                    return PartitionAnswer(tp[0], tp[1], UNKNOWN_LEADER_EPOCH, None)
        for i, rule in enumerate(rules):
            if rule.partitions is None or tp in rule.partitions:
                fired.add(i)
                return PartitionAnswer(tp[0], tp[1], rule.error_code, None)
        return None

    def _topic_ref(self, api_key: int, version: int, topic: str) -> Body:
        name_key = _RESP_LAYOUT[api_key][1]
        if version >= TOPIC_ID_SINCE:
            return {"topic_id": self._topic_ids.get(topic, bytes(16)), name_key: topic}
        return {name_key: topic}

    def merge_answers(self, api_key: int, version: int, body: Body | None,
                      answers: Sequence[PartitionAnswer]) -> Body:
        """Put the proxy's partition answers into a forwarded response (or build one from scratch)."""
        topics_key, name_key, parts_key, _ = _RESP_LAYOUT[api_key]
        if body is None:
            body = {"throttle_time_ms": 0, topics_key: []}
            if api_key == FETCH:
                body.update(error_code=0, session_id=0)
        with self._lock:
            by_topic: dict[str, Body] = {}
            for entry in body.setdefault(topics_key, []):
                name = self.topic_name(entry, name_key, version)
                if name is not None:
                    by_topic[name] = entry
            hinted: set[int] = set()
            for a in answers:
                entry = by_topic.get(a.topic)
                if entry is None:
                    entry = dict(self._topic_ref(api_key, version, a.topic), **{parts_key: []})
                    body[topics_key].append(entry)
                    by_topic[a.topic] = entry
                entry[parts_key].append(_partition_error(api_key, a))
                if a.hint is not None:
                    hinted.add(a.hint[0])
            if hinted:
                endpoints = body.get("node_endpoints") or []
                have = {e["node_id"] for e in endpoints}
                for n in sorted(hinted - have):
                    ep = self._endpoints.get(n)
                    if ep is not None:
                        endpoints.append({"node_id": n, "host": ep.host, "port": ep.port, "rack": None})
                body["node_endpoints"] = endpoints
        return body

    # ------------------------------------------------------------------ response rewriting
    def rewrite_metadata(self, body: Body, version: int, now_ms: float) -> Body:
        """Present the virtual cluster: brokers, controller, leaders, replicas and epochs."""
        with self._lock:
            body["brokers"] = [{"node_id": e.node_id, "host": e.host, "port": e.port, "rack": None}
                               for e in (self._endpoints[n] for n in self.node_ids if n in self._endpoints)]
            body["controller_id"] = self._controller
            replicas = list(self.node_ids)
            for topic in body.get("topics") or ():
                name = topic.get("name")
                if not isinstance(name, str):
                    continue
                tid = topic.get("topic_id")
                if tid is not None and not _is_zero_uuid(tid):
                    self._topic_names[_id_key(tid)] = name
                    self._topic_ids[name] = tid
                parts = topic.get("partitions") or ()
                if parts:
                    top = max(p["partition_index"] for p in parts) + 1
                    self._partition_counts[name] = max(self._partition_counts.get(name, 0), top)
                for p in parts:
                    tp = (name, p["partition_index"])
                    real_epoch = p.get("leader_epoch", -1)
                    if real_epoch is not None and real_epoch >= 0:
                        self._real_epoch[tp] = real_epoch
                    if p.get("leader_id", -1) < 0:
                        continue   # the broker has no leader: keep its answer
                    leader, epoch = self._metadata_view(tp, now_ms)
                    p["leader_id"] = leader
                    p["leader_epoch"] = epoch
                    p["replica_nodes"] = [leader] + [n for n in replicas if n != leader]
                    p["isr_nodes"] = list(p["replica_nodes"])
                    p["offline_replicas"] = []
        return body

    def rewrite_find_coordinator(self, body: Body, version: int) -> Body:
        with self._lock:
            ep = self._endpoints.get(self._coordinator)
            if ep is None:
                return body
            if version < 4:
                if body.get("error_code", 0) == 0:
                    body.update(node_id=ep.node_id, host=ep.host, port=ep.port)
            else:
                for c in body.get("coordinators") or ():
                    if c.get("error_code", 0) == 0:
                        c.update(node_id=ep.node_id, host=ep.host, port=ep.port)
        return body

    def rewrite_describe_cluster(self, body: Body, version: int) -> Body:
        with self._lock:
            body["brokers"] = [{"broker_id": e.node_id, "host": e.host, "port": e.port, "rack": None,
                                "is_fenced": False} for e in self.endpoints()]
            body["controller_id"] = self._controller
        return body

    def has_version_caps(self) -> bool:
        return bool(self._caps)

    def rewrite_api_versions(self, body: Body) -> Body:
        with self._lock:
            if not self._caps:
                return body
            kept = []
            for entry in body.get("api_keys") or ():
                cap = self._caps.get(entry["api_key"])
                if cap is not None:
                    if cap < entry["min_version"]:
                        continue
                    entry = dict(entry, max_version=min(entry["max_version"], cap))
                kept.append(entry)
            body["api_keys"] = kept
        return body

    # ------------------------------------------------------------------ whole-request errors
    def error_response(self, api_key: int, version: int, error_code: int, request: Body) -> Body:
        """A complete response body answering ``request`` with ``error_code`` (for ``fail_requests``)."""
        return error_response_body(api_key, version, error_code, request)


def _is_zero_uuid(topic_id: Any) -> bool:
    if isinstance(topic_id, (bytes, bytearray, memoryview)):
        return not any(bytes(topic_id))
    return getattr(topic_id, "int", 1) == 0


def _id_key(topic_id: Any) -> Any:
    return bytes(topic_id) if isinstance(topic_id, (bytes, bytearray, memoryview)) else topic_id


def _partition_error(api_key: int, a: PartitionAnswer) -> Body:
    """One partition's error entry; fields left out take the spec's defaults (-1 offsets, no leader)."""
    if api_key == PRODUCE:
        out: Body = {"index": a.partition, "error_code": a.error_code, "base_offset": -1}
    else:
        out = {"partition_index": a.partition, "error_code": a.error_code, "high_watermark": -1, "records": None}
    if a.hint is not None:
        out["current_leader"] = {"leader_id": a.hint[0], "leader_epoch": a.hint[1]}
    return out


def error_response_body(api_key: int, version: int, error_code: int, req: Body) -> Body:
    """Build the error answer of a non-partitioned API at ``version``, echoing what the request named.

    Only fields that differ from the spec's defaults are set: the codec fills the rest and rejects
    non-default values for fields a version does not have."""
    if api_key == METADATA:
        topics = []
        for t in req.get("topics") or ():
            entry: Body = {"error_code": error_code, "name": t.get("name")}
            if version >= 10:
                entry["topic_id"] = t.get("topic_id") or bytes(16)
            topics.append(entry)
        body: Body = {"controller_id": -1, "topics": topics}
        if version >= 13:
            body["error_code"] = error_code
        return body
    if api_key == LIST_OFFSETS:
        return {"topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": error_code, "timestamp": -1, "offset": -1}
                for p in t.get("partitions") or ()]}
            for t in req.get("topics") or ()]}
    if api_key == OFFSET_COMMIT:
        ref = "topic_id" if version >= 10 else "name"
        return {"topics": [
            {ref: t.get(ref) or (bytes(16) if ref == "topic_id" else ""), "partitions": [
                {"partition_index": p["partition_index"], "error_code": error_code}
                for p in t.get("partitions") or ()]}
            for t in req.get("topics") or ()]}
    if api_key == FIND_COORDINATOR:
        if version < 4:
            return {"error_code": error_code, "node_id": -1, "host": "", "port": -1}
        return {"coordinators": [{"key": k, "node_id": -1, "host": "", "port": -1, "error_code": error_code}
                                 for k in req.get("coordinator_keys") or ()]}
    if api_key == JOIN_GROUP:
        return {"error_code": error_code, "generation_id": -1, "member_id": req.get("member_id", "")}
    if api_key in (SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, API_VERSIONS):
        return {"error_code": error_code}
    if api_key == CREATE_TOPICS:
        return {"topics": [{"name": t["name"], "error_code": error_code} for t in req.get("topics") or ()]}
    if api_key == INIT_PRODUCER_ID:
        return {"error_code": error_code, "producer_id": -1, "producer_epoch": -1}
    raise ValueError(f"no synthesized error response for api_key {api_key}")


def collect_error_codes(body: Any) -> tuple[int, ...]:
    """Every non-zero ``error_code`` in a decoded body, depth-first (for the recorder)."""
    out: list[int] = []
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            code = node.get("error_code")
            if isinstance(code, int) and code:
                out.append(code)
            for v in node.values():
                if isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(node, list):
            stack.extend(reversed([v for v in node if isinstance(v, (dict, list))]))
    return tuple(out)


def partition_errors(api_key: int, version: int, body: Body, state: FaultState) -> dict[TopicPartition, int]:
    """(topic, partition) -> error code of a Produce / Fetch response."""
    topics_key, name_key, parts_key, index_key = _RESP_LAYOUT[api_key]
    out: dict[TopicPartition, int] = {}
    for entry in body.get(topics_key) or ():
        name = state.topic_name(entry, name_key, version)
        if name is None:
            continue
        for p in entry.get(parts_key) or ():
            out[(name, p[index_key])] = p.get("error_code", 0)
    return out


def request_partitions(api_key: int, version: int, body: Body, state: FaultState) -> tuple[TopicPartition, ...]:
    """Topic-partitions a Produce / Fetch / ListOffsets request names (for the recorder)."""
    layout = _REQ_LAYOUT.get(api_key)
    if layout is None:
        return ()
    topics_key, name_key, parts_key, index_key = layout
    out: list[TopicPartition] = []
    for entry in body.get(topics_key) or ():
        name = state.topic_name(entry, name_key, version if api_key != LIST_OFFSETS else 0)
        if name is None:
            continue
        out.extend((name, p[index_key]) for p in entry.get(parts_key) or ())
    return tuple(out)


# ------------------------------------------------------------------------------------------ idempotent retries
DUPLICATE_SEQUENCE_NUMBER = 46
#: Kafka's broker keeps the metadata of this many recent batches per producer and partition
#: (ProducerStateManager); a duplicate of one of them is answered with its original offset
RETAINED_BATCHES = 5
_BATCH_HEADER = 61
#: (offset, format) of the batch-header fields the duplicate check reads
_LAST_OFFSET_DELTA = (23, ">i")
_PRODUCER_ID = (43, ">q")
_PRODUCER_EPOCH = (51, ">h")
_BASE_SEQUENCE = (53, ">i")

#: (producer id, producer epoch, base sequence, last offset delta): one idempotent batch's identity
BatchKey = tuple[int, int, int, int]


def idempotent_batches(body: Body) -> dict[TopicPartition, BatchKey]:
    """Per partition of a Produce request (topics by name), the identity of its first record batch when it
    carries a producer id; partitions without one (or with unreadable records) are left out."""
    import struct
    out: dict[TopicPartition, BatchKey] = {}
    for topic in body.get("topic_data") or ():
        name = topic.get("name")
        if not name:
            continue       # Produce v13+ names topics by id: not tracked
        for part in topic.get("partition_data") or ():
            records = part.get("records")
            if not records or len(records) < _BATCH_HEADER or records[16] != 2:
                continue
            pid = struct.unpack_from(_PRODUCER_ID[1], records, _PRODUCER_ID[0])[0]
            if pid < 0:
                continue
            out[(name, part["index"])] = (
                pid, struct.unpack_from(_PRODUCER_EPOCH[1], records, _PRODUCER_EPOCH[0])[0],
                struct.unpack_from(_BASE_SEQUENCE[1], records, _BASE_SEQUENCE[0])[0],
                struct.unpack_from(_LAST_OFFSET_DELTA[1], records, _LAST_OFFSET_DELTA[0])[0])
    return out


class AppendedBatches:
    """What the broker answered for recent idempotent batches, so a retried duplicate gets Kafka's answer.

    A Kafka broker answers a retry of one of a producer's last five batches with that batch's original offset
    (error NONE).  Tansu answers DUPLICATE_SEQUENCE_NUMBER instead, and a client can then only report offset
    -1 (as Java does).  That retry is the normal outcome of a connection the proxy dropped with a Produce in
    flight, so the proxy remembers successful answers and rewrites the duplicate answer into Kafka's.
    """

    def __init__(self, retained: int = RETAINED_BATCHES) -> None:
        self._retained = retained
        self._lock = threading.Lock()
        self._appended: dict[tuple[TopicPartition, int], list[tuple[BatchKey, Body]]] = {}

    def note_response(self, sent: dict[TopicPartition, BatchKey], body: Body) -> None:
        """Remember the successful partition answers of a Produce response to a request holding ``sent``."""
        with self._lock:
            for tp, part in _produce_partitions(body):
                key = sent.get(tp)
                if key is None or part.get("error_code", 0) != NONE:
                    continue
                kept = self._appended.setdefault((tp, key[0]), [])
                if all(k != key for k, _ in kept):
                    kept.append((key, {f: part.get(f) for f in ("base_offset", "log_append_time_ms",
                                                                 "log_start_offset")}))
                    del kept[:-self._retained]

    def rewrite_duplicates(self, sent: dict[TopicPartition, BatchKey], body: Body) -> bool:
        """Turn DUPLICATE_SEQUENCE_NUMBER answers for remembered batches into their original success answer;
        True when ``body`` changed.  A duplicate the proxy never saw answered is left as the broker said."""
        changed = False
        with self._lock:
            for tp, part in _produce_partitions(body):
                key = sent.get(tp)
                if key is None or part.get("error_code") != DUPLICATE_SEQUENCE_NUMBER:
                    continue
                for k, original in self._appended.get((tp, key[0]), ()):
                    if k == key:
                        part.update({f: v for f, v in original.items() if v is not None})
                        part["error_code"] = NONE
                        part["error_message"] = None
                        changed = True
                        break
        return changed


def _produce_partitions(body: Body) -> Iterable[tuple[TopicPartition, Body]]:
    for topic in body.get("responses") or ():
        name = topic.get("name")
        for part in topic.get("partition_responses") or ():
            yield (name, part["index"]), part


# ------------------------------------------------------------------------------------------ SASL front
class GateAction(enum.Enum):
    FORWARD = "forward"   # pass the request to the broker (ApiVersions during the handshake, all after it)
    ANSWER = "answer"     # answer it here with ``body`` (or ``raw`` token bytes), then maybe close
    CLOSE = "close"       # close the connection without an answer


@dataclass(frozen=True, slots=True)
class GateDecision:
    action: GateAction
    #: response body (Kafka request) to send, for ANSWER
    body: Body | None = None
    #: size-prefix-less token bytes to send for a SaslHandshake v0 exchange, for ANSWER
    raw: bytes | None = None
    #: close the connection once the answer is written (every failed authentication)
    close_after: bool = False
    #: why the connection closes (recorded with the close event; never holds credentials)
    reason: str = ""


_FORWARD = GateDecision(GateAction.FORWARD)


class SaslGate:
    """One client connection's server-side SASL state, following a Kafka broker's rules (KIP-43, KIP-152).

    Before the handshake only ApiVersions and SaslHandshake are accepted; anything else closes the connection
    unanswered, as Kafka does for a client that skipped authentication (e.g. a PLAINTEXT client on a SASL
    listener).  A handshake naming a disabled mechanism is answered UNSUPPORTED_SASL_MECHANISM with the enabled
    list, then closed.  After SaslHandshake v1 the tokens travel in SaslAuthenticate requests: another request
    is answered ILLEGAL_SASL_STATE and closed, refused credentials SASL_AUTHENTICATION_FAILED and closed.
    After SaslHandshake v0 the tokens travel as bare size-prefixed frames and a refusal closes the connection.
    Once authenticated everything is forwarded; a further handshake is answered ILLEGAL_SASL_STATE (this front
    grants no session lifetime, so clients never re-authenticate).  ApiVersions may repeat before the handshake
    (a client retries it after UNSUPPORTED_VERSION), a little more lenient than Kafka's single one.
    """

    __slots__ = ("users", "_state", "_server", "username", "failure", "session_expires_at_ms", "_lifetime_ms",
                 "extensions")

    def __init__(self, users: SaslUserTable) -> None:
        self.users = users
        self._state = "handshake"
        self._server: SaslServer | None = None
        #: end of the SASL session (KIP-368) when the mechanism granted a lifetime (OAUTHBEARER), else None
        self.session_expires_at_ms: float | None = None
        self._lifetime_ms = 0
        #: SASL extensions the client sent (OAUTHBEARER)
        self.extensions: dict[str, str] = {}
        #: the authenticated user, once authenticated
        self.username: str | None = None
        #: why authentication failed (for logs and tests; holds no credential)
        self.failure: str | None = None

    def __repr__(self) -> str:
        return f"SaslGate(state={self._state}, username={self.username!r})"

    @property
    def authenticated(self) -> bool:
        return self._state == "done"

    @property
    def expects_raw_token(self) -> bool:
        """The next frame is a bare SASL token (after SaslHandshake v0), not a Kafka request."""
        return self._state == "raw"

    def on_request(self, api_key: int, version: int, body: Body | None, *, now_ms: float = 0.0) -> GateDecision:
        """Decide one Kafka request (``body`` decoded, or None when the codec does not know the API)."""
        state = self._state
        if state == "done" and self.session_expires_at_ms is not None and now_ms >= self.session_expires_at_ms:
            return self._fail("request after the SASL session expired (KIP-368)")
        if state == "done":
            if api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
                return GateDecision(GateAction.ANSWER, body=self._error_body(api_key, ILLEGAL_SASL_STATE))
            return _FORWARD
        if state == "failed":
            return self._fail("request after a failed authentication")
        if state == "handshake":
            if api_key == API_VERSIONS:
                return _FORWARD
            if api_key != SASL_HANDSHAKE or body is None:
                return self._fail(f"api_key {api_key} sent before SASL authentication")
            mechanism = body.get("mechanism") or ""
            if mechanism not in self.users.mechanisms:
                self._state = "failed"
                self.failure = f"mechanism {mechanism[:64]!r} is not enabled"
                return GateDecision(GateAction.ANSWER, body={"error_code": UNSUPPORTED_SASL_MECHANISM,
                                                             "mechanisms": list(self.users.mechanisms)},
                                    close_after=True, reason=f"SASL {self.failure}")
            self._server = self.users.new_server(mechanism)
            self._state = "authenticate" if version >= 1 else "raw"
            return GateDecision(GateAction.ANSWER, body={"error_code": 0, "mechanisms": list(self.users.mechanisms)})
        if state == "raw":
            return self._fail("Kafka request where a SASL token was expected")
        # state == "authenticate"
        if api_key != SASL_AUTHENTICATE or body is None:
            self._state = "failed"
            self.failure = f"api_key {api_key} sent during SASL authentication"
            try:
                error = self._error_body(api_key, ILLEGAL_SASL_STATE, version, body)
            except (ValueError, KeyError, TypeError):
                return self._fail(self.failure)
            return GateDecision(GateAction.ANSWER, body=error, close_after=True, reason=self.failure)
        assert self._server is not None
        try:
            token = self._server.step(bytes(body.get("auth_bytes") or b""))
        except AuthenticationError as exc:
            self._state = "failed"
            self.failure = str(exc)
            return GateDecision(GateAction.ANSWER, body={
                "error_code": SASL_AUTHENTICATION_FAILED, "error_message": failure_message(self._server.mechanism),
                "auth_bytes": b"", "session_lifetime_ms": 0}, close_after=True,
                reason=f"SASL authentication failed: {exc}")
        self._after_step()
        if self._state == "done" and self._lifetime_ms > 0:
            self.session_expires_at_ms = now_ms + self._lifetime_ms
        return GateDecision(GateAction.ANSWER, body={"error_code": 0, "error_message": None, "auth_bytes": token,
                                                     "session_lifetime_ms": self._lifetime_ms})

    def on_raw_token(self, token: bytes) -> GateDecision:
        """Decide a bare SASL token (SaslHandshake v0): answer with the server's token or close."""
        if self._state != "raw" or self._server is None:
            return self._fail("unexpected SASL token")
        try:
            answer = self._server.step(token)
        except AuthenticationError as exc:
            return self._fail(f"SASL authentication failed: {exc}")
        self._after_step()
        # Kafka answers every v0 token, even with an empty one (PLAIN's verdict): a zero size prefix.
        return GateDecision(GateAction.ANSWER, raw=answer)

    def rewrite_api_versions(self, body: Body) -> Body:
        """Advertise the SASL versions this front answers itself, whatever the broker behind it offers."""
        entries = [e for e in body.get("api_keys") or () if e["api_key"] not in SASL_VERSIONS]
        entries += [{"api_key": key, "min_version": lo, "max_version": hi} for key, (lo, hi) in SASL_VERSIONS.items()]
        body["api_keys"] = sorted(entries, key=lambda e: e["api_key"])
        return body

    def _after_step(self) -> None:
        assert self._server is not None
        if self._server.complete:
            self._state = "done"
            self.username = self._server.username
            self._lifetime_ms = int(getattr(self._server, "session_lifetime_ms", 0) or 0)
            self.extensions = dict(getattr(self._server, "extensions", {}) or {})

    def _fail(self, reason: str) -> GateDecision:
        self._state = "failed"
        self.failure = reason
        return GateDecision(GateAction.CLOSE, reason=reason)

    @staticmethod
    def _error_body(api_key: int, code: int, version: int = 0, request: Body | None = None) -> Body:
        if api_key == SASL_HANDSHAKE:
            return {"error_code": code, "mechanisms": []}
        if api_key == SASL_AUTHENTICATE:
            return {"error_code": code, "error_message": None, "auth_bytes": b"", "session_lifetime_ms": 0}
        if request is None:
            raise ValueError(f"no request body to answer api_key {api_key}")
        return error_response_body(api_key, version, code, request)
