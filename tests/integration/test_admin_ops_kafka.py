"""Log dirs, feature levels and the metadata quorum on Apache Kafka (the session's one-node ``kafka_node``, a
combined broker and controller), and ``akresil cluster log-dirs|features|quorum``. Request building, answer reading
and errors: tests/integration/test_admin_ops.py; the CLI's tables: tests/unit/test_cli_cluster.py."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import orjson
import pytest

from akresil import Admin, Producer, TopicPartition
from akresil.cli import build_parser, cmd_cluster
from akresil.admin_types import TopicPartitionReplica
from akresil.errors import InvalidUpdateVersionError, LogDirNotFoundError
from akresil.testing import EmbeddedBroker

pytestmark = pytest.mark.broker


async def _sizes(admin: Admin, node: int, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The size of each of ``tps`` in ``node``'s log dirs, once every one of them is there."""
    with anyio.fail_after(15):
        while True:
            dirs = (await admin.describe_log_dirs([node]))[node]
            found = {tp: r.size for d in dirs.values() for tp, r in d.replicas.items() if tp in tps}
            if len(found) == len(tps):
                return found
            await anyio.sleep(0.05)     # the log is created just after the topic shows in Metadata


async def test_log_dirs_show_a_topics_partitions_growing_as_records_arrive(kafka_node: EmbeddedBroker) -> None:
    bootstrap = kafka_node.bootstrap_servers
    topic = await kafka_node.create_topic(f"logdirs-{uuid.uuid4().hex[:8]}", partitions=2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    async with Admin(bootstrap_servers=bootstrap) as admin:
        node = (await admin.describe_cluster()).brokers[0].node_id
        everyone = await admin.describe_log_dirs()
        assert list(everyone) == [node]
        dirs = everyone[node]
        assert dirs and all(d.error is None for d in dirs.values())
        assert all(d.total_bytes is not None and d.usable_bytes is not None and 0 < d.usable_bytes <= d.total_bytes
                   for d in dirs.values())
        before = await _sizes(admin, node, tps)
        assert before == {tps[0]: 0, tps[1]: 0}
        async with Producer(bootstrap_servers=bootstrap) as producer:
            await producer.send_many(topic, [(None, b"x" * 1000) for _ in range(20)], partition=0)
        after = await _sizes(admin, node, tps)
        replicas = await admin.describe_replica_log_dirs([TopicPartitionReplica(topic, 0, node),
                                                          TopicPartitionReplica(topic, 7, node)])
        # one log dir here: a move to it is a no-op Kafka accepts; a dir the broker does not have is refused
        moved = await admin.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, node): next(iter(dirs)),
                                                    TopicPartitionReplica(topic, 1, node): "/nowhere"})
    assert moved[TopicPartitionReplica(topic, 0, node)] is None
    with pytest.raises(LogDirNotFoundError, match=f"{topic}-1 on broker {node} to '/nowhere'"):
        moved[TopicPartitionReplica(topic, 1, node)]
    assert after[tps[0]] > 20_000 and after[tps[1]] == 0
    assert replicas[TopicPartitionReplica(topic, 0, node)].current_log_dir in dirs
    assert replicas[TopicPartitionReplica(topic, 0, node)].future_log_dir is None
    assert replicas[TopicPartitionReplica(topic, 7, node)].current_log_dir is None      # no such partition


async def test_features_and_a_validated_update(kafka_node: EmbeddedBroker) -> None:
    async with Admin(bootstrap_servers=kafka_node.bootstrap_servers) as admin:
        features = await admin.describe_features()
        level = features.finalized["metadata.version"]
        supported = features.supported["metadata.version"]
        assert level.min_version == level.max_version and supported.min_version <= level.max_version
        assert level.max_version <= supported.max_version and features.finalized_epoch is not None

        ok = await admin.update_features({"metadata.version": (level.max_version, "upgrade")}, validate_only=True)
        assert ok["metadata.version"] is None
        bad = await admin.update_features({"no.such.feature": (1, "upgrade")}, validate_only=True)
        with pytest.raises(InvalidUpdateVersionError, match="feature 'no.such.feature': .*no.such.feature"):
            bad["no.such.feature"]
        assert (await admin.describe_features()).finalized["metadata.version"] == level     # nothing changed


async def test_the_metadata_quorum_has_the_node_as_leader_and_voter(kafka_node: EmbeddedBroker) -> None:
    async with Admin(bootstrap_servers=kafka_node.bootstrap_servers) as admin:
        node = (await admin.describe_cluster()).brokers[0].node_id
        quorum = await admin.describe_metadata_quorum()
    assert quorum.leader_id == node and quorum.leader_epoch >= 1 and quorum.high_watermark > 0
    assert [v.replica_id for v in quorum.voters] == [node] and quorum.observers == ()
    assert quorum.voters[0].log_end_offset >= quorum.high_watermark
    assert quorum.voters[0].last_caught_up_timestamp is not None
    assert [e.listener for e in quorum.nodes[node]] == ["CONTROLLER"]


async def test_cluster_cli_commands(kafka_node: EmbeddedBroker, capsys: pytest.CaptureFixture[str]) -> None:
    topic = await kafka_node.create_topic(f"logdirs-cli-{uuid.uuid4().hex[:8]}")
    cli = ["-b", kafka_node.bootstrap_servers, "--json"]

    async def run(*command: str) -> list[dict[str, Any]]:
        assert await cmd_cluster(build_parser().parse_args(["cluster", *command, *cli])) == 0
        return [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]

    with anyio.fail_after(15):
        while not any(r["topic"] == topic for d in await run("log-dirs", "--topic", topic) for r in d["replicas"]):
            await anyio.sleep(0.05)
    features = {f["feature"]: f for f in await run("features")}
    assert features["metadata.version"]["finalized"] >= features["metadata.version"]["supported_min"]
    (quorum,) = await run("quorum")
    assert [r["role"] for r in quorum["replicas"]] == ["leader"]
    assert quorum["replicas"][0]["node"] == quorum["leader_id"]
