"""KIP-227 fetch sessions, driven through ``FetchState`` (plan, body, answer) and ``FetchSession`` directly."""

from __future__ import annotations

from typing import Any

from akresil import errors
from akresil.core.fetch_session import FetchSession
from akresil.core.fetch_state import FetchRequest, FetchState
from akresil.protocol.api import ApiKey, decode_request, encode_request

from .test_fetch_state import T, TID, TP0, TP1, TP2, batch, fetch_state, metadata, response


def setup(n: int = 3) -> tuple[FetchState, Any]:
    cache = metadata({p: (1, 0) for p in range(n)})
    st = fetch_state()
    st.assign([TP0, TP1, TP2][:n])
    for tp in (TP0, TP1, TP2)[:n]:
        st.seek(tp, 0)
    return st, cache


def send(st: FetchState, cache: Any, now: float = 0, version: int = 16) -> tuple[FetchRequest, dict[str, Any]]:
    plan = st.plan_fetches(now, cache.snapshot)
    assert len(plan.requests) == 1, plan
    req = plan.requests[0]
    st.begin_fetch(req)
    return req, on_the_wire(st.build_request_body(req, version, max_wait_ms=500, min_bytes=1), version)


def on_the_wire(body: dict[str, Any], version: int) -> dict[str, Any]:
    """The body with its topics and forgotten topics as a broker reads them (the generic decoder over the packed
    request's bytes)."""
    wire = decode_request(encode_request(ApiKey.FETCH, version, 1, "c", body)[4:])[1]
    return dict(body, topics=wire["topics"], forgotten_topics_data=wire.get("forgotten_topics_data", []))


def listed(body: dict[str, Any]) -> list[tuple[int, int]]:
    return [(p["partition"], p["fetch_offset"]) for t in body["topics"] for p in t["partitions"]]


def forgotten(body: dict[str, Any]) -> list[tuple[Any, list[int]]]:
    return [(t.get("topic_id", t.get("topic")), t["partitions"]) for t in body["forgotten_topics_data"]]


def test_first_fetch_is_full_then_only_changed_partitions_are_listed() -> None:
    st, cache = setup()
    req, body = send(st, cache)
    assert (body["session_id"], body["session_epoch"]) == (0, 0)            # full: make a session
    assert listed(body) == [(0, 0), (1, 0), (2, 0)]
    st.on_fetch_response(req, response({TP0: {"high_watermark": 2, "records": batch(0, [b"a", b"b"])},
                                        TP1: {"high_watermark": 0}, TP2: {"high_watermark": 0}},
                                       by_id=True, session_id=77), 1, cache)
    assert [r.value for r in st.drain(10)[TP0]] == [b"a", b"b"]
    req, body = send(st, cache, 2)
    assert (body["session_id"], body["session_epoch"]) == (77, 1)
    assert listed(body) == [(0, 2)]                   # TP1 and TP2 are in the session as they are
    assert forgotten(body) == []
    assert {p.tp for p in req.partitions} == {TP0, TP1, TP2}    # all of them are in the Fetch all the same
    # an incremental answer lists only partitions with news; the others are free for the next Fetch
    st.on_fetch_response(req, response({TP2: {"high_watermark": 1, "records": batch(0, [b"c"])}}, by_id=True,
                                       session_id=77), 3, cache)
    assert [r.value for r in st.drain(10)[TP2]] == [b"c"]
    req, body = send(st, cache, 4)
    assert (body["session_id"], body["session_epoch"]) == (77, 2)
    assert listed(body) == [(2, 1)]
    assert st.session_counts() == {"full": 1, "incremental": 2}


def test_partitions_that_leave_the_fetch_are_forgotten_by_id_from_v13_and_by_name_before() -> None:
    for version, key in ((16, TID), (12, T)):
        st, cache = setup()
        req, _ = send(st, cache, version=version)
        st.on_fetch_response(req, response({tp: {"high_watermark": 0} for tp in (TP0, TP1, TP2)},
                                           by_id=version >= 13, session_id=5), 1, cache)
        st.pause([TP1])
        st.assign([TP0, TP1])                 # TP2 unassigned, TP1 paused: both leave the session
        req, body = send(st, cache, 2, version=version)
        assert (body["session_id"], body["session_epoch"]) == (5, 1)
        assert listed(body) == []
        assert forgotten(body) == [(key, [2, 1])] or forgotten(body) == [(key, [1, 2])]
        st.resume([TP1])
        st.on_fetch_response(req, response({}, by_id=version >= 13, session_id=5), 3, cache)
        _, body = send(st, cache, 4, version=version)
        assert listed(body) == [(1, 0)]      # back in the session: listed again


def test_a_broker_that_keeps_no_session_gets_full_fetches() -> None:
    """librdkafka's mock echoes session id 0: every Fetch stays full, listing every partition."""
    st, cache = setup()
    for now in range(3):
        req, body = send(st, cache, now)
        assert (body["session_id"], body["session_epoch"]) == (0, 0)
        assert listed(body) == [(0, 0), (1, 0), (2, 0)]
        st.on_fetch_response(req, response({tp: {"high_watermark": 0} for tp in (TP0, TP1, TP2)}, by_id=True,
                                           session_id=0), now + 0.5, cache)
    assert st.session_counts() == {"full": 3, "incremental": 0}


