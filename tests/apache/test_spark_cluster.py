"""akresil's Spark data source on a Spark standalone cluster (a Master and a 2-core Worker started from the installed
pyspark, ``SparkStandaloneCluster``) against the tier's Apache Kafka cluster: batch write and read, and the streaming
pipeline readStream -> transform -> writeStream with a checkpoint, restarted from it with more input, replayed after
a lost commit-log entry, and run through a Worker killed mid-stream. Topics have three replicas.

One cluster and one driver session for the module (the process's SparkContext: ``spark_on``); executors import the
akresil under test (the Worker's PYTHONPATH)."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import anyio
import pytest

from akresil import Admin, Consumer, TopicPartition
from akresil.testing import KafkaCluster
from akresil.testing.spark_cluster import SparkStandaloneCluster
from tests.integration.conftest_spark import produce, require_spark, spark_on, stop_spark

pytestmark = pytest.mark.spark

ROWS = 10_000
PARTS = 4


@pytest.fixture(scope="module")
def spark_cluster() -> Iterator[SparkStandaloneCluster]:
    require_spark()
    with SparkStandaloneCluster(cores=2, memory="2g") as cluster:
        try:
            yield cluster
        finally:
            stop_spark(cluster.master_url)


@pytest.fixture
def spark(spark_cluster: SparkStandaloneCluster) -> Any:
    """The driver's session on the standalone cluster (one executor: the Worker's 2 cores, 1 GiB)."""
    return spark_on(spark_cluster.master_url, **{"spark.executor.memory": "1g",
                                                 "spark.app.name": "akresil-cluster-tests"})


def _topic(cluster: KafkaCluster, partitions: int) -> str:
    return anyio.run(lambda: cluster.create_topic(partitions=partitions, replication_factor=3))


def read_committed(bs: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every committed record of ``topic`` (read_committed up to the last stable offsets): (partition, key, value)."""
    async def main() -> list[tuple[int, bytes | None, bytes | None]]:
        async with Admin(bootstrap_servers=bs) as admin:
            described = await admin.describe_topics([topic])
            tps = [TopicPartition(topic, p.partition) for p in described[topic].partitions]
            ends = {tp: off for tp, (off, *_) in
                    (await admin.list_offsets({tp: -1 for tp in tps}, isolation_level="read_committed")).items()}
        out: list[tuple[int, bytes | None, bytes | None]] = []
        async with Consumer(bootstrap_servers=bs, isolation_level="read_committed",
                            auto_offset_reset="earliest") as consumer:
            consumer.assign(tps)
            for tp in tps:
                while await consumer.position(tp) < ends[tp]:
                    for records in (await consumer.getmany(tp, timeout_ms=2000)).values():
                        out.extend((r.partition, r.key, r.value) for r in records)
        return out
    return anyio.run(main)


def _inputs(prefix: str, start: int, n: int) -> list[tuple[bytes | None, bytes]]:
    return [(b"k%d" % i, f"{prefix}{i}".encode()) for i in range(start, start + n)]


def _pipeline(spark: Any, bs: str, source: str, sink: str, checkpoint: Path, guarantee: str, *,
              per_trigger: int, read: str = "tasks") -> Any:
    """readStream -> upper(value) -> writeStream, not started; ``read`` is the source's microBatchRead."""
    stream = (spark.readStream.format("akresil").option("kafka.bootstrap.servers", bs).option("subscribe", source)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(per_trigger))
              .option("microBatchRead", read).load()
              .selectExpr("key", "upper(cast(value as string)) as value"))
    return (stream.writeStream.format("akresil").option("kafka.bootstrap.servers", bs).option("topic", sink)
            .option("deliveryGuarantee", guarantee).option("checkpointLocation", str(checkpoint)))


def _run_available_now(writer: Any) -> Any:
    query = writer.trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(240), "the AvailableNow query did not end"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    return query


