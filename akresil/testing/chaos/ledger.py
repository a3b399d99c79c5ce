"""The soak's bookkeeping, pure: ``Ledger`` (every record sent and what the application was told), ``Consumption``
(what the group delivered), ``LogImage`` (what a fresh reader found in the log) and ``judge``, which compares them
and counts lost, duplicated, reordered, misplaced and redelivered records."""

from __future__ import annotations

from array import array
from collections import Counter
from typing import Iterable

from .payload import MAX_PRODUCERS, decode_payload, pack, unpack

__all__ = ["ACKED_NO_OFFSET", "FAILED", "PENDING", "Consumption", "Ledger", "LogImage", "judge"]

PENDING, FAILED, ACKED_NO_OFFSET = -1, -2, -3


class Ledger:
    """Every record the application handed to a producer and what it was told: offset, error or nothing yet.

    Compact (8 bytes a record) so a long soak can track millions: per (producer, partition) an array indexed
    by send sequence holding the acknowledged offset or a negative status.
    """

    def __init__(self) -> None:
        self._out: dict[tuple[int, int], array[int]] = {}
        self.errors: Counter[str] = Counter()

    def next(self, producer: int, partition: int) -> int:
        """Register one more record; returns its per-partition send sequence."""
        if not 0 <= producer < MAX_PRODUCERS:
            raise ValueError(f"producer: must be in 0..{MAX_PRODUCERS - 1}, got {producer}")
        out = self._out.setdefault((producer, partition), array("q"))
        out.append(PENDING)
        return len(out) - 1

    def _set(self, producer: int, partition: int, seq: int, value: int) -> None:
        out = self._out[(producer, partition)]
        if out[seq] != PENDING:
            raise ValueError(f"record {producer}.{partition}.{seq} completed twice "
                             f"(had {out[seq]}, now {value})")
        out[seq] = value

    def ack(self, producer: int, partition: int, seq: int, offset: int) -> None:
        self._set(producer, partition, seq, offset if offset >= 0 else ACKED_NO_OFFSET)

    def fail(self, producer: int, partition: int, seq: int, exc: BaseException) -> None:
        self._set(producer, partition, seq, FAILED)
        self.errors[type(exc).__name__] += 1

    def status(self, producer: int, partition: int, seq: int) -> int:
        return self._out[(producer, partition)][seq]

    def streams(self) -> Iterable[tuple[tuple[int, int], array[int]]]:
        return self._out.items()

    def max_acked_offset(self) -> dict[int, int]:
        """Per partition, the highest acknowledged offset (-1 if none): the log holds at least that much."""
        top: dict[int, int] = {}
        for (_, partition), out in self._out.items():
            top[partition] = max(top.get(partition, -1), max(out, default=-1))
        return top

    @property
    def sent(self) -> int:
        return sum(len(o) for o in self._out.values())

    def count(self, status: int) -> int:
        return sum(o.count(status) for o in self._out.values())

    @property
    def acked(self) -> int:
        return sum(sum(1 for v in o if v >= 0 or v == ACKED_NO_OFFSET) for o in self._out.values())


class Consumption:
    """What the consumer group delivered to the application, per (partition, offset): the first payload seen
    there and how many times it was delivered."""

    def __init__(self) -> None:
        self.first: dict[int, array[int]] = {}
        self.times: dict[int, bytearray] = {}
        self.deliveries = 0
        self.foreign = 0

    def record(self, partition: int, offset: int, value: bytes | None) -> None:
        ids = decode_payload(value)
        self.deliveries += 1
        if ids is None:
            self.foreign += 1
            return
        first = self.first.setdefault(partition, array("q"))
        times = self.times.setdefault(partition, bytearray())
        if offset >= len(first):
            first.extend([-1] * (offset + 1 - len(first)))
            times.extend(b"\0" * (offset + 1 - len(times)))
        if times[offset] == 0:
            first[offset] = pack(ids[0], ids[2]) if ids[1] == partition else -2
        times[offset] = min(255, times[offset] + 1)


class LogImage:
    """The partitions as a fresh reader found them: payload id per offset (-1 gap, -2 not the soak's)."""

    def __init__(self) -> None:
        self.ids: dict[int, array[int]] = {}
        self.misrouted = 0

    def add(self, partition: int, offset: int, value: bytes | None) -> None:
        ids = self.ids.setdefault(partition, array("q"))
        if offset < len(ids):
            raise ValueError(f"log image: partition {partition} offset {offset} read twice or out of order")
        ids.extend([-1] * (offset - len(ids)))
        decoded = decode_payload(value)
        if decoded is not None and decoded[1] != partition:
            self.misrouted += 1
            decoded = None
        ids.append(-2 if decoded is None else pack(decoded[0], decoded[2]))

    def end_offset(self, partition: int) -> int:
        return len(self.ids.get(partition, ()))


