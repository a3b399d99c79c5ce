"""The metric series akresil exports, declared once: what each is and which core events feed it.

``SERIES`` is the single description both metrics back-ends are derived from (``akresil.metrics`` on
prometheus-client, ``akresil.otel`` on the OpenTelemetry API): each row names a series (its Prometheus and
OpenTelemetry names, kind, labels, unit, help, histogram buckets) and says how it gets its values:

* a counter or histogram row maps core events (``core.events``) to a *feed*: a pure function of the client's
  gauge state and the event's fields that returns the samples to add or observe, as ``(label values, value)``;
* a gauge row has a *read*: the samples it shows now, read from the client's ``GaugeState`` at collection time,
  so a closed client (whose hook stopped being read) has no gauge series in either back-end.

``SeriesHook`` turns the table into ``on_<event>`` handlers once; a back-end only says how to record one sample
(``_sink``) and keeps the set of live hooks its gauges read. Adding a series is one row here. This module
imports no metrics library: the core stays free of them.
"""

from __future__ import annotations

import abc
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Mapping

from . import events as ev

__all__ = ["SERIES", "Series", "SeriesHook", "GaugeState", "KINDS", "api_name", "LATENCY_BUCKETS",
           "WAIT_BUCKETS", "SIZE_BUCKETS", "COUNT_BUCKETS", "REBALANCE_BUCKETS"]

KINDS = ("producer", "consumer", "admin")

