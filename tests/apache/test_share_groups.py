"""KIP-932 share groups on Apache Kafka only (on by default in 4.x): a group shared with confluent-kafka's
ShareConsumer and the Java client's KafkaShareConsumer, Kafka's acquire modes, ShareFetch v2's layout.  What every
broker with share groups must do (acknowledgements, locks, a killed member, implicit acceptance) runs on Kafka and
on librdkafka's mock in tests/capabilities/test_share_groups.py.

Each group is configured first through IncrementalAlterConfigs on its GROUP resource (KIP-932's group
configs): ``share.auto.offset.reset=earliest`` (``harness.share.share_group``).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

import anyio
import pytest

from akresil import Producer, ShareConsumer, ShareRecord
from akresil.testing import KafkaCluster
from akresil.testing.java_peer import JavaPeer

from ..harness.share import FAST, ck_share_worker, drain, nothing_left, produce, share_group
from .conftest import TopicMaker


async def test_akresil_confluent_kafka_and_java_share_a_group_and_drain_a_topic_once(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    """Two akresil members, confluent-kafka's ShareConsumer and the Java KafkaShareConsumer in one share group:
    Kafka hands every partition to every member and each record to one of them; every record is delivered
    once and accepted, and nothing is left for a later member."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await make_topic(partitions=3)
    group = await share_group(kafka_cluster, unique("sg"))
    produced = await produce(bootstrap, topic, 300, 3)
    TOTAL = 1200
    ck_got: list[tuple[int, int, int]] = []
    ours: list[list[ShareRecord]] = [[], []]
    stop = threading.Event()
    thread = threading.Thread(target=ck_share_worker, args=(bootstrap, group, topic, ck_got, stop))

    def delivered() -> list[tuple[int, int, int]]:
        java = [(r["partition"], r["offset"], r["delivery_count"]) for r in peer.records]
        return [(r.partition, r.offset, r.delivery_count) for s in ours for r in s] + ck_got + java

    async with JavaPeer("share-consume", bootstrap=bootstrap, topic=topic, group=group) as peer:
        thread.start()
        try:
            async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                     acknowledgement_mode="explicit", **FAST) as a, \
                    ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, max_poll_records=20,
                                  **FAST) as b:
                # the Java member and confluent-kafka's take part in what follows
                await peer.wait_until(lambda p: bool(p.of("ready")), 90)
                with anyio.fail_after(90):
                    async with anyio.create_task_group() as tg:
                        for consumer, sink in zip((a, b), ours):
                            tg.start_soon(drain, consumer, sink,
                                          lambda: len({(p, o) for p, o, _ in delivered()}) >= TOTAL)
                        # a trickle until every member has had records, then the rest at once
                        while not (peer.records and ck_got and all(ours)) and len(produced) < TOTAL - 30:
                            produced |= await produce(bootstrap, topic, 30, 3)
                            await anyio.sleep(0.5)
                        produced |= await produce(bootstrap, topic, TOTAL - len(produced), 3)
        finally:
            stop.set()
            await anyio.to_thread.run_sync(thread.join)
    everything = delivered()
    assert {(p, o) for p, o, _ in everything} == produced
    # a record is handed out again only as a new delivery (count + 1), never twice under one delivery
    assert len(everything) == len(set(everything)), "a record was handed out twice under one delivery"
    counts: dict[tuple[int, int], list[int]] = {}
    for p, o, dc in everything:
        counts.setdefault((p, o), []).append(dc)
    assert all(sorted(c) == list(range(1, len(c) + 1)) for c in counts.values())
    assert all(ours) and ck_got and peer.records, "every member took part"
    assert await nothing_left(bootstrap, topic, group) == []


@pytest.mark.parametrize("mode", ["batch_optimized", "record_limit"])
async def test_share_acquire_mode_decides_whether_a_poll_may_finish_a_batch(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str], mode: str) -> None:
    """Kafka acquires whole batches: with batches of 50 and max_poll_records=20, the batch-optimized mode (the
    Java client's default) hands a whole batch out in one getmany; record_limit never more than 20. A
    max_records passed to getmany is a hard limit in both. Every record is delivered once either way."""
    topic = await make_topic(partitions=1)
    group = await share_group(kafka_cluster, unique("sg"))
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, linger_ms=50) as producer:
        for b in range(4):       # one batch of 50 each
            await producer.send_many(topic, [(None, b"b%d-%d" % (b, i)) for i in range(50)], partition=0)
    sizes: list[int] = []
    seen: list[int] = []
    async with ShareConsumer(topic, bootstrap_servers=kafka_cluster.bootstrap_servers, group_id=group,
                             max_poll_records=20, share_acquire_mode=mode, **FAST) as c:  # type: ignore[arg-type]
        with anyio.fail_after(60):
            while len(seen) < 150:
                got = [r for recs in (await c.getmany(timeout_ms=200)).values() for r in recs]
                if got:
                    sizes.append(len(got))
                    seen += [r.offset for r in got]
                    await c.commit()
            while len(seen) < 200:
                got = [r for recs in (await c.getmany(timeout_ms=200, max_records=7)).values() for r in recs]
                assert len(got) <= 7
                seen += [r.offset for r in got]
    assert sorted(seen) == list(range(200))
    if mode == "batch_optimized":
        assert max(sizes) >= 50 and all(n % 50 == 0 for n in sizes), sizes
    else:
        assert max(sizes) <= 20, sizes


async def test_share_fetch_v2_layout_is_the_broker_s(kafka_cluster: KafkaCluster) -> None:
    """ShareFetch v2 (Kafka 4.2+: ShareAcquireMode, then IsRenewAck, KIP-1206/KIP-1222) as akresil encodes it is
    parsed by the broker: an answer comes (an error code for a member that never joined), not a closed connection
    (a request Kafka cannot parse). akresil sends v1 today; this keeps v2 ready."""
    from akresil.net.connection import Connection
    from akresil.protocol.api import ApiKey

    host, port = kafka_cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    conn = await Connection.connect(host, int(port))
    try:
        body = {"group_id": "never-joined", "member_id": "m" * 22, "share_session_epoch": 0, "max_wait_ms": 0,
                "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10, "share_acquire_mode": 1,
                "is_renew_ack": False, "topics": [], "forgotten_topics_data": []}
        response = await conn.request(ApiKey.SHARE_FETCH, body, version=2, timeout_ms=10_000)
        assert isinstance(response.get("error_code"), int)
    finally:
        await conn.close()


async def test_a_missing_topic_is_named_once(kafka_cluster: KafkaCluster, unique: Callable[[str], str],
                                             caplog: pytest.LogCaptureFixture) -> None:
    """As the consumer does (issue 25): one WARNING naming the topic, not one per metadata refresh."""
    missing = unique("missing-share")
    caplog.set_level(logging.WARNING, logger="akresil.share_consumer")

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "akresil.share_consumer"
                and r.levelno == logging.WARNING and missing in r.getMessage()]

    async with ShareConsumer(missing, bootstrap_servers=kafka_cluster.bootstrap_servers, group_id=unique("sg"),
                             retry_backoff_ms=20, retry_backoff_max_ms=50, metadata_max_age_ms=100) as consumer:
        with anyio.fail_after(30):
            while not warnings():
                assert await consumer.getmany(timeout_ms=100) == {}
        for _ in range(10):          # a second of 100 ms metadata refreshes that still say it is missing
            assert await consumer.getmany(timeout_ms=100) == {}
    [warning] = warnings()
    assert f"topic {missing!r} does not exist: this share consumer gets no records" in warning
