"""ShareFetchState's buffer of lock chunks (issue 27): records held per acquired range, not per record object;
handed out by partition; commits that ride a fetch only when the application has nothing else to take."""

from __future__ import annotations

from akresil import errors
from akresil.core.share_state import AckType, PlanKind
from akresil.types import ShareRecord

from tests.unit.test_share_state import TID, TP0, TP1, batch, fetch_answer, plan, state


def test_poll_by_partition_groups_by_partition_and_honours_the_limit_across_chunks() -> None:
    st = state()
    plans = plan(st, 0)
    st.on_fetch_response(plans[1], fetch_answer(0, batch(0, 3), [(0, 2, 1)]), 10)
    st.on_fetch_response(plans[2], fetch_answer(1, batch(0, 4), [(0, 3, 1)]), 10)
    assert st.buffered == 7
    first = st.poll_by_partition(5, 20)
    assert {tp: [r.offset for r in recs] for tp, recs in first.items()} == {TP0: [0, 1, 2], TP1: [0, 1]}
    assert all(isinstance(r, ShareRecord) and r.delivery_count == 1 for recs in first.values() for r in recs)
    assert st.buffered == 2 and st.held_count() == 5
    rest = st.poll_by_partition(5, 20)
    assert {tp: [r.offset for r in recs] for tp, recs in rest.items()} == {TP1: [2, 3]}
    assert st.poll_by_partition(5, 20) == {}


def test_records_of_a_partly_handed_out_chunk_are_held_but_not_delivered() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 4), [(0, 3, 1)]), 10)
    (a, b) = st.poll(2, 20)
    st.acknowledge(TP0, b.offset, AckType.ACCEPT, 30)
    try:
        st.acknowledge(TP0, 2, AckType.ACCEPT, 30)      # buffered, not handed out yet
    except errors.IllegalStateError as exc:
        assert "not held" in str(exc)
    else:
        raise AssertionError("a buffered record was acknowledged")
    assert [r.offset for r in st.poll(10, 40)] == [2, 3]


def test_ranges_with_different_delivery_counts_keep_their_own_counts_and_locks() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 6), [(0, 1, 1), (2, 3, 4), (5, 5, 2)]), 10)
    got = st.poll(10, 20)
    assert [(r.offset, r.delivery_count) for r in got] == [(0, 1), (1, 1), (2, 4), (3, 4), (5, 2)]
    # an acknowledgement must name the record's own delivery
    st.acknowledge(TP0, 2, AckType.ACCEPT, 30, delivery_count=1)
    assert isinstance(st.take_results()[TP0], errors.AcquisitionLockExpiredError)
    for r in got:
        if r.offset != 2:
            st.acknowledge(TP0, r.offset, AckType.RELEASE, 30, delivery_count=r.delivery_count)
    st.acknowledge(TP0, 2, AckType.REJECT, 30, delivery_count=4)
    (part,) = plan(st, 40)[1].body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [
        {"first_offset": 0, "last_offset": 3, "acknowledge_types": [2, 2, 3, 2]},
        {"first_offset": 5, "last_offset": 5, "acknowledge_types": [2]}]


def test_accept_delivered_accepts_what_is_still_held_and_skips_the_rest() -> None:
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 4), [(0, 3, 1)]), 10)
    got = st.poll(10, 20)
    st.acknowledge(TP0, 1, AckType.REJECT, 25, delivery_count=1)      # settled otherwise before the implicit accept
    st.accept_delivered(got, 30)
    assert st.held_count() == 0
    (part,) = plan(st, 40)[1].body["topics"][0]["partitions"]
    assert part["acknowledgement_batches"] == [{"first_offset": 0, "last_offset": 3,
                                                "acknowledge_types": [1, 3, 1, 1]}]
    # an implicit accept after the lock ran out is reported, not sent
    st2 = state()
    p2 = plan(st2, 0)[1]
    st2.on_fetch_response(p2, fetch_answer(0, batch(0, 2), [(0, 1, 1)]), 10)
    late = st2.poll(10, 20)
    st2.accept_delivered(late, 1000)      # sent at 0, lock 1000 ms
    assert isinstance(st2.take_results()[TP0], errors.AcquisitionLockExpiredError)
    assert st2.held_count() == 0


def test_accept_delivered_checks_every_record_of_a_run_against_its_lock() -> None:
    """Records of one lock after the first are checked against that lock's delivery count and the highest offset
    handed out kept for the run: an older delivery's record, or one never handed out, in the middle of a run is
    skipped, and the run goes on after it."""
    st = state()
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 5), [(0, 4, 2)]), 10)
    got = st.poll(3, 20)                    # offsets 0..2 handed out; 3 and 4 buffered
    stale = got[1]._replace(delivery_count=1)           # offset 1 as an earlier delivery handed it out
    unheld = got[2]._replace(offset=3)                  # held by the lock, but not handed out yet
    st.accept_delivered([got[0], stale, unheld, got[2]], 30)
    assert st._sessions[1].pending[TP0] == {0: AckType.ACCEPT, 2: AckType.ACCEPT}
    assert st.held_count() == 1             # offset 1: its delivery-2 record was not accepted
    st.acknowledge(TP0, 1, AckType.RELEASE, 30, delivery_count=2)
    assert st.take_results() == {}
    assert [r.offset for r in st.poll(10, 40)] == [3, 4]