def _drop_last_commit(checkpoint: Path) -> int:
    """What a driver that died after the sink wrote micro-batch B, before Spark logged B as done, leaves behind:
    B's offsets in the checkpoint without B's commit-log entry. Returns B."""
    commits = checkpoint / "commits"
    last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def test_cluster_batch_write_then_read_every_row_once(spark: Any, kafka_cluster: KafkaCluster) -> None:
    import akresil.spark
    bs = kafka_cluster.bootstrap_servers
    topic = _topic(kafka_cluster, PARTS)
    df = spark.range(0, ROWS, numPartitions=2).selectExpr(
        "cast(id as string) as key", "concat('v', cast(id as string)) as value",
        f"cast(id % {PARTS} as int) as partition")
    (df.write.format("akresil").option("kafka.bootstrap.servers", bs).option("topic", topic)
     .mode("append").save())
    summary = akresil.spark.last_write_summary()
    assert summary is not None and summary.status == "committed", summary
    assert summary.records == ROWS and summary.tasks_failed == 0
    assert summary.partitions == {f"{topic}-{p}": ROWS // PARTS for p in range(PARTS)}

    read = (spark.read.format("akresil").option("kafka.bootstrap.servers", bs).option("subscribe", topic)
            .load())
    assert read.rdd.getNumPartitions() == PARTS
    read.createOrReplaceTempView("apache_written")
    per_partition = spark.sql("""
        select partition, count(*) n, min(offset) lo, max(offset) hi, count(distinct offset) d,
               sum(case when cast(cast(key as string) as bigint) % 4 != partition then 1 else 0 end) misplaced,
               sum(case when cast(value as string) != concat('v', cast(key as string)) then 1 else 0 end) bad,
               min(topic) t
        from apache_written group by partition order by partition""").collect()
    assert [r.partition for r in per_partition] == list(range(PARTS))
    for r in per_partition:
        # dense offsets 0..n-1 on every partition: nothing lost, nothing written twice
        assert (r.n, r.lo, r.hi, r.d) == (ROWS // PARTS, 0, ROWS // PARTS - 1, ROWS // PARTS), r
        assert r.misplaced == 0 and r.bad == 0 and r.t == topic, r
    assert spark.sql("select count(distinct key) from apache_written").first()[0] == ROWS


@pytest.mark.parametrize("read", ["tasks", "driver"])
@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_cluster_pipeline_restarts_from_its_checkpoint_and_a_replayed_micro_batch(
        spark: Any, kafka_cluster: KafkaCluster, tmp_path: Path, guarantee: str, read: str) -> None:
    """Run to the end of the input, then lose the last micro-batch's commit-log entry and restart with more input:
    Spark replays that micro-batch with the same offsets and the same rows in the same write partitions. At least
    once, its rows land twice (and nothing else does); exactly once, every task finds its marker and sends nothing.
    With microBatchRead=driver the replayed micro-batch is no longer held by the new driver-side reader: a task
    reads it (``readBetweenOffsets``)."""
    import akresil.spark
    bs = kafka_cluster.bootstrap_servers
    source, sink = _topic(kafka_cluster, 3), _topic(kafka_cluster, 2)
    checkpoint = tmp_path / "checkpoint"
    produce(bs, source, _inputs("a", 0, 1000))
    first = _run_available_now(_pipeline(spark, bs, source, sink, checkpoint, guarantee, per_trigger=600,
                                         read=read))
    runs = akresil.spark.stream_write_summaries(first.id)
    assert [(s.batch_id, s.status, s.records, s.guarantee) for s in runs] == [
        (0, "committed", 600, guarantee), (1, "committed", 400, guarantee)]

    replayed = _drop_last_commit(checkpoint)
    produce(bs, source, _inputs("b", 1000, 500))
    second = _run_available_now(_pipeline(spark, bs, source, sink, checkpoint, guarantee, per_trigger=600,
                                          read=read))
    assert second.id == first.id                     # the query id lives in the checkpoint
    again = akresil.spark.stream_write_summaries(second.id)[len(runs):]
    assert [s.batch_id for s in again] == [replayed, replayed + 1]
    replay = again[0]
    expected = {(b"k%d" % i, (f"a{i}" if i < 1000 else f"b{i}").upper().encode()) for i in range(1500)}
    out = read_committed(bs, sink)
    assert {(k, v) for _, k, v in out} == expected                        # every input, transformed, landed
    if guarantee == "exactly-once":
        assert (replay.records, replay.skipped) == (0, 400)
        assert len(out) == len(expected)                                   # none twice
    else:
        # the replay resent exactly micro-batch 1, and into the same Kafka partitions (same rows, same keys)
        assert (replay.records, replay.partitions) == (400, runs[1].partitions)
        counts = Counter((k, v) for _, k, v in out)
        assert len(out) == len(expected) + 400 and sum(1 for n in counts.values() if n == 2) == 400


class _FirstRows:
    """A StreamingQueryListener: ``event`` is set once a micro-batch with rows has completed."""

    def __init__(self, spark: Any) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        event = self.event = threading.Event()

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, e: Any) -> None: ...

            def onQueryProgress(self, e: Any) -> None:
                if e.progress.numInputRows > 0:
                    event.set()

            def onQueryIdle(self, e: Any) -> None: ...

            def onQueryTerminated(self, e: Any) -> None: ...

        self.spark, self.listener = spark, Listener()
        spark.streams.addListener(self.listener)

    def remove(self) -> None:
        self.spark.streams.removeListener(self.listener)


@pytest.mark.parametrize("read", ["tasks", "driver"])
def test_cluster_exactly_once_pipeline_survives_a_worker_killed_mid_stream(
        spark: Any, spark_cluster: SparkStandaloneCluster, kafka_cluster: KafkaCluster, tmp_path: Path,
        read: str) -> None:
    """The Worker and its executor are SIGKILLed while the query runs micro-batch after micro-batch; a new Worker
    joins, Spark reruns the lost tasks there (their open transactions are fenced and aborted by the reruns'
    InitProducerId) and the query goes on: every input lands once for read_committed readers."""
    import akresil.spark
    bs = kafka_cluster.bootstrap_servers
    source, sink = _topic(kafka_cluster, 3), _topic(kafka_cluster, 3)
    checkpoint = tmp_path / "checkpoint"
    produce(bs, source, _inputs("a", 0, 6000))
    progress = _FirstRows(spark)
    query = (_pipeline(spark, bs, source, sink, checkpoint, "exactly-once", per_trigger=2000, read=read)
             .trigger(processingTime="0 seconds").start())
    try:
        assert progress.event.wait(180), "no micro-batch with rows"
        executors = spark_cluster.executor_pids()
        killed = spark_cluster.kill_worker()
        assert executors and set(executors) <= set(killed), (executors, killed)
        done_when_killed = {s.batch_id for s in akresil.spark.stream_write_summaries(query.id)}
        assert query.isActive
        spark_cluster.start_worker()
        produce(bs, source, _inputs("b", 6000, 1000))
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        progress.remove()
        query.stop()
    summaries = akresil.spark.stream_write_summaries(query.id)
    after = [s for s in summaries if s.batch_id not in done_when_killed]
    assert after and all(s.status == "committed" for s in summaries), summaries
    expected = {(b"k%d" % i, (f"a{i}" if i < 6000 else f"b{i}").upper().encode()) for i in range(7000)}
    out = read_committed(bs, sink)
    written, skipped = sum(s.records for s in summaries), sum(s.skipped for s in summaries)
    print(f"killed worker test: killed pids {killed} after micro-batches {sorted(done_when_killed)}; "
          f"{len(summaries)} micro-batches, {len(after)} after the kill; output {len(out)} records; the summaries "
          f"count {written} written and {skipped} skipped by reruns of tasks whose lost attempt had committed")
    assert len(out) == len(expected) and {(k, v) for _, k, v in out} == expected
    # a rerun task whose lost attempt had committed before the executor died skips its rows: either way once
    assert written + skipped == len(out)


def test_cluster_exactly_once_micro_batch_refused_by_the_broker_lands_nothing(
        spark: Any, kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """A record the broker refuses (a partition column naming a partition the topic lacks): the task aborts its
    transaction, the micro-batch fails naming the partition and rows, and its summary says nothing landed."""
    import akresil.spark
    bs = kafka_cluster.bootstrap_servers
    source, sink = _topic(kafka_cluster, 1), _topic(kafka_cluster, 1)
    produce(bs, source, _inputs("a", 0, 20))
    stream = (spark.readStream.format("akresil").option("kafka.bootstrap.servers", bs).option("subscribe", source)
              .option("startingOffsets", "earliest").load()
              .selectExpr("key", "value", "case when offset = 7 then 5 else 0 end as partition"))
    query = (stream.writeStream.format("akresil").option("kafka.bootstrap.servers", bs).option("topic", sink)
             .option("deliveryGuarantee", "exactly-once").option("kafka.delivery.timeout.ms", "3000")
             .option("kafka.request.timeout.ms", "1000").option("kafka.max.block.ms", "3000")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    with pytest.raises(Exception) as info:
        query.awaitTermination(240)
    text = str(info.value)
    assert f"{sink}-5: 1 failed, first rows [7]" in text and "transaction was aborted" in text, text
    [summary] = akresil.spark.stream_write_summaries(query.id)
    assert (summary.status, summary.records, summary.failed, summary.tasks_failed) == ("aborted", 0, 20, 1)
    assert read_committed(bs, sink) == []


def test_cluster_spark_submit_runs_the_example_stream_pipeline(spark_cluster: SparkStandaloneCluster,
                                                               kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """The set-up docs/spark.md gives users: ``spark-submit --master spark://...`` with PYSPARK_PYTHON naming the
    Python that has akresil. examples/spark_stream_pipeline.py checks 320 orders (20 malformed) exactly once."""
    import json
    import subprocess
    import sys

    from akresil.testing.spark_cluster import spark_home

    stop_spark(spark_cluster.master_url)            # this process's application holds the Worker's two cores
    bs = kafka_cluster.bootstrap_servers
    source, sink = _topic(kafka_cluster, 2), _topic(kafka_cluster, 2)
    orders = [(b"c%d" % (i % 7), json.dumps({"customer": f"c{i % 7}", "amount": i + 0.25}).encode())
              for i in range(300)]
    produce(bs, source, orders + [(None, b"not json")] * 10 + [(None, b'{"customer": "c1", "amount": -1}')] * 10)
    example = Path(__file__).resolve().parents[2] / "examples" / "spark_stream_pipeline.py"
    done = subprocess.run(
        [str(spark_home() / "bin" / "spark-submit"), "--master", spark_cluster.master_url,
         "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=1g", str(example),
         "--bootstrap", bs, "--source", source, "--sink", sink, "--checkpoint", str(tmp_path / "checkpoint"),
         "--available-now"],
        env={**spark_cluster.environment(), "PYSPARK_DRIVER_PYTHON": sys.executable},
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "300 records written to" in done.stdout, done.stdout
    out = read_committed(bs, sink)
    assert sorted((k, json.loads(v or b"")["cents"]) for _, k, v in out) == sorted(
        (b"c%d" % (i % 7), i * 100 + 25) for i in range(300))
