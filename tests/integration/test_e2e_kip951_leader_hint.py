"""KIP-951 on the wire: a NOT_LEADER_OR_FOLLOWER answer carrying the new leader sends the retry there at once.

Metadata is made slow (every answer delayed 1.2 s) and retry_backoff_ms is 1000, so a client that waited for
Metadata or backed off could not retry within 800 ms (the backoff's floor); only the hint in the Produce
response allows it, and it typically retries within 150 ms (plus the event loop's measured lateness).
Stale metadata naming the old leader with the old epoch must not roll the client back afterwards.
"""

from __future__ import annotations

import anyio
import pytest

from akresil.core import events
from akresil.core.events import RecordingHook
from akresil.errors import NotLeaderOrFollowerError
from akresil.types import TopicPartition

from ..harness.e2e import METADATA, PRODUCE, fast_producer, harness, now_ms, unique_topic

pytestmark = [pytest.mark.broker, pytest.mark.parametrize("kind", ["proxy", "mock"])]

METADATA_DELAY_MS = 1200
BACKOFF_MS = 1000
BACKOFF_FLOOR_MS = BACKOFF_MS * 0.8     # KIP-580 jitter: no backed-off retry comes sooner
HINTED_RETRY_WITHIN_MS = 150


async def test_retry_goes_to_hinted_leader_without_metadata_or_backoff(kind: str, broker) -> None:
    async with harness(kind, broker) as h:
        topic = unique_topic("kip951")
        await h.create_topic(topic, 1)
        async with fast_producer(h.bootstrap_servers, retry_backoff_ms=BACKOFF_MS,
                                 retry_backoff_max_ms=1000) as producer:
            await producer.send(topic, b"warm-up", partition=0)
            await h.delay_metadata(METADATA_DELAY_MS)
            await h.move_leader(topic, 0, 2)

            start = now_ms()
            md = await producer.send(topic, b"moved", partition=0)
            elapsed = now_ms() - start

        assert md.offset == 1
        attempts = h.produce_requests(topic, 0, since_ms=start)
        assert [a.node for a in attempts] == [1, 2], attempts
        retry_gap = attempts[1].time_ms - attempts[0].time_ms
        assert retry_gap < min(h.lag.slack_ms(HINTED_RETRY_WITHIN_MS), BACKOFF_FLOOR_MS), (attempts, h.lag.max_ms)
        assert elapsed < BACKOFF_FLOOR_MS, elapsed
        # no Metadata answer can have arrived before the retry: each one took METADATA_DELAY_MS
        md_requests = h.requests(METADATA, since_ms=start)
        if md_requests:
            assert attempts[1].time_ms < md_requests[0].time_ms + METADATA_DELAY_MS
        if kind == "proxy":
            refused = h.proxy.responses(PRODUCE, node=1, since_ms=start,
                                        error_code=NotLeaderOrFollowerError.errno)
            assert refused and refused[0].hints and refused[0].hints[0].leader_id == 2
            assert all(r.time_ms > attempts[1].time_ms for r in h.proxy.responses(METADATA, since_ms=start))


async def test_stale_metadata_after_hint_does_not_roll_leader_back(kind: str, broker) -> None:
    hook = RecordingHook()
    async with harness(kind, broker) as h:
        topic = unique_topic("kip951-stale")
        await h.create_topic(topic, 1)
        async with fast_producer(h.bootstrap_servers, hooks=[hook]) as producer:
            await producer.send(topic, b"warm-up", partition=0)
            # the epoch the client knows now is what stale metadata will keep reporting
            old_leader, old_epoch = producer._cluster.metadata.snapshot.leader_of(TopicPartition(topic, 0))
            assert old_leader == 1
            await h.move_leader(topic, 0, 2, stale_for_s=5.0, stale_epoch=old_epoch)

            start = now_ms()
            await producer.send(topic, b"moved", partition=0)
            # the NOT_LEADER answer asked for a metadata refresh: wait until a stale answer was ignored
            with anyio.fail_after(3):
                while not [e for e in hook.named(events.STALE_METADATA_IGNORED) if e["topic"] == topic]:
                    await anyio.sleep(0.01)
            later = now_ms()
            mds = [await producer.send(topic, f"after-{i}".encode(), partition=0) for i in range(5)]

        assert [md.offset for md in mds] == [2, 3, 4, 5, 6]
        ignored = [e for e in hook.named(events.STALE_METADATA_IGNORED) if e["topic"] == topic]
        assert ignored[0]["received_epoch"] == old_epoch < ignored[0]["known_epoch"]
        assert h.requests(METADATA, since_ms=start), "no metadata refresh happened after the move"
        attempts = h.produce_requests(topic, 0, since_ms=start)
        assert [a.node for a in attempts[:2]] == [1, 2], attempts
        after = h.produce_requests(topic, 0, since_ms=later)
        assert len(after) == 5 and {a.node for a in after} == {2}, after
