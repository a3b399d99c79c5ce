"""Spark data source throughput: rows/s written and read through Spark local[2] vs the plain akresil clients.

One embedded noida-db broker (its ListOffsets LATEST is exact; Tansu's is not, see docs/brokers.md) and one
local[2] SparkSession. For each value size (``--sizes``, default 100 B and 1 KiB) the same N records (key =
the row number as text, value = that number zero-padded to the size) go through four paths, each into its
own fresh topic of ``--partitions`` partitions:

* plain write: ``Producer.send_many`` in chunks of 10 000 (one client, one event loop);
* Spark write: ``df.write.format("akresil")`` from ``spark.range(N, numPartitions=2)`` (two tasks);
* plain read: ``Consumer.getmany`` with manual assignment from offset 0 until N records arrived;
* Spark read: ``spark.read.format("akresil")`` + an aggregate touching every value (count, sum of lengths),
  so every row crosses from the Python worker into the JVM.

Session start-up and the Python workers' first start are excluded (a small warm-up write and read run
first). Each path runs ``--rounds`` times (>= 3); the report gives the median and the worst round in rows/s
and the ratios of the medians. Spark's fixed cost per query (job scheduling, the Python planner and commit
processes it starts per query, ListOffsets) is measured with 100-row writes and reads and reported with the
Spark rates net of it. Prints one JSON document (orjson).

    python benchmarks/bench_spark.py [--records 100000] [--sizes 100,1024] [--partitions 4] [--rounds 3]
                                     [--out F]

``--apache`` instead compares akresil's source and sink with Spark's own Kafka connector (``format("kafka")``,
``org.apache.spark:spark-sql-kafka-0-10_2.13``, ``--connector-version``, resolved with Maven into the Kafka jar
cache and passed with ``spark.jars``) in one session, on a 3-broker Apache Kafka cluster (``KafkaCluster``;
topics of ``--replication-factor`` replicas, default 1): write and read per format and value size, the
per-query cost of each from 100-row queries, medians and the worst round:

    python benchmarks/bench_spark.py --apache --records 1000000 --rounds 3 --out spark-apache.json
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from typing import Any

import anyio
import orjson

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil.testing import EmbeddedBroker

CHUNK = 10_000


def records(n: int, size: int) -> list[tuple[bytes, bytes]]:
    return [(str(i).encode(), str(i).zfill(size).encode()) for i in range(n)]


async def create(bs: str, partitions: int) -> str:
    name = f"bench-spark-{uuid.uuid4().hex[:8]}"
    async with Admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(name, partitions)])
    return name


async def plain_write(bs: str, topic: str, recs: list[tuple[bytes, bytes]]) -> float:
    async with Producer(bootstrap_servers=bs) as producer:
        t0 = time.perf_counter()
        for i in range(0, len(recs), CHUNK):
            await producer.send_many(topic, recs[i:i + CHUNK])
        return time.perf_counter() - t0


async def plain_read(bs: str, topic: str, partitions: int, n: int) -> float:
    async with Consumer(bootstrap_servers=bs, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        got = 0
        t0 = time.perf_counter()
        while got < n:
            for recs in (await consumer.getmany(timeout_ms=10_000, max_records=CHUNK)).values():
                got += len(recs)
        return time.perf_counter() - t0


def spark_session(jars: list[str] | None = None) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import akresil.spark
    builder = (SparkSession.builder.master("local[2]").appName("akresil-bench")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2"))
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    akresil.spark.register(spark)
    return spark


def spark_write(spark: Any, bs: str, topic: str, n: int, size: int, fmt: str = "akresil") -> float:
    df = spark.range(0, n, numPartitions=2).selectExpr(
        "cast(id as string) as key", f"lpad(cast(id as string), {size}, '0') as value")
    t0 = time.perf_counter()
    df.write.format(fmt).option("kafka.bootstrap.servers", bs).option("topic", topic).mode("append").save()
    return time.perf_counter() - t0


def spark_read(spark: Any, bs: str, topic: str, n: int, fmt: str = "akresil") -> float:
    t0 = time.perf_counter()
    row = (spark.read.format(fmt).option("kafka.bootstrap.servers", bs).option("subscribe", topic)
           .option("startingOffsets", "earliest").load()
           .selectExpr("count(*) as n", "sum(length(value)) as b").first())
    elapsed = time.perf_counter() - t0
    if row.n != n:
        raise AssertionError(f"Spark read {row.n} rows from {topic}, expected {n}")
    return elapsed


def apache_main(args: argparse.Namespace) -> dict[str, Any]:
    """``--apache``: akresil's source/sink vs Spark's own Kafka connector (``format("kafka")``) in one local[2]
    session, against a 3-broker Apache Kafka cluster.  Each round writes the N rows once per format into fresh
    topics and reads each topic with both formats (alternating which goes first), so both read the same data."""
    from akresil.testing.kafka_cluster import KafkaCluster
    from akresil.testing.kafka_jars import DEFAULT_SPARK_KAFKA_VERSION, resolve_spark_kafka_jars

    import pyspark
    jars = [str(j) for j in resolve_spark_kafka_jars(args.connector_version)]
    n = args.records
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    fmts = ("akresil", "kafka")
    spark = spark_session(jars)
    results: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        with KafkaCluster(brokers=3) as cluster:
            bs = cluster.bootstrap_servers

            def topic() -> str:
                return anyio.run(lambda: cluster.create_topic(partitions=args.partitions,
                                                              replication_factor=args.replication_factor))
            for fmt in fmts:   # warm-up: session, Python workers, the connector's classes
                warm = topic()
                spark_write(spark, bs, warm, 1000, sizes[0], fmt)
                spark_read(spark, bs, warm, 1000, fmt)
            # each format's cost per query, independent of the rows: the same paths with 100 rows
            fixed: dict[str, list[float]] = {f"{f}_{d}": [] for f in fmts for d in ("write", "read")}
            for _ in range(args.rounds):
                for fmt in fmts:
                    tiny = topic()
                    fixed[f"{fmt}_write"].append(spark_write(spark, bs, tiny, 100, sizes[0], fmt))
                    fixed[f"{fmt}_read"].append(spark_read(spark, bs, tiny, 100, fmt))
            results["per_query_s_100_rows"] = {
                k: {"median": round(statistics.median(v), 3), "worst": round(max(v), 3)} for k, v in fixed.items()}
            for size in sizes:
                times: dict[str, list[float]] = {k: [] for k in fixed}
                for r in range(args.rounds):
                    order = fmts if r % 2 == 0 else fmts[::-1]
                    written = {}
                    for fmt in order:
                        written[fmt] = topic()
                        times[f"{fmt}_write"].append(spark_write(spark, bs, written[fmt], n, size, fmt))
                    for fmt in order:   # each format reads the topic the other one wrote
                        other = written[fmts[1] if fmt == fmts[0] else fmts[0]]
                        times[f"{fmt}_read"].append(spark_read(spark, bs, other, n, fmt))
                    print(f"# {size} B round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()),
                          file=sys.stderr, flush=True)
                median = {k: round(n / statistics.median(v)) for k, v in times.items()}
                worst = {k: round(n / max(v)) for k, v in times.items()}
                # None where a full query was not slower than the 100-row one (the difference is noise)
                net = {k: (round(n / d) if (d := statistics.median(times[k]) - statistics.median(fixed[k])) > 0
                           else None) for k in times}
                results[f"{size}B"] = {
                    "rows_per_s_median": median, "rows_per_s_worst": worst,
                    "rows_per_s_without_per_query_cost": net,
                    "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
                    "akresil_vs_spark_kafka_medians": {
                        "write": round(median["akresil_write"] / median["kafka_write"], 2),
                        "read": round(median["akresil_read"] / median["kafka_read"], 2)},
                }
    finally:
        spark.stop()
    return {
        "benchmark": "spark_local2_akresil_vs_spark_sql_kafka_on_apache_kafka",
        "records": n, "value_bytes": sizes, "partitions": args.partitions,
        "replication_factor": args.replication_factor, "rounds": args.rounds,
        "broker": f"Apache Kafka {cluster.version} (KafkaCluster: 3 brokers + a controller, loopback)",
        "pyspark": pyspark.__version__,
        "spark_kafka_connector": f"org.apache.spark:spark-sql-kafka-0-10_2.13:{args.connector_version}"
                                 f"{'' if args.connector_version != DEFAULT_SPARK_KAFKA_VERSION else ' (default)'}",
        "spark_jars": [os.path.basename(j) for j in jars],
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        "elapsed_s": round(time.perf_counter() - started, 1),
        "results": results,
        "note": "indicative on a shared machine; compare the two formats within one run",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--sizes", default="100,1024", help="value sizes in bytes, comma-separated")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--apache", action="store_true",
                    help="akresil vs Spark's format('kafka') on an Apache Kafka cluster (Java 17+, Maven)")
    ap.add_argument("--connector-version", default="4.2.0",
                    help="--apache: org.apache.spark:spark-sql-kafka-0-10_2.13 version (Maven Central)")
    ap.add_argument("--replication-factor", type=int, default=1, help="--apache: topics' replication factor")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds: need at least 1")
    if args.apache:
        emit(apache_main(args), args.out)
        return
    n = args.records
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    spark = spark_session()
    results: dict[str, Any] = {}
    try:
        with EmbeddedBroker(kind="noida") as broker:
            bs = broker.bootstrap_servers
            warm = anyio.run(create, bs, args.partitions)
            spark_write(spark, bs, warm, 1000, sizes[0])
            spark_read(spark, bs, warm, 1000)
            # Spark's cost per query, independent of the rows: the same paths with 100 rows
            fixed: dict[str, list[float]] = {"spark_write": [], "spark_read": []}
            for _ in range(args.rounds):
                tiny = anyio.run(create, bs, args.partitions)
                fixed["spark_write"].append(spark_write(spark, bs, tiny, 100, sizes[0]))
                fixed["spark_read"].append(spark_read(spark, bs, tiny, 100))
            results["per_query_s_median_100_rows"] = {k: round(statistics.median(v), 3) for k, v in fixed.items()}
            for size in sizes:
                recs = records(n, size)
                times: dict[str, list[float]] = {k: [] for k in ("plain_write", "spark_write", "plain_read",
                                                                  "spark_read")}
                for _ in range(args.rounds):
                    topic = anyio.run(create, bs, args.partitions)
                    times["plain_write"].append(anyio.run(plain_write, bs, topic, recs))
                    times["plain_read"].append(anyio.run(plain_read, bs, topic, args.partitions, n))
                    times["spark_read"].append(spark_read(spark, bs, topic, n))
                    topic = anyio.run(create, bs, args.partitions)
                    times["spark_write"].append(spark_write(spark, bs, topic, n, size))
                median = {k: round(n / statistics.median(v)) for k, v in times.items()}
                # rows/s once Spark's per-query cost (measured above with 100 rows) is taken out
                net = {k: round(n / max(1e-9, statistics.median(times[k]) - statistics.median(fixed[k])))
                       for k in fixed}
                worst = {k: round(n / max(v)) for k, v in times.items()}
                results[f"{size}B"] = {
                    "rows_per_s_median": median, "rows_per_s_worst": worst,
                    "spark_rows_per_s_without_per_query_cost": net,
                    "ratios_of_medians": {
                        "spark_write_vs_plain_send_many": round(median["spark_write"] / median["plain_write"], 2),
                        "spark_read_vs_plain_getmany": round(median["spark_read"] / median["plain_read"], 2)},
                }
    finally:
        spark.stop()
    result = {
        "benchmark": "spark_local2_vs_plain_clients",
        "records": n, "value_bytes": sizes, "partitions": args.partitions, "rounds": args.rounds,
        "broker": "noida-db (EmbeddedBroker kind='noida')",
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        "results": results,
        "note": "indicative on a shared machine; compare ratios within one run",
    }
    emit(result, args.out)


def emit(result: dict[str, Any], out: str | None) -> None:
    text = orjson.dumps(result, option=orjson.OPT_INDENT_2).decode()
    print(text)
    if out:
        with open(out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
