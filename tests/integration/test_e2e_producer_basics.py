"""The producer against real brokers: what it writes reads back intact, and its limits raise the right errors.

Records are read back with raw Fetch requests (``tests.harness.raw_fetch``), so the checks see the batches
as stored: codec, producer id and sequence numbers included.
"""

from __future__ import annotations

import contextlib
import time

import anyio
import pytest

from akresil import Admin, NewTopic, Producer
from akresil.errors import (BufferFullError, ClientClosedError, InvalidRecordError, NotEnoughReplicasError,
                            OutOfOrderSequenceNumberError, ProducerFencedError, RecordTooLargeError)
from akresil.testing import EmbeddedBroker, FaultProxy

from ..harness.e2e import PRODUCE, ProxyHarness, fast_producer, harness, now_ms, proxy_harness, unique_topic
from ..harness.raw_fetch import read_partition, records_of

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]

INIT_PRODUCER_ID = 22


async def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])


async def test_keys_values_headers_and_timestamps_round_trip(broker: EmbeddedBroker) -> None:
    topic = unique_topic("basics-rt")
    await create(broker.bootstrap_servers, topic)
    sent = [
        (b"k1", b"v1", [("h", b"x")], 1_700_000_000_000),
        (None, b"no key", [], 1_700_000_000_001),
        (b"no value", None, [("a", b"1"), ("a", b"2"), ("none", None)], 1_700_000_000_002),
        (b"", b"", [("unicode-\u00e9", b"\x00\xff")], 1_600_000_000_000),   # older than the batch's first
        (b"k" * 1000, bytes(range(256)) * 40, [], 1_700_000_000_003),
    ]
    async with Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=50) as producer:
        futures = [await producer.enqueue(topic, value, key, partition=0, headers=headers, timestamp_ms=ts)
                   for key, value, headers, ts in sent]
        mds = [await f for f in futures]
        auto_ts = await producer.send(topic, b"auto timestamp", partition=0)
    assert [md.offset for md in mds] == [0, 1, 2, 3, 4]
    assert [md.timestamp_ms for md in mds] == [ts for *_, ts in sent]

    got = records_of(await read_partition(broker.bootstrap_servers, topic, 0, until_offset=6))
    assert [(r.key, r.value, list(r.headers), r.timestamp_ms) for r in got[:5]] == \
        [(k, v, h, ts) for k, v, h, ts in sent]
    assert [r.offset for r in got] == [0, 1, 2, 3, 4, 5]
    assert got[5].value == b"auto timestamp" and got[5].timestamp_ms == auto_ts.timestamp_ms
    assert abs(got[5].timestamp_ms - time.time() * 1000) < 60_000   # a wall-clock stamp, not a monotonic one


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_each_compression_codec_is_written_and_reads_back(broker: EmbeddedBroker, codec: str) -> None:
    topic = unique_topic(f"basics-{codec}")
    await create(broker.bootstrap_servers, topic)
    values = [f"record {i:05d} ".encode() * 8 for i in range(500)]
    async with Producer(bootstrap_servers=broker.bootstrap_servers, compression_type=codec, linger_ms=20,
                        batch_size=16_384) as producer:
        mds = await producer.send_many(topic, [(str(i).encode(), v) for i, v in enumerate(values)], partition=0)
    assert [md.offset for md in mds] == list(range(500))

    batches = await read_partition(broker.bootstrap_servers, topic, 0, until_offset=500)
    assert {b.compression for b in batches} == {codec}
    assert len(batches) > 1                                         # batch_size split the records
    assert [r.value for r in records_of(batches)] == values
    assert [r.key for r in records_of(batches)] == [str(i).encode() for i in range(500)]


@pytest.mark.parametrize("kind", ["proxy", "mock"])
async def test_idempotent_sequences_are_accepted_through_retries(kind: str, broker: EmbeddedBroker) -> None:
    """Five requests in flight per connection, many small batches, retriable failures in the middle: every
    sequence is accepted and each partition keeps send order.  Tansu checks sequences (a batch pipelined behind
    a failed one gets OUT_OF_ORDER_SEQUENCE_NUMBER, which must be retried, not failed); librdkafka's mock does
    not, and stores a batch that overtook a failed one, so failures are injected only through the proxy."""
    async with harness(kind, broker) as h:
        topic = unique_topic("basics-idem")
        await h.create_topic(topic, 3)
        async with fast_producer(h.bootstrap_servers, linger_ms=2, batch_size=512,
                                 max_in_flight_requests_per_connection=5, delivery_timeout_ms=10_000,
                                 request_timeout_ms=3000) as producer:
            assert producer.config.enable_idempotence
            await producer.send(topic, b"warm-up", partition=0)
            if kind == "proxy":
                for node in (1, 2, 3):          # each partition's next batch fails once, with the batches
                    await h.delay_produce(node, 20)    # behind it already in flight (the delay keeps them there)
                    await h.fail_produce(NotEnoughReplicasError.errno, 1, node=node)
            futures = []
            for i in range(600):
                futures.append(await producer.enqueue(topic, f"{i:04d}".encode() * 10, partition=i % 3))
            mds = [await f for f in futures]

        by_partition: dict[int, list[int]] = {}
        for i, md in enumerate(mds):
            assert md.partition == i % 3
            by_partition.setdefault(md.partition, []).append(md.offset)
        first = {0: 1, 1: 0, 2: 0}
        for p, offsets in by_partition.items():
            assert offsets == list(range(first[p], first[p] + 200)), (p, offsets[:10])
        if kind == "proxy":
            codes = {c for r in h.proxy.responses(PRODUCE) for c in r.partition_errors.values()}
            assert codes == {0, NotEnoughReplicasError.errno, OutOfOrderSequenceNumberError.errno}, codes
            assert len(h.proxy.requests(PRODUCE)) > 20     # many batches, so sequences really advanced
            batches = await read_partition(h.proxy.bootstrap_servers, topic, 1, until_offset=200)
            assert batches[0].producer_id >= 0
            seqs = [(b.base_sequence, len(b.records)) for b in batches]
            assert seqs[0][0] == 0
            assert all(a + n == b for (a, n), (b, _) in zip(seqs, seqs[1:])), seqs


