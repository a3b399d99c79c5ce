"""Consumer groups on librdkafka's mock cluster (3 brokers, 6 partitions, partition p led by p % 3 + 1).

The mock mishandles correct flexible group requests and answers a follower's SyncGroup that arrives after the
leader's with INVALID_REQUEST (docs/brokers.md). The harness caps the group versions (``GROUP_VERSION_CAP``) and
``MockCluster.let_followers_sync_first`` orders one rebalance's SyncGroups: with both, two akresil consumers split the
partitions and read everything.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import pytest

from akresil import Consumer, TopicPartition

from ..harness.e2e import fast_producer, mock_harness, unique_topic

pytestmark = pytest.mark.broker

PARTITIONS = 6
PER_PARTITION = 50


def group_consumer(bootstrap: str, topic: str, group: str, name: str) -> Consumer:
    return Consumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=name,
                    auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=300,
                    fetch_max_wait_ms=100, retry_backoff_ms=50, enable_auto_commit=False)


@contextlib.asynccontextmanager
async def members(bootstrap: str, topic: str, group: str) -> AsyncIterator[tuple[Consumer, Consumer]]:
    async with group_consumer(bootstrap, topic, group, "m1") as c1, group_consumer(bootstrap, topic, group, "m2") as c2:
        yield c1, c2


async def test_two_consumers_split_the_partitions_and_read_everything() -> None:
    with mock_harness() as h:
        topic, group = unique_topic("mockgroup"), unique_topic("g")
        await h.create_topic(topic, PARTITIONS)
        async with fast_producer(h.bootstrap_servers) as producer:
            expected = {(p, b"%d-%d" % (p, i)) for p in range(PARTITIONS) for i in range(PER_PARTITION)}
            for p, value in sorted(expected):
                await producer.enqueue(topic, value, partition=p)
            await producer.flush()

        seen: dict[str, set[tuple[int, bytes]]] = {"m1": set(), "m2": set()}
        h.mock.let_followers_sync_first()
        async with members(h.bootstrap_servers, topic, group) as (c1, c2):
            with anyio.fail_after(30):
                while seen["m1"] | seen["m2"] != expected or not (c1.assignment() and c2.assignment()):
                    for name, c in (("m1", c1), ("m2", c2)):
                        batches = await c.getmany(timeout_ms=100)
                        seen[name] |= {(tp.partition, r.value) for tp, recs in batches.items() for r in recs}
            a1, a2 = c1.assignment(), c2.assignment()

    everything = {TopicPartition(topic, p) for p in range(PARTITIONS)}
    assert a1 | a2 == everything and not a1 & a2, (a1, a2)
    assert len(a1) == len(a2) == PARTITIONS // 2
    # each member read from the partitions it held at the end (a rebalance may have moved some earlier)
    assert {(p, v) for p, v in expected if TopicPartition(topic, p) in a1} <= seen["m1"]
    assert {(p, v) for p, v in expected if TopicPartition(topic, p) in a2} <= seen["m2"]
