"""The producer: ``send`` (wait for delivery), ``enqueue`` (wait for buffer space only), ``send_many`` (bulk).

Records go through the core accumulator (KIP-91 delivery deadlines, ``buffer_memory`` backpressure) and are
sent by the scheduler task (``net.scheduler.Sender``).  Idempotence is on by default, as in the Java client
since 3.0: a producer id from InitProducerId and per-partition sequence numbers make retries safe.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from typing import Any, Callable, Generator, Iterable, Sequence

import anyio

from . import errors
from .config import resolve
from .core.accumulator import RecordAccumulator
from .core.events import Hooks
from .core.partitioner import DefaultPartitioner
from .net.cluster import Cluster
from .net.scheduler import Sender
from .types import Header, RecordMetadata, TopicPartition

log = logging.getLogger(__name__)

_EXTRA_KEYS = ("key_serializer", "value_serializer", "hooks")
_UNKNOWN_TOPIC_ERRORS = {errors.InvalidTopicError.errno, errors.TopicAuthorizationFailedError.errno}


class DeliveryFuture:
    """Completion of one record. ``await fut`` returns its ``RecordMetadata`` or raises its error.

    Cheaper than an asyncio future (no loop call per record) and backend-neutral: the event that wakes an
    awaiting task is only created when somebody awaits before completion.
    """

    __slots__ = ("_metadata", "_error", "_done", "_event")

    def __init__(self) -> None:
        self._metadata: RecordMetadata | None = None
        self._error: BaseException | None = None
        self._done = False
        self._event: anyio.Event | None = None

    def __call__(self, metadata: RecordMetadata | None, error: BaseException | None) -> None:
        """The core's record callback."""
        self._metadata, self._error, self._done = metadata, error, True
        if self._event is not None:
            self._event.set()

    def done(self) -> bool:
        return self._done

    def result(self) -> RecordMetadata:
        if not self._done:
            raise errors.IllegalStateError("record not delivered yet")
        if self._error is not None:
            raise self._error
        assert self._metadata is not None
        return self._metadata

    def exception(self) -> BaseException | None:
        return self._error if self._done else None

    async def wait(self) -> RecordMetadata:
        if not self._done:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        return self.result()

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        return self.wait().__await__()


class _Bulk:
    """Shared completion state of one ``send_many`` call: one event for all its records."""

    __slots__ = ("results", "pending", "event", "first_error")

    def __init__(self, n: int) -> None:
        self.results: list[RecordMetadata | BaseException | None] = [None] * n
        self.pending = n
        self.event = anyio.Event()
        self.first_error: BaseException | None = None

    def callback(self, index: int) -> Callable[[RecordMetadata | None, BaseException | None], None]:
        def done(metadata: RecordMetadata | None, error: BaseException | None) -> None:
            self.results[index] = metadata if error is None else error
            if error is not None and self.first_error is None:
                self.first_error = error
            self.pending -= 1
            if self.pending == 0:
                self.event.set()
        return done


