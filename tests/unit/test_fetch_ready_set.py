"""``FetchState``'s ready set: a plan visits only partitions something made fetchable, so every event that makes
one fetchable (a seek, a resume, an answer, a drain, a leader move, room in the buffer) must put it back. Each
test makes a partition fetchable while another node is busy (so the plan cannot skip the scan as a whole) and
checks that the very next plan carries it."""

from __future__ import annotations



from akresil.core.fetch_state import FetchPlan, FetchState
from akresil.core.metadata import MetadataCache

from .test_fetch_state import TP0, TP1, TP2, _held_and_caught_up, batch, fetch_state, metadata, response


def nodes(plan: FetchPlan) -> dict[int, list[tuple[int, int]]]:
    return {r.node: [(p.tp.partition, p.fetch_offset) for p in r.partitions] for r in plan.requests}


def started(st: FetchState, plan: FetchPlan) -> FetchPlan:
    for r in plan.requests:
        st.begin_fetch(r)
    return plan


def test_a_seek_while_another_node_is_busy_is_in_the_next_plan() -> None:
    cache = metadata({0: (1, 0), 1: (2, 0)})
    st = fetch_state()
    st.assign([TP0, TP1])
    st.seek(TP0, 5)
    assert nodes(started(st, st.plan_fetches(0, cache.snapshot))) == {1: [(0, 5)]}
    st.seek(TP1, 7)                       # had no position: not in any plan until now
    assert nodes(st.plan_fetches(0, cache.snapshot)) == {2: [(1, 7)]}


def test_a_seek_of_a_partition_in_flight_is_fetched_from_the_new_offset_after_the_answer() -> None:
    cache = metadata({0: (1, 0), 1: (1, 0)})
    st = fetch_state()
    st.assign([TP0, TP1])
    st.seek(TP0, 5)
    st.seek(TP1, 5)
    (req,) = started(st, st.plan_fetches(0, cache.snapshot)).requests
    st.seek(TP0, 50)
    assert st.plan_fetches(0, cache.snapshot).requests == []           # node 1 is busy
    st.on_fetch_response(req, response({TP0: {}, TP1: {}}), 1, cache)
    assert nodes(st.plan_fetches(1, cache.snapshot)) == {1: [(0, 50), (1, 5)]}


def test_a_resume_while_another_node_is_busy_is_in_the_next_plan() -> None:
    cache = metadata({0: (1, 0), 1: (2, 0)})
    st = fetch_state()
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    st.pause([TP1])
    assert nodes(started(st, st.plan_fetches(0, cache.snapshot))) == {1: [(0, 0)]}
    assert st.plan_fetches(0, cache.snapshot).requests == []
    st.resume([TP1])
    assert nodes(st.plan_fetches(0, cache.snapshot)) == {2: [(1, 0)]}


def test_an_answer_while_another_node_is_busy_puts_its_partitions_in_the_next_plan() -> None:
    cache = metadata({0: (1, 0), 1: (2, 0), 2: (1, 0)})
    st = fetch_state()
    st.assign([TP0, TP1, TP2])
    for tp in (TP0, TP1, TP2):
        st.seek(tp, 0)
    by_node = {r.node: r for r in started(st, st.plan_fetches(0, cache.snapshot)).requests}
    st.on_fetch_response(by_node[1], response({TP0: {"high_watermark": 0}, TP2: {"high_watermark": 0}}), 1, cache)
    assert nodes(st.plan_fetches(1, cache.snapshot)) == {1: [(0, 0), (2, 0)]}


def test_a_failed_fetch_puts_its_partitions_back_after_their_backoff() -> None:
    cache = metadata({0: (1, 0), 1: (2, 0)})
    st = fetch_state(retry_backoff_ms=100, retry_backoff_max_ms=100)
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    by_node = {r.node: r for r in started(st, st.plan_fetches(0, cache.snapshot)).requests}
    st.on_fetch_failed(by_node[1], 10)
    plan = st.plan_fetches(10, cache.snapshot)
    assert plan.requests == [] and plan.wake_at is not None
    assert nodes(st.plan_fetches(plan.wake_at, cache.snapshot)) == {1: [(0, 0)]}


def test_a_caught_up_partition_with_records_buffered_rejoins_when_drained() -> None:
    cache = metadata({0: (1, 0), 1: (2, 0)})
    st = fetch_state()
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    by_node = {r.node: r for r in started(st, st.plan_fetches(0, cache.snapshot)).requests}
    st.on_fetch_response(by_node[1], response({TP0: {"high_watermark": 2, "records": batch(0, [b"a", b"b"])}}),
                         1, cache)
    assert st.plan_fetches(1, cache.snapshot).requests == []   # caught up: a Fetch would only long-poll
    assert [r.value for r in st.drain(10)[TP0]] == [b"a", b"b"]
    assert nodes(st.plan_fetches(2, cache.snapshot)) == {1: [(0, 2)]}


def test_a_partition_at_its_prefetch_bound_rejoins_when_drained() -> None:
    cache = metadata({0: (1, 0), 1: (2, 0)})
    st = fetch_state(max_partition_fetch_bytes=10)
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    by_node = {r.node: r for r in started(st, st.plan_fetches(0, cache.snapshot)).requests}
    st.on_fetch_response(by_node[1], response({TP0: {"high_watermark": 100, "records": batch(0, [b"a", b"b"])}}),
                         1, cache)
    assert st.plan_fetches(1, cache.snapshot).requests == []   # its buffer is over the bound
    st.drain(1)
    assert nodes(st.plan_fetches(2, cache.snapshot)) == {1: [(0, 2)]}