@pytest.mark.parametrize("kind", ["tansu", "noida"])
async def test_failed_idempotent_batch_does_not_poison_later_records(kind: str, broker: EmbeddedBroker) -> None:
    """A batch that fails for good leaves a gap in its partition's sequence that no retry closes. The producer
    bumps its epoch itself (KIP-360: same producer id, sequences from 0); a broker that refuses the bump (Tansu
    0.6 answers PRODUCER_FENCED) gets a new producer id instead. Either way no later record fails with
    OUT_OF_ORDER_SEQUENCE_NUMBER and nothing is written twice."""
    async with contextlib.AsyncExitStack() as stack:
        if kind == "noida":
            broker = await stack.enter_async_context(EmbeddedBroker(kind="noida"))
        h = ProxyHarness(await stack.enter_async_context(FaultProxy(broker.bootstrap_servers, nodes=3)))
        topic = unique_topic("basics-gap")
        await h.create_topic(topic, 1)
        async with fast_producer(h.bootstrap_servers, batch_size=200) as producer:
            await producer.send(topic, b"warm-up", partition=0)
            await h.fail_produce(InvalidRecordError.errno, 1)             # not retriable
            futures = [await producer.enqueue(topic, b"x" * 100, partition=0) for _ in range(20)]
            results = []
            for f in futures:
                try:
                    results.append((await f).offset)
                except InvalidRecordError:
                    results.append(None)
            later = await producer.send(topic, b"later", partition=0)
        batches = await read_partition(h.proxy.bootstrap_servers, topic, 0, until_offset=21)

    assert results[0] is None
    assert results[1:] == list(range(1, 20))
    assert later.offset == 20
    assert [r.value for r in records_of(batches)] == [b"warm-up"] + [b"x" * 100] * 19 + [b"later"]
    produce_codes = {c for r in h.proxy.responses(PRODUCE) for c in r.partition_errors.values()}
    if ProducerFencedError.errno in produce_codes:                  # the bump was refused: a new id
        assert kind == "tansu"
        assert len(h.proxy.requests(INIT_PRODUCER_ID)) == 2
        assert len({b.producer_id for b in batches}) == 2
    else:                                                           # the bump was taken: same id
        assert len(h.proxy.requests(INIT_PRODUCER_ID)) == 1
        assert len({b.producer_id for b in batches}) == 1
    after_gap = [b for b in batches if b.producer_id == batches[-1].producer_id and b.base_offset > 0]
    assert after_gap[0].base_sequence == 0                          # sequences restarted after the gap
    assert all(a.base_sequence + len(a.records) == b.base_sequence for a, b in zip(after_gap, after_gap[1:]))


async def test_close_completes_pending_records(broker: EmbeddedBroker) -> None:
    topic = unique_topic("basics-close")
    await create(broker.bootstrap_servers, topic)
    producer = Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=5000)
    await producer.start()
    futures = [await producer.enqueue(topic, f"pending-{i}".encode(), partition=0) for i in range(50)]
    assert not any(f.done() for f in futures)
    start = now_ms()
    await producer.close()
    assert now_ms() - start < 2000                 # closing sends at once instead of waiting out linger
    assert [f.result().offset for f in futures] == list(range(50))
    with pytest.raises(ClientClosedError):
        await producer.send(topic, b"late", partition=0)


async def test_full_buffer_blocks_for_max_block_ms_then_raises(broker: EmbeddedBroker) -> None:
    async with proxy_harness(broker) as h:
        topic = unique_topic("basics-full")
        await h.create_topic(topic, 1)
        async with fast_producer(h.bootstrap_servers, buffer_memory=4096, batch_size=1024,
                                 max_block_ms=300) as producer:
            await producer.send(topic, b"warm-up", partition=0)
            await h.stop_node(1)
            futures = []
            with pytest.raises(BufferFullError, match="max_block_ms"):
                for _ in range(100):
                    start = now_ms()
                    futures.append(await producer.enqueue(topic, b"x" * 200, partition=0))
            blocked = now_ms() - start
            assert 300 - 15 <= blocked <= 300 + 150, blocked
            assert 0 < producer.buffered_bytes <= 4096
            assert len(futures) >= 5
            await producer.close(timeout=0)
        assert all(isinstance(f.exception(), ClientClosedError) for f in futures)


async def test_record_too_large_fails_before_buffering(broker: EmbeddedBroker) -> None:
    async with proxy_harness(broker) as h:
        topic = unique_topic("basics-large")
        await h.create_topic(topic, 1)
        async with fast_producer(h.bootstrap_servers, max_request_size=10_000, buffer_memory=1 << 20) as producer:
            cid = producer.config.client_id
            with pytest.raises(RecordTooLargeError, match="max_request_size"):
                await producer.enqueue(topic, b"x" * 20_000, partition=0)
            assert producer.buffered_bytes == 0
            await anyio.sleep(0.05)
            assert not h.proxy.requests(PRODUCE, client_id=cid)
        async with fast_producer(h.bootstrap_servers, buffer_memory=40_000, batch_size=1024) as producer:
            with pytest.raises(RecordTooLargeError, match="buffer_memory"):
                await producer.enqueue(topic, b"x" * 50_000, partition=0)
            assert producer.buffered_bytes == 0
            md = await producer.send(topic, b"fits", partition=0)      # the producer still works
            assert md.offset == 0
