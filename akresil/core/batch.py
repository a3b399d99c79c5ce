"""A producer batch: records for one partition, how to report their outcome, and its delivery bookkeeping.

The core never touches asyncio. A record appended alone carries a plain callback ``(metadata, error)`` that
the I/O shell maps to a future; a run of records appended in bulk (``send_many``) carries one
``BulkCompletion`` range instead of one callback per record, so completing a 10 000-record batch costs one
list comprehension, not 10 000 calls. A batch completes exactly once (success, failure or expiry); anything
that arrives after that, such as the late response of an expired in-flight batch, is ignored.
"""

from __future__ import annotations

import enum
import logging
from itertools import repeat
from operator import add as _add, itemgetter
from typing import Any, Callable, Iterable, Protocol, Sequence

from ..types import RecordMetadata, TopicPartition
from . import collector

log = logging.getLogger(__name__)

RecordCallback = Callable[["RecordMetadata | None", "BaseException | None"], None]
Header = tuple[str, "bytes | None"]

#: batch header of the magic-2 format; charged once per batch against ``buffer_memory``
BATCH_OVERHEAD = 61
#: worst-case per-record framing (length, attributes, timestamp and offset deltas as varints)
RECORD_OVERHEAD = 21
#: the part of ``estimate_record_size`` that does not depend on key, value or headers (the key and value
#: length varints counted as 5 bytes each)
RECORD_BASE_ESTIMATE = RECORD_OVERHEAD + 10


def headers_size(headers: Sequence[Header]) -> int:
    """Upper bound of the bytes ``headers`` add to one record (utf-8 worst case for the names)."""
    size = 0
    for name, hv in headers:
        size += 10 + len(name) * 4 + (len(hv) if hv is not None else 0)
    return size


def estimate_record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()) -> int:
    """Upper bound of one record's encoded size (varint lengths counted as 5 bytes: cheap and safe)."""
    size = RECORD_BASE_ESTIMATE
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    if headers:
        size += headers_size(headers)
    return size


class PayloadBuilder(Protocol):
    """What the accumulator needs from the wire encoder (``akresil.protocol.records.BatchBuilder``).

    The batch counts its records and passes each one's offset delta (its index in the batch)."""

    #: ``append_at(offset_delta, timestamp_ms, key, value, headers)`` (``headers`` a list): None when the batch is
    #: full, anything else when the record was taken. An attribute, not a method: the per-record path calls the
    #: encoder itself
    append_at: Callable[[int, int, "bytes | None", "bytes | None", "list[Header]"], object]

    def append_run(self, records: Sequence[tuple[bytes | None, bytes | None]], start: int, first_delta: int,
                   timestamp_ms: int, headers: list[Header], budget: int, base_size: int, stop: int | None = None
                   ) -> tuple[int, int, bool]:
        """Append ``records[start:stop]`` in order, at offset deltas from ``first_delta`` on, while the estimated
        bytes (``base_size + len(key) + len(value)`` per record) stay within ``budget``; returns ``(appended,
        estimated bytes, batch full)``."""
        ...

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None: ...

    def build(self) -> bytes | bytearray: ...

    def records(self) -> Iterable[tuple[int, bytes | None, bytes | None, list[Header]]]:
        """The built batch's records in order, ``(timestamp_ms, key, value, headers)`` (to split it)."""
        ...


