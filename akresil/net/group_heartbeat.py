"""The heartbeat-only group protocols' steps for a ``GroupSession``: KIP-848 consumer groups, KIP-932 share groups.

Both replace JoinGroup / SyncGroup with one heartbeat RPC that also joins (epoch 0) and leaves (epoch -1):
``HeartbeatMember`` sends it (ConsumerGroupHeartbeat or ShareGroupHeartbeat) as its core
(``core.group_heartbeat``) says, on the coordinator's own connection, and wakes the session when the answer
changed the target assignment or the epoch. The two differ in what follows:

- ``ConsumerGroupMember`` (``Consumer(group_protocol="consumer")``) reconciles the broker-computed target one
  step at a time as ``core.consumer_membership`` says: revoke (commit, ``on_partitions_revoked``), then assign
  (``on_partitions_assigned``); the next heartbeat, which goes at once, reports what it owns. A fenced member's
  partitions are lost and it joins again; so are a member's that stopped polling for ``max_poll_interval_ms``
  (it left with epoch -1 and joins again at the next poll). Offsets are committed with the member epoch as the
  generation (OffsetCommit v9 ``GenerationIdOrMemberEpoch``): STALE_MEMBER_EPOCH retries with the epoch the next
  heartbeat brings, UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH fail the commit with ``CommitFailedError``.
- ``ShareGroupMember`` (``ShareConsumer``) takes the target as it comes: a share assignment only says which
  partitions to fetch from (other members share them), so nothing is revoked or committed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Generic

import anyio

from .. import errors
from ..core.consumer_membership import ConsumerMembership
from ..core.group_heartbeat import HeartbeatMembership, HeartbeatResponse, MemberPhase, Req, ShareMembership
from ..core.group_session import WAIT, Step
from ..core.group_state import Action, classify_commit_error
from ..protocol.api import ApiKey
from ..types import TopicPartition
from .group_offsets import PendingOffsets
from .group_session import warn_poll_expired

if TYPE_CHECKING:
    from .group_session import GroupSession
    from ..protocol.messages import ConsumerGroupHeartbeatRequest, ShareGroupHeartbeatRequest

log = logging.getLogger(__name__)

__all__ = ["ConsumerGroupMember", "ShareGroupMember"]

_TRANSPORT_ERRORS = (errors.KafkaConnectionError, errors.RequestTimeoutError)
_STALE_EPOCH = errors.StaleMemberEpochError.errno
_GONE = frozenset({errors.UnknownMemberIdError.errno, errors.FencedMemberEpochError.errno,
                   errors.IllegalGenerationError.errno})


class HeartbeatMember(Generic[Req]):
    """The heartbeat step and timers both heartbeat-only protocols share; a subclass sends its protocol's
    heartbeat (``_send``)."""

    def __init__(self, session: GroupSession, core: HeartbeatMembership[Req], api: ApiKey, protocol: str) -> None:
        self._session = session
        self._cluster = session.cluster
        self.core: HeartbeatMembership[Req] = core
        self._api = api
        self._protocol = protocol
        #: set (and replaced) whenever an answer changes the epoch or the target
        self._epoch_changed = anyio.Event()
        #: the target topic ids the metadata could not name at the last look (refreshed once per change)
        self._unresolved: frozenset[bytes] = frozenset()
        #: the lowest heartbeat version that carries what this member sends
        self._min_version = 0
        self._cluster.on_metadata_change(self._on_metadata_change)

    @property
    def rebalance_protocol(self) -> str:
        return self._protocol

    @property
    def generation_id(self) -> int:
        """The member epoch: it stands where the classic generation does in OffsetCommit and TxnOffsetCommit."""
        return self.core.member_epoch

    @property
    def member_id(self) -> str:
        return self.core.member_id

    @property
    def fatal_error(self) -> errors.KafkaError | None:
        return self.core.fatal_error

    def start(self, now: float) -> None:
        self.core.subscribe(self._session.subscription(), now)
        self.core.poll(now)   # the poll timer starts with the membership

    def fail(self, error: errors.KafkaError) -> None:
        self.core.fail(error)

    def poll(self, now: float) -> bool:
        return self.core.poll(now)

    def request_rejoin(self, reason: str) -> None:
        """The subscription changed (a pattern matched other topics): the next heartbeat, at once, carries it."""
        self.core.subscribe(self._session.subscription(), self._session.clock())

    def may_revoke(self) -> bool:
        return self.core.member_epoch > 0

    async def join(self, coordinator: int, owned: frozenset[TopicPartition]) -> None:
        raise errors.IllegalStateError(f"a {self._protocol} group member joins by heartbeat")

    # ------------------------------------------------------------------ target assignment by name
    def _resolve(self) -> frozenset[TopicPartition]:
        """The target by topic name; ids the metadata cannot name yet wait for a refresh (asked once per set)."""
        snapshot = self._cluster.metadata.snapshot
        tps: set[TopicPartition] = set()
        unresolved: set[bytes] = set()
        for tid, parts in self.core.target.items():
            name = snapshot.topic_name(tid)
            if name is None:
                unresolved.add(tid)
            else:
                tps.update(TopicPartition(name, p) for p in parts)
        self._note_unresolved(frozenset(unresolved))
        return frozenset(tps)

    def _note_unresolved(self, unresolved: frozenset[bytes]) -> None:
        if unresolved and unresolved != self._unresolved:
            self._cluster.request_metadata_refresh(f"{self._protocol}-group-assignment-unknown-topic-id")
        self._unresolved = unresolved

    def _on_metadata_change(self) -> None:
        """New metadata may name a target topic id that could not be resolved before."""
        if self._unresolved:
            self._session.notify()

    # ------------------------------------------------------------------ the heartbeat loop's steps
    async def expire(self, now: float) -> bool:
        """``max_poll_interval_ms`` passed without a poll: leave (best effort, as Java does) so the coordinator
        gives the partitions to live members; the session then drops them. The next poll joins again."""
        m = self.core
        poll_expiry = m.poll_expires_at()
        if poll_expiry is None or now < poll_expiry:
            return False
        warn_poll_expired(m.group_id, m.max_poll_interval_ms)
        body = m.leave_stale()
        coordinator = self._session.coordinator.node
        if coordinator is not None:
            with anyio.move_on_after(self._session.config.request_timeout_ms / 1000.0):
                try:
                    await self._send(coordinator, body)
                except errors.KafkaError as exc:
                    log.debug("group %s: leave heartbeat failed: %s", m.group_id, exc)
        return True

    def heartbeat_due_at(self, now: float) -> float | None:
        return self.core.heartbeat_due_at(now)

    def heartbeat_deadline(self) -> float | None:
        return None

    def next_timer_at(self, now: float) -> float | None:
        return min((t for t in (self.core.heartbeat_due_at(now), self.core.poll_expires_at()) if t is not None),
                   default=None)

    async def heartbeat(self, coordinator: int) -> None:
        m = self.core
        clock = self._session.clock
        before = (m.target_version, m.member_epoch)
        body = m.build_heartbeat(clock())
        try:
            response = await self._send(coordinator, body, min_version=self._min_version)
        except errors.UnsupportedVersionError as exc:
            m.on_failure(clock())
            m.fail(errors.UnsupportedVersionError(
                f"group {m.group_id}: the broker does not support the {self._protocol} group protocol "
                f"({self._api.name}{f' v{self._min_version}+' if self._min_version else ''}): {exc}. It needs "
                f"Apache Kafka 4.0+ for group_protocol='consumer' (a regex subscription too) and 4.1+ for share "
                f"groups (or librdkafka's mock cluster)"))
            self._session.notify()
            return
        except _TRANSPORT_ERRORS as exc:
            log.debug("group %s: %s failed: %s", m.group_id, self._api.name, exc)
            m.on_failure(clock())
            self._session.coordinator.lost(exc)
            return
        action = m.on_response(response, clock())
        if action is not Action.OK:
            log.debug("group %s: %s error %s -> %s", m.group_id, self._api.name, response.get("error_code"),
                      action.value)
        if action is Action.COORDINATOR:
            self._session.coordinator.lost(m.last_error)
        elif action is Action.RESET and m.last_error is not None:
            self._session.rebalance_failed(m.last_error)     # fenced or unknown: its partitions are lost
        if (m.target_version, m.member_epoch) != before or action in (Action.RESET, Action.FATAL):
            self._epoch_changed.set()
            self._epoch_changed = anyio.Event()
            self._session.notify()

    # ------------------------------------------------------------------ leaving
    async def leave(self, reason: str) -> None:
        """Send the leave heartbeat (epoch -1) once, best effort: the broker would expire the member anyway."""
        m = self.core
        coordinator = self._session.coordinator.node
        if m.phase in (MemberPhase.FATAL, MemberPhase.LEFT, MemberPhase.STALE) or coordinator is None:
            m.on_left()
            return
        body = m.leave_body()
        with anyio.move_on_after(self._session.config.request_timeout_ms / 1000.0):
            try:
                await self._send(coordinator, body)
            except errors.KafkaError as exc:
                log.debug("group %s: leave heartbeat failed: %s", m.group_id, exc)
        m.on_left()

    async def _send(self, coordinator: int, body: Req, *, min_version: int = 0) -> HeartbeatResponse:
        """The protocol's heartbeat to ``coordinator`` (its answer; transport errors raise)."""
        raise NotImplementedError


