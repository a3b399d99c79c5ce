"""KIP-932 share groups on Apache Kafka (on by default in 4.x): acknowledge accept/release/reject and the
delivery counts, lock expiry, a killed member's records redelivered, and a group shared with confluent-kafka's
ShareConsumer and the Java client's KafkaShareConsumer.

Each group is configured first through IncrementalAlterConfigs on its GROUP resource (KIP-932's group
configs): ``share.auto.offset.reset=earliest`` (Kafka's default is the log end, so records produced before the
first member joined would never be seen) and, where a test needs it, a short ``share.record.lock.duration.ms``
(the harness allows down to 1 s).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import anyio
import pytest

from akresil import Producer, ShareConsumer, ShareRecord, TopicPartition, errors
from akresil.admin_types import ConfigResource
from akresil.testing import KafkaCluster
from akresil.testing.java_peer import JavaPeer

from .conftest import TopicMaker

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(fetch_max_wait_ms=200, request_timeout_ms=15_000, retry_backoff_ms=50)


async def share_group(cluster: KafkaCluster, group: str, **configs: str | int) -> str:
    """Set the group's configs (``share_record_lock_duration_ms=2000`` -> ``share.record.lock.duration.ms``)."""
    wanted = {"share.auto.offset.reset": "earliest",
              **{k.replace("_", "."): str(v) for k, v in configs.items()}}
    async with cluster.admin() as admin:
        (await admin.incremental_alter_configs({ConfigResource("group", group): wanted})).raise_on_error()
    return group


async def produce(bootstrap: str, topic: str, count: int, partitions: int) -> set[tuple[int, int]]:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=2) as producer:
        mds = []
        for p in range(partitions):
            mds += await producer.send_many(topic, [(None, b"v-%d-%d" % (p, i)) for i in range(count // partitions)],
                                            partition=p)
    return {(md.partition, md.offset) for md in mds}


async def drain(consumer: ShareConsumer, sink: list[ShareRecord], until: Callable[[], bool],
                ack: Callable[[ShareRecord], str | None] = lambda r: "accept") -> None:
    while not until():
        batch = await consumer.getmany(timeout_ms=100)
        for records in batch.values():
            for r in records:
                sink.append(r)
                kind = ack(r)
                if kind is not None:
                    consumer.acknowledge(r, kind)
        if batch:
            await consumer.commit()


async def nothing_left(cluster: KafkaCluster, topic: str, group: str, wait_s: float = 3.0) -> list[ShareRecord]:
    """What a new member of the group still gets within ``wait_s`` (after its assignment arrived)."""
    left: list[ShareRecord] = []
    async with ShareConsumer(topic, bootstrap_servers=cluster.bootstrap_servers, group_id=group, **FAST) as late:
        with anyio.fail_after(60):
            while not late.assignment():
                await late.getmany(timeout_ms=100)
        deadline = time.monotonic() + wait_s
        await drain(late, left, lambda: time.monotonic() > deadline)
    return left


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_released_records_come_back_with_a_higher_delivery_count_and_rejected_never(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str], backend: str) -> None:
    async def scenario() -> None:
        topic = await make_topic(partitions=2)
        group = await share_group(kafka_cluster, unique("sg"))
        produced = await produce(kafka_cluster.bootstrap_servers, topic, 40, 2)
        seen: list[ShareRecord] = []

        def decide(r: ShareRecord) -> str:
            if r.offset % 4 == 1 and r.delivery_count < 3:
                return "release"         # twice released, then accepted on the third delivery
            return "reject" if r.offset % 4 == 2 else "accept"

        async with ShareConsumer(topic, bootstrap_servers=kafka_cluster.bootstrap_servers, group_id=group,
                                 acknowledgement_mode="explicit", **FAST) as consumer:
            with anyio.fail_after(60):
                await drain(consumer, seen, lambda: len(seen) >= len(produced) + len(produced) // 2, decide)
            extra: list[ShareRecord] = []
            deadline = time.monotonic() + 2
            await drain(consumer, extra, lambda: time.monotonic() > deadline, decide)
        deliveries: dict[tuple[int, int], list[int]] = {}
        for r in seen + extra:
            deliveries.setdefault((r.partition, r.offset), []).append(r.delivery_count)
        assert set(deliveries) == produced
        for (p, off), counts in deliveries.items():
            if off % 4 == 1:
                assert counts == [1, 2, 3], (p, off, counts)
            else:
                assert counts == [1], (p, off, counts)     # accepted and rejected records: never again
        assert await nothing_left(kafka_cluster, topic, group) == []

    anyio.run(scenario, backend=backend)


async def test_records_held_past_the_lock_are_redelivered_and_late_acks_refused(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    lock_ms = 2000
    topic = await make_topic(partitions=1)
    group = await share_group(kafka_cluster, unique("sg"), share_record_lock_duration_ms=lock_ms)
    produced = await produce(kafka_cluster.bootstrap_servers, topic, 10, 1)
    async with ShareConsumer(topic, bootstrap_servers=kafka_cluster.bootstrap_servers, group_id=group,
                             acknowledgement_mode="explicit", **FAST) as consumer:
        first: list[ShareRecord] = []
        with anyio.fail_after(60):
            while len(first) < len(produced):
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    first.extend(records)
        taken_at = time.monotonic()
        assert consumer.acquisition_lock_timeout_ms == lock_ms     # the group's config, as ShareFetch reports it
        # hold them without acknowledging: the broker takes them back when the lock runs out
        again: list[ShareRecord] = []
        with anyio.fail_after(60):
            while len(again) < len(produced):
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    again.extend(records)
        redelivered_after_ms = (time.monotonic() - taken_at) * 1000
        assert {(r.partition, r.offset) for r in again} == produced
        assert {r.delivery_count for r in again} == {2}
        assert redelivered_after_ms >= lock_ms - 500   # never before the lock ran out (minus the fetch time)
        # acknowledging the first delivery now would settle a lock this consumer no longer holds
        consumer.acknowledge(first[0], "accept")
        results = await consumer.commit()
        assert isinstance(results[TopicPartition(topic, 0)], errors.AcquisitionLockExpiredError), results
        for r in again:
            consumer.acknowledge(r, "accept")
        assert set((await consumer.commit()).values()) == {None}
    assert await nothing_left(kafka_cluster, topic, group) == []


KILLED_MEMBER = """
import sys, anyio
from akresil import ShareConsumer
async def main():
    async with ShareConsumer(sys.argv[2], bootstrap_servers=sys.argv[1], group_id=sys.argv[3],
                             acknowledgement_mode="explicit", fetch_max_wait_ms=200) as c:
        held = []
        while len(held) < int(sys.argv[4]):
            for records in (await c.getmany(timeout_ms=200)).values():
                held.extend(records)
        print("HOLDING", len(held), flush=True)
        await anyio.sleep(3600)
anyio.run(main)
"""


async def test_a_killed_member_s_records_are_redelivered(kafka_cluster: KafkaCluster, make_topic: TopicMaker,
                                                         unique: Callable[[str], str]) -> None:
    """A member that holds records is SIGKILLed: they come back to the next member, delivery count 2."""
    topic = await make_topic(partitions=1)
    group = await share_group(kafka_cluster, unique("sg"), share_record_lock_duration_ms=5000)
    produced = await produce(kafka_cluster.bootstrap_servers, topic, 20, 1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_MEMBER, kafka_cluster.bootstrap_servers, topic, group,
                             str(len(produced))], stdout=subprocess.PIPE, env=env, text=True)
    try:
        with anyio.fail_after(90):
            line = await anyio.to_thread.run_sync(proc.stdout.readline)   # type: ignore[union-attr]
        assert line.startswith("HOLDING"), line
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    got: list[ShareRecord] = []
    async with ShareConsumer(topic, bootstrap_servers=kafka_cluster.bootstrap_servers, group_id=group,
                             **FAST) as heir:
        with anyio.fail_after(60):
            await drain(heir, got, lambda: len(got) >= len(produced))
    assert {(r.partition, r.offset) for r in got} == produced
    assert {r.delivery_count for r in got} == {2}


def ck_share_worker(bootstrap: str, group: str, topic: str, got: list[tuple[int, int, int]],
                    stop: threading.Event) -> None:
    """confluent-kafka's ShareConsumer (explicit mode): accept everything, commit after every poll."""
    import confluent_kafka

    consumer = confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                              "share.acknowledgement.mode": "explicit", "log_level": 3})
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            messages = consumer.poll(0.2)
            for m in messages:
                if m.error() is None:
                    got.append((m.partition(), m.offset(), m.delivery_count()))
                    consumer.acknowledge(m)
            if messages:
                consumer.commit_sync()
    finally:
        consumer.close()


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
    assert await nothing_left(kafka_cluster, topic, group) == []


