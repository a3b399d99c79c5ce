"""The bulk path of ``send_many``: one pass per batch, one completion range per batch, checks before buffering.

Core pieces (``RecordAccumulator.append_many``, ``BulkCompletion``, ``DefaultPartitioner.group``) are driven with
plain calls; ``Producer.send_many`` runs against an offline producer (metadata injected, no sender task) whose
batches the test acknowledges itself, as a broker would.
"""

from __future__ import annotations

import asyncio
import gc
import random
from typing import Any, Iterator

import pytest

from akresil import Producer, errors
from akresil.core.accumulator import RecordAccumulator
from akresil.core.batch import BATCH_OVERHEAD, BulkCompletion, estimate_record_size
from akresil.core.partitioner import DefaultPartitioner, partition_for_key
from akresil.protocol.records import read_batches
from akresil.types import RecordMetadata, TopicPartition

T0 = TopicPartition("t", 0)


def acc(**kw: Any) -> RecordAccumulator:
    kw.setdefault("linger_ms", 5)
    kw.setdefault("delivery_timeout_ms", 1000)
    kw.setdefault("request_timeout_ms", 500)
    kw.setdefault("rng", random.Random(0))
    return RecordAccumulator(**kw)


def drain_all(a: RecordAccumulator, now: float = 0) -> list[Any]:
    a.begin_flush()
    batches = []
    while True:
        drained = a.drain(now, sendable={1}, leader_of=lambda tp: (1, 0)).batches
        if not drained:
            break
        batches.extend(drained[1])
    a.end_flush()
    return batches


# ---------------------------------------------------------------------------------------------- accumulator
def test_append_many_fills_the_open_batch_then_new_ones_with_one_range_each() -> None:
    a = acc(batch_size=1024)
    records = [(None, b"%03d" % i + b"x" * 97) for i in range(30)]
    sink = BulkCompletion(records)
    a.append(T0, 5, b"single", b"v", now=0)                # an open batch with one record already
    res = a.append_many(T0, records, range(30), 0, 7, [], sink, now=0)
    assert res.appended == 30 and res.needed_bytes == 0 and res.new_batches >= 2
    batches = list(a.batches())
    assert sum(b.record_count for b in batches) == 31
    assert [len(b.ranges) for b in batches] == [1] * len(batches)
    assert batches[0].ranges[0].first == 1                 # after the single record
    # one memory charge per batch: estimates of the records plus one header per batch
    expected = (estimate_record_size(b"single", b"v") + 30 * estimate_record_size(None, records[0][1])
                + len(batches) * BATCH_OVERHEAD)
    assert a.buffered_bytes == expected
    # the encoded batches hold the records in input order
    values = [r.value for b in batches for v in read_batches(b.payload.build()) for r in v.records()]
    assert values == [b"v"] + [v for _, v in records]


def test_completion_fills_results_in_input_order_and_releases_memory() -> None:
    a = acc(batch_size=400)
    records = [(b"k%d" % i if i % 2 else None, b"v" * (i + 1)) for i in range(12)]
    done: list[int] = []
    sink = BulkCompletion(records, lambda: done.append(1), null_keys=6, null_values=0)
    positions = [11, 9, 7, 5, 3, 1, 0, 2, 4, 6, 8, 10]       # a scattered run, e.g. one partition's records
    run = [records[j] for j in positions]
    a.append_many(T0, run, positions, 0, 1234, [], sink, now=0)
    offset = 100
    for batch in drain_all(a):
        a.on_batch_success(batch, offset, 0)
        offset += batch.record_count
    assert done == [1] and sink.done and a.buffered_bytes == 0
    for rank, j in enumerate(positions):
        md = sink.results[j]
        key, value = records[j]
        assert md == RecordMetadata("t", 0, 100 + rank, 1234, -1 if key is None else len(key), len(value))


def test_a_failed_batch_fails_its_range_only() -> None:
    a = acc(batch_size=300)
    records = [(None, b"x" * 100) for _ in range(6)]
    sink = BulkCompletion(records)
    a.append_many(T0, records, range(6), 0, 1, [], sink, now=0)
    first, *rest = drain_all(a)
    boom = errors.InvalidRecordError("bad")
    a.on_batch_error(first, boom, 0)
    for batch in rest:
        a.on_batch_success(batch, 10, 0)
    failed = [r for r in sink.results if isinstance(r, BaseException)]
    assert failed == [boom] * first.record_count and sink.first_error is boom
    assert all(isinstance(r, RecordMetadata) for r in sink.results[first.record_count:])


