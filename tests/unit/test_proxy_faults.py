"""FaultState: the fault proxy's pure decisions, driven with plain dicts and an explicit clock."""

from __future__ import annotations

import pytest

from akresil.protocol import api as codec
from akresil.testing.faults import (FAILABLE_APIS, FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER,
                                    UNKNOWN_LEADER_EPOCH, FaultState, Throttle, collect_error_codes,
                                    error_response_body, has_throttle_field, partition_errors, request_partitions,
                                    throttle_mutes_client)

PRODUCE, FETCH, METADATA = 0, 1, 3


def make_state(n: int = 3, **kw: object) -> FaultState:
    st = FaultState(list(range(1, n + 1)), **kw)  # type: ignore[arg-type]
    for node in range(1, n + 1):
        st.set_endpoint(node, "127.0.0.1", 9000 + node)
    return st


def metadata_body(topic: str = "t", partitions: int = 4, epoch: int = 0, topic_id: bytes = b"\x01" * 16) -> dict:
    return {"throttle_time_ms": 0, "brokers": [{"node_id": 111, "host": "real", "port": 1, "rack": None}],
            "cluster_id": "c", "controller_id": 111,
            "topics": [{"error_code": 0, "name": topic, "topic_id": topic_id, "is_internal": False,
                        "partitions": [{"error_code": 0, "partition_index": i, "leader_id": 111,
                                        "leader_epoch": epoch, "replica_nodes": [111], "isr_nodes": [111],
                                        "offline_replicas": []} for i in range(partitions)]}]}


def produce_request(parts: dict[str, list[int]]) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 1000,
            "topic_data": [{"name": t, "partition_data": [{"index": p, "records": b"x"} for p in ps]}
                           for t, ps in parts.items()]}


def fetch_request(parts: dict[str, list[int]], epoch: int = -1) -> dict:
    return {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "topic_id": b"\x01" * 16,
                        "partitions": [{"partition": p, "current_leader_epoch": epoch, "fetch_offset": 0,
                                        "last_fetched_epoch": -1, "log_start_offset": -1,
                                        "partition_max_bytes": 1 << 20} for p in ps]}
                       for t, ps in parts.items()],
            "forgotten_topics_data": [], "rack_id": ""}


# ------------------------------------------------------------------------------------------- topology
def test_default_leaders_round_robin_and_real_epoch() -> None:
    st = make_state()
    body = st.rewrite_metadata(metadata_body(epoch=5), 12, now_ms=0)
    assert [b["node_id"] for b in body["brokers"]] == [1, 2, 3]
    assert [b["port"] for b in body["brokers"]] == [9001, 9002, 9003]
    assert body["controller_id"] == 1
    parts = body["topics"][0]["partitions"]
    assert [p["leader_id"] for p in parts] == [1, 2, 3, 1]
    assert all(p["leader_epoch"] == 5 for p in parts)
    assert parts[1]["replica_nodes"][0] == 2 and sorted(parts[1]["replica_nodes"]) == [1, 2, 3]
    assert st.known_partitions() == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]


def test_metadata_keeps_brokers_answer_when_it_has_no_leader() -> None:
    st = make_state()
    body = metadata_body(partitions=1)
    body["topics"][0]["partitions"][0].update(leader_id=-1, error_code=5)
    st.rewrite_metadata(body, 12, now_ms=0)
    assert body["topics"][0]["partitions"][0]["leader_id"] == -1


def test_bad_node_ids_are_rejected_with_names() -> None:
    with pytest.raises(ValueError, match="nodes"):
        FaultState([])
    with pytest.raises(ValueError, match="duplicate"):
        FaultState([1, 1])
    st = make_state()
    with pytest.raises(ValueError, match="to_node: 7"):
        st.move_leader("t", 0, 7, now_ms=0)
    with pytest.raises(ValueError, match="partition"):
        st.move_leader("t", -1, 2, now_ms=0)
    with pytest.raises(ValueError, match="coordinator_node"):
        FaultState([1, 2], coordinator_node=5)


# ------------------------------------------------------------------------------------------- leadership
def test_move_leader_bumps_epoch_and_metadata_follows() -> None:
    st = make_state()
    st.rewrite_metadata(metadata_body(epoch=2), 12, now_ms=0)
    assert st.move_leader("t", 0, 3, now_ms=0) == 3
    assert st.move_leader("t", 0, 2, now_ms=0) == 4
    body = st.rewrite_metadata(metadata_body(epoch=2), 12, now_ms=1)
    p0 = body["topics"][0]["partitions"][0]
    assert (p0["leader_id"], p0["leader_epoch"]) == (2, 4)


