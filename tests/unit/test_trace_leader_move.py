"""benchmarks/trace_leader_move.py's pure parts: what the recorder keeps and how a slow window is attributed."""

from __future__ import annotations

import argparse

import pytest

from akresil.protocol.api import ApiKey

from .repo_scripts import load_script

tl = load_script("benchmarks/trace_leader_move.py")


def _args(**kw: object) -> argparse.Namespace:
    base = {"seconds": 2.0, "rate": 10, "move_every": 1.0, "held_ms": 300.0, "slow_ms": 700.0, "broker_config": ""}
    base.update(kw)
    return argparse.Namespace(**base)


def test_the_recorder_keeps_produce_errors_and_drops_byte_counters() -> None:
    rec = tl.Recorder()
    rec.on_event("connection_bytes_sent", {"node_id": 1, "nbytes": 10})
    rec.on_event("response_received", {"node_id": 3, "api_key": ApiKey.PRODUCE, "version": 12, "latency_ms": 1040.0,
                                       "response": {"responses": [{"partition_responses": [
                                           {"error_code": 6}, {"error_code": 0}]}]}})
    assert [(name, f["api_key"], f["errors"]) for _, name, f in rec.events] == [
        ("response_received", "PRODUCE", [6])]


def test_a_slow_window_lists_its_partitions_batches_and_the_held_produce() -> None:
    events = [
        (100.0, "batch_sent", {"node_id": 1, "partition": 2, "records": 20, "attempt": 0}),
        (150.0, "batch_sent", {"node_id": 1, "partition": 4, "records": 5, "attempt": 0}),
        (1140.0, "response_received", {"node_id": 1, "api_key": "PRODUCE", "latency_ms": 1040.0, "errors": []}),
        (1141.0, "batch_completed", {"partition": 2, "records": 20, "attempts": 1, "error": None}),
        (1141.0, "response_received", {"node_id": 2, "api_key": "PRODUCE", "latency_ms": 12.0, "errors": []}),
    ]
    latencies = [(90.0, 1051.0, 2), (95.0, 40.0, 4), (600.0, 20.0, 2)]
    out = tl.report(_args(), events, latencies, [])
    assert out["latency_ms"]["max"] == 1051.0
    assert out["held_produce"] == [{"at_ms": 1140.0, "node": 1, "latency_ms": 1040.0, "errors": []}]
    [window] = out["slow_windows"]
    assert window["scheduled_from_ms"] == 0 and window["partitions"] == [2]
    kinds = [(e["event"], e.get("partition"), e.get("node_id")) for e in window["timeline"]]
    # partition 2's batches and the held answer; not partition 4's batch nor the quick answer
    assert kinds == [("batch_sent", 2, 1), ("response_received", None, 1), ("batch_completed", 2, None)]


@pytest.mark.parametrize("argv, message", [
    (["--rate", "0"], "--rate: must be > 0"),
    (["--broker-config", "replica.fetch.backoff.ms"], "--broker-config: expected k=v"),
])
def test_bad_arguments_are_named(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        tl.main(argv)
    assert message in capsys.readouterr().err
