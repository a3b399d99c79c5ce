"""An idempotent Produce in flight when its connection drops: the retry must report where the records really are.

The proxy holds the broker's Produce answer (``add_latency``) and drops the connection meanwhile, so the broker
has appended the batch but the client never hears it; the client retries with the same producer id and sequence.
A Kafka broker answers that duplicate with the original offset.  Each test reads the partition back with plain
Fetch requests and compares every record's ``RecordMetadata.offset`` with where the log really holds its value
(no record twice, none missing, no offset -1).
"""

from __future__ import annotations

import anyio
import pytest

from akresil import Admin, NewTopic, Producer
from akresil.protocol.api import ApiKey
from akresil.testing import FaultProxy

from ..harness.e2e import unique_topic
from ..harness.raw_fetch import read_partition, records_of

pytestmark = pytest.mark.broker

PRODUCE = int(ApiKey.PRODUCE)
DUPLICATE_SEQUENCE_NUMBER = 46
HOLD_MS = 400         # the proxy holds Produce answers this long ...
DROP_AFTER_S = 0.15   # ... and drops the connection this long after the send


async def _log_offsets(bootstrap: str, topic: str, partition: int, until: int) -> dict[bytes, list[int]]:
    """value -> every offset holding it (a duplicate append shows as two offsets)."""
    where: dict[bytes, list[int]] = {}
    for rec in records_of(await read_partition(bootstrap, topic, partition, until_offset=until)):
        assert rec.value is not None
        where.setdefault(rec.value, []).append(rec.offset)
    return where


async def _send_and_drop(proxy: FaultProxy, producer: Producer, node: int,
                         sends: dict[int, list[bytes]], topic: str) -> dict[bytes, tuple[int, int]]:
    """Send each partition's values while the proxy holds answers from ``node``, drop its connections
    mid-flight; returns value -> (partition, reported offset)."""
    proxy.add_latency(node, HOLD_MS, api_key=PRODUCE)
    reported: dict[bytes, tuple[int, int]] = {}
    dropped = 0

    async def send(partition: int, values: list[bytes]) -> None:
        mds = await producer.send_many(topic, [(None, v) for v in values], partition=partition)
        for v, md in zip(values, mds):
            reported[v] = (md.partition, md.offset)

    async def drop() -> None:
        nonlocal dropped
        await anyio.sleep(DROP_AFTER_S)
        dropped = await proxy.adrop_connections(node)

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(drop)
            for partition, values in sends.items():
                tg.start_soon(send, partition, values)
    assert dropped >= 1
    proxy.clear()
    return reported


async def _check_against_log(bootstrap: str, topic: str, reported: dict[bytes, tuple[int, int]]) -> None:
    by_partition: dict[int, int] = {}
    for partition, _ in reported.values():
        by_partition[partition] = by_partition.get(partition, 0) + 1
    for partition, count in by_partition.items():
        log = await _log_offsets(bootstrap, topic, partition, count)
        assert sum(len(o) for o in log.values()) == count, f"partition {partition}: log {log}"
        for value, (p, offset) in reported.items():
            if p == partition:
                assert log.get(value) == [offset], (value, offset, log.get(value))


async def test_retry_of_dropped_in_flight_produce_reports_original_offsets(broker) -> None:
    topic = unique_topic("idem-drop")
    async with FaultProxy(broker.bootstrap_servers, nodes=3) as proxy:
        async with Admin(bootstrap_servers=proxy.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
        node = proxy.leader(topic, 0)[0]
        async with Producer(bootstrap_servers=proxy.bootstrap_servers, linger_ms=0, retry_backoff_ms=20,
                            request_timeout_ms=5000) as producer:
            first = await producer.send(topic, b"warm-up", partition=0)
            assert first.offset == 0
            reported = await _send_and_drop(proxy, producer, node, {0: [b"v%d" % i for i in range(5)]}, topic)
            after = await producer.send(topic, b"after", partition=0)
        reported[b"warm-up"] = (0, 0)
        reported[b"after"] = (0, after.offset)
        # the broker really saw the retry as a duplicate: it answered DUPLICATE_SEQUENCE_NUMBER upstream
        # (the proxy turns that into Kafka's answer); one append, the retry was deduplicated
        attempts = [r for r in proxy.requests(PRODUCE, node=node) if (topic, 0) in r.partitions]
        assert len(attempts) == 4, attempts     # warm-up, dropped attempt, retry, after
        assert after.offset == 6
        await _check_against_log(broker.bootstrap_servers, topic, reported)


async def test_pipelined_batches_dropped_keep_their_offsets(broker) -> None:
    """Several batches per partition (batch_size 256) in flight when the connection drops."""
    topic = unique_topic("idem-drop-pipe")
    partitions = 3
    async with FaultProxy(broker.bootstrap_servers, nodes=3) as proxy:
        async with Admin(bootstrap_servers=proxy.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(topic, partitions)])
        node = proxy.leader(topic, 0)[0]
        owned = [p for p in range(partitions) if proxy.leader(topic, p)[0] == node]
        async with Producer(bootstrap_servers=proxy.bootstrap_servers, linger_ms=0, batch_size=256,
                            retry_backoff_ms=20, request_timeout_ms=5000) as producer:
            sends = {p: [b"p%d-%03d" % (p, i) for i in range(40)] for p in owned}
            reported = await _send_and_drop(proxy, producer, node, sends, topic)
        assert all(offset >= 0 for _, offset in reported.values())
        await _check_against_log(broker.bootstrap_servers, topic, reported)

