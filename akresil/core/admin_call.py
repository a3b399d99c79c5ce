"""One admin call over many items (groups, partitions, config resources): per-item outcome, retries, deadline.

An admin call fans out into requests to several nodes (a group's coordinator, a partition's leader, the
controller) and each item in an answer has its own error code. One item failing must not hide the others'
outcome, and a transient error (coordinator moved, leader unknown, connection lost) must be retried without
retrying the items that are already settled. ``AdminCall`` keeps that bookkeeping as plain state driven by an
injected clock: the I/O shell (``akresil.admin``) asks which items are pending, reports what each answer said,
and asks when the next round may start. Rounds back off per KIP-580 (one failure count for the call, as Java's
admin does per call), and the whole call is bounded by a deadline (``default_api_timeout_ms``): items still
pending then fail with ``KafkaTimeoutError`` carrying the last transient error.
"""

from __future__ import annotations

import enum
from typing import Any, Generic, Hashable, Iterable, Iterator, Mapping, TypeVar

from .. import errors
from .backoff import ExponentialBackoff

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Disposition(enum.Enum):
    """What one item's answer means for the call."""

    DONE = "done"          # settled: a value or a final error
    RETRY = "retry"        # same route again after the backoff (e.g. COORDINATOR_LOAD_IN_PROGRESS)
    REROUTE = "reroute"    # the route is stale (coordinator/leader/controller moved): look it up again


_E = errors
#: codes saying the node we asked is not (or no longer) the right one for the item
_REROUTE_CODES = frozenset({
    _E.NotCoordinatorError.errno, _E.CoordinatorNotAvailableError.errno, _E.NotControllerError.errno,
    _E.NotLeaderOrFollowerError.errno, _E.LeaderNotAvailableError.errno,
})
#: codes Kafka marks retriable that an admin call reports at once, as Java's admin does: an unknown topic, and
#: the outcomes of a leader election (retrying cannot change them within one call)
_FINAL_RETRIABLE = frozenset({_E.UnknownTopicOrPartitionError.errno, _E.ElectionNotNeededError.errno,
                              _E.EligibleLeadersNotAvailableError.errno, _E.PreferredLeaderNotAvailableError.errno})


def classify(code: int) -> Disposition:
    """The disposition of a broker error code for an admin item (0 is DONE: success)."""
    if code == 0:
        return Disposition.DONE
    if code in _REROUTE_CODES:
        return Disposition.REROUTE
    if code in _FINAL_RETRIABLE:
        return Disposition.DONE
    return Disposition.RETRY if _E.error_for_code(code).retriable else Disposition.DONE


def error_from(code: int, context: str, message: str | None = None) -> errors.KafkaError:
    """The exception instance for ``code``, its message naming the item (and the broker's message if any)."""
    cls = _E.error_for_code(code)
    detail = message or cls.description or cls.__name__
    return cls(f"{context}: {detail}")


