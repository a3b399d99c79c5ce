"""Pure logic of the Spark source (options, offset planning, row grouping): no Spark session, no broker.

Kept next to the Spark integration tests because only ``tests/integration/test_spark_*`` is this
component's; nothing here does I/O.
"""

from __future__ import annotations

import pytest

from akresil.errors import ConfigError
from akresil.spark.offsets import (
    DataLossError, OffsetRange, check_starts, from_json, pack_ranges, plan_ranges, rate_limit, resolve_spec,
    split_ranges, to_json,
)
from akresil.spark.options import EARLIEST, LATEST, OffsetSpec, parse_read_options, parse_write_options
from akresil.types import TopicPartition as TP

BS = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


# ---------------------------------------------------------------------- options
def test_read_options_defaults_follow_spark_batch_and_streaming() -> None:
    batch = parse_read_options({**BS, "subscribe": "a, b"}, streaming=False)
    assert batch.subscription.topics == ("a", "b")
    assert batch.starting == OffsetSpec(EARLIEST) and batch.ending == OffsetSpec(LATEST)
    assert batch.fail_on_data_loss and not batch.include_headers and batch.poll_timeout_ms == 120_000
    stream = parse_read_options({**BS, "subscribePattern": "t-.*", "maxOffsetsPerTrigger": "100"}, streaming=True)
    assert stream.starting == OffsetSpec(LATEST) and stream.max_offsets_per_trigger == 100
    assert stream.subscription.pattern == "t-.*"


def test_option_names_are_case_insensitive_and_kafka_options_become_client_config() -> None:
    o = parse_read_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SUBSCRIBE": "t", "kafka.fetch.max.wait.ms": "50",
                            "kafka.check.crcs": "false", "kafka.linger.ms": "3", "IncludeHeaders": "TRUE"},
                           streaming=False)
    # linger.ms is a producer setting: skipped on the read side, not an error
    assert o.consumer == {"bootstrap_servers": "h:1", "fetch_max_wait_ms": 50, "check_crcs": False}
    assert o.include_headers
    w = parse_write_options({**BS, "topic": "out", "kafka.linger.ms": "3", "kafka.acks": "all"})
    assert w.topic == "out" and w.producer == {"bootstrap_servers": "127.0.0.1:9092", "linger_ms": 3, "acks": "all"}


def test_timestamp_and_trigger_options_parse_with_sparks_precedence() -> None:
    o = parse_read_options({**BS, "subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"0": 1000, "1": 2000}}',
                            "startingOffsets": "earliest", "endingTimestamp": "5000",
                            "endingOffsetsByTimestamp": '{"t": {"0": 1}}',
                            "startingOffsetsByTimestampStrategy": "LATEST"}, streaming=False)
    assert o.starting.by_time and o.starting.timestamps == {TP("t", 0): 1000, TP("t", 1): 2000}
    assert o.starting.name == "startingOffsetsByTimestamp"
    assert o.ending.timestamp == 5000 and o.ending.name == "endingTimestamp"   # endingTimestamp wins
    assert o.timestamp_strategy == "latest"
    s = parse_read_options({**BS, "subscribe": "t", "startingTimestamp": "7", "minOffsetsPerTrigger": "10",
                            "maxTriggerDelay": "30s", "groupIdPrefix": "orders-etl"}, streaming=True)
    assert s.starting.timestamp == 7 and s.min_offsets_per_trigger == 10 and s.max_trigger_delay_ms == 30_000
    assert s.group_id_prefix == "orders-etl"
    assert parse_read_options({**BS, "subscribe": "t", "minOffsetsPerTrigger": "1"},
                              streaming=True).max_trigger_delay_ms == 15 * 60 * 1000
    w = parse_write_options({**BS, "topic": "o", "kafka.compression.type": "gzip", "kafka.batch.size": "65536",
                             "kafka.max.in.flight.requests.per.connection": "5", "kafka.enable.idempotence": "true"})
    assert w.producer == {"bootstrap_servers": "127.0.0.1:9092", "compression_type": "gzip", "batch_size": 65536,
                          "max_in_flight_requests_per_connection": 5, "enable_idempotence": True}
    with pytest.raises(ConfigError, match="kafka.transactional.id: Java client setting not supported"):
        parse_write_options({**BS, "topic": "o", "kafka.transactional.id": "x"})


