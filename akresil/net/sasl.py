"""SASL mechanisms as sans-IO state machines: PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802/7677) and
OAUTHBEARER (RFC 7628 as Kafka uses it: KIP-255, extensions KIP-342).

Client side: the connection carries the tokens in SaslAuthenticate requests; this module only turns server
tokens into client tokens, so the whole exchange (including every check on the server's answers) is testable
with plain method calls against the RFC's published vectors.

The server side (a broker's: what ``akresil.testing.FaultProxy`` needs to act as an authenticating front) is
test-only and lives in ``akresil.testing.sasl_server``.

Passwords never appear in a repr, a log line or an error message.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol

from ..errors import AuthenticationError, ConfigError

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: every mechanism the client speaks; OAUTHBEARER takes a token provider instead of a user table
CLIENT_MECHANISMS = MECHANISMS + ("OAUTHBEARER",)

# RFC 7677 says servers should announce at least 4096 iterations; the Java client refuses fewer (a weak or
# downgraded server).  The upper bound stops a hostile server from making us burn minutes in PBKDF2.
SCRAM_MIN_ITERATIONS = 4096
SCRAM_MAX_ITERATIONS = 1_000_000
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def scram_hash(mechanism: str) -> str:
    try:
        return _SCRAM_HASHES[mechanism]
    except KeyError:
        raise ConfigError(f"not a SCRAM mechanism: {mechanism!r}") from None


def hmac_digest(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 Hi(): PBKDF2 of the UTF-8 password (no SASLprep: Kafka's clients send the bytes as typed)."""
    return hashlib.pbkdf2_hmac(scram_hash(mechanism), password.encode(), salt, iterations)


class TokenSupplier(Protocol):
    """Where OAUTHBEARER connections get their token (``akresil.net.oauth.TokenSource``)."""

    @property
    def principal(self) -> str | None: ...

    async def token(self) -> "OAuthToken": ...


@dataclass(frozen=True, slots=True)
class SaslConfig:
    """Which SASL mechanism to use and with what credentials (the password is kept out of ``repr``).

    OAUTHBEARER takes ``token_source`` (an ``akresil.net.oauth.TokenSource``, shared by a client's connections
    so a token is fetched once and refreshed before it expires) instead of a user name and password."""

    mechanism: str
    username: str | None
    password: str | None = field(default=None, repr=False)
    token_source: "TokenSupplier | None" = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in CLIENT_MECHANISMS:
            raise ConfigError(
                f"sasl_mechanism must be one of {', '.join(CLIENT_MECHANISMS)}, got {self.mechanism!r}")
        if self.mechanism == "OAUTHBEARER":
            if self.token_source is None:
                raise ConfigError("sasl_oauth_token_provider is required for SASL OAUTHBEARER")
            return
        if not self.username:
            raise ConfigError(f"sasl_plain_username is required for SASL {self.mechanism}")
        if self.password is None:
            raise ConfigError(f"sasl_plain_password is required for SASL {self.mechanism}")

    @property
    def identity(self) -> str:
        """Who authenticates, for error messages: the user name, or the token's principal once known."""
        if self.mechanism == "OAUTHBEARER":
            principal = getattr(self.token_source, "principal", None)
            return f"token principal {principal!r}" if principal else "an OAuth token"
        return repr(self.username)

    def new_client(self) -> SaslClient:
        """A fresh state machine for one authentication exchange (PLAIN / SCRAM; see ``start``)."""
        assert self.username is not None and self.password is not None
        if self.mechanism == "PLAIN":
            return PlainClient(self.username, self.password)
        return ScramClient(self.mechanism, self.username, self.password)

    async def start(self) -> SaslClient:
        """A fresh state machine for one exchange; OAUTHBEARER first gets a current token (maybe refreshing)."""
        if self.mechanism == "OAUTHBEARER":
            assert self.token_source is not None
            return OAuthBearerClient(await self.token_source.token())
        return self.new_client()


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
        self._hash = scram_hash(mechanism)
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
        return hmac_digest(self._hash, key, msg)

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
        salted = salted_password(self.mechanism, self._password, salt, iterations)
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


