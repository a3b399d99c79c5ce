"""HeartbeatMembership (KIP-848 / KIP-932 heartbeats), driven by plain calls and a fake clock."""

from __future__ import annotations

import base64
import random
import string
from typing import Any

import pytest

from akresil import errors
from akresil.core.backoff import ExponentialBackoff
from akresil.core.group_heartbeat import MemberPhase, ShareMembership, new_member_id
from akresil.core.group_state import Action, classify_heartbeat_error

TID = bytes(range(16))


def member(*topics: str) -> ShareMembership:
    m = ShareMembership("g", backoff=ExponentialBackoff(100, 1000, rng=random.Random(0), jitter=0.0))
    if topics:
        m.subscribe(frozenset(topics), 0)
    return m


def answer(epoch: int, *, interval: int = 5000, assignment: Any = None, code: int = 0) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "member_id": None,
            "member_epoch": epoch, "heartbeat_interval_ms": interval, "assignment": assignment}


def test_error_table_of_the_heartbeat_only_protocols() -> None:
    """The one heartbeat error table (core.group_state) read for ConsumerGroupHeartbeat / ShareGroupHeartbeat:
    a fenced or unknown member starts over (RESET), as the classic protocol's unknown member does."""
    assert classify_heartbeat_error(0) is Action.OK
    assert classify_heartbeat_error(errors.NotCoordinatorError.errno) is Action.COORDINATOR
    assert classify_heartbeat_error(errors.CoordinatorNotAvailableError.errno) is Action.COORDINATOR
    assert classify_heartbeat_error(errors.CoordinatorLoadInProgressError.errno) is Action.RETRY
    assert classify_heartbeat_error(errors.UnknownMemberIdError.errno) is Action.RESET
    assert classify_heartbeat_error(errors.FencedMemberEpochError.errno) is Action.RESET
    for fatal in (errors.GroupAuthorizationFailedError, errors.GroupMaxSizeReachedError, errors.InvalidRequestError,
                  errors.UnsupportedAssignorError, errors.UnreleasedInstanceIdError):
        assert classify_heartbeat_error(fatal.errno) is Action.FATAL


def test_a_new_member_id_is_a_random_uuid_in_url_safe_base64() -> None:
    """The form the Java client and librdkafka use (22 characters): a broker keeps the member id with every record a
    share group acquires for the member, and librdkafka's mock spent ~12 % more CPU per round with the 36-character
    form (docs/benchmarks.md, issue 35 item 5)."""
    ids = {new_member_id() for _ in range(2_000)}
    assert len(ids) == 2_000
    for text in ids:
        assert len(text) == 22 and not text.startswith("-")
        assert set(text) <= set(string.ascii_letters + string.digits + "-_")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16
    assert len(member().member_id) == 22
    given = ShareMembership("g", backoff=ExponentialBackoff(100, 1000), member_id="given")
    assert given.member_id == "given"


def test_join_sends_the_subscription_then_only_when_it_changes() -> None:
    m = member()
    m.subscribe(frozenset({"b", "a"}), 0)
    assert m.heartbeat_due_at(0) == 0
    body = m.build_heartbeat(0)
    assert body["member_epoch"] == 0 and body["subscribed_topic_names"] == ["a", "b"]
    assert len(m.member_id) == 22                             # KIP-1082: the client makes its member id
    assert m.heartbeat_due_at(1) is None                      # in flight
    assert m.on_response(answer(3, interval=2000), 10) is Action.OK
    assert m.phase is MemberPhase.STABLE and m.member_epoch == 3
    assert m.heartbeat_due_at(10) == 2010                     # the broker's interval
    assert m.build_heartbeat(2010)["subscribed_topic_names"] is None
    m.on_response(answer(3, interval=2000), 2020)
    m.subscribe(frozenset({"a"}), 2030)
    assert m.heartbeat_due_at(2030) == 2030                   # a new subscription goes at once
    assert m.build_heartbeat(2030)["subscribed_topic_names"] == ["a"]


