"""A consumer pays nothing for a stale NOT_LEADER_OR_FOLLOWER once its metadata already names the new leader.

Issue 28, on librdkafka's mock (3 brokers, one partition with 3 replicas): a producer writes a record every ~2 ms
while the partition's leader moves; the consumer has ``retry_backoff_ms=4000``. The interleaving that cost a full
backoff: a Fetch reaches the old leader after the move; before its NOT_LEADER_OR_FOLLOWER answer arrives, a
Metadata answer names the new leader (epoch + 1); the answer's hint then only repeats what the cache knows, so it
is not accepted, and the partition backed off (3.2-4.8 s here) for a leader it already knew.

The test makes that interleaving happen instead of waiting for luck. Per move: the old leader's next Fetch (with
records) is held ``HOLD_MS`` so that the Fetch after it surely reaches the old leader after the move; once the
mock's request log shows that one, the test assigns one more partition of a new topic, which makes the consumer
ask for Metadata at once (to an idle node: ``end_offsets`` connected it to every node beforehand). The mock holds
an answer without records, an error answer too, for ``fetch_max_wait_ms``, so the Metadata answer lands first.
Should the machine be too slow for that, the next move tries again; one move must produce the stale answer, as
the client's hooks see it: a Fetch error from the old leader read while the cache already named the new one.

What the user sees is asserted: each record's lag from its producer acknowledgement to the consumer's
``getmany`` returning it, for the records acknowledged from the start of that move until the consumer caught up
after it, stays well under the configured retry backoff (half of it, plus the event loop's measured lateness).
The mock's holds (``HOLD_MS`` + ``fetch_max_wait_ms``) are part of it. Before the fix the stale answer added one
backoff to that lag.

It runs with leader hints (Fetch v16+: the hint repeats the new leader) and without (Fetch capped at v11: no
``CurrentLeader``): the client relies on its cache, not on the hint's content. No leader responses are pushed
(``push_leader_response``): the mock also writes those into Fetch hints, which no Kafka broker does
(docs/brokers.md), so the hints here are always the partition's real leader.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from akresil import Consumer, Producer
from akresil.core import events
from akresil.errors import NotLeaderOrFollowerError
from akresil.protocol.api import ApiKey
from akresil.types import TopicPartition

from ..harness.e2e import MockHarness, harness, unique_topic

pytestmark = pytest.mark.broker

RETRY_BACKOFF_MS = 4000
FETCH_MAX_WAIT_MS = 300          # also how long the mock holds the stale error answer
HOLD_MS = 200                    # the old leader's last answer with records before the move is held this long
MOVES = 4                        # at most: stop after the first move that produced the stale answer
PRODUCE_EVERY_S = 0.002
FETCH = int(ApiKey.FETCH)


class LeaderErrors:
    """Hook: every Fetch answer with NOT_LEADER_OR_FOLLOWER for ``tp``, with the leader the consumer's cache named
    when it was read."""

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.consumer: Consumer[bytes, bytes] | None = None
        self.seen: list[tuple[int, tuple[int, int] | None]] = []    # (answering node, cached leader then)

    def on_event(self, name: str, fields: dict[str, Any]) -> None:
        if name != events.RESPONSE_RECEIVED or fields.get("api_key") != ApiKey.FETCH or self.consumer is None:
            return
        # the consumer's Fetch answers are read by ``fetch_codec``: partition entries are FetchedPartition tuples
        codes = [p.error_code for t in (fields["response"].get("responses") or ())
                 for p in t.get("partitions") or () if p.partition_index == self.tp.partition]
        if NotLeaderOrFollowerError.errno in codes:
            cached = self.consumer._cluster.metadata.snapshot.leader_of(self.tp)   # noqa: SLF001
            self.seen.append((fields["node_id"], cached))

    def answered_by(self, node: int) -> bool:
        return any(answering == node for answering, _ in self.seen)

    def stale_from(self, node: int) -> bool:
        return any(answering == node and cached is not None and cached[0] != node
                   for answering, cached in self.seen)


@pytest.mark.parametrize("hints", [True, False], ids=["hint", "no-hint"])
async def test_stale_not_leader_after_metadata_moved_the_leader_costs_no_backoff(hints: bool) -> None:
    async with harness("mock", None) as h:
        assert isinstance(h, MockHarness)
        mock = h.mock

        async def call(fn: Any, *args: Any) -> Any:
            return await asyncio.to_thread(fn, *args)     # the mock's calls may block: keep the clients running

        if not hints:
            await call(mock.set_api_version, FETCH, 4, 11)     # no CurrentLeader in Fetch answers
        topic, probe = unique_topic("stale-leader"), unique_topic("probe")
        await call(mock.create_topic, topic, 1, 3)
        await call(mock.set_leader, topic, 0, 1)
        await call(mock.create_topic, probe, 3, 1)
        for p in range(3):
            await call(mock.set_leader, probe, p, p + 1)
        side_topics = [unique_topic("side") for _ in range(MOVES)]
        for side in side_topics:
            await call(mock.create_topic, side, 1, 1)
        tp = TopicPartition(topic, 0)
        hook = LeaderErrors(tp)
        acked: dict[int, float] = {}
        received: dict[int, float] = {}
        windows: list[tuple[int, int, int, int]] = []    # (old leader, new leader, first offset, last offset)
        async with Producer(bootstrap_servers=h.bootstrap_servers, linger_ms=0) as producer, \
                Consumer(bootstrap_servers=h.bootstrap_servers, auto_offset_reset="earliest",
                         retry_backoff_ms=RETRY_BACKOFF_MS, retry_backoff_max_ms=2 * RETRY_BACKOFF_MS,
                         fetch_max_wait_ms=FETCH_MAX_WAIT_MS, hooks=[hook]) as consumer:
            hook.consumer = consumer
            # a connection to every node, so the Metadata request below need not queue behind the held Fetch
            await consumer.end_offsets([TopicPartition(probe, p) for p in range(3)])
            consumer.assign([tp])
            producing = True

            async def produce() -> None:
                while producing:
                    md = await producer.send(topic, b"x", partition=0)
                    acked[md.offset] = time.monotonic()
                    await asyncio.sleep(PRODUCE_EVERY_S)

            async def consume() -> None:
                while True:
                    batch = await consumer.getmany(timeout_ms=200)
                    now = time.monotonic()
                    for records in batch.values():
                        for r in records:
                            received.setdefault(r.offset, now)

            async def caught_up() -> int:
                """Wait until the consumer has every record acknowledged so far; returns the last offset."""
                last = max(acked)
                async with asyncio.timeout(30):
                    while last not in received:
                        await asyncio.sleep(0.02)
                return last

            producer_task = asyncio.create_task(produce())
            consumer_task = asyncio.create_task(consume())
            try:
                async with asyncio.timeout(30):
                    while len(received) < 200:
                        await asyncio.sleep(0.05)
                leader = 1
                assigned = [tp]
                for side in side_topics:
                    first = await caught_up() + 1
                    old, leader = leader, leader % 3 + 1
                    await call(mock.push_request_errors_with_rtt, old, FETCH, [(0, HOLD_MS)])
                    async with asyncio.timeout(30):       # the held Fetch has reached the old leader
                        while await call(mock.broker_error_stack_count, old, FETCH):
                            await asyncio.sleep(0.002)
                    await call(mock.clear_requests)
                    await call(mock.set_leader, topic, 0, leader)
                    moved_us = time.monotonic_ns() // 1000
                    # the old leader has received a Fetch after the move: its answer will be stale
                    fetch_after_move = False
                    deadline = time.monotonic() + 3.0
                    while not fetch_after_move and time.monotonic() < deadline:
                        requests = await call(mock.get_requests)
                        fetch_after_move = any(r.broker_id == old and r.api_key == FETCH
                                               and r.timestamp_us > moved_us for r in requests)
                        if not fetch_after_move:
                            await asyncio.sleep(0.002)
                    if fetch_after_move:
                        # a new topic: the consumer asks for Metadata at once, and it names the new leader
                        assigned.append(TopicPartition(side, 0))
                        consumer.assign(assigned)
                    async with asyncio.timeout(30):
                        while not hook.answered_by(old):
                            await asyncio.sleep(0.01)
                    windows.append((old, leader, first, await caught_up()))
                    if hook.stale_from(old):
                        break
            finally:
                producing = False
                consumer_task.cancel()
                producer_task.cancel()
                await asyncio.gather(consumer_task, producer_task, return_exceptions=True)

    stale = [w for w in windows if hook.stale_from(w[0])]
    assert stale, f"no stale NOT_LEADER_OR_FOLLOWER in {len(windows)} moves: {hook.seen}"
    old, new, first, last = stale[0]
    lags = {offset: (received[offset] - acked[offset]) * 1000 for offset in range(first, last + 1)}
    worst = max(lags, key=lags.__getitem__)
    limit = h.lag.slack_ms(RETRY_BACKOFF_MS / 2)
    assert lags[worst] < limit, (
        f"leader {old} -> {new}: offset {worst} reached the application {lags[worst]:.0f} ms after its "
        f"acknowledgement (limit {limit:.0f} ms, retry backoff {RETRY_BACKOFF_MS} ms)", hook.seen)
