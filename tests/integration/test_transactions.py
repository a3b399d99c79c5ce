"""Transactions on noida-db (the test broker that implements their semantics: docs/brokers.md), checked from
both sides: akresil's transactional producer read by confluent-kafka's read_committed consumer, and
confluent-kafka's transactional producer read by akresil's read_committed consumer. The client's state
machine under injected coordinator errors runs on librdkafka's mock cluster.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition, errors
from akresil.testing import EmbeddedBroker
from akresil.types import ConsumerGroupMetadata
from akresil.testing.rdkafka_mock import MockCluster

ck = pytest.importorskip("confluent_kafka")

FAST = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 500, "retry_backoff_ms": 20}


@pytest.fixture(scope="module")
def noida() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(kind="noida") as broker:
        yield broker


async def _create(bs: str, topic: str, partitions: int = 2) -> None:
    async with Admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])


def _ck_read_committed(bs: str, topic: str, expect: int, *, settle_s: float = 1.5, limit_s: float = 20) -> list[bytes]:
    """Values confluent-kafka's read_committed consumer sees: until ``expect`` arrived, then ``settle_s`` more
    (so records that must not appear have time to)."""
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": f"rc-{topic}-{time.monotonic_ns()}",
                            "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                            "enable.auto.commit": False})
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


async def test_commit_is_seen_abort_is_not_by_read_committed(noida: EmbeddedBroker) -> None:
    bs, topic = noida.bootstrap_servers, "txn-commit-abort"
    await _create(bs, topic)
    async with Producer(bootstrap_servers=bs, transactional_id="tx-ca") as producer:
        await producer.init_transactions()
        async with producer.transaction():
            for i in range(20):
                await producer.enqueue(topic, b"commit-%d" % i)
        producer.begin_transaction()
        sent = [await producer.enqueue(topic, b"abort-%d" % i) for i in range(10)]
        await producer.flush()                   # written to the log, then aborted: markers must hide them
        await producer.abort_transaction()
        assert all(f.done() for f in sent)
        producer.begin_transaction()
        pending = [await producer.enqueue(topic, b"never-%d" % i) for i in range(5)]
        await producer.abort_transaction()       # never sent: they fail as aborted
        for fut in pending:
            with pytest.raises(errors.TransactionAbortedError):
                await fut
        async with producer.transaction():
            await producer.send(topic, b"commit-last")
        assert producer.transaction_state == "ready"
    seen = await anyio.to_thread.run_sync(_ck_read_committed, bs, topic, 21)
    assert sorted(seen) == sorted([b"commit-%d" % i for i in range(20)] + [b"commit-last"])


async def test_exception_in_transaction_block_aborts(noida: EmbeddedBroker) -> None:
    bs, topic = noida.bootstrap_servers, "txn-block-abort"
    await _create(bs, topic, 1)
    async with Producer(bootstrap_servers=bs, transactional_id="tx-block") as producer:
        await producer.init_transactions()
        with pytest.raises(RuntimeError, match="boom"):
            async with producer.transaction():
                await producer.send(topic, b"lost")
                raise RuntimeError("boom")
        assert producer.transaction_state == "ready"
        async with producer.transaction():
            await producer.send(topic, b"kept")
    assert await anyio.to_thread.run_sync(_ck_read_committed, bs, topic, 1) == [b"kept"]


async def test_bad_calls_raise_illegal_state(noida: EmbeddedBroker) -> None:
    bs, topic = noida.bootstrap_servers, "txn-illegal"
    await _create(bs, topic, 1)
    async with Producer(bootstrap_servers=bs, transactional_id="tx-illegal") as producer:
        with pytest.raises(errors.IllegalStateError, match="init_transactions"):
            producer.begin_transaction()
        await producer.init_transactions()
        with pytest.raises(errors.IllegalStateError, match="begin_transaction"):
            await producer.send(topic, b"outside")
        with pytest.raises(errors.IllegalStateError, match="begin_transaction"):
            await producer.send_many(topic, [(None, b"outside")])
        with pytest.raises(errors.IllegalStateError, match="begin_transaction"):
            await producer.commit_transaction()
        producer.begin_transaction()
        with pytest.raises(errors.IllegalStateError, match="already open"):
            producer.begin_transaction()
        await producer.abort_transaction()
    async with Producer(bootstrap_servers=bs) as plain:
        with pytest.raises(errors.IllegalStateError, match="no transactional_id"):
            plain.begin_transaction()


async def test_second_producer_with_same_id_fences_the_first(noida: EmbeddedBroker) -> None:
    bs, topic = noida.bootstrap_servers, "txn-fence"
    await _create(bs, topic, 1)
    async with Producer(bootstrap_servers=bs, transactional_id="tx-fence") as old:
        await old.init_transactions()
        old.begin_transaction()
        await old.send(topic, b"zombie-open")           # its transaction is open when the new one starts
        async with Producer(bootstrap_servers=bs, transactional_id="tx-fence") as new:
            await new.init_transactions()                # aborts the old producer's open transaction
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
    assert await anyio.to_thread.run_sync(_ck_read_committed, bs, topic, 1) == [b"new"]


async def _committed(bs: str, group: str, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
    async with Admin(bootstrap_servers=bs) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    return {tp: (offsets[tp].committed if tp in offsets else None) for tp in tps}


async def test_send_offsets_commits_only_with_the_transaction(noida: EmbeddedBroker) -> None:
    bs, src, dst, group = noida.bootstrap_servers, "txn-src", "txn-dst", "txn-copy"
    await _create(bs, src, 1)
    await _create(bs, dst, 1)
    tp = TopicPartition(src, 0)
    async with Producer(bootstrap_servers=bs) as plain:
        await plain.send_many(src, [(None, b"in-%d" % i) for i in range(10)])
    async with Consumer(src, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, isolation_level="read_committed", **FAST) as consumer, \
            Producer(bootstrap_servers=bs, transactional_id="tx-copy") as producer:
        await producer.init_transactions()
        got: list[Any] = []
        with anyio.fail_after(30):
            while len(got) < 10:
                for recs in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(recs)
        meta = consumer.group_metadata()
        assert meta.generation_id >= 0 and meta.member_id
        # aborted: neither the outputs nor the offsets
        producer.begin_transaction()
        for rec in got[:5]:
            await producer.enqueue(dst, rec.value)
        await producer.send_offsets_to_transaction({tp: got[4].offset + 1}, meta)
        await producer.abort_transaction()
        assert (await _committed(bs, group, [tp]))[tp] is None
        # committed: both
        async with producer.transaction():
            for rec in got:
                await producer.enqueue(dst, rec.value)
            await producer.send_offsets_to_transaction({tp: got[-1].offset + 1}, meta)
        assert (await _committed(bs, group, [tp]))[tp] == 10
        # noida-db does not check TxnOffsetCommit's generation (KIP-447 fencing: docs/brokers.md; the client's
        # side of it is tested on the mock below): the stale offsets go in, and the abort drops them
        producer.begin_transaction()
        stale = meta._replace(generation_id=meta.generation_id + 5)
        await producer.send_offsets_to_transaction({tp: 3}, stale)
        await producer.abort_transaction()
        assert (await _committed(bs, group, [tp]))[tp] == 10
    seen = await anyio.to_thread.run_sync(_ck_read_committed, bs, dst, 10)
    assert sorted(seen) == sorted(b"in-%d" % i for i in range(10))


def _ck_transactions(bs: str, topic: str) -> None:
    """confluent-kafka's transactional producer: committed, aborted, committed (partition 0)."""
    producer = ck.Producer({"bootstrap.servers": bs, "transactional.id": f"ck-{topic}"})
    producer.init_transactions(10)
    for label, commit in (("c1", True), ("a1", False), ("c2", True)):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, b"%s-%d" % (label.encode(), i), partition=0)
        producer.flush(10)
        if commit:
            producer.commit_transaction(10)
        else:
            producer.abort_transaction(10)
    # an open transaction at the end: its records are below the high watermark but above the LSO
    producer.begin_transaction()
    producer.produce(topic, b"open-0", partition=0)
    producer.flush(10)


