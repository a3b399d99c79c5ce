"""The Java client's share consumers and group members for ``benchmarks/bench_groups.py``.

``BenchGroups.java`` (beside this module) runs in one JVM for the whole benchmark, through the JDK's source
launcher, on the kafka-clients jars ``akresil.testing.kafka_jars`` resolves (the broker's version).  Each command
is timed inside the JVM and answered with one JSON line, so neither the JVM's start nor compiling the source is
counted (as no Python client's interpreter start is).
"""

from __future__ import annotations

import collections
import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

SOURCE = Path(__file__).resolve().parent / "java" / "BenchGroups.java"
#: compiling the source and starting the JVM (a loaded 2-core machine takes several seconds)
START_TIMEOUT_S = 90.0
#: added to a command's own timeout while waiting for its answer (joining threads, closing clients)
REPLY_SLACK_S = 60.0


class JavaBenchError(RuntimeError):
    """The Java side failed a command (its message) or exited."""


class JavaGroups:
    """One JVM running ``BenchGroups.java``: ``with JavaGroups() as java: java.share(...)``."""

    def __init__(self, version: str | None = None) -> None:
        self.version = version
        self._proc: subprocess.Popen[str] | None = None
        self._replies: queue.Queue[str | None] = queue.Queue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=40)
        #: the JVM's ``java.version``, once started
        self.java_version = ""

    def start(self) -> JavaGroups:
        from ..testing.kafka_jars import java_command, resolve_kafka_jars
        libs = resolve_kafka_jars(self.version)
        self._proc = subprocess.Popen(
            [java_command(), "-XX:+UseSerialGC", "-cp", f"{libs}/*", str(SOURCE)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None and self._proc.stderr is not None
        threading.Thread(target=self._pump_stdout, args=(self._proc.stdout,), daemon=True,
                         name="java-groups-stdout").start()
        threading.Thread(target=self._pump_stderr, args=(self._proc.stderr,), daemon=True,
                         name="java-groups-stderr").start()
        try:
            ready = self._reply(START_TIMEOUT_S)
            if not ready.get("ready"):
                raise JavaBenchError(f"the Java bench program did not start: {ready}")
            self.java_version = str(ready.get("java", ""))
        except BaseException:
            self.close()
            raise
        return self

    def _pump_stdout(self, stream: IO[str]) -> None:
        for line in stream:
            self._replies.put(line.rstrip("\n"))
        self._replies.put(None)     # the JVM exited

    def _pump_stderr(self, stream: IO[str]) -> None:
        for line in stream:
            self._stderr.append(line.rstrip("\n"))

    def _reply(self, timeout_s: float) -> dict[str, Any]:
        try:
            line = self._replies.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"the Java bench program did not answer within {timeout_s:g} s") from None
        if line is None:
            raise JavaBenchError("the Java bench program exited; its stderr ends with:\n" + "\n".join(self._stderr))
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _command(self, words: list[Any], timeout_s: float) -> dict[str, Any]:
        if self._proc is None or self._proc.stdin is None:
            raise JavaBenchError("the Java bench program is not running (start() it first)")
        self._proc.stdin.write(" ".join(map(str, words)) + "\n")
        self._proc.stdin.flush()
        reply = self._reply(timeout_s + REPLY_SLACK_S)
        if "error" in reply:
            raise JavaBenchError(f"the Java client: {reply['error']}")
        return reply

    def share(self, bootstrap: str, group: str, topic: str, records: int, consumers: int, mode: str,
              timeout_s: float = 120.0) -> tuple[float, float, float]:
        """(seconds from creating the share consumers until ``records`` acknowledgements are committed, seconds
        until the first records were handed out, seconds the slowest ``close()`` took)."""
        if mode not in ("explicit", "implicit"):
            raise ValueError(f"mode must be explicit or implicit, got {mode!r}")
        reply = self._command(["share", bootstrap, group, topic, records, consumers, mode, int(timeout_s * 1000)],
                              timeout_s)
        return float(reply["seconds"]), float(reply["first_s"]), float(reply["close_s"])

    def rebalance(self, bootstrap: str, group: str, topic: str, partitions: int, protocol: str,
                  timeout_s: float = 60.0) -> float:
        """Seconds from a third member's start until three members hold disjoint, non-empty assignments
        covering the topic's ``partitions`` (two of them settled first)."""
        reply = self._command(["rebalance", bootstrap, group, topic, partitions, protocol, int(timeout_s * 1000)],
                              2 * timeout_s)
        return float(reply["seconds"])

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None and proc.stdin is not None:
                proc.stdin.write("quit\n")
                proc.stdin.close()
            proc.wait(15.0)
        except (subprocess.TimeoutExpired, OSError):
            proc.kill()
            proc.wait()

    def __enter__(self) -> JavaGroups:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["JavaBenchError", "JavaGroups", "SOURCE"]
