"""ApiVersions negotiation and SASL over a Connection, against a fake broker speaking the real codec."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
from typing import Any, Awaitable, Callable

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute

from akresil import errors
from akresil.config import resolve
from akresil.net.cluster import Cluster, Lane
from akresil.net.connection import Connection
from akresil.net.framing import FrameDecoder
from akresil.net.sasl import SaslConfig
from akresil.protocol.api import ApiKey, decode_request, encode_response

BACKENDS = ["asyncio", "trio"]

# What the fake broker offers (a subset is enough: negotiation keeps only APIs both sides know).
OFFERED = {ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 9), ApiKey.PRODUCE: (0, 8),
           ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2), 1000: (0, 3)}


def api_versions_body(offered: dict[Any, tuple[int, int]], error_code: int = 0) -> dict[str, Any]:
    return {"error_code": error_code, "throttle_time_ms": 0,
            "api_keys": [{"api_key": int(k), "min_version": lo, "max_version": hi} for k, (lo, hi) in offered.items()]}


class FakeBroker:
    """Answers ApiVersions per ``api_versions`` policy and runs a SCRAM/PLAIN server for one user."""

    def __init__(self, *, max_api_versions: int = 4, garbage_on_unsupported: bool = False,
                 mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                 user: str = "alice", password: str = "wonderland", forge_signature: bool = False,
                 features: dict[str, int] | None = None, features_epoch: int = -1) -> None:
        self.max_api_versions = max_api_versions
        self.features, self.features_epoch = features, features_epoch
        self.garbage_on_unsupported = garbage_on_unsupported
        self.mechanisms = mechanisms
        self.user, self.password = user, password
        self.forge_signature = forge_signature
        self.asked: list[tuple[int, int]] = []
        self.mechanism = ""
        self.scram: dict[str, Any] = {}

    async def serve(self, stream: anyio.abc.ByteStream) -> None:
        decoder = FrameDecoder()
        while True:
            try:
                data = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            for frame in decoder.feed(data):
                header, body = decode_request(frame)
                api, version, cid = header["api_key"], header["api_version"], header["correlation_id"]
                self.asked.append((api, version))
                await stream.send(self.answer(api, version, cid, body))

    def answer(self, api: int, version: int, cid: int, body: dict[str, Any]) -> bytes:
        if api == ApiKey.API_VERSIONS:
            if version > self.max_api_versions:
                if self.garbage_on_unsupported:
                    # error code 35, then an array count that runs past the end (librdkafka mock style)
                    payload = struct.pack(">ihi", cid, 35, 0x7FFFFFF0) + b"\x00\x12"
                    return struct.pack(">i", len(payload)) + payload
                offered = {ApiKey.API_VERSIONS: (0, self.max_api_versions)}
                return encode_response(api, 0, cid, api_versions_body(offered, 35))
            answer = api_versions_body(OFFERED)
            if self.features is not None:
                answer["finalized_features_epoch"] = self.features_epoch
                answer["finalized_features"] = [{"name": n, "max_version_level": v, "min_version_level": 1}
                                                for n, v in self.features.items()]
            return encode_response(api, version, cid, answer)
        if api == ApiKey.SASL_HANDSHAKE:
            self.mechanism = body["mechanism"]
            code = 0 if self.mechanism in self.mechanisms else 33
            return encode_response(api, version, cid, {"error_code": code, "mechanisms": list(self.mechanisms)})
        if api == ApiKey.SASL_AUTHENTICATE:
            code, token = self.authenticate(body["auth_bytes"])
            return encode_response(api, version, cid, {
                "error_code": code, "error_message": "Authentication failed: invalid credentials" if code else None,
                "auth_bytes": token, "session_lifetime_ms": 0 if code else 3_600_000})
        raise AssertionError(f"unexpected api {api}")

    def authenticate(self, token: bytes) -> tuple[int, bytes]:
        if self.mechanism == "PLAIN":
            _, user, password = token.split(b"\0")
            return (0, b"") if (user.decode(), password.decode()) == (self.user, self.password) else (58, b"")
        digest = "sha256" if self.mechanism == "SCRAM-SHA-256" else "sha512"
        text = token.decode()
        if "salted" not in self.scram:
            bare = text[3:]
            nonce = dict(p.split("=", 1) for p in bare.split(","))["r"] + "srv"
            salt, iterations = b"pepper-salt", 4096
            self.scram = {"bare": bare, "nonce": nonce,
                          "first": f"r={nonce},s={base64.b64encode(salt).decode()},i={iterations}",
                          "salted": hashlib.pbkdf2_hmac(digest, self.password.encode(), salt, iterations)}
            return 0, self.scram["first"].encode()
        without_proof, _, proof = text.rpartition(",p=")
        auth = f"{self.scram['bare']},{self.scram['first']},{without_proof}".encode()
        salted = self.scram["salted"]
        stored = hashlib.new(digest, hmac.new(salted, b"Client Key", digest).digest()).digest()
        client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), hmac.new(stored, auth, digest).digest()))
        if hashlib.new(digest, client_key).digest() != stored:
            return 58, b""
        server_key = hmac.new(salted, b"Server Key", digest).digest()
        signature = hmac.new(server_key, auth + (b"x" if self.forge_signature else b""), digest).digest()
        return 0, b"v=" + base64.b64encode(signature)


async def against(broker: FakeBroker, body: Callable[[int], Awaitable[None]]) -> None:
    async with anyio.create_task_group() as tg:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        tg.start_soon(listener.serve, broker.serve)
        try:
            with anyio.fail_after(10):
                await body(listener.extra(SocketAttribute.local_port))
        finally:
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("backend", BACKENDS)
def test_negotiation_picks_highest_common_versions(backend: str) -> None:
    broker = FakeBroker()

    async def body(port: int) -> None:
        async with await Connection.connect("127.0.0.1", port, client_id="t") as conn:
            assert conn.versions[ApiKey.METADATA] == 9
            assert conn.versions[ApiKey.PRODUCE] == 8
            assert ApiKey.FETCH not in conn.versions  # not offered
            assert conn.api_ranges[ApiKey.PRODUCE] == (0, 8)
            assert conn.api_ranges[1000] == (0, 3)  # unknown API kept as a plain int
            with pytest.raises(errors.UnsupportedVersionError, match="no version of FETCH"):
                await conn.request(ApiKey.FETCH, {})

    anyio.run(body_wrapper(broker, body), backend=backend)
    assert broker.asked == [(18, 4)]


def body_wrapper(broker: FakeBroker, body: Callable[[int], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    return lambda: against(broker, body)


def test_finalized_features_are_read_and_the_newest_epoch_wins() -> None:
    """ApiVersions v3+ carries the cluster's finalized features (transaction.version picks the transaction
    protocol); brokers learn a change at different times, so the client keeps the answer of the highest epoch."""
    broker = FakeBroker(features={"transaction.version": 2, "group.version": 1}, features_epoch=7)

    async def body(port: int) -> None:
        async with await Connection.connect("127.0.0.1", port, client_id="t") as conn:
            assert conn.finalized_features == {"transaction.version": 2, "group.version": 1}
            assert conn.finalized_features_epoch == 7

    anyio.run(body_wrapper(broker, body))
    cluster = Cluster(resolve("producer", {}))
    assert cluster.feature_level("transaction.version") == 0          # nothing known yet
    cluster._learn_features({"transaction.version": 2}, 7)            # noqa: SLF001
    cluster._learn_features({"transaction.version": 1}, 5)            # noqa: SLF001 - an older view: ignored
    assert cluster.feature_level("transaction.version") == 2
    cluster._learn_features({"transaction.version": 1}, 9)            # noqa: SLF001 - downgraded since
    assert cluster.feature_level("transaction.version") == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_unsupported_api_versions_retries_with_the_advertised_max(backend: str) -> None:
    broker = FakeBroker(max_api_versions=1)

    async def body(port: int) -> None:
        async with await Connection.connect("127.0.0.1", port) as conn:
            assert conn.versions[ApiKey.METADATA] == 9

    anyio.run(body_wrapper(broker, body), backend=backend)
    assert broker.asked == [(18, 4), (18, 1)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_unparsable_unsupported_answer_steps_down_one_version_at_a_time(backend: str) -> None:
    broker = FakeBroker(max_api_versions=2, garbage_on_unsupported=True)

    async def body(port: int) -> None:
        async with await Connection.connect("127.0.0.1", port) as conn:
            assert conn.versions[ApiKey.PRODUCE] == 8

    anyio.run(body_wrapper(broker, body), backend=backend)
    assert broker.asked == [(18, 4), (18, 3), (18, 2)]


def test_a_version_reached_blind_is_kept_and_a_later_connection_starts_there() -> None:
    """The step-down past unreadable rejections costs a round trip per step on every connection; the version it
    reached is kept (``stepped_api_versions``) and the cluster starts its next connections there. A rejection
    that names the broker's range is not a blind step: nothing is kept."""
    blind = FakeBroker(max_api_versions=2, garbage_on_unsupported=True)

    async def cluster_body(port: int) -> None:
        cluster = Cluster(resolve("consumer", {"bootstrap_servers": f"127.0.0.1:{port}"}))
        try:
            first = await cluster.connection(-1)
            assert first.stepped_api_versions == 2
            second = await cluster.connection(-1, Lane.GROUP)
            assert second is not first and second.versions == first.versions
        finally:
            await cluster.close()

    anyio.run(body_wrapper(blind, cluster_body))
    assert blind.asked == [(18, 4), (18, 3), (18, 2), (18, 2)]

    told = FakeBroker(max_api_versions=1)

    async def told_body(port: int) -> None:
        async with await Connection.connect("127.0.0.1", port) as conn:
            assert conn.stepped_api_versions is None
        async with await Connection.connect("127.0.0.1", port, api_versions_version=3) as conn:
            assert conn.versions[ApiKey.METADATA] == 9

    anyio.run(body_wrapper(told, told_body))
    assert told.asked == [(18, 4), (18, 1), (18, 3), (18, 1)]


