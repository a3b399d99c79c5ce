"""TLS and SASL end to end: akresil's clients through FaultProxy acting as the secure front of Tansu.

Tansu 0.6 cannot serve either (its ``--cert``/``--key`` conflict and a ``tls://`` listener still speaks
plaintext; ``--authentication`` offers SCRAM only, and its users can only be created through an already
authenticated connection), so the proxy terminates TLS and answers SaslHandshake / SaslAuthenticate itself.
The PKI (a CA, a server certificate for 127.0.0.1, a client certificate with an encrypted key, and an unrelated
CA) is made per module with the openssl CLI.  aiokafka and librdkafka authenticate against the same front, so
its server-side SCRAM is checked against two independent client implementations.
"""

from __future__ import annotations

import logging
import shutil
import socket
import ssl
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil import errors
from akresil.net.connection import Connection
from akresil.net.sasl import MECHANISMS, PlainClient, SaslConfig, ScramClient
from akresil.protocol.api import ApiKey, decode_response, encode_request
from akresil.testing import EmbeddedBroker, FaultProxy

from ..harness.e2e import unique_topic

pytestmark = [pytest.mark.broker,
              pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")]

USER, PASSWORD = "alice", "Alice-pw-7c1e9f"
KEY_PASSWORD = "key-pw-3b8d52"
USERS = {USER: PASSWORD, "bob": "Bob-pw-55aa01"}
# client-side bounds: a refused client must fail well inside these, never wait them out
FAST = dict(request_timeout_ms=5_000, socket_connection_setup_timeout_ms=5_000, reconnect_backoff_ms=50)
#: a failed authentication must surface within this (generous for a loaded machine; it takes ~10 ms idle)
FAIL_FAST_S = 4.0


# ---------------------------------------------------------------------------------------------- PKI
@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path      # encrypted with KEY_PASSWORD
    other_ca: Path

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.server_cert, self.server_key)
        if require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(self.ca)
        return ctx

    def client_context(self, *, trust: Path | None = None, with_cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(trust or self.ca))
        if with_cert:
            ctx.load_cert_chain(self.client_cert, self.client_key, password=KEY_PASSWORD)
        return ctx


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_ca(where: Path, name: str) -> tuple[Path, Path]:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "1", "-subj", f"/CN=akresil test {name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=where)
    return where / f"{name}.pem", where / f"{name}.key"


def _make_leaf(where: Path, name: str, ca: str, extensions: str, key_password: str | None = None) -> None:
    key_opts = ["-passout", f"pass:{key_password}"] if key_password else ["-nodes"]
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", *key_opts,
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=where)
    (where / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext", cwd=where)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    where = tmp_path_factory.mktemp("pki")
    ca, _ = _make_ca(where, "ca")
    other_ca, _ = _make_ca(where, "other-ca")
    _make_leaf(where, "server", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
               "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    _make_leaf(where, "client", "ca", "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
               "extendedKeyUsage=clientAuth\n", key_password=KEY_PASSWORD)
    assert b"ENCRYPTED" in (where / "client.key").read_bytes()
    return Pki(ca, where / "server.pem", where / "server.key", where / "client.pem", where / "client.key", other_ca)


# ---------------------------------------------------------------------------------------------- helpers
async def round_trip(bootstrap: str, **security: Any) -> None:
    """Admin creates a topic, Producer writes to both partitions, Consumer reads everything back."""
    topic = unique_topic("sec")
    async with Admin(bootstrap_servers=bootstrap, **FAST, **security) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    sent = {(p, b"v%d-%d" % (p, i)) for p in (0, 1) for i in range(10)}
    async with Producer(bootstrap_servers=bootstrap, linger_ms=1, **FAST, **security) as producer:
        for p in (0, 1):
            mds = await producer.send_many(topic, [(None, v) for q, v in sorted(sent) if q == p], partition=p)
            assert [md.offset for md in mds] == list(range(10))
    got: set[tuple[int, bytes]] = set()
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **FAST, **security) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        with anyio.fail_after(20):
            while len(got) < len(sent):
                for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                    got |= {(tp.partition, r.value) for r in records}
    assert got == sent


