"""Consumer-group partition assignors (classic protocol), with the Java client's semantics.

The group leader runs one assignor over every member's :class:`Subscription` and hands each member an
:class:`Assignment`. The names travel on the wire (JoinGroup protocol names), so a group can mix akresil and
Java members and the elected leader's implementation decides; the results here follow Java's so a group
behaves the same whoever leads.

- ``range`` (:class:`RangeAssignor`): per topic, members in Java's order get contiguous ranges; the first
  ``partitions % members`` members get one extra.
- ``roundrobin`` (:class:`RoundRobinAssignor`): every subscribed partition, sorted by topic then partition,
  dealt to members in Java's order, skipping members not subscribed to the partition's topic.
- ``cooperative-sticky`` (:class:`CooperativeStickyAssignor`): Java's sticky algorithm (balanced, keeps as
  many owned partitions as balance allows, resolves conflicting ownership claims by generation) plus the
  cooperative rule (KIP-429): a partition moving from one member to another is *not* given to its new owner
  in this rebalance, only revoked from the old one; the member that revoked something rejoins, and the
  follow-up rebalance hands it out. The consumer must therefore rejoin when its new assignment lacks
  partitions it owned.

Member order (range, roundrobin) is Java's ``MemberInfo`` order: static members (with a
``group.instance.id``) first, sorted by instance id, then dynamic members by member id; strings compare as
Java's ``String.compareTo`` does (UTF-16 code units), so a leader of either language yields the same result.

Rebalance protocol of a group: the client offers its configured assignors and uses the cooperative protocol
only if *every* one supports it (:func:`choose_protocol`), as Java's ConsumerCoordinator does; range and
roundrobin are eager-only, cooperative-sticky supports both. In an eager group members revoke everything
before joining and report no owned partitions (Java does the same), so cooperative-sticky then withholds
nothing.

Everything here is pure: no I/O, no clocks; inputs are validated and a bad one raises ``ValueError`` or
``TypeError`` naming it.
"""

from __future__ import annotations

import heapq
import struct
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol, runtime_checkable

from ..errors import ConfigError
from ..types import TopicPartition

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "Assignor",
    "CooperativeStickyAssignor",
    "DEFAULT_GENERATION",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "Subscription",
    "choose_protocol",
    "decode_generation",
    "encode_generation",
]

RebalanceProtocol = Literal["eager", "cooperative"]

#: Java's ``AbstractStickyAssignor.DEFAULT_GENERATION``: "no generation known"
DEFAULT_GENERATION = -1

_INT32 = struct.Struct(">i")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


# --------------------------------------------------------------------------- data types
@dataclass(frozen=True, slots=True)
class Subscription:
    """One member's JoinGroup metadata as the leader sees it (ConsumerProtocolSubscription v0-v3).

    ``generation_id`` is the v2+ field (-1 when absent or older version); ``group_instance_id`` is not part
    of the subscription bytes but of the JoinGroup response member entry: the coordinator copies it here so
    assignors can order static members as Java does.
    """

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.topics, (str, bytes)) or not isinstance(self.topics, Iterable):
            raise TypeError(f"Subscription.topics must be a list of topic names, got {self.topics!r}")
        topics = list(self.topics)
        for t in topics:
            if not isinstance(t, str) or not t:
                raise ValueError(f"Subscription.topics: topic names must be non-empty str, got {t!r}")
        object.__setattr__(self, "topics", topics)
        if self.user_data is not None and not isinstance(self.user_data, (bytes, bytearray, memoryview)):
            raise TypeError(f"Subscription.user_data must be bytes or None, got {type(self.user_data).__name__}")
        if self.user_data is not None and not isinstance(self.user_data, bytes):
            object.__setattr__(self, "user_data", bytes(self.user_data))
        object.__setattr__(self, "owned_partitions", _partitions("Subscription.owned_partitions",
                                                                 self.owned_partitions))
        if isinstance(self.generation_id, bool) or not isinstance(self.generation_id, int) \
                or not _INT32_MIN <= self.generation_id <= _INT32_MAX:
            raise ValueError(f"Subscription.generation_id must be an int32, got {self.generation_id!r}")
        for name in ("rack_id", "group_instance_id"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"Subscription.{name} must be str or None, got {value!r}")


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the leader gives one member (ConsumerProtocolAssignment): partitions sorted by topic, partition."""

    partitions: list[TopicPartition]
    user_data: bytes | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", _partitions("Assignment.partitions", self.partitions))
        if self.user_data is not None and not isinstance(self.user_data, bytes):
            raise TypeError(f"Assignment.user_data must be bytes or None, got {type(self.user_data).__name__}")


def _partitions(what: str, items: Iterable[object]) -> list[TopicPartition]:
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise TypeError(f"{what} must be a list of TopicPartition, got {items!r}")
    out: list[TopicPartition] = []
    for item in items:
        if isinstance(item, TopicPartition):
            tp = item
        elif isinstance(item, tuple) and len(item) == 2:
            tp = TopicPartition(*item)
        else:
            raise TypeError(f"{what}: expected TopicPartition(topic, partition), got {item!r}")
        if not isinstance(tp.topic, str) or not tp.topic or isinstance(tp.partition, bool) \
                or not isinstance(tp.partition, int) or tp.partition < 0:
            raise ValueError(f"{what}: bad partition {item!r} (need a non-empty topic and partition >= 0)")
        out.append(tp)
    return out


# --------------------------------------------------------------------------- the assignor interface
@runtime_checkable
class Assignor(Protocol):
    """Java's ``ConsumerPartitionAssignor`` reduced to what the classic group protocol needs.

    ``protocol`` is the most capable rebalance protocol the assignor supports; ``supported_protocols`` lists
    all of them (an assignor that supports cooperative also works in an eager group).
    """

    @property
    def name(self) -> str: ...

    @property
    def protocol(self) -> RebalanceProtocol: ...

    @property
    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]: ...

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]: ...

    def subscription_user_data(self, topics: Iterable[str], owned: Iterable[TopicPartition]) -> bytes | None: ...

    def on_assignment(self, assignment: Assignment, generation: int) -> None: ...


def _java_key(s: str) -> bytes:
    """Sort key ordering strings like Java's ``String.compareTo`` (UTF-16 code units, not code points)."""
    return s.encode("utf-16-be", "surrogatepass")


