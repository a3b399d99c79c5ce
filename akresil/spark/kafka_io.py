"""The I/O shell of the Spark source: akresil clients driven from Spark's synchronous Python callbacks.

Spark calls a data source from plain (blocking) Python: driver-side planning in short-lived planner
processes, tasks in executor worker processes that Spark reuses for task after task. Driver-side look-ups
use ``anyio.run`` and keep nothing. Tasks use the worker's ``WorkerClients``: one event-loop thread per
worker process and one Producer / Consumer per distinct configuration, kept from one task to the next, so
a job's second task on a worker pays neither a connection set-up nor a metadata round trip.

A read task asks the loop thread for Arrow batches one ahead: while Spark ships batch *k* to the JVM, the
loop thread fetches and builds batch *k + 1* (``RangeReader``), so the task thread only hands batches over.
At the end of a task the consumer is unassigned (its buffers dropped) and kept; a task that fails drops
its client (closed at once), so a client in an unknown state never serves the next task. Clients idle for
``IDLE_CLOSE_S`` are closed by the loop thread, and whatever is left closes at interpreter exit. Spark's
forking worker daemon ends workers with ``os._exit`` (no ``atexit``); then the operating system closes the
sockets, and nothing is lost, since every write task returned only after all its records were acknowledged.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterator, Mapping, Sequence, TypeVar

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from .. import errors
from ..checks import EARLIEST as LIST_EARLIEST, LATEST as LIST_LATEST
from ..config import OPTIONS_BY_NAME
from ..types import TopicPartition
from .offsets import DataLossError, OffsetRange
from .options import Subscription
from .schema import records_to_batch

T = TypeVar("T")

if TYPE_CHECKING:
    import pyarrow as pa

    from ..admin import Admin
    from ..consumer import Consumer

__all__ = ["PartitionSnapshot", "snapshot", "offsets_for_times", "read_range", "read_ranges", "admin_config",
           "ClientStats",
           "WorkerClients", "worker_clients", "close_worker_clients", "RangeReader", "HeldConsumerReader"]

#: rows per Arrow batch handed to Spark (Spark's own default for Arrow batches is 10 000)
BATCH_ROWS = 10_000
#: a cached client unused for this long is closed by the worker's loop thread
IDLE_CLOSE_S = 120.0


def admin_config(client: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of a producer/consumer configuration an Admin client accepts."""
    return {k: v for k, v in client.items() if "admin" in OPTIONS_BY_NAME[k].clients}


class ClientStats:
    """Hook on a cached client: what the resilience layer did, as counters a task reads before and after.

    ``retries`` batch retries, ``skip_backoff_retries`` the retries that went at once after a KIP-951 leader
    hint, ``leader_hints`` hints accepted, ``throttled`` / ``throttle_ms`` KIP-219 throttles."""

    FIELDS = ("retries", "skip_backoff_retries", "leader_hints", "throttled", "throttle_ms")

    def __init__(self) -> None:
        self.retries = self.skip_backoff_retries = self.leader_hints = self.throttled = 0
        self.throttle_ms = 0.0

    def on_batch_retry(self, skip_backoff: bool = False, **_: Any) -> None:
        self.retries += 1
        self.skip_backoff_retries += bool(skip_backoff)

    def on_leader_hint(self, accepted: bool = False, **_: Any) -> None:
        self.leader_hints += bool(accepted)

    def on_throttled(self, throttle_ms: float = 0, **_: Any) -> None:
        self.throttled += 1
        self.throttle_ms += throttle_ms

    def snapshot(self) -> dict[str, float]:
        return {f: getattr(self, f) for f in self.FIELDS}

    def since(self, before: Mapping[str, float]) -> dict[str, float]:
        return {f: getattr(self, f) - before[f] for f in self.FIELDS}


class _Cached:
    __slots__ = ("client", "stats", "context", "last_used", "busy", "mark")

    def __init__(self, client: Any, stats: ClientStats, context: Any) -> None:
        self.client, self.stats, self.context = client, stats, context
        self.last_used = time.monotonic()
        self.busy = False
        #: the stats when the current lease began (zeros for a new client: its start-up is the task's)
        self.mark = ClientStats().snapshot()


