"""Benchmark statistics on hand-made timelines: percentiles, per-second series, delivery logs, ratios."""

from __future__ import annotations

import math

import pytest

from akresil.bench import stats


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]          # 1..100
    assert stats.percentile(values, 50) == 50.0
    assert stats.percentile(values, 99) == 99.0
    assert stats.percentile(values, 100) == 100.0
    assert stats.percentile(list(reversed(values)), 0) == 1.0
    assert stats.percentile([7.0], 99) == 7.0
    assert stats.percentile([], 50) is None
    with pytest.raises(ValueError, match="q must be within 0..100"):
        stats.percentile(values, 101)


def test_delivery_log_counts_outcomes() -> None:
    log = stats.DeliveryLog()
    a, b, c, d = (log.begin(t) for t in (0.0, 0.1, 0.2, 0.3))
    log.succeeded(a, 0.05, partition=2)
    log.failed(b, 2.6, stats.TIMEOUT)
    log.failed(c, 0.25, stats.OTHER)
    assert len(log) == 4 and log.pending() == 1
    assert log.acked() == [(0.0, 0.05, 2)]
    assert log.error_counts() == {stats.TIMEOUT: 1, stats.OTHER: 1, stats.UNFINISHED: 1}
    with pytest.raises(ValueError, match="error kind"):
        log.failed(d, 1.0, "boom")


def test_rate_series_buckets_and_ignores_outside() -> None:
    times = [10.0, 10.2, 10.99, 11.0, 12.5, 9.9, 13.0]
    assert stats.rate_series(times, start_s=10.0, duration_s=3.0) == [3.0, 1.0, 1.0]
    assert stats.rate_series(times, start_s=10.0, duration_s=3.0, bucket_s=0.5) == [4.0, 2.0, 2.0, 0.0, 0.0, 2.0]
    with pytest.raises(ValueError, match="bucket_s"):
        stats.rate_series(times, 10.0, 3.0, bucket_s=0)


def test_delivery_series_latency_by_send_second_and_acks_by_ack_second() -> None:
    log = stats.DeliveryLog()
    # second 0: two fast records; second 1: one record stalled until second 2
    for sent, done in ((100.1, 100.11), (100.5, 100.52), (101.2, 102.7)):
        log.succeeded(log.begin(sent), done, partition=0)
    log.failed(log.begin(101.5), 102.9, stats.TIMEOUT)
    series = stats.delivery_series(log, start_s=100.0, duration_s=3.0)
    assert series["acked_per_s"] == [2.0, 0.0, 1.0]
    assert series["failed_per_s"] == [0.0, 0.0, 1.0]
    assert series["p99_ms"][0] == pytest.approx(20.0, abs=0.01)
    assert series["p50_ms"][1] == pytest.approx(1500.0, abs=0.01)
    assert series["p99_ms"][2] is None                    # nothing was sent in the last second


def test_latency_summary_and_first_after() -> None:
    s = stats.latency_summary([0.001, 0.002, 0.010, 0.500])
    assert (s.count, s.p50_ms, s.max_ms) == (4, 2.0, 500.0)
    assert stats.latency_summary([]).as_dict() == {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    assert stats.first_after([1.0, 3.0, 2.5], 2.0) == pytest.approx(0.5)
    assert stats.first_after([1.0], 2.0) is None
    assert stats.count_between([1.0, 2.0, 2.999, 3.0], 2.0, 3.0) == 2


def test_ratio_edge_cases() -> None:
    assert stats.ratio(1.0, 4.0) == 0.25
    assert stats.ratio(0, 0) == 1.0
    assert math.isinf(stats.ratio(3, 0) or 0)
    assert stats.ratio(None, 1.0) is None
