"""ConsumerMembership (KIP-848): heartbeat fields and reconciliation, driven by plain calls and a fake clock."""

from __future__ import annotations

import random
from typing import Any

from akresil import errors
from akresil.core.backoff import ExponentialBackoff
from akresil.core.consumer_membership import ConsumerMembership
from akresil.core.group_heartbeat import MemberPhase
from akresil.core.group_state import Action
from akresil.types import TopicPartition

A, B = bytes([1] * 16), bytes([2] * 16)
NAMES = {A: "a", B: "b"}
IDS = {"a": A, "b": B}


def member(**kw: Any) -> ConsumerMembership:
    m = ConsumerMembership("g", backoff=ExponentialBackoff(100, 1000, rng=random.Random(0), jitter=0.0),
                           rebalance_timeout_ms=30_000, **kw)
    m.subscribe(frozenset({"a", "b"}), 0)
    return m


def answer(epoch: int, assignment: dict[bytes, list[int]] | None = None, code: int = 0) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "member_id": None,
            "member_epoch": epoch, "heartbeat_interval_ms": 1000,
            "assignment": None if assignment is None else
            {"topic_partitions": [{"topic_id": t, "partitions": ps} for t, ps in assignment.items()]}}


def tps(*pairs: tuple[str, int]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t, p) for t, p in pairs)


def test_join_heartbeat_carries_every_field_later_ones_only_changes() -> None:
    m = member(instance_id="i-1", server_assignor="uniform")
    body = m.build_heartbeat(0)
    assert body == {"group_id": "g", "member_id": m.member_id, "member_epoch": 0, "subscribed_topic_names": ["a", "b"],
                    "subscribed_topic_regex": "", "rack_id": None, "instance_id": "i-1",
                    "rebalance_timeout_ms": 30_000, "server_assignor": "uniform", "topic_partitions": []}
    m.on_response(answer(5), 10)
    body = m.build_heartbeat(1010)
    assert body["member_epoch"] == 5
    assert body["subscribed_topic_names"] is None and body["subscribed_topic_regex"] is None
    assert body["instance_id"] is None and body["rebalance_timeout_ms"] == -1 and body["topic_partitions"] is None


def test_revocations_come_before_assignments_and_each_step_is_reported_at_once() -> None:
    m = member()
    m.build_heartbeat(0)
    m.on_response(answer(1, {A: [0, 1], B: [0]}), 10)
    step = m.reconcile_step(NAMES.get)
    assert step.revoke == frozenset() and step.assign == tps(("a", 0), ("a", 1), ("b", 0))
    m.set_owned(step.assign, IDS.get, 20)
    assert m.heartbeat_due_at(20) == 20                   # the coordinator waits to hear what we own
    body = m.build_heartbeat(20)
    assert body["topic_partitions"] == [{"topic_id": A, "partitions": [0, 1]}, {"topic_id": B, "partitions": [0]}]
    m.on_response(answer(1), 30)
    # a new member joined: the target shrinks and grows in one answer; revoke first, assign after
    m.build_heartbeat(1030)
    m.on_response(answer(2, {A: [0, 2]}), 1040)
    step = m.reconcile_step(NAMES.get)
    assert step.revoke == tps(("a", 1), ("b", 0)) and step.assign == frozenset()
    m.set_owned(m.owned - step.revoke, IDS.get, 1050)
    step = m.reconcile_step(NAMES.get)
    assert step.revoke == frozenset() and step.assign == tps(("a", 2))
    m.set_owned(m.owned | step.assign, IDS.get, 1060)
    assert m.build_heartbeat(1060)["topic_partitions"] == [{"topic_id": A, "partitions": [0, 2]}]


def test_unknown_topic_ids_wait_for_metadata() -> None:
    m = member()
    m.build_heartbeat(0)
    m.on_response(answer(1, {A: [0], B: [3]}), 10)
    step = m.reconcile_step({A: "a"}.get)
    assert step.assign == tps(("a", 0)) and step.unresolved == frozenset({B})