class AdminCall(Generic[K]):
    """Bookkeeping of one admin call: pending items, settled values and errors, backoff and deadline."""

    def __init__(self, items: Iterable[K], *, now: float, timeout_ms: float, backoff: ExponentialBackoff,
                 what: str) -> None:
        self.order: list[K] = list(dict.fromkeys(items))
        self.pending: dict[K, None] = dict.fromkeys(self.order)
        self.values: dict[K, Any] = {}
        self.errors: dict[K, errors.KafkaError] = {}
        #: items whose route must be looked up again before the next round
        self.stale_routes: set[K] = set()
        self.deadline = now + timeout_ms
        self.timeout_ms = timeout_ms
        self.what = what
        self.failures = 0
        self._backoff = backoff
        self._round_failed = False
        self._last: dict[K, BaseException] = {}

    # ------------------------------------------------------------------ reporting outcomes
    def succeed(self, key: K, value: Any = None) -> None:
        if key in self.pending:
            del self.pending[key]
            self.values[key] = value
            self._last.pop(key, None)

    def fail(self, key: K, error: errors.KafkaError) -> None:
        """A final error for ``key``: reported as its result, not retried."""
        if key in self.pending:
            del self.pending[key]
            self.errors[key] = error
            self._last.pop(key, None)

    def transient(self, key: K, error: BaseException, *, reroute: bool = False) -> None:
        """``key`` stays pending for the next round; ``reroute`` asks for a fresh route lookup first."""
        if key in self.pending:
            self._last[key] = error
            self._round_failed = True
            if reroute:
                self.stale_routes.add(key)

    def transient_all(self, keys: Iterable[K], error: BaseException, *, reroute: bool = False) -> None:
        for key in keys:
            self.transient(key, error, reroute=reroute)

    def answer(self, key: K, code: int, context: str, value: Any = None, message: str | None = None) -> Disposition:
        """Record one item's error code from a response: success, final error, retry or reroute."""
        disposition = classify(code)
        if code == 0:
            self.succeed(key, value)
        elif disposition is Disposition.DONE:
            self.fail(key, error_from(code, context, message))
        else:
            self.transient(key, error_from(code, context, message), reroute=disposition is Disposition.REROUTE)
        return disposition

    def expand(self, placeholder: K, keys: Iterable[K]) -> None:
        """Replace a pending placeholder item ("every partition", "every user") with the items an answer named."""
        if placeholder in self.pending:
            del self.pending[placeholder]
            self.order.remove(placeholder)
            self._last.pop(placeholder, None)
        for key in keys:
            if key not in self.pending and key not in self.values and key not in self.errors:
                self.pending[key] = None
                self.order.append(key)

    # ------------------------------------------------------------------ rounds
    def end_round(self, now: float) -> float | None:
        """Close a round: None when the call is over (nothing pending, or the deadline passed, which fails
        every pending item with ``KafkaTimeoutError``), else the time the next round may start."""
        if not self.pending:
            return None
        if self._round_failed:
            self.failures += 1
        self._round_failed = False
        at = now + self._backoff.backoff_ms(self.failures) if self.failures else now
        if at >= self.deadline:
            self.expire()
            return None
        return at

    def expire(self) -> None:
        """Fail every pending item with a timeout naming the bound and the item's last transient error."""
        for key in list(self.pending):
            last = self._last.get(key)
            error = _E.KafkaTimeoutError(
                f"{self.what} {_show(key)}: not done within {self.timeout_ms:.0f} ms (default_api_timeout_ms)"
                + (f"; last error: {last}" if last is not None else ""))
            error.__cause__ = last
            self.fail(key, error)

    def results(self) -> "ItemResults[K, Any]":
        return ItemResults(self.order, self.values, self.errors)


def _show(key: object) -> str:
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str) and isinstance(key[1], int):
        return f"{key[0]}-{key[1]}"
    return repr(key) if not isinstance(key, str) else repr(key)


class ItemResults(Mapping[K, V]):
    """The outcome of an admin call, one entry per item, in the order asked.

    ``results[key]`` returns the item's value or raises the item's own error (as confluent-kafka's futures
    per item do), so one failing item never hides the others. ``ok`` and ``errors`` split them without
    raising; ``raise_on_error()`` raises the first error (in item order) for callers who want all-or-nothing.
    """

    __slots__ = ("_order", "ok", "errors")

    def __init__(self, order: Iterable[K], values: Mapping[K, V], errors_: Mapping[K, errors.KafkaError]) -> None:
        self._order = list(order)
        #: items that succeeded: key -> value
        self.ok: dict[K, V] = {k: values[k] for k in self._order if k in values}
        #: items that failed: key -> exception
        self.errors: dict[K, errors.KafkaError] = {k: errors_[k] for k in self._order if k in errors_}

    def __getitem__(self, key: K) -> V:
        if key in self.errors:
            raise self.errors[key]
        return self.ok[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: object) -> bool:
        return key in self.ok or key in self.errors

    def raise_on_error(self) -> "ItemResults[K, V]":
        """Raise the first item's error, if any; else return self (so ``(await ...).raise_on_error()`` chains)."""
        for key in self._order:
            if key in self.errors:
                raise self.errors[key]
        return self

    def __repr__(self) -> str:
        parts = [f"{_show(k)}: {'error ' + type(self.errors[k]).__name__ if k in self.errors else repr(self.ok[k])}"
                 for k in self._order]
        return f"ItemResults({{{', '.join(parts)}}})"
