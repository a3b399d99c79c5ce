"""Log dirs, feature levels and the metadata quorum on the tier's cluster (3 brokers and a separate controller):
every broker's log dirs hold a replica of a topic with three replicas; the quorum's leader and only voter is the
controller, the brokers observe it; a validated feature update reaches the controller through the broker Metadata
names as controller (KRaft forwarding). The one-node checks: tests/integration/test_admin_ops_kafka.py."""

from __future__ import annotations

from akresil import TopicPartition
from akresil.admin_types import TopicPartitionReplica
from akresil.testing import KafkaCluster

from .conftest import TopicMaker


async def test_every_brokers_log_dirs_hold_a_replica_of_a_three_replica_topic(kafka_cluster: KafkaCluster,
                                                                             make_topic: TopicMaker) -> None:
    topic = await make_topic(partitions=1, replication_factor=3)
    tp = TopicPartition(topic, 0)
    async with kafka_cluster.admin() as admin:

        async def everywhere() -> bool:
            results = await admin.describe_log_dirs()
            return sorted(results) == kafka_cluster.broker_ids and all(
                any(tp in d.replicas for d in results[node].values()) for node in results)

        await kafka_cluster.wait_for(everywhere)        # each follower creates its log when it learns the topic
        where = await admin.describe_replica_log_dirs([TopicPartitionReplica(topic, 0, node)
                                                        for node in kafka_cluster.broker_ids])
    assert all(info.current_log_dir is not None and info.future_log_dir is None for info in where.ok.values())
    assert len(where.ok) == 3


async def test_the_quorum_is_the_controller_observed_by_the_brokers(kafka_cluster: KafkaCluster) -> None:
    async with kafka_cluster.admin() as admin:
        quorum = await admin.describe_metadata_quorum()
        level = (await admin.describe_features()).finalized["metadata.version"].max_version
        checked = await admin.update_features({"metadata.version": (level, "upgrade")}, validate_only=True)
    controller = kafka_cluster.controller_id
    assert quorum.leader_id == controller and [v.replica_id for v in quorum.voters] == [controller]
    assert set(kafka_cluster.broker_ids) <= {o.replica_id for o in quorum.observers}
    assert all(o.log_end_offset > 0 for o in quorum.observers)
    assert controller in quorum.nodes
    assert checked.ok == {"metadata.version": None}
