"""Fixtures for the integration tests that want Apache Kafka as a user meets it on the default embedded broker."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module marked ``kafka_too`` (the paths a user walks first) runs each test that takes ``broker`` on Tansu and
    on the Apache Kafka node users get by default, unless ``AKRESIL_TEST_BROKER`` chose one broker for the run."""
    if ("broker" in metafunc.fixturenames and metafunc.definition.get_closest_marker("kafka_too") is not None
            and "AKRESIL_TEST_BROKER" not in os.environ):
        metafunc.parametrize("broker", ["tansu", "kafka"], indirect=True, scope="session")


@dataclass
class CliBroker:
    """``akresil broker --kind kafka`` running in the background, as a user starts it."""

    bootstrap_servers: str
    proc: subprocess.Popen[bytes]
    stderr_path: Path

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


#: the CLI in the background (its stdin not ours), interrupted as Ctrl-C would once the shell's stdin closes
_CTRL_C_ON_EOF = 'trap "" INT; "$@" </dev/null & child=$!; read _ignored; kill -INT "$child"; wait "$child"'


@pytest.fixture(scope="package")
def kafka_cli_broker() -> Iterator[CliBroker]:
    """One embedded Apache Kafka for this folder's tests that check what a user meets on the default broker: started
    by the CLI (so ``akresil broker --kind kafka`` is exercised too), stopped with Ctrl-C after the folder."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory(prefix="akresil-cli-broker-") as tmp:
        stderr_path = Path(tmp) / "stderr.log"
        with open(stderr_path, "wb") as err:
            # under a shell that sends the CLI its Ctrl-C when our end of its stdin closes: at the end of the folder,
            # or when this run dies without finalizers (pytest-timeout's exit), which left the CLI and its broker up
            proc = subprocess.Popen(["/bin/sh", "-c", _CTRL_C_ON_EOF, "akresil-cli-broker",
                                     sys.executable, "-m", "akresil", "broker", "--kind", "kafka"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env)
        try:
            assert proc.stdout is not None and proc.stdin is not None
            address = proc.stdout.readline().decode().strip()     # printed once the broker answers
            assert address, f"akresil broker --kind kafka printed no address:\n{stderr_path.read_text()}"
            yield CliBroker(address, proc, stderr_path)
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
