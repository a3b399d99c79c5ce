"""``akresil broker`` and ``akresil demo`` as subprocesses (split from test_cli.py to keep each file fast)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.broker

CLI = [sys.executable, "-m", "akresil.cli"]


def test_broker_command_serves_until_interrupted() -> None:
    proc = subprocess.Popen([*CLI, "broker", "--kind", "noida"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        address = proc.stdout.readline().decode().strip()     # type: ignore[union-attr]
        assert address.startswith("127.0.0.1:")
        listed = subprocess.run([*CLI, "topics", "list", "-b", address], capture_output=True, timeout=30)
        assert listed.returncode == 0, listed.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
    assert proc.returncode == 0
    assert b"broker stopped" in proc.stderr.read()             # type: ignore[union-attr]


def test_demo_exits_0_with_a_summary() -> None:
    result = subprocess.run([*CLI, "demo", "--duration", "3", "--rate", "4000"], capture_output=True,
                            timeout=90)
    err = result.stderr.decode()
    assert result.returncode == 0, err
    assert "PASS: nothing lost, nothing duplicated" in err
    assert "[FAIL]" not in err
    assert "metrics at http://127.0.0.1:" in err
    assert "(Apache Kafka 4." in err           # the default where Java is: the real broker, not an imitation
    assert "throttles" in err and "leader moves" in err
