"""Consumer-group member state (classic protocol), sans-IO: the state machine, its timers, error policy.

``GroupMembership`` is what the Java client splits over ``AbstractCoordinator`` (member state, generation,
rejoin flag) and its ``Heartbeat`` class (heartbeat, session and poll timers); where the coordinator is, is
``net.coordinator.CoordinatorTracker``'s (one lookup path for every group protocol). The
I/O shell (``akresil.net.group_classic``) sends requests and feeds their outcomes here; it asks this object what is
due and sleeps until ``next_timer_at(now)``. Nothing here reads a clock or sleeps: every method takes
``now`` in monotonic milliseconds, so tests drive it with plain numbers.

The error tables (``classify_*``) answer "what does this error code mean for the member": they are the
Java client's handling of each group API's errors, written down as data so it can be tested directly.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from .. import errors
from ..errors import ConfigError, KafkaError
from ..types import TopicPartition, partitions_by_topic
from .backoff import ExponentialBackoff, RetryState

if TYPE_CHECKING:     # the message TypedDicts are for type checkers only
    from ..protocol.messages import (FindCoordinatorRequest, FindCoordinatorResponse, OffsetCommitRequest,
                                     OffsetCommitRequestTopic, OffsetFetchRequest, OffsetFetchResponse,
                                     OffsetFetchResponseTopic, OffsetFetchResponseTopics)

_E = errors


class MemberState(enum.Enum):
    """Java's ``MemberState``: heartbeats flow only in COMPLETING_REBALANCE and STABLE."""

    UNJOINED = "unjoined"                          # no generation (or just reset)
    PREPARING_REBALANCE = "preparing-rebalance"    # JoinGroup sent
    COMPLETING_REBALANCE = "completing-rebalance"  # JoinGroup answered, SyncGroup pending
    STABLE = "stable"                              # SyncGroup answered: the assignment is current


@dataclass(frozen=True, slots=True)
class Generation:
    """The member's identity in one generation of the group."""

    generation_id: int = -1
    member_id: str = ""
    protocol: str | None = None


NO_GENERATION = Generation()


class Action(enum.Enum):
    """What an error code (or a transport failure) asks the member to do."""

    OK = "ok"
    IGNORE = "ignore"                  # stale or harmless: carry on
    RETRY = "retry"                    # same coordinator, after the retry backoff
    RETRY_NOW = "retry-now"            # same request again at once (e.g. MEMBER_ID_REQUIRED)
    COORDINATOR = "coordinator"        # forget the coordinator, rediscover it (KIP-580 backoff), retry
    REJOIN = "rejoin"                  # keep member id and generation, rejoin (REBALANCE_IN_PROGRESS)
    RESET = "reset"                    # generation gone: partitions lost, rejoin as a new member
    FAIL = "fail"                      # this request fails (e.g. commit after a rebalance), member unaffected
    FATAL = "fatal"                    # the member cannot continue (fenced, unauthorized, misconfigured)


_COORDINATOR_CODES = frozenset({_E.CoordinatorNotAvailableError.errno, _E.NotCoordinatorError.errno})
_RESET_CODES = frozenset({_E.UnknownMemberIdError.errno, _E.IllegalGenerationError.errno})
_ILLEGAL_GENERATION = _E.IllegalGenerationError.errno
_FENCED = _E.FencedInstanceIdError.errno
_LOADING = _E.CoordinatorLoadInProgressError.errno
_REBALANCING = _E.RebalanceInProgressError.errno
_FENCED_EPOCH = _E.FencedMemberEpochError.errno


def classify_find_coordinator_error(code: int) -> Action:
    """FindCoordinator: retriable codes back off and ask again; authorization and the like are fatal."""
    if code == 0:
        return Action.OK
    if code in _COORDINATOR_CODES or code == _LOADING or _E.error_for_code(code).retriable:
        return Action.COORDINATOR
    return Action.FATAL