class Producer:
    """Async Kafka producer. Use as ``async with Producer(bootstrap_servers=...) as producer``.

    Keyword arguments are Kafka's producer configs in snake_case (see ``akresil.config``), plus
    ``key_serializer`` / ``value_serializer`` (callables to bytes) and ``hooks`` (event hook objects).
    """

    def __init__(self, **config: Any) -> None:
        self.config = cfg = resolve("producer", config, extra=_EXTRA_KEYS)
        self._key_serializer = config.get("key_serializer")
        self._value_serializer = config.get("value_serializer")
        for name in ("key_serializer", "value_serializer"):
            if config.get(name) is not None and not callable(config[name]):
                raise errors.ConfigError(f"{name}: must be callable, got {type(config[name]).__name__}")
        self.hooks = Hooks(config.get("hooks") or ())
        if cfg.metrics_registry is not None:
            from .metrics import ClientMetrics
            self.hooks.add(ClientMetrics(cfg.metrics_registry, client_id=cfg.client_id, kind="producer"))
        self._cluster = Cluster(cfg, hooks=self.hooks)
        self._acc = RecordAccumulator(
            batch_size=cfg.batch_size, linger_ms=cfg.linger_ms, delivery_timeout_ms=cfg.delivery_timeout_ms,
            request_timeout_ms=cfg.request_timeout_ms, buffer_memory=cfg.buffer_memory,
            retry_backoff_ms=cfg.retry_backoff_ms, retry_backoff_max_ms=cfg.retry_backoff_max_ms,
            max_in_flight=cfg.max_in_flight_requests_per_connection, enable_idempotence=cfg.enable_idempotence,
            max_request_size=cfg.max_request_size, compression_type=cfg.compression_type,
            rng=self._cluster.rng, hooks=self.hooks)
        self._partitioner = DefaultPartitioner(cfg.batch_size, partitioner=cfg.partitioner,
                                               ignore_keys=cfg.partitioner_ignore_keys, rng=self._cluster.rng)
        self._sender = Sender(self._cluster, self._acc, cfg)
        self._tg: anyio.abc.TaskGroup | None = None
        self._started = False
        self._closed = False
        self._checked_topics: set[str] = set()
        #: per topic: (metadata snapshot, its partitions with a leader) — recomputed when the snapshot changes
        self._available: dict[str, tuple[Any, tuple[int, ...]]] = {}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._started:
            raise errors.IllegalStateError("producer already started")
        self._started = True
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            await self._cluster.start(self._tg)
            await self._tg.start(self._sender.run)
        except BaseException:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
            self._tg = None
            self._closed = True
            raise

    async def __aenter__(self) -> "Producer":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:
        """Deliver or fail every pending record, then release connections and tasks.

        Without ``timeout`` it waits until every record is acknowledged or fails (bounded by
        ``delivery_timeout_ms``); after ``timeout`` seconds the rest fail with ``ClientClosedError``.
        """
        if self._closed:
            return
        self._closed = True
        if self._tg is None:
            return
        self._acc.close()
        self._sender.wake()
        with anyio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
            await self._wait_all_done()
        if scope.cancelled_caught and self._acc.incomplete_batches:
            self._acc.abort(errors.ClientClosedError(f"producer closed with records pending after {timeout} s"))
        self._sender.stop()
        await self._cluster.close()
        tg, self._tg = self._tg, None
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)

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
        if not self._started:
            raise errors.IllegalStateError("producer not started: use 'async with Producer(...)' or await start()")
        if self._closed:
            raise errors.ClientClosedError("producer is closed")
        if self._sender.fatal_error is not None:
            raise self._sender.fatal_error

    # ------------------------------------------------------------------ sending
    async def send(self, topic: str, value: Any = None, key: Any = None, *, partition: int | None = None,
                   timestamp_ms: int | None = None, headers: Sequence[Header] | None = None) -> RecordMetadata:
        """Send one record and wait for its acknowledgement."""
        fut = await self.enqueue(topic, value, key, partition=partition, timestamp_ms=timestamp_ms,
                                 headers=headers)
        if not fut.done():
            self._sender.wake()
        return await fut

    async def enqueue(self, topic: str, value: Any = None, key: Any = None, *, partition: int | None = None,
                      timestamp_ms: int | None = None, headers: Sequence[Header] | None = None) -> DeliveryFuture:
        """Buffer one record; returns once it is buffered (waiting up to ``max_block_ms`` for space)."""
        self._check_open()
        key_b, value_b, hdrs = self._serialize(topic, key, value, headers)
        deadline = self._cluster.clock() + self.config.max_block_ms
        num = await self._partitions(topic, deadline)
        fut = DeliveryFuture()
        await self._append(topic, num, partition, key_b, value_b, hdrs,
                           timestamp_ms if timestamp_ms is not None else int(time.time() * 1000), fut, deadline)
        return fut

    async def send_many(self, topic: str, records: Iterable[tuple[Any, Any]], *,
                        partition: int | None = None, headers: Sequence[Header] | None = None,
                        raise_on_error: bool = True) -> list[RecordMetadata]:
        """Send ``(key, value)`` pairs in one pass and wait for all of them.

        Returns metadata in input order. With ``raise_on_error`` (default) the first failure is raised after
        every record completed; otherwise failed slots hold the exception instance.
        """
        self._check_open()
        items = records if isinstance(records, list) else list(records)
        if not items:
            return []
        deadline = self._cluster.clock() + self.config.max_block_ms
        num = await self._partitions(topic, deadline)
        bulk = _Bulk(len(items))
        now_ms = int(time.time() * 1000)
        hdrs_base = headers
        for i, item in enumerate(items):
            try:
                key, value = item
            except (TypeError, ValueError):
                raise TypeError(f"send_many: record {i} must be a (key, value) pair, got {item!r}") from None
            key_b, value_b, hdrs = self._serialize(topic, key, value, hdrs_base)
            await self._append(topic, num, partition, key_b, value_b, hdrs, now_ms, bulk.callback(i), deadline)
        self._sender.wake()
        await bulk.event.wait()
        if raise_on_error and bulk.first_error is not None:
            raise bulk.first_error
        return bulk.results  # type: ignore[return-value]

    # ------------------------------------------------------------------ internals
    def _serialize(self, topic: str, key: Any, value: Any,
                   headers: Sequence[Header] | None) -> tuple[bytes | None, bytes | None, Sequence[Header]]:
        if topic not in self._checked_topics:
            from .admin import check_topic_name as _check_topic_name
            _check_topic_name(topic)
            self._checked_topics.add(topic)
        if self._key_serializer is not None and key is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None and value is not None:
            value = self._value_serializer(value)
        if key is not None and type(key) is not bytes:
            if isinstance(key, (bytearray, memoryview)):
                key = bytes(key)
            else:
                raise TypeError(f"key must be bytes or None (got {type(key).__name__}); "
                                "pass key_serializer= to convert it")
        if value is not None and type(value) is not bytes:
            if isinstance(value, (bytearray, memoryview)):
                value = bytes(value)
            else:
                raise TypeError(f"value must be bytes or None (got {type(value).__name__}); "
                                "pass value_serializer= to convert it")
        if headers:
            for h in headers:
                if (not isinstance(h, tuple) or len(h) != 2 or not isinstance(h[0], str)
                        or not (h[1] is None or isinstance(h[1], (bytes, bytearray)))):
                    raise TypeError(f"headers must be (str, bytes | None) pairs, got {h!r}")
            return key, value, headers
        return key, value, ()

    async def _partitions(self, topic: str, deadline: float) -> int:
        """Partition count of ``topic``, fetching metadata (within ``max_block_ms``) on first use."""
        snapshot = self._cluster.metadata.snapshot
        parts = snapshot.topics.get(topic)
        if parts:
            return len(parts)
        self._cluster.add_topics([topic])

        def known() -> bool:
            snap = self._cluster.metadata.snapshot
            if snap.topic_errors.get(topic) in _UNKNOWN_TOPIC_ERRORS:
                return True
            return bool(snap.topics.get(topic))

        try:
            await self._cluster.wait_for_metadata(timeout_ms=max(0.0, deadline - self._cluster.clock()),
                                                  until=known)
        except TimeoutError:
            raise errors.KafkaTimeoutError(
                f"topic {topic!r} not present in metadata after max_block_ms ({self.config.max_block_ms} ms)"
            ) from None
        snap = self._cluster.metadata.snapshot
        code = snap.topic_errors.get(topic)
        if code in _UNKNOWN_TOPIC_ERRORS:
            raise errors.error_for_code(code)(f"topic {topic!r}")
        return len(snap.topics[topic])

    async def _append(self, topic: str, num: int, partition: int | None, key: bytes | None,
                      value: bytes | None, headers: Sequence[Header], timestamp_ms: int,
                      callback: Callable[[RecordMetadata | None, BaseException | None], None],
                      deadline: float) -> None:
        cluster, acc, partitioner = self._cluster, self._acc, self._partitioner
        if partition is None and key is None:
            snapshot = cluster.metadata.snapshot
            cached = self._available.get(topic)
            if cached is None or cached[0] is not snapshot:
                cached = self._available[topic] = (snapshot, snapshot.available_partitions(topic))
            p = partitioner.partition(topic, None, num, cached[1], None)
        else:
            p = partitioner.partition(topic, key, num, (), partition)
        tp = TopicPartition(topic, p)
        result = acc.append(tp, timestamp_ms, key, value, headers, callback, now=cluster.clock())
        waiter = None
        while not result.appended:
            event = anyio.Event()
            waiter = acc.wait_for_space(result.needed_bytes, event.set)
            remaining = deadline - cluster.clock()
            with anyio.move_on_after(max(0.0, remaining) / 1000.0):
                await event.wait()
            if not event.is_set():
                acc.cancel_wait(waiter)
                raise errors.BufferFullError(
                    f"no room for a {result.needed_bytes}-byte record in buffer_memory "
                    f"({self.config.buffer_memory} bytes) within max_block_ms ({self.config.max_block_ms} ms)")
            self._check_open()
            result = acc.append(tp, timestamp_ms, key, value, headers, callback, now=cluster.clock(),
                                waiter=waiter)
        if partitioner.uses_sticky(key, partition):
            batch = result.batch
            partitioner.record_appended(topic, p, result.needed_bytes,
                                        enable_switch=batch is None or not batch.open)
        if result.new_batch or result.batch_full:
            self._sender.wake()

    # ------------------------------------------------------------------ introspection
    def partitions_for(self, topic: str) -> tuple[int, ...]:
        return self._cluster.metadata.snapshot.partitions_for(topic)

    @property
    def buffered_bytes(self) -> int:
        return self._acc.buffered_bytes
