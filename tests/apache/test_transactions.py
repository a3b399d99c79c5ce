"""Transactions on Apache Kafka: commits seen and aborts hidden by read_committed readers (akresil and
confluent-kafka, each reading the other's transactions), fencing by a second producer with the same transactional
id, offsets committed only with their transaction (and a stale generation refused: KIP-447), and the runner's
exactly-once copy under both group protocols.

The producer's tests run on both transaction protocols (``transaction_version``: the cluster's finalized
``transaction.version``, switched with ``KafkaCluster.set_feature`` as ``kafka-features.sh`` would): 2, Kafka 4.x's
default (KIP-890 part 2: Produce v12 adds partitions, TxnOffsetCommit v5 adds offsets, EndTxn v5 bumps the epoch),
and 1 (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn v4). Each checks on the wire which one the producer spoke.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import anyio
import pytest

from akresil import Consumer, Producer, TopicPartition, errors
from akresil.admin import LATEST
from akresil.protocol.api import ApiKey
from akresil.runner import HandlerContext, Runner
from akresil.testing import KafkaCluster
from akresil.types import ConsumerRecord

from .conftest import TopicMaker

ck = pytest.importorskip("confluent_kafka")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def transaction_version(request: pytest.FixtureRequest, kafka_cluster: KafkaCluster) -> Iterator[int]:
    """The cluster's finalized transaction.version for the test (its parameter). Module scope, and every test lists
    the levels in one order (``on_versions``): pytest then runs the module's tests grouped by level, so the cluster
    switches once, and it is set back to its own level after."""
    level: int = getattr(request, "param", 2)
    original = kafka_cluster.finalized_features().get("transaction.version", 0)
    anyio.run(kafka_cluster.set_feature, "transaction.version", level)
    yield level
    anyio.run(kafka_cluster.set_feature, "transaction.version", original)


def on_versions(*levels: int) -> pytest.MarkDecorator:
    assert list(levels) == sorted(levels, reverse=True)    # the same position for a level in every test's list
    return pytest.mark.parametrize("transaction_version", levels, indirect=True, ids=[f"tv{v}" for v in levels])


BOTH = on_versions(2, 1)


class Wire:
    """A hook recording what the producer sent (API name -> versions) and the producer epochs it took."""

    def __init__(self) -> None:
        self.versions: dict[str, set[int]] = {}
        self.epochs: list[int] = []

    def on_response_received(self, node_id: int, api_key: int, version: int, **_: Any) -> None:
        self.versions.setdefault(ApiKey(api_key).name, set()).add(version)

    def on_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        self.epochs.append(producer_epoch)

    def check(self, transaction_version: int, *, offsets: bool = False) -> None:
        """The transaction protocol of ``transaction_version`` was spoken, and only it."""
        v = self.versions
        if transaction_version >= 2:
            assert v["PRODUCE"] == {12} and v["END_TXN"] == {5}, v
            assert "ADD_PARTITIONS_TO_TXN" not in v and "ADD_OFFSETS_TO_TXN" not in v, v
            if offsets:
                assert v["TXN_OFFSET_COMMIT"] == {5}, v
        else:
            assert max(v["PRODUCE"]) <= 11 and v["END_TXN"] == {4} and v["ADD_PARTITIONS_TO_TXN"] == {3}, v
            if offsets:
                assert v["ADD_OFFSETS_TO_TXN"] == {4} and v["TXN_OFFSET_COMMIT"] == {4}, v


def ck_read_committed(bootstrap: str, topic: str, expect: int, *, settle_s: float = 2.0,
                      limit_s: float = 60) -> list[bytes]:
    """What confluent-kafka's read_committed consumer sees: until ``expect`` arrived, then ``settle_s`` more
    (so records that must not appear have the time to)."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{topic}-{time.monotonic_ns()}",
                            "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                            "enable.auto.commit": False, "log_level": 3})
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


async def read_committed(bootstrap: str, topic: str, partitions: int, expect: int, *, settle_s: float = 2.0
                         ) -> dict[int, list[bytes]]:
    """akresil's read_committed reader, per partition, from the beginning."""
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    async with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed", fetch_max_wait_ms=100,
                        auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        with anyio.move_on_after(60):
            while sum(map(len, out.values())) < expect:
                for tp, recs in (await c.getmany(timeout_ms=200)).items():
                    out[tp.partition].extend(r.value for r in recs)
        with anyio.move_on_after(settle_s):     # anything beyond ``expect`` (a duplicate, an aborted record)
            while True:
                for tp, recs in (await c.getmany(timeout_ms=200)).items():
                    out[tp.partition].extend(r.value for r in recs)
    return out


