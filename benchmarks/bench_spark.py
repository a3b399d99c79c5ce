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


def spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import akresil.spark
    spark = (SparkSession.builder.master("local[2]").appName("akresil-bench")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    akresil.spark.register(spark)
    return spark


def spark_write(spark: Any, bs: str, topic: str, n: int, size: int) -> float:
    df = spark.range(0, n, numPartitions=2).selectExpr(
        "cast(id as string) as key", f"lpad(cast(id as string), {size}, '0') as value")
    t0 = time.perf_counter()
    df.write.format("akresil").option("kafka.bootstrap.servers", bs).option("topic", topic).mode("append").save()
    return time.perf_counter() - t0


def spark_read(spark: Any, bs: str, topic: str, n: int) -> float:
    t0 = time.perf_counter()
    row = (spark.read.format("akresil").option("kafka.bootstrap.servers", bs).option("subscribe", topic).load()
           .selectExpr("count(*) as n", "sum(length(value)) as b").first())
    elapsed = time.perf_counter() - t0
    if row.n != n:
        raise AssertionError(f"Spark read {row.n} rows from {topic}, expected {n}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--sizes", default="100,1024", help="value sizes in bytes, comma-separated")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds: need at least 1")
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
    text = orjson.dumps(result, option=orjson.OPT_INDENT_2).decode()
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
