"""Prometheus metrics for akresil clients: one hook object on the core's event bus (``core.events``).

The core emits events and never imports a metrics library; ``ClientMetrics`` records the series that
``core.series.SERIES`` declares (the table ``akresil.otel`` is derived from too) as prometheus-client counters,
histograms and gauges.  Without a ``metrics_registry`` no hook is registered, so ``Hooks.emit`` returns at its
first check: metrics cost nothing when disabled.

Collectors are created once per registry and shared by every client that registers in it (prometheus-client
refuses two collectors with one name in one registry); clients are told apart by the ``client_id`` label.
Each hook caches its labelled children, so a hot-path event is a dict lookup and an ``inc``/``observe``.
Gauges are read at scrape time from the live hooks' state: a closed client's gauges are gone from the next scrape.

Naming follows Prometheus conventions (``akresil_`` prefix, seconds and bytes, ``_total`` counters).
docs/metrics.md maps every metric to its Java client equivalent.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

from .core.series import (COUNT_BUCKETS, KINDS, LATENCY_BUCKETS, REBALANCE_BUCKETS, SERIES, SIZE_BUCKETS,
                          WAIT_BUCKETS, Labels, Series, SeriesHook, api_name)
from .net.clock import Clock, monotonic_ms

__all__ = ["ClientMetrics", "MetricsServer", "serve", "api_name", "KINDS", "LATENCY_BUCKETS", "WAIT_BUCKETS",
           "SIZE_BUCKETS", "COUNT_BUCKETS", "REBALANCE_BUCKETS"]


class _Collectors:
    """Every akresil series in one registry, registered once: counters and histograms as prometheus-client
    collectors, the gauges as one collector that reads the live hooks."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.live: weakref.WeakSet[SeriesHook] = weakref.WeakSet()
        self.metrics: dict[Series, Any] = {}
        self._gauges = [series for series in SERIES if series.kind == "gauge"]
        for series in SERIES:
            labels = ("client_id", *series.labels)
            if series.kind == "counter":
                self.metrics[series] = Counter(series.name, series.help, labels, registry=registry)
            elif series.kind == "histogram":
                self.metrics[series] = Histogram(series.name, series.help, labels, registry=registry,
                                                 buckets=series.buckets)
        registry.register(self)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        for series in self._gauges:
            yield GaugeMetricFamily(series.name, series.help, labels=("client_id", *series.labels))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        hooks = list(self.live)
        for series in self._gauges:
            family = GaugeMetricFamily(series.name, series.help, labels=("client_id", *series.labels))
            for hook in hooks:
                for labels, value in hook.gauge_samples(series):
                    family.add_metric((hook.client_id, *labels), value)
            yield family


_SHARED: "weakref.WeakKeyDictionary[CollectorRegistry, _Collectors]" = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def _collectors(registry: CollectorRegistry) -> _Collectors:
    with _SHARED_LOCK:
        found = _SHARED.get(registry)
        if found is None:
            found = _SHARED[registry] = _Collectors(registry)
        return found


class ClientMetrics(SeriesHook):
    """The Prometheus hook of one client: ``hooks.add(ClientMetrics(registry, client_id=..., kind=...))``.

    ``registry``: a ``prometheus_client.CollectorRegistry`` (None: the process default ``REGISTRY``).
    ``clock``: the client's clock (monotonic ms); mute windows arrive as absolute times on it.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, client_id: str, kind: str,
                 clock: Clock = monotonic_ms) -> None:
        if registry is None:
            registry = REGISTRY
        if not isinstance(registry, CollectorRegistry):
            raise TypeError(f"metrics_registry: expected a prometheus_client.CollectorRegistry, "
                            f"got {type(registry).__name__}")
        self.registry = registry
        self._m = _collectors(registry)
        super().__init__(self._m.live, client_id=client_id, kind=kind, clock=clock)

    def _sink(self, series: Series, labels: Labels) -> Callable[[float], object]:
        child = self._m.metrics[series].labels(self.client_id, *labels)
        sink: Callable[[float], object] = child.inc if series.kind == "counter" else child.observe
        return sink


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
