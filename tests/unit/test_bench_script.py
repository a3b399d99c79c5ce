"""Fault scripts: seeded, bounded, identical for every client, and walked step by step on a fake clock."""

from __future__ import annotations

import pytest

from akresil.bench.clients import Settings, settings_for
from akresil.bench.scenarios import FAILURE_SCENARIOS, build
from akresil.bench.script import FaultScript, FaultStep


def test_cursor_hands_out_each_step_once_at_its_time() -> None:
    script = FaultScript(5.0, (FaultStep(1.0, "move_all_leaders"), FaultStep(1.0, "throttle_all_nodes",
                                                                             {"ms": 100}, window_s=0.1),
                               FaultStep(3.5, "clear")))
    cur = script.cursor()
    assert cur.next_at() == 1.0
    assert cur.due(0.99) == []
    assert [s.action for s in cur.due(1.0)] == ["move_all_leaders", "throttle_all_nodes"]
    assert cur.due(2.0) == [] and cur.next_at() == 3.5
    assert [s.action for s in cur.due(10.0)] == ["clear"]
    assert cur.done and cur.next_at() is None and cur.due(11.0) == []


def test_a_late_clock_gets_every_missed_step_in_order() -> None:
    script = FaultScript(9.0, tuple(FaultStep(float(t), "move_all_leaders") for t in (1, 2, 3)))
    assert [s.at_s for s in script.cursor().due(8.0)] == [1.0, 2.0, 3.0]


def test_windows_and_instants_for_plots() -> None:
    script = FaultScript(4.0, (FaultStep(1.0, "stop_node", {"node": 2}, window_s=5.0, label="node 2 down"),
                               FaultStep(2.0, "move_all_leaders", label="leader move"),
                               FaultStep(3.0, "clear")))
    assert script.windows() == [(1.0, 4.0, "node 2 down")]         # clipped to the run
    assert script.instants() == [(2.0, "leader move")]


def test_bad_scripts_are_refused_with_the_problem_named() -> None:
    with pytest.raises(ValueError, match="unknown 'explode'"):
        FaultStep(1.0, "explode")
    with pytest.raises(ValueError, match="at_s must be >= 0"):
        FaultStep(-1.0, "clear")
    with pytest.raises(ValueError, match="time order"):
        FaultScript(5.0, (FaultStep(2.0, "clear"), FaultStep(1.0, "clear")))
    with pytest.raises(ValueError, match="after the end"):
        FaultScript(5.0, (FaultStep(6.0, "clear"),))
    with pytest.raises(ValueError, match="unknown 'nope'"):
        build("nope", quick=True, seed=1)


@pytest.mark.parametrize("name", FAILURE_SCENARIOS)
def test_scenarios_are_seeded_and_bounded(name: str) -> None:
    a, b = build(name, quick=True, seed=7), build(name, quick=True, seed=7)
    assert a.as_dict() == b.as_dict()
    assert a.script.steps, "a failure scenario without faults"
    assert a.duration_s <= 60 and build(name, quick=False, seed=7).duration_s <= 60
    assert all(s.at_s + s.window_s <= a.duration_s for s in a.script.steps)


def test_seed_changes_the_script_where_it_has_choices() -> None:
    scripts = {tuple(s.at_s for s in build("leader-move", quick=True, seed=seed).script.steps)
               for seed in range(5)}
    nodes = {build("broker-bounce", quick=True, seed=seed).params["node"] for seed in range(20)}
    assert len(scripts) > 1 and nodes == {1, 2, 3}


def test_bounce_outlasts_its_delivery_timeout() -> None:
    sc = build("broker-bounce", quick=True, seed=1)
    assert sc.settings.delivery_timeout_ms is not None
    assert sc.params["down_s"] * 1000 > sc.settings.delivery_timeout_ms


def test_settings_map_to_each_clients_own_names() -> None:
    s = Settings(linger_ms=5, delivery_timeout_ms=2500, request_timeout_ms=1500)
    assert settings_for("akresil", s) == {"linger_ms": 5, "delivery_timeout_ms": 2500, "request_timeout_ms": 1500}
    assert settings_for("aiokafka", s) == {"linger_ms": 5, "request_timeout_ms": 2500}   # its batch expiry knob
    assert settings_for("confluent", s) == {"linger.ms": 5, "message.timeout.ms": 2500, "request.timeout.ms": 1500}
    assert settings_for("confluent", Settings()) == {"linger.ms": 5}
    with pytest.raises(ValueError, match="unknown 'kafka-go'"):
        settings_for("kafka-go", s)
