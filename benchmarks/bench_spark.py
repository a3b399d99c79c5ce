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
cache and passed with ``spark.jars``) in one driver session on a Spark standalone cluster (a Master and a 2-core
Worker started from the installed pyspark; ``--master local[2]`` for local mode) against a 3-broker Apache Kafka
cluster (``KafkaCluster``; topics of ``--partitions`` partitions and ``--replication-factor`` replicas): batch
write and read per format and value size, the streaming pipeline readStream -> upper(value) -> writeStream
(records/s over ``--stream-records`` in micro-batches of ``--stream-batch``, and the per-micro-batch time of
micro-batches of ``--latency-batch``), akresil's exactly-once sink as a third streaming column and its source with
``microBatchRead=driver`` as a fourth (``akresil_driver_read``, at-least-once sink), and each path's
fixed cost from 100-row queries; medians and the worst round, ratios akresil / ``format("kafka")`` (> 1: akresil
faster). The fixed cost also runs a no-op Python data source (``noop``: writes and streams 100 rows, talks to no
broker), Spark's floor for any Python data source's write and streaming query (``--only fixed``: these alone).
The command that makes the figures in docs/spark.md:

    python benchmarks/bench_spark.py --apache --out spark-apache.json     # 1 M rows, 100 B and 1 KiB, 3 rounds
    python benchmarks/bench_spark.py --apache --only streaming            # the streaming pipeline alone
    python benchmarks/bench_spark.py --apache --only phases --rounds 5    # a micro-batch's phases per source/sink

``--only phases`` runs the latency pipeline (``--latency-batches`` micro-batches of ``--latency-batch`` records)
from each of four sources — Spark's connector, the no-op source making its rows in memory (a trivial Python
``DataSourceStreamReader``: Spark's floor for any Python source), akresil's task read and its driver read — into
each of three sinks (Spark's, akresil's, the no-op Python sink), the twelve variants alternating, and reports the
median and worst of each phase Spark times (``durationMs``: ``walCommit``, ``commitOffsets``, ``addBatch``...).

Before Spark starts, akresil's modules are compiled to bytecode (``compileall``), as ``pip install`` does for an
installed package: Spark starts fresh Python processes per query (planner, commit, source runner, executor
workers), and a checkout run with ``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile akresil from source in
every one of them (``import akresil.admin``: 340 ms from source, 138 ms from bytecode, measured loaded), a cost no
installed akresil has. ``--no-compile`` measures that from-source case; the JSON says which (``akresil_bytecode``).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import orjson

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil.testing import EmbeddedBroker

CHUNK = 10_000
#: the no-op Python data source of the fixed-cost rows: Spark's own floor for any Python data source
NOOP = "noop"
#: the streaming column of akresil's pipeline with its source's microBatchRead=driver (docs/spark.md)
DRIVER_READ = "akresil_driver_read"


