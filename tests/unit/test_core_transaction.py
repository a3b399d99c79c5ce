"""The transaction state machine (core/transaction.py), driven with plain method calls and a fake clock."""

from __future__ import annotations

import random

import pytest

from akresil import errors
from akresil.core.accumulator import RecordAccumulator
from akresil.core.transaction import Action, TransactionManager, TxnState, classify
from akresil.types import TopicPartition

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
E = errors


def ready(timeout_ms: int = 60_000) -> TransactionManager:
    tm = TransactionManager("tx", timeout_ms, retry_backoff_ms=100, retry_backoff_max_ms=1000,
                            rng=random.Random(7))
    tm.start_init(0, 60_000)
    tm.initialized()
    return tm


def test_happy_path_states() -> None:
    tm = TransactionManager("tx", 60_000)
    assert tm.state is TxnState.UNINITIALIZED
    tm.start_init(0, 1000)
    assert tm.state is TxnState.INITIALIZING
    tm.initialized()
    tm.begin()
    assert tm.in_transaction
    tm.check_send()
    tm.start_end(True, 0)
    assert tm.state is TxnState.COMMITTING
    tm.ended()
    assert tm.state is TxnState.READY
    tm.begin()
    tm.start_end(False, 0)
    assert tm.state is TxnState.ABORTING
    tm.ended()
    assert tm.state is TxnState.READY


def test_begin_twice() -> None:
    tm = ready()
    tm.begin()
    with pytest.raises(E.IllegalStateError, match="already open"):
        tm.begin()


def test_bad_calls_name_the_problem() -> None:
    tm = TransactionManager("tx", 60_000)
    with pytest.raises(E.IllegalStateError, match="init_transactions"):
        tm.begin()
    tm = ready()
    with pytest.raises(E.IllegalStateError, match=r"commit_transaction\(\).*begin_transaction"):
        tm.start_end(True, 0)
    with pytest.raises(E.IllegalStateError, match=r"abort_transaction\(\).*begin_transaction"):
        tm.start_end(False, 0)
    with pytest.raises(E.IllegalStateError, match=r"send.*begin_transaction"):
        tm.check_send()


def test_abortable_error_allows_only_abort() -> None:
    tm = ready()
    tm.begin()
    cause = E.TopicAuthorizationFailedError("nope")
    tm.abortable(cause)
    assert tm.state is TxnState.ABORTABLE_ERROR and tm.error is cause
    with pytest.raises(E.IllegalStateError, match="must be aborted"):
        tm.check_send()
    with pytest.raises(E.IllegalStateError, match="cannot be committed"):
        tm.start_end(True, 0)
    with pytest.raises(E.IllegalStateError, match="already open|must be aborted"):
        tm.begin()
    tm.start_end(False, 0)
    tm.ended()
    assert tm.state is TxnState.READY and tm.error is None
    assert tm.bump_after_end       # a record was lost: the epoch is bumped after the abort
    tm.start_init(0, 1000)
    tm.initialized()
    assert not tm.bump_after_end


def test_first_abortable_cause_is_kept_and_late_failures_after_end_are_ignored() -> None:
    tm = ready()
    tm.begin()
    first = E.DeliveryTimeoutError("a")
    tm.abortable(first)
    tm.abortable(E.DeliveryTimeoutError("b"))
    assert tm.error is first
    tm.start_end(False, 0)
    tm.ended()
    tm.abortable(E.DeliveryTimeoutError("late"))
    assert tm.state is TxnState.READY


def test_fatal_error_is_raised_by_every_operation() -> None:
    tm = ready()
    tm.begin()
    fenced = E.ProducerFencedError("newer producer")
    tm.fatal(fenced)
    tm.abortable(E.DeliveryTimeoutError("x"))    # does not leave the fatal state
    assert tm.state is TxnState.FATAL_ERROR
    for call in (tm.begin, tm.check_send, lambda: tm.start_end(True, 0), lambda: tm.start_end(False, 0),
                 lambda: tm.start_init(0, 1)):
        with pytest.raises(E.ProducerFencedError) as info:
            call()
        assert info.value is fenced


