"""The runner's exactly-once mode against in-memory fakes on the virtual clock of test_runner.py: a fake
transactional producer keeps each transaction's outputs and offsets apart until commit, so the tests check the
one invariant that matters: what is committed is every input's output exactly once, with its offset."""

from __future__ import annotations

import random
from typing import Any, Mapping

import anyio
import pytest

from akresil.errors import ConfigError, IllegalStateError, KafkaError, RecordTooLargeError
from akresil.runner import HandlerContext, Runner
from akresil.types import ConsumerGroupMetadata, ConsumerRecord, TopicPartition

from .test_runner import P0, P1, FakeConsumer, VirtualClock, drive


class TxnConsumer(FakeConsumer):
    """Adds what the exactly-once runner needs: seek, group metadata (commits go through the producer)."""

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    def group_metadata(self) -> ConsumerGroupMetadata:
        return ConsumerGroupMetadata("g", 3, "m-1", None)

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        raise AssertionError("an exactly-once runner commits offsets through the transaction only")


class _Done:
    def __await__(self) -> Any:
        if False:
            yield
        return None


class FakeTxnProducer:
    """Outputs and offsets of the open transaction; ``committed_out`` / consumer offsets only on commit."""

    def __init__(self, consumer: TxnConsumer) -> None:
        self.consumer = consumer
        self.transaction_state = "ready"
        self.open_out: list[tuple[int, bytes]] = []
        self.open_offsets: dict[TopicPartition, int] = {}
        self.committed_out: list[tuple[int, bytes]] = []
        self.commits = self.aborts = 0
        self.fail_next_commit: KafkaError | None = None

    def begin_transaction(self) -> None:
        assert self.transaction_state == "ready", self.transaction_state
        self.transaction_state = "in transaction"

    async def enqueue(self, topic: str, value: Any = None, key: Any = None, *, partition: int | None = None,
                      **_: Any) -> _Done:
        assert self.transaction_state == "in transaction"
        self.open_out.append((partition if partition is not None else -1, value))
        return _Done()

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int],
                                          group: ConsumerGroupMetadata) -> None:
        assert self.transaction_state == "in transaction" and group.generation_id == 3
        self.open_offsets.update(offsets)

    async def commit_transaction(self) -> None:
        assert self.transaction_state == "in transaction"
        if self.fail_next_commit is not None:
            error, self.fail_next_commit = self.fail_next_commit, None
            self.transaction_state = "abortable error"
            raise error
        self.committed_out += self.open_out
        self.consumer.committed.update(self.open_offsets)
        self.open_out, self.open_offsets = [], {}
        self.commits += 1
        self.transaction_state = "ready"

    async def abort_transaction(self) -> None:
        assert self.transaction_state in ("in transaction", "abortable error")
        self.open_out, self.open_offsets = [], {}
        self.aborts += 1
        self.transaction_state = "ready"


def setup(n: int = 30) -> tuple[VirtualClock, TxnConsumer, FakeTxnProducer]:
    clock = VirtualClock()
    consumer = TxnConsumer(clock, {P0: n, P1: n})
    return clock, consumer, FakeTxnProducer(consumer)


def make(clock: VirtualClock, consumer: TxnConsumer, producer: FakeTxnProducer, handler: Any,
         **kwargs: Any) -> Runner:
    return Runner(consumer, handler, producer=producer, clock=clock, sleep=clock.sleep, rng=random.Random(3),
                  processing_guarantee="exactly_once", commit_interval_ms=kwargs.pop("commit_interval_ms", 50),
                  retry_backoff_ms=10, **kwargs)


def expected(n: int) -> dict[int, list[bytes]]:
    return {p: [b"v%d" % i for i in range(n)] for p in (0, 1)}


def outputs(producer: FakeTxnProducer) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {0: [], 1: []}
    for p, value in producer.committed_out:
        out[p].append(value)
    return out


async def test_timeout_aborts_the_transaction_and_rewinds_every_partition() -> None:
    clock, consumer, producer = setup()
    tries: dict[tuple[int, int], int] = {}

    async def handler(rec: ConsumerRecord, ctx: HandlerContext) -> None:
        key = (rec.partition, rec.offset)
        tries[key] = tries.get(key, 0) + 1
        await ctx.send("out", rec.value, partition=rec.partition)
        await clock.sleep(5)
        if key == (0, 17) and tries[key] == 1:
            raise TimeoutError("slow")

    runner = make(clock, consumer, producer, handler)
    err = await drive(clock, runner, until=lambda: consumer.committed == {P0: 30, P1: 30})
    assert err is None
    assert outputs(producer) == expected(30)           # aborted outputs never committed, nothing lost
    assert producer.aborts == 1 and producer.commits >= 2
    assert tries[(0, 17)] == 2


