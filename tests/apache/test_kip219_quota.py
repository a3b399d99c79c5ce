"""KIP-219 under a real quota: Apache Kafka throttles a producer and a consumer that exceed their client quotas.

From Produce v6 and Fetch v8 on, the broker answers at once with ``throttle_time_ms`` and mutes the connection
on its side for that long; the client must send nothing more to that broker until the window ends (a request
written earlier would only sit unread in the broker's socket) and then resume.  Checked from akresil's hooks,
on akresil's clock: every request written to a node after a throttled answer from it is written at or after the
end of the mute window that answer opened, the windows really are hit (several throttled answers, requests
resumed after each), and every record arrives, once, in order.
"""

from __future__ import annotations

from typing import Any, Callable

import anyio

from akresil import Consumer, Producer, TopicPartition
from akresil.core import events
from akresil.protocol.api import ApiKey
from akresil.testing import KafkaCluster

from .conftest import TopicMaker
from .resilience import TimedHook

#: bytes/s, for the producer and for the consumer. Kafka measures a new client's rate over at least 10 of its
#: 11 one-second samples, so a client is throttled only once it has moved more than ~10 s worth of its quota:
#: 800 KB at 50 KB/s are ~6 s of throttling each way.
RATE = 50 * 1024
RECORDS = 800
VALUE = 1024
OFFERED = 200 * 1024


def mute_violations(hook: TimedHook) -> list[tuple[int, float, float]]:
    """``(node, sent at, muted until)`` of each request written to a node inside a mute window it knew of."""
    muted_until: dict[int, float] = {}
    bad = []
    for t, name, f in hook.events:
        if name == events.THROTTLED and f["muted"]:
            muted_until[f["node_id"]] = max(muted_until.get(f["node_id"], 0.0), f["muted_until"])
        elif name == events.REQUEST_SENT and t < muted_until.get(f["node_id"], 0.0):
            bad.append((f["node_id"], t, muted_until[f["node_id"]]))
    return bad


def resumed_after_each_window(hook: TimedHook) -> int:
    """How many mute windows were followed by a request to the same node (the client resumed)."""
    windows = [(f["node_id"], f["muted_until"]) for _, f in hook.named(events.THROTTLED, muted=True)]
    sends = [(f["node_id"], t) for t, f in hook.named(events.REQUEST_SENT)]
    return sum(1 for node, end in windows if any(n == node and t >= end for n, t in sends))


async def test_no_request_reaches_a_muted_connection_and_everything_arrives(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    topic = await make_topic(partitions=1, replication_factor=3)
    producer_id, consumer_id = unique("kip219-p"), unique("kip219-c")
    await kafka_cluster.set_client_quota(client_id=producer_id, producer_byte_rate=RATE)
    await kafka_cluster.set_client_quota(client_id=consumer_id, consumer_byte_rate=RATE)
    p_hook, c_hook = TimedHook(), TimedHook()
    values = [b"%05d" % i + b"x" * (VALUE - 5) for i in range(RECORDS)]
    acked: list[Any] = []
    got: list[bytes] = []
    try:
        # Java's 16 KB batches, records offered at 200 KB/s: many requests, some of them after each mute
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, client_id=producer_id, linger_ms=5,
                            batch_size=16 * 1024, hooks=[p_hook]) as producer, \
                Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers, client_id=consumer_id,
                         auto_offset_reset="earliest", fetch_max_wait_ms=200, max_partition_fetch_bytes=64 * 1024,
                         hooks=[c_hook]) as consumer:
            consumer.assign([TopicPartition(topic, 0)])

            async def produce() -> None:
                futures = []
                for v in values:
                    futures.append(await producer.enqueue(topic, v, partition=0))
                    await anyio.sleep(VALUE / OFFERED)
                acked.extend([await f for f in futures])

            async def consume() -> None:
                while len(got) < RECORDS:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got.extend(r.value for r in records)

            with anyio.fail_after(90):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(produce)
                    tg.start_soon(consume)
    finally:
        await kafka_cluster.set_client_quota(client_id=producer_id)
        await kafka_cluster.set_client_quota(client_id=consumer_id)

    # the broker throttled both for real, on the KIP-219 versions (answer first, then mute)
    for hook, api, first_muting in ((p_hook, ApiKey.PRODUCE, 6), (c_hook, ApiKey.FETCH, 8)):
        throttled = [f for _, f in hook.named(events.THROTTLED, api_key=int(api))]
        assert len(throttled) >= 2 and all(f["muted"] and f["version"] >= first_muting and f["throttle_ms"] > 0
                                           for f in throttled), throttled
        assert not mute_violations(hook), mute_violations(hook)[:5]
        assert resumed_after_each_window(hook) >= 1
        assert sum(f["throttle_ms"] for f in throttled) >= 2000     # held back for seconds, not a blip
    assert [md.offset for md in acked] == list(range(RECORDS))
    assert got == values
