"""The runner's processing_guarantee="exactly_once" on noida-db: a copy whose handler times out in two different
transactions still yields every input record exactly once in the read_committed
output (aborted outputs hidden), in order per partition, with the group's offsets at the end of the input.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition, errors
from akresil.admin import LATEST
from akresil.runner import HandlerContext, Runner
from akresil.testing import EmbeddedBroker
from akresil.types import ConsumerRecord

N = 60
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def noida() -> EmbeddedBroker:
    with EmbeddedBroker(kind="noida") as broker:
        yield broker


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def _setup(bs: str, src: str, dst: str) -> None:
    async with Admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(src, 2, 1), NewTopic(dst, 2, 1)])
    async with Producer(bootstrap_servers=bs) as producer:
        for p in (0, 1):
            await producer.send_many(src, [(None, b"p%d-%03d" % (p, i)) for i in range(N)], partition=p)


async def _read_committed(bs: str, topic: str, expect: int) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {0: [], 1: []}
    async with Consumer(bootstrap_servers=bs, isolation_level="read_committed", fetch_max_wait_ms=50,
                        auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        with anyio.move_on_after(15):
            while sum(map(len, out.values())) < expect:
                for tp, recs in (await c.getmany(timeout_ms=200)).items():
                    out[tp.partition].extend(r.value for r in recs)
        # a little longer: anything beyond ``expect`` (a duplicate) would show up now
        with anyio.move_on_after(1):
            while True:
                for tp, recs in (await c.getmany(timeout_ms=200)).items():
                    out[tp.partition].extend(r.value for r in recs)
    return out


async def test_exactly_once_copy_survives_timeouts_in_two_transactions(noida: EmbeddedBroker) -> None:
    bs, src, dst, group = noida.bootstrap_servers, _name("eos-in"), _name("eos-out"), _name("eos-g")
    await _setup(bs, src, dst)
    attempts: dict[tuple[int, int], int] = {}
    failed_later: list[tuple[int, int]] = []

    async def handler(rec: ConsumerRecord, ctx: HandlerContext) -> None:
        key = (rec.partition, rec.offset)
        attempts[key] = attempts.get(key, 0) + 1
        await ctx.send(dst, rec.value, partition=rec.partition)
        if key == (0, 25) and attempts[key] == 1:
            raise TimeoutError("slow downstream")        # outputs of this transaction so far must be aborted
        await anyio.sleep(0.005)                          # spread the copy over several commit intervals
        eos = runner._eos
        if eos is not None and eos.aborts >= 1 and eos.commits >= 1 and not failed_later:
            failed_later.append(key)
            raise TimeoutError("slow again, in a later transaction")

    async with Consumer(src, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                        auto_offset_reset="earliest", isolation_level="read_committed", fetch_max_wait_ms=50,
                        session_timeout_ms=6_000, heartbeat_interval_ms=500) as consumer, \
            Producer(bootstrap_servers=bs, transactional_id=_name("eos-tx"), linger_ms=2) as producer:
        await producer.init_transactions()
        runner = Runner(consumer, handler, producer=producer, processing_guarantee="exactly_once",
                        commit_interval_ms=100, retry_backoff_ms=20, task_timeout_ms=20_000)
        async with runner:
            with anyio.fail_after(30):
                while len(runner.partitions()) < 2 or any(
                        s.committed_offset != N for s in runner.partitions().values()):
                    await anyio.sleep(0.05)
        assert runner._eos is not None and runner._eos.aborts >= 2 and runner._eos.commits >= 1
    assert attempts[(0, 25)] >= 2 and failed_later and attempts[failed_later[0]] >= 2   # handled again
    out = await _read_committed(bs, dst, 2 * N)
    for p in (0, 1):
        assert out[p] == [b"p%d-%03d" % (p, i) for i in range(N)]      # exactly once, in order
    async with Admin(bootstrap_servers=bs) as admin:
        committed = await admin.list_consumer_group_offsets(group)
    assert {tp.partition: o.committed for tp, o in committed.items()} == {0: N, 1: N}


async def test_exactly_once_needs_a_transactional_producer_and_read_committed(noida: EmbeddedBroker) -> None:
    bs = noida.bootstrap_servers

    async def handler(rec: ConsumerRecord, ctx: HandlerContext) -> None: ...

    async with Consumer("x", bootstrap_servers=bs, group_id="g", enable_auto_commit=False,
                        isolation_level="read_committed") as consumer, \
            Producer(bootstrap_servers=bs) as plain:
        with pytest.raises(errors.ConfigError, match="producer: .*transactional"):
            Runner(consumer, handler, producer=plain, processing_guarantee="exactly_once")
        with pytest.raises(errors.ConfigError, match="processing_guarantee"):
            Runner(consumer, handler, producer=plain, processing_guarantee="twice")  # type: ignore[arg-type]
    async with Consumer("x", bootstrap_servers=bs, group_id="g", enable_auto_commit=False) as uncommitted, \
            Producer(bootstrap_servers=bs, transactional_id=_name("cfg")) as txp:
        with pytest.raises(errors.ConfigError, match="init_transactions"):
            Runner(uncommitted, handler, producer=txp, processing_guarantee="exactly_once")
        await txp.init_transactions()
        with pytest.raises(errors.ConfigError, match="isolation_level"):
            Runner(uncommitted, handler, producer=txp, processing_guarantee="exactly_once")


async def _start_worker(bs: str, src: str, dst: str, group: str, txn_id: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("eos_copy_worker.py")), bs, src, dst,
                             group, txn_id, "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    line = await anyio.to_thread.run_sync(proc.stdout.readline)
    assert line.strip() == b"ready", proc.stderr.read().decode()[-2000:] if proc.poll() is not None else line
    return proc


async def _offsets(bs: str, group: str) -> dict[int, int]:
    async with Admin(bootstrap_servers=bs) as admin:
        committed = await admin.list_consumer_group_offsets(group)
    return {tp.partition: o.committed or 0 for tp, o in committed.items()}


async def test_killed_runner_process_restarts_exactly_once(noida: EmbeddedBroker) -> None:
    await killed_runner_restarts_exactly_once(noida.bootstrap_servers)


async def killed_runner_restarts_exactly_once(bs: str) -> None:
    """SIGKILL a runner process mid-copy (a transaction open), start it again with the same transactional id:
    the new one fences the old epoch and aborts its open transaction, and the read_committed output holds every
    input record exactly once, in order (also run on Apache Kafka: test_embedded_kafka.py)."""
    src, dst, group = _name("kill-in"), _name("kill-out"), _name("kill-g")
    n = 1000
    async with Admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(src, 2, 1), NewTopic(dst, 2, 1)])
    async with Producer(bootstrap_servers=bs) as producer:
        for p in (0, 1):
            await producer.send_many(src, [(b"k", b"p%d-%04d" % (p, i)) for i in range(n)], partition=p)
    txn_id = _name("kill-tx")
    first = await _start_worker(bs, src, dst, group, txn_id)
    try:
        with anyio.fail_after(60):
            while sum((await _offsets(bs, group)).values()) < n // 2:      # some transactions committed
                await anyio.sleep(0.1)
    finally:
        first.kill()
        first.wait()
    at_kill = await _offsets(bs, group)
    assert sum(at_kill.values()) < 2 * n                                   # killed part-way
    second = await _start_worker(bs, src, dst, group, txn_id)
    try:
        with anyio.fail_after(90):
            while await _offsets(bs, group) != {0: n, 1: n}:
                await anyio.sleep(0.1)
    finally:
        second.kill()
        second.wait()
    out = await _read_committed(bs, dst, 2 * n)
    for p in (0, 1):
        assert out[p] == [b"p%d-%04d" % (p, i) for i in range(n)]           # no duplicate, none lost, in order
    async with Admin(bootstrap_servers=bs) as admin:
        ends = await admin.list_offsets({TopicPartition(dst, p): LATEST for p in (0, 1)})
    # the log holds the killed process's aborted outputs too (and one marker per transaction and partition)
    in_log = sum(offset for offset, _ in ends.values())
    print(f"killed at {at_kill}; output log {in_log} offsets for {2 * n} records read once")
    assert in_log > 2 * n
