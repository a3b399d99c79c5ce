"""Transactions on every broker that has them (commit and abort markers that read_committed readers honour): Apache
Kafka and noida-db.  Commits seen and aborts hidden by read_committed readers (akresil and confluent-kafka, each
reading the other's transactions), fencing by a second producer with the same transactional id, offsets committed
only with their transaction (and, where the broker checks it, a stale generation refused: KIP-447), the runner's
exactly-once copy, and a killed exactly-once runner process restarted.

On Apache Kafka the producer's tests run on both transaction protocols (``transaction_version``: the cluster's
finalized ``transaction.version``, switched with ``KafkaCluster.set_feature`` as ``kafka-features.sh`` would): 2,
Kafka 4.x's default (KIP-890 part 2: Produce v12 adds partitions, TxnOffsetCommit v5 adds offsets, EndTxn v5 bumps
the epoch), and 1 (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn v4); each checks on the wire which one the producer
spoke.  An imitation speaks whatever its advertised versions allow (``transaction_version`` None there).

The client's state machine under injected coordinator errors runs on librdkafka's mock, and noida-only checks (bad
calls, both backends) in tests/integration/test_transactions.py.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import anyio
import pytest

from akresil import Consumer, Producer, TopicPartition, errors
from akresil.admin import Admin
from akresil.protocol.api import ApiKey
from akresil.runner import HandlerContext, Runner
from akresil.testing import BrokerControl, Capability, KafkaCluster
from akresil.types import ConsumerRecord

from ..harness.eos import (ck_read_committed, ck_transactions, committed, killed_runner_restarts_exactly_once,
                           read_committed)
from .conftest import BROKERS, GROUP_PROTOCOLS, kind_of

ck = pytest.importorskip("confluent_kafka")


def on_transaction_brokers(*, protocols: tuple[str, ...] = (), levels: tuple[int, ...] = (2, 1)
                           ) -> pytest.MarkDecorator:
    """Parametrize ``(control, transaction_version[, protocol])`` over every broker with transactions: Apache Kafka
    at each of ``levels``, an imitation at its own (None); with ``protocols``, each group protocol the broker has."""
    params = []
    for kind, caps in BROKERS.items():
        if Capability.TRANSACTIONS not in caps:
            continue
        for level in levels if kind == "apache" else (None,):
            for protocol in protocols or (None,):
                if protocol is not None and GROUP_PROTOCOLS[protocol] not in caps:
                    continue
                values = [kind, level] + ([protocol] if protocol else [])
                ident = "-".join([kind] + ([f"tv{level}"] if level else []) + ([protocol] if protocol else []))
                params.append(pytest.param(*values, id=ident,
                                           marks=pytest.mark.apache if kind == "apache" else pytest.mark.broker))
    names = ("control", "transaction_version", *(("protocol",) if protocols else ()))
    return pytest.mark.parametrize(names, params, indirect=["control", "transaction_version"])


@pytest.fixture(scope="module")
def own_transaction_version() -> Iterator[dict[KafkaCluster, int]]:
    """The clusters whose transaction.version this module's tests switched, with their own level: set back after."""
    original: dict[KafkaCluster, int] = {}
    yield original
    for cluster, level in original.items():
        if cluster.running_brokers():     # (stopped already when the tier's last test was one of these)
            anyio.run(cluster.set_feature, "transaction.version", level)


@pytest.fixture
def transaction_version(request: pytest.FixtureRequest, own_transaction_version: dict[KafkaCluster, int]
                        ) -> int | None:
    """Apache Kafka's finalized transaction.version for the test (its parameter; tests/capabilities/conftest.py
    runs the tests in order of level, so the cluster switches once per level); None (an imitation): nothing to
    switch."""
    level: int | None = request.param
    if level is not None:
        cluster: KafkaCluster = request.getfixturevalue("kafka_cluster")
        own_transaction_version.setdefault(cluster, cluster.finalized_features().get("transaction.version", 0))
        anyio.run(cluster.set_feature, "transaction.version", level)   # nothing to do when it is at the level
    return level


class Wire:
    """A hook recording what the producer sent (API name -> versions) and the producer epochs it took."""

    def __init__(self) -> None:
        self.versions: dict[str, set[int]] = {}
        self.epochs: list[int] = []

    def on_response_received(self, node_id: int, api_key: int, version: int, **_: Any) -> None:
        self.versions.setdefault(ApiKey(api_key).name, set()).add(version)

    def on_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        self.epochs.append(producer_epoch)

    def check(self, transaction_version: int | None, *, offsets: bool = False) -> None:
        """The transaction protocol of ``transaction_version`` was spoken, and only it (on Apache Kafka, where the
        level is the cluster's; an imitation's protocol is whatever its advertised versions allow)."""
        if transaction_version is None:
            return
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


def replicated(control: BrokerControl) -> int:
    """Replicas of a test topic: all three of the tier's brokers (one node elsewhere)."""
    return 3 if kind_of(control) == "apache" else 1


