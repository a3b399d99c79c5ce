"""KIP-714 client metrics push, the sans-IO part: the subscription state machine and the metrics it pushes.

A broker with a client-telemetry plugin answers GetTelemetrySubscriptions with what the operator subscribed this
client to (metric name prefixes, a push interval, the compressions it accepts, delta or cumulative sums); the
client then pushes those metrics, OTLP-encoded, every interval, and once more, marked terminating, when it
closes.  ``TelemetryState`` is that life-cycle as Java's ``ClientTelemetryReporter`` runs it (states, the
±50 % jitter of the first push, how each error code is handled); ``TelemetryMetrics`` is a back-end of the series
table (``core.series``) that keeps every counter and histogram in memory and turns the selected series into OTLP
metrics (``protocol.otlp``), as deltas since the last successful push or as totals.  ``net.telemetry`` does the
I/O.  Both take the time as an argument: no clock is read here.
"""

from __future__ import annotations

import enum
import weakref
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from .. import errors
from ..protocol.otlp import Attributes, HistogramPoint, Metric, NumberPoint
from .series import SERIES, Labels, Series, SeriesHook

__all__ = ["TelemetryState", "Phase", "Subscription", "TelemetryMetrics", "DEFAULT_PUSH_INTERVAL_MS",
           "ZERO_UUID"]

#: Java's default wait when the broker gives no usable interval, or a request failed without an answer
DEFAULT_PUSH_INTERVAL_MS = 300_000
ZERO_UUID = bytes(16)
#: the first push after a (new) subscription goes at a random point of [0.5, 1.5] x the interval (KIP-714), so
#: clients started together do not push together
_FIRST_PUSH_JITTER = (0.5, 1.5)

#: push interval after an error code (Java's ClientTelemetryUtils.maybeFetchErrorIntervalMs): None stops
#: telemetry for the client's life, 0 asks for a new subscription at once, -1 waits the push interval
_ERROR_INTERVALS: dict[int, int | None] = {
    errors.InvalidRequestError.errno: None,
    errors.InvalidRecordError.errno: None,
    errors.UnsupportedVersionError.errno: None,
    errors.UnknownSubscriptionIdError.errno: 0,
    errors.UnsupportedCompressionTypeError.errno: 0,
    errors.TelemetryTooLargeError.errno: -1,
    errors.ThrottlingQuotaExceededError.errno: -1,
}


class Phase(enum.Enum):
    SUBSCRIPTION_NEEDED = "subscription needed"
    SUBSCRIPTION_IN_PROGRESS = "subscription in progress"
    PUSH_NEEDED = "push needed"
    PUSH_IN_PROGRESS = "push in progress"
    TERMINATING_PUSH_NEEDED = "terminating push needed"
    TERMINATING_PUSH_IN_PROGRESS = "terminating push in progress"
    TERMINATED = "terminated"


_IN_PROGRESS = (Phase.SUBSCRIPTION_IN_PROGRESS, Phase.PUSH_IN_PROGRESS, Phase.TERMINATING_PUSH_IN_PROGRESS)
_TERMINATING = (Phase.TERMINATING_PUSH_NEEDED, Phase.TERMINATING_PUSH_IN_PROGRESS, Phase.TERMINATED)


@dataclass(frozen=True)
class Subscription:
    """What a GetTelemetrySubscriptions answer asked of this client."""

    client_instance_id: bytes
    subscription_id: int
    push_interval_ms: int
    #: compression type ids the broker accepts, in its order of preference
    compression_types: tuple[int, ...]
    delta_temporality: bool
    #: metric name prefixes: () none, ("*",) every metric (an empty prefix matches every name too)
    requested_metrics: tuple[str, ...]
    max_bytes: int

    @property
    def wants_metrics(self) -> bool:
        return bool(self.requested_metrics)

    def selects(self, name: str) -> bool:
        return any(prefix == "*" or name.startswith(prefix) for prefix in self.requested_metrics)

    @classmethod
    def from_response(cls, response: Mapping[str, Any]) -> Subscription:
        interval = int(response["push_interval_ms"])
        return cls(client_instance_id=bytes(response["client_instance_id"]),
                   subscription_id=int(response["subscription_id"]),
                   push_interval_ms=interval if interval > 0 else DEFAULT_PUSH_INTERVAL_MS,
                   compression_types=tuple(int(c) for c in response.get("accepted_compression_types") or ()),
                   delta_temporality=bool(response["delta_temporality"]),
                   requested_metrics=tuple(response.get("requested_metrics") or ()),
                   max_bytes=int(response["telemetry_max_bytes"]))


