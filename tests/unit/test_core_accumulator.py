"""Accumulator rules with a fake clock: linger, readiness, KIP-91 expiry, KIP-951 retries, memory, order."""

from __future__ import annotations

import random
from typing import Any

import pytest

from akresil.core.accumulator import RecordAccumulator, validate_delivery_timeout
from akresil.core.backoff import ExponentialBackoff
from akresil.core.batch import BatchState
from akresil.core.events import BATCH_EXPIRED, BATCH_RETRY, Hooks, RecordingHook
from akresil.core.metadata import MetadataCache
from akresil.core.node_state import NodeState
from akresil.errors import (ConfigError, DeliveryTimeoutError, InvalidTopicError, NotLeaderOrFollowerError,
                            RecordTooLargeError, RequestTimedOutError)
from akresil.protocol.records import read_batches
from akresil.types import TopicPartition

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


class Results:
    """Collects record completions; each callback must fire exactly once."""

    def __init__(self) -> None:
        self.done: dict[int, tuple[Any, Any]] = {}

    def cb(self, n: int):
        def callback(md, err) -> None:
            assert n not in self.done, f"record {n} completed twice"
            self.done[n] = (md, err)
        return callback


def acc(**kw) -> RecordAccumulator:
    kw.setdefault("linger_ms", 5)
    kw.setdefault("delivery_timeout_ms", 1000)
    kw.setdefault("request_timeout_ms", 500)
    kw.setdefault("rng", random.Random(0))
    return RecordAccumulator(**kw)


def leaders(mapping: dict[TopicPartition, tuple[int, int]]):
    return mapping.get


def acknowledge_one(a: RecordAccumulator, tp: TopicPartition, leader_of: Any, now: float = 0) -> None:
    """The leader of ``tp`` acknowledges one batch (one record, sequence 0) of the current producer id, as it
    must before an idempotent partition pipelines (``RecordAccumulator._blocked``): the batches after it start
    at sequence 1 and may go several at a time."""
    a.append(tp, 0, None, b"first", now=now)
    a.expedite([tp])
    [(node, [batch])] = a.drain(now, sendable={leader_of(tp)[0]}, leader_of=leader_of).batches.items()
    assert batch.tp == tp and batch.base_sequence == 0
    assert a.on_batch_success(batch, 0, now=now)


def test_config_validation_names_all_three_keys() -> None:
    with pytest.raises(ConfigError) as info:
        validate_delivery_timeout(1000, 5, 30_000)
    for key in ("delivery_timeout_ms", "linger_ms", "request_timeout_ms"):
        assert key in str(info.value)
    with pytest.raises(ConfigError, match="delivery_timeout_ms.*linger_ms.*request_timeout_ms"):
        RecordAccumulator(delivery_timeout_ms=100, linger_ms=50, request_timeout_ms=60)
    validate_delivery_timeout(35, 5, 30)   # equality is allowed


def test_linger_holds_a_batch_until_its_end() -> None:
    a = acc()
    a.append(T0, 1, b"k", b"v", now=0)
    lead = leaders({T0: (1, 0)})
    assert a.next_wakeup(0) == 5
    assert a.drain(4.9, sendable={1}, leader_of=lead).batches == {}
    drained = a.drain(5, sendable={1}, leader_of=lead).batches
    assert list(drained) == [1] and drained[1][0].record_count == 1
    # next wakeup is now only the delivery deadline of the in-flight batch
    assert a.next_wakeup(5) == 1000


def test_full_batch_is_ready_before_linger_and_carries_neighbours() -> None:
    a = acc(batch_size=200, linger_ms=10_000, delivery_timeout_ms=20_000)
    result = None
    for i in range(20):
        result = a.append(T0, 1, None, b"x" * 50, now=0)
        if result.new_batch and i:
            break
    assert result.batch_full
    a.append(T1, 1, None, b"y", now=0)     # not lingered: rides along to the same leader
    drained = a.drain(0, sendable={1}, leader_of=leaders({T0: (1, 0), T1: (1, 0)})).batches[1]
    assert {b.tp for b in drained} == {T0, T1}


def test_flush_and_close_make_everything_ready() -> None:
    a = acc(linger_ms=10_000, delivery_timeout_ms=20_000)
    a.append(T0, 1, None, b"v", now=0)
    lead = leaders({T0: (1, 0)})
    assert not a.drain(0, sendable={1}, leader_of=lead).batches
    a.begin_flush()
    assert a.drain(0, sendable={1}, leader_of=lead).batches
    a.end_flush()
    a.append(T0, 1, None, b"v", now=0)
    a.close()
    assert a.drain(0, sendable={1}, leader_of=lead).batches
    with pytest.raises(Exception, match="closing"):
        a.append(T0, 1, None, b"v", now=0)


