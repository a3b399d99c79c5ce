"""A streaming Spark pipeline on akresil: orders in, checked orders out, exactly once, resumable.

Reads JSON orders ``{"customer": "c1", "amount": 12.5}`` from ``orders`` as they arrive, drops malformed ones and
writes each valid order, keyed by its customer, as ``{"customer", "cents", "order_offset"}`` to ``orders-checked``.
The checkpoint keeps the query's progress: stopped and started again, it resumes where it was; with
``--guarantee exactly-once`` (the default) a micro-batch Spark runs again after a failure is not written twice
(read the output with ``isolation.level=read_committed``).

On a Spark standalone cluster, with akresil installed in the Python every machine runs (docs/spark.md):

    PYSPARK_PYTHON=/opt/pipeline/bin/python spark-submit --master spark://master:7077 \\
        examples/spark_stream_pipeline.py --bootstrap broker:9092 --checkpoint /shared/checkpoints/orders

``--available-now`` processes what the topic holds and stops (Trigger.AvailableNow); without it the query runs
until interrupted. Run on one machine with plain ``python`` (Spark's local mode). Needs ``pip install
'akresil[spark]'`` and Java 17+; the topics must exist.
"""

from __future__ import annotations

import argparse
from typing import Any


def build(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: str, guarantee: str) -> Any:
    """The pipeline: readStream -> parse and check -> writeStream (not started)."""
    orders = (spark.readStream.format("akresil")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "50000")
              .load())
    checked = (orders
               .selectExpr("offset", "from_json(cast(value as string), 'customer string, amount double') as o")
               .where("o.customer is not null and o.amount > 0")
               .selectExpr("o.customer as key",
                           "to_json(named_struct('customer', o.customer, 'cents', cast(round(o.amount * 100) as long),"
                           " 'order_offset', offset)) as value"))
    return (checked.writeStream.format("akresil")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", sink)
            .option("deliveryGuarantee", guarantee)
            .option("checkpointLocation", checkpoint))


def main() -> None:
    ap = argparse.ArgumentParser(description="orders in, checked orders out, exactly once")
    ap.add_argument("--bootstrap", required=True, help="host:port[,host:port] of the Kafka cluster")
    ap.add_argument("--source", default="orders")
    ap.add_argument("--sink", default="orders-checked")
    ap.add_argument("--checkpoint", required=True, help="checkpoint folder (shared storage on a cluster)")
    ap.add_argument("--guarantee", choices=("exactly-once", "at-least-once"), default="exactly-once")
    ap.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    args = ap.parse_args()

    from pyspark.sql import SparkSession

    import akresil.spark

    spark = SparkSession.builder.appName("akresil-orders-checked").getOrCreate()   # spark-submit sets the master
    akresil.spark.register(spark)
    writer = build(spark, args.bootstrap, args.source, args.sink, args.checkpoint, args.guarantee)
    query = writer.trigger(availableNow=True).start() if args.available_now else writer.start()
    try:
        query.awaitTermination()
    finally:
        query.stop()
        batches = akresil.spark.stream_write_summaries(query.id)
        landed = sum(s.records for s in batches)
        skipped = sum(s.skipped for s in batches)
        print(f"{len(batches)} micro-batches, {landed} records written to {args.sink}"
              + (f", {skipped} already written by an earlier attempt" if skipped else ""))
        spark.stop()


if __name__ == "__main__":
    main()
