"""Streaming write: ``df.writeStream.format("akresil")``, Spark's Kafka sink contract per micro-batch.

Spark creates the writer on the driver for each micro-batch and pickles it to that micro-batch's write tasks;
a task learns the micro-batch and the query from the task's local properties (Spark's micro-batch execution
sets ``streaming.sql.batchId`` and ``sql.streaming.queryId`` on the jobs it runs). The query id is kept in the
checkpoint, so a query restarted from its checkpoint has the same id.

``deliveryGuarantee=at-least-once`` (the default, as Spark's own sink) sends with the worker's shared
idempotent producer exactly as the batch write does; ``exactly-once`` writes each task in a transaction with
a marker that recognises a replayed micro-batch (``exactly_once``). Either way a task whose records were
refused reports them, the driver-side ``commit`` fails the micro-batch (and with it the query) naming them,
and ``abort`` stores the micro-batch's summary; a committed micro-batch stores one too.
``akresil.spark.stream_write_summaries(query_id)`` reads them back.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from .daemon_gc import freeze_long_lived
from .options import WriteOptions
from .writer import TaskDelivery, WriteSummary, deliver_batches, raise_on_failed_tasks, store_summary

if TYPE_CHECKING:     # Arrow loads where batches flow (tasks), not where Spark plans or commits
    import pyarrow as pa

__all__ = ["AkresilStreamWriter", "BATCH_ID_KEY", "QUERY_ID_KEY", "KEEP_SUMMARIES", "summary_name"]

#: the task local properties Spark's micro-batch execution sets on the jobs of a micro-batch
BATCH_ID_KEY = "streaming.sql.batchId"
QUERY_ID_KEY = "sql.streaming.queryId"
#: micro-batch summaries kept per query in the summary directory (older ones are deleted)
KEEP_SUMMARIES = 200


def summary_name(query_id: str | None, batch_id: int) -> str:
    """File name (without ``.json``) of a micro-batch summary: starts with the time, so names sort by age."""
    return f"{time.time_ns()}-stream-{query_id or 'unknown'}-{batch_id}"


class AkresilStreamWriter(DataSourceStreamArrowWriter):
    """Spark's stream writer object: pickled to every write task of a micro-batch and to its commit."""

    def __init__(self, options: WriteOptions, columns: tuple[str, ...], summary_dir: str) -> None:
        self.options = options
        self.columns = columns
        self.summary_dir = summary_dir

    # ------------------------------------------------------------------ executor side
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskDelivery:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("the akresil stream writer runs inside a Spark task")
        task, attempt = ctx.partitionId(), ctx.attemptNumber()
        query_id, batch = ctx.getLocalProperty(QUERY_ID_KEY), ctx.getLocalProperty(BATCH_ID_KEY)
        if not self.options.exactly_once:
            delivery = deliver_batches(iterator, self.options, self.columns, task, attempt)
        elif not query_id or batch is None:
            raise RuntimeError(f"deliveryGuarantee=exactly-once: this task has no micro-batch id ({BATCH_ID_KEY}) "
                               f"or query id ({QUERY_ID_KEY}); only micro-batch streaming queries can use it")
        else:
            from .exactly_once import deliver_exactly_once    # the clients load in tasks, not where Spark plans

            delivery = deliver_exactly_once(iterator, self.options, self.columns, task=task, attempt=attempt,
                                            query_id=query_id, batch_id=int(batch))
        delivery.query_id = query_id
        freeze_long_lived()
        return delivery

    # ------------------------------------------------------------------ driver side
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        raise_on_failed_tasks(messages)     # Spark calls abort next, which stores the summary
        self._store("committed", messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._store("aborted", messages, batchId)

    def _store(self, status: str, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        query_id = next((m.query_id for m in messages if isinstance(m, TaskDelivery) and m.query_id), None)
        name = summary_name(query_id, batch_id)
        summary = WriteSummary.from_messages(name, status, messages, query_id=query_id, batch_id=batch_id,
                                             guarantee=self.options.guarantee)
        store_summary(self.summary_dir, name, summary)
        _prune(Path(self.summary_dir), query_id)
        freeze_long_lived()


def _prune(directory: Path, query_id: str | None) -> None:
    """Keep the newest ``KEEP_SUMMARIES`` micro-batch summaries of the query."""
    files = sorted(directory.glob(f"*-stream-{query_id or 'unknown'}-*.json"))
    for old in files[:-KEEP_SUMMARIES]:
        old.unlink(missing_ok=True)
