"""The transactional producer's state machine (sans-IO): states, partitions in the transaction, error classes
and the time-bounded retry of coordinator requests.

It follows the Java client's ``TransactionManager`` in behaviour: a transaction moves
``READY -> IN_TRANSACTION -> COMMITTING/ABORTING -> READY``; an error that spoils only the current
transaction (a record that could not be written, an offset commit refused by the group) moves it to
``ABORTABLE_ERROR``, from which only ``abort`` leads on; fencing (a newer producer with the same
``transactional_id``) or a missing authorization is ``FATAL_ERROR``: the producer can only be closed.
Coordinator requests are retried with KIP-580 backoff until the operation's deadline (time, not counts).
The shell (``net/transaction.py``) does the I/O and feeds answers back through plain method calls.

Two protocols, chosen as Java does from the cluster's finalized ``transaction.version`` when the transactions are
initialized and again when each transaction ends (never inside one): v1 adds each partition with
AddPartitionsToTxn and the group's offsets with AddOffsetsToTxn before anything is written; v2 (KIP-890 part 2,
level 2) lets the first Produce (v12) add a partition and TxnOffsetCommit (v5) add the offsets, and its EndTxn
(v5) bumps the producer epoch at the end of every transaction, so the client no longer bumps it itself after an
abort that lost records.
"""

from __future__ import annotations

import enum
import random
from typing import Callable, Iterable

from .. import errors
from ..types import TopicPartition
from .backoff import ExponentialBackoff


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


class Action(enum.Enum):
    """What to do with a transaction coordinator's (or group coordinator's) answer."""

    OK = "ok"
    RETRY = "retry"          # same coordinator, after backoff
    REFIND = "refind"        # the coordinator moved or is gone: FindCoordinator again, after backoff
    ABORTABLE = "abortable"  # the transaction is spoilt; the producer can abort and go on
    FATAL = "fatal"          # the producer is unusable


_E = errors
_FATAL_CODES = frozenset(c.errno for c in (
    _E.ProducerFencedError, _E.InvalidProducerEpochError, _E.TransactionalIdAuthorizationFailedError,
    _E.TransactionCoordinatorFencedError, _E.InvalidTxnStateError, _E.InvalidProducerIdMappingError,
    _E.UnsupportedVersionError))
_REFIND_CODES = frozenset(c.errno for c in (_E.NotCoordinatorError, _E.CoordinatorNotAvailableError))
#: TxnOffsetCommit's group errors are abortable (as Java's CommitFailedException): the member lost its partitions
#: (a KIP-848 group answers STALE_MEMBER_EPOCH for an older member epoch, GROUP_ID_NOT_FOUND once the group is gone);
#: the producer aborts and goes on, the records are processed again by whoever owns them now
_ABORTABLE_CODES = frozenset(c.errno for c in (
    _E.TopicAuthorizationFailedError, _E.GroupAuthorizationFailedError, _E.TransactionAbortableError,
    _E.UnknownMemberIdError, _E.IllegalGenerationError, _E.FencedInstanceIdError, _E.StaleMemberEpochError,
    _E.GroupIdNotFoundError))
_OPERATION_NOT_ATTEMPTED = 55
#: the producer was fenced: Java treats INVALID_PRODUCER_EPOCH from the coordinator as fencing too
FENCED_CODES = frozenset((_E.ProducerFencedError.errno, _E.InvalidProducerEpochError.errno))


def classify(code: int) -> Action:
    """Java's per-response handling folded into one table (the same for every transaction API)."""
    if code == 0:
        return Action.OK
    if code in _REFIND_CODES:
        return Action.REFIND
    if code in _FATAL_CODES:
        return Action.FATAL
    if code in _ABORTABLE_CODES or code == _OPERATION_NOT_ATTEMPTED:
        return Action.ABORTABLE
    if getattr(_E.error_for_code(code), "retriable", False):
        return Action.RETRY     # CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION
    return Action.FATAL


def error_from_code(code: int, what: str) -> errors.KafkaError:
    """The error class for ``code``; fencing is always reported as ``ProducerFencedError``."""
    cls = _E.ProducerFencedError if code in FENCED_CODES else _E.error_for_code(code)
    return cls(f"{what}: {cls.description or f'error {code}'}")