class WorkerClients:
    """This process's event-loop thread and the clients tasks share, keyed by kind and configuration.

    Spark runs one task at a time in a Python worker, so a client is leased to one task at a time
    (``lease``/``release``); a second concurrent lease of the same configuration (tasks run directly in
    threads, as tests do) gets a client of its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._portal_cm: Any = None
        self._portal: BlockingPortal | None = None
        self._clients: dict[tuple[str, str], list[_Cached]] = {}
        self._stop = threading.Event()

    @property
    def portal(self) -> BlockingPortal:
        with self._lock:
            if self._portal is None:
                self._portal_cm = start_blocking_portal()
                self._portal = self._portal_cm.__enter__()
                threading.Thread(target=self._close_idle, name="akresil-spark-idle", daemon=True).start()
            return self._portal

    def lease(self, kind: str, config: Mapping[str, Any]) -> _Cached:
        """A started client of ``kind`` ("producer"/"consumer"/"admin") for ``config``, reused when one is
        free."""
        key = (kind, repr(sorted(config.items())))
        portal = self.portal
        with self._lock:
            for entry in self._clients.get(key, ()):
                if not entry.busy:
                    entry.busy = True
                    entry.mark = entry.stats.snapshot()
                    return entry
        stats = ClientStats()
        client: Any
        # each client's modules load on first use: a Python worker Spark starts for a write imports the producer
        # alone, a reader the consumer (0.1-0.2 s of imports each, paid in every worker process Spark starts)
        if kind == "admin":
            from ..admin import Admin
            client = Admin(**config)
        elif kind == "producer":
            from ..producer import Producer
            client = Producer(**config, hooks=[stats])
        else:
            from ..consumer import Consumer
            client = Consumer(**config, hooks=[stats])
        context = portal.wrap_async_context_manager(client)
        context.__enter__()
        entry = _Cached(client, stats, context)
        entry.busy = True
        with self._lock:
            self._clients.setdefault(key, []).append(entry)
        return entry

    def release(self, entry: _Cached, *, healthy: bool) -> None:
        """Hand ``entry`` back after a task; an unhealthy one (the task failed) is closed, not reused."""
        entry.last_used = time.monotonic()
        if healthy:
            entry.busy = False
            return
        self._forget(entry)
        _exit_quietly(entry)

    def _forget(self, entry: _Cached) -> None:
        with self._lock:
            for entries in self._clients.values():
                if entry in entries:
                    entries.remove(entry)

    def _close_idle(self) -> None:
        """Close clients no task used for ``IDLE_CLOSE_S`` (a thread of its own: closing blocks on the loop)."""
        while not self._stop.wait(IDLE_CLOSE_S / 4):
            now = time.monotonic()
            with self._lock:
                idle = [e for es in self._clients.values() for e in es
                        if not e.busy and now - e.last_used > IDLE_CLOSE_S]
                for es in self._clients.values():
                    es[:] = [e for e in es if e not in idle]
            for entry in idle:
                _exit_quietly(entry)

    def client_count(self) -> int:
        with self._lock:
            return sum(len(es) for es in self._clients.values())

    def close(self) -> None:
        """Close every client, then stop the loop thread (at interpreter exit, or explicitly)."""
        if os.getpid() != self._pid:
            return          # a forked child never touches the parent's thread or sockets
        with self._lock:
            entries = [e for es in self._clients.values() for e in es]
            self._clients.clear()
            cm, self._portal_cm, self._portal = self._portal_cm, None, None
        self._stop.set()
        for entry in entries:
            _exit_quietly(entry)
        if cm is not None:
            cm.__exit__(None, None, None)


def _exit_quietly(entry: _Cached) -> None:
    try:
        entry.context.__exit__(None, None, None)
    except Exception:  # noqa: BLE001 - closing a failed client may raise its failure again
        pass


_worker: WorkerClients | None = None
_worker_lock = threading.Lock()


def worker_clients() -> WorkerClients:
    """This process's ``WorkerClients`` (a forked child gets its own, never its parent's)."""
    global _worker
    with _worker_lock:
        if _worker is None or _worker._pid != os.getpid():
            _worker = WorkerClients()
            atexit.register(_worker.close)
        return _worker


def close_worker_clients() -> None:
    """Close this process's cached clients and their loop thread now (they reopen on next use)."""
    global _worker
    with _worker_lock:
        worker, _worker = _worker, None
    if worker is not None:
        worker.close()


