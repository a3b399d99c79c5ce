"""Observability edge of the core: named events fanned out to user-registered hook objects.

The core never imports a metrics library. It calls ``hooks.emit(EVENT, **fields)``; every registered hook
that defines ``on_<event>(**fields)`` gets the call, and a hook may define ``on_event(name, fields)`` to see
everything (logging, tracing). ``Hook`` declares every handler with its fields' types: a hook that subclasses it
is checked by mypy (a misspelt field or a wrong type is an incompatible override) and pays nothing for the
handlers it leaves out (the registry skips ``Hook``'s own declarations). A plain object with ``on_<event>``
methods keeps working, unchecked. ``akresil.metrics`` is one hook implementation; users attach their own.
This mirrors franz-go's hooks: small, optional interfaces discovered per hook, so a hook pays only for what
it implements and emitting to no hooks costs one dict lookup.

A hook that raises is logged and skipped: a faulty metrics exporter must never break delivery.

A tracer (``core.tracing.Tracer``) is a hook of another kind: the registry keeps it as ``tracer``, which the
clients call around sends, polls and processing; without one of its own a registry follows the default tracer
(``core.tracing.set_default_tracer``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from . import tracing

if TYPE_CHECKING:
    from ..protocol.api import ApiKey
    from ..types import TopicPartition

log = logging.getLogger(__name__)

# Event names and the fields each carries (all times in ms). Emitters are named in brackets.
# node_id is always a broker's id (-1, -2, ...: a bootstrap address); ``lane`` says which of its connections
# ("shared", or "group": a member's traffic to its coordinator)
REQUEST_SENT = "request_sent"                # node_id, lane, in_flight                 [NodeState]
THROTTLED = "throttled"                      # node_id, lane, api_key, version, throttle_ms, muted, muted_until
RECONNECT_BACKOFF = "reconnect_backoff"      # node_id, lane, failures, backoff_ms       [NodeState]
NODE_STATE = "node_state"                    # node_id, lane, state                      [NodeState]
METADATA_REQUEST = "metadata_request"        # node_id                                   [net.Cluster]
METADATA_REFRESH_REQUESTED = "metadata_refresh_requested"  # cause, due_at               [MetadataCache]
METADATA_REFRESH = "metadata_refresh"        # causes, brokers, topics, stale_partitions, not_ready [MetadataCache]
METADATA_REFRESH_FAILED = "metadata_refresh_failed"  # failures, backoff_ms              [MetadataCache]
STALE_METADATA_IGNORED = "stale_metadata_ignored"  # topic, partition, known_epoch, received_epoch
LEADER_HINT = "leader_hint"                  # topic, partition, leader_id, leader_epoch, accepted, reason
BATCH_RETRY = "batch_retry"                  # topic, partition, attempt, reason, skip_backoff, records, backoff_ms
BATCH_EXPIRED = "batch_expired"              # topic, partition, stage, records, age_ms  [RecordAccumulator]
BATCH_COMPLETED = "batch_completed"          # topic, partition, records, attempts, error [RecordAccumulator]
BUFFER_EXHAUSTED = "buffer_exhausted"        # needed, used, limit                       [RecordAccumulator]
BATCH_SPLIT = "batch_split"                  # topic, partition, records, batches, size_bytes [RecordAccumulator]

REQUEST_DONE = "request_done"                # node_id, lane, in_flight                 [NodeState]
BATCH_SENT = "batch_sent"                    # node_id, topic, partition, records, size_bytes, attempt, queue_ms [Sender]
RECORDS_CONSUMED = "records_consumed"        # topic, partition, records, bytes, lag      [Consumer]
REBALANCE = "rebalance"                      # group_id, generation, assigned, revoked, duration_ms [GroupSession]
REBALANCE_FAILED = "rebalance_failed"        # group_id, error                            [GroupSession]
PRODUCER_ID = "producer_id"                  # producer_id, producer_epoch               [net.Sender]
RESPONSE_RECEIVED = "response_received"      # node_id, api_key, version, latency_ms, response [Connection]
CONNECTION_BYTES_SENT = "connection_bytes_sent"          # node_id, nbytes                [Connection]
CONNECTION_BYTES_RECEIVED = "connection_bytes_received"  # node_id, nbytes                [Connection]
CLIENT_CLOSED = "client_closed"              # (no fields): the client closed; hooks drop its gauges [clients]

ALL_EVENTS = frozenset({
    REQUEST_SENT, THROTTLED, RECONNECT_BACKOFF, NODE_STATE, METADATA_REQUEST, METADATA_REFRESH_REQUESTED,
    METADATA_REFRESH, METADATA_REFRESH_FAILED, STALE_METADATA_IGNORED, LEADER_HINT, BATCH_RETRY, BATCH_EXPIRED,
    BATCH_COMPLETED, BUFFER_EXHAUSTED, BATCH_SPLIT, REQUEST_DONE, BATCH_SENT, RECORDS_CONSUMED, REBALANCE, REBALANCE_FAILED,
    PRODUCER_ID, RESPONSE_RECEIVED, CONNECTION_BYTES_SENT,
    CONNECTION_BYTES_RECEIVED, CLIENT_CLOSED,
})


class Hook:
    """The typed handlers a hook may implement, one per event (``on_<event>``, called with the event's fields as
    keywords) plus ``on_event(name, fields)`` for all of them. Subclass it and override the handlers you need:
    the type checker then checks each override's fields; an override may take fewer fields with ``**_: Any``.
    The declarations here are never called (``Hooks`` skips them)."""

    def on_event(self, name: str, fields: dict[str, Any]) -> None:
        """Every event: its name and fields."""

    def on_request_sent(self, *, node_id: int, lane: str, in_flight: int) -> None: ...
    def on_request_done(self, *, node_id: int, lane: str, in_flight: int) -> None: ...
    def on_throttled(self, *, node_id: int, lane: str, api_key: int, version: int, throttle_ms: float, muted: bool,
                     muted_until: float) -> None: ...
    def on_reconnect_backoff(self, *, node_id: int, lane: str, failures: int, backoff_ms: float) -> None: ...
    def on_node_state(self, *, node_id: int, lane: str, state: str) -> None: ...
    def on_metadata_request(self, *, node_id: int) -> None: ...
    def on_metadata_refresh_requested(self, *, cause: str, due_at: float) -> None: ...
    def on_metadata_refresh(self, *, causes: Sequence[str], brokers: int, topics: int, stale_partitions: int,
                            not_ready: int) -> None: ...
    def on_metadata_refresh_failed(self, *, failures: int, backoff_ms: float) -> None: ...
    def on_stale_metadata_ignored(self, *, topic: str, partition: int, known_epoch: int,
                                  received_epoch: int) -> None: ...
    def on_leader_hint(self, *, topic: str, partition: int, leader_id: int, leader_epoch: int, accepted: bool,
                       reason: str) -> None: ...
    def on_batch_retry(self, *, topic: str, partition: int, attempt: int, reason: str, skip_backoff: bool,
                       records: int, backoff_ms: float) -> None: ...
    def on_batch_expired(self, *, topic: str, partition: int, stage: str, records: int, age_ms: float) -> None: ...
    def on_batch_completed(self, *, topic: str, partition: int, records: int, attempts: int,
                           error: str | None) -> None: ...
    def on_buffer_exhausted(self, *, needed: int, used: int, limit: int) -> None: ...
    def on_batch_split(self, *, topic: str, partition: int, records: int, batches: int, size_bytes: int) -> None: ...
    def on_batch_sent(self, *, node_id: int, topic: str, partition: int, records: int, size_bytes: int,
                      attempt: int, queue_ms: float) -> None: ...
    def on_records_consumed(self, *, topic: str, partition: int, records: int, bytes: int,
                            lag: int | None) -> None: ...
    def on_rebalance(self, *, group_id: str, generation: int, assigned: list[TopicPartition],
                     revoked: list[TopicPartition], duration_ms: float) -> None: ...
    def on_rebalance_failed(self, *, group_id: str, error: str) -> None: ...
    def on_producer_id(self, *, producer_id: int, producer_epoch: int) -> None: ...
    def on_response_received(self, *, node_id: int, api_key: ApiKey, version: int, latency_ms: float,
                             response: Mapping[str, Any]) -> None: ...
    def on_connection_bytes_sent(self, *, node_id: int, nbytes: int) -> None: ...
    def on_connection_bytes_received(self, *, node_id: int, nbytes: int) -> None: ...
    def on_client_closed(self) -> None: ...


def _handler(hook: object, name: str) -> Callable[..., Any] | None:
    """``hook``'s handler ``name``, unless it is ``Hook``'s declaration (nothing to call)."""
    method = getattr(hook, name, None)
    if not callable(method) or getattr(method, "__func__", None) is getattr(Hook, name, None):
        return None
    return method  # type: ignore[no-any-return]


class Hooks:
    """A registry of hook objects; ``emit`` dispatches an event to the hooks that handle it."""

    __slots__ = ("_hooks", "_dispatch", "tracer", "_own_tracer", "__weakref__")

    def __init__(self, hooks: Iterable[object] = ()) -> None:
        self._hooks: list[object] = []
        # event name -> bound handlers, built lazily so emit stays a dict lookup on the hot path
        self._dispatch: dict[str, tuple[Callable[..., Any], ...]] = {}
        #: the tracer the client calls (its own, else the default one); None: the client traces nothing
        self.tracer: tracing.Tracer | None = tracing.default_tracer()
        self._own_tracer: tracing.Tracer | None = None
        tracing.follow_default(self, True)
        for hook in hooks:
            self.add(hook)

    def add(self, hook: object) -> None:
        """Register ``hook``: a tracer (``core.tracing.Tracer``, one per client) or an event hook, which must
        implement ``on_event`` or at least one ``on_<event>`` method (an object may be both)."""
        handles_events = _handler(hook, "on_event") is not None or any(
            _handler(hook, "on_" + name) is not None for name in ALL_EVENTS)
        if isinstance(hook, tracing.Tracer):
            if self._own_tracer is not None and self._own_tracer is not hook:
                raise ValueError(f"hook {hook!r}: this client already has a tracer ({self._own_tracer!r}); "
                                 "remove it first")
            self._own_tracer = self.tracer = hook
            tracing.follow_default(self, False)
        elif not handles_events:
            raise TypeError(f"hook {hook!r} implements neither on_event nor any on_<event> method "
                            f"(events: {', '.join(sorted(ALL_EVENTS))}) nor a tracer's start_send, received "
                            "and start_process")
        if handles_events:
            self._hooks.append(hook)
            self._dispatch.clear()

    def set_tracer(self, tracer: tracing.Tracer | None) -> None:
        """Make ``tracer`` this client's own tracer, replacing the one it had (None: follow the default)."""
        if self._own_tracer is not None:
            self.remove(self._own_tracer)
        if tracer is not None:
            self.add(tracer)

    def remove(self, hook: object) -> None:
        if hook is self._own_tracer and hook is not None:
            self._own_tracer = None
            self.tracer = tracing.default_tracer()
            tracing.follow_default(self, True)
            if hook not in self._hooks:
                return
        self._hooks.remove(hook)
        self._dispatch.clear()

    def __len__(self) -> int:
        return len(self._hooks)

    def _handlers(self, event: str) -> tuple[Callable[..., Any], ...]:
        handlers: list[Callable[..., Any]] = []
        for hook in self._hooks:
            specific = _handler(hook, "on_" + event)
            if specific is not None:
                handlers.append(specific)
            generic = _handler(hook, "on_event")
            if generic is not None:
                handlers.append(_generic(generic, event))
        result = tuple(handlers)
        self._dispatch[event] = result
        return result

    def emit(self, event: str, /, **fields: Any) -> None:
        """Deliver ``event`` to every interested hook; exceptions from hooks are logged, never raised."""
        if not self._hooks:
            return
        handlers = self._dispatch.get(event)
        if handlers is None:
            handlers = self._handlers(event)
        for handler in handlers:
            try:
                handler(**fields)
            except Exception:  # noqa: BLE001 - a hook must not break the client
                log.exception("hook %r failed on event %s", handler, event)


def _generic(on_event: Callable[[str, dict[str, Any]], Any], event: str) -> Callable[..., Any]:
    def call(**fields: Any) -> Any:
        return on_event(event, fields)
    return call


class RecordingHook(Hook):
    """Keeps every event as ``(name, fields)``; handy in tests and for ad-hoc debugging."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def on_event(self, name: str, fields: dict[str, Any]) -> None:
        self.events.append((name, fields))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [fields for event, fields in self.events if event == name]
