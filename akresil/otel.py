"""OpenTelemetry for akresil clients (``pip install 'akresil[otel]'``): spans, W3C trace context and metrics.

Spans are named and attributed after OpenTelemetry's messaging semantic conventions (``send orders`` /
``receive orders`` / ``process orders``; ``messaging.system=kafka``, destination, partition, offset, client id,
batch message count, ``server.address`` / ``server.port`` of the partition's leader, body size).  The producer
injects the send span's context into each record's headers (``traceparent``, through the configured propagator,
W3C trace context by default); the consumer extracts it, so a ``process`` span is a child of the producer's
span (one trace from producer to consumer) and ``receive`` spans link to it.

The traced methods live in subclasses of the clients (``TracedProducer``, ``TracedConsumer``,
``TracedShareConsumer``), so a traced client is the client and type-checks wherever one is expected.
``instrument_producer(producer)`` (and ``instrument_consumer`` / ``instrument_share_consumer``) turn one client
into its traced subclass, with its own providers and an ``OTelMetrics`` hook; ``AkresilInstrumentor``
(``akresil.otel_instrumentor``, run by ``opentelemetry-instrument``) gives the clients' classes the traced
methods, so every client is traced without code changes.  Methods rather than hooks inside the clients: spans
must wrap the public calls and headers must be added before the producer serializes a record, which no core
event can do; untraced clients keep their hot paths as they are.

``OTelMetrics`` records the metrics of ``akresil.metrics.ClientMetrics`` (the Prometheus hook) through the
OpenTelemetry metrics API; both are derived from one table (``core.series.SERIES``): same events, same label
names as attributes, same histogram buckets; names are dotted (``METRIC_NAMES`` maps each Prometheus name to its
OpenTelemetry name).
"""

from __future__ import annotations

import threading
import weakref
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar, Token
from functools import partial
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import propagate, trace
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
from opentelemetry.propagators.textmap import Getter, Setter, TextMapPropagator
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from . import __version__
from .core.series import SERIES, Labels, Series, SeriesHook
from .net.clock import Clock, monotonic_ms
from .consumer import Consumer
from .delivery import DeliveryCallback, DeliveryFuture
from .producer import Producer
from .share_consumer import ShareConsumer
from .types import ConsumerRecord, Header, RecordMetadata, ShareRecord, TopicPartition

__all__ = ["OTelMetrics", "TracedProducer", "TracedConsumer", "TracedShareConsumer", "instrument_producer",
           "instrument_consumer", "instrument_share_consumer", "producer_context", "METRIC_NAMES",
           "HeadersGetter", "HeadersSetter"]

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


def _fail(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
    span.set_attribute("error.type", type(exc).__name__)


# ============================================================================================ tracing state
#: set while a traced call runs: calls it makes to other traced methods (``getone`` -> ``__anext__``) add no span
_IN_TRACED_CALL: ContextVar[bool] = ContextVar("akresil_otel_in_traced_call", default=False)


class _Tracing:
    """Where a client's spans go: a tracer and a propagator (None: the global ones at the time of each call,
    so clients built before ``opentelemetry-instrument`` configured the SDK still follow it)."""

    def __init__(self, tracer_provider: TracerProvider | None = None,
                 propagator: TextMapPropagator | None = None) -> None:
        self.tracer = _tracer(tracer_provider)
        self._propagator = propagator

    @property
    def propagator(self) -> TextMapPropagator:
        return _propagator(self._propagator)


#: the tracing of clients that ``instrument_*`` did not configure (``AkresilInstrumentor`` replaces it)
_default_tracing = _Tracing()


def set_default_tracing(tracer_provider: TracerProvider | None = None,
                        propagator: TextMapPropagator | None = None) -> None:
    """Providers for every client without its own (``instrument_*`` sets a client's own); used by the
    instrumentor's ``instrument(tracer_provider=...)``."""
    global _default_tracing
    _default_tracing = _Tracing(tracer_provider, propagator)


def _tracing(client: object) -> _Tracing:
    found = vars(client).get("_akresil_tracing")
    return found if isinstance(found, _Tracing) else _default_tracing


@contextmanager
def _inner_calls_untraced() -> Iterator[None]:
    token = _IN_TRACED_CALL.set(True)
    try:
        yield
    finally:
        _IN_TRACED_CALL.reset(token)


def _broker(client: Any, topic: str, partition: int) -> tuple[str, int] | None:
    """Host and port of the partition's leader (where its produce and fetch requests go), if known."""
    try:
        snapshot = client._cluster.metadata.snapshot
        leader = snapshot.leader_of(TopicPartition(topic, partition))
        broker = snapshot.brokers[leader[0]] if leader is not None else None
    except (AttributeError, KeyError):
        return None
    return (broker.host, broker.port) if broker is not None else None


def _set_server(span: Span, client: Any, topic: str, partition: int) -> None:
    address = _broker(client, topic, partition)
    if address is not None:
        span.set_attribute(SERVER_ADDRESS, address[0])
        span.set_attribute(SERVER_PORT, address[1])


def _raw_size(value: object) -> int | None:
    """The body size when the value is already the bytes that travel (no serializer / deserializer)."""
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, memoryview):
        return value.nbytes
    return None