async def test_failed_commit_aborts_and_rewinds() -> None:
    clock, consumer, producer = setup()

    async def handler(rec: ConsumerRecord, ctx: HandlerContext) -> None:
        await ctx.send("out", rec.value, partition=rec.partition)
        await clock.sleep(2)
        if rec.offset == 10 and rec.partition == 1 and producer.aborts == 0:
            producer.fail_next_commit = RecordTooLargeError("a record of the transaction failed")

    runner = make(clock, consumer, producer, handler)
    err = await drive(clock, runner, until=lambda: consumer.committed == {P0: 30, P1: 30})
    assert err is None
    assert outputs(producer) == expected(30)
    assert producer.aborts == 1


async def test_commits_follow_the_interval_at_unit_boundaries() -> None:
    clock, consumer, producer = setup(n=100)
    committed_at: list[float] = []
    real_commit = producer.commit_transaction

    async def commit() -> None:
        committed_at.append(clock.now)
        await real_commit()

    producer.commit_transaction = commit    # type: ignore[method-assign]

    async def handler(rec: ConsumerRecord, ctx: HandlerContext) -> None:
        await ctx.send("out", rec.value, partition=rec.partition)
        await clock.sleep(10)                # 100 records: 1 s of virtual time per partition

    runner = make(clock, consumer, producer, handler, commit_interval_ms=100, max_batch_records=500)
    err = await drive(clock, runner, until=lambda: consumer.committed == {P0: 100, P1: 100})
    assert err is None
    assert outputs(producer) == expected(100)
    # one chunk holds all 100 records, yet commits come about every 100 ms, not once per chunk
    assert len(committed_at) >= 8
    gaps = [b - a for a, b in zip(committed_at, committed_at[1:-1])]
    assert max(gaps) <= 130


async def test_non_timeout_handler_error_aborts_and_raises() -> None:
    clock, consumer, producer = setup()

    async def handler(rec: ConsumerRecord, ctx: HandlerContext) -> None:
        await ctx.send("out", rec.value, partition=rec.partition)
        await clock.sleep(1)
        if rec.offset == 12:
            raise ValueError("bad record")

    runner = make(clock, consumer, producer, handler)
    err = await drive(clock, runner)
    assert isinstance(err, ValueError)
    for p, values in outputs(producer).items():
        committed = consumer.committed.get(TopicPartition("in", p), 0)
        assert values == [b"v%d" % i for i in range(committed)]      # outputs match committed offsets
    assert producer.transaction_state == "ready"


async def test_a_send_refused_by_a_failed_transaction_aborts_and_rewinds_without_raising() -> None:
    """A record of the transaction failed (OUT_OF_ORDER_SEQUENCE under a leader move, say): the producer's
    transaction is abortable and refuses further sends. That is the transaction's failure, not the handler's: the
    runner aborts, rewinds and handles the records again (it stopped with the send's error before)."""
    clock, consumer, producer = setup()
    real_enqueue = producer.enqueue
    failed = False

    async def enqueue(topic: str, value: Any = None, key: Any = None, **kw: Any) -> _Done:
        nonlocal failed
        if producer.transaction_state == "abortable error":
            raise IllegalStateError("send: the transaction failed and must be aborted")
        if value == b"v10" and kw.get("partition") == 1 and not failed:
            failed = True
            producer.transaction_state = "abortable error"        # an earlier record of it failed
            raise IllegalStateError("send: the transaction failed and must be aborted")
        return await real_enqueue(topic, value, key, **kw)

    producer.enqueue = enqueue              # type: ignore[method-assign]

    async def handler(rec: ConsumerRecord, ctx: HandlerContext) -> None:
        await ctx.send("out", rec.value, partition=rec.partition)
        await clock.sleep(2)

    runner = make(clock, consumer, producer, handler)
    err = await drive(clock, runner, until=lambda: consumer.committed == {P0: 30, P1: 30})
    assert err is None
    assert outputs(producer) == expected(30)                       # every output once, in order
    assert producer.aborts == 1


def test_requirements_are_checked() -> None:
    clock, consumer, producer = setup()

    async def handler(rec: ConsumerRecord, ctx: HandlerContext) -> None: ...

    producer.transaction_state = "in transaction"
    with pytest.raises(ConfigError, match="init_transactions"):
        make(clock, consumer, producer, handler)
    producer.transaction_state = "ready"
    with pytest.raises(ConfigError, match="dead_letter"):
        make(clock, consumer, producer, handler, on_error="dead_letter", dead_letter_topic="dlt")
    plain = FakeConsumer(clock, {P0: 1})
    with pytest.raises(ConfigError, match="seek|group_metadata"):
        make(clock, plain, producer, handler)  # type: ignore[arg-type]