def test_stale_metadata_reports_old_view_until_window_ends() -> None:
    st = make_state()
    st.rewrite_metadata(metadata_body(), 12, now_ms=0)
    st.move_leader("t", 1, 3, now_ms=1000, stale_metadata_for_ms=500)
    p1 = st.rewrite_metadata(metadata_body(), 12, now_ms=1499)["topics"][0]["partitions"][1]
    assert (p1["leader_id"], p1["leader_epoch"]) == (2, 0)
    # the old leader already refuses while metadata is stale
    plan = st.plan_partitions(PRODUCE, 10, 2, produce_request({"t": [1]}))
    assert plan.answers[0].error_code == NOT_LEADER_OR_FOLLOWER
    p1 = st.rewrite_metadata(metadata_body(), 12, now_ms=1500)["topics"][0]["partitions"][1]
    assert (p1["leader_id"], p1["leader_epoch"]) == (3, 1)


def test_move_all_leaders_rotates_or_targets() -> None:
    st = make_state()
    st.rewrite_metadata(metadata_body(partitions=3), 12, now_ms=0)
    assert st.move_all_leaders(now_ms=0) == [("t", 0), ("t", 1), ("t", 2)]
    assert [st.leader("t", p)[0] for p in range(3)] == [2, 3, 1]
    assert st.move_all_leaders(3, now_ms=0, from_node=2) == [("t", 0)]
    assert st.leader("t", 0) == (3, 2)


def test_plan_mixed_produce_forwards_rest_and_hints_new_leader() -> None:
    st = make_state()
    st.rewrite_metadata(metadata_body(), 12, now_ms=0)
    st.move_leader("t", 0, 2, now_ms=0)
    req = produce_request({"t": [0, 3]})   # both led by node 1 by default; 0 moved away
    plan = st.plan_partitions(PRODUCE, 10, 1, req)
    assert plan.modified
    assert [(a.partition, a.error_code, a.hint) for a in plan.answers] == [(0, NOT_LEADER_OR_FOLLOWER, (2, 1))]
    assert plan.forward is not None
    assert [p["index"] for p in plan.forward["topic_data"][0]["partition_data"]] == [3]
    assert [p["index"] for p in req["topic_data"][0]["partition_data"]] == [0, 3], "input not mutated"
    # the new leader forwards everything untouched
    plan = st.plan_partitions(PRODUCE, 10, 2, produce_request({"t": [0]}))
    assert not plan.modified and plan.answers == []


def test_hints_only_on_kip951_versions_and_when_enabled() -> None:
    st = make_state()
    st.rewrite_metadata(metadata_body(), 12, now_ms=0)   # Fetch v13+ names topics by id
    st.move_leader("t", 0, 2, now_ms=0)
    assert st.plan_partitions(PRODUCE, 9, 1, produce_request({"t": [0]})).answers[0].hint is None
    assert st.plan_partitions(FETCH, 15, 1, fetch_request({"t": [0]})).answers[0].hint is None
    assert st.plan_partitions(FETCH, 12, 1, fetch_request({"t": [0]})).answers[0].hint is None
    assert st.plan_partitions(FETCH, 12, 1, fetch_request({"t": [0]})).answers[0].error_code == 6
    st.move_leader("t", 0, 3, now_ms=0, hint=False)
    plan = st.plan_partitions(PRODUCE, 11, 1, produce_request({"t": [0]}))
    assert plan.answers[0].hint is None and plan.forward is None


def test_fetch_epoch_fencing_on_the_leader() -> None:
    st = make_state()
    st.move_leader("t", 0, 2, now_ms=0)   # epoch 1
    assert st.plan_partitions(FETCH, 11, 2, fetch_request({"t": [0]}, epoch=0)).answers[0].error_code \
        == FENCED_LEADER_EPOCH
    assert st.plan_partitions(FETCH, 11, 2, fetch_request({"t": [0]}, epoch=2)).answers[0].error_code \
        == UNKNOWN_LEADER_EPOCH
    plan = st.plan_partitions(FETCH, 11, 2, fetch_request({"t": [0]}, epoch=1))
    assert plan.answers == [] and plan.modified
    assert plan.forward is not None
    # the real broker's epoch differs from the virtual one: the proxy asks it not to check
    assert plan.forward["topics"][0]["partitions"][0]["current_leader_epoch"] == -1