class PartitionSnapshot:
    """Partitions of a subscription with their earliest and latest offsets at one moment."""

    __slots__ = ("partitions", "earliest", "latest")

    def __init__(self, partitions: list[TopicPartition], earliest: dict[TopicPartition, int],
                 latest: dict[TopicPartition, int]) -> None:
        self.partitions = partitions
        self.earliest = earliest
        self.latest = latest


def snapshot(config: Mapping[str, Any], subscription: Subscription, *, allow_missing: bool,
             cached: bool = False) -> PartitionSnapshot:
    """Blocking: the subscription's partitions and their offset bounds (ListOffsets via the leaders).

    ``allow_missing``: a subscribed topic that does not exist yet has no partitions (streams wait for it);
    otherwise it is an error naming the topic. ``cached``: ask through this process's long-lived Admin (the
    stream reader's process asks at every trigger, as Spark's Kafka source keeps its admin client) instead of
    a new one that connects, looks up metadata and closes each time.
    """
    if not cached:
        return anyio.run(_snapshot, dict(config), subscription, allow_missing)
    worker = worker_clients()
    entry = worker.lease("admin", admin_config(config))
    healthy = False
    try:
        snap: PartitionSnapshot = worker.portal.call(_snapshot_with, entry.client, subscription, allow_missing,
                                                     config.get("isolation_level", "read_uncommitted"))
        healthy = True
        return snap
    finally:
        worker.release(entry, healthy=healthy)


async def _snapshot(config: dict[str, Any], subscription: Subscription, allow_missing: bool) -> PartitionSnapshot:
    from ..admin import Admin
    async with Admin(**admin_config(config)) as admin:
        return await _snapshot_with(admin, subscription, allow_missing,
                                    config.get("isolation_level", "read_uncommitted"))


async def _snapshot_with(admin: Admin, subscription: Subscription, allow_missing: bool, level: str
                         ) -> PartitionSnapshot:
    tps = await _partitions(admin, subscription, allow_missing)
    if not tps:
        return PartitionSnapshot([], {}, {})
    # both bounds at once (one round trip per leader instead of two: the stream reader asks at every trigger)
    found: dict[int, Mapping[TopicPartition, Any]] = {}

    async def bound(spec: int) -> None:
        found[spec] = await admin.list_offsets({tp: spec for tp in tps}, isolation_level=level)

    async with anyio.create_task_group() as tg:
        tg.start_soon(bound, LIST_EARLIEST)
        tg.start_soon(bound, LIST_LATEST)
    late = {tp: found[LIST_LATEST][tp][0] for tp in tps}
    # asked together, the earliest may be taken after the latest: never above it (records deleted meanwhile are
    # found as lost when read)
    return PartitionSnapshot(tps, {tp: min(found[LIST_EARLIEST][tp][0], late[tp]) for tp in tps}, late)


def offsets_for_times(config: Mapping[str, Any], timestamps: Mapping[TopicPartition, int]
                      ) -> dict[TopicPartition, int | None]:
    """Blocking: per partition, the first offset whose timestamp is at or after the given one (ListOffsets
    by timestamp); None where no record is that recent."""
    if not timestamps:
        return {}
    return anyio.run(_offsets_for_times, dict(config), dict(timestamps))