async def test_revoke_commits_the_open_transaction_before_the_partition_leaves() -> None:
    clock, consumer, producer = setup(n=3)
    started = anyio.Event()

    async def handler(rec: ConsumerRecord, ctx: HandlerContext) -> None:
        await ctx.send("out", rec.value, partition=rec.partition)
        if ctx.partition == P1:
            started.set()
            await clock.sleep(500)

    runner = make(clock, consumer, producer, handler, commit_interval_ms=60_000)
    committed_on_revoke: dict[TopicPartition, int] = {}

    async def revoke() -> None:
        await started.wait()
        await runner.rebalance_listener.on_partitions_revoked({P1})
        committed_on_revoke.update(consumer.committed)
        consumer.revoke(P1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(revoke)
        err = await drive(clock, runner, until=lambda: P1 not in runner.partitions()
                          and consumer.committed.get(P0) == 3)
    assert err is None
    # the in-flight P1 record finished and went out in the transaction committed before P1 left, with its offset
    assert committed_on_revoke[P1] == 1
    assert outputs(producer)[1] == [b"v0"]
    assert outputs(producer)[0] == [b"v0", b"v1", b"v2"]


class _Task:
    """A partition's progress, as the transaction sees it (``runner_txn.TransactionTask``)."""

    def __init__(self, tp: TopicPartition, processed: int | None, committed: int | None,
                 rewind_to: int | None) -> None:
        self.tp, self.processed, self.committed, self.rewind_to = tp, processed, committed, rewind_to
        self.rewound: list[int] = []

    def rewind(self, offset: int) -> None:
        self.rewound.append(offset)
        self.processed, self.rewind_to = self.committed, None


async def test_the_transaction_works_on_what_it_is_given_not_on_a_runner() -> None:
    """ExactlyOnce takes its producer, consumer and the partition tasks as arguments: it commits the tasks'
    offsets with the consumer's group metadata, and an abort rewinds exactly those tasks."""
    from akresil.runner_txn import ExactlyOnce

    clock, consumer, producer = setup()
    eos = ExactlyOnce(producer, consumer)
    moved, idle = _Task(P0, 12, 5, 5), _Task(P1, 7, 7, None)
    await eos.enter()
    eos.exit()
    assert await eos.commit_point([moved, idle]) is True
    assert consumer.committed == {P0: 12} and (moved.committed, moved.rewind_to) == (12, None)
    moved.processed, moved.rewind_to = 20, 12
    await eos.enter()
    eos.request_abort()
    eos.exit()
    assert await eos.commit_point([moved, idle]) is False
    assert moved.rewound == [12] and consumer.positions[P0] == 12 and idle.rewound == []
    assert (eos.commits, eos.aborts, producer.aborts) == (1, 1, 1)


class SlowCommitProducer(FakeTxnProducer):
    """Ends a transaction after a round trip of virtual time, as a real one does (EndTxn), and refuses what a real
    producer refuses while it commits: offsets, another commit, an abort."""

    def __init__(self, consumer: TxnConsumer, clock: VirtualClock) -> None:
        super().__init__(consumer)
        self.clock = clock
        self.committing = anyio.Event()

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int],
                                          group: ConsumerGroupMetadata) -> None:
        if self.transaction_state != "in transaction":
            raise IllegalStateError(f"send_offsets_to_transaction(): state {self.transaction_state}")
        await super().send_offsets_to_transaction(offsets, group)

    async def commit_transaction(self) -> None:
        if self.transaction_state != "in transaction":
            raise IllegalStateError(f"commit_transaction(): state {self.transaction_state}")
        self.transaction_state = "committing"
        self.committing.set()
        await self.clock.sleep(120)
        self.transaction_state = "in transaction"
        await super().commit_transaction()

    async def abort_transaction(self) -> None:
        if self.transaction_state == "committing":
            raise IllegalStateError("abort_transaction(): state committing")
        await super().abort_transaction()


async def test_a_revoke_during_the_loops_commit_waits_for_it_and_copies_nothing_twice() -> None:
    """KIP-848 calls on_partitions_revoked from the heartbeat task, so it can come while the runner's loop is
    committing. The revoke's commit point must wait for that commit, not send offsets into (or abort, and rewind
    every partition behind) a transaction that is committing: the rewound partitions would be copied again."""
    clock = VirtualClock()
    consumer = TxnConsumer(clock, {P0: 40, P1: 40})
    producer = SlowCommitProducer(consumer, clock)

    async def handler(rec: ConsumerRecord, ctx: HandlerContext) -> None:
        await ctx.send("out", rec.value, partition=rec.partition)
        await clock.sleep(15)

    runner = make(clock, consumer, producer, handler, commit_interval_ms=50, poll_timeout_ms=20)
    revoked_at: dict[TopicPartition, int] = {}

    async def revoke_during_a_commit() -> None:
        while True:
            await producer.committing.wait()
            producer.committing = anyio.Event()
            if producer.open_offsets.get(P1, 0) >= 5:
                break
        await runner.rebalance_listener.on_partitions_revoked({P1})
        revoked_at.update(consumer.committed)
        consumer.revoke(P1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(revoke_during_a_commit)
        err = await drive(clock, runner, until=lambda: consumer.committed.get(P0) == 40)
        tg.cancel_scope.cancel()
    assert err is None
    assert revoked_at, "P1 was never revoked during a commit"
    out = outputs(producer)
    assert out[0] == expected(40)[0]                   # the partition kept: every input once, in order
    assert out[1] == [b"v%d" % i for i in range(revoked_at[P1])]   # the one that left: up to its offset, once
    assert producer.aborts == 0
