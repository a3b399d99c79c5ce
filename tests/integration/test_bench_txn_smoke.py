"""benchmarks/bench_txn.py runs end to end on a tiny size and writes the JSON it documents."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parents[2]


def test_bench_txn_reports_median_and_worst_per_client_and_commit_interval(tmp_path: Path) -> None:
    out = tmp_path / "txn.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_txn.py"), "--rounds", "1",
                           "--seconds", "0.3", "--commit-ms", "100", "--out", str(out)],
                          capture_output=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    doc = orjson.loads(out.read_bytes())
    by_client = doc["by_commit_ms"]["100"]
    assert set(by_client) == {"akresil-txn", "akresil-plain", "aiokafka-txn"}
    for figures in by_client.values():
        assert len(figures["rounds"]) == 1 and figures["rounds"][0] > 0
        assert figures["worst_records_per_s"] <= figures["median_records_per_s"]
