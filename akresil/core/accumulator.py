"""The producer's record accumulator: per-partition batch queues with delivery deadlines (KIP-91).

Pure logic driven by the I/O shell with explicit ``now`` (monotonic ms):

* ``append`` puts a record into its partition's open batch (or a new one) within ``buffer_memory``
  (``try_append_open`` is its allocation-free common case); ``append_many`` is the bulk path of
  ``send_many``: one tight encoder loop, one memory charge and one completion range per batch;
* ``drain`` hands out batches grouped by leader node for nodes the shell says are sendable, keeping
  per-partition order; ``on_batch_success`` / ``on_batch_error`` report the outcome;
* ``expire`` fails batches whose ``created_at + delivery_timeout_ms`` has passed, whether queued, backing
  off or in flight (a late response for an expired batch is ignored);
* ``next_wakeup`` names the earliest timer (linger end, retry backoff end, delivery deadline) so the shell
  sleeps exactly until then: no polling.

Readiness follows Java: a partition is ready when its head batch is full (or not the last), lingered,
retried (backoff over), or when the producer flushes, closes or has appenders waiting for memory. A node
with a ready partition is drained, and its other partitions ride along in the same request (one batch per
partition per request, up to ``max_request_size``). One rule is akresil's own: while a node still owes the
answer to a Produce request, only complete batches (full, not the last, retries, expedited, or any batch while
the producer flushes, closes or waits for memory) are ready for it; a lingered batch that could still grow
waits for that answer, and does not ride along when another partition's complete batch goes there. A Kafka
broker reads the next request on a connection only after it has answered the one before (it mutes the channel
meanwhile), and with ``acks=all`` an answer waits for the followers' fetches, so a second small request sent early
would only queue at the broker, wait out a replication round of its own, and split records that could have
travelled together: five requests in flight made every record wait up to five replication rounds (aiokafka sends
one request per node at a time; this keeps that, and keeps pipelining the batches that are full). A rider would
also be bound to whatever holds the request it rides in: at a leader move the retries sent to a new leader make
up its first ``acks=all`` Produce of those partitions, which the broker holds ~0.5 s, and a partition whose leader
moved *away* from that node, not yet known to the client, rode along, was refused NOT_LEADER_OR_FOLLOWER only when
that hold ended, and only then went to its own new leader. Waiting for the answer in flight (which usually
carries its partition's previous batch), it learns of its own move first.

Ordering per partition: with ``max_in_flight == 1`` a partition has at most one batch in flight. With
idempotence up to ``max_in_flight`` batches are in flight once the partition's leader has acknowledged a batch of
the producer id (one at a time before that, and again after ``PID_STATE_TRUST_MS`` without an acknowledgement:
a broker with no state for the id takes any first sequence, so a refused first batch could be overtaken),
sequence numbers are assigned at first drain in queue order, a retried batch goes back into the queue in creation
order (ahead of newer batches) and is resent only once no older batch of its partition is still outstanding; when
the leader moves, newer batches wait for the old leader's answers to the batches in flight there (the new leader
would refuse them as out of order). Without idempotence and with more than one request in flight, a retry may
overtake (Kafka's documented behaviour).

Memory: every record reserves an upper-bound estimate of its encoded size (plus the batch header for a new
batch) until its batch completes. When ``append`` finds no room it appends nothing; the shell registers a
``SpaceWaiter`` (FIFO) whose ``wake`` callback fires when enough bytes are released, and enforces
``max_block_ms`` itself (raising ``BufferFullError``).
"""

from __future__ import annotations

import bisect
import random
from collections import deque
from operator import attrgetter
from typing import Callable, Container, Iterable, Iterator, NamedTuple, Sequence

from ..errors import ClientClosedError, ConfigError, DeliveryTimeoutError, IllegalStateError, RecordTooLargeError
from ..types import TopicPartition
from . import collector, events
from .backoff import ExponentialBackoff, RandomSource
from .batch import (BATCH_OVERHEAD, RECORD_BASE_ESTIMATE, BatchState, BulkCompletion, Header, PayloadBuilder,
                    ProducerBatch, RecordCallback, estimate_record_size, headers_size)
from .events import Hooks
from .retry import RetryDecision, backing_off, observe_leader_epoch, plan_retry

_MAX_SEQUENCE = 2**31
#: how long (ms) after its last acknowledgement a partition trusts its leader to still hold the producer id's state.
#: A broker drops that state once the id wrote nothing there for ``producer.id.expiration.ms`` (1 day by default; a
#: cluster may set far less), and is then lenient about the first sequence again, so an idle partition's next
#: batch goes alone until it is acknowledged. That costs one round trip for a burst after an idle minute, nothing
#: for a steady flow.
PID_STATE_TRUST_MS = 60_000
#: the part of delivery_timeout_ms an open batch accepts records for (see ``append_window_ms``)
APPEND_WINDOW_FRACTION = 0.1
_index_key = attrgetter("index")

LeaderOf = Callable[[TopicPartition], "tuple[int, int] | None"]
#: a success whose records' completion waits for ``complete_deferred``: (batch, base offset, log append time)
DeferredSuccess = tuple[ProducerBatch, int, int]


def _kv_size(record: tuple[bytes | None, bytes | None]) -> int:
    key, value = record
    return (0 if key is None else len(key)) + (0 if value is None else len(value))


def validate_delivery_timeout(delivery_timeout_ms: float, linger_ms: float, request_timeout_ms: float) -> None:
    """KIP-91: a record must get at least one full linger and one full request before it can expire."""
    if delivery_timeout_ms < linger_ms + request_timeout_ms:
        raise ConfigError(
            f"delivery_timeout_ms ({delivery_timeout_ms}) must be >= linger_ms ({linger_ms}) + "
            f"request_timeout_ms ({request_timeout_ms})")


