"""Batch write: ``df.write.format("akresil")`` — Arrow batches into the idempotent producer's bulk path.

A task takes Spark's Arrow batches (``DataSourceArrowWriter``), splits each by topic/partition with Arrow
compute and hands every group to ``Producer.send_many`` as one list of ``(key, value)`` pairs; nothing
runs in Python per row except the pairs themselves. The producer is the worker process's cached one
(``kafka_io.WorkerClients``), reused by the worker's next task. Rows go out in the order Spark hands them
over: one Arrow batch is appended and acknowledged before the next one is appended, while the task thread
already converts the next batch, so a partition's records stay in row order.

A task whose records the brokers refused (after the producer's own retries, within delivery.timeout.ms)
stops sending and reports what landed and what failed in its commit message instead of raising: Spark would
retry a failed task, and the retry would only resend the rows already acknowledged. The driver-side
``commit`` then fails the write with ``DeliveryFailedError`` naming the partitions, counts and first rows,
and ``abort`` stores a ``WriteSummary`` that counts every record that landed, the failed tasks' included;
``akresil.spark.last_write_summary()`` reads it back in the driver program. Any other task error (an
exception, a lost executor) fails the task as usual and Spark retries it: delivery is at-least-once.
The streaming sink (``stream_writer``) reuses all of this per micro-batch.

pyarrow (and numpy) are imported inside the functions that touch Arrow batches: this module is also what
Spark's driver-side commit process unpickles (the writer, the commit messages), and that process needs only
the messages and orjson, not the ~0.2 s that Arrow takes to import.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

import orjson
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType, BinaryType, IntegerType, LongType, ShortType, ByteType, StringType, StructType,
)

from .. import errors
from ..core import collector
from ..core.batch import BulkCounts
from ..types import Header, RecordMetadata
from .daemon_gc import freeze_long_lived
from .options import WriteOptions

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DeliveryFailedError", "TaskDelivery", "WriteSummary", "AkresilWriter", "RowGroup", "TaskRows",
           "group_batch", "deliver_batches", "key_placement", "prefetch_metadata", "send_rows", "needs_row_order",
           "check_input_schema", "read_summary", "store_summary", "raise_on_failed_tasks"]

#: first failed rows quoted per partition in an error
_QUOTED_ROWS = 5


class DeliveryFailedError(errors.KafkaError):
    """Records of a write task were not acknowledged; the message names partitions, counts and rows."""

    errno = -1
    retriable = False


@dataclass
class RowGroup:
    """The rows of one Arrow batch going to one topic (and partition, if the row says), in row order."""

    topic: str
    partition: int | None
    pairs: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)
    #: per-row headers; None when the input has no headers column (then the bulk path is used)
    headers: list[list[Header]] | None = None
    #: row numbers within the task, for error reports (a range for a whole batch)
    rows: Sequence[int] = field(default_factory=list)
    #: bytes of keys and values of these rows
    nbytes: int = 0


class TaskDelivery(WriterCommitMessage):
    """What one task delivered, sent back to the driver as its commit message (picklable).

    ``records`` / ``bytes`` / ``partitions`` count what landed (acknowledged, and committed when the task
    wrote in a transaction). A task whose records were refused carries ``report`` (the partitions, counts,
    first rows and errors) and ``failed`` (records not acknowledged or not sent); ``skipped`` counts the rows
    of a replayed micro-batch that an earlier attempt had already committed (exactly-once).
    """

    def __init__(self, task: int, attempt: int, records: int, bytes_: int, retries: int, throttle_ms: float,
                 partitions: dict[str, int], elapsed_s: float, *, throttled: int = 0, leader_hints: int = 0,
                 skip_backoff_retries: int = 0, failed: int = 0, report: str | None = None,
                 skipped: int = 0) -> None:
        self.task = task
        self.attempt = attempt
        self.records = records
        self.bytes = bytes_
        self.retries = retries
        self.throttle_ms = throttle_ms
        self.partitions = partitions
        self.elapsed_s = elapsed_s
        #: KIP-219 throttled responses, KIP-951 leader hints accepted, retries sent at once after a hint
        self.throttled = throttled
        self.leader_hints = leader_hints
        self.skip_backoff_retries = skip_backoff_retries
        self.failed = failed
        self.report = report
        self.skipped = skipped
        #: a streaming write's query (set by the stream writer: the driver-side commit has no task context)
        self.query_id: str | None = None

    def __repr__(self) -> str:
        extra = (f", failed={self.failed}" if self.report else "") + (f", skipped={self.skipped}" if self.skipped
                                                                     else "")
        return f"TaskDelivery(task={self.task}, records={self.records}, partitions={self.partitions}{extra})"


@dataclass(frozen=True)
class WriteSummary:
    """Delivery summary of one DataFrame write or one streaming micro-batch, as seen by the driver once Spark
    committed or aborted it."""

    write_id: str
    #: "committed" (every record landed), "aborted" (some task failed; `records` still counts what landed) or
    #: "rejected" (refused when Spark planned it: nothing sent, `error` says why)
    status: str
    tasks_delivered: int
    tasks_failed: int
    #: records that landed: acknowledged, and committed when written in a transaction
    records: int
    bytes: int
    retries: int
    throttle_ms: float
    #: "topic-partition" -> records landed there
    partitions: Mapping[str, int]
    finished_at: float
    #: KIP-219: responses that asked the producers to back off (their time is `throttle_ms`)
    throttled: int = 0
    #: KIP-951: leader hints the producers accepted, and batch retries sent at once because of one
    leader_hints: int = 0
    skip_backoff_retries: int = 0
    #: records of failed tasks that did not land (refused, or not sent after a refusal)
    failed: int = 0
    #: the failed tasks' reports (partitions, counts, first rows, errors); None when none failed that way
    error: str | None = None
    #: streaming writes: the query's id and the micro-batch id (None for a batch write)
    query_id: str | None = None
    batch_id: int | None = None
    #: "at-least-once" or "exactly-once"
    guarantee: str = "at-least-once"
    #: exactly-once: rows of a replayed micro-batch not sent again because an earlier attempt committed them
    skipped: int = 0

    @classmethod
    def from_messages(cls, write_id: str, status: str, messages: Sequence[Any], *, query_id: str | None = None,
                      batch_id: int | None = None, guarantee: str = "at-least-once") -> "WriteSummary":
        done = [m for m in messages if isinstance(m, TaskDelivery)]
        parts: dict[str, int] = {}
        for m in done:
            for key, n in m.partitions.items():
                parts[key] = parts.get(key, 0) + n
        reports: list[str] = [r for m in done if (r := getattr(m, "report", None))]
        return cls(write_id=write_id, status=status, tasks_delivered=len(done) - len(reports),
                   tasks_failed=len(messages) - len(done) + len(reports), records=sum(m.records for m in done),
                   bytes=sum(m.bytes for m in done), retries=sum(m.retries for m in done),
                   throttle_ms=sum(m.throttle_ms for m in done), partitions=dict(sorted(parts.items())),
                   finished_at=time.time(), throttled=sum(getattr(m, "throttled", 0) for m in done),
                   leader_hints=sum(getattr(m, "leader_hints", 0) for m in done),
                   skip_backoff_retries=sum(getattr(m, "skip_backoff_retries", 0) for m in done),
                   failed=sum(getattr(m, "failed", 0) for m in done), error="\n".join(reports) or None,
                   query_id=query_id, batch_id=batch_id, guarantee=guarantee,
                   skipped=sum(getattr(m, "skipped", 0) for m in done))


def raise_on_failed_tasks(messages: Sequence[Any]) -> None:
    """Driver side: fail the write (or micro-batch) when a task reported refused records; Spark then calls
    ``abort``, which stores the summary."""
    reports = [m.report for m in messages if isinstance(m, TaskDelivery) and m.report]
    if reports:
        raise DeliveryFailedError("\n".join(reports))


def store_summary(directory: str | Path, name: str, summary: WriteSummary) -> Path:
    """Write ``summary`` as ``<directory>/<name>.json``, atomically (readers never see half a file)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path, prefix=".tmp-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(orjson.dumps(asdict(summary)))
    target = path / f"{name}.json"
    os.replace(tmp, target)
    return target


