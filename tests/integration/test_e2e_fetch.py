"""The consumer's fetch path on the wire: KIP-951 leader hints (both harnesses) and KIP-219 mutes (proxy).

The consumer is assigned one partition (no group) and long-polls with a short ``fetch_max_wait_ms``, so
Fetch requests flow continuously and their timing shows what the client waited for.
"""

from __future__ import annotations

import anyio
import pytest

from akresil import Consumer, TopicPartition
from akresil.errors import NotLeaderOrFollowerError
from akresil.testing import EmbeddedBroker

from ..harness.e2e import METADATA, fast_producer, harness, now_ms, proxy_harness, unique_topic

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]

FETCH = 1
MAX_WAIT_MS = 50
#: a client that waited for Metadata or backed off could not refetch from the new leader within 800 ms
METADATA_DELAY_MS = 1200
BACKOFF_MS = 1000
BACKOFF_FLOOR_MS = BACKOFF_MS * 0.8
THROTTLE_MS = 500


def consumer(bootstrap: str, client_id: str, **overrides: object) -> Consumer:
    config: dict[str, object] = dict(bootstrap_servers=bootstrap, client_id=client_id, auto_offset_reset="earliest",
                                     fetch_max_wait_ms=MAX_WAIT_MS, retry_backoff_ms=BACKOFF_MS,
                                     retry_backoff_max_ms=1000, request_timeout_ms=2000)
    config.update(overrides)
    return Consumer(**config)


async def read_until(c: Consumer, value: bytes, timeout_s: float = 3.0) -> list[bytes]:
    seen: list[bytes] = []
    with anyio.fail_after(timeout_s):
        while value not in seen:
            batches = await c.getmany(timeout_ms=200)
            seen += [r.value for recs in batches.values() for r in recs]
    return seen


@pytest.mark.parametrize("kind", ["proxy", "mock"])
async def test_fetch_follows_leader_hint_without_waiting_for_metadata(kind: str, broker: EmbeddedBroker) -> None:
    async with harness(kind, broker) as h:
        topic = unique_topic("fetch951")
        await h.create_topic(topic, 1)
        tp = TopicPartition(topic, 0)
        async with fast_producer(h.bootstrap_servers) as producer, \
                consumer(h.bootstrap_servers, "e2e-fetch951") as c:
            for i in range(3):
                await producer.send(topic, b"before-%d" % i, partition=0)
            c.assign([tp])
            assert await read_until(c, b"before-2") == [b"before-0", b"before-1", b"before-2"]

            await h.delay_metadata(METADATA_DELAY_MS)
            await h.move_leader(topic, 0, 2)
            start = now_ms()
            await producer.send(topic, b"after-move", partition=0)
            assert await read_until(c, b"after-move") == [b"after-move"]
            elapsed = now_ms() - start

        fetches = h.requests(FETCH, since_ms=start)
        first_new = next(i for i, r in enumerate(fetches) if r.node == 2)
        assert first_new > 0 and fetches[first_new - 1].node == 1, fetches
        # one long poll on the old leader at most, then straight to the new one: no backoff, no metadata wait
        # (typically within 150 ms plus the event loop's measured lateness; never as late as the backoff's floor)
        switch_gap = fetches[first_new].time_ms - fetches[first_new - 1].time_ms
        assert switch_gap < min(h.lag.slack_ms(MAX_WAIT_MS + 150), BACKOFF_FLOOR_MS), (fetches, h.lag.max_ms)
        md_requests = h.requests(METADATA, since_ms=start)
        if md_requests:
            assert fetches[first_new].time_ms < md_requests[0].time_ms + METADATA_DELAY_MS
        assert elapsed < BACKOFF_FLOOR_MS, elapsed
        if kind == "proxy":
            refused = h.proxy.responses(FETCH, node=1, since_ms=start, error_code=NotLeaderOrFollowerError.errno)
            assert refused and refused[0].hints[0].leader_id == 2
            assert fetches[first_new].time_ms - refused[0].time_ms < min(h.lag.slack_ms(150), BACKOFF_FLOOR_MS)


async def test_throttled_fetch_node_gets_nothing_inside_window(broker: EmbeddedBroker) -> None:
    async with proxy_harness(broker) as h:
        proxy = h.proxy
        topic = unique_topic("fetch219")
        await h.create_topic(topic, 1)
        cid = "e2e-fetch219"
        async with fast_producer(h.bootstrap_servers) as producer, consumer(h.bootstrap_servers, cid) as c:
            await producer.send(topic, b"first", partition=0)
            c.assign([TopicPartition(topic, 0)])
            await read_until(c, b"first")
            assert proxy.requests(FETCH, client_id=cid)[-1].api_version >= 8

            proxy.throttle(1, THROTTLE_MS, client_id=cid)
            start = now_ms()
            await anyio.sleep(0.2)
            await producer.send(topic, b"during-window", partition=0)
            got = await read_until(c, b"during-window")
            waited = now_ms() - start

        throttled = [r for r in proxy.responses(node=1, client_id=cid, since_ms=start)
                     if r.throttle_time_ms == THROTTLE_MS]
        assert len(throttled) == 1
        window_start = throttled[0].time_ms
        assert not proxy.requests(node=1, client_id=cid, in_throttle_window=True)
        after = proxy.requests(node=1, client_id=cid, since_ms=window_start)
        assert after and window_start + THROTTLE_MS - 2 <= after[0].time_ms <= \
            window_start + THROTTLE_MS + h.lag.slack_ms(60), (after[0].time_ms - window_start, h.lag.max_ms)
        assert got == [b"during-window"] and waited >= THROTTLE_MS - 20
