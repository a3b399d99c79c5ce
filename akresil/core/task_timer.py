"""KIP-572 task timing: when a timing-out task may try again, and when it has to give up.

KIP-572 replaced retry counts with a time budget: a task whose work hits a client timeout is skipped and
retried later, and ``task_timeout_ms`` bounds how long it may go without progress.  The budget starts at the
*first* timeout (a healthy task carries no deadline) and is cleared by progress.  The attempt running when
the deadline passes is the final one: if it times out too, the task fails.  A budget of 0 fails on the first
timeout; any other budget retries at least once.

Between attempts the task waits a KIP-580 exponential backoff so a stuck task does not spin; the wait is
clamped to the deadline so that an attempt is always running (or starting) at the deadline.  Hence the failure
is reported no earlier than the deadline and no later than the deadline plus the length of one attempt.

Pure logic: times are milliseconds passed in as ``now``; nothing here sleeps.
"""

from __future__ import annotations

from .backoff import ExponentialBackoff
from ..errors import ConfigError

__all__ = ["TaskTimer"]


class TaskTimer:
    """The KIP-572 retry state of one task (a partition's processing).

    Drive it with ``on_progress()`` whenever work completed and ``on_timeout(now)`` when an attempt ended in
    a client timeout; attempt only when ``ready(now)``.  ``on_timeout`` returns the time of the next
    attempt, or ``None`` when the task has exhausted ``task_timeout_ms`` and the error must be raised.
    """

    __slots__ = ("task_timeout_ms", "backoff", "failures", "first_timeout_at", "deadline", "next_attempt_at")

    def __init__(self, task_timeout_ms: float, backoff: ExponentialBackoff) -> None:
        if isinstance(task_timeout_ms, bool) or not isinstance(task_timeout_ms, (int, float)):
            raise ConfigError(f"task_timeout_ms: must be a number of milliseconds, got {task_timeout_ms!r}")
        if task_timeout_ms < 0:
            raise ConfigError(f"task_timeout_ms: must be >= 0, got {task_timeout_ms!r}")
        self.task_timeout_ms = float(task_timeout_ms)
        self.backoff = backoff
        #: timeouts since the last progress
        self.failures = 0
        self.first_timeout_at: float | None = None
        #: first_timeout_at + task_timeout_ms; None while the task is healthy
        self.deadline: float | None = None
        self.next_attempt_at: float | None = None

    # ------------------------------------------------------------------ queries
    @property
    def failing(self) -> bool:
        """True from the first timeout until progress: the task is stuck (its fetches should pause)."""
        return self.deadline is not None

    def ready(self, now: float) -> bool:
        """May the task attempt its work at ``now``?"""
        return self.next_attempt_at is None or now >= self.next_attempt_at

    def wait_ms(self, now: float) -> float:
        """How long until the next attempt is allowed (0 when ready)."""
        if self.next_attempt_at is None:
            return 0.0
        return max(0.0, self.next_attempt_at - now)

    def stuck_for_ms(self, now: float) -> float:
        """Time since the first timeout without progress (0 while healthy)."""
        return 0.0 if self.first_timeout_at is None else max(0.0, now - self.first_timeout_at)

    # ------------------------------------------------------------------ events
    def on_progress(self) -> None:
        """Work completed: the budget is cleared and the next timeout starts a new one."""
        self.failures = 0
        self.first_timeout_at = None
        self.deadline = None
        self.next_attempt_at = None

    def on_timeout(self, now: float) -> float | None:
        """An attempt ended in a client timeout at ``now``.

        Returns when to try again, or ``None`` when the task must fail: at once for a budget of 0, otherwise
        when the attempt ended at or after the deadline (it was the final attempt).
        """
        self.failures += 1
        if self.task_timeout_ms == 0:
            self.first_timeout_at = self.first_timeout_at if self.first_timeout_at is not None else now
            self.deadline = self.first_timeout_at
            self.next_attempt_at = None
            return None
        if self.deadline is None:
            self.first_timeout_at = now
            self.deadline = now + self.task_timeout_ms
        elif now >= self.deadline:
            self.next_attempt_at = None
            return None
        # back off, but never past the deadline: the final attempt starts on time
        retry_at = min(now + self.backoff.backoff_ms(self.failures), self.deadline)
        self.next_attempt_at = retry_at
        return retry_at

    def __repr__(self) -> str:
        return (f"TaskTimer(task_timeout_ms={self.task_timeout_ms:g}, failures={self.failures}, "
                f"deadline={self.deadline}, next_attempt_at={self.next_attempt_at})")