async def _offsets_for_times(config: dict[str, Any], timestamps: dict[TopicPartition, int]
                             ) -> dict[TopicPartition, int | None]:
    from ..admin import Admin
    async with Admin(**admin_config(config)) as admin:
        found = await admin.list_offsets(timestamps, isolation_level=config.get("isolation_level",
                                                                               "read_uncommitted"))
    return {tp: (None if found[tp][0] < 0 else found[tp][0]) for tp in timestamps}


async def _partitions(admin: Admin, subscription: Subscription, allow_missing: bool) -> list[TopicPartition]:
    if subscription.pattern is not None:
        regex = re.compile(subscription.pattern)
        topics = [t for t in await admin.list_topics() if not t.startswith("__") and regex.fullmatch(t)]
    elif subscription.partitions:
        topics = sorted({tp.topic for tp in subscription.partitions})
    else:
        topics = list(subscription.topics)
    found: list[TopicPartition] = []
    for topic in topics:
        try:
            described = await admin.describe_topics([topic])
        except errors.UnknownTopicOrPartitionError:
            if allow_missing:
                continue
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist ({subscription.describe()})"
                                                      ) from None
        desc = described.get(topic)
        if desc is None or not desc.partitions:
            if allow_missing:
                continue
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist ({subscription.describe()})")
        found.extend(TopicPartition(topic, p.partition) for p in desc.partitions)
    if subscription.partitions:
        missing = sorted(set(subscription.partitions) - set(found))
        if missing and not allow_missing:
            raise errors.UnknownTopicOrPartitionError(
                "assign names partitions that do not exist: " + ", ".join(f"{t}-{p}" for t, p in missing))
        return [tp for tp in subscription.partitions if tp in set(found)]
    return sorted(found)


class RangeReader:
    """Loop-thread side of one range of a read task: ``next_records(limit)`` polls until it has up to ``limit``
    records of ``[rng.start, rng.end)`` or the range is ``done``.

    Stops when the position reaches ``end`` — not when ``end - start`` records arrived — so transaction
    markers, aborted records and compacted gaps end the range correctly. Raises when the position makes
    no progress for ``poll_timeout_ms`` (kafkaConsumer.pollTimeoutMs) and, with failOnDataLoss, when the
    first offsets of the range were deleted meanwhile.
    """

    def __init__(self, consumer: Consumer, rng: OffsetRange, *, poll_timeout_ms: int) -> None:
        self.consumer, self.rng = consumer, rng
        self.poll_timeout_ms = poll_timeout_ms
        self.position = rng.start
        self.last_progress = time.monotonic()

    @property
    def done(self) -> bool:
        return self.position >= self.rng.end

    async def next_records(self, limit: int) -> list[Any]:
        rng, consumer, tp = self.rng, self.consumer, self.rng.tp
        got: list[Any] = []
        while self.position < rng.end and len(got) < limit:
            try:
                # never more than the range can hold: records past its end stay in the consumer's buffer, where
                # the next micro-batch of a held consumer (``HeldConsumerReader``) finds them
                polled = await consumer.getmany(tp, timeout_ms=min(1000, self.poll_timeout_ms),
                                                max_records=min(limit - len(got), rng.end - self.position))
            except errors.OffsetOutOfRangeError as exc:
                raise DataLossError(
                    f"offsets [{self.position}, {rng.end}) of {rng.topic}-{rng.partition} are no longer in the "
                    f"log ({exc}). Set failOnDataLoss=false to continue past lost data.") from None
            records = polled.get(tp)
            if records:
                if records[-1][2] >= rng.end:       # offset: ConsumerRecord is a tuple, index is cheapest
                    records = [r for r in records if r[2] < rng.end]
                if got:
                    got.extend(records)
                else:
                    got = records
            new_position = await consumer.position(tp)
            if new_position > self.position:
                self.position = new_position
                self.last_progress = time.monotonic()
            elif (time.monotonic() - self.last_progress) * 1000 > self.poll_timeout_ms:
                raise errors.KafkaTimeoutError(
                    f"reading {rng.topic}-{rng.partition} [{rng.start}, {rng.end}): no progress past offset "
                    f"{self.position} within kafkaConsumer.pollTimeoutMs={self.poll_timeout_ms}")
        return got