def in_session(st: FetchState, cache: Any) -> None:
    req, _ = send(st, cache)
    st.on_fetch_response(req, response({tp: {"high_watermark": 0} for tp in (TP0, TP1, TP2)}, by_id=True,
                                       session_id=9), 1, cache)
    req, body = send(st, cache, 2)
    assert (body["session_id"], body["session_epoch"], listed(body)) == (9, 1, [])
    return req


def test_session_id_not_found_starts_over_at_once_without_backoff() -> None:
    st, cache = setup()
    req = in_session(st, cache)
    outcome = st.on_fetch_response(req, response({}, by_id=True, session_id=0,
                                                 error_code=errors.FetchSessionIdNotFoundError.errno), 3, cache)
    assert outcome.replan and outcome.refresh is None
    _, body = send(st, cache, 3)               # at once: no partition backs off for a session error
    assert (body["session_id"], body["session_epoch"]) == (0, 0)
    assert listed(body) == [(0, 0), (1, 0), (2, 0)]


def test_an_invalid_epoch_closes_the_session_and_asks_for_a_new_one() -> None:
    st, cache = setup()
    req = in_session(st, cache)
    st.on_fetch_response(req, response({}, by_id=True, session_id=9,
                                       error_code=errors.InvalidFetchSessionEpochError.errno), 3, cache)
    _, body = send(st, cache, 3)
    assert (body["session_id"], body["session_epoch"]) == (9, 0)
    assert listed(body) == [(0, 0), (1, 0), (2, 0)]


def test_a_topic_id_error_refreshes_the_metadata_and_sends_a_full_fetch() -> None:
    st, cache = setup()
    req = in_session(st, cache)
    outcome = st.on_fetch_response(req, response({}, by_id=True, session_id=9,
                                                 error_code=errors.FetchSessionTopicIdError.errno), 3, cache)
    assert outcome.refresh == "fetch-session-topic-id"
    _, body = send(st, cache, 3)
    assert (body["session_id"], body["session_epoch"]) == (9, 0)


def test_a_failed_fetch_closes_the_session_and_asks_for_a_new_one() -> None:
    st, cache = setup()
    req = in_session(st, cache)
    st.on_fetch_failed(req, 3, node_backing_off=True)       # the connection closed
    _, body = send(st, cache, 3)
    assert (body["session_id"], body["session_epoch"]) == (9, 0)
    assert listed(body) == [(0, 0), (1, 0), (2, 0)]


def test_an_incremental_answer_without_a_session_id_ends_the_session() -> None:
    st, cache = setup()
    req = in_session(st, cache)
    st.on_fetch_response(req, response({}, by_id=True, session_id=0), 3, cache)
    _, body = send(st, cache, 4)
    assert (body["session_id"], body["session_epoch"]) == (0, 0)


def test_no_session_fields_below_v7_and_a_session_restarts_when_the_version_crosses_13() -> None:
    st, cache = setup(1)
    req, body = send(st, cache, version=6)
    assert (body["session_id"], body["session_epoch"]) == (0, -1)
    st.on_fetch_response(req, response({TP0: {"high_watermark": 0}}), 1, cache)
    req, body = send(st, cache, 2, version=16)
    assert body["session_epoch"] == 0
    st.on_fetch_response(req, response({TP0: {"high_watermark": 0}}, by_id=True, session_id=4), 3, cache)
    req, body = send(st, cache, 4, version=12)      # a topic lost its id: names, a new session
    assert (body["session_id"], body["session_epoch"], listed(body)) == (4, 0, [(0, 0)])


def test_a_recreated_topic_is_forgotten_under_its_old_id_and_listed_under_the_new() -> None:
    session = FetchSession(1)
    old, new = b"\x01" * 16, b"\x02" * 16
    assert session.build([(TP0, 5, 0, 0)], {T: old}, 16).full
    assert session.on_response(0, 3)
    req = session.build([(TP0, 5, 0, 0)], {T: new}, 16)
    assert (req.session_id, req.epoch, list(req.send), req.forgotten) == (3, 1, [0], [(T, 0, old)])


def test_epochs_count_up_and_wrap_to_1() -> None:
    session = FetchSession(1)
    session.build([(TP0, 0, 0, 0)], {T: TID}, 16)
    session.on_response(0, 3)
    assert session.epoch == 1
    session.build([(TP0, 0, 0, 0)], {T: TID}, 16)
    session.on_response(0, 3)
    assert session.epoch == 2
    session.epoch = 2**31 - 1
    session.build([(TP0, 0, 0, 0)], {T: TID}, 16)
    session.on_response(0, 3)
    assert session.epoch == 1


def test_close_sends_the_final_epoch_with_no_partitions() -> None:
    st, cache = setup()
    req = in_session(st, cache)
    assert st.close_sessions() == {1: 9}
    body = st.build_close_body(9, min_bytes=1)
    assert (body["session_id"], body["session_epoch"], body["topics"], body["max_wait_ms"]) == (9, -1, [], 0)
    assert (st.sessions[1].session_id, st.sessions[1].epoch) == (0, 0)     # forgotten here
    st.on_fetch_response(req, response({}, by_id=True, session_id=9), 3, cache)   # a late answer changes nothing
    assert st.close_sessions() == {}
    assert FetchSession(2).close() == 0         # nothing to close