def test_accept_delivered_settles_interleaved_locks_of_two_partitions_each_once() -> None:
    """The implicit accept counts each lock's settled records per run; records of two partitions (two locks,
    two sessions) handed back interleaved must each leave their own lock, so both sessions owe nothing and both
    partitions' accepts go out."""
    st = state()
    plans = plan(st, 0)
    st.on_fetch_response(plans[1], fetch_answer(0, batch(0, 3), [(0, 2, 1)]), 10)
    st.on_fetch_response(plans[2], fetch_answer(1, batch(0, 3), [(0, 2, 1)]), 10)
    got = st.poll_by_partition(10, 20)
    a, b = got[TP0], got[TP1]
    interleaved = [a[0], b[0], a[1], b[1], a[2], b[2]]
    st.accept_delivered(interleaved, 30)
    assert st.held_count() == 0
    sent = {node: p.body["topics"][0]["partitions"] for node, p in plan(st, 40).items()}
    assert [part["acknowledgement_batches"] for parts in sent.values() for part in parts] == [
        [{"first_offset": 0, "last_offset": 2, "acknowledge_types": [1]}]] * 2    # one type for the range
    assert st.take_results() == {}


def test_a_newer_acquisition_of_a_buffered_offset_stops_the_older_one_being_handed_out() -> None:
    """The leader moved: the new leader acquires an offset the old leader's answer still holds in the buffer
    (its session then lost). Only the newer delivery may reach the application."""
    st = state()
    leaders = {TP0: 1, TP1: 2}
    plans = {p.node_id: p for p in st.plan(0, leader_of=leaders.get, topic_id_of=lambda t: TID)}
    st.on_fetch_response(plans[1], fetch_answer(0, batch(0, 3), [(0, 2, 1)]), 10)
    leaders[TP0] = 2                    # partition 0 now led by node 2, which hands offsets 1..2 out again
    st.on_fetch_response(plans[2], fetch_answer(1, b"", []), 10)
    p2 = {p.node_id: p for p in st.plan(20, leader_of=leaders.get, topic_id_of=lambda t: TID)}[2]
    st.on_fetch_response(p2, fetch_answer(0, batch(0, 3), [(1, 2, 2)]), 30)
    got = st.poll(10, 40)
    assert [(r.offset, r.delivery_count) for r in got] == [(0, 1), (1, 2), (2, 2)]


def test_a_commit_goes_alone_while_other_leaders_records_are_buffered() -> None:
    """Issue 27: with another leader's records buffered the application is not waiting for records, so the commit
    is a ShareAcknowledge (answered without reading the log) and the fetch follows; with nothing buffered it rides
    the fetch (one round trip, see test_share_state)."""
    st = state()
    plans = plan(st, 0)
    st.on_fetch_response(plans[1], fetch_answer(0, batch(0, 2), [(0, 1, 1)]), 10)
    st.on_fetch_response(plans[2], fetch_answer(1, batch(0, 2), [(0, 1, 1)]), 10)
    for rec in st.poll_by_partition(2, 20)[TP0]:
        st.acknowledge(TP0, rec.offset, AckType.ACCEPT, 30)
    assert st.buffered == 2                    # node 2's records wait for the next poll
    nodes = st.request_commit()
    (p,) = plan(st, 40).values()
    assert p.node_id == 1 and p.kind is PlanKind.ACKNOWLEDGE
    st.on_ack_response(p, {"throttle_time_ms": 0, "error_code": 0, "responses": [], "node_endpoints": []}, 50)
    assert st.settled(nodes) and st.take_results() == {TP0: None}
    (f,) = plan(st, 60).values()
    assert f.node_id == 1 and f.kind is PlanKind.FETCH and f.body["max_wait_ms"] == st.max_wait_ms


def test_batch_optimized_polls_finish_the_acquired_range_and_fetches_ask_for_max_poll_records() -> None:
    """share_acquire_mode="batch_optimized" (the Java client's default): a poll reaches max_poll_records by whole
    acquired ranges, so an answer a broker rounded up to whole batches is one poll (and one commit)."""
    st = state(max_records=3, whole_batches=True)
    plans = plan(st, 0)
    assert plans[1].body["max_records"] == 3
    st.on_fetch_response(plans[1], fetch_answer(0, batch(0, 5), [(0, 4, 1)]), 10)    # rounded up: 5 for 3
    st.on_fetch_response(plans[2], fetch_answer(1, batch(0, 2), [(0, 1, 1)]), 10)
    first = st.poll_by_partition(3, 20, whole=True)
    assert {tp: [r.offset for r in recs] for tp, recs in first.items()} == {TP0: [0, 1, 2, 3, 4]}
    assert {tp: [r.offset for r in recs] for tp, recs in st.poll_by_partition(3, 20, whole=True).items()} == {
        TP1: [0, 1]}
    for tp, n in ((TP0, 5), (TP1, 2)):
        for off in range(n):
            st.acknowledge(tp, off, AckType.ACCEPT, 30)
    assert plan(st, 40)[1].body["max_records"] == 3      # not shrunk to fit: the next answer is one poll anyway


def test_record_limit_polls_stop_at_the_limit_and_fetches_shrink_to_fit() -> None:
    st = state(max_records=3)
    p = plan(st, 0)[1]
    st.on_fetch_response(p, fetch_answer(0, batch(0, 5), [(0, 4, 1)]), 10)
    assert [r.offset for r in st.poll(3, 20)] == [0, 1, 2]
    assert [r.offset for r in st.poll(3, 20)] == [3, 4]
