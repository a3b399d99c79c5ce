"""OpenTelemetry for akresil clients (``pip install 'akresil[otel]'``): spans, W3C trace context and metrics.

Spans are named and attributed after OpenTelemetry's messaging semantic conventions (``send orders`` /
``receive orders`` / ``process orders``; ``messaging.system=kafka``, destination, partition, offset, client id,
batch message count, ``server.address`` / ``server.port`` of the partition's leader, body size).  The producer
injects the send span's context into each record's headers (``traceparent``, through the configured propagator,
W3C trace context by default); the consumer extracts it, so a ``process`` span is a child of the producer's
span (one trace from producer to consumer) and ``receive`` spans link to it.

``OTelTracing`` is a tracer hook (``core.tracing.Tracer``, as franz-go's kotel is a kgo hook): the clients call
it around their sends, polls and the processing of what they hand out, and pass it what it needs to know of them
(``core.tracing.TraceSite``), so tracing needs no subclass, no patched method and nothing private of a client.
``instrument_producer(producer)`` (and ``instrument_consumer`` / ``instrument_share_consumer``) give one client
an ``OTelTracing`` with its own providers and an ``OTelMetrics`` hook; ``AkresilInstrumentor``
(``akresil.otel_instrumentor``, run by ``opentelemetry-instrument``) makes an ``OTelTracing`` the default tracer
of every client without one, so every client is traced without code changes.  The runner opens a ``process``
span per handler call through its consumer (``Consumer.process``), so what the handler sends joins the trace.

``OTelMetrics`` records the metrics of ``akresil.metrics.ClientMetrics`` (the Prometheus hook) through the
OpenTelemetry metrics API; both are derived from one table (``core.series.SERIES``): same events, same label
names as attributes, same histogram buckets; names are dotted (``METRIC_NAMES`` maps each Prometheus name to its
OpenTelemetry name).
"""

from __future__ import annotations

import threading
import weakref
from functools import partial
from typing import Any, Callable, Iterable, Sequence, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import propagate, trace
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
from opentelemetry.propagators.textmap import Getter, Setter, TextMapPropagator
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from . import __version__
from .consumer import Consumer
from .core import tracing
from .core.series import SERIES, Labels, Series, SeriesHook
from .core.tracing import TracedRecord, TraceSite
from .net.clock import Clock, monotonic_ms
from .producer import Producer
from .share_consumer import ShareConsumer
from .types import ConsumerRecord, Header, RecordMetadata, ShareRecord

__all__ = ["OTelMetrics", "OTelTracing", "TracedProducer", "TracedConsumer", "TracedShareConsumer",
           "instrument_producer", "instrument_consumer", "instrument_share_consumer", "producer_context",
           "set_default_tracing", "METRIC_NAMES", "HeadersGetter", "HeadersSetter"]

_SCOPE = "akresil"
K = TypeVar("K")
V = TypeVar("V")

# messaging semantic conventions (attribute names as the spec spells them)
SYSTEM = "messaging.system"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
DESTINATION = "messaging.destination.name"
PARTITION = "messaging.destination.partition.id"
OFFSET = "messaging.kafka.offset"
CLIENT_ID = "messaging.client.id"
BATCH_COUNT = "messaging.batch.message_count"
MESSAGE_KEY = "messaging.kafka.message.key"
TOMBSTONE = "messaging.kafka.message.tombstone"
CONSUMER_GROUP = "messaging.consumer.group.name"
BODY_SIZE = "messaging.message.body.size"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"


# ============================================================================================ context in headers
class HeadersSetter(Setter[list[Header]]):
    """Writes a propagation field into record headers (replacing an existing one of that name)."""

    def set(self, carrier: list[Header], key: str, value: str) -> None:
        carrier[:] = [h for h in carrier if h[0] != key]
        carrier.append((key, value.encode()))


class HeadersGetter(Getter[Sequence[Header]]):
    """Reads propagation fields from record headers (values decoded as UTF-8; undecodable ones skipped)."""

    def get(self, carrier: Sequence[Header], key: str) -> list[str] | None:
        found = []
        for name, value in carrier:
            if name == key and value is not None:
                try:
                    found.append(value.decode())
                except UnicodeDecodeError:
                    continue
        return found or None

    def keys(self, carrier: Sequence[Header]) -> list[str]:
        return [name for name, _ in carrier]


_SETTER = HeadersSetter()
_GETTER = HeadersGetter()


