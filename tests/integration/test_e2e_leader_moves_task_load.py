"""Leader moves under the task-per-record idiom stay cheap: a regression guard for issue 21's good case.

On librdkafka's mock cluster (3 brokers, 6 partitions, partition *p* led by broker ``p % 3 + 1``), an open-loop load
of 1000 records/s, one task per record awaiting ``producer.send(...)`` to an explicit partition (round robin), while
every partition's leader moves to the next broker (``set_leader``: epoch + 1) every 0.5 s, 12 times.  The old
leader answers NOT_LEADER_OR_FOLLOWER with the KIP-951 CurrentLeader, so akresil retries on the new leader at once.

Asserted: every record is acknowledged, none twice and none lost (each partition's offsets are contiguous); the
hints did the work (accepted LEADER_HINT events for the moves, every retry of the topic's batches without a
backoff); and no record waited anywhere near what a missed hint costs per move (a Metadata round trip plus the
retry backoff, repeated move after move, piles up on an open-loop load): the worst latency from a record's
scheduled time stays under 1 s plus the event loop's measured lateness (``LoopLag``).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from akresil import Producer
from akresil.core import events
from akresil.core.events import RecordingHook
from akresil.testing.control import next_node

from ..harness.e2e import harness, unique_topic

pytestmark = pytest.mark.broker

PARTITIONS = 6
RATE = 1000                # records/s, open loop
MOVE_EVERY_S = 0.5
MOVES = 12
TICK_S = 0.005
#: far from the failure mode, far above what a loaded machine adds (plus the loop's measured lateness)
MAX_LATENCY_MS = 1000.0


async def test_leader_moves_under_a_task_per_record_load_follow_the_hints() -> None:
    hook = RecordingHook()
    async with harness("mock", None) as h:
        topic = unique_topic("moves")
        await h.create_topic(topic, PARTITIONS)
        # a new user's producer: the defaults (retry backoff 100 ms up to 1 s), linger 5 ms as in the benchmark
        async with Producer(bootstrap_servers=h.bootstrap_servers, linger_ms=5, hooks=[hook]) as producer:
            for p in range(PARTITIONS):                      # every broker connected and every leader known
                await producer.send(topic, b"warm-up", partition=p)
            hook.events.clear()
            leaders = {p: (await h.leader(topic, p))[0] for p in range(PARTITIONS)}

            async def move_all() -> int:
                for _ in range(MOVES):
                    await asyncio.sleep(MOVE_EVERY_S)
                    for p in range(PARTITIONS):
                        leaders[p] = next_node(h.node_ids, leaders[p])
                        await h.move_leader(topic, p, leaders[p])
                return MOVES

            latencies: list[float] = []

            async def one(partition: int, scheduled: float) -> tuple[int, int]:
                md = await producer.send(topic, b"x" * 100, partition=partition)
                latencies.append(time.monotonic() - scheduled)
                return md.partition, md.offset

            duration = MOVE_EVERY_S * (MOVES + 1)
            total = int(RATE * duration)
            tasks: list[asyncio.Task[tuple[int, int]]] = []
            mover = asyncio.create_task(move_all())
            start = time.monotonic()
            while len(tasks) < total:                       # record i is due at start + i / RATE
                due = min(int((time.monotonic() - start) * RATE) + 1, total)
                while len(tasks) < due:
                    i = len(tasks)
                    tasks.append(asyncio.create_task(one(i % PARTITIONS, start + i / RATE)))
                await asyncio.sleep(TICK_S)
            moves = await mover
            results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)

    failed = [r for r in results if isinstance(r, BaseException)]
    assert not failed, failed[:3]
    assert len(results) == total == len(latencies)
    # none lost, none twice: each partition's offsets after its warm-up record run on without a gap
    offsets: dict[int, list[int]] = {}
    for partition, offset in results:                      # type: ignore[misc]
        offsets.setdefault(partition, []).append(offset)
    assert sorted(offsets) == list(range(PARTITIONS))
    for partition, got in offsets.items():
        expected = len(range(partition, total, PARTITIONS))
        assert sorted(got) == list(range(1, expected + 1)), partition

    # the hints did the work: the moves were learned from Produce answers and every retry went at once
    hints = [e for e in hook.named(events.LEADER_HINT) if e["topic"] == topic and e["accepted"]]
    assert len(hints) >= moves, (len(hints), hook.named(events.LEADER_HINT)[:5])
    assert len({e["leader_epoch"] for e in hints}) >= moves // 2, hints[:5]
    retries = [e for e in hook.named(events.BATCH_RETRY) if e["topic"] == topic]
    assert retries, "no batch met a moved leader: the test did not exercise the moves"
    backed_off = [e for e in retries if not e["skip_backoff"]]
    assert not backed_off, (len(backed_off), len(retries), backed_off[:3])

    worst_ms = max(latencies) * 1000
    assert worst_ms < h.lag.slack_ms(MAX_LATENCY_MS), (worst_ms, h.lag.max_ms)
