"""Streaming read: ``spark.readStream.format("akresil")`` with Spark's Kafka-source offset semantics.

Offsets are ``{"topic": {"partition": next offset}}`` dicts that Spark writes to the query's checkpoint
before a micro-batch runs; a micro-batch reads ``[start, end)`` per partition, so a restarted query
resumes at the checkpointed end without loss or duplication. Spark's checkpoint is the only truth:
``commit(end)`` is not guaranteed for the last batch of a run and stores nothing. The offsets are looked
up through one Admin kept for the query (Spark runs the reader in a Python process of its own for the
query), not through a new client at every trigger.

Admission control: ``maxOffsetsPerTrigger`` becomes the default ``ReadMaxRows`` limit, shared across
partitions in proportion to their backlog. ``minOffsetsPerTrigger`` skips a trigger (``latestOffset``
returns the start, so Spark plans no micro-batch) while fewer new offsets are available, until
``maxTriggerDelay`` has passed since the last micro-batch; Spark's Python API has no composite read
limit, so the reader keeps that clock itself. ``Trigger.AvailableNow`` pins the offsets when the query
starts (``prepareForTriggerAvailableNow``) and never reads past them, honouring the limit per batch; its
triggers plan from that one look-up, as Spark's Kafka source does, instead of asking the brokers each time.
Partitions that appear later start at their earliest offset; a partition that disappears, or offsets
deleted before they were read, are data loss (an error unless failOnDataLoss=false).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition, SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from ..types import TopicPartition
from . import kafka_io
from .offsets import (
    DataLossError, OffsetRange, check_starts, delay_trigger, from_json, pack_ranges, plan_ranges, rate_limit, to_json,
)
from .options import ReadOptions
from .reader import (
    RangePartition, driver_config, read_partition, resolve_offsets, then_freeze, with_group_id,
)

if TYPE_CHECKING:     # Arrow loads where batches flow (tasks), not where Spark plans or commits
    import pyarrow as pa

__all__ = ["AkresilStreamReader", "AkresilDriverStreamReader"]

log = logging.getLogger(__name__)


class AkresilStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = with_group_id(options)
        self._driver = driver_config(self.options)
        #: the offsets Trigger.AvailableNow pinned when the query started (None: follow the log)
        self._pinned: kafka_io.PartitionSnapshot | None = None
        #: wall-clock ms of the last trigger let through (0: never, so the first one is, as in Spark's Kafka
        #: source); minOffsetsPerTrigger holds triggers back for at most maxTriggerDelay after it
        self._last_trigger_ms = 0.0

    def _now_ms(self) -> float:
        return time.time() * 1000

    def _snapshot(self) -> kafka_io.PartitionSnapshot:
        """The subscription's offsets: looked up now, or under Trigger.AvailableNow the ones pinned when the query
        started. Spark's Kafka source looks nothing up per trigger then either; a look-up is a round trip through
        this process's Admin on every micro-batch (10-30 ms), and offsets deleted meanwhile are still found when
        a task reads them."""
        if self._pinned is not None:
            return self._pinned
        return kafka_io.snapshot(self._driver, self.options.subscription, allow_missing=True, cached=True)

    # ------------------------------------------------------------------ offsets (driver)
    def initialOffset(self) -> dict[str, Any]:
        o = self.options
        snap = self._snapshot()      # after prepareForTriggerAvailableNow: its look-up serves both
        starts = resolve_offsets(o.starting, snap, self._driver, starting=True, strategy=o.timestamp_strategy)
        return to_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._pinned = None
        self._pinned = self._snapshot()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        o = self.options
        starts = from_json(start)
        snap = self._snapshot()
        latest = dict(snap.latest)
        for tp in starts:
            if tp not in snap.latest:
                _lost(o.fail_on_data_loss, f"partition {tp.topic}-{tp.partition} was deleted")
        # partitions created since the start offsets were taken begin at their earliest offset
        full_start = {tp: starts.get(tp, snap.earliest.get(tp, 0)) for tp in latest}
        full_start = check_starts(full_start, snap.earliest, snap.latest,
                                  fail_on_data_loss=o.fail_on_data_loss, context="streaming offsets")
        # never move backwards (a lower latest means truncation; the range check reports it)
        latest = {tp: max(latest[tp], full_start[tp]) for tp in latest}
        now = self._now_ms()
        if self._pinned is None and delay_trigger(full_start, latest, min_offsets=o.min_offsets_per_trigger,
                                                  max_delay_ms=o.max_trigger_delay_ms,
                                                  last_trigger_ms=self._last_trigger_ms, now_ms=now):
            return start          # too few new offsets, and maxTriggerDelay not over: no micro-batch yet
        self._last_trigger_ms = now   # as Spark's Kafka source: the delay counts from the last trigger let through
        if isinstance(limit, ReadMaxRows):
            ends = rate_limit(full_start, latest, limit.max_rows)
        elif isinstance(limit, ReadAllAvailable):
            ends = latest
        else:
            raise ValueError(f"akresil stream reader: unsupported read limit {limit!r}")
        # keep partitions of the start that vanished (with failOnDataLoss=false) so offsets stay monotonic
        for tp, off in starts.items():
            ends.setdefault(tp, off)
        return to_json(ends)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        o = self.options
        starts, ends = from_json(start), from_json(end)
        # a partition new in `end` was planned from its earliest offset in latestOffset; find that offset
        new = [tp for tp in ends if tp not in starts]
        if new:
            snap = self._snapshot()
            for tp in new:
                starts[tp] = snap.earliest.get(tp, 0)
        ranges = plan_ranges({tp: starts[tp] for tp in ends}, ends, min_partitions=o.min_partitions,
                             max_records_per_partition=o.max_records_per_partition,
                             fail_on_data_loss=o.fail_on_data_loss)
        if o.min_partitions is not None or o.max_records_per_partition is not None:
            return [RangePartition(r) for r in ranges]
        return [RangePartition(*group) for group in pack_ranges(ranges, o.min_records_per_partition)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in Kafka."""

    def stop(self) -> None:
        """The query stopped: close the Admin its triggers asked through (Spark runs the reader in a process of
        its own, started for the query)."""
        kafka_io.close_worker_clients()