def _noop_source() -> Any:
    """A Python data source that does nothing (``format("akresil_bench_noop")``): its 100-row write and streaming
    queries cost what Spark's Python Data Source API costs per query (planner, Python workers, commit runner,
    source runner) with no Kafka client at all — the floor under akresil's fixed cost. Defined here, not in a
    module, so Spark's workers get it by value (cloudpickle) and need nothing installed."""
    from pyspark.sql.datasource import (
        DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter, DataSourceStreamReader, InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

    class NoopWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class NoopStreamWriter(DataSourceStreamArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

        def commit(self, messages: Any, batchId: int) -> None:
            pass

        def abort(self, messages: Any, batchId: int) -> None:
            pass

    class NoopStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        """``records`` rows (default 100: the fixed cost's pipeline) made in memory, offsets ``{"o": n}``, at most
        ``maxOffsetsPerTrigger`` per micro-batch, each micro-batch one partition; key = the row number, value = it
        zero-padded to ``valueBytes`` (the trivial Python source of ``--only phases``)."""

        def __init__(self, options: dict[str, str]) -> None:
            self.records = int(options.get("records", 100))
            self.per_batch = int(options.get("maxOffsetsPerTrigger", self.records))
            self.size = int(options.get("valueBytes", 0))

        def initialOffset(self) -> dict[str, int]:
            return {"o": 0}

        def getDefaultReadLimit(self) -> Any:
            return ReadMaxRows(self.per_batch)

        def prepareForTriggerAvailableNow(self) -> None:
            pass     # the rows are fixed: Trigger.AvailableNow's end is ``records``

        def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
            step = limit.max_rows if isinstance(limit, ReadMaxRows) else self.records
            return {"o": min(self.records, start["o"] + step)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition((start["o"], end["o"]))] if end["o"] > start["o"] else []

        def read(self, partition: InputPartition) -> Any:
            first, end = partition.value
            return ((str(i).encode(), str(i).zfill(self.size).encode()) for i in range(first, end))

        def commit(self, end: dict[str, int]) -> None:
            pass

    class NoopSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "akresil_bench_noop"

        def schema(self) -> str:
            return "key binary, value binary"

        def writer(self, schema: Any, overwrite: bool) -> NoopWriter:
            return NoopWriter()

        def streamReader(self, schema: Any) -> NoopStreamReader:
            return NoopStreamReader(self.options)

        def streamWriter(self, schema: Any, overwrite: bool) -> NoopStreamWriter:
            return NoopStreamWriter()

    return NoopSource


def run_available_now(writer: Any) -> tuple[Any, float]:
    """Start ``writer`` (a ``DataStreamWriter``) with ``Trigger.AvailableNow``, wait until it has read everything
    and stop it: the stopped query and the seconds from start to stop."""
    t0 = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    try:
        query.awaitTermination()
    finally:
        query.stop()
    return query, time.perf_counter() - t0


def noop_pipeline(spark: Any, checkpoint: Path) -> float:
    """The fixed-cost pipeline (100 records, Trigger.AvailableNow, upper(value)) through the no-op source and sink."""
    query = (spark.readStream.format("akresil_bench_noop").load()
             .selectExpr("key", "upper(cast(value as string)) as value")
             .writeStream.format("akresil_bench_noop").option("checkpointLocation", str(checkpoint)))
    started, elapsed = run_available_now(query)
    done = sum(p.numInputRows for p in started.recentProgress)
    if done != 100:
        raise AssertionError(f"no-op pipeline read {done} records, expected 100")
    shutil.rmtree(checkpoint, ignore_errors=True)
    return elapsed


def records(n: int, size: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    return [(str(i).encode(), str(i).zfill(size).encode()) for i in range(start, start + n)]


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


def compile_akresil() -> str:
    """Compile akresil's modules to bytecode next to them, as installing the package does (see the docstring)."""
    import compileall

    import akresil

    package = Path(akresil.__file__).parent
    if not compileall.compile_dir(str(package), quiet=1):
        raise SystemExit(f"compiling {package} to bytecode failed (--no-compile skips it)")
    return f"compiled ahead (compileall {package}), as pip install does"


def spark_session(jars: list[str] | None = None, master: str = "local[2]") -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import akresil.spark
    builder = (SparkSession.builder.master(master).appName("akresil-bench")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.executor.memory", "1g"))
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    akresil.spark.register(spark)
    spark.dataSource.register(_noop_source())
    return spark


def spark_write(spark: Any, bs: str, topic: str, n: int, size: int, fmt: str = "akresil") -> float:
    df = spark.range(0, n, numPartitions=2).selectExpr(
        "cast(id as string) as key", f"lpad(cast(id as string), {size}, '0') as value")
    t0 = time.perf_counter()
    df.write.format("akresil_bench_noop" if fmt == NOOP else fmt).option("kafka.bootstrap.servers", bs).option("topic", topic).mode("append").save()
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
    """``--apache``: akresil's source and sink vs Spark's own Kafka connector (``format("kafka")``) in one driver
    session on a Spark standalone cluster (a Master and a ``--cores`` Worker from the installed pyspark, the set-up
    of docs/spark.md; ``--master local[2]`` runs in local mode instead), against a 3-broker Apache Kafka cluster.

    Per round, each format in turn (the order alternates): batch writes of N rows into fresh topics and reads of the
    topic the other format wrote, per value size; the streaming pipeline (readStream -> upper(value) ->
    writeStream, Trigger.AvailableNow, fresh checkpoint and output topic) over a shared input topic, timed from
    start to end, and a run in small micro-batches whose per-batch ``triggerExecution`` times are the micro-batch
    latency. akresil's exactly-once sink runs the same pipelines as a third column. Fixed costs are the same paths
    with 100 rows."""
    from akresil.testing.kafka_cluster import KafkaCluster
    from akresil.testing.kafka_jars import DEFAULT_SPARK_KAFKA_VERSION, resolve_spark_kafka_jars
    from akresil.testing.spark_cluster import SparkStandaloneCluster

    import pyspark
    jars = [str(j) for j in resolve_spark_kafka_jars(args.connector_version)]
    n = args.records
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    fmts = ("akresil", "kafka")
    results: dict[str, Any] = {}
    started = time.perf_counter()
    standalone = SparkStandaloneCluster(cores=args.cores) if args.master == "standalone" else None
    try:
        master = standalone.start().master_url if standalone is not None else args.master
        spark = spark_session(jars, master=master)
        try:
            with KafkaCluster(brokers=3) as cluster:
                bs = cluster.bootstrap_servers

                def topic() -> str:
                    return anyio.run(lambda: cluster.create_topic(partitions=args.partitions,
                                                                  replication_factor=args.replication_factor))
                results.update(_apache_rounds(args, spark, bs, topic, n, sizes, fmts, Path(tempfile.mkdtemp())))
            version = cluster.version
        finally:
            spark.stop()
    finally:
        if standalone is not None:
            standalone.stop()
    return {
        "benchmark": "spark_akresil_vs_spark_sql_kafka_on_apache_kafka",
        "spark_master": "standalone (1 Master, 1 Worker of %d cores, 1 executor)" % args.cores
                        if standalone is not None else args.master,
        "records": n, "value_bytes": sizes, "partitions": args.partitions,
        "stream_records": args.stream_records, "stream_batch": args.stream_batch,
        "latency_batch": args.latency_batch, "replication_factor": args.replication_factor, "rounds": args.rounds,
        "only": args.only,
        "broker": f"Apache Kafka {version} (KafkaCluster: 3 brokers + a controller, loopback)",
        "pyspark": pyspark.__version__,
        "spark_kafka_connector": f"org.apache.spark:spark-sql-kafka-0-10_2.13:{args.connector_version}"
                                 f"{'' if args.connector_version != DEFAULT_SPARK_KAFKA_VERSION else ' (default)'}",
        "spark_jars": [os.path.basename(j) for j in jars],
        "python": platform.python_version(), "cpus": os.cpu_count(), "akresil_bytecode": args.bytecode,
        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        "elapsed_s": round(time.perf_counter() - started, 1),
        "results": results,
        "note": "compare the formats within one run; take final figures on an idle machine",
    }


def _stats(values: list[float], digits: int = 3) -> dict[str, float]:
    return {"median": round(statistics.median(values), digits), "worst": round(max(values), digits)}


def _apache_rounds(args: argparse.Namespace, spark: Any, bs: str, topic: Any, n: int, sizes: list[int],
                   fmts: tuple[str, ...], scratch: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    sinks = (*fmts, "akresil_exactly_once", DRIVER_READ)
    batch, streaming = args.only in ("all", "batch", "fixed"), args.only in ("all", "streaming", "fixed")

    def pipeline(sink: str, source: str, records: int, per_batch: int) -> PipelineRun:
        return spark_pipeline(spark, bs, source, topic(), records, per_batch, sink, scratch / uuid.uuid4().hex)

    for fmt in fmts:   # warm-up: Python workers, executors' caches, the connector's classes
        warm = topic()
        spark_write(spark, bs, warm, 1000, sizes[0], fmt)
        spark_read(spark, bs, warm, 1000, fmt)
    spark_write(spark, bs, warm, 1000, sizes[0], NOOP)
    warm_stream = topic()
    anyio.run(fill, bs, warm_stream, 1000, sizes[0])
    for sink in sinks:
        pipeline(sink, warm_stream, 1000, 500)
    noop_pipeline(spark, scratch / uuid.uuid4().hex)
    if args.only == "phases":
        return _phase_rounds(args, spark, bs, topic, sizes[0], scratch)

    # each path's cost per query, independent of its rows: the same paths with 100 rows, the formats in an order
    # that alternates from round to round, and the no-op Python data source (NOOP) as Spark's floor for any
    # Python data source's write and streaming query
    kinds = (("write", "read") if batch else ()) + (("stream",) if streaming else ())
    fixed: dict[str, list[float]] = {f"{f}_{d}": [] for f in fmts for d in kinds if d != "stream"}
    if batch:
        fixed[f"{NOOP}_write"] = []
    fixed.update({f"{s}_stream": [] for s in (*sinks, NOOP) if streaming})
    tiny_stream = topic()
    anyio.run(fill, bs, tiny_stream, 100, sizes[0])
    for r in range(args.rounds):
        for fmt in ((*fmts, NOOP) if r % 2 == 0 else (NOOP, *fmts[::-1])) if batch else ():
            tiny = topic()
            fixed[f"{fmt}_write"].append(spark_write(spark, bs, tiny, 100, sizes[0], fmt))
            if fmt != NOOP:
                fixed[f"{fmt}_read"].append(spark_read(spark, bs, tiny, 100, fmt))
        for sink in ((*sinks, NOOP) if r % 2 == 0 else (NOOP, *sinks[::-1])) if streaming else ():
            fixed[f"{sink}_stream"].append(
                noop_pipeline(spark, scratch / uuid.uuid4().hex) if sink == NOOP
                else pipeline(sink, tiny_stream, 100, 100).seconds)
    results["per_query_s_100_rows"] = {k: _stats(v) for k, v in fixed.items()}
    results["per_query_akresil_vs_kafka_medians"] = {
        d: round(statistics.median(fixed[f"kafka_{d}"]) / statistics.median(fixed[f"akresil_{d}"]), 2)
        for d in kinds}
    results["per_query_python_floor_vs_kafka_medians"] = {
        d: round(statistics.median(fixed[f"kafka_{d}"]) / statistics.median(fixed[f"{NOOP}_{d}"]), 2)
        for d in kinds if f"{NOOP}_{d}" in fixed}
    if args.only == "fixed":
        return results
    if streaming:
        results["stream"] = _stream_rounds(args, bs, topic, sizes, sinks, pipeline)
    for size in sizes if batch else ():
        times: dict[str, list[float]] = {f"{f}_{d}": [] for f in fmts for d in ("write", "read")}
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
        results[f"batch_{size}B"] = {
            "rows_per_s_median": median, "rows_per_s_worst": worst,
            "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
            "akresil_vs_kafka_medians": {
                "write": round(median["akresil_write"] / median["kafka_write"], 2),
                "read": round(median["akresil_read"] / median["kafka_read"], 2)},
        }
    return results


#: ``--only phases``: each source into each sink; NOOP is the trivial Python source (rows made in memory,
#: ``commit`` a no-op), Spark's floor for any Python source
PHASE_SOURCES = ("kafka", NOOP, "akresil", DRIVER_READ)
PHASE_SINKS = ("kafka", "akresil", NOOP)
PHASES = ("latestOffset", "walCommit", "queryPlanning", "addBatch", "commitOffsets", "triggerExecution")


def _phase_rounds(args: argparse.Namespace, spark: Any, bs: str, topic: Any, size: int,
                  scratch: Path) -> dict[str, Any]:
    """Spark's per-micro-batch phases (``durationMs``) of the latency pipeline, for each source of
    ``PHASE_SOURCES`` into each sink of ``PHASE_SINKS``, the variants alternating (reversed every other round):
    what ``walCommit`` (offset log write, the previous batch's source ``commit``) and ``commitOffsets`` (commit log
    write) cost with the JVM source, with any Python source, and with akresil's."""
    records_in = args.latency_batch * args.latency_batches
    small = topic()
    anyio.run(fill, bs, small, records_in, size)
    variants = ([(source, sink) for sink in PHASE_SINKS for source in PHASE_SOURCES] if not args.phase_variants
                else [_phase_variant(v) for v in args.phase_variants.split(",")])
    load_start = [round(x, 2) for x in os.getloadavg()]

    def run(source: str, sink: str, n: int, per_batch: int) -> PipelineRun:
        return spark_pipeline(spark, bs, small, topic(), n, per_batch, sink, scratch / uuid.uuid4().hex,
                              read=source, value_bytes=size)

    for source, sink in variants:      # warm-up: each source's and sink's workers and runner code
        run(source, sink, records_in, records_in // 2)
    values: dict[str, dict[str, list[float]]] = {f"{so}->{si}": {p: [] for p in PHASES} for so, si in variants}
    for r in range(args.rounds):
        for source, sink in (variants if r % 2 == 0 else variants[::-1]):
            got = run(source, sink, records_in, args.latency_batch).phases_all
            for phase in PHASES:
                values[f"{source}->{sink}"][phase].extend(got.get(phase, []))
        print(f"# phases round {r + 1}: " + ", ".join(
            f"{k} wal {statistics.median(v['walCommit'])} commit {statistics.median(v['commitOffsets'])}"
            for k, v in values.items()), file=sys.stderr, flush=True)
    return {"phases": {
        "micro_batch_phases_ms": {k: {p: _stats(v, 1) for p, v in phases.items() if v} for k, phases in values.items()},
        "micro_batches_per_variant": {k: len(v["triggerExecution"]) for k, v in values.items()},
        "load_avg_at_start": load_start,
        "note": "source->sink; NOOP source: rows made in memory by a trivial Python DataSourceStreamReader",
    }}


def _phase_variant(text: str) -> tuple[str, str]:
    """``SOURCE>SINK`` of ``--phase-variants``."""
    source, _, sink = text.strip().partition(">")
    if source not in PHASE_SOURCES or sink not in PHASE_SINKS:
        raise SystemExit(f"--phase-variants: {text!r} is not SOURCE>SINK with a source of {PHASE_SOURCES} "
                         f"and a sink of {PHASE_SINKS}")
    return source, sink


def _stream_rounds(args: argparse.Namespace, bs: str, topic: Any, sizes: list[int], sinks: tuple[str, ...],
                   pipeline: Any) -> dict[str, Any]:
    """The streaming pipeline: throughput in big micro-batches, latency of small ones (shared input topics)."""
    source = topic()
    anyio.run(fill, bs, source, args.stream_records, sizes[0])
    small = topic()
    anyio.run(fill, bs, small, args.latency_batch * args.latency_batches, sizes[0])
    run_s: dict[str, list[float]] = {s: [] for s in sinks}
    batch_ms: dict[str, list[float]] = {s: [] for s in sinks}
    breakdown: dict[str, dict[str, float]] = {}
    tasks: dict[str, float] = {}
    for r in range(args.rounds):
        for sink in (sinks if r % 2 == 0 else sinks[::-1]):
            run_s[sink].append(pipeline(sink, source, args.stream_records, args.stream_batch).seconds)
            latency = pipeline(sink, small, args.latency_batch * args.latency_batches, args.latency_batch)
            batch_ms[sink].extend(latency.batch_ms)
            breakdown[sink] = latency.phases_ms
            tasks[sink] = latency.tasks
        print(f"# stream round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in run_s.items()),
              file=sys.stderr, flush=True)
    median = {k: round(args.stream_records / statistics.median(v)) for k, v in run_s.items()}
    return {
        "records_per_s_median": median,
        "records_per_s_worst": {k: round(args.stream_records / max(v)) for k, v in run_s.items()},
        "seconds": {k: [round(x, 2) for x in v] for k, v in run_s.items()},
        "micro_batch_ms": {k: _stats(v, 0) for k, v in batch_ms.items()},
        "micro_batch_phases_ms_last_latency_run_medians": breakdown,
        "micro_batch_tasks_last_latency_run_median": tasks,
        "akresil_vs_kafka_medians": {
            "records_per_s": round(median["akresil"] / median["kafka"], 2),
            "micro_batch_latency": round(statistics.median(batch_ms["kafka"]) / statistics.median(batch_ms["akresil"]),
                                         2),
            "exactly_once_records_per_s": round(median["akresil_exactly_once"] / median["kafka"], 2),
            "exactly_once_micro_batch_latency": round(
                statistics.median(batch_ms["kafka"]) / statistics.median(batch_ms["akresil_exactly_once"]), 2),
            "driver_read_records_per_s": round(median[DRIVER_READ] / median["kafka"], 2),
            "driver_read_micro_batch_latency": round(
                statistics.median(batch_ms["kafka"]) / statistics.median(batch_ms[DRIVER_READ]), 2)},
    }


async def fill(bs: str, topic: str, n: int, size: int) -> None:
    """``n`` records (key = row number, value = it zero-padded to ``size`` bytes) for a pipeline to read."""
    async with Producer(bootstrap_servers=bs, linger_ms=5) as producer:
        for i in range(0, n, CHUNK):
            await producer.send_many(topic, records(min(CHUNK, n - i), size, start=i))


class PipelineRun(NamedTuple):
    """One streaming run: seconds from start to end, each micro-batch's ``triggerExecution`` ms, and the median ms
    of each micro-batch phase Spark reports (``durationMs``: latestOffset, queryPlanning, addBatch, ...)."""

    seconds: float
    batch_ms: list[float]
    phases_ms: dict[str, float]
    #: median Spark tasks per micro-batch (the layout the source planned: akresil packs, Spark's connector does not)
    tasks: float = float("nan")
    #: each phase's ms, one value per micro-batch
    phases_all: dict[str, list[float]] = {}


def tasks_per_micro_batch(spark: Any, query: Any) -> float:
    """Median number of tasks of the jobs ``query`` ran (one job per micro-batch of these pipelines), from Spark's
    status tracker: a streaming query runs its jobs in a job group named after its run id."""
    tracker = spark.sparkContext.statusTracker()
    counts = []
    for job in tracker.getJobIdsForGroup(str(query.runId)):
        info = tracker.getJobInfo(job)
        stages = [tracker.getStageInfo(s) for s in info.stageIds] if info else []
        n = sum(s.numTasks for s in stages if s is not None)
        if n:
            counts.append(n)
    return statistics.median(counts) if counts else float("nan")


def spark_pipeline(spark: Any, bs: str, source: str, sink_topic: str, records_in: int, per_batch: int, sink: str,
                   checkpoint: Path, read: str | None = None, value_bytes: int = 100) -> PipelineRun:
    """readStream -> upper(value) -> writeStream with Trigger.AvailableNow, ``per_batch`` offsets per
    micro-batch. ``read`` is the source (``kafka``, ``akresil``, ``DRIVER_READ`` or ``NOOP``: ``records_in`` rows
    of ``value_bytes`` made in memory, not ``source``); by default the sink's own format's."""
    fmt = "kafka" if sink == "kafka" else "akresil"
    read = read or (DRIVER_READ if sink == DRIVER_READ else fmt)
    if read == NOOP:
        reader = (spark.readStream.format("akresil_bench_noop").option("records", str(records_in))
                  .option("maxOffsetsPerTrigger", str(per_batch)).option("valueBytes", str(value_bytes)))
    else:
        reader = (spark.readStream.format("kafka" if read == "kafka" else "akresil")
                  .option("kafka.bootstrap.servers", bs).option("subscribe", source)
                  .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(per_batch)))
    if read == DRIVER_READ:
        reader = reader.option("microBatchRead", "driver")
    stream = reader.load().selectExpr("key", "upper(cast(value as string)) as value")
    writer = (stream.writeStream.format("akresil_bench_noop" if sink == NOOP else fmt)
              .option("kafka.bootstrap.servers", bs).option("topic", sink_topic)
              .option("checkpointLocation", str(checkpoint)))
    if sink == "akresil_exactly_once":
        writer = writer.option("deliveryGuarantee", "exactly-once")
    query, elapsed = run_available_now(writer)
    if query.exception() is not None:
        raise RuntimeError(f"{sink} pipeline failed: {query.exception()}")
    progress = [p for p in query.recentProgress if p.numInputRows > 0]
    done = sum(p.numInputRows for p in progress)
    if done != records_in:
        raise AssertionError(f"{sink} pipeline read {done} records of {source}, expected {records_in}")
    phases: dict[str, list[float]] = {}
    for p in progress:
        for phase, ms in p.durationMs.items():
            phases.setdefault(phase, []).append(ms)
    shutil.rmtree(checkpoint, ignore_errors=True)
    return PipelineRun(elapsed, [float(p.durationMs["triggerExecution"]) for p in progress],
                       {k: statistics.median(v) for k, v in phases.items()}, tasks_per_micro_batch(spark, query),
                       phases)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=None,
                    help="rows per query (default 100 000; 1 000 000 with --apache)")
    ap.add_argument("--sizes", default="100,1024", help="value sizes in bytes, comma-separated")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--apache", action="store_true",
                    help="akresil vs Spark's format('kafka') on an Apache Kafka cluster (Java 17+, Maven)")
    ap.add_argument("--connector-version", default="4.2.0",
                    help="--apache: org.apache.spark:spark-sql-kafka-0-10_2.13 version (Maven Central)")
    ap.add_argument("--replication-factor", type=int, default=1, help="--apache: topics' replication factor")
    ap.add_argument("--master", default="standalone",
                    help="--apache: 'standalone' (start a Master and a Worker from pyspark) or a master URL")
    ap.add_argument("--cores", type=int, default=2, help="--apache standalone: the Worker's cores")
    ap.add_argument("--stream-records", type=int, default=1_000_000,
                    help="--apache: records through the streaming pipeline per run")
    ap.add_argument("--stream-batch", type=int, default=200_000, help="--apache: maxOffsetsPerTrigger of that run")
    ap.add_argument("--latency-batch", type=int, default=1000,
                    help="--apache: records per micro-batch of the latency run")
    ap.add_argument("--latency-batches", type=int, default=10, help="--apache: micro-batches per latency run")
    ap.add_argument("--phase-variants", default="",
                    help="--only phases: comma-separated SOURCE>SINK pairs to run instead of all twelve "
                         "(e.g. kafka>kafka,noop>noop,akresil>akresil)")
    ap.add_argument("--no-compile", action="store_true",
                    help="do not compile akresil to bytecode first (Spark's Python processes compile its source)")
    ap.add_argument("--only", choices=("all", "batch", "streaming", "fixed", "phases"), default="all",
                    help="--apache: run only the batch paths or only the streaming pipeline (with its fixed cost), "
                         "or only the fixed cost per query (100-row queries, with the no-op Python data source), "
                         "or only the latency pipeline's per-micro-batch phases from each source (Spark's, a "
                         "trivial in-memory Python source, akresil's task and driver read) into each sink")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds: need at least 1")
    if args.records is None:
        args.records = 1_000_000 if args.apache else 100_000
    args.bytecode = "source (--no-compile)" if args.no_compile else compile_akresil()
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
        "python": platform.python_version(), "cpus": os.cpu_count(), "akresil_bytecode": args.bytecode,
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
