"""akresil's Spark data source on Apache Kafka: batch write, batch read, and a Trigger.AvailableNow stream, each
record exactly once.  The SparkSession is the suite's (``tests/integration/conftest_spark.spark``: one local[2]
session for every Spark test of the run); the topics have three replicas on the tier's cluster."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

from akresil.testing import KafkaCluster
from tests.integration.conftest_spark import produce, spark  # noqa: F401  (the shared session fixture)

pytestmark = pytest.mark.spark

ROWS = 10_000
PARTS = 4


def _topic(cluster: KafkaCluster, partitions: int) -> str:
    return anyio.run(lambda: cluster.create_topic(partitions=partitions, replication_factor=3))


def test_spark_writes_then_reads_every_row_once(spark: Any, kafka_cluster: KafkaCluster) -> None:  # noqa: F811
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


def test_spark_available_now_stream_reads_everything_once_and_resumes(spark: Any,  # noqa: F811
                                                                      kafka_cluster: KafkaCluster,
                                                                      tmp_path: Any) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = _topic(kafka_cluster, 3)
    seen: list[list[tuple[int, int, bytes]]] = []
    lock = threading.Lock()

    def collect(batch_df: Any, batch_id: int) -> None:
        rows = [(r.partition, r.offset, bytes(r.value))
                for r in batch_df.select("partition", "offset", "value").collect()]
        with lock:
            seen.append(rows)

    def run_available_now() -> list[list[tuple[int, int, bytes]]]:
        before = len(seen)
        stream = (spark.readStream.format("akresil").option("kafka.bootstrap.servers", bs)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "400").load())
        query = (stream.writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(240), "the AvailableNow query did not end"
        finally:
            query.stop()
        assert query.exception() is None
        with lock:
            return [rows for rows in seen[before:] if rows]

    produced: dict[tuple[int, int], bytes] = {}

    def send(prefix: str, n: int) -> None:
        recs: list[tuple[bytes | None, bytes]] = [(b"k%d" % i, f"{prefix}{i}".encode()) for i in range(n)]
        for (p, o), (_, v) in zip(produce(bs, topic, recs), recs):
            produced[(p, o)] = v

    send("a", 1000)
    first = run_available_now()
    # AvailableNow splits the backlog into maxOffsetsPerTrigger-sized micro-batches, then stops
    assert [len(rows) for rows in first] == [400, 400, 200]
    assert {(p, o): v for rows in first for p, o, v in rows} == produced

    # written while no query runs: the next AvailableNow run resumes from the checkpoint, reads only these
    already = set(produced)
    send("b", 300)
    second = run_available_now()
    assert [len(rows) for rows in second] == [300]
    assert {(p, o) for rows in second for p, o, _ in rows} == set(produced) - already
    everything = [(p, o) for rows in seen for p, o, _ in rows]
    assert len(everything) == len(set(everything)) == len(produced)      # exactly once across both runs
    assert {(p, o): v for rows in seen for p, o, v in rows} == produced
