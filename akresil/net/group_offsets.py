"""The one OffsetCommit / OffsetFetch path of a consumer group, whatever speaks for the commit.

``GroupOffsets`` commits and fetches a group's offsets on the coordinator's group connection (the cluster
picks it from the API key: ``net.cluster.lane_of``), retrying within ``request_timeout_ms`` (KIP-580 backoff) and telling the
``CoordinatorTracker`` when the coordinator moved. Who commits differs only in what each attempt carries and
what an error means: a group member (``net.group_session.GroupSession``) passes its generation or member epoch
and its protocol's ``judge``; a consumer with manual assignment commits as no member (generation -1, no member
id), with ``judge_without_membership``. The request and response shapes are ``core.group_state``'s.
"""

from __future__ import annotations

from typing import Awaitable, Callable, Iterable, Mapping

import anyio

from .. import errors
from ..core.backoff import ExponentialBackoff, RetryState
from ..core.group_state import (Action, classify_commit_error, error_for, offset_commit_body, offset_fetch_body,
                                read_offset_fetch, settle_offset_fetch_errors)
from ..protocol.api import ApiKey
from ..types import TopicPartition
from .cluster import Cluster
from .coordinator import CoordinatorTracker

__all__ = ["GroupOffsets", "CommitOffsets", "PendingOffsets", "check_offsets", "check_tp",
           "judge_without_membership"]

#: offsets to commit: ``{tp: (offset, leader_epoch or None, metadata or None)}``
CommitOffsets = Mapping[TopicPartition, tuple[int, int | None, str | None]]
#: checked offsets as OffsetCommit carries them: ``{tp: (offset, leader_epoch or -1, metadata or "")}``
PendingOffsets = dict[TopicPartition, tuple[int, int, str]]
#: what a committer says about one partition's OffsetCommit error: raise to stop the commit, return to retry it
CommitJudge = Callable[[int, errors.KafkaError], None]
#: how a committer waits before the next commit attempt (``delay`` ms; ``cause`` is the last error)
CommitWait = Callable[[BaseException | None, float], Awaitable[None]]
_TRANSPORT_ERRORS = (errors.KafkaConnectionError, errors.RequestTimeoutError)


async def _sleep(cause: BaseException | None, delay_ms: float) -> None:
    await anyio.sleep(delay_ms / 1000.0)


def _no_member() -> tuple[int, str]:
    return -1, ""


def judge_without_membership(code: int, error: errors.KafkaError) -> None:
    """OffsetCommit errors for a consumer that is no member (manual assignment): the group's own rebalance
    errors fail the commit (the group has active members using these partitions), transient ones retry."""
    action = classify_commit_error(code)
    if action in (Action.RESET, Action.REJOIN):
        raise errors.CommitFailedError(
            f"commit refused by the group ({type(error).__name__}): a consumer without a subscription commits as "
            "no member, and the group has members of its own") from error
    if action in (Action.FATAL, Action.FAIL):
        raise error


class GroupOffsets:
    """OffsetCommit / OffsetFetch for one group through its ``CoordinatorTracker``, retried within
    ``request_timeout_ms``."""

    def __init__(self, cluster: Cluster, coordinator: CoordinatorTracker, *, request_timeout_ms: float,
                 backoff: ExponentialBackoff) -> None:
        self._cluster = cluster
        self.coordinator = coordinator
        self.group_id = coordinator.key
        self._timeout_ms = request_timeout_ms
        self._backoff = backoff

    async def commit(self, pending: PendingOffsets, *, identity: Callable[[], tuple[int, str]] = _no_member,
                     instance_id: str | None = None, judge: CommitJudge = judge_without_membership,
                     wait: CommitWait = _sleep) -> None:
        """Commit ``pending`` (emptied as partitions succeed). ``identity()`` gives the generation or epoch and
        member id for each attempt (it may raise when the member cannot commit now); the defaults commit as no
        member."""
        deadline = self._cluster.clock() + self._timeout_ms
        retry = RetryState(self._backoff)
        last: BaseException | None = None
        while pending:
            coordinator = await self.coordinator.get(deadline)
            generation, member_id = identity()
            try:
                _, response = await self._cluster.request(
                    coordinator, ApiKey.OFFSET_COMMIT, lambda v: offset_commit_body(
                        v, self.group_id, generation, member_id, instance_id, pending))
            except _TRANSPORT_ERRORS as exc:
                self.coordinator.lost(exc)
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

    def _commit_response(self, response: Mapping[str, object], pending: PendingOffsets,
                         judge: CommitJudge) -> BaseException | None:
        """Drop committed partitions from ``pending``; the committer judges each error (raising what must not be
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
                    self.coordinator.lost(error)
                last = error
        return last

    async def fetch(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: nothing committed); OffsetFetch v1-v9 asking for stable offsets
        (KIP-447): pending transactional commits are waited out."""
        wanted = list(dict.fromkeys(check_tp(tp) for tp in tps))
        if not wanted:
            return {}
        deadline = self._cluster.clock() + self._timeout_ms
        retry = RetryState(self._backoff)
        result: dict[TopicPartition, int | None] = {}
        pending = list(wanted)
        last: BaseException | None = None
        while pending:
            coordinator = await self.coordinator.get(deadline)
            asked = pending
            try:
                version, response = await self._cluster.request(
                    coordinator, ApiKey.OFFSET_FETCH,
                    lambda v: offset_fetch_body(v, self.group_id, asked))
            except _TRANSPORT_ERRORS as exc:
                self.coordinator.lost(exc)
                last = exc
            else:
                found, failed = read_offset_fetch(version, response, self.group_id, set(asked))
                result.update(found)
                last = settle_offset_fetch_errors(failed, self.coordinator.lost)
            pending = [tp for tp in pending if tp not in result]
            if pending:
                delay = retry.on_failure(self._cluster.clock())
                if self._cluster.clock() + delay > deadline:
                    raise errors.KafkaTimeoutError(
                        f"group {self.group_id}: committed offsets not fetched within "
                        f"request_timeout_ms={self._timeout_ms:.0f}: {last!r}") from last
                await anyio.sleep(delay / 1000.0)
        return {tp: result[tp] for tp in wanted}


# ---------------------------------------------------------------------------- input checks
def check_tp(tp: object) -> TopicPartition:
    if not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str) or not tp[0] \
            or isinstance(tp[1], bool) or not isinstance(tp[1], int) or tp[1] < 0:
        raise ValueError(f"expected TopicPartition(topic, partition >= 0), got {tp!r}")
    return TopicPartition(tp[0], tp[1])


def check_offsets(offsets: CommitOffsets) -> PendingOffsets:
    """``offsets`` checked and in OffsetCommit's form (leader epoch -1 and metadata "" when not given)."""
    out: PendingOffsets = {}
    for tp, value in offsets.items():
        tp = check_tp(tp)
        if not isinstance(value, tuple) or len(value) != 3:
            raise ValueError(f"commit {tp}: expected (offset, leader_epoch, metadata), got {value!r}")
        offset, epoch, metadata = value
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"commit {tp}: offset must be an int >= 0, got {offset!r}")
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int)):
            raise ValueError(f"commit {tp}: leader_epoch must be an int or None, got {epoch!r}")
        if metadata is not None and not isinstance(metadata, str):
            raise ValueError(f"commit {tp}: metadata must be a str or None, got {metadata!r}")
        out[tp] = (offset, -1 if epoch is None else epoch, metadata or "")
    return out
