"""SASL/OAUTHBEARER end to end: FaultProxy acts as the authenticating broker in front of Tansu.

The proxy's validator plays the broker's token verification: it accepts tokens it issued, refuses others, and
grants a session lifetime (KIP-368) after which a request closes the connection, as Kafka does. Covered: sync
and async token providers, SASL extensions, refresh before expiry with re-authentication (new connections
with the refreshed token), a refused token (fatal, clear error, one attempt: no retry storm), and the built-in
OIDC client-credentials provider against a token endpoint served on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Iterator, Mapping

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition, errors
from akresil.net.oauth import OidcClientCredentials
from akresil.net.sasl import OAuthToken
from akresil.testing.sasl_server import OAuthGrant
from akresil.protocol.api import ApiKey
from akresil.testing import EmbeddedBroker, FaultProxy

FAST = {"retry_backoff_ms": 20, "reconnect_backoff_ms": 20, "reconnect_backoff_max_ms": 200}


class Issuer:
    """Issues opaque tokens and validates them like a broker's OAuth validator would."""

    def __init__(self, lifetime_ms: int = 60_000, session_ms: int | None = None) -> None:
        self.lifetime_ms = lifetime_ms
        self.session_ms = session_ms
        self.issued: dict[str, int] = {}          # token -> expiry (wall ms)
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.lock = threading.Lock()

    def issue(self, extensions: Mapping[str, str] | None = None) -> OAuthToken:
        with self.lock:
            value = f"tok{len(self.issued)}.{time.monotonic_ns()}"
            expires = int(time.time() * 1000) + self.lifetime_ms
            self.issued[value] = expires
        return OAuthToken(value, expires, principal="svc", extensions=dict(extensions or {}))

    def validate(self, token: str, extensions: Mapping[str, str]) -> OAuthGrant:
        with self.lock:
            self.seen.append((token, dict(extensions)))
            expires = self.issued.get(token)
        if expires is None:
            raise errors.AuthenticationError("unknown token")
        remaining = expires - int(time.time() * 1000)
        if remaining <= 0:
            raise errors.AuthenticationError("expired token")
        return OAuthGrant("User:svc", min(remaining, self.session_ms or remaining))


def oauth(provider: Any) -> dict[str, Any]:
    return dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                sasl_oauth_token_provider=provider, **FAST)


async def _round_trip(bootstrap: str, security: dict[str, Any], topic: str) -> None:
    async with Admin(bootstrap_servers=bootstrap, **security) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    async with Producer(bootstrap_servers=bootstrap, **security) as producer:
        await producer.send(topic, b"hello", partition=0)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **security) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        with anyio.fail_after(20):
            got: list[Any] = []
            while not got:
                got = (await consumer.getmany(timeout_ms=500)).get(TopicPartition(topic, 0), [])
    assert got[0].value == b"hello"


async def test_sync_provider_with_extensions(broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="akresil")
    issuer = Issuer()
    calls: list[int] = []

    def provider() -> OAuthToken:      # sync: runs in a worker thread
        calls.append(1)
        return issuer.issue({"logicalCluster": "lkc-1", "identityPoolId": "pool"})

    async with FaultProxy(broker.bootstrap_servers, nodes=2, sasl_oauth_validator=issuer.validate) as proxy:
        await _round_trip(proxy.bootstrap_servers, oauth(provider), f"oauth-sync-{time.monotonic_ns()}")
        # one token per client (three clients), shared by each client's connections
        assert len(calls) == 3
        assert {tuple(sorted(ext.items())) for _, ext in issuer.seen} == {
            (("identityPoolId", "pool"), ("logicalCluster", "lkc-1"))}
        answers = proxy.responses(ApiKey.SASL_AUTHENTICATE)
        assert answers and not any(r.error_codes for r in answers)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert logged and not any(token in logged for token in issuer.issued)   # tokens are never logged


async def test_async_provider_refreshes_and_reauthenticates_before_expiry(broker: EmbeddedBroker) -> None:
    # tokens live 2 s: refreshed at 80% (1.6 s); the broker grants sessions up to the token's expiry and
    # closes a connection used after that, so the client must reconnect with the new token in time
    issuer = Issuer(lifetime_ms=2_000)
    fetched: list[str] = []

    async def provider() -> OAuthToken:
        await anyio.sleep(0)
        token = issuer.issue()
        fetched.append(token.value)
        return token

    async with FaultProxy(broker.bootstrap_servers, nodes=1, sasl_oauth_validator=issuer.validate) as proxy:
        async with Admin(bootstrap_servers=proxy.bootstrap_servers, **oauth(provider)) as admin:
            topic = f"oauth-refresh-{time.monotonic_ns()}"
            await admin.create_topics([NewTopic(topic, 1, 1)])
            end = time.monotonic() + 5.0
            while time.monotonic() < end:          # keep using the client across several token lifetimes
                assert topic in await admin.list_topics()
                await anyio.sleep(0.2)
        assert len(fetched) >= 3                   # refreshed: 5 s of use, 2 s tokens
        used = [token for token, _ in issuer.seen]
        assert len(set(used)) >= 3                 # re-authenticated with refreshed tokens
        refused = [r for r in proxy.responses(ApiKey.SASL_AUTHENTICATE) if r.error_codes]
        assert refused == []                       # never presented an expired token
        closed_expired = [c for c in proxy.connections(kind="close")
                          if "SASL session expired" in (c.reason or "")]
        assert closed_expired == []                # reconnected before the broker had to close anything


