"""What the fault proxy saw: every request and response, with monotonic timestamps.

Tests assert on behaviour *on the wire* (which node a retry went to, whether a throttled client stayed silent,
how far apart two attempts were), so the proxy records facts, never interpretations.  The recorder is written
from the proxy's event-loop thread and read from the test's thread, hence the lock; queries return tuples
(snapshots) so a caller can iterate while traffic continues.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request frame as it arrived at a virtual node."""

    node_id: int
    connection_id: int
    client_id: str | None
    api_key: int
    api_version: int
    correlation_id: int
    #: ``time.monotonic()`` in milliseconds at the moment the frame was read
    time_ms: float
    #: topic-partitions named by a Produce / Fetch / ListOffsets request (empty for other APIs)
    partitions: tuple[TopicPartition, ...] = ()
    #: the connection was muted by a throttle when the frame arrived (a KIP-219 client sends none)
    in_throttle_window: bool = False


@dataclass(frozen=True, slots=True)
class LeaderHint:
    """A KIP-951 hint the proxy put into a response: partition -> (leader id, epoch)."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class RecordedResponse:
    """One response frame as the proxy wrote it to the client (after rewriting)."""

    node_id: int
    connection_id: int
    client_id: str | None
    api_key: int
    api_version: int
    correlation_id: int
    time_ms: float
    #: every non-zero error code in the body, in order; ``None`` when the body was not inspected
    error_codes: tuple[int, ...] | None
    #: per-partition error codes for Produce / Fetch (0 included)
    partition_errors: dict[TopicPartition, int] = field(default_factory=dict)
    throttle_time_ms: int = 0
    hints: tuple[LeaderHint, ...] = ()
    #: the proxy answered the whole request itself (nothing was forwarded to the broker)
    synthesized: bool = False


@dataclass(frozen=True, slots=True)
class ConnectionEvent:
    """A client connection opened or closed on a virtual node (``kind``: "open", "close", "refused")."""

    node_id: int
    connection_id: int
    kind: str
    time_ms: float
    reason: str = ""


class Recorder:
    """Thread-safe, append-only log of requests, responses and connection events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._responses: list[RecordedResponse] = []
        self._connections: list[ConnectionEvent] = []

    # ------------------------------------------------------------------ writing (proxy side)
    def add_request(self, rec: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(rec)

    def add_response(self, rec: RecordedResponse) -> None:
        with self._lock:
            self._responses.append(rec)

    def add_connection_event(self, ev: ConnectionEvent) -> None:
        with self._lock:
            self._connections.append(ev)

    def clear(self) -> None:
        """Forget everything recorded so far (the proxy keeps recording afterwards)."""
        with self._lock:
            self._requests.clear()
            self._responses.clear()
            self._connections.clear()

    # ------------------------------------------------------------------ queries (test side)
    def requests(self, api_key: int | None = None, *, node: int | None = None, client_id: str | None = None,
                 connection_id: int | None = None, since_ms: float | None = None,
                 partition: TopicPartition | None = None,
                 in_throttle_window: bool | None = None) -> tuple[RecordedRequest, ...]:
        """Requests matching every given filter, oldest first."""
        with self._lock:
            snapshot = tuple(self._requests)
        return tuple(_select(snapshot, api_key, node, client_id, connection_id, since_ms, partition,
                             lambda r: in_throttle_window is None or r.in_throttle_window == in_throttle_window))

    def responses(self, api_key: int | None = None, *, node: int | None = None, client_id: str | None = None,
                  connection_id: int | None = None, since_ms: float | None = None,
                  partition: TopicPartition | None = None,
                  error_code: int | None = None) -> tuple[RecordedResponse, ...]:
        """Responses matching every given filter, oldest first (``error_code``: contains that code)."""
        with self._lock:
            snapshot = tuple(self._responses)

        def has_error(r: RecordedResponse) -> bool:
            if error_code is None:
                return True
            if r.partition_errors:
                if partition is not None:
                    return r.partition_errors.get(partition) == error_code
                return error_code in r.partition_errors.values()
            return r.error_codes is not None and error_code in r.error_codes

        return tuple(_select(snapshot, api_key, node, client_id, connection_id, since_ms, partition, has_error))

    def connections(self, node: int | None = None, kind: str | None = None) -> tuple[ConnectionEvent, ...]:
        """Connection events, oldest first."""
        with self._lock:
            snapshot = tuple(self._connections)
        return tuple(e for e in snapshot
                     if (node is None or e.node_id == node) and (kind is None or e.kind == kind))


def _select(items: Iterable[RecordedRequest | RecordedResponse], api_key: int | None, node: int | None,
            client_id: str | None, connection_id: int | None, since_ms: float | None,
            partition: TopicPartition | None, extra: Callable[..., bool]) -> Iterable:  # type: ignore[type-arg]
    for r in items:
        if api_key is not None and r.api_key != api_key:
            continue
        if node is not None and r.node_id != node:
            continue
        if client_id is not None and r.client_id != client_id:
            continue
        if connection_id is not None and r.connection_id != connection_id:
            continue
        if since_ms is not None and r.time_ms < since_ms:
            continue
        if partition is not None:
            parts = r.partitions if isinstance(r, RecordedRequest) else tuple(r.partition_errors)
            if partition not in parts:
                continue
        if not extra(r):
            continue
        yield r