# ============================================================================================ producer
#: Producer's own methods, captured before any patching: the traced methods call these
_PRODUCER_SEND = Producer.send
_PRODUCER_ENQUEUE = Producer.enqueue
_PRODUCER_SEND_MANY = Producer.send_many


@contextmanager
def _send_span(producer: Producer[Any, Any], topic: str, key: object, partition: int | None, count: int | None,
               headers: Sequence[Header] | None) -> Iterator[tuple[Span, list[Header]]]:
    tracing = _tracing(producer)
    attributes: dict[str, Any] = {SYSTEM: "kafka", OPERATION_TYPE: "send", OPERATION_NAME: "send",
                                  DESTINATION: topic, CLIENT_ID: str(producer.config.client_id)}
    if partition is not None:
        attributes[PARTITION] = str(partition)
    if count is not None:
        attributes[BATCH_COUNT] = count
    key_text = _key_attribute(key)
    if key_text is not None:
        attributes[MESSAGE_KEY] = key_text
    with tracing.tracer.start_as_current_span(f"send {topic}", kind=SpanKind.PRODUCER, attributes=attributes,
                                              record_exception=False, set_status_on_exception=False) as span:
        carrier: list[Header] = list(headers) if headers else []
        tracing.propagator.inject(carrier, setter=_SETTER)
        try:
            with _inner_calls_untraced():
                yield span, carrier
        except Exception as exc:     # a cancellation is not the operation's failure
            if partition is not None:
                _set_server(span, producer, topic, partition)
            _fail(span, exc)
            raise


class TracedProducer(Producer[K, V]):
    """A ``Producer`` whose ``send`` / ``enqueue`` / ``send_many`` create ``send`` spans (kind PRODUCER) and put
    the span's trace context in the records' headers: ``instrument_producer(producer)`` makes a producer one,
    ``AkresilInstrumentor`` gives ``Producer`` these methods.

    ``send`` spans end at the broker's acknowledgement and carry the partition, offset, broker address and body
    size; ``enqueue`` spans end once the record is buffered (the delivery is awaited later, outside the span); a
    ``send_many`` call is one span with ``messaging.batch.message_count``, its context shared by its records.
    """

    async def send(self, topic: str, value: V | None = None, key: K | None = None, *,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Sequence[Header] | None = None) -> RecordMetadata:
        """``Producer.send`` inside a ``send {topic}`` span that ends at the acknowledgement."""
        if _IN_TRACED_CALL.get():
            return await _PRODUCER_SEND(self, topic, value, key, partition=partition, timestamp_ms=timestamp_ms,
                                        headers=headers)
        with _send_span(self, topic, key, partition, None, headers) as (span, carrier):
            if value is None:
                span.set_attribute(TOMBSTONE, True)
            md = await _PRODUCER_SEND(self, topic, value, key, partition=partition, timestamp_ms=timestamp_ms,
                                      headers=carrier)
            span.set_attribute(PARTITION, str(md.partition))
            span.set_attribute(OFFSET, md.offset)
            if md.serialized_value_size >= 0 and value is not None:
                span.set_attribute(BODY_SIZE, md.serialized_value_size)
            _set_server(span, self, topic, md.partition)
            return md

    async def enqueue(self, topic: str, value: V | None = None, key: K | None = None, *,
                      partition: int | None = None, timestamp_ms: int | None = None,
                      headers: Sequence[Header] | None = None,
                      on_delivery: DeliveryCallback | None = None) -> DeliveryFuture:
        """``Producer.enqueue`` inside a ``send {topic}`` span that ends once the record is buffered."""
        if _IN_TRACED_CALL.get():
            return await _PRODUCER_ENQUEUE(self, topic, value, key, partition=partition,
                                           timestamp_ms=timestamp_ms, headers=headers, on_delivery=on_delivery)
        with _send_span(self, topic, key, partition, None, headers) as (span, carrier):
            if value is None:
                span.set_attribute(TOMBSTONE, True)
            elif self._value_serializer is None and (size := _raw_size(value)) is not None:
                span.set_attribute(BODY_SIZE, size)
            if partition is not None:
                _set_server(span, self, topic, partition)
            return await _PRODUCER_ENQUEUE(self, topic, value, key, partition=partition, timestamp_ms=timestamp_ms,
                                           headers=carrier, on_delivery=on_delivery)

    async def send_many(self, topic: str, records: Iterable[tuple[K | None, V | None]], *,
                        partition: int | None = None, headers: Sequence[Header] | None = None,
                        timestamp_ms: int | None = None, raise_on_error: bool = True) -> list[RecordMetadata]:
        """``Producer.send_many`` as one ``send {topic}`` span with the batch's message count."""
        if _IN_TRACED_CALL.get():
            return await _PRODUCER_SEND_MANY(self, topic, records, partition=partition, headers=headers,
                                             timestamp_ms=timestamp_ms, raise_on_error=raise_on_error)
        items = records if isinstance(records, list) else list(records)
        with _send_span(self, topic, None, partition, len(items), headers) as (span, carrier):
            if partition is not None:
                _set_server(span, self, topic, partition)
            return await _PRODUCER_SEND_MANY(self, topic, items, partition=partition, headers=carrier,
                                             timestamp_ms=timestamp_ms, raise_on_error=raise_on_error)