def test_expiry_fails_bulk_records_with_delivery_timeout() -> None:
    a = acc(batch_size=10_000)
    records = [(None, b"x")] * 5
    sink = BulkCompletion(records)
    a.append_many(T0, records, range(5), 0, 1, [], sink, now=0)
    a.expire(1000)
    assert all(isinstance(r, errors.DeliveryTimeoutError) for r in sink.results) and sink.done


def test_append_many_takes_what_fits_in_memory_and_names_what_the_next_record_needs() -> None:
    size = estimate_record_size(None, b"x" * 100)
    a = acc(batch_size=100_000, buffer_memory=BATCH_OVERHEAD + 3 * size + 10)
    records = [(None, b"x" * 100)] * 10
    sink = BulkCompletion(records)
    res = a.append_many(T0, records, range(10), 0, 1, [], sink, now=0)
    assert res.appended == 3 and res.needed_bytes == size and not res.batch_closed
    assert a.buffered_bytes == BATCH_OVERHEAD + 3 * size
    # continuing from where it stopped once memory is back
    [batch] = drain_all(a)
    a.on_batch_success(batch, 0, 0)
    res = a.append_many(T0, records, range(10), 3, 1, [], sink, now=0)
    assert res.appended == 3 and res.needed_bytes == size


def test_append_many_does_not_jump_ahead_of_waiting_appenders() -> None:
    a = acc(batch_size=1000, buffer_memory=2000)
    a.append(T0, 1, None, b"x" * 1500, now=0)
    waiter = a.wait_for_space(1000, lambda: None)
    records = [(None, b"y")]
    res = a.append_many(T0, records, range(1), 0, 1, [], BulkCompletion(records), now=0)
    assert res.appended == 0 and res.needed_bytes > 0     # FIFO: the waiter is first
    res = a.append_many(T0, records, range(1), 0, 1, [], BulkCompletion(records), now=0, waiter=waiter)
    assert res.appended == 1


def test_stop_when_full_returns_at_the_batch_boundary() -> None:
    a = acc(batch_size=500)
    records = [(None, b"x" * 100)] * 20
    res = a.append_many(T0, records, range(20), 0, 1, [], BulkCompletion(records), now=0, stop_when_full=True)
    assert res.batch_closed and 0 < res.appended < 20 and res.new_batches == 1
    assert [b.open for b in a.batches()] == [False]


def test_queue_sizes_count_batches_waiting_not_those_in_flight() -> None:
    a = acc(batch_size=200)
    records = [(None, b"x" * 150) for _ in range(4)]                 # one record per batch
    a.append_many(T0, records, range(4), 0, 1, [], BulkCompletion(records), now=0)
    assert a.queue_sizes("t", [0, 1]) == [4, 0]
    a.begin_flush()
    drained = a.drain(0, sendable={1}, leader_of=lambda tp: (1, 0)).batches[1]
    assert a.queue_sizes("t", [0, 1]) == [4 - len(drained), 0] and drained


def test_expedite_makes_a_tail_batch_ready_before_linger() -> None:
    a = acc(batch_size=10_000, linger_ms=1000, delivery_timeout_ms=5000)
    records = [(None, b"x")] * 3
    a.append_many(T0, records, range(3), 0, 1, [], BulkCompletion(records), now=0)
    assert a.ready_nodes(1, lambda tp: (1, 0)) == set()
    assert a.next_wakeup(1) == 1000
    a.expedite([T0])
    assert a.ready_nodes(1, lambda tp: (1, 0)) == {1}
    assert a.next_wakeup(1) == 1000                        # no linger timer, but the end of its append window
    a.expire(1000)
    assert a.next_wakeup(1000) == 5000                     # closed to records: only the deadline is left


def collector_states() -> Iterator[bool]:
    """The cyclic collector enabled, then disabled, for the body of each turn; the caller's setting restored after."""
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            yield enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_large_ranges_complete_with_the_cyclic_gc_paused_and_restored() -> None:
    records = [(None, b"v")] * 5000
    for enabled in collector_states():
        sink = BulkCompletion(records, null_keys=5000, null_values=0)
        sink.complete_range("t", 0, range(5000), 10, 1)
        assert gc.isenabled() is enabled                      # the caller's setting is left as it was
        assert sink.results[4999] == RecordMetadata("t", 0, 5009, 1, -1, 1)