def test_unknown_leader_and_unsendable_node_hold_batches() -> None:
    a = acc()
    a.append(T0, 1, None, b"v", now=0)
    a.append(T1, 1, None, b"v", now=0)
    res = a.drain(10, sendable={2}, leader_of=leaders({T1: (1, 0)}))
    assert res.batches == {} and res.unknown_leaders == [T0]


def test_completion_assigns_offsets_and_log_append_time() -> None:
    a = acc()
    r = Results()
    for i in range(3):
        a.append(T0, 100 + i, None, b"v", callback=r.cb(i), now=0)
    batch = a.drain(5, sendable={1}, leader_of=leaders({T0: (1, 0)})).batches[1][0]
    assert a.on_batch_success(batch, base_offset=40, now=6)
    assert [(md.offset, md.timestamp_ms) for md, _ in (r.done[i] for i in range(3))] == [(40, 100), (41, 101), (42, 102)]
    assert a.buffered_bytes == 0 and a.incomplete_batches == 0
    a.append(T0, 1, None, b"v", callback=r.cb(9), now=10)
    batch = a.drain(15, sendable={1}, leader_of=leaders({T0: (1, 0)})).batches[1][0]
    a.on_batch_success(batch, base_offset=43, now=16, log_append_time_ms=1234)
    assert r.done[9][0].timestamp_ms == 1234


def test_payload_is_a_real_record_batch_with_sequences() -> None:
    a = acc(enable_idempotence=True)
    a.set_producer_identity(77, 3)
    acknowledge_one(a, T0, leaders({T0: (1, 0)}))   # sequence 0: b1 starts at 1, and b2 may pipeline behind it
    for i in range(4):
        a.append(T0, 1000 + i, b"k%d" % i, b"v%d" % i, headers=[("h", b"x")], now=0)
    b1 = a.drain(5, sendable={1}, leader_of=leaders({T0: (1, 0)})).batches[1][0]
    a.append(T0, 2000, None, b"w", now=6)
    a.expedite([T0])                    # pipelined behind b1 (a lingered batch alone would wait for b1's answer)
    b2 = a.drain(11, sendable={1}, leader_of=leaders({T0: (1, 0)})).batches[1][0]
    [view] = read_batches(b1.payload.build(), check_crcs=True)
    assert (view.producer_id, view.producer_epoch, view.base_sequence, view.record_count) == (77, 3, 1, 4)
    assert [(rec.key, rec.value, rec.headers) for rec in view.records()][1] == (b"k1", b"v1", [("h", b"x")])
    assert b2.base_sequence == 5


# ---------------------------------------------------------------------------------------------- KIP-91 expiry
def test_expires_at_deadline_while_queued() -> None:
    rec = RecordingHook()
    a = acc(hooks=Hooks([rec]))
    r = Results()
    a.append(T0, 1, None, b"v", callback=r.cb(0), now=0)
    assert a.next_wakeup(0) == 5
    assert a.expire(999.9) == []
    [exp] = a.expire(1000)
    assert exp.stage == "queued"
    assert isinstance(r.done[0][1], DeliveryTimeoutError) and "queued" in str(r.done[0][1])
    assert rec.named(BATCH_EXPIRED)[0]["stage"] == "queued"
    assert a.buffered_bytes == 0 and a.next_wakeup(1000) is None


def test_expires_at_deadline_while_in_flight_and_ignores_late_response() -> None:
    a = acc()
    r = Results()
    a.append(T0, 1, None, b"v", callback=r.cb(0), now=0)
    batch = a.drain(5, sendable={1}, leader_of=leaders({T0: (1, 0)})).batches[1][0]
    assert a.next_wakeup(5) == 1000
    [exp] = a.expire(1000)
    assert exp.stage == "in-flight" and batch.state is BatchState.FAILED
    assert not a.on_batch_success(batch, base_offset=7, now=1001)        # late answer: ignored
    assert a.on_batch_error(batch, RequestTimedOutError(), now=1001) is None
    assert isinstance(r.done[0][1], DeliveryTimeoutError)


def test_an_attempt_failing_after_its_deadline_passed_expires_the_batch_as_the_deadline_timer_would() -> None:
    """request_timeout_ms == delivery_timeout_ms: the request's timeout and the batch's deadline fall due in one
    event-loop pass, and either may be handled first. Handled first, the attempt's outcome must not decide the
    error: the deadline came first, so the records expire in flight, as ``expire`` would have said."""
    rec = RecordingHook()
    a = acc(hooks=Hooks([rec]))
    r = Results()
    a.append(T0, 1, None, b"v", callback=r.cb(0), now=0)
    batch = a.drain(5, sendable={1}, leader_of=leaders({T0: (1, 0)})).batches[1][0]
    timeout = RequestTimedOutError("no answer within 1000 ms")
    decision = a.on_batch_error(batch, timeout, now=1005, leader_epoch=0)
    assert decision is not None and not decision.retry and decision.expired
    error = r.done[0][1]
    assert isinstance(error, DeliveryTimeoutError) and "expired in-flight" in str(error)
    assert error.__cause__ is timeout and "the last attempt failed: RequestTimedOutError" in str(error)
    assert [e["stage"] for e in rec.named(BATCH_EXPIRED)] == ["in-flight"]
    assert a.expire(1005) == [] and a.incomplete_batches == 0
    # before its deadline the same outcome is retried; a non-retriable one fails with its own error
    a.append(T0, 1, None, b"w", callback=r.cb(1), now=2000)
    batch = a.drain(2005, sendable={1}, leader_of=leaders({T0: (1, 0)})).batches[1][0]
    assert a.on_batch_error(batch, RequestTimedOutError(), now=2500, leader_epoch=0).retry