def test_fetch_v13_names_topics_by_id_learned_from_metadata() -> None:
    st = make_state()
    st.rewrite_metadata(metadata_body(topic_id=b"\x01" * 16), 12, now_ms=0)
    st.move_leader("t", 1, 3, now_ms=0)
    req = fetch_request({"t": [1]})
    del req["topics"][0]["topic"]
    plan = st.plan_partitions(FETCH, 16, 2, req)
    assert [(a.topic, a.partition, a.hint) for a in plan.answers] == [("t", 1, (3, 1))]
    body = st.merge_answers(FETCH, 16, None, plan.answers)
    assert body["responses"][0]["topic_id"] == b"\x01" * 16
    frame = codec.encode_response(FETCH, 16, 7, body)
    back = codec.decode_response(FETCH, 16, frame[4:])
    part = back["responses"][0]["partitions"][0]
    assert part["error_code"] == 6 and part["current_leader"] == {"leader_id": 3, "leader_epoch": 1}
    assert back["node_endpoints"] == [{"node_id": 3, "host": "127.0.0.1", "port": 9003, "rack": None}]


def test_merge_into_forwarded_produce_response_roundtrips_on_the_wire() -> None:
    st = make_state()
    st.move_leader("t", 0, 2, now_ms=0)
    plan = st.plan_partitions(PRODUCE, 10, 1, produce_request({"t": [0, 3], "u": [0]}))
    upstream = {"responses": [{"name": "t", "partition_responses": [
        {"index": 3, "error_code": 0, "base_offset": 42, "log_append_time_ms": -1, "log_start_offset": 0,
         "record_errors": [], "error_message": None}]}, {"name": "u", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 7, "log_append_time_ms": -1, "log_start_offset": 0,
         "record_errors": [], "error_message": None}]}], "throttle_time_ms": 0}
    upstream = codec.decode_response(PRODUCE, 10, codec.encode_response(PRODUCE, 10, 1, upstream)[4:])
    merged = st.merge_answers(PRODUCE, 10, upstream, plan.answers)
    back = codec.decode_response(PRODUCE, 10, codec.encode_response(PRODUCE, 10, 1, merged)[4:])
    assert partition_errors(PRODUCE, 10, back, st) == {("t", 3): 0, ("t", 0): 6, ("u", 0): 0}
    moved = [p for p in back["responses"][0]["partition_responses"] if p["index"] == 0][0]
    assert moved["current_leader"] == {"leader_id": 2, "leader_epoch": 1}
    assert back["node_endpoints"] == [{"node_id": 2, "host": "127.0.0.1", "port": 9002, "rack": None}]


# ------------------------------------------------------------------------------------------- rules
def test_fail_rules_count_partitions_and_node() -> None:
    st = make_state()
    st.add_fail_rule(PRODUCE, 7, count=2, node=1, partitions=[("t", 0)])
    assert st.needs_partition_plan(PRODUCE) and not st.needs_partition_plan(FETCH)
    assert st.plan_partitions(PRODUCE, 9, 2, produce_request({"t": [0]})).answers == []   # other node
    assert st.plan_partitions(PRODUCE, 9, 1, produce_request({"t": [1]})).answers == []   # other partition
    for _ in range(2):
        plan = st.plan_partitions(PRODUCE, 9, 1, produce_request({"t": [0, 1]}))
        assert [(a.partition, a.error_code) for a in plan.answers] == [(0, 7)]
    assert st.plan_partitions(PRODUCE, 9, 1, produce_request({"t": [0]})).answers == []   # used up
    assert not st.needs_partition_plan(PRODUCE)


def test_fail_rule_for_whole_requests_and_forever() -> None:
    st = make_state()
    st.add_fail_rule(METADATA, 3, count=None)
    assert [st.take_fail(METADATA, 1) for _ in range(3)] == [3, 3, 3]
    st.clear()
    assert st.take_fail(METADATA, 1) is None


