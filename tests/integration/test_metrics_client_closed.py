"""A closed client's gauges disappear from Prometheus and from OpenTelemetry; its counters stay.

Each client tells its hooks when it closed (the ``client_closed`` event), so the metrics hooks drop its
gauge series: a scrape after ``close()`` shows no connection count, no requests in flight and no lag of a
client that is gone. Runs on librdkafka's mock.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry

from akresil import Consumer, Producer, ShareConsumer, TopicPartition
from akresil.otel import OTelMetrics
from akresil.testing.rdkafka_mock import MockCluster

from ..harness.e2e import unique_topic

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]
FAST = dict(fetch_max_wait_ms=100, request_timeout_ms=10_000, retry_backoff_ms=50)
PROM_GAUGES = ("akresil_connections", "akresil_requests_in_flight", "akresil_throttle_mute_seconds",
               "akresil_consumer_lag_records", "akresil_consumer_assigned_partitions")


@pytest.fixture(scope="module")
def mock() -> Any:
    with MockCluster(1) as cluster:
        cluster.share_set_auto_offset_reset(True)
        cluster.share_set_heartbeat_interval(300)
        yield cluster


def prom_series(registry: CollectorRegistry, client_id: str) -> dict[str, float]:
    """Every sample of ``client_id`` as {name{labels}: value} (created timestamps left out)."""
    return {f"{s.name}{sorted(s.labels.items())}": s.value for family in registry.collect()
            for s in family.samples if s.labels.get("client_id") == client_id and not s.name.endswith("_created")}


def otel_series(reader: InMemoryMetricReader, client_id: str) -> dict[str, float]:
    data = reader.get_metrics_data()
    assert data is not None
    return {f"{m.name}{sorted(p.attributes.items())}": getattr(p, "value", getattr(p, "count", None))
            for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
            for p in m.data.data_points if p.attributes.get("client_id") == client_id}


def named(series: dict[str, float], prefix: str) -> dict[str, float]:
    return {k: v for k, v in series.items() if k.startswith(prefix + "[")}


def test_a_closed_producers_gauges_are_gone_from_both_back_ends(mock: MockCluster) -> None:
    topic = unique_topic("closed-metrics-p")
    mock.create_topic(topic, 1)
    registry, reader = CollectorRegistry(), InMemoryMetricReader()

    async def scenario() -> None:
        async with Producer(bootstrap_servers=mock.bootstrap_servers, client_id="p1", linger_ms=0,
                            metrics_registry=registry,
                            hooks=[OTelMetrics(MeterProvider(metric_readers=[reader]), client_id="p1",
                                               kind="producer")]) as producer:
            await producer.send(topic, b"x", partition=0)
            prom, otel = prom_series(registry, "p1"), otel_series(reader, "p1")
            assert registry.get_sample_value("akresil_connections", {"client_id": "p1"}) >= 1
            assert named(prom, "akresil_requests_in_flight")
            assert named(otel, "akresil.connections") and named(otel, "akresil.requests.in_flight")
        prom, otel = prom_series(registry, "p1"), otel_series(reader, "p1")
        assert [k for k in prom if k.split("[")[0] in PROM_GAUGES] == []
        assert named(otel, "akresil.connections") == {} and named(otel, "akresil.requests.in_flight") == {}
        # counters and histograms stay, as Prometheus expects of them
        assert named(prom, "akresil_producer_records_sent_total")
        assert named(otel, "akresil.producer.records_sent")

    anyio.run(scenario)


def test_a_closed_consumers_lag_and_connections_are_gone_from_both_back_ends(mock: MockCluster) -> None:
    topic = unique_topic("closed-metrics-c")
    mock.create_topic(topic, 1)
    registry, reader = CollectorRegistry(), InMemoryMetricReader()

    async def scenario() -> None:
        async with Producer(bootstrap_servers=mock.bootstrap_servers, linger_ms=0) as producer:
            await producer.send_many(topic, [(None, b"v%d" % i) for i in range(10)], partition=0)
        async with Consumer(bootstrap_servers=mock.bootstrap_servers, client_id="c1", auto_offset_reset="earliest",
                            max_poll_records=4, metrics_registry=registry,
                            hooks=[OTelMetrics(MeterProvider(metric_readers=[reader]), client_id="c1",
                                               kind="consumer")], **FAST) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            with anyio.fail_after(30):
                while not await consumer.getmany(timeout_ms=100):
                    pass
            assert named(prom_series(registry, "c1"), "akresil_consumer_lag_records")
            assert named(otel_series(reader, "c1"), "akresil.consumer.lag")
        prom, otel = prom_series(registry, "c1"), otel_series(reader, "c1")
        assert [k for k in prom if k.split("[")[0] in PROM_GAUGES] == []
        assert named(otel, "akresil.consumer.lag") == {} and named(otel, "akresil.connections") == {}
        assert named(prom, "akresil_consumer_records_consumed_total")

    anyio.run(scenario)


def test_a_closed_share_consumers_connections_are_gone(mock: MockCluster) -> None:
    topic = unique_topic("closed-metrics-s")
    mock.create_topic(topic, 1)
    registry = CollectorRegistry()

    async def scenario() -> None:
        async with ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=unique_topic("g"),
                                 client_id="s1", metrics_registry=registry, **FAST) as consumer:
            await consumer.getmany(timeout_ms=100)
            assert named(prom_series(registry, "s1"), "akresil_connections")
        assert [k for k in prom_series(registry, "s1") if k.split("[")[0] in PROM_GAUGES] == []

    anyio.run(scenario)