class RandomSource(Protocol):
    def uniform(self, a: float, b: float) -> float: ...


class TelemetryState:
    """One client's KIP-714 life-cycle.  The shell asks ``due_at`` when to act, ``start_get`` / ``start_push``
    before a request, and reports the answer (``on_subscription``, ``on_push``) or its absence (``on_failure``).
    Times are the shell's clock in ms."""

    def __init__(self, rng: RandomSource) -> None:
        self._rng = rng
        self.phase = Phase.SUBSCRIPTION_NEEDED
        self.subscription: Subscription | None = None
        #: False once the broker said telemetry cannot work for this client (or on close)
        self.enabled = True
        self._last_ms: float | None = None
        self._interval_ms = 0

    def due_at(self) -> float | None:
        """When the next request should go (a time in the past: now); None: nothing to send."""
        if not self.enabled or self.phase in _IN_PROGRESS or self.phase is Phase.TERMINATED:
            return None
        if self._last_ms is None or self.phase is Phase.TERMINATING_PUSH_NEEDED:
            return float("-inf")
        return self._last_ms + self._interval_ms

    @property
    def wants_push(self) -> bool:
        return self.phase in (Phase.PUSH_NEEDED, Phase.TERMINATING_PUSH_NEEDED)

    # ------------------------------------------------------------------ GetTelemetrySubscriptions
    def start_get(self) -> bytes:
        """The client instance id to send (zeros until the broker assigned one)."""
        self._expect(Phase.SUBSCRIPTION_NEEDED)
        self.phase = Phase.SUBSCRIPTION_IN_PROGRESS
        return self.subscription.client_instance_id if self.subscription is not None else ZERO_UUID

    def on_subscription(self, response: Mapping[str, Any], now: float) -> Phase:
        """Take a GetTelemetrySubscriptions answer; returns the phase it leads to."""
        self._take_subscription(response, now)
        return self.phase

    def _take_subscription(self, response: Mapping[str, Any], now: float) -> None:
        if self.phase is not Phase.SUBSCRIPTION_IN_PROGRESS:
            return                       # closing began while the request was out: its answer is moot
        error = int(response.get("error_code") or 0)
        if error:
            self._on_error(error, now)
            return
        subscription = Subscription.from_response(response)
        if subscription.client_instance_id == ZERO_UUID:
            self.enabled = False         # a broker bug (Java refuses it too): nothing could be pushed
            self.phase = Phase.SUBSCRIPTION_NEEDED
            return
        self.subscription = subscription
        self._last_ms = now
        if subscription.wants_metrics:
            self.phase = Phase.PUSH_NEEDED
            self._interval_ms = round(subscription.push_interval_ms * self._rng.uniform(*_FIRST_PUSH_JITTER))
        else:                            # nothing subscribed: ask again after the interval
            self.phase = Phase.SUBSCRIPTION_NEEDED
            self._interval_ms = subscription.push_interval_ms

    # ------------------------------------------------------------------ PushTelemetry
    def start_push(self) -> tuple[Subscription, bool]:
        """The subscription to push for and whether this push is the terminating one."""
        assert self.subscription is not None, "a push needs a subscription"
        terminating = self.phase is Phase.TERMINATING_PUSH_NEEDED
        if not terminating:
            self._expect(Phase.PUSH_NEEDED)
        self.phase = Phase.TERMINATING_PUSH_IN_PROGRESS if terminating else Phase.PUSH_IN_PROGRESS
        return self.subscription, terminating

    def on_push(self, error_code: int, now: float) -> None:
        if self.phase is Phase.TERMINATING_PUSH_IN_PROGRESS:
            self.phase = Phase.TERMINATED
            return
        if self.phase is not Phase.PUSH_IN_PROGRESS:
            return
        if error_code:
            self._on_error(error_code, now)
            return
        assert self.subscription is not None
        self.phase = Phase.PUSH_NEEDED
        self._last_ms = now
        self._interval_ms = self.subscription.push_interval_ms

    def skip_push(self, now: float) -> None:
        """A push was not sent (its payload could not be built, or was over the broker's limit): try again
        after the interval."""
        assert self.subscription is not None
        self.phase = Phase.TERMINATED if self.phase is Phase.TERMINATING_PUSH_IN_PROGRESS else Phase.PUSH_NEEDED
        self._last_ms = now
        self._interval_ms = self.subscription.push_interval_ms

    # ------------------------------------------------------------------ no answer
    def on_failure(self, now: float, retry_after_ms: float) -> None:
        """The request got no answer (connection lost, timed out, the broker lacks the API): ask for a
        subscription again after ``retry_after_ms``, perhaps from another broker."""
        if self.phase is Phase.TERMINATING_PUSH_IN_PROGRESS:
            self.phase = Phase.TERMINATED
            return
        if self.phase not in _IN_PROGRESS:
            return
        self.phase = Phase.SUBSCRIPTION_NEEDED
        self._last_ms = now
        self._interval_ms = int(retry_after_ms)

    # ------------------------------------------------------------------ close
    def begin_close(self) -> bool:
        """The client closes: True when a terminating push should go (a subscription asked for metrics and
        pushes were under way, as Java decides); otherwise telemetry ends here."""
        pushing = (self.enabled and self.subscription is not None and self.subscription.wants_metrics
                   and self.phase in (Phase.PUSH_NEEDED, Phase.PUSH_IN_PROGRESS, Phase.SUBSCRIPTION_IN_PROGRESS))
        self.phase = Phase.TERMINATING_PUSH_NEEDED if pushing else Phase.TERMINATED
        return pushing

    # ------------------------------------------------------------------ helpers
    def _on_error(self, error: int, now: float) -> None:
        interval = _ERROR_INTERVALS.get(error)       # an error not in the table stops telemetry (Java)
        if interval is None:
            self.enabled = False
            self.phase = Phase.SUBSCRIPTION_NEEDED
            return
        if interval < 0:
            interval = self.subscription.push_interval_ms if self.subscription is not None \
                else DEFAULT_PUSH_INTERVAL_MS
        self.phase = Phase.SUBSCRIPTION_NEEDED
        self._last_ms = now
        self._interval_ms = interval

    def _expect(self, phase: Phase) -> None:
        if self.phase is not phase:
            raise RuntimeError(f"telemetry: expected state {phase.value!r}, in {self.phase.value!r}")