@BOTH
async def test_commit_is_seen_abort_is_not_by_either_read_committed_reader(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str],
        transaction_version: int) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await make_topic(partitions=2)
    wire = Wire()
    async with Producer(bootstrap_servers=bootstrap, transactional_id=unique("tx"), hooks=[wire]) as producer:
        await producer.init_transactions()
        async with producer.transaction():
            for i in range(20):
                await producer.enqueue(topic, b"commit-%d" % i, partition=i % 2)
        producer.begin_transaction()
        sent = [await producer.enqueue(topic, b"abort-%d" % i, partition=i % 2) for i in range(10)]
        await producer.flush()                   # written to the log, then aborted: the markers must hide them
        await producer.abort_transaction()
        assert all(f.done() for f in sent)
        producer.begin_transaction()
        pending = [await producer.enqueue(topic, b"never-%d" % i) for i in range(5)]
        await producer.abort_transaction()       # never sent: they fail as aborted
        for fut in pending:
            with pytest.raises(errors.TransactionAbortedError):
                await fut
        with pytest.raises(RuntimeError, match="boom"):
            async with producer.transaction():   # an exception in the block aborts
                await producer.send(topic, b"raised", partition=0)
                raise RuntimeError("boom")
        async with producer.transaction():
            await producer.send(topic, b"commit-last", partition=0)
        assert producer.transaction_state == "ready"
    wire.check(transaction_version)
    if transaction_version >= 2:
        # EndTxn v5 bumps the epoch at the end of every transaction: 4 here, or 5 when the sender's pass put the
        # never-sent records' partitions in the third one before it was aborted (then it is ended with EndTxn too)
        assert wire.epochs == list(range(len(wire.epochs))) and len(wire.epochs) in (5, 6), wire.epochs
    else:
        assert wire.epochs == [0]                # v1 keeps the epoch InitProducerId gave
    expected = sorted([b"commit-%d" % i for i in range(20)] + [b"commit-last"])
    seen = await anyio.to_thread.run_sync(ck_read_committed, bootstrap, topic, len(expected))
    assert sorted(seen) == expected
    ours = await read_committed(bootstrap, topic, 2, len(expected))
    assert sorted(ours[0] + ours[1]) == expected
    assert ours[1] == [b"commit-%d" % i for i in range(1, 20, 2)]    # in order within the partition