def sasl(mechanism: str, password: str = PASSWORD, *, tls: ssl.SSLContext | None = None) -> dict[str, Any]:
    return dict(security_protocol="SASL_SSL" if tls else "SASL_PLAINTEXT", ssl_context=tls,
                sasl_mechanism=mechanism, sasl_plain_username=USER, sasl_plain_password=password)


def authenticated_connections(proxy: FaultProxy) -> tuple[int, int]:
    """(connections opened, SaslAuthenticate exchanges that succeeded) as the proxy recorded them."""
    opened = len(proxy.connections(kind="open"))
    answers = proxy.responses(ApiKey.SASL_AUTHENTICATE)
    refused = {r.connection_id for r in answers if r.error_codes}
    return opened, len({r.connection_id for r in answers} - refused)


# ---------------------------------------------------------------------------------------------- TLS
async def test_tls_producer_consumer_admin(broker: EmbeddedBroker, pki: Pki) -> None:
    async with FaultProxy(broker.bootstrap_servers, nodes=2, ssl_context=pki.server_context()) as proxy:
        await round_trip(proxy.bootstrap_servers, security_protocol="SSL", ssl_context=pki.client_context())
        assert len(proxy.connections(kind="open")) >= 3   # every client, every node it used: all over TLS


async def test_mutual_tls_with_an_encrypted_client_key(broker: EmbeddedBroker, pki: Pki) -> None:
    server = pki.server_context(require_client_cert=True)
    async with FaultProxy(broker.bootstrap_servers, nodes=1, ssl_context=server) as proxy:
        await round_trip(proxy.bootstrap_servers, security_protocol="SSL",
                         ssl_context=pki.client_context(with_cert=True))


@pytest.mark.parametrize("client", ["producer", "consumer", "admin"])
async def test_tls_with_the_wrong_ca_fails_fast_and_is_not_retried(broker: EmbeddedBroker, pki: Pki,
                                                                  client: str) -> None:
    async with FaultProxy(broker.bootstrap_servers, nodes=1, ssl_context=pki.server_context()) as proxy:
        security = dict(security_protocol="SSL", ssl_context=pki.client_context(trust=pki.other_ca), **FAST)
        started = time.monotonic()
        with pytest.raises(errors.AuthenticationError, match="TLS handshake .* failed.*CERTIFICATE_VERIFY_FAILED"):
            await start_client(client, proxy.bootstrap_servers, security)
        assert time.monotonic() - started < FAIL_FAST_S
        # the handshake never completed, so the proxy never accepted a connection to record
        assert proxy.connections(kind="open") == ()


async def test_plaintext_client_on_a_tls_listener_gives_up_within_its_bounds(broker: EmbeddedBroker,
                                                                             pki: Pki) -> None:
    async with FaultProxy(broker.bootstrap_servers, nodes=1, ssl_context=pki.server_context()) as proxy:
        started = time.monotonic()
        with pytest.raises(errors.NoBrokersAvailableError):
            async with Producer(bootstrap_servers=proxy.bootstrap_servers, request_timeout_ms=500,
                                socket_connection_setup_timeout_ms=500, bootstrap_timeout_ms=1000):
                pass
        assert time.monotonic() - started < 1.0 + 6.0   # bootstrap_timeout_ms, plus slack for a loaded host


async def start_client(kind: str, bootstrap: str, security: dict[str, Any]) -> None:
    if kind == "producer":
        async with Producer(bootstrap_servers=bootstrap, **security):
            pass
    elif kind == "consumer":
        async with Consumer("t", bootstrap_servers=bootstrap, **security):
            pass
    else:
        async with Admin(bootstrap_servers=bootstrap, **security):
            pass