class Operation:
    """One coordinator request that is retried until ``deadline`` (ms): ``retry_at`` names when to try again."""

    def __init__(self, name: str, now: float, timeout_ms: float, backoff: ExponentialBackoff) -> None:
        self.name = name
        self.deadline = now + timeout_ms
        self.timeout_ms = timeout_ms
        self.failures = 0
        self.backoff = backoff
        self.last_error: BaseException | None = None

    def retry_at(self, now: float, cause: BaseException) -> float:
        """When to try again after ``cause``; ``KafkaTimeoutError`` once the next try would pass the deadline."""
        self.failures += 1
        self.last_error = cause
        at = now + self.backoff.backoff_ms(self.failures)
        if at >= self.deadline:
            raise errors.KafkaTimeoutError(
                f"{self.name} did not complete within {self.timeout_ms:.0f} ms ({self.failures} attempt(s); "
                f"last error: {cause})")
        return at


class TransactionManager:
    """State, partitions and errors of one transactional producer. No I/O, no clock of its own."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int, *, retry_backoff_ms: float = 100,
                 retry_backoff_max_ms: float = 1000, rng: random.Random | None = None) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms,
                                           rng=rng if rng is not None else random.Random())
        self.state = TxnState.UNINITIALIZED
        self.error: BaseException | None = None
        #: transaction coordinator node id (None: look it up with FindCoordinator key_type 1)
        self.coordinator: int | None = None
        #: partitions the coordinator confirmed for this transaction: the only ones the sender may drain
        self.added: set[TopicPartition] = set()
        #: partitions in an AddPartitionsToTxn request now
        self.pending: set[TopicPartition] = set()
        #: the next AddPartitionsToTxn is not before this time (ms; after a retriable failure)
        self.add_at = 0.0
        self._add_failures = 0
        #: transactions v2 (KIP-890 part 2): see the module docstring; ``use_v2`` follows the cluster
        self.v2 = False
        #: once the transaction has ended, bump the epoch with InitProducerId (Java's clientSideEpochBumpRequired):
        #: v1 after a transaction that lost a record, or when the cluster moved to v2 since the last one
        self.bump_after_end = False
        #: AddOffsetsToTxn succeeded in this transaction: EndTxn is needed even without partitions
        self.offsets_added = False
        #: called when the transaction stops taking records (abortable or fatal error): the producer's
        #: per-record path checks one flag, which this clears
        self.on_spoilt: Callable[[], None] | None = None

    # ------------------------------------------------------------------ transitions
    def _require(self, op: str, *allowed: TxnState) -> None:
        if self.state is TxnState.FATAL_ERROR:
            assert self.error is not None
            raise self.error
        if self.state not in allowed:
            hint = {
                TxnState.UNINITIALIZED: "call init_transactions() first",
                TxnState.READY: "no transaction is open: call begin_transaction() first",
                TxnState.IN_TRANSACTION: "a transaction is already open: commit or abort it first",
                TxnState.ABORTABLE_ERROR: f"the transaction must be aborted (cause: {self.error!r})",
                TxnState.INITIALIZING: "init_transactions() is still running",
                TxnState.COMMITTING: "a commit is in progress",
                TxnState.ABORTING: "an abort is in progress",
            }.get(self.state, "")
            raise errors.IllegalStateError(f"{op}: not allowed in state {self.state.value!r}; {hint}")

    def start_init(self, now: float, timeout_ms: float) -> Operation:
        self._require("init_transactions()", TxnState.UNINITIALIZED, TxnState.READY, TxnState.INITIALIZING)
        self.state = TxnState.INITIALIZING
        return Operation("init_transactions()", now, timeout_ms, self.backoff)

    def needs_end_request(self) -> bool:
        """Whether the coordinator knows of this transaction (partitions or offsets added, or being added)."""
        return bool(self.added or self.pending or self.offsets_added)

    def initialized(self) -> None:
        self.state = TxnState.READY
        self.error = None
        self.bump_after_end = False

    def use_v2(self, enabled: bool, *, initializing: bool) -> None:
        """Follow the cluster's finalized transaction.version (``enabled``: level 2 or more): when the transactions
        are initialized, and when a transaction ends (the ended one kept its protocol). Moving to v2 later takes one
        epoch bump of the client's own after the end, as Java's ``maybeUpdateTransactionV2Enabled``."""
        if enabled and not self.v2 and not initializing:
            self.bump_after_end = True
        self.v2 = enabled

    def begin(self) -> None:
        self._require("begin_transaction()", TxnState.READY)
        self.state = TxnState.IN_TRANSACTION

    def check_send(self, op: str = "send") -> None:
        """Records and offsets go only into an open transaction; a spoilt one raises its cause."""
        if self.state is TxnState.ABORTABLE_ERROR:
            raise errors.IllegalStateError(
                f"{op}: the transaction failed and must be aborted (cause: {self.error!r})")
        self._require(op, TxnState.IN_TRANSACTION)

    def start_end(self, commit: bool, now: float) -> Operation:
        """Start a commit (only from IN_TRANSACTION) or an abort (also from ABORTABLE_ERROR)."""
        if commit:
            if self.state is TxnState.ABORTABLE_ERROR:
                raise errors.IllegalStateError(
                    f"commit_transaction(): the transaction cannot be committed, abort it (cause: {self.error!r})")
            self._require("commit_transaction()", TxnState.IN_TRANSACTION, TxnState.COMMITTING)
            self.state = TxnState.COMMITTING
        else:
            self._require("abort_transaction()", TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                          TxnState.ABORTING)
            self.state = TxnState.ABORTING
        return Operation("commit_transaction()" if commit else "abort_transaction()", now,
                         self.transaction_timeout_ms, self.backoff)

    def ended(self) -> None:
        """EndTxn succeeded (or nothing was sent to end): ready for the next transaction."""
        self.state = TxnState.READY
        self.added.clear()
        self.pending.clear()
        self._add_failures = 0
        self.add_at = 0.0
        self.error = None
        self.offsets_added = False

    def abortable(self, error: BaseException) -> None:
        """The current transaction is spoilt; kept as the first cause. Ignored outside a transaction and after
        a fatal error (a late record failure of an aborted transaction changes nothing)."""
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            self.state = TxnState.ABORTABLE_ERROR
            self.error = error
            if self.on_spoilt is not None:
                self.on_spoilt()
        if self.state in (TxnState.ABORTABLE_ERROR, TxnState.ABORTING) and not self.v2:
            self.bump_after_end = True       # v2: the abort's EndTxn bumps the epoch anyway

    def fatal(self, error: BaseException) -> None:
        if self.state is not TxnState.FATAL_ERROR:
            self.state = TxnState.FATAL_ERROR
            self.error = error
            if self.on_spoilt is not None:
                self.on_spoilt()

    @property
    def spoilt(self) -> bool:
        """The transaction can only be aborted now (a record or a request failed in it)."""
        return self.state is TxnState.ABORTABLE_ERROR

    @property
    def in_transaction(self) -> bool:
        """Records may be appended: IN_TRANSACTION (or COMMITTING while the commit's flush drains them)."""
        return self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING)

    # ------------------------------------------------------------------ partitions
    def partitions_to_add(self, with_data: Iterable[TopicPartition], now: float) -> list[TopicPartition]:
        """Partitions holding records that are neither added nor being added; marks them pending. Empty while
        a request is out, before ``add_at``, or outside a transaction (they are all sent in one request)."""
        if self.pending or now < self.add_at or self.state not in (
                TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            return []
        new = [tp for tp in with_data if tp not in self.added]
        self.pending.update(new)
        return new

    def join_implicitly(self, with_data: Iterable[TopicPartition]) -> None:
        """Transactions v2: a partition holding records joins the transaction with its first Produce (v12), so it
        counts as added at once (and the transaction needs its EndTxn)."""
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            self.added.update(with_data)

    def partitions_added(self, results: dict[TopicPartition, int], now: float) -> Action:
        """Apply an AddPartitionsToTxn answer (per-partition codes); returns the worst action.

        RETRY / REFIND leave the partitions to be asked again after backoff; ABORTABLE / FATAL change state
        (the caller fails the pending records through the accumulator's abort)."""
        worst = Action.OK
        first_bad = 0
        for tp, code in results.items():
            action = classify(code)
            if action is Action.OK:
                self.added.add(tp)
            elif _rank(action) > _rank(worst):
                worst, first_bad = action, code
        self.pending.clear()
        if worst is Action.OK:
            self._add_failures = 0
            return worst
        bad = [f"{tp.topic}-{tp.partition}: {code}" for tp, code in results.items() if code]
        what = f"AddPartitionsToTxn ({', '.join(bad[:5])})"
        if worst is Action.FATAL:
            self.fatal(error_from_code(first_bad, what))
        elif worst is Action.ABORTABLE:
            self.abortable(error_from_code(first_bad, what))
        else:
            self.add_failed(now, refind=worst is Action.REFIND)
        return worst

    def add_failed(self, now: float, *, refind: bool = False) -> None:
        """A retriable failure of AddPartitionsToTxn (connection, CONCURRENT_TRANSACTIONS, moved coordinator)."""
        self.pending.clear()
        self._add_failures += 1
        self.add_at = now + self.backoff.backoff_ms(self._add_failures)
        if refind:
            self.coordinator = None


def _rank(action: Action) -> int:
    return (Action.OK, Action.RETRY, Action.REFIND, Action.ABORTABLE, Action.FATAL).index(action)
