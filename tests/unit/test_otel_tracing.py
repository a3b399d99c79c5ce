"""akresil.otel tracing without a broker: tracing is a hook of the clients (same object, same class, no patched
method), the default tracer reaches clients made before and after, and the ``process`` span an ``async for``
step opens is the current span until the consumer's next call."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from akresil import Consumer, ConsumerRecord, Producer, ShareConsumer, ShareRecord
from akresil.core import tracing
from akresil.otel import (HeadersSetter, OTelTracing, TracedConsumer, TracedProducer, TracedShareConsumer,
                          instrument_consumer, instrument_producer, instrument_share_consumer, set_default_tracing)
from akresil.types import Header

W3C = TraceContextTextMapPropagator()


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def carried_headers(provider: TracerProvider) -> tuple[list[Header], Any]:
    headers: list[Header] = []
    with provider.get_tracer("test").start_as_current_span("send t") as send:
        W3C.inject(headers, setter=HeadersSetter())
    return headers, send.get_span_context()


def test_instrumenting_keeps_the_client_and_its_class(provider: TracerProvider) -> None:
    producer = Producer(bootstrap_servers="127.0.0.1:1")
    consumer = Consumer(bootstrap_servers="127.0.0.1:1")
    share = ShareConsumer("jobs", bootstrap_servers="127.0.0.1:1", group_id="g")
    assert producer.hooks.tracer is None            # nothing traces until a tracer is attached
    assert instrument_producer(producer, tracer_provider=provider, metrics=False) is producer
    assert instrument_consumer(consumer, tracer_provider=provider, metrics=False) is consumer
    assert instrument_share_consumer(share, tracer_provider=provider, metrics=False) is share
    assert (type(producer), type(consumer), type(share)) == (Producer, Consumer, ShareConsumer)
    assert (TracedProducer, TracedConsumer, TracedShareConsumer) == (Producer, Consumer, ShareConsumer)
    first = producer.hooks.tracer
    assert isinstance(first, OTelTracing)
    assert instrument_producer(producer, metrics=False) is producer      # a second call replaces the tracer
    assert producer.hooks.tracer is not first and isinstance(producer.hooks.tracer, OTelTracing)
    assert len(producer.hooks) == 0               # a tracer is no event hook: the event path stays empty


def test_the_default_tracer_reaches_clients_made_before_and_after_and_never_replaces_their_own() -> None:
    before = Producer(bootstrap_servers="127.0.0.1:1")
    own = OTelTracing()
    mine = Consumer(bootstrap_servers="127.0.0.1:1", hooks=[own])
    set_default_tracing()
    try:
        after = ShareConsumer("jobs", bootstrap_servers="127.0.0.1:1", group_id="g")
        default = tracing.default_tracer()
        assert isinstance(default, OTelTracing)
        assert before.hooks.tracer is default and after.hooks.tracer is default
        assert mine.hooks.tracer is own
        with pytest.raises(ValueError, match="already has a tracer"):
            mine.hooks.add(OTelTracing())
        mine.hooks.remove(own)
        assert mine.hooks.tracer is default            # without its own, it follows the default
    finally:
        set_default_tracing(enabled=False)
    assert before.hooks.tracer is None and after.hooks.tracer is None and mine.hooks.tracer is None
    with pytest.raises(TypeError, match="neither on_event"):
        Producer(bootstrap_servers="127.0.0.1:1", hooks=[object()])


async def test_an_async_for_step_makes_its_process_span_current_until_the_next_call(
        provider: TracerProvider, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    headers, send = carried_headers(provider)
    records = iter([ConsumerRecord("t", 0, 5, b"k", b"first", headers, 0),
                    ConsumerRecord("t", 0, 6, None, b"second", [], 0)])

    async def fetched(self: Consumer[Any, Any]) -> ConsumerRecord[bytes, bytes]:
        return next(records)

    monkeypatch.setattr(Consumer, "_next", fetched)      # the untraced step, in place of a broker
    consumer = instrument_consumer(Consumer(bootstrap_servers="127.0.0.1:1", client_id="c1"),
                                   tracer_provider=provider, propagator=W3C, metrics=False)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("job") as job:
        first = await consumer.__anext__()
        processing = trace.get_current_span()
        with tracer.start_as_current_span("bill"):      # the application's work on the record
            pass
        with consumer.process(first) as same:           # the span already open for it: no second one
            assert same is processing
        assert exporter.get_finished_spans()[-1].name == "bill"   # process still open
        await consumer.__anext__()
        second = trace.get_current_span()
        assert second is not processing
        await consumer.close()
        assert trace.get_current_span() is job          # the consumer's context is gone after close

    spans = {s.name: s for s in exporter.get_finished_spans() if s.name != "process t"}
    done = [s for s in exporter.get_finished_spans() if s.name == "process t"]
    assert len(done) == 2
    one, two = done
    assert one.kind is SpanKind.CONSUMER
    assert one.parent is not None and one.parent.span_id == send.span_id and one.context is not None
    assert one.context.trace_id == send.trace_id
    assert [link.context.span_id for link in one.links] == [send.span_id]
    assert spans["bill"].parent is not None and spans["bill"].parent.span_id == one.context.span_id
    assert dict(one.attributes or {})["messaging.message.body.size"] == len(b"first")
    # a record without the producer's context: its process span is a child of the current span
    assert two.parent is not None and two.parent.span_id == job.get_span_context().span_id and not two.links


def test_a_share_records_process_span_continues_the_producers_trace(
        provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    headers, send = carried_headers(provider)
    share = instrument_share_consumer(ShareConsumer("jobs", bootstrap_servers="127.0.0.1:1", group_id="workers"),
                                      tracer_provider=provider, propagator=W3C, metrics=False)
    with share.process(ShareRecord("jobs", 1, 9, None, b"job", headers, 0, delivery_count=1)):
        pass
    [span] = [s for s in exporter.get_finished_spans() if s.name == "process jobs"]
    assert span.parent is not None and span.parent.span_id == send.span_id
    attributes = dict(span.attributes or {})
    assert attributes["messaging.consumer.group.name"] == "workers"
    assert attributes["messaging.kafka.offset"] == 9 and attributes["messaging.destination.partition.id"] == "1"


def test_a_batch_process_span_continues_one_send_many_and_links_every_producer_span(
        provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    one_call, send_many = carried_headers(provider)      # the context a send_many gives all its records
    other, send = carried_headers(provider)
    consumer = instrument_consumer(Consumer(bootstrap_servers="127.0.0.1:1", client_id="c1", group_id="g"),
                                   tracer_provider=provider, propagator=W3C, metrics=False)
    batch = [ConsumerRecord("t", 0, offset, None, b"v", one_call, 0) for offset in (3, 4)]
    with consumer.process(*batch) as span:
        assert trace.get_current_span() is span
    mixed = [batch[0], ConsumerRecord("t", 1, 9, None, b"w", other, 0)]
    with provider.get_tracer("app").start_as_current_span("job") as job:
        with consumer.process(*mixed):
            pass
    together, apart = [s for s in exporter.get_finished_spans() if s.name == "process t"]
    assert together.parent is not None and together.parent.span_id == send_many.span_id
    assert dict(together.attributes or {})["messaging.batch.message_count"] == 2
    assert dict(together.attributes or {})["messaging.destination.partition.id"] == "0"
    # records of two traces: a child of the current span, linked to both producer spans
    assert apart.parent is not None and apart.parent.span_id == job.get_span_context().span_id
    assert {link.context.span_id for link in apart.links} == {send_many.span_id, send.span_id}
    assert "messaging.destination.partition.id" not in dict(apart.attributes or {})


def test_without_a_tracer_process_is_one_shared_no_op() -> None:
    consumer = Consumer(bootstrap_servers="127.0.0.1:1")
    record = ConsumerRecord("t", 0, 1, None, b"v", [], 0)
    assert consumer.process(record) is consumer.process(record)       # nothing is built per call
    with consumer.process(record) as span:
        assert span is None