class BulkCompletion:
    """Outcome of one bulk call (``send_many``): ``results[i]`` gets record ``i``'s ``RecordMetadata`` or its
    error; ``on_done()`` fires once when the last record completed.

    Batches report whole ranges (``complete_range`` / ``fail_range``), and a range's metadata tuples are
    built by C iterators (``map``/``zip``) when keys and values are uniformly null or set, which the caller
    says through ``null_keys`` / ``null_values`` (the number of null keys and values in ``records``).
    """

    __slots__ = ("records", "results", "pending", "first_error", "on_done", "_key_sizes", "_value_sizes")

    def __init__(self, records: Sequence[tuple[bytes | None, bytes | None]],
                 on_done: Callable[[], None] | None = None, *, null_keys: int | None = None,
                 null_values: int | None = None) -> None:
        self.records = records
        self.results: list[RecordMetadata | BaseException | None] = [None] * len(records)
        self.pending = len(records)
        self.first_error: BaseException | None = None
        self.on_done = on_done
        n = len(records)
        #: how a range's serialized sizes are computed: "none" (all -1), "len" (all set) or "mixed"
        self._key_sizes = _size_mode(null_keys, n)
        self._value_sizes = _size_mode(null_values, n)

    @property
    def done(self) -> bool:
        return self.pending == 0

    def complete_range(self, topic: str, partition: int, positions: range | list[int], first_offset: int,
                       timestamp_ms: int) -> None:
        """Records at ``positions`` landed at ``first_offset``, ``first_offset + 1``, ... (-1: unknown)."""
        records, results = self.records, self.results
        n = len(positions)
        span = (positions.start, positions.stop) if isinstance(positions, range) and positions.step == 1 else None
        if span is not None:
            run: Sequence[tuple[bytes | None, bytes | None]] = records[span[0]:span[1]]
        else:
            run = list(map(records.__getitem__, positions))
        offsets: Iterable[int] = range(first_offset, first_offset + n) if first_offset >= 0 else repeat(-1)
        # Tens of thousands of new tuples at once would trigger the cyclic GC over and over (measured: 0.74 vs
        # 0.18 us per record for a 100k range); none of them can form a cycle, so it sleeps through the burst
        with collector.paused_for(n):
            mds = list(map(_new_tuple, repeat(RecordMetadata), zip(
                repeat(topic), repeat(partition), offsets, repeat(timestamp_ms),
                _sizes(self._key_sizes, run, 0), _sizes(self._value_sizes, run, 1))))
        if span is not None:
            results[span[0]:span[1]] = mds
        else:
            for j, md in zip(positions, mds):
                results[j] = md
        self._count(n)

    def fail_range(self, positions: range | list[int], error: BaseException) -> None:
        """Records at ``positions`` failed with ``error`` (the first error of the call is kept)."""
        if self.first_error is None:
            self.first_error = error
        results = self.results
        for j in positions:
            results[j] = error
        self._count(len(positions))

    def _count(self, n: int) -> None:
        self.pending -= n
        if self.pending <= 0 and self.on_done is not None:
            self.on_done()


class BulkCounts(BulkCompletion):
    """Outcome of one bulk call kept as counts: records landed per partition, and the failed positions with
    their error, instead of a ``RecordMetadata`` per record.

    For callers that only tally (the Spark sink counts rows per partition and quotes failed rows): 10,000
    metadata tuples per call, held until the call is tallied, live long enough to reach the collector's
    oldest generation and set off full collections over the whole process. ``results`` stays empty.
    """

    __slots__ = ("landed", "failed")

    def __init__(self, records: Sequence[tuple[bytes | None, bytes | None]],
                 on_done: Callable[[], None] | None = None) -> None:
        super().__init__((), on_done)
        self.records = records
        self.pending = len(records)
        #: partition -> records acknowledged there
        self.landed: dict[int, int] = {}
        #: ``(positions, error)`` per failed run, in the order they failed
        self.failed: list[tuple[range | list[int], BaseException]] = []

    @property
    def landed_total(self) -> int:
        return sum(self.landed.values())

    def complete_range(self, topic: str, partition: int, positions: range | list[int], first_offset: int,
                       timestamp_ms: int) -> None:
        self.landed[partition] = self.landed.get(partition, 0) + len(positions)
        self._count(len(positions))

    def fail_range(self, positions: range | list[int], error: BaseException) -> None:
        if self.first_error is None:
            self.first_error = error
        self.failed.append((positions, error))
        self._count(len(positions))


_new_tuple = tuple.__new__
_KEY = itemgetter(0)
_VALUE = itemgetter(1)


def _size_mode(nulls: int | None, n: int) -> str:
    if nulls is None:
        return "mixed"
    return "none" if nulls == n else "len" if nulls == 0 else "mixed"