def read_summary(path: Path) -> WriteSummary:
    return WriteSummary(**orjson.loads(path.read_bytes()))


_INT_TYPES = (IntegerType, LongType, ShortType, ByteType)
_COLUMNS = ("key", "value", "topic", "partition", "headers")


def check_input_schema(schema: StructType, default_topic: str | None) -> tuple[str, ...]:
    """Validate the DataFrame's columns as Spark's Kafka sink does; returns the columns the writer uses.

    Columns other than key/value/topic/partition/headers are ignored, as there.
    """
    fields = {f.name.lower(): f for f in schema.fields}
    if "value" not in fields:
        raise errors.ConfigError(f"input has no 'value' column (columns: {', '.join(schema.fieldNames())})")
    for name in ("key", "value"):
        f = fields.get(name)
        if f is not None and not isinstance(f.dataType, (BinaryType, StringType)):
            raise errors.ConfigError(f"column {name!r} must be binary or string, got {f.dataType.simpleString()}")
    if "topic" in fields and not isinstance(fields["topic"].dataType, StringType):
        raise errors.ConfigError(f"column 'topic' must be string, got {fields['topic'].dataType.simpleString()}")
    if "topic" not in fields and default_topic is None:
        raise errors.ConfigError("no topic: give the 'topic' option or a 'topic' column")
    if "partition" in fields and not isinstance(fields["partition"].dataType, _INT_TYPES):
        raise errors.ConfigError(
            f"column 'partition' must be an integer type, got {fields['partition'].dataType.simpleString()}")
    if "headers" in fields:
        t = fields["headers"].dataType
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [f.name for f in t.elementType.fields] == ["key", "value"]
              and isinstance(t.elementType.fields[0].dataType, StringType)
              and isinstance(t.elementType.fields[1].dataType, (BinaryType, StringType)))
        if not ok:
            raise errors.ConfigError("column 'headers' must be array<struct<key:string,value:binary>>, got "
                                     + t.simpleString())
    return tuple(c for c in _COLUMNS if c in fields)