class AppendResult(NamedTuple):
    appended: bool
    batch: ProducerBatch | None
    new_batch: bool
    #: the partition now has a batch that will not grow further: the sender has work
    batch_full: bool
    #: bytes the record reserves (or would have reserved when ``appended`` is False)
    needed_bytes: int


class BulkAppendResult(NamedTuple):
    #: records taken, from ``records[start]`` on
    appended: int
    #: estimated bytes reserved for them (batch headers not included): what the sticky partitioner counts
    appended_bytes: int
    #: the last batch the run went into is now full (closed for appends)
    batch_closed: bool
    new_batches: int
    #: > 0 when memory ran short: bytes the next record needs; wait for them, then call again with the rest
    needed_bytes: int


class DrainResult(NamedTuple):
    batches: dict[int, list[ProducerBatch]]
    #: partitions with queued batches but no known leader: the shell should refresh metadata
    unknown_leaders: list[TopicPartition]


class ExpiredBatch(NamedTuple):
    batch: ProducerBatch
    stage: str


class SpaceWaiter:
    """An appender waiting for ``needed`` bytes; ``wake()`` is the shell's hook (e.g. ``event.set``)."""

    __slots__ = ("needed", "wake", "woken")

    def __init__(self, needed: int, wake: Callable[[], None]) -> None:
        self.needed = needed
        self.wake = wake
        self.woken = False

    def __repr__(self) -> str:
        return f"SpaceWaiter(needed={self.needed}, woken={self.woken})"


class _Partition:
    __slots__ = ("tp", "queue", "in_flight", "next_sequence", "acked_sequence_end", "next_index", "known_pid",
                 "known_at")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.queue: deque[ProducerBatch] = deque()
        self.in_flight: list[ProducerBatch] = []     # sorted by batch index (creation order)
        self.next_sequence = 0
        #: the sequence after the last one the broker acknowledged under the current identity
        self.acked_sequence_end = 0
        self.next_index = 0
        #: the producer id the partition's leader acknowledged a batch of (-1: none yet); see ``_blocked``
        self.known_pid = -1
        #: when (ms) the leader last acknowledged a batch of ``known_pid``: past ``PID_STATE_TRUST_MS`` it is forgotten
        self.known_at = 0.0


