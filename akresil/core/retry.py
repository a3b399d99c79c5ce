"""The produce retry rule: KIP-580 backoff per partition, skipped once when KIP-951 moved the leader.

Java's rule, which akresil follows: every batch remembers the latest leader epoch it has seen for its
partition and the attempt count at which that epoch last rose. When a retry is the first one after the rise
(``attempts == attempts_when_leader_changed``), the batch goes to the new leader at once; any later retry to
that same epoch, or a retry without an epoch change, waits the exponential backoff. The epoch is observed
when the batch is drained and when a failure is handled, so a hint applied to the metadata cache between the
two is honoured either way.

A refusal about the producer's own identity rather than the broker's state (an epoch bump the broker does not
take, a batch sent under an identity the producer has since replaced: ``error.identity_retry``) is retried at
once the first time: the retry goes out re-sequenced under the new identity, and backing off would only stall
the partition. A batch refused again backs off as usual, so a broker that refuses every identity is not spun on.

Independently of the hint, every error that says the client's leader view is stale (NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH, ...: ``error.invalid_metadata``) asks for an asynchronous metadata refresh.
"""

from __future__ import annotations

from typing import NamedTuple

from .backoff import ExponentialBackoff
from .batch import ProducerBatch


class RetryDecision(NamedTuple):
    retry: bool
    #: the error means leaders moved: request a (backed-off, asynchronous) metadata refresh
    refresh_metadata: bool
    #: the retry may go now, skipping backoff: the leader epoch rose for this attempt (KIP-951), or the error
    #: was about the producer identity, which is replaced before the retry goes out
    skip_backoff: bool
    #: absolute time of the next attempt when retrying (== now when skipping backoff)
    retry_at: float
    reason: str
    #: not retried only because the batch's delivery deadline passed first: the records expired (KIP-91), whether
    #: the sender's deadline timer or this attempt's outcome was handled first
    expired: bool = False


def needs_metadata_refresh(error: BaseException) -> bool:
    return bool(getattr(error, "invalid_metadata", False))


def observe_leader_epoch(batch: ProducerBatch, leader_epoch: int | None) -> bool:
    """Tell the batch the partition's current leader epoch; True when it rose (and was recorded)."""
    if leader_epoch is None or leader_epoch < 0:
        return False
    if batch.current_leader_epoch is None or batch.current_leader_epoch < leader_epoch:
        batch.current_leader_epoch = leader_epoch
        batch.attempts_when_leader_changed = batch.attempts
        return True
    return False


def leader_changed_for_ongoing_retry(batch: ProducerBatch) -> bool:
    """True for the first retry after the leader epoch rose: that retry skips the backoff."""
    return batch.attempts >= 1 and batch.attempts == batch.attempts_when_leader_changed


def backing_off(batch: ProducerBatch, now: float) -> bool:
    """A retried batch still inside its backoff window (and not exempted by a leader change)."""
    return batch.attempts > 0 and now < batch.retry_at and not leader_changed_for_ongoing_retry(batch)


def plan_retry(batch: ProducerBatch, error: BaseException, now: float, *, retries: int,
               backoff: ExponentialBackoff, leader_epoch: int | None = None, closing: bool = False) -> RetryDecision:
    """Decide a failed attempt's fate and, when it is retried, count the attempt and schedule the retry.

    ``leader_epoch`` is the partition's epoch in the metadata cache *after* any KIP-951 hint from this
    response was applied. Not retried: non-retriable errors, exhausted ``retries``, a reached delivery
    deadline, or a closing producer. The batch is mutated only when retried.
    """
    refresh = needs_metadata_refresh(error)
    name = type(error).__name__
    if not getattr(error, "retriable", False):
        return RetryDecision(False, refresh, False, now, f"not retriable: {name}")
    if closing:
        return RetryDecision(False, refresh, False, now, f"producer closing: {name}")
    if batch.attempts + 1 > retries:
        return RetryDecision(False, refresh, False, now, f"retries ({retries}) exhausted: {name}")
    if now >= batch.deadline:
        return RetryDecision(False, refresh, False, now, f"delivery timeout reached: {name}", expired=True)
    batch.attempts += 1
    observe_leader_epoch(batch, leader_epoch)
    skip = leader_changed_for_ongoing_retry(batch) or (batch.attempts == 1 and getattr(error, "identity_retry", False))
    batch.retry_at = now if skip else now + backoff.backoff_ms(batch.attempts)
    return RetryDecision(True, refresh, skip, batch.retry_at, name)