@pytest.mark.parametrize("error, action", [
    (None, Action.OK),
    (E.NotCoordinatorError, Action.REFIND),
    (E.CoordinatorNotAvailableError, Action.REFIND),
    (E.CoordinatorLoadInProgressError, Action.RETRY),
    (E.ConcurrentTransactionsError, Action.RETRY),
    (E.UnknownTopicOrPartitionError, Action.RETRY),
    (E.ProducerFencedError, Action.FATAL),
    (E.InvalidProducerEpochError, Action.FATAL),
    (E.TransactionalIdAuthorizationFailedError, Action.FATAL),
    (E.TopicAuthorizationFailedError, Action.ABORTABLE),
    (E.GroupAuthorizationFailedError, Action.ABORTABLE),
    (E.TransactionAbortableError, Action.ABORTABLE),
    (E.IllegalGenerationError, Action.ABORTABLE),
    (E.FencedInstanceIdError, Action.ABORTABLE),
    (E.StaleMemberEpochError, Action.ABORTABLE),     # a KIP-848 member's older epoch: Java's CommitFailedException
    (E.GroupIdNotFoundError, Action.ABORTABLE),
    (E.UnknownMemberIdError, Action.ABORTABLE),
])
def test_classify(error: type[E.KafkaError] | None, action: Action) -> None:
    assert classify(0 if error is None else error.errno) is action


def test_operation_retries_by_time_not_count() -> None:
    tm = ready(timeout_ms=1000)
    tm.begin()
    op = tm.start_end(True, now=10_000)
    now = 10_000.0
    tries = 0
    with pytest.raises(E.KafkaTimeoutError, match=r"commit_transaction\(\).*1000 ms.*CONCURRENT|commit_transaction"):
        while True:
            now = op.retry_at(now, E.ConcurrentTransactionsError())
            assert now < 11_000
            tries += 1
    # backoff grows (100, 200, 400 ms with jitter): a few tries fit in one second, not a fixed count
    assert 2 <= tries <= 5
    assert isinstance(op.last_error, E.ConcurrentTransactionsError)


def test_partitions_added_once_per_request_and_gate_the_drain() -> None:
    tm = ready()
    with_data = [T0, T1]
    assert tm.partitions_to_add(with_data, 0) == []          # no transaction open
    tm.begin()
    assert tm.partitions_to_add(with_data, 0) == [T0, T1]
    assert tm.partitions_to_add(with_data + [T2], 0) == []   # one request at a time
    assert tm.partitions_added({T0: 0, T1: 0}, 5) is Action.OK
    assert tm.added == {T0, T1}
    assert tm.partitions_to_add(with_data + [T2], 6) == [T2]
    # a coordinator that moved: retried after a backoff, and looked up again
    tm.coordinator = 3
    assert tm.partitions_added({T2: E.NotCoordinatorError.errno}, 10) is Action.REFIND
    assert tm.coordinator is None and T2 not in tm.added
    assert tm.partitions_to_add([T2], 10) == []
    assert tm.add_at > 10
    assert tm.partitions_to_add([T2], tm.add_at) == [T2]
    assert tm.partitions_added({T2: E.TopicAuthorizationFailedError.errno}, 20) is Action.ABORTABLE
    assert tm.state is TxnState.ABORTABLE_ERROR
    assert isinstance(tm.error, E.TopicAuthorizationFailedError)
    tm.start_end(False, 30)
    tm.ended()
    assert not tm.added and not tm.pending and not tm.needs_end_request()


def test_fenced_add_partitions_is_fatal_as_producer_fenced() -> None:
    tm = ready()
    tm.begin()
    tm.partitions_to_add([T0], 0)
    assert tm.partitions_added({T0: E.InvalidProducerEpochError.errno}, 1) is Action.FATAL
    assert isinstance(tm.error, E.ProducerFencedError)


