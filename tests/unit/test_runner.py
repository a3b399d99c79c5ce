"""Runner logic against in-memory consumer/producer fakes on a virtual clock.

The virtual clock jumps to the earliest pending sleep whenever every task is blocked (like trio's autojump
clock), so minutes of KIP-572 backoff run in milliseconds and times can be asserted exactly.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import anyio
import pytest

from akresil import errors
from akresil.errors import (CommitFailedError, ConfigError, DeliveryTimeoutError, IllegalStateError,
                            KafkaTimeoutError, RequestTimeoutError, TaskTimeoutError)
from akresil.runner import DEAD_LETTER_HEADER_PREFIX, HandlerContext, Runner
from akresil.types import ConsumerRecord, RecordMetadata, TopicPartition

P0 = TopicPartition("in", 0)
P1 = TopicPartition("in", 1)


# --------------------------------------------------------------------------- virtual time
class VirtualClock:
    """Milliseconds of virtual time; ``sleep`` waits for it; ``autojump`` advances it when all tasks block."""

    def __init__(self) -> None:
        self.now = 0.0
        self.ended_at: float | None = None
        self._sleepers: list[tuple[float, int, list[Any]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, ms: float) -> None:
        if ms <= 0:
            await anyio.sleep(0)
            return
        entry: list[Any] = [anyio.Event(), True]
        heapq.heappush(self._sleepers, (self.now + ms, next(self._seq), entry))
        try:
            await entry[0].wait()
        finally:
            entry[1] = False          # cancelled sleeps must not pull the clock forward

    async def autojump(self) -> None:
        while True:
            await _all_tasks_blocked()
            while self._sleepers and not self._sleepers[0][2][1]:
                heapq.heappop(self._sleepers)
            if not self._sleepers:
                await asyncio.sleep(0.0005)     # blocked on something other than time: let it be
                continue
            when, _, entry = heapq.heappop(self._sleepers)
            self.now = max(self.now, when)
            entry[0].set()


async def _all_tasks_blocked() -> None:
    this = asyncio.current_task()
    while True:
        await asyncio.sleep(0)
        if all(t is this or (t._fut_waiter is not None and not t._fut_waiter.done())  # type: ignore[attr-defined]
               for t in asyncio.all_tasks()):
            return


# --------------------------------------------------------------------------- fakes
def rec(tp: TopicPartition, offset: int, value: bytes | None = None) -> ConsumerRecord:
    return ConsumerRecord(tp.topic, tp.partition, offset, b"k%d" % offset,
                          value if value is not None else b"v%d" % offset, [("h", b"1")], 1000 + offset)


class FakeConsumer:
    """Partition logs, an assignment, positions, pauses and commits; ``getmany`` waits on the virtual clock."""

    def __init__(self, clock: VirtualClock, logs: Mapping[TopicPartition, int]) -> None:
        self.clock = clock
        self.logs: dict[TopicPartition, list[ConsumerRecord]] = {
            tp: [rec(tp, i) for i in range(n)] for tp, n in logs.items()}
        self.assigned: set[TopicPartition] = set(logs)
        self.positions: dict[TopicPartition, int] = {tp: 0 for tp in logs}
        self.paused: set[TopicPartition] = set()
        self.committed: dict[TopicPartition, int] = {}
        self.commits: list[tuple[float, dict[TopicPartition, int]]] = []
        self.pause_log: list[tuple[float, str, tuple[TopicPartition, ...]]] = []
        self.commit_error: Callable[[], BaseException | None] | None = None
        self.on_commit: Callable[[dict[TopicPartition, int]], None] | None = None
        self.polls = 0

    def append(self, tp: TopicPartition, n: int) -> None:
        log = self.logs.setdefault(tp, [])
        base = len(log)
        log.extend([rec(tp, base + i) for i in range(n)])

    def _take(self, max_records: int | None) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        budget = max_records if max_records is not None else 10**9
        for tp in sorted(self.assigned - self.paused):
            pos = self.positions.setdefault(tp, self.committed.get(tp, 0))
            chunk = self.logs.get(tp, [])[pos:pos + budget]
            if chunk:
                out[tp] = chunk
                self.positions[tp] = pos + len(chunk)
                budget -= len(chunk)
        return out

    async def getmany(self, *, timeout_ms: int, max_records: int | None = None) -> dict[Any, Any]:
        self.polls += 1
        out = self._take(max_records)
        if not out:
            await self.clock.sleep(timeout_ms)
            out = self._take(max_records)
        return out

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if self.commit_error is not None:
            err = self.commit_error()
            if err is not None:
                raise err
        offsets = dict(offsets)
        if self.on_commit is not None:
            self.on_commit(offsets)
        self.committed.update(offsets)
        self.commits.append((self.clock.now, offsets))

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)
        self.pause_log.append((self.clock.now, "pause", tps))

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)
        self.pause_log.append((self.clock.now, "resume", tps))

    def revoke(self, tp: TopicPartition) -> None:
        self.assigned.discard(tp)
        self.positions.pop(tp, None)


class FakeDelivery:
    """A delivery future that completes ``latency_ms`` of virtual time after it is first awaited."""

    def __init__(self, producer: FakeProducer, item: tuple[Any, ...], error: BaseException | None) -> None:
        self._producer, self._item, self._error = producer, item, error
        self._task: Any = None
        self.result: Any = None

    async def _complete(self) -> RecordMetadata:
        if self.result is None:
            await self._producer.clock.sleep(self._producer.latency_ms)
            if self._error is not None:
                self.result = self._error
            else:
                self._producer.delivered.append(self._item)
                self.result = RecordMetadata(self._item[0], 0, len(self._producer.delivered) - 1, 0)
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result

    def __await__(self) -> Any:
        return self._complete().__await__()


class FakeProducer:
    def __init__(self, clock: VirtualClock, latency_ms: float = 0) -> None:
        self.clock = clock
        self.latency_ms = latency_ms
        self.delivered: list[tuple[Any, ...]] = []
        self.enqueued = 0
        #: (topic, key, value) -> error to fail that delivery with, or None
        self.fail: Callable[[str, Any, Any], BaseException | None] | None = None

    async def enqueue(self, topic: str, value: Any = None, key: Any = None, *, partition: int | None = None,
                      timestamp_ms: int | None = None, headers: Sequence[Any] | None = None) -> FakeDelivery:
        self.enqueued += 1
        err = self.fail(topic, key, value) if self.fail is not None else None
        return FakeDelivery(self, (topic, key, value, tuple(headers or ())), err)

    def values(self, topic: str) -> list[Any]:
        return [item[2] for item in self.delivered if item[0] == topic]


# --------------------------------------------------------------------------- harness
async def drive(clock: VirtualClock, runner: Runner, until: Callable[[], bool] | None = None,
                max_virtual_ms: float = 3_600_000, tick_ms: float = 20) -> BaseException | None:
    """Run ``runner`` on the virtual clock until ``until()`` holds (checked every ``tick_ms``; then stop it)
    or it fails. Returns run()'s exception (None after a clean stop); ``clock.ended_at`` is when run() returned.
    """
    outcome: list[BaseException | None] = []

    async def run() -> None:
        try:
            await runner.run()
            outcome.append(None)
        except Exception as exc:  # noqa: BLE001 - returned to the test
            outcome.append(exc)
        clock.ended_at = clock.now

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(clock.autojump)
            tg.start_soon(run)
            while not outcome:
                if until is not None and until():
                    await runner.stop()
                    break
                assert clock.now <= max_virtual_ms, "virtual time ran out"
                await clock.sleep(tick_ms)
            tg.cancel_scope.cancel()
    return outcome[0] if outcome else None


def make(clock: VirtualClock, consumer: FakeConsumer, handler: Any, producer: FakeProducer | None = None,
         **kwargs: Any) -> Runner:
    kwargs.setdefault("rng", random.Random(3))
    kwargs.setdefault("commit_interval_ms", 0)
    return Runner(consumer, handler, producer=producer, clock=clock, sleep=clock.sleep, **kwargs)


def forward(out: str = "out") -> Callable[[ConsumerRecord, HandlerContext], Any]:
    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        await ctx.send(out, record.value, record.key)
    return handler


# --------------------------------------------------------------------------- happy path
async def test_records_are_handled_in_partition_order_and_committed_after_delivery() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 20, P1: 20})
    producer = FakeProducer(clock, latency_ms=30)
    seen: dict[TopicPartition, list[int]] = {P0: [], P1: []}

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        seen[ctx.partition].append(record.offset)
        await clock.sleep(5)
        await ctx.send("out", record.value, key=record.key)

    def check_commit(offsets: dict[TopicPartition, int]) -> None:
        # every committed record's output is already acknowledged (at-least-once)
        delivered = set(producer.values("out"))
        for tp, offset in offsets.items():
            for o in range(offset):
                assert b"v%d" % o in delivered

    consumer.on_commit = check_commit
    runner = make(clock, consumer, handler, producer, max_batch_records=7)
    err = await drive(clock, runner, until=lambda: consumer.committed == {P0: 20, P1: 20})
    assert err is None
    assert seen == {P0: list(range(20)), P1: list(range(20))}
    assert producer.delivered.count(("out", b"k3", b"v3", ())) == 2     # one per partition, once each
    assert len(producer.delivered) == 40
    # commits only move forward and were made in several steps (7-record chunks)
    per_tp = [offs[P0] for _, offs in consumer.commits if P0 in offs]
    assert per_tp == sorted(per_tp) and per_tp[-1] == 20 and len(per_tp) >= 3


async def test_batch_mode_hands_over_chunks_in_order() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 25})
    batches: list[list[int]] = []

    async def handler(records: list[ConsumerRecord], ctx: HandlerContext) -> None:
        batches.append([r.offset for r in records])

    runner = make(clock, consumer, handler, mode="batch", max_batch_records=10)
    assert await drive(clock, runner, until=lambda: consumer.committed.get(P0) == 25) is None
    assert [o for b in batches for o in b] == list(range(25))
    assert max(len(b) for b in batches) <= 10


class ProcessingConsumer(FakeConsumer):
    """A consumer with ``process()`` (as ``akresil.Consumer`` has: its tracing scope): records which records
    each scope held and what was sent inside it."""

    def __init__(self, clock: VirtualClock, logs: Mapping[TopicPartition, int], producer: FakeProducer) -> None:
        super().__init__(clock, logs)
        self.producer = producer
        self.scopes: list[tuple[list[int], int, int, str | None]] = []

    @contextmanager
    def process(self, *records: ConsumerRecord) -> Iterator[None]:
        sent_before = self.producer.enqueued
        failure = None
        try:
            yield
        except Exception as exc:
            failure = type(exc).__name__
            raise
        finally:
            self.scopes.append(([r.offset for r in records], sent_before, self.producer.enqueued, failure))


@pytest.mark.parametrize("mode", ["record", "batch"])
async def test_each_handler_call_runs_inside_the_consumers_processing_scope(mode: str) -> None:
    clock = VirtualClock()
    producer = FakeProducer(clock)
    consumer = ProcessingConsumer(clock, {P0: 4}, producer)

    async def handler(unit: Any, ctx: HandlerContext) -> None:
        for record in unit if mode == "batch" else [unit]:
            await ctx.send("out", record.value, record.key)
            if record.offset == 3:
                raise ValueError("bad record")

    runner = make(clock, consumer, handler, producer, mode=mode, max_batch_records=2, on_error="skip")
    assert await drive(clock, runner, until=lambda: consumer.committed.get(P0) == 4) is None
    if mode == "record":     # one scope per call, each holding its record's send; the failure recorded
        assert consumer.scopes == [([0], 0, 1, None), ([1], 1, 2, None), ([2], 2, 3, None), ([3], 3, 4, "ValueError")]
    else:                    # one scope per batch
        assert consumer.scopes == [([0, 1], 0, 2, None), ([2, 3], 2, 4, "ValueError")]


async def test_an_akresil_consumer_without_a_tracer_enters_no_scope_and_one_with_a_tracer_does() -> None:
    from akresil.core.events import Hooks
    clock = VirtualClock()
    producer = FakeProducer(clock)
    consumer = ProcessingConsumer(clock, {P0: 2}, producer)
    consumer.hooks = Hooks()      # type: ignore[attr-defined] # as akresil.Consumer has: no tracer, nothing to open
    runner = make(clock, consumer, forward(), producer)
    assert await drive(clock, runner, until=lambda: consumer.committed.get(P0) == 2) is None
    assert consumer.scopes == []

    class Tracer:                  # any tracer: the runner then opens the consumer's processing scope
        def start_send(self, *a: Any, **k: Any) -> Any: ...
        def received(self, *a: Any) -> None: ...
        def start_process(self, *a: Any) -> Any: ...

    consumer.hooks.add(Tracer())  # type: ignore[attr-defined]
    consumer.append(P0, 1)
    runner = make(clock, consumer, forward(), producer)
    assert await drive(clock, runner, until=lambda: consumer.committed.get(P0) == 3) is None
    assert [offsets for offsets, *_ in consumer.scopes] == [[2]]


# --------------------------------------------------------------------------- KIP-572
async def test_stuck_partition_does_not_block_others_and_is_paused_then_resumed() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 3, P1: 3})
    producer = FakeProducer(clock)
    p1_done_at: list[float] = []

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        if ctx.partition == P0 and clock.now < 20_000:
            raise KafkaTimeoutError("downstream store did not answer")
        if ctx.partition == P1:
            p1_done_at.append(clock.now)
        await ctx.send("out", record.value)

    async def feed() -> None:       # P1 keeps receiving records while P0 is stuck
        for _ in range(10):
            await clock.sleep(1_000)
            consumer.append(P1, 2)

    runner = make(clock, consumer, handler, producer, task_timeout_ms=60_000)
    async with anyio.create_task_group() as tg:
        tg.start_soon(feed)
        err = await drive(clock, runner, until=lambda: consumer.committed == {P0: 3, P1: 23})
    assert err is None
    # P1's records were all handled while P0 was failing (before 20 s)
    assert len(p1_done_at) == 23 and max(p1_done_at) < 11_000
    assert consumer.committed[P1] == 23
    commits_p1_early = [offs[P1] for t, offs in consumer.commits if t < 20_000 and P1 in offs]
    assert commits_p1_early and commits_p1_early[-1] == 23
    # P0 was paused once it got stuck and resumed after it made progress
    pauses = [(t, what) for t, what, tps in consumer.pause_log if P0 in tps]
    assert pauses[0][1] == "pause" and pauses[0][0] < 1_000
    assert pauses[-1][1] == "resume" and pauses[-1][0] >= 20_000
    assert all(P1 not in tps for _, _, tps in consumer.pause_log)


@pytest.mark.parametrize("attempt_ms", [0, 300])
async def test_task_timeout_fires_on_time_with_one_final_attempt(attempt_ms: int) -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 1, P1: 1})
    attempts: list[float] = []

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        if ctx.partition == P1:
            return
        attempts.append(clock.now)
        await clock.sleep(attempt_ms)
        raise RequestTimeoutError("no response within request_timeout_ms")

    runner = make(clock, consumer, handler, task_timeout_ms=10_000)
    err = await drive(clock, runner)
    assert isinstance(err, TaskTimeoutError)
    assert isinstance(err.__cause__, RequestTimeoutError)
    assert "in[0]" in str(err)
    first_timeout = attempts[0] + attempt_ms
    deadline = first_timeout + 10_000
    # the final attempt is the one running at the deadline; the error comes when it ends: not before the
    # deadline, at most one attempt's length after it
    assert attempts[-1] <= deadline <= attempts[-1] + attempt_ms
    assert all(a + attempt_ms < deadline for a in attempts[:-1])
    assert clock.ended_at is not None and deadline <= clock.ended_at <= deadline + attempt_ms
    assert clock.ended_at == attempts[-1] + attempt_ms
    # skipped, not spinning: KIP-580 backoff 100 ms doubling to 1 s ≈ 13 attempts in 10 s, not thousands
    assert 10 <= len(attempts) <= 16
    gaps = [b - a - attempt_ms for a, b in zip(attempts, attempts[1:-1])]
    assert 80 <= gaps[0] <= 120 and 160 <= gaps[1] <= 240 and all(g <= 1_200 for g in gaps)
    # the healthy partition was committed before the runner stopped on the error
    assert consumer.committed.get(P1) == 1


async def test_task_timeout_zero_fails_on_first_timeout() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 5})
    calls: list[float] = []

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        calls.append(clock.now)
        if record.offset == 2:
            await clock.sleep(50)
            raise TimeoutError("anyio.fail_after in the handler")

    runner = make(clock, consumer, handler, task_timeout_ms=0)
    err = await drive(clock, runner)
    assert isinstance(err, TaskTimeoutError) and isinstance(err.__cause__, TimeoutError)
    assert len(calls) == 3                      # offsets 0, 1, then 2 once: no retry
    assert clock.ended_at == pytest.approx(calls[-1] + 50, abs=1)
    assert consumer.committed == {P0: 2}        # progress before the failure is kept


async def test_progress_resets_the_task_timeout() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 3})
    # each record times out for 8 s before it succeeds: 24 s stuck in total, never 10 s in a row
    fail_until: dict[int, float] = {}

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        start = fail_until.setdefault(record.offset, clock.now + 8_000)
        if clock.now < start:
            raise DeliveryTimeoutError("expired")

    runner = make(clock, consumer, handler, task_timeout_ms=10_000)
    err = await drive(clock, runner, until=lambda: consumer.committed.get(P0) == 3)
    assert err is None
    assert clock.ended_at is not None and clock.ended_at >= 24_000


async def test_delivery_timeout_rehandles_from_the_first_unacknowledged_record() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 6})
    producer = FakeProducer(clock, latency_ms=10)
    handled: list[int] = []
    failed = set()

    def fail(topic: str, key: Any, value: Any) -> BaseException | None:
        if value == b"v3" and value not in failed:
            failed.add(value)
            return DeliveryTimeoutError("batch expired")
        return None

    producer.fail = fail

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        handled.append(record.offset)
        await ctx.send("out", record.value)

    runner = make(clock, consumer, handler, producer)
    assert await drive(clock, runner, until=lambda: consumer.committed.get(P0) == 6) is None
    # 0-2 acknowledged → kept; 3 timed out → 3.. handled again (at-least-once: 4, 5 twice)
    assert handled == [0, 1, 2, 3, 4, 5, 3, 4, 5]
    assert producer.values("out").count(b"v3") == 1
    assert [offs[P0] for _, offs in consumer.commits if P0 in offs][0] == 3


async def test_commit_timeouts_are_retried_and_fail_after_task_timeout() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 2})
    consumer.commit_error = lambda: RequestTimeoutError("OffsetCommit timed out")

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        pass

    runner = make(clock, consumer, handler, task_timeout_ms=5_000)
    err = await drive(clock, runner)
    assert isinstance(err, TaskTimeoutError) and "commit" in str(err)
    assert isinstance(err.__cause__, RequestTimeoutError)
    assert clock.ended_at is not None and 5_000 <= clock.ended_at <= 5_300


async def test_commit_timeout_then_success_commits_later() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 2})
    consumer.commit_error = lambda: RequestTimeoutError("slow") if clock.now < 2_000 else None

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        pass

    runner = make(clock, consumer, handler, task_timeout_ms=5_000)
    assert await drive(clock, runner, until=lambda: consumer.committed.get(P0) == 2) is None
    assert consumer.commits[0][0] >= 2_000


async def test_commit_rejected_by_rebalance_is_not_fatal() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 2})
    rejected = []
    consumer.commit_error = lambda: (rejected.append(1) or CommitFailedError("rebalanced")) if not rejected else None

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        pass

    runner = make(clock, consumer, handler)
    assert await drive(clock, runner, until=lambda: consumer.committed.get(P0) == 2) is None
    assert rejected == [1]


# --------------------------------------------------------------------------- other handler errors
async def test_handler_error_is_raised_after_committing_finished_records() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 5, P1: 1})

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        if ctx.partition == P0 and record.offset == 2:
            raise ValueError("bad payload")

    runner = make(clock, consumer, handler, commit_interval_ms=60_000)
    err = await drive(clock, runner)
    assert isinstance(err, ValueError) and str(err) == "bad payload"
    assert consumer.committed[P0] == 2


async def test_dead_letter_policy_sends_failed_records_with_headers_and_moves_on() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 4})
    producer = FakeProducer(clock)

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        await ctx.send("out", record.value)
        if record.offset == 1:
            raise ValueError("cannot parse")

    runner = make(clock, consumer, handler, producer, on_error="dead_letter", dead_letter_topic="dlt")
    assert await drive(clock, runner, until=lambda: consumer.committed.get(P0) == 4) is None
    dlt = [item for item in producer.delivered if item[0] == "dlt"]
    assert len(dlt) == 1
    topic, key, value, headers = dlt[0]
    assert (key, value) == (b"k1", b"v1")
    h = dict(headers)
    assert h["h"] == b"1"                              # original headers kept
    assert h[DEAD_LETTER_HEADER_PREFIX + "offset"] == b"1"
    assert h[DEAD_LETTER_HEADER_PREFIX + "partition"] == b"0"
    assert h[DEAD_LETTER_HEADER_PREFIX + "exception"] == b"builtins.ValueError"
    assert h[DEAD_LETTER_HEADER_PREFIX + "message"] == b"cannot parse"


async def test_skip_policy_moves_on() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 3})
    seen: list[int] = []

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        seen.append(record.offset)
        if record.offset == 0:
            raise KeyError("x")

    runner = make(clock, consumer, handler, on_error="skip")
    assert await drive(clock, runner, until=lambda: consumer.committed.get(P0) == 3) is None
    assert seen == [0, 1, 2]


async def test_sync_handler_is_a_type_error_even_with_skip_policy() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 1})
    runner = make(clock, consumer, lambda record, ctx: None, on_error="skip")
    err = await drive(clock, runner)
    assert isinstance(err, TypeError) and "async" in str(err)


async def test_send_without_producer_is_an_illegal_state() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 1})
    err = await drive(clock, make(clock, consumer, forward()))
    assert isinstance(err, IllegalStateError) and "producer" in str(err)


# --------------------------------------------------------------------------- flow control and rebalances
async def test_full_partition_buffer_pauses_fetching_until_drained() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 50})

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        await clock.sleep(10)

    runner = make(clock, consumer, handler, max_buffered_records=10, max_poll_records=12, max_batch_records=5)
    queued: list[int] = []

    def sample() -> bool:
        status = runner.partitions().get(P0)
        if status is not None:
            queued.append(status.queued)
        return consumer.committed.get(P0) == 50

    assert await drive(clock, runner, until=sample) is None
    assert max(queued) <= 10 + 12
    actions = [what for _, what, tps in consumer.pause_log]
    assert "pause" in actions and actions[-1] == "resume"


async def test_partition_revoked_without_listener_is_dropped_uncommitted() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 3, P1: 3})
    started = anyio.Event()

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        if ctx.partition == P1:
            started.set()
            await clock.sleep(10_000)      # still running when the partition goes away

    runner = make(clock, consumer, handler)

    async def revoke() -> None:
        await started.wait()
        consumer.revoke(P1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(revoke)
        err = await drive(clock, runner, until=lambda: P1 not in runner.partitions()
                          and consumer.committed.get(P0) == 3)
    assert err is None
    assert P1 not in consumer.committed


async def test_rebalance_listener_finishes_in_flight_work_and_commits_before_revoke() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 3, P1: 3})
    started = anyio.Event()
    finished: list[int] = []

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        if ctx.partition == P1:
            started.set()
            await clock.sleep(500)
            finished.append(record.offset)

    runner = make(clock, consumer, handler, commit_interval_ms=60_000)

    async def revoke() -> None:
        await started.wait()
        await runner.rebalance_listener.on_partitions_revoked({P1})
        consumer.revoke(P1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(revoke)
        err = await drive(clock, runner, until=lambda: P1 not in runner.partitions()
                          and consumer.committed.get(P0) == 3)
    assert err is None
    assert finished == [0]                 # the in-flight record finished, nothing new started
    assert consumer.committed[P1] == 1


# --------------------------------------------------------------------------- lifecycle
async def test_stop_finishes_in_flight_handlers_commits_and_leaves_no_task() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 10, P1: 10})
    producer = FakeProducer(clock, latency_ms=20)
    in_flight = anyio.Event()
    finished: list[tuple[int, int]] = []

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        in_flight.set()
        await clock.sleep(1_000)
        await ctx.send("out", record.value)
        finished.append((record.partition, record.offset))

    runner = make(clock, consumer, handler, producer, commit_interval_ms=60_000)
    before = len(asyncio.all_tasks())
    assert await drive(clock, runner, until=in_flight.is_set) is None
    # both partitions were in their first handler call when stop() came: each finished, nothing else started
    assert sorted(finished) == [(0, 0), (1, 0)]
    assert consumer.committed == {P0: 1, P1: 1}
    assert len(producer.delivered) == 2
    assert runner.partitions() == {}
    assert len(asyncio.all_tasks()) <= before


async def test_async_with_raises_the_fatal_error_and_wait_reports_it() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 1})

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        raise RuntimeError("boom")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(clock.autojump)
            with pytest.raises(RuntimeError, match="boom"):
                async with make(clock, consumer, handler) as runner:
                    with pytest.raises(RuntimeError, match="boom"):
                        await runner.wait()
            tg.cancel_scope.cancel()


async def test_run_twice_is_an_illegal_state() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 1})
    runner = make(clock, consumer, forward())
    await runner.stop()
    assert await drive(clock, runner) is None
    with pytest.raises(IllegalStateError):
        await runner.run()


def test_runs_under_trio() -> None:
    async def main() -> dict[TopicPartition, int]:
        consumer = _RealTimeConsumer({P0: 5})
        seen: list[int] = []

        async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
            seen.append(record.offset)

        async with Runner(consumer, handler, poll_timeout_ms=5, commit_interval_ms=0):
            with anyio.fail_after(5):
                while consumer.committed.get(P0) != 5:
                    await anyio.sleep(0.005)
        assert seen == list(range(5))
        return consumer.committed

    assert anyio.run(main, backend="trio") == {P0: 5}


class _RealTimeConsumer(FakeConsumer):
    """The fake on real time (anyio.sleep), for the trio run."""

    def __init__(self, logs: Mapping[TopicPartition, int]) -> None:
        super().__init__(VirtualClock(), logs)

    async def getmany(self, *, timeout_ms: int, max_records: int | None = None) -> dict[Any, Any]:
        out = self._take(max_records)
        if not out:
            await anyio.sleep(timeout_ms / 1000)
        return out


# --------------------------------------------------------------------------- configuration errors
@pytest.mark.parametrize("kwargs, key", [
    ({"mode": "stream"}, "mode"),
    ({"on_error": "ignore"}, "on_error"),
    ({"on_error": "dead_letter"}, "dead_letter_topic"),
    ({"dead_letter_topic": "dlt"}, "dead_letter_topic"),
    ({"task_timeout_ms": -1}, "task_timeout_ms"),
    ({"task_timeout_ms": "5m"}, "task_timeout_ms"),
    ({"max_batch_records": 0}, "max_batch_records"),
    ({"poll_timeout_ms": 0}, "poll_timeout_ms"),
    ({"retry_backoff_ms": -5}, "retry_backoff_ms"),
    ({"timeout_errors": ()}, "timeout_errors"),
])
def test_bad_configuration_names_the_key(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        Runner(FakeConsumer(VirtualClock(), {}), forward(), **kwargs)


def test_dead_letter_needs_a_producer() -> None:
    with pytest.raises(ConfigError, match="producer"):
        Runner(FakeConsumer(VirtualClock(), {}), forward(), on_error="dead_letter", dead_letter_topic="dlt")


def test_auto_committing_consumer_is_rejected() -> None:
    consumer = FakeConsumer(VirtualClock(), {})
    consumer.config = type("Cfg", (), {"enable_auto_commit": True})()  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="enable_auto_commit"):
        Runner(consumer, forward())


def test_consumer_and_handler_shape_is_checked() -> None:
    with pytest.raises(TypeError, match="getmany"):
        Runner(object(), forward())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="handler"):
        Runner(FakeConsumer(VirtualClock(), {}), "not callable")  # type: ignore[arg-type]


async def test_final_commit_error_is_raised_plainly_and_pauses_are_undone() -> None:
    clock = VirtualClock()
    consumer = FakeConsumer(clock, {P0: 2, P1: 1})
    consumer.commit_error = lambda: ValueError("bad offsets")

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        if ctx.partition == P1:
            raise TimeoutError("stuck")            # keeps P1 paused until the stop

    runner = make(clock, consumer, handler, commit_interval_ms=10**9)
    err = await drive(clock, runner, until=lambda: P1 in consumer.paused
                      and runner.partitions()[P0].processed_offset == 2)
    assert type(err) is ValueError and str(err) == "bad offsets"      # not wrapped in an ExceptionGroup
    assert consumer.paused == set()
    assert runner.partitions() == {}


def test_runner_can_be_built_outside_an_event_loop() -> None:
    runner = Runner(FakeConsumer(VirtualClock(), {P0: 1}), forward(), mode="batch", task_timeout_ms=0)
    assert runner.partitions() == {} and runner.rebalance_listener is not None


# --------------------------------------------------------------------------- a record the deserializer refuses
class PoisonConsumer(FakeConsumer):
    """The consumer's side of a refused record: the poll hands out the records before ``poison``, then raises
    ``RecordDeserializationError`` for it until a seek moves past it (as ``akresil.Consumer`` does)."""

    def __init__(self, clock: VirtualClock, logs: Mapping[TopicPartition, int], poison: int) -> None:
        super().__init__(clock, logs)
        self.poison = poison
        self.seeks: list[tuple[TopicPartition, int]] = []

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))
        self.positions[tp] = offset

    def _take(self, max_records: int | None) -> dict[TopicPartition, list[ConsumerRecord]]:
        pos = self.positions.get(P0, 0)
        if pos == self.poison:
            raw = rec(P0, pos, b"\xff")
            raise errors.RecordDeserializationError(f"in-{pos}: refused", topic_partition=P0, offset=pos,
                                                    raw=raw)
        out = super()._take(max_records)
        if P0 in out and pos < self.poison < self.positions[P0]:
            out[P0] = [r for r in out[P0] if r.offset < self.poison]
            self.positions[P0] = self.poison
        return out


@pytest.mark.parametrize("on_error", ["skip", "dead_letter"])
async def test_a_refused_record_is_skipped_or_dead_lettered_as_fetched_and_the_partition_goes_on(
        on_error: str) -> None:
    # it stopped the runner whatever on_error said
    clock = VirtualClock()
    consumer = PoisonConsumer(clock, {P0: 6}, poison=3)
    producer = FakeProducer(clock, latency_ms=10)
    seen: list[int] = []

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        seen.append(record.offset)

    kwargs: dict[str, Any] = {"dead_letter_topic": "dlt"} if on_error == "dead_letter" else {}
    runner = make(clock, consumer, handler, producer, on_error=on_error, **kwargs)
    assert await drive(clock, runner, until=lambda: consumer.committed.get(P0) == 6) is None
    assert seen == [0, 1, 2, 4, 5] and consumer.seeks == [(P0, 4)]
    dead = [item for item in producer.delivered if item[0] == "dlt"]
    if on_error == "skip":
        assert dead == []
    else:
        [(_, key, value, headers)] = dead
        assert (key, value) == (b"k3", b"\xff")          # the bytes as fetched
        assert (DEAD_LETTER_HEADER_PREFIX + "offset", b"3") in headers
        assert (DEAD_LETTER_HEADER_PREFIX + "exception", b"akresil.errors.RecordDeserializationError") in headers


async def test_a_refused_record_stops_the_runner_when_on_error_is_raise() -> None:
    clock = VirtualClock()
    consumer = PoisonConsumer(clock, {P0: 6}, poison=3)

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        pass

    err = await drive(clock, make(clock, consumer, handler))
    assert isinstance(err, errors.RecordDeserializationError) and consumer.seeks == []
