"""KIP-951 on real leader moves (reassignment + preferred leader election, replication factor 3).

Apache Kafka (3.7+) answers a Produce for a partition the broker no longer leads with NOT_LEADER_OR_FOLLOWER and
the new leader in ``CurrentLeader`` (plus its address in ``NodeEndpoints``); a Fetch carrying the old leader
epoch gets FENCED_LEADER_EPOCH or NOT_LEADER_OR_FOLLOWER, both with the hint.  The clients here run with
``retry_backoff_ms`` = 2000 (max 2000), so a retry or refetch that waited for a backoff or for Metadata (asked
after a retry backoff too) would cost seconds: the producer's retry must go to the new leader without a backoff
and before any Metadata answer, and what a consumer reads across the moves must stay far behind that.

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

from .resilience import TimedHook, loop_lag

pytestmark = pytest.mark.parametrize("backend", ["asyncio", "trio"])

BACKOFF_MS = 2000
BACKOFF_FLOOR_MS = BACKOFF_MS * 0.8      # KIP-580 jitter: nothing backed off comes sooner
NOT_LEADER = NotLeaderOrFollowerError.errno
FENCED = FencedLeaderEpochError.errno
SLOW_PATH: dict[str, Any] = dict(retry_backoff_ms=BACKOFF_MS, retry_backoff_max_ms=BACKOFF_MS)


def run(backend: str, scenario: Callable[[], Awaitable[None]]) -> None:
    anyio.run(scenario, backend=backend)


def next_broker(cluster: KafkaCluster, node: int) -> int:
    ids = cluster.broker_ids
    return ids[(ids.index(node) + 1) % len(ids)]


def produce_answers(hook: TimedHook, mark: int, topic: str) -> list[tuple[float, int, dict[str, Any], Any]]:
    """(time, node, partition answer, node_endpoints) of each Produce answer for ``topic`` after ``mark``."""
    out = []
    for t, f in hook.since(mark, events.RESPONSE_RECEIVED, api_key=ApiKey.PRODUCE):
        for tr in f["response"]["responses"]:
            if tr["name"] == topic:
                out += [(t, f["node_id"], p, f["response"].get("node_endpoints")) for p in tr["partition_responses"]]
    return out


def test_produce_retry_goes_to_the_hinted_leader_at_once(kafka_cluster: KafkaCluster, unique: Callable[[str], str],
                                                         backend: str) -> None:
    async def scenario() -> None:
        topic = await kafka_cluster.create_topic(unique("kip951-p"), partitions=1, replication_factor=3)
        hook = TimedHook()
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, linger_ms=0,
                            client_id=unique("kip951-p"), hooks=[hook], **SLOW_PATH) as producer:
            await producer.send(topic, b"warm-up", partition=0)
            leader, _ = await kafka_cluster.leader(topic, 0)
            for move in range(2):
                target = next_broker(kafka_cluster, leader)
                epoch = await kafka_cluster.move_leader(topic, 0, target)
                mark = hook.mark()
                md = await producer.send(topic, b"moved-%d" % move, partition=0)
                assert md.offset == move + 1
                check_hinted_retry(hook, mark, topic, old=leader, new=target, epoch=epoch)
                leader = target
                # the refusal also asked for Metadata (after a retry backoff): let it land before the next
                # move, or it could tell the producer about that move before any Produce does
                with anyio.fail_after(BACKOFF_MS * 1.2 / 1000 + 10):
                    while not hook.since(mark, events.METADATA_REFRESH):
                        await anyio.sleep(0.05)

    run(backend, scenario)


def check_hinted_retry(hook: TimedHook, mark: int, topic: str, *, old: int, new: int, epoch: int) -> None:
    sent = hook.since(mark, events.BATCH_SENT, topic=topic)
    assert [(f["node_id"], f["attempt"]) for _, f in sent] == [(old, 0), (new, 1)], sent   # attempts before
    answers = produce_answers(hook, mark, topic)
    assert [(node, p["error_code"]) for _, node, p, _ in answers] == [(old, NOT_LEADER), (new, 0)], answers
    refused_at, _, refusal, endpoints = answers[0]
    # what Apache Kafka sends: the new leader and its epoch, and the new leader's address
    assert refusal["current_leader"] == {"leader_id": new, "leader_epoch": epoch}, refusal
    assert new in {e["node_id"] for e in endpoints or ()}, endpoints
    # the hint advanced the client's metadata (no Metadata answer had told it yet) and the retry skipped the
    # backoff: it went to the new leader straight from the refusal
    hints = hook.since(mark, events.LEADER_HINT, topic=topic)
    assert [(f["accepted"], f["reason"], f["leader_id"], f["leader_epoch"]) for _, f in hints] == \
        [(True, "advanced", new, epoch)], hints
    retries = hook.since(mark, events.BATCH_RETRY, topic=topic)
    assert len(retries) == 1 and retries[0][1]["skip_backoff"] and retries[0][1]["backoff_ms"] <= 0, retries
    assert refused_at <= hints[0][0] <= retries[0][0] <= sent[1][0]


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
                    leader = next_broker(kafka_cluster, leader)
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
        refusals = [(f["node_id"], p["error_code"], p.get("current_leader"), f["response"].get("node_endpoints"))
                    for _, f in consumer_hook.named(events.RESPONSE_RECEIVED, api_key=ApiKey.FETCH)
                    for t in f["response"]["responses"] for p in t["partitions"]
                    if p["error_code"] in (NOT_LEADER, FENCED)]
        hints = [f for _, f in consumer_hook.named(events.LEADER_HINT, topic=topic)]
        assert refusals and any(h["accepted"] for h in hints), (hints, refusals)
        assert all(hint and hint["leader_id"] >= 0 for _, _, hint, _ in refusals), refusals

    run(backend, scenario)