class ConsumerGroupMember(HeartbeatMember["ConsumerGroupHeartbeatRequest"]):
    """KIP-848 membership (``group_protocol="consumer"``): heartbeat, reconcile, commit by member epoch."""

    core: ConsumerMembership

    def __init__(self, session: GroupSession) -> None:
        config = session.config
        super().__init__(session, ConsumerMembership(
            session.group_id, backoff=session.backoff, rebalance_timeout_ms=config.rebalance_timeout_ms,
            instance_id=config.group_instance_id, server_assignor=config.group_remote_assignor,
            rack_id=config.client_rack or None, max_poll_interval_ms=config.max_poll_interval_ms),
            ApiKey.CONSUMER_GROUP_HEARTBEAT, "consumer")
        #: the target version the member last reconciled completely (-1: none yet)
        self._reconciled = -1
        if session.pattern is not None:
            self._min_version = 1       # SubscribedTopicRegex is ConsumerGroupHeartbeat v1+

    async def _send(self, coordinator: int, body: ConsumerGroupHeartbeatRequest, *,
                    min_version: int = 0) -> HeartbeatResponse:
        _, response = await self._cluster.request(coordinator, ApiKey.CONSUMER_GROUP_HEARTBEAT, body,
                                                  min_version=min_version)
        return response

    def start(self, now: float) -> None:
        if self._session.pattern is None:
            super().start(now)
            return
        self.core.subscribe_regex(self._session.pattern, now)
        self.core.poll(now)

    def request_rejoin(self, reason: str) -> None:
        """By names: the next heartbeat, at once, carries the new subscription. By regex the broker follows the
        topics itself."""
        if self._session.pattern is None:
            super().request_rejoin(reason)

    @property
    def stable(self) -> bool:
        return (self.core.phase is MemberPhase.STABLE and self.core.member_epoch > 0
                and self._reconciled == self.core.target_version and not self._unresolved)

    def next_step(self, owned: frozenset[TopicPartition], now: float) -> Step:
        """Fenced or left after a poll timeout: lose what is owned. Otherwise revocations first, then
        assignments, then the reconciliation completes (``on_partitions_assigned`` with what it added)."""
        core = self.core
        if core.member_epoch <= 0 or core.phase is not MemberPhase.STABLE:
            if owned and core.phase in (MemberPhase.JOINING, MemberPhase.STALE):
                return Step(lose=owned)
            return WAIT
        step = core.reconcile_step(self._cluster.metadata.snapshot.topic_name)
        self._note_unresolved(step.unresolved)
        if step.revoke:
            return Step(revoke=step.revoke)
        if step.assign:
            return Step(assign=owned | step.assign)
        if not step.unresolved and self._reconciled != core.target_version:
            return Step(assign=owned)
        return WAIT

    def applied(self, step: Step, owned: frozenset[TopicPartition]) -> None:
        core = self.core
        if step.lose:
            core.lose_all()
            return
        core.set_owned(owned, self._cluster.metadata.snapshot.topic_ids.get, self._session.clock())
        if step.assign is not None and not self._unresolved:
            self._reconciled = core.target_version

    # ------------------------------------------------------------------ offsets
    async def commit(self, pending: PendingOffsets, *, revoking: bool) -> None:
        """OffsetCommit for the current member epoch, retried within ``request_timeout_ms``."""
        await self._session.offsets.commit(pending, identity=self._commit_identity, instance_id=self.core.instance_id,
                                           judge=self._judge_commit_error, wait=self._wait_commit_retry)

    def _commit_identity(self) -> tuple[int, str]:
        epoch = self.core.member_epoch
        if epoch <= 0:
            raise errors.CommitFailedError(f"group {self.core.group_id}: not a member (epoch {epoch}); the "
                                           "partitions may have moved and their records will be redelivered")
        return epoch, self.core.member_id

    def _judge_commit_error(self, code: int, error: errors.KafkaError) -> None:
        """STALE_MEMBER_EPOCH is retried with the next heartbeat's epoch; a fenced or unknown member's commit
        fails; retriable and coordinator errors retry; anything else fails the commit."""
        if code == _STALE_EPOCH:
            return
        if code in _GONE:
            raise errors.CommitFailedError(
                f"group {self.core.group_id}: commit failed ({type(error).__name__}); the member was fenced "
                "and its partitions may have moved (their records will be redelivered)") from error
        if classify_commit_error(code) not in (Action.RETRY, Action.COORDINATOR, Action.RETRY_NOW):
            raise error

    async def _wait_commit_retry(self, cause: BaseException | None, delay_ms: float) -> None:
        if isinstance(cause, errors.StaleMemberEpochError):    # the next heartbeat brings the epoch
            changed = self._epoch_changed
            with anyio.move_on_after(delay_ms / 1000.0):
                await changed.wait()
        else:
            await anyio.sleep(delay_ms / 1000.0)