def test_timestamp_specs_resolve_through_listoffsets_answers() -> None:
    from akresil.spark.offsets import resolve_times, timestamp_queries

    spec = parse_read_options({**BS, "subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"0": 10, "1": 20}}'},
                              streaming=False).starting
    parts = [TP("t", 0), TP("t", 1)]
    q = timestamp_queries(spec, parts)
    assert q == {TP("t", 0): 10, TP("t", 1): 20}
    with pytest.raises(ConfigError, match="startingOffsetsByTimestamp: must name every partition; missing t-2"):
        timestamp_queries(spec, parts + [TP("t", 2)])
    with pytest.raises(ConfigError, match="names partitions that do not exist: t-1"):
        timestamp_queries(spec, parts[:1])
    latest = {TP("t", 0): 50, TP("t", 1): 60}
    assert resolve_times(spec, q, {TP("t", 0): 3, TP("t", 1): 7}, latest, starting=True) == {TP("t", 0): 3,
                                                                                             TP("t", 1): 7}
    with pytest.raises(ConfigError, match="no record of t-1 has a timestamp at or after 20"):
        resolve_times(spec, q, {TP("t", 0): 3, TP("t", 1): None}, latest, starting=True)
    assert resolve_times(spec, q, {TP("t", 0): 3, TP("t", 1): None}, latest, starting=True,
                         strategy="latest") == {TP("t", 0): 3, TP("t", 1): 60}
    assert resolve_times(spec, q, {TP("t", 0): None, TP("t", 1): None}, latest, starting=False) == latest
    one = parse_read_options({**BS, "subscribe": "t", "startingTimestamp": "99"}, streaming=True).starting
    assert timestamp_queries(one, parts) == {TP("t", 0): 99, TP("t", 1): 99}


def test_min_offsets_per_trigger_waits_at_most_max_trigger_delay() -> None:
    from akresil.spark.offsets import delay_trigger

    starts, ends = {TP("t", 0): 10, TP("t", 1): 0}, {TP("t", 0): 13, TP("t", 1): 4, TP("t", 2): 5}
    # 3 + 4 new offsets in known partitions; a partition new in `ends` counts from its end (unknown start)
    args = dict(min_offsets=8, max_delay_ms=1000, last_trigger_ms=5000)
    assert delay_trigger(starts, ends, now_ms=5999, **args)
    assert not delay_trigger(starts, ends, now_ms=6000, **args)           # the delay is over
    assert not delay_trigger(starts, ends, now_ms=5001, **{**args, "min_offsets": 7})
    assert not delay_trigger(starts, ends, now_ms=5001, **{**args, "min_offsets": None})


def test_assign_and_explicit_offsets_parse_into_topic_partitions() -> None:
    o = parse_read_options({**BS, "assign": '{"t": [0, 2]}', "startingOffsets": '{"t": {"0": 5, "2": -2}}',
                            "endingOffsets": '{"t": {"0": -1, "2": 9}}'}, streaming=False)
    assert o.subscription.partitions == (TP("t", 0), TP("t", 2))
    assert o.starting.offsets == {TP("t", 0): 5, TP("t", 2): EARLIEST}
    assert o.ending.for_partition(TP("t", 0)) == LATEST and o.ending.for_partition(TP("t", 1)) is None


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({"subscribe": "t"}, False, "kafka.bootstrap.servers: required"),
    ({**BS}, False, "exactly one of subscribe, subscribePattern, assign is required"),
    ({**BS, "subscribe": "t", "subscribePattern": "x"}, False, r"exactly one of .* \(got subscribe, subscribepattern\)"),
    ({**BS, "subscribe": "bad topic!"}, False, "subscribe: .*illegal characters"),
    ({**BS, "subscribePattern": "(unclosed"}, False, "subscribePattern: '\\(unclosed' is not a valid regex"),
    ({**BS, "assign": "[1]"}, False, "assign: expected JSON like"),
    ({**BS, "assign": '{"t": [-1]}'}, False, "assign: partition -1 of 't' is not an int >= 0"),
    ({**BS, "assign": '{"t": [0]}', "startingOffsets": '{"u": {"0": 1}}'}, False,
     "startingOffsets: names partitions that assign does not: u-0"),
    ({**BS, "subscribe": "t", "startingOffsets": '{"u": {"0": 1}}'}, False,
     "startingOffsets: names topics that are not subscribed: u"),
    ({**BS, "subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, False, "partition 'x' of 't' is not an int"),
    ({**BS, "subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'}, False, "offset -3 of t-0 must be"),
    ({**BS, "subscribe": "t", "endingOffsets": "earliest"}, False, "endingOffsets: 'earliest' is not allowed"),
    ({**BS, "subscribe": "t", "endingOffsets": "latest"}, True, "endingOffsets: only for batch reads"),
    ({**BS, "subscribe": "t", "failOnDataLoss": "maybe"}, False, "failOnDataLoss: expected true or false"),
    ({**BS, "subscribe": "t", "maxOffsetsPerTrigger": "x"}, True, "maxOffsetsPerTrigger: expected a positive integer"),
    ({**BS, "subscribe": "t", "startingOffsetsByTimestamp": "{}"}, False,
     "startingOffsetsByTimestamp: expected JSON like"),
    ({**BS, "subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"0": -1}}'}, False,
     "startingOffsetsByTimestamp: timestamp -1 of t-0 must be an int >= 0"),
    ({**BS, "subscribe": "t", "endingOffsetsByTimestamp": '{"u": {"0": 5}}'}, False,
     "endingOffsetsByTimestamp: names topics that are not subscribed: u"),
    ({**BS, "subscribe": "t", "startingTimestamp": "yesterday"}, True, "startingTimestamp: expected a timestamp"),
    ({**BS, "subscribe": "t", "endingTimestamp": "5"}, True, "endingTimestamp: only for batch reads"),
    ({**BS, "subscribe": "t", "startingOffsetsByTimestampStrategy": "earliest"}, False,
     "startingOffsetsByTimestampStrategy: expected 'error' or 'latest'"),
    ({**BS, "subscribe": "t", "minOffsetsPerTrigger": "5"}, False, "minOffsetsPerTrigger: only for streaming"),
    ({**BS, "subscribe": "t", "minRecordsPerPartition": "5"}, False, "minRecordsPerPartition: only for streaming"),
    ({**BS, "subscribe": "t", "minRecordsPerPartition": "0"}, True, "minRecordsPerPartition"),
    ({**BS, "subscribe": "t", "minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "5"}, True,
     "minOffsetsPerTrigger: 50 is more than maxOffsetsPerTrigger 5"),
    ({**BS, "subscribe": "t", "maxTriggerDelay": "5m"}, True, "maxTriggerDelay: only meaningful with minOffsets"),
    ({**BS, "subscribe": "t", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"}, True,
     "maxTriggerDelay: expected a duration"),
    ({**BS, "subscribe": "t", "groupIdPrefix": "bad prefix"}, True, "groupIdPrefix: expected letters"),
    ({**BS, "subscribe": "t", "fetchOffset.numRetries": "3"}, False,
     "fetchOffset.numRetries: Spark's Kafka source option is not supported"),
    ({**BS, "subscribe": "t", "kafka.retries": "3"}, False,
     "kafka.retries: Java client setting not supported by akresil: .*kafka.delivery.timeout.ms"),
    ({**BS, "subscribe": "t", "topic": "x"}, False, "topic: not an option of a read"),
    ({**BS, "subscribe": "t", "kafka.auto.offset.reset": "earliest"}, False,
     "kafka.auto.offset.reset: not supported: use startingOffsets"),
    ({**BS, "subscribe": "t", "kafka.ssl.context": "x"}, False, "kafka.ssl.context: cannot be set from a string"),
    ({**BS, "subscribe": "t", "kafka.isolation.level": "dirty"}, False,
     "kafka.\\* options: isolation_level: 'dirty' is not one of"),
    ({"kafka.bootstrap.servers": "nohost", "subscribe": "t"}, False, "bootstrap_servers: 'nohost' is not host:port"),
])
def test_bad_read_options_name_the_option(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_read_options(options, streaming=streaming)


def test_bad_write_options_name_the_option() -> None:
    with pytest.raises(ConfigError, match="topic: .*illegal characters"):
        parse_write_options({**BS, "topic": "a/b"})
    with pytest.raises(ConfigError, match="subscribe: not an option of a write"):
        parse_write_options({**BS, "subscribe": "t"})
    with pytest.raises(ConfigError, match="enable_idempotence: requires acks='all'"):
        parse_write_options({**BS, "kafka.acks": "1"})


# ---------------------------------------------------------------------- offsets
A0, A1, B0 = TP("a", 0), TP("a", 1), TP("b", 0)


def test_resolve_spec_fills_placeholders_and_insists_on_every_partition() -> None:
    earliest, latest = {A0: 3, A1: 0}, {A0: 50, A1: 7}
    assert resolve_spec(OffsetSpec(EARLIEST), [A0, A1], earliest, latest, name="s") == {A0: 3, A1: 0}
    explicit = OffsetSpec(None, {A0: LATEST, A1: 4})
    assert resolve_spec(explicit, [A0, A1], earliest, latest, name="s") == {A0: 50, A1: 4}
    with pytest.raises(ConfigError, match="s: explicit offsets must name every partition; missing a-1"):
        resolve_spec(OffsetSpec(None, {A0: 1}), [A0, A1], earliest, latest, name="s")
    with pytest.raises(ConfigError, match="names partitions that do not exist: a-9"):
        resolve_spec(OffsetSpec(None, {A0: 1, TP("a", 9): 1}), [A0], earliest, latest, name="s")


def test_check_starts_reports_or_skips_lost_offsets() -> None:
    earliest, latest = {A0: 10, A1: 0}, {A0: 20, A1: 5}
    assert check_starts({A0: 12, A1: 5}, earliest, latest, fail_on_data_loss=True, context="c") == {A0: 12, A1: 5}
    with pytest.raises(DataLossError, match="offset 4 of a-0 is outside the log \\[10, 20\\].*deleted"):
        check_starts({A0: 4}, earliest, latest, fail_on_data_loss=True, context="c")
    assert check_starts({A0: 4, A1: 9}, earliest, latest, fail_on_data_loss=False, context="c") == {A0: 10, A1: 0}
    with pytest.raises(DataLossError, match="b-0 no longer exists"):
        check_starts({B0: 0}, earliest, latest, fail_on_data_loss=True, context="c")


def test_plan_ranges_is_one_range_per_partition_with_data() -> None:
    ranges = plan_ranges({A0: 0, A1: 5, B0: 2}, {A0: 10, A1: 5, B0: 4})
    assert ranges == [OffsetRange("a", 0, 0, 10), OffsetRange("b", 0, 2, 4)]
    with pytest.raises(DataLossError, match="end offset 1 of a-0 is before its start 3"):
        plan_ranges({A0: 3}, {A0: 1})
    assert plan_ranges({A0: 3}, {A0: 1}, fail_on_data_loss=False) == []


def test_split_ranges_covers_each_range_exactly_in_proportion() -> None:
    ranges = [OffsetRange("a", 0, 0, 900), OffsetRange("a", 1, 100, 200)]
    split = split_ranges(ranges, min_partitions=10)
    assert len(split) == 10
    assert [r for r in split if r.partition == 1] == [OffsetRange("a", 1, 100, 200)]
    a0 = [r for r in split if r.partition == 0]
    assert a0[0].start == 0 and a0[-1].end == 900 and all(x.end == y.start for x, y in zip(a0, a0[1:]))
    assert max(r.size for r in a0) - min(r.size for r in a0) <= 1
    capped = split_ranges([OffsetRange("a", 0, 0, 10)], max_records_per_partition=4)
    assert [(r.start, r.end) for r in capped] == [(0, 3), (3, 6), (6, 10)]
    assert split_ranges(ranges, min_partitions=2) == ranges          # already enough ranges
    assert split_ranges([OffsetRange("a", 0, 0, 2)], min_partitions=5) == [
        OffsetRange("a", 0, 0, 1), OffsetRange("a", 0, 1, 2)]       # never an empty piece


def test_pack_ranges_groups_small_ranges_into_balanced_deterministic_tasks() -> None:
    ranges = [OffsetRange("a", p, 0, size) for p, size in enumerate((250, 240, 260, 250))]
    assert pack_ranges(ranges, 100_000) == [ranges]                     # 1000 offsets: one task reads all four
    two = pack_ranges(ranges, 500)
    assert sorted(sum(r.size for r in g) for g in two) == [500, 500]     # balanced by size
    every = sorted((r.partition, r.start, r.end) for g in two for r in g)
    assert every == [(r.partition, r.start, r.end) for r in ranges]     # every range once, none cut
    assert all([r.partition for r in g] == sorted(r.partition for r in g) for g in two)     # in partition order
    assert pack_ranges(list(reversed(ranges)), 500) == two               # a replay gets the same tasks
    assert pack_ranges(ranges, 1) == [[r] for r in ranges]               # at most one task per range
    assert pack_ranges([], 10) == []
    s = parse_read_options({**BS, "subscribe": "t"}, streaming=True)
    assert s.min_records_per_partition == 100_000
    assert parse_read_options({**BS, "subscribe": "t", "minRecordsPerPartition": "1"},
                              streaming=True).min_records_per_partition == 1


def test_rate_limit_shares_the_budget_by_backlog_and_takes_exactly_the_limit() -> None:
    starts, latest = {A0: 0, A1: 100, B0: 7}, {A0: 300, A1: 200, B0: 7}
    ends = rate_limit(starts, latest, 40)
    assert ends == {A0: 30, A1: 110, B0: 7}
    odd = rate_limit({A0: 0, A1: 0, B0: 0}, {A0: 1, A1: 1, B0: 1}, 2)
    assert sum(odd[tp] - 0 for tp in odd) == 2 and all(odd[tp] <= 1 for tp in odd)
    assert rate_limit(starts, latest, 10_000) == latest
    # repeated batches drain every backlog, none starves
    cur = {A0: 0, A1: 0}
    for _ in range(200):
        cur = rate_limit(cur, {A0: 1000, A1: 3}, 7)
    assert cur == {A0: 1000, A1: 3}


def test_offset_json_round_trips_in_spark_layout() -> None:
    offsets = {A1: 5, A0: 3, B0: 0}
    assert to_json(offsets) == {"a": {"0": 3, "1": 5}, "b": {"0": 0}}
    assert from_json(to_json(offsets)) == offsets
    with pytest.raises(ConfigError, match="offset of a-0 is not an int"):
        from_json({"a": {"0": "3"}})
    with pytest.raises(ConfigError, match="must be an object"):
        from_json([1])


# ---------------------------------------------------------------------- writer rows
def test_group_batch_splits_by_topic_and_partition_keeping_row_order() -> None:
    import pyarrow as pa

    from akresil.spark.writer import group_batch, needs_row_order

    def batch(**cols: list) -> pa.RecordBatch:
        types = {"key": pa.binary(), "value": pa.string(), "topic": pa.string(), "partition": pa.int32()}
        return pa.record_batch([pa.array(v, types[k]) for k, v in cols.items()], names=list(cols))

    used = ("key", "value", "topic", "partition")
    b = batch(key=[b"k0", None, b"k2", b"k3"], value=["v0", "v1", None, "v3"], topic=["x", "y", "x", None],
              partition=[1, None, 1, 0])
    with pytest.raises(ConfigError, match="row 13: topic is null"):
        group_batch(b, used, default_topic=None, row_base=10)
    groups = group_batch(b, used, default_topic="forced", row_base=10)
    assert [(g.topic, g.partition, g.pairs, list(g.rows), g.nbytes) for g in groups] == [
        ("forced", 1, [(b"k0", b"v0"), (b"k2", None)], [10, 12], 6),
        ("forced", None, [(None, b"v1")], [11], 2),
        ("forced", 0, [(b"k3", b"v3")], [13], 4)]
    assert needs_row_order(groups)                 # partitioner rows may share a partition with explicit ones
    b = batch(key=[b"k0", None, b"k2", b"k3"], value=["v0", "v1", None, "v3"], topic=["x", "y", "x", "x"],
              partition=[1, None, 1, 0])
    groups = group_batch(b, used, default_topic=None, row_base=0)
    assert [(g.topic, g.partition, list(g.rows)) for g in groups] == [("x", 1, [0, 2]), ("y", None, [1]),
                                                                      ("x", 0, [3])]
    assert not needs_row_order(groups)
    # one topic, no partition column: one group over the whole batch, pairs straight from the columns
    whole = group_batch(batch(value=["a", "bb"]), ("value",), default_topic="t", row_base=5)
    assert [(g.topic, g.partition, g.pairs, list(g.rows), g.nbytes) for g in whole] == [
        ("t", None, [(None, b"a"), (None, b"bb")], [5, 6], 3)]
    with pytest.raises(ConfigError, match="row 2: partition -1 is negative"):
        group_batch(batch(value=["a", "b", "c"], partition=[0, 0, -1]), ("value", "partition"), default_topic="t",
                    row_base=0)


def test_write_summary_aggregates_task_messages() -> None:
    from akresil.spark.writer import TaskDelivery, WriteSummary

    msgs = [TaskDelivery(0, 0, 3, 30, 1, 5.0, {"t-0": 2, "t-1": 1}, 0.1, throttled=2, leader_hints=1,
                         skip_backoff_retries=1), None,
            TaskDelivery(2, 1, 2, 20, 0, 0.0, {"t-1": 2}, 0.1, throttled=1)]
    s = WriteSummary.from_messages("w", "aborted", msgs)
    assert (s.tasks_delivered, s.tasks_failed, s.records, s.bytes, s.retries, s.throttle_ms) == (2, 1, 5, 50, 1, 5.0)
    assert s.partitions == {"t-0": 2, "t-1": 3}
    assert (s.throttled, s.leader_hints, s.skip_backoff_retries) == (3, 1, 1)   # KIP-219 / KIP-951 activity


def test_group_batch_builds_its_pairs_without_setting_off_the_cyclic_gc() -> None:
    """Thousands of new pair tuples used to run a young-generation collection every ~700 of them (and with
    those, full collections over the whole worker); the pairs are now built with the GC paused, which is
    enabled again afterwards, and left disabled when the caller had disabled it."""
    import gc

    import pyarrow as pa

    from akresil.spark.writer import group_batch

    n = 20_000
    b = pa.record_batch([pa.array([str(i).encode() for i in range(n)], pa.binary()),
                         pa.array([b"v" * 10] * n, pa.binary())], names=["key", "value"])
    started: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        groups = group_batch(b, ("key", "value"), default_topic="t", row_base=0)
    finally:
        gc.callbacks.remove(count)
    assert gc.isenabled()
    assert len(started) <= 1, f"{len(started)} collections while grouping {n} rows"
    assert [len(g.pairs) for g in groups] == [n] and groups[0].pairs[7] == (b"7", b"v" * 10)

    gc.disable()
    try:
        group_batch(b, ("key", "value"), default_topic="t", row_base=0)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_failed_tasks_report_what_landed_and_the_commit_fails_naming_them() -> None:
    from akresil.errors import UnknownTopicOrPartitionError
    from akresil.spark.writer import (
        DeliveryFailedError, RowGroup, TaskDelivery, WriteSummary, _Tally, counts_of, raise_on_failed_tasks,
    )
    from akresil.types import RecordMetadata

    def md(p: int) -> RecordMetadata:
        return RecordMetadata("t", p, 0, 0)

    tally = _Tally(task=3, attempt=1)
    groups = [RowGroup("t", None, [(None, b"ab")] * 2, rows=[0, 1], nbytes=4),
              RowGroup("t", 9, [(b"k", b"cd")], rows=[2], nbytes=3)]
    refused = UnknownTopicOrPartitionError("partition 9 does not exist")
    tally.add(([counts_of(groups[0], [md(0), md(1)]), counts_of(groups[1], [refused])], None), groups)
    tally.not_sent = 5
    stats = {"retries": 2, "throttle_ms": 0.0, "throttled": 0, "leader_hints": 0, "skip_backoff_retries": 0}
    landed = tally.delivery(stats, 0.1, "acknowledged records stay")
    assert (landed.records, landed.bytes, landed.partitions, landed.failed) == (2, 4, {"t-0": 1, "t-1": 1}, 6)
    assert landed.report is not None and "t-9: 1 failed, first rows [2], error UnknownTopicOrPartitionError" in \
        landed.report and "2 acknowledged, 5 not sent after the refusal (retries 2); acknowledged records stay" in \
        landed.report
    aborted = tally.delivery(stats, 0.1, "aborted", landed=False)      # a transaction: what was acked is gone too
    assert (aborted.records, aborted.partitions, aborted.failed) == (0, {}, 8)

    ok = TaskDelivery(0, 0, 7, 70, 0, 0.0, {"t-0": 7}, 0.1)
    skipped = TaskDelivery(1, 0, 0, 0, 0, 0.0, {}, 0.1, skipped=4)
    with pytest.raises(DeliveryFailedError, match="akresil write task 3 \\(attempt 1\\)"):
        raise_on_failed_tasks([ok, landed, None])
    raise_on_failed_tasks([ok, skipped])
    s = WriteSummary.from_messages("w", "aborted", [ok, landed, None, skipped], query_id="q", batch_id=4,
                                   guarantee="exactly-once")
    assert (s.tasks_delivered, s.tasks_failed, s.records, s.failed, s.skipped) == (2, 2, 9, 6, 4)
    assert s.partitions == {"t-0": 8, "t-1": 1} and s.error == landed.report
    assert (s.query_id, s.batch_id, s.guarantee) == ("q", 4, "exactly-once")


def test_task_rows_peek_iterate_and_drain() -> None:
    import pyarrow as pa

    from akresil.spark.writer import TaskRows

    batches = [pa.record_batch([pa.array([f"v{i}" for i in range(s, s + n)])], names=["value"])
               for s, n in ((0, 0), (0, 3), (3, 2), (5, 4))]
    rows = TaskRows(iter(batches), ("value",), "t")
    first = rows.peek()
    assert first is not None and [list(g.rows) for g in first] == [[0, 1, 2]]
    assert rows.peek() is first                          # peeking twice takes nothing more
    seen = iter(rows)
    assert next(seen) is first
    assert [list(g.rows) for g in next(seen)] == [[3, 4]]
    assert rows.drain() == 4 and rows.rows == 9          # what was left, counted, not grouped
    assert TaskRows(iter(batches[:1]), ("value",), "t").peek() is None


def test_stream_write_options_delivery_guarantee_and_transactional_prefix() -> None:
    from akresil.spark.exactly_once import marker_partition, transaction_name
    from akresil.spark.options import AT_LEAST_ONCE, EXACTLY_ONCE

    default = parse_write_options({**BS, "topic": "t", "checkpointLocation": "/c"}, streaming=True)
    assert (default.guarantee, default.exactly_once) == (AT_LEAST_ONCE, False)
    eo = parse_write_options({**BS, "topic": "t", "deliveryGuarantee": "Exactly-Once",
                              "transactionalIdPrefix": "etl.orders"}, streaming=True)
    assert (eo.guarantee, eo.exactly_once, eo.transactional_id_prefix) == (EXACTLY_ONCE, True, "etl.orders")
    assert transaction_name("etl.orders", "q-1", 3) == "etl.orders-q-1-3"
    assert marker_partition(None, "first") == TP("first", 0) and marker_partition("t", "first") == TP("t", 0)
    for options, message in [
        ({"deliveryGuarantee": "exactly-once"}, "deliveryGuarantee: only for streaming writes"),
        ({"checkpointLocation": "/c"}, "checkpointlocation: unknown option of the akresil data source \\(write\\)"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_write_options({**BS, "topic": "t", **options})
    for options, message in [
        ({"deliveryGuarantee": "twice"}, "deliveryGuarantee: expected 'at-least-once' or 'exactly-once'"),
        ({"transactionalIdPrefix": "p"}, "transactionalIdPrefix: only with deliveryGuarantee=exactly-once"),
        ({"deliveryGuarantee": "exactly-once", "transactionalIdPrefix": "a b"}, "transactionalIdPrefix: expected"),
        ({"deliveryGuarantee": "exactly-once", "kafka.enable.idempotence": "false"},
         "deliveryGuarantee=exactly-once needs a transactional producer: enable_idempotence"),
        ({"kafka.transactional.id": "x"}, "kafka.transactional.id: .*deliveryGuarantee=exactly-once"),
        ({"startingOffsets": "earliest"}, "startingOffsets: not an option of a streaming write"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_write_options({**BS, "topic": "t", **options}, streaming=True)


def test_task_rows_stop_at_a_row_the_sink_cannot_write_and_the_report_names_it() -> None:
    """A null topic in the second Arrow batch: the first batch is handed out, the second is not (none of its rows
    is sent), and the task's report names the row and counts what landed and what was not sent."""
    import pyarrow as pa

    from akresil.spark.writer import TaskRows, _Tally, counts_of
    from akresil.types import RecordMetadata

    topics = [["t"] * 3, ["t", None], ["t"] * 4]
    batches = [pa.record_batch([pa.array(t), pa.array([b"v"] * len(t))], names=["topic", "value"]) for t in topics]
    rows = TaskRows(iter(batches), ("value", "topic"), None)
    [first] = list(rows)
    assert [list(g.rows) for g in first] == [[0, 1, 2]]
    assert rows.bad_input is not None and "row 4: topic is null" in str(rows.bad_input) and rows.bad_rows == 2
    tally = _Tally(task=1, attempt=0)
    tally.add(([counts_of(first[0], [RecordMetadata("t", 0, i, 0) for i in range(3)])], None), first)
    assert not tally.refused
    tally.add_bad_input(rows)
    tally.not_sent += rows.drain()
    assert tally.refused and (tally.records, tally.failed_total) == (3, 6)
    stats = {"retries": 0, "throttle_ms": 0.0, "throttled": 0, "leader_hints": 0, "skip_backoff_retries": 0}
    delivery = tally.delivery(stats, 0.1, "records acknowledged before it stay")
    assert (delivery.records, delivery.failed) == (3, 6)
    assert delivery.report == ("akresil write task 1 (attempt 0): bad input: row 4: topic is null; set the 'topic' "
                               "option for a default; 3 acknowledged, 6 not sent after the bad row (retries 0); "
                               "records acknowledged before it stay.")


def test_key_hash_equals_the_java_clients_murmur2_for_every_key() -> None:
    import random

    import pyarrow as pa

    from akresil.core.partitioner import murmur2
    from akresil.spark.key_hash import murmur2_column

    rng = random.Random(7)
    keys = [None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(rng.randrange(0, 41)))
            for _ in range(3000)]
    for arr in (pa.array(keys, pa.binary()), pa.array(keys, pa.large_binary())):
        for sliced, expected in ((arr, keys), (arr.slice(11, 2000), keys[11:2011])):
            hashes, valid = murmur2_column(sliced)
            got = [(int(h) - (1 << 32) if h >= 1 << 31 else int(h)) if ok else None for h, ok in zip(hashes, valid)]
            assert got == [None if k is None else murmur2(k) for k in expected]


def test_group_batch_places_keyed_rows_as_the_producers_partitioner_would() -> None:
    import pyarrow as pa

    from akresil.core.partitioner import DefaultPartitioner
    from akresil.spark.writer import group_batch, key_placement, needs_row_order

    keys = [str(i).encode() for i in range(200)]
    batch = pa.record_batch([pa.array(keys, pa.binary()), pa.array([b"v"] * 200, pa.binary())], names=["key", "value"])
    counts = {"t": 7, "u": 3}
    groups = group_batch(batch, ("key", "value"), default_topic="t", row_base=0, partition_count=counts.get)
    placed = {row: g.partition for g in groups for row in g.rows}
    java = DefaultPartitioner(16384)
    assert placed == {i: java.partition("t", keys[i], 7, range(7)) for i in range(200)}
    assert all(g.pairs == [(keys[r], b"v") for r in g.rows] for g in groups)     # each group keeps row order
    assert not needs_row_order(groups)
    # a topic column: each topic's own count; null keys stay with the producer's sticky partitioner
    topics = pa.array(["t", "u", "t", "u"])
    with_topic = pa.record_batch([pa.array([b"1", b"2", None, b"4"], pa.binary()), pa.array([b"a", b"b", b"c", b"d"]),
                                  topics], names=["key", "value", "topic"])
    groups = group_batch(with_topic, ("key", "value", "topic"), default_topic=None, row_base=0,
                         partition_count=counts.get)
    expected: dict[tuple[str, int], list[int]] = {}
    for row, spec in enumerate([("t", b"1", 7), ("u", b"2", 3), None, ("u", b"4", 3)]):
        if spec is not None:
            expected.setdefault((spec[0], java.partition(spec[0], spec[1], spec[2], range(spec[2]))), []).append(row)
    assert {(g.topic, g.partition): list(g.rows) for g in groups if g.partition is not None} == expected
    assert [list(g.rows) for g in groups if g.partition is None] == [[2]]
    # a topic whose count is not known yet: the producer places the rows itself
    unknown = group_batch(batch, ("key", "value"), default_topic="v", row_base=0, partition_count=counts.get)
    assert [(g.partition, len(g.pairs)) for g in unknown] == [(None, 200)]

    class _Config:
        partitioner = None
        partitioner_ignore_keys = False

    class _Producer:
        config = _Config()

        def partitions_for(self, topic: str) -> tuple[int, ...]:
            return tuple(range(counts.get(topic, 0)))

    count = key_placement(_Producer())
    assert count is not None and count("t") == 7 and count("missing") is None
    _Config.partitioner_ignore_keys = True
    assert key_placement(_Producer()) is None        # keys ignored: sticky placement is the producer's


def test_available_now_plans_every_trigger_from_the_snapshot_pinned_at_start(monkeypatch: pytest.MonkeyPatch
                                                                            ) -> None:
    """Trigger.AvailableNow: one offset look-up when the query starts serves initialOffset and every trigger (as
    Spark's Kafka source); other triggers look up the log each time."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from akresil.spark import kafka_io
    from akresil.spark.offsets import from_json
    from akresil.spark.stream import AkresilStreamReader

    tps = [TP("t", 0), TP("t", 1)]
    latest = {TP("t", 0): 30, TP("t", 1): 10}
    calls: list[int] = []

    def snapshot(*_: object, **__: object) -> kafka_io.PartitionSnapshot:
        calls.append(1)
        return kafka_io.PartitionSnapshot(tps, {tp: 0 for tp in tps}, dict(latest))

    monkeypatch.setattr(kafka_io, "snapshot", snapshot)
    options = parse_read_options({**BS, "subscribe": "t", "startingOffsets": "earliest"}, streaming=True)
    pinned = AkresilStreamReader(options)
    pinned.prepareForTriggerAvailableNow()
    start = pinned.initialOffset()
    latest[TP("t", 0)] = 99                          # written after the query started: not read by it
    ends = []
    for _ in range(4):
        end = pinned.latestOffset(start, ReadMaxRows(15))
        ends.append(from_json(end))
        pinned.partitions(start, end)
        start = end
    assert len(calls) == 1
    assert ends[-1] == {TP("t", 0): 30, TP("t", 1): 10} and ends[-2] == ends[-1]
    assert sum(ends[0].values()) == 15

    following = AkresilStreamReader(options)
    start = following.initialOffset()
    for _ in range(3):
        start = following.latestOffset(start, ReadMaxRows(1000))
    assert len(calls) == 1 + 4 and from_json(start) == {TP("t", 0): 99, TP("t", 1): 10}


def test_exactly_once_producer_retries_a_busy_coordinator_sooner_unless_configured() -> None:
    """The fence follows the previous micro-batch's commit of the same id, which the coordinator is often still
    completing (CONCURRENT_TRANSACTIONS): the sink's transactional producer starts its back-off at 20 ms, not 100,
    unless kafka.retry.backoff.ms says otherwise."""
    from akresil.config import resolve
    from akresil.spark.exactly_once import TXN_RETRY_BACKOFF_MS, transactional_config

    default = parse_write_options({**BS, "topic": "o", "deliveryGuarantee": "exactly-once"}, streaming=True)
    config = transactional_config(default, "p-q-0")
    assert config["retry_backoff_ms"] == TXN_RETRY_BACKOFF_MS == 20 and config["transactional_id"] == "p-q-0"
    resolve("producer", config)                  # a valid producer configuration
    given = parse_write_options({**BS, "topic": "o", "deliveryGuarantee": "exactly-once",
                                 "kafka.retry.backoff.ms": "250"}, streaming=True)
    assert transactional_config(given, "p-q-0")["retry_backoff_ms"] == 250


def test_exactly_once_task_adds_its_marker_while_its_rows_are_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The marker's TxnOffsetCommit goes into the transaction while the rows are being sent and acknowledged, not
    after their acknowledgement: the stand-in producer acknowledges the rows only once the marker was sent (a
    task that sends the marker after the acknowledgement never finishes), then the transaction commits last."""
    from contextlib import ExitStack

    import anyio
    import pyarrow as pa
    from anyio.from_thread import start_blocking_portal

    from akresil.core.batch import BulkCounts
    from akresil.spark import exactly_once
    from akresil.spark.kafka_io import ClientStats

    events: list[str] = []

    class Producer:
        config = type("C", (), {"partitioner": None, "partitioner_ignore_keys": True})()
        transaction_state = "in transaction"

        def __init__(self) -> None:
            self.marked = anyio.Event()

        async def init_transactions(self, take_over: bool = False) -> None:
            events.append("fence")

        def begin_transaction(self) -> None:
            events.append("begin")

        async def send_many_counted(self, topic: str, pairs: list, *, partition: int | None = None) -> BulkCounts:
            events.append("send")
            with anyio.fail_after(5):
                await self.marked.wait()
            counts = BulkCounts(pairs)
            counts.complete_range(topic, 0, range(len(pairs)), 0, 0)
            events.append("acknowledged")
            return counts

        async def send_offsets_to_transaction(self, offsets: dict, group: str) -> None:
            events.append(f"marker {list(offsets.values())} {group}")
            self.marked.set()

        async def commit_transaction(self) -> None:
            events.append("commit")

        async def abort_transaction(self) -> None:
            events.append("abort")

    class Admin:
        async def list_consumer_group_offsets(self, group: str, tps: list, **_: object) -> dict:
            return {tp: type("O", (), {"committed": None})() for tp in tps}

    class Entry:
        def __init__(self, client: object) -> None:
            self.client, self.stats = client, ClientStats()
            self.mark = self.stats.snapshot()

    with ExitStack() as stack:
        portal = stack.enter_context(start_blocking_portal())
        producer = portal.call(Producer)
        worker = type("W", (), {"portal": portal, "release": lambda self, entry, healthy: None,
                                "lease": lambda self, kind, config: Entry(producer if kind == "producer"
                                                                          else Admin())})()
        monkeypatch.setattr(exactly_once, "worker_clients", lambda: worker)
        options = parse_write_options({**BS, "topic": "o", "deliveryGuarantee": "exactly-once"}, streaming=True)
        batch = pa.record_batch([pa.array([b"v1", b"v2"])], names=["value"])
        delivery = exactly_once.deliver_exactly_once(iter([batch]), options, ("value",), task=3, attempt=0,
                                                     query_id="q", batch_id=7)
    assert delivery.records == 2 and delivery.report is None
    marker = f"marker [8] {options.transactional_id_prefix}-q-3"
    assert events[:2] == ["fence", "begin"] and sorted(events[2:4]) == sorted(["send", marker])
    assert events[4:] == ["acknowledged", "commit"]


# ---------------------------------------------------------------------- Arrow batches of consumed records
@pytest.mark.parametrize("values", [
    [b"x" * 1024, b"", b"y" * 2000, b"z" * 700],            # large values: joined into one buffer
    [b"x" * 1024, None, b"y" * 600],                         # a tombstone among them
    [None, b"x" * 1024],
    [b"ab", b"c" * 5000],                                     # a small first value: pa.array
])
def test_records_to_batch_binary_columns_equal_pa_array(values: list[bytes | None]) -> None:
    """Large values go into Arrow joined in one buffer (one copy, not a buffer grown value by value); every path
    gives exactly the column ``pa.array`` gives, nulls included, and a valid batch of Spark's Kafka schema."""
    import pyarrow as pa

    from akresil.spark.schema import _binary, arrow_schema, records_to_batch
    from akresil.types import ConsumerRecord

    column = _binary(values)
    column.validate(full=True)
    assert column.equals(pa.array(values, pa.binary())) and column.null_count == values.count(None)
    records = [ConsumerRecord("t", 1, i, v, v, [], 1_700_000_000_000 + i, 0, -1) for i, v in enumerate(values)]
    batch = records_to_batch(records, include_headers=False)
    batch.validate(full=True)
    assert batch.schema == arrow_schema(False)
    assert batch.column(0).to_pylist() == values and batch.column(1).to_pylist() == values
    assert batch.column(4).to_pylist() == list(range(len(values)))


# ---------------------------------------------------------------------- microBatchRead=driver
def test_micro_batch_read_option_selects_the_driver_read_and_refuses_a_task_layout() -> None:
    stream = {**BS, "subscribe": "t"}
    assert not parse_read_options(stream, streaming=True).read_on_driver
    assert not parse_read_options({**stream, "microBatchRead": "tasks"}, streaming=True).read_on_driver
    assert parse_read_options({**stream, "MICROBATCHREAD": " Driver "}, streaming=True).read_on_driver
    with pytest.raises(ConfigError, match="microBatchRead: expected 'tasks' or 'driver', got 'executor'"):
        parse_read_options({**stream, "microBatchRead": "executor"}, streaming=True)
    with pytest.raises(ConfigError, match="microBatchRead: only for streaming reads"):
        parse_read_options({**stream, "microBatchRead": "driver"}, streaming=False)
    for layout in ("minPartitions", "maxRecordsPerPartition", "minRecordsPerPartition"):
        with pytest.raises(ConfigError, match=f"{layout}: sets the read tasks of a micro-batch; microBatchRead"):
            parse_read_options({**stream, "microBatchRead": "driver", layout: "2"}, streaming=True)


def test_micro_batch_read_driver_makes_spark_take_the_simple_stream_reader() -> None:
    """Spark asks ``streamReader`` first and falls back to ``simpleStreamReader`` when it declines (the runner's
    ``_streamReader``): the default keeps the task reader, ``driver`` gets the simple reader behind Spark's
    wrapper, whose micro-batch is one partition read in the runner."""
    from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper, _streamReader

    from akresil.spark.schema import kafka_schema
    from akresil.spark.source import AkresilDataSource
    from akresil.spark.stream import AkresilDriverStreamReader, AkresilStreamReader

    options = {**BS, "subscribe": "t"}
    assert isinstance(_streamReader(AkresilDataSource(options), kafka_schema(False)), AkresilStreamReader)
    wrapped = _streamReader(AkresilDataSource({**options, "microBatchRead": "driver"}), kafka_schema(False))
    assert isinstance(wrapped, _SimpleStreamReaderWrapper)
    assert isinstance(wrapped.simple_reader, AkresilDriverStreamReader)
    with pytest.raises(ConfigError, match="simpleStreamReader: only with microBatchRead=driver"):
        AkresilDataSource(options).simpleStreamReader(kafka_schema(False))


def test_driver_reader_plans_and_reads_a_micro_batch_in_one_call_and_replays_it_in_a_task(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``initialOffset`` starts the held consumer at the first offsets; ``read(start)`` plans the end as
    ``latestOffset`` does (maxOffsetsPerTrigger, the pinned AvailableNow end) and reads it through that consumer;
    nothing new is no micro-batch; a replay (``readBetweenOffsets``, in a task) reads the same ranges with a task's
    short-lived consumer; the pickled reader leaves the consumer out."""
    import pickle

    from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper

    from akresil.spark import kafka_io
    from akresil.spark.stream import AkresilDriverStreamReader

    tps = [TP("t", 0), TP("t", 1)]
    monkeypatch.setattr(kafka_io, "snapshot", lambda *_, **__: kafka_io.PartitionSnapshot(
        tps, {tp: 0 for tp in tps}, {TP("t", 0): 30, TP("t", 1): 10}))
    held_reads: list[list[OffsetRange]] = []
    task_reads: list[list[OffsetRange]] = []

    class Held:
        def __init__(self, config: object, **_: object) -> None:
            self.closed, self.held = False, {}

        def hold(self, starts: dict[TP, int]) -> None:
            self.held = dict(starts)

        def read(self, ranges: list[OffsetRange]) -> list[str]:
            held_reads.append(list(ranges))
            return [f"batch of {sum(r.size for r in ranges)}"]

        def close(self) -> None:
            self.closed = True

    def read_ranges(config: object, ranges: list[OffsetRange], **_: object) -> object:
        task_reads.append(list(ranges))
        return iter(["replayed"])

    monkeypatch.setattr(kafka_io, "HeldConsumerReader", Held)
    monkeypatch.setattr(kafka_io, "read_ranges", read_ranges)
    options = parse_read_options({**BS, "subscribe": "t", "startingOffsets": "earliest",
                                  "maxOffsetsPerTrigger": "20", "microBatchRead": "driver"}, streaming=True)
    reader = AkresilDriverStreamReader(options)
    reader.prepareForTriggerAvailableNow()
    wrapper = _SimpleStreamReaderWrapper(reader)
    start = reader.initialOffset()
    assert reader._held is not None and reader._held.held == {TP("t", 0): 0, TP("t", 1): 0}     # fetching already
    first = wrapper.latestOffset(start, wrapper.getDefaultReadLimit())
    assert sum(from_json(first).values()) == 20 and len(held_reads) == 1
    assert {(r.partition, r.start) for r in held_reads[0]} == {(0, 0), (1, 0)}
    cached = wrapper.getCache(start, first)
    assert cached is not None and list(cached) == ["batch of 20"]
    assert list(wrapper.getCache(start, first) or []) == ["batch of 20"]     # Spark copies the cached iterator
    second = wrapper.latestOffset(first, wrapper.getDefaultReadLimit())
    assert from_json(second) == {TP("t", 0): 30, TP("t", 1): 10}
    assert wrapper.latestOffset(second, wrapper.getDefaultReadLimit()) == second     # the pinned end: no batch
    assert len(held_reads) == 2 and len(wrapper.cache) == 2

    shipped = pickle.loads(pickle.dumps(reader))
    assert shipped._held is None and reader._held is not None
    assert list(shipped.readBetweenOffsets(start, first)) == ["replayed"]
    assert task_reads == [held_reads[0]] and len(held_reads) == 2
    held = reader._held
    reader.stop()
    assert held.closed


def test_a_range_never_takes_records_past_its_end_from_the_consumer() -> None:
    """A held consumer's buffer keeps the records past a micro-batch's end for the next micro-batch, so a range
    asks the consumer for at most what is left of it (and a consumer that stayed at the range's start is not
    sought, which would drop what it fetched ahead)."""
    import anyio

    from akresil.spark.kafka_io import RangeReader, _hold_at

    tp = TP("t", 0)

    class Consumer:
        def __init__(self) -> None:
            self.pos, self.asked, self.sought, self.assigned = 5, [], [], frozenset([tp])

        async def getmany(self, *tps: TP, timeout_ms: float, max_records: int) -> dict[TP, list[tuple]]:
            self.asked.append(max_records)
            got = [(tp.topic, tp.partition, off) for off in range(self.pos, self.pos + min(max_records, 100))]
            self.pos += len(got)
            return {tp: got}

        async def position(self, _: TP) -> int:
            return self.pos

        def assignment(self) -> frozenset[TP]:
            return self.assigned

        def assign(self, tps: frozenset[TP]) -> None:
            self.assigned = frozenset(tps)

        def seek(self, tp: TP, offset: int) -> None:
            self.sought.append(offset)
            self.pos = offset

    consumer = Consumer()
    rng = OffsetRange("t", 0, 5, 35)

    async def main() -> list[tuple]:
        await _hold_at(consumer, [rng])
        return await RangeReader(consumer, rng, poll_timeout_ms=1000).next_records(10_000)  # type: ignore[arg-type]

    records = anyio.run(main)
    assert [r[2] for r in records] == list(range(5, 35)) and consumer.asked == [30] and consumer.pos == 35
    assert consumer.sought == []
    anyio.run(_hold_at, consumer, [OffsetRange("t", 0, 7, 9), OffsetRange("t", 1, 0, 3)])
    assert consumer.sought == [7, 0] and consumer.assigned == {tp, TP("t", 1)}
