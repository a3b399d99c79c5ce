"""KIP-951 on real leader moves (reassignment + preferred leader election, replication factor 3), the consumer's
side: a Fetch carrying the old leader epoch gets FENCED_LEADER_EPOCH or NOT_LEADER_OR_FOLLOWER, both with the hint.
The consumer runs with ``retry_backoff_ms`` = 2000 (max 2000), so a refetch that waited for a backoff or for
Metadata would cost seconds: what it reads across the moves must stay far behind that.  (The producer's hinted
retry runs on Kafka, the mock and the proxy: tests/capabilities/test_leader_moves.py.)

Each test runs under asyncio and trio (``anyio.run``, no help from pytest-asyncio).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import anyio
import pytest

from akresil import Consumer, Producer, TopicPartition
from akresil.core import events
from akresil.errors import FencedLeaderEpochError, NotLeaderOrFollowerError
from akresil.net.clock import monotonic_ms
from akresil.protocol.api import ApiKey
from akresil.testing import KafkaCluster
from akresil.testing.control import next_node

from .resilience import TimedHook, loop_lag

pytestmark = pytest.mark.parametrize("backend", ["asyncio", "trio"])

BACKOFF_MS = 2000
BACKOFF_FLOOR_MS = BACKOFF_MS * 0.8      # KIP-580 jitter: nothing backed off comes sooner
NOT_LEADER = NotLeaderOrFollowerError.errno
FENCED = FencedLeaderEpochError.errno
SLOW_PATH: dict[str, Any] = dict(retry_backoff_ms=BACKOFF_MS, retry_backoff_max_ms=BACKOFF_MS)


def run(backend: str, scenario: Callable[[], Awaitable[None]]) -> None:
    anyio.run(scenario, backend=backend)


def test_consumer_lag_behind_acks_stays_low_across_leader_moves(kafka_cluster: KafkaCluster,
                                                               unique: Callable[[str], str], backend: str) -> None:
    """What the user sees: each record's time from its acknowledgement to ``getmany`` returning it."""
    acked: dict[bytes, float] = {}
    failed: list[BaseException] = []
    read: dict[bytes, float] = {}
    producer_hook, consumer_hook = TimedHook(), TimedHook()

    async def scenario() -> None:
        topic = await kafka_cluster.create_topic(unique("kip951-c"), partitions=1, replication_factor=3)
        tp = TopicPartition(topic, 0)
        async with loop_lag() as lag, \
                Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, linger_ms=0, hooks=[producer_hook],
                         client_id=unique("kip951-cp"), **SLOW_PATH) as producer, \
                Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers, client_id=unique("kip951-c"),
                         auto_offset_reset="earliest", fetch_max_wait_ms=500, hooks=[consumer_hook],
                         **SLOW_PATH) as consumer:
            consumer.assign([tp])
            stop, flushed = anyio.Event(), anyio.Event()

            def on_delivery(value: bytes) -> Callable[[Any, BaseException | None], None]:
                def done(md: Any, error: BaseException | None) -> None:
                    if error is not None:
                        failed.append(error)
                    else:
                        acked[value] = monotonic_ms()
                return done

            async def produce() -> None:
                i = 0
                while not stop.is_set():
                    await producer.enqueue(topic, b"%06d" % i, partition=0, on_delivery=on_delivery(b"%06d" % i))
                    i += 1
                    await anyio.sleep(0.02)
                await producer.flush()
                flushed.set()

            async def consume() -> None:
                while True:
                    for records in (await consumer.getmany(timeout_ms=1000)).values():
                        now = monotonic_ms()
                        for r in records:
                            read.setdefault(r.value, now)

            async with anyio.create_task_group() as tg:
                tg.start_soon(produce)
                tg.start_soon(consume)
                with anyio.fail_after(20):
                    while len(read) < 25:
                        await anyio.sleep(0.05)
                leader, _ = await kafka_cluster.leader(topic, 0)
                for _ in range(2):
                    leader = next_node(kafka_cluster.node_ids, leader)
                    await kafka_cluster.move_leader(topic, 0, leader)
                    await anyio.sleep(1.0)
                stop.set()
                with anyio.fail_after(20):
                    await flushed.wait()
                    while not set(acked) <= set(read):
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
            slack = lag.slack_ms(500)

        assert not failed and set(read) == set(acked), failed
        lags = sorted(read[v] - acked[v] for v in acked)
        # a refetch that waited for Metadata or a backoff would hold the records after the move >= 1.6 s
        assert lags[-1] < min(slack, BACKOFF_FLOOR_MS), (lags[-5:], slack)
        # the old leaders told the consumer where the partition went, and it took their word at once
        # (the consumer's Fetch answers are read by ``fetch_codec``: entries are FetchedPartition tuples)
        refusals = [(f["node_id"], p.error_code, p.current_leader, f["response"].get("node_endpoints"))
                    for _, f in consumer_hook.named(events.RESPONSE_RECEIVED, api_key=ApiKey.FETCH)
                    for t in f["response"]["responses"] for p in t["partitions"]
                    if p.error_code in (NOT_LEADER, FENCED)]
        hints = [f for _, f in consumer_hook.named(events.LEADER_HINT, topic=topic)]
        assert refusals and any(h["accepted"] for h in hints), (hints, refusals)
        assert all(hint and hint[0] >= 0 for _, _, hint, _ in refusals), refusals   # (leader_id, leader_epoch)

    run(backend, scenario)