# ----------------------------------------------------------------------------- the metrics
class _Sum:
    """A counter's total, and the total at the last successful push."""

    __slots__ = ("total", "pushed", "start_ns", "pushed_ns")

    def __init__(self, now_ns: int) -> None:
        self.total = 0.0
        self.pushed = 0.0
        self.start_ns = self.pushed_ns = now_ns

    def add(self, amount: float) -> None:
        self.total += amount


class _Histogram:
    """Explicit-bucket counts, sum and count, and their values at the last successful push."""

    __slots__ = ("bounds", "counts", "sum", "count", "pushed", "start_ns", "pushed_ns")

    def __init__(self, bounds: tuple[float, ...], now_ns: int) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0
        self.pushed: tuple[tuple[int, ...], float, int] = (tuple(self.counts), 0.0, 0)
        self.start_ns = self.pushed_ns = now_ns

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1     # bucket i holds (bounds[i-1], bounds[i]]
        self.sum += value
        self.count += 1


Cell = _Sum | _Histogram


class TelemetryMetrics(SeriesHook):
    """The series table kept in memory for KIP-714 pushes: a hook on the client's events (like
    ``ClientMetrics``), with ``collect`` building the subscribed series as OTLP metrics and ``pushed`` marking
    what a successful push carried, so the next delta starts there (a failed push loses nothing).
    ``wall_ns``: the wall clock for OTLP timestamps (nanoseconds since the epoch)."""

    def __init__(self, *, client_id: str, kind: str, clock: Callable[[], float],
                 wall_ns: Callable[[], int]) -> None:
        super().__init__(weakref.WeakSet(), client_id=client_id, kind=kind, clock=clock)
        self._wall_ns = wall_ns
        self._cells: dict[tuple[Series, Labels], Cell] = {}

    def _sink(self, series: Series, labels: Labels) -> Callable[[float], object]:
        now = self._wall_ns()
        cell: Cell = _Histogram(series.buckets, now) if series.kind == "histogram" else _Sum(now)
        self._cells[(series, labels)] = cell
        return cell.observe if isinstance(cell, _Histogram) else cell.add

    def collect(self, subscription: Subscription, now_ns: int
                ) -> tuple[list[Metric], dict[tuple[Series, Labels], object]]:
        """The series ``subscription`` selects, as OTLP metrics at ``now_ns``; and the snapshot to hand to
        ``pushed`` once the broker accepted them."""
        delta = subscription.delta_temporality
        metrics: list[Metric] = []
        snapshot: dict[tuple[Series, Labels], object] = {}
        cells: dict[Series, list[tuple[Labels, Cell]]] = {}
        for (series, labels), cell in list(self._cells.items()):
            cells.setdefault(series, []).append((labels, cell))
        for series in SERIES:
            if not subscription.selects(series.otel):
                continue
            if series.kind == "gauge":
                points: list[Any] = [NumberPoint(_attributes(series, labels), 0, now_ns, float(value))
                                     for labels, value in self.gauge_samples(series)]
            else:
                points = []
                for labels, cell in cells.get(series, ()):
                    start = cell.pushed_ns if delta else cell.start_ns
                    if isinstance(cell, _Histogram):
                        counts, total, count = tuple(cell.counts), cell.sum, cell.count
                        snapshot[(series, labels)] = (counts, total, count)
                        if delta:
                            old_counts, old_sum, old_count = cell.pushed
                            counts = tuple(n - o for n, o in zip(counts, old_counts))
                            total, count = total - old_sum, count - old_count
                            if count == 0:
                                continue          # a delta of nothing: no point (the next one starts here)
                        points.append(HistogramPoint(_attributes(series, labels), start, now_ns, count, total,
                                                     counts, series.buckets))
                    else:
                        snapshot[(series, labels)] = cell.total
                        value = cell.total - cell.pushed if delta else cell.total
                        if delta and value == 0:
                            continue
                        points.append(NumberPoint(_attributes(series, labels), start, now_ns, value))
            if points:
                metrics.append(Metric(series.otel, series.help, series.unit,
                                      "gauge" if series.kind == "gauge" else
                                      "sum" if series.kind == "counter" else "histogram",
                                      points, monotonic=series.kind == "counter", delta=delta))
        return metrics, snapshot

    def pushed(self, snapshot: Mapping[tuple[Series, Labels], object], now_ns: int) -> None:
        """The broker accepted the push ``collect`` built ``snapshot`` for: later deltas start from it."""
        for key, value in snapshot.items():
            cell = self._cells.get(key)
            if isinstance(cell, _Histogram):
                cell.pushed = value  # type: ignore[assignment]
                cell.pushed_ns = now_ns
            elif cell is not None:
                cell.pushed = value  # type: ignore[assignment]
                cell.pushed_ns = now_ns


def _attributes(series: Series, labels: Labels) -> Attributes:
    """The point's attributes: the series' labels (``client_id`` left out, as Java does: the broker knows it
    from the request)."""
    return tuple(zip(series.labels, labels))
