"""The I/O shell of the Spark source: akresil clients driven from Spark's synchronous Python callbacks.

Spark calls a data source from plain (blocking) Python in driver-side planner processes and in executor
workers that are reused across tasks. Every call here therefore owns its event loop: driver-side look-ups
use ``anyio.run``; a read task runs its Consumer inside an anyio blocking portal (an event loop thread
the task's generator talks to), so records stream out batch by batch with bounded memory, and leaving the
generator — end of range, Spark's ``limit``, task kill — closes the consumer and joins the loop thread.
Nothing survives a call, so nothing leaks from one task into the next one on the same worker.
"""

from __future__ import annotations

import re
import time
from typing import Any, Iterator, Mapping

import anyio
import pyarrow as pa
from anyio.from_thread import start_blocking_portal

from .. import errors
from ..admin import EARLIEST as LIST_EARLIEST, LATEST as LIST_LATEST, Admin
from ..config import OPTIONS_BY_NAME
from ..consumer import Consumer
from ..types import TopicPartition
from .offsets import DataLossError, OffsetRange
from .options import Subscription
from .schema import records_to_batch

__all__ = ["PartitionSnapshot", "snapshot", "read_range", "admin_config"]

#: rows per Arrow batch handed to Spark (Spark's own default for Arrow batches is 10 000)
BATCH_ROWS = 10_000


def admin_config(client: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of a producer/consumer configuration an Admin client accepts."""
    return {k: v for k, v in client.items() if "admin" in OPTIONS_BY_NAME[k].clients}


class PartitionSnapshot:
    """Partitions of a subscription with their earliest and latest offsets at one moment."""

    __slots__ = ("partitions", "earliest", "latest")

    def __init__(self, partitions: list[TopicPartition], earliest: dict[TopicPartition, int],
                 latest: dict[TopicPartition, int]) -> None:
        self.partitions = partitions
        self.earliest = earliest
        self.latest = latest


def snapshot(config: Mapping[str, Any], subscription: Subscription, *, allow_missing: bool) -> PartitionSnapshot:
    """Blocking: the subscription's partitions and their offset bounds (ListOffsets via the leaders).

    ``allow_missing``: a subscribed topic that does not exist yet has no partitions (streams wait for it);
    otherwise it is an error naming the topic.
    """
    return anyio.run(_snapshot, dict(config), subscription, allow_missing)


async def _snapshot(config: dict[str, Any], subscription: Subscription, allow_missing: bool) -> PartitionSnapshot:
    async with Admin(**admin_config(config)) as admin:
        tps = await _partitions(admin, subscription, allow_missing)
        if not tps:
            return PartitionSnapshot([], {}, {})
        level = config.get("isolation_level", "read_uncommitted")
        early = await admin.list_offsets({tp: LIST_EARLIEST for tp in tps}, isolation_level=level)
        late = await admin.list_offsets({tp: LIST_LATEST for tp in tps}, isolation_level=level)
    return PartitionSnapshot(tps, {tp: early[tp][0] for tp in tps}, {tp: late[tp][0] for tp in tps})


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


def read_range(config: Mapping[str, Any], rng: OffsetRange, *, include_headers: bool, fail_on_data_loss: bool,
               poll_timeout_ms: int, batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Blocking generator: the records of ``[rng.start, rng.end)`` as Arrow batches of Spark's Kafka schema.

    Stops when the position reaches ``end`` — not when ``end - start`` records arrived — so transaction
    markers, aborted records and compacted gaps end the range correctly. Raises when the position makes
    no progress for ``poll_timeout_ms`` (kafkaConsumer.pollTimeoutMs) and, with failOnDataLoss, when the
    first offsets of the range were deleted meanwhile.
    """
    tp = rng.tp
    cfg = dict(config)
    cfg["auto_offset_reset"] = "none" if fail_on_data_loss else "earliest"
    cfg.setdefault("client_id", f"akresil-spark-{rng.topic}-{rng.partition}")
    consumer = Consumer(**cfg)
    consumer.assign([tp])
    consumer.seek(tp, rng.start)
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(consumer):
        position = rng.start
        last_progress = time.monotonic()
        pending: list[Any] = []
        while position < rng.end:
            try:
                got = portal.call(_poll, consumer, tp, min(1000, poll_timeout_ms), batch_rows)
            except errors.OffsetOutOfRangeError as exc:
                raise DataLossError(
                    f"offsets [{position}, {rng.end}) of {rng.topic}-{rng.partition} are no longer in the log "
                    f"({exc}). Set failOnDataLoss=false to continue past lost data.") from None
            records, new_position = got
            if records and records[-1].offset < rng.end:
                pending.extend(records)
            else:
                pending.extend(r for r in records if r.offset < rng.end)
            if len(pending) >= batch_rows:
                yield records_to_batch(pending, include_headers)
                pending = []
            if new_position > position:
                position = new_position
                last_progress = time.monotonic()
            elif (time.monotonic() - last_progress) * 1000 > poll_timeout_ms:
                raise errors.KafkaTimeoutError(
                    f"reading {rng.topic}-{rng.partition} [{rng.start}, {rng.end}): no progress past offset "
                    f"{position} within kafkaConsumer.pollTimeoutMs={poll_timeout_ms}")
        if pending:
            yield records_to_batch(pending, include_headers)


async def _poll(consumer: Consumer, tp: TopicPartition, timeout_ms: int, max_records: int) -> tuple[list[Any], int]:
    got = await consumer.getmany(tp, timeout_ms=timeout_ms, max_records=max_records)
    return got.get(tp, []), await consumer.position(tp)