async def test_akresil_read_committed_skips_aborted_and_stops_at_lso(noida: EmbeddedBroker) -> None:
    bs, topic = noida.bootstrap_servers, "txn-reverse"
    await _create(bs, topic, 1)
    await anyio.to_thread.run_sync(_ck_transactions, bs, topic)
    tp = TopicPartition(topic, 0)
    expected = [b"c1-%d" % i for i in range(5)] + [b"c2-%d" % i for i in range(5)]
    async with Consumer(bootstrap_servers=bs, isolation_level="read_committed", fetch_max_wait_ms=100) as rc:
        rc.assign([tp])
        rc.seek(tp, 0)
        seen: list[bytes] = []
        with anyio.move_on_after(4):
            while True:
                for recs in (await rc.getmany(timeout_ms=300)).values():
                    seen.extend(r.value for r in recs)
        assert seen == expected                   # aborted skipped, control batches skipped, open one not read
        position = await rc.position(tp)
    async with Consumer(bootstrap_servers=bs, isolation_level="read_uncommitted", fetch_max_wait_ms=100) as ru:
        ru.assign([tp])
        ru.seek(tp, 0)
        raw: list[bytes] = []
        with anyio.move_on_after(3):
            while len(raw) < 16:
                for recs in (await ru.getmany(timeout_ms=300)).values():
                    raw.extend(r.value for r in recs)
        assert len(raw) == 16 and b"a1-0" in raw and b"open-0" in raw
    # the position stops at the LSO, the first offset of the open transaction (3 transactions of 5 records
    # and a marker each: 18), below the end of the log
    assert position == 18