# ============================================================================================ consumers
AnyRecord = ConsumerRecord[Any, Any] | ShareRecord


class _Processing(NamedTuple):
    """The ``process`` span opened for the record an ``async for`` step (or ``getone``) returned; it is the
    current span until the consumer's next call, so the application's work on the record happens inside it."""

    record: AnyRecord
    span: Span
    token: Token[otel_context.Context]


def _consumer_attributes(consumer: Any, operation: str, name: str, topic: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {SYSTEM: "kafka", OPERATION_TYPE: operation, OPERATION_NAME: name,
                                  CLIENT_ID: str(consumer.config.client_id)}
    if topic is not None:
        attributes[DESTINATION] = topic
    group = consumer.config.group_id
    if group is not None:
        attributes[CONSUMER_GROUP] = group
    return attributes


def _record_attributes(attributes: dict[str, Any], consumer: Any, record: AnyRecord) -> None:
    attributes[PARTITION] = str(record.partition)
    attributes[OFFSET] = record.offset
    key_text = _key_attribute(record.key)
    if key_text is not None:
        attributes[MESSAGE_KEY] = key_text
    if record.value is None:
        attributes[TOMBSTONE] = True
    elif (size := _raw_size(record.value)) is not None:
        attributes[BODY_SIZE] = size
    address = _broker(consumer, record.topic, record.partition)
    if address is not None:
        attributes[SERVER_ADDRESS], attributes[SERVER_PORT] = address


def producer_context(record: AnyRecord, propagator: TextMapPropagator | None = None) -> otel_context.Context:
    """The trace context the producer put in ``record``'s headers (empty when there is none)."""
    return _propagator(propagator).extract(record.headers, context=otel_context.Context(), getter=_GETTER)


def _link(consumer: Any, record: AnyRecord) -> Link | None:
    context = producer_context(record, _tracing(consumer).propagator)
    span_context = trace.get_current_span(context).get_span_context()
    return Link(span_context) if span_context.is_valid else None


def _receive_span(consumer: Any, records: Sequence[AnyRecord]) -> None:
    """One ``receive`` span (kind CLIENT, as the conventions give pull-based receives) for ``records``."""
    if not records:
        return
    topics = {r.topic for r in records}
    topic = records[0].topic if len(topics) == 1 else None
    attributes = _consumer_attributes(consumer, "receive", "poll", topic)
    if len(records) == 1:
        _record_attributes(attributes, consumer, records[0])
    else:
        attributes[BATCH_COUNT] = len(records)
        if topic is not None and len({r.partition for r in records}) == 1:
            attributes[PARTITION] = str(records[0].partition)
            address = _broker(consumer, topic, records[0].partition)
            if address is not None:
                attributes[SERVER_ADDRESS], attributes[SERVER_PORT] = address
    links = [link for link in (_link(consumer, r) for r in records) if link is not None]
    span = _tracing(consumer).tracer.start_span(f"receive {topic}" if topic else "receive", kind=SpanKind.CLIENT,
                                                attributes=attributes, links=links)
    span.end()


def _start_process_span(consumer: Any, record: AnyRecord) -> tuple[Span, Link | None]:
    """A ``process {topic}`` span (kind CONSUMER): a child of the producer's span when the record carries its
    context (and linked to it), else of the current span."""
    attributes = _consumer_attributes(consumer, "process", "process", record.topic)
    _record_attributes(attributes, consumer, record)
    link = _link(consumer, record)
    parent = (producer_context(record, _tracing(consumer).propagator) if link is not None
              else otel_context.get_current())
    span = _tracing(consumer).tracer.start_span(f"process {record.topic}", context=parent, kind=SpanKind.CONSUMER,
                                                attributes=attributes, links=[link] if link is not None else None)
    return span, link


def _end_processing(consumer: Any) -> None:
    """End the ``process`` span of the record handed out last (the application came back for more)."""
    processing: _Processing | None = vars(consumer).pop("_akresil_processing", None)
    if processing is None:
        return
    if trace.get_current_span() is processing.span:     # still this task's current span: restore the parent
        otel_context.detach(processing.token)
    processing.span.end()


def _begin_processing(consumer: Any, record: AnyRecord) -> None:
    span, _ = _start_process_span(consumer, record)
    token = otel_context.attach(trace.set_span_in_context(span))
    vars(consumer)["_akresil_processing"] = _Processing(record, span, token)


@contextmanager
def _process(consumer: Any, record: AnyRecord) -> Iterator[Span]:
    processing: _Processing | None = vars(consumer).get("_akresil_processing")
    if processing is not None and processing.record is record:
        span = processing.span     # the span the async-for step opened for this record: no second one
        try:
            yield span
        except Exception as exc:
            _fail(span, exc)
            raise
        return
    span, _ = _start_process_span(consumer, record)
    with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
        try:
            yield span
        except Exception as exc:     # a cancellation is not the operation's failure
            _fail(span, exc)
            raise


_CONSUMER_GETMANY = Consumer.getmany
_CONSUMER_GETONE = Consumer.getone
_CONSUMER_ANEXT = Consumer.__anext__
_CONSUMER_CLOSE = Consumer.close


class TracedConsumer(Consumer[K, V]):
    """A ``Consumer`` that traces what it hands out: ``instrument_consumer(consumer)`` makes a consumer one,
    ``AkresilInstrumentor`` gives ``Consumer`` these methods.

    ``async for`` / ``getone``: a ``process {topic}`` span (kind CONSUMER) per record, a child of the record's
    producer span (linked to it too), current from the moment the record is returned until the next call to the
    consumer, so the application's spans for the record belong to the producer's trace. ``getmany``: one
    ``receive`` span (kind CLIENT) linked to every record's producer span; ``with consumer.process(record):``
    then gives one record's handling its ``process`` span.
    """

    async def getmany(self, *partitions: TopicPartition, timeout_ms: float = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord[K, V]]]:
        """``Consumer.getmany``; a non-empty answer is recorded as one ``receive`` span."""
        if _IN_TRACED_CALL.get():
            return await _CONSUMER_GETMANY(self, *partitions, timeout_ms=timeout_ms, max_records=max_records)
        _end_processing(self)
        with _inner_calls_untraced():
            got = await _CONSUMER_GETMANY(self, *partitions, timeout_ms=timeout_ms, max_records=max_records)
        _receive_span(self, [r for records in got.values() for r in records])
        return got

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord[K, V]:
        if _IN_TRACED_CALL.get():
            return await _CONSUMER_GETONE(self, *partitions)
        _end_processing(self)
        with _inner_calls_untraced():
            record = await _CONSUMER_GETONE(self, *partitions)
        _begin_processing(self, record)
        return record

    async def __anext__(self) -> ConsumerRecord[K, V]:
        if _IN_TRACED_CALL.get():
            return await _CONSUMER_ANEXT(self)
        _end_processing(self)
        with _inner_calls_untraced():
            record = await _CONSUMER_ANEXT(self)
        _begin_processing(self, record)
        return record

    async def close(self) -> None:
        _end_processing(self)
        await _CONSUMER_CLOSE(self)

    def process(self, record: ConsumerRecord[K, V]) -> AbstractContextManager[Span]:
        """``with consumer.process(record): handle(record)`` — the record's ``process {topic}`` span, current
        inside the block; an exception from the block is recorded on it and propagates.  For a record that
        ``async for`` / ``getone`` just returned, the span already open for it."""
        return _process(self, record)

    def producer_context(self, record: ConsumerRecord[K, V]) -> otel_context.Context:
        """The trace context the producer put in ``record``'s headers (empty when there is none)."""
        return producer_context(record, _tracing(self).propagator)


