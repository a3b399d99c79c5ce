"""A consumer assigned or subscribed to a topic that does not exist says so (issue 25): one WARNING naming the
topic, not one per metadata refresh. The same for an assigned partition beyond its topic's partitions."""

from __future__ import annotations

import logging

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, TopicPartition
from akresil.testing import EmbeddedBroker, FaultProxy

from ..harness.e2e import unique_topic

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]

METADATA = 3


def warnings_about(caplog: pytest.LogCaptureFixture, topic: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "akresil.consumer" and r.levelno == logging.WARNING and topic in r.getMessage()]


@pytest.mark.parametrize("how", ["assigned", "subscribed"])
async def test_a_missing_topic_is_named_once_while_metadata_keeps_saying_so(
        broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture, how: str) -> None:
    missing = unique_topic("missing")
    caplog.set_level(logging.WARNING, logger="akresil.consumer")
    async with FaultProxy(broker.bootstrap_servers, nodes=1) as proxy:
        # metadata refreshes often, so the rate limit is what keeps the WARNINGs to one
        config = dict(bootstrap_servers=proxy.bootstrap_servers, retry_backoff_ms=20, retry_backoff_max_ms=50,
                      metadata_max_age_ms=100)
        consumer = (Consumer(missing, group_id=unique_topic("g"), **config) if how == "subscribed"
                    else Consumer(**config))
        async with consumer:
            if how == "assigned":
                consumer.assign([TopicPartition(missing, 0)])
            with anyio.fail_after(30):
                while not warnings_about(caplog, missing):
                    assert await consumer.getmany(timeout_ms=100) == {}
                first_seen = len(proxy.requests(METADATA))
                while len(proxy.requests(METADATA)) < first_seen + 5:   # more answers that say it is missing
                    assert await consumer.getmany(timeout_ms=100) == {}
    [warning] = warnings_about(caplog, missing)
    assert f"topic {missing!r} does not exist" in warning and f"({how})" in warning


async def test_an_assigned_partition_the_topic_lacks_is_named_once(broker: EmbeddedBroker,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    topic = unique_topic("two-partitions")
    async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    caplog.set_level(logging.WARNING, logger="akresil.consumer")
    async with FaultProxy(broker.bootstrap_servers, nodes=1) as proxy:
        async with Consumer(bootstrap_servers=proxy.bootstrap_servers, retry_backoff_ms=20, retry_backoff_max_ms=50,
                            metadata_max_age_ms=100) as consumer:
            consumer.assign([TopicPartition(topic, 1), TopicPartition(topic, 9)])
            with anyio.fail_after(30):
                while not warnings_about(caplog, topic):
                    assert await consumer.getmany(timeout_ms=100) == {}
                first_seen = len(proxy.requests(METADATA))
                while len(proxy.requests(METADATA)) < first_seen + 5:   # more answers without partition 9
                    assert await consumer.getmany(timeout_ms=100) == {}
    [warning] = warnings_about(caplog, topic)
    assert f"partition 9 of topic {topic!r} does not exist (the topic has 2)" in warning
