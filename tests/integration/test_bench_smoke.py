"""``akresil bench`` end to end on a tiny scenario: the JSON document, the table and the PNG are written."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import orjson
import pytest

from akresil.bench import scenarios
from akresil.bench.command import add_arguments, run
from akresil.bench.progress import Progress
from akresil.bench.script import FaultScript, FaultStep
from akresil.testing import EmbeddedBroker

from ..harness.streams import TextSink

pytestmark = pytest.mark.broker


async def test_tiny_leader_move_writes_json_table_and_plot(broker: EmbeddedBroker, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = scenarios.Scenario("leader-move", FaultScript(3.0, (FaultStep(1.0, "move_all_leaders",
                                                                          label="leader move"),)),
                              rate=500, drain_s=5.0)
    monkeypatch.setattr("akresil.bench.command.build",
                        lambda name, quick, seed, load, gc_freeze: dataclasses.replace(tiny, load=load,
                                                                                       gc_freeze=gc_freeze))
    import gc
    calls: list[str] = []
    real_freeze, real_unfreeze = gc.freeze, gc.unfreeze
    monkeypatch.setattr("akresil.bench.runner.gc.freeze", lambda: (calls.append("freeze"), real_freeze())[1])
    monkeypatch.setattr("akresil.bench.runner.gc.unfreeze", lambda: (calls.append("unfreeze"), real_unfreeze())[1])
    page = tmp_path / "page.md"
    page.write_text("# Bench\n<!-- bench:begin -->\n<!-- bench:end -->\n")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["leader-move", "--quick", "--clients", "akresil", "--out", str(tmp_path / "out"),
                              "--bootstrap-servers", broker.bootstrap_servers, "--update-docs", str(page),
                              "--gc-freeze"])
    sink = TextSink()
    lines = sink.lines
    await run(args, Progress(sink))  # type: ignore[arg-type]

    doc = orjson.loads((tmp_path / "out" / "bench.json").read_bytes())
    assert doc["environment"]["cpus"] and doc["seed"] == 1 and doc["quick"] is True
    result = doc["scenarios"]["leader-move"]
    summary = result["clients"]["akresil"]["summary"]
    assert summary["records_offered"] >= 1000                 # 500/s for 3 s, open loop
    assert summary["records_acked"] == summary["records_offered"]
    assert summary["moves"] == 1 and summary["move_to_first_success"]["count"] >= 1
    assert len(result["clients"]["akresil"]["series"]["acked_per_s"]) == 3
    assert result["scenario"]["load"] == "tasks"                # the default idiom
    assert result["scenario"]["gc_freeze"] is True and calls == ["freeze", "unfreeze"]   # around the load only
    assert gc.get_freeze_count() == 0
    assert [r["metric"] for r in result["ratios"]][0] == "p99 ms from schedule"
    assert summary["sched_latency"]["count"] == summary["records_offered"]
    assert summary["sched_latency"]["not_acked"] == 0 and summary["sched_latency"]["max_ms"] < 3000
    png = (tmp_path / "out" / "leader-move.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "| leader-move | p99 ms from schedule |" in page.read_text()
    assert any("leader-move" in line for line in lines)


async def test_tiny_throttle_and_bounce_phases_use_the_proxys_windows_and_refusals(broker: EmbeddedBroker) -> None:
    """The runner places each throttle window at the script's instant and counts connects to a stopped node
    from the proxy's own recording (no listener of its own)."""
    from akresil.bench.runner import Phase

    throttle = scenarios.Scenario("throttle", FaultScript(2.5, (FaultStep(1.0, "throttle_all_nodes", {"ms": 600},
                                                                          window_s=0.6, label="throttle"),)),
                                  rate=500, drain_s=5.0)
    data = await Phase(broker.bootstrap_servers, throttle, "akresil", 1).run()
    (applied,) = data.applied
    assert applied.at_s == data.start_s + 1.0                  # exactly the script's instant
    throttled = [r for r in data.responses if r.throttle_time_ms > 0]
    assert throttled, "nothing was written inside the window"
    window_ms = (applied.at_s * 1000, applied.at_s * 1000 + 600)
    for r in throttled:       # written inside the window, announcing what is left of it (ceil: +1 ms)
        assert window_ms[0] <= r.time_ms < window_ms[1]
        assert window_ms[1] <= r.time_ms + r.throttle_time_ms <= window_ms[1] + 1
    summary, _ = scenarios.summarize(data)
    assert summary["throttle_windows"] == 1 and summary["throttled_responses"] == len(throttled)
    assert summary["records_acked"] == summary["records_offered"]

    bounce = scenarios.Scenario("broker-bounce", FaultScript(3.0, (
        FaultStep(0.5, "stop_node", {"node": 1}, window_s=1.5, label="node 1 down"),
        FaultStep(2.0, "start_node", {"node": 1}))), rate=500, drain_s=10.0, params={"node": 1})
    data = await Phase(broker.bootstrap_servers, bounce, "akresil", 1).run()
    refused = [c for c in data.connections if c.kind == "refused"]
    assert refused and {c.node_id for c in refused} == {1}
    summary, _ = scenarios.summarize(data)
    assert summary["connect_attempts_while_down"] == len(refused)
    assert summary["records_acked"] == summary["records_offered"]   # 1.5 s down < the delivery timeout


async def test_tiny_steady_run_measures_produce_and_consume_after_a_warm_up(broker: EmbeddedBroker) -> None:
    from akresil.bench.runner import run_steady

    seen: list[str] = []
    out = await run_steady(broker.bootstrap_servers, scenarios.SteadyConfig(records=500, sizes=(100,), partitions=2),
                           "akresil", 1, lambda _sc, what, *_: seen.append(what))
    figures = out["100B"]
    assert figures["produce_msg_per_s"] > 0 and figures["consume_msg_per_s"] > 0
    assert seen == ["akresil 100 B produce", "akresil 100 B consume"]      # the warm-up reports nothing
