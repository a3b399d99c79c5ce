"""Offset arithmetic of the Spark source (pure): resolve offset options, plan and split ranges, rate limits.

Everything here works on plain dicts ``{TopicPartition: offset}`` that the I/O shell filled from ListOffsets,
so the semantics Spark's Kafka source defines (ranges ``[start, end)``, proportional ``maxOffsetsPerTrigger``,
``minPartitions`` splitting, data-loss checks, the JSON offsets Spark checkpoints) are tested without Spark
or a broker.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..errors import ConfigError, KafkaError
from ..types import TopicPartition
from .options import EARLIEST, LATEST, OffsetSpec

log = logging.getLogger(__name__)

__all__ = [
    "OffsetRange", "DataLossError", "resolve_spec", "plan_ranges", "split_ranges", "pack_ranges", "rate_limit",
    "check_starts", "to_json", "from_json", "timestamp_queries", "resolve_times", "delay_trigger",
]

Offsets = Mapping[TopicPartition, int]


class DataLossError(KafkaError):
    """Offsets Spark asked for are gone (retention, deleted partition); raised with failOnDataLoss=true."""

    errno = -1
    retriable = False


@dataclass(frozen=True)
class OffsetRange:
    """Records ``[start, end)`` of one partition: the unit of one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.end - self.start


def resolve_spec(spec: OffsetSpec, partitions: Iterable[TopicPartition], earliest: Offsets, latest: Offsets,
                 *, name: str) -> dict[TopicPartition, int]:
    """Concrete offsets for ``partitions``: earliest/latest placeholders replaced by the broker's answers.

    Explicit JSON must name every partition, as in Spark's source, so a forgotten partition is an error and
    not a silent choice.
    """
    out: dict[TopicPartition, int] = {}
    missing = []
    for tp in partitions:
        wanted = spec.for_partition(tp)
        if wanted is None:
            missing.append(tp)
            continue
        out[tp] = earliest[tp] if wanted == EARLIEST else latest[tp] if wanted == LATEST else wanted
    if missing:
        raise ConfigError(f"{name}: explicit offsets must name every partition; missing "
                               + ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(missing)))
    unknown = sorted(set(spec.offsets) - set(out))
    if unknown:
        raise ConfigError(f"{name}: names partitions that do not exist: "
                               + ", ".join(f"{tp.topic}-{tp.partition}" for tp in unknown))
    return out


def timestamp_queries(spec: OffsetSpec, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """The ListOffsets-by-timestamp lookups a timestamp spec needs, one per partition.

    ``<x>Timestamp`` applies to every partition; ``<x>OffsetsByTimestamp`` JSON must name every partition
    and only existing ones, as explicit offsets must.
    """
    parts = list(partitions)
    if spec.timestamp is not None:
        return {tp: spec.timestamp for tp in parts}
    missing = [tp for tp in parts if tp not in spec.timestamps]
    if missing:
        raise ConfigError(f"{spec.name}: must name every partition; missing "
                          + ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(missing)))
    unknown = sorted(set(spec.timestamps) - set(parts))
    if unknown:
        raise ConfigError(f"{spec.name}: names partitions that do not exist: "
                          + ", ".join(f"{tp.topic}-{tp.partition}" for tp in unknown))
    return {tp: spec.timestamps[tp] for tp in parts}


def resolve_times(spec: OffsetSpec, queries: Offsets, found: Mapping[TopicPartition, int | None], latest: Offsets,
                  *, starting: bool, strategy: str = "error") -> dict[TopicPartition, int]:
    """Offsets for the answers of ``timestamp_queries``: the first offset at or after each timestamp.

    Where no record is that recent, an end offset is the latest offset (Spark's rule); a start offset is an
    error naming the partition (startingOffsetsByTimestampStrategy=error, the default) or the latest offset
    (strategy ``latest``).
    """
    out: dict[TopicPartition, int] = {}
    for tp, ts in queries.items():
        off = found.get(tp)
        if off is None:
            if starting and strategy == "error":
                raise ConfigError(
                    f"{spec.name}: no record of {tp.topic}-{tp.partition} has a timestamp at or after {ts}; set "
                    "startingOffsetsByTimestampStrategy=latest to start at the end of such partitions")
            off = latest[tp]
        out[tp] = off
    return out


