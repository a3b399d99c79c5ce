"""The tracing seam: what the clients call around sending, receiving and processing records.

A tracer is a hook of its own kind (as franz-go's kotel is a kgo hook): ``Producer(hooks=[tracer])`` or
``client.hooks.add(tracer)`` makes it the client's tracer, and ``set_default_tracer`` gives one to every client
that has none, made before or after (``AkresilInstrumentor`` uses it).  The clients call it at the three points
the messaging conventions name:

* ``start_send`` before a record is buffered: the tracer returns the headers to send (the caller's plus its
  trace context), and the client ends the span with the broker's acknowledgement (``send``) or once the record
  is buffered (``enqueue``), or with the error;
* ``received`` when a ``getmany`` hands out records;
* ``start_process`` when a record is handed to the application (``async for``, ``getone``, ``process()``, the
  runner's handler call): the tracer opens a span that stays current until the client ends it.

The clients pass a ``TraceSite`` (their kind, ids and a leader-address lookup) with each call, so a tracer needs
nothing private of them.  This module imports no tracing library: ``akresil.otel`` implements ``Tracer`` on
OpenTelemetry.  With no tracer the clients pay one attribute read per call, nothing else.
"""

from __future__ import annotations

import weakref
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Iterator, Protocol, Sequence, runtime_checkable

from ..types import ConsumerRecord, Header, RecordMetadata, ShareRecord, TopicPartition

if TYPE_CHECKING:
    from .metadata import MetadataCache

__all__ = ["Tracer", "SendSpan", "ProcessSpan", "TraceSite", "TracedRecord", "set_default_tracer",
           "default_tracer", "processing"]

#: the records a consumer hands out (``ShareRecord`` is a ``ConsumerRecord`` plus its delivery count)
TracedRecord = ConsumerRecord[Any, Any] | ShareRecord


class TraceSite:
    """What a tracer may know of the client calling it: its kind (``producer``, ``consumer``, ``share_consumer``),
    ``client_id``, ``group_id`` and where a partition's leader is (the broker its produce and fetch requests go
    to), read from the client's metadata at the time of the call."""

    __slots__ = ("kind", "client_id", "group_id", "_metadata")

    def __init__(self, kind: str, client_id: str, group_id: str | None, metadata: MetadataCache) -> None:
        self.kind = kind
        self.client_id = client_id
        self.group_id = group_id
        self._metadata = metadata

    def leader(self, topic: str, partition: int) -> tuple[str, int] | None:
        """Host and port of the partition's leader, if the client's metadata knows it."""
        snapshot = self._metadata.snapshot
        leader = snapshot.leader_of(TopicPartition(topic, partition))
        broker = snapshot.brokers.get(leader[0]) if leader is not None else None
        return (broker.host, broker.port) if broker is not None else None


class SendSpan(Protocol):
    """One traced send: ``headers`` are what the client sends (the caller's plus the trace context)."""

    headers: list[Header]

    def end(self, metadata: RecordMetadata | None = None, error: BaseException | None = None) -> None:
        """The send is over: acknowledged (``metadata``), buffered (neither) or failed (``error``; a
        cancellation is passed too, and is no failure of the operation)."""


class ProcessSpan(Protocol):
    """The processing of records handed to the application; current (in the tracer's sense) from its start
    until ``end()``.  ``span`` is what ``with consumer.process(record) as span`` gives the application."""

    records: tuple[TracedRecord, ...]
    span: Any

    def fail(self, error: BaseException) -> None:
        """The processing raised ``error`` (recorded; the span stays open until ``end``)."""

    def end(self) -> None: ...


@runtime_checkable
class Tracer(Protocol):
    """What the clients call when tracing; ``akresil.otel.OTelTracing`` is the OpenTelemetry implementation."""

    def start_send(self, site: TraceSite, topic: str, key: object, partition: int | None, count: int | None,
                   headers: Sequence[Header] | None, *, tombstone: bool, body_size: int | None) -> SendSpan:
        """A send of one record (``count`` None) or of ``count`` records sharing ``headers`` (``send_many``)."""

    def received(self, site: TraceSite, records: Sequence[TracedRecord]) -> None:
        """A poll handed out ``records`` (never empty)."""

    def start_process(self, site: TraceSite, records: Sequence[TracedRecord]) -> ProcessSpan:
        """The application starts processing ``records`` (one, or a batch handled as a unit)."""


# ----------------------------------------------------------------------------- the default tracer
_default: Tracer | None = None
#: every client's hook registry that follows the default (it has no tracer of its own)
_following: weakref.WeakSet[Any] = weakref.WeakSet()


def default_tracer() -> Tracer | None:
    return _default


def set_default_tracer(tracer: Tracer | None) -> None:
    """Give ``tracer`` to every client without a tracer of its own, made before or after (None: take it away)."""
    global _default
    if tracer is not None and not isinstance(tracer, Tracer):
        raise TypeError(f"tracer: {tracer!r} does not implement start_send, received and start_process")
    _default = tracer
    for hooks in list(_following):
        hooks.tracer = tracer


def follow_default(hooks: Any, follow: bool) -> None:
    """Called by ``Hooks``: a registry without a tracer of its own follows the default."""
    if follow:
        _following.add(hooks)
    else:
        _following.discard(hooks)


#: what ``processing`` gives when nothing traces (a nullcontext can be entered any number of times)
_UNTRACED: AbstractContextManager[None] = nullcontext()


def processing(tracer: Tracer | None, site: TraceSite, records: tuple[TracedRecord, ...],
               open_span: ProcessSpan | None) -> AbstractContextManager[Any]:
    """A consumer's ``with consumer.process(record, ...)``: the span ``open_span`` already has for these records
    (the one ``async for`` handed out), else a new one ended with the block; an exception from the block is
    recorded on it and propagates.  Without a tracer it is a shared no-op context (``as`` gets None)."""
    if open_span is None and tracer is None:
        return _UNTRACED
    return _processing(tracer, site, records, open_span)


@contextmanager
def _processing(tracer: Tracer | None, site: TraceSite, records: tuple[TracedRecord, ...],
                open_span: ProcessSpan | None) -> Iterator[Any]:
    if open_span is not None and len(open_span.records) == len(records) \
            and all(a is b for a, b in zip(open_span.records, records)):
        span = open_span
        owned = False
    elif tracer is None:
        yield None
        return
    else:
        span = tracer.start_process(site, records)
        owned = True
    try:
        yield span.span
    except Exception as exc:     # a cancellation is no failure of the processing
        span.fail(exc)
        raise
    finally:
        if owned:
            span.end()
