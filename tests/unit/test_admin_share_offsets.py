"""The KIP-932 share-group admin calls against a scripted cluster (tests/harness/scripted_broker.py): the requests
list/alter/delete_share_group_offsets and delete_share_groups send, how the answers map to per-item results, and
the errors naming the group, partition or topic. Apache Kafka's own answers:
tests/integration/test_admin_share_kafka.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from akresil import Admin, errors
from akresil.admin_types import ShareGroupOffset
from akresil.protocol.api import ApiKey
from akresil.types import TopicPartition
from tests.harness.scripted_broker import ScriptedCluster

NOT_FOUND = errors.GroupIdNotFoundError.errno
NON_EMPTY = errors.NonEmptyGroupError.errno
UNKNOWN_TP = errors.UnknownTopicOrPartitionError.errno
LOADING = errors.CoordinatorLoadInProgressError.errno
ORDERS_ID = bytes(range(16))
PAYMENTS_ID = bytes([7] * 16)


def _find(body: dict[str, Any], ports: dict[int, int]) -> dict[str, Any]:
    return {"coordinators": [{"key": k, "node_id": 1, "host": "127.0.0.1", "port": ports[1], "error_code": 0}
                             for k in body["coordinator_keys"]]}


def _partition(index: int, start: int, lag: int = -1, code: int = 0, message: str | None = None) -> dict[str, Any]:
    return {"partition_index": index, "start_offset": start, "leader_epoch": 4 if start >= 0 else -1, "lag": lag,
            "error_code": code, "error_message": message}


async def _admin_call(handler: Any, call: Any, **cluster: Any) -> tuple[Any, ScriptedCluster]:
    def answer(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any] | None:
        if key == ApiKey.FIND_COORDINATOR:
            return _find(body, scripted.ports)
        return handler(version, key, body)  # type: ignore[no-any-return]

    async with ScriptedCluster(answer, **cluster) as scripted:
        async with Admin(bootstrap_servers=scripted.bootstrap_servers, retry_backoff_ms=10,
                         retry_backoff_max_ms=20) as admin:
            return await call(admin), scripted


async def test_list_share_group_offsets_asks_every_group_at_once_and_maps_each_answer() -> None:
    def handler(version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS
        out = []
        for g in body["groups"]:
            if g["group_id"] == "sg":
                out.append({"group_id": "sg", "error_code": 0, "error_message": None, "topics": [
                    {"topic_name": "orders", "topic_id": ORDERS_ID,
                     "partitions": [_partition(1, 40, lag=2), _partition(0, 17, lag=0), _partition(2, -1)]},
                    # a topic named by its id only: its name comes from metadata
                    {"topic_name": "", "topic_id": PAYMENTS_ID, "partitions": [_partition(0, 5, lag=9)]}]})
            elif g["group_id"] == "denied":
                out.append({"group_id": "denied", "error_code": errors.GroupAuthorizationFailedError.errno,
                            "error_message": "not allowed", "topics": []})
            else:
                out.append({"group_id": g["group_id"], "error_code": 0, "error_message": None, "topics": [
                    {"topic_name": "orders", "topic_id": ORDERS_ID,
                     "partitions": [_partition(0, 3), _partition(1, 0, code=UNKNOWN_TP, message="gone")]}]})
        return {"throttle_time_ms": 0, "groups": out}

    only = [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    results, cluster = await _admin_call(
        handler, lambda a: a.list_share_group_offsets({"sg": None, "denied": None, "some": only}),
        topics={"payments": [1]}, topic_ids={"payments": PAYMENTS_ID})
    assert results["sg"] == {
        TopicPartition("orders", 0): ShareGroupOffset(17, 4, 0),
        TopicPartition("orders", 1): ShareGroupOffset(40, 4, 2),
        TopicPartition("orders", 2): ShareGroupOffset(None, None, None),   # no state yet
        TopicPartition("payments", 0): ShareGroupOffset(5, 4, 9)}
    assert list(results["sg"]) == sorted(results["sg"])
    with pytest.raises(errors.GroupAuthorizationFailedError, match="share group 'denied': not allowed"):
        results["denied"]
    # a partition's error fails its group, naming the partition
    with pytest.raises(errors.UnknownTopicOrPartitionError, match="share group 'some'.*orders-1: gone"):
        results["some"]
    (request,) = cluster.calls(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
    assert request.version == 1
    assert request.body["groups"] == [
        {"group_id": "sg", "topics": None}, {"group_id": "denied", "topics": None},
        {"group_id": "some", "topics": [{"topic_name": "orders", "partitions": [0, 1]}]}]


async def test_a_v0_broker_gives_no_lag_and_a_loading_coordinator_is_asked_again() -> None:
    answers = iter([LOADING, 0])

    def handler(version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        partition = _partition(0, 8)
        del partition["lag"]               # not in v0
        return {"throttle_time_ms": 0, "groups": [{"group_id": "sg", "error_code": next(answers), "error_message": None,
                                                   "topics": [{"topic_name": "orders", "topic_id": ORDERS_ID,
                                                               "partitions": [partition]}]}]}

    results, cluster = await _admin_call(handler, lambda a: a.list_share_group_offsets(["sg"]),
                                         versions={ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 0)})
    assert results["sg"] == {TopicPartition("orders", 0): ShareGroupOffset(8, 4, None)}
    assert [r.version for r in cluster.calls(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)] == [0, 0]


async def test_alter_share_group_offsets_sends_start_offsets_and_reports_each_partition() -> None:
    def handler(version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.ALTER_SHARE_GROUP_OFFSETS
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": [
            {"topic_name": t["topic_name"], "topic_id": ORDERS_ID, "partitions": [
                {"partition_index": p["partition_index"], "error_code": UNKNOWN_TP if p["partition_index"] == 9 else 0,
                 "error_message": "no such partition" if p["partition_index"] == 9 else None}
                for p in t["partitions"]]} for t in body["topics"]]}

    offsets = {TopicPartition("orders", 0): 0, TopicPartition("orders", 9): 5, TopicPartition("payments", 1): 12}
    results, cluster = await _admin_call(handler, lambda a: a.alter_share_group_offsets("sg", offsets))
    assert results.ok == {TopicPartition("orders", 0): None, TopicPartition("payments", 1): None}
    with pytest.raises(errors.UnknownTopicOrPartitionError, match="orders-9 of share group 'sg': no such partition"):
        results[TopicPartition("orders", 9)]
    (request,) = cluster.calls(ApiKey.ALTER_SHARE_GROUP_OFFSETS)
    assert request.body == {"group_id": "sg", "topics": [
        {"topic_name": "orders", "partitions": [{"partition_index": 0, "start_offset": 0},
                                                {"partition_index": 9, "start_offset": 5}]},
        {"topic_name": "payments", "partitions": [{"partition_index": 1, "start_offset": 12}]}]}


async def test_altering_a_group_with_members_fails_every_partition_naming_the_group() -> None:
    def handler(version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": NON_EMPTY, "error_message": "The group is not empty.",
                "responses": []}

    tps = [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    results, cluster = await _admin_call(handler, lambda a: a.alter_share_group_offsets("busy", dict.fromkeys(tps, 0)))
    assert set(results.errors) == set(tps)
    for tp in tps:
        with pytest.raises(errors.NonEmptyGroupError, match="share group 'busy': The group is not empty"):
            results[tp]
    assert len(cluster.calls(ApiKey.ALTER_SHARE_GROUP_OFFSETS)) == 1     # not retried


async def test_a_partition_the_answer_leaves_out_fails_at_once() -> None:
    def handler(version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": [
            {"topic_name": "orders", "topic_id": ORDERS_ID,
             "partitions": [{"partition_index": 0, "error_code": 0, "error_message": None}]}]}

    results, _ = await _admin_call(handler, lambda a: a.alter_share_group_offsets(
        "sg", {TopicPartition("orders", 0): 1, TopicPartition("orders", 1): 1}, timeout_ms=60_000))
    assert results.ok == {TopicPartition("orders", 0): None}
    with pytest.raises(errors.ProtocolError, match="no result for orders-1"):
        results[TopicPartition("orders", 1)]


async def test_delete_share_group_offsets_reports_each_topic() -> None:
    def handler(version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.DELETE_SHARE_GROUP_OFFSETS
        if body["group_id"] == "busy":
            return {"throttle_time_ms": 0, "error_code": NON_EMPTY, "error_message": "The group is not empty.",
                    "responses": []}
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": [
            {"topic_name": t["topic_name"], "topic_id": ORDERS_ID, "error_code": UNKNOWN_TP if t["topic_name"] == "x"
             else 0, "error_message": "There is no offset information to delete." if t["topic_name"] == "x" else None}
            for t in body["topics"]]}

    async def both(admin: Admin) -> tuple[Any, Any]:
        return (await admin.delete_share_group_offsets("sg", ["orders", "x"]),
                await admin.delete_share_group_offsets("busy", ["orders"]))

    (results, busy), cluster = await _admin_call(handler, both)
    assert results.ok == {"orders": None}
    with pytest.raises(errors.UnknownTopicOrPartitionError, match="topic 'x' of share group 'sg': There is no offset"):
        results["x"]
    with pytest.raises(errors.NonEmptyGroupError, match="share group 'busy'"):
        busy["orders"]
    assert [r.body for r in cluster.calls(ApiKey.DELETE_SHARE_GROUP_OFFSETS)] == [
        {"group_id": "sg", "topics": [{"topic_name": "orders"}, {"topic_name": "x"}]},
        {"group_id": "busy", "topics": [{"topic_name": "orders"}]}]


async def test_delete_share_groups_deletes_only_share_groups() -> None:
    """Kafka's DeleteGroups deletes a group of any type: a consumer group named here is left alone."""
    def handler(version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.SHARE_GROUP_DESCRIBE:
            out = []
            for gid in body["group_ids"]:
                code, message = {"orders-app": (NOT_FOUND, f"Group {gid} is not a share group."),
                                 "missing": (NOT_FOUND, f"Group {gid} not found.")}.get(gid, (0, None))
                out.append({"error_code": code, "error_message": message, "group_id": gid,
                            "group_state": "Empty" if not code else "", "group_epoch": 1, "assignment_epoch": 1,
                            "assignor_name": "simple", "members": []})
            return {"throttle_time_ms": 0, "groups": out}
        assert key == ApiKey.DELETE_GROUPS
        return {"throttle_time_ms": 0, "results": [
            {"group_id": g, "error_code": NON_EMPTY if g == "busy" else 0} for g in body["groups_names"]]}

    results, cluster = await _admin_call(handler, lambda a: a.delete_share_groups(
        ["sg", "orders-app", "missing", "busy"]))
    assert results.ok == {"sg": None}
    with pytest.raises(errors.GroupIdNotFoundError, match="share group 'orders-app': Group orders-app is not a share"):
        results["orders-app"]
    with pytest.raises(errors.GroupIdNotFoundError, match="share group 'missing': Group missing not found"):
        results["missing"]
    with pytest.raises(errors.NonEmptyGroupError, match="share group 'busy'"):
        results["busy"]
    assert [r.body["groups_names"] for r in cluster.calls(ApiKey.DELETE_GROUPS)] == [["sg", "busy"]]


async def test_delete_consumer_groups_leaves_a_share_group_alone() -> None:
    """Kafka's DeleteGroups deletes a group of any type: a share group named here by mistake is not deleted."""
    def handler(version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.SHARE_GROUP_DESCRIBE:
            return {"throttle_time_ms": 0, "groups": [
                {"error_code": 0 if gid == "sg" else NOT_FOUND, "error_message": None if gid == "sg" else
                 f"Group {gid} is not a share group.", "group_id": gid, "group_state": "Empty", "group_epoch": 1,
                 "assignment_epoch": 1, "assignor_name": "simple", "members": []} for gid in body["group_ids"]]}
        assert key == ApiKey.DELETE_GROUPS
        return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": 0} for g in body["groups_names"]]}

    results, cluster = await _admin_call(handler, lambda a: a.delete_consumer_groups(["orders-app", "sg"]))
    assert results.ok == {"orders-app": None}
    with pytest.raises(errors.GroupIdNotFoundError, match="group 'sg'.*share group.*delete_share_groups"):
        results["sg"]
    assert [r.body["groups_names"] for r in cluster.calls(ApiKey.DELETE_GROUPS)] == [["orders-app"]]


async def test_delete_consumer_groups_on_a_broker_without_share_groups_deletes_at_once() -> None:
    def handler(version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.DELETE_GROUPS
        return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": 0} for g in body["groups_names"]]}

    results, cluster = await _admin_call(handler, lambda a: a.delete_consumer_groups(["orders-app"]),
                                         versions={ApiKey.SHARE_GROUP_DESCRIBE: None})
    assert results.ok == {"orders-app": None}
    assert cluster.calls(ApiKey.SHARE_GROUP_DESCRIBE) == []


async def test_a_group_either_answer_leaves_out_fails_at_once() -> None:
    def handler(version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.SHARE_GROUP_DESCRIBE:     # "lost" is not in the answer
            return {"throttle_time_ms": 0, "groups": [
                {"error_code": 0, "error_message": None, "group_id": g, "group_state": "Empty", "group_epoch": 1,
                 "assignment_epoch": 1, "assignor_name": "simple", "members": []}
                for g in body["group_ids"] if g != "lost"]}
        return {"throttle_time_ms": 0, "results": []}   # DeleteGroups says nothing of "sg"

    results, _ = await _admin_call(handler, lambda a: a.delete_share_groups(["sg", "lost"], timeout_ms=5_000))
    with pytest.raises(errors.ProtocolError, match="ShareGroupDescribe .*no result for lost"):
        results["lost"]
    with pytest.raises(errors.ProtocolError, match="DeleteGroups .*no result for sg"):
        results["sg"]


async def test_bad_input_is_named_before_anything_is_sent() -> None:
    def handler(version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError(f"nothing should be sent, got API {key}")

    async def calls(admin: Admin) -> None:
        with pytest.raises(ValueError, match="no group ids"):
            await admin.list_share_group_offsets([])
        with pytest.raises(TypeError, match=r"partitions of 'sg'.*TopicPartition"):
            await admin.list_share_group_offsets({"sg": ["orders"]})  # type: ignore[list-item]
        with pytest.raises(ValueError, match="offset for orders-0 must be an int >= 0, got -1"):
            await admin.alter_share_group_offsets("sg", {TopicPartition("orders", 0): -1})
        with pytest.raises(ValueError, match="no partitions"):
            await admin.alter_share_group_offsets("sg", {})
        with pytest.raises(TypeError, match="expected a mapping"):
            await admin.alter_share_group_offsets("sg", [TopicPartition("orders", 0)])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="group_id"):
            await admin.delete_share_group_offsets("", ["orders"])
        with pytest.raises(ValueError, match="no topics"):
            await admin.delete_share_group_offsets("sg", [])
        with pytest.raises(ValueError, match="listed twice"):
            await admin.delete_share_groups(["sg", "sg"])

    await _admin_call(handler, calls)