def _sizes(mode: str, run: Sequence[tuple[bytes | None, bytes | None]], field: int) -> Iterable[int]:
    """Serialized sizes (-1 for null, as Java reports) of one field over ``run``, lazily."""
    if mode == "none":
        return repeat(-1)
    if mode == "len":
        return map(len, map(_KEY if field == 0 else _VALUE, run))
    return [-1 if r[field] is None else len(r[field]) for r in run]   # type: ignore[arg-type]


class _Range:
    """A bulk run inside one batch: ``count`` records from batch index ``first``, reported to ``sink``."""

    __slots__ = ("first", "positions", "timestamp_ms", "sink")

    def __init__(self, first: int, positions: range | list[int], timestamp_ms: int, sink: BulkCompletion) -> None:
        self.first = first
        self.positions = positions
        self.timestamp_ms = timestamp_ms
        self.sink = sink


class BatchState(enum.Enum):
    QUEUED = "queued"            # waiting in its partition's queue (first attempt, or a retry)
    IN_FLIGHT = "in-flight"      # part of a request whose response has not arrived
    SUCCEEDED = "succeeded"
    FAILED = "failed"            # error or delivery timeout
    SPLIT = "split"              # refused as too large: its records and completions went into smaller batches


class Detached:
    """A batch's records as seen by futures the batch does not hold (``Producer.enqueue(..., on_delivery=cb)``).

    Such a record's slot in ``singles`` holds the application's ``cb`` itself, so a caller that drops the returned
    future (the delivery-callback idiom) leaves no object per pending record for Python's collector to walk: a
    backlog of 150,000 pending records cost ~0.85 us per record in full collections. A future that is kept asks
    here for its outcome, or takes the slot over (``attach``) when something waits on it before completion. One
    per batch, made with its first detached record; it keeps the slots list, not the batch (nor its encoded bytes).
    """

    __slots__ = ("tp", "singles", "state", "base_offset", "log_append_time_ms", "error", "forward")

    def __init__(self, tp: TopicPartition, singles: list[Any]) -> None:
        self.tp = tp
        #: the batch's slots list (the batch appends to it in place; ``complete`` and ``fail`` leave it here)
        self.singles = singles
        self.state = BatchState.QUEUED
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: BaseException | None = None
        #: after a split: for each record position here, the piece's ``Detached`` and position holding it now
        self.forward: dict[int, tuple[Detached, int]] | None = None

    def _follow(self, pos: int) -> tuple[Detached, int]:
        d = self
        while d.forward is not None:
            d, pos = d.forward[pos]
        return d, pos

    def outcome(self, pos: int) -> tuple[RecordMetadata | None, BaseException | None] | None:
        """``(metadata, error)`` of the record at slot ``pos`` once its batch completed, else None."""
        d, pos = self._follow(pos)
        if d.state is BatchState.SUCCEEDED:
            s = d.singles
            offset = d.base_offset + s[pos] if d.base_offset >= 0 else -1
            stamp = s[pos + 1] if d.log_append_time_ms < 0 else d.log_append_time_ms
            return RecordMetadata(d.tp.topic, d.tp.partition, offset, stamp, s[pos + 3], s[pos + 4]), None
        if d.state is BatchState.FAILED:
            return None, d.error
        return None

    def attach(self, pos: int, callback: RecordCallback) -> bool:
        """Have the batch call ``callback`` (the future, which calls the application's one) instead of the
        application's callback at completion; False when the record is already complete (ask ``outcome``)."""
        d, pos = self._follow(pos)
        if d.state is BatchState.SUCCEEDED or d.state is BatchState.FAILED:
            return False
        d.singles[pos + 2] = callback
        return True


