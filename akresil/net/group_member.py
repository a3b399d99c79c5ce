"""The group seam: what ``Consumer`` needs from a group member, whichever protocol runs it.

``GroupMember`` is the interface both memberships implement: the classic coordinator (``net.group``,
JoinGroup/SyncGroup) and the KIP-848 member (``net.group_consumer_protocol``, ConsumerGroupHeartbeat). The
consumer is typed against it, so a capability one protocol lacks is a type error, not an AttributeError at
the first exactly-once commit.

``GroupOffsets`` is the one OffsetCommit / OffsetFetch path of both: it finds the coordinator through the
member, sends on the coordinator's own connection (``coordinator_lane``), retries within ``request_timeout_ms``
(KIP-580 backoff) and tells the member when the coordinator moved. What an OffsetCommit error means for the
membership (a classic generation that moved on, a KIP-848 epoch that is stale or fenced) is the member's
``judge``; the request and response shapes are ``core.group_state``'s.
"""

from __future__ import annotations

from typing import Awaitable, Callable, Iterable, Mapping, Protocol

import anyio

from .. import errors
from ..core.backoff import ExponentialBackoff, RetryState
from ..core.group_state import (Action, classify_commit_error, error_for, offset_commit_body, offset_fetch_body,
                                read_offset_fetch, settle_offset_fetch_errors)
from ..protocol.api import ApiKey
from ..types import TopicPartition
from .cluster import Cluster, coordinator_lane

__all__ = ["GroupMember", "GroupOffsets", "RebalanceListener", "CommitOffsets"]

#: offsets to commit: ``{tp: (offset, leader_epoch or None, metadata or None)}``
CommitOffsets = Mapping[TopicPartition, tuple[int, int | None, str | None]]
_TRANSPORT_ERRORS = (errors.KafkaConnectionError, errors.RequestTimeoutError)


class RebalanceListener(Protocol):
    """Callbacks around a rebalance; every method is optional and async (Java's ConsumerRebalanceListener).

    - ``on_partitions_revoked(revoked)``: before partitions are given up, after their positions were
      committed (``committed_offsets_for_revoke``). Eager: everything owned, before joining; cooperative and
      KIP-848: only what moves elsewhere. Not called with an empty set.
    - ``on_partitions_assigned(assigned)``: after every completed rebalance, with the partitions *added*
      (cooperative: possibly empty).
    - ``on_partitions_lost(lost)``: the membership ended under us (session expiry, fencing, a poll timeout):
      another member may already own them, so nothing is committed. Without this method,
      ``on_partitions_revoked`` is called instead, as in Java.
    """

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None: ...


