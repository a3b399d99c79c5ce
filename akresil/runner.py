"""The KIP-572 processing runner: consume → handle → produce, one task per assigned partition.

``Runner`` polls a consumer in one loop and hands each partition's records to that partition's own task,
which runs the user's async handler per record or per batch.  Records the handler sends through
``ctx.send`` go out through a producer, and a partition's offset is committed only after its handler
returned *and* everything it sent was acknowledged: at-least-once delivery.  Order within a partition is
kept because a partition's records are handled by one task, one unit after the other.

Client timeouts follow KIP-572 (timing in ``core.task_timer``): a timeout inside a task skips that task until
its KIP-580 backoff elapses while the other partitions keep going; the stuck partition's fetches are paused
so its buffer does not grow, and resumed after progress.  ``task_timeout_ms`` starts at the first timeout and
resets on progress; the attempt running when it passes is the final one, after which ``run()`` raises
``TaskTimeoutError`` with the last timeout as its cause.  Other handler errors follow ``on_error``.

Clean shutdown (``stop()`` or leaving ``async with``) lets in-flight handlers finish, waits for their
produced records, commits, and leaves no task behind.  The runner does not open or close the consumer and
producer it is given.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections import deque
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from itertools import islice
from typing import (AbstractSet, Any, Awaitable, Callable, Iterable, Literal, Mapping, NamedTuple, Protocol,
                    Sequence, cast)

import anyio

from .core.backoff import ExponentialBackoff, RandomSource
from .core.events import Hooks
from .core.task_timer import TaskTimer
from .errors import (BufferFullError, CommitFailedError, ConfigError, DeliveryTimeoutError, IllegalGenerationError,
                     IllegalStateError, KafkaError, KafkaTimeoutError, RebalanceInProgressError,
                     RecordDeserializationError, RequestTimeoutError, TaskTimeoutError, UnknownMemberIdError)
from .net.tasks import TaskOwner
from .runner_txn import ExactlyOnce, GroupConsumer, TransactionalProducer, check_exactly_once, pending_offsets
from .types import ConsumerRecord, Header, TopicPartition

__all__ = ["Runner", "HandlerContext", "PartitionStatus", "RunnerConsumer", "RunnerProducer", "RunnerRebalanceListener",
           "DEFAULT_TIMEOUT_ERRORS", "DEAD_LETTER_HEADER_PREFIX"]

log = logging.getLogger(__name__)

#: Errors that mean "a client operation ran out of time" and trigger KIP-572 skip-and-retry.  BufferFullError is
#: ``max_block_ms`` elapsing (Java's BufferExhaustedException is a TimeoutException too).
DEFAULT_TIMEOUT_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError, KafkaTimeoutError, RequestTimeoutError, DeliveryTimeoutError, BufferFullError)

#: Commit errors that mean the group moved on (rebalance): not fatal, the records are redelivered.
_GROUP_MOVED_ON: tuple[type[BaseException], ...] = (
    CommitFailedError, IllegalGenerationError, UnknownMemberIdError, RebalanceInProgressError)

#: Headers added to a dead-lettered record say where it came from and why it failed.
DEAD_LETTER_HEADER_PREFIX = "akresil.dlt."


# --------------------------------------------------------------------------- what the runner needs
class RunnerConsumer(Protocol):
    """The consumer surface the runner uses (``akresil.Consumer`` satisfies it).

    ``pause``/``resume``/``assignment`` may be plain or async methods.  The consumer must not auto-commit:
    it would commit fetched positions, ahead of what the handlers finished.
    """

    async def getmany(self, *, timeout_ms: int,
                      max_records: int | None = None) -> Mapping[TopicPartition, Sequence[ConsumerRecord]]: ...

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> Any: ...

    def assignment(self) -> Any: ...

    def pause(self, *partitions: TopicPartition) -> Any: ...

    def resume(self, *partitions: TopicPartition) -> Any: ...


class RunnerProducer(Protocol):
    """The producer surface the runner uses: ``akresil.Producer.enqueue`` (returns once buffered)."""

    async def enqueue(self, topic: str, value: Any = None, key: Any = None, *, partition: int | None = None,
                      timestamp_ms: int | None = None,
                      headers: Sequence[Header] | None = None) -> Awaitable[Any]: ...


Handler = Callable[[Any, "HandlerContext"], Awaitable[Any]]
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[Any]]


class PartitionStatus(NamedTuple):
    """A snapshot of one partition task, from ``Runner.partitions()``."""

    queued: int
    #: next offset to commit (last finished record + 1); None before the first record finished
    processed_offset: int | None
    committed_offset: int | None
    #: True from a task's first timeout until its next progress
    failing: bool
    timeouts: int
    stuck_for_ms: float
    paused: bool
    attempts: int


class HandlerContext:
    """Passed to the handler with its record(s): where they come from and a way to produce results.

    Records sent with ``send`` are part of the unit's work: the offset is committed only once they are
    acknowledged, and if one of them times out the unit is handled again (at-least-once, so downstream may
    see duplicates).
    """

    __slots__ = ("partition", "attempt", "_producer", "_futures", "_open")

    def __init__(self, partition: TopicPartition, attempt: int, producer: RunnerProducer | None) -> None:
        self.partition = partition
        #: 1 for the first try of these records, 2 for the first retry after a timeout, ...
        self.attempt = attempt
        self._producer = producer
        self._futures: list[Awaitable[Any]] = []
        self._open = True

    async def send(self, topic: str, value: Any = None, key: Any = None, *, partition: int | None = None,
                   timestamp_ms: int | None = None, headers: Sequence[Header] | None = None) -> Awaitable[Any]:
        """Buffer a result record; returns its delivery future (the runner awaits it before committing)."""
        if self._producer is None:
            raise IllegalStateError("ctx.send needs a producer: pass Runner(..., producer=...)")
        if not self._open:
            raise IllegalStateError("ctx.send called after the handler returned; await it inside the handler")
        fut = await self._producer.enqueue(topic, value, key, partition=partition, timestamp_ms=timestamp_ms,
                                           headers=headers)
        self._futures.append(fut)
        return fut

    def _close(self) -> list[Awaitable[Any]]:
        self._open = False
        return self._futures


# --------------------------------------------------------------------------- one task per partition
@dataclass(frozen=True, slots=True)
class _TaskEnv:
    """What a partition task is given by its runner, and all it uses of it: the settings, the clock, the handler
    call, the failure policy and the exactly-once barrier (one joint, instead of tasks reading the runner's
    private members)."""

    mode: str
    max_batch_records: int
    task_timeout_ms: int
    #: on_error is "raise": a handler error stops the runner (else it is dead-lettered or skipped)
    raise_errors: bool
    backoff: ExponentialBackoff
    producer: RunnerProducer | None
    eos: ExactlyOnce | None
    clock: Clock
    sleep: Sleep
    is_timeout: Callable[[BaseException], bool]
    call_handler: Callable[[list[ConsumerRecord], HandlerContext], Awaitable[None]]
    #: dead-letter or skip a failed unit; returns the deliveries to await
    handle_failure: Callable[[list[ConsumerRecord], BaseException], Awaitable[list[Awaitable[Any]]]]
    #: exactly-once: a task failed inside the transaction; the runner aborts and rewinds now
    abort_now: Callable[[], None]
    #: a task's fatal error: the runner stops and raises it
    fail: Callable[[BaseException], None]


class _PartitionTask:
    """Buffered records, progress and KIP-572 timer of one assigned partition, and the task working on them."""

    def __init__(self, env: _TaskEnv, tp: TopicPartition) -> None:
        self.env = env
        self.tp = tp
        self.queue: deque[ConsumerRecord] = deque()
        self.timer = TaskTimer(env.task_timeout_ms, env.backoff)
        #: offset after the last record queued: guards against records delivered twice after a rewind
        self.next_offset: int | None = None
        self.processed: int | None = None
        self.committed: int | None = None
        #: exactly-once: the offset of the first record handled in the open transaction (an abort rewinds here)
        self.rewind_to: int | None = None
        self.attempts = 0
        self.stopping = False
        self.scope = anyio.CancelScope()          # cancelled for a hard stop (partition lost, fatal error)
        self._idle_scope: anyio.CancelScope | None = None   # cancelled to end a wait on a graceful stop
        self._wake = anyio.Event()
        self.done = anyio.Event()

    # ---- called by the runner loop
    def push(self, records: Iterable[ConsumerRecord]) -> int:
        added = 0
        for rec in records:
            if self.next_offset is not None and rec.offset < self.next_offset:
                continue
            self.queue.append(rec)
            self.next_offset = rec.offset + 1
            added += 1
        if added:
            self._wake.set()
        return added

    def rewind(self, offset: int) -> None:
        """Exactly-once abort: drop buffered records; the consumer was sought to ``offset``."""
        self.queue.clear()
        self.next_offset = None
        self.processed = self.committed
        self.rewind_to = None
        self.timer.on_progress()

    def stop(self) -> None:
        """Graceful: finish the handler running now (and its deliveries), start nothing new."""
        self.stopping = True
        if self._idle_scope is not None:
            self._idle_scope.cancel()
        self._wake.set()

    def cancel(self) -> None:
        """Hard: cancel whatever runs now."""
        self.stopping = True
        self.scope.cancel()

    def status(self, now: float, paused: bool) -> PartitionStatus:
        return PartitionStatus(len(self.queue), self.processed, self.committed, self.timer.failing,
                               self.timer.failures, self.timer.stuck_for_ms(now), paused, self.attempts)

    # ---- the task
    async def run(self) -> None:
        try:
            with self.scope:
                await self._loop()
        except Exception as exc:  # noqa: BLE001 - handed to run()'s caller
            self.env.fail(exc)
        finally:
            self.done.set()

    async def _loop(self) -> None:
        env = self.env
        while not self.stopping:
            if not self.queue:
                self._wake = anyio.Event()
                await self._idle(self._wake.wait)
                continue
            now = env.clock()
            if not self.timer.ready(now):
                await self._idle(env.sleep, self.timer.wait_ms(now))
                continue
            eos = env.eos
            if eos is None:
                await self._attempt()
                continue
            await eos.enter()
            try:
                if self.queue and not self.stopping:
                    if self.rewind_to is None:
                        self.rewind_to = self.queue[0].offset
                    await self._attempt()
            finally:
                eos.exit()

    async def _idle(self, wait: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Wait for records or a backoff; a graceful stop ends the wait."""
        if self.stopping:
            return
        with anyio.CancelScope() as scope:
            self._idle_scope = scope
            try:
                await wait(*args)
            finally:
                self._idle_scope = None

    async def _attempt(self) -> None:
        env = self.env
        chunk = list(islice(self.queue, env.max_batch_records))
        units = [[rec] for rec in chunk] if env.mode == "record" else [chunk]
        self.attempts += 1
        completed, error = await self._run_units(units)
        if completed:
            for _ in range(completed):
                self.queue.popleft()
            self.processed = chunk[completed - 1].offset + 1
            self.timer.on_progress()
        if error is None:
            return
        eos = env.eos
        if eos is not None:
            # the transaction holds this task's partial outputs: abort it and rewind (at the next commit point)
            transaction_failed = eos.transaction_failed()
            eos.request_abort()
            env.abort_now()
            if transaction_failed and not env.is_timeout(error):
                # the handler's send failed because the transaction had (not because of the handler): the abort
                # and rewind are the recovery, and the records are handled again in the next transaction
                log.info("%s[%d]: the transaction failed under the handler (%r); aborting and rewinding",
                         self.tp.topic, self.tp.partition, error)
                return
        if not env.is_timeout(error):
            raise error
        now = env.clock()
        first = not self.timer.failing
        retry_at = self.timer.on_timeout(now)
        if retry_at is None:
            raise TaskTimeoutError(
                f"{self.tp.topic}[{self.tp.partition}]: no progress for {self.timer.stuck_for_ms(now):.0f} ms "
                f"after {self.timer.failures} timed-out attempt(s) (task_timeout_ms={env.task_timeout_ms}); "
                f"last error: {error!r}") from error
        log.log(logging.INFO if first else logging.DEBUG,
                "%s[%d]: timed out at offset %d (%r); retry in %.0f ms, failing for %.0f ms of %d",
                self.tp.topic, self.tp.partition, chunk[completed].offset if completed < len(chunk) else -1,
                error, retry_at - now, self.timer.stuck_for_ms(now), env.task_timeout_ms)

    async def _run_units(self, units: list[list[ConsumerRecord]]) -> tuple[int, BaseException | None]:
        """Handle ``units`` in order, then settle their deliveries.

        Returns how many records finished (a prefix of the chunk) and the error that stopped the rest.
        """
        env = self.env
        handled: list[tuple[list[ConsumerRecord], list[Awaitable[Any]]]] = []
        error: BaseException | None = None
        eos = env.eos
        for i, unit in enumerate(units):
            if i and (self.stopping or (eos is not None and eos.closing)):
                break           # stopping, or an exactly-once commit point waits: finish at a unit boundary
            ctx = HandlerContext(self.tp, self.timer.failures + 1, env.producer)
            try:
                await env.call_handler(unit, ctx)
            except _HandlerNotAsync:
                raise
            except Exception as exc:  # noqa: BLE001 - classified below
                ctx._close()
                if env.is_timeout(exc) or env.raise_errors:
                    error = exc
                    break
                try:
                    handled.append((unit, await env.handle_failure(unit, exc)))
                except Exception as dlq_exc:  # noqa: BLE001 - e.g. a timeout while dead-lettering
                    error = dlq_exc
                    break
                continue
            futures = ctx._close()
            # exactly-once: deliveries settle at the commit (commit_transaction flushes; a failure aborts)
            handled.append((unit, [] if eos is not None else futures))
        completed = 0
        for unit, futures in handled:
            failure = await _first_failure(futures)
            if failure is not None and not env.is_timeout(failure) and not env.raise_errors:
                try:
                    failure = await _first_failure(await env.handle_failure(unit, failure))
                except Exception as dlq_exc:  # noqa: BLE001
                    failure = dlq_exc
            if failure is not None:
                return completed, failure
            completed += len(unit)
        return completed, error