def test_expires_at_deadline_while_backing_off() -> None:
    a = acc(retry_backoff_ms=5000, retry_backoff_max_ms=5000, delivery_timeout_ms=1000)
    r = Results()
    a.append(T0, 1, None, b"v", callback=r.cb(0), now=0)
    batch = a.drain(5, sendable={1}, leader_of=leaders({T0: (1, 0)})).batches[1][0]
    decision = a.on_batch_error(batch, RequestTimedOutError(), now=10, leader_epoch=0)
    assert decision.retry and not decision.skip_backoff and decision.retry_at > 1000
    assert a.next_wakeup(10) == 1000                     # deadline comes before the backoff ends
    [exp] = a.expire(1000)
    assert exp.stage == "backing-off" and isinstance(r.done[0][1], DeliveryTimeoutError)


def test_expiry_is_head_first_and_stops_at_first_live_batch() -> None:
    a = acc(batch_size=100, linger_ms=0, delivery_timeout_ms=1000, request_timeout_ms=500)
    a.append(T0, 1, None, b"x" * 60, now=0)
    a.append(T0, 1, None, b"x" * 60, now=300)       # new batch (first is full)
    expired = a.expire(1000)
    assert len(expired) == 1 and expired[0].batch.created_at == 0
    assert a.incomplete_batches == 1


# ---------------------------------------------------------------------------------------------- KIP-951 retries
def kip951_setup():
    md = MetadataCache(rng=random.Random(0))
    md.update_from_metadata({"brokers": [{"node_id": n, "host": "h", "port": n} for n in (1, 2)],
                             "topics": [{"error_code": 0, "name": "t", "partitions": [
                                 {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 5}]}]},
                            now=0)
    a = acc(retry_backoff_ms=100, retry_backoff_max_ms=1000, delivery_timeout_ms=100_000)
    a._backoff = ExponentialBackoff(100, 1000, jitter=0.0)
    return md, a


def test_a_pending_record_adds_no_gc_tracked_object_of_its_own() -> None:
    """A dead broker's backlog is what Python's full collections scan: the accumulator keeps a pending record
    in its batch's flat lists (bytes and ints), so the only tracked object per record is the caller's callback."""
    import gc

    a = acc(batch_size=1 << 20, buffer_memory=1 << 26)
    callback = print                                 # one shared callable: the records add no object of theirs
    a.append(T0, 1, None, b"warm-up", (), callback, now=0)
    gc.collect()
    before = len(gc.get_objects())
    for i in range(2000):
        a.append(T0, i, None, b"v" * 100, (), callback, now=0)
    gc.collect()
    assert len(gc.get_objects()) - before < 20       # O(1), not a tuple per record


def test_advancing_hint_retries_immediately_on_new_leader_then_backs_off() -> None:
    md, a = kip951_setup()
    rec = RecordingHook()
    a._hooks = Hooks([rec])
    a.append(T0, 1, None, b"v", now=0)
    lead = lambda tp: md.snapshot.leader_of(tp)   # noqa: E731 - always the current snapshot
    [batch] = a.drain(5, sendable={1, 2}, leader_of=lead).batches[1]
    # NOT_LEADER_OR_FOLLOWER with CurrentLeader(2, epoch 6): the shell applies the hint, then reports the error
    assert md.apply_leader_hint(T0, 2, 6)
    decision = a.on_batch_error(batch, NotLeaderOrFollowerError(), now=10, leader_epoch=6)
    assert decision.retry and decision.skip_backoff and decision.refresh_metadata and decision.retry_at == 10
    assert a.drain(10, sendable={1, 2}, leader_of=lead).batches == {2: [batch]}   # at once, to node 2
    # second failure at the same epoch: backoff 200 ms (attempt 2)
    decision = a.on_batch_error(batch, NotLeaderOrFollowerError(), now=20, leader_epoch=6)
    assert decision.retry and not decision.skip_backoff and decision.retry_at == 220
    assert a.next_wakeup(20) == 220
    assert a.drain(219.9, sendable={1, 2}, leader_of=lead).batches == {}
    assert a.drain(220, sendable={1, 2}, leader_of=lead).batches == {2: [batch]}
    assert batch.attempt_epochs == [5, 6, 6]
    assert [e["skip_backoff"] for e in rec.named(BATCH_RETRY)] == [True, False]


