"""Apache Kafka, the reference broker, as a KRaft cluster on loopback for tests and benchmarks.

``KafkaCluster(brokers=3)`` starts one controller-only JVM and three broker-only JVMs (``brokers=1`` starts one
combined node: one JVM, the quick form), each a plain ``kafka.Kafka`` process with its own properties file, data
folder and log, on free 127.0.0.1 ports.  The jars come from Maven Central once (``kafka_jars``).  A separate
controller lets a test kill or stop any broker without touching the quorum.

What a test needs to control is here: kill a broker (SIGKILL) or stop it (SIGTERM: controlled shutdown), start it
again with its data; move a partition's leader (replica reorder through AlterPartitionReassignments, then a
preferred leader election: the leader epoch rises as on any real move); a client quota that really throttles
(KIP-219); with ``security=True``, SASL PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (Kafka's unsecured JWS validator)
on ``SASL_PLAINTEXT`` and ``SASL_SSL`` listeners, an ``SSL`` listener with a throwaway CA, and ACLs enforced by the
standard authorizer (the PLAINTEXT listener's ANONYMOUS principal and ``admin`` are super users).

Like ``EmbeddedBroker``, every JVM runs under a watchdog shell that terminates it when this process ends by any
means, so a killed test run leaves no broker behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Literal, Mapping, TypeVar

import anyio
import anyio.to_thread

from ..protocol.api import ApiKey, decode_response, encode_request
from .broker import BlockingLifecycle, BrokerStartError, _kill, free_port
from .control import KAFKA, Capability, ControlDefaults

if TYPE_CHECKING:
    from ..admin import Admin
from .kafka_jars import KafkaUnavailable, java_command, kafka_version, resolve_kafka_jars

__all__ = ["KafkaCluster", "KafkaNode", "KafkaUnavailable", "SASL_USERS"]

_T = TypeVar("_T")

Listener = Literal["PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"]
SECURE_LISTENERS: tuple[Listener, ...] = ("SASL_PLAINTEXT", "SSL", "SASL_SSL")

#: users known to PLAIN and SCRAM (SHA-256 and SHA-512) when ``security=True``; ``admin`` is a super user,
#: the others get only what ACLs grant them
SASL_USERS: dict[str, str] = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}

#: broker settings for a small test cluster (each can be overridden through ``broker_config``): internal topics
#: sized for 1-3 brokers, no initial rebalance delay, sessions a killed member loses in seconds, not 45 s
_TEST_DEFAULTS: dict[str, str] = {
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.num.partitions": "10",
    "share.coordinator.state.topic.num.partitions": "10",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.min.isr": "1",
    # KIP-848 and share-group heartbeats every second (Kafka: 5 s): an assignment change takes a few heartbeats
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "1000",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.session.timeout.ms": "10000",
    "group.share.min.session.timeout.ms": "6000",
    "group.share.session.timeout.ms": "10000",
    "group.share.min.record.lock.duration.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "5000",
    "log.segment.bytes": str(64 * 1024 * 1024),
}


def _watchdog(grace_s: float) -> str:
    """The shell each JVM runs under: when this process ends its stdin closes, and the shell SIGTERMs the JVM,
    then SIGKILLs it if it is still there after ``grace_s``.  A broker's SIGTERM is a controlled shutdown that
    waits for the controller, which goes away at the same moment: without the SIGKILL the brokers of a killed
    test run stayed up for good (seen: three JVMs, 1.2 GB, minutes later)."""
    return ('trap "" INT; "$@" </dev/null & child=$!; read _ignored; kill -TERM "$child" 2>/dev/null; '
            f'( sleep {grace_s:g}; kill -KILL "$child" 2>/dev/null ) </dev/null >/dev/null 2>&1 & killer=$!; '
            'wait "$child"; kill "$killer" 2>/dev/null')


@dataclass
class KafkaNode:
    """One JVM of the cluster: a broker, the controller, or both (the combined single node)."""

    node_id: int
    roles: tuple[str, ...]
    workdir: Path
    ports: dict[str, int] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    finalizer: weakref.finalize[Any, Any] | None = None

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    @property
    def stdout_path(self) -> Path:
        return self.workdir / "stdout.log"

    def java_pid(self) -> int | None:
        """The JVM's pid (a child of the watchdog shell), or None when it is not running."""
        if not self.running:
            return None
        assert self.proc is not None
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def log_tail(self, lines: int = 40) -> str:
        out = []
        for path in (self.stdout_path, self.log_path):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                if text:
                    out.append(f"--- {path.name} ---\n" + "\n".join(text))
        return "\n".join(out) or "(no log)"


