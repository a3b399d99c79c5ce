"""Scenario metrics from hand-made recordings, and the report's shape: ratios, JSON, the docs table."""

from __future__ import annotations

import math

import orjson
import pytest

from akresil.bench import report, stats
from akresil.bench.scenarios import (METADATA, PRODUCE, AppliedStep, PhaseData, build, summarize,
                                     throttle_arrivals)
from akresil.testing.recorder import ConnectionEvent, RecordedRequest, RecordedResponse

T0 = 1000.0   # monotonic seconds at which the phase starts


def req(api_key: int, t: float, node: int = 1, parts: tuple[tuple[str, int], ...] = (),
        in_window: bool = False, conn: int = 1) -> RecordedRequest:
    return RecordedRequest(node, conn, "c", api_key, 9, 0, (T0 + t) * 1000, parts, in_window)


def resp(t: float, node: int, errors: dict[tuple[str, int], int], throttle: int = 0, conn: int = 1
         ) -> RecordedResponse:
    return RecordedResponse(node, conn, "c", PRODUCE, 9, 0, (T0 + t) * 1000,
                            tuple(c for c in errors.values() if c), errors, throttle)


def phase(name: str, *, requests: list[RecordedRequest] = [], responses: list[RecordedResponse] = [],
          applied: list[AppliedStep] = [], log: stats.DeliveryLog | None = None,
          connections: list[ConnectionEvent] = []) -> PhaseData:
    sc = build(name, quick=True, seed=1)
    return PhaseData(scenario=sc, client="akresil", start_s=T0, log=log or stats.DeliveryLog(),
                     requests=requests, responses=responses,
                     connections=[ConnectionEvent(1, 1, "open", (T0 + 0.5) * 1000),
                                  ConnectionEvent(1, 1, "close", (T0 + 0.6) * 1000, "client closed"),
                                  *connections],
                     applied=applied, leaders={0: 1, 1: 2, 2: 3})


def test_leader_move_first_success_counts_from_the_clients_first_attempt() -> None:
    sc = build("leader-move", quick=True, seed=1)
    move = sc.script.steps[0]
    tp = ("t", 0)
    at = move.at_s
    data = phase("leader-move", applied=[AppliedStep(move, T0 + at, moved=[(tp, 2)])],
                 requests=[req(PRODUCE, at + 0.3, 1, (tp,)), req(PRODUCE, at + 0.35, 2, (tp,)),
                           req(METADATA, at + 0.31), req(METADATA, 0.1)],
                 responses=[resp(at + 0.31, 1, {tp: 6}), resp(at + 0.36, 2, {tp: 0})])
    summary, series = summarize(data)
    assert summary["move_to_first_success"] == {"count": 1, "median_ms": pytest.approx(60.0, abs=0.5),
                                                "max_ms": pytest.approx(60.0, abs=0.5)}
    assert summary["metadata_requests"] == 2 and summary["not_leader_responses"] == 1
    assert sum(series["metadata_requests_per_s"]) == 2
    assert summary["connections_opened"] == 1 and summary["connections_closed_by_client"] == 1


def test_throttle_counts_arrivals_after_the_throttled_response_per_connection() -> None:
    sc = build("throttle", quick=True, seed=1)
    step = sc.script.steps[0]
    w = step.at_s
    data = phase("throttle", applied=[AppliedStep(step, T0 + w)], requests=[
        req(PRODUCE, w + 0.010),                    # before any throttled response on connection 1: fine
        req(PRODUCE, w + 0.020),                    # exactly at the write: not strictly after it
        req(PRODUCE, w + 0.023),                    # 3 ms after: in flight, counted and counted apart
        req(METADATA, w + 0.300),                   # inside: a real violation
        req(PRODUCE, w + 0.300, conn=2),            # another connection was never told
        req(PRODUCE, w + 0.520),                    # the announced 500 ms have run out
        req(PRODUCE, w + 1.600, in_window=True),    # the proxy's flag is not what is counted
    ], responses=[resp(w + 0.020, 1, {("t", 0): 0}, throttle=500),
                  resp(w + 0.100, 1, {("t", 0): 0}, throttle=420),   # same mute, same end
                  resp(w + 0.030, 1, {("t", 0): 0}, conn=3)])
    summary, series = summarize(data)
    assert summary["requests_in_throttle_windows"] == 2
    assert summary["requests_in_throttle_windows_within_5ms"] == 1
    assert summary["throttled_responses"] == 2 and summary["throttle_windows"] == 1
    assert sum(series["requests_in_throttle_window_per_s"]) == 2