async def test_subscribe_after_start_and_implicit_acceptance_on_close(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    """No topics at start; ``subscribe()`` goes out with the next heartbeat. Implicit mode accepts the last
    batch on close, so a later member of the group finds nothing."""
    topic = await make_topic(partitions=2)
    group = await share_group(kafka_cluster, unique("sg"))
    produced = await produce(kafka_cluster.bootstrap_servers, topic, 20, 2)
    got: list[ShareRecord] = []
    async with ShareConsumer(bootstrap_servers=kafka_cluster.bootstrap_servers, group_id=group, **FAST) as c:
        assert c.subscription() == frozenset() and await c.getmany(timeout_ms=200) == {}
        c.subscribe([topic])
        assert c.subscription() == frozenset({topic})
        with anyio.fail_after(60):
            while len(got) < len(produced):
                for records in (await c.getmany(timeout_ms=100)).values():
                    got.extend(records)      # never acknowledged by hand, never committed
    assert {(r.partition, r.offset) for r in got} == produced
    assert await nothing_left(kafka_cluster, topic, group) == []


async def test_async_for_accepts_only_the_records_it_yielded(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    """Implicit mode with ``async for``: leaving the loop after 5 records accepts those 5 (and the 3 a getmany
    hands out after it) on close; the rest come back to the next member with delivery count 2."""
    topic = await make_topic(partitions=1)
    group = await share_group(kafka_cluster, unique("sg"))
    produced = await produce(kafka_cluster.bootstrap_servers, topic, 20, 1)
    seen: list[ShareRecord] = []
    async with ShareConsumer(topic, bootstrap_servers=kafka_cluster.bootstrap_servers, group_id=group,
                             **FAST) as c:
        with anyio.fail_after(60):
            async for rec in c:
                seen.append(rec)
                if len(seen) == 5:
                    break
        # a getmany after the loop hands out first the records the loop took but did not yield
        rest = [r for records in (await c.getmany(max_records=3)).values() for r in records]
        assert [r.offset for r in rest] == [r.offset + 5 for r in seen[:3]]
    taken = {(r.partition, r.offset) for r in seen + rest}
    again: list[ShareRecord] = []
    async with ShareConsumer(topic, bootstrap_servers=kafka_cluster.bootstrap_servers, group_id=group,
                             **FAST) as late:
        with anyio.fail_after(60):
            await drain(late, again, lambda: len(again) >= len(produced) - len(taken))
    assert {(r.partition, r.offset) for r in again} == produced - taken
    assert {r.delivery_count for r in again} == {2}


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
