"""A Spark standalone cluster on loopback, from the installed pyspark: one Master and one Worker.

``SparkStandaloneCluster(cores=2)`` runs ``spark-class org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker`` from the pyspark package (its ``bin/`` and ``jars/`` are a Spark distribution), on free
127.0.0.1 ports, each JVM under the same watchdog shell as ``KafkaCluster`` (it ends when this process ends by any
means). A driver connects with ``master_url``. Executors inherit the Worker's environment, which names this
Python (``PYSPARK_PYTHON``) and puts this akresil first on ``PYTHONPATH``, so the Python workers import the code
under test — what a user's cluster needs too (docs/spark.md).

``kill_worker()`` SIGKILLs the Worker and the executors it launched (a machine lost mid-job); ``start_worker()``
starts a new Worker, and the Master gives the running application new executors on it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .broker import BlockingLifecycle, BrokerStartError, _kill, free_port
from .kafka_cluster import _watchdog

__all__ = ["SparkStandaloneCluster", "spark_home"]

_REGISTERED = "Successfully registered with master"


def spark_home() -> Path:
    """The pyspark package folder: a Spark distribution (``bin/spark-class``, ``jars/``)."""
    try:
        import pyspark
    except ImportError as exc:
        raise BrokerStartError("a Spark standalone cluster needs pyspark: pip install 'akresil[spark]'") from exc
    return Path(pyspark.__file__).resolve().parent


@dataclass
class _Process:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    finalizer: Any

    def java_pid(self) -> int | None:
        """The JVM (``spark-class`` execs java as the watchdog shell's child)."""
        if self.proc.poll() is not None:
            return None
        children = _children(self.proc.pid)
        return children[0] if children else None


def _children(pid: int) -> list[int]:
    """Child processes of ``pid``, whichever of its threads started them (a JVM launches from many)."""
    found: list[int] = []
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for thread in threads:
        try:
            found.extend(int(c) for c in (thread / "children").read_text().split())
        except OSError:
            continue
    return found


class SparkStandaloneCluster(BlockingLifecycle):
    """A Master and one Worker of ``cores`` cores and ``memory`` for executors, on 127.0.0.1."""

    def __init__(self, *, cores: int = 2, memory: str = "2g", python: str | None = None,
                 pythonpath: str | None = None, startup_timeout_s: float = 90.0, keep_logs: bool = False) -> None:
        self.cores, self.memory = cores, memory
        self.python = python or sys.executable
        package_root = str(Path(__file__).resolve().parents[2])
        rest = os.environ.get("PYTHONPATH")
        self.pythonpath = pythonpath or (package_root + (os.pathsep + rest if rest else ""))
        self.startup_timeout_s = startup_timeout_s
        self.keep_logs = keep_logs
        self.host = "127.0.0.1"
        self.port = 0
        self.workdir: Path | None = None
        self.master: _Process | None = None
        self.worker: _Process | None = None
        self._workers_started = 0

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def environment(self) -> dict[str, str]:
        """What the JVMs (and through the Worker, the executors and their Python workers) run with."""
        env = dict(os.environ)
        env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP=self.host, PYSPARK_PYTHON=self.python,
                   PYTHONPATH=self.pythonpath)
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        return env

    def __repr__(self) -> str:
        return f"SparkStandaloneCluster({self.master_url}, cores={self.cores}, memory={self.memory})"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> SparkStandaloneCluster:
        self.workdir = Path(tempfile.mkdtemp(prefix="akresil-spark-cluster-"))
        self.port = free_port(self.host)
        try:
            self.master = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", self.host,
                                                 "--port", str(self.port), "--webui-port", "0"])
            self._wait_port(self.master, time.monotonic() + self.startup_timeout_s)
            self.start_worker()
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self) -> None:
        """Start a Worker (after ``kill_worker``) and wait until the Master registered it."""
        if self.worker is not None and self.worker.proc.poll() is None:
            raise RuntimeError("the Worker is running; kill_worker() first")
        assert self.workdir is not None
        self._workers_started += 1
        self.worker = self._spawn(f"worker-{self._workers_started}", [
            "org.apache.spark.deploy.worker.Worker", "--host", self.host, "--cores", str(self.cores),
            "--memory", self.memory, "--webui-port", "0", "--work-dir", str(self.workdir / "work"), self.master_url])
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.worker.proc.poll() is not None:
                raise BrokerStartError(f"the Spark Worker exited while starting:\n{self._tail(self.worker)}")
            if _REGISTERED in self.worker.log.read_text(errors="replace"):
                return
            time.sleep(0.1)
        raise BrokerStartError(f"the Spark Worker did not register within {self.startup_timeout_s:g} s:\n"
                               f"{self._tail(self.worker)}")

    def kill_worker(self) -> list[int]:
        """SIGKILL the Worker and every executor JVM it launched; returns the pids killed."""
        if self.worker is None:
            return []
        killed = self._terminate(self.worker, with_children=True)
        self.worker = None
        return killed

    def executor_pids(self) -> list[int]:
        """The executor JVMs the running Worker launched."""
        pid = self.worker.java_pid() if self.worker is not None else None
        return _children(pid) if pid is not None else []

    def stop(self) -> None:
        for process in (self.worker, self.master):
            if process is not None:
                self._terminate(process, with_children=True)
        self.worker = self.master = None
        if self.workdir is not None and not self.keep_logs:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir = None

    # ------------------------------------------------------------------ internals
    def _spawn(self, name: str, args: list[str]) -> _Process:
        assert self.workdir is not None
        log = self.workdir / f"{name}.log"
        spark_class = str(spark_home() / "bin" / "spark-class")
        with open(log, "ab") as out:
            proc = subprocess.Popen(["/bin/sh", "-c", _watchdog(10), "akresil-spark-watchdog", spark_class, *args],
                                    stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=self.workdir, env=self.environment(), start_new_session=True)
        return _Process(name, proc, log, weakref.finalize(self, _kill, proc))

    def _wait_port(self, process: _Process, deadline: float) -> None:
        while time.monotonic() < deadline:
            if process.proc.poll() is not None:
                raise BrokerStartError(f"the Spark {process.name} exited while starting:\n{self._tail(process)}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise BrokerStartError(f"the Spark {process.name} did not listen on {self.host}:{self.port} within "
                               f"{self.startup_timeout_s:g} s:\n{self._tail(process)}")

    @staticmethod
    def _terminate(process: _Process, *, with_children: bool) -> list[int]:
        killed: list[int] = []
        pid = process.java_pid()
        if pid is not None:
            targets = ([*_children(pid)] if with_children else []) + [pid]
            for target in targets:
                try:
                    os.kill(target, signal.SIGKILL)
                    killed.append(target)
                except ProcessLookupError:
                    pass
        if process.proc.stdin is not None:
            try:
                process.proc.stdin.close()
            except OSError:
                pass
        try:
            process.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            _kill(process.proc)
        process.finalizer.detach()
        return killed

    @staticmethod
    def _tail(process: _Process, lines: int = 40) -> str:
        try:
            return "\n".join(process.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
