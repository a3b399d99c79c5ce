"""KIP-932 share groups on every broker that has them (Apache Kafka 4.x, librdkafka's mock): acknowledge accept /
release / reject and the delivery counts, lock expiry, a killed member's records redelivered, subscribing after the
start, and implicit acceptance of what ``async for`` yielded.  After each, a later member of the group finds nothing
left, and no task outlives the clients.

Broker-only tests stay with their broker: tests/apache/test_share_groups.py (the Java client and confluent-kafka in
one group, acquire modes, ShareFetch v2), tests/integration/test_share_groups.py (the mock's error injection, a
broker without share groups).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import anyio
import pytest

from akresil import Producer, ShareConsumer, ShareRecord, TopicPartition, errors
from akresil.testing import BrokerControl, Capability

from ..harness.share import FAST, KILLED_MEMBER, drain, nothing_left, produce, run, share_group
from .conftest import kind_of, on_brokers

ROOT = Path(__file__).resolve().parents[2]

pytestmark = on_brokers(Capability.SHARE_GROUPS)


async def records_for_a_group(control: BrokerControl, name: str, count: int, partitions: int, **group: int
                              ) -> tuple[str, str, str, set[tuple[int, int]]]:
    """A topic of ``partitions`` holding ``count`` records and a share group set up to read it from the start:
    ``(bootstrap, topic, group, every (partition, offset))``."""
    topic = await control.create_topic(name, partitions=partitions)
    group_id = await share_group(control, f"{name}-sg", **group)
    return control.bootstrap_servers, topic, group_id, await produce(control.bootstrap_servers, topic, count,
                                                                     partitions)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_released_records_come_back_with_a_higher_delivery_count_and_rejected_never(
        control: BrokerControl, unique: Callable[[str], str], backend: str) -> None:
    async def scenario() -> None:
        bootstrap, topic, group, produced = await records_for_a_group(control, unique("share-ack"), 40, 2)
        seen: list[ShareRecord] = []

        def decide(r: ShareRecord) -> str:
            if r.offset % 4 == 1 and r.delivery_count < 3:
                return "release"         # twice released, then accepted on the third delivery
            return "reject" if r.offset % 4 == 2 else "accept"

        async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
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
        assert await nothing_left(bootstrap, topic, group) == []

    run(scenario, backend)


def test_records_held_past_the_lock_are_redelivered_and_late_acks_refused(
        control: BrokerControl, unique: Callable[[str], str]) -> None:
    lock_ms = 2000         # Kafka's harness allows down to 1 s (group.share.min.record.lock.duration.ms)
    # how much sooner than the lock the records may come back, for the time between the broker acquiring them and
    # the client holding all of them: Apache Kafka's JVM shares the machine's 2 cores with the client, so its
    # answer can come later after the acquisition than the mock's, which answers from inside this process
    early_ms = 500 if kind_of(control) == "apache" else 300

    async def scenario() -> None:
        bootstrap, topic, group, produced = await records_for_a_group(control, unique("share-lock"), 10, 1,
                                                                      lock_ms=lock_ms)
        async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                 acknowledgement_mode="explicit", **FAST) as consumer:
            first: list[ShareRecord] = []
            with anyio.fail_after(60):
                while len(first) < len(produced):
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        first.extend(records)
            taken_at = time.monotonic()
            assert consumer.acquisition_lock_timeout_ms == lock_ms     # the group's, as ShareFetch reports it
            # hold them without acknowledging: the broker takes them back when the lock runs out
            again: list[ShareRecord] = []
            with anyio.fail_after(60):
                while len(again) < len(produced):
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        again.extend(records)
            redelivered_after_ms = (time.monotonic() - taken_at) * 1000
            assert {(r.partition, r.offset) for r in again} == produced
            assert {r.delivery_count for r in again} == {2}
            assert redelivered_after_ms >= lock_ms - early_ms   # never before the lock ran out
            # acknowledging the first delivery now would settle a lock this consumer no longer holds
            consumer.acknowledge(first[0], "accept")
            results = await consumer.commit()
            assert isinstance(results[TopicPartition(topic, 0)], errors.AcquisitionLockExpiredError), results
            for r in again:
                consumer.acknowledge(r, "accept")
            assert set((await consumer.commit()).values()) == {None}
        assert await nothing_left(bootstrap, topic, group) == []

    run(scenario)


def test_a_killed_member_s_records_are_redelivered(control: BrokerControl, unique: Callable[[str], str]) -> None:
    """A member that holds records is SIGKILLed: they come back to the next member, delivery count 2."""
    async def scenario() -> None:
        bootstrap, topic, group, produced = await records_for_a_group(control, unique("share-kill"), 20, 1,
                                                                      lock_ms=5000, session_timeout_ms=2000)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-c", KILLED_MEMBER, bootstrap, topic, group, str(len(produced))],
                                stdout=subprocess.PIPE, env=env, text=True)
        try:
            with anyio.fail_after(90):
                line = await anyio.to_thread.run_sync(proc.stdout.readline)   # type: ignore[union-attr]
            assert line.startswith("HOLDING"), line
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        got: list[ShareRecord] = []
        async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **FAST) as heir:
            with anyio.fail_after(60):
                await drain(heir, got, lambda: len(got) >= len(produced))
        assert {(r.partition, r.offset) for r in got} == produced
        assert {r.delivery_count for r in got} == {2}

    run(scenario)


def test_subscribe_after_start_and_implicit_acceptance_on_close(control: BrokerControl,
                                                                unique: Callable[[str], str]) -> None:
    """No topics at start; ``subscribe()`` goes out with the next heartbeat. Implicit mode accepts the last
    batch on close, so a later member of the group finds nothing."""
    async def scenario() -> None:
        bootstrap, topic, group, produced = await records_for_a_group(control, unique("share-sub"), 20, 2)
        got: list[ShareRecord] = []
        async with ShareConsumer(bootstrap_servers=bootstrap, group_id=group, **FAST) as c:
            assert c.subscription() == frozenset() and await c.getmany(timeout_ms=200) == {}
            c.subscribe([topic])
            assert c.subscription() == frozenset({topic})
            with anyio.fail_after(60):
                while len(got) < len(produced):
                    for records in (await c.getmany(timeout_ms=100)).values():
                        got.extend(records)      # never acknowledged by hand, never committed
        assert {(r.partition, r.offset) for r in got} == produced
        assert await nothing_left(bootstrap, topic, group) == []

    run(scenario)


def test_async_for_accepts_only_the_records_it_yielded(control: BrokerControl, unique: Callable[[str], str]) -> None:
    """Implicit mode with ``async for``: leaving the loop after 5 records accepts those 5 (and the 3 a getmany
    hands out after it) on close; the rest come back to the next member with delivery count 2."""
    async def scenario() -> None:
        bootstrap, topic, group, produced = await records_for_a_group(control, unique("share-iter"), 20, 1)
        seen: list[ShareRecord] = []
        async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **FAST) as c:
            with anyio.fail_after(60):
                async for rec in c:
                    seen.append(rec)
                    if len(seen) == 5:
                        break
            assert c.acquisition_lock_timeout_ms is not None
            # a getmany after the loop hands out first the records the loop took but did not yield
            rest = [r for records in (await c.getmany(max_records=3)).values() for r in records]
            assert [r.offset for r in rest] == [r.offset + 5 for r in seen[:3]]
        taken = {(r.partition, r.offset) for r in seen + rest}
        again: list[ShareRecord] = []
        async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **FAST) as late:
            with anyio.fail_after(60):
                await drain(late, again, lambda: len(again) >= len(produced) - len(taken))
        assert {(r.partition, r.offset) for r in again} == produced - taken
        assert {r.delivery_count for r in again} == {2}

    run(scenario)


def test_a_record_the_deserializer_refuses_is_released_until_archived_and_the_rest_flow(
        control: BrokerControl, unique: Callable[[str], str]) -> None:
    """The refused record is released at once (its delivery count rises with each delivery, each one reported by
    the poll as ``RecordDeserializationError``) until the broker's delivery limit archives it; the records around
    it are delivered once and accepted, and the consumer stays usable throughout (a refused record stopped the
    share fetcher, and with it the consumer)."""
    async def scenario() -> None:
        topic = await control.create_topic(unique("share-poison"), partitions=1)
        group = await share_group(control, f"{topic}-sg")
        async with Producer(bootstrap_servers=control.bootstrap_servers) as producer:
            await producer.send_many(topic, [(None, b"a"), (None, b"b"), (None, b"\xff\xfe"), (None, b"d")],
                                     partition=0)
        got: list[tuple[int, str, int]] = []
        refused: list[str] = []
        quiet_since = time.monotonic()
        async with ShareConsumer(topic, bootstrap_servers=control.bootstrap_servers, group_id=group,
                                 acknowledgement_mode="explicit", value_deserializer=lambda v: v.decode("utf-8"),
                                 **FAST) as consumer:
            with anyio.fail_after(60):
                while len(got) < 3 or not refused or time.monotonic() - quiet_since < 2:
                    try:
                        batch = await consumer.getmany(timeout_ms=100)
                    except errors.RecordDeserializationError as exc:
                        assert (exc.topic_partition, exc.offset, exc.origin) == (TopicPartition(topic, 0), 2, "value")
                        assert isinstance(exc.__cause__, UnicodeDecodeError)
                        refused.append(str(exc))
                        quiet_since = time.monotonic()
                        continue
                    for records in batch.values():
                        for r in records:
                            got.append((r.offset, r.value, r.delivery_count))
                            consumer.acknowledge(r)
                            quiet_since = time.monotonic()
                    if batch:
                        await consumer.commit()
        assert sorted(got) == [(0, "a", 1), (1, "b", 1), (3, "d", 1)]
        assert len(refused) >= 2 and all(f"(delivery {i + 1})" in msg for i, msg in enumerate(refused)), refused
        assert await nothing_left(control.bootstrap_servers, topic, group) == []   # archived, not pending

    run(scenario, "asyncio")
