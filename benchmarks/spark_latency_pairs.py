"""Micro-batch latency per source/sink pairing: which side of a streaming pipeline costs what.

Starts a Spark standalone cluster (a Master and a 2-core Worker from the installed pyspark) and a 3-broker Apache
Kafka (``KafkaCluster``), fills one 4-partition topic with ``--records`` records of 100 B, then runs
readStream(source) -> upper(value) -> writeStream(sink) with ``Trigger.AvailableNow`` and ``maxOffsetsPerTrigger``
``--per-batch`` for each pairing (one warm-up, then ``--rounds`` rounds, the order alternating), and prints each
run's median and worst ``triggerExecution`` and the medians of Spark's phases (``durationMs``). A pairing is
``source/sink[/deliveryGuarantee]``; formats: ``akresil``, ``kafka`` (spark-sql-kafka), and as a sink
``akresil_bench_noop`` (bench_spark's no-op Python sink: Spark's floor for any Python sink). A source may carry
read options after a colon, ``;``-separated (``akresil:minRecordsPerPartition=1/akresil``). Each run also prints the
median number of Spark tasks per micro-batch (from Spark's status tracker, the query's job group).

    python benchmarks/spark_latency_pairs.py akresil/akresil,kafka/kafka,kafka/akresil,kafka/akresil_bench_noop
    python benchmarks/spark_latency_pairs.py akresil/akresil/exactly-once,akresil/akresil --rounds 2
    python benchmarks/spark_latency_pairs.py akresil:minRecordsPerPartition=1/akresil,akresil/akresil
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import Any

import anyio

import bench_spark as B
from akresil.testing.kafka_cluster import KafkaCluster
from akresil.testing.kafka_jars import DEFAULT_SPARK_KAFKA_VERSION, resolve_spark_kafka_jars
from akresil.testing.spark_cluster import SparkStandaloneCluster

PHASES = ("addBatch", "commitOffsets", "walCommit", "latestOffset", "queryPlanning")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", help="comma-separated source/sink[/guarantee]")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--per-batch", type=int, default=1000)
    args = ap.parse_args()
    pairs = [p.split("/") for p in args.pairs.split(",")]
    B.compile_akresil()
    jars = [str(j) for j in resolve_spark_kafka_jars(DEFAULT_SPARK_KAFKA_VERSION)]
    standalone = SparkStandaloneCluster(cores=2)
    try:
        spark = B.spark_session(jars, master=standalone.start().master_url)
        try:
            with KafkaCluster(brokers=3) as cluster:
                bs = cluster.bootstrap_servers

                def topic() -> str:
                    return anyio.run(lambda: cluster.create_topic(partitions=4, replication_factor=1))
                source = topic()
                anyio.run(B.fill, bs, source, args.records, 100)
                scratch = Path(tempfile.mkdtemp())

                def run(pair: list[str]) -> tuple[list[float], dict[str, float], float]:
                    fmt, _, extra = pair[0].partition(":")
                    reader = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bs)
                              .option("subscribe", source).option("startingOffsets", "earliest")
                              .option("maxOffsetsPerTrigger", str(args.per_batch)))
                    for item in filter(None, extra.split(";")):
                        key, _, value = item.partition("=")
                        reader = reader.option(key, value)
                    stream = reader.load().selectExpr("key", "upper(cast(value as string)) as value")
                    writer: Any = (stream.writeStream.format(pair[1]).option("kafka.bootstrap.servers", bs)
                                   .option("topic", topic()).option("checkpointLocation", str(scratch / uuid.uuid4().hex)))
                    if len(pair) > 2:
                        writer = writer.option("deliveryGuarantee", pair[2])
                    query, _ = B.run_available_now(writer)
                    if query.exception() is not None:
                        raise RuntimeError(f"{'/'.join(pair)}: {query.exception()}")
                    progress = [p for p in query.recentProgress if p.numInputRows > 0]
                    phases = {k: statistics.median(p.durationMs.get(k, 0) for p in progress) for k in PHASES}
                    tasks = B.tasks_per_micro_batch(spark, query)
                    return [float(p.durationMs["triggerExecution"]) for p in progress], phases, tasks

                for pair in pairs:
                    run(pair)
                for r in range(args.rounds):
                    for pair in (pairs if r % 2 == 0 else pairs[::-1]):
                        times, phases, tasks = run(pair)
                        print(f"{'/'.join(pair)}: triggerExecution median {statistics.median(times):.0f} ms, "
                              f"worst {max(times):.0f} ms; tasks per micro-batch {tasks:g}; phase medians {phases}; "
                              f"load {os.getloadavg()[0]:.1f}", flush=True)
        finally:
            spark.stop()
    finally:
        standalone.stop()


if __name__ == "__main__":
    main()