def _propagator(given: TextMapPropagator | None) -> TextMapPropagator:
    return given if given is not None else propagate.get_global_textmap()


def _tracer(provider: TracerProvider | None) -> Tracer:
    return trace.get_tracer(_SCOPE, __version__, tracer_provider=provider)


def _key_attribute(key: object) -> str | None:
    if isinstance(key, bytes):
        try:
            return key.decode()
        except UnicodeDecodeError:
            return None
    return key if isinstance(key, str) else None


def _raw_size(value: object) -> int | None:
    """The body size when the value is already the bytes that travel (no deserializer)."""
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, memoryview):
        return value.nbytes
    return None


def _fail(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
    span.set_attribute("error.type", type(exc).__name__)


# ============================================================================================ the tracer hook
AnyRecord = ConsumerRecord[Any, Any] | ShareRecord


def producer_context(record: AnyRecord, propagator: TextMapPropagator | None = None) -> otel_context.Context:
    """The trace context the producer put in ``record``'s headers (empty when there is none)."""
    return _propagator(propagator).extract(record.headers, context=otel_context.Context(), getter=_GETTER)


def _set_server(attributes: dict[str, Any], site: TraceSite, topic: str, partition: int) -> None:
    address = site.leader(topic, partition)
    if address is not None:
        attributes[SERVER_ADDRESS], attributes[SERVER_PORT] = address


def _end(span: Span, token: object) -> None:
    """End ``span``, restoring the context it replaced when it is still this task's current span."""
    if trace.get_current_span() is span:
        otel_context.detach(token)  # type: ignore[arg-type]
    span.end()


class _Send:
    """One ``send`` span (kind PRODUCER), current while the send runs; its context is in ``headers``."""

    __slots__ = ("span", "headers", "_token", "_site", "_topic", "_tombstone")

    def __init__(self, tracing_: OTelTracing, site: TraceSite, topic: str, key: object, partition: int | None,
                 count: int | None, headers: Sequence[Header] | None, tombstone: bool,
                 body_size: int | None) -> None:
        attributes: dict[str, Any] = {SYSTEM: "kafka", OPERATION_TYPE: "send", OPERATION_NAME: "send",
                                      DESTINATION: topic, CLIENT_ID: site.client_id}
        if partition is not None:
            attributes[PARTITION] = str(partition)
            _set_server(attributes, site, topic, partition)
        if count is not None:
            attributes[BATCH_COUNT] = count
        key_text = _key_attribute(key)
        if key_text is not None:
            attributes[MESSAGE_KEY] = key_text
        if tombstone:
            attributes[TOMBSTONE] = True
        elif body_size is not None:
            attributes[BODY_SIZE] = body_size
        self.span = tracing_.tracer.start_span(f"send {topic}", kind=SpanKind.PRODUCER, attributes=attributes)
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        self.headers: list[Header] = list(headers) if headers else []
        tracing_.propagator.inject(self.headers, setter=_SETTER)
        self._site, self._topic, self._tombstone = site, topic, tombstone

    def end(self, metadata: RecordMetadata | None = None, error: BaseException | None = None) -> None:
        span = self.span
        if metadata is not None:
            attributes: dict[str, Any] = {PARTITION: str(metadata.partition), OFFSET: metadata.offset}
            if metadata.serialized_value_size >= 0 and not self._tombstone:
                attributes[BODY_SIZE] = metadata.serialized_value_size
            _set_server(attributes, self._site, self._topic, metadata.partition)
            span.set_attributes(attributes)
        if isinstance(error, Exception):     # a cancellation is not the operation's failure
            _fail(span, error)
        _end(span, self._token)


class _Process:
    """A ``process`` span (kind CONSUMER), current from its start until ``end``."""

    __slots__ = ("records", "span", "_token")

    def __init__(self, records: tuple[TracedRecord, ...], span: Span) -> None:
        self.records = records
        self.span = span
        self._token = otel_context.attach(trace.set_span_in_context(span))

    def fail(self, error: BaseException) -> None:
        _fail(self.span, error)

    def end(self) -> None:
        _end(self.span, self._token)


class OTelTracing:
    """akresil's tracer hook on OpenTelemetry: ``Producer(hooks=[OTelTracing()])``, or ``client.hooks.add(...)``.

    ``tracer_provider`` / ``propagator``: None uses the global ones at the time of each call, so a client made
    before ``opentelemetry-instrument`` configured the SDK still follows it.  ``instrument_*`` and
    ``AkresilInstrumentor`` attach it for you.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None,
                 propagator: TextMapPropagator | None = None) -> None:
        self.tracer: Tracer = _tracer(tracer_provider)
        self._propagator = propagator

    @property
    def propagator(self) -> TextMapPropagator:
        return _propagator(self._propagator)

    def start_send(self, site: TraceSite, topic: str, key: object, partition: int | None, count: int | None,
                   headers: Sequence[Header] | None, *, tombstone: bool, body_size: int | None) -> _Send:
        return _Send(self, site, topic, key, partition, count, headers, tombstone, body_size)

    def received(self, site: TraceSite, records: Sequence[TracedRecord]) -> None:
        """One ``receive`` span (kind CLIENT, as the conventions give pull-based receives), linked to the
        producer span of every record that carries one."""
        attributes = self._attributes(site, "receive", "poll", records)
        topic = attributes.get(DESTINATION)
        span = self.tracer.start_span(f"receive {topic}" if topic else "receive", kind=SpanKind.CLIENT,
                                      attributes=attributes, links=self._links(records))
        span.end()

    def start_process(self, site: TraceSite, records: Sequence[TracedRecord]) -> _Process:
        """A ``process`` span: a child of the producer's span when the records carry one context (one record,
        or a batch sent by one ``send_many``), linked to every producer span; else a child of the current span."""
        attributes = self._attributes(site, "process", "process", records)
        topic = attributes.get(DESTINATION)
        links = self._links(records)
        parent = otel_context.get_current()
        if links and len(links) == len(records) and len({link.context.span_id for link in links}) == 1:
            parent = self.producer_context(records[0])
        span = self.tracer.start_span(f"process {topic}" if topic else "process", context=parent,
                                      kind=SpanKind.CONSUMER, attributes=attributes, links=links or None)
        return _Process(tuple(records), span)

    def producer_context(self, record: AnyRecord) -> otel_context.Context:
        """The trace context the producer put in ``record``'s headers (empty when there is none)."""
        return producer_context(record, self._propagator)

    def _links(self, records: Sequence[TracedRecord]) -> list[Link]:
        links = []
        for record in records:
            context = trace.get_current_span(self.producer_context(record)).get_span_context()
            if context.is_valid:
                links.append(Link(context))
        return links

    @staticmethod
    def _attributes(site: TraceSite, operation: str, name: str, records: Sequence[TracedRecord]) -> dict[str, Any]:
        attributes: dict[str, Any] = {SYSTEM: "kafka", OPERATION_TYPE: operation, OPERATION_NAME: name,
                                      CLIENT_ID: site.client_id}
        first = records[0]
        one_topic = all(r.topic == first.topic for r in records)
        if one_topic:
            attributes[DESTINATION] = first.topic
        if site.group_id is not None:
            attributes[CONSUMER_GROUP] = site.group_id
        if len(records) == 1:
            attributes[PARTITION] = str(first.partition)
            attributes[OFFSET] = first.offset
            key_text = _key_attribute(first.key)
            if key_text is not None:
                attributes[MESSAGE_KEY] = key_text
            if first.value is None:
                attributes[TOMBSTONE] = True
            elif (size := _raw_size(first.value)) is not None:
                attributes[BODY_SIZE] = size
        else:
            attributes[BATCH_COUNT] = len(records)
        if one_topic and all(r.partition == first.partition for r in records):
            attributes[PARTITION] = str(first.partition)
            _set_server(attributes, site, first.topic, first.partition)
        return attributes