def delay_trigger(starts: Offsets, ends: Offsets, *, min_offsets: int | None, max_delay_ms: int,
                  last_trigger_ms: float, now_ms: float) -> bool:
    """minOffsetsPerTrigger / maxTriggerDelay: True when this trigger should be skipped, because fewer than
    ``min_offsets`` new offsets are available and the last micro-batch started less than ``max_delay_ms``
    ago."""
    if min_offsets is None:
        return False
    available = sum(max(0, end - starts.get(tp, end)) for tp, end in ends.items())
    return available < min_offsets and now_ms - last_trigger_ms < max_delay_ms


def check_starts(starts: Offsets, earliest: Offsets, latest: Offsets, *, fail_on_data_loss: bool,
                 context: str) -> dict[TopicPartition, int]:
    """Starts that are still in the log: below the log start (retention) or above the end (topic recreated)
    is data loss — an error with ``failOnDataLoss``, otherwise a warning and the earliest offset."""
    out: dict[TopicPartition, int] = {}
    for tp, start in starts.items():
        lo, hi = earliest.get(tp), latest.get(tp)
        if lo is None or hi is None:
            _data_loss(fail_on_data_loss, f"{context}: partition {tp.topic}-{tp.partition} no longer exists")
            continue
        if start < lo or start > hi:
            _data_loss(fail_on_data_loss,
                       f"{context}: offset {start} of {tp.topic}-{tp.partition} is outside the log [{lo}, {hi}]"
                       + (" (records were deleted before they were read)" if start < lo else
                          " (the partition was truncated or recreated)"))
            out[tp] = lo
        else:
            out[tp] = start
    return out


def plan_ranges(starts: Offsets, ends: Offsets, *, min_partitions: int | None = None,
                max_records_per_partition: int | None = None, fail_on_data_loss: bool = True,
                ) -> list[OffsetRange]:
    """One range per partition with data in ``[start, end)``, then split (see ``split_ranges``).

    Partitions only in ``ends`` (new since ``starts`` was taken) start at the offsets the caller put in
    ``starts`` for them; an end before its start means records vanished (data loss).
    """
    ranges = []
    for tp in sorted(ends):
        end = ends[tp]
        if tp not in starts:
            raise ValueError(f"no start offset for {tp.topic}-{tp.partition}")
        start = starts[tp]
        if end < start:
            _data_loss(fail_on_data_loss, f"end offset {end} of {tp.topic}-{tp.partition} is before its start "
                                          f"{start}")
            continue
        if end > start:
            ranges.append(OffsetRange(tp.topic, tp.partition, start, end))
    return split_ranges(ranges, min_partitions=min_partitions, max_records_per_partition=max_records_per_partition)


