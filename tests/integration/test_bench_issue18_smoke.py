"""The issue-18 benchmark scripts run end to end on tiny sizes and write the JSON they document."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parents[2]


def run_script(name: str, *args: str, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args, "--out", str(out)],
                          capture_output=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return orjson.loads(out.read_bytes())


def test_consume_rounds_reports_every_round_and_the_paired_ratios(tmp_path: Path) -> None:
    doc = run_script("bench_consume_rounds.py", "--records", "3000", "--partitions", "2", "--rounds", "2",
                     out=tmp_path / "rounds.json")
    results = doc["results"]
    for client in ("akresil_getmany", "aiokafka_getmany"):
        rounds = results[client]["rounds"]
        assert len(rounds) == 2 and all(r["msg_per_s"] > 0 and r["empty_polls"] >= 0 for r in rounds)
        assert results[client]["worst_msg_per_s"] <= results[client]["median_msg_per_s"]
    assert set(results["ratios"]) == {"median_vs_aiokafka", "worst_vs_aiokafka_median", "paired_median",
                                      "paired_worst"}


def test_first_ack_reports_new_and_existing_topics_for_the_three_clients(tmp_path: Path) -> None:
    doc = run_script("bench_first_ack.py", "--rounds", "1", out=tmp_path / "first.json")
    for kind in ("new_topic", "existing_unused_topic"):
        assert set(doc["results"][kind]) == {"akresil", "aiokafka", "confluent_kafka"}
        assert all(v["median_ms"] > 0 and len(v["rounds_ms"]) == 1 for v in doc["results"][kind].values())
