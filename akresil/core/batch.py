"""A producer batch: records for one partition, their completion callbacks, and its delivery bookkeeping.

The core never touches asyncio: each record carries a plain callback ``(metadata, error)`` that the I/O
shell maps to a future. A batch completes exactly once (success, failure or expiry); anything that arrives
after that, such as the late response of an expired in-flight batch, is ignored.
"""

from __future__ import annotations

import enum
import logging
from typing import Callable, Protocol, Sequence

from ..types import RecordMetadata, TopicPartition

log = logging.getLogger(__name__)

RecordCallback = Callable[["RecordMetadata | None", "BaseException | None"], None]
Header = tuple[str, "bytes | None"]

#: batch header of the magic-2 format; charged once per batch against ``buffer_memory``
BATCH_OVERHEAD = 61
#: worst-case per-record framing (length, attributes, timestamp and offset deltas as varints)
RECORD_OVERHEAD = 21


def estimate_record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()) -> int:
    """Upper bound of one record's encoded size (varint lengths counted as 5 bytes: cheap and safe)."""
    size = RECORD_OVERHEAD + 10
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    for name, hv in headers:
        size += 10 + len(name) * 4 + (len(hv) if hv is not None else 0)   # utf-8 worst case for the name
    return size


class PayloadBuilder(Protocol):
    """What the accumulator needs from the wire encoder (``akresil.protocol.records.BatchBuilder``)."""

    record_count: int

    def append(self, timestamp_ms: int, key: bytes | None, value: bytes | None,
               headers: Sequence[Header]) -> bool: ...

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None: ...

    def build(self) -> bytes: ...


class BatchState(enum.Enum):
    QUEUED = "queued"            # waiting in its partition's queue (first attempt, or a retry)
    IN_FLIGHT = "in-flight"      # part of a request whose response has not arrived
    SUCCEEDED = "succeeded"
    FAILED = "failed"            # error or delivery timeout


class ProducerBatch:
    """One partition's records travelling together; ``deadline`` is ``created_at + delivery_timeout_ms``."""

    __slots__ = ("tp", "index", "created_at", "deadline", "payload", "timestamps", "callbacks", "state",
                 "open", "attempts", "last_attempt_at", "retry_at", "base_sequence", "producer_id",
                 "producer_epoch", "attempt_epochs", "current_leader_epoch", "attempts_when_leader_changed",
                 "reserved_bytes", "error", "base_offset", "node_id")

    def __init__(self, tp: TopicPartition, index: int, payload: PayloadBuilder, now: float,
                 delivery_timeout_ms: float) -> None:
        self.tp = tp
        #: creation order within the partition: queues, in-flight lists and retries keep this order
        self.index = index
        self.created_at = now
        self.deadline = now + delivery_timeout_ms
        self.payload = payload
        self.timestamps: list[int] = []
        self.callbacks: list[RecordCallback | None] = []
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

    @property
    def record_count(self) -> int:
        return len(self.timestamps)

    @property
    def done(self) -> bool:
        return self.state is BatchState.SUCCEEDED or self.state is BatchState.FAILED

    def stage(self, now: float) -> str:
        """Where the batch is, for errors and events: queued, backing-off or in-flight."""
        if self.state is BatchState.IN_FLIGHT:
            return "in-flight"
        if self.state is BatchState.QUEUED and self.attempts > 0 and now < self.retry_at:
            return "backing-off"
        return self.state.value

    def try_append(self, timestamp_ms: int, key: bytes | None, value: bytes | None, headers: Sequence[Header],
                   callback: RecordCallback | None) -> bool:
        if not self.open:
            return False
        if not self.payload.append(timestamp_ms, key, value, headers):
            self.open = False
            return False
        self.timestamps.append(timestamp_ms)
        self.callbacks.append(callback)
        return True

    # ------------------------------------------------------------------ completion (exactly once)
    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> bool:
        """Succeed every record; False (and nothing happens) when the batch already completed."""
        if self.done:
            return False
        self.state = BatchState.SUCCEEDED
        self.open = False
        self.base_offset = base_offset
        topic, partition = self.tp
        for i, callback in enumerate(self.callbacks):
            if callback is None:
                continue
            offset = base_offset + i if base_offset >= 0 else -1
            ts = log_append_time_ms if log_append_time_ms >= 0 else self.timestamps[i]
            _call(callback, RecordMetadata(topic, partition, offset, ts), None)
        self.callbacks = []
        return True

    def fail(self, error: BaseException) -> bool:
        """Fail every record with ``error``; False when the batch already completed."""
        if self.done:
            return False
        self.state = BatchState.FAILED
        self.open = False
        self.error = error
        for callback in self.callbacks:
            if callback is not None:
                _call(callback, None, error)
        self.callbacks = []
        return True

    def __repr__(self) -> str:
        return (f"ProducerBatch({self.tp.topic}-{self.tp.partition} #{self.index}, records={self.record_count}, "
                f"state={self.state.value}, attempts={self.attempts}, seq={self.base_sequence})")


def _call(callback: RecordCallback, metadata: RecordMetadata | None, error: BaseException | None) -> None:
    try:
        callback(metadata, error)
    except Exception:  # noqa: BLE001 - one bad callback must not stop the others or the scheduler
        log.exception("record completion callback %r raised", callback)