def split_ranges(ranges: list[OffsetRange], *, min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Split ranges so Spark gets at least ``min_partitions`` tasks and none reads more than
    ``max_records_per_partition`` offsets. Pieces of a range are near-equal and cover it exactly; with
    ``min_partitions`` a range gets pieces in proportion to its share of all offsets (at least one)."""
    out = ranges
    total = sum(r.size for r in ranges)
    if min_partitions is not None and min_partitions > len(ranges) and total > 0:
        split: list[OffsetRange] = []
        for r in ranges:
            pieces = max(1, (r.size * min_partitions + total // 2) // total)
            split.extend(_cut(r, pieces))
        out = split
    if max_records_per_partition is not None:
        capped: list[OffsetRange] = []
        for r in out:
            pieces = -(-r.size // max_records_per_partition)
            capped.extend(_cut(r, pieces) if pieces > 1 else [r])
        out = capped
    return out


def pack_ranges(ranges: list[OffsetRange], min_records_per_task: int) -> list[list[OffsetRange]]:
    """Group ranges into ``ceil(total / min_records_per_task)`` tasks (at most one per range), balanced by
    size: each task of a Python data source costs a Python worker hand-over, Arrow set-up and a producer flush,
    so a small micro-batch over many partitions runs faster as one or two tasks than as one task per partition.

    A pure function of the ranges (largest first, ties in topic/partition order, each into the lightest task so
    far, lowest index on a tie), so a replayed micro-batch gets the same tasks with the same rows, which the
    exactly-once sink's replay detection needs. Each task lists its ranges in topic/partition order.
    """
    total = sum(r.size for r in ranges)
    tasks = min(len(ranges), max(1, -(-total // min_records_per_task)))
    if tasks >= len(ranges):
        return [[r] for r in ranges]
    groups: list[list[OffsetRange]] = [[] for _ in range(tasks)]
    loads = [0] * tasks
    for r in sorted(ranges, key=lambda r: (-r.size, r.topic, r.partition, r.start)):
        i = loads.index(min(loads))
        groups[i].append(r)
        loads[i] += r.size
    return [sorted(g, key=lambda r: (r.topic, r.partition, r.start)) for g in groups]


def _cut(r: OffsetRange, pieces: int) -> list[OffsetRange]:
    pieces = min(pieces, r.size)
    bounds = [r.start + (r.size * i) // pieces for i in range(pieces + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def rate_limit(starts: Offsets, latest: Offsets, max_offsets: int) -> dict[TopicPartition, int]:
    """End offsets of a micro-batch that reads at most ``max_offsets`` offsets in all.

    The budget is shared in proportion to each partition's backlog (Spark's ``maxOffsetsPerTrigger``
    semantics); rounding uses largest remainders so exactly ``min(max_offsets, backlog)`` are taken and no
    partition with a backlog starves forever. Partitions absent from ``starts`` are not limited here.
    """
    backlog = {tp: max(0, latest[tp] - starts[tp]) for tp in latest if tp in starts}
    total = sum(backlog.values())
    ends = dict(latest)
    if total <= max_offsets:
        return ends
    shares = {tp: (b * max_offsets) // total for tp, b in backlog.items()}
    left = max_offsets - sum(shares.values())
    by_remainder = sorted(backlog, key=lambda tp: (-((backlog[tp] * max_offsets) % total), tp))
    for tp in by_remainder[:left]:
        shares[tp] += 1
    for tp, share in shares.items():
        ends[tp] = starts[tp] + min(share, backlog[tp])
    return ends


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """Spark's Kafka offset JSON: ``{"topic": {"0": 23, "1": 5}}`` (partition keys are strings)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_json(obj: Any) -> dict[TopicPartition, int]:
    """Inverse of ``to_json``; a malformed checkpoint is reported, not guessed at."""
    if not isinstance(obj, dict):
        raise ConfigError(f"offset JSON must be an object {{topic: {{partition: offset}}}}, got {obj!r}")
    out: dict[TopicPartition, int] = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise ConfigError(f"offset JSON: partitions of {topic!r} must be an object, got {parts!r}")
        for p, off in parts.items():
            try:
                tp = TopicPartition(topic, int(p))
            except (TypeError, ValueError):
                raise ConfigError(f"offset JSON: partition {p!r} of {topic!r} is not an int") from None
            if not isinstance(off, int) or isinstance(off, bool):
                raise ConfigError(f"offset JSON: offset of {topic}-{p} is not an int: {off!r}")
            out[tp] = off
    return out


def _data_loss(fail: bool, message: str) -> None:
    if fail:
        raise DataLossError(message + ". Set failOnDataLoss=false to continue past lost data.")
    log.warning("%s; continuing because failOnDataLoss=false", message)