async def test_end_txn_concurrent_transactions_is_retried_on_mock() -> None:
    with MockCluster(3) as cluster:
        cluster.create_topic("mt", 2, 1)
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="tx-mock",
                            retry_backoff_ms=10, retry_backoff_max_ms=50) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            cluster.push_request_errors(24, [errors.ConcurrentTransactionsError.errno] * 2)   # AddPartitionsToTxn
            cluster.push_request_errors(26, [errors.ConcurrentTransactionsError.errno,
                                             errors.NotCoordinatorError.errno,
                                             errors.CoordinatorLoadInProgressError.errno])    # EndTxn
            cluster.start_request_tracking()
            await producer.send("mt", b"x", partition=0)
            await producer.commit_transaction()
            requests = cluster.stop_request_tracking()
            assert producer.transaction_state == "ready"
            keys = [r.api_key for r in requests]
            assert keys.count(24) >= 3 and keys.count(26) >= 4
            assert keys.index(0) > max(i for i, k in enumerate(keys) if k == 24)   # Produce after the add
            assert 10 in keys[keys.index(26):]            # NOT_COORDINATOR: FindCoordinator again


async def test_end_txn_retries_stop_at_the_transaction_timeout_on_mock() -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic("mt2", 1, 1)
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="tx-mock2",
                            transaction_timeout_ms=1_000, retry_backoff_ms=50, retry_backoff_max_ms=200) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send("mt2", b"x")
            cluster.push_request_errors(26, [errors.ConcurrentTransactionsError.errno] * 100)
            started = time.monotonic()
            with pytest.raises(errors.KafkaTimeoutError, match="commit_transaction"):
                await p.commit_transaction()
            assert 0.5 < time.monotonic() - started < 5        # bounded by time, generous bounds
            cluster.clear_request_errors(26)
            await p.commit_transaction()                       # a timed-out commit can be retried
            assert p.transaction_state == "ready"


async def test_abortable_add_partitions_error_then_abort_and_continue_on_mock() -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic("mt3", 1, 1)
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="tx-mock3",
                            retry_backoff_ms=10) as p:
            await p.init_transactions()
            p.begin_transaction()
            cluster.push_request_errors(24, [errors.TopicAuthorizationFailedError.errno])
            fut = await p.enqueue("mt3", b"x")
            with anyio.fail_after(10):
                while p.transaction_state != "abortable error":
                    await anyio.sleep(0.01)
            with pytest.raises(errors.IllegalStateError, match="abort"):
                await p.send("mt3", b"y")
            with pytest.raises(errors.IllegalStateError):
                await p.commit_transaction()
            await p.abort_transaction()
            with pytest.raises(errors.TransactionAbortedError):
                await fut
            async with p.transaction():
                md = await p.send("mt3", b"z")
            assert md.offset >= 0


async def test_txn_offset_commit_stale_generation_is_abortable_on_mock() -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic("mt4", 1, 1)
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="tx-mock4",
                            retry_backoff_ms=10) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send("mt4", b"x")
            cluster.push_request_errors(28, [errors.IllegalGenerationError.errno])          # TxnOffsetCommit
            meta = ConsumerGroupMetadata("g4", 7, "member-1", None)
            with pytest.raises(errors.IllegalGenerationError):
                await p.send_offsets_to_transaction({TopicPartition("mt4", 0): 1}, meta)
            assert p.transaction_state == "abortable error"
            with pytest.raises(errors.IllegalStateError, match="abort"):
                await p.commit_transaction()
            await p.abort_transaction()
            async with p.transaction():
                await p.send("mt4", b"y")
                cluster.push_request_errors(28, [errors.CoordinatorLoadInProgressError.errno,
                                                 errors.NotCoordinatorError.errno])        # retried, re-found
                await p.send_offsets_to_transaction({TopicPartition("mt4", 0): 2}, meta)
            assert p.transaction_state == "ready"