def set_default_tracing(tracer_provider: TracerProvider | None = None,
                        propagator: TextMapPropagator | None = None, *, enabled: bool = True) -> None:
    """Trace every client that has no tracer of its own, made before or after, through ``tracer_provider``
    (``AkresilInstrumentor.instrument`` calls it); ``enabled=False`` stops that."""
    tracing.set_default_tracer(OTelTracing(tracer_provider, propagator) if enabled else None)


# ============================================================================================ one client at a time
#: The clients trace through their tracer hook, so a traced client is the client itself: these names stay as
#: aliases for code written when tracing needed subclasses.
TracedProducer = Producer
TracedConsumer = Consumer
TracedShareConsumer = ShareConsumer

P = TypeVar("P", Producer[Any, Any], Consumer[Any, Any], ShareConsumer)


def _instrument(client: P, kind: str, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None,
                propagator: TextMapPropagator | None, metrics: bool) -> P:
    if metrics:
        client.hooks.add(OTelMetrics(meter_provider, client_id=str(client.config.client_id), kind=kind))
    client.hooks.set_tracer(OTelTracing(tracer_provider, propagator))
    return client


def instrument_producer(producer: Producer[K, V], *, tracer_provider: TracerProvider | None = None,
                        meter_provider: MeterProvider | None = None, propagator: TextMapPropagator | None = None,
                        metrics: bool = True) -> Producer[K, V]:
    """Trace ``producer``'s sends with its own ``OTelTracing`` and (``metrics=True``) record its metrics through
    ``meter_provider``.  Returns ``producer`` itself.  Providers and propagator default to the global ones."""
    return _instrument(producer, "producer", tracer_provider, meter_provider, propagator, metrics)


