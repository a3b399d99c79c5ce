"""KIP-572 TaskTimer: pure timing decisions, driven with explicit ``now`` values."""

from __future__ import annotations

import random

import pytest

from akresil.core.backoff import ExponentialBackoff
from akresil.core.task_timer import TaskTimer
from akresil.errors import ConfigError


def timer(task_timeout_ms: float, base: float = 100, cap: float = 1000, jitter: float = 0.0) -> TaskTimer:
    return TaskTimer(task_timeout_ms, ExponentialBackoff(base, cap, jitter=jitter, rng=random.Random(7)))


def test_healthy_task_has_no_deadline_and_is_ready() -> None:
    t = timer(10_000)
    assert not t.failing and t.deadline is None
    assert t.ready(0) and t.wait_ms(0) == 0
    assert t.stuck_for_ms(5) == 0


def test_first_timeout_starts_the_budget_and_backs_off_exponentially() -> None:
    t = timer(10_000)
    assert t.on_timeout(1_000) == 1_100
    assert t.failing and t.deadline == 11_000 and t.first_timeout_at == 1_000
    assert not t.ready(1_099) and t.ready(1_100)
    assert t.wait_ms(1_050) == 50
    # the deadline stays anchored at the first timeout; backoff doubles up to the cap
    waits = []
    now = 1_100
    for _ in range(5):
        retry_at = t.on_timeout(now)
        assert retry_at is not None
        waits.append(retry_at - now)
        now = retry_at
    assert waits == [200, 400, 800, 1000, 1000]
    assert t.deadline == 11_000 and t.failures == 6


def test_retry_is_clamped_to_the_deadline_then_one_final_attempt_then_fail() -> None:
    t = timer(2_500)
    now, attempts = 0.0, []
    while True:
        attempts.append(now)
        retry_at = t.on_timeout(now)
        if retry_at is None:
            break
        now = retry_at
    # 0, +100, +200, +400, +800, +1000 would be 2500 exactly = deadline: final attempt there, then fail
    assert attempts == [0, 100, 300, 700, 1500, 2500]
    assert now == t.deadline == 2_500


def test_clamp_makes_the_final_attempt_start_exactly_at_the_deadline() -> None:
    t = timer(1_000, base=700, cap=700)
    assert t.on_timeout(0) == 700
    assert t.on_timeout(700) == 1_000          # not 1400: clamped to the deadline
    assert t.on_timeout(1_000) is None


def test_attempt_straddling_the_deadline_is_the_final_one() -> None:
    t = timer(1_000)
    assert t.on_timeout(0) == 100
    assert t.on_timeout(999) == 1_000           # clamped
    t2 = timer(1_000)
    assert t2.on_timeout(0) == 100
    assert t2.on_timeout(1_500) is None         # started at 100, ran past the deadline: that was the last one


def test_a_nonzero_budget_always_retries_once() -> None:
    t = timer(1, base=100, cap=100)
    assert t.on_timeout(0) == 1                 # retry at the deadline even though backoff is longer
    assert t.on_timeout(1) is None


def test_zero_budget_fails_on_first_timeout() -> None:
    t = timer(0)
    assert t.on_timeout(50) is None
    assert t.failures == 1 and t.failing


def test_progress_resets_the_budget() -> None:
    t = timer(1_000)
    t.on_timeout(0)
    t.on_timeout(900)
    t.on_progress()
    assert not t.failing and t.failures == 0 and t.ready(900) and t.deadline is None
    # a timeout after progress starts a fresh budget from that moment
    assert t.on_timeout(5_000) == 5_100
    assert t.deadline == 6_000


def test_progress_in_the_final_attempt_saves_the_task() -> None:
    t = timer(500)
    assert t.on_timeout(0) == 100
    assert t.on_timeout(100) == 300
    assert t.on_timeout(300) == 500
    t.on_progress()                  # the final attempt (started at the deadline) made progress...
    assert t.on_timeout(600) == 700  # ...so a later timeout opens a new budget instead of failing


def test_jittered_backoff_stays_within_kip580_bounds() -> None:
    t = timer(1_000_000, jitter=0.2)
    now = 0.0
    for failures in range(1, 12):
        retry_at = t.on_timeout(now)
        assert retry_at is not None
        raw = min(1000, 100 * 2 ** (failures - 1))
        assert 0.8 * raw <= retry_at - now <= 1.2 * raw
        now = retry_at


@pytest.mark.parametrize("bad", [-1, "10", None, True, 1.5j])
def test_bad_task_timeout_is_a_config_error_naming_the_key(bad: object) -> None:
    with pytest.raises(ConfigError, match="task_timeout_ms"):
        timer(bad)  # type: ignore[arg-type]
