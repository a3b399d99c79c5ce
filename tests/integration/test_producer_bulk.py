"""``send_many`` against the real broker: what each returned ``RecordMetadata`` names is what the log holds.

Records are read back with raw Fetch requests (``tests.harness.raw_fetch``), so the check sees the stored
batches (codec, producer id, sequences) and not a consumer's view of them.
"""

from __future__ import annotations

import asyncio

import pytest

from akresil import Admin, NewTopic, Producer
from akresil.core.partitioner import partition_for_key
from akresil.testing import EmbeddedBroker

from ..harness.e2e import unique_topic
from ..harness.raw_fetch import FetchedRecord, read_partition, records_of

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]

PARTITIONS = 3


async def create(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])


async def stored(bootstrap: str, topic: str, counts: dict[int, int]) -> dict[tuple[int, int], FetchedRecord]:
    """(partition, offset) -> record, for the first ``counts[p]`` offsets of each partition."""
    out = {}
    for p, n in counts.items():
        for r in records_of(await read_partition(bootstrap, topic, p, until_offset=n)):
            out[(p, r.offset)] = r
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_send_many_metadata_matches_the_log(broker: EmbeddedBroker, codec: str) -> None:
    topic = unique_topic(f"bulk-{codec}")
    await create(broker.bootstrap_servers, topic)
    records = [(None if i % 3 == 0 else b"key-%d" % (i % 17), b"value %05d " % i * (1 + i % 7))
               for i in range(1500)]
    async with Producer(bootstrap_servers=broker.bootstrap_servers, compression_type=codec,
                        batch_size=4096) as producer:
        mds = await producer.send_many(topic, records, headers=[("trace", b"t-1"), ("empty", None)],
                                       timestamp_ms=1_700_000_000_123)
    assert len(mds) == len(records)
    for (key, _), md in zip(records, mds):
        if key is not None:
            assert md.partition == partition_for_key(key, PARTITIONS)   # Java / librdkafka murmur2 placement
    counts = {p: sum(1 for md in mds if md.partition == p) for p in range(PARTITIONS)}
    assert all(counts.values())
    log = await stored(broker.bootstrap_servers, topic, counts)
    assert len(log) == len(records)
    for (key, value), md in zip(records, mds):
        r = log[(md.partition, md.offset)]
        assert (r.key, r.value) == (key, value)
        assert r.headers == (("trace", b"t-1"), ("empty", None))
        assert r.timestamp_ms == md.timestamp_ms == 1_700_000_000_123
        assert md.serialized_value_size == len(value)
        assert md.serialized_key_size == (-1 if key is None else len(key))


async def test_concurrent_send_many_calls_and_enqueues_share_partitions_without_loss(
        broker: EmbeddedBroker) -> None:
    """Several bulk calls in flight plus single records into the same partitions: every offset is handed out
    exactly once, and each call's records of one partition keep their input order."""
    topic = unique_topic("bulk-concurrent")
    await create(broker.bootstrap_servers, topic)
    async with Producer(bootstrap_servers=broker.bootstrap_servers, batch_size=16_384, linger_ms=2) as producer:
        chunks = [[(b"c%d-%d" % (c, i % 5), b"c%d-r%d" % (c, i)) for i in range(2000)] for c in range(6)]
        singles = [await producer.enqueue(topic, b"single-%d" % i, key=b"s") for i in range(50)]
        results = await asyncio.gather(*(producer.send_many(topic, chunk) for chunk in chunks))
        single_mds = [await f for f in singles]
    every = [md for mds in results for md in mds] + single_mds
    assert len({(md.partition, md.offset) for md in every}) == len(every)
    counts = {p: sum(1 for md in every if md.partition == p) for p in range(PARTITIONS)}
    log = await stored(broker.bootstrap_servers, topic, counts)
    assert len(log) == len(every)
    for chunk, mds in zip(chunks, results):
        for (key, value), md in zip(chunk, mds):
            assert log[(md.partition, md.offset)].value == value
        for p in range(PARTITIONS):
            offsets = [md.offset for md in mds if md.partition == p]
            assert offsets == sorted(offsets)
