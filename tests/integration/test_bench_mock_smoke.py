"""``akresil bench --harness mock`` end to end on a tiny leader move, and the retry-storm fault on a real mock."""

from __future__ import annotations

import argparse
import dataclasses
import asyncio
from pathlib import Path

import orjson
import pytest

from akresil import Producer
from akresil.bench import scenarios
from akresil.bench.command import add_arguments, run
from akresil.bench.mock_runner import fail_produce, pinned_leader
from akresil.bench.progress import Progress
from akresil.bench.script import FaultScript, FaultStep
from akresil.testing.rdkafka_mock import MockCluster

from ..harness.streams import TextSink

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("load", ["tasks", "callbacks"])
async def test_tiny_leader_move_on_the_mock_writes_a_labelled_document(tmp_path: Path, load: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every client in both load idioms: each record is acknowledged and logged at its scheduled time."""
    tiny = scenarios.Scenario("leader-move", FaultScript(3.0, (FaultStep(1.0, "move_all_leaders",
                                                                          label="leader move"),)),
                              rate=500, drain_s=5.0)
    monkeypatch.setattr("akresil.bench.command.build",
                        lambda name, quick, seed, load, gc_freeze: dataclasses.replace(tiny, load=load))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "out"
    args = parser.parse_args(["leader-move", "--quick", "--harness", "mock", "--load", load,
                              "--clients", "akresil,aiokafka,confluent", "--out", str(out)])
    sink = TextSink()
    await run(args, Progress(sink))  # type: ignore[arg-type]

    doc = orjson.loads((out / "bench.json").read_bytes())
    assert doc["harness"] == "mock"
    assert doc["scenarios"]["leader-move"]["scenario"]["load"] == load
    for client, result in doc["scenarios"]["leader-move"]["clients"].items():
        s = result["summary"]
        assert s["records_offered"] == 1500, client           # 500/s for 3 s, open loop, as on the proxy
        assert s["records_acked"] == s["records_offered"], client
        sched = s["sched_latency"]
        assert sched["count"] == 1500 and sched["not_acked"] == 0, client
        assert 0 < sched["p50_ms"] <= sched["p99_ms"] <= sched["p999_ms"] <= sched["max_ms"] < 3000, client
        # the move is applied 1 s in (counted from when the mock had moved every leader: a few ms later)
        assert 500 <= s["sched_before_fault"]["count"] < 600, client
    summary = doc["scenarios"]["leader-move"]["clients"]["akresil"]["summary"]
    moved = summary["move_to_first_success"]
    assert summary["moves"] == 1 and moved["count"] == tiny.partitions
    assert summary["moved_partitions_without_success"] == 0
    # from the move to the first ack of a record handed over after it: linger and the round robin's next record
    # take a few ms, following the KIP-951 hint to the new leader well under a second
    assert 0 < moved["median_ms"] <= moved["max_ms"] < 1000
    assert summary["metadata_requests"] >= 0 and summary["produce_requests"] > 0
    assert summary["not_leader_responses"] is None and summary["connections_opened"] is None
    assert "Run: librdkafka's mock cluster (--harness mock)" in (out / "table.txt").read_text()
    assert (out / "leader-move.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any(line.startswith("leader-move (") for line in sink.lines)


async def test_fail_produce_fails_only_the_chosen_broker_until_cleared() -> None:
    """The mock clears only its cluster-wide error stack; the other brokers get stacks of their own so the
    cluster-wide errors reach the chosen broker alone."""
    with MockCluster(3) as cluster:
        cluster.create_topic("storm", 3, 1)
        for p in range(3):
            cluster.set_leader("storm", p, pinned_leader(p, 3))
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0, retry_backoff_ms=20,
                            retry_backoff_max_ms=50) as producer:
            await producer.send("storm", b"warm", partition=0)
            fail_produce(cluster, node=1, error_code=scenarios.NOT_ENOUGH_REPLICAS, count=10_000)
            failing = asyncio.ensure_future(producer.send("storm", b"v", partition=0))    # led by broker 1
            for p in (1, 2):                                                                # brokers 2 and 3
                await asyncio.wait_for(producer.send("storm", b"v", partition=p), timeout=5)
            await asyncio.sleep(0.3)
            assert not failing.done()                     # retried, refused every time
            cluster.clear_request_errors(scenarios.PRODUCE)
            md = await asyncio.wait_for(failing, timeout=5)
            assert md.partition == 0