#: request / fetch round trips: 0.5 ms .. 60 s (a Fetch long-poll waits up to fetch_max_wait_ms)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: broker throttles (KIP-219) and client backoffs (KIP-580): 1 ms .. 5 min
WAIT_BUCKETS = (0.0, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: encoded batch sizes: 64 B .. 16 MiB in powers of 4
SIZE_BUCKETS = tuple(float(64 * 4 ** i) for i in range(10))
#: records per batch
COUNT_BUCKETS = (1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 10000.0)
#: rebalance durations: 10 ms .. 5 min
REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

Labels = tuple[str, ...]
#: one sample: the values of the row's labels (``client_id`` excluded) and the amount / observation / reading
Sample = tuple[Labels, float]
Fields = Mapping[str, Any]
Feed = Callable[["GaugeState", Fields], Iterable[Sample]]
Read = Callable[["GaugeState"], Iterable[Sample]]
Kind = Literal["counter", "histogram", "gauge"]


@dataclass(frozen=True, eq=False)
class Series:
    """One exported series. ``labels`` follow ``client_id``, which every series carries."""

    name: str                       # Prometheus name (counters end in _total)
    otel: str                       # OpenTelemetry instrument name
    kind: Kind
    labels: Labels
    unit: str                       # UCUM, as OpenTelemetry wants it ("s", "By", "{record}")
    help: str
    buckets: tuple[float, ...] = ()                          # histograms
    feeds: Mapping[str, Feed] = field(default_factory=dict)  # counters and histograms: event -> samples
    read: Read | None = None                                 # gauges

    def __post_init__(self) -> None:
        if (self.kind == "gauge") != (self.read is not None) or (self.kind == "gauge") == bool(self.feeds):
            raise ValueError(f"{self.name}: a gauge has a read and no feeds, a counter or histogram feeds only")
        if (self.kind == "histogram") != bool(self.buckets):
            raise ValueError(f"{self.name}: buckets are for histograms, and every histogram has them")
        unknown = set(self.feeds) - ev.ALL_EVENTS
        if unknown:
            raise ValueError(f"{self.name}: fed by unknown events {sorted(unknown)}")


_API_NAMES: dict[int, str] = {}


def api_name(api_key: Any) -> str:
    """Kafka's CamelCase name of an API key (``ApiKey.LIST_OFFSETS`` -> ``ListOffsets``), or its number."""
    key = int(api_key)
    name = _API_NAMES.get(key)
    if name is None:
        from ..protocol.api import ApiKey
        try:
            name = "".join(part.capitalize() for part in ApiKey(key).name.split("_"))
        except ValueError:
            name = str(key)
        _API_NAMES[key] = name
    return name


def _node(node_id: int | None) -> str:
    return "bootstrap" if node_id is None else str(node_id)


def _s(ms: float) -> float:
    """Milliseconds as seconds, never negative."""
    return max(0.0, ms) / 1000.0


def _conn(f: Fields) -> tuple[int, str]:
    """One connection: the broker and which of its connections (events from before lanes: the shared one)."""
    return f["node_id"], f.get("lane", "shared")


def _partitions(tps: Iterable[Any]) -> set[tuple[str, int]]:
    return {(str(tp[0]), int(tp[1])) for tp in tps}


class GaugeState:
    """What a client's gauges show, kept from its events (the feeds read it as it was before the event)."""

    __slots__ = ("clock", "in_flight", "muted_until", "node_states", "connections", "lag", "assigned")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        #: per (node, lane): a broker's shared connection and its group connection count apart, summed per node
        self.in_flight: dict[tuple[int, str], float] = {}
        self.muted_until: dict[int, float] = {}
        self.node_states: dict[tuple[int, str], str] = {}
        self.connections = 0
        self.lag: dict[tuple[str, int], float] = {}
        self.assigned: int | None = None

    def mute_seconds(self, node_id: int) -> float:
        return _s(self.muted_until.get(node_id, 0.0) - self.clock())

    def in_flight_by_node(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for (node_id, _), count in list(self.in_flight.items()):
            out[node_id] = out.get(node_id, 0.0) + count
        return out

    def _requests(self, f: Fields) -> None:
        self.in_flight[_conn(f)] = f["in_flight"]

    def _throttled(self, f: Fields) -> None:
        node_id, until = f["node_id"], f.get("muted_until", 0.0)
        if f.get("muted", False) and until > self.muted_until.get(node_id, 0.0):
            self.muted_until[node_id] = until

    def _node_state(self, f: Fields) -> None:
        key, state = _conn(f), f["state"]
        previous = self.node_states.get(key)
        self.node_states[key] = state
        if state == "connected" and previous != "connected":
            self.connections += 1
        elif previous == "connected" and state != "connected":
            self.connections -= 1

    def _consumed(self, f: Fields) -> None:
        lag = f.get("lag")
        if lag is not None and lag >= 0:
            self.lag[(f["topic"], f["partition"])] = lag

    def _rebalance(self, f: Fields) -> None:
        """``assigned`` is the new full assignment: the lag of a partition not in it is nobody's any more."""
        now_assigned = _partitions(f.get("assigned", ()))
        self.assigned = len(now_assigned)
        for key in _partitions(f.get("revoked", ())) | (set(self.lag) - now_assigned):
            self.lag.pop(key, None)

    def clear(self) -> None:
        self.in_flight.clear()
        self.muted_until.clear()
        self.node_states.clear()
        self.connections = 0
        self.lag.clear()
        self.assigned = None


#: event -> how it changes the gauge state (applied after the event's feeds)
UPDATES: dict[str, Callable[[GaugeState, Fields], None]] = {
    ev.REQUEST_SENT: GaugeState._requests,
    ev.REQUEST_DONE: GaugeState._requests,
    ev.THROTTLED: GaugeState._throttled,
    ev.NODE_STATE: GaugeState._node_state,
    ev.RECORDS_CONSUMED: GaugeState._consumed,
    ev.REBALANCE: GaugeState._rebalance,
}


def _connects(s: GaugeState, f: Fields) -> list[Sample]:
    joined = f["state"] == "connected" and s.node_states.get(_conn(f)) != "connected"
    return [((str(f["node_id"]),), 1)] if joined else []


def _disconnects(s: GaugeState, f: Fields) -> list[Sample]:
    if s.node_states.get(_conn(f)) != "connected" or f["state"] == "connected":
        return []
    return [((str(f["node_id"]), "true" if f["state"] == "backing-off" else "false"), 1)]


SERIES: tuple[Series, ...] = (
    # ---- requests and connections (every client)
    Series("akresil_request_duration_seconds", "akresil.request.duration", "histogram", ("node_id", "api"), "s",
           "Time from writing a request to its response, by API and node", LATENCY_BUCKETS,
           feeds={ev.RESPONSE_RECEIVED: lambda s, f: [((_node(f["node_id"]), api_name(f["api_key"])),
                                                       f["latency_ms"] / 1000.0)]}),
    Series("akresil_requests_in_flight", "akresil.requests.in_flight", "gauge", ("node_id",), "{request}",
           "Requests written to a node and not yet answered",
           read=lambda s: [((str(n),), v) for n, v in s.in_flight_by_node().items()]),
    Series("akresil_throttle_seconds", "akresil.throttle.duration", "histogram", ("node_id", "api"), "s",
           "throttle_time_ms the broker reported in responses (> 0 only)", WAIT_BUCKETS,
           feeds={ev.THROTTLED: lambda s, f: [((str(f["node_id"]), api_name(f["api_key"])),
                                               f["throttle_ms"] / 1000.0)]}),
    Series("akresil_throttle_mute_seconds", "akresil.throttle.mute_remaining", "gauge", ("node_id",), "s",
           "Time left in a node's KIP-219 mute window (nothing is sent to it)",
           read=lambda s: [((str(n),), s.mute_seconds(n)) for n in list(s.muted_until)]),
    Series("akresil_backoff_seconds", "akresil.backoff.duration", "histogram", ("source",), "s",
           "Backoffs chosen by the client (KIP-580), by what backed off", WAIT_BUCKETS,
           feeds={ev.RECONNECT_BACKOFF: lambda s, f: [(("reconnect",), f["backoff_ms"] / 1000.0)],
                  ev.METADATA_REFRESH_FAILED: lambda s, f: [(("metadata",), f["backoff_ms"] / 1000.0)],
                  ev.BATCH_RETRY: lambda s, f: [] if f["skip_backoff"] else [(("retry",), _s(f["backoff_ms"]))]}),
    Series("akresil_connections", "akresil.connections", "gauge", (), "{connection}", "Open broker connections",
           read=lambda s: [((), float(s.connections))] if s.node_states else []),
    Series("akresil_connects_total", "akresil.connects", "counter", ("node_id",), "{connection}",
           "Connections established", feeds={ev.NODE_STATE: _connects}),
    Series("akresil_disconnects_total", "akresil.disconnects", "counter", ("node_id", "failed"), "{connection}",
           "Connections closed, by whether a failure closed them", feeds={ev.NODE_STATE: _disconnects}),
    Series("akresil_sent_bytes_total", "akresil.sent_bytes", "counter", ("node_id",), "By",
           "Bytes written to broker connections",
           feeds={ev.CONNECTION_BYTES_SENT: lambda s, f: [((_node(f["node_id"]),), f["nbytes"])]}),
    Series("akresil_received_bytes_total", "akresil.received_bytes", "counter", ("node_id",), "By",
           "Bytes read from broker connections",
           feeds={ev.CONNECTION_BYTES_RECEIVED: lambda s, f: [((_node(f["node_id"]),), f["nbytes"])]}),
    # ---- metadata
    Series("akresil_metadata_refreshes_total", "akresil.metadata.refreshes", "counter", ("cause",), "{refresh}",
           "Completed metadata refreshes, once per cause they served",
           # no pending cause: metadata_max_age_ms ran out
           feeds={ev.METADATA_REFRESH: lambda s, f: [((c,), 1) for c in tuple(f.get("causes", ())) or ("periodic",)]}),
    Series("akresil_metadata_refresh_requests_total", "akresil.metadata.refresh_requests", "counter", ("cause",),
           "{request}", "Metadata refreshes asked for, by cause",
           feeds={ev.METADATA_REFRESH_REQUESTED: lambda s, f: [((f["cause"],), 1)]}),
    Series("akresil_metadata_refresh_failures_total", "akresil.metadata.refresh_failures", "counter", (),
           "{failure}", "Metadata requests that failed",
           feeds={ev.METADATA_REFRESH_FAILED: lambda s, f: [((), 1)]}),
    Series("akresil_stale_metadata_ignored_total", "akresil.metadata.stale_ignored", "counter", ("topic",),
           "{partition}", "Partitions whose leader epoch in a Metadata response was older than the cached one",
           feeds={ev.STALE_METADATA_IGNORED: lambda s, f: [((f["topic"],), 1)]}),
    Series("akresil_leader_hints_total", "akresil.leader_hints", "counter", ("topic", "outcome", "reason"),
           "{hint}", "KIP-951 leader hints, by outcome (accepted/ignored) and reason",
           feeds={ev.LEADER_HINT: lambda s, f: [((f["topic"], "accepted" if f["accepted"] else "ignored",
                                                  f["reason"]), 1)]}),
    # ---- producer
    Series("akresil_producer_records_sent_total", "akresil.producer.records_sent", "counter", ("topic",),
           "{record}", "Records acknowledged by the broker",
           feeds={ev.BATCH_COMPLETED: lambda s, f: [] if f["error"] is not None else [((f["topic"],), f["records"])]}),
    Series("akresil_producer_record_errors_total", "akresil.producer.record_errors", "counter", ("topic", "error"),
           "{record}", "Records that failed for good, by error class",
           feeds={ev.BATCH_COMPLETED: lambda s, f: [] if f["error"] is None
                  else [((f["topic"], f["error"]), f["records"])]}),
    Series("akresil_producer_record_retries_total", "akresil.producer.record_retries", "counter",
           ("topic", "reason"), "{record}", "Records sent again after a failed attempt, by reason",
           feeds={ev.BATCH_RETRY: lambda s, f: [] if f.get("records") is None
                  else [((f["topic"], f["reason"]), f["records"])]}),
    Series("akresil_producer_batch_retries_total", "akresil.producer.batch_retries", "counter",
           ("topic", "reason"), "{batch}", "Batches sent again after a failed attempt, by reason",
           feeds={ev.BATCH_RETRY: lambda s, f: [((f["topic"], f["reason"]), 1)]}),
    Series("akresil_producer_immediate_retries_total", "akresil.producer.immediate_retries", "counter", ("topic",),
           "{batch}", "Batch retries sent without backoff because a KIP-951 hint advanced the leader epoch",
           feeds={ev.BATCH_RETRY: lambda s, f: [((f["topic"],), 1)] if f["skip_backoff"] else []}),
    Series("akresil_producer_batch_splits_total", "akresil.producer.batch_splits", "counter", ("topic",),
           "{batch}", "Batches the broker refused as too large (MESSAGE_TOO_LARGE), sent again split in smaller ones",
           feeds={ev.BATCH_SPLIT: lambda s, f: [((f["topic"],), 1)]}),
    Series("akresil_producer_records_expired_total", "akresil.producer.records_expired", "counter",
           ("topic", "stage"), "{record}",
           "Records failed by delivery_timeout_ms (KIP-91), by stage (queued/backing-off/in-flight)",
           feeds={ev.BATCH_EXPIRED: lambda s, f: [((f["topic"], f["stage"]), f["records"])]}),
    Series("akresil_producer_batch_size_bytes", "akresil.producer.batch_size", "histogram", ("topic",), "By",
           "Encoded size of each batch sent (retries included)", SIZE_BUCKETS,
           feeds={ev.BATCH_SENT: lambda s, f: [((f["topic"],), f["size_bytes"])]}),
    Series("akresil_producer_batch_records", "akresil.producer.batch_records", "histogram", ("topic",), "{record}",
           "Records in each batch sent (retries included)", COUNT_BUCKETS,
           feeds={ev.BATCH_SENT: lambda s, f: [((f["topic"],), f["records"])]}),
    Series("akresil_producer_record_queue_time_seconds", "akresil.producer.record_queue_time", "histogram", (),
           "s", "Time a batch waited in the accumulator before its first send", LATENCY_BUCKETS,
           feeds={ev.BATCH_SENT: lambda s, f: [((), _s(f["queue_ms"]))]
                  if f.get("attempt", 0) == 0 and f.get("queue_ms") is not None else []}),
    Series("akresil_producer_buffer_exhausted_total", "akresil.producer.buffer_exhausted", "counter", (),
           "{append}", "Appends that had to wait for buffer_memory",
           feeds={ev.BUFFER_EXHAUSTED: lambda s, f: [((), 1)]}),
    # ---- consumer
    Series("akresil_consumer_records_consumed_total", "akresil.consumer.records_consumed", "counter", ("topic",),
           "{record}", "Records handed to the application",
           feeds={ev.RECORDS_CONSUMED: lambda s, f: [((f["topic"],), f["records"])]}),
    Series("akresil_consumer_consumed_bytes_total", "akresil.consumer.consumed_bytes", "counter", ("topic",), "By",
           "Bytes of the fetched record batches handed to the application (as fetched)",
           feeds={ev.RECORDS_CONSUMED: lambda s, f: [((f["topic"],), f["bytes"])] if f.get("bytes") else []}),
    Series("akresil_consumer_lag_records", "akresil.consumer.lag", "gauge", ("topic", "partition"), "{record}",
           "Records between the position and the high watermark (last stable offset under read_committed)",
           read=lambda s: [((t, str(p)), v) for (t, p), v in list(s.lag.items())]),
    Series("akresil_consumer_rebalances_total", "akresil.consumer.rebalances", "counter", (), "{rebalance}",
           "Completed group rebalances", feeds={ev.REBALANCE: lambda s, f: [((), 1)]}),
    Series("akresil_consumer_rebalance_failures_total", "akresil.consumer.rebalance_failures", "counter",
           ("error",), "{rebalance}", "Rebalances that failed, by error class",
           feeds={ev.REBALANCE_FAILED: lambda s, f: [((f["error"],), 1)]}),
    Series("akresil_consumer_rebalance_duration_seconds", "akresil.consumer.rebalance_duration", "histogram", (),
           "s", "Time from a rebalance's first step to the new assignment", REBALANCE_BUCKETS,
           feeds={ev.REBALANCE: lambda s, f: [] if f.get("duration_ms") is None else [((), _s(f["duration_ms"]))]}),
    Series("akresil_consumer_assigned_partitions", "akresil.consumer.assigned_partitions", "gauge", (),
           "{partition}", "Partitions currently assigned to the consumer",
           read=lambda s: [] if s.assigned is None else [((), float(s.assigned))]),
)

#: event -> the (series, feed) pairs it drives, in table order
FEEDS: dict[str, tuple[tuple[Series, Feed], ...]] = {
    event: tuple((series, series.feeds[event]) for series in SERIES if event in series.feeds)
    for event in sorted({event for series in SERIES for event in series.feeds})
}


class SeriesHook(ev.Hook, abc.ABC):
    """A metrics hook of one client, derived from ``SERIES``; a back-end implements ``_sink``.

    ``live`` is the back-end's set of hooks whose gauges a collection reads: the hook is in it from creation
    to ``close()`` (which the client's ``client_closed`` event calls), so a closed client's gauges disappear.
    Handlers accept unknown keyword fields, so an event that grows a field never breaks the exporter.
    """

    def __init__(self, live: weakref.WeakSet[SeriesHook], *, client_id: str, kind: str,
                 clock: Callable[[], float]) -> None:
        if not isinstance(client_id, str) or not client_id:
            raise ValueError(f"client_id: expected a non-empty string, got {client_id!r}")
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        self.client_id = client_id
        self.kind = kind
        self.state = GaugeState(clock)
        self._sinks: dict[tuple[Series, Labels], Callable[[float], object]] = {}
        self._live = live
        live.add(self)

    @abc.abstractmethod
    def _sink(self, series: Series, labels: Labels) -> Callable[[float], object]:
        """How this back-end adds to (counter) or observes into (histogram) ``series`` at ``labels``; asked
        once per label combination, then cached."""

    def gauge_samples(self, series: Series) -> Iterable[Sample]:
        """``series``' current samples for this client (a gauge row's read)."""
        assert series.read is not None, f"{series.name} is no gauge"
        return series.read(self.state)

    def mute_seconds(self, node_id: int) -> float:
        """Seconds left in ``node_id``'s mute window as this hook last heard of it."""
        return self.state.mute_seconds(node_id)

    def on_client_closed(self, **_: Any) -> None:
        self.close()

    def close(self) -> None:
        """Drop this client's gauge series (connections, in-flight, mute windows, lag, assignment); counters and
        histograms stay. The client calls it when it closes (the ``client_closed`` event)."""
        self._live.discard(self)
        self.state.clear()


def _handler(event: str) -> Callable[..., None]:
    """``on_<event>``: the event's feeds (the samples read the state before the event), then its state update."""
    feeds = FEEDS.get(event, ())
    update = UPDATES.get(event)

    def handle(self: SeriesHook, **fields: Any) -> None:
        state, sinks = self.state, self._sinks
        for series, feed in feeds:
            for labels, value in feed(state, fields):
                sink = sinks.get((series, labels))
                if sink is None:
                    sink = sinks[(series, labels)] = self._sink(series, labels)
                sink(value)
        if update is not None:
            update(state, fields)
    handle.__name__ = handle.__qualname__ = f"on_{event}"
    return handle


for _event in sorted(set(FEEDS) | set(UPDATES)):
    setattr(SeriesHook, f"on_{_event}", _handler(_event))
