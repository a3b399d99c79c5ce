"""Rebootstrap (KIP-899) on Apache Kafka: every broker a client knows moves to a new address.

The client reaches the cluster through a ``FaultProxy`` (three virtual brokers in front of broker 1, which leads
the test's partition); its ``bootstrap_servers`` name the first proxy's node 1 and one more address, where
nothing listens yet, as a DNS name or a load balancer in front of a redeployed cluster would. Then the first
proxy goes away and a second one answers on new ports, node 1 on that spare bootstrap address: none of the
addresses the clients learned from Metadata answers any more. A producer and a consumer that started before
the move go back to ``bootstrap_servers`` (``metadata_recovery_strategy='rebootstrap'``, the default), learn the
new addresses and carry on: the records sent after the move arrive after those sent before, none lost. With
``'none'`` they would retry the old addresses for ever (tests/unit/test_rebootstrap.py shows that rule)."""

from __future__ import annotations

from typing import Callable

import anyio

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil.testing import FaultProxy, KafkaCluster, free_port

RECORDS = 50


async def read(consumer: Consumer, tp: TopicPartition, count: int) -> list[bytes]:
    values: list[bytes] = []
    with anyio.fail_after(120):      # a guard against a hang, not a measurement
        while len(values) < count:
            got = await consumer.getmany(tp, timeout_ms=1000)
            values += [r.value for r in got.get(tp, ()) if r.value is not None]
    return values


async def test_clients_find_a_cluster_whose_brokers_all_moved(kafka_cluster: KafkaCluster,
                                                              unique: Callable[[str], str]) -> None:
    topic = unique("moved")
    async with Admin(bootstrap_servers=kafka_cluster.bootstrap_servers) as admin:
        # broker 1 leads it: the proxies forward everything to broker 1
        await admin.create_topics([NewTopic(topic, replica_assignment={0: [1, 2, 3]})])
    tp = TopicPartition(topic, 0)
    upstream = kafka_cluster.bootstrap(brokers=[1])
    spare = free_port()
    before = [b"before-%d" % i for i in range(RECORDS)]
    after = [b"after-%d" % i for i in range(RECORDS)]
    first = await FaultProxy(upstream, nodes=3).astart()
    try:
        bootstrap = f"{first.address(1)},127.0.0.1:{spare}"
        async with Producer(bootstrap_servers=bootstrap, client_id=unique("moved-p"), retry_backoff_max_ms=200) \
                as producer, Consumer(bootstrap_servers=bootstrap, client_id=unique("moved-c"),
                                      auto_offset_reset="earliest", fetch_max_wait_ms=200,
                                      retry_backoff_max_ms=200) as consumer:
            consumer.assign([tp])
            await producer.send_many(topic, [(None, v) for v in before], partition=0)
            assert await read(consumer, tp, RECORDS) == before
            await first.astop()
            second = await FaultProxy(upstream, nodes=3, ports=[spare, free_port(), free_port()]).astart()
            try:
                with anyio.fail_after(120):
                    await producer.send_many(topic, [(None, v) for v in after], partition=0)
                assert await read(consumer, tp, RECORDS) == after
                assert {n for n in consumer._cluster.metadata.snapshot.brokers} == {1, 2, 3}
                moved = {consumer._cluster.metadata.snapshot.brokers[n].port for n in (1, 2, 3)}
                assert moved == {second.port(n) for n in (1, 2, 3)}
                assert consumer._cluster.recovery.rebootstraps >= 1
                assert producer._cluster.recovery.rebootstraps >= 1
            finally:
                await second.astop()
    finally:
        await first.astop()
