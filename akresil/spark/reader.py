"""Batch read: ``spark.read.format("akresil")`` — offset ranges planned on the driver, read by tasks."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from . import kafka_io
from .offsets import OffsetRange, check_starts, plan_ranges, resolve_spec
from .options import ReadOptions

__all__ = ["RangePartition", "AkresilBatchReader", "read_partition"]


class RangePartition(InputPartition):
    """One Spark input partition: one offset range of one Kafka partition (picklable)."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng

    def __repr__(self) -> str:
        r = self.range
        return f"RangePartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


class AkresilBatchReader(DataSourceReader):
    """Resolves startingOffsets/endingOffsets once (ListOffsets) and reads exactly those ranges."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        snap = kafka_io.snapshot(o.consumer, o.subscription, allow_missing=False)
        starts = resolve_spec(o.starting, snap.partitions, snap.earliest, snap.latest, name="startingOffsets")
        ends = resolve_spec(o.ending, snap.partitions, snap.earliest, snap.latest, name="endingOffsets")
        starts = check_starts(starts, snap.earliest, snap.latest, fail_on_data_loss=o.fail_on_data_loss,
                              context="startingOffsets")
        ranges = plan_ranges(starts, ends, min_partitions=o.min_partitions,
                             max_records_per_partition=o.max_records_per_partition,
                             fail_on_data_loss=o.fail_on_data_loss)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)


def read_partition(options: ReadOptions, partition: Any) -> Iterator[pa.RecordBatch]:
    """Executor side of batch and streaming reads."""
    if not isinstance(partition, RangePartition):
        raise TypeError(f"akresil reader got an input partition it did not plan: {partition!r}")
    return kafka_io.read_range(options.consumer, partition.range, include_headers=options.include_headers,
                               fail_on_data_loss=options.fail_on_data_loss,
                               poll_timeout_ms=options.poll_timeout_ms)
