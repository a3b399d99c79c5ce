"""Transactions: the client's state machine under injected coordinator errors on librdkafka's mock cluster, and on
noida-db calls out of order and both backends.  What every broker with transactions must do (commits, aborts,
fencing, offsets in a transaction, exactly-once copies) runs on Apache Kafka and noida-db in
tests/capabilities/test_transactions.py.
"""

from __future__ import annotations

import time

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition, errors
from akresil.testing import EmbeddedBroker
from akresil.types import ConsumerGroupMetadata
from akresil.testing.rdkafka_mock import MockCluster

pytestmark = pytest.mark.kafka_too     # the broker tests also run on Apache Kafka (tests/integration/conftest.py)

ck = pytest.importorskip("confluent_kafka")

FAST = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 500, "retry_backoff_ms": 20}


async def _create(bs: str, topic: str, partitions: int = 2) -> None:
    async with Admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])


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