def test_an_identity_refusal_retries_at_once_the_first_time_only() -> None:
    """An error about the producer's identity (``identity_retry``) goes again at once on the batch's first retry;
    a batch refused again backs off, so a broker refusing every identity is not spun on."""
    md, a = kip951_setup()
    a.append(T0, 1, None, b"v", now=0)
    lead = lambda tp: md.snapshot.leader_of(tp)   # noqa: E731 - always the current snapshot

    class IdentityRefused(Exception):
        retriable = True
        identity_retry = True

    [batch] = a.drain(5, sendable={1}, leader_of=lead).batches[1]
    decision = a.on_batch_error(batch, IdentityRefused(), now=10, leader_epoch=5)
    assert decision.retry and decision.skip_backoff and decision.retry_at == 10
    assert a.drain(10, sendable={1}, leader_of=lead).batches == {1: [batch]}
    decision = a.on_batch_error(batch, IdentityRefused(), now=20, leader_epoch=5)
    assert decision.retry and not decision.skip_backoff and decision.retry_at == 220
    assert a.drain(200, sendable={1}, leader_of=lead).batches == {}


def test_retry_without_epoch_change_backs_off() -> None:
    md, a = kip951_setup()
    a.append(T0, 1, None, b"v", now=0)
    lead = lambda tp: md.snapshot.leader_of(tp)   # noqa: E731 - always the current snapshot
    [batch] = a.drain(5, sendable={1}, leader_of=lead).batches[1]
    assert not md.apply_leader_hint(T0, 2, 5)      # not advancing: ignored
    decision = a.on_batch_error(batch, NotLeaderOrFollowerError(), now=10, leader_epoch=5)
    assert decision.retry and not decision.skip_backoff and decision.retry_at == 110
    assert decision.refresh_metadata               # still ask for a metadata refresh
    assert a.drain(50, sendable={1}, leader_of=lead).batches == {}


def test_epoch_seen_at_drain_time_skips_remaining_backoff() -> None:
    md, a = kip951_setup()
    a.append(T0, 1, None, b"v", now=0)
    [batch] = a.drain(5, sendable={1, 2}, leader_of=md.snapshot.leader_of).batches[1]
    a.on_batch_error(batch, NotLeaderOrFollowerError(), now=10)        # no hint in the response
    assert a.drain(20, sendable={1, 2}, leader_of=md.snapshot.leader_of).batches == {}
    # a metadata refresh brings the new leader before the backoff ends: the first retry goes at once
    md.update_from_metadata({"brokers": [{"node_id": 2, "host": "h", "port": 2}], "topics": [
        {"error_code": 0, "name": "t", "partitions": [{"partition_index": 0, "leader_id": 2, "leader_epoch": 6}]}]},
        now=30)
    assert a.drain(30, sendable={1, 2}, leader_of=md.snapshot.leader_of).batches == {2: [batch]}


def test_non_retriable_and_exhausted_retries_fail_the_records() -> None:
    a = acc(retries=1)
    r = Results()
    lead = leaders({T0: (1, 0)})
    a.append(T0, 1, None, b"v", callback=r.cb(0), now=0)
    [batch] = a.drain(5, sendable={1}, leader_of=lead).batches[1]
    assert a.on_batch_error(batch, RequestTimedOutError(), now=6).retry
    [batch] = a.drain(1000, sendable={1}, leader_of=lead).batches[1]
    decision = a.on_batch_error(batch, RequestTimedOutError(), now=1001)
    assert not decision.retry and "exhausted" in decision.reason
    assert isinstance(r.done[0][1], RequestTimedOutError)
    a.append(T0, 1, None, b"v", callback=r.cb(1), now=0)
    [batch] = a.drain(1005, sendable={1}, leader_of=lead).batches[1]
    assert not a.on_batch_error(batch, InvalidTopicError(), now=1006).retry
    assert isinstance(r.done[1][1], InvalidTopicError)


# ---------------------------------------------------------------------------------------------- KIP-219 interplay
def test_muted_node_receives_nothing_until_the_window_ends() -> None:
    node = NodeState(1, reconnect_backoff=ExponentialBackoff(50, 1000))
    node.on_connecting(0)
    node.on_connected(0)
    a = acc(linger_ms=0)
    lead = leaders({T0: (1, 0)})
    a.append(T0, 1, None, b"v", now=0)
    [batch] = a.drain(0, sendable={1} if node.can_send(0) else set(), leader_of=lead).batches[1]
    node.on_request_sent(0)
    node.on_request_done(3)
    node.on_response(0, 9, throttle_time_ms=400, now=3)     # Produce v9 throttled 400 ms
    a.on_batch_success(batch, 0, now=3)
    a.append(T0, 1, None, b"v", now=3)
    sent_at = []
    for t in range(3, 1000):
        sendable = {1} if node.can_send(t) else set()
        if a.drain(t, sendable=sendable, leader_of=lead).batches:
            sent_at.append(t)
            break
    assert sent_at == [403]                # not one ms early, not one ms late