def _lost(fail: bool, message: str) -> None:
    if fail:
        raise DataLossError(message + ". Set failOnDataLoss=false to continue past lost data.")
    log.warning("%s; continuing because failOnDataLoss=false", message)


class AkresilDriverStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """``microBatchRead=driver``: Spark's simple stream reader. The source's runner process on the driver reads a
    micro-batch while it plans it (``read``), and Spark hands the rows to the micro-batch's single task through
    its block manager, so the task runs no Python reader worker of its own: one Python worker per task (the
    sink's) instead of two. Offsets, limits and triggers are the task reader's (``AkresilStreamReader``);
    ``readBetweenOffsets`` re-reads a micro-batch Spark replays after a restart (in an executor's Python worker)."""

    def __init__(self, options: ReadOptions) -> None:
        self._planner = AkresilStreamReader(options)
        self._held: kafka_io.HeldConsumerReader | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_held": None}      # Spark pickles the reader for replays; the consumer stays

    @property
    def options(self) -> ReadOptions:
        return self._planner.options

    def initialOffset(self) -> dict[str, Any]:
        """The query's first offsets; the held consumer starts fetching from them now, so the first micro-batch's
        records are on their way while Spark logs its offsets (a restarted query starts at its first read)."""
        offsets = self._planner.initialOffset()
        self._held_reader().hold(from_json(offsets))
        return offsets

    def _held_reader(self) -> kafka_io.HeldConsumerReader:
        if self._held is None:
            o = self.options
            self._held = kafka_io.HeldConsumerReader(o.consumer, include_headers=o.include_headers,
                                                     fail_on_data_loss=o.fail_on_data_loss,
                                                     poll_timeout_ms=o.poll_timeout_ms)
        return self._held

    def prepareForTriggerAvailableNow(self) -> None:
        self._planner.prepareForTriggerAvailableNow()

    def read(self, start: dict[str, Any]) -> tuple[Iterator[pa.RecordBatch], dict[str, Any]]:
        """The next micro-batch's end (as ``latestOffset`` plans it) and its rows, read through the query's held
        consumer; Spark caches them until the micro-batch runs."""
        end = self._planner.latestOffset(start, self._planner.getDefaultReadLimit())
        if from_json(end) == from_json(start):
            return iter(()), start        # nothing new (or held back by minOffsetsPerTrigger): no micro-batch
        ranges = self._ranges(start, end)
        if not ranges:
            return iter(()), end
        # a list's iterator: Spark copies the cached iterator when it sends the rows, so it must be copyable
        return iter(self._held_reader().read(ranges)), end

    def readBetweenOffsets(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[pa.RecordBatch]:
        """A micro-batch whose rows the driver no longer holds (Spark replays it after a restart): read in an
        executor's task, as the task reader reads."""
        o = self.options
        ranges = self._ranges(start, end)
        if not ranges:
            return iter(())
        return then_freeze(kafka_io.read_ranges(o.consumer, ranges, include_headers=o.include_headers,
                                                fail_on_data_loss=o.fail_on_data_loss,
                                                poll_timeout_ms=o.poll_timeout_ms))

    def _ranges(self, start: dict[str, Any], end: dict[str, Any]) -> list[OffsetRange]:
        """The micro-batch's offset ranges, one per Kafka partition (the task layout options are refused with
        microBatchRead=driver, so the planner packs whole ranges)."""
        return [r for part in self._planner.partitions(start, end) if isinstance(part, RangePartition)
                for r in part.ranges]

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in Kafka."""

    def stop(self) -> None:
        if self._held is not None:
            self._held.close()
        self._planner.stop()
