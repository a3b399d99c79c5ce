"""OAUTHBEARER pieces without a network: message format (RFC 7628 / KIP-255), extensions (KIP-342), the
server side, JWT expiry, and TokenSource's refresh decisions on an injected wall clock."""

from __future__ import annotations

import base64
import json

import pytest

from akresil import errors
from akresil.net.oauth import TokenSource, to_token
from akresil.net.sasl import OAuthBearerClient, OAuthToken, SaslConfig, check_extensions, client_first_message
from akresil.testing.sasl_server import OAuthBearerServer, OAuthGrant, SaslUserTable, parse_client_first_message


def _jwt(claims: dict[str, object]) -> str:
    def part(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return f"{part({'alg': 'none'})}.{part(claims)}.sig"


def test_client_first_message_carries_token_and_sorted_extensions() -> None:
    token = OAuthToken("abc-123", 10, extensions={"zone": "eu", "logicalCluster": "lkc-1"})
    assert client_first_message(token) == b"n,,\x01auth=Bearer abc-123\x01logicalCluster=lkc-1\x01zone=eu\x01\x01"
    assert parse_client_first_message(client_first_message(token)) == ("abc-123", {"logicalCluster": "lkc-1",
                                                                                   "zone": "eu"})


@pytest.mark.parametrize("extensions, problem", [
    ({"auth": "x"}, "key 'auth'"),
    ({"bad-key": "x"}, "key 'bad-key'"),
    ({"ok": ""}, "value of 'ok'"),
    ({"ok": "caf\u00e9"}, "value of 'ok'"),
])
def test_extensions_follow_kip_342(extensions: dict[str, str], problem: str) -> None:
    with pytest.raises(errors.ConfigError, match=problem):
        check_extensions(extensions)


def test_token_value_and_expiry_are_checked() -> None:
    with pytest.raises(errors.ConfigError, match="bearer token"):
        OAuthToken("has space", 1)
    with pytest.raises(errors.ConfigError, match="expires_at_ms"):
        OAuthToken("abc", 1.5)  # type: ignore[arg-type]
    assert "abc" not in repr(OAuthToken("abc", 1))


@pytest.mark.parametrize("message", [
    b"y,,\x01auth=Bearer t\x01\x01x",          # no terminator
    b"n,,\x01auth=Basic t\x01\x01",            # not a bearer token
    b"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01",
    b"n,,\x01auth=Bearer t\x01k\x01\x01",      # key without value
    b"n,\x01auth=Bearer t\x01\x01",            # gs2 header cut short
    "n,,\x01auth=Bearer t\x01k=caf\u00e9\x01\x01".encode(),
])
def test_server_rejects_malformed_messages(message: bytes) -> None:
    with pytest.raises(errors.AuthenticationError):
        parse_client_first_message(message)


def test_refusal_goes_through_the_error_document_then_fails() -> None:
    def validator(token: str, ext: dict[str, str]) -> OAuthGrant:
        if token != "good":
            raise errors.AuthenticationError("signature invalid")
        return OAuthGrant("User:svc", 5_000)

    server = OAuthBearerServer(validator)
    assert server.step(client_first_message(OAuthToken("good", 1))) == b""
    assert server.complete and server.username == "User:svc" and server.session_lifetime_ms == 5_000

    refusing = OAuthBearerServer(validator)
    client = OAuthBearerClient(OAuthToken("forged", 1))
    challenge = refusing.step(client.first())
    assert json.loads(challenge) == {"status": "invalid_token"}
    assert client.step(challenge) == b"\x01"       # RFC 7628: acknowledge the error with a lone kvsep
    assert client.server_error == '{"status":"invalid_token"}'
    with pytest.raises(errors.AuthenticationError, match="signature invalid"):
        refusing.step(b"\x01")
    assert not refusing.complete


def test_user_table_and_sasl_config_need_the_oauth_pieces() -> None:
    with pytest.raises(errors.ConfigError, match="OAUTHBEARER needs an oauth_validator"):
        SaslUserTable({}, mechanisms=["OAUTHBEARER"])
    with pytest.raises(errors.ConfigError, match="sasl_oauth_token_provider is required"):
        SaslConfig("OAUTHBEARER", None)


def test_jwt_strings_become_tokens_through_their_claims() -> None:
    token = to_token(_jwt({"exp": 1_700_000_000, "sub": "svc-account"}), {"k": "v"})
    assert token.expires_at_ms == 1_700_000_000_000 and token.principal == "svc-account"
    assert token.extensions == {"k": "v"}
    with pytest.raises(errors.ConfigError, match="no numeric 'exp'"):
        to_token(_jwt({"sub": "x"}))
    with pytest.raises(errors.ConfigError, match="not a JWT"):
        to_token("opaque")
    with pytest.raises(errors.ConfigError, match="returned int"):
        to_token(42)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


async def test_token_source_refreshes_at_80_percent_and_shares_the_token() -> None:
    clock = Clock()
    issued: list[OAuthToken] = []

    async def provider() -> OAuthToken:
        token = OAuthToken(f"t{len(issued)}", clock.now + 10_000)
        issued.append(token)
        return token

    source = TokenSource(provider, clock=clock)
    first = await source.token()
    assert await source.token() is first and source.fetches == 1
    assert source.refresh_at_ms == clock.now + 8_000
    clock.now += 7_999
    assert await source.token() is first
    clock.now += 1
    second = await source.token()
    assert second is not first and source.fetches == 2


async def test_token_source_keeps_a_valid_token_when_a_refresh_fails() -> None:
    clock = Clock()
    answers: list[object] = [OAuthToken("t0", clock.now + 10_000), OSError("idp down"), OSError("idp down")]

    def provider() -> OAuthToken:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]

    source = TokenSource(provider, clock=clock)
    first = await source.token()
    clock.now += 8_000
    assert await source.token() is first            # refresh failed: keep the token, retry halfway to expiry
    assert source.refresh_at_ms == clock.now + 1_000
    clock.now += 2_001                              # now expired, and the provider still fails
    with pytest.raises(errors.KafkaConnectionError, match="token provider failed: idp down"):
        await source.token()


async def test_token_source_refuses_expired_tokens_and_passes_authentication_errors() -> None:
    clock = Clock()
    with pytest.raises(errors.AuthenticationError, match="expired 5 ms ago"):
        await TokenSource(lambda: OAuthToken("t", clock.now - 5), clock=clock).token()

    def refused() -> OAuthToken:
        raise errors.AuthenticationError("invalid_client")

    with pytest.raises(errors.AuthenticationError, match="invalid_client"):
        await TokenSource(refused, clock=clock).token()
    with pytest.raises(errors.ConfigError, match="must be callable"):
        TokenSource("not callable")  # type: ignore[arg-type]