def group_batch(batch: pa.RecordBatch, used: Sequence[str], *, default_topic: str | None, row_base: int,
                partition_count: Callable[[str], int | None] | None = None) -> list[RowGroup]:
    """Split one Arrow batch by (topic, partition column) into groups that keep their rows in row order.

    Columnar: the checks are Arrow compute calls, the grouping a stable sort of one integer code per row,
    and each group's keys and values come out of Arrow with one ``take`` + ``to_pylist`` per column, so
    no Python code runs per row. ``default_topic`` (the ``topic`` option) overrides the topic column, as
    in Spark's Kafka sink. Groups come in the order of their first row.

    ``partition_count(topic)``: the topic's partition count when the producer places keyed records with the
    built-in partitioner (None: unknown, or placement is the producer's own). Rows with a key and no
    ``partition`` column then get the partition that partitioner would give them, computed for the whole
    column at once (``key_hash``), instead of a ``murmur2`` call per row inside the producer; rows with a
    null key still go to the producer's sticky partitioner.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    names = {name.lower(): i for i, name in enumerate(batch.schema.names)}
    n = batch.num_rows

    def column(name: str) -> pa.Array | None:
        return batch.column(names[name]) if name in used and name in names else None

    keys, values = _as_binary(column("key")), _as_binary(column("value"))
    topics = column("topic") if default_topic is None else None
    parts = column("partition")
    headers = column("headers")
    if default_topic is None and topics is None:
        raise errors.ConfigError("no topic: give the 'topic' option or a 'topic' column")
    if topics is not None and topics.null_count:
        first = pc.index(pc.is_null(topics), True).as_py()
        raise errors.ConfigError(f"row {row_base + first}: topic is null; set the 'topic' option for a default")
    if parts is not None:
        parts = parts.cast(pa.int64())
        negative = pc.fill_null(pc.less(parts, 0), False)
        if pc.any(negative).as_py():
            first = pc.index(negative, True).as_py()
            raise errors.ConfigError(f"row {row_base + first}: partition {parts[first].as_py()} is negative")

    codes = _topic_codes(topics) if topics is not None else None
    if parts is None and keys is not None and partition_count is not None:
        parts = _placed_by_key(keys, codes, default_topic, partition_count)
    if codes is None and parts is None:
        spans: list[tuple[str, int | None, Any]] = [(default_topic, None, None)]  # type: ignore[list-item]
    else:
        spans = _spans(codes, parts, default_topic, n)
    groups = []
    for topic, partition, index in spans:
        key_col = None if keys is None else keys if index is None else keys.take(index)
        value_col = None if values is None else values if index is None else values.take(index)
        pairs = _pairs(key_col, value_col, n if index is None else len(index))
        nbytes = _binary_bytes(key_col) + _binary_bytes(value_col)
        rows: Sequence[int] = range(row_base, row_base + n) if index is None else (index + row_base).tolist()
        hs = None
        if headers is not None:
            hs = [[(h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"]) for h in row]
                  if row else [] for row in (headers if index is None else headers.take(index)).to_pylist()]
        groups.append(RowGroup(topic, partition, pairs, hs, rows, nbytes))
    return groups


def _pairs(keys: pa.Array | None, values: pa.Array | None, n: int) -> list[tuple[bytes | None, bytes | None]]:
    """One group's ``(key, value)`` tuples, with the cyclic GC paused while they are made (``core.collector``).

    Each new tuple is a GC-tracked allocation: a 10 000-row batch set off ~14 young collections, and every
    tenth of those counts towards a full collection over the whole worker (~100 000 objects, ~50 ms here).
    Four 500 000-row tasks of 100 B rows ran 24 full collections before, 13 now (docs/spark.md).
    """
    with collector.paused_for(n):
        v = values.to_pylist() if values is not None else [None] * n
        if keys is None:
            return list(zip(itertools.repeat(None, n), v))
        return list(zip(keys.to_pylist(), v))


def _topic_codes(topics: pa.Array) -> tuple[list[str], Any]:
    """The topic column dictionary-encoded once per batch: (topic names, one int64 code per row)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(topics)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    return encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _placed_by_key(keys: pa.Array, codes: tuple[list[str], Any] | None, default_topic: str | None,
                   partition_count: Callable[[str], int | None]) -> pa.Array | None:
    """Each keyed row's partition as the producer's built-in partitioner would choose it (nulls for null keys),
    or None when a topic's partition count is not known yet (the producer then places the rows itself)."""
    import numpy as np

    from .key_hash import key_partitions

    if keys.null_count == len(keys):
        return None
    if codes is None:
        count = partition_count(default_topic)  # type: ignore[arg-type]
        return None if not count else key_partitions(keys, count)
    names, tcode = codes
    counts = [partition_count(name) for name in names]
    if not all(counts):
        return None
    return key_partitions(keys, np.asarray(counts, dtype=np.int64)[tcode])


