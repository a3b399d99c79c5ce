"""Scraping /metrics over HTTP during a produce run through FaultProxy: throttle and retry metrics move."""

from __future__ import annotations

import re
import urllib.request
import anyio
import pytest
from prometheus_client import CollectorRegistry

from akresil import Admin, NewTopic, Producer
from akresil.metrics import serve
from akresil.protocol.api import ApiKey
from akresil.testing import EmbeddedBroker, FaultProxy

pytestmark = pytest.mark.broker

REQUEST_TIMED_OUT = 7
NOT_LEADER_OR_FOLLOWER = 6


async def scrape(url: str) -> dict[str, float]:
    """Every sample of the text exposition as {'name{labels}': value}."""
    body = await anyio.to_thread.run_sync(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    samples: dict[str, float] = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            key, _, val = line.rpartition(" ")
            samples[key] = float(val)
    return samples


def pick(samples: dict[str, float], name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for key, val in samples.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if all(found.get(k) == v for k, v in labels.items()):
            total += val
    return total


async def test_throttle_and_retry_metrics_move_during_a_produce_run(broker: EmbeddedBroker) -> None:
    # the proxy runs on this test's event loop (an async fixture would run it on the fixture loop)
    async with FaultProxy(broker.bootstrap_servers, nodes=3) as proxy:
        await produce_and_scrape(proxy)


async def produce_and_scrape(proxy: FaultProxy) -> None:
    topic = "metrics-throttle"
    async with Admin(bootstrap_servers=proxy.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, 1)], ignore_existing=True)
    registry = CollectorRegistry()
    with serve(0, registry) as server:
        async with Producer(bootstrap_servers=proxy.bootstrap_servers, client_id="metrics-it", linger_ms=1,
                            retry_backoff_ms=20, metrics_registry=registry) as producer:
            await producer.send(topic, b"warm-up")
            before = await scrape(server.url)
            leader = proxy.leader(topic, 0)[0]
            assert pick(before, "akresil_throttle_seconds_count", client_id="metrics-it") == 0
            assert pick(before, "akresil_producer_batch_retries_total", client_id="metrics-it") == 0

            await proxy.athrottle(leader, 400)
            await proxy.afail_requests(ApiKey.PRODUCE, REQUEST_TIMED_OUT, count=1, node=leader)
            await proxy.afail_requests(ApiKey.PRODUCE, NOT_LEADER_OR_FOLLOWER, count=1, node=leader)
            sends = [producer.send(topic, b"v%d" % i) for i in range(10)]
            done: list[int] = []
            mute_seen = 0.0
            async with anyio.create_task_group() as tg:
                async def one(i: int) -> None:
                    md = await sends[i]
                    done.append(md.offset)
                for i in range(len(sends)):
                    tg.start_soon(one, i)
                # while the throttle's mute window is open, the gauge shows the time left
                with anyio.move_on_after(3):
                    while len(done) < len(sends):
                        mid = await scrape(server.url)
                        mute_seen = max(mute_seen, pick(mid, "akresil_throttle_mute_seconds",
                                                        client_id="metrics-it", node_id=str(leader)))
                        await anyio.sleep(0.02)
            after = await scrape(server.url)

    assert len(set(done)) == 10
    node = str(leader)
    assert pick(after, "akresil_throttle_seconds_count", client_id="metrics-it", node_id=node, api="Produce") >= 1
    assert pick(after, "akresil_throttle_seconds_sum", client_id="metrics-it", node_id=node) >= 0.4
    assert 0 < mute_seen <= 0.4
    retries = pick(after, "akresil_producer_batch_retries_total", client_id="metrics-it", topic=topic)
    assert retries >= 2
    assert pick(after, "akresil_producer_batch_retries_total", client_id="metrics-it",
                reason="RequestTimedOutError") >= 1
    assert pick(after, "akresil_producer_batch_retries_total", client_id="metrics-it",
                reason="NotLeaderOrFollowerError") >= 1
    assert pick(after, "akresil_backoff_seconds_count", client_id="metrics-it", source="retry") >= 1
    assert pick(after, "akresil_metadata_refresh_requests_total", client_id="metrics-it") >= 1
    assert pick(after, "akresil_producer_records_sent_total", client_id="metrics-it", topic=topic) == 11
    assert pick(after, "akresil_request_duration_seconds_count", client_id="metrics-it", api="Produce") >= 3
    assert pick(after, "akresil_connections", client_id="metrics-it") >= 1