def test_bulk_completion_sizes_for_mixed_null_keys_and_values() -> None:
    records = [(None, b"abc"), (b"k", None), (b"key", b"")]
    sink = BulkCompletion(records)                         # counts unknown: the generic path
    sink.complete_range("t", 2, range(3), -1, 9)
    assert [(m.offset, m.serialized_key_size, m.serialized_value_size) for m in sink.results] == \
        [(-1, -1, 3), (-1, 1, -1), (-1, 3, 0)]


# ---------------------------------------------------------------------------------------------- partitioner
def test_group_places_each_key_as_partition_does() -> None:
    keys = [b"key-%d" % (i % 37) for i in range(300)] + [None] * 5
    random.Random(3).shuffle(keys)
    part = DefaultPartitioner()
    groups, unkeyed = part.group("t", keys, 7, ())
    assert unkeyed == [i for i, k in enumerate(keys) if k is None]
    for p, positions in groups.items():
        assert positions == sorted(positions)
        assert all(partition_for_key(keys[i], 7) == p for i in positions)
    assert sorted([i for ps in groups.values() for i in ps] + unkeyed) == list(range(len(keys)))


def test_group_with_a_custom_partitioner_or_ignored_keys() -> None:
    keys: list[bytes | None] = [b"a", None, b"c"]
    groups, unkeyed = DefaultPartitioner(partitioner=lambda t, k, n, a: 2).group("t", keys, 3, ())
    assert groups == {2: [0, 1, 2]} and unkeyed == []
    groups, unkeyed = DefaultPartitioner(ignore_keys=True).group("t", keys, 3, ())
    assert groups == {} and unkeyed == [0, 1, 2]
    with pytest.raises(ValueError, match="custom partitioner returned 5"):
        DefaultPartitioner(partitioner=lambda t, k, n, a: 5).group("t", keys, 3, ())


# ---------------------------------------------------------------------------------------------- send_many
def metadata(partitions: int, topic: str = "t") -> dict[str, Any]:
    return {"brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9001, "rack": None}],
            "controller_id": 1, "cluster_id": "c",
            "topics": [{"name": topic, "error_code": 0, "topic_id": bytes(16), "is_internal": False,
                        "partitions": [{"partition_index": i, "leader_id": 1, "leader_epoch": 0,
                                        "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": [],
                                        "error_code": 0} for i in range(partitions)]}]}


class Offline:
    """A producer without sockets or sender task: the test plays the broker by acknowledging batches."""

    def __init__(self, partitions: int = 3, **config: Any) -> None:
        self.producer = p = Producer(bootstrap_servers="127.0.0.1:1", **config)
        p._cluster.metadata.update_from_metadata(metadata(partitions), p._cluster.clock())   # noqa: SLF001
        p._runtime.started = p._accepting = True                                              # noqa: SLF001
        self.acc = p._acc                                                                     # noqa: SLF001
        self.acc.set_producer_identity(1, 0)
        self.offsets: dict[TopicPartition, int] = {}
        self.sent: list[Any] = []

    def answer_metadata(self, partitions: int, topic: str = "t") -> None:
        """Play the broker's Metadata answer: merged into the cache and announced to waiters, as the sender does."""
        cluster = self.producer._cluster                                                      # noqa: SLF001
        cluster.metadata.update_from_metadata(metadata(partitions, topic), cluster.clock())
        cluster._announce_metadata()                                                          # noqa: SLF001

    def ack_all(self) -> None:
        for batch in drain_all(self.acc, self.producer._cluster.clock()):                    # noqa: SLF001
            self.sent.append(batch)
            base = self.offsets.get(batch.tp, 0)
            self.offsets[batch.tp] = base + batch.record_count
            self.acc.on_batch_success(batch, base, 0)

    async def run(self, coro: Any, *, ack: bool = True) -> Any:
        task = asyncio.ensure_future(coro)
        for _ in range(10_000):
            await asyncio.sleep(0)
            if ack:
                self.ack_all()
            if task.done():
                return task.result()
        raise AssertionError("send_many did not finish")


