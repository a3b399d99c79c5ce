"""core.admin_call: per-item outcomes, which errors retry or reroute, KIP-580 backoff per round, the deadline."""

from __future__ import annotations

import pytest

from akresil import errors
from akresil.core.admin_call import AdminCall, Disposition, ItemResults, classify
from akresil.core.backoff import ExponentialBackoff

E = errors


def _call(items: list[str], timeout_ms: float = 1_000, now: float = 0.0) -> AdminCall[str]:
    return AdminCall(items, now=now, timeout_ms=timeout_ms, backoff=ExponentialBackoff(100, 400, jitter=0.0),
                     what="DescribeGroups for group")


@pytest.mark.parametrize(("code", "expected"), [
    (0, Disposition.DONE),
    (E.NotCoordinatorError.errno, Disposition.REROUTE),
    (E.CoordinatorNotAvailableError.errno, Disposition.REROUTE),
    (E.NotControllerError.errno, Disposition.REROUTE),
    (E.NotLeaderOrFollowerError.errno, Disposition.REROUTE),
    (E.LeaderNotAvailableError.errno, Disposition.REROUTE),
    (E.CoordinatorLoadInProgressError.errno, Disposition.RETRY),
    (E.ThrottlingQuotaExceededError.errno, Disposition.RETRY),
    (E.UnknownTopicOrPartitionError.errno, Disposition.DONE),   # retriable in Kafka, final for an admin item
    (E.GroupIdNotFoundError.errno, Disposition.DONE),
    (E.ElectionNotNeededError.errno, Disposition.DONE),         # an election outcome, not worth a retry
    (E.NonEmptyGroupError.errno, Disposition.DONE),
    (E.GroupAuthorizationFailedError.errno, Disposition.DONE),
    (9999, Disposition.DONE),
])
def test_classify(code: int, expected: Disposition) -> None:
    assert classify(code) is expected


def test_one_failing_item_does_not_hide_the_others() -> None:
    call = _call(["a", "b", "c"])
    call.answer("a", 0, "group 'a'", "desc-a")
    call.answer("b", E.GroupAuthorizationFailedError.errno, "group 'b'", message="not allowed")
    call.answer("c", E.NotCoordinatorError.errno, "group 'c'")
    assert list(call.pending) == ["c"] and call.stale_routes == {"c"}
    assert call.end_round(now=10) == 110          # first retry after 100 ms (KIP-580 base)
    call.answer("c", 0, "group 'c'", "desc-c")
    assert call.end_round(now=120) is None
    results = call.results()
    assert list(results) == ["a", "b", "c"]
    assert results["a"] == "desc-a" and results["c"] == "desc-c"
    assert results.ok == {"a": "desc-a", "c": "desc-c"}
    with pytest.raises(E.GroupAuthorizationFailedError, match="group 'b': not allowed"):
        results["b"]
    with pytest.raises(E.GroupAuthorizationFailedError):
        results.raise_on_error()
    assert "b" in results and "zz" not in results


def test_backoff_grows_per_failed_round_and_resets_nothing_on_success() -> None:
    call = _call(["a"], timeout_ms=10_000)
    delays = []
    now = 0.0
    for _ in range(4):
        call.transient("a", E.CoordinatorLoadInProgressError("loading"))
        at = call.end_round(now)
        assert at is not None
        delays.append(at - now)
        now = at
    assert delays == [100, 200, 400, 400]         # exponential, capped at retry_backoff_max_ms


def test_a_round_without_failures_goes_again_at_once() -> None:
    call = _call(["a", "b"])
    call.succeed("a", 1)                          # b was not routable yet, nothing failed
    assert call.end_round(now=5) == 5


def test_deadline_fails_pending_items_with_the_last_error() -> None:
    call = _call(["a", "b"], timeout_ms=250)
    call.answer("a", 0, "group 'a'", 1)
    cause = E.CoordinatorLoadInProgressError("group 'b': still loading")
    call.transient("b", cause)
    assert call.end_round(now=0) == 100
    call.transient("b", cause)
    assert call.end_round(now=100) is None        # the next retry (300) would pass the deadline (250)
    results = call.results()
    assert results.ok == {"a": 1}
    err = results.errors["b"]
    assert isinstance(err, E.KafkaTimeoutError) and err.__cause__ is cause
    assert "250 ms (default_api_timeout_ms)" in str(err) and "still loading" in str(err)


def test_settled_items_ignore_late_answers() -> None:
    call = _call(["a"])
    call.fail("a", E.GroupIdNotFoundError("gone"))
    call.answer("a", 0, "group 'a'", "late")
    call.transient("a", E.KafkaConnectionError("late"))
    assert call.results().errors["a"].args == ("gone",)
    assert call.end_round(now=0) is None


def test_expand_replaces_a_placeholder_with_the_answered_items() -> None:
    call = _call(["*"])
    call.expand("*", ["x", "y", "x"])
    call.answer("x", 0, "x", 1)
    call.answer("y", E.ElectionNotNeededError.errno, "y")
    results = call.results()
    assert list(results) == ["x", "y"]
    assert isinstance(results.errors["y"], E.ElectionNotNeededError)


def test_item_results_repr_and_duplicates() -> None:
    call = _call(["a", "a", "b"])
    assert call.order == ["a", "b"]
    results = ItemResults(["a", "b"], {"a": 1}, {"b": E.NonEmptyGroupError("busy")})
    assert repr(results) == "ItemResults({'a': 1, 'b': error NonEmptyGroupError})"
    assert len(results) == 2