def test_throttle_arrivals_extend_a_mute_and_start_a_new_one_after_it_ends() -> None:
    responses = [resp(1.000, 1, {}, throttle=100), resp(1.050, 1, {}, throttle=200),   # mute 1.000 .. 1.250
                 resp(2.000, 1, {}, throttle=100)]                                   # mute 2.000 .. 2.100
    requests = [req(PRODUCE, t) for t in (1.001, 1.200, 1.260, 2.003, 2.050, 2.100)]
    got = [(round(t - T0, 3), round(since, 3)) for t, since in throttle_arrivals(requests, responses)]
    assert got == [(1.001, 1.0), (1.2, 200.0), (2.003, 3.0), (2.05, 50.0)]
    assert throttle_arrivals(requests, []) == []


def test_storm_and_bounce_metrics() -> None:
    sc = build("retry-storm", quick=True, seed=1)
    node = sc.params["node"]
    fail, clear = sc.script.steps
    log = stats.DeliveryLog()
    led = next(p for p, n in {0: 1, 1: 2, 2: 3}.items() if n == node)
    log.succeeded(log.begin(T0 + 1.0, led), T0 + clear.at_s + 0.25, led)
    reqs = [req(PRODUCE, fail.at_s + 0.1 * i, node) for i in range(20)]       # 20 requests in 2 s
    data = phase("retry-storm", requests=reqs, log=log,
                 applied=[AppliedStep(fail, T0 + fail.at_s), AppliedStep(clear, T0 + clear.at_s)])
    summary, _ = summarize(data)
    assert summary["requests_to_failing_node"] == 20
    assert summary["requests_per_s_to_failing_node"] == pytest.approx(20 / fail.window_s, rel=0.01)
    assert summary["peak_requests_per_s_to_node"] == 10
    assert summary["recovery_ms"] == pytest.approx(250.0, abs=0.5)
    # the script's clear lands a hair after the window's nominal end: the burst of queued batches sent on
    # recovery falls in the window's last (partial) bucket, and must not count as a storm
    late_clear = AppliedStep(clear, T0 + clear.at_s + 0.001)
    burst = [req(PRODUCE, clear.at_s + 0.01 + 0.001 * i, node) for i in range(200)]
    data = phase("retry-storm", requests=reqs + burst, log=log,
                 applied=[AppliedStep(fail, T0 + fail.at_s), late_clear])
    summary, _ = summarize(data)
    assert summary["requests_to_failing_node"] == 20 and summary["peak_requests_per_s_to_node"] == 10

    bounce = build("broker-bounce", quick=True, seed=1)
    stop, start = bounce.script.steps
    bnode = bounce.params["node"]
    refused = [ConnectionEvent(bnode, 7, "refused", (T0 + stop.at_s + 0.5) * 1000, "node stopped"),
               ConnectionEvent(bnode, 8, "refused", (T0 + stop.at_s + 1.5) * 1000, "node stopped"),
               ConnectionEvent(bnode, 9, "refused", (T0 + 9.0) * 1000, "proxy stopping"),      # not an attempt
               ConnectionEvent(bnode % 3 + 1, 10, "refused", (T0 + stop.at_s + 1) * 1000, "node stopped")]
    data = phase("broker-bounce", connections=refused,
                 applied=[AppliedStep(stop, T0 + stop.at_s), AppliedStep(start, T0 + start.at_s)])
    summary, series = summarize(data)
    assert summary["connect_attempts_while_down"] == 2
    assert summary["connect_attempts_per_s_while_down"] == pytest.approx(2 / stop.window_s, rel=0.01)
    assert summary["recovery_ms"] is None                      # nothing was acknowledged afterwards
    assert sum(series["connect_attempts_per_s"]) == 2
    assert summary["acked_beyond_delivery_timeout"] == 0
    assert summary["sched_live_during_fault"]["count"] == 0 and summary["sched_live_during_fault"]["p99_ms"] is None

    # while node `bnode` is down: a live node's partition answers in 10 ms, one record waited 3 s (past the
    # 2.5 s bound, head-of-line blocked); the down node's partition gets its record acked after the restart
    bound = bounce.settings.delivery_timeout_ms
    assert bound is not None
    healthy = next(p for p, n in {0: 1, 1: 2, 2: 3}.items() if n != bnode)
    down = next(p for p, n in {0: 1, 1: 2, 2: 3}.items() if n == bnode)
    log = stats.DeliveryLog()
    for i in range(99):
        sent = T0 + stop.at_s + 0.01 * i
        log.succeeded(log.begin(sent, healthy), sent + 0.010, healthy)
    sent = T0 + stop.at_s + 1.0
    log.succeeded(log.begin(sent, healthy), sent + bound / 1000 + 0.5, healthy)
    log.succeeded(log.begin(sent, down), T0 + start.at_s + 0.1, down)
    data = phase("broker-bounce", log=log,
                 applied=[AppliedStep(stop, T0 + stop.at_s), AppliedStep(start, T0 + start.at_s)])
    summary, _ = summarize(data)
    late = 1 + (1 if (T0 + start.at_s + 0.1 - sent) * 1000 > bound else 0)
    assert summary["acked_beyond_delivery_timeout"] == late
    # nearest rank: 99 of 100; the down node's record does not count on the live partitions
    assert summary["sched_live_during_fault"]["p99_ms"] == pytest.approx(10.0, abs=0.01)
    assert summary["sched_live_during_fault"]["count"] == 100