class ProducerBatch:
    """One partition's records travelling together; ``deadline`` is ``created_at + delivery_timeout_ms``."""

    __slots__ = ("tp", "index", "created_at", "deadline", "payload", "record_count", "singles", "ranges", "state",
                 "open", "attempts", "last_attempt_at", "retry_at", "base_sequence", "producer_id",
                 "producer_epoch", "attempt_epochs", "current_leader_epoch", "attempts_when_leader_changed",
                 "reserved_bytes", "error", "base_offset", "node_id", "expedite", "piece", "detached")

    def __init__(self, tp: TopicPartition, index: int, payload: PayloadBuilder, now: float,
                 delivery_timeout_ms: float) -> None:
        self.tp = tp
        #: creation order within the partition: queues, in-flight lists and retries keep this order
        self.index = index
        self.created_at = now
        self.deadline = now + delivery_timeout_ms
        self.payload = payload
        self.record_count = 0
        #: records appended one by one, flat, five slots each: index in batch, timestamp, callback, key size,
        #: value size (no tuple per record: a pending record is one object fewer for the garbage collector to
        #: scan, and a dead broker's backlog is what its full collections scan)
        self.singles: list[Any] = []
        #: runs appended in bulk
        self.ranges: list[_Range] = []
        self.state = BatchState.QUEUED
        self.open = True                 # still accepting appends
        self.attempts = 0                # failed attempts so far (Java's ProducerBatch.attempts)
        self.last_attempt_at = now
        self.retry_at = now              # earliest next attempt (KIP-580 per-partition backoff)
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1
        #: leader epoch the batch was sent at, per attempt (-1: unknown)
        self.attempt_epochs: list[int] = []
        #: KIP-951: latest leader epoch seen for the partition and the attempt count when it last rose
        self.current_leader_epoch: int | None = None
        self.attempts_when_leader_changed = 0
        self.reserved_bytes = 0
        self.error: BaseException | None = None
        self.base_offset = -1
        self.node_id = -1
        #: ready without waiting for linger (the tail of a ``send_many`` call: nobody is adding to it)
        self.expedite = False
        #: a piece of a batch the broker refused as too large (``RecordAccumulator.split``): sent only once no older
        #: batch of its partition is in flight, as a retry
        self.piece = False
        #: the view of futures this batch does not hold (``Detached``), made with the first of them
        self.detached: Detached | None = None

    def detach(self) -> Detached:
        """This batch's ``Detached`` view (made on first use)."""
        d = self.detached
        if d is None:
            d = self.detached = Detached(self.tp, self.singles)
        return d

    @property
    def done(self) -> bool:
        state = self.state
        return state is BatchState.SUCCEEDED or state is BatchState.FAILED or state is BatchState.SPLIT

    def stage(self, now: float) -> str:
        """Where the batch is, for errors and events: queued, backing-off or in-flight."""
        if self.state is BatchState.IN_FLIGHT:
            return "in-flight"
        if self.state is BatchState.QUEUED and self.attempts > 0 and now < self.retry_at:
            return "backing-off"
        return str(self.state.value)

    def try_append(self, timestamp_ms: int, key: bytes | None, value: bytes | None, headers: Sequence[Header],
                   callback: RecordCallback | None) -> bool:
        if not self.open:
            return False
        if headers.__class__ is not list:
            headers = list(headers)
        if self.payload.append_at(self.record_count, timestamp_ms, key, value, headers) is None:
            self.open = False
            return False
        self.singles += (self.record_count, timestamp_ms, callback, -1 if key is None else len(key),
                         -1 if value is None else len(value))
        self.record_count += 1
        return True

    def add_range(self, count: int, positions: range | list[int], timestamp_ms: int, sink: BulkCompletion) -> None:
        """Account ``count`` records the payload just took in bulk (``PayloadBuilder.append_run``)."""
        self.ranges.append(_Range(self.record_count, positions, timestamp_ms, sink))
        self.record_count += count

    def hand_over(self, pieces: Sequence[ProducerBatch], starts: Sequence[int]) -> None:
        """Give every record's completion to the piece that now holds it (a split): ``pieces[n]`` holds this batch's
        records ``starts[n]`` up to the next start, as its records 0, 1, ... This batch reports nothing after."""
        singles = self.singles
        detached = self.detached
        forward: dict[int, tuple[Detached, int]] = {}
        n, last = 0, len(pieces) - 1
        for j in range(0, len(singles), 5):
            i = singles[j]
            while n < last and i >= starts[n + 1]:
                n += 1
            piece = pieces[n]
            if detached is not None:
                forward[j] = (piece.detach(), len(piece.singles))
            piece.singles += (i - starts[n], *singles[j + 1:j + 5])
        ends = [*starts[1:], self.record_count]
        for run in self.ranges:
            first, count = run.first, len(run.positions)
            for piece, lo, hi in zip(pieces, starts, ends):
                a, b = max(lo, first), min(hi, first + count)
                if a < b:
                    piece.ranges.append(_Range(a - lo, run.positions[a - first:b - first], run.timestamp_ms,
                                               run.sink))
        self.singles = []
        self.ranges = []
        self.state = BatchState.SPLIT
        self.open = False
        if detached is not None:
            detached.forward = forward
            detached.state = BatchState.SPLIT

    # ------------------------------------------------------------------ completion (exactly once)
    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> bool:
        """Succeed every record; False (and nothing happens) when the batch already completed."""
        if self.done:
            return False
        self.state = BatchState.SUCCEEDED
        self.open = False
        self.base_offset = base_offset
        topic, partition = self.tp
        detached = self.detached
        if detached is not None:     # before the callbacks: one of them may ask about another record of the batch
            detached.base_offset, detached.log_append_time_ms = base_offset, log_append_time_ms
            detached.state = BatchState.SUCCEEDED
        singles = self.singles
        if singles:
            # the records' metadata built by C iterators over the flat slots (index, timestamp, callback, key
            # size, value size): the loop below only calls back, one Python call per record
            offsets = map(_add, repeat(base_offset), singles[0::5]) if base_offset >= 0 else repeat(-1)
            stamps = singles[1::5] if log_append_time_ms < 0 else repeat(log_append_time_ms)
            mds = map(_new_tuple, repeat(RecordMetadata), zip(repeat(topic), repeat(partition), offsets, stamps,
                                                              singles[3::5], singles[4::5]))
            # one RecordMetadata per record, and its future's wake-up queued: a batch of thousands would run a young
            # collection every ~700 and push full ones over every pending record of the application's; none of
            # these objects can be cyclic garbage (as ``BulkCompletion.complete_range``)
            with collector.paused_for(len(singles) // 5):
                for callback, md in zip(singles[2::5], mds):
                    if callback is not None:
                        try:
                            callback(md, None)
                        except Exception:  # noqa: BLE001 - one bad callback must not stop the others or the scheduler
                            log.exception("record completion callback %r raised", callback)
        for run in self.ranges:
            try:
                run.sink.complete_range(topic, partition, run.positions, base_offset + run.first
                                        if base_offset >= 0 else -1,
                                        log_append_time_ms if log_append_time_ms >= 0 else run.timestamp_ms)
            except Exception:  # noqa: BLE001 - a broken sink must not stop the others or the scheduler
                log.exception("bulk completion %r raised", run.sink)
        self.singles = []
        self.ranges = []
        return True

    def fail(self, error: BaseException) -> bool:
        """Fail every record with ``error``; False when the batch already completed."""
        if self.done:
            return False
        self.state = BatchState.FAILED
        self.open = False
        self.error = error
        detached = self.detached
        if detached is not None:
            detached.error = error
            detached.state = BatchState.FAILED
        for callback in self.singles[2::5]:
            if callback is not None:
                try:
                    callback(None, error)
                except Exception:  # noqa: BLE001 - one bad callback must not stop the others or the scheduler
                    log.exception("record completion callback %r raised", callback)
        for run in self.ranges:
            try:
                run.sink.fail_range(run.positions, error)
            except Exception:  # noqa: BLE001
                log.exception("bulk completion %r raised", run.sink)
        self.singles = []
        self.ranges = []
        return True

    def __repr__(self) -> str:
        return (f"ProducerBatch({self.tp.topic}-{self.tp.partition} #{self.index}, records={self.record_count}, "
                f"state={self.state.value}, attempts={self.attempts}, seq={self.base_sequence})")