_SHARE_GETMANY = ShareConsumer.getmany
_SHARE_ANEXT = ShareConsumer.__anext__
_SHARE_CLOSE = ShareConsumer.close


class TracedShareConsumer(ShareConsumer):
    """A ``ShareConsumer`` traced as ``TracedConsumer``: ``process`` spans for ``async for``, ``receive`` spans
    for ``getmany``."""

    async def getmany(self, *, timeout_ms: float = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ShareRecord]]:
        if _IN_TRACED_CALL.get():
            return await _SHARE_GETMANY(self, timeout_ms=timeout_ms, max_records=max_records)
        _end_processing(self)
        with _inner_calls_untraced():
            got = await _SHARE_GETMANY(self, timeout_ms=timeout_ms, max_records=max_records)
        _receive_span(self, [r for records in got.values() for r in records])
        return got

    async def __anext__(self) -> ShareRecord:
        if _IN_TRACED_CALL.get():
            return await _SHARE_ANEXT(self)
        _end_processing(self)
        with _inner_calls_untraced():
            record = await _SHARE_ANEXT(self)
        _begin_processing(self, record)
        return record

    async def close(self) -> None:
        _end_processing(self)
        await _SHARE_CLOSE(self)

    def process(self, record: ShareRecord) -> AbstractContextManager[Span]:
        """As ``TracedConsumer.process``."""
        return _process(self, record)