def classify_join_error(code: int) -> Action:
    """JoinGroup (Java's JoinGroupResponseHandler)."""
    if code == 0:
        return Action.OK
    if code == _E.MemberIdRequiredError.errno:
        return Action.RETRY_NOW           # rejoin at once with the member id the coordinator handed out
    if code == _LOADING:
        return Action.RETRY
    if code == _REBALANCING:
        return Action.RETRY_NOW
    if code in _RESET_CODES:
        return Action.RESET
    if code in _COORDINATOR_CODES:
        return Action.COORDINATOR
    return Action.FATAL                   # fenced, inconsistent protocol, bad session timeout, group full, auth


def classify_sync_error(code: int) -> Action:
    """SyncGroup (Java's SyncGroupResponseHandler)."""
    if code == 0:
        return Action.OK
    if code == _REBALANCING:
        return Action.REJOIN
    if code in _RESET_CODES:
        return Action.RESET
    if code in _COORDINATOR_CODES:
        return Action.COORDINATOR
    return Action.FATAL


def classify_heartbeat_error(code: int, state: MemberState | None = None) -> Action:
    """What a heartbeat's error code asks of the member, for all three heartbeat APIs: the classic Heartbeat
    (Java's HeartbeatResponseHandler), ConsumerGroupHeartbeat (KIP-848) and ShareGroupHeartbeat (KIP-932), as
    the Java client's heartbeat managers treat them. One table serves all three because no code means two
    things: ILLEGAL_GENERATION and REBALANCE_IN_PROGRESS only come from the classic API, FENCED_MEMBER_EPOCH only
    from the new ones. RESET: the membership is gone (partitions lost, join anew); REBALANCE_IN_PROGRESS while
    a classic SyncGroup is pending (``state``) is expected (the sync will tell), so it is ignored then."""
    if code == 0:
        return Action.OK
    if code == _REBALANCING:
        return Action.IGNORE if state is MemberState.COMPLETING_REBALANCE else Action.REJOIN
    if code in _RESET_CODES or code == _FENCED_EPOCH:
        return Action.RESET
    if code in _COORDINATOR_CODES:
        return Action.COORDINATOR
    if code == _LOADING or _E.error_for_code(code).retriable:
        return Action.RETRY
    return Action.FATAL


def classify_commit_error(code: int) -> Action:
    """OffsetCommit, per partition (Java's OffsetCommitResponseHandler)."""
    if code == 0:
        return Action.OK
    if code == _FENCED:
        return Action.FATAL
    if code in _RESET_CODES:
        return Action.RESET               # CommitFailedError to the caller, and the member starts over
    if code == _REBALANCING:
        return Action.REJOIN              # CommitFailedError to the caller, and the member rejoins
    if code in _COORDINATOR_CODES or code == _E.RequestTimedOutError.errno:
        return Action.COORDINATOR
    if code == _LOADING or code == _E.UnknownTopicOrPartitionError.errno or _E.error_for_code(code).retriable:
        return Action.RETRY
    return Action.FAIL                    # metadata too large, invalid offset size, topic/group authorization


def classify_offset_fetch_error(code: int) -> Action:
    """OffsetFetch, group level or per partition; UNSTABLE_OFFSET_COMMIT means a transaction is still open on
    the partition: ask again after the backoff."""
    if code == 0:
        return Action.OK
    if code in _COORDINATOR_CODES:
        return Action.COORDINATOR
    if code == _LOADING or code == _E.UnstableOffsetCommitError.errno or _E.error_for_code(code).retriable:
        return Action.RETRY
    return Action.FAIL


def error_for(code: int, context: str) -> KafkaError:
    """The exception for a broker error code, with the group operation that got it in the message."""
    cls = _E.error_for_code(code)
    what = cls.description or cls.__name__
    return cls(f"{context}: {what} (error code {code})")


class Expiry(enum.Enum):
    """Timers that ran out (``GroupMembership.expire``)."""

    SESSION = "session"   # no successful heartbeat for session_timeout_ms: the coordinator evicted us
    POLL = "poll"         # the application did not poll for max_poll_interval_ms: leave the group