# ---------------------------------------------------------------------------------------------- memory
def test_buffer_memory_blocks_and_wakes_waiters_fifo() -> None:
    a = acc(buffer_memory=400, linger_ms=0)
    lead = leaders({T0: (1, 0)})
    first = a.append(T0, 1, None, b"x" * 200, now=0)
    assert first.appended and a.buffered_bytes == first.needed_bytes
    blocked = a.append(T0, 1, None, b"y" * 200, now=0)
    assert not blocked.appended
    woke: list[str] = []
    w1 = a.wait_for_space(blocked.needed_bytes, lambda: woke.append("w1"))
    w2 = a.wait_for_space(10, lambda: woke.append("w2"))
    # a fresh small append must not jump the queue
    assert not a.append(T0, 1, None, b"z", now=0).appended
    [batch] = a.drain(0, sendable={1}, leader_of=lead).batches[1]
    a.on_batch_success(batch, 0, now=1)
    assert woke == ["w1", "w2"]
    assert a.append(T0, 1, None, b"y" * 200, now=1, waiter=w1).appended
    a.cancel_wait(w2)
    assert a.space_waiters == 0


def test_oversized_record_is_rejected_with_the_limit_named() -> None:
    with pytest.raises(RecordTooLargeError, match="buffer_memory"):
        acc(buffer_memory=100).append(T0, 1, None, b"x" * 200, now=0)
    with pytest.raises(RecordTooLargeError, match="max_request_size"):
        acc(max_request_size=100).append(T0, 1, None, b"x" * 200, now=0)


def test_max_request_size_splits_requests() -> None:
    a = acc(max_request_size=1000, batch_size=300)
    for tp in (TopicPartition("t", p) for p in range(5)):
        a.append(tp, 1, None, b"x" * 250, now=0)
    lead = lambda tp: (1, 0)   # noqa: E731
    a.expedite(TopicPartition("t", p) for p in range(5))    # the rest goes behind the first request at once
    first = a.drain(5, sendable={1}, leader_of=lead).batches[1]
    second = a.drain(5, sendable={1}, leader_of=lead).batches[1]
    assert 1 <= len(first) < 5 and len(first) + len(second) <= 5
    assert sum(b.reserved_bytes for b in first) <= 1000


def test_a_lingered_batch_waits_while_its_node_owes_an_answer_then_goes_whole() -> None:
    """A Kafka broker reads a connection's next request only after answering the one before, so a batch that
    could still grow is not sent behind one in flight: it keeps taking records until the node answers."""
    a = acc()
    lead = leaders({T0: (1, 0), T1: (2, 0)})
    a.append(T0, 0, None, b"a", now=0)
    [first] = a.drain(5, sendable={1, 2}, leader_of=lead).batches[1]
    assert a.node_busy(1) and not a.node_busy(2)
    a.append(T0, 1, None, b"b", now=6)
    a.append(T1, 1, None, b"c", now=6)
    later = a.drain(20, sendable={1, 2}, leader_of=lead).batches
    assert list(later) == [2]                       # node 2 owes nothing: its lingered batch goes
    assert a.ready_nodes(20, lead) == set()         # node 1's batch is not ready ...
    assert a.next_wakeup(20) == 106                 # ... and no linger timer: only its append window (10%)
    a.append(T0, 2, None, b"d", now=21)             # ... so it keeps growing
    a.on_batch_success(first, 0, now=30)
    assert not a.node_busy(1)
    [(node, [batch])] = a.drain(30, sendable={1, 2}, leader_of=lead).batches.items()
    assert node == 1 and batch.record_count == 2    # both records in one request


def test_a_batch_that_could_still_grow_does_not_ride_behind_a_retry_to_a_node_that_owes_an_answer() -> None:
    """A leader move: the retry of a moved partition goes to its new leader at once, which may still owe the
    answer for a partition whose leader moved away from it. That partition's newer, still open batch does not ride
    in the retry's request (with acks=all the new leader holds its first Produce of the moved partition ~0.5 s, and
    the rider would be refused only after that hold, then meet its own new leader's): it waits for the answer in
    flight, which names its own move."""
    a = acc()
    a.append(T0, 0, None, b"a", now=0)
    a.append(T1, 0, None, b"b", now=0)
    sent = a.drain(5, sendable={1, 2}, leader_of=leaders({T0: (1, 0), T1: (2, 0)})).batches
    [t0_first], [t1_first] = sent[1], sent[2]
    a.append(T0, 6, None, b"c", now=6)               # T0's next batch: open, lingered at 11
    # node 2 refuses T1, whose leader moved to node 1; node 1 has not answered for T0 yet
    half_known = leaders({T0: (1, 0), T1: (1, 1)})
    a.on_batch_error(t1_first, NotLeaderOrFollowerError(), now=12, leader_epoch=1)
    assert a.drain(12, sendable={1, 2}, leader_of=half_known).batches == {1: [t1_first]}   # the retry alone
    # node 1 refuses T0, whose leader moved to node 2: T0's batches go there, the retry first
    moved = leaders({T0: (2, 1), T1: (1, 1)})
    a.on_batch_error(t0_first, NotLeaderOrFollowerError(), now=13, leader_epoch=1)
    assert a.drain(13, sendable={1, 2}, leader_of=moved).batches == {2: [t0_first]}
    a.on_batch_success(t0_first, 0, now=20)
    [(node, [t0_second])] = a.drain(20, sendable={1, 2}, leader_of=moved).batches.items()
    assert node == 2 and t0_second.attempt_epochs == [1]       # sent once, to its new leader


