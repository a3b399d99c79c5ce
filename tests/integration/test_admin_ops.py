"""Log dirs, feature levels and the metadata quorum against a scripted cluster (tests/harness/scripted_broker.py).

Where each request goes (DescribeLogDirs to every named broker, UpdateFeatures to the controller and after it when
it moves, DescribeQuorum and ApiVersions to any broker), what it carries, how answers of each version read, and
per-item errors naming the broker, log dir or feature.
"""

from __future__ import annotations

from typing import Any

import pytest

from akresil import Admin, errors
from akresil.admin_types import (QuorumEndpoint, QuorumReplica, ReplicaInfo, ReplicaLogDirInfo,
                                 TopicPartitionReplica as R, VersionRange)
from akresil.protocol.api import ApiKey
from akresil.types import TopicPartition as TP
from tests.harness.scripted_broker import ScriptedCluster

STORAGE = errors.KafkaStorageError.errno


def _log_dirs_answer(node: int) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": 0, "results": [
        {"error_code": 0, "log_dir": f"/data/{node}/a", "total_bytes": 1000, "usable_bytes": 400, "topics": [
            {"name": "t", "partitions": [
                {"partition_index": 0, "partition_size": 123, "offset_lag": 0, "is_future_key": False},
                {"partition_index": 1, "partition_size": 7, "offset_lag": 3, "is_future_key": True}]}]},
        {"error_code": STORAGE, "log_dir": f"/data/{node}/b", "topics": []}]}


async def test_log_dirs_of_every_broker_each_dir_and_replica_read() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.DESCRIBE_LOG_DIRS and body["topics"] is None      # every partition
        return _log_dirs_answer(node)

    async with ScriptedCluster(handler, nodes=2) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            results = await admin.describe_log_dirs()
    assert list(results) == [1, 2]
    assert sorted(r.node for r in cluster.calls(ApiKey.DESCRIBE_LOG_DIRS)) == [1, 2]
    dirs = results[2]
    assert list(dirs) == ["/data/2/a", "/data/2/b"]
    good, offline = dirs["/data/2/a"], dirs["/data/2/b"]
    assert good.error is None and (good.total_bytes, good.usable_bytes) == (1000, 400)
    assert good.replicas == {TP("t", 0): ReplicaInfo(123, 0, False), TP("t", 1): ReplicaInfo(7, 3, True)}
    assert isinstance(offline.error, errors.KafkaStorageError)
    assert "/data/2/b" in str(offline.error) and "node 2" in str(offline.error)
    assert offline.replicas == {}


async def test_log_dirs_before_v4_have_no_byte_counts_and_a_broker_error_fails_that_broker_alone() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        answer = _log_dirs_answer(node)
        if node == 2:
            answer["error_code"] = errors.ClusterAuthorizationFailedError.errno
            answer["results"] = []
        return answer

    async with ScriptedCluster(handler, nodes=2, versions={ApiKey.DESCRIBE_LOG_DIRS: (1, 3)}) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            results = await admin.describe_log_dirs([1, 2, 9])
    assert [r.version for r in cluster.calls(ApiKey.DESCRIBE_LOG_DIRS)] == [3, 3]
    a = results[1]["/data/1/a"]
    assert (a.total_bytes, a.usable_bytes) == (None, None) and a.replicas[TP("t", 0)].size == 123
    with pytest.raises(errors.ClusterAuthorizationFailedError, match="node 2"):
        results[2]
    with pytest.raises(errors.BrokerNotAvailableError, match="node id 9"):
        results[9]


async def test_log_dirs_refuse_what_is_not_a_broker_id() -> None:
    async with ScriptedCluster(lambda *a: None) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            with pytest.raises(ValueError, match="broker ids"):
                await admin.describe_log_dirs([1, -2])
            with pytest.raises(TypeError, match="broker ids"):
                await admin.describe_log_dirs("1")  # type: ignore[arg-type]


