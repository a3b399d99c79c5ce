"""KIP-219 on the wire (FaultProxy only: librdkafka's mock cannot throttle).

A Produce v6+ response with throttle_time_ms > 0 means "the broker answered first and now mutes you": the
client must send that node nothing for the window and resume as soon as it ends.  Before v6 the broker
already held the response back for the throttle time, so muting again would double the penalty.
"""

from __future__ import annotations

import anyio
import pytest

from akresil.testing import EmbeddedBroker

from ..harness.e2e import PRODUCE, fast_producer, now_ms, proxy_harness, unique_topic

pytestmark = pytest.mark.broker

THROTTLE_MS = 500
RESUME_SLACK_MS = 150   # event-loop wake-up, plus the loop's measured lateness (``LoopLag``)


async def test_throttled_node_gets_nothing_inside_window_and_produce_resumes_right_after(
        broker: EmbeddedBroker) -> None:
    async with proxy_harness(broker) as h:
        proxy = h.proxy
        topic = unique_topic("kip219")
        await h.create_topic(topic, 1)
        async with fast_producer(h.bootstrap_servers) as producer:
            cid = producer.config.client_id
            await producer.send(topic, b"warm-up", partition=0)
            assert proxy.requests(PRODUCE, node=1, client_id=cid)[-1].api_version >= 6

            proxy.throttle(1, THROTTLE_MS, client_id=cid)
            start = now_ms()
            await producer.send(topic, b"throttled", partition=0)
            # keep offering work through the whole window: none of it may reach node 1 before the end
            futures = []
            while now_ms() - start < THROTTLE_MS + 100:
                futures.append(await producer.enqueue(topic, b"during", partition=0))
                await anyio.sleep(0.02)
            mds = [await f for f in futures]

        throttled = [r for r in proxy.responses(PRODUCE, node=1, client_id=cid, since_ms=start)
                     if r.throttle_time_ms == THROTTLE_MS]
        assert len(throttled) == 1, proxy.responses(PRODUCE, node=1, since_ms=start)
        window_start = throttled[0].time_ms
        window_end = window_start + THROTTLE_MS
        assert not proxy.requests(node=1, client_id=cid, in_throttle_window=True)
        after = proxy.requests(node=1, client_id=cid, since_ms=window_start)
        assert after, "no request after the throttle window"
        first = after[0].time_ms
        # the proxy stamps the window before the client reads the response: the client can only be later
        assert window_end - 2 <= first <= window_end + h.lag.slack_ms(RESUME_SLACK_MS), \
            (first - window_start, h.lag.max_ms)
        assert [md.offset for md in mds] == sorted(md.offset for md in mds)
        assert len({md.offset for md in mds}) == len(mds) >= 5


async def test_pre_kip219_produce_version_is_not_muted_again(broker: EmbeddedBroker) -> None:
    """Produce v5: the proxy delays the throttled response itself; the next request follows at once."""
    async with proxy_harness(broker) as h:
        proxy = h.proxy
        proxy.cap_version(PRODUCE, 5)
        topic = unique_topic("kip219-v5")
        await h.create_topic(topic, 1)
        async with fast_producer(h.bootstrap_servers, request_timeout_ms=2000) as producer:
            cid = producer.config.client_id
            await producer.send(topic, b"warm-up", partition=0)
            assert {r.api_version for r in proxy.requests(PRODUCE, client_id=cid)} == {5}

            proxy.throttle(1, THROTTLE_MS, client_id=cid)
            start = now_ms()
            await producer.send(topic, b"throttled", partition=0)
            answered = now_ms()
            assert answered - start >= THROTTLE_MS - 2        # the broker side held the response back
            await producer.send(topic, b"next", partition=0)

        throttled = [r for r in proxy.responses(PRODUCE, node=1, client_id=cid, since_ms=start)
                     if r.throttle_time_ms == THROTTLE_MS]
        assert len(throttled) == 1
        nxt = proxy.requests(PRODUCE, node=1, client_id=cid, since_ms=throttled[0].time_ms)
        assert nxt, "the request after the delayed response never came"
        # a client that muted again would wait another THROTTLE_MS here
        assert nxt[0].time_ms - throttled[0].time_ms < 100, nxt[0].time_ms - throttled[0].time_ms
