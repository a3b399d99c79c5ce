"""What transaction and exactly-once tests share on any broker: read_committed readers (akresil's and
confluent-kafka's), the group's committed offsets, confluent-kafka's transactional producer, and a runner process
(tests/integration/eos_copy_worker.py) that is SIGKILLed mid-transaction and started again."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Awaitable, Callable

import anyio

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil.admin import LATEST

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "integration" / "eos_copy_worker.py"


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def ck_read_committed(bootstrap: str, topic: str, expect: int, *, settle_s: float = 2.0,
                      limit_s: float = 60) -> list[bytes]:
    """What confluent-kafka's read_committed consumer sees: until ``expect`` arrived, then ``settle_s`` more
    (so records that must not appear have the time to)."""
    import confluent_kafka
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"rc-{topic}-{time.monotonic_ns()}",
        "auto.offset.reset": "earliest", "isolation.level": "read_committed", "enable.auto.commit": False,
        "log_level": 3})
    consumer.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + limit_s
    settle_until: float | None = None
    try:
        while time.monotonic() < deadline:
            if len(out) >= expect and settle_until is None:
                settle_until = time.monotonic() + settle_s
            if settle_until is not None and time.monotonic() >= settle_until:
                break
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append(msg.value())
    finally:
        consumer.close()
    return out


def ck_transactions(bootstrap: str, topic: str, transactional_id: str) -> None:
    """confluent-kafka's transactional producer on partition 0: committed, aborted, committed, and one left open
    (its records below the high watermark but above the LSO)."""
    import confluent_kafka
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                                         "log_level": 3})
    producer.init_transactions(30)
    for label, commit in (("c1", True), ("a1", False), ("c2", True)):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, b"%s-%d" % (label.encode(), i), partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"open-0", partition=0)
    producer.flush(30)


async def read_committed(bootstrap: str, topic: str, partitions: int, expect: int, *, settle_s: float = 2.0
                         ) -> dict[int, list[bytes]]:
    """akresil's read_committed reader, per partition, from the beginning: until ``expect`` records (60 s at most),
    then ``settle_s`` more, so a duplicate or an aborted record would show up."""
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    async with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed", fetch_max_wait_ms=100,
                        auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        with anyio.move_on_after(60):
            while sum(map(len, out.values())) < expect:
                for tp, recs in (await c.getmany(timeout_ms=200)).items():
                    out[tp.partition].extend(r.value for r in recs if r.value is not None)
        with anyio.move_on_after(settle_s):
            while True:
                for tp, recs in (await c.getmany(timeout_ms=200)).items():
                    out[tp.partition].extend(r.value for r in recs if r.value is not None)
    return out


async def committed(bootstrap: str, group: str) -> dict[TopicPartition, int | None]:
    """The group's committed offsets, as the admin lists them."""
    async with Admin(bootstrap_servers=bootstrap) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    return {tp: o.committed for tp, o in offsets.items()}


async def committed_by_partition(bootstrap: str, group: str) -> dict[int, int]:
    return {tp.partition: o or 0 for tp, o in (await committed(bootstrap, group)).items()}


async def start_copy_worker(bootstrap: str, src: str, dst: str, group: str, txn_id: str) -> subprocess.Popen[bytes]:
    """An exactly-once runner process copying ``src`` to ``dst``; returns once it is ready."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(WORKER), bootstrap, src, dst, group, txn_id, "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    with anyio.fail_after(90):
        line = await anyio.to_thread.run_sync(proc.stdout.readline)
    if line.strip() != b"ready":
        assert proc.stderr is not None
        raise AssertionError(f"the copy worker did not start: {line!r} "
                             f"{proc.stderr.read().decode()[-2000:] if proc.poll() is not None else ''}")
    return proc


async def killed_runner_restarts_exactly_once(bootstrap: str, *, n: int = 1000,
                                              create: Callable[[str], Awaitable[str]] | None = None) -> None:
    """SIGKILL an exactly-once runner process mid-copy (a transaction open) and start it again with the same
    transactional id: the new one fences the old epoch and aborts its open transaction; the read_committed
    output holds every input record once, in order, and the log holds the aborted outputs too.  ``create``
    makes a two-partition topic (default: CreateTopics with one replica)."""
    async def create_default(name: str) -> str:
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(name, 2, 1)])
        return name

    make = create or create_default
    src, dst = await make(unique_name("kill-in")), await make(unique_name("kill-out"))
    group, txn_id = unique_name("kill-g"), unique_name("kill-tx")
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for p in (0, 1):
            await producer.send_many(src, [(b"k", b"p%d-%04d" % (p, i)) for i in range(n)], partition=p)
    first = await start_copy_worker(bootstrap, src, dst, group, txn_id)
    try:
        with anyio.fail_after(90):
            while sum((await committed_by_partition(bootstrap, group)).values()) < n // 2:   # some committed
                await anyio.sleep(0.1)
    finally:
        first.kill()
        first.wait()
    at_kill = await committed_by_partition(bootstrap, group)
    assert sum(at_kill.values()) < 2 * n                                   # killed part-way
    second = await start_copy_worker(bootstrap, src, dst, group, txn_id)
    try:
        with anyio.fail_after(120):
            while await committed_by_partition(bootstrap, group) != {0: n, 1: n}:
                await anyio.sleep(0.1)
    finally:
        second.kill()
        second.wait()
    out = await read_committed(bootstrap, dst, 2, 2 * n)
    for p in (0, 1):
        assert out[p] == [b"p%d-%04d" % (p, i) for i in range(n)]           # no duplicate, none lost, in order
    async with Admin(bootstrap_servers=bootstrap) as admin:
        ends = await admin.list_offsets({TopicPartition(dst, p): LATEST for p in (0, 1)})
    # the log holds the killed process's aborted outputs too (and one marker per transaction and partition)
    in_log = sum(offset for offset, _ in ends.values())
    print(f"killed at {at_kill}; output log {in_log} offsets for {2 * n} records read once")
    assert in_log > 2 * n