async def test_send_many_keyed_records_land_where_murmur2_says_in_input_order() -> None:
    o = Offline(3, batch_size=512)
    records = [(b"user-%d" % (i % 10), b"v%d" % i) for i in range(200)]
    mds = await o.run(o.producer.send_many("t", records, headers=[("h", b"1")], timestamp_ms=42))
    assert [md.partition for md in mds] == [partition_for_key(k, 3) for k, _ in records]
    for p in range(3):
        offsets = [md.offset for md in mds if md.partition == p]
        assert offsets == list(range(len(offsets)))          # per partition: consecutive, in input order
    assert {md.timestamp_ms for md in mds} == {42}
    assert mds[0].serialized_key_size == 6 and mds[0].serialized_value_size == 2
    stored = [(r.key, r.value, list(r.headers)) for b in o.sent for v in read_batches(b.payload.build())
              for r in v.records()]
    assert sorted(stored) == sorted((k, v, [("h", b"1")]) for k, v in records)
    assert o.acc.buffered_bytes == 0


async def test_send_many_unkeyed_records_stick_per_full_batch() -> None:
    """KIP-794 in bulk: a partition takes unkeyed records until its batch is full, then the sticky choice
    moves on; every batch is a contiguous run of the input."""
    o = Offline(3, batch_size=1024)
    records = [(None, b"%04d" % i + b"x" * 96) for i in range(300)]
    mds = await o.run(o.producer.send_many("t", records))
    assert len({md.partition for md in mds}) > 1
    runs: list[tuple[int, int]] = []                         # (partition, length) of maximal runs
    for md in mds:
        if runs and runs[-1][0] == md.partition:
            runs[-1] = (md.partition, runs[-1][1] + 1)
        else:
            runs.append((md.partition, 1))
    full = max(b.record_count for b in o.sent)
    assert all(n % full == 0 for _, n in runs[:-1])           # switches only at full batches
    for p in range(3):
        offsets = [md.offset for md in mds if md.partition == p]
        assert offsets == list(range(len(offsets)))


def runs_of(mds: list[RecordMetadata]) -> list[tuple[int, int]]:
    """(partition, length) of the maximal runs of consecutive records on one partition."""
    runs: list[tuple[int, int]] = []
    for md in mds:
        if runs and runs[-1][0] == md.partition:
            runs[-1] = (md.partition, runs[-1][1] + 1)
        else:
            runs.append((md.partition, 1))
    return runs


