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
OpenTelemetry metrics API: same events, same label names as attributes, same histogram buckets; names are
dotted (``METRIC_NAMES`` maps each Prometheus name to its OpenTelemetry name).
"""

from __future__ import annotations

import threading
import weakref
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar, Token
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import propagate, trace
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
from opentelemetry.propagators.textmap import Getter, Setter, TextMapPropagator
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from . import __version__
from .metrics import (COUNT_BUCKETS, KINDS, LATENCY_BUCKETS, REBALANCE_BUCKETS, SIZE_BUCKETS, WAIT_BUCKETS,
                      api_name)
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
#: Prometheus name (akresil.metrics) -> OpenTelemetry instrument name
METRIC_NAMES: dict[str, str] = {
    "akresil_request_duration_seconds": "akresil.request.duration",
    "akresil_requests_in_flight": "akresil.requests.in_flight",
    "akresil_throttle_seconds": "akresil.throttle.duration",
    "akresil_throttle_mute_seconds": "akresil.throttle.mute_remaining",
    "akresil_backoff_seconds": "akresil.backoff.duration",
    "akresil_connections": "akresil.connections",
    "akresil_connects_total": "akresil.connects",
    "akresil_disconnects_total": "akresil.disconnects",
    "akresil_sent_bytes_total": "akresil.sent_bytes",
    "akresil_received_bytes_total": "akresil.received_bytes",
    "akresil_metadata_refreshes_total": "akresil.metadata.refreshes",
    "akresil_metadata_refresh_requests_total": "akresil.metadata.refresh_requests",
    "akresil_metadata_refresh_failures_total": "akresil.metadata.refresh_failures",
    "akresil_stale_metadata_ignored_total": "akresil.metadata.stale_ignored",
    "akresil_leader_hints_total": "akresil.leader_hints",
    "akresil_producer_records_sent_total": "akresil.producer.records_sent",
    "akresil_producer_record_errors_total": "akresil.producer.record_errors",
    "akresil_producer_record_retries_total": "akresil.producer.record_retries",
    "akresil_producer_batch_retries_total": "akresil.producer.batch_retries",
    "akresil_producer_immediate_retries_total": "akresil.producer.immediate_retries",
    "akresil_producer_records_expired_total": "akresil.producer.records_expired",
    "akresil_producer_batch_size_bytes": "akresil.producer.batch_size",
    "akresil_producer_batch_records": "akresil.producer.batch_records",
    "akresil_producer_record_queue_time_seconds": "akresil.producer.record_queue_time",
    "akresil_producer_buffer_exhausted_total": "akresil.producer.buffer_exhausted",
    "akresil_consumer_records_consumed_total": "akresil.consumer.records_consumed",
    "akresil_consumer_consumed_bytes_total": "akresil.consumer.consumed_bytes",
    "akresil_consumer_lag_records": "akresil.consumer.lag",
    "akresil_consumer_rebalances_total": "akresil.consumer.rebalances",
    "akresil_consumer_rebalance_failures_total": "akresil.consumer.rebalance_failures",
    "akresil_consumer_rebalance_duration_seconds": "akresil.consumer.rebalance_duration",
    "akresil_consumer_assigned_partitions": "akresil.consumer.assigned_partitions",
}

_Attrs = tuple[tuple[str, str], ...]


class _Instruments:
    """Every akresil instrument on one meter, created once; gauges are observed from the live hooks."""

    def __init__(self, meter: Meter) -> None:
        n = METRIC_NAMES
        self.hooks: weakref.WeakSet[OTelMetrics] = weakref.WeakSet()

        def hist(prom: str, unit: str, buckets: Sequence[float], doc: str) -> Any:
            return meter.create_histogram(n[prom], unit=unit, description=doc,
                                          explicit_bucket_boundaries_advisory=list(buckets))

        def count(prom: str, unit: str, doc: str) -> Any:
            return meter.create_counter(n[prom], unit=unit, description=doc)

        def gauge(prom: str, unit: str, doc: str) -> None:
            meter.create_observable_gauge(n[prom], callbacks=[self._observer(prom)], unit=unit, description=doc)

        self.request_duration = hist("akresil_request_duration_seconds", "s", LATENCY_BUCKETS,
                                     "Time from writing a request to its response, by API and node")
        self.throttle = hist("akresil_throttle_seconds", "s", WAIT_BUCKETS,
                             "throttle_time_ms the broker reported in responses (> 0 only)")
        self.backoff = hist("akresil_backoff_seconds", "s", WAIT_BUCKETS,
                            "Backoffs chosen by the client (KIP-580), by what backed off")
        self.connects = count("akresil_connects_total", "{connection}", "Connections established")
        self.disconnects = count("akresil_disconnects_total", "{connection}",
                                 "Connections closed, by whether a failure closed them")
        self.bytes_sent = count("akresil_sent_bytes_total", "By", "Bytes written to broker connections")
        self.bytes_received = count("akresil_received_bytes_total", "By", "Bytes read from broker connections")
        self.metadata_refreshes = count("akresil_metadata_refreshes_total", "{refresh}",
                                        "Completed metadata refreshes, once per cause they served")
        self.metadata_refresh_requests = count("akresil_metadata_refresh_requests_total", "{request}",
                                               "Metadata refreshes asked for, by cause")
        self.metadata_refresh_failures = count("akresil_metadata_refresh_failures_total", "{failure}",
                                               "Metadata requests that failed")
        self.stale_metadata = count("akresil_stale_metadata_ignored_total", "{partition}",
                                    "Partitions whose Metadata leader epoch was older than the cached one")
        self.leader_hints = count("akresil_leader_hints_total", "{hint}",
                                  "KIP-951 leader hints, by outcome (accepted/ignored) and reason")
        self.records_sent = count("akresil_producer_records_sent_total", "{record}",
                                  "Records acknowledged by the broker")
        self.record_errors = count("akresil_producer_record_errors_total", "{record}",
                                   "Records that failed for good, by error class")
        self.record_retries = count("akresil_producer_record_retries_total", "{record}",
                                    "Records sent again after a failed attempt, by reason")
        self.batch_retries = count("akresil_producer_batch_retries_total", "{batch}",
                                   "Batches sent again after a failed attempt, by reason")
        self.immediate_retries = count("akresil_producer_immediate_retries_total", "{batch}",
                                       "Batch retries sent without backoff after a KIP-951 epoch rise")
        self.records_expired = count("akresil_producer_records_expired_total", "{record}",
                                     "Records failed by delivery_timeout_ms (KIP-91), by stage")
        self.batch_size = hist("akresil_producer_batch_size_bytes", "By", SIZE_BUCKETS,
                               "Encoded size of each batch sent (retries included)")
        self.batch_records = hist("akresil_producer_batch_records", "{record}", COUNT_BUCKETS,
                                  "Records in each batch sent (retries included)")
        self.queue_time = hist("akresil_producer_record_queue_time_seconds", "s", LATENCY_BUCKETS,
                               "Time a batch waited in the accumulator before its first send")
        self.buffer_exhausted = count("akresil_producer_buffer_exhausted_total", "{append}",
                                      "Appends that had to wait for buffer_memory")
        self.records_consumed = count("akresil_consumer_records_consumed_total", "{record}",
                                      "Records handed to the application")
        self.bytes_consumed = count("akresil_consumer_consumed_bytes_total", "By",
                                    "Bytes of the fetched record batches handed to the application (as fetched)")
        self.rebalances = count("akresil_consumer_rebalances_total", "{rebalance}", "Completed group rebalances")
        self.rebalance_failures = count("akresil_consumer_rebalance_failures_total", "{rebalance}",
                                        "Rebalances that failed, by error class")
        self.rebalance_duration = hist("akresil_consumer_rebalance_duration_seconds", "s", REBALANCE_BUCKETS,
                                       "Time from JoinGroup to the new assignment")
        gauge("akresil_requests_in_flight", "{request}", "Requests written to a node and not yet answered")
        gauge("akresil_throttle_mute_seconds", "s", "Time left in a node's KIP-219 mute window")
        gauge("akresil_connections", "{connection}", "Open broker connections")
        gauge("akresil_consumer_lag_records", "{record}",
              "Records between the position and the high watermark (last stable offset under read_committed)")
        gauge("akresil_consumer_assigned_partitions", "{partition}", "Partitions currently assigned")

    def _observer(self, prom: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(value, dict(attrs)) for hook in list(self.hooks)
                    for attrs, value in hook._gauge_values(prom)]
        return observe


_SHARED: weakref.WeakKeyDictionary[Meter, _Instruments] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def _instruments(meter: Meter) -> _Instruments:
    with _SHARED_LOCK:
        found = _SHARED.get(meter)
        if found is None:
            found = _SHARED[meter] = _Instruments(meter)
        return found


class OTelMetrics:
    """The OpenTelemetry twin of ``akresil.metrics.ClientMetrics``: ``hooks=[OTelMetrics(client_id=..., kind=...)]``.

    ``meter_provider``: None uses the global one.  Attributes carry the Prometheus label names (``client_id``,
    ``node_id``, ``topic``, ...).  Gauges are observable: each collection reads the current values, and
    ``close()`` (or a rebalance that takes a partition away) makes their series disappear, as in Prometheus.
    """

    def __init__(self, meter_provider: MeterProvider | None = None, *, client_id: str, kind: str,
                 clock: Clock = monotonic_ms) -> None:
        if not isinstance(client_id, str) or not client_id:
            raise ValueError(f"client_id: expected a non-empty string, got {client_id!r}")
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        self.client_id = client_id
        self.kind = kind
        self._clock = clock
        meter = otel_metrics.get_meter(_SCOPE, __version__, meter_provider=meter_provider)
        self._m = _instruments(meter)
        self._attrs: dict[tuple[str, ...], Mapping[str, str]] = {}
        self._in_flight: dict[int, float] = {}
        self._muted_until: dict[int, float] = {}
        self._node_states: dict[int, str] = {}
        self._connections = 0
        self._lag: dict[tuple[str, int], float] = {}
        self._assigned: int | None = None
        self._m.hooks.add(self)

    def _a(self, *pairs: str) -> Mapping[str, str]:
        """Attributes ``client_id`` + ``pairs`` (name, value, name, value, ...), cached per combination."""
        found = self._attrs.get(pairs)
        if found is None:
            found = self._attrs[pairs] = {"client_id": self.client_id,
                                          **{pairs[i]: pairs[i + 1] for i in range(0, len(pairs), 2)}}
        return found

    def _gauge_values(self, prom: str) -> list[tuple[_Attrs, float]]:
        c = ("client_id", self.client_id)
        if prom == "akresil_requests_in_flight":
            return [((c, ("node_id", str(n))), v) for n, v in self._in_flight.items()]
        if prom == "akresil_throttle_mute_seconds":
            return [((c, ("node_id", str(n))), self.mute_seconds(n)) for n in self._muted_until]
        if prom == "akresil_connections":
            return [((c,), float(self._connections))] if self._node_states else []
        if prom == "akresil_consumer_lag_records":
            return [((c, ("topic", t), ("partition", str(p))), v) for (t, p), v in self._lag.items()]
        if prom == "akresil_consumer_assigned_partitions":
            return [((c,), float(self._assigned))] if self._assigned is not None else []
        raise KeyError(prom)

    def mute_seconds(self, node_id: int) -> float:
        return max(0.0, self._muted_until.get(node_id, 0.0) - self._clock()) / 1000.0

    # ------------------------------------------------------------------ requests
    def on_request_sent(self, *, node_id: int, in_flight: int, **_: Any) -> None:
        self._in_flight[node_id] = in_flight

    def on_request_done(self, *, node_id: int, in_flight: int, **_: Any) -> None:
        self._in_flight[node_id] = in_flight

    def on_response_received(self, *, node_id: int | None, api_key: Any, latency_ms: float, **_: Any) -> None:
        self._m.request_duration.record(latency_ms / 1000.0,
                                        self._a("node_id", _node(node_id), "api", api_name(api_key)))

    def on_throttled(self, *, node_id: int, api_key: Any, throttle_ms: float, muted: bool = False,
                     muted_until: float = 0.0, **_: Any) -> None:
        self._m.throttle.record(throttle_ms / 1000.0, self._a("node_id", str(node_id), "api", api_name(api_key)))
        if muted and muted_until > self._muted_until.get(node_id, 0.0):
            self._muted_until[node_id] = muted_until

    # ------------------------------------------------------------------ connections
    def on_node_state(self, *, node_id: int, state: str, **_: Any) -> None:
        previous = self._node_states.get(node_id)
        self._node_states[node_id] = state
        if state == "connected" and previous != "connected":
            self._m.connects.add(1, self._a("node_id", str(node_id)))
            self._connections += 1
        elif previous == "connected" and state != "connected":
            self._m.disconnects.add(1, self._a("node_id", str(node_id),
                                               "failed", "true" if state == "backing-off" else "false"))
            self._connections -= 1

    def on_reconnect_backoff(self, *, backoff_ms: float, **_: Any) -> None:
        self._m.backoff.record(backoff_ms / 1000.0, self._a("source", "reconnect"))

    def on_connection_bytes_sent(self, *, node_id: int | None, nbytes: int, **_: Any) -> None:
        self._m.bytes_sent.add(nbytes, self._a("node_id", _node(node_id)))

    def on_connection_bytes_received(self, *, node_id: int | None, nbytes: int, **_: Any) -> None:
        self._m.bytes_received.add(nbytes, self._a("node_id", _node(node_id)))

    # ------------------------------------------------------------------ metadata
    def on_metadata_refresh_requested(self, *, cause: str, **_: Any) -> None:
        self._m.metadata_refresh_requests.add(1, self._a("cause", cause))

    def on_metadata_refresh(self, *, causes: Iterable[str] = (), **_: Any) -> None:
        for cause in tuple(causes) or ("periodic",):
            self._m.metadata_refreshes.add(1, self._a("cause", cause))

    def on_metadata_refresh_failed(self, *, backoff_ms: float, **_: Any) -> None:
        self._m.metadata_refresh_failures.add(1, self._a())
        self._m.backoff.record(backoff_ms / 1000.0, self._a("source", "metadata"))

    def on_stale_metadata_ignored(self, *, topic: str, **_: Any) -> None:
        self._m.stale_metadata.add(1, self._a("topic", topic))

    def on_leader_hint(self, *, topic: str, accepted: bool, reason: str, **_: Any) -> None:
        self._m.leader_hints.add(1, self._a("topic", topic, "outcome", "accepted" if accepted else "ignored",
                                            "reason", reason))

    # ------------------------------------------------------------------ producer
    def on_batch_completed(self, *, topic: str, records: int, error: str | None, **_: Any) -> None:
        if error is None:
            self._m.records_sent.add(records, self._a("topic", topic))
        else:
            self._m.record_errors.add(records, self._a("topic", topic, "error", error))

    def on_batch_retry(self, *, topic: str, reason: str, skip_backoff: bool, backoff_ms: float,
                       records: int | None = None, **_: Any) -> None:
        self._m.batch_retries.add(1, self._a("topic", topic, "reason", reason))
        if records is not None:
            self._m.record_retries.add(records, self._a("topic", topic, "reason", reason))
        if skip_backoff:
            self._m.immediate_retries.add(1, self._a("topic", topic))
        else:
            self._m.backoff.record(max(0.0, backoff_ms) / 1000.0, self._a("source", "retry"))

    def on_batch_expired(self, *, topic: str, stage: str, records: int, **_: Any) -> None:
        self._m.records_expired.add(records, self._a("topic", topic, "stage", stage))

    def on_batch_sent(self, *, topic: str, records: int, size_bytes: int, attempt: int = 0,
                      queue_ms: float | None = None, **_: Any) -> None:
        self._m.batch_size.record(size_bytes, self._a("topic", topic))
        self._m.batch_records.record(records, self._a("topic", topic))
        if attempt == 0 and queue_ms is not None:
            self._m.queue_time.record(max(0.0, queue_ms) / 1000.0, self._a())

    def on_buffer_exhausted(self, **_: Any) -> None:
        self._m.buffer_exhausted.add(1, self._a())

    # ------------------------------------------------------------------ consumer
    def on_records_consumed(self, *, topic: str, partition: int, records: int, bytes: int = 0,
                            lag: int | None = None, **_: Any) -> None:
        self._m.records_consumed.add(records, self._a("topic", topic))
        if bytes:
            self._m.bytes_consumed.add(bytes, self._a("topic", topic))
        if lag is not None and lag >= 0:
            self._lag[(topic, partition)] = lag

    def on_rebalance(self, *, assigned: Iterable[Any] = (), revoked: Iterable[Any] = (),
                     duration_ms: float | None = None, **_: Any) -> None:
        self._m.rebalances.add(1, self._a())
        if duration_ms is not None:
            self._m.rebalance_duration.record(max(0.0, duration_ms) / 1000.0, self._a())
        now_assigned = {(str(tp[0]), int(tp[1])) for tp in assigned}
        self._assigned = len(now_assigned)
        gone = {(str(tp[0]), int(tp[1])) for tp in revoked} | (set(self._lag) - now_assigned)
        for key in gone:
            self._lag.pop(key, None)

    def on_rebalance_failed(self, *, error: str, **_: Any) -> None:
        self._m.rebalance_failures.add(1, self._a("error", error))

    # ------------------------------------------------------------------ lifecycle
    def on_client_closed(self, **_: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop reporting this client's gauges (connections, in-flight, mute windows, lag); counters stay.

        The client calls it when it closes (the ``client_closed`` event)."""
        self._lag.clear()
        self._in_flight.clear()
        self._muted_until.clear()
        self._node_states.clear()
        self._connections = 0
        self._assigned = None
        self._m.hooks.discard(self)


def _node(node_id: int | None) -> str:
    return "bootstrap" if node_id is None else str(node_id)
