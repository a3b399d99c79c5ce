"""One trace from an HTTP request through Kafka to the consumer that processes the order, with OpenTelemetry.

    python examples/otel_tracing.py                 # starts an embedded broker (pip install 'akresil[testing]')

Needs ``pip install 'akresil[otel]' opentelemetry-sdk``.  A real service exports spans with an OTLP exporter;
this example keeps them in memory and prints the tree they form: the ``process`` span is a child of the
``send`` span, whose context travelled in the record's ``traceparent`` header, and it is the current span while
the loop body handles the record, so the handler's own spans join the request's trace.
(``opentelemetry-instrument python app.py`` traces every client this way without ``instrument_*`` calls.)
"""

from __future__ import annotations

import anyio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil.otel import instrument_consumer, instrument_producer


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None          # finished spans always have one
    return int(span.context.span_id)


def span_tree(spans: tuple[ReadableSpan, ...]) -> list[str]:
    """Each span as an indented line under its parent, with its kind and the spans it links to."""
    names = {span_id(s): s.name for s in spans}
    children: dict[int | None, list[ReadableSpan]] = {}
    for s in spans:
        children.setdefault(s.parent.span_id if s.parent else None, []).append(s)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda s: s.start_time or 0):
            links = ", ".join(names.get(link.context.span_id, "?") for link in s.links)
            lines.append("  " * depth + f"{s.name} [{s.kind.name}]" + (f" -> links {links}" if links else ""))
            walk(span_id(s), depth + 1)

    walk(None, 0)
    return lines


async def main(bootstrap: str) -> None:
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])

    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic("orders", num_partitions=1)])

    producer = instrument_producer(Producer(bootstrap_servers=bootstrap, client_id="order-api"),
                                   tracer_provider=tracing, meter_provider=meters)
    async with producer:
        with tracing.get_tracer("order-api").start_as_current_span("POST /orders"):
            await producer.send("orders", b'{"id": 1}', key=b"alice")

    consumer = instrument_consumer(Consumer(bootstrap_servers=bootstrap, client_id="billing",
                                            auto_offset_reset="earliest"),
                                   tracer_provider=tracing, meter_provider=meters)
    async with consumer:
        consumer.assign([TopicPartition("orders", 0)])
        async for record in consumer:               # a `process orders` span is current until the next step
            with tracing.get_tracer("billing").start_as_current_span("bill order"):
                print("billing", record.value)
            break

    spans = exporter.get_finished_spans()
    print("\n".join(span_tree(spans)))
    trace_of = {s.name: s.context.trace_id for s in spans if s.context is not None}
    print("request and processing share one trace:", trace_of["POST /orders"] == trace_of["process orders"])


if __name__ == "__main__":
    from akresil.testing import EmbeddedBroker

    with EmbeddedBroker() as broker:
        anyio.run(main, broker.bootstrap_servers)