# ---------------------------------------------------------------------------------------------- SASL
@pytest.mark.parametrize("tls", [False, True], ids=["sasl_plaintext", "sasl_ssl"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_sasl_producer_consumer_admin(broker: EmbeddedBroker, pki: Pki, mechanism: str, tls: bool) -> None:
    async with FaultProxy(broker.bootstrap_servers, nodes=2, sasl_users=USERS,
                          ssl_context=pki.server_context() if tls else None) as proxy:
        await round_trip(proxy.bootstrap_servers,
                         **sasl(mechanism, tls=pki.client_context() if tls else None))
        opened, authenticated = authenticated_connections(proxy)
        assert opened >= 3 and authenticated == opened   # no connection got through without authenticating
        assert {r.api_version for r in proxy.requests(ApiKey.SASL_HANDSHAKE)} == {1}
        assert proxy.requests(ApiKey.SASL_AUTHENTICATE)[0].api_version == 2


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sasl_ssl_under_both_backends(broker: EmbeddedBroker, pki: Pki, backend: str) -> None:
    with FaultProxy(broker.bootstrap_servers, nodes=2, sasl_users=USERS, ssl_context=pki.server_context()) as proxy:
        anyio.run(lambda: round_trip(proxy.bootstrap_servers, **sasl("SCRAM-SHA-512", tls=pki.client_context())),
                  backend=backend)

        async def refused() -> None:
            with pytest.raises(errors.AuthenticationError):
                await start_client("consumer", proxy.bootstrap_servers,
                                   {**sasl("SCRAM-SHA-512", "nope", tls=pki.client_context()), **FAST})

        anyio.run(refused, backend=backend)
        # the proxy records in its own thread, after writing: give the last records a moment to land
        deadline = time.monotonic() + 2.0
        opened, authenticated = authenticated_connections(proxy)
        while authenticated != opened - 1 and time.monotonic() < deadline:
            time.sleep(0.05)
            opened, authenticated = authenticated_connections(proxy)
        assert authenticated == opened - 1   # every connection but the refused one


@pytest.mark.parametrize("client", ["producer", "consumer", "admin"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_wrong_password_fails_fast_without_a_retry_storm(broker: EmbeddedBroker, mechanism: str,
                                                               client: str) -> None:
    async with FaultProxy(broker.bootstrap_servers, nodes=3, sasl_users=USERS) as proxy:
        started = time.monotonic()
        with pytest.raises(errors.AuthenticationError) as info:
            await start_client(client, proxy.bootstrap_servers, {**sasl(mechanism, "not-the-password"), **FAST})
        elapsed = time.monotonic() - started
        error = info.value
        assert isinstance(error, errors.SaslAuthenticationFailedError) and error.errno == 58
        assert not error.retriable
        assert f"SASL {mechanism} authentication as 'alice'" in str(error) and "invalid credentials" in str(error)
        assert elapsed < FAIL_FAST_S
        await anyio.sleep(0.1)   # anything still retrying in the background would show up now
        opened = proxy.connections(kind="open")
        assert len(opened) == 1, opened   # fatal at once: one attempt, no reconnects to other nodes
        closes = proxy.connections(kind="close")
        assert [c.reason for c in closes] == [f"SASL authentication failed: SASL {mechanism} authentication "
                                              "failed: invalid credentials"]
        failed = proxy.responses(ApiKey.SASL_AUTHENTICATE)
        assert [r.error_codes for r in failed][-1] == (58,)
        assert not proxy.requests(ApiKey.METADATA)   # nothing reached the broker


async def test_unsupported_mechanism_names_the_enabled_ones(broker: EmbeddedBroker) -> None:
    async with FaultProxy(broker.bootstrap_servers, nodes=1, sasl_users=USERS,
                          sasl_mechanisms=["SCRAM-SHA-512"]) as proxy:
        started = time.monotonic()
        with pytest.raises(errors.AuthenticationError, match=r"does not accept SASL mechanism PLAIN "
                                                             r"\(offers: SCRAM-SHA-512; error code 33\)"):
            await start_client("producer", proxy.bootstrap_servers, {**sasl("PLAIN"), **FAST})
        assert time.monotonic() - started < FAIL_FAST_S
        assert len(proxy.connections(kind="open")) == 1


async def test_unauthenticated_requests_are_refused_as_kafka_does(broker: EmbeddedBroker) -> None:
    async with FaultProxy(broker.bootstrap_servers, nodes=1, sasl_users=USERS) as proxy:
        host, port = proxy.host, proxy.port(1)
        # before the handshake: closed without an answer (Kafka's reaction to a PLAINTEXT client on SASL)
        conn = await Connection.connect(host, port)
        assert conn.versions[ApiKey.SASL_AUTHENTICATE] == 2 and conn.versions[ApiKey.SASL_HANDSHAKE] == 1
        with pytest.raises(errors.KafkaConnectionError, match="closed by the peer"):
            await conn.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})
        # between handshake and authentication: ILLEGAL_SASL_STATE, then closed
        conn = await Connection.connect(host, port)
        assert (await conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"}, version=1))["error_code"] == 0
        answer = await conn.request(ApiKey.API_VERSIONS, {}, version=0)
        assert answer["error_code"] == errors.IllegalSaslStateError.errno
        with pytest.raises(errors.KafkaConnectionError):
            await conn.request(ApiKey.API_VERSIONS, {}, version=0)
        # authenticated: a second handshake is refused but the connection stays usable
        conn = await Connection.connect(host, port, sasl=SaslConfig("SCRAM-SHA-256", USER, PASSWORD))
        again = await conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"}, version=1)
        assert again["error_code"] == errors.IllegalSaslStateError.errno
        response = await conn.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})
        assert response["brokers"][0]["port"] == port
        await conn.close()
    reasons = [c.reason for c in proxy.connections(kind="close")]
    assert reasons[:2] == ["api_key 3 sent before SASL authentication",
                           "api_key 18 sent during SASL authentication"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_sasl_handshake_v0_exchanges_bare_tokens(broker: EmbeddedBroker, mechanism: str) -> None:
    """Pre-KIP-152 clients send the tokens as bare size-prefixed frames after SaslHandshake v0."""
    with FaultProxy(broker.bootstrap_servers, nodes=1, sasl_users=USERS) as proxy, \
            socket.create_connection((proxy.host, proxy.port(1)), timeout=10) as sock:
        def send(payload: bytes) -> None:
            sock.sendall(struct.pack(">i", len(payload)) + payload)

        def receive() -> bytes:
            size = struct.unpack(">i", _read(sock, 4))[0]
            return _read(sock, size)

        sock.sendall(encode_request(ApiKey.SASL_HANDSHAKE, 0, 1, "v0", {"mechanism": mechanism}))
        assert decode_response(ApiKey.SASL_HANDSHAKE, 0, receive())["error_code"] == 0
        client = PlainClient(USER, PASSWORD) if mechanism == "PLAIN" else ScramClient(mechanism, USER, PASSWORD)
        token: bytes | None = client.first()
        while token is not None:
            send(token)
            token = client.step(receive())
        assert client.complete
        sock.sendall(encode_request(ApiKey.METADATA, 1, 2, "v0", {"topics": []}))
        assert decode_response(ApiKey.METADATA, 1, receive())["brokers"][0]["node_id"] == 1


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


# ---------------------------------------------------------------------------------------------- interop
async def test_aiokafka_authenticates_against_the_front(broker: EmbeddedBroker, pki: Pki) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    async with FaultProxy(broker.bootstrap_servers, nodes=1, sasl_users=USERS,
                          ssl_context=pki.server_context()) as proxy:
        for mechanism in MECHANISMS:
            producer = aiokafka.AIOKafkaProducer(
                bootstrap_servers=proxy.bootstrap_servers, security_protocol="SASL_SSL",
                ssl_context=pki.client_context(), sasl_mechanism=mechanism, sasl_plain_username=USER,
                sasl_plain_password=PASSWORD, request_timeout_ms=5_000)
            await producer.start()
            try:
                await producer.send_and_wait(unique_topic("aiokafka"), b"x")
            finally:
                await producer.stop()


def test_librdkafka_authenticates_against_the_front(broker: EmbeddedBroker, pki: Pki) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with FaultProxy(broker.bootstrap_servers, nodes=1, sasl_users=USERS, ssl_context=pki.server_context()) as proxy:
        for mechanism in MECHANISMS:
            delivered: list[Any] = []
            producer = confluent_kafka.Producer({
                "bootstrap.servers": proxy.bootstrap_servers, "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(pki.ca), "sasl.mechanisms": mechanism, "sasl.username": USER,
                "sasl.password": PASSWORD, "message.timeout.ms": 10_000})
            producer.produce(unique_topic("rdkafka"), b"y", on_delivery=lambda err, msg: delivered.append(err))
            assert producer.flush(15) == 0
            assert delivered == [None]


# ---------------------------------------------------------------------------------------------- redaction
async def test_no_credential_in_logs_errors_or_metric_labels(broker: EmbeddedBroker, pki: Pki,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    caplog.set_level(logging.DEBUG)   # every logger, at DEBUG
    raised: list[BaseException] = []
    async with FaultProxy(broker.bootstrap_servers, nodes=2, sasl_users=USERS,
                          ssl_context=pki.server_context(require_client_cert=True)) as proxy:
        tls = pki.client_context(with_cert=True)
        for mechanism in MECHANISMS:
            await round_trip(proxy.bootstrap_servers, metrics_registry=registry, client_id=f"c-{mechanism}",
                             **sasl(mechanism, tls=tls))
            for wrong in (PASSWORD[:-1], PASSWORD + "x"):
                try:
                    await start_client("producer", proxy.bootstrap_servers,
                                       {**sasl(mechanism, wrong, tls=tls), **FAST})
                except errors.AuthenticationError as exc:
                    raised.append(exc)
    assert len(raised) == 2 * len(MECHANISMS)
    secrets = [PASSWORD, PASSWORD[:-1], PASSWORD + "x", KEY_PASSWORD, *USERS.values()]
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    texts = [formatter.format(record) + repr(record.args) for record in caplog.records]
    texts += [repr(exc) + str(exc) + repr(exc.__cause__) + repr(exc.__context__) for exc in raised]
    texts += [repr(dict(sample.labels)) for metric in registry.collect() for sample in metric.samples]
    assert len(caplog.records) > 10 and len(texts) > 20
    for secret in secrets:
        leaks = [text for text in texts if secret in text]
        assert not leaks, (secret, leaks[:3])


# ---------------------------------------------------------------------------------------------- wrong listener
@pytest.mark.parametrize("listener, client_security, needs", [
    ("sasl", {}, "may require SASL or TLS"),
    ("tls", {}, "may require SASL or TLS"),
    ("tls", {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": USER,
             "sasl_plain_password": PASSWORD}, "may require TLS (security_protocol='SASL_SSL')"),
], ids=["plaintext-on-sasl", "plaintext-on-tls", "sasl-on-tls"])
async def test_a_client_on_the_wrong_kind_of_listener_is_told_what_it_may_need(
        broker: EmbeddedBroker, pki: Pki, caplog: pytest.LogCaptureFixture, listener: str,
        client_security: dict[str, Any], needs: str) -> None:
    # a Kafka SASL listener answers ApiVersions, then closes on anything but SaslHandshake; a TLS listener
    # closes on the plaintext bytes: the client's error and its per-round WARNING say what may be missing
    front: dict[str, Any] = {"sasl_users": USERS} if listener == "sasl" else {"ssl_context": pki.server_context()}
    caplog.set_level(logging.WARNING, logger="akresil.net.cluster")
    async with FaultProxy(broker.bootstrap_servers, nodes=1, **front) as proxy:
        with pytest.raises(errors.NoBrokersAvailableError) as info:
            async with Producer(bootstrap_servers=proxy.bootstrap_servers, bootstrap_timeout_ms=1_000,
                                **client_security):
                pass
    assert f"closed by the peer during or right after ApiVersions: the listener {needs}" in str(info.value)
    first = next(r.getMessage() for r in caplog.records if "no bootstrap server answered" in r.getMessage())
    assert needs in first


async def test_a_close_after_the_listener_answered_gives_no_hint(broker: EmbeddedBroker) -> None:
    async with FaultProxy(broker.bootstrap_servers, nodes=1) as proxy:
        conn = await Connection.connect(proxy.host, proxy.port(1))
        await conn.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})
        await proxy.adrop_connections(1)
        with pytest.raises(errors.KafkaConnectionError) as info:
            await conn.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})
        await conn.close()
        assert "ApiVersions" not in str(info.value) and "SASL" not in str(info.value)