async def test_replica_log_dirs_ask_each_broker_for_its_partitions_only() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if node == 2:
            return {"throttle_time_ms": 0, "error_code": errors.ClusterAuthorizationFailedError.errno, "results": []}
        return {"throttle_time_ms": 0, "error_code": 0, "results": [
            {"error_code": 0, "log_dir": "/a", "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "partition_size": 10, "offset_lag": 4, "is_future_key": False},
                {"partition_index": 1, "partition_size": 10, "offset_lag": 0, "is_future_key": False}]}]},
            {"error_code": 0, "log_dir": "/b", "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "partition_size": 3, "offset_lag": 7, "is_future_key": True}]}]},
            {"error_code": STORAGE, "log_dir": "/c", "topics": []}]}

    async with ScriptedCluster(handler, nodes=2) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            results = await admin.describe_replica_log_dirs([R("t", 0, 1), R("t", 1, 1), R("t", 5, 1),
                                                             R("t", 0, 2), R("t", 0, 8)])
            with pytest.raises(TypeError, match="TopicPartitionReplica"):
                await admin.describe_replica_log_dirs([("t", 0, 1)])  # type: ignore[list-item]
            with pytest.raises(ValueError, match="broker_id must be ints >= 0"):
                await admin.describe_replica_log_dirs([R("t", 0, -1)])
    assert results[R("t", 0, 1)] == ReplicaLogDirInfo("/a", 4, "/b", 7)        # being moved from /a to /b
    assert results[R("t", 1, 1)] == ReplicaLogDirInfo("/a", 0)
    assert results[R("t", 5, 1)] == ReplicaLogDirInfo()                        # not on that broker
    with pytest.raises(errors.ClusterAuthorizationFailedError, match="t-0 on broker 2"):
        results[R("t", 0, 2)]
    with pytest.raises(errors.BrokerNotAvailableError, match="t-0 on broker 8: no broker with node id 8"):
        results[R("t", 0, 8)]
    sent = {r.node: r.body for r in cluster.calls(ApiKey.DESCRIBE_LOG_DIRS)}
    assert sent[1] == {"topics": [{"topic": "t", "partitions": [0, 1, 5]}]}
    assert sent[2] == {"topics": [{"topic": "t", "partitions": [0]}]}


async def test_replica_moves_go_to_each_replicas_broker_grouped_by_dir() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.ALTER_REPLICA_LOG_DIRS
        results: dict[str, list[dict[str, Any]]] = {}
        for d in body["dirs"]:
            for t in d["topics"]:
                results.setdefault(t["name"], []).extend(
                    {"partition_index": p, "error_code": errors.LogDirNotFoundError.errno if d["path"] == "/x"
                     else 0} for p in t["partitions"] if (t["name"], p) != ("t", 2))   # t-2: left out
        return {"throttle_time_ms": 0, "results": [{"topic_name": t, "partitions": ps} for t, ps in results.items()]}

    async with ScriptedCluster(handler, nodes=2) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            results = await admin.alter_replica_log_dirs({R("t", 0, 1): "/b", R("t", 1, 1): "/b", R("u", 0, 1): "/x",
                                                          R("t", 0, 2): "/a", R("t", 2, 2): "/a"})
            with pytest.raises(ValueError, match=r"moves\[t-0 on broker 1\]: expected a log dir path"):
                await admin.alter_replica_log_dirs({R("t", 0, 1): ""})
    assert results.ok == {R("t", 0, 1): None, R("t", 1, 1): None, R("t", 0, 2): None}
    with pytest.raises(errors.LogDirNotFoundError, match="u-0 on broker 1 to '/x'"):
        results[R("u", 0, 1)]
    with pytest.raises(errors.ProtocolError, match="no result for t-2 on broker 2"):
        results[R("t", 2, 2)]
    sent = {r.node: r.body for r in cluster.calls(ApiKey.ALTER_REPLICA_LOG_DIRS)}
    assert sent[1] == {"dirs": [{"path": "/b", "topics": [{"name": "t", "partitions": [0, 1]}]},
                                {"path": "/x", "topics": [{"name": "u", "partitions": [0]}]}]}
    assert sent[2] == {"dirs": [{"path": "/a", "topics": [{"name": "t", "partitions": [0, 2]}]}]}


async def test_features_from_a_fresh_api_versions_answer() -> None:
    extra = {"finalized_features_epoch": 42,
             "finalized_features": [{"name": "metadata.version", "min_version_level": 21, "max_version_level": 21},
                                    {"name": "transaction.version", "min_version_level": 2, "max_version_level": 2}],
             "supported_features": [{"name": "metadata.version", "min_version": 7, "max_version": 27},
                                    {"name": "transaction.version", "min_version": 0, "max_version": 2}]}
    async with ScriptedCluster(lambda *a: None, api_versions_extra=extra) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            features = await admin.describe_features()
            extra["finalized_features_epoch"] = 43      # a later call asks again: it sees what changed
            extra["finalized_features"][1]["min_version_level"] = extra["finalized_features"][1][
                "max_version_level"] = 1
            later = await admin.describe_features()
    assert features.finalized == {"metadata.version": VersionRange(21, 21), "transaction.version": VersionRange(2, 2)}
    assert features.supported["metadata.version"] == VersionRange(7, 27)
    assert features.finalized_epoch == 42
    assert later.finalized_epoch == 43 and later.finalized["transaction.version"] == VersionRange(1, 1)