def _spans(codes: tuple[list[str], Any] | None, parts: pa.Array | None, default_topic: str | None, n: int
           ) -> list[tuple[str, int | None, Any]]:
    """(topic, partition, row indices) per group: rows grouped by one int64 code with a stable sort."""
    import numpy as np
    import pyarrow.compute as pc

    if codes is not None:
        names, tcode = codes
    else:
        names = [default_topic]  # type: ignore[list-item]
        tcode = np.zeros(n, dtype=np.int64)
    if parts is not None:
        pcode = pc.fill_null(parts, -1).to_numpy(zero_copy_only=False).astype(np.int64) + 1   # null -> 0
        code = tcode * (int(pcode.max()) + 1) + pcode
    else:
        pcode, code = None, tcode
    order = np.argsort(code, kind="stable")
    ordered = code[order]
    cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    bounds = [0, *cuts.tolist(), n]
    spans = []
    for a, b in zip(bounds, bounds[1:]):
        index = order[a:b]
        first = int(index[0])
        partition = None if pcode is None or pcode[first] == 0 else int(pcode[first]) - 1
        spans.append((first, names[int(tcode[first])], partition, index))
    spans.sort(key=lambda s: s[0])
    return [(t, p, idx) for _, t, p, idx in spans]


def _as_binary(arr: pa.Array | None) -> pa.Array | None:
    import pyarrow as pa

    if arr is not None and (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return arr.cast(pa.binary())
    return arr


def _binary_bytes(arr: pa.Array | None) -> int:
    if arr is None or len(arr) == 0:
        return 0
    import pyarrow.compute as pc

    return int(pc.sum(pc.binary_length(arr)).as_py() or 0)


def needs_row_order(groups: Sequence[RowGroup]) -> bool:
    """True when groups may land in the same Kafka partition (a topic with rows that name a partition and
    rows that leave it to the partitioner): then rows must be appended one by one in row order."""
    explicit = {g.topic for g in groups if g.partition is not None}
    return any(g.partition is None and g.topic in explicit for g in groups)


class TaskRows:
    """A task's Arrow batches as ``RowGroup`` lists (``group_batch``), numbered by row within the task.

    ``peek()`` groups the first non-empty batch without consuming it from iteration (the exactly-once path
    needs its first topic before it sends anything); ``drain()`` counts the rows not taken, so a task that
    stops sending still consumes Spark's input and can say how many rows it did not send. A batch with a row
    the sink cannot write (a null topic, a negative partition) ends the iteration: ``bad_input`` names the row
    and ``bad_rows`` counts the batch's rows, none of which is sent.
    """

    def __init__(self, iterator: Iterable[pa.RecordBatch], columns: Sequence[str], default_topic: str | None) -> None:
        self._batches = iter(iterator)
        self.columns, self.default_topic = columns, default_topic
        #: see ``group_batch``: set once the task's producer is known (``key_placement``)
        self.partition_count: Callable[[str], int | None] | None = None
        self.rows = 0
        self._peeked: list[RowGroup] | None = None
        self.bad_input: errors.ConfigError | None = None
        self.bad_rows = 0

    def _next(self) -> list[RowGroup] | None:
        if self.bad_input is not None:
            return None
        for batch in self._batches:
            if batch.num_rows:
                try:
                    groups = group_batch(batch, self.columns, default_topic=self.default_topic, row_base=self.rows,
                                         partition_count=self.partition_count)
                except errors.ConfigError as exc:
                    self.bad_input, self.bad_rows = exc, batch.num_rows
                    self.rows += batch.num_rows
                    return None
                self.rows += batch.num_rows
                return groups
        return None

    def peek(self) -> list[RowGroup] | None:
        if self._peeked is None:
            self._peeked = self._next()
        return self._peeked

    def __iter__(self) -> Iterator[list[RowGroup]]:
        while True:
            groups, self._peeked = (self._peeked, None) if self._peeked is not None else (self._next(), None)
            if groups is None:
                return
            yield groups

    def drain(self) -> int:
        """Consume what is left; returns its row count (a peeked batch included)."""
        left = sum(len(g.pairs) for g in self._peeked) if self._peeked is not None else 0
        self._peeked = None
        for batch in self._batches:
            left += batch.num_rows
            self.rows += batch.num_rows
        return left


def key_placement(producer: Any) -> Callable[[str], int | None] | None:
    """``group_batch``'s ``partition_count`` for ``producer``: its metadata's partition count of a topic, when
    keyed records go through the built-in partitioner (no custom ``partitioner``, keys not ignored)."""
    config = producer.config
    if config.partitioner is not None or config.partitioner_ignore_keys:
        return None

    def count(topic: str) -> int | None:
        return len(producer.partitions_for(topic)) or None
    return count


def send_rows(portal: Any, producer: Any, rows: TaskRows, tally: "_Tally") -> None:
    """Send every group of ``rows`` with ``producer`` on the loop thread behind ``portal``; stops after the
    first Arrow batch with refused records, or before the first batch with a row it cannot write (``tally``
    has them: ``tally.refused``).

    Batch *k* is sent by the loop thread while this thread reads batch *k + 1* from Spark and groups it;
    batch *k + 1* is appended only once *k* is acknowledged, so a task's rows keep their order within a
    partition.
    """
    in_flight: Any = None
    try:
        for groups in rows:
            if in_flight is not None:
                tally.add(in_flight[0].result(), in_flight[1])
                in_flight = None
                if tally.failed_count:
                    tally.not_sent += sum(len(g.pairs) for g in groups)
                    return
            in_flight = (portal.start_task_soon(_deliver, producer, groups), groups)
        if in_flight is not None:
            tally.add(in_flight[0].result(), in_flight[1])
            in_flight = None
        tally.add_bad_input(rows)
    finally:
        if in_flight is not None and not in_flight[0].done():
            in_flight[0].cancel()


def deliver_batches(iterator: Iterable[pa.RecordBatch], options: WriteOptions, columns: Sequence[str], task: int,
                    attempt: int) -> TaskDelivery:
    """Executor side of an at-least-once write: send every batch with this worker's cached idempotent
    producer (see ``kafka_io``). Refused records, or a row it cannot write, end the sending: the rest of the
    input is counted, not sent, the producer is closed rather than reused after a refusal, and the returned
    delivery carries the report."""
    from .kafka_io import worker_clients

    started = time.monotonic()
    worker = worker_clients()
    entry = worker.lease("producer", dict(options.producer))
    before = entry.mark
    tally = _Tally(task, attempt)
    rows = TaskRows(iterator, columns, options.topic)
    rows.partition_count = key_placement(entry.client)
    ahead = prefetch_metadata(worker.portal, entry.client, options.topic)
    healthy = False
    try:
        send_rows(worker.portal, entry.client, rows, tally)
        healthy = not tally.failed_count
        if tally.refused:
            tally.not_sent += rows.drain()
    finally:
        if ahead is not None and not ahead.done():
            ahead.cancel()
        worker.release(entry, healthy=healthy)
    used = entry.stats.since(before)
    return tally.delivery(used, time.monotonic() - started,
                          "records acknowledged before the refusal stay in Kafka (at-least-once)")


def prefetch_metadata(portal: Any, producer: Any, topic: str | None) -> Any:
    """Start fetching ``topic``'s metadata on the loop thread when the producer does not know the topic yet; the
    returned future is None when there is nothing to fetch.

    A write task starts before Spark has computed its input (the first Arrow batch came 30-40 ms after
    ``write()`` began in a 100-row query on the standalone cluster), and a write often goes to a topic this
    worker's cached producer has not written yet: its Metadata round trip then overlaps that wait instead of
    delaying the first send, and the first batch's keyed rows are placed by the sink (``key_placement``). A
    failure (an unknown topic) is left to the send, which reports it per row as before.
    """
    if topic is None or producer.partitions_for(topic):
        return None

    async def fetch() -> None:
        try:
            await producer.fetch_partitions(topic)
        except Exception:  # noqa: BLE001 - the send meets the same error and reports it with its rows
            pass
    return portal.start_task_soon(fetch)


class AkresilWriter(DataSourceArrowWriter):
    """Spark's writer object: pickled to every task and to the driver-side commit."""

    def __init__(self, options: WriteOptions, columns: tuple[str, ...], summary_dir: str) -> None:
        self.options = options
        self.columns = columns
        self.summary_dir = summary_dir
        self.write_id = f"{time.time_ns()}-{uuid.uuid4().hex[:12]}"

    # ------------------------------------------------------------------ executor side
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskDelivery:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)
        delivery = deliver_batches(iterator, self.options, self.columns, task, attempt)
        freeze_long_lived()
        return delivery

    # ------------------------------------------------------------------ driver side
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        raise_on_failed_tasks(messages)     # Spark calls abort next, which stores the summary
        self._store(WriteSummary.from_messages(self.write_id, "committed", messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._store(WriteSummary.from_messages(self.write_id, "aborted", messages))

    def _store(self, summary: WriteSummary) -> None:
        store_summary(self.summary_dir, summary.write_id, summary)
        freeze_long_lived()


async def _deliver(producer: Any, groups: list[RowGroup]) -> tuple[list[BulkCounts], BaseException | None]:
    """Send one batch's groups; returns, per group, its records' outcome as counts (``BulkCounts``: landed per
    partition, failed positions with their error), so no ``RecordMetadata`` is made per record.

    Groups bound for different partitions go concurrently (each keeps its own order); when groups could
    share a partition, records are appended one at a time in row order. A record that cannot be appended at
    all (unknown topic, no buffer space within max_block_ms) fails its group's remaining records and is
    returned as the batch's fatal error, so nothing after it goes out of order.
    """
    import anyio

    results: list[list[Any]] = [[None] * len(g.pairs) for g in groups]
    counted: list[BulkCounts | None] = [None] * len(groups)
    fatal: list[BaseException] = []

    async def send_group(gi: int) -> None:
        g = groups[gi]
        try:
            if g.headers is None:
                counted[gi] = await producer.send_many_counted(g.topic, g.pairs, partition=g.partition)
                return
            futures = [await producer.enqueue(g.topic, v, k, partition=g.partition, headers=h)
                       for (k, v), h in zip(g.pairs, g.headers)]
            results[gi] = [await _outcome(f) for f in futures]
        except (errors.KafkaError, TypeError, ValueError) as exc:
            results[gi] = [r if isinstance(r, RecordMetadata) else exc for r in results[gi]]
            fatal.append(exc)

    if not needs_row_order(groups):
        async with anyio.create_task_group() as tg:
            for gi in range(len(groups)):
                tg.start_soon(send_group, gi)
        return ([c if c is not None else counts_of(g, r) for g, c, r in zip(groups, counted, results)],
                (fatal[0] if fatal else None))

    order = sorted((row, gi, j) for gi, g in enumerate(groups) for j, row in enumerate(g.rows))
    pending: list[tuple[int, int, Any]] = []
    try:
        for _, gi, j in order:
            g = groups[gi]
            k, v = g.pairs[j]
            h = g.headers[j] if g.headers is not None else None
            pending.append((gi, j, await producer.enqueue(g.topic, v, k, partition=g.partition, headers=h)))
    except (errors.KafkaError, TypeError, ValueError) as exc:
        fatal.append(exc)
        for gi, g in enumerate(groups):
            results[gi] = [exc] * len(g.pairs)
    for gi, j, fut in pending:
        results[gi][j] = await _outcome(fut)
    return [counts_of(g, r) for g, r in zip(groups, results)], (fatal[0] if fatal else None)


def counts_of(group: RowGroup, outcome: Sequence[Any]) -> BulkCounts:
    """Per-record outcomes (a ``RecordMetadata`` or an error, None: not sent) of ``group`` as counts."""
    counts = BulkCounts(group.pairs)
    for j, res in enumerate(outcome):
        if res.__class__ is RecordMetadata:
            counts.complete_range(group.topic, res.partition, range(j, j + 1), res.offset, res.timestamp_ms)
        else:
            counts.fail_range(range(j, j + 1), res if res is not None else _NOT_SENT)
    return counts


#: the error of a record that was never handed to the producer (reported as "not sent")
_NOT_SENT = DeliveryFailedError("not sent")


async def _outcome(fut: Any) -> Any:
    try:
        return await fut
    except errors.KafkaError as exc:
        return exc


class _Tally:
    """Counts of one task: acknowledged records per partition, and failures with their first rows."""

    def __init__(self, task: int, attempt: int) -> None:
        self.task, self.attempt = task, attempt
        self.records = 0
        self.bytes = 0
        self.partitions: dict[str, int] = {}
        self.failed: dict[str, list[int]] = {}
        self.failed_count: dict[str, int] = {}
        self.first_error: dict[str, str] = {}
        self.fatal: BaseException | None = None
        #: rows not sent because an earlier batch of the task was refused, or a row could not be written
        self.not_sent = 0
        #: a row the sink cannot write (``TaskRows.bad_input``): the error naming it
        self.bad_input: str | None = None

    @property
    def refused(self) -> bool:
        """True when the task must stop sending and report: records refused, or a row it cannot write."""
        return bool(self.failed_count) or self.bad_input is not None

    def add_bad_input(self, rows: TaskRows) -> None:
        """Take ``rows``' bad row, if any: its batch counts as not sent."""
        if rows.bad_input is not None and self.bad_input is None:
            self.bad_input = str(rows.bad_input)
            self.not_sent += rows.bad_rows

    def add(self, outcome_of_batch: tuple[Sequence[BulkCounts], BaseException | None], groups: list[RowGroup]
            ) -> None:
        """Count one batch's outcome (``_deliver``'s result: per group, its records landed per partition and its
        failed positions)."""
        results, fatal = outcome_of_batch
        for g, outcome in zip(groups, results):
            for p, count in outcome.landed.items():
                key = f"{g.topic}-{p}"
                self.partitions[key] = self.partitions.get(key, 0) + count
                self.records += count
            self.bytes += g.nbytes
            for positions, res in outcome.failed:        # only failures cost per-record work
                key = f"{g.topic}-{g.partition if g.partition is not None else '?'}"
                error = "not sent" if res is _NOT_SENT else f"{type(res).__name__}: {res}"
                for j in positions:
                    k, v = g.pairs[j]
                    self.bytes -= (len(k) if k else 0) + (len(v) if v else 0)
                    self.failed_count[key] = self.failed_count.get(key, 0) + 1
                    rows = self.failed.setdefault(key, [])
                    if len(rows) < _QUOTED_ROWS:
                        rows.append(g.rows[j])
                    self.first_error.setdefault(key, error)
        if fatal is not None:
            self.fatal = fatal

    @property
    def failed_total(self) -> int:
        return sum(self.failed_count.values()) + self.not_sent

    def report(self, stats: Mapping[str, float], consequence: str) -> str | None:
        """What failed, per partition (count, first rows, first error), or the row it could not write; None
        when nothing did."""
        if not self.refused:
            return None
        what = (f"bad input: {self.bad_input}; " if self.bad_input is not None
                else f"{sum(self.failed_count.values())} records not acknowledged, ")
        after = "after the bad row" if self.bad_input is not None else "after the refusal"
        lines = [f"akresil write task {self.task} (attempt {self.attempt}): {what}{self.records} acknowledged"
                 + (f", {self.not_sent} not sent {after}" if self.not_sent else "")
                 + f" (retries {int(stats['retries'])}); {consequence}."]
        for key in sorted(self.failed_count):
            rows = self.failed.get(key, [])
            lines.append(f"  {key}: {self.failed_count[key]} failed"
                         + (f", first rows {rows}" if rows else "")
                         + (f", error {self.first_error[key]}" if key in self.first_error else ""))
        return "\n".join(lines)

    def delivery(self, stats: Mapping[str, float], elapsed_s: float, consequence: str, *,
                 landed: bool = True) -> TaskDelivery:
        """The task's commit message; ``landed=False`` when its transaction was aborted (nothing landed)."""
        report = self.report(stats, consequence)
        return TaskDelivery(self.task, self.attempt, self.records if landed else 0, self.bytes if landed else 0,
                            int(stats["retries"]), stats["throttle_ms"], self.partitions if landed else {},
                            elapsed_s, throttled=int(stats["throttled"]), leader_hints=int(stats["leader_hints"]),
                            skip_backoff_retries=int(stats["skip_backoff_retries"]),
                            failed=self.failed_total + (0 if landed or report is None else self.records),
                            report=report)
