"""The streaming sink ``writeStream.format("akresil")`` on local[2] against noida-db: Spark's Kafka sink contract
(topic option or column, key/value/headers/partition columns), the per-micro-batch summaries, and bad input: the
query fails with an error naming the option or column, and the summaries say how many rows landed.

Exactly-once writes need Kafka transactions: they are tested on Apache Kafka (tests/apache/test_spark_cluster.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from akresil import Consumer, TopicPartition
from tests.integration.conftest_spark import create_topic, produce, spark, spark_broker, unique_topic  # noqa: F401

pytestmark = [pytest.mark.broker, pytest.mark.spark]


def _source(spark: Any, bs: str, topic: str, *columns: str) -> Any:
    return (spark.readStream.format("akresil").option("kafka.bootstrap.servers", bs).option("subscribe", topic)
            .option("startingOffsets", "earliest").load().selectExpr(*columns))


def _run(stream: Any, bs: str, checkpoint: Path, **options: str) -> Any:
    """Write ``stream`` with Trigger.AvailableNow; returns the ended query (its exception, if any, unraised)."""
    writer = stream.writeStream.format("akresil").option("kafka.bootstrap.servers", bs)
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    try:
        query.awaitTermination(120)
    except Exception:  # noqa: BLE001 - the test reads query.exception()
        pass
    finally:
        query.stop()
    return query


def _read(bs: str, topic: str, partitions: int) -> list[Any]:
    async def main() -> list[Any]:
        async with Consumer(bootstrap_servers=bs, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            out: list[Any] = []
            while True:
                got = await consumer.getmany(timeout_ms=1500)
                if not got:
                    return sorted(out, key=lambda r: (r.partition, r.offset))
                for records in got.values():
                    out.extend(records)
    return anyio.run(main)


@pytest.fixture
def source(spark_broker: Any) -> str:
    """A 1-partition topic holding 20 records: key k<i>, value v<i>."""
    bs = spark_broker.bootstrap_servers
    topic = unique_topic("sink-src")
    create_topic(bs, topic, 1)
    produce(bs, topic, [(b"k%d" % i, b"v%d" % i) for i in range(20)])
    return topic


def test_stream_sink_follows_the_kafka_sink_contract(spark: Any, spark_broker: Any, source: str,  # noqa: F811
                                                      tmp_path: Path) -> None:
    """Topic and partition from columns, headers and keys carried over, value as string: each micro-batch's
    summary counts its records per partition."""
    import akresil.spark
    bs = spark_broker.bootstrap_servers
    even, odd = unique_topic("sink-even"), unique_topic("sink-odd")
    create_topic(bs, even, 2)
    create_topic(bs, odd, 1)
    stream = _source(spark, bs, source,
                     f"case when offset % 2 = 0 then '{even}' else '{odd}' end as topic",
                     "case when offset % 2 = 0 then cast(offset % 4 / 2 as int) else 0 end as partition",
                     "key", "upper(cast(value as string)) as value",
                     "array(named_struct('key', 'offset', 'value', cast(cast(offset as string) as binary))) as headers")
    query = _run(stream.repartition(1), bs, tmp_path / "ckpt")
    assert query.exception() is None, query.exception()
    [summary] = akresil.spark.stream_write_summaries(query.id)
    assert (summary.status, summary.batch_id, summary.records, summary.query_id) == ("committed", 0, 20, query.id)
    assert summary.partitions == {f"{even}-0": 5, f"{even}-1": 5, f"{odd}-0": 10}
    got = [(r.topic, r.partition, r.key, r.value, r.headers) for r in _read(bs, even, 2) + _read(bs, odd, 1)]
    assert sorted(got) == sorted(
        (even if i % 2 == 0 else odd, (i % 4) // 2 if i % 2 == 0 else 0, b"k%d" % i, b"V%d" % i,
         [("offset", str(i).encode())]) for i in range(20))


@pytest.mark.parametrize(("columns", "options", "message"), [
    (("key", "value"), {"topic": "T", "kafka.linger": "5"}, "kafka.linger: unknown Kafka client setting"),
    (("key", "value"), {}, "no topic: give the 'topic' option or a 'topic' column"),
    (("key", "offset as value"), {"topic": "T"}, "column 'value' must be binary or string, got bigint"),
])
def test_bad_stream_sink_input_fails_the_query_naming_it(spark: Any, spark_broker: Any, source: str,  # noqa: F811
                                                         tmp_path: Path, columns: tuple[str, ...],
                                                         options: dict[str, str], message: str) -> None:
    """Checked when Spark creates the writer, before a row is sent: no micro-batch summary; the program's last
    summary is the rejected writer's (nothing landed, the error), not an earlier write's."""
    import akresil.spark
    bs = spark_broker.bootstrap_servers
    query = _run(_source(spark, bs, source, *columns), bs, tmp_path / "ckpt", **options)
    assert query.exception() is not None and message in str(query.exception()), query.exception()
    assert akresil.spark.stream_write_summaries(query.id) == []
    last = akresil.spark.last_write_summary()
    assert last is not None and (last.status, last.records) == ("rejected", 0) and message in (last.error or "")


@pytest.mark.parametrize("refusal", ["no such partition", "too large for the topic"])
def test_stream_sink_refused_records_fail_the_query_and_the_summary_counts_what_landed(
        spark: Any, spark_broker: Any, source: str, tmp_path: Path, refusal: str) -> None:  # noqa: F811
    """At least once: record 7 goes to a partition the topic lacks, or is larger than the topic's
    max.message.bytes (the broker refuses it). The micro-batch fails naming the partition, the row and the error;
    the 19 records acknowledged stay in Kafka, and the summary says so."""
    import akresil.spark
    bs = spark_broker.bootstrap_servers
    sink = unique_topic("sink-refused")
    if refusal == "no such partition":
        create_topic(bs, sink, 1)
        stream = _source(spark, bs, source, "key", "value", "case when offset = 7 then 5 else 0 end as partition")
        failed, error = f"{sink}-5", "ValueError: partition 5 given for topic"   # refused by the client
    else:
        create_topic(bs, sink, 1, configs={"max.message.bytes": "2000"})
        stream = _source(spark, bs, source, "key",
                         "case when offset = 7 then repeat('x', 5000) else cast(value as string) end as value")
        # refused by the broker; the row has a key, so the sink placed it (the topic's only partition)
        failed, error = f"{sink}-0", "MessageSizeTooLargeError"
    query = _run(stream, bs, tmp_path / "ckpt", topic=sink, **{"kafka.max.block.ms": "2000",
                                                              "kafka.delivery.timeout.ms": "3000",
                                                              "kafka.request.timeout.ms": "1000"})
    text = str(query.exception())
    assert f"{failed}: 1 failed, first rows [7], error {error}" in text and "19 acknowledged" in text, text
    [summary] = akresil.spark.stream_write_summaries(query.id)
    assert (summary.status, summary.records, summary.failed, summary.tasks_failed) == ("aborted", 19, 1, 1)
    assert summary.partitions == {f"{sink}-0": 19} and f"{failed}: 1 failed" in (summary.error or "")
    assert sorted(r.value for r in _read(bs, sink, 1)) == sorted(b"v%d" % i for i in range(20) if i != 7)


def test_stream_sink_row_without_topic_fails_the_micro_batch_and_the_summary_counts_what_landed(
        spark: Any, spark_broker: Any, source: str, tmp_path: Path) -> None:  # noqa: F811
    """Row 12 of the micro-batch's one task has a null topic (no topic option): the Arrow batches before it land,
    the micro-batch fails naming the row, and its summary counts the 10 rows that landed."""
    import akresil.spark
    bs = spark_broker.bootstrap_servers
    sink = unique_topic("sink-null-topic")
    create_topic(bs, sink, 1)
    stream = _source(spark, bs, source, f"case when offset = 12 then null else '{sink}' end as topic", "key", "value")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "5")
    try:
        query = _run(stream, bs, tmp_path / "ckpt")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    text = str(query.exception())
    assert "bad input: row 12: topic is null" in text and "10 acknowledged, 10 not sent after the bad row" in text, \
        text
    [summary] = akresil.spark.stream_write_summaries(query.id)
    assert (summary.status, summary.records, summary.failed, summary.tasks_failed) == ("aborted", 10, 10, 1)
    assert sorted(r.value for r in _read(bs, sink, 1)) == sorted(b"v%d" % i for i in range(10))
