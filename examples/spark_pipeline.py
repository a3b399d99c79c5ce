"""A Spark pipeline on akresil: read a topic, aggregate with Spark SQL, write the results to another topic.

Orders arrive on ``orders`` as JSON values ``{"customer": "c1", "amount": 12.5}``; the pipeline computes
per-customer order counts and totals with Spark SQL and writes one JSON record per customer (keyed by the
customer) to ``order-totals``.

    python examples/spark_pipeline.py                         # starts an embedded broker with sample orders
    python examples/spark_pipeline.py --bootstrap host:9092   # your cluster; topics must exist

Needs ``pip install 'akresil[spark,testing]'`` and Java 17+.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import Any

import anyio
import orjson

from akresil import Admin, NewTopic, Producer


def spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import akresil.spark

    spark = (SparkSession.builder.master("local[2]").appName("akresil-pipeline")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    akresil.spark.register(spark)                     # the "akresil" format
    return spark


def run_pipeline(spark: Any, bootstrap: str, source: str = "orders", sink: str = "order-totals") -> Any:
    """The pipeline itself; returns the write's delivery summary."""
    import akresil.spark

    orders = (spark.read.format("akresil")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source)
              .option("startingOffsets", "earliest")
              .load())
    orders.selectExpr("from_json(cast(value as string), 'customer string, amount double') as o") \
          .select("o.*").createOrReplaceTempView("orders")
    totals = spark.sql("""
        select customer as key,
               to_json(named_struct('customer', customer, 'orders', count(*),
                                    'total', round(sum(amount), 2))) as value
        from orders where customer is not null
        group by customer""")
    (totals.write.format("akresil")
     .option("kafka.bootstrap.servers", bootstrap)
     .option("topic", sink)
     .mode("append")
     .save())
    return akresil.spark.last_write_summary()


def sample_orders(n: int, seed: int = 7) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    out: list[tuple[bytes, bytes]] = []
    for _ in range(n):
        customer = f"c{rng.randrange(5)}"
        out.append((customer.encode(), orjson.dumps({"customer": customer, "amount": rng.randrange(100, 5000) / 100})))
    return out


async def _prepare(bootstrap: str, source: str, sink: str, n: int) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(source, 3), NewTopic(sink, 1)])
    async with Producer(bootstrap_servers=bootstrap) as producer:
        await producer.send_many(source, sample_orders(n))


def main() -> None:
    ap = argparse.ArgumentParser(description="read a topic, aggregate with Spark SQL, write another topic")
    ap.add_argument("--bootstrap", help="host:port of your cluster (default: an embedded broker with sample data)")
    ap.add_argument("--source", default="orders")
    ap.add_argument("--sink", default="order-totals")
    ap.add_argument("--orders", type=int, default=1000, help="sample orders for the embedded broker")
    args = ap.parse_args()
    spark = spark_session()
    try:
        if args.bootstrap:
            summary = run_pipeline(spark, args.bootstrap, args.source, args.sink)
            show(spark, args.bootstrap, args.sink, summary)
            return
        from akresil.testing import EmbeddedBroker
        # noida-db: its ListOffsets answers are exact (Tansu's LATEST is not), see docs/brokers.md
        with EmbeddedBroker(kind="noida") as broker:
            anyio.run(_prepare, broker.bootstrap_servers, args.source, args.sink, args.orders)
            summary = run_pipeline(spark, broker.bootstrap_servers, args.source, args.sink)
            show(spark, broker.bootstrap_servers, args.sink, summary)
    finally:
        spark.stop()


def show(spark: Any, bootstrap: str, sink: str, summary: Any) -> None:
    print(f"wrote {summary.records} records to {sink} ({summary.status}, partitions {dict(summary.partitions)})")
    rows = (spark.read.format("akresil").option("kafka.bootstrap.servers", bootstrap).option("subscribe", sink)
            .load().selectExpr("cast(value as string) as v").orderBy("v").collect())
    for r in rows:
        print(r.v)


if __name__ == "__main__":
    main()
