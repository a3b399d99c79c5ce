"""The demo's proof: acknowledgements against the log and what the consumer read (akresil.demo._summary)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from akresil.demo import DemoState, _summary


def _run(state: DemoState) -> tuple[bool, list[str]]:
    lines: list[str] = []
    return _summary(state, 1, CollectorRegistry(), 1.0, lines.append), lines


def _state(acked: dict[int, tuple[int, int]], consumed: dict[int, tuple[int, int]], highwater: int) -> DemoState:
    state = DemoState(sent=len(acked), acked=acked, consumed=consumed)
    state.highwater = {0: highwater}
    return state


def test_every_ack_at_its_read_offset_passes() -> None:
    places = {i: (0, i) for i in range(4)}
    assert _run(_state(dict(places), dict(places), 4))[0]


def test_a_retried_duplicate_without_an_offset_is_placed_where_it_was_read() -> None:
    # Tansu answers a retry of an appended batch DUPLICATE_SEQUENCE_NUMBER: offset -1, as Java reports it
    acked = {0: (0, 0), 1: (0, -1), 2: (0, -1), 3: (0, 3)}
    passed, lines = _run(_state(acked, {i: (0, i) for i in range(4)}, 4))
    assert passed
    assert any("2 acknowledged without an offset" in line for line in lines)


def test_an_ack_naming_another_records_offset_fails() -> None:
    acked = {0: (0, 0), 1: (0, 2), 2: (0, 1)}            # 1 and 2 swapped: each read elsewhere
    passed, lines = _run(_state(acked, {i: (0, i) for i in range(3)}, 3))
    assert not passed
    assert any("[FAIL] each acknowledged offset is where its record was read: 2 differ" in line for line in lines)


def test_a_record_read_twice_or_missing_fails() -> None:
    places = {i: (0, i) for i in range(3)}
    assert not _run(_state(dict(places), {0: (0, 0), 1: (0, 1)}, 3))[0]
    state = _state(dict(places), dict(places), 3)
    state.consumed_duplicates = 1
    assert not _run(state)[0]
