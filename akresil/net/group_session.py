"""One consumer's (or share consumer's) membership in its group, whatever the group protocol: ``GroupSession``.

The session owns what every protocol does the same way, as franz-go's ``groupConsumer`` does: the partitions
the member owns, the listener order (commit then ``on_partitions_revoked``; ``on_partitions_assigned``;
``on_partitions_lost``, falling back to ``on_partitions_revoked``), the ``rebalance`` / ``rebalance_failed``
events, the coordinator (one ``CoordinatorTracker``) and the offsets path (``GroupOffsets``). What differs
between protocols is a ``Membership``: the classic one (``net.group_classic``: JoinGroup / SyncGroup, the
leader assigns, Heartbeat) and the heartbeat-only ones (``net.group_heartbeat``: KIP-848 consumer groups,
KIP-932 share groups). They differ in their join and heartbeat steps and in what a commit error means.

``run()`` is two loops in one task group:

- the *membership* loop asks the membership for the next ``core.group_session.Step`` and carries it out
  (lose, revoke, the classic join, assign); every listener callback runs here, one at a time, so a user never
  sees two callbacks overlap;
- the *heartbeat* loop sleeps until the membership's next timer, finds the coordinator if it must and sends
  the membership's heartbeat; it never runs user code, so heartbeats go on while a callback or a commit on
  revoke takes its time (as the Java client's background thread does).

All requests go through ``Cluster.request``, on the coordinator's group connection (``net.cluster.lane_of``), so
KIP-219 mutes and reconnect backoff apply, and no heartbeat waits behind a long-poll Fetch. A fatal error
(fenced static member, authorization, a broker without the protocol) stops both loops: the owned partitions
are lost, ``fatal_error`` holds it and ``commit`` / ``fetch_committed`` / ``wait_assignment`` raise it (the
consumer raises it from its next call).
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Protocol

import anyio
import anyio.abc

from .. import errors
from ..config import Config
from ..core.backoff import ExponentialBackoff
from ..core.events import REBALANCE, REBALANCE_FAILED
from ..core.group_session import Callback, RebalanceRecord, Step, listener_method
from ..types import TopicPartition
from .cluster import Cluster
from .coordinator import CoordinatorTracker
from .group_offsets import CommitOffsets, GroupOffsets, PendingOffsets, check_offsets

log = logging.getLogger(__name__)

__all__ = ["GroupSession", "Membership", "RebalanceListener", "CommitOffsets"]


class RebalanceListener(Protocol):
    """Callbacks around a rebalance; every method is optional and async (Java's ConsumerRebalanceListener).

    - ``on_partitions_revoked(revoked)``: before partitions are given up, after their positions were
      committed (with auto-commit). Eager: everything owned, before joining; cooperative and KIP-848: only what
      moves elsewhere. Not called with an empty set.
    - ``on_partitions_assigned(assigned)``: after every completed rebalance, with the partitions *added*
      (possibly none).
    - ``on_partitions_lost(lost)``: the membership ended under us (session expiry, fencing, a poll timeout):
      another member may already own them, so nothing is committed. Without this method,
      ``on_partitions_revoked`` is called instead, as in Java.
    """

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None: ...


class Membership(Protocol):
    """What a ``GroupSession`` needs of a group protocol; each implementation gets the session it serves."""

    @property
    def rebalance_protocol(self) -> str:
        """``eager`` / ``cooperative`` (classic), ``consumer`` (KIP-848) or ``share`` (KIP-932)."""
        ...

    @property
    def generation_id(self) -> int:
        """The classic generation or the member epoch: what OffsetCommit and TxnOffsetCommit carry."""
        ...

    @property
    def member_id(self) -> str: ...

    @property
    def fatal_error(self) -> errors.KafkaError | None: ...

    @property
    def stable(self) -> bool:
        """A member of the group with its assignment taken and no rebalance pending."""
        ...

    def start(self, now: float) -> None:
        """The session starts: the first join is due, the poll timer starts."""
        ...

    # ---- the membership loop
    def next_step(self, owned: frozenset[TopicPartition], now: float) -> Step:
        """What the session does next, given what the member owns."""
        ...

    async def join(self, coordinator: int, owned: frozenset[TopicPartition]) -> None:
        """The protocol's join step (asked for only by a ``Step`` with ``join``)."""
        ...

    def applied(self, step: Step, owned: frozenset[TopicPartition]) -> None:
        """The session carried ``step`` out; ``owned`` is what the member owns now."""
        ...

    def may_revoke(self) -> bool:
        """On leaving: revoke (commit) what is owned, or is it lost (the member is no longer in the group)."""
        ...

    # ---- the heartbeat loop
    async def expire(self, now: float) -> bool:
        """Apply timers that ran out (session, poll); True when one did (the loop looks again)."""
        ...

    def heartbeat_due_at(self, now: float) -> float | None:
        """When the next heartbeat goes (None: none is wanted now)."""
        ...

    def heartbeat_deadline(self) -> float | None:
        """The coordinator must be found by then for the membership to survive (None: no bound)."""
        ...

    def next_timer_at(self, now: float) -> float | None: ...

    async def heartbeat(self, coordinator: int) -> None:
        """Send one heartbeat and apply its answer (transport errors are the membership's to handle)."""
        ...

    def fail(self, error: errors.KafkaError) -> None: ...

    # ---- the application
    def poll(self, now: float) -> bool:
        """The application polled; True when this ends an absence after a poll timeout (join again)."""
        ...

    def request_rejoin(self, reason: str) -> None:
        """The subscription changed: tell the coordinator."""
        ...

    async def commit(self, pending: PendingOffsets, *, revoking: bool) -> None:
        """OffsetCommit through the session's offsets path for this member's generation or epoch;
        ``CommitFailedError`` when the group moved on. ``revoking``: positions of partitions being revoked."""
        ...

    async def leave(self, reason: str) -> None:
        """Leave the group (LeaveGroup, or the leave heartbeat), best effort."""
        ...


#: how the consumer names the protocol implementation: ``ClassicMember``, ``ConsumerGroupMember``, ...
MembershipFactory = Callable[["GroupSession"], Membership]


class GroupSession:
    """One member's session in ``config.group_id``; see the module docstring."""

    def __init__(self, cluster: Cluster, config: Config, membership: MembershipFactory, *,
                 subscription: Callable[[], Iterable[str]], listener: RebalanceListener | None = None,
                 on_assignment_changed: Callable[[], None] | None = None,
                 positions_for_revoke: Callable[[], dict[TopicPartition, int]] | None = None,
                 pattern: str | None = None) -> None:
        if not config.group_id:
            raise errors.ConfigError("group_id: a group member needs a non-empty group_id")
        if not callable(subscription):
            raise TypeError("subscription must be a callable returning the subscribed topics")
        self.cluster = cluster
        self.config = config
        self.group_id: str = config.group_id
        self._subscription = subscription
        self._listener = listener
        self._on_assignment_changed = on_assignment_changed
        self._positions_for_revoke = positions_for_revoke
        #: a subscription regex the broker resolves (KIP-848, RE2J syntax), None: by topic names
        self.pattern = pattern
        self.backoff = ExponentialBackoff(config.retry_backoff_ms, config.retry_backoff_max_ms, rng=cluster.rng)
        self.coordinator = CoordinatorTracker(cluster, self.group_id, backoff=self.backoff)
        self.offsets = GroupOffsets(cluster, self.coordinator, request_timeout_ms=config.request_timeout_ms,
                                    backoff=self.backoff)
        #: the partitions the member owns now
        self.assignment: frozenset[TopicPartition] = frozenset()
        #: partitions lost (the membership ended) since the application last polled: a commit of their positions
        #: before the next poll fails (``Consumer.commit``), as the Java consumer's does with its stale generation
        self.lost_since_poll: frozenset[TopicPartition] = frozenset()
        self._record = RebalanceRecord()
        self._changed = anyio.Event()
        self._running = False
        self._closing = False
        self._fatal_reported = False
        self._run_scope: anyio.CancelScope | None = None
        self._run_done: anyio.Event | None = None
        self.member: Membership = membership(self)

    # ------------------------------------------------------------------ what the client reads
    @property
    def generation_id(self) -> int:
        return self.member.generation_id

    @property
    def member_id(self) -> str:
        return self.member.member_id

    @property
    def fatal_error(self) -> errors.KafkaError | None:
        return self.member.fatal_error

    @property
    def rebalance_protocol(self) -> str:
        return self.member.rebalance_protocol

    def subscription(self) -> frozenset[str]:
        return frozenset(self._subscription() or ())

    def clock(self) -> float:
        return self.cluster.clock()

    # ------------------------------------------------------------------ what the client tells
    def notify(self) -> None:
        """Something changed (an answer, a timer, a subscription): both loops look again."""
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def request_rejoin(self, reason: str) -> None:
        """The subscription changed (regex match, subscribe()): tell the coordinator."""
        self.member.request_rejoin(reason)
        self.notify()

    def poll_happened(self, now_ms: float) -> None:
        """The application polled (``max_poll_interval_ms`` bookkeeping); after a poll timeout this rejoins."""
        self.lost_since_poll = frozenset()
        if self.member.poll(now_ms):
            self.notify()

    async def wait_assignment(self) -> None:
        """Wait until the member is stable with its assignment taken (raises the fatal error, if any)."""
        while True:
            changed = self._changed
            self._raise_if_unusable()
            if self.member.stable and not self._record.in_progress:
                return
            await changed.wait()

    def _raise_if_unusable(self) -> None:
        if self.member.fatal_error is not None:
            raise self.member.fatal_error
        if self._closing:
            raise errors.ClientClosedError("group membership is closed")

    # ------------------------------------------------------------------ the background task
    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Membership and heartbeats until ``leave()`` or a fatal error (then ``fatal_error`` is set)."""
        if self._running:
            raise errors.IllegalStateError("GroupSession.run() is already running")
        self._running = True
        self._run_done = anyio.Event()
        now = self.clock()
        self.member.start(now)
        self._record.start(now)       # joining is the first rebalance
        try:
            with anyio.CancelScope() as scope:
                self._run_scope = scope
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._heartbeat_loop, name="akresil-group-heartbeat")
                    task_status.started()
                    await self._membership_loop()
                    tg.cancel_scope.cancel()
        finally:
            self._run_scope = None
            self._running = False
            self._run_done.set()

    async def _wait(self, changed: anyio.Event, until_ms: float | None) -> None:
        if until_ms is None:
            await changed.wait()
            return
        delay = until_ms - self.clock()
        if delay > 0:
            with anyio.move_on_after(delay / 1000.0):
                await changed.wait()

    async def _membership_loop(self) -> None:
        m = self.member
        while not self._closing:
            changed = self._changed
            if m.fatal_error is not None:
                await self._stop_fatal(m.fatal_error)
                return
            now = self.clock()
            step = m.next_step(self.assignment, now)
            if step.idle:
                await self._wait(changed, step.wait_until)
                continue
            self._record.start(now)
            try:
                if step.lose:
                    await self._lose(step.lose)
                elif step.revoke:
                    await self._revoke(step.revoke)
                elif step.join:
                    await m.join(await self.coordinator.get(), self.assignment)
                elif step.assign is not None:
                    await self._assign(step.assign)
                m.applied(step, self.assignment)
            except errors.ClientClosedError:
                return
            except errors.KafkaError as exc:
                if m.fatal_error is None:
                    m.fail(exc)
            self.notify()

    async def _stop_fatal(self, error: errors.KafkaError) -> None:
        log.error("group %s: member stopped: %r", self.group_id, error)
        if not self._fatal_reported:
            self._fatal_reported = True
            self.rebalance_failed(error)
        if self.assignment:
            await self._lose(self.assignment)
        self._assignment_changed()     # wakes a consumer waiting for records: its next call raises the error
        self.notify()

    async def _heartbeat_loop(self) -> None:
        m = self.member
        while not self._closing and m.fatal_error is None:
            changed = self._changed
            now = self.clock()
            if await m.expire(now):
                self.notify()
                continue
            due = m.heartbeat_due_at(now)
            if due is None or due > now:
                await self._wait(changed, m.next_timer_at(now))
                continue
            try:
                coordinator = await self.coordinator.get(m.heartbeat_deadline())
                await m.heartbeat(coordinator)
            except errors.ClientClosedError:
                return
            except errors.KafkaTimeoutError:
                # the next lookup would come after the session ends: wait for the session timer
                await self._wait(changed, m.heartbeat_deadline())
            except errors.KafkaError as exc:
                # a refused login on the reconnect, an authorization failure: fatal for the member, surfaced from
                # the client's next call; never a crash of this task
                m.fail(exc)
                self.notify()
                return

    # ------------------------------------------------------------------ the steps every protocol shares
    async def _lose(self, partitions: frozenset[TopicPartition]) -> None:
        log.warning("group %s: lost %d partition(s) (the membership ended)", self.group_id, len(partitions))
        self.lost_since_poll |= partitions
        self._record.gave_up(partitions, self.clock())
        await self._call(Callback.LOST, partitions)
        self._set_owned(self.assignment - partitions)

    async def _revoke(self, partitions: frozenset[TopicPartition]) -> None:
        """Commit the positions of ``partitions`` (with auto-commit), tell the listener, then give them up."""
        self._record.gave_up(partitions, self.clock())
        if self._positions_for_revoke is not None:
            try:
                positions = self._positions_for_revoke()
                pending = check_offsets({tp: (off, None, None) for tp, off in positions.items() if tp in partitions})
                if pending:
                    self._raise_if_unusable()
                    await self.member.commit(pending, revoking=True)
            except (errors.KafkaError, OSError) as exc:
                log.warning("group %s: commit before revoking %d partition(s) failed: %r", self.group_id,
                            len(partitions), exc)
        await self._call(Callback.REVOKED, partitions)
        self._set_owned(self.assignment - partitions)

    async def _assign(self, assigned: frozenset[TopicPartition]) -> None:
        """Take the new full assignment and tell the listener what it adds: the rebalance is complete."""
        now = self.clock()
        gone = self.assignment - assigned      # only a share group's advisory assignment drops partitions here
        if gone:
            self._record.gave_up(gone, now)
        added = assigned - self.assignment
        self._set_owned(assigned)
        self.notify()
        self.cluster.hooks.emit(REBALANCE, **self._record.complete(self.group_id, self.member.generation_id,
                                                                   assigned, self.clock()))
        await self._call(Callback.ASSIGNED, added, always=True)

    def rebalance_failed(self, error: BaseException) -> None:
        """A rebalance attempt failed (a JoinGroup or SyncGroup error, the member fenced, a fatal error)."""
        self.cluster.hooks.emit(REBALANCE_FAILED, **self._record.failed(self.group_id, error, self.clock()))

    def _set_owned(self, partitions: frozenset[TopicPartition]) -> None:
        if partitions != self.assignment:
            self.assignment = partitions
            self._assignment_changed()

    def _assignment_changed(self) -> None:
        if self._on_assignment_changed is not None:
            try:
                self._on_assignment_changed()
            except Exception:  # noqa: BLE001 - the client's bookkeeping must not stop the membership
                log.exception("group %s: on_assignment_changed failed", self.group_id)

    async def _call(self, callback: Callback, partitions: frozenset[TopicPartition], *, always: bool = False) -> None:
        """The user's listener method for ``callback`` (one dispatcher for every protocol)."""
        if not partitions and not always:
            return
        method = listener_method(self._listener, callback)
        if method is None:
            return
        try:
            await method(set(partitions))
        except Exception:  # noqa: BLE001 - a failing listener must not wedge the group (Java logs it too)
            log.exception("group %s: rebalance listener %s failed", self.group_id, callback.value)

    # ------------------------------------------------------------------ leaving
    async def leave(self) -> None:
        """Close the membership: stop the loops, revoke (committing positions) or lose what is owned, and leave
        the group (the membership decides how; a static classic member keeps its slot, KIP-345)."""
        if self._closing:
            return
        if self._run_scope is not None:
            self._run_scope.cancel()
            if self._run_done is not None:
                with anyio.move_on_after(self.config.request_timeout_ms / 1000.0):
                    await self._run_done.wait()
        m = self.member
        try:
            if self.assignment and m.fatal_error is None:
                if m.may_revoke():
                    await self._revoke(self.assignment)
                else:
                    await self._lose(self.assignment)
            if m.fatal_error is None:
                await m.leave("consumer closing")
        finally:
            self._closing = True
            self.notify()

    # ------------------------------------------------------------------ offsets
    async def commit(self, offsets: CommitOffsets) -> None:
        """OffsetCommit ``{tp: (offset, leader_epoch, metadata)}`` for the member's generation or epoch,
        retried within ``request_timeout_ms``; ``CommitFailedError`` when the group moved on."""
        pending = check_offsets(offsets)
        if not pending:
            return
        self._raise_if_unusable()
        await self.member.commit(pending, revoking=False)

    async def fetch_committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: nothing committed), stable ones (KIP-447)."""
        wanted = list(tps)
        if not wanted:
            return {}
        self._raise_if_unusable()
        return await self.offsets.fetch(wanted)


def warn_poll_expired(group_id: str, max_poll_interval_ms: int | None) -> None:
    """The WARNING every protocol gives when ``max_poll_interval_ms`` passed without a poll and the member leaves."""
    log.warning("group %s: no poll within max_poll_interval_ms=%s; leaving the group until the application polls "
                "again (handle records faster, or raise max_poll_interval_ms)", group_id, max_poll_interval_ms)