@on_transaction_brokers()
async def test_commit_is_seen_abort_is_not_by_either_read_committed_reader(
        control: BrokerControl, unique: Callable[[str], str], transaction_version: int | None) -> None:
    bootstrap = control.bootstrap_servers
    topic = await control.create_topic(unique("txn"), partitions=2, replication_factor=replicated(control))
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
        assert producer.transaction_state == "ready"
        async with producer.transaction():
            await producer.send(topic, b"commit-last", partition=0)
        assert producer.transaction_state == "ready"
    wire.check(transaction_version)
    if transaction_version is not None and transaction_version >= 2:
        # EndTxn v5 bumps the epoch at the end of every transaction: 4 here, or 5 when the sender's pass put the
        # never-sent records' partitions in the third one before it was aborted (then it is ended with EndTxn too)
        assert wire.epochs == list(range(len(wire.epochs))) and len(wire.epochs) in (5, 6), wire.epochs
    elif transaction_version is not None:
        assert wire.epochs == [0]                # v1 keeps the epoch InitProducerId gave
    expected = sorted([b"commit-%d" % i for i in range(20)] + [b"commit-last"])
    seen = await anyio.to_thread.run_sync(ck_read_committed, bootstrap, topic, len(expected))
    assert sorted(seen) == expected
    ours = await read_committed(bootstrap, topic, 2, len(expected))
    assert sorted(ours[0] + ours[1]) == expected
    assert ours[1] == [b"commit-%d" % i for i in range(1, 20, 2)]    # in order within the partition


@on_transaction_brokers(levels=(2,))      # (confluent-kafka's transactions: nothing of akresil's producer)
async def test_akresil_read_committed_skips_aborted_and_stops_at_the_lso(
        control: BrokerControl, unique: Callable[[str], str], transaction_version: int | None) -> None:
    bootstrap = control.bootstrap_servers
    topic = await control.create_topic(unique("txn-lso"), partitions=1, replication_factor=replicated(control))
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
        assert len(raw) == 16 and b"a1-0" in raw and b"open-0" in raw


@on_transaction_brokers()
async def test_second_producer_with_the_same_id_fences_the_first(
        control: BrokerControl, unique: Callable[[str], str], transaction_version: int | None) -> None:
    bootstrap = control.bootstrap_servers
    topic = await control.create_topic(unique("txn-fence"), partitions=1, replication_factor=replicated(control))
    txn_id = unique("tx-fence")
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
    if transaction_version is not None:
        versions = wire.versions
        assert versions["PRODUCE"] == ({12} if transaction_version >= 2 else {11}), versions
    assert await anyio.to_thread.run_sync(ck_read_committed, bootstrap, topic, 1) == [b"new"]


@on_transaction_brokers()
async def test_init_transactions_take_over_takes_the_id_back_from_the_producer_that_fenced_it(
        control: BrokerControl, unique: Callable[[str], str], transaction_version: int | None) -> None:
    """A long-lived producer whose id another instance took meanwhile (Spark's exactly-once sink: a worker's cached
    producer after another worker ran the same task partition): ``take_over=True`` takes the id back without a
    new client and fences the other; a plain re-init passes its own stale epoch and is refused (KIP-360)."""
    bootstrap = control.bootstrap_servers
    topic = await control.create_topic(unique("txn-take"), partitions=1, replication_factor=replicated(control))
    txn_id = unique("tx-take")
    fenced = (errors.ProducerFencedError, errors.InvalidProducerEpochError)
    async with Producer(bootstrap_servers=bootstrap, transactional_id=txn_id) as first, \
            Producer(bootstrap_servers=bootstrap, transactional_id=txn_id) as second, \
            Producer(bootstrap_servers=bootstrap, transactional_id=txn_id) as third:
        await first.init_transactions()
        async with first.transaction():
            await first.send(topic, b"first-1")
        await second.init_transactions()                  # fences the first
        await first.init_transactions(take_over=True)     # takes the id back: fences the second
        async with first.transaction():
            await first.send(topic, b"first-2")
        with pytest.raises(fenced):
            second.begin_transaction()
            await second.send(topic, b"zombie")
            await second.commit_transaction()
        await third.init_transactions()                   # fences the first again
        if kind_of(control) == "apache":                  # InitProducerId v3+ checks the epoch it is given
            with pytest.raises(errors.ProducerFencedError):
                await first.init_transactions()
    assert await anyio.to_thread.run_sync(ck_read_committed, bootstrap, topic, 2) == [b"first-1", b"first-2"]