def test_fail_rule_validation() -> None:
    st = make_state()
    with pytest.raises(ValueError, match="api_key 32"):
        st.add_fail_rule(32, 7)
    with pytest.raises(ValueError, match="error_code"):
        st.add_fail_rule(PRODUCE, 0)
    with pytest.raises(ValueError, match="count"):
        st.add_fail_rule(PRODUCE, 7, count=0)
    with pytest.raises(ValueError, match="partitions"):
        st.add_fail_rule(METADATA, 7, partitions=[("t", 0)])


@pytest.mark.parametrize("api_key", sorted(FAILABLE_APIS - {PRODUCE, FETCH}))
def test_error_responses_encode_at_every_version(api_key: int) -> None:
    lo, hi = codec.SCHEMA_VERSIONS[codec.ApiKey(api_key)]
    request = {"topics": [{"name": "t", "partitions": [{"partition_index": 0}]}], "key": "g",
               "coordinator_keys": ["g"], "member_id": "m"}
    for version in range(lo, hi + 1):
        body = error_response_body(api_key, version, 15, request)
        frame = codec.encode_response(api_key, version, 9, body)
        back = codec.decode_response(api_key, version, frame[4:])
        assert 15 in collect_error_codes(back), (api_key, version)


def test_throttle_rules_and_field_versions() -> None:
    st = make_state()
    st.add_throttle(2, 500, client_id="a", count=2)
    assert st.take_throttle(1, "a", PRODUCE, 9, now_ms=0).ms == 0       # other node
    assert st.take_throttle(2, "b", PRODUCE, 9, now_ms=0).ms == 0       # other client
    assert st.take_throttle(2, "a", PRODUCE, 0, now_ms=0).ms == 0       # no throttle field in v0
    assert st.take_throttle(2, "a", METADATA, 12, now_ms=0) == Throttle(500, None)
    assert st.take_throttle(2, "a", PRODUCE, 9, now_ms=0).ms == 500
    assert st.take_throttle(2, "a", PRODUCE, 9, now_ms=0).ms == 0       # used up
    assert has_throttle_field(METADATA, 3) and not has_throttle_field(METADATA, 2)
    assert throttle_mutes_client(PRODUCE, 6) and not throttle_mutes_client(PRODUCE, 5)
    assert throttle_mutes_client(60, 0)
    with pytest.raises(ValueError, match="ms"):
        st.add_throttle(1, 0)
    with pytest.raises(ValueError, match="count"):
        st.add_throttle(1, 10, count=True)


def test_throttle_window_gives_every_response_inside_it_the_time_left() -> None:
    st = make_state()
    window = st.add_throttle_window(1, 400, start_ms=1_000.0)
    assert (window.start_ms, window.end_ms) == (1_000.0, 1_400.0)
    assert st.take_throttle(1, "a", PRODUCE, 9, now_ms=999.9).ms == 0            # not yet
    assert st.take_throttle(1, "a", PRODUCE, 9, now_ms=1_000.0) == Throttle(400, 1_400.0)
    assert st.take_throttle(1, "b", FETCH, 11, now_ms=1_100.0) == Throttle(300, 1_400.0)   # every response
    assert st.take_throttle(1, "a", PRODUCE, 9, now_ms=1_399.5) == Throttle(1, 1_400.0)    # rounds up
    assert st.take_throttle(2, "a", PRODUCE, 9, now_ms=1_100.0).ms == 0          # other node
    assert st.take_throttle(1, "a", PRODUCE, 0, now_ms=1_100.0).ms == 0          # no field in v0
    assert st.take_throttle(1, "a", PRODUCE, 9, now_ms=1_400.0).ms == 0          # over, and forgotten
    assert not st.has_throttle()


def test_overlapping_windows_report_the_later_end_and_beat_next_response_rules() -> None:
    st = make_state()
    st.add_throttle(1, 50, count=1)
    st.add_throttle_window(1, 300, start_ms=0.0, client_id="a")
    st.add_throttle_window(1, 100, start_ms=250.0)
    assert st.take_throttle(1, "a", PRODUCE, 9, now_ms=260.0) == Throttle(90, 350.0)
    assert st.take_throttle(1, "b", PRODUCE, 9, now_ms=100.0) == Throttle(50, None)   # window is for "a"
    assert st.take_throttle(1, "b", PRODUCE, 9, now_ms=300.0) == Throttle(50, 350.0)
    st.clear()
    assert st.take_throttle(1, "a", PRODUCE, 9, now_ms=260.0).ms == 0


