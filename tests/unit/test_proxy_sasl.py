"""Server-side SASL (PLAIN, SCRAM per RFC 5802/7677) and the fault proxy's SaslGate, driven with plain calls."""

from __future__ import annotations

import base64

import pytest

from akresil.errors import AuthenticationError, ConfigError
from akresil.net.sasl import PlainClient, ScramClient
from akresil.testing.sasl_server import SaslUserTable, ScramCredential, ScramServer, failure_message
from akresil.testing.faults import (API_VERSIONS, ILLEGAL_SASL_STATE, METADATA, SASL_AUTHENTICATE,
                                    SASL_AUTHENTICATION_FAILED, SASL_HANDSHAKE, UNSUPPORTED_SASL_MECHANISM,
                                    GateAction, SaslGate)

# RFC 7677 section 3: user "user", password "pencil"; both nonces and the salt are fixed by the RFC.
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server() -> ScramServer:
    credential = ScramCredential.derive("SCRAM-SHA-256", "pencil", salt=RFC_SALT, iterations=4096)
    return ScramServer("SCRAM-SHA-256", {"user": credential}.get, nonce_factory=lambda: RFC_SERVER_NONCE)


def test_scram_server_matches_rfc7677_vector() -> None:
    server = rfc_server()
    assert server.step(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete and server.username is None
    assert server.step(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_server_and_client_agree(mechanism: str) -> None:
    table = SaslUserTable({"a,b=c": "pässword"}, mechanisms=[mechanism])   # escaped name, non-ASCII password
    server = table.new_server(mechanism)
    client = ScramClient(mechanism, "a,b=c", "pässword")
    token: bytes | None = client.first()
    while token is not None:
        token = client.step(server.step(token))
    assert client.complete and server.complete and server.username == "a,b=c"


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("mallory", "s3cret")])
def test_scram_server_refuses_wrong_password_and_unknown_user_alike(user: str, password: str) -> None:
    table = SaslUserTable({"alice": "s3cret"}, mechanisms=["SCRAM-SHA-512"])
    server = table.new_server("SCRAM-SHA-512")
    client = ScramClient("SCRAM-SHA-512", user, password)
    with pytest.raises(AuthenticationError) as info:
        client_final = client.step(server.step(client.first()))   # an unknown user fails here already
        assert client_final is not None
        server.step(client_final)
    assert str(info.value) == failure_message("SCRAM-SHA-512")
    assert not server.complete
    with pytest.raises(AuthenticationError, match="state failed"):
        server.step(b"c=biws")


@pytest.mark.parametrize("tamper, message", [
    (lambda m: m.replace(b"c=biws", b"c=eSws"), "channel binding data does not match"),
    (lambda m: m.replace(b",r=rOpr", b",r=xOpr"), "nonce does not match"),
    (lambda m: m.split(b",p=")[0], "has no proof"),
    (lambda m: m.replace(b"p=dHzb", b"p=!!!!"), "invalid base64"),
    (lambda m: m.replace(b"p=dHzb", b"p=AAAA"), "invalid credentials"),
    (lambda m: b"\xff" + m, "not valid UTF-8"),
])
def test_scram_server_checks_the_client_final_message(tamper, message: str) -> None:  # type: ignore[no-untyped-def]
    server = rfc_server()
    server.step(RFC_CLIENT_FIRST)
    with pytest.raises(AuthenticationError, match=message):
        server.step(tamper(RFC_CLIENT_FINAL))
    assert not server.complete


@pytest.mark.parametrize("client_first, message", [
    (b"p=tls-unique,,n=user,r=abc", "channel binding is not supported"),
    (b"x,,n=user,r=abc", "gs2 header flag"),
    (b"n,,r=abc,n=user", "must start with the user name and nonce"),
    (b"n,,n=us=er,r=abc", "bad '=' escape"),
    (b"n,a=other,n=user,r=abc", "authorization id differs"),
    (b"n,,n=,r=abc", "empty user name or nonce"),
    (b"n", "no gs2 header"),
])
def test_scram_server_checks_the_client_first_message(client_first: bytes, message: str) -> None:
    with pytest.raises(AuthenticationError, match=message):
        rfc_server().step(client_first)


def test_scram_server_accepts_y_flag_and_matching_authzid() -> None:
    assert rfc_server().step(b"y,a=user,n=user,r=rOprNGfwEbeRWgbNEkqO").startswith(b"r=rOprNGfwEbeRWgbNEkqO%")


def test_plain_server() -> None:
    table = SaslUserTable({"alice": "s3cret"}, mechanisms=["PLAIN"])
    ok = table.new_server("PLAIN")
    assert ok.step(PlainClient("alice", "s3cret").first()) == b"" and ok.complete and ok.username == "alice"
    assert table.new_server("PLAIN").step(b"alice\0alice\0s3cret") == b""   # authzid equal to the user
    for token, message in [(PlainClient("alice", "nope").first(), "invalid credentials"),
                           (PlainClient("bob", "s3cret").first(), "invalid credentials"),
                           (b"bob\0alice\0s3cret", "authorization id differs"),
                           (b"alice\0s3cret", "malformed PLAIN"),
                           (b"\0alice\0", "empty user name or password"),
                           (b"\0alice\0\xff", "not valid UTF-8")]:
        server = table.new_server("PLAIN")
        with pytest.raises(AuthenticationError, match=message):
            server.step(token)
        assert not server.complete and server.username is None