def test_needs_end_request_only_when_the_coordinator_knows_the_transaction() -> None:
    tm = ready()
    tm.begin()
    assert not tm.needs_end_request()          # nothing sent: ends locally, no EndTxn
    tm.offsets_added = True
    assert tm.needs_end_request()


def test_accumulator_gate_holds_partitions_not_in_the_transaction() -> None:
    acc = RecordAccumulator(linger_ms=0, enable_idempotence=True)
    acc.set_producer_identity(1, 0)
    tm = ready()
    tm.begin()
    acc.drain_gate = tm.added
    for tp in (T0, T1):
        assert acc.append(tp, 0, None, b"v", [], None, now=0).appended
    leader_of = lambda tp: (1, 0)  # noqa: E731
    assert acc.ready_nodes(0, leader_of) == set()
    assert acc.drain(0, sendable={1}, leader_of=leader_of).batches == {}
    tm.partitions_to_add(acc.partitions_with_data(), 0)
    tm.partitions_added({T0: 0, T1: E.ConcurrentTransactionsError.errno}, 0)
    drained = acc.drain(1, sendable={1}, leader_of=leader_of).batches
    assert [b.tp for b in drained[1]] == [T0]
    count, sequenced = acc.abort_undrained(E.TransactionAbortedError("abort"))
    assert count == 1 and not sequenced          # T1's batch was never sent: no sequence gap
    assert not acc.closing and acc.incomplete_batches == 1      # T0's batch is still in flight


def test_on_spoilt_is_called_when_records_stop_being_accepted() -> None:
    calls: list[TxnState] = []
    tm = ready()
    tm.on_spoilt = lambda: calls.append(tm.state)
    tm.begin()
    tm.abortable(E.DeliveryTimeoutError("x"))
    tm.abortable(E.DeliveryTimeoutError("y"))
    tm.fatal(E.ProducerFencedError("z"))
    assert calls == [TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR]


# --------------------------------------------------------------------------- transactions v2 (KIP-890 part 2)
def test_v2_follows_the_cluster_at_init_and_between_transactions_only() -> None:
    tm = ready()
    tm.use_v2(True, initializing=True)            # the level read right after init_transactions: no bump
    assert tm.v2 and not tm.bump_after_end
    tm.begin()
    tm.start_end(True, 0)
    tm.use_v2(False, initializing=False)          # the cluster went back to v1: the next transaction uses it
    tm.ended()
    assert not tm.v2 and not tm.bump_after_end


def test_moving_to_v2_after_init_takes_one_epoch_bump_after_the_transaction() -> None:
    """As Java's maybeUpdateTransactionV2Enabled: enabled later than at initialization, the client bumps the epoch
    itself (InitProducerId) once the transaction that was open ends, then speaks v2."""
    tm = ready()
    tm.use_v2(False, initializing=True)
    tm.begin()
    tm.start_end(True, 0)
    tm.use_v2(True, initializing=False)
    tm.ended()
    assert tm.v2 and tm.bump_after_end
    tm.start_init(0, 1000)
    tm.initialized()
    assert tm.v2 and not tm.bump_after_end


def test_on_v2_a_lost_record_needs_no_bump_of_the_clients_own() -> None:
    """v1 bumps the epoch after aborting a transaction that lost a record; v2's EndTxn bumps it anyway."""
    for v2 in (False, True):
        tm = ready()
        tm.use_v2(v2, initializing=True)
        tm.begin()
        tm.abortable(E.DeliveryTimeoutError("a record expired"))
        tm.start_end(False, 0)
        tm.ended()
        assert tm.bump_after_end is (not v2)


def test_on_v2_partitions_join_without_a_request_and_need_the_end_request() -> None:
    tm = ready()
    tm.use_v2(True, initializing=True)
    tm.join_implicitly([T0])                      # outside a transaction: nothing
    assert not tm.added
    tm.begin()
    assert not tm.needs_end_request()
    tm.join_implicitly([T0, T1])
    assert tm.added == {T0, T1} and not tm.pending and tm.needs_end_request()
    tm.start_end(True, 0)
    tm.ended()
    assert not tm.added and not tm.needs_end_request()
