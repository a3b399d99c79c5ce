"""``akresil bench --harness mock``: metrics from hand-made mock request logs and delivery logs, the skipped
scenarios and the harness labels of the report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import orjson
import pytest

from akresil.bench import report, stats
from akresil.bench.command import BenchArgumentError, add_arguments, run
from akresil.bench.mock_scenarios import (MOCK_SKIPS, MockPhaseData, request_times, storm_errors,
                                          summarize_mock)
from akresil.bench.plots import plot_all
from akresil.bench.progress import Progress
from akresil.bench.scenarios import METADATA, PRODUCE, AppliedStep, build
from akresil.testing.rdkafka_mock import MockRequest

from ..harness.streams import TextSink

T0 = 1000.0   # monotonic seconds at which the phase starts
LEADERS = {0: 1, 1: 2, 2: 3}


def mreq(api_key: int, t: float, broker: int = 1) -> MockRequest:
    """A request the mock logged ``t`` seconds into the phase (its clock is µs on CLOCK_MONOTONIC)."""
    return MockRequest(broker, api_key, round((T0 + t) * 1e6))


def record(log: stats.DeliveryLog, sent: float, acked: float | None, partition: int) -> None:
    """A record handed over ``sent`` s into the phase and acknowledged at ``acked`` (``None``: never)."""
    idx = log.begin(T0 + sent, partition)
    if acked is not None:
        log.succeeded(idx, T0 + acked, partition)


def mock_phase(name: str, *, requests: list[MockRequest] = [], applied: list[AppliedStep] = [],
               log: stats.DeliveryLog | None = None) -> MockPhaseData:
    return MockPhaseData(scenario=build(name, quick=True, seed=1), client="akresil", start_s=T0,
                         log=log or stats.DeliveryLog(), requests=requests, applied=applied, leaders=LEADERS)


def test_request_times_convert_microseconds_and_filter_api_and_broker() -> None:
    reqs = [mreq(PRODUCE, 0.5, 1), mreq(PRODUCE, 0.75, 2), mreq(METADATA, 0.25, 1)]
    assert request_times(reqs, PRODUCE) == [pytest.approx(T0 + 0.5), pytest.approx(T0 + 0.75)]
    assert request_times(reqs, PRODUCE, 2) == [pytest.approx(T0 + 0.75)]
    assert request_times(reqs, METADATA, 2) == []


def test_leader_move_counts_from_the_move_to_the_first_ack_of_a_record_handed_over_after_it() -> None:
    sc = build("leader-move", quick=True, seed=1)
    first, second = sc.script.steps[:2]
    at, nxt = first.at_s, second.at_s
    moves = [AppliedStep(first, T0 + at, moved=[(("t", 0), 2), (("t", 1), 3), (("t", 2), 1)]),
             AppliedStep(second, T0 + nxt, moved=[(("t", 0), 3)])]
    log = stats.DeliveryLog()
    record(log, at - 0.010, at + 0.002, 0)        # handed over before the move: the old leader's, not counted
    record(log, at + 0.003, at + 0.040, 0)        # partition 0: 40 ms
    record(log, at + 0.001, at + 0.020, 1)        # partition 1: 20 ms, the earliest ack counts ...
    record(log, at + 0.004, at + 0.030, 1)
    record(log, at + 0.002, None, 2)              # partition 2: never acknowledged before the next move
    record(log, at + 0.005, nxt + 0.010, 2)       # ... acked only after it: without success
    record(log, nxt + 0.001, nxt + 0.012, 0)      # second move, partition 0: 12 ms
    reqs = [mreq(METADATA, at + 0.01, 2), mreq(METADATA, -0.5), mreq(PRODUCE, at + 0.01, 2),
            mreq(PRODUCE, sc.duration_s + 0.1)]   # the last one is after the run
    summary, series = summarize_mock(mock_phase("leader-move", requests=reqs, applied=moves, log=log))
    assert summary["moves"] == 2
    assert summary["move_to_first_success"] == {"count": 3, "median_ms": pytest.approx(20.0, abs=0.01),
                                                "max_ms": pytest.approx(40.0, abs=0.01)}
    assert summary["moved_partitions_without_success"] == 1
    assert summary["metadata_requests"] == 1 and summary["produce_requests"] == 1
    assert sum(series["metadata_requests_per_s"]) == 1 and sum(series["produce_requests_per_s"]) == 1
    # what the mock's log cannot tell: no responses, no connections
    assert summary["not_leader_responses"] is None
    assert summary["connections_opened"] is None and summary["connections_closed_by_client"] is None
    assert summary["records_offered"] == 7 and summary["records_acked"] == 6 and summary["unfinished"] == 1


def test_broker_bounce_counts_requests_to_the_node_and_leaves_connection_attempts_unknown() -> None:
    sc = build("broker-bounce", quick=True, seed=1)
    stop, start = sc.script.steps
    node = sc.params["node"]
    other = node % 3 + 1
    down = next(p for p, n in LEADERS.items() if n == node)
    live = next(p for p, n in LEADERS.items() if n != node)
    log = stats.DeliveryLog()
    record(log, stop.at_s + 0.5, stop.at_s + 0.508, live)
    record(log, start.at_s - 1.0, start.at_s + 0.150, down)         # waited out the stop: recovery 150 ms
    reqs = [mreq(PRODUCE, start.at_s + 0.1 * i, node) for i in range(1, 15)]   # 9 in the first second back
    reqs += [mreq(PRODUCE, start.at_s + 0.2, other)]
    summary, series = summarize_mock(mock_phase(
        "broker-bounce", requests=reqs, log=log,
        applied=[AppliedStep(stop, T0 + stop.at_s), AppliedStep(start, T0 + start.at_s)]))
    assert summary["connect_attempts_while_down"] is None
    assert summary["connect_attempts_per_s_while_down"] is None
    assert "connect_attempts_per_s" not in series
    assert summary["produce_requests_first_s_after_return"] == 9
    assert sum(series["produce_requests_to_node_per_s"]) == 14
    assert summary["recovery_ms"] == pytest.approx(150.0, abs=0.5)
    assert summary["sched_live_during_fault"]["p99_ms"] == pytest.approx(8.0, abs=0.01)
    assert summary["acked_beyond_delivery_timeout"] == 0


def test_retry_storm_rates_come_from_the_failing_brokers_requests() -> None:
    sc = build("retry-storm", quick=True, seed=1)
    fail, clear = sc.script.steps
    node = sc.params["node"]
    led = next(p for p, n in LEADERS.items() if n == node)
    log = stats.DeliveryLog()
    record(log, fail.at_s + 0.5, clear.at_s + 0.2, led)
    reqs = [mreq(PRODUCE, fail.at_s + 0.1 * i, node) for i in range(20)]          # 20 in 2 s
    reqs += [mreq(PRODUCE, fail.at_s + 0.01 * i, node % 3 + 1) for i in range(50)]  # a healthy broker's
    applied = [AppliedStep(fail, T0 + fail.at_s), AppliedStep(clear, T0 + clear.at_s)]
    summary, series = summarize_mock(mock_phase("retry-storm", requests=reqs, log=log, applied=applied))
    assert summary["requests_to_failing_node"] == 20
    assert summary["requests_per_s_to_failing_node"] == pytest.approx(20 / fail.window_s, rel=0.01)
    assert summary["requests_per_s_per_producer"] == pytest.approx(20 / fail.window_s / sc.producers, rel=0.01)
    assert summary["peak_requests_per_s_to_node"] == 10
    assert summary["recovery_ms"] == pytest.approx(200.0, abs=0.5)
    assert sum(series["produce_requests_to_node_per_s"]) == 20
    assert summary["produce_requests"] == 70


def test_retry_storm_that_outran_the_queued_errors_is_an_error_not_a_figure() -> None:
    sc = build("retry-storm", quick=True, seed=1)
    fail, clear = sc.script.steps
    node = sc.params["node"]
    n = storm_errors(fail.window_s) + 1
    reqs = [mreq(PRODUCE, fail.at_s + fail.window_s * i / n, node) for i in range(n)]
    applied = [AppliedStep(fail, T0 + fail.at_s), AppliedStep(clear, T0 + clear.at_s)]
    with pytest.raises(ValueError, match="errors were queued"):
        summarize_mock(mock_phase("retry-storm", requests=reqs, applied=applied))


def test_scenarios_the_mock_cannot_express_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot throttle"):
        summarize_mock(mock_phase("throttle"))


def test_mock_report_labels_the_harness_and_the_changed_definition(tmp_path: Path) -> None:
    summaries = {"akresil": {"move_to_first_success": {"median_ms": 10.0}, "connections_opened": None},
                 "aiokafka": {"move_to_first_success": {"median_ms": 40.0}}}
    rows = {r["path"]: r for r in report.ratios("leader-move", summaries, harness="mock")}
    moved = rows["move_to_first_success.median_ms"]
    assert moved["metric"] == "median move → first ack ms (client side)" and moved["ratios"] == {"aiokafka": 0.25}
    assert rows["metadata_requests"]["values"] == {"akresil": None, "aiokafka": None}
    assert [r["path"] for r in report.ratios("leader-move", summaries)] == [r["path"] for r in rows.values()]
    env = {"python": "3.11", "cpus": 2, "load_avg": [1.0, 2.0, 3.0], "aiokafka": "0.14", "confluent_kafka": "2.16",
           "librdkafka": "2.16"}
    doc = report.document(seed=1, quick=True, env=env, harness="mock", scenarios={
        "throttle": {"skipped": MOCK_SKIPS["throttle"]},
        "leader-move": {"clients": {c: {"summary": s} for c, s in summaries.items()},
                        "ratios": report.ratios("leader-move", summaries, harness="mock")}})
    assert doc["harness"] == "mock"
    table = report.markdown_table(doc)
    assert "| leader-move | median move → first ack ms (client side) | lower | 10 | 40 | 0.25 |" in table
    assert f"Skipped: throttle ({MOCK_SKIPS['throttle']})." in table
    assert "Run: librdkafka's mock cluster (--harness mock), seed 1, --quick" in table
    assert plot_all(doc | {"scenarios": {"throttle": doc["scenarios"]["throttle"]}}, tmp_path) == []
    # each harness has its own markers on a docs page: a mock run leaves the proxy's table alone
    page = (f"{report.DOC_BEGIN}\nproxy table\n{report.DOC_END}\n"
            f"{report.MOCK_DOC_BEGIN}\nold\n{report.MOCK_DOC_END}\n")
    updated = report.replace_between_markers(page, table, "mock")
    assert "proxy table" in updated and "old" not in updated and table in updated
    with pytest.raises(ValueError, match="harness: unknown 'tansu'"):
        report.markers("tansu")


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


async def test_skipped_scenarios_are_noted_in_the_output_and_the_json(tmp_path: Path) -> None:
    sink = TextSink()
    for name in ("throttle", "steady"):
        doc = await run(_args(name, "--harness", "mock", "--no-plots", "--out", str(tmp_path)),
                        Progress(sink))  # type: ignore[arg-type]
        assert doc["scenarios"] == {name: {"skipped": MOCK_SKIPS[name]}}
        saved = orjson.loads((tmp_path / "bench.json").read_bytes())
        assert saved["harness"] == "mock" and saved["scenarios"][name]["skipped"] == MOCK_SKIPS[name]
        assert any(line.startswith(f"{name}: skipped: {MOCK_SKIPS[name]}") for line in sink.lines)


async def test_bootstrap_servers_do_not_combine_with_the_mock(tmp_path: Path) -> None:
    with pytest.raises(BenchArgumentError, match="--bootstrap-servers"):
        await run(_args("leader-move", "--harness", "mock", "--bootstrap-servers", "127.0.0.1:9",
                        "--no-plots", "--out", str(tmp_path)))
    assert _args("leader-move").harness == "proxy"


async def test_broker_config_is_parsed_for_apache_and_refused_elsewhere(tmp_path: Path) -> None:
    from akresil.bench.command import parse_broker_config

    assert parse_broker_config("replica.fetch.wait.max.ms=100, replica.fetch.backoff.ms=100,") == {
        "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "100"}
    assert _args("leader-move").broker_config == {}
    for bad in ("replica.fetch.wait.max.ms", "=100", "a=1,b="):
        with pytest.raises(argparse.ArgumentTypeError, match="--broker-config: expected key=value"):
            parse_broker_config(bad)
    with pytest.raises(BenchArgumentError, match="--broker-config: only the apache harness"):
        await run(_args("leader-move", "--harness", "mock", "--broker-config", "a=1", "--no-plots",
                        "--out", str(tmp_path)))


def test_round_plan_puts_uncounted_warm_up_rounds_first_and_rotates_only_the_counted_ones() -> None:
    from akresil.bench.command import round_plan

    clients = ("akresil", "aiokafka", "java")
    assert round_plan("steady", 2, None, clients, 1) == [
        (False, 0, ["akresil", "aiokafka", "java"]),     # steady warms the brokers once by default
        (True, 1, ["akresil", "aiokafka", "java"]),
        (True, 2, ["aiokafka", "java", "akresil"])]
    assert [counted for counted, _, _ in round_plan("leader-move", 2, None, clients, 1)] == [True, True]
    assert round_plan("leader-move", 1, 2, clients, 5)[:2] == [(False, 3, list(clients)), (False, 4, list(clients))]
    assert round_plan("steady", 1, 0, clients, 1) == [(True, 1, list(clients))]


async def test_warm_up_rounds_run_every_client_and_are_left_out_of_the_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from akresil.bench import command

    ran: list[tuple[str, int]] = []

    async def fake_phase(_args: object, _broker: object, sc: object, client: str, seed: int,
                         _progress: object) -> tuple[dict[str, Any], dict[str, Any]]:
        ran.append((client, seed))
        return {"records_acked": seed}, {}

    monkeypatch.setattr(command, "_run_failure", fake_phase)
    doc = await run(_args("leader-move", "--harness", "mock", "--clients", "akresil,confluent", "--rounds", "2",
                          "--warmup-rounds", "1", "--no-plots", "--out", str(tmp_path)),
                    Progress(TextSink()))  # type: ignore[arg-type]
    assert ran == [("akresil", 0), ("confluent", 0), ("akresil", 1), ("confluent", 1), ("confluent", 2),
                   ("akresil", 2)]
    result = doc["scenarios"]["leader-move"]
    assert result["warmup_rounds"] == 1
    for client in ("akresil", "confluent"):
        assert [r["records_acked"] for r in result["clients"][client]["rounds"]] == [1, 2]
    with pytest.raises(BenchArgumentError, match="--warmup-rounds: needs 0 or more, got -1"):
        await run(_args("leader-move", "--harness", "mock", "--warmup-rounds", "-1", "--no-plots",
                        "--out", str(tmp_path)))