def test_a_node_that_failed_or_expired_its_requests_owes_nothing() -> None:
    a = acc(retry_backoff_ms=10)
    lead = leaders({T0: (1, 0), T1: (1, 0)})
    a.append(T0, 0, None, b"a", now=0)
    [b0] = a.drain(5, sendable={1}, leader_of=lead).batches[1]
    a.on_batch_error(b0, RequestTimedOutError(), now=6)
    assert not a.node_busy(1)
    [b0] = a.drain(100, sendable={1}, leader_of=lead).batches[1]      # the retry
    assert a.node_busy(1)
    a.expire(1000)                                   # expired in flight: its answer no longer counts
    assert not a.node_busy(1)
    a.append(T1, 1000, None, b"b", now=1000)
    assert a.drain(1005, sendable={1}, leader_of=lead).batches[1][0].tp == T1


def test_complete_batches_and_flush_go_behind_a_request_in_flight() -> None:
    a = acc(batch_size=64, linger_ms=10_000, delivery_timeout_ms=20_000)
    lead = leaders({T0: (1, 0)})
    for value in (b"a" * 40, b"b" * 40, b"c" * 40):                 # three batches of one record
        a.append(T0, 0, None, value, now=0)
    first = a.drain(0, sendable={1}, leader_of=lead).batches[1]     # full: no linger wait
    second = a.drain(0, sendable={1}, leader_of=lead).batches[1]    # not the last: pipelined
    assert [b.index for b in first + second] == [0, 1]
    assert a.drain(0, sendable={1}, leader_of=lead).batches == {}   # the open last one waits ...
    a.begin_flush()
    assert [b.index for b in a.drain(0, sendable={1}, leader_of=lead).batches[1]] == [2]    # ... unless flushed


# ---------------------------------------------------------------------------------------------- ordering
def test_single_in_flight_keeps_partition_order_across_retries() -> None:
    a = acc(max_in_flight=1, linger_ms=0, batch_size=100)
    lead = leaders({T0: (1, 0)})
    for i in range(3):
        a.append(T0, i, None, b"x" * 70, now=0)     # three batches
    [b0] = a.drain(0, sendable={1}, leader_of=lead).batches[1]
    assert a.drain(0, sendable={1}, leader_of=lead).batches == {}      # partition muted while b0 is out
    a.on_batch_error(b0, RequestTimedOutError(), now=1)
    again = a.drain(1000, sendable={1}, leader_of=lead).batches[1]
    assert again == [b0]


def test_idempotent_retry_goes_back_to_the_head_and_waits_for_older() -> None:
    a = acc(enable_idempotence=True, linger_ms=0, batch_size=100)
    a.set_producer_identity(1, 0)
    lead = leaders({T0: (1, 0)})
    acknowledge_one(a, T0, lead)          # batch index 0, sequence 0: the leader knows the producer id
    for i in range(3):
        a.append(T0, i, None, b"x" * 70, now=0)
    b0 = a.drain(0, sendable={1}, leader_of=lead).batches[1][0]
    b1 = a.drain(0, sendable={1}, leader_of=lead).batches[1][0]
    assert (b0.base_sequence, b1.base_sequence) == (1, 2)
    a.on_batch_error(b1, RequestTimedOutError(), now=1)      # b1 fails while b0 is still out
    assert [b.index for b in a.batches() if b.state is BatchState.QUEUED] == [2, 3]
    assert a.drain(5000, sendable={1}, leader_of=lead).batches == {}    # b1 waits for older b0
    a.on_batch_success(b0, 0, now=5000)
    assert a.drain(5000, sendable={1}, leader_of=lead).batches[1] == [b1]
    assert b1.base_sequence == 2          # a retry keeps its sequence
    a.set_producer_identity(1, 1)         # epoch bump: queued batches are re-sequenced from 0 ...
    # ... but not while b1 is still out under epoch 0: sequence 0 of epoch 1 must not overtake it (Java)
    assert a.drain(5000, sendable={1}, leader_of=lead).batches == {}
    a.on_batch_success(b1, 1, now=5001)
    b2 = a.drain(5001, sendable={1}, leader_of=lead).batches[1][0]
    assert (b2.index, b2.base_sequence, b2.producer_epoch) == (3, 0, 1)


