"""The sans-IO group member core: state machine, timers on a fake clock, error tables."""

from __future__ import annotations

import random

import pytest

from akresil import errors
from akresil.core.backoff import ExponentialBackoff
from akresil.core.group_state import (NO_GENERATION, Action, Expiry, Generation, GroupMembership, MemberState,
                                      classify_commit_error, classify_find_coordinator_error,
                                      classify_heartbeat_error, classify_join_error, classify_offset_fetch_error,
                                      classify_sync_error, error_for, find_coordinator_result)
from akresil.errors import ConfigError

E = errors


def make(now: float = 0.0, *, instance: str | None = None, session: int = 10_000, hb: int = 3_000,
         poll: int = 60_000, jitter: float = 0.0) -> GroupMembership:
    backoff = ExponentialBackoff(100, 1_000, jitter=jitter, rng=random.Random(1))
    return GroupMembership(session_timeout_ms=session, heartbeat_interval_ms=hb, max_poll_interval_ms=poll,
                           retry_backoff=backoff, group_instance_id=instance, now=now)


def joined(now: float = 0.0, **kw: object) -> GroupMembership:
    m = make(now, **kw)  # type: ignore[arg-type]
    m.join_sent(now)
    m.join_succeeded(5, "m-1", "range", now)
    m.sync_succeeded(now)
    return m