async def test_group_authorization_refused_for_offsets_is_abortable_on_mock() -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic("mt5", 1, 1)
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="tx-mock5",
                            retry_backoff_ms=10) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send("mt5", b"x")
            # (an error injected into FindCoordinator comes back malformed from the mock: docs/brokers.md)
            cluster.push_request_errors(25, [errors.GroupAuthorizationFailedError.errno])    # AddOffsetsToTxn
            with pytest.raises(errors.GroupAuthorizationFailedError):
                await p.send_offsets_to_transaction({TopicPartition("mt5", 0): 1}, "g5")
            assert p.transaction_state == "abortable error"
            await p.abort_transaction()
            assert p.transaction_state == "ready"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_transactions_under_both_backends_leave_no_task(noida: EmbeddedBroker, backend: str) -> None:
    bs, topic = noida.bootstrap_servers, f"txn-backend-{backend}"

    async def scenario() -> None:
        before = {task.id for task in anyio.get_running_tasks()}
        await _create(bs, topic, 2)
        async with Producer(bootstrap_servers=bs, transactional_id=f"tx-{backend}") as producer:
            await producer.init_transactions()
            async with producer.transaction():
                for i in range(10):
                    await producer.enqueue(topic, b"c%d" % i)
            producer.begin_transaction()
            await producer.send(topic, b"aborted")
            await producer.abort_transaction()
        async with Consumer(bootstrap_servers=bs, isolation_level="read_committed",
                            auto_offset_reset="earliest", fetch_max_wait_ms=50) as consumer:
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            seen: list[bytes] = []
            with anyio.move_on_after(3):
                while True:
                    for recs in (await consumer.getmany(timeout_ms=200)).values():
                        seen.extend(r.value for r in recs)
        assert sorted(seen) == sorted(b"c%d" % i for i in range(10))
        leftover = [t for t in anyio.get_running_tasks() if t.id not in before]
        assert leftover == [], [t.name for t in leftover]

    anyio.run(scenario, backend=backend)


async def test_new_partitions_of_a_pass_go_in_one_add_partitions_request_on_mock() -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic("mt6", 4, 1)
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="tx-mock6") as p:
            await p.init_transactions()
            async with p.transaction():             # warm-up: metadata and coordinator known
                await p.send("mt6", b"w", partition=0)
            cluster.start_request_tracking()
            p.begin_transaction()
            futures = [await p.enqueue("mt6", b"x", partition=i) for i in range(4)]   # no await point between
            await p.commit_transaction()
            requests = cluster.stop_request_tracking()
            assert all(f.done() for f in futures)
    keys = [r.api_key for r in requests]
    assert keys.count(24) == 1                       # one AddPartitionsToTxn for the four partitions
    assert keys.index(24) < keys.index(0) and keys.count(26) == 1


async def test_delivery_timeout_bounds_records_whose_partition_cannot_be_added_on_mock() -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic("mt7", 1, 1)
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="tx-mock7",
                            request_timeout_ms=1_000, delivery_timeout_ms=1_500, linger_ms=0,
                            retry_backoff_ms=20, retry_backoff_max_ms=100) as p:
            await p.init_transactions()
            p.begin_transaction()
            cluster.push_request_errors(24, [errors.ConcurrentTransactionsError.errno] * 500)
            fut = await p.enqueue("mt7", b"x")
            started = time.monotonic()
            with pytest.raises(errors.DeliveryTimeoutError):
                await fut
            assert 1.0 < time.monotonic() - started < 6          # KIP-91 bound, generous
            assert p.transaction_state == "abortable error"
            cluster.clear_request_errors(24)
            await p.abort_transaction()
            async with p.transaction():
                md = await p.send("mt7", b"y")
            assert md.offset >= 0 and p.transaction_state == "ready"


async def test_the_group_coordinator_of_txn_offsets_is_looked_up_once_on_mock() -> None:
    """TxnOffsetCommit goes to the group's coordinator: found once through the client's coordinator cache, not
    before every send_offsets_to_transaction (one FindCoordinator per exactly-once commit before); a
    NOT_COORDINATOR answer makes it look the group coordinator up again."""
    with MockCluster(3) as cluster:
        cluster.create_topic("mt-offsets", 1, 1)
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="tx-offsets",
                            retry_backoff_ms=10) as p:
            await p.init_transactions()
            cluster.start_request_tracking()
            for i in range(3):
                p.begin_transaction()
                await p.send("mt-offsets", b"x")
                await p.send_offsets_to_transaction({TopicPartition("mt-offsets", 0): i + 1},
                                                    ConsumerGroupMetadata("g-offsets"))
                await p.commit_transaction()
            lookups = [r for r in cluster.stop_request_tracking() if r.api_key == 10]   # FindCoordinator
            assert len(lookups) == 1, lookups
            cluster.push_request_errors(28, [errors.NotCoordinatorError.errno])            # TxnOffsetCommit
            cluster.start_request_tracking()
            p.begin_transaction()
            await p.send_offsets_to_transaction({TopicPartition("mt-offsets", 0): 9}, ConsumerGroupMetadata("g-offsets"))
            await p.commit_transaction()
            keys = [r.api_key for r in cluster.stop_request_tracking()]
            assert keys.count(28) == 2 and 10 in keys[keys.index(28):]
