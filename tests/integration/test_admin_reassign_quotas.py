"""Partition reassignments and client quotas against a scripted cluster (tests/harness/scripted_broker.py).

Where each request goes (reassignments to the controller, following a move; quotas to any broker), what the
request carries (replicas or a cancel, the quota entity with its default parts, set and remove operations),
and per-item results: one partition's or entity's error never hides the others'.
"""

from __future__ import annotations

from typing import Any

import pytest

from akresil import Admin, errors
from akresil.admin_types import (DEFAULT, ClientQuotaEntity, ClientQuotaFilter, ClientQuotaFilterComponent,
                                 ClientQuotaOp, PartitionReassignment)
from akresil.protocol.api import ApiKey
from akresil.types import TopicPartition as TP
from tests.harness.scripted_broker import ScriptedCluster

NOT_CONTROLLER = errors.NotControllerError.errno


def _reassign_answer(body: dict[str, Any], code_of: Any = lambda t, p: 0) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": code_of(t["name"], p["partition_index"]),
             "error_message": None} for p in t["partitions"]]} for t in body["topics"]]}


async def test_reassignments_go_to_the_controller_and_follow_it_when_it_moves() -> None:
    cluster: ScriptedCluster

    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.ALTER_PARTITION_REASSIGNMENTS
        if node == 1:
            cluster.controller = 2          # the controller moved: node 1 says so, Metadata now names node 2
            return {"error_code": NOT_CONTROLLER, "error_message": "not me", "responses": []}
        return _reassign_answer(body, lambda t, p: errors.NoReassignmentInProgressError.errno if p == 1 else 0)

    async with ScriptedCluster(handler, nodes=2, controller=1, topics={"t": [1, 2]}) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, retry_backoff_ms=10) as admin:
            results = await admin.alter_partition_reassignments({TP("t", 0): [2, 1], TP("t", 1): None})
    assert list(results) == [TP("t", 0), TP("t", 1)]
    assert results[TP("t", 0)] is None
    with pytest.raises(errors.NoReassignmentInProgressError, match="t-1"):
        results[TP("t", 1)]
    sent = cluster.calls(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
    assert [r.node for r in sent] == [1, 2]
    assert sent[-1].version == 1 and sent[-1].body["allow_replication_factor_change"] is True
    assert sent[-1].body["topics"] == [{"name": "t", "partitions": [
        {"partition_index": 0, "replicas": [2, 1]}, {"partition_index": 1, "replicas": None}]}]


async def test_a_partition_missing_from_the_answer_fails_alone_at_once() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        answer = _reassign_answer(body)
        answer["responses"][0]["partitions"] = answer["responses"][0]["partitions"][:1]
        return answer

    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            results = await admin.alter_partition_reassignments({TP("t", 0): [1], TP("t", 1): [1]})
    assert results[TP("t", 0)] is None
    assert isinstance(results.errors[TP("t", 1)], errors.ProtocolError)
    assert "no result for t-1" in str(results.errors[TP("t", 1)])
    assert len(cluster.calls(ApiKey.ALTER_PARTITION_REASSIGNMENTS)) == 1


async def test_refusing_a_replication_factor_change_needs_v1() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("a v0 broker cannot carry allow_replication_factor_change=false")

    async with ScriptedCluster(handler, versions={ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0)}) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            results = await admin.alter_partition_reassignments({TP("t", 0): [1]},
                                                                allow_replication_factor_change=False)
    with pytest.raises(errors.UnsupportedVersionError, match="ALTER_PARTITION_REASSIGNMENTS v1"):
        results[TP("t", 0)]


async def test_list_reassignments_of_everything_or_of_some_partitions() -> None:
    calls = 0

    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        nonlocal calls
        assert key == ApiKey.LIST_PARTITION_REASSIGNMENTS and node == 2
        calls += 1
        if calls == 3:
            return {"error_code": errors.ClusterAuthorizationFailedError.errno, "error_message": "no", "topics": []}
        return {"error_code": 0, "error_message": None, "topics": [{"name": "t", "partitions": [
            {"partition_index": 3, "replicas": [1, 2], "adding_replicas": [2], "removing_replicas": [1]},
            {"partition_index": 0, "replicas": [2], "adding_replicas": [], "removing_replicas": []}]}]}

    async with ScriptedCluster(handler, nodes=2, controller=2) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            every = await admin.list_partition_reassignments()
            some = await admin.list_partition_reassignments([TP("t", 3), TP("u", 1), TP("t", 0)])
            with pytest.raises(errors.ClusterAuthorizationFailedError, match="ListPartitionReassignments: no"):
                await admin.list_partition_reassignments()
    assert every == some == {TP("t", 0): PartitionReassignment((2,), (), ()),
                             TP("t", 3): PartitionReassignment((1, 2), (2,), (1,))}
    assert list(every) == [TP("t", 0), TP("t", 3)]
    asked = [r.body["topics"] for r in cluster.calls(ApiKey.LIST_PARTITION_REASSIGNMENTS)]
    assert asked[0] is None
    assert asked[1] == [{"name": "t", "partition_indexes": [0, 3]}, {"name": "u", "partition_indexes": [1]}]


