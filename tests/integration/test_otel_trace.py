"""akresil.otel end to end: a trace goes producer -> Tansu -> consumer with one trace id, the W3C
``traceparent`` riding in the record's headers, and on through a ``Runner``'s handler to what it sends; metrics
reach the OpenTelemetry SDK's in-memory reader."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from akresil import Admin, Consumer, ConsumerRecord, NewTopic, Producer, TopicPartition
from akresil.runner import HandlerContext, Runner
from akresil.otel import instrument_consumer, instrument_producer
from akresil.testing import EmbeddedBroker

from ..harness.e2e import unique_topic

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


async def test_one_trace_from_producer_through_the_broker_to_the_consumer(broker: EmbeddedBroker) -> None:
    topic = unique_topic("otel")
    async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=2)])
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    w3c = TraceContextTextMapPropagator()
    tracer = tracing.get_tracer("test")

    producer = instrument_producer(Producer(bootstrap_servers=broker.bootstrap_servers, client_id="otel-p",
                                            linger_ms=0),
                                   tracer_provider=tracing, meter_provider=meters, propagator=w3c)
    async with producer:
        with tracer.start_as_current_span("POST /orders") as request_span:
            md = await producer.send(topic, b"order-1", key=b"alice", headers=[("app", b"x")])
        await producer.send_many(topic, [(b"bob", b"order-2"), (b"carol", b"order-3")], partition=md.partition)

    consumer = instrument_consumer(Consumer(bootstrap_servers=broker.bootstrap_servers, client_id="otel-c",
                                            auto_offset_reset="earliest", fetch_max_wait_ms=50),
                                   tracer_provider=tracing, meter_provider=meters, propagator=w3c)
    async with consumer:
        consumer.assign([TopicPartition(topic, md.partition)])
        got = await consumer.getmany(timeout_ms=5_000)
        records = got[TopicPartition(topic, md.partition)]
        assert [r.value for r in records] == [b"order-1", b"order-2", b"order-3"]
        first = records[0]
        with consumer.process(first) as process_span:
            process_span.set_attribute("app.handled", True)
        open_points = otel_points(reader)     # gauges are read while the client is open: close() drops them

    spans = exporter.get_finished_spans()
    [send, send_many] = by_name(spans, f"send {topic}")
    [receive] = by_name(spans, f"receive {topic}")
    [process] = by_name(spans, f"process {topic}")
    trace_id = request_span.get_span_context().trace_id

    # the send span: a child of the request, PRODUCER kind, semantic-convention attributes
    assert send.kind is SpanKind.PRODUCER and send.parent is not None
    assert send.context.trace_id == trace_id and send.parent.span_id == request_span.get_span_context().span_id
    async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        brokers = {(b.host, b.port) for b in (await admin.describe_cluster()).brokers}
    send_attributes = dict(send.attributes or {})
    assert (send_attributes.pop("server.address"), send_attributes.pop("server.port")) in brokers
    assert send_attributes == {
        "messaging.system": "kafka", "messaging.operation.type": "send", "messaging.operation.name": "send",
        "messaging.destination.name": topic, "messaging.client.id": "otel-p",
        "messaging.kafka.message.key": "alice", "messaging.destination.partition.id": str(md.partition),
        "messaging.kafka.offset": md.offset, "messaging.message.body.size": len(b"order-1")}
    assert (send_many.attributes or {})["messaging.batch.message_count"] == 2

    # the traceparent went through the broker in the record's headers, next to the application's header
    headers = dict(first.headers)
    assert headers["app"] == b"x"
    flags = int(send.context.trace_flags)
    assert headers["traceparent"] == f"00-{trace_id:032x}-{send.context.span_id:016x}-{flags:02x}".encode()

    # receive: one span for the poll, linked to the three records' producer spans
    assert receive.kind is SpanKind.CLIENT
    assert (receive.attributes or {})["messaging.batch.message_count"] == 3
    assert {link.context.span_id for link in receive.links} == {send.context.span_id, send_many.context.span_id}

    # process: a child of the producer's span, in the same trace
    assert process.kind is SpanKind.CONSUMER and process.parent is not None
    assert process.context.trace_id == trace_id and process.parent.span_id == send.context.span_id
    attrs = dict(process.attributes or {})
    assert attrs["messaging.kafka.offset"] == first.offset and attrs["messaging.client.id"] == "otel-c"
    assert attrs["messaging.operation.type"] == "process" and attrs["app.handled"] is True
    assert (attrs["server.address"], attrs["server.port"]) in brokers
    assert attrs["messaging.message.body.size"] == len(b"order-1")

    # metrics through the OpenTelemetry API
    points = otel_points(reader)
    sent = points[("akresil.producer.records_sent", frozenset({("client_id", "otel-p"), ("topic", topic)}))]
    consumed = points[("akresil.consumer.records_consumed", frozenset({("client_id", "otel-c"), ("topic", topic)}))]
    assert sent.value == 3 and consumed.value == 3
    # the connections' events reach the hook too (a client built without hooks shares its registry with its
    # connections: an empty registry once made the cluster keep a registry of its own, which instrument_* missed)
    assert any(name == "akresil.request.duration" and ("client_id", "otel-p") in attrs for name, attrs in points)
    consumed_bytes = points[("akresil.consumer.consumed_bytes",
                             frozenset({("client_id", "otel-c"), ("topic", topic)}))]
    payload = sum(len(r.value or b"") + len(r.key or b"") for r in records)
    assert consumed_bytes.value > payload      # the batches as fetched: records plus batch and record headers
    lag_key = ("akresil.consumer.lag", frozenset({("client_id", "otel-c"), ("topic", topic),
                                                  ("partition", str(md.partition))}))
    assert open_points[lag_key].value == 0    # the consumer's getmany took everything up to the high watermark
    assert lag_key not in points              # and the closed consumer's lag is gone


async def test_a_runner_handler_call_is_a_process_span_between_the_upstream_send_and_its_output(
        broker: EmbeddedBroker) -> None:
    topic = unique_topic("otel-runner")
    async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=1), NewTopic(topic + "-out", num_partitions=1)])
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    w3c = TraceContextTextMapPropagator()

    upstream = instrument_producer(Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=0),
                                   tracer_provider=tracing, propagator=w3c, metrics=False)
    async with upstream:
        await upstream.send(topic, b"order-1", key=b"alice")
        await upstream.send(topic, b"order-2", key=b"bob")

    handled: list[bytes | None] = []
    done = anyio.Event()

    async def handle(record: ConsumerRecord[bytes, bytes], ctx: HandlerContext) -> None:
        await ctx.send(topic + "-out", record.value, key=record.key)
        handled.append(record.value)
        if len(handled) == 2:
            done.set()

    consumer = instrument_consumer(Consumer(bootstrap_servers=broker.bootstrap_servers, group_id=topic,
                                            enable_auto_commit=False, auto_offset_reset="earliest"),
                                   tracer_provider=tracing, propagator=w3c, metrics=False)
    output = instrument_producer(Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=0),
                                 tracer_provider=tracing, propagator=w3c, metrics=False)
    async with consumer, output:
        consumer.assign([TopicPartition(topic, 0)])
        async with Runner(consumer, handle, producer=output):
            with anyio.fail_after(30):
                await done.wait()

    spans = exporter.get_finished_spans()
    sends = by_name(spans, f"send {topic}")
    processes = by_name(spans, f"process {topic}")
    outputs = by_name(spans, f"send {topic}-out")
    assert len(sends) == len(processes) == len(outputs) == 2
    for send, process, out in zip(sends, processes, outputs):
        # upstream send (root) -> process (its child, linked to it) -> the handler's ctx.send (child of process)
        assert send.parent is None and process.kind is SpanKind.CONSUMER and out.kind is SpanKind.PRODUCER
        assert process.parent is not None and process.parent.span_id == send.context.span_id
        assert [link.context.span_id for link in process.links] == [send.context.span_id]
        assert out.parent is not None and out.parent.span_id == process.context.span_id
        assert send.context.trace_id == process.context.trace_id == out.context.trace_id
    assert len({s.context.trace_id for s in sends}) == 2          # one trace per upstream record
    assert [dict(p.attributes or {})["messaging.kafka.offset"] for p in processes] == [0, 1]


def otel_points(reader: InMemoryMetricReader) -> dict[tuple[str, frozenset[tuple[str, Any]]], Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return {(m.name, frozenset(p.attributes.items())): p for rm in data.resource_metrics
            for sm in rm.scope_metrics for m in sm.metrics for p in m.data.data_points}


def test_the_documented_example_prints_what_the_page_shows() -> None:
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "opentelemetry.md").read_text(encoding="utf-8")
    example = root / "examples" / "otel_tracing.py"
    assert f"```python\n{example.read_text(encoding='utf-8')}```" in page
    shown = re.search(r"It prints:\n\n```text\n(.*?)```", page, re.S)
    assert shown is not None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown.group(1)


def test_the_page_maps_every_metric() -> None:
    from akresil.otel import METRIC_NAMES

    page = (Path(__file__).resolve().parents[2] / "docs" / "opentelemetry.md").read_text(encoding="utf-8")
    for prom, otel in METRIC_NAMES.items():
        assert f"| `{prom}` | `{otel}` |" in page