class KafkaCluster(ControlDefaults, BlockingLifecycle):
    """A local Apache Kafka KRaft cluster.  ``with KafkaCluster(brokers=3) as c: c.bootstrap_servers``.

    ``version``: a Kafka release (default ``kafka_jars.DEFAULT_KAFKA_VERSION``, or ``AKRESIL_KAFKA_VERSION``).
    ``broker_config``: extra ``server.properties`` entries for every broker; ``node_config``: entries for one
    broker, by id, on top of them (``{1: {"broker.rack": "r1"}}``; the ``node_config`` attribute may be changed
    before ``start()``).  ``classpath``: jars or class folders
    added to every node's classpath after Kafka's own (broker plugins: a metric reporter, an authorizer), named
    in ``broker_config``.  ``security``: add the SASL/SSL listeners and the ACL authorizer.  ``heap_mb``: each
    broker JVM's maximum heap.  ``features``: feature levels the storage is formatted with (``kafka-storage format
    --feature``), e.g. ``{"transaction.version": 1}`` for a cluster on transactions v1; ``set_feature`` changes one
    on a running cluster, as ``kafka-features.sh`` does.  ``port``: the PLAINTEXT port of a one-broker cluster
    (default: a free one).  ``jvm_options``: extra options for every node's JVM.

    ``start()``/``stop()`` block (fixtures, scripts); the controls tests use (``kill_broker``, ``move_leader``,
    ``set_client_quota`` ...) are coroutines that run under asyncio or trio.  It is a ``BrokerControl``.
    """

    def __init__(self, brokers: int = 3, *, version: str | None = None, security: bool = False,
                 broker_config: Mapping[str, str | int] | None = None,
                 node_config: Mapping[int, Mapping[str, str | int]] | None = None,
                 classpath: Iterable[str | os.PathLike[str]] = (), heap_mb: int = 512,
                 startup_timeout_s: float = 120.0, stop_timeout_s: float = 30.0, keep_logs: bool = False,
                 host: str = "127.0.0.1", port: int | None = None, features: Mapping[str, int] | None = None,
                 jvm_options: Iterable[str] = ()) -> None:
        if not 1 <= brokers <= 9:
            raise ValueError(f"KafkaCluster brokers must be 1..9, got {brokers}")
        if heap_mb < 128:
            raise ValueError(f"KafkaCluster heap_mb must be at least 128, got {heap_mb}")
        if port is not None and brokers != 1:
            raise ValueError(f"KafkaCluster port: only a one-broker cluster takes a fixed port ({brokers} brokers "
                             "get free ones)")
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"KafkaCluster port must be in 1..65535, got {port}")
        self.port = port
        self.jvm_options = list(jvm_options)
        self.version = kafka_version(version)
        self.brokers = brokers
        self.security = security
        self.broker_config = {k: str(v) for k, v in (broker_config or {}).items()}
        self.node_config = {node: {k: str(v) for k, v in entries.items()}
                            for node, entries in (node_config or {}).items()}
        unknown = sorted(set(self.node_config) - set(self.broker_ids))
        if unknown:
            raise ValueError(f"KafkaCluster node_config: {unknown} are not broker ids (have {self.broker_ids})")
        self.classpath = [Path(entry) for entry in classpath]
        for entry in self.classpath:
            if not entry.exists():
                raise ValueError(f"KafkaCluster classpath: {entry} does not exist")
        self.features = dict(features or {})
        for name, level in self.features.items():
            if not isinstance(name, str) or isinstance(level, bool) or not isinstance(level, int) or level < 0:
                raise ValueError(f"KafkaCluster features: {name!r}={level!r} is not a feature name and a level >= 0")
        self.heap_mb = heap_mb
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.keep_logs = keep_logs
        self.host = host
        self.cluster_id = ""
        self.nodes: dict[int, KafkaNode] = {}
        self.workdir: Path | None = None
        self.ca_file: Path | None = None
        self.started_in_s: float | None = None
        self._libs: Path | None = None
        self._java = ""
        self._starting: set[int] = set()

    # ------------------------------------------------------------------ layout
    @property
    def combined(self) -> bool:
        """One broker: a single node that is also the controller (one JVM)."""
        return self.brokers == 1

    @property
    def controller_id(self) -> int:
        return 1 if self.combined else 100

    @property
    def broker_ids(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    @property
    def listeners(self) -> tuple[Listener, ...]:
        return ("PLAINTEXT", *SECURE_LISTENERS) if self.security else ("PLAINTEXT",)

    def bootstrap(self, listener: Listener = "PLAINTEXT", *, brokers: Iterable[int] | None = None) -> str:
        """``bootstrap_servers`` for ``listener`` (every broker, or those named)."""
        if not self.nodes:
            raise RuntimeError("KafkaCluster is not started")
        if listener not in self.listeners:
            raise ValueError(f"listener {listener!r} is not configured (have {', '.join(self.listeners)}; "
                             "SASL/SSL need KafkaCluster(security=True))")
        ids = list(brokers) if brokers is not None else self.broker_ids
        return ",".join(f"{self.host}:{self.nodes[i].ports[listener]}" for i in ids)

    @property
    def bootstrap_servers(self) -> str:
        return self.bootstrap("PLAINTEXT")

    def broker_address(self, node_id: int, listener: Listener = "PLAINTEXT") -> tuple[str, int]:
        return self.host, self.nodes[node_id].ports[listener]

    def ssl_context(self) -> Any:
        """An ``ssl.SSLContext`` that trusts this cluster's throwaway CA (``security=True``)."""
        import ssl
        if self.ca_file is None:
            raise RuntimeError("the cluster has no SSL listener: start it with security=True")
        return ssl.create_default_context(cafile=str(self.ca_file))

    def __repr__(self) -> str:
        up = [i for i, n in self.nodes.items() if n.running]
        return f"<KafkaCluster {self.version} brokers={self.brokers} running={up}>"

    # ------------------------------------------------------------------ configuration files
    def _node_properties(self, node: KafkaNode, controller_port: int) -> str:
        props: dict[str, str] = {
            "process.roles": ",".join(node.roles),
            "node.id": str(node.node_id),
            "controller.quorum.bootstrap.servers": f"{self.host}:{controller_port}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(node.workdir / "data"),
        }
        listeners = []
        advertised = []
        for name, port in node.ports.items():
            listeners.append(f"{name}://{self.host}:{port}")
            if name != "CONTROLLER":
                advertised.append(f"{name}://{self.host}:{port}")
        props["listeners"] = ",".join(listeners)
        protocol_map: dict[str, str] = {"CONTROLLER": "PLAINTEXT"}
        protocol_map.update((name, name) for name in self.listeners)
        props["listener.security.protocol.map"] = ",".join(f"{k}:{v}" for k, v in protocol_map.items())
        if node.is_broker:
            props["advertised.listeners"] = ",".join(advertised)
            props["inter.broker.listener.name"] = "PLAINTEXT"
            replication = str(min(3, self.brokers))
            for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                        "share.coordinator.state.topic.replication.factor"):
                props[key] = replication
        # the controller too: IncrementalAlterConfigs on a GROUP resource is forwarded to it, and it checks the
        # group's values against its own group.* bounds (a 2 s share lock would be refused by its 15 s minimum)
        props.update(_TEST_DEFAULTS)
        if self.security:
            props.update(self._security_properties(node))
        props.update({k: v for k, v in self.broker_config.items() if node.is_broker or k.startswith("group.")})
        if node.is_broker:
            props.update(self.node_config.get(node.node_id, {}))
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _security_properties(self, node: KafkaNode) -> dict[str, str]:
        props = {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS;User:admin",
        }
        if not node.is_broker:
            return props
        assert self.workdir is not None
        props["sasl.enabled.mechanisms"] = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
        plain_users = " ".join(f'user_{u}="{p}"' for u, p in SASL_USERS.items())
        for listener in ("sasl_plaintext", "sasl_ssl"):
            prefix = f"listener.name.{listener}"
            props[f"{prefix}.plain.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="admin" password="{SASL_USERS["admin"]}" {plain_users};')
            for mech in ("scram-sha-256", "scram-sha-512"):
                props[f"{prefix}.{mech}.sasl.jaas.config"] = \
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            # no server callback handler: Kafka validates unsecured (alg "none") JWS tokens, principal = "sub"
            props[f"{prefix}.oauthbearer.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                'unsecuredLoginStringClaim_sub="admin";')
        pem = self.workdir / "tls" / "server.pem"
        assert self.ca_file is not None
        props.update({
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file),
            "ssl.client.auth": "none", "ssl.endpoint.identification.algorithm": "",
        })
        return props

    def _make_tls_material(self) -> None:
        """A throwaway CA and a server certificate for 127.0.0.1/localhost (PEM), made with the openssl CLI."""
        assert self.workdir is not None
        openssl = shutil.which("openssl")
        if openssl is None:
            raise KafkaUnavailable("KafkaCluster(security=True) makes its TLS certificates with the openssl CLI, "
                                   "which is not on PATH: `apt-get install -y openssl`")
        tls = self.workdir / "tls"
        tls.mkdir()

        def run(*args: str) -> None:
            done = subprocess.run([openssl, *args], cwd=tls, capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                raise BrokerStartError(f"openssl {' '.join(args[:2])} failed: {done.stderr[-2000:]}")

        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "3",
            "-subj", "/CN=akresil test CA")
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=localhost")
        (tls / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "3", "-extfile", "san.ext")
        (tls / "server.pem").write_text((tls / "server.key").read_text() + (tls / "server.crt").read_text()
                                        + (tls / "ca.pem").read_text())
        self.ca_file = tls / "ca.pem"

    @staticmethod
    def _log4j(node: KafkaNode) -> str:
        return (
            "status = error\n"
            "appender.file.type = File\n"
            "appender.file.name = FILE\n"
            f"appender.file.fileName = {node.log_path}\n"
            "appender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = WARN\n"
            "rootLogger.appenderRef.file.ref = FILE\n"
            # one INFO line per start and controlled shutdown, to read a node's history
            "logger.server.name = kafka.server.BrokerServer\n"
            "logger.server.level = INFO\n"
        )

    # ------------------------------------------------------------------ lifecycle (blocking)
    def start(self) -> KafkaCluster:
        """Resolve the jars (first use only), format storage, start every node and wait until each broker
        answers and the cluster's metadata lists them all.  ``BrokerStartError`` quotes the failing node's log."""
        if self.nodes:
            raise RuntimeError(f"{self!r} is already started")
        began = time.monotonic()
        self._java = java_command()
        self._libs = resolve_kafka_jars(self.version)
        self.workdir = Path(tempfile.mkdtemp(prefix="akresil-kafka-"))
        try:
            self._layout()
            if self.security:
                self._make_tls_material()
            self._format_all()
            for node in self.nodes.values():
                self._spawn(node)
            deadline = time.monotonic() + self.startup_timeout_s
            for node_id in self.broker_ids:
                self._wait_broker(self.nodes[node_id], deadline)
            self._wait_registered(deadline)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        return self

    def _layout(self) -> None:
        assert self.workdir is not None
        ids = [self.controller_id] if self.combined else [self.controller_id, *self.broker_ids]
        for node_id in ids:
            if self.combined:
                roles: tuple[str, ...] = ("broker", "controller")
            else:
                roles = ("controller",) if node_id == self.controller_id else ("broker",)
            node = KafkaNode(node_id, roles, self.workdir / f"node-{node_id}")
            node.workdir.mkdir()
            if node.is_broker:
                for name in self.listeners:
                    node.ports[name] = free_port(self.host)
                if self.port is not None:
                    node.ports["PLAINTEXT"] = self.port
            if "controller" in roles:
                node.ports["CONTROLLER"] = free_port(self.host)
            self.nodes[node_id] = node

    def _classpath(self) -> str:
        assert self._libs is not None
        return os.pathsep.join([str(self._libs / "*"), *(str(entry.resolve()) for entry in self.classpath)])

    def _format_all(self) -> None:
        """``kafka-storage format`` for every node: the controller seeds the quorum (``--standalone``) and the
        bootstrap metadata (SCRAM users); brokers join it."""
        controller_port = self.nodes[self.controller_id].ports["CONTROLLER"]
        self.cluster_id = _kafka_cluster_id()
        running: list[tuple[KafkaNode, subprocess.Popen[str]]] = []
        try:
            for node in self.nodes.values():   # in parallel: each format is a JVM start of ~2 s
                props = node.workdir / "server.properties"
                props.write_text(self._node_properties(node, controller_port))
                (node.workdir / "log4j2.properties").write_text(self._log4j(node))
                args = ["kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(props)]
                for name, level in self.features.items():
                    args += ["--feature", f"{name}={level}"]
                if "controller" in node.roles:
                    args.append("--standalone")
                    if self.security:
                        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                            for user, password in SASL_USERS.items():
                                args += ["--add-scram", f"{mech}=[name={user},password={password}]"]
                running.append((node, subprocess.Popen(
                    [self._java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                     "-cp", self._classpath(),
                     f"-Dlog4j2.configurationFile={node.workdir / 'log4j2.properties'}", *args],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
            for node, proc in running:
                out, _ = proc.communicate(timeout=120)
                if proc.returncode != 0:
                    raise BrokerStartError(f"formatting Kafka node {node.node_id} failed (exit {proc.returncode}):\n"
                                           f"{out[-3000:]}")
        finally:
            for _, proc in running:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    def _jvm_args(self, node: KafkaNode) -> list[str]:
        heap = self.heap_mb if node.is_broker else min(self.heap_mb, 256)
        return [self._java, f"-Xmx{heap}m", f"-Xms{min(heap, 128)}m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true", *self.jvm_options,
                f"-Dlog4j2.configurationFile={node.workdir / 'log4j2.properties'}",
                "-cp", self._classpath(), "kafka.Kafka", str(node.workdir / "server.properties")]

    def _spawn(self, node: KafkaNode) -> None:
        with open(node.stdout_path, "ab") as out:
            node.proc = subprocess.Popen(["/bin/sh", "-c", _watchdog(self.stop_timeout_s),
                                          "akresil-kafka-watchdog", *self._jvm_args(node)],
                                         stdin=subprocess.PIPE, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        node.finalizer = weakref.finalize(self, _kill, node.proc)

    def _wait_broker(self, node: KafkaNode, deadline: float) -> None:
        """Until the broker answers ApiVersions on its PLAINTEXT listener (KRaft brokers open their client
        listeners only once caught up with the metadata log and unfenced)."""
        port = node.ports["PLAINTEXT"]
        why: str | None = "not probed yet"
        delay = 0.05
        while time.monotonic() < deadline:
            if not node.running:
                raise BrokerStartError(f"Kafka node {node.node_id} exited while starting:\n{node.log_tail()}")
            why = _probe_api_versions(self.host, port)
            if why is None:
                return
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)
        raise BrokerStartError(f"Kafka broker {node.node_id} did not answer on {self.host}:{port} within "
                               f"{self.startup_timeout_s:g} s (last probe: {why}):\n{node.log_tail()}")

    def _wait_registered(self, deadline: float, expect: Iterable[int] | None = None) -> None:
        """Until every running broker's Metadata lists exactly ``expect`` (default: every running broker)."""
        want = set(expect) if expect is not None else {i for i in self.broker_ids if self.nodes[i].running}
        seen: set[int] = set()
        while time.monotonic() < deadline:
            views = [_metadata_broker_ids(self.host, self.nodes[i].ports["PLAINTEXT"]) for i in sorted(want)]
            if all(v == want for v in views):
                return
            seen = {b for v in views if v for b in v}
            time.sleep(0.1)
        raise BrokerStartError(f"brokers {sorted(want)} were not all registered within the start-up timeout "
                               f"(metadata lists {sorted(seen)})")

    def stop(self) -> None:
        """Stop every node (brokers first, then the controller) and remove the data unless ``keep_logs``."""
        order = [i for i in self.nodes if i != self.controller_id] + [self.controller_id]
        for node_id in order:
            node = self.nodes.get(node_id)
            if node is not None:
                self._terminate(node, graceful=False)
        if self.workdir is not None and not self.keep_logs:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.nodes = {}
        self.workdir = None

    def _terminate(self, node: KafkaNode, *, graceful: bool) -> None:
        proc = node.proc
        if proc is None:
            return
        if proc.poll() is None:
            pid = node.java_pid()
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGTERM if graceful else signal.SIGKILL)
                except ProcessLookupError:
                    pass
            assert proc.stdin is not None
            try:
                proc.stdin.close()   # the watchdog shell reaps (or TERMs) the JVM and exits
            except OSError:
                pass
            try:
                proc.wait(timeout=self.stop_timeout_s if graceful else 10)
            except subprocess.TimeoutExpired:
                _kill(proc)
        elif proc.stdin is not None:
            proc.stdin.close()
        if node.finalizer is not None:
            node.finalizer.detach()
            node.finalizer = None
        node.proc = None

    # ------------------------------------------------------------------ broker control (coroutines)
    def _broker(self, node_id: int) -> KafkaNode:
        if node_id not in self.broker_ids:
            raise ValueError(f"no broker {node_id} in this cluster (brokers: {self.broker_ids})")
        return self.nodes[node_id]

    async def kill_broker(self, node_id: int) -> None:
        """SIGKILL the broker's JVM: no controlled shutdown, the controller fences it after its session."""
        node = self._broker(node_id)
        await anyio.to_thread.run_sync(lambda: self._terminate(node, graceful=False))

    async def stop_broker(self, node_id: int) -> None:
        """Controlled shutdown (SIGTERM): the broker hands its leaderships over before it exits."""
        node = self._broker(node_id)
        await anyio.to_thread.run_sync(lambda: self._terminate(node, graceful=True))

    async def start_broker(self, node_id: int, *, timeout_s: float | None = None) -> None:
        """Start a stopped or killed broker again with its data; returns when it serves and is registered."""
        node = self._broker(node_id)
        if node.running:
            raise RuntimeError(f"broker {node_id} is already running")

        def start() -> None:
            self._spawn(node)
            self._starting.add(node_id)
            try:
                deadline = time.monotonic() + (timeout_s or self.startup_timeout_s)
                self._wait_broker(node, deadline)
                self._wait_registered(deadline)
            finally:
                self._starting.discard(node_id)

        await anyio.to_thread.run_sync(start)

    def starting_brokers(self) -> set[int]:
        """Brokers whose ``start_broker`` has not returned yet (its thread runs on if the caller was cancelled)."""
        return set(self._starting)

    def restart_stopped_brokers(self) -> list[int]:
        """Blocking: start every broker that is not running (a fixture's clean-up); returns their ids."""
        down = [i for i in self.broker_ids if not self.nodes[i].running]
        for node_id in down:
            self._spawn(self.nodes[node_id])
        deadline = time.monotonic() + self.startup_timeout_s
        for node_id in down:
            self._wait_broker(self.nodes[node_id], deadline)
        if down:
            self._wait_registered(deadline)
        return down

    def running_brokers(self) -> list[int]:
        return [i for i in self.broker_ids if self.nodes[i].running]

    # ------------------------------------------------------------------ BrokerControl
    @property
    def node_ids(self) -> list[int]:
        return self.broker_ids

    @property
    def capabilities(self) -> frozenset[Capability]:
        return KAFKA if self.brokers > 1 else KAFKA - {Capability.MOVE_LEADER}

    async def stop_node(self, node: int) -> None:
        await self.stop_broker(node)

    async def kill_node(self, node: int) -> None:
        await self.kill_broker(node)

    async def start_node(self, node: int) -> None:
        await self.start_broker(node)

    # ------------------------------------------------------------------ features
    def finalized_features(self, node_id: int | None = None) -> dict[str, int]:
        """Finalized feature levels as a broker (the first running one by default) reports them in ApiVersions."""
        node = self.nodes[node_id if node_id is not None else self.running_brokers()[0]]
        return _finalized_features(self.host, node.ports["PLAINTEXT"])

    async def set_feature(self, name: str, level: int, *, timeout_s: float = 60.0) -> None:
        """Upgrade or downgrade a finalized feature (``kafka-features.sh``: Kafka's ``FeatureCommand``), then wait
        until every running broker reports the new level in ApiVersions, which clients read when they connect."""
        current = self.finalized_features().get(name, 0)
        if current == level:
            return
        verb = "upgrade" if level > current else "downgrade"
        args = [self._java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", self._classpath(),
                "org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", self.bootstrap_servers, verb,
                "--feature", f"{name}={level}"]

        def run() -> None:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
            if proc.returncode != 0:
                raise RuntimeError(f"kafka-features {verb} {name}={level} failed (exit {proc.returncode}): "
                                   f"{(proc.stdout + proc.stderr)[-2000:]}")
            deadline = time.monotonic() + timeout_s
            while any(self.finalized_features(i).get(name, 0) != level for i in self.running_brokers()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"brokers did not report {name}={level} within {timeout_s:g} s")
                time.sleep(0.05)

        await anyio.to_thread.run_sync(run)

    # ------------------------------------------------------------------ cluster operations (Admin API)
    def admin(self, **config: Any) -> Admin:
        """An ``akresil.Admin`` on this cluster's PLAINTEXT listener (a super user when ACLs are on)."""
        from ..admin import Admin
        return Admin(bootstrap_servers=self.bootstrap(brokers=self.running_brokers()), **config)

    async def create_topic(self, name: str | None = None, *, partitions: int = 1, replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None) -> str:
        """Create a topic (a unique name when ``name`` is None) and wait until every broker knows it."""
        from ..types import NewTopic
        topic = name or f"t-{uuid.uuid4().hex[:12]}"
        async with self.admin() as admin:
            await admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                                replication_factor=replication_factor, configs=dict(configs or {}))])
        return topic

    async def leader(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader id, leader epoch) of a partition, from a fresh Metadata answer."""
        async with self.admin() as admin:
            desc = (await admin.describe_topics([topic]))[topic]
        p = desc.partitions[partition]
        return p.leader, p.leader_epoch

    async def move_leader(self, topic: str, partition: int, to_node: int, *, timeout_s: float = 30.0) -> int:
        """Make ``to_node`` the partition's leader as an operator would: put it first in the replica list
        (AlterPartitionReassignments, adding it as a replica when it is not one), then elect the preferred
        replica.  Returns the new leader epoch once Metadata reports the move."""
        return (await self.move_leaders(topic, {partition: to_node}, timeout_s=timeout_s))[partition]

    async def move_leaders(self, topic: str, targets: Mapping[int, int], *, timeout_s: float = 30.0
                           ) -> dict[int, int]:
        """``move_leader`` for several partitions of a topic at once (one reassignment, one election):
        partition -> new leader epoch."""
        from ..types import TopicPartition
        for node in targets.values():
            self._broker(node)
        async with self.admin() as admin:
            desc = {p.partition: p for p in (await admin.describe_topics([topic]))[topic].partitions}
            wanted: dict[TopicPartition, list[int]] = {}
            for partition, node in targets.items():
                current = desc[partition]
                if current.leader == node:
                    continue
                replicas = [node] + [r for r in current.replicas if r != node]
                wanted[TopicPartition(topic, partition)] = replicas[:max(len(current.replicas), 1)]
            if wanted:
                (await admin.alter_partition_reassignments(wanted)).raise_on_error()
            with anyio.fail_after(timeout_s):
                while wanted:
                    pending = await admin.list_partition_reassignments(list(wanted))
                    now = {p.partition: p for p in (await admin.describe_topics([topic]))[topic].partitions}
                    if not pending and all(list(now[tp.partition].replicas) == r and r[0] in now[tp.partition].isr
                                           for tp, r in wanted.items()):
                        break
                    await anyio.sleep(0.05)
                while True:
                    now = {p.partition: p for p in (await admin.describe_topics([topic]))[topic].partitions}
                    behind = [TopicPartition(topic, p) for p, node in targets.items() if now[p].leader != node]
                    if not behind:
                        return {p: now[p].leader_epoch for p in targets}
                    await admin.elect_leaders(behind)
                    await anyio.sleep(0.05)

    async def set_client_quota(self, *, client_id: str | None = None, user: str | None = None,
                               producer_byte_rate: float | None = None, consumer_byte_rate: float | None = None,
                               request_percentage: float | None = None) -> None:
        """Set (a value) or remove (``None`` for every value) a client quota, so the brokers throttle that
        client for real (KIP-219: ``throttle_time_ms`` in responses, and the broker mutes its side too)."""
        from ..admin_types import ClientQuotaEntity
        if client_id is None and user is None:
            raise ValueError("set_client_quota needs client_id and/or user")
        entity = ClientQuotaEntity(user=user, client_id=client_id)
        values = {"producer_byte_rate": producer_byte_rate, "consumer_byte_rate": consumer_byte_rate,
                  "request_percentage": request_percentage}
        async with self.admin() as admin:
            (await admin.alter_client_quotas({entity: values})).raise_on_error()

    async def wait_for(self, condition: Callable[[], Awaitable[bool]], *, timeout_s: float = 30.0,
                       interval_s: float = 0.1) -> None:
        """Poll an async condition until it is true (``TimeoutError`` after ``timeout_s``)."""
        with anyio.fail_after(timeout_s):
            while not await condition():
                await anyio.sleep(interval_s)

    def memory_rss_mb(self) -> float:
        """Resident memory of every running JVM of the cluster, in MiB (for the start-up figures)."""
        total = 0
        for node in self.nodes.values():
            pid = node.java_pid()
            if pid is None:
                continue
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                continue
        return total / 1024


def _kafka_cluster_id(random_bytes: Callable[[int], bytes] = os.urandom) -> str:
    """A cluster id as Kafka makes them: 16 random bytes, URL-safe base64 without padding, and (like Kafka's
    ``Uuid.randomUuid``) never starting with "-", which ``kafka-storage format -t`` would take for an option
    (1 start in 64 failed with "argument --cluster-id/-t: expected one argument")."""
    import base64
    while True:
        cluster_id = base64.urlsafe_b64encode(random_bytes(16)).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _roundtrip(host: str, port: int, api_key: ApiKey, version: int, body: Mapping[str, Any],
               timeout_s: float = 2.0) -> dict[str, Any]:
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(encode_request(api_key, version, 1, "akresil-kafka-cluster", body))
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"connection closed after {len(data)} bytes")
            data += chunk
    return decode_response(api_key, version, data[4:])


def _probe_api_versions(host: str, port: int) -> str | None:
    try:
        response = _roundtrip(host, port, ApiKey.API_VERSIONS, 0, {})
    except Exception as exc:   # refused while starting, reset, timeout
        return f"{type(exc).__name__}: {exc}"
    if response["error_code"] != 0:
        return f"ApiVersions error code {response['error_code']}"
    return None


def _finalized_features(host: str, port: int) -> dict[str, int]:
    response = _roundtrip(host, port, ApiKey.API_VERSIONS, 3,
                          {"client_software_name": "akresil-kafka-cluster", "client_software_version": "0"})
    return {f["name"]: int(f["max_version_level"]) for f in response.get("finalized_features") or ()}


def _metadata_broker_ids(host: str, port: int) -> set[int] | None:
    try:
        response = _roundtrip(host, port, ApiKey.METADATA, 1, {"topics": []})
    except Exception:
        return None
    return {int(b["node_id"]) for b in response["brokers"]}