async def test_describe_client_quotas_sends_the_filter_and_reads_default_entities() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.DESCRIBE_CLIENT_QUOTAS
        return {"error_code": 0, "error_message": None, "entries": [
            {"entity": [{"entity_type": "user", "entity_name": "alice"},
                        {"entity_type": "client-id", "entity_name": None}],
             "values": [{"key": "producer_byte_rate", "value": 1024.0}]},
            {"entity": [{"entity_type": "ip", "entity_name": None}],
             "values": [{"key": "connection_creation_rate", "value": 5.0}]}]}

    flt = ClientQuotaFilter((ClientQuotaFilterComponent("user", "alice"), ClientQuotaFilterComponent("client_id", DEFAULT),
                             ClientQuotaFilterComponent("ip")), strict=True)
    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            quotas = await admin.describe_client_quotas(flt)
            everything = await admin.describe_client_quotas()
    assert quotas == everything == {
        ClientQuotaEntity(user="alice", client_id=DEFAULT): {"producer_byte_rate": 1024.0},
        ClientQuotaEntity(ip=DEFAULT): {"connection_creation_rate": 5.0}}
    sent = cluster.calls(ApiKey.DESCRIBE_CLIENT_QUOTAS)
    assert sent[0].body == {"strict": True, "components": [
        {"entity_type": "user", "match_type": 0, "match": "alice"},
        {"entity_type": "client-id", "match_type": 1, "match": None},
        {"entity_type": "ip", "match_type": 2, "match": None}]}
    assert sent[1].body == {"strict": False, "components": []}


async def test_describe_client_quotas_raises_the_broker_error() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"error_code": errors.InvalidRequestError.errno, "error_message": "bad filter", "entries": None}

    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            with pytest.raises(errors.InvalidRequestError, match="DescribeClientQuotas: bad filter"):
                await admin.describe_client_quotas()


async def test_alter_client_quotas_encodes_set_and_remove_with_results_per_entity() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.ALTER_CLIENT_QUOTAS
        out = []
        for e in reversed(body["entries"]):              # the answer's order need not be the request's
            bad = any(o["key"] == "bogus" for o in e["ops"])
            out.append({"error_code": errors.InvalidRequestError.errno if bad else 0,
                        "error_message": "unknown key bogus" if bad else None, "entity": e["entity"]})
        return {"entries": out}

    alice = ClientQuotaEntity(user="alice", client_id=DEFAULT)
    ips = ClientQuotaEntity(ip=DEFAULT)
    odd = ClientQuotaEntity(client_id="c")
    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            results = await admin.alter_client_quotas({
                alice: {"producer_byte_rate": 1024, "request_percentage": None},
                ips: [ClientQuotaOp("connection_creation_rate", 5.5)],
                odd: {"bogus": 1.0}}, validate_only=True)
    assert list(results) == [alice, ips, odd]
    assert results[alice] is None and results[ips] is None
    with pytest.raises(errors.InvalidRequestError, match="client-id='c': unknown key bogus"):
        results[odd]
    body = cluster.calls(ApiKey.ALTER_CLIENT_QUOTAS)[0].body
    assert body["validate_only"] is True
    assert body["entries"][0] == {
        "entity": [{"entity_type": "user", "entity_name": "alice"}, {"entity_type": "client-id", "entity_name": None}],
        "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False},
                {"key": "request_percentage", "value": 0.0, "remove": True}]}
    assert body["entries"][1]["entity"] == [{"entity_type": "ip", "entity_name": None}]


async def test_an_entity_missing_from_the_answer_fails_alone() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        e = body["entries"][0]
        return {"entries": [{"error_code": 0, "error_message": None, "entity": e["entity"]}]}

    a, b = ClientQuotaEntity(user="a"), ClientQuotaEntity(user="b")
    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            results = await admin.alter_client_quotas({a: {"producer_byte_rate": 1.0}, b: {"producer_byte_rate": 2.0}})
    assert results[a] is None
    assert isinstance(results.errors[b], errors.ProtocolError) and "user='b'" in str(results.errors[b])


async def test_bad_arguments_name_the_problem() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("nothing may be sent")

    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            with pytest.raises(TypeError, match="reassignments: expected a mapping"):
                await admin.alter_partition_reassignments([TP("t", 0)])  # type: ignore[arg-type]
            for bad in ([], [1, 1], [-1], "12", [1.0]):
                with pytest.raises(errors.InvalidReplicaAssignmentError, match=r"reassignments\[t-0\]"):
                    await admin.alter_partition_reassignments({TP("t", 0): bad})  # type: ignore[dict-item]
            with pytest.raises(errors.InvalidTopicError):
                await admin.alter_partition_reassignments({TP("bad topic", 0): [1]})
            with pytest.raises(TypeError, match="quota_filter: expected a ClientQuotaFilter"):
                await admin.describe_client_quotas("user")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="entries: keys must be ClientQuotaEntity"):
                await admin.alter_client_quotas({"alice": {"producer_byte_rate": 1.0}})  # type: ignore[dict-item]
            with pytest.raises(ValueError, match=r"entries\[user='a'\]: ClientQuotaOp.value"):
                await admin.alter_client_quotas({ClientQuotaEntity(user="a"): {"producer_byte_rate": "fast"}})
            with pytest.raises(ValueError, match=r"entries\[user='a'\]: no quota to set or remove"):
                await admin.alter_client_quotas({ClientQuotaEntity(user="a"): {}})
    assert {r.api_key for r in cluster.requests} <= {ApiKey.METADATA}     # only the client's own start-up