class ShareGroupMember(HeartbeatMember["ShareGroupHeartbeatRequest"]):
    """KIP-932 membership (``ShareConsumer``): the assignment says where to fetch; nothing to revoke or commit."""

    core: ShareMembership

    def __init__(self, session: GroupSession) -> None:
        super().__init__(session, ShareMembership(session.group_id, backoff=session.backoff,
                                                  rack_id=session.config.client_rack or None),
                         ApiKey.SHARE_GROUP_HEARTBEAT, "share")
        self._applied = -1

    async def _send(self, coordinator: int, body: ShareGroupHeartbeatRequest, *,
                    min_version: int = 0) -> HeartbeatResponse:
        _, response = await self._cluster.request(coordinator, ApiKey.SHARE_GROUP_HEARTBEAT, body,
                                                  min_version=min_version)
        return response

    @property
    def stable(self) -> bool:
        return self.core.phase is MemberPhase.STABLE and self._applied == self.core.target_version

    def next_step(self, owned: frozenset[TopicPartition], now: float) -> Step:
        core = self.core
        if core.member_epoch <= 0:
            return Step(lose=owned) if owned else WAIT
        target = self._resolve()
        if target != owned or (self._applied != core.target_version and not self._unresolved):
            return Step(assign=target)
        return WAIT

    def applied(self, step: Step, owned: frozenset[TopicPartition]) -> None:
        if step.assign is not None and not self._unresolved:
            self._applied = self.core.target_version

    async def commit(self, pending: PendingOffsets, *, revoking: bool) -> None:
        raise errors.IllegalStateError("a share group has no offsets to commit: acknowledge records instead")