# ---------------------------------------------------------------------------------------------- OAUTHBEARER
_EXTENSION_KEY = re.compile(r"^[A-Za-z]+$")
_EXTENSION_VALUE = re.compile(r"^[\x21-\x7E \t\r\n]+$")
BEARER_TOKEN = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")   # RFC 6750 b64token


@dataclass(frozen=True, slots=True)
class OAuthToken:
    """A bearer token and when it expires (wall clock, ms since the epoch), as a token provider returns it.

    ``extensions`` are SASL extensions (KIP-342) sent with the token, e.g. ``{"logicalCluster": "lkc-1"}``
    for Confluent Cloud; ``principal`` is informational (error messages)."""

    value: str = field(repr=False)
    expires_at_ms: int
    principal: str | None = None
    extensions: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.value, str) or not BEARER_TOKEN.match(self.value):
            raise ConfigError("OAuth token: the value must be a non-empty bearer token (RFC 6750 characters)")
        if not isinstance(self.expires_at_ms, int) or isinstance(self.expires_at_ms, bool):
            raise ConfigError(f"OAuth token: expires_at_ms must be an int (ms since the epoch), "
                              f"got {self.expires_at_ms!r}")
        check_extensions(self.extensions)


def check_extensions(extensions: Mapping[str, str]) -> None:
    """KIP-342's rules: keys are letters only and not "auth"; values printable ASCII (or spaces, tabs, CR, LF)."""
    if not isinstance(extensions, Mapping):
        raise ConfigError(f"OAuth extensions: expected a mapping of str to str, got {type(extensions).__name__}")
    for key, value in extensions.items():
        if not isinstance(key, str) or not _EXTENSION_KEY.match(key) or key == "auth":
            raise ConfigError(f"OAuth extensions: key {key!r} must be ASCII letters only and not 'auth'")
        if not isinstance(value, str) or not _EXTENSION_VALUE.match(value):
            raise ConfigError(f"OAuth extensions: value of {key!r} must be non-empty printable ASCII")


def jwt_claims(token: str) -> dict[str, object]:
    """The (unverified) claims of a JWT: the client only reads ``exp`` and ``sub`` to schedule refreshes."""
    import json

    parts = token.split(".")
    if len(parts) != 3:
        raise ConfigError("OAuth token is not a JWT (expected three '.'-separated parts); return an OAuthToken "
                          "with expires_at_ms from the token provider instead")
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise ConfigError("OAuth token: the JWT payload is not base64url JSON") from None
    if not isinstance(claims, dict):
        raise ConfigError("OAuth token: the JWT payload is not a JSON object")
    return claims


def client_first_message(token: OAuthToken) -> bytes:
    """RFC 7628's initial client response as Kafka sends it: gs2 header, ``auth=Bearer``, extensions."""
    parts = ["n,,", f"auth=Bearer {token.value}"]
    parts += [f"{k}={v}" for k, v in sorted(token.extensions.items())]
    return ("\x01".join(parts) + "\x01\x01").encode()


class OAuthBearerClient:
    """The client side of OAUTHBEARER: send the token; a server that refuses it answers with an error
    document, to which the client replies with a single kvsep (RFC 7628 section 3.2.3) and the broker then
    fails the exchange with SASL_AUTHENTICATION_FAILED."""

    mechanism = "OAUTHBEARER"
    __slots__ = ("_token", "_state", "server_error")

    def __init__(self, token: OAuthToken) -> None:
        self._token = token
        self._state = "initial"
        #: the server's error document, when it sent one
        self.server_error: str | None = None

    def __repr__(self) -> str:
        return f"OAuthBearerClient(principal={self._token.principal!r}, state={self._state})"

    @property
    def complete(self) -> bool:
        return self._state == "done"

    def first(self) -> bytes:
        self._state = "sent"
        return client_first_message(self._token)

    def step(self, server_token: bytes) -> bytes | None:
        if self._state == "sent" and not server_token:
            self._state = "done"
            return None
        if self._state == "sent":
            self.server_error = server_token.decode("utf-8", "replace")[:512]
            self._state = "error"
            return b"\x01"
        raise AuthenticationError(f"OAUTHBEARER: the server refused the token: {self.server_error or 'no detail'}")
