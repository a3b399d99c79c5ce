"""describe_consumer_groups over both group protocols and describe_share_groups, against a scripted cluster
(tests/harness/scripted_broker.py): which API each group is asked with, the fallback from ConsumerGroupDescribe
to DescribeGroups (a classic group, a broker without the API), and per-group errors."""

from __future__ import annotations

from typing import Any

import pytest

from akresil import Admin, errors
from akresil.protocol.api import ApiKey
from akresil.types import TopicPartition
from tests.harness.scripted_broker import ScriptedCluster

NOT_FOUND = errors.GroupIdNotFoundError.errno
ORDERS_ID = bytes(range(16))
PAYMENTS_ID = bytes([7] * 16)


def _find(version: int, body: dict[str, Any], ports: dict[int, int]) -> dict[str, Any]:
    keys = body["coordinator_keys"]
    return {"coordinators": [{"key": k, "node_id": 1, "host": "127.0.0.1", "port": ports[1], "error_code": 0}
                             for k in keys]}


def _tps(*parts: tuple[str, bytes, list[int]]) -> dict[str, Any]:
    return {"topic_partitions": [{"topic_id": tid, "topic_name": name, "partitions": ps} for name, tid, ps in parts]}


def _kip848_member(member_id: str, owned: list[int], target: list[int], **extra: Any) -> dict[str, Any]:
    return {"member_id": member_id, "instance_id": None, "rack_id": "r1", "member_epoch": 7,
            "client_id": "c-" + member_id, "client_host": "/10.0.0.1", "subscribed_topic_names": ["orders"],
            "subscribed_topic_regex": None,
            "assignment": _tps(("orders", ORDERS_ID, owned)), "target_assignment": _tps(("orders", ORDERS_ID, target)),
            "member_type": 1, **extra}


def _described(gid: str, code: int = 0, message: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "group_id": gid, "group_state": "Stable" if not code else "",
            "group_epoch": 9, "assignment_epoch": 8, "assignor_name": "uniform", "members": [], **extra}


def _classic(gid: str, state: str = "Stable", code: int = 0, message: str | None = None) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "group_id": gid, "group_state": state,
            "protocol_type": "consumer", "protocol_data": "range", "members": []}


async def test_kip848_groups_by_consumer_group_describe_and_classic_ones_fall_back_in_the_same_round() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.FIND_COORDINATOR:
            return _find(version, body, cluster.ports)
        if key == ApiKey.CONSUMER_GROUP_DESCRIBE:
            out = []
            for gid in body["group_ids"]:
                if gid == "new":
                    out.append(_described(gid, members=[_kip848_member("m1", [0], [0, 1])]))
                else:
                    out.append(_described(gid, NOT_FOUND, f"Group {gid} is not a consumer group."))
            return {"throttle_time_ms": 0, "groups": out}
        assert key == ApiKey.DESCRIBE_GROUPS
        return {"groups": [_classic(g) if g == "old" else _classic(g, "Dead") for g in body["groups"]]}

    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, retry_backoff_ms=10) as admin:
            results = await admin.describe_consumer_groups(["new", "old", "nope"])
    new = results["new"]
    assert (new.group_type, new.protocol_type, new.state, new.assignor) == ("consumer", "consumer", "Stable", "uniform")
    assert (new.group_epoch, new.assignment_epoch, new.coordinator) == (9, 8, 1)
    (m,) = new.members
    assert m.assignment == {TopicPartition("orders", 0)}
    assert m.target_assignment == {TopicPartition("orders", 0), TopicPartition("orders", 1)}
    assert (m.member_epoch, m.rack, m.subscribed_topics, m.member_type) == (7, "r1", ("orders",), "consumer")
    old = results["old"]
    assert (old.group_type, old.protocol, old.group_epoch) == ("classic", "range", None)
    with pytest.raises(errors.GroupIdNotFoundError, match="group 'nope' does not exist"):
        results["nope"]
    # one ConsumerGroupDescribe for all three, one DescribeGroups for the two it did not describe: no retry round
    assert [r.body["group_ids"] for r in cluster.calls(ApiKey.CONSUMER_GROUP_DESCRIBE)] == [["new", "old", "nope"]]
    assert [r.body["groups"] for r in cluster.calls(ApiKey.DESCRIBE_GROUPS)] == [["old", "nope"]]


