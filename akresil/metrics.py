"""Prometheus metrics for akresil clients: one hook object on the core's event bus (``core.events``).

The core emits events and never imports a metrics library; ``ClientMetrics`` turns those events into
prometheus-client counters, gauges and histograms.  Without a ``metrics_registry`` no hook is registered,
so ``Hooks.emit`` returns at its first check: metrics cost nothing when disabled.

Collectors are created once per registry and shared by every client that registers in it (prometheus-client
refuses two collectors with one name in one registry); clients are told apart by the ``client_id`` label.
Each hook caches its labelled children, so a hot-path event is a dict lookup and an ``inc``/``observe``.

Naming follows Prometheus conventions (``akresil_`` prefix, seconds and bytes, ``_total`` counters).
docs/metrics.md maps every metric to its Java client equivalent.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Iterable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from .net.clock import Clock, monotonic_ms

__all__ = ["ClientMetrics", "MetricsServer", "serve", "api_name", "KINDS"]

KINDS = ("producer", "consumer", "admin")

#: request / fetch round trips: 0.5 ms .. 60 s (a Fetch long-poll waits up to fetch_max_wait_ms)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: broker throttles (KIP-219) and client backoffs (KIP-580): 1 ms .. 5 min
WAIT_BUCKETS = (0.0, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: encoded batch sizes: 64 B .. 16 MiB in powers of 4 (batch_size defaults to 16 KiB)
SIZE_BUCKETS = tuple(float(64 * 4 ** i) for i in range(10))
#: records per batch
COUNT_BUCKETS = (1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 10000.0)
#: rebalance durations: 10 ms .. 5 min
REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

_API_NAMES: dict[int, str] = {}


def api_name(api_key: Any) -> str:
    """Kafka's CamelCase name of an API key (``ApiKey.LIST_OFFSETS`` -> ``ListOffsets``), or its number."""
    key = int(api_key)
    name = _API_NAMES.get(key)
    if name is None:
        from .protocol.api import ApiKey
        try:
            name = "".join(part.capitalize() for part in ApiKey(key).name.split("_"))
        except ValueError:
            name = str(key)
        _API_NAMES[key] = name
    return name