def test_missing_step_is_reported_not_guessed() -> None:
    with pytest.raises(ValueError, match="'fail_produce' was never applied"):
        summarize(phase("retry-storm"))


def test_ratios_direction_and_edge_cases() -> None:
    summaries = {"akresil": {"requests_in_throttle_windows": 0, "sched_live_during_fault": {"p99_ms": 20.0},
                             "throughput_msg_per_s": 2000.0, "connections_opened": 0, "back_to_baseline_s": 1.0},
                 "aiokafka": {"requests_in_throttle_windows": 40, "sched_live_during_fault": {"p99_ms": 80.0},
                              "throughput_msg_per_s": 1000.0, "connections_opened": 0,
                              "back_to_baseline_s": math.inf}}
    rows = {r["path"]: r for r in report.ratios("throttle", summaries)}
    assert rows["requests_in_throttle_windows"]["ratios"] == {"aiokafka": 0.0}
    assert rows["sched_live_during_fault.p99_ms"]["ratios"] == {"aiokafka": 0.25}
    assert rows["sched_live_during_fault.p99_ms"]["better"] == "lower"
    assert rows["back_to_baseline_s"]["ratios"] == {"aiokafka": 0.0}     # never back: infinitely worse
    assert rows["throughput_msg_per_s"]["ratios"] == {"aiokafka": 2.0}
    assert rows["connections_opened"]["ratios"] == {"aiokafka": 1.0}        # 0 / 0: the same
    assert report._ratio(5, 0) == "inf" and report._ratio(None, 3) is None
    assert report.lookup({"a": {"b": True}}, "a.b") is None


