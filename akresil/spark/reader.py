"""Batch read: ``spark.read.format("akresil")`` — offset ranges planned on the driver, read by tasks."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSourceReader, InputPartition

from . import kafka_io
from .daemon_gc import freeze_long_lived
from .offsets import OffsetRange, check_starts, plan_ranges, resolve_spec, resolve_times, timestamp_queries
from .options import OffsetSpec, ReadOptions

if TYPE_CHECKING:     # Arrow loads where batches flow (tasks), not where Spark plans or commits
    import pyarrow as pa

__all__ = ["RangePartition", "AkresilBatchReader", "read_partition", "resolve_offsets", "with_group_id"]


class RangePartition(InputPartition):
    """One Spark input partition: offset ranges of Kafka partitions, read one after the other (picklable).

    A batch read has one range per partition; a micro-batch may pack several small ranges into one
    (``pack_ranges``)."""

    def __init__(self, *ranges: OffsetRange) -> None:
        if not ranges:
            raise ValueError("RangePartition: at least one offset range")
        super().__init__(ranges)
        self.ranges = ranges

    def __repr__(self) -> str:
        inner = ", ".join(f"{r.topic}-{r.partition} [{r.start}, {r.end})" for r in self.ranges)
        return f"RangePartition({inner})"


class AkresilBatchReader(DataSourceReader):
    """Resolves startingOffsets/endingOffsets once (ListOffsets) and reads exactly those ranges."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = with_group_id(options)

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        driver = driver_config(o)
        snap = kafka_io.snapshot(driver, o.subscription, allow_missing=False)
        starts = resolve_offsets(o.starting, snap, driver, starting=True, strategy=o.timestamp_strategy)
        ends = resolve_offsets(o.ending, snap, driver, starting=False)
        starts = check_starts(starts, snap.earliest, snap.latest, fail_on_data_loss=o.fail_on_data_loss,
                              context="startingOffsets")
        ranges = plan_ranges(starts, ends, min_partitions=o.min_partitions,
                             max_records_per_partition=o.max_records_per_partition,
                             fail_on_data_loss=o.fail_on_data_loss)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)


def with_group_id(options: ReadOptions) -> ReadOptions:
    """With ``groupIdPrefix``: the read's clients are named ``<prefix>-<uuid>-executor`` (tasks) and
    ``-driver`` (planning), as Spark names its Kafka source's consumer groups, so broker logs, quotas and
    request metrics show which query a connection belongs to. ``kafka.client.id`` wins when given."""
    if options.group_id_prefix is None or "client_id" in options.consumer:
        return options
    from dataclasses import replace

    group = f"{options.group_id_prefix}-{uuid.uuid4()}"
    return replace(options, consumer={**options.consumer, "client_id": f"{group}-executor"})


def driver_config(options: ReadOptions) -> dict[str, Any]:
    """The consumer configuration for driver-side look-ups (the executor client id renamed ``-driver``)."""
    cfg = dict(options.consumer)
    cid = cfg.get("client_id")
    if options.group_id_prefix is not None and isinstance(cid, str) and cid.endswith("-executor"):
        cfg["client_id"] = cid[:-len("executor")] + "driver"
    return cfg


def resolve_offsets(spec: OffsetSpec, snap: kafka_io.PartitionSnapshot, config: Mapping[str, Any], *,
                    starting: bool, strategy: str = "error") -> dict[Any, int]:
    """Concrete offsets for ``spec`` over the snapshot's partitions; timestamps go through ListOffsets."""
    name = spec.name or ("startingOffsets" if starting else "endingOffsets")
    if not spec.by_time:
        return resolve_spec(spec, snap.partitions, snap.earliest, snap.latest, name=name)
    queries = timestamp_queries(spec, snap.partitions)
    found = kafka_io.offsets_for_times(config, queries)
    return resolve_times(spec, queries, found, snap.latest, starting=starting, strategy=strategy)


def read_partition(options: ReadOptions, partition: Any) -> Iterator[pa.RecordBatch]:
    """Executor side of batch and streaming reads."""
    if type(partition) is InputPartition and partition.value is None:
        return iter(())        # Spark's stand-in when planning found nothing to read (an empty range list)
    if not isinstance(partition, RangePartition):
        raise TypeError(f"akresil reader got an input partition it did not plan: {partition!r}")
    return then_freeze(kafka_io.read_ranges(options.consumer, partition.ranges,
                                            include_headers=options.include_headers,
                                            fail_on_data_loss=options.fail_on_data_loss,
                                            poll_timeout_ms=options.poll_timeout_ms))


def then_freeze(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, then the worker's heap frozen once (``daemon_gc``) when the task has read them all."""
    yield from batches
    freeze_long_lived()