class GroupMembership:
    """One member's view of its group: state, generation, rejoin flag and timers.

    Timers (all ms, Java's ``Heartbeat`` semantics):

    - heartbeat: due ``heartbeat_interval_ms`` after the last one was *sent*; after a failed one, after the
      KIP-580 retry backoff instead;
    - session: expires ``session_timeout_ms`` after the last successful heartbeat (or join/sync), while the
      member is in a generation; the coordinator has then evicted us, so the partitions count as lost;
    - poll: expires ``max_poll_interval_ms`` after the last ``poll(now)``; the member then leaves the group
      and rejoins only after the application polls again.
    """

    #: consecutive JoinGroup/SyncGroup retries allowed without backoff (MEMBER_ID_REQUIRED takes one)
    MAX_IMMEDIATE_RETRIES = 3

    def __init__(self, *, session_timeout_ms: int, heartbeat_interval_ms: int, max_poll_interval_ms: int,
                 retry_backoff: ExponentialBackoff, group_instance_id: str | None = None,
                 now: float = 0.0) -> None:
        for name, value in (("session_timeout_ms", session_timeout_ms),
                            ("heartbeat_interval_ms", heartbeat_interval_ms),
                            ("max_poll_interval_ms", max_poll_interval_ms)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{name}: must be a positive number of milliseconds, got {value!r}")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ConfigError("heartbeat_interval_ms: must be lower than session_timeout_ms "
                              f"({heartbeat_interval_ms} >= {session_timeout_ms})")
        if group_instance_id is not None and (not isinstance(group_instance_id, str) or not group_instance_id):
            raise ConfigError(f"group_instance_id: must be a non-empty string or None, got {group_instance_id!r}")
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.group_instance_id = group_instance_id
        self.state = MemberState.UNJOINED
        self.generation = NO_GENERATION
        #: why the member must (re)join; None when it need not. A new member must join.
        self.rejoin_reason: str | None = "initial join"
        #: the poll timer ran out and the member left: no rejoin until the application polls again
        self.poll_expired = False
        self.fatal: KafkaError | None = None
        self._join = RetryState(retry_backoff)
        self._immediate_retries = 0
        self._heartbeat_failures = RetryState(retry_backoff)
        self._last_poll = now
        self._last_heartbeat_sent = now
        self._last_heartbeat_ok = now
        self._heartbeat_in_flight = False

    # ------------------------------------------------------------------ identity
    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def stable(self) -> bool:
        return self.state is MemberState.STABLE

    @property
    def in_generation(self) -> bool:
        """True while heartbeats keep the membership alive (COMPLETING_REBALANCE or STABLE)."""
        return self.state in (MemberState.COMPLETING_REBALANCE, MemberState.STABLE)

    @property
    def rejoin_needed(self) -> bool:
        return self.rejoin_reason is not None

    def request_rejoin(self, reason: str) -> None:
        """Rejoin at the next opportunity; the first reason is kept (it is what the JoinGroup will say)."""
        if self.rejoin_reason is None:
            self.rejoin_reason = reason

    def reset_generation(self, reason: str, *, keep_member_id: bool = False) -> None:
        """Forget the generation (Java's resetStateAndGeneration): whatever the member owned is lost.

        ``keep_member_id`` (ILLEGAL_GENERATION): the coordinator still knows the member id, so the rejoin must
        reuse it; joining as a new member would leave the old id in the group and the coordinator would wait
        for it to rejoin until the rebalance timeout. UNKNOWN_MEMBER_ID and session expiry drop the id."""
        member_id = self.generation.member_id if keep_member_id else ""
        self.generation = Generation(-1, member_id) if member_id else NO_GENERATION
        self.state = MemberState.UNJOINED
        self._heartbeat_in_flight = False
        self.request_rejoin(reason)

    def fail(self, error: KafkaError) -> None:
        """A fatal error: the member stops; every later operation raises ``error``."""
        if self.fatal is None:
            self.fatal = error
        self.state = MemberState.UNJOINED

    # ------------------------------------------------------------------ the coordinator moved
    def coordinator_dead(self, now: float) -> None:
        """NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a lost connection: the shell looks the coordinator up
        again; a heartbeat in flight is forgotten. The membership itself survives if the coordinator is back
        within the session."""
        self._heartbeat_in_flight = False

    # ------------------------------------------------------------------ joining
    def join_due_at(self, now: float) -> float | None:
        """When the member should send JoinGroup: None when it need not (or may not) join now."""
        if self.fatal is not None or self.poll_expired or not self.rejoin_needed:
            return None
        if self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
            return None  # a join is under way
        return self._join.next_allowed_at if self._join.next_allowed_at is not None else now

    def join_sent(self, now: float) -> str:
        """JoinGroup is going out; returns the reason to send with it. The request consumes the rejoin
        flag: a rejoin requested while this rebalance runs (subscription change, cooperative revocation)
        sets it again and is not lost when the rebalance completes."""
        reason = self.rejoin_reason or "rejoin"
        self.rejoin_reason = None
        self.state = MemberState.PREPARING_REBALANCE
        return reason

    def member_id_required(self, member_id: str) -> None:
        """MEMBER_ID_REQUIRED (KIP-394): join again at once with the id the coordinator handed out."""
        if not isinstance(member_id, str) or not member_id:
            raise _E.ProtocolError("JoinGroup answered MEMBER_ID_REQUIRED without a member id")
        self.generation = Generation(self.generation.generation_id, member_id, self.generation.protocol)
        self.state = MemberState.UNJOINED

    def join_succeeded(self, generation_id: int, member_id: str, protocol: str | None, now: float) -> None:
        """JoinGroup answered: heartbeats start (they keep us alive while the leader assigns)."""
        self.generation = Generation(generation_id, member_id, protocol)
        self.state = MemberState.COMPLETING_REBALANCE
        self._join.on_success()
        self._immediate_retries = 0
        self._heartbeat_failures.on_success()
        self._heartbeat_in_flight = False
        self._last_heartbeat_ok = now
        self._last_heartbeat_sent = now

    def sync_succeeded(self, now: float) -> None:
        """SyncGroup answered: the assignment is current; the rebalance is over unless a rejoin was
        requested since JoinGroup went out."""
        self.state = MemberState.STABLE
        self._last_heartbeat_ok = now

    def rebalance_failed(self, action: Action, now: float, error: KafkaError | None = None, *,
                         code: int = 0) -> None:
        """A JoinGroup or SyncGroup attempt failed with ``action`` (from the classify functions) for ``code``."""
        if action is Action.FATAL:
            assert error is not None
            self.fail(error)
            return
        if action is Action.RESET:
            self.reset_generation("member reset by the coordinator", keep_member_id=code == _ILLEGAL_GENERATION)
        else:
            self.state = MemberState.UNJOINED
            self.request_rejoin("rebalance retry")
        if action is Action.COORDINATOR:
            self.coordinator_dead(now)
        # Java backs off before retrying a retriable failure but rejoins at once after MEMBER_ID_REQUIRED,
        # REBALANCE_IN_PROGRESS or a reset. A coordinator that keeps answering those must not turn the
        # member into a busy loop: after a few immediate retries in a row, those back off too.
        immediate = action in (Action.RETRY_NOW, Action.RESET, Action.REJOIN)
        if immediate and self._immediate_retries < self.MAX_IMMEDIATE_RETRIES:
            self._immediate_retries += 1
        else:
            self._join.on_failure(now)

    # ------------------------------------------------------------------ heartbeats
    def heartbeat_due_at(self, now: float) -> float | None:
        """When the next heartbeat should go; None when none should (not in a generation, one already in
        flight, or the member failed). The shell finds the coordinator first if it must."""
        if not self.in_generation or self._heartbeat_in_flight or self.fatal:
            return None
        if self._heartbeat_failures.next_allowed_at is not None:
            return self._heartbeat_failures.next_allowed_at
        return self._last_heartbeat_sent + self.heartbeat_interval_ms

    def heartbeat_sent(self, now: float) -> Generation:
        """Returns the generation the heartbeat speaks for: answers to an older one are ignored."""
        self._last_heartbeat_sent = now
        self._heartbeat_in_flight = True
        return self.generation

    def heartbeat_answered(self, code: int, sent_for: Generation, now: float) -> Action:
        """Apply a heartbeat's error code; returns what it meant (the shell logs FATAL and wakes waiters)."""
        self._heartbeat_in_flight = False
        if sent_for != self.generation:
            return Action.IGNORE          # a rebalance happened since it was sent
        action = classify_heartbeat_error(code, self.state)
        if action is Action.OK or action is Action.IGNORE:
            self._heartbeat_failures.on_success()
            self._last_heartbeat_ok = now
        elif action is Action.REJOIN:
            self._last_heartbeat_ok = now  # the coordinator knows us: the session is alive
            self.request_rejoin("group is rebalancing")
        elif action is Action.RESET:
            self.reset_generation(f"heartbeat: {_E.error_for_code(code).__name__}",
                                  keep_member_id=code == _ILLEGAL_GENERATION)
        elif action is Action.COORDINATOR:
            # Java fails the heartbeat too: the next one goes after the retry backoff, to the node found then
            self._heartbeat_failures.on_failure(now)
            self.coordinator_dead(now)
        elif action is Action.RETRY:
            self._heartbeat_failures.on_failure(now)
        else:
            self.fail(error_for(code, "heartbeat"))
        return action

    def heartbeat_failed(self, now: float) -> None:
        """The heartbeat's connection failed or timed out: rediscover the coordinator, keep the session."""
        self._heartbeat_in_flight = False
        self._heartbeat_failures.on_failure(now)
        self.coordinator_dead(now)

    # ------------------------------------------------------------------ poll and session timers
    def poll(self, now: float) -> bool:
        """The application polled. Returns True when this ends a poll-timeout absence (the member rejoins)."""
        self._last_poll = now
        if self.poll_expired:
            self.poll_expired = False
            self.request_rejoin("application polled again after a poll timeout")
            return True
        return False

    def session_expires_at(self) -> float | None:
        return self._last_heartbeat_ok + self.session_timeout_ms if self.in_generation else None

    def poll_expires_at(self) -> float | None:
        if self.poll_expired or self.fatal is not None:
            return None
        return self._last_poll + self.max_poll_interval_ms

    def expire(self, now: float) -> list[Expiry]:
        """Apply timers that ran out at ``now``.

        Session expiry resets the generation (partitions lost, rejoin). Poll expiry only sets
        ``poll_expired`` (no rejoin until ``poll``): the shell then sends LeaveGroup for a dynamic member,
        which needs the member id, and calls ``left_group``.
        """
        out: list[Expiry] = []
        session = self.session_expires_at()
        if session is not None and now >= session:
            self.reset_generation("session timed out without a successful heartbeat")
            self.coordinator_dead(now)
            out.append(Expiry.SESSION)
        poll = self.poll_expires_at()
        if poll is not None and now >= poll:
            self.poll_expired = True
            out.append(Expiry.POLL)
        return out

    def left_group(self, reason: str) -> None:
        """After LeaveGroup (or instead of it, for a static member): no generation any more."""
        self.generation = NO_GENERATION
        self.state = MemberState.UNJOINED
        self._heartbeat_in_flight = False
        self.rejoin_reason = None if self.poll_expired else reason

    def next_timer_at(self, now: float) -> float | None:
        """The earliest of heartbeat due, session expiry and poll expiry (None: nothing is timed)."""
        times = [t for t in (self.heartbeat_due_at(now), self.session_expires_at(), self.poll_expires_at())
                 if t is not None]
        return min(times) if times else None