def test_held_partition_waits_for_the_identity_reset_while_others_keep_sending() -> None:
    """KIP-360 per partition: a gap holds only its own partition; the reset waits for the held partition's
    batches in flight, not for every partition's."""
    a = acc(enable_idempotence=True, linger_ms=0, batch_size=100)
    a.set_producer_identity(1, 0)
    lead = leaders({T0: (1, 0), T1: (2, 0)})
    acknowledge_one(a, T0, lead)
    acknowledge_one(a, T1, lead)
    for tp in (T0, T0, T1, T1):
        a.append(tp, 0, None, b"x" * 70, now=0)
    sent = a.drain(0, sendable={1, 2}, leader_of=lead).batches
    (p0,), (p1,) = sent[1], sent[2]
    a.hold(T0)
    a.expedite([T1])                                            # ready behind the batch in flight
    assert a.held_in_flight()                                   # T0's batch is still out
    more = a.drain(0, sendable={1, 2}, leader_of=lead).batches
    assert 1 not in more and [b.tp for b in more[2]] == [T1]    # T1 keeps sending, T0 is held
    a.on_batch_success(p0, 0, now=1)
    assert not a.held_in_flight()                               # T1's own in-flight batches do not count
    a.set_producer_identity(1, 1)
    (q0,) = a.drain(1, sendable={1, 2}, leader_of=lead).batches[1]
    assert (q0.tp, q0.base_sequence, q0.producer_epoch) == (T0, 0, 1)
    a.hold(None)                                      # the identity itself refused: hold all
    assert a.drain(1, sendable={1, 2}, leader_of=lead).batches == {} and a.held_in_flight()


def test_abort_fails_everything_once() -> None:
    a = acc()
    r = Results()
    lead = leaders({T0: (1, 0)})
    a.append(T0, 1, None, b"v", callback=r.cb(0), now=0)
    [batch] = a.drain(5, sendable={1}, leader_of=lead).batches[1]
    a.append(T0, 1, None, b"v", callback=r.cb(1), now=6)
    assert a.abort(RuntimeError("closed")) == 2
    assert not a.on_batch_success(batch, 0, now=7)
    assert set(r.done) == {0, 1} and a.incomplete_batches == 0 and a.buffered_bytes == 0


def test_idempotent_partition_waits_for_its_batches_at_the_old_leader_after_a_move() -> None:
    """A leader move with batches in flight to the old leader: newer batches do not go to the new leader ahead
    of them (it would refuse them with OUT_OF_ORDER_SEQUENCE_NUMBER, a wasted round trip and a backoff each);
    once the old leader answers, the retry goes first, then the rest."""
    a = acc(enable_idempotence=True, linger_ms=0, batch_size=100)
    a.set_producer_identity(1, 0)
    acknowledge_one(a, T0, leaders({T0: (1, 0)}))
    for i in range(3):
        a.append(T0, i, None, b"x" * 70, now=0)
    (b0,) = a.drain(0, sendable={1}, leader_of=leaders({T0: (1, 0)})).batches[1]
    moved = leaders({T0: (2, 1)})
    assert a.ready_nodes(1, moved) == set()
    assert a.drain(1, sendable={1, 2}, leader_of=moved).batches == {}
    a.on_batch_error(b0, NotLeaderOrFollowerError(), now=2, leader_epoch=1)
    assert a.ready_nodes(2, moved) == {2}
    assert a.drain(2, sendable={2}, leader_of=moved).batches[2] == [b0]        # the retry first, no backoff
    (b1,) = a.drain(2, sendable={2}, leader_of=moved).batches[2]                # then pipelined behind it
    assert (b0.base_sequence, b1.base_sequence) == (1, 2) and b1.node_id == 2


def drain_all(a: RecordAccumulator, now: float, lead: Any) -> list[Any]:
    """Every batch the partition gives out at ``now`` (a drain takes at most one per partition)."""
    out: list[Any] = []
    while batches := a.drain(now, sendable={1}, leader_of=lead).batches:
        out += batches[1]
    return out


