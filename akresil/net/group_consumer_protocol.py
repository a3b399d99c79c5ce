"""KIP-848 group membership for ``Consumer(..., group_protocol="consumer")``: the I/O shell.

``ConsumerGroupMember`` implements ``net.group_member.GroupMember``, as the classic ``GroupCoordinator``
does, so the consumer switches protocols in one place; offsets go through the same ``GroupOffsets``.
Heartbeats run in ``net.heartbeat_loop``; after each answer that changed the target, this module
reconciles step by step as ``core.consumer_membership`` says: revoke (commit the revoked positions when
auto-commit is on, then ``on_partitions_revoked``), assign (``on_partitions_assigned``), report what is
owned with the next heartbeat, which goes at once. A fenced member's partitions are lost
(``on_partitions_lost``, no commit) and it joins again; so are a member's that stopped polling for
``max_poll_interval_ms`` (it left with epoch -1 and joins again at the next poll).

Offsets are committed with the member epoch as the generation (OffsetCommit v9 ``GenerationIdOrMemberEpoch``);
STALE_MEMBER_EPOCH retries with the epoch the next heartbeat brings, UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH
fail the commit with ``CommitFailedError``.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

import anyio

from .. import errors
from ..config import Config
from ..core.backoff import ExponentialBackoff
from ..core.consumer_membership import ConsumerMembership
from ..core.group_heartbeat import MemberPhase
from ..core.group_state import Action, classify_commit_error
from ..protocol.api import ApiKey
from ..types import TopicPartition
from .cluster import Cluster
from .group_member import CommitOffsets, GroupOffsets, RebalanceListener
from .heartbeat_loop import HeartbeatLoop

log = logging.getLogger(__name__)

_STALE_EPOCH = errors.StaleMemberEpochError.errno
_GONE = frozenset({errors.UnknownMemberIdError.errno, errors.FencedMemberEpochError.errno,
                   errors.IllegalGenerationError.errno})


class ConsumerGroupMember:
    """A KIP-848 group member wired into the consumer's fetch state through the listener bridge."""

    def __init__(self, cluster: Cluster, config: Config, *, subscription: Callable[[], set[str]],
                 listener: RebalanceListener | None, on_assignment_changed: Callable[[], None],
                 committed_offsets_for_revoke: Callable[[], dict[TopicPartition, int]]) -> None:
        assert config.group_id is not None
        self._cluster = cluster
        self._config = config
        self.group_id: str = config.group_id
        self._subscription = subscription
        self._listener = listener
        self._on_assignment_changed = on_assignment_changed
        self._positions_for_revoke = committed_offsets_for_revoke
        self._backoff = ExponentialBackoff(config.retry_backoff_ms, config.retry_backoff_max_ms, rng=cluster.rng)
        self.core = ConsumerMembership(
            config.group_id, backoff=self._backoff, rebalance_timeout_ms=config.rebalance_timeout_ms,
            instance_id=config.group_instance_id, server_assignor=config.group_remote_assignor,
            max_poll_interval_ms=config.max_poll_interval_ms)
        self._loop = HeartbeatLoop(cluster, self.core, ApiKey.CONSUMER_GROUP_HEARTBEAT,
                                   on_change=self._reconcile, protocol_name="consumer")
        self.assignment: frozenset[TopicPartition] = frozenset()
        self._closing = False
        self._epoch_changed = anyio.Event()
        cluster.on_metadata_change(self._on_metadata_change)
        self._offsets = GroupOffsets(cluster, self.group_id, request_timeout_ms=config.request_timeout_ms,
                                     backoff=self._backoff, coordinator=self._coordinator,
                                     coordinator_lost=self._coordinator_lost)

    # ------------------------------------------------------------------ the surface the consumer uses
    @property
    def member_id(self) -> str:
        return self.core.member_id

    @property
    def member_epoch(self) -> int:
        return self.core.member_epoch

    @property
    def fatal_error(self) -> errors.KafkaError | None:
        return self.core.fatal_error

    @property
    def rebalance_protocol(self) -> str:
        return "consumer"

    def request_rejoin(self, reason: str) -> None:
        """The subscription changed (a pattern matched other topics): the next heartbeat carries it."""
        self.core.subscribe(frozenset(self._subscription()), self._cluster.clock())
        self._loop.wake()

    @property
    def generation_id(self) -> int:
        """The member epoch: it stands where the classic generation does in OffsetCommit and TxnOffsetCommit."""
        return self.core.member_epoch

    def poll_happened(self, now_ms: float) -> None:
        """The application polled (max_poll_interval_ms); after a poll timeout this joins again at epoch 0."""
        if self.core.poll(now_ms):
            self._loop.wake()

    async def run(self) -> None:
        """Heartbeat until left; a fatal error (e.g. the broker lacks ConsumerGroupHeartbeat) is raised
        from here, as the classic coordinator's are."""
        self.core.subscribe(frozenset(self._subscription()), self._cluster.clock())
        self.core.poll(self._cluster.clock())   # the poll timer starts with the membership
        await self._loop.run()
        if self.core.fatal_error is not None and not self._closing:
            raise self.core.fatal_error

    async def leave(self) -> None:
        """Commit on revoke (auto-commit), ``on_partitions_revoked`` for what is owned, then the leave
        heartbeat (epoch -1, or -2 for a static member)."""
        self._closing = True
        self._loop.stop()
        if self.core.phase is MemberPhase.FATAL:
            return
        owned = self.core.owned
        if owned:
            await self._revoke(owned)
        await self._loop.leave(self._config.request_timeout_ms)

    # ------------------------------------------------------------------ reconciliation
    def _on_metadata_change(self) -> None:
        """New metadata may name a target topic id that could not be resolved before: reconcile again."""
        if self.core.target and not self._closing:
            step = self.core.reconcile_step(self._cluster.metadata.snapshot.topic_name)
            if step.revoke or step.assign:
                self._loop.request_change_callback()

    async def _reconcile(self) -> None:
        """Called by the heartbeat loop after an answer that changed the target or the epoch."""
        self._epoch_changed.set()
        self._epoch_changed = anyio.Event()
        core = self.core
        if core.phase in (MemberPhase.JOINING, MemberPhase.STALE) and core.member_epoch == 0 and core.owned:
            lost = core.lose_all()
            self._set_assignment(frozenset())
            await self._call("on_partitions_lost", lost)
            return
        while not self._closing:
            step = core.reconcile_step(self._cluster.metadata.snapshot.topic_name)
            if step.unresolved:
                self._cluster.request_metadata_refresh("consumer-group-assignment-unknown-topic-id")
            if step.revoke:
                await self._revoke(step.revoke)
                continue
            if step.assign:
                owned = core.owned | step.assign
                core.set_owned(owned, self._topic_id, self._cluster.clock())
                self._set_assignment(owned)
                await self._call("on_partitions_assigned", step.assign)
                continue
            break
        self._loop.wake()

    def _topic_id(self, topic: str) -> bytes | None:
        return self._cluster.metadata.snapshot.topic_ids.get(topic)

    async def _revoke(self, revoked: frozenset[TopicPartition]) -> None:
        positions = {tp: off for tp, off in self._positions_for_revoke().items() if tp in revoked}
        if positions:
            try:
                await self.commit({tp: (off, None, None) for tp, off in positions.items()})
            except (errors.KafkaError, OSError) as exc:
                log.warning("group %s: commit on revoke of %d partition(s) failed: %s", self.group_id,
                            len(positions), exc)
        await self._call("on_partitions_revoked", revoked)
        owned = self.core.owned - revoked
        self.core.set_owned(owned, self._topic_id, self._cluster.clock())
        self._set_assignment(owned)

    def _set_assignment(self, owned: frozenset[TopicPartition]) -> None:
        if owned != self.assignment:
            self.assignment = owned
            self._on_assignment_changed()

    async def _call(self, name: str, tps: frozenset[TopicPartition]) -> None:
        if not tps or self._listener is None:
            return
        try:
            await getattr(self._listener, name)(set(tps))
        except Exception:   # a user callback's failure must not stop membership (Java logs it too)
            log.exception("group %s: %s callback failed", self.group_id, name)

    # ------------------------------------------------------------------ offsets
    async def _coordinator(self, deadline: float) -> int:
        while self._loop.coordinator is None:
            if self.core.fatal_error is not None:
                raise self.core.fatal_error
            if self._cluster.clock() > deadline:
                raise errors.KafkaTimeoutError(f"group {self.group_id}: no coordinator within request_timeout_ms")
            self._loop.wake()
            await anyio.sleep(0.01)
        return self._loop.coordinator

    async def commit(self, offsets: CommitOffsets) -> None:
        """OffsetCommit for the current member epoch, retried within ``request_timeout_ms``."""
        if self.core.fatal_error is not None:
            raise self.core.fatal_error
        pending = {tp: (off, -1 if ep is None else ep, md or "") for tp, (off, ep, md) in offsets.items()}
        if pending:
            await self._offsets.commit(pending, identity=self._commit_identity, instance_id=self.core.instance_id,
                                       judge=self._judge_commit_error, wait=self._wait_commit_retry)

    def _commit_identity(self) -> tuple[int, str]:
        epoch = self.core.member_epoch
        if epoch <= 0:
            raise errors.CommitFailedError(f"group {self.group_id}: not a member (epoch {epoch}); the "
                                           "partitions may have moved and their records will be redelivered")
        return epoch, self.core.member_id

    def _judge_commit_error(self, code: int, error: errors.KafkaError) -> None:
        """STALE_MEMBER_EPOCH is retried with the next heartbeat's epoch; a fenced or unknown member's commit
        fails; retriable and coordinator errors retry; anything else fails the commit."""
        if code == _STALE_EPOCH:
            return
        if code in _GONE:
            raise errors.CommitFailedError(
                f"group {self.group_id}: commit failed ({type(error).__name__}); the member was fenced "
                "and its partitions may have moved (their records will be redelivered)") from error
        if classify_commit_error(code) not in (Action.RETRY, Action.COORDINATOR, Action.RETRY_NOW):
            raise error

    async def _wait_commit_retry(self, cause: BaseException | None, delay_ms: float) -> None:
        if isinstance(cause, errors.StaleMemberEpochError):    # the next heartbeat brings the epoch
            with anyio.move_on_after(delay_ms / 1000.0):
                await self._epoch_changed.wait()
        else:
            await anyio.sleep(delay_ms / 1000.0)

    async def fetch_committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return await self._offsets.fetch(tps)

    def _coordinator_lost(self, why: BaseException) -> None:
        """The coordinator answered that it is not (or not yet) the group's: find it again before retrying."""
        log.debug("group %s: coordinator lost (%r); looking it up again", self.group_id, why)
        self._loop.coordinator_lost()
