"""KIP-580 backoff: the KIP's example schedule, jitter bounds, base > max, and RetryState."""

from __future__ import annotations

import logging
import random

import pytest

from akresil.core import backoff as backoff_mod
from akresil.core.backoff import ExponentialBackoff, RetryState
from akresil.errors import ConfigError


def test_kip580_example_schedule_without_jitter() -> None:
    b = ExponentialBackoff(100, 1000, jitter=0.0)
    assert [b.backoff_ms(n) for n in range(1, 7)] == [100, 200, 400, 800, 1000, 1000]
    assert b.backoff_ms(0) == 0.0
    assert b.backoff_ms(10_000) == 1000  # huge failure counts stay at the cap without huge ints


def test_jitter_stays_within_20_percent_and_spreads() -> None:
    rng = random.Random(7)
    b = ExponentialBackoff(100, 1000, rng=rng)
    for failures, raw in ((1, 100), (3, 400), (9, 1000)):
        draws = [b.backoff_ms(failures) for _ in range(5000)]
        assert min(draws) >= raw * 0.8 and max(draws) <= raw * 1.2
        # the draws really spread over the window (not a constant factor)
        assert min(draws) < raw * 0.82 and max(draws) > raw * 1.18


def test_jitter_uses_injected_rng() -> None:
    a = ExponentialBackoff(100, 1000, rng=random.Random(1))
    b = ExponentialBackoff(100, 1000, rng=random.Random(1))
    assert [a.backoff_ms(2) for _ in range(10)] == [b.backoff_ms(2) for _ in range(10)]


def test_base_above_max_is_constant_max_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    backoff_mod._warned.discard(("retry_backoff_ms", 5000.0, 1000.0))
    with caplog.at_level(logging.WARNING, logger="akresil.core.backoff"):
        b = ExponentialBackoff(5000, 1000, jitter=0.0)
        ExponentialBackoff(5000, 1000, jitter=0.0)   # same config again: no second warning
    assert [b.backoff_ms(n) for n in (1, 2, 5)] == [1000, 1000, 1000]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "retry_backoff_ms" in warnings[0].getMessage()


def test_base_equal_max_is_constant_without_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="akresil.core.backoff"):
        b = ExponentialBackoff(300, 300, jitter=0.0)
    assert [b.backoff_ms(n) for n in (1, 4)] == [300, 300]
    assert not caplog.records


@pytest.mark.parametrize("kwargs, key", [
    (dict(base_ms=-1, max_ms=10), "retry_backoff_ms"),
    (dict(base_ms=1, max_ms=-10), "retry_backoff_max_ms"),
    (dict(base_ms=1, max_ms=10, jitter=1.5), "jitter"),
])
def test_bad_parameters_name_the_problem(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        ExponentialBackoff(**kwargs)


def test_retry_state_grows_and_resets() -> None:
    state = RetryState(ExponentialBackoff(50, 1000, jitter=0.0))
    assert state.ready(0)
    assert state.on_failure(now=10) == 50 and state.next_allowed_at == 60
    assert not state.ready(59.9) and state.ready(60)
    assert state.on_failure(now=60) == 100 and state.remaining_ms(100) == 60
    state.on_success()
    assert state.failures == 0 and state.ready(100) and state.remaining_ms(100) == 0
    assert state.on_failure(now=200) == 50
