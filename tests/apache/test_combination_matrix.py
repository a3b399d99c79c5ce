"""The combination matrix (issue 28) on Apache Kafka: group protocol {classic, consumer} x guarantee
{at-least-once, exactly-once} x backend {asyncio, trio}, each copying records through the runner in two member
processes while the leaders of an input and an output partition move (reassignment + preferred election) and one
member is SIGKILLed mid-copy (tests/harness/matrix.py says what each cell must show).
"""

from __future__ import annotations

import anyio
import pytest

from akresil.testing import KafkaCluster

from ..harness.matrix import copy_with_a_kill_and_a_leader_move


class TierBroker:
    """The tier's shared cluster, as the matrix needs it."""

    name = "apache"

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self.bootstrap_servers = cluster.bootstrap_servers

    async def create_topic(self, name: str, partitions: int) -> None:
        await self.cluster.create_topic(name, partitions=partitions, replication_factor=3)

    async def move_leader(self, topic: str, partition: int) -> None:
        leader, _ = await self.cluster.leader(topic, partition)
        await self.cluster.move_leader(topic, partition, leader % len(self.cluster.broker_ids) + 1)

    def before_group_forms(self) -> None:
        pass


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_copy_through_the_runner_with_a_killed_member_and_leader_moves(kafka_cluster: KafkaCluster, protocol: str,
                                                                       guarantee: str, backend: str) -> None:
    anyio.run(copy_with_a_kill_and_a_leader_move, TierBroker(kafka_cluster), protocol, guarantee, backend)
