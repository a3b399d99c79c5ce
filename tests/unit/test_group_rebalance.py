"""Rebalance planning (revoke/lost/assign decisions, leader assignment) and consumer-protocol payloads."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from akresil.core.assignors import (Assignment, CooperativeStickyAssignor, RangeAssignor, Subscription,
                                    encode_generation)
from akresil.core.group_rebalance import (ASSIGNMENT_VERSION, SUBSCRIPTION_VERSION, assignment_body,
                                          leader_assign, parse_assignment, parse_subscription, partition_counts,
                                          plan_assignment, plan_join_prepare, subscription_body)
from akresil.errors import ProtocolError
from akresil.protocol.api import decode_versioned, encode_versioned
from akresil.types import TopicPartition as TP

A0, A1, B0 = TP("a", 0), TP("a", 1), TP("b", 0)


# ---------------------------------------------------------------------------- before joining
def test_eager_prepare_revokes_everything() -> None:
    plan = plan_join_prepare("eager", {A0, B0}, {"a", "b"}, generation_reset=False)
    assert plan.revoke == {A0, B0} and not plan.lost and not plan.keep


def test_cooperative_prepare_revokes_only_unsubscribed_topics() -> None:
    plan = plan_join_prepare("cooperative", {A0, A1, B0}, {"a"}, generation_reset=False)
    assert plan.revoke == {B0} and plan.keep == {A0, A1} and not plan.lost


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
def test_reset_generation_loses_everything_without_revoking(protocol: str) -> None:
    plan = plan_join_prepare(protocol, {A0, B0}, {"a", "b"}, generation_reset=True)  # type: ignore[arg-type]
    assert plan.lost == {A0, B0} and not plan.revoke and not plan.keep


def test_bad_protocol_name() -> None:
    with pytest.raises(ValueError, match="'eager' or 'cooperative'"):
        plan_join_prepare("sticky", set(), set(), generation_reset=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'eager' or 'cooperative'"):
        plan_assignment("sticky", set(), set(), set())  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- after SyncGroup
def test_eager_assignment_adds_all() -> None:
    plan = plan_assignment("eager", set(), [A0, A1], {"a"})
    assert plan.assigned == {A0, A1} and plan.added == {A0, A1} and not plan.revoke and plan.rejoin is None


def test_cooperative_assignment_revokes_dropped_and_rejoins() -> None:
    plan = plan_assignment("cooperative", {A0, A1}, [A0, B0], {"a", "b"})
    assert plan.revoke == {A1} and plan.added == {B0} and plan.assigned == {A0, B0}
    assert plan.rejoin is not None and "cooperative" in plan.rejoin


def test_cooperative_assignment_without_loss_completes() -> None:
    plan = plan_assignment("cooperative", {A0}, [A0, A1], {"a"})
    assert plan.added == {A1} and not plan.revoke and plan.rejoin is None


def test_assignment_outside_subscription_is_filtered_and_rejoins() -> None:
    plan = plan_assignment("eager", set(), [A0, B0], {"a"})
    assert plan.assigned == {A0} and plan.rejoin is not None and "b" in plan.rejoin


@given(owned=st.sets(st.sampled_from([A0, A1, B0, TP("b", 1)])),
       assigned=st.sets(st.sampled_from([A0, A1, B0, TP("b", 1)])))
def test_cooperative_plan_invariants(owned: set[TP], assigned: set[TP]) -> None:
    plan = plan_assignment("cooperative", owned, assigned, {"a", "b"})
    assert plan.assigned == (owned - plan.revoke) | plan.added
    assert not (plan.revoke & plan.assigned) and not (plan.added & owned)
    assert (plan.rejoin is not None) == bool(owned - assigned)


# ---------------------------------------------------------------------------- payloads
def test_subscription_roundtrip_through_wire_bytes() -> None:
    body = subscription_body({"b", "a"}, owned=[A1, A0, B0], generation_id=7, user_data=encode_generation(7),
                             rack_id="r1")
    wire = encode_versioned("ConsumerProtocolSubscription", SUBSCRIPTION_VERSION, body)
    version, decoded = decode_versioned("ConsumerProtocolSubscription", wire)
    sub = parse_subscription(decoded, "static-1")
    assert version == 3
    assert sub.topics == ["a", "b"]
    assert sorted(sub.owned_partitions) == [A0, A1, B0]
    assert sub.generation_id == 7 and sub.rack_id == "r1" and sub.group_instance_id == "static-1"
    assert sub.user_data == encode_generation(7)


def test_subscription_v0_from_an_old_member() -> None:
    wire = encode_versioned("ConsumerProtocolSubscription", 0, {"topics": ["a"], "user_data": None})
    sub = parse_subscription(decode_versioned("ConsumerProtocolSubscription", wire)[1])
    assert sub.topics == ["a"] and sub.owned_partitions == [] and sub.generation_id == -1


def test_assignment_roundtrip() -> None:
    wire = encode_versioned("ConsumerProtocolAssignment", ASSIGNMENT_VERSION,
                            assignment_body(Assignment([B0, A1, A0], b"ud")))
    got = parse_assignment(decode_versioned("ConsumerProtocolAssignment", wire)[1])
    assert sorted(got.partitions) == [A0, A1, B0] and got.user_data == b"ud"


def test_malformed_payloads_raise_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="without topics"):
        parse_subscription({})
    with pytest.raises(ProtocolError, match="malformed topic entry"):
        parse_assignment({"assigned_partitions": [{"topic": "a"}]})
    with pytest.raises(ProtocolError, match="ConsumerProtocolAssignment"):
        parse_assignment({"assigned_partitions": [{"topic": "a", "partitions": [-1]}]})


# ---------------------------------------------------------------------------- leader
def test_leader_assign_range_and_empty_members() -> None:
    subs = {"m1": Subscription(["a"]), "m2": Subscription(["a"]), "m3": Subscription(["zzz"])}
    result = leader_assign(RangeAssignor(), {"a": 3}, subs)
    assert result["m1"].partitions == [A0, A1] and result["m2"].partitions == [TP("a", 2)]
    assert result["m3"].partitions == []  # unknown topic: nothing, but an entry all the same


def test_leader_assign_cooperative_withholds_moving_partitions() -> None:
    subs = {"m1": Subscription(["a"], owned_partitions=[A0, A1], generation_id=3),
            "m2": Subscription(["a"], generation_id=-1)}
    result = leader_assign(CooperativeStickyAssignor(), {"a": 2}, subs)
    assert len(result["m1"].partitions) == 1 and result["m2"].partitions == []


class _Broken:
    name = "broken"
    protocol = "eager"
    supported_protocols = ("eager",)

    def __init__(self, out: dict[str, Assignment]) -> None:
        self.out = out

    def assign(self, counts: object, subs: object) -> dict[str, Assignment]:
        return self.out

    def subscription_user_data(self, topics: object, owned: object) -> None:
        return None

    def on_assignment(self, assignment: object, generation: int) -> None:
        return None


@pytest.mark.parametrize("out, match", [
    ({"ghost": Assignment([A0])}, "non-members"),
    ({"m1": Assignment([A0]), "m2": Assignment([A0])}, "to both"),
    ({"m1": Assignment([TP("a", 9)])}, "does not exist"),
])
def test_leader_assign_rejects_broken_assignor_output(out: dict[str, Assignment], match: str) -> None:
    subs = {"m1": Subscription(["a"]), "m2": Subscription(["a"])}
    with pytest.raises(ValueError, match=match):
        leader_assign(_Broken(out), {"a": 2}, subs)  # type: ignore[arg-type]


def test_partition_counts_skip_unknown_and_empty_topics() -> None:
    assert partition_counts(["a", "b", "c"], {"a": {0: None, 1: None}, "c": {}}) == {"a": 2}