def judge(ledger: Ledger, log_image: LogImage, consumption: Consumption,
          examples: dict[str, list[str]] | None = None, max_examples: int = 5) -> dict[str, int]:
    """Counts comparing what the application was told with the log and with the group's deliveries.

    ``lost``: acknowledged, not in the log. ``misplaced``: in the log at another offset than acknowledged (or
    another partition). ``duplicates``: extra copies of a payload in the log. ``reordered``: an acknowledged
    record stored after a later-sent acknowledged record of the same producer and partition. ``phantom``:
    log records the application never sent. ``unconsumed``: acknowledged records the group never delivered.
    ``consumer_mismatch``: deliveries whose payload differs from the log's at that offset. ``examples`` (if
    given) collects up to ``max_examples`` descriptions per broken count, to start a diagnosis from.
    """
    def example(kind: str, text: str) -> None:
        if examples is not None and len(examples.setdefault(kind, [])) < max_examples:
            examples[kind].append(text)

    # where each (producer, partition, seq) occurs in the log
    copies: dict[tuple[int, int], bytearray] = {}
    first_at: dict[tuple[int, int], array[int]] = {}
    phantom = foreign = reordered = reordered_unacked = 0
    streams = dict(ledger.streams())
    for partition, ids in log_image.ids.items():
        last_acked: dict[int, int] = {}
        last_any: dict[int, int] = {}
        for offset, packed in enumerate(ids):
            if packed == -1:
                continue
            if packed == -2:
                foreign += 1
                continue
            producer, seq = unpack(packed)
            out = streams.get((producer, partition))
            if out is None or seq >= len(out):
                phantom += 1
                continue
            key = (producer, partition)
            c = copies.get(key)
            if c is None:
                c = copies[key] = bytearray(len(out))
                first_at[key] = array("q", [-1]) * len(out)
            c[seq] = min(255, c[seq] + 1)
            if c[seq] == 1:
                first_at[key][seq] = offset
            status = out[seq]
            if status >= 0 or status == ACKED_NO_OFFSET:
                if seq < last_acked.get(producer, -1):
                    reordered += 1
                    example("reordered", f"{producer}.{partition}.{seq} at offset {offset} after seq "
                                         f"{last_acked[producer]}")
                last_acked[producer] = max(seq, last_acked.get(producer, -1))
            elif seq < last_any.get(producer, -1):
                reordered_unacked += 1
            last_any[producer] = max(seq, last_any.get(producer, -1))
    duplicates = sum(max(0, n - 1) for c in copies.values() for n in c)
    lost = misplaced = failed_written = unconsumed = consumed = 0
    for key, out in streams.items():
        c = copies.get(key)
        at = first_at.get(key)
        partition = key[1]
        delivered = consumption.times.get(partition, bytearray())
        for seq, status in enumerate(out):
            n = c[seq] if c is not None else 0
            if status == FAILED:
                failed_written += n > 0
                continue
            if status == PENDING:
                continue
            if n == 0:
                lost += 1
                example("lost", f"{key[0]}.{partition}.{seq} acknowledged at offset {status}")
                continue
            assert at is not None
            offset = at[seq]
            if n > 1:
                example("duplicates", f"{key[0]}.{partition}.{seq} stored {n} times, first at offset {offset}")
            if status >= 0 and offset != status:
                misplaced += 1
                example("misplaced", f"{key[0]}.{partition}.{seq} acknowledged at offset {status}, "
                                     f"stored at {offset}")
            if offset < len(delivered) and delivered[offset]:
                consumed += 1
            else:
                unconsumed += 1
                example("unconsumed", f"{key[0]}.{partition}.{seq} at offset {offset}")
    mismatch = redelivered = 0
    for partition, first in consumption.first.items():
        ids = log_image.ids.get(partition, array("q"))
        times = consumption.times[partition]
        for offset, packed in enumerate(first):
            if times[offset] == 0:
                continue
            redelivered += times[offset] - 1
            if offset >= len(ids) or ids[offset] != packed:
                mismatch += 1
    return {"lost": lost, "misplaced": misplaced + log_image.misrouted, "duplicates": duplicates,
            "reordered": reordered, "reordered_unacked": reordered_unacked, "phantom": phantom,
            "foreign": foreign, "failed_but_written": failed_written, "consumed": consumed,
            "unconsumed": unconsumed, "redelivered": redelivered, "consumer_mismatch": mismatch}