# ---------------------------------------------------------------------------- request / response shapes
def find_coordinator_body(key: str, key_type: int = 0) -> Callable[[int], FindCoordinatorRequest]:
    """The FindCoordinator body for ``key`` at a negotiated version (v4+: batched ``coordinator_keys``)."""
    def body(version: int) -> FindCoordinatorRequest:
        if version >= 4:
            return {"key_type": key_type, "coordinator_keys": [key]}
        return {"key": key, "key_type": key_type}
    return body


def find_coordinator_result(response: FindCoordinatorResponse, version: int, group_id: str
                            ) -> tuple[int, int, str, int]:
    """``(error_code, node_id, host, port)`` of a FindCoordinator response in either form (v4+: batched)."""
    if version >= 4:
        for entry in response.get("coordinators") or []:
            if entry.get("key") == group_id:
                return (int(entry["error_code"]), int(entry["node_id"]), str(entry["host"]), int(entry["port"]))
        raise _E.ProtocolError(f"FindCoordinator v{version} response has no entry for group {group_id!r}")
    return (int(response["error_code"]), int(response["node_id"]),
            str(response["host"]), int(response["port"]))


def offset_commit_body(version: int, group_id: str, generation_or_epoch: int, member_id: str,
                       instance_id: str | None, offsets: Mapping[TopicPartition, tuple[int, int, str]]
                       ) -> OffsetCommitRequest:
    """OffsetCommit for ``offsets`` (tp -> offset, leader epoch, metadata): the classic group sends its
    generation, a KIP-848 member its member epoch, in the same field."""
    topics: list[OffsetCommitRequestTopic] = [{"name": topic, "partitions": [
        {"partition_index": p, "committed_offset": offsets[TopicPartition(topic, p)][0],
         "committed_leader_epoch": offsets[TopicPartition(topic, p)][1],
         "committed_metadata": offsets[TopicPartition(topic, p)][2]} for p in parts]}
        for topic, parts in partitions_by_topic(offsets).items()]
    body: OffsetCommitRequest = {"group_id": group_id, "generation_id_or_member_epoch": generation_or_epoch,
                                 "member_id": member_id, "topics": topics}
    if version >= 7:
        body["group_instance_id"] = instance_id
    return body


