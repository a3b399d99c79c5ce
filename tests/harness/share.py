"""What share-group (KIP-932) tests share on any broker: the group's settings, producing numbered records, draining
with acknowledgements, what a later member still finds, confluent-kafka's ShareConsumer as a peer, and a run that
checks no task outlives the clients."""

from __future__ import annotations

import threading
import time
from typing import Any, Awaitable, Callable

import anyio

from akresil import Producer, ShareConsumer, ShareRecord
from akresil.admin import Admin
from akresil.admin_types import ConfigResource
from akresil.testing import BrokerControl

FAST: dict[str, Any] = dict(fetch_max_wait_ms=200, request_timeout_ms=15_000, retry_backoff_ms=50)


async def share_group(control: BrokerControl, group: str, *, lock_ms: int | None = None,
                      session_timeout_ms: int | None = None) -> str:
    """Set the group up to read from the start of the log (Kafka's default is its end, so records produced before
    the first member joined would never be seen), with a record lock of ``lock_ms``.

    Apache Kafka takes them as the group's configs (IncrementalAlterConfigs on its GROUP resource, KIP-932);
    librdkafka's mock has no group configs, only cluster-wide knobs, set here for the test's own mock, with a
    short heartbeat interval so assignment changes reach members quickly.  ``session_timeout_ms`` is for the mock
    only: it gives each partition to one member at a time, so a dead member keeps its partitions until its session
    expires (Kafka hands every partition to every member)."""
    from akresil.testing.rdkafka_mock import MockControl
    if isinstance(control, MockControl):
        mock = control.mock
        mock.share_set_auto_offset_reset(True)
        mock.share_set_heartbeat_interval(300)
        if lock_ms is not None:
            mock.share_set_record_lock_duration(lock_ms)
        if session_timeout_ms is not None:
            mock.share_set_session_timeout(session_timeout_ms)
        return group
    wanted = {"share.auto.offset.reset": "earliest"}
    if lock_ms is not None:
        wanted["share.record.lock.duration.ms"] = str(lock_ms)
    async with Admin(bootstrap_servers=control.bootstrap_servers) as admin:
        (await admin.incremental_alter_configs({ConfigResource("group", group): wanted})).raise_on_error()
    return group


async def produce(bootstrap: str, topic: str, count: int, partitions: int) -> set[tuple[int, int]]:
    """``count`` records spread over ``partitions``; returns every (partition, offset)."""
    async with Producer(bootstrap_servers=bootstrap, linger_ms=2) as producer:
        mds = []
        for p in range(partitions):
            mds += await producer.send_many(topic, [(None, b"v-%d-%d" % (p, i)) for i in range(count // partitions)],
                                            partition=p)
    return {(md.partition, md.offset) for md in mds}


async def drain(consumer: ShareConsumer, sink: list[ShareRecord], until: Callable[[], bool],
                ack: Callable[[ShareRecord], str | None] = lambda r: "accept") -> None:
    """Take records (acknowledged as ``ack`` says, committed after each batch) until ``until()``."""
    while not until():
        batch = await consumer.getmany(timeout_ms=100)
        for records in batch.values():
            for r in records:
                sink.append(r)
                kind = ack(r)
                if kind is not None:
                    consumer.acknowledge(r, kind)  # type: ignore[arg-type]
        if batch:
            await consumer.commit()


async def nothing_left(bootstrap: str, topic: str, group: str, wait_s: float = 3.0) -> list[ShareRecord]:
    """What a new member of the group still gets within ``wait_s`` (after its assignment arrived)."""
    left: list[ShareRecord] = []
    async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **FAST) as late:
        with anyio.fail_after(60):
            while not late.assignment():
                await late.getmany(timeout_ms=100)
        deadline = time.monotonic() + wait_s
        await drain(late, left, lambda: time.monotonic() > deadline)
    return left


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


def run(scenario: Callable[[], Awaitable[None]], backend: str = "asyncio") -> None:
    """``anyio.run(scenario)``, then no task of the scenario's may still run (the clients closed theirs)."""
    async def main() -> None:
        before = {task.id for task in anyio.get_running_tasks()}
        await scenario()
        leftover = [t.name for t in anyio.get_running_tasks() if t.id not in before]
        assert leftover == [], f"tasks still running after close: {leftover}"
    anyio.run(main, backend=backend)


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
