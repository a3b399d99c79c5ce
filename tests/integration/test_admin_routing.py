"""Admin routing and retries against a scripted multi-node cluster (tests/harness/scripted_broker.py).

Each test scripts the answers of the APIs it exercises and asserts where requests went: the group's
coordinator (after FindCoordinator, and again after NOT_COORDINATOR), the partition's leader, the controller,
the broker a config resource names. It also covers APIs no test broker implements (ElectLeaders) and the
bound on retries (``default_api_timeout_ms``, counted attempts: no retry storm).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from akresil import Admin, errors
from akresil.admin_types import (AclBinding, AclBindingFilter, ConfigResource, ScramDeletion, ScramUpsertion)
from akresil.testing.sasl_server import ScramCredential
from akresil.protocol.api import ApiKey
from akresil.types import TopicPartition
from tests.harness.scripted_broker import ScriptedCluster

NOT_COORDINATOR = errors.NotCoordinatorError.errno
LOADING = errors.CoordinatorLoadInProgressError.errno
#: a broker before KIP-848 (no ConsumerGroupDescribe): groups are described with DescribeGroups alone
CLASSIC_ONLY: dict[int, tuple[int, int] | None] = {ApiKey.CONSUMER_GROUP_DESCRIBE: None}
#: a broker without share groups: delete_consumer_groups sends DeleteGroups alone (no ShareGroupDescribe first)
NO_SHARE_GROUPS: dict[int, tuple[int, int] | None] = {ApiKey.SHARE_GROUP_DESCRIBE: None}


def _coordinators(version: int, body: dict[str, Any], where: dict[str, int], ports: dict[int, int]) -> dict[str, Any]:
    keys = body["coordinator_keys"] if version >= 4 else [body["key"]]
    entries = [{"key": k, "node_id": where[k], "host": "127.0.0.1", "port": ports[where[k]], "error_code": 0}
               for k in keys]
    if version >= 4:
        return {"coordinators": entries}
    e = entries[0]
    return {"error_code": 0, "node_id": e["node_id"], "host": e["host"], "port": e["port"]}


def _group(gid: str, state: str = "Stable", code: int = 0) -> dict[str, Any]:
    return {"error_code": code, "group_id": gid, "group_state": state, "protocol_type": "consumer",
            "protocol_data": "range", "members": []}


async def test_groups_go_to_their_coordinators_and_follow_a_move() -> None:
    where = {"a": 1, "b": 2, "c": 2}
    cluster: ScriptedCluster

    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.FIND_COORDINATOR:
            return _coordinators(version, body, where, cluster.ports)
        assert key == ApiKey.DESCRIBE_GROUPS
        if node == 2:
            where["b"] = 3     # the coordinator of "b" moved just before node 2 answers
        out = []
        for gid in body["groups"]:
            if where[gid] != node:
                out.append(_group(gid, "", NOT_COORDINATOR))
            elif gid == "c":
                out.append(_group(gid, "", errors.GroupAuthorizationFailedError.errno))
            else:
                out.append(_group(gid))
        return {"groups": out}

    async with ScriptedCluster(handler, nodes=3, versions=CLASSIC_ONLY) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, retry_backoff_ms=10) as admin:
            results = await admin.describe_consumer_groups(["a", "b", "c"])
    assert results["a"].state == "Stable" and results["a"].coordinator == 1
    assert results["b"].coordinator == 3
    with pytest.raises(errors.GroupAuthorizationFailedError, match="group 'c'"):
        results["c"]
    sent = [(r.node, tuple(r.body["groups"])) for r in cluster.calls(ApiKey.DESCRIBE_GROUPS)]
    assert (1, ("a",)) in sent and (2, ("b", "c")) in sent and sent[-1] == (3, ("b",))
    finds = cluster.calls(ApiKey.FIND_COORDINATOR)
    assert finds[0].body["coordinator_keys"] == ["a", "b", "c"]     # one batched lookup (v4+)
    assert finds[-1].body["coordinator_keys"] == ["b"]              # only the moved group is looked up again


async def test_retries_are_bounded_by_default_api_timeout_ms() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.FIND_COORDINATOR:
            return _coordinators(version, body, {"g": 1, "h": 1}, cluster.ports)
        return {"results": [{"group_id": g, "error_code": LOADING if g == "g" else 0} for g in body["groups_names"]]}

    async with ScriptedCluster(handler, versions=NO_SHARE_GROUPS) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, retry_backoff_ms=50,
                         retry_backoff_max_ms=200, default_api_timeout_ms=1_000) as admin:
            results = await admin.delete_consumer_groups(["g", "h"])
    assert results["h"] is None
    err = results.errors["g"]
    assert isinstance(err, errors.KafkaTimeoutError) and "1000 ms (default_api_timeout_ms)" in str(err)
    assert isinstance(err.__cause__, errors.CoordinatorLoadInProgressError)
    attempts = cluster.calls(ApiKey.DELETE_GROUPS)
    # backoff 50, 100, 200, 200, ... (±20%) inside 1 s: at most 8 attempts, and "h" was sent only once
    assert 3 <= len(attempts) <= 8
    assert sum("h" in r.body["groups_names"] for r in attempts) == 1
    gaps = [b.at - a.at for a, b in zip(attempts, attempts[1:])]
    assert all(gap >= 0.035 for gap in gaps)       # never faster than the first backoff minus jitter


async def test_partition_items_go_to_their_leaders_and_unknown_ones_fail_alone() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.DELETE_RECORDS
        return {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "low_watermark": p["offset"] + node * 1000, "error_code": 0}
            for p in t["partitions"]]} for t in body["topics"]]}

    async with ScriptedCluster(handler, nodes=2, topics={"t": [1, 2, 2]}) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            results = await admin.delete_records({TopicPartition("t", 0): 5, TopicPartition("t", 2): 7,
                                                  TopicPartition("t", 9): 1, TopicPartition("nope", 0): 1})
    assert results[TopicPartition("t", 0)] == 1005
    assert results[TopicPartition("t", 2)] == 2007
    assert isinstance(results.errors[TopicPartition("t", 9)], errors.UnknownTopicOrPartitionError)
    assert isinstance(results.errors[TopicPartition("nope", 0)], errors.UnknownTopicOrPartitionError)
    assert sorted(r.node for r in cluster.calls(ApiKey.DELETE_RECORDS)) == [1, 2]


async def test_elect_leaders_goes_to_the_controller_with_per_partition_results() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.ELECT_LEADERS and node == 2
        parts = body["topic_partitions"] or [{"topic": "t", "partitions": [0, 1]}]
        return {"error_code": 0, "replica_election_results": [{"topic": x["topic"], "partition_result": [
            {"partition_id": p, "error_code": 0 if p == 0 else errors.ElectionNotNeededError.errno,
             "error_message": None} for p in x["partitions"]]} for x in parts]}

    async with ScriptedCluster(handler, nodes=2, controller=2, topics={"t": [1, 2]}) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            some = await admin.elect_leaders([TopicPartition("t", 0), TopicPartition("t", 1)])
            every = await admin.elect_leaders(election_type="unclean")
            with pytest.raises(ValueError, match="election_type: 'sometimes'"):
                await admin.elect_leaders(election_type="sometimes")
    for results in (some, every):
        assert list(results) == [TopicPartition("t", 0), TopicPartition("t", 1)]
        assert results[TopicPartition("t", 0)] is None
        assert isinstance(results.errors[TopicPartition("t", 1)], errors.ElectionNotNeededError)
    requests = cluster.calls(ApiKey.ELECT_LEADERS)
    assert requests[0].body["election_type"] == 0 and requests[1].body["election_type"] == 1
    assert requests[1].body["topic_partitions"] is None


async def test_broker_config_goes_to_that_broker_and_an_unknown_node_fails_alone() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"results": [{"error_code": 0, "error_message": None, "resource_type": r["resource_type"],
                             "resource_name": r["resource_name"], "configs": [
                                 {"name": "served.by", "value": str(node), "read_only": True, "is_sensitive": False,
                                  "config_source": 4}]} for r in body["resources"]]}

    async with ScriptedCluster(handler, nodes=3) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            results = await admin.describe_configs([ConfigResource("broker", "3"), ConfigResource("broker", "7")])
    entry = results[ConfigResource("broker", "3")]["served.by"]
    assert entry.value == "3" and entry.source == "static_broker_config" and not entry.is_default
    with pytest.raises(errors.BrokerNotAvailableError, match="no broker with node id 7"):
        results[ConfigResource("broker", "7")]


async def test_scram_alterations_send_salted_passwords_only() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
            names = [x["name"] for x in body["deletions"] + body["upsertions"]]
            return {"results": [{"user": n, "error_code": 0 if n == "alice" else errors.ResourceNotFoundError.errno,
                                 "error_message": None} for n in names]}
        return {"error_code": 0, "error_message": None, "results": [
            {"user": "alice", "error_code": 0, "error_message": None,
             "credential_infos": [{"mechanism": 2, "iterations": 8192}]}]}

    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            altered = await admin.alter_user_scram_credentials([
                ScramUpsertion("alice", "SCRAM-SHA-512", "s3cret", iterations=8192, salt=b"salty"),
                ScramDeletion("bob", "SCRAM-SHA-256")])
            described = await admin.describe_user_scram_credentials()
            with pytest.raises(ValueError, match="iterations for 'eve'"):
                await admin.alter_user_scram_credentials([ScramUpsertion("eve", "SCRAM-SHA-256", "x", iterations=10)])
            with pytest.raises(ValueError, match="mechanism: 'MD5'"):
                await admin.alter_user_scram_credentials([ScramDeletion("eve", "MD5")])
    assert altered["alice"] is None and isinstance(altered.errors["bob"], errors.ResourceNotFoundError)
    assert described["alice"][0].mechanism == "SCRAM-SHA-512" and described["alice"][0].iterations == 8192
    sent = cluster.calls(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)[0].body
    upsert = sent["upsertions"][0]
    assert b"s3cret" not in repr(sent).encode()
    expected = ScramCredential.derive("SCRAM-SHA-512", "s3cret", salt=b"salty", iterations=8192)
    assert upsert["salt"] == b"salty" and len(upsert["salted_password"]) == 64
    assert ScramCredential("SCRAM-SHA-512", b"salty", 8192, expected.stored_key, expected.server_key).matches("s3cret")
    assert sent["deletions"] == [{"name": "bob", "mechanism": 1}]


async def test_acls_round_trip_and_per_binding_errors() -> None:
    stored: list[dict[str, Any]] = []

    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.CREATE_ACLS:
            out = []
            for c in body["creations"]:
                ok = c["principal"] != "User:mallory"
                if ok:
                    stored.append(c)
                out.append({"error_code": 0 if ok else errors.InvalidRequestError.errno, "error_message": None})
            return {"results": out}
        if key == ApiKey.DESCRIBE_ACLS:
            return {"error_code": 0, "error_message": None, "resources": [
                {"resource_type": c["resource_type"], "resource_name": c["resource_name"],
                 "pattern_type": c["resource_pattern_type"], "acls": [
                     {"principal": c["principal"], "host": c["host"], "operation": c["operation"],
                      "permission_type": c["permission_type"]}]} for c in stored]}
        assert key == ApiKey.DELETE_ACLS
        return {"filter_results": [{"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, "resource_type": c["resource_type"],
             "resource_name": c["resource_name"], "pattern_type": c["resource_pattern_type"],
             "principal": c["principal"], "host": c["host"], "operation": c["operation"],
             "permission_type": c["permission_type"]} for c in stored]} for _ in body["filters"]]}

    alice = AclBinding("topic", "orders", "User:alice", "read")
    mallory = AclBinding("group", "g", "User:mallory", "describe", permission="deny", pattern_type="prefixed")
    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            created = await admin.create_acls([alice, mallory])
            listed = await admin.describe_acls(AclBindingFilter(resource_type="topic"))
            deleted = await admin.delete_acls([AclBindingFilter(principal="User:alice")])
    assert created[alice] is None and isinstance(created.errors[mallory], errors.InvalidRequestError)
    assert listed == [alice]
    assert deleted[AclBindingFilter(principal="User:alice")] == [alice]
    flt = cluster.calls(ApiKey.DESCRIBE_ACLS)[0].body
    assert (flt["resource_type_filter"], flt["pattern_type_filter"], flt["operation"]) == (2, 1, 1)


async def test_bad_arguments_name_the_argument() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("no request expected")

    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            cases = [
                (admin.describe_consumer_groups("g"), TypeError, "single str"),
                (admin.describe_consumer_groups([]), ValueError, "no group ids"),
                (admin.describe_consumer_groups(["g", "g"]), ValueError, "listed twice"),
                (admin.list_consumer_group_offsets(""), ValueError, "group_id"),
                (admin.alter_consumer_group_offsets("g", {TopicPartition("t", 0): -3}), ValueError, "offsets"),
                (admin.alter_consumer_group_offsets("g", [1]), TypeError, "offsets"),
                (admin.delete_records({TopicPartition("t", 0): -5}), ValueError, "before"),
                (admin.create_partitions({"t": 0}), errors.InvalidPartitionsError, "total_count"),
                (admin.create_partitions({"t": "4"}), TypeError, r"new_partitions\['t'\]"),
                (admin.incremental_alter_configs({ConfigResource("topic", "t"): {"a": 1}}), TypeError, "value of 'a'"),
                (admin.describe_configs([ConfigResource("broker", "one")]), ValueError, "node id"),
                (admin.describe_producers([("t", -1)]), TypeError, "partitions"),
                (admin.list_offsets({TopicPartition("t", 0): -3}), ValueError, "timestamp"),
                (admin.delete_consumer_groups(["g"], timeout_ms=-1), ValueError, "timeout_ms"),
            ]
            for coro, exc, match in cases:
                with pytest.raises(exc, match=match):
                    await coro
    with pytest.raises(ValueError, match="ConfigResource.type: 'table'"):
        ConfigResource("table", "x")
    with pytest.raises(ValueError, match="AclBinding.operation: 'any'"):
        AclBinding("topic", "t", "User:a", "any")
    assert [r for r in cluster.requests if r.api_key != ApiKey.METADATA] == []


async def test_a_settled_call_returns_without_a_backoff() -> None:
    # a call whose items all settle in the first round returns without waiting a backoff
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.FIND_COORDINATOR:
            return _coordinators(version, body, {"g": 1}, cluster.ports)
        return {"results": [{"group_id": "g", "error_code": errors.GroupIdNotFoundError.errno}]}

    async with ScriptedCluster(handler, versions=NO_SHARE_GROUPS) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, retry_backoff_ms=60_000,
                         retry_backoff_max_ms=60_000) as admin:
            with anyio.fail_after(10):
                results = await admin.delete_consumer_groups(["g"])
    assert isinstance(results.errors["g"], errors.GroupIdNotFoundError)
    assert len(cluster.calls(ApiKey.DELETE_GROUPS)) == 1


async def test_an_answer_that_does_not_match_the_request_fails_those_items_not_the_call() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.CREATE_ACLS:
            return {"results": []}          # two creations, no results
        return {"results": [{"name": t["name"], "error_code": 0, "error_message": None} for t in body["topics"]]}

    a = AclBinding("topic", "a", "User:x", "read")
    b = AclBinding("topic", "b", "User:x", "read")
    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            created = await admin.create_acls([a, b])
            grown = await admin.create_partitions({"t": 3})      # the same admin keeps working
    assert set(created.errors) == {a, b}
    assert all(isinstance(e, errors.ProtocolError) and "2 creations, 0 results" in str(e)
               for e in created.errors.values())
    assert grown["t"] is None
    assert len(cluster.calls(ApiKey.CREATE_ACLS)) == 1          # not retried
