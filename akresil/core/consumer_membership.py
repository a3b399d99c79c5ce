"""KIP-848 consumer-group membership (``group_protocol="consumer"``), sans-IO: heartbeat fields and
reconciliation of the broker-computed assignment.

The coordinator computes every member's target assignment itself (``group_remote_assignor``: ``uniform``
or ``range`` on Kafka) and hands each member, in heartbeat answers, only partitions it may use at once:
a partition another member still owns is held back until that member has revoked it. The member
reconciles one step at a time (``reconcile_step``): partitions it owns but the target lacks are revoked
first (commit, ``on_partitions_revoked``), then new ones are assigned (``on_partitions_assigned``), and
the next heartbeat reports what it owns now (``TopicPartitions``), which is how the coordinator learns
a revocation is done. A fenced or unknown member loses its partitions (``on_partitions_lost``, nothing
committed) and joins again at epoch 0.

Reference for behaviour: the Java client's ``ConsumerMembershipManager`` (no code taken from it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, NamedTuple

from ..types import TopicPartition
from .backoff import ExponentialBackoff
from .group_heartbeat import LEAVE_EPOCH, STATIC_LEAVE_EPOCH, HeartbeatMembership, HeartbeatResponse
from .group_state import Action

if TYPE_CHECKING:     # the message TypedDicts are for type checkers only
    from ..protocol.messages import ConsumerGroupHeartbeatRequest

TopicIds = Mapping[bytes, frozenset[int]]


class ReconcileStep(NamedTuple):
    """What to do now to move the owned partitions toward the target."""

    revoke: frozenset[TopicPartition]
    assign: frozenset[TopicPartition]
    #: target topic ids the metadata cannot name yet (wait for a refresh before assigning them)
    unresolved: frozenset[bytes]


class ConsumerMembership(HeartbeatMembership["ConsumerGroupHeartbeatRequest"]):
    """A KIP-848 member: the heartbeat fields of ConsumerGroupHeartbeat and the reconciliation bookkeeping."""

    def __init__(self, group_id: str, *, backoff: ExponentialBackoff, rebalance_timeout_ms: int,
                 instance_id: str | None = None, server_assignor: str | None = None,
                 rack_id: str | None = None, member_id: str | None = None,
                 max_poll_interval_ms: int | None = None) -> None:
        super().__init__(group_id, backoff=backoff, member_id=member_id, rack_id=rack_id,
                         max_poll_interval_ms=max_poll_interval_ms)
        self.instance_id = instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.server_assignor = server_assignor
        #: the broker-side subscription regex (RE2J, KIP-848), None when subscribed by names
        self.regex: str | None = None
        #: partitions the member owns now, by topic id (what heartbeats report) and by name
        self.owned: frozenset[TopicPartition] = frozenset()
        self._owned_ids: dict[bytes, frozenset[int]] = {}
        self._owned_sent = False
        self._owned_pending_ack = False

    # ------------------------------------------------------------------ heartbeat fields
    def _heartbeat_body(self, topics: list[str] | None, full: bool) -> ConsumerGroupHeartbeatRequest:
        body: ConsumerGroupHeartbeatRequest = {"group_id": self.group_id, "member_id": self.member_id,
                                               "member_epoch": self.member_epoch, "subscribed_topic_names": topics}
        body["instance_id"] = self.instance_id if full else None
        body["rebalance_timeout_ms"] = self.rebalance_timeout_ms if full else -1
        body["server_assignor"] = self.server_assignor if full else None
        # By names, an empty regex says "no regex" (what the Java client sends to clear one); by regex, the names
        # are empty. librdkafka's mock asserts that names and regex are either both given or both null.
        body["subscribed_topic_regex"] = (self.regex or "") if body.get("subscribed_topic_names") is not None else None
        if full or not self._owned_sent:
            body["topic_partitions"] = [{"topic_id": tid, "partitions": sorted(parts)}
                                        for tid, parts in sorted(self._owned_ids.items())]
            self._owned_pending_ack = True
        else:
            body["topic_partitions"] = None
            self._owned_pending_ack = False
        return body

    @property
    def subscribed(self) -> bool:
        return bool(self.subscription) or bool(self.regex)

    def subscribe_regex(self, regex: str, now: float) -> None:
        """Subscribe by a regex the broker resolves (RE2J): topics created later are assigned by the broker."""
        if not isinstance(regex, str) or not regex:
            raise ValueError(f"regex: a non-empty RE2J regex is required, got {regex!r}")
        if regex != self.regex:
            self.regex = regex
            self.subscribe(frozenset(), now)
            self._subscription_sent = False
            self.heartbeat_now(now)

    def on_response(self, response: HeartbeatResponse, now: float) -> Action:
        action = super().on_response(response, now)
        if action is Action.OK and self._owned_pending_ack:
            self._owned_sent = True
        return action

    def _leave_body(self) -> ConsumerGroupHeartbeatRequest:
        # a static member says it will be back (-2): the coordinator keeps its assignment for the session
        return {"group_id": self.group_id, "member_id": self.member_id,
                "member_epoch": STATIC_LEAVE_EPOCH if self.instance_id is not None else LEAVE_EPOCH,
                "instance_id": self.instance_id}

    # ------------------------------------------------------------------ reconciliation
    def reconcile_step(self, topic_name: Callable[[bytes], str | None]) -> ReconcileStep:
        """Revocations first; assignments only when nothing is left to revoke."""
        target: set[TopicPartition] = set()
        unresolved: set[bytes] = set()
        for tid, parts in self.target.items():
            name = topic_name(tid)
            if name is None:
                unresolved.add(tid)
                continue
            target.update(TopicPartition(name, p) for p in parts)
        revoke = frozenset(self.owned - target)
        if revoke:
            return ReconcileStep(revoke, frozenset(), frozenset(unresolved))
        return ReconcileStep(frozenset(), frozenset(target - self.owned), frozenset(unresolved))

    def set_owned(self, owned: frozenset[TopicPartition], topic_id: Callable[[str], bytes | None],
                  now: float) -> None:
        """The partitions the member owns after a reconciliation step; reported by the next heartbeat,
        which goes at once (the coordinator waits for revocations to be acknowledged)."""
        ids: dict[bytes, set[int]] = {}
        for tp in owned:
            tid = topic_id(tp.topic)
            if tid:
                ids.setdefault(tid, set()).add(tp.partition)
        frozen = {tid: frozenset(ps) for tid, ps in ids.items()}
        if owned != self.owned or frozen != self._owned_ids:
            self.owned = owned
            self._owned_ids = frozen
            self._owned_sent = False
            self.heartbeat_now(now)

    def lose_all(self) -> frozenset[TopicPartition]:
        """Fenced, unknown or closing: forget every owned partition; returns what was lost."""
        lost, self.owned, self._owned_ids = self.owned, frozenset(), {}
        self._owned_sent = False
        return lost