def test_an_idempotent_partition_sends_one_batch_until_its_leader_knows_the_producer_id() -> None:
    """A Kafka broker takes any first sequence from a producer id it has no state for on a partition: were the
    partition's first batch refused without being written, one pipelined behind it would be written ahead of it.
    So the partition sends one batch at a time until its leader acknowledged one of the producer id, then up to
    ``max_in_flight``; an epoch bump of that id keeps pipelining (the leader checks its sequences strictly), a new
    producer id sends one at a time again. A refusal does not teach the leader the id; an answer under an older
    epoch of the id does."""
    a = acc(enable_idempotence=True, linger_ms=0, batch_size=100, max_in_flight=3)
    lead = leaders({T0: (1, 0)})

    def ready(n: int, now: float) -> None:
        for i in range(n):
            a.append(T0, i, None, b"x" * 70, now=now)       # one batch each
        a.expedite([T0])                                     # the last one too: all are complete

    def seqs(batches: list[Any]) -> list[tuple[int, int, int]]:
        return [(b.producer_id, b.producer_epoch, b.base_sequence) for b in batches]

    a.set_producer_identity(1, 0)
    ready(6, now=0)
    [b0] = drain_all(a, 0, lead)                             # the first alone
    assert a.on_batch_error(b0, NotLeaderOrFollowerError(), now=1, leader_epoch=0).retry
    [again] = drain_all(a, 1000, lead)                       # refused: still one at a time, the retry first
    assert again is b0 and seqs([b0]) == [(1, 0, 0)]
    assert a.on_batch_success(b0, 0, now=1001)
    first = drain_all(a, 1001, lead)                         # acknowledged: pipelined up to max_in_flight
    assert seqs(first) == [(1, 0, 1), (1, 0, 2), (1, 0, 3)]
    for b in first:
        a.on_batch_success(b, 0, now=1002)

    a.set_producer_identity(1, 1)                            # epoch bump of the known id
    bumped = drain_all(a, 1002, lead)
    assert seqs(bumped) == [(1, 1, 0), (1, 1, 1)]            # pipelined at once, from sequence 0
    for b in bumped:
        a.on_batch_success(b, 0, now=1003)

    ready(1, now=1003)
    [old] = drain_all(a, 1003, lead)                         # in flight under the known id ...
    a.set_producer_identity(2, 0)                            # ... when a new one comes
    ready(3, now=1003)
    assert drain_all(a, 1003, lead) == []                    # the new id waits for the old one's batch
    assert a.on_batch_success(old, 0, now=1004)              # acknowledged under id 1: says nothing of id 2
    [n0] = drain_all(a, 1004, lead)
    assert seqs([n0]) == [(2, 0, 0)]                         # one at a time again
    a.set_producer_identity(2, 1)                            # bumped while id 2's first batch is out
    assert a.on_batch_success(n0, 0, now=1005)               # its answer under epoch 0 still makes id 2 known
    assert seqs(drain_all(a, 1005, lead)) == [(2, 1, 0), (2, 1, 1)]


def test_an_idempotent_partition_idle_past_the_trust_window_sends_one_batch_until_acknowledged_again() -> None:
    """A broker drops a producer id's state on a partition it wrote nothing to for ``producer.id.expiration.ms``
    and then takes any first sequence again: after ``PID_STATE_TRUST_MS`` without an acknowledgement the partition
    sends one batch at a time until its leader acknowledged one more; within the window it pipelines at once."""
    from akresil.core.accumulator import PID_STATE_TRUST_MS
    a = acc(enable_idempotence=True, linger_ms=0, batch_size=100, max_in_flight=3,
            delivery_timeout_ms=10 * PID_STATE_TRUST_MS)
    lead = leaders({T0: (1, 0)})
    a.set_producer_identity(1, 0)

    def ready(n: int, now: float) -> None:
        for i in range(n):
            a.append(T0, i, None, b"x" * 70, now=now)
        a.expedite([T0])

    acknowledge_one(a, T0, lead, now=0)
    t = PID_STATE_TRUST_MS                                   # at the window's end: still trusted
    ready(2, now=t)
    batches = drain_all(a, t, lead)
    assert len(batches) == 2
    for b in batches:
        assert a.on_batch_success(b, 0, now=t)
    t = 2 * PID_STATE_TRUST_MS + 1                           # idle past the window since the last answer
    ready(3, now=t)
    [alone] = drain_all(a, t, lead)
    assert drain_all(a, t + 5, lead) == []                   # the rest wait for its answer
    assert a.on_batch_success(alone, 0, now=t + 10)
    assert len(drain_all(a, t + 10, lead)) == 2              # known again: pipelined


def test_without_idempotence_the_first_batches_pipeline_at_once() -> None:
    """The producer-id gate is for idempotent partitions only: without sequences nothing tells a broker the order
    anyway (Kafka's documented reordering with several requests in flight), so the first batches go together."""
    a = acc(linger_ms=0, batch_size=100)
    for i in range(3):
        a.append(T0, i, None, b"x" * 70, now=0)
    a.expedite([T0])
    assert [b.index for b in drain_all(a, 0, leaders({T0: (1, 0)}))] == [0, 1, 2]


def test_without_idempotence_a_move_does_not_hold_newer_batches() -> None:
    a = acc(linger_ms=0, batch_size=100)
    for i in range(2):
        a.append(T0, i, None, b"x" * 70, now=0)
    a.drain(0, sendable={1}, leader_of=leaders({T0: (1, 0)}))
    (b1,) = a.drain(1, sendable={2}, leader_of=leaders({T0: (2, 1)})).batches[2]
    assert b1.index == 1