def test_user_table_keeps_no_password_and_validates() -> None:
    table = SaslUserTable({"alice": "hunter2-secret"})
    assert "hunter2" not in repr(table) and "alice" not in repr(table)
    credential = table.credential("SCRAM-SHA-256", "alice")
    assert credential is not None and repr(credential) == "ScramCredential(mechanism='SCRAM-SHA-256', iterations=4096)"
    assert not hasattr(table, "__dict__") and not hasattr(credential, "__dict__")   # nowhere to keep it
    assert credential.matches("hunter2-secret") and not credential.matches("hunter2")
    assert table.credential("PLAIN", "bob") is None
    with pytest.raises(ConfigError, match="'GSSAPI' is not one of"):
        SaslUserTable({"a": "b"}, mechanisms=["GSSAPI"])
    with pytest.raises(ConfigError, match="at least one"):
        SaslUserTable({"a": "b"}, mechanisms=[])
    with pytest.raises(ConfigError, match="password of 'a'"):
        SaslUserTable({"a": ""})
    with pytest.raises(ConfigError, match="not enabled"):
        SaslUserTable({"a": "b"}, mechanisms=["PLAIN"]).new_server("SCRAM-SHA-256")
    with pytest.raises(ConfigError, match="iterations"):
        ScramCredential.derive("SCRAM-SHA-256", "x", iterations=10)


# ---------------------------------------------------------------------------------------------- SaslGate
def gate(mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256")) -> SaslGate:
    return SaslGate(SaslUserTable({"alice": "s3cret"}, mechanisms=mechanisms))


def test_gate_v1_plain_then_forwards_everything() -> None:
    g = gate()
    assert g.on_request(API_VERSIONS, 3, {}).action is GateAction.FORWARD
    assert g.on_request(API_VERSIONS, 0, {}).action is GateAction.FORWARD   # a retry after UNSUPPORTED_VERSION
    hs = g.on_request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert hs.action is GateAction.ANSWER and hs.body == {"error_code": 0, "mechanisms": ["PLAIN", "SCRAM-SHA-256"]}
    auth = g.on_request(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0s3cret"})
    assert auth.action is GateAction.ANSWER and auth.body is not None and auth.body["error_code"] == 0
    assert not auth.close_after and g.authenticated and g.username == "alice"
    assert g.on_request(METADATA, 12, {}).action is GateAction.FORWARD
    again = g.on_request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert again.body == {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []} and not again.close_after


def test_gate_v1_scram_round_trip() -> None:
    g = gate()
    g.on_request(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    token: bytes | None = client.first()
    while token is not None:
        decision = g.on_request(SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        assert decision.body is not None and decision.body["error_code"] == 0
        token = client.step(decision.body["auth_bytes"])
    assert client.complete and g.authenticated


def test_gate_wrong_password_answers_58_and_closes() -> None:
    g = gate()
    g.on_request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    d = g.on_request(SASL_AUTHENTICATE, 0, {"auth_bytes": b"\0alice\0wrong-pw"})
    assert d.action is GateAction.ANSWER and d.close_after
    assert d.body is not None and d.body["error_code"] == SASL_AUTHENTICATION_FAILED
    assert d.body["error_message"] == failure_message("PLAIN")
    assert "wrong-pw" not in repr(d) and "wrong-pw" not in (g.failure or "")
    assert not g.authenticated
    assert g.on_request(SASL_AUTHENTICATE, 0, {"auth_bytes": b"\0alice\0s3cret"}).action is GateAction.CLOSE


def test_gate_unsupported_mechanism_lists_the_enabled_ones_and_closes() -> None:
    d = gate(("SCRAM-SHA-512",)).on_request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert d.action is GateAction.ANSWER and d.close_after
    assert d.body == {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": ["SCRAM-SHA-512"]}


def test_gate_refuses_requests_before_and_during_authentication() -> None:
    before = gate()
    d = before.on_request(METADATA, 12, {"topics": []})
    assert d.action is GateAction.CLOSE and "before SASL authentication" in d.reason
    during = gate()
    during.on_request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    d = during.on_request(API_VERSIONS, 3, {})
    assert d.action is GateAction.ANSWER and d.close_after and d.body == {"error_code": ILLEGAL_SASL_STATE}
    unknown = gate()
    unknown.on_request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert unknown.on_request(42, 0, None).action is GateAction.CLOSE   # no body to answer: close


def test_gate_v0_raw_tokens() -> None:
    g = gate()
    g.on_request(SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-256"})
    assert g.expects_raw_token
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    token: bytes | None = client.first()
    while token is not None:
        d = g.on_raw_token(token)
        assert d.action is GateAction.ANSWER and d.raw is not None
        token = client.step(d.raw)
    assert g.authenticated and not g.expects_raw_token
    plain = gate()
    plain.on_request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
    assert plain.on_raw_token(b"\0alice\0s3cret").raw == b""   # answered with an empty token
    bad = gate()
    bad.on_request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
    assert bad.on_raw_token(b"\0alice\0nope").action is GateAction.CLOSE


def test_gate_advertises_its_own_sasl_versions() -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3},
                                          {"api_key": 36, "min_version": 0, "max_version": 0}]}
    keys = {e["api_key"]: (e["min_version"], e["max_version"]) for e in gate().rewrite_api_versions(body)["api_keys"]}
    assert keys == {18: (0, 3), SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}
