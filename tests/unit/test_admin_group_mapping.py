"""The mapping of ConsumerGroupDescribe / ShareGroupDescribe answers to GroupDescription (pure functions), and
the codec of the two APIs (a response encoded and decoded at every version akresil knows)."""

from __future__ import annotations

from typing import Any

from akresil.admin import _kip848_group_description, _unnamed_topic_ids, topic_id_text
from akresil.admin_types import GroupDescription, MemberDescription
from akresil.protocol.api import SCHEMA_VERSIONS, ApiKey, decode_response, encode_response
from akresil.types import TopicPartition

A, B = bytes(16), bytes([1] * 16)


def _assignment(*topics: tuple[bytes, str, list[int]]) -> dict[str, Any]:
    return {"topic_partitions": [{"topic_id": tid, "topic_name": name, "partitions": ps} for tid, name, ps in topics]}


def _group(**member: Any) -> dict[str, Any]:
    m = {"member_id": "m", "instance_id": "i-1", "rack_id": None, "member_epoch": 4, "client_id": "c",
         "client_host": "/h", "subscribed_topic_names": ["a", "b"], "subscribed_topic_regex": None,
         "assignment": _assignment((A, "a", [1, 0])), "target_assignment": _assignment((A, "a", [0]), (B, "b", [2])),
         **member}
    return {"error_code": 0, "error_message": None, "group_id": "g", "group_state": "Reconciling", "group_epoch": 5,
            "assignment_epoch": 5, "assignor_name": "range", "members": [m], "authorized_operations": 0}


def test_a_consumer_group_answer_maps_every_field() -> None:
    desc = _kip848_group_description(_group(member_type=0), 3, "consumer", {})
    assert desc == GroupDescription(
        "g", "Reconciling", "consumer", "range", (MemberDescription(
            "m", "i-1", "c", "/h", frozenset({TopicPartition("a", 0), TopicPartition("a", 1)}),
            target_assignment=frozenset({TopicPartition("a", 0), TopicPartition("b", 2)}), member_epoch=4,
            rack=None, subscribed_topics=("a", "b"), subscribed_topic_regex=None, member_type="classic"),),
        3, group_type="consumer", group_epoch=5, assignment_epoch=5)
    assert desc.assignor == "range"


def test_member_type_unknown_or_absent_is_none() -> None:
    assert _kip848_group_description(_group(member_type=-1), 1, "consumer", {}).members[0].member_type is None
    assert _kip848_group_description(_group(), 1, "consumer", {}).members[0].member_type is None


def test_topics_without_a_name_are_named_from_metadata_else_by_their_id() -> None:
    g = _group(assignment=_assignment((A, "", [0])), target_assignment=_assignment((A, "", [0]), (B, "", [1])))
    assert _unnamed_topic_ids([g]) == {A, B}
    assert _unnamed_topic_ids([_group()]) == set()
    m = _kip848_group_description(g, 1, "consumer", {A: "orders"}).members[0]
    assert m.assignment == {TopicPartition("orders", 0)}
    assert m.target_assignment == {TopicPartition("orders", 0), TopicPartition(topic_id_text(B), 1)}
    assert topic_id_text(B) == "AQEBAQEBAQEBAQEBAQEBAQ"       # Kafka's Uuid.toString form


def test_a_share_group_member_has_no_target_assignment_nor_instance_id() -> None:
    share_member = {"member_id": "s", "rack_id": "r", "member_epoch": 2, "client_id": "c", "client_host": "/h",
                    "subscribed_topic_names": ["a"], "assignment": _assignment((A, "a", [0]))}
    g = {**_group(), "members": [share_member]}
    (m,) = _kip848_group_description(g, 1, "share", {}).members
    assert (m.group_instance_id, m.target_assignment, m.rack, m.member_epoch) == (None, None, "r", 2)
    assert m.assignment == {TopicPartition("a", 0)}


def test_classic_descriptions_keep_their_positional_shape() -> None:
    # callers that build or unpack the classic fields keep working: the new fields are keyword-only extras
    m = MemberDescription("m", None, "c", "/h", frozenset())
    d = GroupDescription("g", "Stable", "consumer", "range", (m,), 1)
    assert (d.group_type, d.group_epoch, m.target_assignment, m.member_epoch) == ("classic", None, None, None)


def test_both_describe_apis_round_trip_at_every_version() -> None:
    group = _group(member_type=1)
    for key, body in ((ApiKey.CONSUMER_GROUP_DESCRIBE, group),
                      (ApiKey.SHARE_GROUP_DESCRIBE, {**group, "members": [
                          {k: v for k, v in group["members"][0].items()
                           if k not in ("instance_id", "subscribed_topic_regex", "target_assignment", "member_type")}
                      ]})):
        lo, hi = SCHEMA_VERSIONS[key]
        for version in range(lo, hi + 1):
            frame = encode_response(key, version, 7, {"throttle_time_ms": 0, "groups": [body]})
            decoded = decode_response(key, version, frame[4:], strict=True)
            m = decoded["groups"][0]["members"][0]
            assert m["assignment"]["topic_partitions"][0]["topic_name"] == "a"
            if key == ApiKey.CONSUMER_GROUP_DESCRIBE:     # member type from v1 on (absent before: unknown)
                assert m.get("member_type") == (1 if version >= 1 else None)
                expected = "consumer" if version >= 1 else None
                desc = _kip848_group_description(decoded["groups"][0], 1, "consumer", {})
                assert desc.members[0].member_type == expected
