"""The consumer-group metrics docs/metrics.md documents, scraped from ``/metrics`` after real rebalances on Apache
Kafka: every documented consumer series has samples, the assigned-partitions gauge is the assignment, and the lag
gauge keeps no series for a partition the member gave up (issue 32: nothing emitted the rebalance events once, so
four of these series were empty)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Any, Callable

import anyio
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from akresil import Consumer, Producer, ShareConsumer, TopicPartition, errors
from akresil.metrics import serve
from akresil.testing import KafkaCluster

from ..harness.groups import wait_until
from .conftest import TopicMaker

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
FAST = dict(fetch_max_wait_ms=100, retry_backoff_ms=50, auto_offset_reset="earliest", request_timeout_ms=15_000)
#: a member the coordinator refuses, so that the failure counter has a sample: the classic protocol refuses a
#: session timeout under group.min.session.timeout.ms (6 s), KIP-848 a server assignor it does not have
REFUSED = {"classic": dict(session_timeout_ms=1_000, heartbeat_interval_ms=300),
           "consumer": dict(group_remote_assignor="no-such-assignor")}
REFUSAL = {"classic": "InvalidSessionTimeoutError", "consumer": "UnsupportedAssignorError"}


def documented_consumer_series() -> list[str]:
    """The series of docs/metrics.md's Consumer table."""
    section = DOC.read_text(encoding="utf-8").split("\n## Consumer\n", 1)[1].split("\n## ", 1)[0]
    names = re.findall(r"^\| `(akresil_consumer_\w+)` \|", section, flags=re.M)
    assert len(names) >= 7, names
    return names


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``{sample name: [(labels, value)]}`` from one ``/metrics`` scrape."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def of(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, client: str) -> list[tuple[dict[str, str], float]]:
    return [(labels, value) for labels, value in samples.get(name, []) if labels.get("client_id") == client]


async def produce(bootstrap: str, topic: str) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=2) as producer:
        for p in range(4):
            await producer.send_many(topic, [(None, b"%d" % i) for i in range(20)], partition=p)


async def poll(consumers: list[Consumer[Any, Any]], stop: Callable[[], bool], seen: dict[str, int]) -> None:
    while not stop():
        for c in consumers:
            got = await c.getmany(timeout_ms=50)
            seen[c.config.client_id] = seen.get(c.config.client_id, 0) + sum(map(len, got.values()))


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_every_documented_consumer_series_after_a_two_member_rebalance(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str], protocol: str) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group = await make_topic(partitions=4), unique("g")
    everything = {TopicPartition(topic, p) for p in range(4)}
    await produce(bootstrap, topic)
    registry = CollectorRegistry()
    cfg: dict[str, Any] = dict(bootstrap_servers=bootstrap, group_id=group, group_protocol=protocol,
                               metrics_registry=registry, **FAST)
    if protocol == "classic":
        cfg.update(session_timeout_ms=6_000, heartbeat_interval_ms=500)
    seen: dict[str, int] = {}
    with serve(0, registry) as server, anyio.fail_after(120):
        async with Consumer(topic, client_id="a", **cfg) as a:
            await poll([a], lambda: a.assignment() == everything and seen.get("a", 0) >= 20, seen)
            async with Consumer(topic, client_id="b", **cfg) as b:
                # a reads on while b joins: the rebalance revokes (eager: all, KIP-848: what moves) and assigns
                await poll([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, seen)
                # records after the split: each member's lag series are for what it owns now
                before = dict(seen)
                await produce(bootstrap, topic)
                await poll([a, b], lambda: all(seen.get(c, 0) > before.get(c, 0) for c in ("a", "b")), seen)
                refused_cfg = {**cfg, **REFUSED[protocol]}
                async with Consumer(topic, client_id="refused", **refused_cfg) as refused:
                    with pytest.raises(errors.KafkaError) as caught:
                        await poll([refused], lambda: False, seen)
                    assert type(caught.value).__name__ == REFUSAL[protocol]
                samples = await anyio.to_thread.run_sync(scrape, server.url)
                owned = {"a": a.assignment(), "b": b.assignment()}
    for name in documented_consumer_series():
        found = samples.get(name) or samples.get(name + "_count")
        assert found, f"{name}: documented in docs/metrics.md, no sample after a rebalance"
    for client in ("a", "b"):
        [(_, assigned)] = of(samples, "akresil_consumer_assigned_partitions", client)
        assert assigned == len(owned[client]) == 2
        lagging = {TopicPartition(labels["topic"], int(labels["partition"]))
                   for labels, _ in of(samples, "akresil_consumer_lag_records", client)}
        assert lagging and lagging <= owned[client], f"{client}: lag kept for partitions it gave up"
        [(_, count)] = of(samples, "akresil_consumer_rebalance_duration_seconds_count", client)
        assert count >= 1
    [(_, rebalances)] = of(samples, "akresil_consumer_rebalances_total", "a")
    assert rebalances >= 2                 # joining alone, then b's arrival
    failures = of(samples, "akresil_consumer_rebalance_failures_total", "refused")
    assert [labels["error"] for labels, _ in failures] == [REFUSAL[protocol]]


async def test_share_group_members_report_their_assignment(kafka_cluster: KafkaCluster, make_topic: TopicMaker,
                                                          unique: Callable[[str], str]) -> None:
    """A share group's assignment changes are rebalances too: the gauge follows each member's assignment."""
    topic, group = await make_topic(partitions=2), unique("s")
    registry = CollectorRegistry()
    cfg: dict[str, Any] = dict(bootstrap_servers=kafka_cluster.bootstrap_servers, group_id=group,
                               metrics_registry=registry, fetch_max_wait_ms=200, request_timeout_ms=15_000)
    with serve(0, registry) as server, anyio.fail_after(60):
        async with ShareConsumer(topic, client_id="s1", **cfg) as s1, ShareConsumer(topic, client_id="s2", **cfg) as s2:
            members = (s1, s2)
            await wait_until(lambda: all(m.assignment() for m in members)
                             and s1.assignment() | s2.assignment() == {TopicPartition(topic, p) for p in range(2)},
                             45, "both share members assigned")
            for m in members:
                await m.getmany(timeout_ms=10)
            samples = await anyio.to_thread.run_sync(scrape, server.url)
            owned = {"s1": s1.assignment(), "s2": s2.assignment()}
    for client, assignment in owned.items():
        [(_, assigned)] = of(samples, "akresil_consumer_assigned_partitions", client)
        assert assigned == len(assignment)
        [(_, rebalances)] = of(samples, "akresil_consumer_rebalances_total", client)
        assert rebalances >= 1