async def test_features_of_a_broker_without_them() -> None:
    async with ScriptedCluster(lambda *a: None) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            features = await admin.describe_features()
    assert (features.finalized, features.supported, features.finalized_epoch) == ({}, {}, None)


def _update_answer(code: int = 0, message: str | None = None, results: list[dict[str, Any]] | None = None
                   ) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "results": results or []}


async def test_update_features_go_to_the_controller_and_follow_it() -> None:
    cluster: ScriptedCluster

    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.UPDATE_FEATURES
        if node == 1:
            cluster.controller = 2
            return _update_answer(errors.NotControllerError.errno, "not me")
        return _update_answer()

    async with ScriptedCluster(handler, nodes=2, controller=1) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, retry_backoff_ms=10) as admin:
            results = await admin.update_features({"transaction.version": (2, "UPGRADE"),
                                                   "group.version": (0, "unsafe_downgrade")}, validate_only=True)
    assert dict(results.ok) == {"transaction.version": None, "group.version": None}
    sent = cluster.calls(ApiKey.UPDATE_FEATURES)
    assert [r.node for r in sent] == [1, 2]
    assert sent[-1].version == 2 and sent[-1].body["validate_only"] is True
    assert [(u["feature"], u["max_version_level"], u["upgrade_type"]) for u in sent[-1].body["feature_updates"]] == [
        ("transaction.version", 2, 1), ("group.version", 0, 3)]


async def test_update_features_v2_one_error_fails_every_feature_naming_each() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return _update_answer(errors.InvalidUpdateVersionError.errno, "Invalid update version 1 for feature x.y")

    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            results = await admin.update_features({"x.y": (1, "upgrade"), "group.version": (1, "upgrade")})
    for name in ("x.y", "group.version"):
        with pytest.raises(errors.InvalidUpdateVersionError, match=f"feature '{name}'.*x.y"):
            results[name]


async def test_update_features_v1_results_per_feature_and_v0_downgrade_flag() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        names = [u["feature"] for u in body["feature_updates"]]
        return _update_answer(results=[
            {"feature": n, "error_code": errors.InvalidUpdateVersionError.errno if n == "bad" else 0,
             "error_message": "no such level" if n == "bad" else None} for n in names if n != "lost"])

    async with ScriptedCluster(handler, versions={ApiKey.UPDATE_FEATURES: (0, 1)}) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            results = await admin.update_features({"good": (3, "upgrade"), "bad": (9, "upgrade"),
                                                   "lost": (1, "upgrade")}, validate_only=True)
            v0 = await admin.update_features({"good": (1, "safe_downgrade")})
    assert results["good"] is None
    with pytest.raises(errors.InvalidUpdateVersionError, match="feature 'bad': no such level"):
        results["bad"]
    with pytest.raises(errors.ProtocolError, match="no result for lost"):
        results["lost"]
    assert v0["good"] is None
    first, second = cluster.calls(ApiKey.UPDATE_FEATURES)
    assert first.version == 1 and second.version == 1   # the broker's newest (v1) is used when it can
    assert second.body["feature_updates"][0]["upgrade_type"] == 2


async def test_update_features_needs_v1_for_validate_only_or_an_unsafe_downgrade() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert version == 0 and body["feature_updates"][0]["allow_downgrade"] is True
        return _update_answer(results=[{"feature": "f", "error_code": 0, "error_message": None}])

    async with ScriptedCluster(handler, versions={ApiKey.UPDATE_FEATURES: (0, 0)}) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            checked = await admin.update_features({"f": (1, "upgrade")}, validate_only=True)
            unsafe = await admin.update_features({"f": (1, "unsafe_downgrade")})
            safe = await admin.update_features({"f": (1, "safe_downgrade")})
    for results in (checked, unsafe):
        with pytest.raises(errors.UnsupportedVersionError, match="UPDATE_FEATURES v1"):
            results["f"]
    assert safe["f"] is None
    assert len(cluster.calls(ApiKey.UPDATE_FEATURES)) == 1


