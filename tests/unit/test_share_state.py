"""ShareFetchState (KIP-932) driven by plain method calls and a fake clock: sessions, locks, acknowledgements."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from akresil import errors
from akresil.core.backoff import ExponentialBackoff
from akresil.core.share_state import AckType, PlanKind, ShareFetchState, SharePlan
from akresil.protocol.records import build_batch
from akresil.types import ShareRecord, TopicPartition

TID = bytes(range(1, 17))
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
LEADERS = {TP0: 1, TP1: 2}


def state(**kw: Any) -> ShareFetchState:
    backoff = ExponentialBackoff(100, 1000, rng=random.Random(0), jitter=0.0)
    st = ShareFetchState("g", backoff=backoff, **kw)
    st.member_id = "m"
    st.set_assignment([TP0, TP1])
    return st


def plan(st: ShareFetchState, now: float) -> dict[int, SharePlan]:
    plans = st.plan(now, leader_of=LEADERS.get, topic_id_of=lambda t: TID)
    return {p.node_id: p for p in plans}


def batch(base: int, count: int) -> bytes:
    raw = build_batch([(1000 + i, None, b"v%d" % (base + i), []) for i in range(count)])
    return struct.pack(">q", base) + raw[8:]    # base offset is outside the CRC


def fetch_answer(partition: int, records: bytes = b"", acquired: list[tuple[int, int, int]] = (), *,
                 lock_ms: int = 1000, error: int = 0, ack_error: int = 0, pcode: int = 0,
                 leader: tuple[int, int] = (-1, -1)) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": None, "acquisition_lock_timeout_ms": lock_ms,
            "responses": [{"topic_id": TID, "partitions": [{
                "partition_index": partition, "error_code": pcode, "error_message": None,
                "acknowledge_error_code": ack_error, "acknowledge_error_message": None,
                "current_leader": {"leader_id": leader[0], "leader_epoch": leader[1]},
                "records": records,
                "acquired_records": [{"first_offset": a, "last_offset": b, "delivery_count": c}
                                     for a, b, c in acquired]}]}],
            "node_endpoints": []}


def ack_answer(partition: int, code: int = 0) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "responses": [{"topic_id": TID, "partitions": [{"partition_index": partition, "error_code": code,
                                                            "error_message": None,
                                                            "current_leader": {"leader_id": -1, "leader_epoch": -1}}]}],
            "node_endpoints": []}


def test_first_fetch_opens_a_session_per_leader_with_the_full_partition_list() -> None:
    st = state()
    plans = plan(st, 0)
    assert set(plans) == {1, 2}
    body = plans[1].body
    assert body["share_session_epoch"] == 0 and body["member_id"] == "m" and body["group_id"] == "g"
    assert body["topics"] == [{"topic_id": TID, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]
    assert plans[2].body["topics"][0]["partitions"][0]["partition_index"] == 1
    # one request per leader at a time
    assert plan(st, 1) == {}


def test_only_acquired_offsets_are_delivered_with_their_delivery_count() -> None:
    st = state()
    p = plan(st, 0)[1]
    # the batch holds 0..5, but only 1..2 (count 1) and 4 (count 3) are acquired for us
    out = st.on_fetch_response(p, fetch_answer(0, batch(0, 6), [(1, 2, 1), (4, 4, 3)]), 10)
    assert out.records == 3
    recs = st.poll(100, 20)
    assert [(r.offset, r.delivery_count, r.value) for r in recs] == [(1, 1, b"v1"), (2, 1, b"v2"), (4, 3, b"v4")]
    assert st.lock_timeout_ms == 1000


def test_session_epoch_increments_and_later_fetches_are_incremental() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0), 10)
    assert st.session_epoch(1) == 1
    p2 = plan(st, 20)[1]
    assert p2.body["share_session_epoch"] == 1
    assert p2.body["topics"] == []            # TP0 is already in the session
    st.set_assignment([TP1])                   # TP0 moves away: the session forgets it
    st.on_fetch_response(p2, fetch_answer(0), 30)
    st.set_assignment([TP0, TP1])
    st.set_assignment([TP1])
    assert 1 not in plan(st, 40)               # no partition of node 1 wanted: nothing to send there


def test_acknowledgements_ride_on_the_next_fetch_in_offset_runs() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 5), [(0, 4, 1)]), 10)
    recs = st.poll(100, 20)
    kinds = [AckType.ACCEPT, AckType.ACCEPT, AckType.RELEASE, AckType.ACCEPT, AckType.REJECT]
    for rec, kind in zip(recs, kinds):
        st.acknowledge(TP0, rec.offset, kind, 30)
    p2 = plan(st, 40)[1]
    assert p2.kind is PlanKind.FETCH
    (part,) = p2.body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 0, "last_offset": 4,
                                                "acknowledge_types": [1, 1, 2, 1, 3]}]
    st.on_fetch_response(p2, fetch_answer(0), 50)
    assert st.take_results() == {TP0: None}
    assert st.take_results() == {}


def test_a_run_with_one_type_is_sent_as_one_type() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 4), [(0, 3, 1)]), 10)
    for rec in st.poll(100, 20):
        if rec.offset != 2:
            st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 30)
    assert 1 not in plan(st, 40)             # offset 2 is handed out and not settled: no fetch yet
    st.request_commit()
    p2 = plan(st, 40)[1]
    assert p2.kind is PlanKind.ACKNOWLEDGE
    (part,) = p2.body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [
        {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]},
        {"first_offset": 3, "last_offset": 3, "acknowledge_types": [1]}]


def test_an_expired_lock_is_not_acknowledged_as_if_held() -> None:
    st = state()
    p = plan(st, 100)[1]                                    # sent at 100, lock 1000 ms: deadline 1100
    st.on_fetch_response(p, fetch_answer(0, batch(0, 2), [(0, 1, 1)]), 150)
    a, b = st.poll(100, 200)
    st.acknowledge(TP0, a.offset, AckType.ACCEPT, 1099)     # still held
    st.acknowledge(TP0, b.offset, AckType.ACCEPT, 1100)     # the lock ran out (measured from the send)
    p2 = plan(st, 1200)[1]
    (part,) = p2.body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]
    res = st.take_results()
    assert isinstance(res[TP0], errors.AcquisitionLockExpiredError)


def test_buffered_records_whose_lock_ran_out_are_never_handed_out() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 3), [(0, 2, 1)]), 10)
    assert st.next_timer_at(10) == 1000
    assert st.poll(1, 999)[0].offset == 0
    assert st.poll(100, 1000) == []
    assert st.buffered == 0
    # and the leader may be fetched from again (nothing buffered from it)
    assert plan(st, 1001)[1].kind is PlanKind.FETCH


def test_acknowledging_a_record_not_held_is_an_error_unless_implicit() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 1), [(0, 0, 1)]), 10)
    with pytest.raises(errors.IllegalStateError, match="not held"):
        st.acknowledge(TP0, 0, AckType.ACCEPT, 20)        # buffered, not yet delivered
    (rec,) = st.poll(10, 20)
    st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 30)
    with pytest.raises(errors.IllegalStateError, match="already acknowledged"):
        st.acknowledge(TP0, rec.offset, AckType.REJECT, 31)
    st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 32, implicit=True)   # implicit accept skips it quietly


def test_session_error_resets_the_epoch_voids_held_records_and_fails_their_acks() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 3), [(0, 2, 1)]), 10)
    a, b = st.poll(2, 20)
    st.acknowledge(TP0, a.offset, AckType.ACCEPT, 30)
    p2 = plan(st, 40)
    assert 1 not in p2                                     # one record still buffered: no fetch yet
    st.request_commit()
    p2 = plan(st, 40)[1]
    assert p2.kind is PlanKind.ACKNOWLEDGE and p2.body["share_session_epoch"] == 1
    st.on_ack_response(p2, {**ack_answer(0), "error_code": errors.InvalidShareSessionEpochError.errno}, 50)
    assert st.session_epoch(1) == 0
    assert isinstance(st.take_results()[TP0], errors.InvalidShareSessionEpochError)
    assert st.buffered == 0                                # the buffered third record went with the session
    st.acknowledge(TP0, b.offset, AckType.ACCEPT, 60)      # delivered under the lost session: reported, not sent
    assert isinstance(st.take_results()[TP0], errors.AcquisitionLockExpiredError)
    # the broker forgot the session: the new one is opened at once (no backoff), without the void acks
    p3 = plan(st, 50)[1]
    assert p3.body["share_session_epoch"] == 0 and p3.body["topics"][0]["partitions"][0]["acknowledgement_batches"] == []


@pytest.mark.parametrize("code", [errors.ShareSessionNotFoundError.errno, errors.InvalidShareSessionEpochError.errno])
def test_a_lost_session_is_reopened_at_once_but_a_failing_new_session_backs_off(code: int) -> None:
    """Issue 28: librdkafka's mock drops every member's session on a node whenever any client's connection to it
    closes; akresil waited a retry backoff before reopening, while other members fetched the records."""
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0), 10)                  # session open, epoch 1
    p = plan(st, 10)[1]
    assert p.body["share_session_epoch"] == 1
    st.on_fetch_response(p, fetch_answer(0, error=code), 20)
    p = plan(st, 20)[1]                                            # same instant
    assert p.body["share_session_epoch"] == 0
    # a new session's request (epoch 0) answered with a session error is the broker's fault: back off
    st.on_fetch_response(p, fetch_answer(0, error=code), 30)
    assert 1 not in plan(st, 129)
    assert plan(st, 130)[1].body["share_session_epoch"] == 0


def test_transport_failure_backs_off_exponentially_and_reopens_the_session() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0), 10)
    p = plan(st, 10)[1]
    st.on_request_failed(p, errors.KafkaConnectionError("reset"), 20)
    assert 1 not in plan(st, 119)
    p = plan(st, 120)[1]
    assert p.body["share_session_epoch"] == 0
    st.on_request_failed(p, errors.RequestTimeoutError("slow"), 130)
    assert 1 not in plan(st, 329)                             # second failure: 200 ms
    assert plan(st, 330)[1].body["share_session_epoch"] == 0


def test_ack_only_request_goes_to_a_leader_whose_partitions_moved_away() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 1), [(0, 0, 1)]), 10)
    (rec,) = st.poll(10, 20)
    st.set_assignment([TP1])
    st.acknowledge(TP0, rec.offset, AckType.RELEASE, 30)
    p2 = plan(st, 40)[1]
    assert p2.kind is PlanKind.ACKNOWLEDGE
    assert p2.body["topics"][0]["partitions"][0]["acknowledgement_batches"][0]["acknowledge_types"] == [2]
    st.on_ack_response(p2, ack_answer(0, code=errors.InvalidRecordStateError.errno), 50)
    assert isinstance(st.take_results()[TP0], errors.InvalidRecordStateError)
    assert st.session_epoch(1) == 2


def test_acquired_offsets_without_records_are_settled_as_gaps() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 2), [(0, 3, 1)]), 10)   # 2 and 3 have no record
    for rec in st.poll(10, 20):
        st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 25)
    (part,) = plan(st, 30)[1].body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 0, "last_offset": 3,
                                                "acknowledge_types": [1, 1, 0, 0]}]


def test_leader_error_returns_the_hint_and_asks_for_metadata() -> None:
    st = state()
    p = plan(st, 0)[1]
    out = st.on_fetch_response(p, fetch_answer(0, pcode=errors.NotLeaderOrFollowerError.errno, leader=(2, 5)), 10)
    assert out.refresh_metadata
    assert [(h.tp, h.leader_id, h.leader_epoch) for h in out.hints] == [(TP0, 2, 5)]


def test_close_sends_final_acks_at_epoch_minus_one_only_for_open_sessions() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 1), [(0, 0, 1)]), 10)
    (rec,) = st.poll(10, 20)
    st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 30)
    plans = st.close_plans(40, topic_id_of=lambda t: TID)
    assert [(c.node_id, c.kind, c.body["share_session_epoch"]) for c in plans] == [(1, PlanKind.CLOSE, -1)]
    st.on_ack_response(plans[0], ack_answer(0), 50)
    assert st.session_epoch(1) == 0 and st.take_results() == {TP0: None}


def test_commit_waits_for_in_flight_acks_and_settles() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 2), [(0, 1, 1)]), 10)
    rec, _ = st.poll(10, 20)                     # offset 1 stays handed out and unsettled: no fetch is due
    st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 30)
    nodes = st.request_commit()
    assert nodes == {1} and not st.settled(nodes)
    p2 = plan(st, 40)[1]
    assert p2.kind is PlanKind.ACKNOWLEDGE
    assert not st.settled(nodes)                 # in flight
    st.on_ack_response(p2, ack_answer(0), 50)
    assert st.settled(nodes)


def test_a_commit_that_unblocks_the_next_fetch_rides_it_and_asks_for_an_answer_at_once() -> None:
    """Issue 27: a commit of everything a leader handed out went as a ShareAcknowledge, and the fetch it
    unblocked only after that answer: two round trips per poll-acknowledge-commit loop instead of one."""
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 3), [(0, 2, 1)]), 10)
    for rec in st.poll(10, 20):
        st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 30)
    nodes = st.request_commit()
    p2 = plan(st, 40)[1]
    assert p2.kind is PlanKind.FETCH and p2.body["share_session_epoch"] == 1
    assert p2.body["max_wait_ms"] == 0            # commit() waits for this answer: no long poll
    (part,) = p2.body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 0, "last_offset": 2, "acknowledge_types": [1]}]
    assert not st.settled(nodes)
    out = st.on_fetch_response(p2, fetch_answer(0, batch(3, 2), [(3, 4, 1)]), 50)
    assert st.settled(nodes) and st.take_results() == {TP0: None}
    assert out.records == 2                       # the next poll's records came with the same answer
    for rec in st.poll(10, 60):
        st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 70)
    p3 = plan(st, 80)[1]                          # no commit asked: the next fetch carries them
    assert p3.kind is PlanKind.FETCH and p3.body["topics"][0]["partitions"][0]["acknowledgement_batches"]


def test_an_old_delivery_of_a_reacquired_offset_is_refused_without_touching_the_new_one() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 1), [(0, 0, 1)]), 10)
    (old,) = st.poll(10, 20)
    p = plan(st, 1500)[1]                                   # old lock gone at 1000; the broker hands it out again
    st.on_fetch_response(p, fetch_answer(0, batch(0, 1), [(0, 0, 2)]), 1510)
    (new,) = st.poll(10, 1520)
    assert (new.offset, new.delivery_count) == (0, 2)
    st.acknowledge(TP0, old.offset, AckType.ACCEPT, 1530, delivery_count=old.delivery_count)
    assert isinstance(st.take_results()[TP0], errors.AcquisitionLockExpiredError)
    st.acknowledge(TP0, new.offset, AckType.REJECT, 1540, delivery_count=new.delivery_count)
    (part,) = plan(st, 1550)[1].body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [3]}]


def test_a_record_announced_again_under_the_same_delivery_is_not_handed_out_twice() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 2), [(0, 1, 1)]), 10)
    assert [r.offset for r in st.poll(10, 20)] == [0, 1]
    # librdkafka's mock answers a member's next fetch with the records it already holds (same answer again)
    assert st.on_fetch_response(p, fetch_answer(0, batch(0, 2), [(0, 1, 1)]), 40).records == 0
    assert st.poll(10, 50) == []
    assert st.next_timer_at(50) is None
    st.acknowledge(TP0, 0, AckType.ACCEPT, 999, delivery_count=1)     # the first lock (sent at 0) still holds
    st.acknowledge(TP0, 1, AckType.ACCEPT, 1000, delivery_count=1)    # ... and it was not extended
    assert isinstance(st.take_results()[TP0], errors.AcquisitionLockExpiredError)


def test_the_next_fetch_waits_until_handed_out_records_are_settled_or_expired() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 2), [(0, 1, 1)]), 10)
    a, b = st.poll(10, 20)
    st.acknowledge(TP0, a.offset, AckType.ACCEPT, 30)
    assert 1 not in plan(st, 40)                  # b is still out
    assert plan(st, 1000)[1].kind is PlanKind.FETCH   # b's lock ran out (sent at 0 + 1000 ms): fetch again


def test_timers_already_past_are_not_returned() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_request_failed(p, errors.KafkaConnectionError("reset"), 10)     # backoff until 110
    assert st.next_timer_at(50) == 110
    assert st.next_timer_at(110) is None      # due now: the turn acts on it; returning it would spin the loop


def test_a_plain_topic_partition_tuple_settles_like_the_named_one() -> None:
    """The consumer passes ``(topic, partition)`` (no TopicPartition built per record); what the state keeps
    and reports is still keyed by TopicPartition."""
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 2), [(0, 1, 1)]), 10)
    first, second = st.poll(10, 20)
    st.acknowledge(("t", 0), first.offset, AckType.ACCEPT, 30, delivery_count=1)
    st.acknowledge(("t", 0), second.offset, AckType.ACCEPT, 1500, delivery_count=1)   # lock ran out at 1010
    results = st.take_results()
    assert list(results) == [TP0] and isinstance(next(iter(results)), TopicPartition)
    assert isinstance(results[TP0], errors.AcquisitionLockExpiredError)
    with pytest.raises(errors.IllegalStateError, match=r"t\[0\]@0 is not held"):
        st.acknowledge(("t", 0), first.offset, AckType.ACCEPT, 40)
    p2 = plan(st, 1500)[1]
    (part,) = p2.body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]
    assert {type(tp) for tp in p2.acks} == {TopicPartition}


def drain_and_accept(st: ShareFetchState, now: float, max_records: int = 1000) -> int:
    recs = st.poll(max_records, now)
    for rec in recs:
        st.acknowledge(TP0, rec.offset, AckType.ACCEPT, now)
    return len(recs)


def test_a_broker_that_rounds_up_to_whole_batches_is_asked_for_what_fits_one_poll() -> None:
    st = state(max_records=10)
    p = plan(st, 0)[1]
    assert p.body["max_records"] == 10
    # Apache Kafka's batch-optimized acquisition: whole batches of 4 until at least 10 records, so 12
    st.on_fetch_response(p, fetch_answer(0, batch(0, 4) + batch(4, 4) + batch(8, 4), [(0, 11, 1)]), 10)
    assert drain_and_accept(st, 20, 10) == 10 and drain_and_accept(st, 20, 10) == 2   # two polls for one answer
    assert st.fetch_records == 7                  # 7 -> two batches (8) at most: one poll, whole batches
    p2 = plan(st, 30)[1]
    assert p2.body["max_records"] == 7 and p2.body["batch_size"] == 10
    st.on_fetch_response(p2, fetch_answer(0, batch(12, 4) + batch(16, 4), [(12, 19, 1)]), 40)
    assert drain_and_accept(st, 50) == 8          # the whole answer in one poll
    assert plan(st, 60)[1].body["max_records"] == 7


def test_a_broker_that_stops_at_the_limit_keeps_being_asked_for_a_full_poll() -> None:
    st = state(max_records=10)
    p = plan(st, 0)[1]
    # librdkafka's mock: exactly the records asked for, whatever the batches
    st.on_fetch_response(p, fetch_answer(0, batch(0, 4) + batch(4, 4) + batch(8, 4), [(0, 9, 1)]), 10)
    assert drain_and_accept(st, 20) == 10
    assert st.fetch_records == 10 and plan(st, 30)[1].body["max_records"] == 10


def test_a_compacted_batch_hands_out_its_records_and_settles_its_missing_offsets_as_gaps() -> None:
    st = state()
    p = plan(st, 0)[1]
    compacted = bytearray(batch(0, 3))
    struct.pack_into(">i", compacted, 23, 4)      # last offset delta 4: offsets 3 and 4 compacted away
    st.on_fetch_response(p, fetch_answer(0, bytes(compacted), [(0, 4, 2)]), 10)
    recs = st.poll(10, 20)
    assert [(r.offset, r.value, r.delivery_count) for r in recs] == [(0, b"v0", 2), (1, b"v1", 2), (2, b"v2", 2)]
    for rec in recs:
        st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 25, delivery_count=2)
    with pytest.raises(errors.IllegalStateError):
        st.acknowledge(TP0, 3, AckType.ACCEPT, 25)            # never delivered: not held
    (part,) = plan(st, 30)[1].body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 0, "last_offset": 4,
                                                "acknowledge_types": [1, 1, 1, 0, 0]}]


def test_acknowledge_record_settles_like_acknowledge_and_refuses_what_it_refuses() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 4), [(0, 3, 1)], lock_ms=1000), 10)
    recs = st.poll(10, 20)
    st.acknowledge_record(recs[0], AckType.ACCEPT, 30)
    st.acknowledge_record(recs[1], AckType.RELEASE, 30)
    with pytest.raises(errors.IllegalStateError):
        st.acknowledge_record(recs[0], AckType.ACCEPT, 30)            # settled already
    with pytest.raises(errors.IllegalStateError):
        st.acknowledge_record(recs[2]._replace(partition=1), AckType.ACCEPT, 30)   # never delivered
    st.acknowledge_record(recs[2]._replace(delivery_count=5), AckType.ACCEPT, 30)   # not this delivery
    assert isinstance(st.take_results()[TP0], errors.AcquisitionLockExpiredError)
    st.acknowledge_record(recs[3], AckType.ACCEPT, 2000)              # lock ran out (sent at 0, 1 s)
    assert isinstance(st.take_results()[TP0], errors.AcquisitionLockExpiredError)
    st.acknowledge_record(recs[2], AckType.REJECT, 40)
    (part,) = plan(st, 50)[1].body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 0, "last_offset": 2, "acknowledge_types": [1, 2, 3]}]


def test_a_fetch_carrying_acknowledgements_answers_at_once_and_the_one_after_it_long_polls() -> None:
    """Issue 27: acknowledgements settled without commit() rode a long poll; a commit() coming meanwhile (the
    application awaited something in between) waited for that answer, up to max_wait_ms at the end of a queue."""
    st = state(max_wait_ms=500)
    p = plan(st, 0)[1]
    assert p.body["max_wait_ms"] == 500           # nothing to carry: a long poll
    st.on_fetch_response(p, fetch_answer(0, batch(0, 3), [(0, 2, 1)]), 10)
    for rec in st.poll(10, 20):
        st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 30)
    p2 = plan(st, 40)[1]
    assert p2.kind is PlanKind.FETCH and p2.body["max_wait_ms"] == 0
    assert p2.body["topics"][0]["partitions"][0]["acknowledgement_batches"]
    nodes = st.request_commit()                   # commit() while that fetch is out: one quick answer away
    assert not st.settled(nodes) and 1 not in plan(st, 45)
    st.on_fetch_response(p2, fetch_answer(0), 50)  # nothing there: answered at once, empty
    assert st.settled(nodes) and st.take_results() == {TP0: None}
    p3 = plan(st, 60)[1]
    assert p3.body["max_wait_ms"] == 500 and p3.body["topics"] == []


def test_a_batch_cut_by_acquired_ranges_is_decoded_once_into_share_records(monkeypatch: pytest.MonkeyPatch) -> None:
    # the broker acquires record counts, not batches: a range may end (and the next fetch's begin) mid-batch;
    # neither fetch should fall back to the per-record ConsumerRecord path
    import akresil.core.share_state as share_state

    def no_slow_path(*args: Any, **kw: Any) -> Any:
        raise AssertionError("decode_batch: the per-record path was taken")

    monkeypatch.setattr(share_state, "decode_batch", no_slow_path)
    st = state()
    st.on_fetch_response(plan(st, 0)[1], fetch_answer(0, batch(0, 6), [(0, 2, 1)]), 10)
    first = st.poll(10, 20)
    assert [(r.offset, r.value, r.delivery_count) for r in first] == [(0, b"v0", 1), (1, b"v1", 1), (2, b"v2", 1)]
    for rec in first:
        st.acknowledge_record(rec, AckType.ACCEPT, 25)
    p2 = plan(st, 30)[1]
    (part,) = p2.body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 0, "last_offset": 2, "acknowledge_types": [1]}]
    st.on_fetch_response(p2, fetch_answer(0, batch(0, 6), [(3, 4, 2)]), 40)
    second = st.poll(10, 50)
    assert [(r.offset, r.value, r.delivery_count) for r in second] == [(3, b"v3", 2), (4, b"v4", 2)]
    with pytest.raises(errors.IllegalStateError):
        st.acknowledge(TP0, 5, AckType.ACCEPT, 60)             # in the batch, never acquired: not held
    for rec in second:
        st.acknowledge_record(rec, AckType.REJECT, 60)
    (part,) = plan(st, 70)[1].body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 3, "last_offset": 4, "acknowledge_types": [3]}]


def test_plan_tells_the_shell_when_an_assigned_partition_has_no_known_leader_or_topic_id() -> None:
    st = state()
    st.plan(0, leader_of=LEADERS.get, topic_id_of=lambda t: TID)
    assert st.unknown_leaders is False
    st.plan(0, leader_of={TP0: 1}.get, topic_id_of=lambda t: TID)         # TP1's leader unknown
    assert st.unknown_leaders is True
    st.plan(0, leader_of=LEADERS.get, topic_id_of=lambda t: None)         # the topic's id unknown
    assert st.unknown_leaders is True
    st.plan(0, leader_of={TP0: 1, TP1: -1}.get, topic_id_of=lambda t: TID)  # leaderless (-1): known, no refresh
    assert st.unknown_leaders is False


@pytest.mark.parametrize("compacted", [False, True])
def test_acquired_slices_of_batches_decode_as_the_per_record_path_does(compacted: bool,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # the lean path builds only the acquired slice of a batch (positions = offsets when none is missing); what it
    # hands out must be what the generic per-record decoder gives for those offsets
    import akresil.core.share_state as share_state
    from akresil.core.fetch_state import decode_batch
    from akresil.protocol.records import read_batches

    def no_slow_path(*args: Any, **kw: Any) -> Any:
        raise AssertionError("decode_batch: the per-record path was taken")

    monkeypatch.setattr(share_state, "decode_batch", no_slow_path)

    blob = bytearray(batch(0, 5) + batch(5, 5) + batch(10, 5))
    if compacted:
        struct.pack_into(">i", blob, len(batch(0, 5)) + 23, 6)   # the middle batch's last offset delta: 5..11
        blob = blob[:len(batch(0, 5)) * 2]                         # (its offsets 10 and 11 compacted away)
    for lo, hi in [(1, 3), (2, 12), (6, 8), (0, 14)]:
        st = state()
        st.on_fetch_response(plan(st, 0)[1], fetch_answer(0, bytes(blob), [(lo, hi, 3)]), 10)
        got = st.poll(100, 20)
        want = [ShareRecord(*rec, 3) for b in read_batches(bytes(blob))
                for rec in decode_batch(b, "t", 0, 0) if lo <= rec[2] <= hi]
        assert got == want and [r.offset for r in got] == [o for o in range(lo, hi + 1)
                                                            if o < (10 if compacted else 15)]


def test_plan_looks_partitions_up_again_only_for_a_new_layout_or_assignment() -> None:
    st = state()
    looked: list[TopicPartition] = []

    def leader_of(tp: TopicPartition) -> int | None:
        looked.append(tp)
        return LEADERS.get(tp)

    def planned(layout: object, now: float) -> list[SharePlan]:
        return st.plan(now, leader_of=leader_of, topic_id_of=lambda t: TID, layout=layout)

    layout = object()
    assert {p.node_id for p in planned(layout, 0)} == {1, 2} and len(looked) == 2
    looked.clear()
    planned(layout, 1)                                   # same layout, same assignment: no look-up
    assert looked == []
    planned(object(), 2)                                 # a new layout (the metadata changed)
    assert sorted(looked) == [TP0, TP1]
    looked.clear()
    st.set_assignment([TP0])                             # a new assignment
    planned(layout, 3)
    assert looked == [TP0]
    looked.clear()
    planned(None, 4)                                     # no layout: always looked up
    assert looked == [TP0]


def test_plans_under_an_unchanged_layout_are_the_plans_without_one() -> None:
    layout = object()
    states = {"cached": state(), "fresh": state()}

    def plans(now: float) -> list[tuple[int, str, str]]:
        out = {}
        for name, st in states.items():
            got = st.plan(now, leader_of=LEADERS.get, topic_id_of=lambda t: TID,
                          layout=layout if name == "cached" else None)
            out[name] = sorted((p.node_id, p.kind.value, repr(p.body)) for p in got)
            for p in got:
                tp = TP0 if p.node_id == 1 else TP1
                st.on_fetch_response(p, fetch_answer(tp.partition, batch(0, 2), [(0, 1, 1)]), now + 1)
        assert out["cached"] == out["fresh"]
        return out["cached"]

    assert [n for n, _, _ in plans(0)] == [1, 2]       # the first fetches, each answered with two records
    for st in states.values():
        for rec in st.poll(10, 5):
            st.acknowledge((rec.topic, rec.partition), rec.offset, AckType.ACCEPT, 6, delivery_count=1)
    again = plans(10)                                  # the next fetches carry the acknowledgements
    assert [n for n, _, _ in again] == [1, 2] and all("'acknowledge_types': [1]" in body for _, _, body in again)


def test_plan_with_nothing_changed_since_the_last_returns_at_once_and_never_hides_a_request() -> None:
    """Issue 35 item 5: the shell's poll and commit woke the planner after an answer's turn had already planned
    what followed it (half the turns of a round planned nothing). ``needs_plan`` says whether anything that can
    make a plan happened since the latest one; over scripted rounds (answers, polls, acknowledgements, commits,
    a lost session, a lock running out), whenever it says no, a full plan of a copy of the state plans nothing,
    and most turns that would plan nothing are skipped."""
    import copy

    rng = random.Random(7)
    st = state()
    layout = object()
    in_flight: dict[int, SharePlan] = {}
    next_offset = {1: 0, 2: 0}
    commits: set[int] = set()
    turns = empty = skipped = 0
    now = 0.0

    def turn() -> None:
        nonlocal turns, empty, skipped
        if not st.needs_plan(now):
            skipped += 1
            assert copy.deepcopy(st).plan(now, leader_of=LEADERS.get, topic_id_of=lambda t: TID) == []
            assert st.plan(now, leader_of=LEADERS.get, topic_id_of=lambda t: TID, layout=layout) == []
            return
        got = st.plan(now, leader_of=LEADERS.get, topic_id_of=lambda t: TID, layout=layout)
        turns += 1
        empty += not got
        for p in got:
            in_flight[p.node_id] = p

    for _ in range(400):
        now += rng.choice((1, 1, 1, 300))               # the lock lasts 1000: some run out while held
        event = rng.random()
        if event < 0.35 and in_flight:
            node = rng.choice(sorted(in_flight))
            p = in_flight.pop(node)
            tp = TP0 if node == 1 else TP1
            if rng.random() < 0.05:
                st.on_request_failed(p, errors.KafkaConnectionError("gone"), now)
            elif p.kind is PlanKind.FETCH:
                first = next_offset[node]
                count = rng.randint(0, 4)
                next_offset[node] += count
                answer = fetch_answer(tp.partition, batch(first, count), [(first, first + count - 1, 1)]) if count \
                    else fetch_answer(tp.partition)
                st.on_fetch_response(p, answer, now)
            else:
                st.on_ack_response(p, ack_answer(tp.partition), now)
            turn()                                       # the answer's own turn
        elif event < 0.65:
            records = st.poll(rng.randint(1, 5), now)
            turn()                                       # the poll's wake-up
            for rec in records:
                if rng.random() < 0.9:
                    st.acknowledge_record(rec, int(AckType.ACCEPT), now)
        elif event < 0.8:
            commits |= st.request_commit()
            turn()                                       # the commit's wake-up
        elif event < 0.9:
            st.settled(commits)
            turn()
        else:
            turn()                                       # a timer
    assert turns + skipped > 300 and skipped > 0
    # the turns that plan nothing were empty + skipped (every turn planned in full); most are skipped now
    assert skipped > empty, (turns, empty, skipped)


def _refuse_v2(value: bytes) -> bytes:
    if value == b"v2":
        raise ValueError("cannot parse v2")
    return value


def test_a_record_the_deserializer_refuses_is_released_and_reported_and_the_rest_flow() -> None:
    # it killed the share consumer's fetcher (the deserializer's error escaped the answer's handling), and with it
    # the consumer; the Java share consumer releases the record and raises RecordDeserializationException
    st = state(value_deserializer=_refuse_v2)
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 5), [(0, 4, 3)]), 10)
    error = st.take_unreadable()
    assert isinstance(error, errors.RecordDeserializationError) and st.take_unreadable() is None
    assert (error.topic_partition, error.offset, error.origin) == (TP0, 2, "value")
    assert isinstance(error.__cause__, ValueError)
    assert "offset 2 (delivery 3) could not be deserialized (ValueError: cannot parse v2); released" in str(error)
    recs = st.poll(100, 20)
    assert [r.offset for r in recs] == [0, 1, 3, 4]     # the records after it in its batch too
    for rec in recs:
        st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 30)
    (part,) = plan(st, 40)[1].body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 0, "last_offset": 4,
                                                "acknowledge_types": [1, 1, 2, 1, 1]}]


def test_a_refused_record_acquired_by_another_member_is_none_of_this_ones_business() -> None:
    st = state(value_deserializer=_refuse_v2)
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 5), [(3, 4, 1)]), 10)     # 0..2 went to someone else
    assert st.take_unreadable() is None
    assert [r.offset for r in st.poll(100, 20)] == [3, 4]


def test_a_batch_that_does_not_decode_is_rejected_from_its_first_bad_record_and_reported() -> None:
    from .test_fetch_corrupt import bad_header_batch
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, bad_header_batch(0, 5, bad_index=2), [(0, 4, 1)]), 10)
    error = st.take_unreadable()
    assert isinstance(error, errors.CorruptRecordError) and error.offset == 2
    assert "offsets 0..4 cannot be decoded from offset 2 on (UnicodeDecodeError" in str(error)
    assert "3 record(s) acquired for this consumer from there were rejected" in str(error)
    recs = st.poll(100, 20)
    assert [r.offset for r in recs] == [0, 1]
    for rec in recs:
        st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 30)
    (part,) = plan(st, 40)[1].body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 0, "last_offset": 4,
                                                "acknowledge_types": [1, 1, 3, 3, 3]}]
