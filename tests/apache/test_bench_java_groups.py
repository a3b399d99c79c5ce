"""The Java client's columns of benchmarks/bench_groups.py (``akresil.bench.java_groups``) on Apache Kafka: its
share consumers drain a topic in both acknowledgement modes and accept every record, its group members
settle, and a failure on the Java side is an error naming it, not a figure."""

from __future__ import annotations

from typing import Callable, Iterator

import anyio
import pytest

from akresil.bench.java_groups import JavaBenchError, JavaGroups
from akresil.testing import KafkaCluster

from ..harness.share import nothing_left, produce, share_group
from .conftest import TopicMaker


@pytest.fixture(scope="module")
def java() -> Iterator[JavaGroups]:
    with JavaGroups() as client:
        yield client


@pytest.mark.parametrize("mode", ["explicit", "implicit"])
async def test_java_share_consumers_accept_every_record(java: JavaGroups, kafka_cluster: KafkaCluster,
                                                        make_topic: TopicMaker, unique: Callable[[str], str],
                                                        mode: str) -> None:
    topic = await make_topic(partitions=4)
    group = await share_group(kafka_cluster, unique("bench-sg"))
    await produce(kafka_cluster.bootstrap_servers, topic, 400, 4)
    seconds, first_s, close_s = await anyio.to_thread.run_sync(
        lambda: java.share(kafka_cluster.bootstrap_servers, group, topic, 400, 2, mode, timeout_s=120))
    assert 0 < first_s <= seconds and close_s >= 0
    assert java.java_version
    # every record was accepted and the acceptance committed: nothing comes back to a later member
    assert await nothing_left(kafka_cluster.bootstrap_servers, topic, group) == []


async def test_java_members_settle_and_a_java_side_failure_is_an_error(
        java: JavaGroups, kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    topic = await make_topic(partitions=6)
    seconds = await anyio.to_thread.run_sync(
        lambda: java.rebalance(kafka_cluster.bootstrap_servers, unique("bench-rb"), topic, 6, "consumer",
                               timeout_s=60))
    assert seconds > 0
    with pytest.raises(JavaBenchError, match="group.protocol"):
        await anyio.to_thread.run_sync(
            lambda: java.rebalance(kafka_cluster.bootstrap_servers, unique("bench-rb"), topic, 6, "bogus",
                                   timeout_s=60))
    with pytest.raises(ValueError, match="explicit or implicit"):
        java.share(kafka_cluster.bootstrap_servers, unique("bench-sg"), topic, 10, 1, "accept")
