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
    assert (log.acked_count, log.failed_count) == (1, 2)      # the progress line's O(1) totals agree
    with pytest.raises(ValueError, match="error kind"):
        log.failed(d, 1.0, "boom")
    assert (log.acked_count, log.failed_count) == (1, 2)


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


def test_scheduled_latency_counts_every_record_scheduled_in_the_window() -> None:
    log = stats.DeliveryLog()
    a = log.begin(10.2, partition=1, scheduled_s=10.0)     # handed over late: latency counts from 10.0
    log.succeeded(a, 10.05 + 0.2, 1)
    b = log.begin(10.5, partition=2)                       # acknowledged long after the window: final latency
    log.succeeded(b, 30.5, 2)
    c = log.begin(11.0, partition=1)                       # failed: never delivered
    log.failed(c, 13.5, stats.TIMEOUT)
    log.begin(11.5, partition=2)                           # never completed
    log.succeeded(log.begin(12.0, partition=1), 12.001, 1)  # scheduled after the window
    lat = log.scheduled_latencies(10.0, 12.0)
    assert lat[:2] == [pytest.approx(0.25), pytest.approx(20.0)] and lat[2:] == [math.inf, math.inf]
    assert log.scheduled_latencies(10.0, 12.0, partitions={2}) == [pytest.approx(20.0), math.inf]
    summary = stats.scheduled_summary(lat)
    assert summary["count"] == 4 and summary["not_acked"] == 2
    assert summary["p50_ms"] == pytest.approx(20_000.0) and summary["p99_ms"] == math.inf
    assert stats.scheduled_summary([]) == {"count": 0, "not_acked": 0, "p50_ms": None, "p99_ms": None,
                                           "p999_ms": None, "max_ms": None}


def _stalled_client(window_s: float, fail: bool) -> stats.DeliveryLog:
    """1000 records/s on one partition through a window of ``window_s`` starting at 100 s: for the first 60% of
    it the client acknowledges nothing (``fail``: those records expire; else all of them are acknowledged 1 s
    after the window closes), the rest are acknowledged in 10 ms."""
    log = stats.DeliveryLog()
    stall_end = 100.0 + 0.6 * window_s
    for i in range(int(window_s * 1000)):
        sched = 100.0 + i / 1000
        idx = log.begin(sched, partition=0)
        if sched >= stall_end:
            log.succeeded(idx, sched + 0.010, 0)
        elif fail:
            log.failed(idx, sched + 5.0, stats.TIMEOUT)
        else:
            log.succeeded(idx, 100.0 + window_s + 1.0, 0)
    return log


@pytest.mark.parametrize("fail", [True, False])
def test_a_client_that_acknowledges_nothing_in_the_window_never_scores_well(fail: bool) -> None:
    window = 15.0
    log = _stalled_client(window, fail)
    summary = stats.scheduled_summary(log.scheduled_latencies(100.0, 100.0 + window, {0}))
    # only the acknowledgements inside the window would give 10 ms: the stall must show instead
    acked_inside = [(d - s) * 1000 for s, d, _ in log.acked() if d < 100.0 + window]
    assert stats.percentile(acked_inside, 99) == pytest.approx(10.0)
    assert summary["p99_ms"] is not None and summary["p99_ms"] >= window * 1000 * 0.99
    if fail:
        assert summary["p99_ms"] == math.inf and summary["not_acked"] == 9000
    else:
        assert summary["max_ms"] == pytest.approx(window * 1000 + 1000, abs=0.01)
        assert summary["p99_ms"] >= window * 1000     # the records scheduled first waited the whole window


def test_scheduled_p99_series_buckets_by_scheduled_time() -> None:
    log = stats.DeliveryLog()
    for i in range(100):                                     # second 0: 100 records at 5 ms
        log.succeeded(log.begin(50.0 + i / 100, 0), 50.0 + i / 100 + 0.005, 0)
    log.failed(log.begin(51.5, 1), 51.6, stats.OTHER)         # second 1: one failed record
    log.succeeded(log.begin(52.2, 2, scheduled_s=51.9), 52.0, 2)   # scheduled in second 1, handed over in 2
    series = stats.scheduled_p99_series(log, 50.0, 4.0)
    assert series[0] == pytest.approx(5.0) and series[1] == math.inf and series[2:] == [None, None]
    assert stats.scheduled_p99_series(log, 50.0, 4.0, partitions={2})[1] == pytest.approx(100.0)


def test_back_to_baseline_is_the_start_of_the_last_good_run_of_buckets() -> None:
    assert stats.back_to_baseline_s([100.0, 50.0, 9.0, 8.0, 20.0, 9.0, 9.0], 10.0) == 5.0
    assert stats.back_to_baseline_s([15.0, 9.0], 10.0) == 0.0          # 1.5x the baseline is still back
    assert stats.back_to_baseline_s([9.0, None, 30.0, None], 10.0) == 3.0   # empty buckets do not count
    assert stats.back_to_baseline_s([9.0, 40.0], 10.0) == math.inf      # never back before the run ended
    assert stats.back_to_baseline_s([9.0, math.inf, 9.0], 10.0, bucket_s=0.5) == 1.0
    assert stats.back_to_baseline_s([9.0], None) is None and stats.back_to_baseline_s([], 10.0) is None


def test_all_done_and_seal() -> None:
    log = stats.DeliveryLog()
    a, b = log.begin(1.0, 0), log.begin(1.1, 1)
    assert not log.all_done()
    log.succeeded(b, 1.2, 1)
    assert not log.all_done()
    log.failed(a, 1.3, stats.OTHER)
    assert log.all_done()
    c = log.begin(2.0, 0)
    log.seal()
    log.succeeded(c, 2.5, 0)               # after the run's end: stays unfinished
    assert not log.all_done() and log.error_counts()[stats.UNFINISHED] == 1
    assert log.scheduled_latencies(0.0, 3.0)[-1] == math.inf