def test_fencing_loses_everything_and_rejoins_at_epoch_zero() -> None:
    m = member()
    m.build_heartbeat(0)
    m.on_response(answer(1, {A: [0]}), 10)
    m.set_owned(tps(("a", 0)), IDS.get, 20)
    m.build_heartbeat(20)
    assert m.on_response(answer(1, code=errors.FencedMemberEpochError.errno), 30) is Action.RESET
    assert m.member_epoch == 0 and m.target == {}
    assert m.lose_all() == tps(("a", 0)) and m.owned == frozenset()
    body = m.build_heartbeat(30)
    assert body["member_epoch"] == 0 and body["topic_partitions"] == [] and body["subscribed_topic_names"] == ["a", "b"]


def test_unreported_ownership_is_resent_after_a_failed_heartbeat() -> None:
    m = member()
    m.build_heartbeat(0)
    m.on_response(answer(1, {A: [0]}), 10)
    m.set_owned(tps(("a", 0)), IDS.get, 20)
    assert m.build_heartbeat(20)["topic_partitions"] is not None
    m.on_failure(30)                                      # lost on the way: still not reported
    assert m.build_heartbeat(200)["topic_partitions"] == [{"topic_id": A, "partitions": [0]}]
    m.on_response(answer(1), 210)
    assert m.build_heartbeat(1210)["topic_partitions"] is None


def test_static_member_leaves_with_epoch_minus_two() -> None:
    static = member(instance_id="i-1")
    assert static.leave_body()["member_epoch"] == -2
    dynamic = member()
    assert dynamic.leave_body()["member_epoch"] == -1


def test_poll_timer_leaves_with_epoch_minus_one_and_the_next_poll_joins_at_epoch_zero() -> None:
    m = ConsumerMembership("g", backoff=ExponentialBackoff(100, 1000, rng=random.Random(0), jitter=0.0),
                           rebalance_timeout_ms=30_000, max_poll_interval_ms=5_000)
    m.subscribe(frozenset({"a"}), 0)
    assert m.poll(0) is False
    m.build_heartbeat(0)
    m.on_response(answer(3, {A: [0]}), 10)
    m.set_owned(tps(("a", 0)), IDS.get, 10)
    assert m.poll_expires_at() == 5_000
    m.poll(4_000)
    assert m.poll_expires_at() == 9_000                   # each poll restarts the timer
    body = m.leave_stale()
    assert body["member_epoch"] == -1 and body["member_id"] == m.member_id
    assert m.phase is MemberPhase.STALE and m.member_epoch == 0 and m.target == {}
    assert m.heartbeat_due_at(20_000) is None and m.poll_expires_at() is None   # silent until a poll
    assert m.poll(20_000) is True                         # the next poll joins again, at once
    assert m.phase is MemberPhase.JOINING and m.heartbeat_due_at(20_000) == 20_000
    rejoin = m.build_heartbeat(20_000)
    assert rejoin["member_epoch"] == 0 and rejoin["subscribed_topic_names"] == ["a"]


def test_a_static_member_leaves_a_poll_timeout_with_epoch_minus_two() -> None:
    m = ConsumerMembership("g", backoff=ExponentialBackoff(100, 1000, rng=random.Random(0), jitter=0.0),
                           rebalance_timeout_ms=30_000, max_poll_interval_ms=5_000, instance_id="i-1")
    assert m.leave_stale()["member_epoch"] == -2


def test_without_max_poll_interval_there_is_no_poll_timer() -> None:
    assert member().poll_expires_at() is None


def test_a_regex_subscription_joins_with_the_regex_and_no_names() -> None:
    """KIP-848 SubscribedTopicRegex: the broker resolves it (and assigns topics created later); the names go empty,
    so a heartbeat carries both or neither (librdkafka's mock insists)."""
    m = ConsumerMembership("g", backoff=ExponentialBackoff(100, 1000, rng=random.Random(0), jitter=0.0),
                           rebalance_timeout_ms=30_000)
    assert m.heartbeat_due_at(0) is None                  # nothing to join with yet
    m.subscribe_regex("orders-.*", 0)
    assert m.heartbeat_due_at(0) == 0
    body = m.build_heartbeat(0)
    assert body["subscribed_topic_regex"] == "orders-.*" and body["subscribed_topic_names"] == []
    m.on_response(answer(3), 10)
    body = m.build_heartbeat(1010)
    assert body["subscribed_topic_regex"] is None and body["subscribed_topic_names"] is None
