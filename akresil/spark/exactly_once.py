"""Exactly-once streaming writes: one Kafka transaction per write task and micro-batch, with a marker that
recognises a replayed micro-batch.

Spark runs micro-batch *B* again when its checkpoint has *B*'s offsets but not *B*'s entry in the commit log (the
driver, the query or the cluster stopped after the sink wrote and before Spark recorded it). The replay reads the
same offsets, so a deterministic query over a replayable source (Kafka: akresil's or Spark's own source) hands
each write partition the same rows again. A task of micro-batch *B* for Spark partition *P*:

1. takes its worker's transactional producer for ``<prefix>-<query id>-<P>`` and calls ``init_transactions()``:
   InitProducerId fences every other producer of that id (an earlier attempt of the task, dead or still
   running) and ends its open transaction. A cached producer that another worker fenced meanwhile takes the id
   back here (``init_transactions(take_over=True)``, as a new producer would), before anything is sent;
2. reads the marker: the offset committed by group ``<prefix>-<query id>-<P>`` for partition 0 of the topic of
   the task's first row, with ``require_stable`` (a transaction still completing is waited for). A marker above
   *B* means an earlier attempt committed this micro-batch: the task sends nothing and reports its rows as
   skipped;
3. otherwise sends its rows in a transaction, adds the marker *B* + 1 to it (TxnOffsetCommit, sent while the rows
   are sent and acknowledged) and commits: the rows and the marker become visible together or not at all.
   Refused records abort the transaction.

The marker lives in a consumer group because TxnOffsetCommit is Kafka's one way to commit a state change with a
transaction's records; one group per Spark partition because a group's offsets are keyed by Kafka partition,
which must exist (the broker answers UNKNOWN_TOPIC_OR_PARTITION otherwise). Kafka 4.4's two-phase commit
(KIP-939: prepare in the tasks, commit from the driver) would make a micro-batch visible all at once, but its
InitProducerId v6 is still ``latestVersionUnstable`` there, so readers see each task's rows when that task
commits; what this guarantees is that every row of the stream lands exactly once for ``read_committed`` readers.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from ..types import TopicPartition
from .kafka_io import admin_config, worker_clients
from .options import WriteOptions
from .writer import TaskDelivery, TaskRows, _Tally, key_placement, send_rows

if TYPE_CHECKING:     # Arrow loads where batches flow (tasks), not where Spark plans or commits
    import pyarrow as pa

__all__ = ["deliver_exactly_once", "transaction_name", "transactional_config", "marker_partition"]

#: the transactional producer's first retry back-off unless ``kafka.retry.backoff.ms`` is set: a task's
#: InitProducerId follows the previous micro-batch's commit of the same id, and a coordinator still writing that
#: transaction's markers answers CONCURRENT_TRANSACTIONS; retried after the default 100 ms (then 200), the fence
#: took 100-380 ms on loopback Apache Kafka, 10-130 ms after 20 ms (still exponential, capped as configured)
TXN_RETRY_BACKOFF_MS = 20
#: client statistics of a task that sent nothing
_NO_STATS = {"retries": 0, "throttle_ms": 0.0, "throttled": 0, "leader_hints": 0, "skip_backoff_retries": 0}


def transaction_name(prefix: str, query_id: str, partition: int) -> str:
    """The transactional id, and the marker's group id, of a query's write partition."""
    return f"{prefix}-{query_id}-{partition}"


def transactional_config(options: WriteOptions, name: str) -> dict[str, Any]:
    """The task's transactional producer: the sink's ``kafka.*`` settings, ``transactional_id`` ``name``, and the
    short first retry back-off (``TXN_RETRY_BACKOFF_MS``) unless ``kafka.retry.backoff.ms`` is given."""
    return {"retry_backoff_ms": TXN_RETRY_BACKOFF_MS, **options.producer, "transactional_id": name}


def marker_partition(default_topic: str | None, first_topic: str) -> TopicPartition:
    """Where a task's marker is committed: partition 0 of the ``topic`` option, else of its first row's topic
    (the same on a replay, which has the same rows)."""
    return TopicPartition(default_topic or first_topic, 0)


def deliver_exactly_once(iterator: Iterable[pa.RecordBatch], options: WriteOptions, columns: Sequence[str], *,
                         task: int, attempt: int, query_id: str, batch_id: int) -> TaskDelivery:
    """Executor side of an exactly-once micro-batch write (see the module docstring for the protocol).

    Steps 1 and 2 start on the loop thread before the task waits for its first rows (with the ``topic`` option
    the marker's partition is known up front; otherwise step 2 follows the first row): their round trips overlap
    the time Spark takes to compute and hand over the task's input, instead of following it."""
    started = time.monotonic()
    name = transaction_name(options.transactional_id_prefix, query_id, task)
    config = transactional_config(options, name)
    worker = worker_clients()
    portal = worker.portal
    admin = worker.lease("admin", admin_config(options.producer))
    entry = worker.lease("producer", config)
    marker = marker_partition(options.topic, "") if options.topic is not None else None
    ready: Any = portal.start_task_soon(_fence_and_read, entry.client, admin.client, name, marker)
    healthy = False
    try:
        rows = TaskRows(iterator, columns, options.topic)
        first = rows.peek()
        committed = ready.result()
        if first is None and rows.bad_input is not None:      # the first batch has a row it cannot write
            tally = _Tally(task, attempt)
            tally.add_bad_input(rows)
            tally.not_sent += rows.drain()
            healthy = True
            return tally.delivery(_NO_STATS, time.monotonic() - started, "nothing was sent", landed=False)
        if first is None:       # nothing to write: no transaction, no marker needed (a replay writes nothing)
            healthy = True
            return TaskDelivery(task, attempt, 0, 0, 0, 0.0, {}, time.monotonic() - started)
        if marker is None:
            marker = marker_partition(None, first[0].topic)
            committed = portal.call(_committed_offset, admin.client, name, marker)
        producer = entry.client
        rows.partition_count = key_placement(producer)
        if committed is not None and committed > batch_id:
            skipped = rows.drain()
            healthy = True
            return TaskDelivery(task, attempt, 0, 0, 0, 0.0, {}, time.monotonic() - started, skipped=skipped)
        tally = _Tally(task, attempt)
        portal.call(producer.begin_transaction)
        # the marker goes into the transaction while the rows are sent and acknowledged, not after them: its
        # TxnOffsetCommit round trip overlaps theirs (a transaction's offsets and records may come in any order)
        marked = portal.start_task_soon(producer.send_offsets_to_transaction, {marker: batch_id + 1}, name)
        try:
            send_rows(portal, producer, rows, tally)
            if tally.refused:
                tally.not_sent += rows.drain()
                _settle(marked)
                portal.call(producer.abort_transaction)
                return tally.delivery(entry.stats.since(entry.mark), time.monotonic() - started,
                                      "its transaction was aborted, so none of the task's rows landed",
                                      landed=False)
            marked.result()
            portal.call(producer.commit_transaction)
        except BaseException:
            _settle(marked)
            _abort_quietly(portal, producer)
            raise
        healthy = True
        return tally.delivery(entry.stats.since(entry.mark), time.monotonic() - started, "")
    finally:
        if not ready.done():        # the task failed while step 1 or 2 was still under way: let it end first
            try:
                ready.result()
            except BaseException:  # noqa: BLE001 - the task's own error is the one that propagates
                healthy = False
        worker.release(admin, healthy=True)
        worker.release(entry, healthy=healthy)


async def _fence_and_read(producer: Any, admin: Any, group: str, marker: TopicPartition | None) -> int | None:
    """Steps 1 and 2: ``init_transactions()`` (fences every earlier producer of the id), then the marker when
    its partition is known (None otherwise). ``take_over``: a cached producer another worker fenced meanwhile
    (Spark hands a task to any idle Python worker, so the writer of a task partition moves between a worker's
    processes from one micro-batch to the next) takes the id back instead of being replaced by a new client."""
    await producer.init_transactions(take_over=True)
    return None if marker is None else await _committed_offset(admin, group, marker)


async def _committed_offset(admin: Any, group: str, marker: TopicPartition) -> int | None:
    found = await admin.list_consumer_group_offsets(group, [marker], with_lag=False, require_stable=True)
    committed: int | None = found[marker].committed
    return committed


def _settle(future: Any) -> None:
    """Wait for the marker's TxnOffsetCommit to end before the transaction is aborted (its error, if any, is the
    abort's business): an abort must not overtake a request of the transaction still in flight."""
    try:
        future.result()
    except BaseException:  # noqa: BLE001 - the task's own outcome (a refusal, an error) is what it reports
        pass


def _abort_quietly(portal: Any, producer: Any) -> None:
    """Best effort after an error: a fenced or broken producer cannot abort, and the next attempt's
    init_transactions() aborts whatever is left open."""
    try:
        if producer.transaction_state in ("in transaction", "abortable error"):
            portal.call(producer.abort_transaction)
    except Exception:  # noqa: BLE001 - the original error is the one to raise
        pass
