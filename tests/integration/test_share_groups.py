"""KIP-932 share groups end to end on librdkafka's mock cluster, with confluent-kafka's ShareConsumer as a peer.

The mock (librdkafka 2.16) implements ShareGroupHeartbeat, ShareFetch and ShareAcknowledge v1 with record
locks, delivery counts and session epochs; docs/brokers.md lists what it does differently from Kafka.
Each test sets the mock's share-group knobs first: ``auto.offset.reset=earliest`` (Kafka's default is the
log end, so records produced before the first member joins would never be seen) and a short heartbeat
interval, so assignment changes reach members quickly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio
import pytest

from akresil import Admin, NewTopic, Producer, ShareConsumer, ShareRecord, TopicPartition, errors
from akresil.testing import EmbeddedBroker
from akresil.testing.rdkafka_mock import MockCluster

from ..harness.e2e import check_backoff_gaps, loop_lag, unique_topic

pytestmark = pytest.mark.broker
ROOT = Path(__file__).resolve().parents[2]
FAST = dict(fetch_max_wait_ms=200, request_timeout_ms=10_000, retry_backoff_ms=50)


@pytest.fixture
def mock() -> Any:
    with MockCluster(3) as cluster:
        cluster.share_set_auto_offset_reset(True)
        cluster.share_set_heartbeat_interval(300)
        yield cluster


async def produce(bootstrap: str, topic: str, count: int, partitions: int) -> set[tuple[int, int]]:
    """``count`` records spread over ``partitions``; returns every (partition, offset)."""
    async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
        mds = []
        for p in range(partitions):
            mds += await producer.send_many(topic, [(None, b"v-%d-%d" % (p, i)) for i in range(count // partitions)],
                                            partition=p)
    return {(md.partition, md.offset) for md in mds}


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


def run(scenario: Callable[[], Awaitable[None]], backend: str = "asyncio") -> None:
    async def main() -> None:
        before = {task.id for task in anyio.get_running_tasks()}
        await scenario()
        leftover = [t.name for t in anyio.get_running_tasks() if t.id not in before]
        assert leftover == [], f"tasks still running after close: {leftover}"
    anyio.run(main, backend=backend)


def test_three_akresil_and_one_confluent_share_consumer_drain_a_topic_exactly_once(mock: MockCluster) -> None:
    """The confluent-kafka member starts first on a first half of the records; the three akresil members join
    (the mock then splits the 6 partitions over the 4 members) and the second half is produced: every record is
    delivered once, to one member, and accepted."""
    topic, group = unique_topic("share-drain"), unique_topic("g")
    mock.create_topic(topic, 6)
    ck_got: list[tuple[int, int, int]] = []
    stop = threading.Event()

    async def scenario() -> None:
        produced = await produce(mock.bootstrap_servers, topic, 600, 6)
        thread = threading.Thread(target=ck_share_worker, args=(mock.bootstrap_servers, group, topic, ck_got, stop))
        thread.start()
        ours: list[list[ShareRecord]] = [[], [], []]
        try:
            with anyio.fail_after(30):
                while not ck_got:
                    await anyio.sleep(0.01)
            async with ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group,
                                     acknowledgement_mode="explicit", **FAST) as a, \
                    ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group, **FAST) as b, \
                    ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group,
                                  max_poll_records=50, **FAST) as c:
                with anyio.fail_after(60):
                    async with anyio.create_task_group() as tg:
                        for consumer, sink in zip((a, b, c), ours):
                            tg.start_soon(drain, consumer, sink,
                                          lambda: len({(r.partition, r.offset) for s in ours for r in s}
                                                      | {(p, o) for p, o, _ in ck_got}) >= 600 + 1200)
                        while not (a.assignment() and b.assignment() and c.assignment()):
                            await anyio.sleep(0.01)
                        produced |= await produce(mock.bootstrap_servers, topic, 1200, 6)
                assert len({a.member_id, b.member_id, c.member_id}) == 3
        finally:
            stop.set()
            await anyio.to_thread.run_sync(thread.join)
        delivered = [(r.partition, r.offset, r.delivery_count) for sink in ours for r in sink] + ck_got
        assert {(p, o) for p, o, _ in delivered} == produced
        # A record is handed out again only as a new delivery (count + 1), never twice under one delivery.
        # (confluent-kafka's member sometimes loses its share session on the mock while members join; its
        # acknowledgements then fail and those records come back with delivery count 2: see docs/brokers.md.)
        per_delivery = [(p, o, dc) for p, o, dc in delivered]
        assert len(per_delivery) == len(set(per_delivery)), "a record was handed out twice under one delivery"
        counts: dict[tuple[int, int], list[int]] = {}
        for p, o, dc in delivered:
            counts.setdefault((p, o), []).append(dc)
        assert all(sorted(c) == list(range(1, len(c) + 1)) for c in counts.values())
        # both clients took part (which akresil members got records depends on when the mock last re-split
        # the partitions: a member assigned at first may lose its partitions to a later joiner)
        assert any(ours) and ck_got, "akresil and confluent-kafka members both took part"

        # every record was accepted: a new member of the group finds nothing left
        async with ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group, **FAST) as late:
            leftovers: list[ShareRecord] = []
            deadline = time.monotonic() + 2.0
            await drain(late, leftovers, lambda: time.monotonic() > deadline)
            assert leftovers == []

    run(scenario)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_released_records_come_back_with_a_higher_delivery_count_and_rejected_never(
        mock: MockCluster, backend: str) -> None:
    topic, group = unique_topic("share-ack"), unique_topic("g")
    mock.create_topic(topic, 2)

    async def scenario() -> None:
        produced = await produce(mock.bootstrap_servers, topic, 40, 2)
        seen: list[ShareRecord] = []

        def decide(r: ShareRecord) -> str:
            if r.offset % 4 == 1 and r.delivery_count < 3:
                return "release"         # twice released, then accepted on the third delivery
            return "reject" if r.offset % 4 == 2 else "accept"

        async with ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group,
                                 acknowledgement_mode="explicit", **FAST) as consumer:
            with anyio.fail_after(30):
                await drain(consumer, seen, lambda: len(seen) >= len(produced) + len(produced) // 2, decide)
            extra: list[ShareRecord] = []
            deadline = time.monotonic() + 1.5
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

    run(scenario, backend)


def test_records_held_past_the_lock_timeout_are_redelivered_and_late_acks_refused(mock: MockCluster) -> None:
    topic, group = unique_topic("share-lock"), unique_topic("g")
    mock.create_topic(topic, 1)
    lock_ms = 1500
    mock.share_set_record_lock_duration(lock_ms)

    async def scenario() -> None:
        produced = await produce(mock.bootstrap_servers, topic, 10, 1)
        async with ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group,
                                 acknowledgement_mode="explicit", **FAST) as consumer:
            first: list[ShareRecord] = []
            with anyio.fail_after(20):
                while len(first) < len(produced):
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        first.extend(records)
            taken_at = time.monotonic()
            assert consumer.acquisition_lock_timeout_ms == lock_ms
            # hold them without acknowledging: the broker takes them back when the lock runs out
            again: list[ShareRecord] = []
            with anyio.fail_after(20):
                while len(again) < len(produced):
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        again.extend(records)
            redelivered_after_ms = (time.monotonic() - taken_at) * 1000
            assert {(r.partition, r.offset) for r in again} == produced
            assert {r.delivery_count for r in again} == {2}
            assert redelivered_after_ms >= lock_ms - 300   # never before the lock ran out (minus the fetch time)
            # acknowledging the first delivery now would settle a lock this consumer no longer has
            consumer.acknowledge(first[0], "accept")
            results = await consumer.commit()
            assert isinstance(results[TopicPartition(first[0].topic, first[0].partition)],
                              errors.AcquisitionLockExpiredError)
            for r in again:
                consumer.acknowledge(r, "accept")
            assert set((await consumer.commit()).values()) == {None}

    run(scenario)


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


def test_a_killed_member_s_records_are_redelivered(mock: MockCluster) -> None:
    topic, group = unique_topic("share-kill"), unique_topic("g")
    mock.create_topic(topic, 1)
    mock.share_set_record_lock_duration(3000)
    # the mock gives each partition to one member at a time: the dead member keeps it until its session expires
    mock.share_set_session_timeout(2000)

    async def scenario() -> None:
        produced = await produce(mock.bootstrap_servers, topic, 20, 1)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-c", KILLED_MEMBER, mock.bootstrap_servers, topic, group,
                                 str(len(produced))], stdout=subprocess.PIPE, env=env, text=True)
        try:
            line = await anyio.to_thread.run_sync(proc.stdout.readline)   # type: ignore[union-attr]
            assert line.startswith("HOLDING"), line
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        got: list[ShareRecord] = []
        async with ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group, **FAST) as heir:
            with anyio.fail_after(20):
                await drain(heir, got, lambda: len(got) >= len(produced))
        assert {(r.partition, r.offset) for r in got} == produced
        assert {r.delivery_count for r in got} == {2}

    run(scenario)


def test_share_consumer_config_errors_name_the_key() -> None:
    with pytest.raises(errors.ConfigError, match="group_id"):
        ShareConsumer("t", bootstrap_servers="127.0.0.1:1")
    with pytest.raises(errors.ConfigError, match="acknowledgement_mode"):
        ShareConsumer("t", bootstrap_servers="127.0.0.1:1", group_id="g", acknowledgement_mode="auto")
    with pytest.raises(errors.ConfigError, match="auto_offset_reset"):
        ShareConsumer("t", bootstrap_servers="127.0.0.1:1", group_id="g", auto_offset_reset="earliest")


def test_a_broker_without_share_groups_fails_clearly(mock: MockCluster) -> None:
    topic = unique_topic("share-none")
    mock.create_topic(topic, 1)
    mock.set_api_version(76, -1, -1)     # ShareGroupHeartbeat gone

    async def scenario() -> None:
        async with ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id="g", **FAST) as c:
            with anyio.fail_after(10), pytest.raises(errors.UnsupportedVersionError, match="share"):
                while True:
                    await c.getmany(timeout_ms=100)

    run(scenario)


@pytest.mark.timeout(60)     # without the fix ``async for`` waited forever for records that cannot come
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_async_for_on_tansu_raises_unsupported_version_naming_kafka_4_1(broker: EmbeddedBroker, backend: str) -> None:
    """Tansu has no share-group APIs: the first ``async for`` step raises instead of waiting, with the fix named."""
    topic = unique_topic("share-tansu")

    async def scenario() -> None:
        async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
        async with ShareConsumer(topic, bootstrap_servers=broker.bootstrap_servers, group_id=topic, **FAST) as c:
            with pytest.raises(errors.UnsupportedVersionError, match=r"SHARE_GROUP_HEARTBEAT.*4\.1\+"):
                async for _ in c:
                    pass
            with pytest.raises(errors.UnsupportedVersionError):     # and every later call, at once
                await c.getmany(timeout_ms=60_000)

    run(scenario, backend)


def test_share_fetch_errors_back_off_exponentially(mock: MockCluster) -> None:
    """KIP-580 on ShareFetch: four failed fetches to the leader are retried after ~100, 200, 400, 800 ms (±20%),
    each time opening a new share session; the records then arrive once."""
    topic = unique_topic("share-backoff")
    mock.create_topic(topic, 1)

    async def scenario() -> None:
        produced = await produce(mock.bootstrap_servers, topic, 5, 1)
        mock.push_request_errors(78, [errors.UnknownServerError.errno] * 4)
        mock.start_request_tracking()
        got: list[ShareRecord] = []
        async with loop_lag() as lag, ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers,
                                                    group_id="g", retry_backoff_ms=100, retry_backoff_max_ms=1000,
                                                    fetch_max_wait_ms=100) as c:
            with anyio.fail_after(20):
                await drain(c, got, lambda: len(got) >= len(produced))
            fetches = [r.timestamp_us / 1000 for r in mock.stop_request_tracking() if r.api_key == 78]
            gaps = [b - a for a, b in zip(fetches, fetches[1:])][:4]
            assert check_backoff_gaps(gaps, [100, 200, 400, 800], slack_ms=lag.slack_ms()) == []
        assert sorted((r.partition, r.offset) for r in got) == sorted(produced)
        assert {r.delivery_count for r in got} == {1}

    run(scenario)


def test_subscribe_after_start_and_implicit_acceptance_on_close(mock: MockCluster) -> None:
    """No topics at start; ``subscribe()`` goes out with the next heartbeat. Implicit mode accepts the last
    batch on close, so a second consumer of the group finds nothing."""
    topic, group = unique_topic("share-sub"), unique_topic("g")
    mock.create_topic(topic, 2)

    async def scenario() -> None:
        produced = await produce(mock.bootstrap_servers, topic, 20, 2)
        got: list[ShareRecord] = []
        async with ShareConsumer(bootstrap_servers=mock.bootstrap_servers, group_id=group, **FAST) as c:
            assert c.subscription() == frozenset() and await c.getmany(timeout_ms=200) == {}
            c.subscribe([topic])
            assert c.subscription() == frozenset({topic})
            with anyio.fail_after(20):
                while len(got) < len(produced):
                    for records in (await c.getmany(timeout_ms=100)).values():
                        got.extend(records)      # never acknowledged by hand, never committed
        assert {(r.partition, r.offset) for r in got} == produced
        async with ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group, **FAST) as late:
            left: list[ShareRecord] = []
            deadline = time.monotonic() + 1.5
            await drain(late, left, lambda: time.monotonic() > deadline)
            assert left == []

    run(scenario)


def test_async_for_accepts_only_the_records_it_yielded(mock: MockCluster) -> None:
    """Implicit mode with ``async for``: a refill takes up to ``max_poll_records``; leaving the loop after 5
    accepts those 5 on close, and the rest come back (delivery count 2) to the next member."""
    topic, group = unique_topic("share-iter"), unique_topic("g")
    mock.create_topic(topic, 1)

    async def scenario() -> None:
        produced = await produce(mock.bootstrap_servers, topic, 20, 1)
        seen: list[ShareRecord] = []
        async with ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group, **FAST) as c:
            with anyio.fail_after(20):
                async for rec in c:
                    seen.append(rec)
                    if len(seen) == 5:
                        break
            assert c.acquisition_lock_timeout_ms is not None
            # a getmany after the loop hands out the records the loop took but did not yield, first
            rest = [r for records in (await c.getmany(max_records=3)).values() for r in records]
            assert [r.offset for r in rest] == [r.offset + 5 for r in seen[:3]]
        taken = {(r.partition, r.offset) for r in seen + rest}
        again: list[ShareRecord] = []
        async with ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group, **FAST) as late:
            with anyio.fail_after(20):
                await drain(late, again, lambda: len(again) >= len(produced) - len(taken))
        assert {(r.partition, r.offset) for r in again} == produced - taken
        assert {r.delivery_count for r in again} == {2}

    run(scenario)