@pytest.mark.parametrize(("updates", "match"), [
    ({"f": (1, "sideways")}, r"updates\['f'\]: upgrade_type: 'sideways' is not one of 'upgrade'"),
    ({"f": (-1, "upgrade")}, r"updates\['f'\]: max_version_level must be an int in 0..32767, got -1"),
    ({"f": (40000, "upgrade")}, r"updates\['f'\]: max_version_level"),
    ({"f": (0, "upgrade")}, r"updates\['f'\]: level 0 removes the feature"),
    ({"f": 1}, r"updates\['f'\]: expected \(max_version_level, upgrade_type\)"),
    ({"": (1, "upgrade")}, "feature names must be non-empty"),
    ({}, "no feature to update"),
])
async def test_update_features_bad_input_is_refused_naming_it(updates: Any, match: str) -> None:
    async with ScriptedCluster(lambda *a: None) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            with pytest.raises(ValueError, match=match):
                await admin.update_features(updates)
    assert cluster.calls(ApiKey.UPDATE_FEATURES) == []


def _quorum_answer(**partition: Any) -> dict[str, Any]:
    part = {"partition_index": 0, "error_code": 0, "error_message": None, "leader_id": 3, "leader_epoch": 7,
            "high_watermark": 500,
            "current_voters": [{"replica_id": 3, "replica_directory_id": b"d" * 16, "log_end_offset": 500,
                                "last_fetch_timestamp": -1, "last_caught_up_timestamp": 1700},
                               {"replica_id": 4, "replica_directory_id": bytes(16), "log_end_offset": 490,
                                "last_fetch_timestamp": 1600, "last_caught_up_timestamp": 1500}],
            "observers": [{"replica_id": 1, "replica_directory_id": bytes(16), "log_end_offset": 480,
                           "last_fetch_timestamp": 1650, "last_caught_up_timestamp": -1}], **partition}
    return {"error_code": 0, "error_message": None,
            "topics": [{"topic_name": "__cluster_metadata", "partitions": [part]}],
            "nodes": [{"node_id": 3, "listeners": [{"name": "CONTROLLER", "host": "c3", "port": 9093}]}]}


async def test_metadata_quorum_leader_voters_observers_and_endpoints() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert key == ApiKey.DESCRIBE_QUORUM
        return _quorum_answer()

    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            quorum = await admin.describe_metadata_quorum()
    sent = cluster.calls(ApiKey.DESCRIBE_QUORUM)
    assert sent[0].body["topics"] == [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
    assert (quorum.leader_id, quorum.leader_epoch, quorum.high_watermark) == (3, 7, 500)
    assert quorum.voters == (QuorumReplica(3, 500, None, 1700, b"d" * 16), QuorumReplica(4, 490, 1600, 1500))
    assert quorum.observers == (QuorumReplica(1, 480, 1650, None),)
    assert quorum.nodes == {3: (QuorumEndpoint("CONTROLLER", "c3", 9093),)}


async def test_metadata_quorum_v0_has_no_timestamps_or_endpoints() -> None:
    def v0(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        answer = _quorum_answer()
        del answer["nodes"]          # v2: endpoints, directory ids; v1: fetch and caught-up times
        for state in answer["topics"][0]["partitions"][0]["current_voters"]:
            del state["replica_directory_id"], state["last_fetch_timestamp"], state["last_caught_up_timestamp"]
        return answer

    async with ScriptedCluster(v0, versions={ApiKey.DESCRIBE_QUORUM: (0, 0)}) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            quorum = await admin.describe_metadata_quorum()
    assert cluster.calls(ApiKey.DESCRIBE_QUORUM)[0].version == 0
    assert quorum.voters[1] == QuorumReplica(4, 490) and quorum.nodes == {}


async def test_metadata_quorum_errors_name_the_partition_or_the_node() -> None:
    answers = [_quorum_answer(error_code=errors.InvalidRequestError.errno, error_message="bad partition"),
               {**_quorum_answer(), "error_code": errors.ClusterAuthorizationFailedError.errno},
               {**_quorum_answer(), "topics": []}]

    async with ScriptedCluster(lambda *a: answers.pop(0)) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            with pytest.raises(errors.InvalidRequestError, match="__cluster_metadata-0 .*bad partition"):
                await admin.describe_metadata_quorum()
            with pytest.raises(errors.ClusterAuthorizationFailedError,
                               match="DescribeQuorum to (node 1|a bootstrap server): "):
                await admin.describe_metadata_quorum()
            with pytest.raises(errors.ProtocolError, match="no result for __cluster_metadata-0"):
                await admin.describe_metadata_quorum()
