"""The ``akresil`` Spark data source against a real broker through a local[2] SparkSession."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.integration.conftest_spark import create_topic, produce, spark, spark_broker, unique_topic  # noqa: F401

pytestmark = [pytest.mark.broker, pytest.mark.spark]

N_ROWS = 100_000
PARTS = 4


def _reader(spark: Any, bs: str, **options: str) -> Any:
    r = spark.read.format("akresil").option("kafka.bootstrap.servers", bs)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


@pytest.fixture(scope="module")
def written(spark: Any, spark_broker: Any) -> tuple[str, Any]:
    """100k rows written once through Spark: partition = id % 4, key = id, value = 'v' + id."""
    import akresil.spark

    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-100k")
    create_topic(bs, topic, PARTS)
    df = spark.range(0, N_ROWS, numPartitions=2).selectExpr(
        "cast(id as string) as key", "concat('v', cast(id as string)) as value", f"cast(id % {PARTS} as int) as partition")
    (df.write.format("akresil").option("kafka.bootstrap.servers", bs).option("topic", topic)
     .mode("append").save())
    return topic, akresil.spark.last_write_summary()


def test_write_100k_rows_and_read_them_back_exactly_once(spark: Any, spark_broker: Any,
                                                          written: tuple[str, Any]) -> None:
    topic, summary = written
    bs = spark_broker.bootstrap_servers
    assert summary is not None and summary.status == "committed"
    assert summary.records == N_ROWS and summary.tasks_delivered == 2 and summary.tasks_failed == 0
    assert summary.partitions == {f"{topic}-{p}": N_ROWS // PARTS for p in range(PARTS)}
    assert summary.bytes == sum(len(str(i)) * 2 + 1 for i in range(N_ROWS))

    df = _reader(spark, bs, subscribe=topic)
    assert df.rdd.getNumPartitions() == PARTS  # one Spark partition per Kafka partition
    df.createOrReplaceTempView("written")
    per_partition = spark.sql("""
        select partition, count(*) n, min(offset) lo, max(offset) hi, count(distinct offset) d,
               sum(case when cast(cast(key as string) as bigint) % 4 != partition then 1 else 0 end) misplaced,
               sum(case when cast(value as string) != concat('v', cast(key as string)) then 1 else 0 end) bad,
               min(topic) t, max(timestampType) tt
        from written group by partition order by partition""").collect()
    assert [r.partition for r in per_partition] == list(range(PARTS))
    for r in per_partition:
        # dense offsets 0..n-1: nothing lost, nothing duplicated
        assert (r.n, r.lo, r.hi, r.d) == (N_ROWS // PARTS, 0, N_ROWS // PARTS - 1, N_ROWS // PARTS)
        assert r.misplaced == 0 and r.bad == 0 and r.t == topic and r.tt == 0
    assert spark.sql("select count(distinct key) from written").first()[0] == N_ROWS
    # each task's rows keep their order within a partition
    disorder = spark.sql("""
        select count(*) from (
          select k, lag(k) over (partition by partition, k < 50000 order by offset) prev
          from (select partition, offset, cast(cast(key as string) as bigint) k from written))
        where prev is not null and k < prev""").first()[0]
    assert disorder == 0


def test_batch_read_exact_ranges_split_and_headers(spark: Any, spark_broker: Any,
                                                   written: tuple[str, Any]) -> None:
    topic, _ = written
    bs = spark_broker.bootstrap_servers
    starting = '{"%s": {"0": 10, "1": -2, "2": 0, "3": 24990}}' % topic
    ending = '{"%s": {"0": 20, "1": 5, "2": -1, "3": -1}}' % topic
    df = _reader(spark, bs, subscribe=topic, startingOffsets=starting, endingOffsets=ending, minPartitions="8")
    assert df.rdd.getNumPartitions() >= 8  # the big range of partition 2 was split
    got = {(r.partition, r.offset) for r in df.select("partition", "offset").collect()}
    expected = ({(0, o) for o in range(10, 20)} | {(1, o) for o in range(0, 5)}
                | {(2, o) for o in range(0, N_ROWS // PARTS)} | {(3, o) for o in range(24990, N_ROWS // PARTS)})
    assert got == expected
    assigned = _reader(spark, bs, assign='{"%s": [1]}' % topic, endingOffsets='{"%s": {"1": 3}}' % topic)
    rows = assigned.collect()
    assert [(r.partition, r.offset) for r in rows] == [(1, 0), (1, 1), (1, 2)]
    assert all(int(r.key) % PARTS == 1 and r.value == b"v" + r.key for r in rows)


def test_headers_round_trip(spark: Any, spark_broker: Any) -> None:
    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-headers")
    create_topic(bs, topic, 1)
    df = spark.createDataFrame(
        [(b"k1", "v1", [("h", b"x"), ("h2", None)]), (None, "v2", [])],
        "key binary, value string, headers array<struct<key:string,value:binary>>").coalesce(1)  # one task: row order
    df.write.format("akresil").option("kafka.bootstrap.servers", bs).option("topic", topic).mode("append").save()
    rows = _reader(spark, bs, subscribe=topic, includeHeaders="true").orderBy("offset").collect()
    assert [(r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in rows] == [
        (b"k1", b"v1", [("h", b"x"), ("h2", None)]), (None, b"v2", [])]
    plain = _reader(spark, bs, subscribe=topic)
    assert "headers" not in plain.columns


def test_failed_write_names_partition_and_rows_and_aborts(spark: Any, spark_broker: Any) -> None:
    import akresil.spark

    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-fail")
    create_topic(bs, topic, 1)
    df = spark.createDataFrame([("a", 0), ("b", 7), ("c", 0)], "value string, partition int").coalesce(1)
    with pytest.raises(Exception) as info:
        (df.write.format("akresil").option("kafka.bootstrap.servers", bs).option("topic", topic)
         .option("kafka.delivery.timeout.ms", "3000").option("kafka.request.timeout.ms", "1000")
         .option("kafka.max.block.ms", "3000").option("kafka.linger.ms", "0").mode("append").save())
    text = str(info.value)
    assert f"{topic}-7: 1 failed, first rows [1]" in text, text
    summary = akresil.spark.last_write_summary()
    assert summary is not None and summary.status == "aborted" and summary.tasks_delivered == 0


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "t", "startingoffset": "earliest"}, "startingoffset: unknown option"),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "exactly one of subscribe, subscribePattern, assign"),
    ({"subscribe": "t", "startingOffsets": "{bad"}, "startingOffsets: not valid JSON"),
    ({"subscribe": "t", "startingOffsets": "latest"}, "'latest' is not allowed for a batch read"),
    ({"subscribe": "t", "kafka.group.id": "g"}, "kafka.group.id: not supported"),
    ({"subscribe": "t", "kafka.fetch.max.wait.ms": "soon"}, "kafka.fetch.max.wait.ms: expected an integer"),
    ({"subscribe": "t", "kafka.no.such.thing": "1"}, "kafka.no.such.thing: unknown Kafka client setting"),
    ({"subscribe": "t", "minPartitions": "0"}, "minPartitions: must be >= 1"),
    ({"subscribe": "t", "maxOffsetsPerTrigger": "5"}, "maxOffsetsPerTrigger: only for streaming reads"),
])
def test_bad_read_options_fail_with_the_option_named(spark: Any, spark_broker: Any, options: dict[str, str],
                                                     message: str) -> None:
    with pytest.raises(Exception, match=message):
        _reader(spark, spark_broker.bootstrap_servers, **options).collect()


def test_bad_write_input_fails_with_the_problem_named(spark: Any, spark_broker: Any) -> None:
    bs = spark_broker.bootstrap_servers
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    w = df.write.format("akresil").option("kafka.bootstrap.servers", bs)
    with pytest.raises(Exception, match="no topic: give the 'topic' option"):
        w.mode("append").save()
    with pytest.raises(Exception, match="Kafka topics are append-only"):
        w.option("topic", "t").mode("overwrite").save()
    with pytest.raises(Exception, match="input has no 'value' column"):
        (spark.createDataFrame([("k",)], "key string").write.format("akresil").option("kafka.bootstrap.servers", bs)
         .option("topic", "t").mode("append").save())
    with pytest.raises(Exception, match="kafka.bootstrap.servers: required"):
        df.write.format("akresil").option("topic", "t").mode("append").save()
    with pytest.raises(Exception, match="startingOffsets: not an option of a write"):
        w.option("topic", "t").option("startingOffsets", "earliest").mode("append").save()


def test_stream_three_micro_batches_then_resume_from_checkpoint(spark: Any, spark_broker: Any,
                                                                tmp_path: Any) -> None:
    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-stream")
    create_topic(bs, topic, 2)
    seen: list[tuple[int, list[tuple[int, int, bytes]]]] = []
    lock = threading.Lock()

    def collect(batch_df: Any, batch_id: int) -> None:
        rows = [(r.partition, r.offset, r.value) for r in batch_df.select("partition", "offset", "value").collect()]
        with lock:
            seen.append((batch_id, rows))

    def start(**trigger: Any) -> Any:
        stream = (spark.readStream.format("akresil").option("kafka.bootstrap.servers", bs)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "15").load())
        return (stream.writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(**trigger).start())

    def values(prefix: str, n: int) -> list[tuple[None, bytes]]:
        return [(None, f"{prefix}{i}".encode()) for i in range(n)]

    produced: dict[tuple[int, int], bytes] = {}

    def send(prefix: str, n: int, partition: int | None = None) -> set[bytes]:
        recs = values(prefix, n)
        for (p, o), (_, v) in zip(produce(bs, topic, recs, partition), recs):
            produced[(p, o)] = v
        return {v for _, v in recs}

    query = start(processingTime="200 milliseconds")
    try:
        batches_with_data: list[set[bytes]] = []
        for i, prefix in enumerate(("a", "b", "c")):
            # one produce batch (atomic append), <= maxOffsetsPerTrigger: exactly one micro-batch each
            expected = send(prefix, 10, partition=i % 2)
            query.processAllAvailable()
            with lock:
                got = {v for _, rows in seen for _, _, v in rows}
                batches_with_data = [{v for _, _, v in rows} for _, rows in seen if rows]
            assert expected <= got
            assert batches_with_data[-1] == expected
        assert len(batches_with_data) == 3
    finally:
        query.stop()
    assert query.exception() is None

    # produced while the query is down: the restarted query reads exactly these, 15 offsets per batch
    expected_d = send("d", 40)
    before = len(seen)
    query = start(availableNow=True)
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    assert query.exception() is None
    resumed = [rows for _, rows in seen[before:] if rows]
    assert {v for rows in resumed for _, _, v in rows} == expected_d
    assert [len(rows) for rows in resumed] == [15, 15, 10]
    everything = [(p, o) for _, rows in seen for p, o, _ in rows]
    assert len(everything) == len(set(everything)) == len(produced)       # no duplicates, no loss
    assert {(p, o): v for _, rows in seen for p, o, v in rows} == produced


def test_example_pipeline_aggregates_into_another_topic(spark: Any, spark_broker: Any) -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"
    spec = importlib.util.spec_from_file_location("spark_pipeline_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    bs = spark_broker.bootstrap_servers
    source, sink = unique_topic("orders"), unique_topic("totals")
    create_topic(bs, source, 3)
    create_topic(bs, sink, 1)
    orders = example.sample_orders(300)
    produce(bs, source, orders)
    summary = example.run_pipeline(spark, bs, source, sink)

    import orjson
    expected: dict[str, tuple[int, float]] = {}
    for _, value in orders:
        o = orjson.loads(value)
        n, total = expected.get(o["customer"], (0, 0.0))
        expected[o["customer"]] = (n + 1, total + o["amount"])
    assert summary.status == "committed" and summary.records == len(expected)
    got = {r.key: orjson.loads(r.value) for r in _reader(spark, bs, subscribe=sink).collect()}
    assert set(got) == {c.encode() for c in expected}
    for customer, (n, total) in expected.items():
        assert got[customer.encode()]["orders"] == n
        assert got[customer.encode()]["total"] == pytest.approx(round(total, 2), abs=0.011)


def test_task_side_clients_leave_nothing_behind(spark_broker: Any, tmp_path: Any) -> None:
    """What a Spark task runs, called directly: every thread and client is gone when the call returns,
    including when Spark stops reading a range early (a ``limit``)."""
    import pyarrow as pa

    from akresil.spark.kafka_io import read_range
    from akresil.spark.offsets import OffsetRange
    from akresil.spark.options import parse_write_options
    from akresil.spark.writer import AkresilWriter

    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-leak")
    create_topic(bs, topic, 1)
    baseline = {t.ident for t in threading.enumerate()}
    writer = AkresilWriter(parse_write_options({"kafka.bootstrap.servers": bs, "topic": topic}), ("value",),
                           str(tmp_path))
    batches = [pa.record_batch([pa.array([f"v{i}" for i in range(s, s + 5000)])], names=["value"])
               for s in range(0, 25_000, 5000)]
    delivery = writer.write(iter(batches))
    assert (delivery.records, delivery.partitions) == (25_000, {f"{topic}-0": 25_000})
    assert {t.ident for t in threading.enumerate()} == baseline

    rng = OffsetRange(topic, 0, 100, 24_000)
    read = list(read_range({"bootstrap_servers": bs}, rng, include_headers=False, fail_on_data_loss=True,
                           poll_timeout_ms=30_000, batch_rows=5000))
    offsets = [o for b in read for o in b.column("offset").to_pylist()]
    assert offsets == list(range(100, 24_000))
    assert {t.ident for t in threading.enumerate()} == baseline

    early = read_range({"bootstrap_servers": bs}, rng, include_headers=False, fail_on_data_loss=True,
                       poll_timeout_ms=30_000, batch_rows=1000)
    assert next(early).num_rows >= 1
    early.close()
    assert {t.ident for t in threading.enumerate()} == baseline