async def test_refused_token_is_fatal_with_a_clear_error_and_no_retry_storm(broker: EmbeddedBroker) -> None:
    issuer = Issuer()
    calls: list[int] = []

    def provider() -> OAuthToken:
        calls.append(1)
        return OAuthToken("forged.token.value", int(time.time() * 1000) + 60_000, principal="mallory")

    async with FaultProxy(broker.bootstrap_servers, nodes=3, sasl_oauth_validator=issuer.validate) as proxy:
        started = time.monotonic()
        with pytest.raises(errors.AuthenticationError, match="OAUTHBEARER authentication as token principal "
                                                             "'mallory'.*failed"):
            async with Admin(bootstrap_servers=proxy.bootstrap_servers, **oauth(provider)):
                pass
        assert time.monotonic() - started < 10.0
        await anyio.sleep(0.5)                     # nothing keeps trying in the background
        attempts = [r for r in proxy.requests(ApiKey.SASL_HANDSHAKE)]
        assert len(attempts) == 1 and len(calls) == 1


async def test_provider_failure_without_a_token_is_transient_then_recovers(broker: EmbeddedBroker) -> None:
    issuer = Issuer()
    outcomes = iter([OSError("identity provider unreachable")])

    def provider() -> OAuthToken:
        failure = next(outcomes, None)
        if failure is not None:
            raise failure
        return issuer.issue()

    async with FaultProxy(broker.bootstrap_servers, nodes=1, sasl_oauth_validator=issuer.validate) as proxy:
        async with Admin(bootstrap_servers=proxy.bootstrap_servers, **oauth(provider)) as admin:
            assert (await admin.describe_cluster()).brokers


# ---------------------------------------------------------------------------------------------- OIDC
class _TokenEndpoint(BaseHTTPRequestHandler):
    issuer: Issuer
    requests: list[dict[str, Any]]

    def do_POST(self) -> None:   # noqa: N802 (http.server's naming)
        length = int(self.headers.get("Content-Length", "0"))
        form = dict(pair.split("=", 1) for pair in self.rfile.read(length).decode().split("&"))
        auth = base64.b64decode(self.headers.get("Authorization", "Basic ").split(" ", 1)[1]).decode()
        self.requests.append({"form": form, "auth": auth, "content_type": self.headers.get("Content-Type")})
        if auth != "kafka-client:s3cret":
            body, status = b'{"error":"invalid_client"}', 401
        else:
            token = self.issuer.issue()
            body, status = json.dumps({"access_token": token.value, "token_type": "Bearer",
                                       "expires_in": self.issuer.lifetime_ms / 1000}).encode(), 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def token_endpoint() -> Iterator[tuple[str, Issuer, list[dict[str, Any]]]]:
    issuer = Issuer()
    seen: list[dict[str, Any]] = []
    handler = type("Handler", (_TokenEndpoint,), {"issuer": issuer, "requests": seen})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/oauth2/token", issuer, seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def test_oidc_client_credentials_provider(broker: EmbeddedBroker,
                                                token_endpoint: tuple[str, Issuer, list[dict[str, Any]]]) -> None:
    url, issuer, seen = token_endpoint
    provider = OidcClientCredentials(url, "kafka-client", "s3cret", scope="kafka.write",
                                     extensions={"logicalCluster": "lkc-9"})
    assert "s3cret" not in repr(provider)
    async with FaultProxy(broker.bootstrap_servers, nodes=1, sasl_oauth_validator=issuer.validate) as proxy:
        async with Admin(bootstrap_servers=proxy.bootstrap_servers, **oauth(provider)) as admin:
            assert (await admin.describe_cluster()).brokers
    assert seen[0]["form"] == {"grant_type": "client_credentials", "scope": "kafka.write"}
    assert seen[0]["content_type"] == "application/x-www-form-urlencoded"
    assert issuer.seen and issuer.seen[0][1] == {"logicalCluster": "lkc-9"}

    wrong = OidcClientCredentials(url, "kafka-client", "wrong")
    with pytest.raises(errors.AuthenticationError, match="refused client 'kafka-client': HTTP 401"):
        await wrong()
    async with FaultProxy(broker.bootstrap_servers, nodes=1, sasl_oauth_validator=issuer.validate) as proxy:
        before = len(seen)
        with pytest.raises(errors.AuthenticationError, match="HTTP 401"):
            async with Admin(bootstrap_servers=proxy.bootstrap_servers, **oauth(wrong)):
                pass
        assert len(seen) == before + 1             # refused credentials are not retried
        assert proxy.requests(ApiKey.SASL_AUTHENTICATE) == ()


def test_oidc_arguments_are_checked() -> None:
    with pytest.raises(errors.ConfigError, match="token_endpoint_url"):
        OidcClientCredentials("ftp://idp/token", "a", "b")
    with pytest.raises(errors.ConfigError, match="client_secret"):
        OidcClientCredentials("https://idp/token", "a", "")
    with pytest.raises(errors.ConfigError, match="extensions: key 'auth'"):
        OidcClientCredentials("https://idp/token", "a", "b", extensions={"auth": "x"})
    with pytest.raises(errors.ConfigError, match="sasl_oauth_token_provider: required"):
        Admin(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER")
    with pytest.raises(errors.ConfigError, match="only used with sasl_mechanism='OAUTHBEARER'"):
        Admin(security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_plain_username="u",
              sasl_plain_password="p", sasl_oauth_token_provider=lambda: "x")