def test_partitions_held_by_the_buffer_bound_rejoin_when_the_buffer_has_room() -> None:
    cache = metadata({0: (1, 0), 1: (1, 0), 2: (2, 0)})
    one = batch(0, [b"a"])
    st = fetch_state(max_buffered_bytes=len(one) + 1)    # room for one batch
    st.assign([TP0, TP1, TP2])
    for tp in (TP0, TP1, TP2):
        st.seek(tp, 0)
    by_node = {r.node: r for r in started(st, st.plan_fetches(0, cache.snapshot)).requests}
    more = {"high_watermark": 100}
    st.on_fetch_response(by_node[1], response({TP0: {**more, "records": one}, TP1: {**more, "records": one}}), 1,
                         cache)
    assert st.plan_fetches(1, cache.snapshot).requests == []   # the buffer is full
    assert list(st.drain(1)) == [TP0]     # room again: TP1, not drained, rejoins with TP0
    assert nodes(st.plan_fetches(2, cache.snapshot)) == {1: [(0, 1), (1, 1)]}


def test_a_partition_waiting_for_a_busy_node_follows_a_leader_move() -> None:
    cache = metadata({0: (1, 0), 1: (1, 0), 2: (3, 0)})
    st = fetch_state()
    st.assign([TP0, TP1, TP2])
    st.seek(TP0, 0)
    st.seek(TP2, 0)
    assert set(nodes(started(st, st.plan_fetches(0, cache.snapshot)))) == {1, 3}
    st.seek(TP1, 4)
    assert st.plan_fetches(0, cache.snapshot).requests == []   # its leader, node 1, is busy
    moved = metadata({0: (1, 0), 1: (2, 1), 2: (3, 0)})
    assert nodes(st.plan_fetches(1, moved.snapshot)) == {2: [(1, 4)]}


def test_a_partition_without_a_leader_is_planned_once_the_metadata_names_one() -> None:
    cache = metadata({0: (1, 0), 1: (-1, 0)})
    st = fetch_state()
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    plan = started(st, st.plan_fetches(0, cache.snapshot))
    assert nodes(plan) == {1: [(0, 0)]} and plan.needs_metadata
    again = st.plan_fetches(0, cache.snapshot)
    assert again.requests == [] and again.needs_metadata      # still asks for the metadata it waits for
    found = metadata({0: (1, 0), 1: (2, 0)})
    assert nodes(st.plan_fetches(1, found.snapshot)) == {2: [(1, 0)]}


def test_a_plan_not_sent_is_planned_again() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state()
    st.assign([TP0])
    st.seek(TP0, 3)
    assert nodes(st.plan_fetches(0, cache.snapshot)) == {1: [(0, 3)]}
    assert nodes(st.plan_fetches(0, cache.snapshot)) == {1: [(0, 3)]}


def test_unassigned_partitions_leave_the_ready_set() -> None:
    cache = metadata({0: (1, 0), 1: (1, 0)})
    st = fetch_state()
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    st.assign([TP1])
    assert nodes(st.plan_fetches(0, cache.snapshot)) == {1: [(1, 0)]}


def test_a_partition_that_waited_for_its_busy_node_goes_with_that_nodes_next_fetch() -> None:
    cache = metadata({0: (1, 0), 1: (1, 0)})
    st = fetch_state()
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    (req,) = started(st, st.plan_fetches(0, cache.snapshot)).requests
    st.seek(TP1, 9)
    assert st.plan_fetches(0, cache.snapshot).requests == []   # node 1 is busy: TP1 waits for it
    st.on_fetch_response(req, response({TP0: {"high_watermark": 0}}), 1, cache)
    assert nodes(st.plan_fetches(1, cache.snapshot)) == {1: [(0, 0), (1, 9)]}


def _deferred_caught_up() -> tuple[FetchState, MetadataCache]:
    """TP0 (node 1) holds its prefetch bound with records left on the broker; TP1 (node 1) is caught up, so node
    1's Fetch would only long-poll: it is deferred while the application drains TP0."""
    st, cache = _held_and_caught_up()
    assert st.plan_fetches(0, cache.snapshot).requests == []
    return st, cache


def test_a_deferred_fetch_leaves_the_ready_set_so_later_polls_do_not_rescan_it() -> None:
    # at 10,000 partitions every poll is a plan: a deferred Fetch of thousands of caught-up partitions, left in
    # the ready set, was visited again by each of them
    st, cache = _deferred_caught_up()
    assert TP1 not in st._fetchable
    st.drain(4)                                   # TP0 still held: still deferred
    assert st.plan_fetches(0, cache.snapshot).requests == []
    assert TP1 not in st._fetchable
    st.drain(1)                                   # TP0 has room: one Fetch carries both
    assert sorted(nodes(st.plan_fetches(0, cache.snapshot))[1]) == [(0, 16), (1, 0)]


def test_a_seek_of_a_deferred_partition_sends_the_fetch_with_the_partitions_set_aside() -> None:
    st, cache = _deferred_caught_up()
    st.seek(TP1, 0)                               # the same offset: still caught up, still deferred
    assert st.plan_fetches(0, cache.snapshot).requests == []
    st.partitions[TP1].high_watermark = 5       # as an answer would say, then a seek makes it fetchable
    st.seek(TP1, 1)
    assert sorted(nodes(st.plan_fetches(0, cache.snapshot))[1]) == [(1, 1)]


def test_a_metadata_change_releases_deferred_partitions() -> None:
    st, cache = _deferred_caught_up()
    moved = metadata({0: (1, 0), 1: (2, 0)})     # TP1's leader moved to node 2, not held: it goes there
    assert nodes(st.plan_fetches(0, moved.snapshot)) == {2: [(1, 0)]}
