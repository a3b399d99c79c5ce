"""The producer: ``send`` (wait for delivery), ``enqueue`` (wait for buffer space only), ``send_many`` (bulk).

Records go through the core accumulator (KIP-91 delivery deadlines, ``buffer_memory`` backpressure) and are
sent by the scheduler task (``net.scheduler.Sender``).  Idempotence is on by default, as in the Java client
since 3.0: a producer id from InitProducerId and per-partition sequence numbers make retries safe, and a
sequence gap bumps the epoch (KIP-360).

``send_many`` checks every record first, partitions them all (murmur2 groups for keys, sticky runs that switch
at full batches for null keys), then fills batches per partition in one pass with one completion per batch.
``enqueue`` and large ``send_many`` calls give the event loop a turn every ~256 KiB of closed batches, so the
sender ships full batches while a caller that never awaits anything else keeps appending.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from contextlib import asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Coroutine, Generic, Iterable, Mapping, NamedTuple, Sequence

import anyio
import anyio.abc
import anyio.lowlevel

from . import errors
from .checks import check_topic_name
from .client_runtime import ClientLifecycle, ClientRuntime
from .core.accumulator import AppendResult, RecordAccumulator, SpaceWaiter
from .core.batch import RECORD_BASE_ESTIMATE, BulkCompletion, BulkCounts, ProducerBatch, headers_size
from .core.partitioner import DefaultPartitioner, check_partition
from .core.tracing import Tracer
from .core.transaction import TransactionManager, TxnState
from .delivery import DeliveryCallback, DeliveryFuture, detached_future
from .net.backend import running_asyncio_loop
from .net.coordinator import TRANSACTION
from .net.scheduler import Sender
from .net.transaction import TransactionIO
from .send_call import SendCall
from .types import ConsumerGroupMetadata, Header, KeyT_contra, RecordMetadata, TopicPartition, ValueT_contra

if TYPE_CHECKING:
    from typing import Unpack

    from .config_keys import ProducerConfig

log = logging.getLogger(__name__)

_UNKNOWN_TOPIC_ERRORS = {errors.InvalidTopicError.errno, errors.TopicAuthorizationFailedError.errno}
_NO_HEADERS: list[Header] = []     # shared, never mutated (the encoder only reads header lists)
_wall_time_ns = time.time_ns
#: a large ``send_many`` yields to the event loop after about this many buffered bytes (at a batch boundary)
_YIELD_BYTES = 256 * 1024


class _Blocked(NamedTuple):
    """A record ready to buffer that waits for ``buffer_memory`` (``Producer._enqueue_slow``)."""

    tp: TopicPartition
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]
    fut: DeliveryFuture
    needed: int
    sticky: bool


_MAX_TIMESTAMP = 2**63 - 1


def _checked_timestamp(timestamp_ms: Any) -> int:
    """An explicit ``timestamp_ms``: an int of milliseconds since the epoch, >= 0 (the Java client refuses a
    negative one too); TypeError / ValueError naming the argument otherwise."""
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int):
        raise TypeError(f"timestamp_ms must be an int (milliseconds since the epoch) or None, got "
                        f"{type(timestamp_ms).__name__} {timestamp_ms!r}")
    if not 0 <= timestamp_ms <= _MAX_TIMESTAMP:
        raise ValueError(f"timestamp_ms must be >= 0 (milliseconds since the epoch) or None, got {timestamp_ms}")
    return int(timestamp_ms)


def _check_record_args(partition: Any, timestamp_ms: Any) -> None:
    """Check an explicit ``partition`` / ``timestamp_ms`` before anything waits (metadata, buffer space)."""
    if partition is not None:
        check_partition(partition)
    if timestamp_ms is not None:
        _checked_timestamp(timestamp_ms)


def _as_bytes(data: Any, what: str, index: int | None = None) -> bytes:
    """``bytearray`` / ``memoryview`` as bytes; TypeError naming the field (and record) for anything else."""
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    where = f"send_many: record {index}: " if index is not None else ""
    raise TypeError(f"{where}{what} must be bytes or None (got {type(data).__name__}); "
                    f"pass {what}_serializer= to convert it")


def _missing(parts: Mapping[int, Any] | None, partition: Any) -> bool:
    """Whether metadata lacks the topic, or the explicit int ``partition`` (other values are checked where used)."""
    return not parts or (partition.__class__ is int and partition >= len(parts))


class Producer(ClientLifecycle, Generic[KeyT_contra, ValueT_contra]):
    """Async Kafka producer. Use as ``async with Producer(bootstrap_servers=...) as producer``.

    Keyword arguments are Kafka's producer configs in snake_case (see ``akresil.config``), plus
    ``key_serializer`` / ``value_serializer`` (callables to bytes) and ``hooks`` (event hook objects).
    Generic in what it takes as keys and values: ``Producer(value_serializer=json_bytes)`` with
    ``json_bytes: Callable[[Order], bytes]`` is a ``Producer[RawBytes, Order]``; without a serializer the
    parameter defaults to ``RawBytes`` (the TypeVars' defaults).
    """

    # One signature, not overloads per serializer: a checker's error then names the wrong keyword.  A serializer
    # returns bytes, bytearray or memoryview; spelt as a union of two callables, mypy infers an unannotated
    # lambda's parameter as Any (as for a def taking Any) instead of the TypeVar's bytes-like default.
    def __init__(self, *,
                 key_serializer: (Callable[[KeyT_contra], bytes] | Callable[[KeyT_contra], bytearray | memoryview]
                                  | None) = None,
                 value_serializer: (Callable[[ValueT_contra], bytes]
                                    | Callable[[ValueT_contra], bytearray | memoryview] | None) = None,
                 **config: Unpack[ProducerConfig]) -> None:
        self._runtime = rt = ClientRuntime("producer", "producer", "Producer", config, extra=("hooks",),
                                           allow_auto_topic_creation=True)
        self.config = cfg = rt.config
        for name, serializer in (("key_serializer", key_serializer), ("value_serializer", value_serializer)):
            if serializer is not None and not callable(serializer):
                raise errors.ConfigError(f"{name}: must be callable, got {type(serializer).__name__}")
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self.hooks, self._cluster = rt.hooks, rt.cluster
        #: what a tracer (``hooks.tracer``) is told about this producer
        self._trace_site = rt.trace_site("producer")
        self._acc = RecordAccumulator(
            batch_size=cfg.batch_size, linger_ms=cfg.linger_ms, delivery_timeout_ms=cfg.delivery_timeout_ms,
            request_timeout_ms=cfg.request_timeout_ms, buffer_memory=cfg.buffer_memory,
            retry_backoff_ms=cfg.retry_backoff_ms, retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            max_in_flight=cfg.max_in_flight_requests_per_connection, enable_idempotence=cfg.enable_idempotence,
            max_request_size=cfg.max_request_size, compression_type=cfg.compression_type,
            transactional=cfg.transactional_id is not None, rng=self._cluster.rng, hooks=self.hooks)
        self._partitioner = DefaultPartitioner(cfg.batch_size, partitioner=cfg.partitioner,
                                               ignore_keys=cfg.partitioner_ignore_keys, rng=self._cluster.rng,
                                               load_stats=self._load_stats)
        self._sender = Sender(self._cluster, self._acc, cfg)
        #: transactions (None: not transactional): the state machine and its coordinator I/O
        self._txn: TransactionManager | None = None
        self._txn_io: TransactionIO | None = None
        if cfg.transactional_id is not None:
            self._txn = TransactionManager(cfg.transactional_id, cfg.transaction_timeout_ms,
                                           retry_backoff_ms=cfg.retry_backoff_ms,
                                           retry_backoff_max_ms=cfg.retry_backoff_max_ms, rng=self._cluster.rng)
            self._txn_io = self._sender.txn = TransactionIO(self._cluster, self._acc, self._txn,
                                                            self._txn_progress, self._sender._fail_all)
            self._txn.on_spoilt = self._stop_accepting
        self._checked_topics: set[str] = set()
        #: started, not closed: the one flag the per-record path checks (with the sender's fatal error)
        self._accepting = False
        #: the running asyncio loop, given to each DeliveryFuture (None under trio: event-based futures)
        self._loop: asyncio.AbstractEventLoop | None = None
        #: enqueue yields once before its next record after ~_YIELD_BYTES went into batches that closed
        self._yield_due = False
        self._since_yield = 0
        #: per topic: (metadata snapshot, partition count, its TopicPartitions) for the per-record path, which then
        #: reads one entry instead of the snapshot's topics and the checked names; the TopicPartitions are built
        #: once per topic (again only when it grows), not per record
        self._placing: dict[str, tuple[Any, int, list[TopicPartition]]] = {}
        #: per topic: (metadata snapshot, its partitions with a leader) — recomputed when the snapshot changes
        self._available: dict[str, tuple[Any, tuple[int, ...]]] = {}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Bootstrap and start the sender; ``close()`` may then run in any task (``async with`` calls both).

        With a ``transactional_id`` its coordinator is looked up alongside the bootstrap Metadata, so
        ``init_transactions()`` goes straight to InitProducerId."""
        tid = self.config.transactional_id
        await self._runtime.start(self._start_sender, on_failure=self._sender._fail_all,
                                  coordinators=() if tid is None else ((tid, TRANSACTION),))

    async def _start_sender(self, task_group: anyio.abc.TaskGroup) -> None:
        await task_group.start(self._sender.run)
        self._loop = running_asyncio_loop()
        # a transactional producer accepts records only inside a transaction (begin_transaction sets it)
        self._accepting = self._txn is None

    async def close(self, timeout: float | None = None) -> None:
        """Deliver or fail every pending record, then release connections and tasks.

        Without ``timeout`` it waits until every record is acknowledged or fails (bounded by
        ``delivery_timeout_ms``); after ``timeout`` seconds the rest fail with ``ClientClosedError``.
        """
        self._accepting = False
        await self._runtime.close(partial(self._deliver_pending, timeout), partial(self._stop_sender, timeout))

    async def _deliver_pending(self, timeout: float | None) -> None:
        if self._txn is not None and self._txn.state is not TxnState.READY:
            # records of an unfinished transaction are never committed: the coordinator aborts it after
            # transaction_timeout_ms, or at once when a producer with this transactional_id initializes
            self._acc.abort_undrained(errors.TransactionAbortedError("producer closed inside a transaction"))
        self._acc.close()
        self._sender.wake()
        with anyio.move_on_after(timeout if timeout is not None else float("inf")):
            await self._wait_all_done()

    def _stop_sender(self, timeout: float | None) -> None:
        """After ``_deliver_pending``, also when it was cancelled: no record is left waiting."""
        if self._acc.incomplete_batches:
            after = f" after {timeout} s" if timeout is not None else ""
            self._acc.abort(errors.ClientClosedError(f"producer closed with records pending{after}"))
        self._sender.stop()

    async def _wait_all_done(self) -> None:
        while self._acc.incomplete_batches:
            waiter = self._sender.wait_progress()
            self._sender.wake()
            await waiter

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until it is acknowledged or failed."""
        self._check_open()
        self._acc.begin_flush()
        try:
            self._sender.wake()
            with anyio.fail_after(timeout) if timeout is not None else nullcontext():
                await self._wait_all_done()
        finally:
            self._acc.end_flush()

    def _check_open(self) -> None:
        self._runtime.check_open()
        if self._sender.fatal_error is not None:
            raise self._sender.fatal_error

    def _check_send(self) -> None:
        """``_check_open``, and for a transactional producer: a transaction is open and not spoilt."""
        self._check_open()
        if self._txn is not None:
            self._txn.check_send("send")

    # ------------------------------------------------------------------ transactions
    def _require_txn(self, op: str) -> tuple[TransactionManager, TransactionIO]:
        if self._txn is None or self._txn_io is None:
            raise errors.IllegalStateError(f"{op}: this producer has no transactional_id")
        self._check_open()
        return self._txn, self._txn_io

    def _stop_accepting(self) -> None:
        self._accepting = False

    def _txn_progress(self) -> None:
        self._sender.wake()
        self._sender._signal_progress()

    async def _wait_until(self, done: Callable[[], bool]) -> None:
        while not done():
            waiter = self._sender.wait_progress()
            self._sender.wake()
            if done():
                break
            await waiter
            if self._sender.fatal_error is not None:
                raise self._sender.fatal_error

    async def init_transactions(self, *, take_over: bool = False) -> None:
        """Register ``transactional_id`` with its coordinator (FindCoordinator, InitProducerId): fences every
        older producer with the same id and completes (or aborts) its open transaction. Call once after start;
        retried with backoff for up to ``max_block_ms``.

        Called again on a producer that has an epoch, it passes that epoch (KIP-360), so a producer another
        instance fenced meanwhile is refused (``ProducerFencedError``). ``take_over=True`` registers as a new
        instance would instead (no id, no epoch): the producer takes the id back and fences the other. For a
        pool of long-lived producers that share ids among processes (Spark's exactly-once sink: one per worker
        process and task partition), where the alternative is a new client per take-over."""
        _, io = self._require_txn("init_transactions()")
        await io.init(self.config.max_block_ms, take_over=take_over)
        io.follow_cluster()

    def begin_transaction(self) -> None:
        """Open a transaction: records sent from now on are written only if it commits."""
        txn, _ = self._require_txn("begin_transaction()")
        txn.begin()
        self._accepting = True

    async def commit_transaction(self) -> None:
        """Flush the transaction's records, then commit them (and offsets sent with it) atomically.

        A record that failed makes the commit raise its error; the transaction must then be aborted."""
        txn, io = self._require_txn("commit_transaction()")
        if txn.state is TxnState.ABORTABLE_ERROR:
            raise errors.IllegalStateError(
                f"commit_transaction(): the transaction cannot be committed, abort it (cause: {txn.error!r})")
        txn.start_end(True, self._cluster.clock())     # IN_TRANSACTION (or a retried COMMITTING) -> COMMITTING
        self._accepting = False
        self._acc.begin_flush()
        try:
            await self._wait_until(lambda: not self._acc.incomplete_batches and not txn.pending)
        finally:
            self._acc.end_flush()
        if txn.spoilt:            # a record failed while the commit's flush waited
            assert txn.error is not None
            raise txn.error
        await io.end(True)
        if txn.bump_after_end:       # the cluster moved to transactions v2 since the last transaction
            await io.init(self.config.max_block_ms)

    async def abort_transaction(self) -> None:
        """Abort the open (or failed) transaction: records not yet sent fail with ``TransactionAbortedError``,
        records already written are never shown to read_committed consumers."""
        txn, io = self._require_txn("abort_transaction()")
        txn.start_end(False, self._cluster.clock())        # -> ABORTING, or the state error
        self._accepting = False
        _, sequenced = self._acc.abort_undrained(errors.TransactionAbortedError("the transaction was aborted"))
        if sequenced and not txn.v2:
            txn.bump_after_end = True
        self._txn_progress()
        await self._wait_until(lambda: not self._acc.incomplete_batches and not txn.pending)
        await io.end(False)
        if txn.bump_after_end:
            # v1: a record failed in the aborted transaction, so a new epoch restarts every partition's sequence
            # (v2's EndTxn bumped it already); or the cluster moved to v2 since the last transaction
            await io.init(self.config.max_block_ms)

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, Any],
                                          group_metadata: ConsumerGroupMetadata | str) -> None:
        """Commit a consumer group's offsets (the next offset to read, per partition) with the transaction.

        ``group_metadata`` is ``consumer.group_metadata()``: its generation and member id let the group
        coordinator refuse a zombie's offsets (KIP-447). A bare group id skips that check."""
        txn, io = self._require_txn("send_offsets_to_transaction()")
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata)
        if not isinstance(group_metadata, ConsumerGroupMetadata):
            raise TypeError("send_offsets_to_transaction(): group_metadata must be consumer.group_metadata() "
                            f"or a group id, got {type(group_metadata).__name__}")
        plain: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            value = getattr(offset, "offset", offset)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(
                    f"send_offsets_to_transaction(): offset for {tp} must be an int >= 0, got {offset!r}")
            plain[TopicPartition(tp[0], tp[1])] = value
        if not plain:
            return
        await io.send_offsets(plain, group_metadata)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Producer[KeyT_contra, ValueT_contra]]:
        """``async with producer.transaction():`` begins, commits on a normal exit and aborts on an exception
        (which then propagates). A failed commit aborts too and raises the commit's error."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            txn = self._txn
            if txn is not None and txn.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
                with anyio.CancelScope(shield=True):
                    try:
                        await self.abort_transaction()
                    except errors.KafkaError as abort_error:
                        # the body's exception is the one to see; the producer's state keeps the abort's
                        log.warning("abort after an exception in a transaction failed: %r", abort_error)
            raise
        try:
            await self.commit_transaction()
        except errors.KafkaError:
            txn = self._txn
            if txn is not None and txn.state is TxnState.ABORTABLE_ERROR:
                await self.abort_transaction()
            raise

    @property
    def transaction_state(self) -> str | None:
        """The transaction state (``'ready'``, ``'in transaction'``, ``'abortable error'``...); None when not
        transactional."""
        return None if self._txn is None else self._txn.state.value

    # ------------------------------------------------------------------ sending
    def send(self, topic: str, value: ValueT_contra | None = None, key: KeyT_contra | None = None, *,
             partition: int | None = None,
             timestamp_ms: int | None = None, headers: Sequence[Header] | None = None
             ) -> Coroutine[Any, Any, RecordMetadata]:
        """Send one record and wait for its acknowledgement (a coroutine: ``await`` it or run it as a task).

        Under asyncio the coroutine is a ``SendCall``, which is also the record's future: one object per
        pending record instead of a coroutine frame plus a future (see ``akresil.send_call``)."""
        loop = self._loop
        if loop is None or self.hooks.tracer is not None:
            return self._send_native(topic, value, key, partition, timestamp_ms, headers)
        return SendCall(loop, (self, topic, value, key, partition, timestamp_ms, headers))

    async def _send_native(self, topic: str, value: Any, key: Any, partition: int | None,
                           timestamp_ms: int | None, headers: Sequence[Header] | None) -> RecordMetadata:
        """``send`` as a native coroutine: under trio, before the start, and with a tracer."""
        tracer = self.hooks.tracer
        if tracer is not None:
            return await self._send_traced(tracer, topic, value, key, partition, timestamp_ms, headers)
        fut = self._enqueue_nowait(topic, value, key, partition, timestamp_ms, headers, None)
        if fut.__class__ is not DeliveryFuture:
            fut = await self._enqueue_slow(fut, topic, value, key, partition, timestamp_ms, headers, None)  # type: ignore[arg-type]
        return await fut

    async def _send_rest(self, first: _Blocked | None, topic: str, value: Any, key: Any, partition: int | None,
                         timestamp_ms: int | None, headers: Sequence[Header] | None) -> RecordMetadata:
        """A ``SendCall`` whose record could not be buffered at once: the waiting part, with a future of its own
        (the ``SendCall`` drives this coroutine, so it cannot also be the future awaited in it)."""
        if first is not None:
            first = first._replace(fut=DeliveryFuture(self._loop))
        fut = await self._enqueue_slow(first, topic, value, key, partition, timestamp_ms, headers, None)
        return await fut

    async def _send_traced(self, tracer: Tracer, topic: str, value: Any, key: Any, partition: int | None,
                           timestamp_ms: int | None, headers: Sequence[Header] | None) -> RecordMetadata:
        """``send`` inside the tracer's span, which ends at the acknowledgement."""
        span = tracer.start_send(self._trace_site, topic, key, partition, None, headers, tombstone=value is None,
                                 body_size=None)
        try:
            fut = self._enqueue_nowait(topic, value, key, partition, timestamp_ms, span.headers, None)
            if fut.__class__ is not DeliveryFuture:
                fut = await self._enqueue_slow(fut, topic, value, key, partition, timestamp_ms, span.headers, None)  # type: ignore[arg-type]
            md: RecordMetadata = await fut
        except BaseException as exc:
            span.end(error=exc)
            raise
        span.end(md)
        return md

    async def enqueue(self, topic: str, value: ValueT_contra | None = None, key: KeyT_contra | None = None, *,
                      partition: int | None = None,
                      timestamp_ms: int | None = None, headers: Sequence[Header] | None = None,
                      on_delivery: DeliveryCallback | None = None) -> DeliveryFuture:
        """Buffer one record; returns once it is buffered (waiting up to ``max_block_ms`` for space).

        The returned ``DeliveryFuture`` is a future of the running backend (``gather``, ``wait``,
        ``as_completed`` take it as it is). ``on_delivery(metadata, error)`` is called once, synchronously, when
        the record is acknowledged or fails: the cheapest way to learn every record's outcome.
        """
        tracer = self.hooks.tracer
        if tracer is not None:
            return await self._enqueue_traced(tracer, topic, value, key, partition, timestamp_ms, headers,
                                              on_delivery)
        fut = self._enqueue_nowait(topic, value, key, partition, timestamp_ms, headers, on_delivery)
        if fut.__class__ is DeliveryFuture:
            return fut
        return await self._enqueue_slow(fut, topic, value, key, partition, timestamp_ms, headers, on_delivery)  # type: ignore[arg-type]

    async def _enqueue_traced(self, tracer: Tracer, topic: str, value: Any, key: Any, partition: int | None,
                              timestamp_ms: int | None, headers: Sequence[Header] | None,
                              on_delivery: DeliveryCallback | None) -> DeliveryFuture:
        """``enqueue`` inside the tracer's span, which ends once the record is buffered."""
        raw = value if self._value_serializer is None and isinstance(value, (bytes, bytearray, memoryview)) else None
        span = tracer.start_send(self._trace_site, topic, key, partition, None, headers, tombstone=value is None,
                                 body_size=None if raw is None else memoryview(raw).nbytes)
        try:
            fut = self._enqueue_nowait(topic, value, key, partition, timestamp_ms, span.headers, on_delivery)
            if fut.__class__ is not DeliveryFuture:
                fut = await self._enqueue_slow(fut, topic, value, key, partition, timestamp_ms, span.headers,  # type: ignore[arg-type]
                                               on_delivery)
        except BaseException as exc:
            span.end(error=exc)
            raise
        span.end()
        return fut

    def _enqueue_nowait(self, topic: str, value: Any, key: Any, partition: int | None, timestamp_ms: int | None,
                        headers: Sequence[Header] | None, on_delivery: DeliveryCallback | None,
                        fut: DeliveryFuture | None = None) -> DeliveryFuture | _Blocked | None:
        """The per-record hot path, synchronous: buffer the record and return its future, or say why not.

        None: nothing was done (an event-loop turn is due, or the topic's metadata is not known yet), the
        caller awaits that and calls again. ``_Blocked``: the record is serialized and partitioned but
        ``buffer_memory`` is full; the caller waits for space with it. Errors for bad input raise here.
        """
        if self._yield_due:
            return None
        if not self._accepting or self._sender.fatal_error is not None:
            self._check_send()
        snapshot = self._cluster.metadata.snapshot
        placing = self._placing.get(topic)
        if placing is None or placing[0] is not snapshot:
            placing = self._placing_for(topic, snapshot)
            if placing is None:
                if partition is not None or timestamp_ms is not None:
                    _check_record_args(partition, timestamp_ms)    # bad input fails before waiting for metadata
                return None
        num = placing[1]
        if key is not None:
            if self._key_serializer is not None:
                key = self._key_serializer(key)
            if key.__class__ is not bytes:
                key = _as_bytes(key, "key")
        if value is not None:
            if self._value_serializer is not None:
                value = self._value_serializer(value)
            if value.__class__ is not bytes:
                value = _as_bytes(value, "value")
        hdrs = self._check_headers(headers) if headers else _NO_HEADERS
        partitioner = self._partitioner
        if partition.__class__ is int and 0 <= partition < num:
            sticky = False      # an explicit partition wins over keys and a custom partitioner (as in Java)
            p = partition
        elif partition.__class__ is int and partition >= num:
            return None         # not in this metadata: the caller asks the cluster again (just added?)
        elif partition is None and partitioner.custom is None and (key is None or partitioner.ignore_keys):
            sticky = True
            p = partitioner.sticky.current(topic, num, self._available_partitions(topic))
        else:                   # (an explicit partition that is not an int in range raises there, naming it)
            sticky = False
            p = partitioner.partition(topic, key, num, self._available_partitions(topic)
                                      if partitioner.custom is not None else (), partition)
        tp = placing[2][p]       # (p < num: the partitioner checks a custom choice)
        if timestamp_ms is None:
            timestamp_ms = _wall_time_ns() // 1_000_000
        elif timestamp_ms.__class__ is not int or timestamp_ms < 0:
            timestamp_ms = _checked_timestamp(timestamp_ms)
        acc = self._acc
        if fut is None and on_delivery is not None:
            # the batch calls on_delivery itself and holds no future: a caller that drops the one returned (the
            # delivery-callback idiom) leaves nothing per pending record for the collector (``Detached``)
            size = acc.try_append_open(tp, timestamp_ms, key, value, hdrs, on_delivery)
            if size:
                batch: ProducerBatch = acc.appended_to  # type: ignore[assignment]
                fut = detached_future(self._loop, on_delivery, batch.detached or batch.detach(),
                                      len(batch.singles) - 5)
            else:
                fut = DeliveryFuture(self._loop, on_delivery)
        else:
            if fut is None:                 # (given: a SendCall, the record's future itself)
                fut = DeliveryFuture(self._loop)
            size = acc.try_append_open(tp, timestamp_ms, key, value, hdrs, fut)
        if size:
            # joined an open batch: nothing changed that the sender waits for
            if sticky:
                partitioner.sticky.record_appended(topic, p, size, enable_switch=False)
            self._since_yield += size
            return fut
        result = acc.append(tp, timestamp_ms, key, value, hdrs, fut, now=self._cluster.clock())
        if not result.appended:
            return _Blocked(tp, timestamp_ms, key, value, hdrs, fut, result.needed_bytes, sticky)
        self._appended(result, tp, sticky)
        return fut

    async def _enqueue_slow(self, blocked: _Blocked | None, topic: str, value: Any, key: Any,
                            partition: int | None, timestamp_ms: int | None, headers: Sequence[Header] | None,
                            on_delivery: DeliveryCallback | None) -> DeliveryFuture:
        """What ``_enqueue_nowait`` could not do without waiting, within ``max_block_ms``."""
        deadline = self._cluster.clock() + self.config.max_block_ms
        while blocked is None:
            if self._yield_due:
                # Full batches are waiting for the sender, which cannot run while a caller enqueues in a loop
                # that never suspends: let it ship them. Done before buffering anything, so a cancellation
                # here leaves no record behind that the caller holds no future for.
                self._yield_due = False
                await anyio.lowlevel.checkpoint()
            elif _missing(self._cluster.metadata.snapshot.topics.get(topic), partition):
                self._check_send()
                self._check_topic(topic)
                await self._partitions(topic, deadline, partition)
            result = self._enqueue_nowait(topic, value, key, partition, timestamp_ms, headers, on_delivery)
            if result.__class__ is DeliveryFuture:
                return result
            blocked = result  # type: ignore[assignment]
        appended = await self._append_waiting(blocked.tp, blocked.timestamp_ms, blocked.key, blocked.value,
                                              blocked.headers, blocked.fut, blocked.needed, deadline)
        self._appended(appended, blocked.tp, blocked.sticky)
        return blocked.fut

    def _appended(self, result: AppendResult, tp: TopicPartition, sticky: bool) -> None:
        """Bookkeeping after ``acc.append`` took a record (sticky partitioner, sender wake-up, yields)."""
        if sticky:
            batch = result.batch
            self._partitioner.sticky.record_appended(tp.topic, tp.partition, result.needed_bytes,
                                                     enable_switch=batch is None or not batch.open)
        self._since_yield += result.needed_bytes
        if result.new_batch:
            # a new batch starts a linger timer, and closes the previous batch (now sendable): tell the sender;
            # appends into an open batch change nothing it waits for
            self._sender.wake()
            if result.batch_full and self._since_yield >= _YIELD_BYTES:
                self._since_yield = 0
                self._yield_due = True

    async def send_many(self, topic: str, records: Iterable[tuple[KeyT_contra | None, ValueT_contra | None]], *,
                        partition: int | None = None, headers: Sequence[Header] | None = None,
                        timestamp_ms: int | None = None, raise_on_error: bool = True) -> list[RecordMetadata]:
        """Send ``(key, value)`` pairs in one pass and wait for all of them.

        Returns metadata in input order. Every record of the call shares ``headers`` and ``timestamp_ms``
        (default: now). Records are checked first: a bad type or a record too large for ``max_request_size``
        / ``buffer_memory`` raises before anything of the call is buffered. The call returns (or raises) only
        once every buffered record was acknowledged or failed: with ``raise_on_error`` (default) the first
        failure is then raised, otherwise failed slots hold the exception instance.

        An error that stops buffering part-way (``BufferFullError`` when no space frees up within
        ``max_block_ms``, ``ClientClosedError``) is raised in either mode, once the records buffered before it
        completed; those are delivered, the rest fail with it, and ``error.results`` holds every record's
        outcome. Cancelling the call does not recall records already buffered.
        """
        sink = await self._traced_send_many(topic, records, partition, headers, timestamp_ms, False, raise_on_error)
        return sink.results  # type: ignore[return-value]

    async def send_many_counted(self, topic: str,
                                records: Iterable[tuple[KeyT_contra | None, ValueT_contra | None]], *,
                                partition: int | None = None, headers: Sequence[Header] | None = None,
                                timestamp_ms: int | None = None) -> BulkCounts:
        """``send_many`` for callers that only count: the same checks, placement and wait, but the outcome is
        a ``BulkCounts`` (records landed per partition, failed positions with their error) instead of a
        ``RecordMetadata`` per record, and failed records never raise.

        An error that stops buffering part-way is raised as in ``send_many``, with ``error.counts`` holding the
        outcome of every record of the call.
        """
        sink = await self._traced_send_many(topic, records, partition, headers, timestamp_ms, True, False)
        assert isinstance(sink, BulkCounts)
        return sink

    async def _traced_send_many(self, topic: str, records: Iterable[Any], partition: int | None,
                                headers: Sequence[Header] | None, timestamp_ms: int | None,
                                counted: bool, raise_on_error: bool) -> BulkCompletion:
        items = records if isinstance(records, list) else list(records)
        tracer = self.hooks.tracer
        if tracer is None:
            return await self._send_many(topic, items, partition, headers, timestamp_ms, counted, raise_on_error)
        span = tracer.start_send(self._trace_site, topic, None, partition, len(items), headers, tombstone=False,
                                 body_size=None)
        try:
            sink = await self._send_many(topic, items, partition, span.headers, timestamp_ms, counted,
                                         raise_on_error)
        except BaseException as exc:
            span.end(error=exc)
            raise
        span.end()
        return sink

    async def _send_many(self, topic: str, items: list[Any], partition: int | None,
                         headers: Sequence[Header] | None, timestamp_ms: int | None,
                         counted: bool, raise_on_error: bool) -> BulkCompletion:
        """The bulk send behind ``send_many`` (a ``BulkCompletion`` with a metadata per record) and
        ``send_many_counted`` (``counted``: a ``BulkCounts``); returns the completed sink, or raises its first
        error with ``raise_on_error``."""
        self._check_send()
        _check_record_args(partition, timestamp_ms)
        if not items:
            return BulkCounts(items) if counted else BulkCompletion(items)
        self._check_topic(topic)
        hdrs = self._check_headers(headers)
        items, max_kv, total_kv, null_keys, null_values = self._check_pairs(items)
        acc = self._acc
        per_record = RECORD_BASE_ESTIMATE + headers_size(hdrs)
        acc.check_record_size(per_record + max_kv, "send_many: the largest record")
        deadline = self._cluster.clock() + self.config.max_block_ms
        num = await self._partitions(topic, deadline, partition)
        # unkeyed runs visit a partition for one sticky unit at a time (by count, from the call's mean record
        # size), or for an even share of a large call: spread over partitions either way, and a large call
        # fills whole batches per visit instead of paying a switch every 16 KiB
        n = len(items)
        per_visit = max(1, -(-self._partitioner.sticky.unit * n // (per_record * n + total_kv)),
                        -(-n // max(1, len(self._available_partitions(topic)) or num)))
        done = anyio.Event()
        sink = (BulkCounts(items, done.set) if counted
                else BulkCompletion(items, done.set, null_keys=null_keys, null_values=null_values))
        ts = timestamp_ms if timestamp_ms is not None else _wall_time_ns() // 1_000_000
        partitioner = self._partitioner
        runs: list[tuple[int | None, range | list[int]]]
        if partition is not None:
            runs = [(partitioner.partition(topic, None, num, (), partition), range(len(items)))]
        elif partitioner.custom is not None or (null_keys < len(items) and not partitioner.ignore_keys):
            by_partition, unkeyed = partitioner.group(topic, [k for k, _ in items], num,
                                                      self._available_partitions(topic))
            runs = [(p, positions) for p, positions in by_partition.items()]
            if unkeyed:
                runs.append((None, unkeyed))
        else:
            runs = [(None, range(len(items)))]
        touched: set[TopicPartition] = set()
        error: BaseException | None = None
        try:
            for i, (p, positions) in enumerate(runs):
                try:
                    await self._append_run(topic, num, p, items, positions, ts, hdrs, sink, deadline, touched,
                                           per_visit)
                except errors.KafkaError as exc:
                    # the rest of the call cannot be buffered: fail it; what is buffered is still delivered
                    error = exc
                    for _, rest in runs[i + 1:]:
                        sink.fail_range(rest, exc)
                    break
        finally:
            acc.expedite(touched)
            self._sender.wake()
        if not sink.done:
            await done.wait()
        if error is not None:
            if isinstance(sink, BulkCounts):
                error.counts = sink   # type: ignore[attr-defined]
            else:
                error.results = sink.results   # type: ignore[attr-defined]
            raise error
        if raise_on_error and sink.first_error is not None:
            raise sink.first_error
        return sink

    async def _append_run(self, topic: str, num: int, partition: int | None,
                          items: list[tuple[bytes | None, bytes | None]], positions: range | list[int], ts: int,
                          headers: list[Header], sink: BulkCompletion, deadline: float,
                          touched: set[TopicPartition], per_visit: int) -> None:
        """Buffer ``items[j]`` for ``j`` in ``positions`` into ``partition`` (None: sticky, at most ``per_visit``
        records per visit to a partition, so the sticky partitioner can switch at its unit), waiting for memory
        within ``deadline``. On an error the records not buffered are failed in ``sink`` before it propagates.

        Yields to the event loop every ``_YIELD_BYTES`` at a batch boundary, so the sender ships full
        batches while the rest of a large call is still being encoded.
        """
        acc, partitioner, clock = self._acc, self._partitioner, self._cluster.clock
        sticky = partitioner.sticky
        waiter = None
        # the records of this run as one list parallel to ``positions`` (a copy only for scattered runs)
        run = items if positions.__class__ is range and len(positions) == len(items) \
            else list(map(items.__getitem__, positions))
        pos, total = 0, len(positions)
        since_yield = 0
        while pos < total:
            if partition is None:
                p = sticky.current(topic, num, self._available_partitions(topic))
                stop = min(total, pos + per_visit)
            else:
                p = partition
                stop = total
            tp = TopicPartition(topic, p)
            touched.add(tp)
            try:
                res = acc.append_many(tp, run, positions, pos, ts, headers, sink, now=clock(), waiter=waiter,
                                      stop_when_full=True, stop=stop)
            except errors.KafkaError as exc:
                sink.fail_range(positions[pos:], exc)
                raise
            waiter = None
            pos += res.appended
            if partition is None and (res.appended or res.batch_closed):
                sticky.record_appended(topic, p, res.appended_bytes, enable_switch=res.batch_closed)
            if res.new_batches or res.batch_closed:
                self._sender.wake()
            since_yield += res.appended_bytes
            if res.needed_bytes:
                since_yield = 0
                try:
                    waiter = await self._wait_for_space(res.needed_bytes, deadline)
                except errors.KafkaError as exc:
                    sink.fail_range(positions[pos:], exc)
                    raise
            elif res.batch_closed and since_yield >= _YIELD_BYTES and pos < total:
                since_yield = 0
                await anyio.lowlevel.checkpoint()

    async def _wait_for_space(self, needed: int, deadline: float) -> SpaceWaiter:
        """Queue for ``needed`` bytes of ``buffer_memory``; BufferFullError once ``max_block_ms`` elapsed."""
        acc = self._acc
        event = anyio.Event()
        waiter = acc.wait_for_space(needed, event.set)
        self._sender.wake()        # space comes from sending: make sure the sender is not lingering
        try:
            with anyio.move_on_after(max(0.0, deadline - self._cluster.clock()) / 1000.0):
                await event.wait()
        except BaseException:
            acc.cancel_wait(waiter)      # cancelled: a forgotten waiter would block every appender behind it
            raise
        if not event.is_set():
            acc.cancel_wait(waiter)
            raise errors.BufferFullError(
                f"no room for a {needed}-byte record in buffer_memory ({self.config.buffer_memory} bytes) "
                f"within max_block_ms ({self.config.max_block_ms} ms)")
        try:
            self._check_open()
        except BaseException:
            acc.cancel_wait(waiter)
            raise
        return waiter

    # ------------------------------------------------------------------ internals
    def _check_topic(self, topic: str) -> None:
        if topic not in self._checked_topics:
            check_topic_name(topic)
            self._checked_topics.add(topic)

    @staticmethod
    def _check_headers(headers: Sequence[Header] | None) -> list[Header]:
        """Headers as the list the encoder wants; TypeError naming the first bad one."""
        if not headers:
            return _NO_HEADERS
        for h in headers:
            if (h.__class__ is not tuple or len(h) != 2 or h[0].__class__ is not str
                    or not (h[1] is None or isinstance(h[1], (bytes, bytearray)))):
                raise TypeError(f"headers must be (str, bytes | None) pairs, got {h!r}")
        return headers if headers.__class__ is list else list(headers)

    def _check_pairs(self, items: list[Any]) -> tuple[list[tuple[bytes | None, bytes | None]], int, int, int, int]:
        """Serialize and type-check ``send_many``'s records without touching the caller's list.

        Returns the records as ``(bytes | None, bytes | None)`` tuples, the largest ``len(key) + len(value)``
        (for the record-too-large check), their sum, and the numbers of null keys and null values.
        """
        ks, vs = self._key_serializer, self._value_serializer
        out: list[tuple[bytes | None, bytes | None]] | None = None
        biggest = total = 0
        null_keys = null_values = 0
        for i, item in enumerate(items):
            if item.__class__ is tuple and len(item) == 2:
                key, value = item
            else:
                try:
                    key, value = item
                except (TypeError, ValueError):
                    raise TypeError(f"send_many: record {i} must be a (key, value) pair, got {item!r}") from None
                if out is None:
                    out = items[:i]
            fixed = False
            if key is not None:
                if ks is not None:
                    key, fixed = ks(key), True
                if key.__class__ is not bytes:
                    key, fixed = _as_bytes(key, "key", i), True
                size = len(key)
            else:
                size = 0
                null_keys += 1
            if value is not None:
                if vs is not None:
                    value, fixed = vs(value), True
                if value.__class__ is not bytes:
                    value, fixed = _as_bytes(value, "value", i), True
                size += len(value)
            else:
                null_values += 1
            total += size
            if size > biggest:
                biggest = size
            if fixed and out is None:
                out = items[:i]
            if out is not None:
                out.append((key, value))
        return (out if out is not None else items), biggest, total, null_keys, null_values

    def _load_stats(self, topic: str) -> tuple[tuple[int, ...], list[int]] | None:
        """Queue sizes of ``topic``'s partitions with a leader, for adaptive sticky placement (KIP-794)."""
        available = self._available_partitions(topic)
        if len(available) < 2:
            return None
        return available, self._acc.queue_sizes(topic, available)

    def _placing_for(self, topic: str, snapshot: Any) -> tuple[Any, int, list[TopicPartition]] | None:
        """``_placing``'s entry for ``topic`` under ``snapshot``; None while the snapshot does not know the topic.
        The topic's name is checked here, once (``InvalidTopicError``)."""
        parts = snapshot.topics.get(topic)
        if not parts:
            return None
        self._check_topic(topic)
        num = len(parts)
        stale = self._placing.get(topic)
        if stale is not None and len(stale[2]) >= num:
            tps = stale[2]            # the snapshot changed, the topic's partitions did not grow
        else:
            tps = [TopicPartition(topic, i) for i in range(num)]
        placing = self._placing[topic] = (snapshot, num, tps)
        return placing

    def _available_partitions(self, topic: str) -> tuple[int, ...]:
        """Partitions of ``topic`` with a leader, recomputed only when the metadata snapshot changes."""
        snapshot = self._cluster.metadata.snapshot
        cached = self._available.get(topic)
        if cached is None or cached[0] is not snapshot:
            cached = self._available[topic] = (snapshot, snapshot.available_partitions(topic))
        return cached[1]

    async def _partitions(self, topic: str, deadline: float, partition: int | None = None) -> int:
        """Partition count of ``topic``, fetching metadata (within ``max_block_ms``) on first use. An explicit
        ``partition`` beyond the cached count is checked against metadata asked for now: one just added
        (CreatePartitions) is found there; one still missing is refused with ``ValueError`` at once, as bad input.
        A topic not cached yet is asked for now too, so its first answer settles the partition the same way."""
        snapshot = self._cluster.metadata.snapshot
        parts = snapshot.topics.get(topic)
        if not _missing(parts, partition):
            return len(parts)  # type: ignore[arg-type]
        self._cluster.add_topics([topic])
        asked: int | None = None
        if parts:
            self._cluster.request_metadata_refresh("partition not in metadata")
            asked = self._cluster.metadata.request_version

        def known() -> bool:
            cache = self._cluster.metadata
            snap = cache.snapshot
            if snap.topic_errors.get(topic) in _UNKNOWN_TOPIC_ERRORS:
                return True
            now_known = snap.topics.get(topic)
            if not _missing(now_known, partition):
                return True
            return cache.answered(asked) if asked is not None else bool(now_known)

        try:
            await self._cluster.wait_for_metadata(timeout_ms=max(0.0, deadline - self._cluster.clock()),
                                                  until=known)
        except TimeoutError:
            raise errors.KafkaTimeoutError(
                f"topic {topic!r} not present in metadata after max_block_ms ({self.config.max_block_ms} ms)"
                if not parts else f"no Metadata answer within max_block_ms ({self.config.max_block_ms} ms) to "
                f"check partition {partition} of topic {topic!r} (it has {len(parts)} in the cached metadata)"
            ) from None
        snap = self._cluster.metadata.snapshot
        code = snap.topic_errors.get(topic)
        if code in _UNKNOWN_TOPIC_ERRORS:
            raise errors.error_for_code(code)(f"topic {topic!r}")
        now_known = snap.topics[topic]
        if _missing(now_known, partition):
            raise ValueError(f"partition {partition} given for topic {topic!r} is not in [0, {len(now_known)}) "
                             f"(metadata asked for just now)")
        return len(now_known)

    async def _append_waiting(self, tp: TopicPartition, timestamp_ms: int, key: bytes | None, value: bytes | None,
                              headers: list[Header], fut: DeliveryFuture, needed: int, deadline: float) -> AppendResult:
        """The slow path of ``enqueue``: wait (FIFO, up to ``deadline``) until ``buffer_memory`` has room."""
        acc, clock = self._acc, self._cluster.clock
        while True:
            waiter = await self._wait_for_space(needed, deadline)
            result = acc.append(tp, timestamp_ms, key, value, headers, fut, now=clock(), waiter=waiter)
            if result.appended:
                return result
            needed = result.needed_bytes

    # ------------------------------------------------------------------ introspection
    def partitions_for(self, topic: str) -> tuple[int, ...]:
        return self._cluster.metadata.snapshot.partitions_for(topic)

    async def fetch_partitions(self, topic: str) -> tuple[int, ...]:
        """``partitions_for``, asking the brokers first when the producer does not know ``topic`` yet (within
        ``max_block_ms``; an unknown topic raises as a send would), as Java's ``partitionsFor`` does: a caller
        that knows its topic before it has records (a Spark write task waiting for its input) gets the metadata
        round trip out of the way of the first send."""
        self._check_open()
        self._check_topic(topic)
        await self._partitions(topic, self._cluster.clock() + self.config.max_block_ms)
        return self.partitions_for(topic)

    @property
    def buffered_bytes(self) -> int:
        return self._acc.buffered_bytes