#: (class, its traced subclass, the traced method names): what ``AkresilInstrumentor`` patches
TRACED_METHODS: tuple[tuple[type, type, tuple[str, ...]], ...] = (
    (Producer, TracedProducer, ("send", "enqueue", "send_many")),
    (Consumer, TracedConsumer, ("getmany", "getone", "__anext__", "close")),
    (ShareConsumer, TracedShareConsumer, ("getmany", "__anext__", "close")),
)

def _make_traced(client: Any, traced: type, tracer_provider: TracerProvider | None,
                 propagator: TextMapPropagator | None) -> None:
    """Turn ``client`` into an instance of its traced subclass (same object, same state: the subclass only
    adds methods) with its own tracing."""
    if not isinstance(client, traced):
        client.__class__ = traced
    vars(client)["_akresil_tracing"] = _Tracing(tracer_provider, propagator)


def instrument_producer(producer: Producer[K, V], *, tracer_provider: TracerProvider | None = None,
                        meter_provider: MeterProvider | None = None, propagator: TextMapPropagator | None = None,
                        metrics: bool = True) -> TracedProducer[K, V]:
    """Trace ``producer``'s sends and (``metrics=True``) record its metrics through ``meter_provider``.

    Returns ``producer`` itself, now a ``TracedProducer`` (a ``Producer`` subclass: it goes wherever a
    ``Producer`` is expected).  Providers and propagator default to the global ones."""
    if metrics:
        producer.hooks.add(OTelMetrics(meter_provider, client_id=str(producer.config.client_id), kind="producer"))
    _make_traced(producer, TracedProducer, tracer_provider, propagator)
    return cast("TracedProducer[K, V]", producer)


def instrument_consumer(consumer: Consumer[K, V], *, tracer_provider: TracerProvider | None = None,
                        meter_provider: MeterProvider | None = None, propagator: TextMapPropagator | None = None,
                        metrics: bool = True) -> TracedConsumer[K, V]:
    """Trace ``consumer``'s records and (``metrics=True``) record its metrics through ``meter_provider``.

    Returns ``consumer`` itself, now a ``TracedConsumer`` (a ``Consumer`` subclass)."""
    if metrics:
        consumer.hooks.add(OTelMetrics(meter_provider, client_id=str(consumer.config.client_id), kind="consumer"))
    _make_traced(consumer, TracedConsumer, tracer_provider, propagator)
    return cast("TracedConsumer[K, V]", consumer)


def instrument_share_consumer(consumer: ShareConsumer, *, tracer_provider: TracerProvider | None = None,
                              meter_provider: MeterProvider | None = None,
                              propagator: TextMapPropagator | None = None,
                              metrics: bool = True) -> TracedShareConsumer:
    """As ``instrument_consumer``, for a share consumer: returns it as a ``TracedShareConsumer``."""
    if metrics:
        consumer.hooks.add(OTelMetrics(meter_provider, client_id=str(consumer.config.client_id), kind="consumer"))
    _make_traced(consumer, TracedShareConsumer, tracer_provider, propagator)
    return cast(TracedShareConsumer, consumer)


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