def test_no_join_heartbeat_without_topics() -> None:
    """Apache Kafka refuses a joining heartbeat (epoch 0) without topics: INVALID_REQUEST "SubscribedTopicNames
    must be set in first request", a fatal error. A member with nothing subscribed waits (as Java's does) until
    subscribe() gives it topics, then joins at once."""
    m = member()
    assert m.heartbeat_due_at(0) is None
    m.subscribe(frozenset(), 5)
    assert m.heartbeat_due_at(5) is None
    m.subscribe(frozenset({"t"}), 10)
    assert m.heartbeat_due_at(10) == 0
    assert m.build_heartbeat(10)["subscribed_topic_names"] == ["t"]


def test_assignment_changes_bump_the_version_and_null_means_unchanged() -> None:
    m = member()
    m.build_heartbeat(0)
    m.on_response(answer(1, assignment={"topic_partitions": [{"topic_id": TID, "partitions": [1, 0]}]}), 10)
    assert m.target == {TID: frozenset({0, 1})} and m.target_version == 1
    m.build_heartbeat(20)
    m.on_response(answer(1, assignment=None), 30)
    assert m.target_version == 1
    m.build_heartbeat(40)
    m.on_response(answer(2, assignment={"topic_partitions": [{"topic_id": TID, "partitions": [0, 1]}]}), 50)
    assert m.target_version == 1                              # same partitions, another order: no change


def test_fenced_member_rejoins_at_epoch_zero_with_its_subscription_and_no_assignment() -> None:
    m = member()
    m.subscribe(frozenset({"a"}), 0)
    m.build_heartbeat(0)
    m.on_response(answer(4, assignment={"topic_partitions": [{"topic_id": TID, "partitions": [0]}]}), 10)
    m.build_heartbeat(5010)
    assert m.on_response(answer(4, code=errors.FencedMemberEpochError.errno), 5020) is Action.RESET
    assert m.member_epoch == 0 and m.target == {} and m.phase is MemberPhase.JOINING
    assert m.heartbeat_due_at(5020) == 5020
    body = m.build_heartbeat(5020)
    assert body["member_epoch"] == 0 and body["subscribed_topic_names"] == ["a"]


def test_coordinator_errors_and_transport_failures_back_off_exponentially() -> None:
    m = member("t")
    m.build_heartbeat(0)
    assert m.on_response(answer(0, code=errors.NotCoordinatorError.errno), 10) is Action.COORDINATOR
    assert m.retry.next_allowed_at == 110
    assert m.heartbeat_due_at(20) == 110
    m.build_heartbeat(110)
    assert m.on_failure(120) is Action.COORDINATOR
    assert m.retry.next_allowed_at == 320                     # 2nd failure: 200 ms
    m.build_heartbeat(320)
    m.on_response(answer(1), 330)
    assert m.retry.failures == 0


def test_fatal_error_stops_heartbeats() -> None:
    m = member()
    m.build_heartbeat(0)
    assert m.on_response(answer(0, code=errors.GroupAuthorizationFailedError.errno), 10) is Action.FATAL
    assert isinstance(m.fatal_error, errors.GroupAuthorizationFailedError)
    assert m.heartbeat_due_at(10) is None


def test_leave_uses_epoch_minus_one() -> None:
    m = member()
    m.build_heartbeat(0)
    m.on_response(answer(2), 10)
    assert m.leave_body()["member_epoch"] == -1
    assert m.heartbeat_due_at(20) is None
    m.on_left()
    assert m.phase is MemberPhase.LEFT


def test_empty_group_id_is_a_config_error() -> None:
    with pytest.raises(errors.ConfigError, match="group_id"):
        ShareMembership("", backoff=ExponentialBackoff(100, 1000))


def test_the_new_group_apis_mute_on_throttle_from_their_first_version() -> None:
    """KIP-219: these APIs came after it, so a throttled answer always means "stay quiet" (the Cluster mutes
    the node through NodeState, as for every other request)."""
    from akresil.core.node_state import should_mute
    from akresil.protocol.api import ApiKey

    for api in (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH,
                ApiKey.SHARE_ACKNOWLEDGE):
        assert should_mute(api, 0) and should_mute(api, 1)