class RecordAccumulator:
    """Batches per partition between ``append`` and a broker's acknowledgement."""

    def __init__(self, *, batch_size: int = 16_384, linger_ms: float = 5, delivery_timeout_ms: float = 120_000,
                 request_timeout_ms: float = 30_000, buffer_memory: int = 33_554_432,
                 retry_backoff_ms: float = 100, retry_backoff_max_ms: float = 1000, max_in_flight: int = 5,
                 enable_idempotence: bool = False, retries: int = 2**31 - 1, max_request_size: int = 1_048_576,
                 compression_type: str = "none", transactional: bool = False,
                 new_payload: Callable[[TopicPartition, int, bool], PayloadBuilder] | None = None,
                 rng: RandomSource | None = None, hooks: Hooks | None = None,
                 on_batch_done: Callable[[ProducerBatch], None] | None = None) -> None:
        validate_delivery_timeout(delivery_timeout_ms, linger_ms, request_timeout_ms)
        for key, value, minimum in (("batch_size", batch_size, 0), ("linger_ms", linger_ms, 0),
                                    ("buffer_memory", buffer_memory, 1), ("max_in_flight_requests_per_connection",
                                                                          max_in_flight, 1),
                                    ("retries", retries, 0), ("max_request_size", max_request_size, 1)):
            if value < minimum:
                raise ConfigError(f"{key}: must be >= {minimum}, got {value!r}")
        if enable_idempotence and max_in_flight > 5:
            raise ConfigError("max_in_flight_requests_per_connection: must be <= 5 with enable_idempotence")
        self.linger_ms = float(linger_ms)
        self.delivery_timeout_ms = float(delivery_timeout_ms)
        #: an open batch takes no more records once this old: the batch's deadline is every record's, so a record
        #: joining an old batch (a partition stalled behind a down leader) would fail long before its own
        #: delivery_timeout_ms. With this, every record gets at least 90% of it, or the linger if longer
        self.append_window_ms = max(self.linger_ms, self.delivery_timeout_ms * APPEND_WINDOW_FRACTION)
        self.buffer_memory = int(buffer_memory)
        self.max_in_flight = int(max_in_flight)
        self.idempotent = bool(enable_idempotence)
        self.retries = int(retries)
        self.max_request_size = int(max_request_size)
        #: a record estimate plus batch header above this fails one of ``check_record_size``'s two limits
        self._size_limit = min(self.max_request_size, self.buffer_memory)
        if new_payload is None:
            from ..protocol.records import BatchBuilder, compression_codec
            codec = compression_codec(compression_type)

            def new_payload(tp: TopicPartition, first_record_bytes: int, bulk: bool) -> PayloadBuilder:
                """A batch for ``tp`` whose first record has ``first_record_bytes`` of key and value, appended by
                ``append_run`` if ``bulk``: what ``BatchBuilder`` chooses its encoder on."""
                return BatchBuilder(compression_type=codec, batch_size=batch_size, transactional=transactional,
                                    first_record_bytes=first_record_bytes, bulk=bulk)
        self._new_payload = new_payload
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms,
                                           rng=rng if rng is not None else random.Random())
        self._hooks = hooks if hooks is not None else Hooks()
        self.on_batch_done = on_batch_done
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._used = 0
        self._waiters: deque[SpaceWaiter] = deque()
        self._flushing = 0
        self._closing = False
        self._aborting = False
        self._drain_start = 0
        #: idempotence: partitions whose sequence has a gap, not drained until the identity is reset (KIP-360);
        #: ``_held_all`` holds every partition (the broker refused the identity itself)
        self._held: set[TopicPartition] = set()
        self._held_all = False
        #: transactions: only these partitions may be drained (added to the transaction); None: no gate
        self.drain_gate: set[TopicPartition] | None = None
        #: per topic, the smallest batch (estimated bytes) the broker refused as too large: later splits of the
        #: topic's batches cut straight below it (its ``max.message.bytes`` is below that)
        self._refused_size: dict[str, int] = {}
        self._incomplete = 0
        #: node id -> batches in flight to it: a node with any is still answering a Produce (see module doc)
        self._node_in_flight: dict[int, int] = {}
        #: the batch ``try_append_open`` last appended to (its record's slots end that batch's ``singles``)
        self.appended_to: ProducerBatch | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        #: whether the timer ``next_wakeup`` last named is a batch's linger end (see there)
        self.wakeup_is_linger_end = False

    # ------------------------------------------------------------------ state
    @property
    def buffered_bytes(self) -> int:
        return self._used

    @property
    def incomplete_batches(self) -> int:
        """Batches appended to and not yet completed (queued, backing off or in flight)."""
        return self._incomplete

    @property
    def closing(self) -> bool:
        return self._closing

    def batches(self) -> Iterator[ProducerBatch]:
        """Every incomplete batch, per partition: in flight first, then queued (for inspection and tests)."""
        for pq in self._partitions.values():
            yield from pq.in_flight
            yield from pq.queue

    def set_producer_identity(self, producer_id: int, producer_epoch: int) -> None:
        """Adopt a (new) producer id/epoch from InitProducerId; sequences restart at 0 for a new identity.

        Queued batches get new sequences when next drained. Batches still in flight under the old identity
        keep theirs; if they fail they are re-sequenced when drained again.
        """
        if (producer_id, producer_epoch) != (self.producer_id, self.producer_epoch):
            self.producer_id = producer_id
            self.producer_epoch = producer_epoch
            for pq in self._partitions.values():
                pq.next_sequence = 0
                pq.acked_sequence_end = 0
                for batch in pq.queue:
                    batch.base_sequence = -1
            self._held.clear()
            self._held_all = False

    def hold(self, tp: TopicPartition | None) -> None:
        """Stop draining ``tp`` (None: every partition) until ``release`` or the next ``set_producer_identity``:
        its sequence has (or may have) a gap that only a new identity closes, and more batches under the old one
        would meet it too. Other partitions keep sending (Java gates per partition too)."""
        if tp is None:
            self._held_all = True
        else:
            self._held.add(tp)

    def release(self, tp: TopicPartition) -> None:
        self._held.discard(tp)

    def is_held(self, tp: TopicPartition) -> bool:
        return self._held_all or tp in self._held

    def in_flight_for(self, tp: TopicPartition) -> bool:
        pq = self._partitions.get(tp)
        return pq is not None and bool(pq.in_flight)

    def sequence_resolved(self, tp: TopicPartition) -> bool:
        """Whether the broker acknowledged everything sequenced for ``tp`` so far (Java's ``isNextSequence``):
        after a batch expired with its outcome unknown, a later acknowledged batch proves it was written."""
        pq = self._partitions.get(tp)
        return pq is None or pq.acked_sequence_end == pq.next_sequence

    def held_in_flight(self) -> bool:
        """Whether a held partition still has a batch in flight: the identity is reset only after they are
        resolved, so retried batches keep their order when re-sequenced."""
        if self._held_all:
            return any(pq.in_flight for pq in self._partitions.values())
        parts = self._partitions
        return any(tp in parts and parts[tp].in_flight for tp in self._held)

    def begin_flush(self) -> None:
        """Make every batch ready now (``producer.flush()``); pair with ``end_flush``."""
        self._flushing += 1

    def end_flush(self) -> None:
        if self._flushing <= 0:
            raise IllegalStateError("end_flush without begin_flush")
        self._flushing -= 1

    def close(self) -> None:
        """No more appends; everything queued becomes ready so it drains promptly."""
        self._closing = True

    # ------------------------------------------------------------------ append and memory
    def check_record_size(self, size: int, what: str = "record") -> None:
        """RecordTooLargeError when a record of ``size`` estimated bytes can never be sent or buffered."""
        if size + BATCH_OVERHEAD > self.max_request_size:
            raise RecordTooLargeError(f"{what} of ~{size} bytes (with batch header) exceeds max_request_size "
                                      f"({self.max_request_size})")
        if size + BATCH_OVERHEAD > self.buffer_memory:
            raise RecordTooLargeError(f"{what} of ~{size} bytes (with batch header) exceeds buffer_memory "
                                      f"({self.buffer_memory})")

    def try_append_open(self, tp: TopicPartition, timestamp_ms: int, key: bytes | None, value: bytes | None,
                        headers: list[Header], callback: RecordCallback | None) -> int:
        """The common case of ``append``, allocation-free: the record joins the partition's open batch
        (``timestamp_ms`` an int, ``headers`` a list: as the encoder takes them).

        Returns the bytes reserved, or 0 when ``append`` must decide instead: no open batch, the batch is
        full (it is then closed), memory is short, appenders are waiting, the producer is closing, or the
        record may be too large. Nothing is appended when it returns 0.
        """
        pq = self._partitions.get(tp)
        if pq is None or self._waiters or self._closing:
            return 0
        dq = pq.queue
        if not dq:
            return 0
        last = dq[-1]
        if not last.open:
            return 0
        # estimate_record_size inlined: this runs once per record
        size = RECORD_BASE_ESTIMATE
        if key is None:
            key_size = -1
        else:
            key_size = len(key)
            size += key_size
        if value is None:
            value_size = -1
        else:
            value_size = len(value)
            size += value_size
        if headers:
            size += headers_size(headers)
        if size + BATCH_OVERHEAD > self._size_limit or self._used + size > self.buffer_memory:
            return 0
        if last.payload.append_at(last.record_count, timestamp_ms, key, value, headers) is None:
            last.open = False
            return 0
        last.singles += (last.record_count, timestamp_ms, callback, key_size, value_size)
        last.record_count += 1
        last.reserved_bytes += size
        self._used += size
        self.appended_to = last
        return size

    def append(self, tp: TopicPartition, timestamp_ms: int, key: bytes | None, value: bytes | None,
               headers: Sequence[Header] = (), callback: RecordCallback | None = None, *, now: float,
               waiter: SpaceWaiter | None = None) -> AppendResult:
        """Add a record. ``appended`` is False when memory is short: wait on a ``SpaceWaiter`` and retry,
        passing it back as ``waiter`` so it keeps its place in the FIFO."""
        if self._closing:
            raise ClientClosedError("producer is closing: no more records accepted")
        if headers.__class__ is not list:
            headers = list(headers)     # the encoder takes a list (the producer passes one)
        if waiter is None:
            size = self.try_append_open(tp, timestamp_ms, key, value, headers, callback)
            if size:
                dq = self._partitions[tp].queue
                return AppendResult(True, dq[-1], False, len(dq) > 1, size)
        size = estimate_record_size(key, value, headers)
        if size + BATCH_OVERHEAD > self._size_limit:
            self.check_record_size(size)
        pq = self._partitions.get(tp)
        if pq is None:
            pq = self._partitions[tp] = _Partition(tp)
        if waiter is not None:
            try:
                self._waiters.remove(waiter)
            except ValueError:
                pass
        dq = pq.queue
        last = dq[-1] if dq else None
        if last is not None and last.open:
            if self._used + size > self.buffer_memory or (waiter is None and self._waiters):
                return AppendResult(False, None, False, False, size)
            if last.try_append(timestamp_ms, key, value, headers, callback):
                last.reserved_bytes += size
                self._used += size
                return AppendResult(True, last, False, len(dq) > 1, size)
        needed = size + BATCH_OVERHEAD
        if not self._has_room(needed, waiter):
            return AppendResult(False, None, False, len(dq) > 0, needed)
        first_kv = (0 if key is None else len(key)) + (0 if value is None else len(value))
        batch = ProducerBatch(tp, pq.next_index, self._new_payload(tp, first_kv, False), now, self.delivery_timeout_ms)
        pq.next_index += 1
        if not batch.try_append(timestamp_ms, key, value, headers, callback):
            raise RecordTooLargeError(f"record of ~{size} bytes does not fit in an empty batch")
        dq.append(batch)
        self._incomplete += 1
        self._charge(batch, needed)
        return AppendResult(True, batch, True, len(dq) > 1 or not batch.open, needed)

    def append_many(self, tp: TopicPartition, records: Sequence[tuple[bytes | None, bytes | None]],
                    positions: range | list[int], start: int, timestamp_ms: int, headers: list[Header],
                    sink: BulkCompletion, *, now: float, waiter: SpaceWaiter | None = None,
                    stop_when_full: bool = False, stop: int | None = None) -> BulkAppendResult:
        """Add ``records[start:stop]`` to ``tp`` in order, filling its open batch and then new ones, with one
        ``sink`` range and one memory charge per batch (the bulk path of ``send_many``). ``positions[i]``
        is where ``records[i]`` sits in the call's input (what ``sink`` reports against).

        The caller has checked every record with ``check_record_size``. Takes what fits in memory and
        returns; ``needed_bytes > 0`` then says how much the next record needs (register a ``SpaceWaiter``,
        then call again from ``start + appended`` with the waiter). ``stop_when_full`` returns as soon as a
        batch closes, so a sticky partitioner can switch partitions (and the caller yield) at batch boundaries.
        """
        if waiter is not None:
            try:
                self._waiters.remove(waiter)
            except ValueError:
                pass
        if self._closing:
            raise ClientClosedError("producer is closing: no more records accepted")
        pq = self._partitions.get(tp)
        if pq is None:
            pq = self._partitions[tp] = _Partition(tp)
        # FIFO fairness: a fresh appender does not jump ahead of queued waiters
        budget = self.buffer_memory - self._used if waiter is not None or not self._waiters else 0
        base = RECORD_BASE_ESTIMATE + (headers_size(headers) if headers else 0)
        dq = pq.queue
        total = len(records) if stop is None else stop
        pos = start
        reserved = new_batches = needed = 0
        closed = False
        while pos < total:
            last = dq[-1] if dq else None
            if last is None or not last.open:
                first_kv = _kv_size(records[pos])
                first_size = base + first_kv
                if first_size + BATCH_OVERHEAD > budget:
                    needed = first_size + BATCH_OVERHEAD
                    break
                last = ProducerBatch(tp, pq.next_index, self._new_payload(tp, first_kv, True), now,
                                     self.delivery_timeout_ms)
                pq.next_index += 1
                dq.append(last)
                self._incomplete += 1
                self._charge(last, BATCH_OVERHEAD)
                budget -= BATCH_OVERHEAD
                new_batches += 1
            count, used, full = last.payload.append_run(records, pos, last.record_count, timestamp_ms, headers, budget,
                                                        base, total)
            if count:
                last.add_range(count, positions[pos:pos + count], timestamp_ms, sink)
                last.reserved_bytes += used
                self._used += used
                budget -= used
                reserved += used
                pos += count
            if full:
                last.open = False
                closed = True
                if stop_when_full:
                    break
            elif pos < total:
                needed = base + _kv_size(records[pos])   # memory ran out inside the open batch
                break
            else:
                closed = False
        taken = pos - start
        return BulkAppendResult(taken, reserved, closed, new_batches, needed)

    def expedite(self, tps: Iterable[TopicPartition]) -> None:
        """Make the open batch of each partition ready now, without waiting for linger: a bulk call that
        finished appending waits for its records, and nothing it knows of will fill the batch further."""
        for tp in tps:
            pq = self._partitions.get(tp)
            if pq is not None and pq.queue:
                pq.queue[-1].expedite = True

    def _has_room(self, needed: int, waiter: SpaceWaiter | None) -> bool:
        if self._used + needed > self.buffer_memory:
            return False
        # FIFO fairness: a fresh appender does not jump ahead of queued waiters
        return waiter is not None or not self._waiters

    def _charge(self, batch: ProducerBatch, nbytes: int) -> None:
        batch.reserved_bytes += nbytes
        self._used += nbytes

    def wait_for_space(self, needed: int, wake: Callable[[], None]) -> SpaceWaiter:
        """Queue an appender for ``needed`` bytes; ``wake()`` fires (once) when they may be available."""
        waiter = SpaceWaiter(needed, wake)
        self._waiters.append(waiter)
        self._hooks.emit(events.BUFFER_EXHAUSTED, needed=needed, used=self._used, limit=self.buffer_memory)
        self._wake_waiters()
        return waiter

    def cancel_wait(self, waiter: SpaceWaiter) -> None:
        """Forget a waiter (its ``max_block_ms`` elapsed or it was cancelled); wakes those behind it."""
        try:
            self._waiters.remove(waiter)
        except ValueError:
            return
        self._wake_waiters()

    @property
    def space_waiters(self) -> int:
        return len(self._waiters)

    def _wake_waiters(self) -> None:
        budget = self.buffer_memory - self._used
        for waiter in self._waiters:
            if waiter.needed > budget:
                break        # FIFO: the head waiter is not overtaken by smaller requests behind it
            budget -= waiter.needed
            if not waiter.woken:
                waiter.woken = True
                waiter.wake()

    def _release(self, batch: ProducerBatch) -> None:
        self._used -= batch.reserved_bytes
        batch.reserved_bytes = 0
        self._incomplete -= 1
        if self._waiters:
            self._wake_waiters()

    # ------------------------------------------------------------------ readiness and drain
    def _blocked(self, pq: _Partition) -> bool:
        """Per-partition ordering gate (see module docstring)."""
        if self._held_all or (self._held and pq.tp in self._held):
            return True
        if self.drain_gate is not None and pq.tp not in self.drain_gate:
            return True
        if not pq.in_flight:
            return False
        if self.max_in_flight == 1:
            return True
        if self.idempotent:
            if len(pq.in_flight) >= self.max_in_flight:
                return True
            pid, epoch = self.producer_id, self.producer_epoch
            if pq.known_pid != pid:
                # one batch at a time until the leader has acknowledged one of this producer id: a Kafka broker
                # takes any first sequence from a producer id it has no state for on the partition (as after
                # that state expired), so were the first batch refused without being written (NOT_ENOUGH_REPLICAS,
                # a failed request), the one pipelined behind it would be written first, and the retry after it
                # (found on Apache Kafka 4.4: records 28..70 of a partition written ahead of record 1)
                return True
            for batch in pq.in_flight:
                if batch.producer_epoch != epoch or batch.producer_id != pid:
                    # after an identity reset a partition restarts at sequence 0 only once its batches under the
                    # old identity are resolved, so nothing new overtakes them (Java's hasStaleProducerIdAndEpoch)
                    return True
            head = pq.queue[0]
            if (head.attempts > 0 or head.piece) and pq.in_flight[0].index < head.index:
                # a retry, or a piece of a batch refused as too large, waits until no older batch of its partition
                # is outstanding (Java drains a batch that has its sequence already only as the first in flight):
                # pipelined, a piece could be written before the one in front of it was refused
                return True
        return False

    def _left_behind(self, pq: _Partition, node: int) -> bool:
        """The idempotent partition's leader is now ``node`` but batches of it are still in flight to another
        node (the leader moved under them): newer batches wait for those answers. The new leader would refuse
        them with OUT_OF_ORDER_SEQUENCE_NUMBER while the older batches are not written there (it has not seen
        their sequences), and each refusal costs a round trip and a retry backoff; aiokafka never meets this
        (one batch per partition in flight)."""
        if not self.idempotent:
            return False
        for batch in pq.in_flight:
            if batch.node_id != node:
                return True
        return False

    def node_busy(self, node: int) -> bool:
        """``node`` has not answered every Produce request sent to it: only complete batches go to it now."""
        return node in self._node_in_flight

    def _head_ready(self, pq: _Partition, now: float, node: int) -> bool:
        head = pq.queue[0]
        if backing_off(head, now):
            return False
        if head.attempts > 0 or not head.open or len(pq.queue) > 1 or head.expedite:
            return True
        if self._flushing or self._closing or self._waiters:
            return True
        if node in self._node_in_flight:
            return False      # the batch grows until the node answers the request before it (module doc)
        return now >= head.created_at + self.linger_ms

    def drain(self, now: float, *, sendable: Container[int], leader_of: LeaderOf,
              max_request_size: int | None = None) -> DrainResult:
        """Take batches for sendable nodes that have at least one ready partition.

        ``leader_of(tp)`` gives ``(leader node id, leader epoch)`` or None; the epoch feeds KIP-951's
        skip-backoff rule. At most one batch per partition per call; the first batch for a node is taken
        even when it alone exceeds ``max_request_size`` (the broker is the judge of that).
        """
        result: dict[int, list[ProducerBatch]] = {}
        unknown: list[TopicPartition] = []
        if self.idempotent and self.producer_id < 0:
            return DrainResult(result, unknown)   # no producer id yet (InitProducerId pending)
        limit = max_request_size if max_request_size is not None else self.max_request_size
        parts = [pq for pq in self._partitions.values() if pq.queue]
        if not parts:
            return DrainResult(result, unknown)
        start = self._drain_start % len(parts)
        self._drain_start += 1
        candidates: dict[int, list[tuple[_Partition, int]]] = {}
        ready_nodes: set[int] = set()
        for pq in parts[start:] + parts[:start]:       # rotate the start for fairness across partitions
            lead = leader_of(pq.tp)
            if lead is None or lead[0] < 0:
                unknown.append(pq.tp)
                continue
            node, epoch = lead
            observe_leader_epoch(pq.queue[0], epoch)
            if pq.known_pid >= 0 and not pq.in_flight and now - pq.known_at > PID_STATE_TRUST_MS:
                pq.known_pid = -1                  # idle long enough that the leader may have dropped the id's state
            if node not in sendable or self._blocked(pq) or (pq.in_flight and self._left_behind(pq, node)):
                continue
            candidates.setdefault(node, []).append((pq, epoch))
            if node not in ready_nodes and self._head_ready(pq, now, node):
                ready_nodes.add(node)
        for node in ready_nodes:
            taken: list[ProducerBatch] = []
            size = 0
            # a node that owes an answer takes only ready batches: one that could still grow does not ride
            # behind another partition's complete batch either (module doc)
            rides = node not in self._node_in_flight
            for pq, epoch in candidates[node]:
                head = pq.queue[0]
                if backing_off(head, now) or not (rides or self._head_ready(pq, now, node)):
                    continue
                if taken and size + head.reserved_bytes > limit:
                    break
                pq.queue.popleft()
                self._start_attempt(pq, head, node, epoch, now)
                taken.append(head)
                size += head.reserved_bytes
            if taken:
                result[node] = taken
        return DrainResult(result, unknown)

    def _start_attempt(self, pq: _Partition, batch: ProducerBatch, node: int, epoch: int, now: float) -> None:
        batch.open = False
        batch.state = BatchState.IN_FLIGHT
        batch.node_id = node
        batch.last_attempt_at = now
        batch.attempt_epochs.append(epoch if epoch is not None else -1)
        if self.idempotent and (batch.base_sequence < 0 or batch.producer_id != self.producer_id
                                or batch.producer_epoch != self.producer_epoch):
            batch.base_sequence = pq.next_sequence
            batch.producer_id = self.producer_id
            batch.producer_epoch = self.producer_epoch
            pq.next_sequence = (pq.next_sequence + batch.record_count) % _MAX_SEQUENCE
            batch.payload.set_producer_state(self.producer_id, self.producer_epoch, batch.base_sequence)
        bisect.insort(pq.in_flight, batch, key=_index_key)
        self._node_in_flight[node] = self._node_in_flight.get(node, 0) + 1

    def _node_answered(self, batch: ProducerBatch) -> None:
        node = batch.node_id
        left = self._node_in_flight.get(node, 0) - 1
        if left > 0:
            self._node_in_flight[node] = left
        else:
            self._node_in_flight.pop(node, None)

    # ------------------------------------------------------------------ outcomes
    def _take_in_flight(self, batch: ProducerBatch) -> _Partition:
        if batch.state is not BatchState.IN_FLIGHT:
            raise IllegalStateError(f"{batch!r} is not in flight")
        pq = self._partitions[batch.tp]
        pq.in_flight.remove(batch)
        self._node_answered(batch)
        return pq

    def on_batch_success(self, batch: ProducerBatch, base_offset: int, now: float, *,
                         log_append_time_ms: int = -1, defer: list[DeferredSuccess] | None = None) -> bool:
        """The broker acknowledged ``batch``; False when it had already completed (e.g. expired): ignored.

        ``defer``: the partition and node are released now, but the records' completions are appended to the
        list for ``complete_deferred``: the shell writes the next request before the application's
        continuations run (each completion schedules one, and the event loop runs them in order)."""
        if batch.done:
            return False
        pq = self._take_in_flight(batch)
        if self.idempotent and batch.base_sequence >= 0 and batch.producer_id == self.producer_id:
            pq.known_pid = batch.producer_id       # any epoch: the leader now checks this id's sequences strictly
            pq.known_at = now
            if batch.producer_epoch == self.producer_epoch:
                pq.acked_sequence_end = (batch.base_sequence + batch.record_count) % _MAX_SEQUENCE
        if defer is not None:
            defer.append((batch, base_offset, log_append_time_ms))
            return True
        batch.complete(base_offset, log_append_time_ms)
        self._finish(batch, None)
        return True

    def complete_deferred(self, deferred: list[DeferredSuccess]) -> None:
        """Complete the records of the successes ``on_batch_success(defer=...)`` held back, in order: one answer's,
        with the collector paused when their records add up to ``collector.PAUSE_MIN`` (at 10,000 partitions an
        answer completes thousands of batches of a record or two, each far below it: as many ``RecordMetadata``
        and wake-ups as one large batch, and as many young collections between them without the pause)."""
        with collector.paused_for(sum(d[0].record_count for d in deferred)):
            for batch, base_offset, log_append_time_ms in deferred:
                if batch.complete(base_offset, log_append_time_ms):
                    self._finish(batch, None)
        deferred.clear()

    def on_batch_error(self, batch: ProducerBatch, error: BaseException, now: float, *,
                       leader_epoch: int | None = None) -> RetryDecision | None:
        """An attempt failed. Retry (back in the queue, in order) or fail the records; None when the batch
        had already completed. ``leader_epoch``: the partition's epoch after applying any KIP-951 hint."""
        if batch.done:
            return None
        pq = self._take_in_flight(batch)
        batch.state = BatchState.QUEUED
        decision = plan_retry(batch, error, now, retries=self.retries, backoff=self._backoff,
                              leader_epoch=leader_epoch, closing=self._aborting)
        if decision.retry:
            self._requeue(pq, batch)
            self._hooks.emit(events.BATCH_RETRY, topic=batch.tp.topic, partition=batch.tp.partition,
                             attempt=batch.attempts, reason=decision.reason, skip_backoff=decision.skip_backoff,
                             records=batch.record_count,
                             backoff_ms=decision.retry_at - now)
        elif decision.expired:
            # its deadline came before this outcome was handled (the two timers fall due in one event-loop pass
            # when request_timeout_ms == delivery_timeout_ms): the same DeliveryTimeoutError ``expire`` gives
            self._expire(batch, "in-flight", now, cause=error)
        else:
            batch.fail(error)
            self._finish(batch, error)
        return decision

    def split(self, batch: ProducerBatch, now: float) -> list[ProducerBatch]:
        """The broker refused ``batch`` as too large (MESSAGE_TOO_LARGE): re-encode its records into smaller batches
        that take its place in the queue, as the Java producer's ``splitAndReenqueue``; returns them. Empty (and
        nothing changes) for a lone record, which can only fail, or a batch already completed.

        Each piece holds at most half the smallest size refused for the topic (a record is never cut), so pieces of
        a refused piece are halved again and a limit is found in log2(records) rounds at worst. The pieces keep the
        batch's records in order, their completions, its creation time and delivery deadline, and its sequence
        numbers divided between them (so batches already sent behind it stay valid); they count as not tried yet.
        """
        if batch.done or batch.record_count < 2 or self._aborting:
            return []
        pq = self._take_in_flight(batch)
        records = list(batch.payload.records())
        sizes = [estimate_record_size(key, value, headers) for _, key, value, headers in records]
        topic = batch.tp.topic
        refused = min(sum(sizes), self._refused_size.get(topic, 1 << 62))
        self._refused_size[topic] = refused
        target = -(-refused // 2)
        starts = [0]
        size = 0
        for i, record_size in enumerate(sizes):
            if size and size + record_size > target:
                starts.append(i)
                size = 0
            size += record_size
        extra = len(starts) - 1
        # room in creation order right behind the batch: everything newer of its partition moves up
        for other in (*pq.in_flight, *pq.queue):
            if other.index > batch.index:
                other.index += extra
        pq.next_index += extra
        pieces: list[ProducerBatch] = []
        sequence = batch.base_sequence
        for n, (lo, hi) in enumerate(zip(starts, [*starts[1:], len(records)])):
            piece = ProducerBatch(batch.tp, batch.index + n,
                                  self._new_payload(batch.tp, _kv_size(records[lo][1:3]), False),
                                  batch.created_at, self.delivery_timeout_ms)
            piece.deadline = batch.deadline
            piece.open = False
            piece.piece = True
            piece.current_leader_epoch = batch.current_leader_epoch
            append = piece.payload.append_at
            for delta, (timestamp_ms, key, value, headers) in enumerate(records[lo:hi]):
                if append(delta, timestamp_ms, key, value, headers) is None:
                    raise IllegalStateError(f"{batch!r}: a split piece refused record {lo + delta}")
            piece.record_count = hi - lo
            piece.reserved_bytes = BATCH_OVERHEAD + sum(sizes[lo:hi])
            if sequence >= 0:      # sequenced: keep the batch's numbers (re-sequenced anyway under a new identity)
                piece.base_sequence, piece.producer_id, piece.producer_epoch = \
                    sequence, batch.producer_id, batch.producer_epoch
                piece.payload.set_producer_state(batch.producer_id, batch.producer_epoch, sequence)
                sequence = (sequence + piece.record_count) % _MAX_SEQUENCE
            pieces.append(piece)
        batch.hand_over(pieces, starts)
        for piece in pieces:
            self._requeue(pq, piece)
        self._used += sum(p.reserved_bytes for p in pieces) - batch.reserved_bytes
        batch.reserved_bytes = 0
        self._incomplete += extra
        if self._waiters:
            self._wake_waiters()
        self._hooks.emit(events.BATCH_SPLIT, topic=topic, partition=batch.tp.partition, records=batch.record_count,
                         batches=len(pieces), size_bytes=refused)
        return pieces

    @staticmethod
    def _requeue(pq: _Partition, batch: ProducerBatch) -> None:
        dq = pq.queue
        i = 0
        for i, queued in enumerate(dq):       # noqa: B007 - position of the first newer batch
            if queued.index > batch.index:
                break
        else:
            i = len(dq)
        dq.insert(i, batch)

    def _finish(self, batch: ProducerBatch, error: BaseException | None) -> None:
        self._release(batch)
        self._hooks.emit(events.BATCH_COMPLETED, topic=batch.tp.topic, partition=batch.tp.partition,
                         records=batch.record_count, attempts=batch.attempts + 1 if error is None else batch.attempts,
                         error=None if error is None else type(error).__name__)
        if self.on_batch_done is not None:
            self.on_batch_done(batch)

    # ------------------------------------------------------------------ deadlines
    def expire(self, now: float) -> list[ExpiredBatch]:
        """Fail batches whose delivery deadline has passed (KIP-91), head-first per partition; close open
        batches older than ``append_window_ms`` to further records."""
        expired: list[ExpiredBatch] = []
        window = self.append_window_ms
        for pq in self._partitions.values():
            while pq.in_flight and pq.in_flight[0].deadline <= now:
                batch = pq.in_flight.pop(0)
                self._node_answered(batch)
                expired.append(self._expire(batch, "in-flight", now))
            queue = pq.queue
            while queue and queue[0].deadline <= now:
                batch = queue[0]
                stage = batch.stage(now)
                queue.popleft()
                expired.append(self._expire(batch, stage, now))
            if queue and queue[-1].open and queue[-1].created_at + window <= now:
                queue[-1].open = False
        return expired

    def _expire(self, batch: ProducerBatch, stage: str, now: float,
                cause: BaseException | None = None) -> ExpiredBatch:
        age = now - batch.created_at
        last = "" if cause is None else f"; the last attempt failed: {type(cause).__name__}: {cause}"
        error = DeliveryTimeoutError(
            f"{batch.record_count} record(s) for {batch.tp.topic}-{batch.tp.partition} expired {stage}: "
            f"{age:.0f} ms since batch creation >= delivery_timeout_ms ({self.delivery_timeout_ms:.0f}) "
            f"after {len(batch.attempt_epochs)} attempt(s){last}")
        error.__cause__ = cause
        batch.fail(error)
        self._hooks.emit(events.BATCH_EXPIRED, topic=batch.tp.topic, partition=batch.tp.partition, stage=stage,
                         records=batch.record_count, age_ms=age)
        self._finish(batch, error)
        return ExpiredBatch(batch, stage)

    def abort(self, error: BaseException) -> int:
        """Fail every incomplete batch (forced close); late responses are then ignored. Returns the count."""
        self._closing = True
        self._aborting = True
        count = 0
        for pq in self._partitions.values():
            batches = pq.in_flight + list(pq.queue)
            pq.in_flight.clear()
            self._node_in_flight.clear()
            pq.queue.clear()
            for batch in batches:
                if batch.fail(error):
                    self._finish(batch, error)
                    count += 1
        waiters, self._waiters = list(self._waiters), deque()
        for waiter in waiters:
            if not waiter.woken:
                waiter.woken = True
                waiter.wake()
        return count

    def abort_undrained(self, error: BaseException) -> tuple[int, bool]:
        """Fail every batch not in flight (an aborted transaction's records), leaving the accumulator open;
        batches in flight complete as their responses say. Returns the count, and whether one of them had a
        sequence already (a retry: its partition's sequence now has a gap only a new epoch closes)."""
        count = 0
        sequenced = False
        for pq in self._partitions.values():
            batches, pq.queue = list(pq.queue), deque()
            for batch in batches:
                sequenced = sequenced or batch.base_sequence >= 0
                if batch.fail(error):
                    self._finish(batch, error)
                    count += 1
        return count, sequenced

    # ------------------------------------------------------------------ timers
    def next_wakeup(self, now: float) -> float | None:
        """Earliest future linger end or backoff end, or the earliest delivery deadline; None when idle.
        ``wakeup_is_linger_end`` says afterwards whether that earliest timer is a linger end.

        Partitions that are ready but wait for a node (mute, connection, in-flight slot) or for an older
        batch are not timers: node state and completions wake the shell for those.
        """
        best: float | None = None
        linger_end = False
        hurry = self._flushing or self._closing or bool(self._waiters)
        window = self.append_window_ms
        for pq in self._partitions.values():
            if pq.in_flight:
                d = pq.in_flight[0].deadline
                if best is None or d < best:
                    best, linger_end = d, False
            if not pq.queue:
                continue
            head = pq.queue[0]
            d = head.deadline
            last = pq.queue[-1]
            if last.open and last.created_at + window < d:
                d = last.created_at + window            # when it stops taking records (see ``expire``)
            if best is None or d < best:
                best, linger_end = d, False
            if self._blocked(pq):
                continue
            if backing_off(head, now):
                t = head.retry_at
                if t < best:
                    best, linger_end = t, False
            elif head.attempts == 0 and head.open and len(pq.queue) == 1 and not hurry and not head.expedite:
                t = head.created_at + self.linger_ms
                if now < t < best:
                    best, linger_end = t, True
        self.wakeup_is_linger_end = linger_end
        return best

    def ready_nodes(self, now: float, leader_of: LeaderOf) -> set[int]:
        """Leaders with at least one ready partition (ignores node sendability).

        Observes each head's leader epoch first, exactly as ``drain`` does: a risen epoch makes a backing-off
        retry ready at once (KIP-951), and readiness must be judged on the same view the drain will use —
        otherwise the retry's node is left out of the sendable set, the drain skips it, and no timer remains
        to wake the scheduler for it.
        """
        nodes: set[int] = set()
        for pq in self._partitions.values():
            if pq.queue and not self._blocked(pq):
                lead = leader_of(pq.tp)
                if lead is not None and lead[0] >= 0:
                    observe_leader_epoch(pq.queue[0], lead[1])
                    if pq.in_flight and self._left_behind(pq, lead[0]):
                        continue
                    if self._head_ready(pq, now, lead[0]):
                        nodes.add(lead[0])
        return nodes

    def queue_sizes(self, topic: str, partitions: Sequence[int]) -> list[int]:
        """Batches waiting (not in flight) in each of ``topic``'s ``partitions``: the load statistics of
        KIP-794's adaptive partitioning. A partition whose leader is slow or down builds a queue, so the
        sticky partitioner sends it fewer unkeyed records."""
        parts = self._partitions
        sizes = []
        for p in partitions:
            pq = parts.get(TopicPartition(topic, p))
            sizes.append(len(pq.queue) if pq is not None else 0)
        return sizes

    def partitions_with_data(self) -> Iterable[TopicPartition]:
        return [tp for tp, pq in self._partitions.items() if pq.queue or pq.in_flight]