@pytest.mark.parametrize("kw, message", [
    (dict(ms=0, start_ms=0.0), "ms must be an int > 0"),
    (dict(ms=1.5, start_ms=0.0), "ms must be an int > 0"),
    (dict(ms=10, start_ms=float("nan")), "start_ms must be a finite number"),
    (dict(ms=10, start_ms="now"), "start_ms must be a finite number"),
])
def test_throttle_window_rejects_bad_input(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_state().add_throttle_window(1, **kw)
    with pytest.raises(ValueError, match="node: 9"):
        make_state().add_throttle_window(9, 10, start_ms=0.0)


def test_remove_latency_undoes_one_rule_or_all_of_a_node() -> None:
    st = make_state()
    st.add_latency(2, 30)
    st.add_latency(2, 30)
    st.add_latency(2, 80, api_key=PRODUCE)
    st.add_latency(None, 5)
    assert st.remove_latency(2, 30) == 1
    assert st.latency_ms(2, FETCH) == 35                # one 30 ms rule and the all-nodes one are left
    with pytest.raises(ValueError, match=r"no 80 ms rule for node 2, api_key None"):
        st.remove_latency(2, 80)                         # that rule was added for Produce only
    assert st.remove_latency(2, 80, api_key=PRODUCE) == 1
    assert st.remove_latency(None) == 1 and st.latency_ms(1, FETCH) == 0
    assert st.remove_latency(2) == 1 and not st.has_latency()
    assert st.remove_latency(2) == 0                     # "all of them" when there are none is fine
    with pytest.raises(ValueError, match="node: 7"):
        st.remove_latency(7, 10)
    with pytest.raises(ValueError, match="ms must be a number"):
        st.remove_latency(1, "10")                        # type: ignore[arg-type]


def test_latency_sums_matching_rules() -> None:
    st = make_state()
    st.add_latency(None, 10)
    st.add_latency(2, 5, api_key=PRODUCE)
    assert st.latency_ms(1, PRODUCE) == 10
    assert st.latency_ms(2, PRODUCE) == 15
    assert st.latency_ms(2, FETCH) == 10


def test_cap_version_rewrites_api_versions() -> None:
    st = make_state()
    st.cap_version(PRODUCE, 8)
    st.cap_version(FETCH, -1)
    body = {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 0, "max_version": 11},
                                          {"api_key": 1, "min_version": 0, "max_version": 17},
                                          {"api_key": 3, "min_version": 0, "max_version": 12}]}
    out = st.rewrite_api_versions(body)
    assert out["api_keys"] == [{"api_key": 0, "min_version": 0, "max_version": 8},
                               {"api_key": 3, "min_version": 0, "max_version": 12}]


def test_coordinator_rewrite_old_and_batched() -> None:
    st = make_state(coordinator_node=2)
    old = st.rewrite_find_coordinator({"error_code": 0, "node_id": 111, "host": "x", "port": 1}, 3)
    assert (old["node_id"], old["port"]) == (2, 9002)
    new = st.rewrite_find_coordinator({"coordinators": [
        {"key": "g", "node_id": 111, "host": "x", "port": 1, "error_code": 0},
        {"key": "h", "node_id": -1, "host": "", "port": -1, "error_code": 15}]}, 4)
    assert [(c["node_id"], c["port"]) for c in new["coordinators"]] == [(2, 9002), (-1, -1)]
    st.set_coordinator(3)
    assert st.rewrite_find_coordinator({"error_code": 0, "node_id": 1, "host": "x", "port": 1}, 0)["node_id"] == 3


def test_clear_restores_default_leaders_with_higher_epoch() -> None:
    st = make_state()
    st.move_leader("t", 0, 2, now_ms=0)
    st.add_throttle(1, 100)
    st.clear()
    assert st.leader("t", 0) == (1, 2)
    assert st.take_throttle(1, None, PRODUCE, 9, now_ms=0).ms == 0


def test_request_partitions_and_error_collection() -> None:
    st = make_state()
    assert request_partitions(PRODUCE, 9, produce_request({"t": [0, 2], "u": [1]}), st) == \
        (("t", 0), ("t", 2), ("u", 1))
    assert collect_error_codes({"error_code": 0, "topics": [{"error_code": 3, "partitions": [
        {"error_code": 6}, {"error_code": 0}]}]}) == (3, 6)
