"""akresil.otel.OTelMetrics records the Prometheus hook's metrics: one event script drives both hooks and every
Prometheus sample must equal its OpenTelemetry data point (counters, histogram counts / sums / buckets, gauges).
Also the trace-context carrier (record headers) and span errors, which need no broker."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import CollectorRegistry

from akresil import Consumer, ConsumerRecord, Producer
from akresil.core import events as ev
from akresil.core.events import Hooks
from akresil.errors import IllegalStateError
from akresil.metrics import ClientMetrics
from akresil.otel import (METRIC_NAMES, HeadersGetter, HeadersSetter, OTelMetrics, instrument_consumer,
                          instrument_producer)
from akresil.types import Header, TopicPartition


class Clock:
    now = 10_000.0

    def __call__(self) -> float:
        return self.now


SCRIPT: list[tuple[str, dict[str, Any]]] = [
    (ev.NODE_STATE, dict(node_id=1, state="connected")),
    (ev.NODE_STATE, dict(node_id=2, state="connected")),
    (ev.REQUEST_SENT, dict(node_id=1, in_flight=2)),
    (ev.REQUEST_DONE, dict(node_id=1, in_flight=1)),
    (ev.RESPONSE_RECEIVED, dict(node_id=1, api_key=0, version=9, latency_ms=3.0, response=None)),
    (ev.RESPONSE_RECEIVED, dict(node_id=None, api_key=18, version=3, latency_ms=0.7, response=None)),
    (ev.THROTTLED, dict(node_id=1, api_key=0, version=9, throttle_ms=400.0, muted=True, muted_until=10_400.0)),
    (ev.THROTTLED, dict(node_id=2, api_key=1, version=4, throttle_ms=250.0, muted=False, muted_until=0.0)),
    (ev.RECONNECT_BACKOFF, dict(node_id=2, failures=1, backoff_ms=55.0)),
    (ev.CONNECTION_BYTES_SENT, dict(node_id=1, nbytes=1200)),
    (ev.CONNECTION_BYTES_RECEIVED, dict(node_id=None, nbytes=300)),
    (ev.METADATA_REFRESH_REQUESTED, dict(cause="leader_change", due_at=0)),
    (ev.METADATA_REFRESH, dict(causes=["leader_change", "new_topic"], brokers=3, topics=1, stale_partitions=0)),
    (ev.METADATA_REFRESH, dict(causes=[], brokers=3, topics=1, stale_partitions=0)),
    (ev.METADATA_REFRESH_FAILED, dict(failures=1, backoff_ms=120.0)),
    (ev.STALE_METADATA_IGNORED, dict(topic="t", partition=0, known_epoch=4, received_epoch=3)),
    (ev.LEADER_HINT, dict(topic="t", partition=0, leader_id=2, leader_epoch=5, accepted=True, reason="advanced")),
    (ev.BATCH_SENT, dict(node_id=1, topic="t", partition=0, records=10, size_bytes=900, attempt=0, queue_ms=4.0)),
    (ev.BATCH_SENT, dict(node_id=1, topic="t", partition=0, records=10, size_bytes=900, attempt=1, queue_ms=9.0)),
    (ev.BATCH_RETRY, dict(topic="t", partition=0, attempt=1, reason="NotLeaderOrFollowerError",
                          skip_backoff=True, backoff_ms=0.0, records=10)),
    (ev.BATCH_RETRY, dict(topic="t", partition=0, attempt=2, reason="RequestTimedOutError",
                          skip_backoff=False, backoff_ms=180.0, records=10)),
    (ev.BATCH_COMPLETED, dict(topic="t", partition=0, records=10, attempts=3, error=None)),
    (ev.BATCH_COMPLETED, dict(topic="t", partition=1, records=4, attempts=1, error="MessageSizeTooLargeError")),
    (ev.BATCH_EXPIRED, dict(topic="t", partition=1, stage="in-flight", records=2, age_ms=120_000)),
    (ev.BATCH_SPLIT, dict(topic="t", partition=0, records=60, batches=2, size_bytes=70_000)),
    (ev.BUFFER_EXHAUSTED, dict(needed=100, used=10, limit=50)),
    (ev.RECORDS_CONSUMED, dict(topic="t", partition=0, records=5, bytes=500, lag=7)),
    (ev.RECORDS_CONSUMED, dict(topic="t", partition=1, records=1, bytes=0, lag=2)),
    (ev.REBALANCE, dict(group_id="g", generation=2, assigned=[TopicPartition("t", 0)],
                        revoked=[TopicPartition("t", 1)], duration_ms=1300.0)),
    (ev.REBALANCE_FAILED, dict(group_id="g", error="RebalanceInProgressError")),
    (ev.NODE_STATE, dict(node_id=2, state="backing-off")),
]


def otel_points(reader: InMemoryMetricReader) -> dict[tuple[str, frozenset[tuple[str, Any]]], Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return {(metric.name, frozenset(point.attributes.items())): point
            for rm in data.resource_metrics for sm in rm.scope_metrics for metric in sm.metrics
            for point in metric.data.data_points}


def test_every_prometheus_sample_has_the_same_value_in_opentelemetry() -> None:
    clock = Clock()
    registry = CollectorRegistry()
    reader = InMemoryMetricReader()
    hooks = Hooks([ClientMetrics(registry, client_id="c1", kind="producer", clock=clock),
                   OTelMetrics(MeterProvider(metric_readers=[reader]), client_id="c1", kind="producer",
                               clock=clock)])
    for event, fields in SCRIPT:
        hooks.emit(event, **fields)
    clock.now = 10_100.0            # 300 ms of node 1's mute window left
    points = otel_points(reader)
    compared: set[str] = set()
    for family in registry.collect():
        otel_name = METRIC_NAMES[family.name if family.type != "counter" else family.name + "_total"]
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = dict(sample.labels)
            bound = labels.pop("le", None)
            point = points.get((otel_name, frozenset(labels.items())))
            assert point is not None, f"{sample.name}{labels}: no OpenTelemetry point {otel_name}"
            if isinstance(point, HistogramDataPoint):
                if sample.name.endswith("_count"):
                    assert point.count == sample.value
                elif sample.name.endswith("_sum"):
                    assert point.sum == pytest.approx(sample.value)
                else:
                    assert bound is not None
                    if bound != "+Inf":
                        i = list(point.explicit_bounds).index(float(bound))
                        assert sum(point.bucket_counts[:i + 1]) == sample.value, sample
            else:
                assert isinstance(point, NumberDataPoint)
                assert point.value == pytest.approx(sample.value), f"{sample.name}{labels}"
            compared.add(otel_name)
    assert compared == set(METRIC_NAMES.values()), set(METRIC_NAMES.values()) - compared
    # and nothing in OpenTelemetry that Prometheus does not have (e.g. lag of the revoked partition 1)
    assert ("akresil.consumer.lag", frozenset({("client_id", "c1"), ("topic", "t"), ("partition", "1")})) \
        not in points
    assert points[("akresil.throttle.mute_remaining",
                   frozenset({("client_id", "c1"), ("node_id", "1")}))].value == pytest.approx(0.3)


def test_close_removes_the_gauges_and_keeps_the_counters() -> None:
    reader = InMemoryMetricReader()
    hook = OTelMetrics(MeterProvider(metric_readers=[reader]), client_id="c2", kind="consumer")
    hooks = Hooks([hook])
    hooks.emit(ev.NODE_STATE, node_id=1, state="connected")
    hooks.emit(ev.RECORDS_CONSUMED, topic="t", partition=0, records=3, bytes=30, lag=9)
    names = {name for name, _ in otel_points(reader)}
    assert {"akresil.connections", "akresil.consumer.lag", "akresil.consumer.records_consumed"} <= names
    hook.close()
    names = {name for name, _ in otel_points(reader)}
    assert "akresil.consumer.lag" not in names and "akresil.connections" not in names
    assert "akresil.consumer.records_consumed" in names


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="client_id"):
        OTelMetrics(client_id="", kind="producer")
    with pytest.raises(ValueError, match="kind"):
        OTelMetrics(client_id="x", kind="streams")


def test_trace_context_lives_in_record_headers() -> None:
    carrier: list[Header] = [("traceparent", b"stale"), ("app", b"1")]
    HeadersSetter().set(carrier, "traceparent", "00-abc-def-01")
    assert carrier == [("app", b"1"), ("traceparent", b"00-abc-def-01")]
    getter = HeadersGetter()
    headers: list[Header] = [("traceparent", b"\xff\xfe"), ("traceparent", b"ok"), ("x", None), ("y", None)]
    assert getter.get(headers, "traceparent") == ["ok"]     # undecodable values are skipped
    assert getter.get(headers, "x") is None and getter.get(headers, "missing") is None
    assert getter.keys(headers) == ["traceparent", "traceparent", "x", "y"]


async def test_a_failed_send_is_an_error_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traced = instrument_producer(Producer(bootstrap_servers="127.0.0.1:1", client_id="p1"),
                                 tracer_provider=provider, propagator=TraceContextTextMapPropagator(), metrics=False)
    with pytest.raises(IllegalStateError):
        await traced.send("orders", b"v", key=b"k")       # never started
    [span] = exporter.get_finished_spans()
    assert span.name == "send orders" and span.kind is SpanKind.PRODUCER
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None and span.attributes["error.type"] == "IllegalStateError"
    assert span.attributes["messaging.kafka.message.key"] == "k"
    assert span.attributes["messaging.client.id"] == "p1"


def test_process_spans_continue_the_producers_trace_and_record_failures() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    w3c = TraceContextTextMapPropagator()
    tracer = provider.get_tracer("test")
    headers: list[Header] = []
    with tracer.start_as_current_span("send t") as send:
        w3c.inject(headers, setter=HeadersSetter())
    traced = instrument_consumer(Consumer(bootstrap_servers="127.0.0.1:1", client_id="c9", group_id="g"),
                                 tracer_provider=provider, propagator=w3c, metrics=False)
    carried = ConsumerRecord("t", 2, 41, b"k", None, headers, 0)
    with pytest.raises(ValueError):
        with traced.process(carried):
            raise ValueError("bad order")
    with tracer.start_as_current_span("batch job") as job:
        with traced.process(ConsumerRecord("t", 0, 7, None, b"v", [], 0)):   # no context in its headers
            pass
    spans = {s.name: s for s in exporter.get_finished_spans()}
    failed = [s for s in exporter.get_finished_spans() if s.name == "process t"]
    assert len(failed) == 2
    with_parent, orphan = failed
    assert with_parent.parent is not None and with_parent.parent.span_id == send.get_span_context().span_id
    assert with_parent.context is not None
    assert with_parent.context.trace_id == send.get_span_context().trace_id
    assert with_parent.status.status_code is StatusCode.ERROR
    assert dict(with_parent.attributes or {})["messaging.kafka.message.tombstone"] is True
    assert dict(with_parent.attributes or {})["messaging.consumer.group.name"] == "g"
    assert [link.context.span_id for link in with_parent.links] == [send.get_span_context().span_id]
    assert orphan.parent is not None and orphan.parent.span_id == job.get_span_context().span_id
    assert not orphan.links and orphan.status.status_code is StatusCode.UNSET
    assert "batch job" in spans
