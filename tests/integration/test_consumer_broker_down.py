"""A consumer's live partitions keep flowing while one broker is down (issue 21, item 1, consumer side).

librdkafka's mock, 3 brokers, 6 partitions (partition p led by broker p % 3 + 1). One broker (the group's
coordinator or another) fails for several seconds while records go to the partitions the other two lead; the
consumers must read them during the outage, with no stall anywhere near the outage's length: a fetch to the failed
broker (refused and backing off, or hanging until its request timeout) must not hold up the fetches from the live
ones. Mutation-checked: fetches serialized behind one lock fail the "hung" case.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable

import anyio
import pytest

from akresil import Consumer, TopicPartition
from akresil.testing.rdkafka_mock import MockCluster

from ..harness.e2e import (METADATA, NODES, MockHarness, default_leader, fast_producer, loop_lag, mock_harness,
                           unique_topic)

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]

PARTITIONS = 6
OUTAGE_S = 5.0
PRODUCE_EVERY_S = 0.02
FETCH_MAX_WAIT_MS = 100
#: the mock holds a Fetch without data for fetch_max_wait_ms (it does not answer early when data arrives), so
#: ~110 ms gaps are normal with or without a fault; a 1 s stall (the reconnect backoff cap) would already fail
MAX_GAP_MS = 800.0
#: time from the broker's return until its partitions are read again: a metadata refresh (retry_backoff_ms) and a
#: connect, ~0.2-0.3 s measured ("down"); a Fetch written to the hung broker just before it recovers still waits
#: for its request timeout (2 s + fetch_max_wait_ms: answers on a connection come in order)
RECOVERY_S = {"down": 1.0, "hung": 3.5}
FAULTS: dict[str, tuple[Callable[[MockCluster, int], None], Callable[[MockCluster, int], None]]] = {
    # connections refused
    "down": (lambda mock, node: mock.broker_set_down(node), lambda mock, node: mock.broker_set_up(node)),
    # connections accepted, every answer 10 s late: requests to it end at their request timeout
    "hung": (lambda mock, node: mock.broker_set_rtt(node, 10_000), lambda mock, node: mock.broker_set_rtt(node, 0)),
}


def consumer(bootstrap: str, name: str, topic: str | None = None) -> Consumer:
    group = dict(group_id=f"g-{topic}", session_timeout_ms=6000, heartbeat_interval_ms=300,
                 enable_auto_commit=False) if topic else {}
    return Consumer(*([topic] if topic else []), bootstrap_servers=bootstrap, client_id=name,
                    auto_offset_reset="earliest", fetch_max_wait_ms=FETCH_MAX_WAIT_MS, request_timeout_ms=2000,
                    retry_backoff_ms=100, retry_backoff_max_ms=1000, **group)


@contextlib.asynccontextmanager
async def consumers(h: MockHarness, topic: str, mode: str) -> AsyncIterator[list[Consumer]]:
    if mode == "assigned":
        async with consumer(h.bootstrap_servers, "assigned") as c:
            c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            yield [c]
    else:
        h.mock.let_followers_sync_first()
        async with consumer(h.bootstrap_servers, "m1", topic) as c1, consumer(h.bootstrap_servers, "m2", topic) as c2:
            yield [c1, c2]


def coordinator_of(c: Consumer) -> int | None:
    group = c._group   # the test needs to fail a broker that is not the coordinator
    return None if group is None else group.coordinator.node


@pytest.mark.parametrize(("mode", "fault"), [("assigned", "down"), ("assigned", "hung"), ("group", "down"),
                                             ("group", "coordinator-down")])
async def test_live_partitions_keep_flowing_while_a_broker_fails(mode: str, fault: str) -> None:
    """``coordinator-down``: the group's coordinator itself fails; the members keep fetching what they hold while
    they look for it (as Java's consumer does), heartbeats failing meanwhile."""
    fail_coordinator = fault == "coordinator-down"
    fault = "down" if fail_coordinator else fault
    fail, heal = FAULTS[fault]
    with mock_harness() as h:
        async with loop_lag() as h.lag:
            topic = unique_topic("consumer-down")
            await h.create_topic(topic, PARTITIONS)
            fetched: list[tuple[float, int, bytes]] = []    # (monotonic s, partition, value)
            async with fast_producer(h.bootstrap_servers, delivery_timeout_ms=30_000) as producer, \
                    consumers(h, topic, mode) as members:
                for p in range(PARTITIONS):
                    await producer.send(topic, b"warm-%d" % p, partition=p)

                async def consume(c: Consumer) -> None:
                    while True:
                        batches = await c.getmany(timeout_ms=50)
                        t = time.monotonic()
                        fetched.extend((t, tp.partition, r.value) for tp, recs in batches.items() for r in recs)

                async with anyio.create_task_group() as tg:
                    for c in members:
                        tg.start_soon(consume, c)
                    with anyio.fail_after(15):
                        while {p for _, p, _ in fetched} != set(range(PARTITIONS)):
                            await anyio.sleep(0.05)
                    if mode == "group":
                        held = [c.assignment() for c in members]
                        assert all(held) and not held[0] & held[1], held
                    coordinators = {coordinator_of(c) for c in members} - {None}
                    if fail_coordinator:
                        assert len(coordinators) == 1, coordinators
                        down = coordinators.pop()
                    else:
                        down = next(n for n in NODES if n not in coordinators)
                    live = [p for p in range(PARTITIONS) if default_leader(p) != down]
                    await anyio.to_thread.run_sync(fail, h.mock, down)
                    down_at = time.monotonic()
                    sent = await produce_live(producer, topic, live, down_at + OUTAGE_S)
                    # everything produced to the live partitions is read while the broker is still failed
                    with anyio.fail_after(3):
                        while not read_all(fetched, sent):
                            await anyio.sleep(0.05)
                    await anyio.to_thread.run_sync(heal, h.mock, down)
                    # and the returned broker's partitions are read again soon (reconnect and fetch backoff <= 1 s)
                    back = [(p, b"back-%d" % p) for p in range(PARTITIONS) if p not in live]
                    healed_at = time.monotonic()
                    for p, value in back:
                        await producer.send(topic, value, partition=p)
                    acked_s = time.monotonic() - healed_at
                    with anyio.fail_after(8):
                        while not read_all(fetched, back):
                            await anyio.sleep(0.05)
                    recovered_s = time.monotonic() - healed_at
                    metadata_requests = sum(1 for r in h.mock.get_requests() if r.api_key == METADATA
                                            and down_at <= r.timestamp_us / 1e6 <= down_at + OUTAGE_S)
                    tg.cancel_scope.cancel()

    during = sorted(t for t, p, _ in fetched if down_at <= t <= down_at + OUTAGE_S and p in live)
    assert during, f"no live record was read while broker {down} was {fault}"
    longest = max((b - a) * 1000.0 for a, b in zip([down_at] + during, during))
    assert longest < MAX_GAP_MS + h.lag.max_ms, (
        f"longest gap between live records while broker {down} was {fault}: {longest:.0f} ms "
        f"(loop lag {h.lag.max_ms:.0f} ms)")
    assert {p for t, p, _ in fetched if down_at <= t <= down_at + OUTAGE_S} >= set(live)
    assert recovered_s < RECOVERY_S[fault] + h.lag.max_ms / 1000.0, (
        f"broker {down}'s partitions were read again only {recovered_s:.2f} s after it returned")
    print(f"{mode}/{fault}: broker {down}, longest live gap {longest:.0f} ms, its partitions read again "
          f"{recovered_s:.2f} s after it returned (produced and acknowledged after {acked_s:.2f} s); "
          f"{metadata_requests} Metadata requests in the {OUTAGE_S:.0f} s outage")


async def produce_live(producer: object, topic: str, live: list[int], until: float) -> list[tuple[int, bytes]]:
    sent: list[tuple[int, bytes]] = []
    i = 0
    while time.monotonic() < until:
        for p in live:
            value = b"live-%d-%d" % (p, i)
            await producer.enqueue(topic, value, partition=p)  # type: ignore[attr-defined]
            sent.append((p, value))
        i += 1
        await anyio.sleep(PRODUCE_EVERY_S)
    return sent


def read_all(fetched: list[tuple[float, int, bytes]], sent: list[tuple[int, bytes]]) -> bool:
    got = {(p, v) for _, p, v in fetched}
    return all(item in got for item in sent)
