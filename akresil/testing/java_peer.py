"""The Java client as a peer: ``akresil/testing/java/Peer.java`` run by the JDK's single-file source launcher
against Apache Kafka's own ``kafka-clients`` jars (the ones ``kafka_jars`` caches for ``KafkaCluster``).

``JavaPeer("consume", bootstrap=..., topic=..., group=..., protocol="consumer")`` starts it; every JSON line it
prints is kept in ``events`` (a reader thread collects them, so asyncio and trio callers both just poll).
Closing stdin (``stop()``) makes a consumer leave its group cleanly; ``kill()`` is a SIGKILL.  Modes:
``consume`` (a group member), ``produce`` (``count`` records, one ``ack`` event each), ``share-consume`` (a
share-group member acknowledging every record with ``ack``).  Extra client settings go in ``config``.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

import anyio
import anyio.to_thread

from .kafka_jars import java_command, resolve_kafka_jars

__all__ = ["JavaPeer", "PEER_SOURCE"]

#: the peer program (package data)
PEER_SOURCE = Path(__file__).with_name("java") / "Peer.java"

Mode = Literal["consume", "produce", "share-consume"]
_OPTIONS = ("group", "protocol", "count", "prefix", "partition", "ack", "client_id")


class JavaPeer:
    """One Java client process.  Use as a (sync or async) context manager, or ``start()``/``stop()``."""

    def __init__(self, mode: Mode, *, bootstrap: str, topic: str, config: Mapping[str, Any] | None = None,
                 version: str | None = None, **options: Any) -> None:
        if mode not in ("consume", "produce", "share-consume"):
            raise ValueError(f"JavaPeer mode must be consume, produce or share-consume, got {mode!r}")
        unknown = set(options) - set(_OPTIONS)
        if unknown:
            raise ValueError(f"JavaPeer: unknown option(s) {sorted(unknown)} (known: {', '.join(_OPTIONS)})")
        if mode in ("consume", "share-consume") and "group" not in options:
            raise ValueError(f"JavaPeer {mode!r} needs group=")
        if mode == "produce" and "count" not in options:
            raise ValueError("JavaPeer 'produce' needs count=")
        self.mode = mode
        self.args = [mode, "--bootstrap", bootstrap, "--topic", topic]
        for key, value in options.items():
            if value is not None:
                self.args += [f"--{key.replace('_', '-')}", str(value)]
        for key, value in (config or {}).items():
            self.args += ["--config", f"{key}={value}"]
        self.version = version
        self.events: list[dict[str, Any]] = []
        self.stderr_lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> JavaPeer:
        libs = resolve_kafka_jars(self.version)
        # C1 only and the serial collector: a short-lived client starts (and compiles its source) faster
        self.proc = subprocess.Popen([java_command(), "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto",
                                      "-cp", f"{libs}/*", str(PEER_SOURCE), *self.args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        for stream, sink in ((self.proc.stdout, self._on_stdout), (self.proc.stderr, self.stderr_lines.append)):
            t = threading.Thread(target=self._pump, args=(stream, sink), daemon=True, name="java-peer-reader")
            t.start()
            self._threads.append(t)
        return self

    @staticmethod
    def _pump(stream: Any, sink: Callable[[str], None]) -> None:
        for line in stream:
            sink(line.rstrip("\n"))

    def _on_stdout(self, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            event = {"event": "output", "line": line}
        self.events.append(event)

    def stop(self, timeout_s: float = 60.0) -> int:
        """Close stdin (a consumer leaves its group and exits); kill it if it has not exited in time."""
        if self.proc is None:
            return 0
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        for t in self._threads:
            t.join(timeout=5)
        return code

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no acknowledgement; the broker finds out when the session expires."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> JavaPeer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> JavaPeer:
        return await anyio.to_thread.run_sync(self.start)

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop)

    # ------------------------------------------------------------------ what it printed
    def of(self, kind: str) -> list[dict[str, Any]]:
        """The events of one kind so far (``"record"``, ``"ack"``, ``"assigned"`` ...)."""
        return [e for e in list(self.events) if e.get("event") == kind]

    @property
    def records(self) -> list[dict[str, Any]]:
        return self.of("record")

    def _check_alive(self) -> None:
        errors = self.of("error")
        if errors:
            raise RuntimeError(f"Java peer failed: {errors[0].get('message')}")
        if self.proc is not None and self.proc.poll() is not None and self.proc.returncode != 0:
            raise RuntimeError(f"Java peer exited with {self.proc.returncode}: "
                               + "\n".join(self.stderr_lines[-30:]))

    async def wait_until(self, condition: Callable[[JavaPeer], bool], timeout_s: float = 60.0) -> None:
        """Poll ``condition(self)``; a peer that failed or exited with an error raises at once with its stderr."""
        deadline = time.monotonic() + timeout_s
        while not condition(self):
            self._check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"Java peer {self.mode}: condition not met in {timeout_s} s; last events "
                                   f"{self.events[-5:]}; stderr {self.stderr_lines[-10:]}")
            await anyio.sleep(0.05)