class _HandlerNotAsync(TypeError):
    """The handler returned a non-awaitable: a programming error, never dead-lettered or skipped."""


async def _first_failure(futures: Sequence[Awaitable[Any]]) -> BaseException | None:
    """Await every future; return the first one's error (later ones are awaited too, so none is left pending)."""
    first: BaseException | None = None
    for fut in futures:
        try:
            await fut
        except Exception as exc:  # noqa: BLE001
            if first is None:
                first = exc
    return first


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


# --------------------------------------------------------------------------- the runner
class Runner:
    """Run ``handler`` over a consumer's records, one task per assigned partition (KIP-572 failure handling).

    ``handler(record, ctx)`` (``mode="record"``) or ``handler(records, ctx)`` (``mode="batch"``, up to
    ``max_batch_records`` in offset order) is an async function; ``ctx.send(...)`` produces results.

    ``on_error`` decides what a handler error other than a timeout does: ``"raise"`` (default) stops the runner
    and ``run()`` raises it; ``"dead_letter"`` sends the unit's records to ``dead_letter_topic`` with
    ``akresil.dlt.*`` headers and moves on; ``"skip"`` logs and moves on. A record the consumer's deserializer
    refuses (``RecordDeserializationError``) takes the same way, with its bytes as fetched (the consumer needs
    ``seek`` for that).

    ``clock`` (ms) and ``sleep`` (ms) may be injected for tests; ``rng`` fixes the backoff jitter.
    """

    def __init__(self, consumer: RunnerConsumer, handler: Handler, *, producer: RunnerProducer | None = None,
                 mode: Literal["record", "batch"] = "record", task_timeout_ms: int = 300_000,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1_000,
                 on_error: Literal["raise", "dead_letter", "skip"] = "raise",
                 dead_letter_topic: str | None = None, max_batch_records: int = 500,
                 max_buffered_records: int = 2_000, max_poll_records: int | None = None,
                 poll_timeout_ms: int = 100, commit_interval_ms: int = 5_000,
                 shutdown_timeout_ms: int | None = 30_000,
                 rebalance_listener: RunnerRebalanceListener | None = None,
                 processing_guarantee: Literal["at_least_once", "exactly_once"] = "at_least_once",
                 timeout_errors: tuple[type[BaseException], ...] = DEFAULT_TIMEOUT_ERRORS,
                 clock: Clock | None = None, sleep: Sleep | None = None, rng: RandomSource | None = None) -> None:
        if not callable(handler):
            raise TypeError(f"handler must be an async callable, got {type(handler).__name__}")
        for name in ("getmany", "commit", "assignment", "pause", "resume"):
            if not callable(getattr(consumer, name, None)):
                raise TypeError(f"consumer: needs a {name}() method ({type(consumer).__name__} has none)")
        if producer is not None and not callable(getattr(producer, "enqueue", None)):
            raise TypeError(f"producer: needs an enqueue() method ({type(producer).__name__} has none)")
        if mode not in ("record", "batch"):
            raise ConfigError(f"mode: must be 'record' or 'batch', got {mode!r}")
        if on_error not in ("raise", "dead_letter", "skip"):
            raise ConfigError(f"on_error: must be 'raise', 'dead_letter' or 'skip', got {on_error!r}")
        if on_error == "dead_letter":
            if not dead_letter_topic or not isinstance(dead_letter_topic, str):
                raise ConfigError("dead_letter_topic: required (a topic name) when on_error='dead_letter'")
            if producer is None:
                raise ConfigError("producer: required when on_error='dead_letter'")
        elif dead_letter_topic is not None:
            raise ConfigError(f"dead_letter_topic: only used with on_error='dead_letter' (on_error={on_error!r})")
        _check_int("task_timeout_ms", task_timeout_ms, 0)
        _check_int("max_batch_records", max_batch_records, 1)
        _check_int("max_buffered_records", max_buffered_records, 1)
        _check_int("poll_timeout_ms", poll_timeout_ms, 1)
        _check_int("commit_interval_ms", commit_interval_ms, 0)
        if max_poll_records is not None:
            _check_int("max_poll_records", max_poll_records, 1)
        if shutdown_timeout_ms is not None:
            _check_int("shutdown_timeout_ms", shutdown_timeout_ms, 0)
        if (not isinstance(timeout_errors, tuple) or not timeout_errors
                or not all(isinstance(t, type) and issubclass(t, BaseException) for t in timeout_errors)):
            raise ConfigError(f"timeout_errors: must be a non-empty tuple of exception classes, got {timeout_errors!r}")
        config = getattr(consumer, "config", None)
        if getattr(config, "enable_auto_commit", False) is True:
            raise ConfigError("enable_auto_commit: must be False on the runner's consumer; auto-commit would commit "
                              "records before their handler finished (the runner commits itself)")
        if processing_guarantee not in ("at_least_once", "exactly_once"):
            raise ConfigError(f"processing_guarantee: must be 'at_least_once' or 'exactly_once', "
                              f"got {processing_guarantee!r}")
        if processing_guarantee == "exactly_once":
            check_exactly_once(consumer, producer)
            if on_error == "dead_letter":
                raise ConfigError("on_error: 'dead_letter' is not supported with processing_guarantee="
                                  "'exactly_once' yet")
        self.processing_guarantee = processing_guarantee
        self.consumer = consumer
        self.producer = producer
        self.handler = handler
        self.mode = mode
        self.task_timeout_ms = task_timeout_ms
        self.on_error = on_error
        self.dead_letter_topic = dead_letter_topic
        self.max_batch_records = max_batch_records
        self.max_buffered_records = max_buffered_records
        self.max_poll_records = max_poll_records
        self.poll_timeout_ms = poll_timeout_ms
        self.commit_interval_ms = commit_interval_ms
        self.shutdown_timeout_ms = shutdown_timeout_ms
        self.timeout_errors = timeout_errors
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms, rng=rng)
        self._clock: Clock = clock if clock is not None else _monotonic_ms
        self._sleep: Sleep = sleep if sleep is not None else _sleep_ms
        self._tasks: dict[TopicPartition, _PartitionTask] = {}
        self._paused: set[TopicPartition] = set()
        self._poll_timer = TaskTimer(task_timeout_ms, self._backoff)
        self._commit_timer = TaskTimer(task_timeout_ms, self._backoff)
        self._last_commit_at: float | None = None
        self._fatal: BaseException | None = None
        self._stop_requested = False
        self._running = False
        self._finished = anyio.Event()
        self._wait_scope: anyio.CancelScope | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        #: ``async with``: the task running run() in the background (entered and left from any task)
        self._bg: TaskOwner | None = None
        self._bg_error: BaseException | None = None
        if rebalance_listener is not None and not isinstance(rebalance_listener, RunnerRebalanceListener):
            raise TypeError("rebalance_listener: must be a RunnerRebalanceListener")
        self._listener = rebalance_listener if rebalance_listener is not None else RunnerRebalanceListener()
        self._listener._bind(self)
        # check_exactly_once (above) made sure both have what the transaction needs
        self._eos: ExactlyOnce | None = (ExactlyOnce(cast(TransactionalProducer, producer),
                                                     cast(GroupConsumer, consumer))
                                         if processing_guarantee == "exactly_once" else None)
        self._commit_due = False
        #: what each partition task is given
        self._env = _TaskEnv(mode=mode, max_batch_records=max_batch_records, task_timeout_ms=task_timeout_ms,
                             raise_errors=on_error == "raise", backoff=self._backoff, producer=producer,
                             eos=self._eos, clock=self._clock, sleep=self._sleep, is_timeout=self._is_timeout,
                             call_handler=self._call_handler, handle_failure=self._handle_failure,
                             abort_now=self._commit_now, fail=self._fail)
        #: a handler call's processing scope: the consumer's ``process`` (traced when it has a tracer: a
        #: ``process`` span per call, current while the handler runs, so what it sends joins the upstream trace)
        process = getattr(consumer, "process", None)
        self._process: Callable[..., AbstractContextManager[Any]] = process if callable(process) else _untraced
        #: an akresil consumer's hook registry: while it has no tracer a handler call skips the scope
        hooks = getattr(consumer, "hooks", None)
        self._consumer_hooks: Hooks | None = hooks if isinstance(hooks, Hooks) and callable(process) else None

    # ------------------------------------------------------------------ public surface
    @property
    def rebalance_listener(self) -> RunnerRebalanceListener:
        """The listener bound to this runner (see ``RunnerRebalanceListener`` for wiring it to the consumer)."""
        return self._listener

    def partitions(self) -> dict[TopicPartition, PartitionStatus]:
        now = self._clock()
        return {tp: task.status(now, tp in self._paused) for tp, task in self._tasks.items()}

    async def run(self) -> None:
        """Consume and handle until ``stop()`` or a fatal error (raised here after offsets were committed)."""
        if self._running or self._finished.is_set():
            raise IllegalStateError("Runner.run() can be called once")
        self._running = True
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                try:
                    await self._loop()
                except Exception as exc:  # noqa: BLE001 - consumer/commit failure: shut down, then raise
                    self._fail(exc)
                except BaseException:
                    for task in self._tasks.values():
                        task.cancel()
                    raise
                try:
                    await self._shutdown()
                except Exception as exc:  # noqa: BLE001 - e.g. the final commit; raised below, not grouped
                    self._fail(exc)
        finally:
            self._tg = None
            self._running = False
            self._finished.set()
        if self._fatal is not None:
            raise self._fatal

    async def stop(self) -> None:
        """Stop gracefully: in-flight handlers finish, their records are delivered, offsets are committed."""
        self._stop_requested = True
        if self._wait_scope is not None:
            self._wait_scope.cancel()
        if self._running:
            await self._finished.wait()

    async def wait(self) -> None:
        """Block until the runner stopped; raise its fatal error if it had one."""
        await self._finished.wait()
        if self._fatal is not None:
            raise self._fatal

    async def __aenter__(self) -> Runner:
        """Start ``run()`` in the background; leaving the block stops it and raises its error, if any."""
        if self._bg is not None:
            raise IllegalStateError("Runner: already entered")
        self._bg = TaskOwner("akresil-runner")
        (await self._bg.open()).start_soon(self._run_in_background, name="akresil-runner run()")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: object) -> None:
        bg, self._bg = self._bg, None
        try:
            await self.stop()
        finally:
            if bg is not None:
                await bg.close()
        if exc is None and self._bg_error is not None:
            raise self._bg_error

    async def _run_in_background(self) -> None:
        try:
            await self.run()
        except Exception as exc:  # noqa: BLE001 - raised from __aexit__ / wait()
            self._bg_error = exc

    # ------------------------------------------------------------------ the loop
    async def _loop(self) -> None:
        while True:
            await self._sync_assignment()
            await self._update_pauses()
            await self._maybe_commit(force=False)
            if self._stop_requested or self._fatal is not None:
                return
            batches = await self._poll()
            await self._sync_assignment()
            for tp, records in batches.items():
                task = self._tasks.get(tp)
                if task is None:
                    log.debug("dropping %d record(s) of %s: not assigned any more", len(records), tp)
                    continue
                task.push(records)

    async def _poll(self) -> Mapping[TopicPartition, Sequence[ConsumerRecord]]:
        now = self._clock()
        if not self._poll_timer.ready(now):
            await self._interruptible(self._sleep, self._poll_timer.wait_ms(now))
            return {}
        batches: Mapping[TopicPartition, Sequence[ConsumerRecord]] = {}
        unreadable: RecordDeserializationError | None = None
        try:
            with anyio.CancelScope() as scope:
                self._wait_scope = scope
                if self._stop_requested or self._fatal is not None:
                    scope.cancel()
                if self.max_poll_records is None:
                    batches = await self.consumer.getmany(timeout_ms=self.poll_timeout_ms)
                else:
                    batches = await self.consumer.getmany(timeout_ms=self.poll_timeout_ms,
                                                          max_records=self.max_poll_records)
        except RecordDeserializationError as exc:
            if self.on_error == "raise" or exc.topic_partition is None or getattr(self.consumer, "seek", None) is None:
                raise
            unreadable = exc
        except Exception as exc:
            if not self._retriable_client_error(exc):
                raise
            self._on_client_timeout(self._poll_timer, "poll", exc)
            return {}
        finally:
            self._wait_scope = None
        if unreadable is not None:
            await self._pass_unreadable(unreadable)
        self._poll_timer.on_progress()
        return batches

    async def _pass_unreadable(self, exc: RecordDeserializationError) -> None:
        """``on_error`` for a record the consumer's deserializer refused (it never reaches the handler): dead-letter
        it as fetched (its bytes) or skip it, then seek past it. The partition's commit position passes it with the
        next record handled, so a member that takes the partition over before that meets it again (at least
        once)."""
        tp = exc.topic_partition
        assert tp is not None           # ``_poll`` passes on only an error that names its partition
        if exc.raw is not None:
            for delivery in await self._handle_failure([exc.raw], exc):
                await delivery      # in the dead-letter topic before the consumer moves past it
        try:
            await _maybe_await(self.consumer.seek(tp, exc.next_offset))  # type: ignore[attr-defined]
        except IllegalStateError:
            log.info("%s[%d] no longer assigned: its owner meets offset %d again", tp.topic, tp.partition, exc.offset)

    async def _interruptible(self, wait: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """A wait of the loop that ``stop()`` and a fatal error cut short."""
        if self._stop_requested or self._fatal is not None:
            return
        with anyio.CancelScope() as scope:
            self._wait_scope = scope
            try:
                await wait(*args)
            finally:
                self._wait_scope = None

    async def _sync_assignment(self) -> None:
        assigned = set(await _maybe_await(self.consumer.assignment()))
        for tp in [tp for tp in self._tasks if tp not in assigned]:
            # gone without passing through our rebalance listener: its records belong to another member now
            log.info("%s[%d] no longer assigned: dropping its %d buffered record(s)", tp.topic, tp.partition,
                     len(self._tasks[tp].queue))
            self._drop(tp, hard=True)
        if self._stop_requested or self._fatal is not None or self._tg is None:
            return
        for tp in assigned:
            if tp not in self._tasks:
                tp = TopicPartition(tp[0], tp[1])
                task = self._tasks[tp] = _PartitionTask(self._env, tp)
                self._tg.start_soon(task.run, name=f"akresil.runner {tp.topic}[{tp.partition}]")

    def _drop(self, tp: TopicPartition, *, hard: bool) -> None:
        task = self._tasks.pop(tp, None)
        self._paused.discard(tp)
        if task is not None:
            task.cancel() if hard else task.stop()
            if self._eos is not None and hard and task.rewind_to is not None:
                # its outputs in the open transaction lose their input offsets: the transaction must abort
                self._eos.request_abort()
                self._commit_now()

    async def _update_pauses(self) -> None:
        """Pause stuck or full partitions (others keep fetching), resume them once they move again."""
        want = {tp for tp, task in self._tasks.items()
                if task.timer.failing or len(task.queue) >= self.max_buffered_records}
        to_pause = sorted(want - self._paused)
        to_resume = sorted(self._paused - want)
        if to_pause:
            await _maybe_await(self.consumer.pause(*to_pause))
            self._paused.update(to_pause)
        if to_resume:
            await _maybe_await(self.consumer.resume(*to_resume))
            self._paused.difference_update(to_resume)

    # ------------------------------------------------------------------ rebalances (RunnerRebalanceListener)
    async def _revoke(self, revoked: AbstractSet[TopicPartition]) -> None:
        """Revoked partitions finish the handler call they are in, commit (or end the transaction), then go."""
        tasks = [self._tasks[tp] for tp in revoked if tp in self._tasks]
        if not tasks:
            return
        for task in tasks:
            task.stop()
        limit = self.shutdown_timeout_ms / 1000 if self.shutdown_timeout_ms is not None else None
        with anyio.move_on_after(limit):
            for task in tasks:
                await task.done.wait()
        if self._eos is not None:
            try:
                # the transaction holds every partition's progress: commit it (or abort) before they move
                await self._eos.commit_point(list(self._tasks.values()))
            except Exception as exc:  # noqa: BLE001 - aborted by the coordinator; the new owner re-reads
                log.warning("transaction commit on revoke failed: %r", exc)
            for task in tasks:
                self._drop(task.tp, hard=True)
            return
        offsets = self._pending_offsets(tasks)
        if offsets:
            try:
                await self._commit(offsets, timer=None)
            except Exception as exc:  # noqa: BLE001 - the records will be redelivered to the new owner
                log.warning("commit on revoke failed: %r", exc)
        for task in tasks:
            self._drop(task.tp, hard=True)

    def _lose(self, lost: AbstractSet[TopicPartition]) -> None:
        """Lost partitions may already be owned elsewhere: cancel their work, commit nothing."""
        for tp in lost:
            self._drop(tp, hard=True)

    # ------------------------------------------------------------------ commits
    def _pending_offsets(self, tasks: Iterable[_PartitionTask]) -> dict[TopicPartition, int]:
        return pending_offsets(tasks)

    def _commit_now(self) -> None:
        """Exactly-once: a task failed; the loop aborts and rewinds at once instead of after the interval."""
        self._commit_due = True
        if self._wait_scope is not None:
            self._wait_scope.cancel()

    async def _maybe_commit(self, *, force: bool) -> None:
        now = self._clock()
        if self._eos is not None:
            if force or self._commit_due or self._last_commit_at is None \
                    or now - self._last_commit_at >= self.commit_interval_ms:
                self._commit_due = False
                await self._eos.commit_point(list(self._tasks.values()))
                self._last_commit_at = self._clock()
            return
        if not force:
            if self._last_commit_at is not None and now - self._last_commit_at < self.commit_interval_ms:
                return
            if not self._commit_timer.ready(now):
                return
        offsets = self._pending_offsets(self._tasks.values())
        if not offsets:
            self._last_commit_at = now
            return
        await self._commit(offsets, timer=self._commit_timer)
        self._last_commit_at = self._clock()

    async def _commit(self, offsets: dict[TopicPartition, int], *, timer: TaskTimer | None) -> bool:
        """Commit ``offsets``; a timeout or retriable error keeps them pending (retried with backoff)."""
        try:
            await self.consumer.commit(offsets)
        except _GROUP_MOVED_ON as exc:
            # the partitions were (or are being) reassigned: their records will be redelivered from the last
            # commit; partitions still ours are retried at the next commit
            log.warning("commit of %s rejected by the group (%r): records since the last commit will be "
                        "redelivered", offsets, exc)
            return False
        except Exception as exc:
            if not self._retriable_client_error(exc):
                raise
            if timer is not None:
                self._on_client_timeout(timer, "commit", exc)
            else:
                log.warning("commit of %s failed: %r", offsets, exc)
            return False
        if timer is not None:
            timer.on_progress()
        for tp, offset in offsets.items():
            task = self._tasks.get(tp)
            if task is not None:
                task.committed = offset
        log.debug("committed %s", offsets)
        return True

    def _on_client_timeout(self, timer: TaskTimer, what: str, exc: BaseException) -> None:
        now = self._clock()
        if timer.on_timeout(now) is None:
            raise TaskTimeoutError(f"consumer {what}: no success for {timer.stuck_for_ms(now):.0f} ms after "
                                   f"{timer.failures} failed attempt(s) (task_timeout_ms={self.task_timeout_ms}); "
                                   f"last error: {exc!r}") from exc
        log.info("consumer %s failed (%r); retry in %.0f ms", what, exc, timer.wait_ms(now))

    def _retriable_client_error(self, exc: BaseException) -> bool:
        return self._is_timeout(exc) or (isinstance(exc, KafkaError) and exc.retriable)

    # ------------------------------------------------------------------ shutdown and failure
    def _fail(self, exc: BaseException) -> None:
        """First fatal error wins; the loop wakes up, cancels the other tasks, commits and raises it."""
        if self._fatal is None:
            self._fatal = exc
            log.error("runner stopping on %r", exc)
        if self._wait_scope is not None:
            self._wait_scope.cancel()

    async def _shutdown(self) -> None:
        tasks = list(self._tasks.values())
        graceful = self._fatal is None
        for task in tasks:
            task.stop() if graceful else task.cancel()
        limit = self.shutdown_timeout_ms / 1000 if self.shutdown_timeout_ms is not None and graceful else None
        with anyio.move_on_after(limit):
            for task in tasks:
                await task.done.wait()
        for task in tasks:
            if not task.done.is_set():
                log.warning("%s[%d]: handler still running after shutdown_timeout_ms (%s): cancelled",
                            task.tp.topic, task.tp.partition, self.shutdown_timeout_ms)
                task.cancel()
                if self._eos is not None:
                    self._eos.request_abort()         # its partial outputs must not commit
        for task in tasks:
            await task.done.wait()
        if self._eos is not None:
            try:
                if graceful:
                    await self._eos.commit_point(tasks)
                else:
                    await self._eos.abort_only()
            except Exception as exc:  # noqa: BLE001
                if self._fatal is None:
                    raise
                log.warning("final transaction failed after %r: %r", self._fatal, exc)
            finally:
                self._tasks.clear()
            return
        try:
            offsets = self._pending_offsets(tasks)
            if offsets:
                try:
                    await self._commit(offsets, timer=None)
                except Exception as exc:  # noqa: BLE001
                    if self._fatal is None:
                        raise
                    log.warning("final commit failed after %r: %r", self._fatal, exc)
        finally:
            if self._paused:
                try:
                    await _maybe_await(self.consumer.resume(*sorted(self._paused)))
                except Exception as exc:  # noqa: BLE001 - best effort: leave the consumer as we found it
                    log.debug("resume on shutdown failed: %r", exc)
                self._paused.clear()
            self._tasks.clear()

    # ------------------------------------------------------------------ handler plumbing
    def _is_timeout(self, exc: BaseException) -> bool:
        return isinstance(exc, self.timeout_errors) and not isinstance(exc, TaskTimeoutError)

    async def _call_handler(self, unit: list[ConsumerRecord], ctx: HandlerContext) -> None:
        hooks = self._consumer_hooks
        if hooks is not None and hooks.tracer is None:
            await self._handler_call(unit, ctx)        # nothing traces: no scope to enter (the common case)
            return
        with self._process(*unit):
            await self._handler_call(unit, ctx)

    def _handler_call(self, unit: list[ConsumerRecord], ctx: HandlerContext) -> Awaitable[Any]:
        """The handler's awaitable for ``unit`` (its body runs when awaited, inside the caller's scope)."""
        result = self.handler(unit[0] if self.mode == "record" else unit, ctx)
        if not inspect.isawaitable(result):
            raise _HandlerNotAsync(f"handler must be async (return an awaitable), got {type(result).__name__}")
        return result

    async def _handle_failure(self, unit: list[ConsumerRecord], exc: BaseException) -> list[Awaitable[Any]]:
        """``on_error`` for a non-timeout failure of ``unit``: dead-letter or skip it (returns deliveries)."""
        first = unit[0]
        if self.on_error == "skip":
            log.warning("%s[%d]: skipping offsets %d..%d after %r", first.topic, first.partition,
                        first.offset, unit[-1].offset, exc)
            return []
        assert self.producer is not None and self.dead_letter_topic is not None
        log.warning("%s[%d]: dead-lettering offsets %d..%d to %r after %r", first.topic, first.partition,
                    first.offset, unit[-1].offset, self.dead_letter_topic, exc)
        futures = []
        for rec in unit:
            headers = [*rec.headers, *dead_letter_headers(rec, exc)]
            futures.append(await self.producer.enqueue(self.dead_letter_topic, rec.value, rec.key,
                                                       headers=headers))
        return futures


class RunnerRebalanceListener:
    """Rebalance callbacks that let partitions leave cleanly: finish the running handler, commit, drop.

    The consumer needs its listener before the runner exists, so create one, give it to the consumer and pass
    it to the runner, which binds it::

        listener = RunnerRebalanceListener()
        consumer = Consumer("in", group_id="g", enable_auto_commit=False, listener=listener, ...)
        runner = Runner(consumer, handler, rebalance_listener=listener)

    (``runner.rebalance_listener`` is the bound listener.)  Without it the runner notices a revoked partition
    on its next loop and drops its buffered work uncommitted: still at-least-once, just more redelivery.
    """

    def __init__(self, runner: Runner | None = None) -> None:
        self._runner = runner

    def _bind(self, runner: Runner) -> None:
        if self._runner is not None and self._runner is not runner:
            raise IllegalStateError("rebalance_listener: already bound to another Runner")
        self._runner = runner

    async def on_partitions_revoked(self, revoked: AbstractSet[TopicPartition]) -> None:
        if self._runner is not None:
            await self._runner._revoke(revoked)

    async def on_partitions_assigned(self, assigned: AbstractSet[TopicPartition]) -> None:
        """Tasks for new partitions start on the runner's next loop (from ``assignment()``)."""

    async def on_partitions_lost(self, lost: AbstractSet[TopicPartition]) -> None:
        """Lost partitions may already be owned elsewhere: cancel their work, commit nothing."""
        if self._runner is not None:
            self._runner._lose(lost)


def dead_letter_headers(record: ConsumerRecord, exc: BaseException) -> list[Header]:
    """Where a dead-lettered record came from and why it failed."""
    p = DEAD_LETTER_HEADER_PREFIX
    return [(p + "topic", record.topic.encode()), (p + "partition", str(record.partition).encode()),
            (p + "offset", str(record.offset).encode()),
            (p + "exception", f"{type(exc).__module__}.{type(exc).__qualname__}".encode()),
            (p + "message", str(exc)[:1000].encode("utf-8", "replace"))]


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}: must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{name}: must be >= {minimum}, got {value!r}")


def _untraced(*records: ConsumerRecord) -> AbstractContextManager[None]:
    """The processing scope of a consumer without ``process()`` (one that only has the ``RunnerConsumer``
    surface): nothing."""
    return nullcontext()


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


async def _sleep_ms(ms: float) -> None:
    await anyio.sleep(ms / 1000.0)
