"""The ``akresil`` Spark data source against a real broker through a local[2] SparkSession."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.integration.conftest_spark import (  # noqa: F401
    create_topic, produce, spark, spark_broker, spark_on, unique_topic,
)

pytestmark = [pytest.mark.broker, pytest.mark.spark]

N_ROWS = 100_000
PARTS = 4


def _reader(spark: Any, bs: str, **options: str) -> Any:
    r = spark.read.format("akresil").option("kafka.bootstrap.servers", bs)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


@pytest.fixture(scope="module")
def written(spark_broker: Any) -> tuple[str, Any]:
    """100k rows written once through Spark: partition = id % 4, key = id, value = 'v' + id."""
    import akresil.spark

    spark = spark_on("local[2]")
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


def last_summary_fields() -> tuple[str, int, str | None]:
    import akresil.spark

    summary = akresil.spark.last_write_summary()
    assert summary is not None
    return summary.status, summary.records, summary.error


def test_record_too_large_for_the_topic_fails_the_write_and_the_summary_counts_what_landed(
        spark: Any, spark_broker: Any) -> None:
    """The broker refuses one record (above the topic's max.message.bytes): the write fails naming the partition,
    the row and the error; the records it acknowledged stay, and the summary counts them."""
    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-too-large")
    create_topic(bs, topic, 1, configs={"max.message.bytes": "2000"})
    df = spark.createDataFrame([("a",), ("b" * 5000,), ("c",)], "value string").coalesce(1)
    with pytest.raises(Exception) as info:
        df.write.format("akresil").option("kafka.bootstrap.servers", bs).option("topic", topic).mode("append").save()
    text = str(info.value)
    assert f"{topic}-?: 1 failed, first rows [1], error MessageSizeTooLargeError: {topic}-0 on node" in text, text
    assert last_summary_fields()[:2] == ("aborted", 2)
    assert sorted(r.value for r in _reader(spark, bs, subscribe=topic).collect()) == [b"a", b"c"]


def test_a_row_without_topic_mid_task_fails_the_write_naming_it_and_the_summary_counts_what_landed(
        spark: Any, spark_broker: Any) -> None:
    """Row 12 of a task has a null topic (and no topic option): the task sends the Arrow batches before it and
    stops there (a retry of the task would only resend them); the write fails naming the row and the summary
    counts the 10 rows that landed."""
    import akresil.spark

    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-null-topic")
    create_topic(bs, topic, 1)
    df = spark.range(0, 20, numPartitions=1).selectExpr(
        f"case when id = 12 then null else '{topic}' end as topic", "cast(id as string) as value")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "5")
    try:
        with pytest.raises(Exception) as info:
            df.write.format("akresil").option("kafka.bootstrap.servers", bs).mode("append").save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    text = str(info.value)
    assert "bad input: row 12: topic is null" in text and "10 acknowledged, 10 not sent after the bad row" in text, \
        text
    summary = akresil.spark.last_write_summary()
    assert summary is not None
    assert (summary.status, summary.records, summary.failed, summary.tasks_failed) == ("aborted", 10, 10, 1)
    assert sorted(int(r.value) for r in _reader(spark, bs, subscribe=topic).collect()) == list(range(10))


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
    """Checked when Spark plans the write, before a row is sent: the summary of the rejected write says nothing
    landed and why (not the previous write's)."""
    bs = spark_broker.bootstrap_servers
    df = spark.createDataFrame([("k", "v")], "key string, value string")

    def w() -> Any:      # a DataFrameWriter keeps the options set on it: a fresh one per attempt
        return df.write.format("akresil").option("kafka.bootstrap.servers", bs)
    good = unique_topic("spark-before-bad")
    create_topic(bs, good, 1)
    w().option("topic", good).mode("append").save()
    assert last_summary_fields() == ("committed", 1, None)
    with pytest.raises(Exception, match="no topic: give the 'topic' option"):
        w().mode("append").save()
    status, records, error = last_summary_fields()
    assert (status, records) == ("rejected", 0) and "no topic: give the 'topic' option" in (error or "")
    with pytest.raises(Exception, match="topik: unknown option of the akresil data source"):
        w().option("topik", good).mode("append").save()
    with pytest.raises(Exception, match="column 'value' must be binary or string, got bigint"):
        (spark.range(3).selectExpr("id as value").write.format("akresil").option("kafka.bootstrap.servers", bs)
         .option("topic", good).mode("append").save())
    assert last_summary_fields()[:2] == ("rejected", 0)
    with pytest.raises(Exception, match="Kafka topics are append-only"):
        w().option("topic", "t").mode("overwrite").save()
    with pytest.raises(Exception, match="input has no 'value' column"):
        (spark.createDataFrame([("k",)], "key string").write.format("akresil").option("kafka.bootstrap.servers", bs)
         .option("topic", "t").mode("append").save())
    with pytest.raises(Exception, match="kafka.bootstrap.servers: required"):
        df.write.format("akresil").option("topic", "t").mode("append").save()
    with pytest.raises(Exception, match="startingOffsets: not an option of a write"):
        w().option("topic", "t").option("startingOffsets", "earliest").mode("append").save()


@pytest.mark.parametrize("read", ["tasks", "driver"])
def test_stream_three_micro_batches_then_resume_from_checkpoint(spark: Any, spark_broker: Any,
                                                                tmp_path: Any, read: str) -> None:
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
                  .option("maxOffsetsPerTrigger", "15").option("microBatchRead", read).load())
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


def test_task_side_clients_are_reused_by_the_next_task_and_closed_cleanly(spark_broker: Any, tmp_path: Any) -> None:
    """What Spark tasks run, called directly: a worker keeps one producer and one consumer across tasks
    (also when Spark stops reading a range early: a ``limit``), and closing the worker's clients leaves no
    thread behind."""
    import pyarrow as pa

    from akresil.spark.kafka_io import close_worker_clients, read_range, read_ranges, worker_clients
    from akresil.spark.offsets import OffsetRange
    from akresil.spark.options import parse_write_options
    from akresil.spark.writer import AkresilWriter

    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-leak")
    create_topic(bs, topic, 1)
    close_worker_clients()
    baseline = {t.ident for t in threading.enumerate()}
    writer = AkresilWriter(parse_write_options({"kafka.bootstrap.servers": bs, "topic": topic}), ("value",),
                           str(tmp_path))
    batches = [pa.record_batch([pa.array([f"v{i}" for i in range(s, s + 5000)])], names=["value"])
               for s in range(0, 25_000, 5000)]
    delivery = writer.write(iter(batches[:2]))
    assert (delivery.records, delivery.partitions) == (10_000, {f"{topic}-0": 10_000})
    producer = worker_clients().lease("producer", dict(writer.options.producer))
    worker_clients().release(producer, healthy=True)
    delivery = writer.write(iter(batches[2:]))          # the next task: same producer, no new client
    assert (delivery.records, delivery.bytes) == (15_000, sum(len(f"v{i}") for i in range(10_000, 25_000)))
    assert worker_clients().client_count() == 1

    rng = OffsetRange(topic, 0, 100, 24_000)
    read = list(read_range({"bootstrap_servers": bs}, rng, include_headers=False, fail_on_data_loss=True,
                           poll_timeout_ms=30_000, batch_rows=5000))
    offsets = [o for b in read for o in b.column("offset").to_pylist()]
    assert offsets == list(range(100, 24_000))
    assert [v.decode() for v in read[0].column("value").to_pylist()[:2]] == ["v100", "v101"]
    early = read_range({"bootstrap_servers": bs}, rng, include_headers=False, fail_on_data_loss=True,
                       poll_timeout_ms=30_000, batch_rows=1000)
    assert next(early).num_rows >= 1
    early.close()
    again = list(read_range({"bootstrap_servers": bs}, OffsetRange(topic, 0, 0, 10), include_headers=False,
                            fail_on_data_loss=True, poll_timeout_ms=30_000))
    assert [o for b in again for o in b.column("offset").to_pylist()] == list(range(10))

    # a micro-batch task packing several partitions' ranges: read in turn through the same consumer
    multi = unique_topic("spark-ranges")
    create_topic(bs, multi, 3)
    for p in range(3):
        produce(bs, multi, [(None, f"p{p}-{i}".encode()) for i in range(30)], partition=p)
    ranges = [OffsetRange(multi, 0, 0, 10), OffsetRange(multi, 1, 20, 21), OffsetRange(multi, 2, 5, 30)]
    batches = list(read_ranges({"bootstrap_servers": bs}, ranges, include_headers=False, fail_on_data_loss=True,
                               poll_timeout_ms=30_000, batch_rows=7))
    got = [(p, o, v.decode()) for b in batches
           for p, o, v in zip(*(b.column(c).to_pylist() for c in ("partition", "offset", "value")))]
    assert got == [(r.partition, o, f"p{r.partition}-{o}") for r in ranges for o in range(r.start, r.end)]
    assert [b.num_rows for b in batches] == [7, 7, 7, 7, 7, 1]   # batches filled across ranges: fewer hand-overs
    consumer = worker_clients().lease("consumer", {"bootstrap_servers": bs, "auto_offset_reset": "none"})
    assert (consumer.client.assignment(), consumer.client.paused()) == (frozenset(), frozenset())
    worker_clients().release(consumer, healthy=True)
    assert worker_clients().client_count() == 2           # one producer, one consumer, reused throughout

    close_worker_clients()
    assert worker_clients().client_count() == 0
    for _ in range(50):                                   # the loop thread ends right after close returns
        if {t.ident for t in threading.enumerate() if t.is_alive()} <= baseline | {None}:
            break
        threading.Event().wait(0.1)
    assert {t.ident for t in threading.enumerate()} <= baseline


def test_a_write_task_fetches_its_topics_metadata_while_it_waits_for_input(spark_broker: Any, tmp_path: Any) -> None:
    """A write task starts before Spark has computed its input: with the ``topic`` option, the worker's producer
    learns the topic's partitions during that wait, not when the first rows arrive (a round trip less after
    them), and the rows still all land."""
    import pyarrow as pa

    from akresil.spark.kafka_io import close_worker_clients, worker_clients
    from akresil.spark.options import parse_write_options
    from akresil.spark.writer import AkresilWriter

    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-ahead")
    writer = AkresilWriter(parse_write_options({"kafka.bootstrap.servers": bs, "topic": topic}), ("key", "value"),
                           str(tmp_path))
    close_worker_clients()
    # the worker's cached producer, started by an earlier task before the topic existed: the topic is new to it
    worker_clients().release(worker_clients().lease("producer", dict(writer.options.producer)), healthy=True)
    create_topic(bs, topic, 3)
    known_before_input: list[bool] = []

    def spark_input() -> Any:           # Spark still computing the task's input: the task waits here
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            producers = [e.client for es in worker_clients()._clients.values() for e in es]
            if any(p.partitions_for(topic) for p in producers):
                break
            time.sleep(0.01)
        known_before_input.append(any(p.partitions_for(topic) for es in worker_clients()._clients.values()
                                      for p in (e.client for e in es)))
        yield pa.record_batch([pa.array([f"k{i}" for i in range(30)]), pa.array([f"v{i}" for i in range(30)])],
                              names=["key", "value"])

    delivery = writer.write(spark_input())
    assert known_before_input == [True]
    assert delivery.records == 30 and sum(delivery.partitions.values()) == 30
    close_worker_clients()


def _produce_at(bs: str, topic: str, partition: int, values: list[bytes], timestamp_ms: int) -> list[int]:
    import anyio

    from akresil import Producer

    async def main() -> list[int]:
        async with Producer(bootstrap_servers=bs) as producer:
            mds = await producer.send_many(topic, [(None, v) for v in values], partition=partition,
                                           timestamp_ms=timestamp_ms)
        return [md.offset for md in mds]
    return anyio.run(main)


#: an hour ago: noida-db answers ListOffsets by timestamp with -1 for 1970 timestamps once it flushed the log
T0 = (int(time.time()) - 3600) * 1000


@pytest.fixture(scope="module")
def timed(spark_broker: Any) -> str:
    """Two partitions; records at T0 + 1000, 2000, 3000 (5 each, values 'p<part>-t<ts>-<i>')."""
    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-times")
    create_topic(bs, topic, 2)
    for ts in (1000, 2000, 3000):
        for p in (0, 1):
            _produce_at(bs, topic, p, [f"p{p}-t{ts}-{i}".encode() for i in range(5)], T0 + ts)
    return topic


def test_batch_read_by_timestamps(spark: Any, spark_broker: Any, timed: str) -> None:
    bs, topic = spark_broker.bootstrap_servers, timed

    def read(**options: str) -> list[tuple[int, int, int]]:
        rows = _reader(spark, bs, subscribe=topic, **options).select("partition", "offset", "timestamp").collect()
        return sorted((r.partition, r.offset, round(r.timestamp.timestamp() * 1000) - T0) for r in rows)

    # [first ts >= T0+1500, first ts >= T0+3000)
    got = read(startingTimestamp=str(T0 + 1500), endingTimestamp=str(T0 + 3000))
    assert got == [(p, o, 2000) for p in (0, 1) for o in range(5, 10)]
    got = read(startingOffsetsByTimestamp='{"%s": {"0": %d, "1": 0}}' % (topic, T0 + 2500),
               endingOffsetsByTimestamp='{"%s": {"0": %d, "1": %d}}' % (topic, T0 + 9999, T0 + 1001))
    # partition 0 from T0+3000 to the end (no record at T0+9999: latest); partition 1 [0, first ts > T0+1000)
    assert got == [(0, o, 3000) for o in range(10, 15)] + [(1, o, 1000) for o in range(0, 5)]
    with pytest.raises(Exception, match=f"startingTimestamp: no record of .* has a timestamp at or after {T0 + 4000}"):
        read(startingTimestamp=str(T0 + 4000))
    assert read(startingTimestamp=str(T0 + 4000), startingOffsetsByTimestampStrategy="latest") == []


def test_stream_from_a_timestamp(spark: Any, spark_broker: Any, timed: str, tmp_path: Any) -> None:
    bs, topic = spark_broker.bootstrap_servers, timed
    stream = (spark.readStream.format("akresil").option("kafka.bootstrap.servers", bs).option("subscribe", topic)
              .option("startingTimestamp", str(T0 + 2000)).load())
    query = (stream.selectExpr("partition", "offset").writeStream.format("memory").queryName("from_ts")
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    got = sorted((r.partition, r.offset) for r in spark.sql("select * from from_ts").collect())
    assert got == [(p, o) for p in (0, 1) for o in range(5, 15)]


def test_stream_min_offsets_per_trigger_waits_then_max_trigger_delay_fires(spark: Any, spark_broker: Any,
                                                                          tmp_path: Any) -> None:
    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-min")
    create_topic(bs, topic, 1)
    batches: list[list[int]] = []
    lock = threading.Lock()

    def collect(batch_df: Any, batch_id: int) -> None:
        offsets = sorted(r.offset for r in batch_df.select("offset").collect())
        if offsets:
            with lock:
                batches.append(offsets)

    def start(delay: str) -> Any:
        stream = (spark.readStream.format("akresil").option("kafka.bootstrap.servers", bs)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("minOffsetsPerTrigger", "20").option("maxTriggerDelay", delay).load())
        return (stream.writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(processingTime="100 milliseconds").start())

    def wait_for(n: int) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if sum(len(b) for b in batches) >= n:
                    return
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {n} rows; batches {batches}")

    query = start("60s")
    try:
        query.processAllAvailable()                       # the first trigger ran (it starts the delay clock)
        produce(bs, topic, [(None, b"x")] * 5)
        time.sleep(1.5)                                   # ~15 triggers, each with 5 < 20 new offsets
        with lock:
            assert batches == []
        produce(bs, topic, [(None, b"y")] * 20)
        wait_for(25)
        # the batch ran; let Spark write its commit before stopping, or the restart re-runs it (foreachBatch is
        # at-least-once across a stop between the batch and its commit)
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert batches == [list(range(25))]                   # the 5 waited and went with the next 20

    query = start("1s")                                   # resumes from the checkpoint with a short delay
    try:
        produce(bs, topic, [(None, b"z")] * 3)
        wait_for(28)                                      # fewer than 20, sent once maxTriggerDelay passed
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert batches == [list(range(25)), [25, 26, 27]]


def test_stream_survives_leader_moves_a_stopped_node_and_throttles(spark: Any, spark_broker: Any,
                                                                   tmp_path: Any) -> None:
    """A micro-batch query reads through a three-node FaultProxy while the script moves every leader,
    throttles every node (KIP-219), stops the node leading partitions (after moving them away) and the
    query itself restarts from its checkpoint: the output holds every produced record exactly once."""
    from akresil.testing import FaultProxy

    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-fault")
    create_topic(bs, topic, 3)
    seen: list[tuple[int, int, bytes]] = []
    lock = threading.Lock()
    produced: dict[tuple[int, int], bytes] = {}

    def collect(batch_df: Any, batch_id: int) -> None:
        rows = [(r.partition, r.offset, r.value) for r in batch_df.select("partition", "offset", "value").collect()]
        with lock:
            seen.extend(rows)

    def send(wave: str, n: int = 300) -> None:
        recs = [(f"k{i}".encode(), f"{wave}-{i}".encode()) for i in range(n)]
        for (p, o), (_, v) in zip(produce(bs, topic, recs), recs):    # straight to the broker, not the proxy
            produced[(p, o)] = v

    def wait_all(what: str) -> None:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            with lock:
                if len(seen) >= len(produced):
                    return
            time.sleep(0.1)
        raise AssertionError(f"{what}: {len(seen)} of {len(produced)} records after 45 s")

    with FaultProxy(bs, nodes=3) as proxy:
        def start(**trigger: Any) -> Any:
            stream = (spark.readStream.format("akresil").option("kafka.bootstrap.servers", proxy.bootstrap_servers)
                      .option("subscribe", topic).option("startingOffsets", "earliest")
                      .option("maxOffsetsPerTrigger", "250").option("groupIdPrefix", "fault-etl")
                      .option("kafka.retry.backoff.ms", "50").option("kafka.retry.backoff.max.ms", "500")
                      .option("kafka.reconnect.backoff.max.ms", "500").option("kafka.metadata.max.age.ms", "2000")
                      .load())
            return (stream.writeStream.foreachBatch(collect)
                    .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(**trigger).start())

        query = start(processingTime="200 milliseconds")
        try:
            send("a")
            wait_all("before any fault")
            proxy.move_all_leaders()                                   # every leader rotates to the next node
            send("b")
            wait_all("after the leader moves")
            for node in proxy.node_ids:
                proxy.throttle_window(node, 1500)                      # KIP-219: every node throttles 1.5 s
            send("c")
            wait_all("under throttles")
            victim = proxy.leader(topic, 0)[0]
            proxy.move_all_leaders(from_node=victim)                   # fail over, then take the node down
            proxy.stop_node(victim)
            send("d")
            wait_all(f"with node {victim} stopped")
            proxy.start_node(victim)
            # let the last batch's commit land before the stop (a stop between a batch and its commit makes the
            # restart run that batch again: foreachBatch is at-least-once across a stop)
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None
        send("e")                                                      # while the query is down
        query = start(availableNow=True)
        try:
            query.awaitTermination(60)
        finally:
            query.stop()
        assert query.exception() is None
        throttled = [r for r in proxy.responses() if getattr(r, "throttle_time_ms", 0)]
        client_ids = {r.client_id for r in proxy.requests() if r.client_id}

    assert len(seen) == len(set((p, o) for p, o, _ in seen)) == len(produced) == 1500   # no duplicates, no loss
    assert {(p, o): v for p, o, v in seen} == produced
    assert throttled, "the script's throttles never reached the source's clients"
    assert any(c.startswith("fault-etl-") and c.endswith("-executor") for c in client_ids), client_ids
    assert any(c.startswith("fault-etl-") and c.endswith("-driver") for c in client_ids), client_ids


def test_write_through_throttles_and_leader_moves_reports_them_in_the_summary(spark: Any, spark_broker: Any) -> None:
    """KIP-219 throttles and leader moves during a Spark write: every row lands once, and the summary says
    what the producers went through (throttled responses, retries)."""
    import akresil.spark
    from akresil.testing import FaultProxy

    bs = spark_broker.bootstrap_servers
    topic = unique_topic("spark-wfault")
    create_topic(bs, topic, 3)
    n = 20_000
    with FaultProxy(bs, nodes=3) as proxy:
        for node in proxy.node_ids:
            proxy.throttle(node, 300, count=8)                  # the next 8 answers of every node throttle
        df = spark.range(0, n, numPartitions=2).selectExpr("cast(id as string) as key", "cast(id as string) as value")
        moved = threading.Timer(0.5, proxy.move_all_leaders)
        moved.start()
        try:
            (df.write.format("akresil").option("kafka.bootstrap.servers", proxy.bootstrap_servers)
             .option("topic", topic).option("kafka.linger.ms", "5").mode("append").save())
        finally:
            moved.cancel()
    summary = akresil.spark.last_write_summary()
    assert summary is not None and summary.status == "committed" and summary.records == n
    assert summary.throttled >= 1 and summary.throttle_ms > 0, summary
    rows = _reader(spark, bs, subscribe=topic).selectExpr("cast(key as string) k").collect()
    assert sorted(int(r.k) for r in rows) == list(range(n))   # each row once (idempotent retries)
