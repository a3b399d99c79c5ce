"""``akresil bench --harness apache``: the topic layout and the metrics from hand-made delivery logs (what only a
proxy sees is unknown there, never zero)."""

from __future__ import annotations

import pytest

from akresil.bench import report, stats
from akresil.bench.apache_runner import APACHE_SKIPS, replicas_for, summarize_apache
from akresil.bench.mock_scenarios import MockPhaseData
from akresil.bench.scenarios import AppliedStep, build

T0 = 1000.0
LEADERS = {0: 1, 1: 2, 2: 3}


def record(log: stats.DeliveryLog, sent: float, acked: float | None, partition: int) -> None:
    idx = log.begin(T0 + sent, partition)
    if acked is not None:
        log.succeeded(idx, T0 + acked, partition)


def phase(name: str, applied: list[AppliedStep], log: stats.DeliveryLog) -> MockPhaseData:
    return MockPhaseData(scenario=build(name, quick=True, seed=1), client="akresil", start_s=T0, log=log,
                         requests=[], applied=applied, leaders=LEADERS)


def test_leaders_follow_the_other_harnesses_layout_and_only_moving_topics_are_replicated() -> None:
    move, bounce = build("leader-move", quick=True, seed=1), build("broker-bounce", quick=True, seed=1)
    assert [replicas_for(move, p, 3) for p in range(3)] == [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
    assert [replicas_for(bounce, p, 3) for p in range(4)] == [[1], [2], [3], [1]]


def test_broker_bounce_leaves_what_the_wire_shows_unknown() -> None:
    sc = build("broker-bounce", quick=True, seed=1)
    stop, start = sc.script.steps
    node = sc.params["node"]
    down = next(p for p, n in LEADERS.items() if n == node)
    live = next(p for p, n in LEADERS.items() if n != node)
    log = stats.DeliveryLog()
    record(log, stop.at_s + 0.5, stop.at_s + 0.508, live)
    record(log, start.at_s - 1.0, start.at_s + 0.150, down)
    summary, series = summarize_apache(phase("broker-bounce", [AppliedStep(stop, T0 + stop.at_s),
                                                               AppliedStep(start, T0 + start.at_s)], log))
    assert summary["produce_requests_first_s_after_return"] is None
    assert summary["connect_attempts_per_s_while_down"] is None
    assert summary["metadata_requests"] is None and summary["produce_requests"] is None
    assert "produce_requests_to_node_per_s" not in series
    assert summary["recovery_ms"] == pytest.approx(150.0, abs=0.5)
    assert summary["sched_live_during_fault"]["p99_ms"] == pytest.approx(8.0, abs=0.01)


def test_throttle_counts_windows_and_leaves_wire_counts_unknown() -> None:
    sc = build("throttle", quick=True, seed=1)
    log = stats.DeliveryLog()
    for i in range(50):
        record(log, 0.1 * i, 0.1 * i + 0.004, i % 3)
    applied = [AppliedStep(step, T0 + step.at_s) for step in sc.script.steps]
    summary, _ = summarize_apache(phase("throttle", applied, log))
    assert summary["throttle_windows"] == len(sc.script.steps)
    assert summary["requests_in_throttle_windows"] is None


def test_retry_storm_is_refused_and_the_report_names_the_harness() -> None:
    assert "retry-storm" in APACHE_SKIPS
    with pytest.raises(ValueError, match="does not run on Apache Kafka"):
        summarize_apache(phase("retry-storm", [], stats.DeliveryLog()))
    assert "retry-storm" not in report.headlines("apache")
    assert report.markers("apache") == (report.APACHE_DOC_BEGIN, report.APACHE_DOC_END)


def test_the_java_client_joins_by_default_only_on_apache_kafka() -> None:
    import argparse

    from akresil.bench.clients import CLIENT_NAMES, DEFAULT_CLIENTS, settings_for
    from akresil.bench.command import add_arguments
    from akresil.bench.java_client import java_settings
    from akresil.bench.clients import Settings
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["leader-move"]).clients is None        # resolved by harness in run()
    assert "java" in CLIENT_NAMES and "java" not in DEFAULT_CLIENTS
    settings = Settings(linger_ms=5, delivery_timeout_ms=2500, request_timeout_ms=1500)
    assert java_settings(settings) == ["linger.ms=5", "request.timeout.ms=1500", "delivery.timeout.ms=2500"]
    assert settings_for("java", settings)["delivery.timeout.ms"] == "2500"


def test_on_apache_every_client_asks_acks_all_and_a_bounce_leaves_time_for_the_restart() -> None:
    from akresil.bench.apache_runner import RESTART_ALLOWANCE_S, for_apache
    from akresil.bench.clients import settings_for
    bounce = build("broker-bounce", quick=True, seed=1)
    adapted = for_apache(bounce)
    assert adapted.script.duration_s == bounce.script.duration_s + RESTART_ALLOWANCE_S
    assert adapted.script.steps == bounce.script.steps
    assert settings_for("aiokafka", adapted.settings)["acks"] == "all"
    assert settings_for("confluent", adapted.settings)["acks"] == "all"
    move = for_apache(build("leader-move", quick=True, seed=1))
    assert move.script.duration_s == build("leader-move", quick=True, seed=1).script.duration_s
    assert move.as_dict()["settings"]["acks"] == "all"