def instrument_consumer(consumer: Consumer[K, V], *, tracer_provider: TracerProvider | None = None,
                        meter_provider: MeterProvider | None = None, propagator: TextMapPropagator | None = None,
                        metrics: bool = True) -> Consumer[K, V]:
    """Trace ``consumer``'s records and (``metrics=True``) record its metrics through ``meter_provider``.
    Returns ``consumer`` itself."""
    return _instrument(consumer, "consumer", tracer_provider, meter_provider, propagator, metrics)


def instrument_share_consumer(consumer: ShareConsumer, *, tracer_provider: TracerProvider | None = None,
                              meter_provider: MeterProvider | None = None,
                              propagator: TextMapPropagator | None = None,
                              metrics: bool = True) -> ShareConsumer:
    """As ``instrument_consumer``, for a share consumer."""
    return _instrument(consumer, "consumer", tracer_provider, meter_provider, propagator, metrics)


# ============================================================================================ metrics
#: Prometheus name (akresil.metrics) -> OpenTelemetry instrument name, from the one table (core.series)
METRIC_NAMES: dict[str, str] = {series.name: series.otel for series in SERIES}


class _Instruments:
    """Every akresil instrument on one meter, created once from ``SERIES``; gauges are observed from the
    live hooks."""

    def __init__(self, meter: Meter) -> None:
        self.live: weakref.WeakSet[SeriesHook] = weakref.WeakSet()
        self.instruments: dict[Series, Any] = {}
        for series in SERIES:
            if series.kind == "counter":
                self.instruments[series] = meter.create_counter(series.otel, unit=series.unit,
                                                                description=series.help)
            elif series.kind == "histogram":
                self.instruments[series] = meter.create_histogram(
                    series.otel, unit=series.unit, description=series.help,
                    explicit_bucket_boundaries_advisory=list(series.buckets))
            else:
                meter.create_observable_gauge(series.otel, callbacks=[self._observer(series)], unit=series.unit,
                                              description=series.help)

    def _observer(self, series: Series) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(value, {"client_id": hook.client_id, **dict(zip(series.labels, labels))})
                    for hook in list(self.live) for labels, value in hook.gauge_samples(series)]
        return observe


_SHARED: weakref.WeakKeyDictionary[Meter, _Instruments] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def _instruments(meter: Meter) -> _Instruments:
    with _SHARED_LOCK:
        found = _SHARED.get(meter)
        if found is None:
            found = _SHARED[meter] = _Instruments(meter)
        return found


class OTelMetrics(SeriesHook):
    """The OpenTelemetry twin of ``akresil.metrics.ClientMetrics``: ``hooks=[OTelMetrics(client_id=..., kind=...)]``.

    ``meter_provider``: None uses the global one.  Attributes carry the Prometheus label names (``client_id``,
    ``node_id``, ``topic``, ...).  Gauges are observable: each collection reads the current values, and
    ``close()`` (called when the client closes, or a rebalance that takes a partition away) makes their series
    disappear, as in Prometheus.
    """

    def __init__(self, meter_provider: MeterProvider | None = None, *, client_id: str, kind: str,
                 clock: Clock = monotonic_ms) -> None:
        meter = otel_metrics.get_meter(_SCOPE, __version__, meter_provider=meter_provider)
        self._m = _instruments(meter)
        super().__init__(self._m.live, client_id=client_id, kind=kind, clock=clock)

    def _sink(self, series: Series, labels: Labels) -> Callable[[float], object]:
        instrument = self._m.instruments[series]
        record = instrument.add if series.kind == "counter" else instrument.record
        return partial(record, attributes={"client_id": self.client_id, **dict(zip(series.labels, labels))})
