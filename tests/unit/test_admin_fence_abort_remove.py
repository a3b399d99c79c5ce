"""fence_producers, abort_transaction and remove_members_from_consumer_group against a scripted cluster
(tests/harness/scripted_broker.py): the requests they send and to which node, how the answers map to per-item
results, what is retried, and the errors naming the transactional id, partition or member. Apache Kafka's own
answers: tests/integration/test_admin_txn_kafka.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from akresil import Admin, errors
from akresil.admin_types import MemberDescription, ProducerIdAndEpoch
from akresil.protocol.api import ApiKey
from akresil.types import TopicPartition
from tests.harness.scripted_broker import ScriptedCluster

CONCURRENT = errors.ConcurrentTransactionsError.errno
TXN_DENIED = errors.TransactionalIdAuthorizationFailedError.errno
NOT_COORDINATOR = errors.NotCoordinatorError.errno
UNKNOWN_MEMBER = errors.UnknownMemberIdError.errno
FENCED_COORDINATOR = errors.TransactionCoordinatorFencedError.errno
TRANSACTION, GROUP = 1, 0


async def _admin_call(handler: Any, call: Any, *, coordinator: int = 1, **cluster: Any
                      ) -> tuple[Any, ScriptedCluster]:
    """``call(admin)`` on a scripted cluster whose FindCoordinator names ``coordinator`` for every key."""
    def answer(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any] | None:
        if key == ApiKey.FIND_COORDINATOR:
            return {"coordinators": [{"key": k, "node_id": coordinator, "host": "127.0.0.1",
                                      "port": scripted.ports[coordinator], "error_code": 0}
                                     for k in body["coordinator_keys"]]}
        return handler(node, version, key, body)  # type: ignore[no-any-return]

    async with ScriptedCluster(answer, **cluster) as scripted:
        async with Admin(bootstrap_servers=scripted.bootstrap_servers, retry_backoff_ms=10,
                         retry_backoff_max_ms=20, request_timeout_ms=12_000) as admin:
            return await call(admin), scripted


# ------------------------------------------------------------------------------------------ fence_producers
async def test_fence_producers_sends_init_producer_id_without_an_epoch_to_each_ids_coordinator() -> None:
    tries: dict[str, int] = {}

    def handler(node: int, version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.INIT_PRODUCER_ID and node == 2
        tid = body["transactional_id"]
        tries[tid] = tries.get(tid, 0) + 1
        if tid == "busy" and tries[tid] < 3:       # the coordinator is still writing the abort: retried
            return {"error_code": CONCURRENT, "producer_id": -1, "producer_epoch": -1}
        if tid == "denied":
            return {"error_code": TXN_DENIED, "producer_id": -1, "producer_epoch": -1}
        return {"error_code": 0, "producer_id": 4000 + len(tid), "producer_epoch": 7}

    results, cluster = await _admin_call(
        handler, lambda a: a.fence_producers(["app-1", "busy", "denied"]), nodes=2, coordinator=2)
    assert results.ok == {"app-1": ProducerIdAndEpoch(4005, 7), "busy": ProducerIdAndEpoch(4004, 7)}
    with pytest.raises(errors.TransactionalIdAuthorizationFailedError, match="transactional id 'denied'"):
        results["denied"]
    assert tries == {"app-1": 1, "busy": 3, "denied": 1}
    finds = cluster.calls(ApiKey.FIND_COORDINATOR)
    assert {k for f in finds for k in f.body["coordinator_keys"]} == {"app-1", "busy", "denied"}
    assert all(f.body["key_type"] == TRANSACTION for f in finds)
    sent = cluster.calls(ApiKey.INIT_PRODUCER_ID)
    # no producer id or epoch: the coordinator treats it as a new instance and bumps the epoch (fencing);
    # the transaction timeout is request_timeout_ms, as Java's fenceProducers
    assert {(r.body["producer_id"], r.body["producer_epoch"], r.body["transaction_timeout_ms"]) for r in sent} == {
        (-1, -1, 12_000)}


async def test_fence_producers_finds_the_coordinator_again_when_it_moved_and_takes_a_timeout() -> None:
    answers = iter([{"error_code": NOT_COORDINATOR, "producer_id": -1, "producer_epoch": -1},
                    {"error_code": 0, "producer_id": 9, "producer_epoch": 1}])

    def handler(node: int, version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        return next(answers)

    results, cluster = await _admin_call(
        handler, lambda a: a.fence_producers(["moved"], transaction_timeout_ms=5000))
    assert results["moved"] == ProducerIdAndEpoch(9, 1)
    assert len(cluster.calls(ApiKey.FIND_COORDINATOR)) == 2
    assert [r.body["transaction_timeout_ms"] for r in cluster.calls(ApiKey.INIT_PRODUCER_ID)] == [5000, 5000]


async def test_fence_producers_refuses_bad_input_naming_it() -> None:
    admin = Admin(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(ValueError, match="fence_producers: no transactional ids given"):
        await admin.fence_producers([])
    with pytest.raises(TypeError, match="wrap it in a list"):
        await admin.fence_producers("app-1")
    with pytest.raises(ValueError, match="transaction_timeout_ms"):
        await admin.fence_producers(["app-1"], transaction_timeout_ms=0)


# ------------------------------------------------------------------------------------------ abort_transaction
async def test_abort_transaction_writes_an_abort_marker_at_the_partitions_leader() -> None:
    def handler(node: int, version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.WRITE_TXN_MARKERS and node == 2
        m = body["markers"][0]
        return {"markers": [{"producer_id": m["producer_id"], "topics": [
            {"name": t["name"], "partitions": [{"partition_index": p, "error_code": 0} for p in t["partition_indexes"]]}
            for t in m["topics"]]}]}

    tp = TopicPartition("orders", 1)
    result, cluster = await _admin_call(handler, lambda a: a.abort_transaction(tp, 1234, 5, -1), nodes=2,
                                        topics={"orders": [1, 2]})
    assert result is None
    (sent,) = cluster.calls(ApiKey.WRITE_TXN_MARKERS)
    assert sent.version == 2
    (marker,) = sent.body["markers"]
    # an abort (transaction_result false); no coordinator epoch recorded yet (-1) goes as 0; the legacy marker
    # version, as Java's abortTransaction sends
    assert marker == {"producer_id": 1234, "producer_epoch": 5, "transaction_result": False,
                      "topics": [{"name": "orders", "partition_indexes": [1]}], "coordinator_epoch": 0,
                      "transaction_version": 0}


async def test_abort_transaction_raises_the_partitions_error_naming_it() -> None:
    def fenced(node: int, version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"markers": [{"producer_id": 1234, "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "error_code": FENCED_COORDINATOR}]}]}]}

    with pytest.raises(errors.TransactionCoordinatorFencedError,
                       match=r"abort of producer 1234 \(epoch 5\) on orders-0"):
        await _admin_call(fenced, lambda a: a.abort_transaction(TopicPartition("orders", 0), 1234, 5, 3),
                          topics={"orders": [1]})

    def other_producer(node: int, version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"markers": [{"producer_id": 99, "topics": []}]}

    with pytest.raises(errors.ProtocolError, match="the answer has no result for orders-0"):
        await _admin_call(other_producer, lambda a: a.abort_transaction(TopicPartition("orders", 0), 1234, 5, 3),
                          topics={"orders": [1]})

    with pytest.raises(errors.UnknownTopicOrPartitionError, match="orders-4"):
        await _admin_call(fenced, lambda a: a.abort_transaction(TopicPartition("orders", 4), 1234, 5, 3),
                          topics={"orders": [1]})


@pytest.mark.parametrize("args, match", [
    ((-1, 0, 0), "producer_id must be an int in 0.."),
    ((1, 40_000, 0), "producer_epoch must be an int in 0..32767"),
    ((1, 0, -2), "coordinator_epoch must be an int in -1.."),
    ((1, "0", 0), "producer_epoch"),
])
async def test_abort_transaction_refuses_bad_input_naming_it(args: tuple[Any, ...], match: str) -> None:
    admin = Admin(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(ValueError, match=match):
        await admin.abort_transaction(TopicPartition("orders", 0), *args)


# ---------------------------------------------------------------------------- remove_members_from_consumer_group
def _leave_answer(body: dict[str, Any], unknown: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    return {"error_code": 0, "members": [
        {"member_id": m["member_id"], "group_instance_id": m["group_instance_id"],
         "error_code": UNKNOWN_MEMBER if (m["group_instance_id"] or m["member_id"]) in unknown else 0}
        for m in body["members"]]}


async def test_remove_members_sends_one_leave_group_naming_static_members_by_instance_id() -> None:
    def handler(node: int, version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.LEAVE_GROUP and body["group_id"] == "g"
        return _leave_answer(body, unknown={"gone"})

    described = MemberDescription("m-2", "host-b", "c", "/h", frozenset())
    results, cluster = await _admin_call(
        handler, lambda a: a.remove_members_from_consumer_group("g", ["host-a", described, "gone"],
                                                                reason="decommissioned"))
    assert results.ok == {"host-a": None, "host-b": None}
    with pytest.raises(errors.UnknownMemberIdError, match="member 'gone' of group 'g'"):
        results["gone"]
    (sent,) = cluster.calls(ApiKey.LEAVE_GROUP)
    assert sent.version == 5
    # a static member is named by its instance id alone (member id unknown), as an admin removal must
    assert sent.body["members"] == [{"member_id": "", "group_instance_id": i, "reason": "decommissioned"}
                                    for i in ("host-a", "host-b", "gone")]
    assert all(f.body["key_type"] == GROUP for f in cluster.calls(ApiKey.FIND_COORDINATOR))


async def test_remove_members_without_a_list_describes_the_group_and_removes_every_member() -> None:
    def handler(node: int, version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.DESCRIBE_GROUPS:
            return {"groups": [{"error_code": 0, "group_id": "g", "group_state": "Stable", "protocol_type": "consumer",
                                "protocol_data": "range", "members": [
                {"member_id": "static-1-abc", "group_instance_id": "static-1", "client_id": "c", "client_host": "/h",
                 "member_metadata": b"", "member_assignment": b""},
                {"member_id": "dyn-xyz", "group_instance_id": None, "client_id": "c", "client_host": "/h",
                 "member_metadata": b"", "member_assignment": b""}]}]}
        assert key == ApiKey.LEAVE_GROUP
        return _leave_answer(body)

    results, cluster = await _admin_call(handler, lambda a: a.remove_members_from_consumer_group("g"),
                                         versions={ApiKey.CONSUMER_GROUP_DESCRIBE: None})
    assert results.ok == {"static-1": None, "dyn-xyz": None}
    (sent,) = cluster.calls(ApiKey.LEAVE_GROUP)
    # the static member by its instance id, the dynamic one by its member id (as Java's removeAll)
    assert [(m["member_id"], m["group_instance_id"]) for m in sent.body["members"]] == [
        ("", "static-1"), ("dyn-xyz", None)]
    assert sent.body["members"][0]["reason"] == "removed by an admin (akresil)"


async def test_remove_members_maps_a_group_error_to_every_member_and_needs_leave_group_v3() -> None:
    def handler(node: int, version: int, key: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"error_code": errors.GroupAuthorizationFailedError.errno, "members": []}

    results, _ = await _admin_call(handler, lambda a: a.remove_members_from_consumer_group("g", ["a", "b"]))
    assert set(results.errors) == {"a", "b"}
    with pytest.raises(errors.GroupAuthorizationFailedError, match="group 'g'"):
        results["b"]

    results, cluster = await _admin_call(handler, lambda a: a.remove_members_from_consumer_group("g", ["a"]),
                                         versions={ApiKey.LEAVE_GROUP: (0, 2)})
    with pytest.raises(errors.UnsupportedVersionError, match="LEAVE_GROUP v3"):
        results["a"]
    assert cluster.calls(ApiKey.LEAVE_GROUP) == []


@pytest.mark.parametrize("members, match", [
    ([], "no members given"),
    ([MemberDescription("m-1", None, "c", "/h", frozenset())], "member 'm-1' of group 'g' has no group_instance_id"),
    (["a", ""], "got ''"),
    (["a", "a"], "member 'a' listed twice"),
])
async def test_remove_members_refuses_bad_input_naming_it(members: Any, match: str) -> None:
    admin = Admin(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(ValueError, match=match):
        await admin.remove_members_from_consumer_group("g", members)