# ---------------------------------------------------------------------------- construction
@pytest.mark.parametrize("kw, key", [
    ({"session": 0}, "session_timeout_ms"),
    ({"hb": -1}, "heartbeat_interval_ms"),
    ({"poll": 0}, "max_poll_interval_ms"),
    ({"hb": 10_000, "session": 10_000}, "heartbeat_interval_ms"),
    ({"instance": ""}, "group_instance_id"),
])
def test_bad_settings_name_the_key(kw: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        make(**kw)  # type: ignore[arg-type]


def test_new_member_must_join_and_has_no_generation() -> None:
    m = make()
    assert m.state is MemberState.UNJOINED
    assert m.generation == NO_GENERATION
    assert m.rejoin_needed and m.join_due_at(0) == 0
    assert m.heartbeat_due_at(0) is None  # no heartbeats outside a generation


# ---------------------------------------------------------------------------- join / sync
def test_join_flow_states_and_rejoin_flag() -> None:
    m = make()
    reason = m.join_sent(10)
    assert reason == "initial join"
    assert m.state is MemberState.PREPARING_REBALANCE
    assert m.join_due_at(10) is None  # a join is under way
    m.join_succeeded(3, "member-a", "range", 20)
    assert m.state is MemberState.COMPLETING_REBALANCE
    assert m.generation == Generation(3, "member-a", "range")
    assert m.heartbeat_due_at(20) == 20 + 3_000  # heartbeats keep us alive while the leader assigns
    m.sync_succeeded(30)
    assert m.stable and not m.rejoin_needed
    assert m.join_due_at(30) is None


def test_rejoin_requested_during_a_rebalance_survives_its_completion() -> None:
    m = make()
    m.join_sent(0)
    m.request_rejoin("subscription changed")
    m.join_succeeded(1, "m", "range", 0)
    m.sync_succeeded(0)
    assert m.stable and m.rejoin_reason == "subscription changed"
    assert m.join_due_at(1) == 1


def test_member_id_required_keeps_the_given_id_and_rejoins_at_once() -> None:
    m = make()
    m.join_sent(0)
    m.member_id_required("given-id")
    m.rebalance_failed(classify_join_error(E.MemberIdRequiredError.errno), 0)
    assert m.generation.member_id == "given-id" and m.generation.generation_id == -1
    assert m.join_due_at(0) == 0  # no backoff
    with pytest.raises(E.ProtocolError):
        m.member_id_required("")


def test_join_retry_backs_off_exponentially_kip580() -> None:
    m = make()
    for expected in (100, 200, 400):
        m.join_sent(1_000)
        m.rebalance_failed(Action.RETRY, 1_000)
        assert m.join_due_at(1_000) == 1_000 + expected


def test_join_coordinator_error_backs_off_and_rejoins() -> None:
    m = make()
    m.join_sent(0)
    m.rebalance_failed(classify_join_error(E.NotCoordinatorError.errno), 0)
    assert m.rejoin_needed and m.state is MemberState.UNJOINED
    assert m.join_due_at(0) == 100


def test_immediate_rejoins_are_bounded() -> None:
    """REBALANCE_IN_PROGRESS / MEMBER_ID_REQUIRED rejoin at once, but not forever in a tight loop."""
    m = make()
    dues = []
    for _ in range(6):
        m.join_sent(0)
        m.rebalance_failed(Action.RETRY_NOW, 0)
        dues.append(m.join_due_at(0))
    assert dues == [0, 0, 0, 100, 200, 400]
    m.join_sent(0)
    m.join_succeeded(1, "m", "range", 0)
    m.sync_succeeded(0)
    m.request_rejoin("again")
    m.join_sent(0)
    m.rebalance_failed(Action.RETRY_NOW, 0)
    assert m.join_due_at(0) == 0  # a success resets the count


def test_reset_drops_generation_and_member_id() -> None:
    m = joined()
    m.rebalance_failed(Action.RESET, 0)
    assert m.generation == NO_GENERATION and m.state is MemberState.UNJOINED and m.rejoin_needed


def test_illegal_generation_keeps_member_id_unknown_member_drops_it() -> None:
    m = joined()
    member = m.generation.member_id
    sent = m.heartbeat_sent(0)
    assert m.heartbeat_answered(E.IllegalGenerationError.errno, sent, 0) is Action.RESET
    assert m.generation.generation_id == -1 and m.generation.member_id == member and m.rejoin_needed
    m = joined()
    m.rebalance_failed(Action.RESET, 0, code=E.IllegalGenerationError.errno)
    assert m.generation.member_id == member and m.state is MemberState.UNJOINED
    m.rebalance_failed(Action.RESET, 0, code=E.UnknownMemberIdError.errno)
    assert m.generation == NO_GENERATION


def test_fatal_stops_joining_and_heartbeats() -> None:
    m = joined()
    err = E.FencedInstanceIdError("fenced")
    m.rebalance_failed(Action.FATAL, 0, err)
    assert m.fatal is err
    assert m.join_due_at(0) is None and m.heartbeat_due_at(0) is None and m.poll_expires_at() is None
    m.fail(E.UnknownServerError("later"))
    assert m.fatal is err  # the first fatal error sticks


# ---------------------------------------------------------------------------- heartbeats
def test_heartbeat_schedule_follows_sends() -> None:
    m = joined(0)
    assert m.heartbeat_due_at(0) == 3_000
    sent = m.heartbeat_sent(3_000)
    assert m.heartbeat_due_at(3_000) is None  # one in flight at a time
    assert m.heartbeat_answered(0, sent, 3_050) is Action.OK
    assert m.heartbeat_due_at(3_050) == 6_000
    assert m.session_expires_at() == 3_050 + 10_000


def test_heartbeat_retriable_error_backs_off_not_interval() -> None:
    m = joined(0)
    sent = m.heartbeat_sent(3_000)
    assert m.heartbeat_answered(E.CoordinatorLoadInProgressError.errno, sent, 3_010) is Action.RETRY
    assert m.heartbeat_due_at(3_010) == 3_110
    sent = m.heartbeat_sent(3_110)
    assert m.heartbeat_answered(0, sent, 3_120) is Action.OK
    assert m.heartbeat_due_at(3_120) == 3_110 + 3_000


def test_heartbeat_rebalance_in_progress_requests_rejoin_when_stable_only() -> None:
    m = joined(0)
    sent = m.heartbeat_sent(100)
    assert m.heartbeat_answered(E.RebalanceInProgressError.errno, sent, 110) is Action.REJOIN
    assert m.rejoin_needed and m.generation.generation_id == 5  # member keeps its identity
    m2 = make()
    m2.join_sent(0)
    m2.join_succeeded(1, "m", "range", 0)
    sent = m2.heartbeat_sent(10)
    assert m2.heartbeat_answered(E.RebalanceInProgressError.errno, sent, 20) is Action.IGNORE
    assert not m2.rejoin_needed


@pytest.mark.parametrize("code", [E.UnknownMemberIdError.errno, E.IllegalGenerationError.errno])
def test_heartbeat_unknown_member_resets(code: int) -> None:
    m = joined(0)
    sent = m.heartbeat_sent(100)
    assert m.heartbeat_answered(code, sent, 110) is Action.RESET
    assert m.generation.generation_id == -1 and m.state is MemberState.UNJOINED and m.rejoin_needed
    # the coordinator still knows the member after ILLEGAL_GENERATION: the rejoin reuses the id
    assert m.generation.member_id == (sent.member_id if code == E.IllegalGenerationError.errno else "")


def test_heartbeat_fenced_instance_is_fatal() -> None:
    m = joined(0, instance="static-1")
    sent = m.heartbeat_sent(100)
    assert m.heartbeat_answered(E.FencedInstanceIdError.errno, sent, 110) is Action.FATAL
    assert isinstance(m.fatal, E.FencedInstanceIdError)
    assert "heartbeat" in str(m.fatal)


def test_heartbeat_answer_for_an_old_generation_is_ignored() -> None:
    m = joined(0)
    sent = m.heartbeat_sent(100)
    m.join_sent(150)
    m.join_succeeded(6, "m-1", "range", 160)
    assert m.heartbeat_answered(E.IllegalGenerationError.errno, sent, 170) is Action.IGNORE
    assert m.generation.generation_id == 6


def test_heartbeat_not_coordinator_and_transport_failure_retry_after_the_backoff() -> None:
    m = joined(0)
    sent = m.heartbeat_sent(100)
    assert m.heartbeat_answered(E.NotCoordinatorError.errno, sent, 110) is Action.COORDINATOR
    assert m.heartbeat_due_at(110) == 210 and m.stable  # retry backoff (Java fails the heartbeat too)
    m.heartbeat_sent(210)
    m.heartbeat_failed(250)
    assert m.stable  # membership survives a coordinator move
    assert m.heartbeat_due_at(250) == 450  # the second failure in a row: 200 ms, not the interval


# ---------------------------------------------------------------------------- session and poll timers
def test_session_expires_without_successful_heartbeat() -> None:
    m = joined(0)
    assert m.expire(9_999) == []
    assert m.expire(10_000) == [Expiry.SESSION]
    assert m.generation == NO_GENERATION and m.rejoin_needed
    assert m.session_expires_at() is None


def test_failed_heartbeats_do_not_extend_the_session() -> None:
    m = joined(0)
    for t in (3_000, 6_000, 9_000):
        sent = m.heartbeat_sent(t)
        m.heartbeat_answered(E.CoordinatorLoadInProgressError.errno, sent, t + 1)
    assert m.expire(10_000) == [Expiry.SESSION]


def test_poll_timeout_then_rejoin_only_after_poll() -> None:
    m = joined(0, poll=60_000)
    m.poll(1_000)
    assert m.poll_expires_at() == 61_000
    # keep the session alive so only the poll timer matters
    for t in range(3_000, 61_000, 3_000):
        m.heartbeat_answered(0, m.heartbeat_sent(t), t)
    assert m.expire(60_999) == []
    assert m.expire(61_000) == [Expiry.POLL]
    assert m.poll_expired and m.poll_expires_at() is None
    m.left_group("poll timeout")
    assert m.generation == NO_GENERATION and not m.rejoin_needed
    assert m.join_due_at(70_000) is None  # no rejoin before the application polls
    assert m.poll(80_000) is True
    assert m.rejoin_needed and m.join_due_at(80_000) == 80_000
    assert m.poll(80_001) is False


def test_next_timer_is_the_earliest() -> None:
    m = joined(0, session=10_000, hb=3_000, poll=2_000)
    assert m.next_timer_at(0) == 2_000  # poll
    m.poll(1_500)
    assert m.next_timer_at(1_500) == 3_000  # heartbeat
    m.heartbeat_sent(3_000)
    assert m.next_timer_at(3_000) == 3_500  # poll (heartbeat in flight, session at 10 000)
    unjoined = make()
    unjoined.poll(0)
    assert unjoined.next_timer_at(0) == 60_000


# ---------------------------------------------------------------------------- error tables
@pytest.mark.parametrize("cls, action", [
    (None, Action.OK),
    (E.MemberIdRequiredError, Action.RETRY_NOW),
    (E.RebalanceInProgressError, Action.RETRY_NOW),
    (E.CoordinatorLoadInProgressError, Action.RETRY),
    (E.UnknownMemberIdError, Action.RESET),
    (E.IllegalGenerationError, Action.RESET),
    (E.NotCoordinatorError, Action.COORDINATOR),
    (E.CoordinatorNotAvailableError, Action.COORDINATOR),
    (E.FencedInstanceIdError, Action.FATAL),
    (E.InconsistentGroupProtocolError, Action.FATAL),
    (E.InvalidSessionTimeoutError, Action.FATAL),
    (E.GroupAuthorizationFailedError, Action.FATAL),
    (E.GroupMaxSizeReachedError, Action.FATAL),
])
def test_join_errors(cls: type[E.KafkaError] | None, action: Action) -> None:
    assert classify_join_error(0 if cls is None else cls.errno) is action


@pytest.mark.parametrize("cls, action", [
    (E.RebalanceInProgressError, Action.REJOIN),
    (E.UnknownMemberIdError, Action.RESET),
    (E.IllegalGenerationError, Action.RESET),
    (E.NotCoordinatorError, Action.COORDINATOR),
    (E.FencedInstanceIdError, Action.FATAL),
    (E.GroupAuthorizationFailedError, Action.FATAL),
])
def test_sync_errors(cls: type[E.KafkaError], action: Action) -> None:
    assert classify_sync_error(cls.errno) is action


@pytest.mark.parametrize("cls, action", [
    (E.UnknownMemberIdError, Action.RESET),
    (E.IllegalGenerationError, Action.RESET),
    (E.RebalanceInProgressError, Action.REJOIN),
    (E.FencedInstanceIdError, Action.FATAL),
    (E.NotCoordinatorError, Action.COORDINATOR),
    (E.CoordinatorNotAvailableError, Action.COORDINATOR),
    (E.RequestTimedOutError, Action.COORDINATOR),
    (E.CoordinatorLoadInProgressError, Action.RETRY),
    (E.UnknownTopicOrPartitionError, Action.RETRY),
    (E.OffsetMetadataTooLargeError, Action.FAIL),
    (E.InvalidCommitOffsetSizeError, Action.FAIL),
    (E.TopicAuthorizationFailedError, Action.FAIL),
    (E.GroupAuthorizationFailedError, Action.FAIL),
])
def test_commit_errors(cls: type[E.KafkaError], action: Action) -> None:
    assert classify_commit_error(cls.errno) is action


def test_offset_fetch_and_find_coordinator_errors() -> None:
    assert classify_offset_fetch_error(E.UnstableOffsetCommitError.errno) is Action.RETRY
    assert classify_offset_fetch_error(E.NotCoordinatorError.errno) is Action.COORDINATOR
    assert classify_offset_fetch_error(E.GroupAuthorizationFailedError.errno) is Action.FAIL
    assert classify_find_coordinator_error(E.CoordinatorNotAvailableError.errno) is Action.COORDINATOR
    assert classify_find_coordinator_error(E.GroupAuthorizationFailedError.errno) is Action.FATAL
    assert classify_heartbeat_error(E.GroupAuthorizationFailedError.errno, MemberState.STABLE) is Action.FATAL


def test_error_for_names_the_operation() -> None:
    err = error_for(E.NotCoordinatorError.errno, "OffsetCommit t[0] for group g")
    assert isinstance(err, E.NotCoordinatorError)
    assert "OffsetCommit t[0] for group g" in str(err) and "16" in str(err)


def test_find_coordinator_result_both_forms() -> None:
    old = {"error_code": 0, "node_id": 3, "host": "h", "port": 9092}
    assert find_coordinator_result(old, 3, "g") == (0, 3, "h", 9092)
    new = {"coordinators": [{"key": "other", "node_id": 1, "host": "x", "port": 1, "error_code": 0},
                            {"key": "g", "node_id": 2, "host": "y", "port": 2, "error_code": 15}]}
    assert find_coordinator_result(new, 4, "g") == (15, 2, "y", 2)
    with pytest.raises(E.ProtocolError, match="no entry for group 'nope'"):
        find_coordinator_result(new, 4, "nope")
