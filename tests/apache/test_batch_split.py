"""Batch splitting on Apache Kafka (issue 36 item 4): a topic whose ``max.message.bytes`` is far below the producer's
``batch_size`` refuses its batches with MESSAGE_TOO_LARGE; the producer splits them (as the Java producer's
``splitAndReenqueue``) and every record arrives once, in order, idempotent or not. Only a record larger than the
limit on its own fails, with that error, and the records around it are delivered."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from akresil import Consumer, Producer, TopicPartition, errors
from akresil.core.events import BATCH_SENT, BATCH_SPLIT, RecordingHook
from akresil.testing import KafkaCluster

from .conftest import TopicMaker

LIMIT = 20_000      # the topic's max.message.bytes: a batch (header included) above it is refused


def producer_config(idempotent: bool) -> dict[str, Any]:
    # without idempotence a partition keeps its order across retries (and splits) only with one request in flight,
    # as in the Java client; with idempotence the sequence numbers keep it with five
    return {"enable_idempotence": idempotent, "batch_size": 1_000_000, "linger_ms": 100,
            "max_in_flight_requests_per_connection": 5 if idempotent else 1}


async def read_values(bootstrap: str, topic: str, count: int) -> list[bytes | None]:
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([tp])
        got: list[bytes | None] = []
        with anyio.fail_after(60):
            while len(got) < count:
                got.extend(r.value for r in (await c.getmany(timeout_ms=500)).get(tp, []))
    return got


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not-idempotent"])
async def test_batches_over_the_topic_limit_are_split_and_arrive_in_order(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, idempotent: bool) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await make_topic(partitions=1, replication_factor=1, configs={"max.message.bytes": str(LIMIT)})
    hook = RecordingHook()
    values = [b"%04d-" % i + b"x" * 995 for i in range(400)]            # ~400 KB: one batch of 400 records
    async with Producer(bootstrap_servers=bootstrap, hooks=[hook], **producer_config(idempotent)) as producer:
        mds = await producer.send_many(topic, [(None, v) for v in values[:300]], partition=0)
        futures = [await producer.enqueue(topic, v, partition=0) for v in values[300:]]
        mds += [await f for f in futures]
    assert [md.offset for md in mds] == list(range(400))                 # each record once, in the order sent
    assert await read_values(bootstrap, topic, 400) == values
    splits = hook.named(BATCH_SPLIT)
    sent = hook.named(BATCH_SENT)
    accepted_sizes = [f["size_bytes"] for f in sent if f["size_bytes"] <= LIMIT]
    assert splits and all(f["records"] > 1 for f in splits)
    assert sum(f["records"] for f in sent if f["size_bytes"] <= LIMIT) == 400   # delivered by batches under the limit
    print(f"\nidempotent={idempotent}: {len(splits)} splits, {len(sent)} batches sent, "
          f"{len(sent) - len(accepted_sizes)} refused, largest accepted {max(accepted_sizes)} bytes")


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not-idempotent"])
async def test_only_a_record_over_the_limit_fails_and_its_neighbours_arrive(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, idempotent: bool) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await make_topic(partitions=1, replication_factor=1, configs={"max.message.bytes": str(LIMIT)})
    before = [b"a%02d-" % i + b"x" * 2_000 for i in range(20)]
    after = [b"b%02d-" % i + b"x" * 2_000 for i in range(20)]
    oversized = b"big-" + b"y" * (2 * LIMIT)          # within max_request_size, above the topic's limit
    async with Producer(bootstrap_servers=bootstrap, **producer_config(idempotent)) as producer:
        results = await producer.send_many(topic, [(None, v) for v in (*before, oversized, *after)], partition=0,
                                           raise_on_error=False)
        with pytest.raises(errors.RecordTooLargeError):        # alone, too
            await producer.send(topic, oversized, partition=0)
        last = await producer.send(topic, b"last", partition=0)
    failed = results[20]
    assert isinstance(failed, errors.MessageSizeTooLargeError) and isinstance(failed, errors.RecordTooLargeError)
    delivered = results[:20] + results[21:]
    assert [md.offset for md in delivered] == list(range(40)) and last.offset == 40   # type: ignore[union-attr]
    assert await read_values(bootstrap, topic, 41) == [*before, *after, b"last"]