def offset_fetch_body(version: int, group_id: str, tps: Iterable[TopicPartition]) -> OffsetFetchRequest:
    """OffsetFetch for ``tps``, asking for stable offsets (KIP-447, v7+); v8+ batches groups."""
    by_topic = partitions_by_topic(tps)
    body: OffsetFetchRequest = (
        {"groups": [{"group_id": group_id, "topics": [{"name": t, "partition_indexes": ps}
                                                      for t, ps in by_topic.items()]}]} if version >= 8
        else {"group_id": group_id, "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]})
    if version >= 7:
        body["require_stable"] = True
    return body


def read_offset_fetch(version: int, response: OffsetFetchResponse, group_id: str, wanted: set[TopicPartition]
                      ) -> tuple[dict[TopicPartition, int | None], list[tuple[int, KafkaError]]]:
    """The committed offsets an OffsetFetch answer gives for ``wanted`` (None: nothing committed, or a partition
    the coordinator does not know, as Java reads it) and its ``(code, error)`` failures: the group's own error
    alone, or each partition's (``settle_offset_fetch_errors`` classifies them)."""
    topics: Sequence[OffsetFetchResponseTopic | OffsetFetchResponseTopics]
    if version >= 8:
        groups = [g for g in response.get("groups") or () if g.get("group_id") == group_id]
        if not groups:
            raise errors.ProtocolError(f"OffsetFetch v{version} response lacks group {group_id!r}")
        group_code, topics = int(groups[0].get("error_code", 0)), groups[0].get("topics") or ()
    else:
        group_code, topics = int(response.get("error_code", 0)), response.get("topics") or ()
    if group_code:
        return {}, [(group_code, error_for(group_code, f"OffsetFetch for group {group_id}"))]
    found: dict[TopicPartition, int | None] = {}
    failed: list[tuple[int, KafkaError]] = []
    for topic in topics:
        for part in topic.get("partitions") or ():
            tp = TopicPartition(topic["name"], int(part["partition_index"]))
            if tp not in wanted:
                continue
            code = int(part["error_code"])
            if code == 0:
                offset = int(part["committed_offset"])
                found[tp] = offset if offset >= 0 else None
            elif code == errors.UnknownTopicOrPartitionError.errno:
                found[tp] = None
            else:
                failed.append((code, error_for(code, f"OffsetFetch {tp.topic}[{tp.partition}] for group {group_id}")))
    return found, failed


def settle_offset_fetch_errors(failed: Iterable[tuple[int, KafkaError]],
                               coordinator_lost: Callable[[KafkaError], None]) -> KafkaError | None:
    """Raise the first OffsetFetch error that retrying cannot mend; tell ``coordinator_lost`` about those that
    need another coordinator; return the last retriable one (None: none)."""
    last: KafkaError | None = None
    for code, error in failed:
        action = classify_offset_fetch_error(code)
        if action is Action.COORDINATOR:
            coordinator_lost(error)
        elif action is not Action.RETRY:
            raise error
        last = error
    return last