@on_transaction_brokers(protocols=("classic", "consumer"))
async def test_offsets_sent_to_a_transaction_commit_only_with_it(
        control: BrokerControl, unique: Callable[[str], str], transaction_version: int | None, protocol: str) -> None:
    bootstrap = control.bootstrap_servers
    src = await control.create_topic(unique("txn-src"), partitions=1, replication_factor=replicated(control))
    dst = await control.create_topic(unique("txn-dst"), partitions=1, replication_factor=replicated(control))
    group = unique("g")
    tp = TopicPartition(src, 0)
    wire = Wire()
    timing: dict[str, Any] = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 500} \
        if protocol == "classic" else {}
    async with Producer(bootstrap_servers=bootstrap) as plain:
        await plain.send_many(src, [(None, b"in-%d" % i) for i in range(10)])
    async with Consumer(src, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, isolation_level="read_committed",
                        group_protocol=protocol, **timing) as consumer, \
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
        assert (await committed(bootstrap, group)).get(tp) is None
        # committed: both
        async with producer.transaction():
            for rec in got:
                await producer.enqueue(dst, rec.value)
            await producer.send_offsets_to_transaction({tp: got[-1].offset + 1}, meta)
        # the coordinator applies the commit marker to the group's offsets after EndTxn has answered: wait for it
        # (a read right after the commit can still see the offsets as pending, i.e. absent)
        with anyio.fail_after(30):
            while (await committed(bootstrap, group)).get(tp) is None:
                await anyio.sleep(0.1)
        assert (await committed(bootstrap, group))[tp] == 10
        # while a transaction is open its offsets are pending: the admin gives the last committed one at once
        # (it waited for the transaction, up to its timeout when the producer died), or with require_stable waits
        producer.begin_transaction()
        await producer.send_offsets_to_transaction({tp: 7}, meta)
        assert (await committed(bootstrap, group))[tp] == 10
        fenced = Capability.ZOMBIE_FENCING in control.capabilities
        if fenced:
            async with Admin(bootstrap_servers=bootstrap) as admin:
                with pytest.raises(errors.KafkaTimeoutError) as waited:
                    await admin.list_consumer_group_offsets(group, require_stable=True, timeout_ms=1_500)
            assert isinstance(waited.value.__cause__, errors.UnstableOffsetCommitError)
        await producer.abort_transaction()
        producer.begin_transaction()
        stale = meta._replace(generation_id=meta.generation_id + 5)
        if fenced:
            # a stale generation (a zombie that lost its partitions, KIP-447) is refused by the group coordinator:
            # an abortable error, and the abort leaves the group's offsets as they were
            with pytest.raises(errors.IllegalGenerationError):   # for a KIP-848 group too: the member epoch
                await producer.send_offsets_to_transaction({tp: 3}, stale)
            assert producer.transaction_state == "abortable error"
        else:
            # noida-db checks neither (docs/brokers.md; the client's side of the refusal runs on the mock in
            # tests/integration/test_transactions.py): require_stable answers at once, the stale offsets go in,
            # and the abort drops them
            await producer.send_offsets_to_transaction({tp: 3}, stale)
        await producer.abort_transaction()
        assert (await committed(bootstrap, group))[tp] == 10
        async with producer.transaction():     # the producer goes on after the abort
            await producer.send(dst, b"after")
    wire.check(transaction_version, offsets=True)
    seen = await anyio.to_thread.run_sync(ck_read_committed, bootstrap, dst, 11)
    assert sorted(seen) == sorted([b"in-%d" % i for i in range(10)] + [b"after"])


N = 60


@on_transaction_brokers(protocols=("classic", "consumer"))
async def test_exactly_once_runner_copies_every_record_once(
        control: BrokerControl, unique: Callable[[str], str], transaction_version: int | None, protocol: str) -> None:
    """The runner's exactly_once copy, its handler timing out in two different transactions: the read_committed
    output holds every input record once, in order per partition, and the group's offsets end at the input's."""
    bootstrap = control.bootstrap_servers
    src = await control.create_topic(unique("eos-in"), partitions=2, replication_factor=replicated(control))
    dst = await control.create_topic(unique("eos-out"), partitions=2, replication_factor=replicated(control))
    group = unique("eos-g")
    async with Producer(bootstrap_servers=bootstrap) as plain:
        for p in (0, 1):
            await plain.send_many(src, [(None, b"p%d-%03d" % (p, i)) for i in range(N)], partition=p)
    attempts: dict[tuple[int, int], int] = {}
    failed_later: list[tuple[int, int]] = []
    wire = Wire()
    timing: dict[str, Any] = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 500} \
        if protocol == "classic" else {}

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

    async with Consumer(src, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                        auto_offset_reset="earliest", isolation_level="read_committed", fetch_max_wait_ms=50,
                        group_protocol=protocol, **timing) as consumer, \
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
    assert {tp.partition: o for tp, o in (await committed(bootstrap, group)).items()} == {0: N, 1: N}


@on_transaction_brokers()
async def test_a_killed_runner_process_restarts_exactly_once(
        control: BrokerControl, transaction_version: int | None) -> None:
    """SIGKILL an exactly-once runner process mid-copy (a transaction open) and start it again with the same
    transactional id: the new one fences the old epoch and aborts its open transaction; the read_committed
    output holds every input record once, in order, and the log holds the aborted outputs too."""
    async def create(name: str) -> str:
        return await control.create_topic(name, partitions=2, replication_factor=replicated(control))

    # 300 records a partition on the tier's three JVMs (sharing 2 cores with the test), 1000 on a one-node imitation
    await killed_runner_restarts_exactly_once(control.bootstrap_servers, create=create,
                                              n=300 if kind_of(control) == "apache" else 1000)