def _member_key(member_id: str, instance_id: str | None) -> tuple[int, bytes]:
    # Java's MemberInfo order: static members first, by group.instance.id; then dynamic ones by member id
    return (0, _java_key(instance_id)) if instance_id is not None else (1, _java_key(member_id))


def _tp_key(tp: TopicPartition) -> tuple[bytes, int]:
    return _java_key(tp.topic), tp.partition


def _validate(partitions_per_topic: Mapping[str, int],
              subscriptions: Mapping[str, Subscription]) -> dict[str, int]:
    """Checks the inputs; returns the partition counts of topics some member subscribes to (Java never
    sees other topics, and skips topics without metadata or with no partitions)."""
    if not isinstance(partitions_per_topic, Mapping):
        raise TypeError(f"partitions_per_topic must be a mapping topic -> partition count, "
                        f"got {type(partitions_per_topic).__name__}")
    if not isinstance(subscriptions, Mapping):
        raise TypeError(f"subscriptions must be a mapping member id -> Subscription, "
                        f"got {type(subscriptions).__name__}")
    for topic, count in partitions_per_topic.items():
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"partitions_per_topic: topic names must be non-empty str, got {topic!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"partitions_per_topic[{topic!r}] must be an int >= 0, got {count!r}")
    subscribed: set[str] = set()
    for member, sub in subscriptions.items():
        if not isinstance(member, str) or not member:
            raise ValueError(f"subscriptions: member ids must be non-empty str, got {member!r}")
        if not isinstance(sub, Subscription):
            raise TypeError(f"subscriptions[{member!r}] must be a Subscription, got {type(sub).__name__}")
        subscribed.update(sub.topics)
    return {t: n for t, n in partitions_per_topic.items() if n > 0 and t in subscribed}


def _sorted_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    return sorted(subscriptions, key=lambda m: _member_key(m, subscriptions[m].group_instance_id))


def _wrap(assignment: Mapping[str, list[TopicPartition]]) -> dict[str, Assignment]:
    return {m: Assignment(sorted(tps, key=_tp_key), None) for m, tps in assignment.items()}