class GroupMember(Protocol):
    """One consumer's membership in its group, whichever group protocol runs it."""

    group_id: str

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the member owns now."""
        ...

    @property
    def generation_id(self) -> int:
        """The classic generation, or the KIP-848 member epoch: what OffsetCommit and TxnOffsetCommit carry
        (-1 / 0 while not a member)."""
        ...

    @property
    def member_id(self) -> str: ...

    @property
    def fatal_error(self) -> errors.KafkaError | None: ...

    @property
    def rebalance_protocol(self) -> str:
        """``eager`` / ``cooperative`` (classic) or ``consumer`` (KIP-848)."""
        ...

    async def run(self) -> None:
        """Membership (join, heartbeats, assignment) until ``leave``; raises the member's fatal error."""
        ...

    def request_rejoin(self, reason: str) -> None:
        """The subscription changed: tell the coordinator."""
        ...

    def poll_happened(self, now_ms: float) -> None:
        """The application polled (``max_poll_interval_ms``): after a poll timeout the member joins again."""
        ...

    async def commit(self, offsets: CommitOffsets) -> None:
        """OffsetCommit for the member's generation or epoch; ``CommitFailedError`` when the group moved on."""
        ...

    async def fetch_committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: nothing committed), stable ones (KIP-447)."""
        ...

    async def leave(self) -> None:
        """Revoke (committing with auto-commit) or lose what is owned, then leave the group."""
        ...


#: what a member says about one partition's OffsetCommit error: raise to stop the commit, return to retry it
CommitJudge = Callable[[int, errors.KafkaError], None]
#: how a member waits before the next commit attempt (``delay`` ms; ``cause`` is the last error)
CommitWait = Callable[[BaseException | None, float], Awaitable[None]]


async def _sleep(cause: BaseException | None, delay_ms: float) -> None:
    await anyio.sleep(delay_ms / 1000.0)


class GroupOffsets:
    """OffsetCommit / OffsetFetch for one group, retried within ``request_timeout_ms``.

    ``coordinator(deadline_ms)`` gives the coordinator's node id (finding it if needed, raising past the
    deadline); ``coordinator_lost(why)`` is told when a request learnt it moved (NOT_COORDINATOR,
    COORDINATOR_NOT_AVAILABLE, a lost connection)."""

    def __init__(self, cluster: Cluster, group_id: str, *, request_timeout_ms: float, backoff: ExponentialBackoff,
                 coordinator: Callable[[float], Awaitable[int]],
                 coordinator_lost: Callable[[BaseException], None]) -> None:
        self._cluster = cluster
        self.group_id = group_id
        self._timeout_ms = request_timeout_ms
        self._backoff = backoff
        self._coordinator = coordinator
        self._coordinator_lost = coordinator_lost

    async def commit(self, pending: dict[TopicPartition, tuple[int, int, str]], *,
                     identity: Callable[[], tuple[int, str]], instance_id: str | None, judge: CommitJudge,
                     wait: CommitWait = _sleep) -> None:
        """Commit ``pending`` (emptied as partitions succeed). ``identity()`` gives the generation or epoch and
        member id for each attempt (it may raise when the member cannot commit now)."""
        deadline = self._cluster.clock() + self._timeout_ms
        retry = RetryState(self._backoff)
        last: BaseException | None = None
        while pending:
            coordinator = await self._coordinator(deadline)
            generation, member_id = identity()
            try:
                _, response = await self._cluster.request(
                    coordinator_lane(coordinator), ApiKey.OFFSET_COMMIT, lambda v: offset_commit_body(
                        v, self.group_id, generation, member_id, instance_id, pending))
            except _TRANSPORT_ERRORS as exc:
                self._coordinator_lost(exc)
                last = exc
            else:
                last = self._commit_response(response, pending, judge)
            if pending:
                delay = retry.on_failure(self._cluster.clock())
                if self._cluster.clock() + delay > deadline:
                    raise errors.KafkaTimeoutError(
                        f"group {self.group_id}: commit of {len(pending)} partition(s) not done within "
                        f"request_timeout_ms={self._timeout_ms:.0f}: {last!r}") from last
                await wait(last, delay)

    def _commit_response(self, response: Mapping[str, object], pending: dict[TopicPartition, tuple[int, int, str]],
                         judge: CommitJudge) -> BaseException | None:
        """Drop committed partitions from ``pending``; the member judges each error (raising what must not be
        retried); returns the last retriable error."""
        last: BaseException | None = None
        topics = response.get("topics") or ()
        assert isinstance(topics, list)
        for topic in topics:
            for part in topic.get("partitions") or ():
                tp = TopicPartition(topic["name"], int(part["partition_index"]))
                code = int(part["error_code"])
                if code == 0:
                    pending.pop(tp, None)
                    continue
                error = error_for(code, f"OffsetCommit {tp.topic}[{tp.partition}] for group {self.group_id}")
                judge(code, error)
                if classify_commit_error(code) is Action.COORDINATOR:
                    self._coordinator_lost(error)
                last = error
        return last

    async def fetch(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """OffsetFetch v1-v9 asking for stable offsets (KIP-447): pending transactional commits are waited out."""
        wanted = list(dict.fromkeys(tps))
        if not wanted:
            return {}
        deadline = self._cluster.clock() + self._timeout_ms
        retry = RetryState(self._backoff)
        result: dict[TopicPartition, int | None] = {}
        pending = list(wanted)
        last: BaseException | None = None
        while pending:
            coordinator = await self._coordinator(deadline)
            asked = pending
            try:
                version, response = await self._cluster.request(
                    coordinator_lane(coordinator), ApiKey.OFFSET_FETCH, lambda v: offset_fetch_body(v, self.group_id, asked))
            except _TRANSPORT_ERRORS as exc:
                self._coordinator_lost(exc)
                last = exc
            else:
                found, failed = read_offset_fetch(version, response, self.group_id, set(asked))
                result.update(found)
                last = settle_offset_fetch_errors(failed, self._coordinator_lost)
            pending = [tp for tp in pending if tp not in result]
            if pending:
                delay = retry.on_failure(self._cluster.clock())
                if self._cluster.clock() + delay > deadline:
                    raise errors.KafkaTimeoutError(
                        f"group {self.group_id}: committed offsets not fetched within "
                        f"request_timeout_ms={self._timeout_ms:.0f}: {last!r}") from last
                await anyio.sleep(delay / 1000.0)
        return {tp: result[tp] for tp in wanted}
