"""KIP-392 fetch from the closest replica, on Apache Kafka: brokers in racks ``rack-1`` .. ``rack-3`` with
``replica.selector.class=RackAwareReplicaSelector`` (tests/apache/conftest.py).

A consumer whose ``client_rack`` is a follower's rack is pointed by the leader to that follower and reads the
partition from it: the bytes received per broker show it (the leader sends only its first answer, which names
the follower and carries no records). When the follower is killed, the consumer goes back to the leader and
reads on from where it was: every record once, in order."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

import anyio

from akresil import Consumer, Producer, TopicPartition
from akresil.testing import KafkaCluster

from .conftest import TopicMaker, broker_down, rack

RECORDS = 200
VALUE = bytes(1000)
PAYLOAD = RECORDS * len(VALUE)


class BytesPerNode:
    """Bytes the consumer read from each broker (``connection_bytes_received``, every connection of it)."""

    def __init__(self) -> None:
        self.received: Counter[int] = Counter()

    def on_connection_bytes_received(self, node_id: int, nbytes: int, **_: Any) -> None:
        self.received[node_id] += nbytes


async def produce(kafka_cluster: KafkaCluster, topic: str, first: int) -> None:
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, acks="all") as producer:
        await producer.send_many(topic, [(str(first + i).encode(), VALUE) for i in range(RECORDS)], partition=0)


async def read(consumer: Consumer, tp: TopicPartition, count: int) -> list[int]:
    keys: list[int] = []
    with anyio.fail_after(120):      # a guard against a hang, not a measurement
        while len(keys) < count:
            got = await consumer.getmany(tp, timeout_ms=1000)
            keys += [int(r.key) for r in got.get(tp, ()) if r.key is not None]
    return keys


async def test_a_consumer_reads_from_the_follower_in_its_rack_and_from_the_leader_when_the_follower_dies(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    topic = await make_topic(partitions=1, replication_factor=3)
    tp = TopicPartition(topic, 0)
    leader, _ = await kafka_cluster.leader(topic, 0)
    follower = next(n for n in kafka_cluster.broker_ids if n != leader)
    await produce(kafka_cluster, topic, 0)
    counted = BytesPerNode()
    async with Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers, client_id=unique("rack-c"),
                        client_rack=rack(follower), fetch_max_wait_ms=200, hooks=[counted]) as consumer:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        assert await read(consumer, tp, RECORDS) == list(range(RECORDS))
        from_follower, from_leader = counted.received[follower], counted.received[leader]
        assert from_follower > PAYLOAD, counted.received          # the records came from the follower
        assert from_leader < PAYLOAD / 10, counted.received       # the leader only pointed there

        async with broker_down(kafka_cluster, follower):
            await produce(kafka_cluster, topic, RECORDS)
            assert await read(consumer, tp, RECORDS) == list(range(RECORDS, 2 * RECORDS))
            assert counted.received[leader] - from_leader > PAYLOAD, counted.received   # now the leader served
