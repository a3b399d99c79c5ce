"""SASL mechanisms: RFC 7677's SCRAM-SHA-256 vector, a SCRAM-SHA-512 server simulation, PLAIN, and the checks."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from akresil.errors import AuthenticationError, ConfigError
from akresil.net.sasl import PlainClient, SaslConfig, ScramClient

# RFC 7677 section 3 (user "user", password "pencil").
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_client() -> ScramClient:
    return ScramClient("SCRAM-SHA-256", "user", "pencil", nonce_factory=lambda: RFC_NONCE)


def test_scram_sha256_matches_rfc7677_vector() -> None:
    client = rfc_client()
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.step(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert not client.complete
    assert client.step(RFC_SERVER_FINAL) is None
    assert client.complete


def test_scram_rejects_a_wrong_server_signature() -> None:
    client = rfc_client()
    client.first()
    client.step(RFC_SERVER_FIRST)
    forged = b"v=" + base64.b64encode(b"\0" * 32)
    with pytest.raises(AuthenticationError, match="server signature mismatch"):
        client.step(forged)
    assert not client.complete


@pytest.mark.parametrize("server_first, message", [
    (b"r=someoneelse123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce does not extend"),
    (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce does not extend"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=,i=4096", "salt is empty"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=!!!,i=4096", "salt is not valid base64"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095", "iteration count 4095 is outside"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=99999999", "iteration count 99999999 is outside"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=abc", "not a number"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==", "lacks the nonce, salt or iteration"),
    (b"m=ext,r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "extension"),
    (b"e=unknown-user", "refused the exchange: unknown-user"),
    (b"garbage", "malformed SCRAM server message"),
    (b"\xff\xfe", "not valid UTF-8"),
])
def test_scram_checks_the_server_first_message(server_first: bytes, message: str) -> None:
    client = rfc_client()
    client.first()
    with pytest.raises(AuthenticationError, match=message):
        client.step(server_first)


def test_scram_server_final_error_and_missing_verifier() -> None:
    for final, message in [(b"e=invalid-proof", "authentication failed: invalid-proof"),
                           (b"x=1", "no server signature")]:
        client = rfc_client()
        client.first()
        client.step(RFC_SERVER_FIRST)
        with pytest.raises(AuthenticationError, match=message):
            client.step(final)


def test_scram_sha512_against_an_independent_server_computation() -> None:
    """Play the server side with the RFC 5802 formulas and check proof and signature both ways."""
    password, salt, iterations = "s3cr=t,pw", b"0123456789abcdef", 4096
    client = ScramClient("SCRAM-SHA-512", "al,ice=", password, nonce_factory=lambda: "cnonce")
    first = client.first().decode()
    assert first == "n,,n=al=2Cice=3D,r=cnonce"
    server_first = f"r=cnonceSERVER,s={base64.b64encode(salt).decode()},i={iterations}"
    final = client.step(server_first.encode()).decode()
    without_proof, _, proof_b64 = final.rpartition(",p=")
    auth = f"{first[3:]},{server_first},{without_proof}".encode()
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    stored = hashlib.sha512(hmac.new(salted, b"Client Key", "sha512").digest()).digest()
    signature = hmac.new(stored, auth, "sha512").digest()
    client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof_b64), signature))
    assert hashlib.sha512(client_key).digest() == stored  # the server would accept this proof
    server_sig = hmac.new(hmac.new(salted, b"Server Key", "sha512").digest(), auth, "sha512").digest()
    assert client.step(b"v=" + base64.b64encode(server_sig)) is None
    assert client.complete


def test_scram_out_of_order_calls() -> None:
    client = rfc_client()
    with pytest.raises(AuthenticationError, match="state initial"):
        client.step(RFC_SERVER_FIRST)
    client.first()
    with pytest.raises(AuthenticationError, match="first message requested in state sent-first"):
        client.first()


def test_plain_message_and_completion() -> None:
    client = PlainClient("alice", "pw")
    assert not client.complete
    assert client.first() == b"\0alice\0pw"
    assert client.complete
    assert client.step(b"") is None
    with pytest.raises(ConfigError, match="NUL"):
        PlainClient("a\0b", "pw")


def test_credentials_stay_out_of_reprs() -> None:
    secret = "hunter2-very-secret"
    config = SaslConfig("SCRAM-SHA-512", "alice", secret)
    assert secret not in repr(config)
    client = config.new_client()
    assert secret not in repr(client)
    assert secret not in repr(SaslConfig("PLAIN", "alice", secret).new_client())


@pytest.mark.parametrize("kwargs, message", [
    ({"mechanism": "GSSAPI", "username": "a", "password": "b"}, "sasl_mechanism must be one of"),
    ({"mechanism": "PLAIN", "username": "", "password": "b"}, "sasl_plain_username is required"),
    ({"mechanism": "SCRAM-SHA-256", "username": "a", "password": None}, "sasl_plain_password is required"),
])
def test_sasl_config_validation(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SaslConfig(**kwargs)


def test_new_client_picks_the_mechanism() -> None:
    assert isinstance(SaslConfig("PLAIN", "a", "b").new_client(), PlainClient)
    scram = SaslConfig("SCRAM-SHA-256", "a", "b").new_client()
    assert isinstance(scram, ScramClient) and scram.mechanism == "SCRAM-SHA-256"
    nonce_a = scram.first()
    nonce_b = SaslConfig("SCRAM-SHA-256", "a", "b").new_client().first()
    assert nonce_a != nonce_b  # fresh random nonce per exchange
