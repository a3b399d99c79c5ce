"""Observability edge of the core: named events fanned out to user-registered hook objects.

The core never imports a metrics library. It calls ``hooks.emit(EVENT, **fields)``; every registered hook
that defines ``on_<event>(**fields)`` gets the call, and a hook may define ``on_event(name, fields)`` to see
everything (logging, tracing). ``akresil.metrics`` is one hook implementation; users attach their own.
This mirrors franz-go's hooks: small, optional interfaces discovered per hook, so a hook pays only for what
it implements and emitting to no hooks costs one dict lookup.

A hook that raises is logged and skipped: a faulty metrics exporter must never break delivery.

A tracer (``core.tracing.Tracer``) is a hook of another kind: the registry keeps it as ``tracer``, which the
clients call around sends, polls and processing; without one of its own a registry follows the default tracer
(``core.tracing.set_default_tracer``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

from . import tracing

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
BATCH_RETRY = "batch_retry"                  # topic, partition, attempt, reason, skip_backoff, backoff_ms
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
        handles_events = callable(getattr(hook, "on_event", None)) or any(
            callable(getattr(hook, "on_" + name, None)) for name in ALL_EVENTS)
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
            specific = getattr(hook, "on_" + event, None)
            if callable(specific):
                handlers.append(specific)
            generic = getattr(hook, "on_event", None)
            if callable(generic):
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


class RecordingHook:
    """Keeps every event as ``(name, fields)``; handy in tests and for ad-hoc debugging."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def on_event(self, name: str, fields: dict[str, Any]) -> None:
        self.events.append((name, fields))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [fields for event, fields in self.events if event == name]
