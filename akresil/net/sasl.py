"""SASL client mechanisms as sans-IO state machines: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802/7677).

The connection carries the tokens in SaslAuthenticate requests; this module only turns server tokens into
client tokens, so the whole exchange (including every check on the server's answers) is testable with plain
method calls against the RFC's published vectors.  Credentials never appear in a repr, a log line or an
error message.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ..errors import AuthenticationError, ConfigError

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# RFC 7677 says servers should announce at least 4096 iterations; the Java client refuses fewer (a weak or
# downgraded server).  The upper bound stops a hostile server from making us burn minutes in PBKDF2.
SCRAM_MIN_ITERATIONS = 4096
SCRAM_MAX_ITERATIONS = 1_000_000


@dataclass(frozen=True, slots=True)
class SaslConfig:
    """Which SASL mechanism to use and with what credentials (the password is kept out of ``repr``)."""

    mechanism: str
    username: str | None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ConfigError(f"sasl_mechanism must be one of {', '.join(MECHANISMS)}, got {self.mechanism!r}")
        if not self.username:
            raise ConfigError(f"sasl_plain_username is required for SASL {self.mechanism}")
        if self.password is None:
            raise ConfigError(f"sasl_plain_password is required for SASL {self.mechanism}")

    def new_client(self) -> SaslClient:
        """A fresh state machine for one authentication exchange."""
        assert self.username is not None and self.password is not None
        if self.mechanism == "PLAIN":
            return PlainClient(self.username, self.password)
        return ScramClient(self.mechanism, self.username, self.password)


class SaslClient(Protocol):
    """One SASL exchange: ``first()`` then ``step(server_token)`` until ``complete``."""

    mechanism: str

    @property
    def complete(self) -> bool: ...

    def first(self) -> bytes: ...

    def step(self, server_token: bytes) -> bytes | None:
        """Consume a server token; return the next client token, or None when nothing more is to be sent."""
        ...


class PlainClient:
    """RFC 4616: one message ``authzid NUL authcid NUL passwd`` (empty authzid), then the server's verdict."""

    mechanism = "PLAIN"
    __slots__ = ("_username", "_password", "_sent")

    def __init__(self, username: str, password: str) -> None:
        if "\0" in username or "\0" in password:
            raise ConfigError("SASL PLAIN username and password must not contain NUL characters")
        self._username = username
        self._password = password
        self._sent = False

    def __repr__(self) -> str:
        return f"PlainClient(username={self._username!r})"

    @property
    def complete(self) -> bool:
        return self._sent

    def first(self) -> bytes:
        self._sent = True
        return b"\0" + self._username.encode() + b"\0" + self._password.encode()

    def step(self, server_token: bytes) -> bytes | None:
        # A PLAIN server answers with an empty token; a failure arrives as an error code, not here.
        return None


def _scram_name(name: str) -> str:
    """RFC 5802 saslname: ',' and '=' are escaped as =2C and =3D."""
    return name.replace("=", "=3D").replace(",", "=2C")


def _parse_attributes(message: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationError(f"malformed SCRAM server message (attribute {part[:1]!r} has no value)")
        attrs.setdefault(part[0], part[2:])
    return attrs


class ScramClient:
    """RFC 5802 client side of SCRAM-SHA-256/512 without channel binding (gs2 header ``n,,``).

    Checks that Java's ScramSaslClient also makes: the server nonce extends ours, the salt is present, the
    iteration count is within bounds, no mandatory extension is requested, and the server signature in the
    final message proves the server knows the salted password.
    """

    __slots__ = ("mechanism", "_hash", "_username", "_password", "_nonce", "_state", "_client_first_bare",
                 "_server_signature")

    def __init__(self, mechanism: str, username: str, password: str, *,
                 nonce_factory: Callable[[], str] | None = None) -> None:
        if mechanism == "SCRAM-SHA-256":
            self._hash = "sha256"
        elif mechanism == "SCRAM-SHA-512":
            self._hash = "sha512"
        else:
            raise ConfigError(f"not a SCRAM mechanism: {mechanism!r}")
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._nonce = (nonce_factory or (lambda: secrets.token_urlsafe(24)))()
        if not self._nonce or "," in self._nonce:
            raise ValueError("SCRAM client nonce must be non-empty printable text without ','")
        self._state = "initial"
        self._client_first_bare = ""
        self._server_signature = b""

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism}, username={self._username!r}, state={self._state})"

    @property
    def complete(self) -> bool:
        return self._state == "done"

    def first(self) -> bytes:
        if self._state != "initial":
            raise AuthenticationError(f"SCRAM first message requested in state {self._state}")
        self._client_first_bare = f"n={_scram_name(self._username)},r={self._nonce}"
        self._state = "sent-first"
        return ("n,," + self._client_first_bare).encode()

    def step(self, server_token: bytes) -> bytes | None:
        try:
            message = server_token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationError("SCRAM server message is not valid UTF-8") from None
        if self._state == "sent-first":
            return self._client_final(message)
        if self._state == "sent-final":
            self._verify_server_final(message)
            return None
        raise AuthenticationError(f"unexpected SCRAM server message in state {self._state}")

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def _client_final(self, server_first: str) -> bytes:
        attrs = _parse_attributes(server_first)
        if "m" in attrs:
            raise AuthenticationError("SCRAM server requires an extension this client does not support")
        if "e" in attrs:
            raise AuthenticationError(f"SCRAM server refused the exchange: {attrs['e']}")
        nonce, salt_b64, iterations_s = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if nonce is None or salt_b64 is None or iterations_s is None:
            raise AuthenticationError("SCRAM server-first message lacks the nonce, salt or iteration count")
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise AuthenticationError("SCRAM server nonce does not extend the client nonce")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
        except ValueError:
            raise AuthenticationError("SCRAM salt is not valid base64") from None
        if not salt:
            raise AuthenticationError("SCRAM salt is empty")
        if not iterations_s.isdigit():
            raise AuthenticationError(f"SCRAM iteration count {iterations_s!r} is not a number")
        iterations = int(iterations_s)
        if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
            raise AuthenticationError(
                f"SCRAM iteration count {iterations} is outside {SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS}")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(), salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        self._state = "sent-final"
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, server_final: str) -> None:
        attrs = _parse_attributes(server_final)
        if "e" in attrs:
            raise AuthenticationError(f"SCRAM authentication failed: {attrs['e']}")
        verifier = attrs.get("v")
        if verifier is None:
            raise AuthenticationError("SCRAM server-final message has no server signature")
        try:
            signature = base64.b64decode(verifier, validate=True)
        except ValueError:
            raise AuthenticationError("SCRAM server signature is not valid base64") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise AuthenticationError("SCRAM server signature mismatch: the server does not know the password")
        self._state = "done"