async def test_a_broker_without_consumer_group_describe_is_asked_with_describe_groups() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.FIND_COORDINATOR:
            return _find(version, body, cluster.ports)
        assert key == ApiKey.DESCRIBE_GROUPS
        return {"groups": [_classic(g) for g in body["groups"]]}

    async with ScriptedCluster(handler, versions={ApiKey.CONSUMER_GROUP_DESCRIBE: None}) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, retry_backoff_ms=10) as admin:
            results = await admin.describe_consumer_groups(["a", "b"])
    assert [results[g].group_type for g in ("a", "b")] == ["classic", "classic"]
    assert [r.body["groups"] for r in cluster.calls(ApiKey.DESCRIBE_GROUPS)] == [["a", "b"]]


async def test_an_answer_without_a_group_epoch_is_no_kip848_description() -> None:
    # Tansu 0.6 answers ConsumerGroupDescribe for a classic group with epochs -1 and no members
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.FIND_COORDINATOR:
            return _find(version, body, cluster.ports)
        if key == ApiKey.CONSUMER_GROUP_DESCRIBE:
            return {"groups": [_described(g, group_epoch=-1, assignment_epoch=-1) for g in body["group_ids"]]}
        return {"groups": [_classic(g) for g in body["groups"]]}

    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, retry_backoff_ms=10) as admin:
            results = await admin.describe_consumer_groups(["t"])
    assert (results["t"].group_type, results["t"].protocol) == ("classic", "range")


async def test_a_group_neither_api_describes_names_both_reasons() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.FIND_COORDINATOR:
            return _find(version, body, cluster.ports)
        if key == ApiKey.CONSUMER_GROUP_DESCRIBE:
            return {"groups": [_described(g, NOT_FOUND, "not a consumer group") for g in body["group_ids"]]}
        return {"groups": [_classic(g, "", NOT_FOUND, "not a classic group") for g in body["groups"]]}

    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, retry_backoff_ms=10) as admin:
            results = await admin.describe_consumer_groups(["s"])
    with pytest.raises(errors.GroupIdNotFoundError,
                       match=r"group 's' does not exist or is not a consumer group \(not a consumer group not a"):
        results["s"]


async def test_share_groups_are_described_with_share_group_describe() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.FIND_COORDINATOR:
            return _find(version, body, cluster.ports)
        assert key == ApiKey.SHARE_GROUP_DESCRIBE
        out = []
        for gid in body["group_ids"]:
            if gid == "sg":
                member = {"member_id": "s1", "rack_id": None, "member_epoch": 3, "client_id": "c", "client_host": "/h",
                          "subscribed_topic_names": ["orders"], "assignment": _tps(("orders", ORDERS_ID, [0, 2]))}
                out.append(_described(gid, assignor_name="simple", members=[member]))
            else:
                out.append(_described(gid, NOT_FOUND, f"Group {gid} not found."))
        return {"throttle_time_ms": 0, "groups": out}

    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, retry_backoff_ms=10) as admin:
            results = await admin.describe_share_groups(["sg", "missing"])
            with pytest.raises(ValueError, match="no group ids"):
                await admin.describe_share_groups([])
    sg = results["sg"]
    assert (sg.group_type, sg.state, sg.assignor) == ("share", "Stable", "simple")
    assert (sg.group_epoch, sg.assignment_epoch) == (9, 8)
    (m,) = sg.members
    assert m.assignment == {TopicPartition("orders", 0), TopicPartition("orders", 2)}
    assert (m.member_epoch, m.target_assignment, m.group_instance_id) == (3, None, None)
    with pytest.raises(errors.GroupIdNotFoundError, match="share group 'missing': Group missing not found"):
        results["missing"]


async def test_a_topic_named_by_id_only_is_named_from_metadata() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.FIND_COORDINATOR:
            return _find(version, body, cluster.ports)
        member = _kip848_member("m1", [0], [0], assignment=_tps(("", PAYMENTS_ID, [0])),
                                target_assignment=_tps(("", PAYMENTS_ID, [0]), ("", ORDERS_ID, [1])))
        return {"groups": [_described(g, members=[member]) for g in body["group_ids"]]}

    # Metadata knows "payments"; ORDERS_ID is known to no one (a topic deleted meanwhile): shown by its id
    async with ScriptedCluster(handler, topics={"payments": [1]}, topic_ids={"payments": PAYMENTS_ID}) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, retry_backoff_ms=10) as admin:
            (m,) = (await admin.describe_consumer_groups(["g"]))["g"].members
    assert m.assignment == {TopicPartition("payments", 0)}
    assert m.target_assignment == {TopicPartition("payments", 0), TopicPartition("AAECAwQFBgcICQoLDA0ODw", 1)}
    assert len(cluster.calls(ApiKey.METADATA)) >= 2      # bootstrap, then the refresh for the unknown id