class _EagerAssignor:
    """Shared plumbing of the stateless eager assignors: no user data, nothing to remember."""

    name: ClassVar[str]
    protocol: ClassVar[RebalanceProtocol] = "eager"
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = ("eager",)

    def subscription_user_data(self, topics: Iterable[str], owned: Iterable[TopicPartition]) -> bytes | None:
        return None

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# --------------------------------------------------------------------------- range
class RangeAssignor(_EagerAssignor):
    """Java's RangeAssignor (without KIP-881 rack awareness: partition replica racks are not an input).

    Per topic, the subscribed members in Java's member order take contiguous ranges; with ``n`` partitions
    and ``c`` members, each gets ``n // c`` and the first ``n % c`` get one more. Two topics with the same
    partition count and subscribers are therefore co-partitioned (p_i of both go to the same member).
    """

    name = "range"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        counts = _validate(partitions_per_topic, subscriptions)
        result: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        consumers: dict[str, list[str]] = defaultdict(list)
        for member in _sorted_members(subscriptions):
            for topic in dict.fromkeys(subscriptions[member].topics):
                if topic in counts:
                    consumers[topic].append(member)
        for topic, members in consumers.items():
            n, c = counts[topic], len(members)
            per_member, extra = divmod(n, c)
            for i, member in enumerate(members):
                start = per_member * i + min(i, extra)
                length = per_member + (1 if i < extra else 0)
                result[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
        return _wrap(result)


# --------------------------------------------------------------------------- roundrobin
class RoundRobinAssignor(_EagerAssignor):
    """Java's RoundRobinAssignor.

    All partitions of subscribed topics, sorted by topic then partition, are dealt one at a time by a
    single circular cursor over the members in Java's member order; the cursor skips members not subscribed
    to the partition's topic. Balanced (within one) when subscriptions are identical.
    """

    name = "roundrobin"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        counts = _validate(partitions_per_topic, subscriptions)
        result: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        members = _sorted_members(subscriptions)
        topic_sets = {m: set(subscriptions[m].topics) for m in members}
        cursor = 0
        for topic in sorted(counts, key=_java_key):
            for p in range(counts[topic]):
                # some member subscribes to every topic in counts, so this loop ends
                while topic not in topic_sets[members[cursor]]:
                    cursor = (cursor + 1) % len(members)
                result[members[cursor]].append(TopicPartition(topic, p))
                cursor = (cursor + 1) % len(members)
        return _wrap(result)


# --------------------------------------------------------------------------- cooperative-sticky
def encode_generation(generation: int) -> bytes:
    """cooperative-sticky subscription user data: Java's ``CooperativeStickyAssignor`` schema v0, a single
    big-endian int32 ``generation`` (4 bytes)."""
    if isinstance(generation, bool) or not isinstance(generation, int) or not _INT32_MIN <= generation <= _INT32_MAX:
        raise ValueError(f"generation must be an int32, got {generation!r}")
    return _INT32.pack(generation)


def decode_generation(user_data: bytes | None) -> int | None:
    """Inverse of :func:`encode_generation`, lenient as Java: ``None`` for no user data (generation unknown),
    :data:`DEFAULT_GENERATION` for bytes too short to hold one; bytes after the int32 are ignored."""
    if user_data is None:
        return None
    if len(user_data) < 4:
        return DEFAULT_GENERATION
    return int(_INT32.unpack_from(user_data, 0)[0])


def _member_generation(sub: Subscription) -> int:
    # v2+ subscriptions carry the generation in a field; older ones only in cooperative-sticky user data
    if sub.generation_id >= 0:
        return sub.generation_id
    decoded = decode_generation(sub.user_data)
    return DEFAULT_GENERATION if decoded is None else decoded


class CooperativeStickyAssignor:
    """Java's CooperativeStickyAssignor: the sticky assignment, then the cooperative withholding rule.

    One instance per consumer: it remembers the generation of its last assignment and advertises it in its
    subscription user data so a leader can tell current claims from stale ones.
    """

    name: ClassVar[str] = "cooperative-sticky"
    protocol: ClassVar[RebalanceProtocol] = "cooperative"
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = ("cooperative", "eager")

    def __init__(self) -> None:
        self.generation = DEFAULT_GENERATION

    def __repr__(self) -> str:
        return f"CooperativeStickyAssignor(generation={self.generation})"

    def subscription_user_data(self, topics: Iterable[str], owned: Iterable[TopicPartition]) -> bytes | None:
        return encode_generation(self.generation)

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        if isinstance(generation, bool) or not isinstance(generation, int) \
                or not _INT32_MIN <= generation <= _INT32_MAX:
            raise ValueError(f"generation must be an int32, got {generation!r}")
        self.generation = generation

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        counts = _validate(partitions_per_topic, subscriptions)
        if not subscriptions:
            return {}
        claims = _Claims(counts, subscriptions)
        target = _sticky_assign(counts, subscriptions, claims)
        # the cooperative rule: a partition another member still claims is only revoked from it now; it is
        # handed to its new owner in the follow-up rebalance, once nobody claims it any more. A member keeps
        # what it validly owns. Partitions claimed by two members of one generation count as claimed by both.
        final: dict[str, list[TopicPartition]] = {}
        for member, tps in target.items():
            final[member] = [tp for tp in tps
                             if tp in claims.valid[member] or not claims.claimed_by_other(tp, member)]
        return _wrap(final)


class _Claims:
    """Who owned what before this rebalance.

    Claims on partitions that no longer exist are dropped. ``valid``: the claims the sticky algorithm keeps:
    on a partition claimed by several members, the single claimant of the highest generation wins; if the
    highest generation has several claimants (impossible unless something went wrong), nobody keeps it,
    like Java. ``previous``: for partitions whose losing claimant came from an older generation, that
    claimant (the general algorithm prefers giving a partition back to it when balance moves it anyway).
    """

    __slots__ = ("valid", "previous", "_claimants")

    def __init__(self, counts: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> None:
        self._claimants: dict[TopicPartition, list[tuple[int, str]]] = defaultdict(list)
        for member, sub in subscriptions.items():
            generation = _member_generation(sub)
            for tp in set(sub.owned_partitions):
                if tp.partition >= counts.get(tp.topic, 0):
                    continue
                self._claimants[tp].append((generation, member))
        self.valid: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
        self.previous: dict[TopicPartition, str] = {}
        for tp, claimants in self._claimants.items():
            top = max(g for g, _ in claimants)
            winners = [m for g, m in claimants if g == top]
            if len(winners) == 1:
                self.valid[winners[0]].add(tp)
                older = [(g, m) for g, m in claimants if g < top]
                if older:
                    self.previous[tp] = max(older, key=lambda gm: (gm[0], _java_key(gm[1])))[1]

    def claimed_by_other(self, tp: TopicPartition, member: str) -> bool:
        return any(m != member for _, m in self._claimants.get(tp, ()))


def _sticky_assign(counts: Mapping[str, int], subscriptions: Mapping[str, Subscription],
                   claims: _Claims) -> dict[str, list[TopicPartition]]:
    members = sorted(subscriptions, key=_java_key)
    first = set(subscriptions[members[0]].topics)
    if all(set(subscriptions[m].topics) == first for m in members):
        return _constrained_assign(counts, members, claims)
    return _general_assign(counts, subscriptions, members, claims)


def _constrained_assign(counts: Mapping[str, int], members: list[str],
                        claims: _Claims) -> dict[str, list[TopicPartition]]:
    """Java's ConstrainedAssignmentBuilder (identical subscriptions), deterministic member order.

    Every member ends with ``min_quota`` or ``max_quota`` partitions, exactly ``total % members`` of them
    with ``max_quota``. Owned partitions are kept up to the member's quota (at most ``total % members``
    members may keep ``max_quota``), the rest are dealt round-robin to members still below quota.
    """
    total = sum(counts.values())
    n = len(members)
    min_quota, expected_over = divmod(total, n)
    max_quota = min_quota + (1 if expected_over else 0)
    over = 0
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
    taken: set[TopicPartition] = set()
    under: list[str] = []  # below min_quota
    exact: list[str] = []  # at min_quota, may take one more while max_quota places remain
    for member in members:
        # Java keeps owned partitions ordered by partition then topic: spreads what is kept across topics
        owned = sorted(claims.valid[member], key=lambda tp: (tp.partition, _java_key(tp.topic)))
        if len(owned) < min_quota:
            kept = owned
            under.append(member)
        elif len(owned) >= max_quota and over < expected_over:
            kept = owned[:max_quota]
            over += 1
            if over == expected_over:
                exact.clear()
        else:
            kept = owned[:min_quota]
            if over < expected_over:
                exact.append(member)
        assignment[member].extend(kept)
        taken.update(kept)

    under_q, exact_q = deque(under), deque(exact)
    for topic in sorted(counts, key=_java_key):
        for p in range(counts[topic]):
            tp = TopicPartition(topic, p)
            if tp in taken:
                continue
            if under_q:
                member = under_q.popleft()
                assignment[member].append(tp)
                size = len(assignment[member])
                if size < min_quota:
                    under_q.append(member)
                else:
                    exact_q.append(member)
            elif exact_q and over < expected_over:
                member = exact_q.popleft()
                assignment[member].append(tp)
                over += 1
            else:  # pragma: no cover - the quotas add up to the partition count
                raise AssertionError(f"sticky assignment: no member left below quota for {tp}")
    return assignment


def _general_assign(counts: Mapping[str, int], subscriptions: Mapping[str, Subscription], members: list[str],
                    claims: _Claims) -> dict[str, list[TopicPartition]]:
    """Sticky assignment when subscriptions differ (the goals of Java's GeneralAssignmentBuilder).

    1. each member keeps its valid owned partitions of topics it still subscribes to;
    2. unowned partitions go, topics with the fewest potential consumers first, to the least loaded
       subscribed member;
    3. while some member holds a partition that a subscribed member with at least two fewer partitions
       could take, move one: partitions the member did not own before first, then ones whose previous
       (older-generation) owner is the receiver, then to the least loaded receiver. Every move strictly
       lowers the sum of squared loads, so this ends; at the end no single move can improve balance, which
       is Java's balance criterion.
    """
    member_rank = {m: i for i, m in enumerate(members)}
    topic_key = {t: _java_key(t) for t in counts}
    eligible = {m: {t for t in subscriptions[m].topics if t in counts} for m in members}
    consumers_of: dict[str, list[str]] = defaultdict(list)
    for m in members:
        for t in eligible[m]:
            consumers_of[t].append(m)
    assignment: dict[str, set[TopicPartition]] = {
        m: {tp for tp in claims.valid[m] if tp.topic in eligible[m]} for m in members}
    owner = {tp: m for m, tps in assignment.items() for tp in tps}
    load = {m: len(tps) for m, tps in assignment.items()}

    topics = sorted(consumers_of, key=lambda t: (len(consumers_of[t]), _java_key(t)))
    for topic in topics:
        # only this topic's consumers change load while its partitions are dealt: one heap per topic
        heap = [(load[c], member_rank[c], c) for c in consumers_of[topic]]
        heapq.heapify(heap)
        for p in range(counts[topic]):
            tp = TopicPartition(topic, p)
            if tp in owner:
                continue
            _, rank, m = heap[0]
            assignment[m].add(tp)
            owner[tp] = m
            load[m] += 1
            heapq.heapreplace(heap, (load[m], rank, m))

    while True:
        move: tuple[tuple[int, int, int, int, tuple[bytes, int]], TopicPartition, str, str] | None = None
        lightest: dict[str, str] = {}  # per topic; loads do not change while a move is searched
        for giver in sorted(members, key=lambda c: (-load[c], member_rank[c])):
            if load[giver] < 2:
                break
            for tp in assignment[giver]:
                if tp.topic not in lightest:
                    lightest[tp.topic] = min(consumers_of[tp.topic], key=lambda c: (load[c], member_rank[c]))
                receiver = lightest[tp.topic]
                prev = claims.previous.get(tp)
                if prev is not None and prev != giver and prev in eligible and tp.topic in eligible[prev] \
                        and load[giver] > load[prev] + 1:
                    receiver = prev
                if load[giver] <= load[receiver] + 1:
                    continue
                score = (1 if tp in claims.valid[giver] else 0, 0 if receiver == prev else 1,
                         load[receiver], member_rank[receiver], (topic_key[tp.topic], tp.partition))
                if move is None or score < move[0]:
                    move = (score, tp, giver, receiver)
            if move is not None:
                break
        if move is None:
            break
        _, tp, giver, receiver = move
        assignment[giver].remove(tp)
        assignment[receiver].add(tp)
        load[giver] -= 1
        load[receiver] += 1
    return {m: list(tps) for m, tps in assignment.items()}


# --------------------------------------------------------------------------- registry
#: assignor classes by protocol name; instantiate one per consumer (cooperative-sticky keeps state)
ASSIGNORS: dict[str, type[RangeAssignor] | type[RoundRobinAssignor] | type[CooperativeStickyAssignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
}


def choose_protocol(names: str | Sequence[str]) -> RebalanceProtocol:
    """The rebalance protocol of a consumer configured with assignors ``names`` (preference order): the
    most capable protocol every one of them supports, as Java's ConsumerCoordinator chooses it. So
    ``["cooperative-sticky"]`` is cooperative, while Java's default ``["range", "cooperative-sticky"]`` is
    eager until range is dropped from the list (KIP-429's two-step upgrade)."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    names = list(names)
    if not names:
        raise ConfigError("partition_assignment_strategy: at least one assignor is required")
    common: set[str] | None = None
    for name in names:
        cls = ASSIGNORS.get(name) if isinstance(name, str) else None
        if cls is None:
            raise ConfigError(f"partition_assignment_strategy: unknown assignor {name!r}; "
                              f"known: {', '.join(ASSIGNORS)}")
        supported: set[str] = set(cls.supported_protocols)
        common = supported if common is None else common & supported
    assert common is not None
    # every built-in supports eager, so the intersection is never empty
    return "cooperative" if "cooperative" in common else "eager"