async def test_default_batches_spread_unkeyed_records_by_sticky_unit_and_stay_large() -> None:
    """With the default 256 KiB batches a partition takes one 16 KiB sticky unit of small calls (not a whole
    batch, which would leave the other partitions idle for seconds at moderate rates); a large call is split
    into even shares, so it still fills whole batches per visit."""
    o = Offline(3)
    o.producer._cluster.rng.seed(5)                                                        # noqa: SLF001
    assert o.producer.config.batch_size == 262_144 and o.producer._partitioner.sticky.unit == 16_384  # noqa: SLF001
    records = [(None, b"%05d" % i + b"x" * 95) for i in range(3000)]           # ~330 KiB in all
    mds: list[RecordMetadata] = []
    for i in range(0, 3000, 50):                                              # 60 small calls
        mds += await o.run(o.producer.send_many("t", records[i:i + 50]))
    per_unit = -(-16_384 // estimate_record_size(None, records[0][1], []))     # records per sticky unit
    runs = runs_of(mds)
    # switches come only after a whole unit (a draw may pick the same partition again: longer runs)
    assert len(runs) > 10 and all(n >= per_unit for _, n in runs[:-1]), (per_unit, runs)
    assert all(n <= per_unit + 50 for _, n in runs if n < 2 * per_unit), runs
    counts = {p: sum(n for q, n in runs if q == p) for p in range(3)}
    assert min(counts.values()) > 300, counts

    big = Offline(3)
    big.producer._cluster.rng.seed(5)                                                      # noqa: SLF001
    mds = await big.run(big.producer.send_many("t", records))
    assert all(n % 1000 == 0 for _, n in runs_of(mds)), runs_of(mds)       # thirds of the call per visit
    assert len(big.sent) <= 4                                                 # about one batch per visit
    for p in range(3):
        offsets = [md.offset for md in mds if md.partition == p]
        assert offsets == list(range(len(offsets)))


async def test_the_sticky_partitioner_reads_the_accumulators_queues() -> None:
    """KIP-794 wiring: the producer hands its partitioner the live queue sizes of partitions with a leader."""
    o = Offline(3, batch_size=200)
    load = o.producer._partitioner.sticky._load_stats                                   # noqa: SLF001
    assert load is not None and load("t") == ((0, 1, 2), [0, 0, 0])
    for _ in range(4):
        await o.producer.enqueue("t", b"x" * 150, partition=1)                          # one batch each
    assert load("t") == ((0, 1, 2), [0, 4, 0])


async def test_send_many_with_an_explicit_partition() -> None:
    o = Offline(3, max_block_ms=50)
    mds = await o.run(o.producer.send_many("t", [(b"k", b"v"), (None, b"w")], partition=2))
    assert [(md.partition, md.offset) for md in mds] == [(2, 0), (2, 1)]
    # beyond the metadata: checked against metadata asked for now, then refused naming it
    refused = asyncio.ensure_future(o.producer.send_many("t", [(None, b"v")], partition=3))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not refused.done()                       # waiting for the fresh answer
    o.answer_metadata(3)
    with pytest.raises(ValueError, match=r"partition 3 given for topic 't' is not in \[0, 3\) \(metadata asked"):
        await asyncio.wait_for(refused, 5)


async def test_send_many_checks_every_record_before_buffering_any() -> None:
    o = Offline(1, max_request_size=10_000)
    p = o.producer
    good = [(None, b"x" * 100)] * 5
    with pytest.raises(errors.RecordTooLargeError, match="send_many: the largest record.*max_request_size"):
        await p.send_many("t", good + [(None, b"x" * 20_000)] + good)
    with pytest.raises(TypeError, match="send_many: record 5: value must be bytes or None"):
        await p.send_many("t", good + [(None, "text")])
    with pytest.raises(TypeError, match="send_many: record 2 must be a \\(key, value\\) pair"):
        await p.send_many("t", good[:2] + [b"lonely"])
    with pytest.raises(TypeError, match="headers must be"):
        await p.send_many("t", good, headers=[("h", "not bytes")])
    assert p.buffered_bytes == 0 and list(o.acc.batches()) == []
    # bytearray / memoryview are accepted and converted, the caller's list is left alone
    records: list[Any] = [(bytearray(b"k"), memoryview(b"v"))]
    mds = await o.run(p.send_many("t", records))
    assert mds[0].offset == 0 and isinstance(records[0][0], bytearray)


async def test_records_without_buffer_space_fail_with_buffer_full_and_the_rest_is_delivered() -> None:
    size = estimate_record_size(None, b"x" * 100)
    o = Offline(1, buffer_memory=BATCH_OVERHEAD + 4 * size, batch_size=100_000, max_block_ms=50)
    p = o.producer
    records = [(None, b"x" * 100)] * 10
    task = asyncio.ensure_future(p.send_many("t", records, raise_on_error=False))
    while not task.done() and o.acc.space_waiters == 0:
        await asyncio.sleep(0)
    await asyncio.sleep(0.1)                       # max_block_ms passes with the "broker" silent
    assert not task.done()                         # the 4 buffered records are still pending
    o.ack_all()
    with pytest.raises(errors.BufferFullError) as info:   # raised even with raise_on_error=False: it stopped
        await asyncio.wait_for(task, 5)                    # the call, after the buffered records completed
    results = info.value.results
    assert [r.offset for r in results[:4]] == [0, 1, 2, 3]
    assert all(isinstance(r, errors.BufferFullError) for r in results[4:])
    assert "max_block_ms (50 ms)" in str(results[4])
    assert p.buffered_bytes == 0


async def test_a_large_send_many_yields_so_the_sender_can_ship_full_batches() -> None:
    o = Offline(1, batch_size=16_384, buffer_memory=1 << 26)
    records = [(None, b"x" * 100)] * 20_000            # ~2.6 MB of estimates
    task = asyncio.ensure_future(o.producer.send_many("t", records))
    await asyncio.sleep(0)
    buffered = sum(b.record_count for b in o.acc.batches())
    assert 0 < buffered < len(records)                  # it stopped at a batch boundary to let others run
    mds = await o.run(task)
    assert len(mds) == 20_000 and mds[-1].offset == 19_999


async def test_send_many_tail_batches_do_not_wait_for_linger() -> None:
    o = Offline(1, linger_ms=60_000, delivery_timeout_ms=120_000)
    task = asyncio.ensure_future(o.producer.send_many("t", [(None, b"v")]))
    await asyncio.sleep(0)
    assert o.acc.ready_nodes(o.producer._cluster.clock(), lambda tp: (1, 0)) == {1}   # noqa: SLF001
    o.ack_all()
    assert (await task)[0].offset == 0


async def test_a_cancelled_wait_for_space_leaves_no_waiter_behind() -> None:
    """Otherwise the forgotten waiter stays at the head of the FIFO and blocks every later appender."""
    size = estimate_record_size(None, b"x" * 100)
    o = Offline(1, buffer_memory=BATCH_OVERHEAD + 2 * size, batch_size=100_000, max_block_ms=60_000)
    records = [(None, b"x" * 100)] * 5
    task = asyncio.ensure_future(o.producer.send_many("t", records))
    while o.acc.space_waiters == 0:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert o.acc.space_waiters == 0
    o.ack_all()                                          # the two buffered records are still delivered
    mds = await o.run(o.producer.send_many("t", records[:1]))
    assert mds[0].offset == 2


async def test_send_many_counted_counts_landed_per_partition_and_failed_runs_without_metadata() -> None:
    """The counting outcome (for callers that only tally, such as the Spark sink): records landed per partition
    and the failed positions with their error; no RecordMetadata per record, and a failure does not raise."""
    from akresil.core.batch import BulkCounts

    o = Offline(3, batch_size=512)
    records = [(b"user-%d" % (i % 10), b"v%d" % i) for i in range(200)]
    counts = await o.run(o.producer.send_many_counted("t", records))
    assert isinstance(counts, BulkCounts) and counts.results == [] and counts.done
    expected: dict[int, int] = {}
    for k, _ in records:
        expected[partition_for_key(k, 3)] = expected.get(partition_for_key(k, 3), 0) + 1
    assert counts.landed == expected and counts.landed_total == 200 and counts.failed == []
    assert await o.run(o.producer.send_many_counted("t", [])) is not None

    boom = errors.InvalidRecordError("bad")
    o = Offline(3)
    task = asyncio.ensure_future(o.producer.send_many_counted("t", [(None, b"x" * 100)] * 6, partition=1))
    await asyncio.sleep(0)
    [batch] = drain_all(o.acc, o.producer._cluster.clock())                                # noqa: SLF001
    o.acc.on_batch_error(batch, boom, 0)
    failed = await asyncio.wait_for(task, 5)
    assert failed.landed == {} and failed.failed == [(range(0, 6), boom)] and failed.first_error is boom


async def test_send_many_counted_stopped_by_buffer_full_raises_with_the_counts() -> None:
    size = estimate_record_size(None, b"x" * 100)
    o = Offline(1, buffer_memory=BATCH_OVERHEAD + 4 * size, batch_size=100_000, max_block_ms=50)
    task = asyncio.ensure_future(o.producer.send_many_counted("t", [(None, b"x" * 100)] * 10))
    while not task.done() and o.acc.space_waiters == 0:
        await asyncio.sleep(0)
    await asyncio.sleep(0.1)
    o.ack_all()
    with pytest.raises(errors.BufferFullError) as info:
        await asyncio.wait_for(task, 5)
    counts = info.value.counts
    assert counts.landed == {0: 4} and [(list(pos), type(e)) for pos, e in counts.failed] == [
        ([4, 5, 6, 7, 8, 9], errors.BufferFullError)]


def test_a_large_batch_calls_its_records_back_with_the_cyclic_gc_paused_and_restored() -> None:
    """Each single record's completion makes a ``RecordMetadata`` and queues its future's wake-up: thousands at once
    ran a young collection every ~700 and pushed full ones over every pending record (issue 35 item 2). The
    callbacks of a batch of ``PAUSE_MIN`` records or more run with the collector paused; a small batch's do not,
    a raising callback does not stop the others, and the caller's setting is left as it was."""
    from akresil.core.collector import PAUSE_MIN
    for enabled in collector_states():
        for n in (PAUSE_MIN, 10):
            a = acc(batch_size=10_000_000, buffer_memory=64_000_000)
            seen: list[tuple[bool, int]] = []

            def callback(md: RecordMetadata | None, err: BaseException | None) -> None:
                assert md is not None and err is None
                seen.append((gc.isenabled(), md.offset))
                if md.offset == 100:
                    raise RuntimeError("a bad callback")

            for _ in range(n):
                assert a.append(T0, 1, None, b"v", (), callback, now=0).appended
            (batch,) = drain_all(a)
            assert batch.complete(100)
            assert [o for _, o in seen] == list(range(100, 100 + n))
            assert {e for e, _ in seen} == {enabled and n < PAUSE_MIN}
            assert gc.isenabled() is enabled


def test_one_answers_small_batches_call_back_with_the_collector_paused_when_they_add_up() -> None:
    """At 10,000 partitions a Produce answer completes thousands of batches of a record or two: each is far
    below ``PAUSE_MIN``, but together they make as many ``RecordMetadata`` and wake-ups as one large batch, and ran
    young collections (and, every tenth, one towards a full collection) between them. The successes one answer
    completes (``complete_deferred``) call back with the collector paused when their records add up to
    ``PAUSE_MIN``; fewer do not pause it, and the caller's setting is left as it was."""
    from akresil.core.collector import PAUSE_MIN
    for enabled in collector_states():
        for per_batch in (PAUSE_MIN // 4, 2):
            a = acc(batch_size=10_000_000, buffer_memory=64_000_000)
            seen: list[bool] = []

            def callback(md: RecordMetadata | None, err: BaseException | None) -> None:
                assert md is not None and err is None
                seen.append(gc.isenabled())

            for p in range(4):
                for _ in range(per_batch):
                    assert a.append(TopicPartition("t", p), 1, None, b"v", (), callback, now=0).appended
            batches = drain_all(a)
            assert len(batches) == 4
            deferred: list[Any] = []
            for batch in batches:
                assert a.on_batch_success(batch, 0, 0, defer=deferred)
            assert seen == []                           # held back until the answer's successes complete
            a.complete_deferred(deferred)
            assert len(seen) == 4 * per_batch and deferred == []
            assert set(seen) == {enabled and per_batch * 4 < PAUSE_MIN}
            assert gc.isenabled() is enabled


async def test_a_partition_beyond_the_metadata_waits_for_it_as_one_just_added_would() -> None:
    """CreatePartitions answered after the producer's last Metadata: a record for a new partition waits for
    metadata asked for now, which has it, for ``send``, ``enqueue`` and ``send_many`` alike, instead of failing
    at once as an out-of-range partition."""
    o = Offline(3, max_block_ms=60_000)
    p = o.producer
    sent = asyncio.ensure_future(p.send("t", b"one", partition=4))
    bulk = asyncio.ensure_future(p.send_many("t", [(None, b"two"), (None, b"three")], partition=5))
    queued = asyncio.ensure_future(p.enqueue("t", b"four", partition=3))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not (sent.done() or bulk.done() or queued.done())       # waiting, not refused
    o.answer_metadata(6)
    fut = await asyncio.wait_for(queued, 5)
    for _ in range(100):
        await asyncio.sleep(0)
        o.ack_all()
        if sent.done() and bulk.done() and fut.done():
            break
    assert (await sent).partition == 4
    assert [md.partition for md in await bulk] == [5, 5]
    assert (await fut).partition == 3


async def test_a_partition_beyond_the_metadata_is_refused_once_fresh_metadata_lacks_it_too() -> None:
    """A mistaken partition is bad input: refused as soon as metadata asked for after the call lacks it too (one
    round trip, not ``max_block_ms``); with no answer at all, ``max_block_ms`` ends the wait."""
    o = Offline(3, max_block_ms=60_000)
    p = o.producer
    sent = asyncio.ensure_future(p.send("t", b"v", partition=7))
    queued = asyncio.ensure_future(p.enqueue("t", b"v", partition=8))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not (sent.done() or queued.done())
    o.answer_metadata(3)                            # fresh, and still 3 partitions
    with pytest.raises(ValueError, match=r"partition 7 given for topic 't' is not in \[0, 3\)"):
        await asyncio.wait_for(sent, 5)
    with pytest.raises(ValueError, match=r"partition 8 given"):
        await asyncio.wait_for(queued, 5)
    silent = Offline(3, max_block_ms=50)
    with pytest.raises(errors.KafkaTimeoutError, match=r"no Metadata answer within max_block_ms \(50 ms\) to "
                                                       r"check partition 9 of topic 't'"):
        await asyncio.wait_for(silent.producer.send_many("t", [(None, b"v")], partition=9), 5)
    with pytest.raises(ValueError, match="partition"):               # a negative one is bad input: at once
        await o.producer.send("t", b"v", partition=-1)