def test_document_json_table_and_docs_markers(tmp_path: object) -> None:
    summaries = {"akresil": {"sched_latency": {"p99_ms": 20.0}}, "confluent": {"sched_latency": {"p99_ms": 40.0}}}
    env = {"python": "3.11", "cpus": 2, "load_avg": [1.0, 2.0, 3.0], "aiokafka": "0.14", "confluent_kafka": "2.16",
           "librdkafka": "2.16"}
    doc = report.document(seed=3, quick=True, env=env, scenarios={
        "leader-move": {"clients": {c: {"summary": s} for c, s in summaries.items()},
                        "scenario": build("leader-move", quick=True, seed=3, load="callbacks").as_dict(),
                        "ratios": report.ratios("leader-move", summaries), "nan": float("nan")}})
    parsed = orjson.loads(report.dumps(doc))
    assert parsed["seed"] == 3 and parsed["scenarios"]["leader-move"]["nan"] == "nan"
    table = report.markdown_table(doc)
    header, rule, first = table.splitlines()[:3]
    assert header == "| scenario | metric | better | akresil | confluent | akresil / confluent |"
    assert first == "| leader-move | p99 ms from schedule | lower | 20 | 40 | 0.5 |"
    assert "seed 3, --quick, --load callbacks;" in table
    with pytest.raises(ValueError, match="load: unknown 'threads'"):
        build("leader-move", quick=True, seed=3, load="threads")
    page = f"# B\n\nintro\n{report.DOC_BEGIN}\nold\n{report.DOC_END}\ntail\n"
    updated = report.replace_between_markers(page, table)
    assert "old" not in updated and updated.endswith(f"{report.DOC_END}\ntail\n") and first in updated
    assert report.replace_between_markers(updated, table) == updated          # idempotent
    with pytest.raises(ValueError, match="needs the markers"):
        report.replace_between_markers("# no markers", table)


def test_schedule_metrics_of_a_bounce_count_stalls_failures_and_the_way_back() -> None:
    sc = build("broker-bounce", quick=True, seed=1)
    stop, start = sc.script.steps
    node = sc.params["node"]
    leaders = {0: 1, 1: 2, 2: 3}
    down_at, up_at = stop.at_s, start.at_s
    log = stats.DeliveryLog()
    for i in range(int(sc.duration_s * 100)):            # 100 records/s, round robin over 3 partitions
        t = i / 100
        p = i % 3
        idx = log.begin(T0 + t, p)
        if down_at <= t < up_at and leaders[p] == node:
            log.failed(idx, T0 + t + 2.5, stats.TIMEOUT)   # the down node's records expire
        elif down_at <= t < down_at + 1.0:
            log.succeeded(idx, T0 + down_at + 1.5, p)     # every live partition stalls once
        elif up_at <= t < up_at + 2.0:
            log.succeeded(idx, T0 + t + 0.050, p)         # 2 s of catching up after the return
        else:
            log.succeeded(idx, T0 + t + 0.005, p)
    data = phase("broker-bounce", log=log,
                 applied=[AppliedStep(stop, T0 + down_at), AppliedStep(start, T0 + up_at)])
    summary, series = summarize(data)
    assert summary["sched_before_fault"]["p99_ms"] == pytest.approx(5.0, abs=0.01)
    live = summary["sched_live_during_fault"]
    assert live["count"] == sum(1 for i in range(int(sc.duration_s * 100))
                                if down_at <= i / 100 < up_at and leaders[i % 3] != node)
    assert live["not_acked"] == 0                      # the down node's failures are not the live partitions'
    assert live["p99_ms"] >= 1000 and live["max_ms"] == pytest.approx(1500.0, abs=0.01)
    assert summary["live_p99_during_fault_vs_before"] >= 200
    assert summary["back_to_baseline_s"] == 2.0
    assert summary["sched_latency"]["p99_ms"] == math.inf    # overall: the expired records count as never acked
    assert series["sched_p99_ms"][0] == pytest.approx(5.0, abs=0.01) and len(series["sched_p99_ms"]) == 10
    # the second the node went down: every partition's p99 is the expired records', the live ones' the stall
    assert series["sched_p99_ms"][int(down_at)] == math.inf
    assert 500 <= series["sched_p99_live_ms"][int(down_at)] <= 1500


