"""Pure statistics for the failure benchmarks: delivery logs, percentiles and per-second series.

Nothing here reads a clock or a socket: every function takes timestamps (seconds on ``time.monotonic()``, the
clock the fault proxy records on) so the metrics can be unit-tested with made-up timelines and recomputed from
a saved run.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import Collection, Iterable, Sequence

#: error kinds a client adapter reports for a failed record
TIMEOUT = "timeout"
OTHER = "other"
#: a record that neither succeeded nor failed by the end of the run
UNFINISHED = "unfinished"


class DeliveryLog:
    """Scheduled time, hand-over time, completion time, partition and error kind of every record of one client.

    The open-loop load fixes each record's *scheduled* time (``start + i / rate``) and its partition before the
    client sees it, so a record the client never completes still has both.  Slots are written by index, so a
    client's own callback thread (confluent-kafka's poll loop) can complete records while the event loop appends
    new ones: a list or array item store is atomic in CPython.  Times and partitions are arrays, not lists: a
    list's items are visited by every one of Python's full collections, and the log of a whole run is the
    largest thing the measuring process holds (the pauses it would add are the measured client's).
    """

    __slots__ = ("scheduled_s", "sent_s", "done_s", "partition", "error", "_settled", "_sealed", "acked_count",
                 "failed_count")

    def __init__(self) -> None:
        self.scheduled_s = array("d")
        self.sent_s = array("d")
        self.done_s = array("d")
        self.partition = array("q")
        self.error: list[str | None] = []
        #: every record before this index is complete (``all_done`` only rescans from here)
        self._settled = 0
        #: outcomes after ``seal()`` are ignored: the run is over, the record counts as never completed
        self._sealed = False
        #: running totals for the progress line, O(1) to read while the load runs (``acked()`` and
        #: ``error_counts()`` scan every record: called every tick they stalled the loop they measure, more as
        #: the run grew); a client's callback thread may race an increment, so they are for display only
        self.acked_count = 0
        self.failed_count = 0

    def __len__(self) -> int:
        return len(self.sent_s)

    def begin(self, now_s: float, partition: int = -1, scheduled_s: float | None = None) -> int:
        """Note a record for ``partition`` (-1: the client picks) handed to the client at ``now_s``, due at
        ``scheduled_s`` (default: ``now_s``); returns its index."""
        self.scheduled_s.append(now_s if scheduled_s is None else scheduled_s)
        self.sent_s.append(now_s)
        self.done_s.append(math.nan)
        self.partition.append(partition)
        self.error.append(None)
        return len(self.sent_s) - 1

    def seal(self) -> None:
        """End the run: records not complete now stay unfinished, whatever the client reports later (closing
        a client fails its outstanding records)."""
        self._sealed = True

    def succeeded(self, index: int, now_s: float, partition: int) -> None:
        if self._sealed:
            return
        self.partition[index] = partition
        self.done_s[index] = now_s
        self.acked_count += 1

    def all_done(self) -> bool:
        """Whether every record noted so far succeeded or failed (amortized: a settled prefix is not rescanned)."""
        done, i = self.done_s, self._settled
        while i < len(done) and not math.isnan(done[i]):
            i += 1
        self._settled = i
        return i == len(done)

    def failed(self, index: int, now_s: float, kind: str) -> None:
        if kind not in (TIMEOUT, OTHER):
            raise ValueError(f"error kind: expected {TIMEOUT!r} or {OTHER!r}, got {kind!r}")
        if self._sealed:
            return
        self.error[index] = kind
        self.done_s[index] = now_s
        self.failed_count += 1

    def scheduled_latencies(self, since_s: float, until_s: float, partitions: Collection[int] | None = None
                            ) -> list[float]:
        """Latency in seconds, from its scheduled time, of every record *scheduled* in ``[since_s, until_s)``
        (on ``partitions``, or all): a success counts with its acknowledgement time, whenever that came; a
        failure or a record never completed counts as ``inf``.  So a client that stalls acknowledges nothing
        during a window scores at least the stall, never better than the records it did deliver."""
        out = []
        for sched, done, part, err in zip(self.scheduled_s, self.done_s, self.partition, self.error):
            if since_s <= sched < until_s and (partitions is None or part in partitions):
                out.append(done - sched if err is None and not math.isnan(done) else math.inf)
        return out

    def pending(self) -> int:
        return sum(1 for d in self.done_s if math.isnan(d))

    def acked(self) -> list[tuple[float, float, int]]:
        """(sent_s, done_s, partition) of every record that succeeded."""
        return [(s, d, p) for s, d, p, e in zip(self.sent_s, self.done_s, self.partition, self.error)
                if e is None and not math.isnan(d)]

    def error_counts(self) -> dict[str, int]:
        counts = {TIMEOUT: 0, OTHER: 0, UNFINISHED: 0}
        for d, e in zip(self.done_s, self.error):
            if e is not None:
                counts[e] += 1
            elif math.isnan(d):
                counts[UNFINISHED] += 1
        return counts


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of unsorted ``values``; ``None`` for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile: q must be within 0..100, got {q}")
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class LatencySummary:
    count: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        return {"count": self.count, "p50_ms": round_ms(self.p50_ms), "p99_ms": round_ms(self.p99_ms),
                "max_ms": round_ms(self.max_ms)}


def latency_summary(latencies_s: Sequence[float]) -> LatencySummary:
    ms = [x * 1000.0 for x in latencies_s]
    return LatencySummary(len(ms), percentile(ms, 50), percentile(ms, 99), max(ms) if ms else None)


def scheduled_summary(latencies_s: Sequence[float]) -> dict[str, float | int | None]:
    """Count, never-acknowledged count and p50 / p99 / p99.9 / max in ms of latencies from the scheduled time
    (``inf`` for a record that failed or never completed, so a percentile that reaches one is ``inf``)."""
    ms = [x * 1000.0 for x in latencies_s]
    return {"count": len(ms), "not_acked": sum(1 for x in ms if math.isinf(x)),
            "p50_ms": round_ms(percentile(ms, 50)), "p99_ms": round_ms(percentile(ms, 99)),
            "p999_ms": round_ms(percentile(ms, 99.9)), "max_ms": round_ms(max(ms)) if ms else None}


def scheduled_p99_series(log: DeliveryLog, start_s: float, duration_s: float, bucket_s: float = 1.0,
                         partitions: Collection[int] | None = None) -> list[float | None]:
    """Per bucket from ``start_s``: the p99 latency in ms from the scheduled time of the records *scheduled* in
    it (``inf`` where a failed or never completed record reaches the p99; ``None``: nothing was scheduled)."""
    n = bucket_count(duration_s, bucket_s)
    buckets: list[list[float]] = [[] for _ in range(n)]
    for sched, done, part, err in zip(log.scheduled_s, log.done_s, log.partition, log.error):
        i = math.floor((sched - start_s) / bucket_s)
        if 0 <= i < n and (partitions is None or part in partitions):
            buckets[i].append((done - sched) * 1000.0 if err is None and not math.isnan(done) else math.inf)
    return [round_ms(percentile(b, 99)) for b in buckets]


def back_to_baseline_s(per_bucket_p99_ms: Sequence[float | None], baseline_ms: float | None,
                       factor: float = 1.5, bucket_s: float = 1.0) -> float | None:
    """Seconds from the first bucket to the start of the first bucket after which every bucket's p99 stays at
    most ``factor`` × ``baseline_ms`` (empty buckets do not count either way); ``inf`` when even the last
    bucket is above it, ``None`` without a baseline or buckets."""
    if baseline_ms is None or not per_bucket_p99_ms:
        return None
    limit = factor * baseline_ms
    settled = len(per_bucket_p99_ms)
    for i in range(len(per_bucket_p99_ms) - 1, -1, -1):
        p99 = per_bucket_p99_ms[i]
        if p99 is not None and p99 > limit:
            break
        settled = i
    if settled == len(per_bucket_p99_ms):
        return math.inf
    return settled * bucket_s


def bucket_count(duration_s: float, bucket_s: float) -> int:
    if bucket_s <= 0:
        raise ValueError(f"bucket_s: must be > 0, got {bucket_s}")
    if duration_s < 0:
        raise ValueError(f"duration_s: must be >= 0, got {duration_s}")
    return max(1, math.ceil(duration_s / bucket_s - 1e-9))


def rate_series(times_s: Iterable[float], start_s: float, duration_s: float, bucket_s: float = 1.0) -> list[float]:
    """Events per second in consecutive buckets from ``start_s``; events outside the span are ignored."""
    n = bucket_count(duration_s, bucket_s)
    counts = [0] * n
    for t in times_s:
        i = math.floor((t - start_s) / bucket_s)
        if 0 <= i < n:
            counts[i] += 1
    return [c / bucket_s for c in counts]


def delivery_series(log: DeliveryLog, start_s: float, duration_s: float, bucket_s: float = 1.0
                    ) -> dict[str, Sequence[float | None]]:
    """Per bucket: records acknowledged per second (by ack time), records failed per second, and the p50 /
    p99 / max produce latency of records *sent* in that bucket (so a stall shows where it began)."""
    n = bucket_count(duration_s, bucket_s)
    acked = rate_series((d for _, d, _ in log.acked()), start_s, duration_s, bucket_s)
    failed = rate_series((d for d, e in zip(log.done_s, log.error) if e is not None), start_s, duration_s,
                         bucket_s)
    by_send: list[list[float]] = [[] for _ in range(n)]
    for s, d, _ in log.acked():
        i = math.floor((s - start_s) / bucket_s)
        if 0 <= i < n:
            by_send[i].append((d - s) * 1000.0)
    return {
        "acked_per_s": acked,
        "failed_per_s": failed,
        "p50_ms": [round_ms(percentile(b, 50)) for b in by_send],
        "p99_ms": [round_ms(percentile(b, 99)) for b in by_send],
        "max_ms": [round_ms(max(b)) if b else None for b in by_send],
    }


def first_after(times_s: Iterable[float], after_s: float) -> float | None:
    """Delay from ``after_s`` to the first time at or after it (``None``: nothing came)."""
    later = [t for t in times_s if t >= after_s]
    return min(later) - after_s if later else None


def count_between(times_s: Iterable[float], start_s: float, end_s: float) -> int:
    return sum(1 for t in times_s if start_s <= t < end_s)


def summary_of(values: Sequence[float]) -> dict[str, float | int | None]:
    """Count, median and max of a list of delays in seconds, reported in ms."""
    ms = [v * 1000.0 for v in values]
    return {"count": len(ms), "median_ms": round_ms(percentile(ms, 50)), "max_ms": round_ms(max(ms)) if ms else None}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` rounded, ``None`` when either is missing; x/0 is ``inf`` unless x is 0 too
    (then 1.0: both clients did the same nothing)."""
    if numerator is None or denominator is None:
        return None
    if denominator == 0:
        return 1.0 if numerator == 0 else math.inf
    return round(numerator / denominator, 3)


def round_ms(x: float | None, digits: int = 2) -> float | None:
    """A figure for the report: rounded, ``None`` kept (no data is not zero)."""
    return None if x is None else round(x, digits)