class _Collectors:
    """Every akresil metric family, registered once in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        c, n, t = ("client_id",), ("client_id", "node_id"), ("client_id", "topic")
        # ---- requests and connections (every client)
        self.request_duration = Histogram(
            "akresil_request_duration_seconds", "Time from writing a request to its response, by API and node",
            (*n, "api"), registry=r, buckets=LATENCY_BUCKETS)
        self.requests_in_flight = Gauge(
            "akresil_requests_in_flight", "Requests written to a node and not yet answered", n, registry=r)
        self.throttle = Histogram(
            "akresil_throttle_seconds", "throttle_time_ms the broker reported in responses (> 0 only)",
            (*n, "api"), registry=r, buckets=WAIT_BUCKETS)
        self.throttle_mute = Gauge(
            "akresil_throttle_mute_seconds", "Time left in a node's KIP-219 mute window (nothing is sent to it)",
            n, registry=r)
        self.backoff = Histogram(
            "akresil_backoff_seconds", "Backoffs chosen by the client (KIP-580), by what backed off",
            (*c, "source"), registry=r, buckets=WAIT_BUCKETS)
        self.connections = Gauge(
            "akresil_connections", "Open broker connections", c, registry=r)
        self.connects = Counter(
            "akresil_connects_total", "Connections established", n, registry=r)
        self.disconnects = Counter(
            "akresil_disconnects_total", "Connections closed, by whether a failure closed them",
            (*n, "failed"), registry=r)
        self.bytes_sent = Counter(
            "akresil_sent_bytes_total", "Bytes written to broker connections", n, registry=r)
        self.bytes_received = Counter(
            "akresil_received_bytes_total", "Bytes read from broker connections", n, registry=r)
        # ---- metadata
        self.metadata_refreshes = Counter(
            "akresil_metadata_refreshes_total", "Completed metadata refreshes, once per cause they served",
            (*c, "cause"), registry=r)
        self.metadata_refresh_requests = Counter(
            "akresil_metadata_refresh_requests_total", "Metadata refreshes asked for, by cause",
            (*c, "cause"), registry=r)
        self.metadata_refresh_failures = Counter(
            "akresil_metadata_refresh_failures_total", "Metadata requests that failed", c, registry=r)
        self.stale_metadata = Counter(
            "akresil_stale_metadata_ignored_total",
            "Partitions whose leader epoch in a Metadata response was older than the cached one", t, registry=r)
        self.leader_hints = Counter(
            "akresil_leader_hints_total", "KIP-951 leader hints, by outcome (accepted/ignored) and reason",
            (*t, "outcome", "reason"), registry=r)
        # ---- producer
        self.records_sent = Counter(
            "akresil_producer_records_sent_total", "Records acknowledged by the broker", t, registry=r)
        self.record_errors = Counter(
            "akresil_producer_record_errors_total", "Records that failed for good, by error class",
            (*t, "error"), registry=r)
        self.record_retries = Counter(
            "akresil_producer_record_retries_total", "Records sent again after a failed attempt, by reason",
            (*t, "reason"), registry=r)
        self.batch_retries = Counter(
            "akresil_producer_batch_retries_total", "Batches sent again after a failed attempt, by reason",
            (*t, "reason"), registry=r)
        self.immediate_retries = Counter(
            "akresil_producer_immediate_retries_total",
            "Batch retries sent without backoff because a KIP-951 hint advanced the leader epoch", t, registry=r)
        self.records_expired = Counter(
            "akresil_producer_records_expired_total",
            "Records failed by delivery_timeout_ms (KIP-91), by stage (queued/backing-off/in-flight)",
            (*t, "stage"), registry=r)
        self.batch_size = Histogram(
            "akresil_producer_batch_size_bytes", "Encoded size of each batch sent (retries included)", t,
            registry=r, buckets=SIZE_BUCKETS)
        self.batch_records = Histogram(
            "akresil_producer_batch_records", "Records in each batch sent (retries included)", t,
            registry=r, buckets=COUNT_BUCKETS)
        self.queue_time = Histogram(
            "akresil_producer_record_queue_time_seconds",
            "Time a batch waited in the accumulator before its first send", c, registry=r,
            buckets=LATENCY_BUCKETS)
        self.buffer_exhausted = Counter(
            "akresil_producer_buffer_exhausted_total", "Appends that had to wait for buffer_memory", c,
            registry=r)
        # ---- consumer
        self.records_consumed = Counter(
            "akresil_consumer_records_consumed_total", "Records handed to the application", t, registry=r)
        self.bytes_consumed = Counter(
            "akresil_consumer_consumed_bytes_total",
            "Bytes of the fetched record batches handed to the application (as fetched)", t, registry=r)
        self.lag = Gauge(
            "akresil_consumer_lag_records",
            "Records between the position and the high watermark (last stable offset under read_committed)",
            (*t, "partition"), registry=r)
        self.rebalances = Counter(
            "akresil_consumer_rebalances_total", "Completed group rebalances", c, registry=r)
        self.rebalance_failures = Counter(
            "akresil_consumer_rebalance_failures_total", "Rebalances that failed, by error class",
            (*c, "error"), registry=r)
        self.rebalance_duration = Histogram(
            "akresil_consumer_rebalance_duration_seconds", "Time from JoinGroup to the new assignment", c,
            registry=r, buckets=REBALANCE_BUCKETS)
        self.assigned_partitions = Gauge(
            "akresil_consumer_assigned_partitions", "Partitions currently assigned to the consumer", c,
            registry=r)


_SHARED: "weakref.WeakKeyDictionary[CollectorRegistry, _Collectors]" = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def _collectors(registry: CollectorRegistry) -> _Collectors:
    with _SHARED_LOCK:
        found = _SHARED.get(registry)
        if found is None:
            found = _SHARED[registry] = _Collectors(registry)
        return found


class ClientMetrics:
    """The Prometheus hook of one client: ``hooks.add(ClientMetrics(registry, client_id=..., kind=...))``.

    ``registry``: a ``prometheus_client.CollectorRegistry`` (None: the process default ``REGISTRY``).
    ``clock``: the client's clock (monotonic ms); mute windows arrive as absolute times on it.
    Handlers accept unknown keyword fields, so an event that grows a field never breaks the exporter.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, client_id: str, kind: str,
                 clock: Clock = monotonic_ms) -> None:
        if registry is None:
            registry = REGISTRY
        if not isinstance(registry, CollectorRegistry):
            raise TypeError(f"metrics_registry: expected a prometheus_client.CollectorRegistry, "
                            f"got {type(registry).__name__}")
        if not isinstance(client_id, str) or not client_id:
            raise ValueError(f"client_id: expected a non-empty string, got {client_id!r}")
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        self.registry = registry
        self.client_id = client_id
        self.kind = kind
        self._clock = clock
        self._m = _collectors(registry)
        self._children: dict[tuple[Any, ...], Any] = {}
        self._node_states: dict[int, str] = {}
        self._muted_until: dict[int, float] = {}
        self._lag_series: set[tuple[str, int]] = set()

    def _child(self, metric: Any, *labels: Any) -> Any:
        """The labelled child of ``metric`` for this client (cached: ``labels()`` takes a lock)."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(self.client_id, *(str(v) for v in labels))
        return child

    # ------------------------------------------------------------------ requests
    def on_request_sent(self, *, node_id: int, in_flight: int, **_: Any) -> None:
        self._child(self._m.requests_in_flight, node_id).set(in_flight)

    def on_request_done(self, *, node_id: int, in_flight: int, **_: Any) -> None:
        self._child(self._m.requests_in_flight, node_id).set(in_flight)

    def on_response_received(self, *, node_id: int | None, api_key: Any, latency_ms: float, **_: Any) -> None:
        self._child(self._m.request_duration, _node(node_id), api_name(api_key)).observe(latency_ms / 1000.0)

    def on_throttled(self, *, node_id: int, api_key: Any, throttle_ms: float, muted: bool = False,
                     muted_until: float = 0.0, **_: Any) -> None:
        self._child(self._m.throttle, node_id, api_name(api_key)).observe(throttle_ms / 1000.0)
        if muted and muted_until > self._muted_until.get(node_id, 0.0):
            first = node_id not in self._muted_until
            self._muted_until[node_id] = muted_until
            if first:
                self._child(self._m.throttle_mute, node_id).set_function(self._mute_reader(node_id))

    def _mute_reader(self, node_id: int) -> Callable[[], float]:
        def remaining_s() -> float:
            return max(0.0, self._muted_until.get(node_id, 0.0) - self._clock()) / 1000.0
        return remaining_s

    def mute_seconds(self, node_id: int) -> float:
        """Seconds left in ``node_id``'s mute window as this hook last heard of it."""
        return max(0.0, self._muted_until.get(node_id, 0.0) - self._clock()) / 1000.0

    # ------------------------------------------------------------------ connections
    def on_node_state(self, *, node_id: int, state: str, **_: Any) -> None:
        previous = self._node_states.get(node_id)
        self._node_states[node_id] = state
        if state == "connected" and previous != "connected":
            self._child(self._m.connects, node_id).inc()
            self._child(self._m.connections).inc()
        elif previous == "connected" and state != "connected":
            self._child(self._m.disconnects, node_id, "true" if state == "backing-off" else "false").inc()
            self._child(self._m.connections).dec()

    def on_reconnect_backoff(self, *, backoff_ms: float, **_: Any) -> None:
        self._child(self._m.backoff, "reconnect").observe(backoff_ms / 1000.0)

    def on_connection_bytes_sent(self, *, node_id: int | None, nbytes: int, **_: Any) -> None:
        self._child(self._m.bytes_sent, _node(node_id)).inc(nbytes)

    def on_connection_bytes_received(self, *, node_id: int | None, nbytes: int, **_: Any) -> None:
        self._child(self._m.bytes_received, _node(node_id)).inc(nbytes)

    # ------------------------------------------------------------------ metadata
    def on_metadata_refresh_requested(self, *, cause: str, **_: Any) -> None:
        self._child(self._m.metadata_refresh_requests, cause).inc()

    def on_metadata_refresh(self, *, causes: Iterable[str] = (), **_: Any) -> None:
        served = tuple(causes) or ("periodic",)   # no pending cause: metadata_max_age_ms ran out
        for cause in served:
            self._child(self._m.metadata_refreshes, cause).inc()

    def on_metadata_refresh_failed(self, *, backoff_ms: float, **_: Any) -> None:
        self._child(self._m.metadata_refresh_failures).inc()
        self._child(self._m.backoff, "metadata").observe(backoff_ms / 1000.0)

    def on_stale_metadata_ignored(self, *, topic: str, **_: Any) -> None:
        self._child(self._m.stale_metadata, topic).inc()

    def on_leader_hint(self, *, topic: str, accepted: bool, reason: str, **_: Any) -> None:
        self._child(self._m.leader_hints, topic, "accepted" if accepted else "ignored", reason).inc()

    # ------------------------------------------------------------------ producer
    def on_batch_completed(self, *, topic: str, records: int, error: str | None, **_: Any) -> None:
        if error is None:
            self._child(self._m.records_sent, topic).inc(records)
        else:
            self._child(self._m.record_errors, topic, error).inc(records)

    def on_batch_retry(self, *, topic: str, reason: str, skip_backoff: bool, backoff_ms: float,
                       records: int | None = None, **_: Any) -> None:
        self._child(self._m.batch_retries, topic, reason).inc()
        if records is not None:
            self._child(self._m.record_retries, topic, reason).inc(records)
        if skip_backoff:
            self._child(self._m.immediate_retries, topic).inc()
        else:
            self._child(self._m.backoff, "retry").observe(max(0.0, backoff_ms) / 1000.0)

    def on_batch_expired(self, *, topic: str, stage: str, records: int, **_: Any) -> None:
        self._child(self._m.records_expired, topic, stage).inc(records)

    def on_batch_sent(self, *, topic: str, records: int, size_bytes: int, attempt: int = 0,
                      queue_ms: float | None = None, **_: Any) -> None:
        self._child(self._m.batch_size, topic).observe(size_bytes)
        self._child(self._m.batch_records, topic).observe(records)
        if attempt == 0 and queue_ms is not None:
            self._child(self._m.queue_time).observe(max(0.0, queue_ms) / 1000.0)

    def on_buffer_exhausted(self, **_: Any) -> None:
        self._child(self._m.buffer_exhausted).inc()

    # ------------------------------------------------------------------ consumer
    def on_records_consumed(self, *, topic: str, partition: int, records: int, bytes: int = 0,
                            lag: int | None = None, **_: Any) -> None:
        self._child(self._m.records_consumed, topic).inc(records)
        if bytes:
            self._child(self._m.bytes_consumed, topic).inc(bytes)
        if lag is not None and lag >= 0:
            self._child(self._m.lag, topic, partition).set(lag)
            self._lag_series.add((topic, partition))

    def on_rebalance(self, *, assigned: Iterable[Any] = (), revoked: Iterable[Any] = (),
                     duration_ms: float | None = None, **_: Any) -> None:
        """A rebalance finished: ``assigned`` is the new full assignment, ``revoked`` what this member lost."""
        self._child(self._m.rebalances).inc()
        if duration_ms is not None:
            self._child(self._m.rebalance_duration).observe(max(0.0, duration_ms) / 1000.0)
        now_assigned = {(str(tp[0]), int(tp[1])) for tp in assigned}
        self._child(self._m.assigned_partitions).set(len(now_assigned))
        gone = {(str(tp[0]), int(tp[1])) for tp in revoked} | (self._lag_series - now_assigned)
        for topic, partition in gone & self._lag_series:
            self._forget_lag(topic, partition)

    def on_rebalance_failed(self, *, error: str, **_: Any) -> None:
        self._child(self._m.rebalance_failures, error).inc()

    def _forget_lag(self, topic: str, partition: int) -> None:
        """Drop a partition's lag series: a gauge left behind would report a lag nobody is consuming."""
        self._lag_series.discard((topic, partition))
        self._children.pop((id(self._m.lag), topic, partition), None)   # cache keys hold the raw labels
        try:
            self._m.lag.remove(self.client_id, topic, str(partition))
        except KeyError:
            pass

    # ------------------------------------------------------------------ lifecycle
    def on_client_closed(self, **_: Any) -> None:
        self.close()

    def close(self) -> None:
        """Remove this client's gauges (connections, in-flight, mute windows, lag); counters stay.

        The client calls it when it closes (the ``client_closed`` event)."""
        for topic, partition in list(self._lag_series):
            self._forget_lag(topic, partition)
        gauges = (self._m.requests_in_flight, self._m.throttle_mute, self._m.connections,
                  self._m.assigned_partitions)
        for key, _child in list(self._children.items()):
            metric_id, labels = key[0], key[1:]
            for gauge in gauges:
                if metric_id == id(gauge):
                    try:
                        gauge.remove(self.client_id, *labels)
                    except KeyError:
                        pass
                    del self._children[key]
        for node_id in list(self._muted_until):
            try:
                self._m.throttle_mute.remove(self.client_id, str(node_id))
            except KeyError:
                pass
        self._muted_until.clear()
        self._node_states.clear()


def _node(node_id: int | None) -> str:
    return "bootstrap" if node_id is None else str(node_id)


class MetricsServer:
    """A running ``/metrics`` HTTP endpoint; ``close()`` stops it and joins its thread."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.host: str = server.server_address[0]
        self.port: int = server.server_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(port: int, registry: CollectorRegistry | None = None, addr: str = "127.0.0.1") -> MetricsServer:
    """Serve ``registry`` (default: the process ``REGISTRY``) on ``http://addr:port/metrics`` from a thread.

    ``port=0`` picks a free port (read it from ``.port``).  Loopback by default: exposing metrics beyond the
    host is a deliberate choice (``addr="0.0.0.0"``).
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port: expected an integer in 0..65535, got {port!r}")
    server, thread = start_http_server(port, addr=addr, registry=registry if registry is not None else REGISTRY)
    return MetricsServer(server, thread)