def ck_transactions(bootstrap: str, topic: str, transactional_id: str) -> None:
    """confluent-kafka's transactional producer: committed, aborted, committed, and one left open."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
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


@on_versions(2)      # (confluent-kafka's transactions: nothing of akresil's producer)
async def test_akresil_read_committed_skips_aborted_and_stops_at_the_lso(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str],
        transaction_version: int) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await make_topic(partitions=1)
    await anyio.to_thread.run_sync(ck_transactions, bootstrap, topic, unique("ck-tx"))
    tp = TopicPartition(topic, 0)
    expected = [b"c1-%d" % i for i in range(5)] + [b"c2-%d" % i for i in range(5)]
    async with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed", fetch_max_wait_ms=100) as rc:
        rc.assign([tp])
        rc.seek(tp, 0)
        seen: list[bytes] = []
        with anyio.move_on_after(5):
            while True:
                for recs in (await rc.getmany(timeout_ms=300)).values():
                    seen.extend(r.value for r in recs)
        assert seen == expected                   # aborted skipped, control batches skipped, the open one not read
        # the position stops at the LSO, the first offset of the open transaction (3 transactions of 5 records
        # and a marker each: 18), below the end of the log
        assert await rc.position(tp) == 18
        assert rc.last_stable_offset(tp) == 18 and rc.highwater(tp) == 19
    async with Consumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted",
                        fetch_max_wait_ms=100) as ru:
        ru.assign([tp])
        ru.seek(tp, 0)
        raw: list[bytes] = []
        with anyio.fail_after(30):
            while len(raw) < 16:
                for recs in (await ru.getmany(timeout_ms=300)).values():
                    raw.extend(r.value for r in recs)
        assert b"a1-0" in raw and b"open-0" in raw


@BOTH
async def test_second_producer_with_the_same_id_fences_the_first(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str],
        transaction_version: int) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic, txn_id = await make_topic(partitions=1), unique("tx-fence")
    wire = Wire()
    async with Producer(bootstrap_servers=bootstrap, transactional_id=txn_id, hooks=[wire]) as old:
        await old.init_transactions()
        old.begin_transaction()
        await old.send(topic, b"zombie-open")            # its transaction is open when the new one starts
        async with Producer(bootstrap_servers=bootstrap, transactional_id=txn_id) as new:
            await new.init_transactions()                 # aborts the old producer's open transaction
            with pytest.raises(errors.ProducerFencedError):
                await old.commit_transaction()
            assert old.transaction_state == "fatal error"
            for call in (old.begin_transaction, old.abort_transaction):
                with pytest.raises(errors.ProducerFencedError):
                    result = call()
                    if result is not None:
                        await result
            async with new.transaction():
                await new.send(topic, b"new")
    versions = wire.versions
    assert versions["PRODUCE"] == ({12} if transaction_version >= 2 else {11}), versions
    assert await anyio.to_thread.run_sync(ck_read_committed, bootstrap, topic, 1) == [b"new"]


async def committed(cluster: KafkaCluster, group: str) -> dict[TopicPartition, int | None]:
    async with cluster.admin() as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    return {tp: o.committed for tp, o in offsets.items()}


@BOTH
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_offsets_sent_to_a_transaction_commit_only_with_it(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str], protocol: str,
        transaction_version: int) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    src, dst, group = await make_topic(partitions=1), await make_topic(partitions=1), unique("g")
    tp = TopicPartition(src, 0)
    wire = Wire()
    async with Producer(bootstrap_servers=bootstrap) as plain:
        await plain.send_many(src, [(None, b"in-%d" % i) for i in range(10)])
    async with Consumer(src, bootstrap_servers=bootstrap, group_id=group, group_protocol=protocol,
                        auto_offset_reset="earliest", enable_auto_commit=False,
                        isolation_level="read_committed") as consumer, \
            Producer(bootstrap_servers=bootstrap, transactional_id=unique("tx-copy"), hooks=[wire]) as producer:
        await producer.init_transactions()
        got: list[Any] = []
        with anyio.fail_after(60):
            while len(got) < 10:
                for recs in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(recs)
        meta = consumer.group_metadata()
        assert meta.generation_id > 0 and meta.member_id
        # aborted: neither the outputs nor the offsets
        producer.begin_transaction()
        for rec in got[:5]:
            await producer.enqueue(dst, rec.value)
        await producer.send_offsets_to_transaction({tp: got[4].offset + 1}, meta)
        await producer.abort_transaction()
        assert (await committed(kafka_cluster, group)).get(tp) is None
        # committed: both
        async with producer.transaction():
            for rec in got:
                await producer.enqueue(dst, rec.value)
            await producer.send_offsets_to_transaction({tp: got[-1].offset + 1}, meta)
        # the coordinator applies the commit marker to the group's offsets after EndTxn has answered: wait for it
        # (a read right after the commit can still see the offsets as pending, i.e. absent)

        async def visible() -> bool:
            return (await committed(kafka_cluster, group)).get(tp) is not None
        await kafka_cluster.wait_for(visible, timeout_s=30)
        assert (await committed(kafka_cluster, group))[tp] == 10
        # while a transaction is open its offsets are pending: the admin gives the last committed one at once
        # (it waited for the transaction, up to its timeout when the producer died), or with require_stable waits
        producer.begin_transaction()
        await producer.send_offsets_to_transaction({tp: 7}, meta)
        assert (await committed(kafka_cluster, group))[tp] == 10
        async with kafka_cluster.admin() as admin:
            with pytest.raises(errors.KafkaTimeoutError) as waited:
                await admin.list_consumer_group_offsets(group, require_stable=True, timeout_ms=1_500)
        assert isinstance(waited.value.__cause__, errors.UnstableOffsetCommitError)
        await producer.abort_transaction()
        # a stale generation (a zombie that lost its partitions, KIP-447) is refused by the group coordinator:
        # an abortable error, and the abort leaves the group's offsets as they were
        producer.begin_transaction()
        stale = meta._replace(generation_id=meta.generation_id + 5)
        with pytest.raises(errors.IllegalGenerationError):   # for a KIP-848 group too: the member epoch
            await producer.send_offsets_to_transaction({tp: 3}, stale)
        assert producer.transaction_state == "abortable error"
        await producer.abort_transaction()
        assert (await committed(kafka_cluster, group))[tp] == 10
        async with producer.transaction():     # the producer goes on after the abort
            await producer.send(dst, b"after")
    wire.check(transaction_version, offsets=True)
    seen = await anyio.to_thread.run_sync(ck_read_committed, bootstrap, dst, 11)
    assert sorted(seen) == sorted([b"in-%d" % i for i in range(10)] + [b"after"])


N = 60


@BOTH
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_exactly_once_runner_copies_every_record_once(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str], protocol: str,
        transaction_version: int) -> None:
    """The runner's exactly_once copy, its handler timing out in two different transactions: the read_committed
    output holds every input record once, in order per partition, and the group's offsets end at the input's."""
    bootstrap = kafka_cluster.bootstrap_servers
    src, dst, group = await make_topic(partitions=2), await make_topic(partitions=2), unique("eos-g")
    async with Producer(bootstrap_servers=bootstrap) as plain:
        for p in (0, 1):
            await plain.send_many(src, [(None, b"p%d-%03d" % (p, i)) for i in range(N)], partition=p)
    attempts: dict[tuple[int, int], int] = {}
    failed_later: list[tuple[int, int]] = []
    wire = Wire()

    async def handler(rec: ConsumerRecord, ctx: HandlerContext) -> None:
        key = (rec.partition, rec.offset)
        attempts[key] = attempts.get(key, 0) + 1
        await ctx.send(dst, rec.value, partition=rec.partition)
        if key == (0, 25) and attempts[key] == 1:
            raise TimeoutError("slow downstream")        # the outputs of this transaction so far are aborted
        await anyio.sleep(0.005)                          # spread the copy over several commit intervals
        eos = runner._eos
        if eos is not None and eos.aborts >= 1 and eos.commits >= 1 and not failed_later:
            failed_later.append(key)
            raise TimeoutError("slow again, in a later transaction")

    async with Consumer(src, bootstrap_servers=bootstrap, group_id=group, group_protocol=protocol,
                        enable_auto_commit=False, auto_offset_reset="earliest", isolation_level="read_committed",
                        fetch_max_wait_ms=50) as consumer, \
            Producer(bootstrap_servers=bootstrap, transactional_id=unique("eos-tx"), linger_ms=2,
                     hooks=[wire]) as producer:
        await producer.init_transactions()
        runner = Runner(consumer, handler, producer=producer, processing_guarantee="exactly_once",
                        commit_interval_ms=100, retry_backoff_ms=20, task_timeout_ms=30_000)
        async with runner:
            with anyio.fail_after(90):
                while len(runner.partitions()) < 2 or any(
                        s.committed_offset != N for s in runner.partitions().values()):
                    await anyio.sleep(0.05)
        assert runner._eos is not None and runner._eos.aborts >= 2 and runner._eos.commits >= 1
    assert attempts[(0, 25)] >= 2 and failed_later and attempts[failed_later[0]] >= 2   # handled again
    wire.check(transaction_version, offsets=True)
    out = await read_committed(bootstrap, dst, 2, 2 * N)
    for p in (0, 1):
        assert out[p] == [b"p%d-%03d" % (p, i) for i in range(N)]      # exactly once, in order
    assert {tp.partition: o for tp, o in (await committed(kafka_cluster, group)).items()} == {0: N, 1: N}


async def start_copy_worker(bootstrap: str, src: str, dst: str, group: str, txn_id: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    worker = ROOT / "tests" / "integration" / "eos_copy_worker.py"
    proc = subprocess.Popen([sys.executable, str(worker), bootstrap, src, dst, group, txn_id, "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    with anyio.fail_after(90):
        line = await anyio.to_thread.run_sync(proc.stdout.readline)
    assert line.strip() == b"ready", proc.stderr.read().decode()[-2000:] if proc.poll() is not None else line
    return proc


@BOTH
async def test_a_killed_runner_process_restarts_exactly_once(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str],
        transaction_version: int) -> None:
    """SIGKILL an exactly-once runner process mid-copy (a transaction open) and start it again with the same
    transactional id: the new one fences the old epoch and aborts its open transaction; the read_committed
    output holds every input record once, in order, and the log holds the aborted outputs too."""
    bootstrap = kafka_cluster.bootstrap_servers
    src, dst, group, txn_id = await make_topic(partitions=2), await make_topic(partitions=2), unique("g"), \
        unique("kill-tx")
    n = 300
    async with Producer(bootstrap_servers=bootstrap) as plain:
        for p in (0, 1):
            await plain.send_many(src, [(b"k", b"p%d-%04d" % (p, i)) for i in range(n)], partition=p)

    async def offsets() -> dict[int, int]:
        return {tp.partition: o or 0 for tp, o in (await committed(kafka_cluster, group)).items()}

    first = await start_copy_worker(bootstrap, src, dst, group, txn_id)
    try:
        with anyio.fail_after(90):
            while sum((await offsets()).values()) < n // 2:      # some transactions committed
                await anyio.sleep(0.1)
    finally:
        first.kill()
        first.wait()
    at_kill = await offsets()
    assert sum(at_kill.values()) < 2 * n                        # killed part-way
    second = await start_copy_worker(bootstrap, src, dst, group, txn_id)
    try:
        with anyio.fail_after(120):
            while await offsets() != {0: n, 1: n}:
                await anyio.sleep(0.1)
    finally:
        second.kill()
        second.wait()
    out = await read_committed(bootstrap, dst, 2, 2 * n)
    for p in (0, 1):
        assert out[p] == [b"p%d-%04d" % (p, i) for i in range(n)]   # no duplicate, none lost, in order
    async with kafka_cluster.admin() as admin:
        ends = await admin.list_offsets({TopicPartition(dst, p): LATEST for p in (0, 1)})
    assert sum(offset for offset, _ in ends.values()) > 2 * n        # aborted outputs and markers in the log