def read_range(config: Mapping[str, Any], rng: OffsetRange, *, include_headers: bool, fail_on_data_loss: bool,
               poll_timeout_ms: int, batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Blocking generator: the records of ``[rng.start, rng.end)`` as Arrow batches (``read_ranges`` of one)."""
    return read_ranges(config, (rng,), include_headers=include_headers, fail_on_data_loss=fail_on_data_loss,
                       poll_timeout_ms=poll_timeout_ms, batch_rows=batch_rows)


def read_ranges(config: Mapping[str, Any], ranges: Sequence[OffsetRange], *, include_headers: bool,
                fail_on_data_loss: bool, poll_timeout_ms: int, batch_rows: int = BATCH_ROWS
                ) -> Iterator[pa.RecordBatch]:
    """Blocking generator: the records of each range in turn as Arrow batches of Spark's Kafka schema, read with
    this worker's cached consumer for ``config``; the next batch is built while the caller handles the current
    one. Every range's partition is assigned up front, so the consumer fetches them together (one range after
    another would wait, per range, for the fetch still parked at the broker for the previous one); a finished
    range's partition is paused. Leaving early (Spark's ``limit``, ``close()``) cancels that work and keeps the
    consumer; an error closes it."""
    if len({rng.tp for rng in ranges}) != len(ranges):
        raise ValueError(f"read_ranges: one range per partition, got {list(ranges)}")
    cfg = dict(config)
    cfg["auto_offset_reset"] = "none" if fail_on_data_loss else "earliest"
    worker = worker_clients()
    entry = worker.lease("consumer", cfg)
    portal = worker.portal
    consumer: Consumer = entry.client
    healthy = False
    pending: Any = None
    try:
        portal.call(_assign, consumer, ranges)
        reader = _RangesReader(consumer, [RangeReader(consumer, rng, poll_timeout_ms=poll_timeout_ms)
                                          for rng in ranges], include_headers=include_headers, batch_rows=batch_rows)
        pending = portal.start_task_soon(reader.next_batch)
        while True:
            batch = pending.result()
            if batch is None:
                break
            pending = portal.start_task_soon(reader.next_batch)
            try:
                yield batch
            except GeneratorExit:
                healthy = True          # the caller stopped early: the consumer is fine
                raise
        healthy = True
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            try:
                pending.result()
            except BaseException:  # noqa: BLE001 - cancelled (or failed while being cancelled)
                pass
        if healthy:
            try:
                portal.call(_unassign, consumer)
            except BaseException:  # noqa: BLE001 - unassigning a broken consumer: drop it instead
                healthy = False
        worker.release(entry, healthy=healthy)


class _RangesReader:
    """Loop-thread side of a read task over several ranges: ``next_batch()`` fills one Arrow batch of up to
    ``batch_rows`` records from the ranges in turn, so a task of many small ranges (a micro-batch's) hands Spark
    one batch, not one per range (each hand-over is a round trip between the Python worker and the JVM). A
    finished range's partition is paused so the consumer stops fetching past its end."""

    def __init__(self, consumer: Consumer, readers: list[RangeReader], *, include_headers: bool,
                 batch_rows: int, pause_done: bool = True) -> None:
        self.consumer, self.readers = consumer, readers
        self.include_headers, self.batch_rows = include_headers, batch_rows
        self.pause_done = pause_done

    async def next_batch(self) -> pa.RecordBatch | None:
        got: list[Any] = []
        while self.readers and len(got) < self.batch_rows:
            reader = self.readers[0]
            records = await reader.next_records(self.batch_rows - len(got))
            if got:
                got.extend(records)
            else:
                got = records
            if reader.done:
                self.readers.pop(0)
                if self.readers and self.pause_done:
                    self.consumer.pause(reader.rng.tp)
        return records_to_batch(got, self.include_headers) if got else None


class HeldConsumerReader:
    """``microBatchRead=driver``: the micro-batches of one streaming query, read in the source's runner process
    with one consumer that stays assigned between them. A micro-batch starts where the previous one ended, so
    its records are usually fetched already when Spark asks for it (the consumer keeps fetching ahead, as a task's
    short-lived assignment cannot); a start elsewhere (a replay, a new partition) is a seek. Blocking, for the
    caller's thread; an error closes the consumer and the next read builds a new one."""

    def __init__(self, config: Mapping[str, Any], *, include_headers: bool, fail_on_data_loss: bool,
                 poll_timeout_ms: int, batch_rows: int = BATCH_ROWS) -> None:
        self.config = dict(config)
        self.config["auto_offset_reset"] = "none" if fail_on_data_loss else "earliest"
        self.include_headers, self.poll_timeout_ms, self.batch_rows = include_headers, poll_timeout_ms, batch_rows
        self._entry: _Cached | None = None

    def hold(self, starts: Mapping[TopicPartition, int]) -> None:
        """Assign these partitions at these offsets now (the consumer fetches from them until the next read)."""
        ranges = [OffsetRange(tp.topic, tp.partition, off, off) for tp, off in sorted(starts.items())]
        self._call(_hold_at, ranges)

    def read(self, ranges: Sequence[OffsetRange]) -> list[pa.RecordBatch]:
        """The records of ``ranges`` (one per partition) as Arrow batches of up to ``batch_rows`` rows."""
        if len({rng.tp for rng in ranges}) != len(ranges):
            raise ValueError(f"HeldConsumerReader.read: one range per partition, got {list(ranges)}")
        return self._call(self._read, ranges)

    async def _read(self, consumer: Consumer, ranges: Sequence[OffsetRange]) -> list[pa.RecordBatch]:
        await _hold_at(consumer, ranges)
        reader = _RangesReader(consumer, [RangeReader(consumer, rng, poll_timeout_ms=self.poll_timeout_ms)
                                          for rng in ranges], include_headers=self.include_headers,
                               batch_rows=self.batch_rows, pause_done=False)
        batches = []
        while (batch := await reader.next_batch()) is not None:
            batches.append(batch)
        return batches

    def _call(self, func: Callable[[Consumer, Sequence[OffsetRange]], Awaitable[T]],
              ranges: Sequence[OffsetRange]) -> T:
        """``func(consumer, ranges)`` on the loop thread; an error drops the consumer (the next call builds one)."""
        worker = worker_clients()
        if self._entry is None:
            self._entry = worker.lease("consumer", self.config)
        try:
            return worker.portal.call(func, self._entry.client, ranges)
        except BaseException:
            entry, self._entry = self._entry, None
            if entry is not None:
                worker.release(entry, healthy=False)
            raise

    def close(self) -> None:
        """Give the consumer back to the worker's cache (its partitions unassigned)."""
        entry, self._entry = self._entry, None
        if entry is None:
            return
        worker = worker_clients()
        healthy = True
        try:
            worker.portal.call(_unassign, entry.client)
        except BaseException:  # noqa: BLE001 - unassigning a broken consumer: drop it instead
            healthy = False
        worker.release(entry, healthy=healthy)


async def _hold_at(consumer: Consumer, ranges: Sequence[OffsetRange]) -> None:
    """Add the ranges' partitions to the held assignment (kept ones keep their position and fetched records) and
    seek those whose position is not the range's start."""
    held = consumer.assignment()
    wanted = {rng.tp for rng in ranges}
    if not wanted <= held:
        consumer.assign(held | wanted)
    for rng in ranges:
        if rng.tp not in held or await consumer.position(rng.tp) != rng.start:
            consumer.seek(rng.tp, rng.start)


def _assign(consumer: Consumer, ranges: Sequence[OffsetRange]) -> None:
    consumer.assign([rng.tp for rng in ranges])
    for rng in ranges:
        consumer.seek(rng.tp, rng.start)


def _unassign(consumer: Consumer) -> None:
    paused = consumer.paused()
    if paused:
        consumer.resume(*paused)
    consumer.assign([])