def test_fault_windows_of_each_scenario() -> None:
    from akresil.bench.scenarios import fault_windows, live_partitions
    lm = build("leader-move", quick=True, seed=1)
    moves = [AppliedStep(s, T0 + s.at_s) for s in lm.script.steps]
    data = phase("leader-move", applied=moves)
    assert fault_windows(data, T0 + lm.duration_s) == [(T0 + lm.script.steps[0].at_s, T0 + lm.duration_s)]
    assert live_partitions(data) == {0, 1, 2}
    th = build("throttle", quick=True, seed=1)
    data = phase("throttle", applied=[AppliedStep(s, T0 + s.at_s) for s in th.script.steps])
    assert fault_windows(data, T0 + th.duration_s) == [(T0 + s.at_s, T0 + s.at_s + s.window_s)
                                                       for s in th.script.steps]
    st = build("retry-storm", quick=True, seed=1)
    fail, clear = st.script.steps
    data = phase("retry-storm", applied=[AppliedStep(fail, T0 + fail.at_s), AppliedStep(clear, T0 + 4.5)])
    assert fault_windows(data, T0 + st.duration_s) == [(T0 + fail.at_s, T0 + 4.5)]   # cleared when applied
    assert live_partitions(data) == {p for p, n in {0: 1, 1: 2, 2: 3}.items() if n != st.params["node"]}
    with pytest.raises(ValueError, match="no fault step"):
        summarize(phase("leader-move"))


def test_rounds_combine_to_element_wise_medians_and_the_worst_round_per_headline() -> None:
    rounds = [
        {"sched_latency": {"p99_ms": 10.0, "p999_ms": 12.0, "max_ms": 20.0}, "throughput_msg_per_s": 1900.0,
         "metadata_requests": None, "label": "a"},
        {"sched_latency": {"p99_ms": 30.0, "p999_ms": 40.0, "max_ms": 90.0}, "throughput_msg_per_s": 1500.0,
         "metadata_requests": 4, "label": "b"},
        {"sched_latency": {"p99_ms": 20.0, "p999_ms": float("inf"), "max_ms": 30.0}, "throughput_msg_per_s": 2000.0,
         "metadata_requests": 6, "label": "c"},
    ]
    median = report.combine_rounds(rounds)
    assert median["sched_latency"] == {"p99_ms": 20.0, "p999_ms": 40.0, "max_ms": 30.0}
    assert median["throughput_msg_per_s"] == 1900.0
    assert median["metadata_requests"] == 5.0          # the rounds that have it
    assert median["label"] == "a"
    worst = report.worst_of("leader-move", rounds)
    assert worst["sched_latency.p99_ms"] == 30.0 and worst["sched_latency.p999_ms"] == float("inf")
    assert worst["throughput_msg_per_s"] == 1500.0     # higher is better: the lowest round
    assert worst["move_to_first_success.median_ms"] is None


def test_a_move_that_takes_time_counts_from_where_it_began_not_from_where_it_was_confirmed() -> None:
    # on Apache Kafka a move (reassignment, then election) runs for up to a second before Metadata confirms it:
    # records scheduled meanwhile meet the move and are not the baseline "before the first move"
    from akresil.bench.scenarios import fault_windows
    sc = build("leader-move", quick=True, seed=1)
    began, confirmed = 2.0, 3.0
    log = stats.DeliveryLog()
    for i in range(int(sc.duration_s * 100)):
        t = i / 100
        idx = log.begin(T0 + t, i % 3)
        log.succeeded(idx, T0 + t + (1.0 if began <= t < confirmed else 0.005), i % 3)
    first = AppliedStep(sc.script.steps[0], T0 + began, moved=[(("t", 0), 2)])   # as the runners do:
    first.at_s = T0 + confirmed                                                  # created, then confirmed
    moves = [first, *(AppliedStep(s, T0 + s.at_s) for s in sc.script.steps[1:])]
    data = phase("leader-move", log=log, applied=moves)
    assert fault_windows(data, T0 + sc.duration_s) == [(T0 + began, T0 + sc.duration_s)]
    summary, _ = summarize(data)
    before = summary["sched_before_fault"]
    assert before["count"] == int(began * 100)
    assert before["max_ms"] == pytest.approx(5.0, abs=0.01)
    assert summary["sched_live_during_fault"]["max_ms"] == pytest.approx(1000.0, abs=0.01)