def test_broker_rejecting_every_api_versions_version() -> None:
    broker = FakeBroker(max_api_versions=-1, garbage_on_unsupported=True)

    async def body(port: int) -> None:
        with pytest.raises(errors.UnsupportedVersionError, match="rejected every ApiVersions version"):
            await Connection.connect("127.0.0.1", port)

    anyio.run(body_wrapper(broker, body))
    assert [v for _, v in broker.asked] == [4, 3, 2, 1, 0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_succeeds_with_right_credentials(backend: str, mechanism: str) -> None:
    broker = FakeBroker()

    async def body(port: int) -> None:
        sasl = SaslConfig(mechanism, "alice", "wonderland")
        async with await Connection.connect("127.0.0.1", port, sasl=sasl) as conn:
            assert conn.session_lifetime_ms == 3_600_000
            assert not conn.closed

    anyio.run(body_wrapper(broker, body), backend=backend)
    rounds = 1 if mechanism == "PLAIN" else 2
    assert broker.asked == [(18, 4), (17, 1)] + [(36, 2)] * rounds


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_is_a_non_retriable_authentication_error(mechanism: str) -> None:
    broker = FakeBroker()

    async def body(port: int) -> None:
        sasl = SaslConfig(mechanism, "alice", "not-the-password")
        with pytest.raises(errors.AuthenticationError, match="invalid credentials") as info:
            await Connection.connect("127.0.0.1", port, sasl=sasl, node_id=1)
        assert not info.value.retriable
        assert "not-the-password" not in str(info.value)
        assert f"SASL {mechanism} authentication as 'alice' with node 1 at 127.0.0.1:{port}" in str(info.value)

    anyio.run(body_wrapper(broker, body))


def test_server_that_cannot_prove_the_password_is_rejected() -> None:
    broker = FakeBroker(forge_signature=True)

    async def body(port: int) -> None:
        with pytest.raises(errors.AuthenticationError, match="server signature mismatch"):
            await Connection.connect("127.0.0.1", port, sasl=SaslConfig("SCRAM-SHA-256", "alice", "wonderland"))

    anyio.run(body_wrapper(broker, body))


def test_mechanism_not_offered() -> None:
    broker = FakeBroker(mechanisms=("PLAIN",))

    async def body(port: int) -> None:
        with pytest.raises(errors.AuthenticationError, match=r"does not accept SASL mechanism SCRAM-SHA-512 "
                                                            r"\(offers: PLAIN; error code 33\)"):
            await Connection.connect("127.0.0.1", port, sasl=SaslConfig("SCRAM-SHA-512", "alice", "x"))

    anyio.run(body_wrapper(broker, body))


@pytest.mark.parametrize("backend", BACKENDS)
def test_malformed_response_body_is_a_protocol_error_and_closes(backend: str) -> None:
    class Truncating(FakeBroker):
        def answer(self, api: int, version: int, cid: int, body: dict[str, Any]) -> bytes:
            frame = super().answer(api, version, cid, body)
            if api == ApiKey.SASL_HANDSHAKE:
                frame = struct.pack(">i", 7) + frame[4:11]  # header + half a body
            return frame

    async def body(port: int) -> None:
        conn = await Connection.connect("127.0.0.1", port)
        with pytest.raises(errors.ProtocolError, match="malformed SASL_HANDSHAKE v1 response from 127.0.0.1"):
            await conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"}, version=1)
        assert conn.closed

    anyio.run(body_wrapper(Truncating(), body), backend=backend)
