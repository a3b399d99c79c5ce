"""KIP-848 regex subscriptions on Apache Kafka (issue 36): ``pattern=`` with ``group_protocol="consumer"`` sends
``SubscribedTopicRegex``, so the broker resolves it and assigns a topic created after the consumer subscribed (the
client does not rejoin for it); a topic the regex does not match stays unassigned."""

from __future__ import annotations

from typing import Any, Callable

import anyio

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil.net.group_heartbeat import ConsumerGroupMember
from akresil.testing import KafkaCluster


async def test_a_topic_created_later_is_assigned_by_the_broker(kafka_cluster: KafkaCluster,
                                                               unique: Callable[[str], str]) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    prefix, group = unique("rx"), unique("g")
    early, late, other = f"{prefix}-early", f"{prefix}-late", f"not-{prefix}-late"
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(early, 1, 1)])
        got: list[Any] = []
        async with Consumer(pattern=rf"{prefix}-\w+", bootstrap_servers=bootstrap, group_id=group,
                            group_protocol="consumer", auto_offset_reset="earliest", fetch_max_wait_ms=200) as c:
            assert c._group is not None and isinstance(c._group.member, ConsumerGroupMember)
            with anyio.fail_after(60):
                while c.assignment() != {TopicPartition(early, 0)}:
                    await c.getmany(timeout_ms=100)
            await admin.create_topics([NewTopic(late, 2, 1), NewTopic(other, 1, 1)])
            async with Producer(bootstrap_servers=bootstrap) as producer:
                await producer.send(late, b"after subscribing", partition=1)
                await producer.send(other, b"not matched", partition=0)
            with anyio.fail_after(90):    # the coordinator refreshes regexes on its own schedule (seconds)
                while not got:
                    for records in (await c.getmany(timeout_ms=200)).values():
                        got.extend(records)
            assert [(r.topic, r.value) for r in got] == [(late, b"after subscribing")]
            assert c.assignment() == {TopicPartition(early, 0), TopicPartition(late, 0), TopicPartition(late, 1)}
            description = (await admin.describe_consumer_groups([group]))[group]
            assert description.group_type == "consumer"
            [member] = description.members
            assert {tp.topic for tp in member.assignment} == {early, late}    # the broker matched the whole name
