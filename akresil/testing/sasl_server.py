"""The server side of SASL, test-only: what ``FaultProxy`` needs to act as an authenticating broker front
(``SaslUserTable``, ``PlainServer``, ``ScramServer``, ``OAuthBearerServer``).  A client never needs it, so it lives
here and not beside the client's state machines in ``akresil.net.sasl``.

The table keeps SCRAM's salted keys, never a password, and PLAIN is checked against the same keys; unknown users
fail exactly like wrong passwords.  Passwords never appear in a repr, a log line or an error message.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Protocol

from ..errors import AuthenticationError, ConfigError
from ..net.sasl import (BEARER_TOKEN, CLIENT_MECHANISMS, MECHANISMS, SCRAM_MAX_ITERATIONS, SCRAM_MIN_ITERATIONS,
                        check_extensions, hmac_digest, salted_password, scram_hash)

__all__ = ["OAuthBearerServer", "OAuthGrant", "OAuthValidator", "PlainServer", "SaslServer", "SaslUserTable",
           "ScramCredential", "ScramServer", "failure_message", "parse_client_first_message"]


@dataclass(frozen=True, slots=True)
class OAuthGrant:
    """What a server-side token validator grants: the principal and how long the session may last."""

    principal: str
    session_lifetime_ms: int


#: ``validator(token, extensions) -> OAuthGrant``; raises ``AuthenticationError`` to refuse
OAuthValidator = Callable[[str, Mapping[str, str]], OAuthGrant]


def parse_client_first_message(message: bytes) -> tuple[str, dict[str, str]]:
    """Token and extensions of an OAUTHBEARER initial client response; ``AuthenticationError`` if malformed."""
    try:
        text = message.decode("ascii")
    except UnicodeDecodeError:
        raise AuthenticationError("OAUTHBEARER message is not ASCII") from None
    if not text.startswith("n,") or not text.endswith("\x01\x01"):
        raise AuthenticationError("malformed OAUTHBEARER message (gs2 header or terminator missing)")
    header, _, rest = text.partition("\x01")
    if header.count(",") != 2:
        raise AuthenticationError("malformed OAUTHBEARER gs2 header")
    fields: dict[str, str] = {}
    for item in rest[:-2].split("\x01"):
        key, sep, value = item.partition("=")
        if not sep or key in fields:
            raise AuthenticationError(f"malformed OAUTHBEARER key/value {key[:32]!r}")
        fields[key] = value
    auth = fields.pop("auth", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token or not BEARER_TOKEN.match(token):
        raise AuthenticationError("OAUTHBEARER message carries no bearer token")
    try:
        check_extensions(fields)
    except ConfigError as exc:
        raise AuthenticationError(str(exc)) from None
    return token, fields


class OAuthBearerServer:
    """The server side (what ``FaultProxy`` needs to be an OAUTHBEARER broker): parse the client's message,
    ask ``validator``; a refusal is answered with an error document first (RFC 7628), then fails."""

    mechanism = "OAUTHBEARER"
    __slots__ = ("_validator", "_state", "_grant", "failure", "extensions")

    def __init__(self, validator: OAuthValidator) -> None:
        self._validator = validator
        self._state = "initial"
        self._grant: OAuthGrant | None = None
        self.failure: str | None = None
        #: the extensions the client sent (for tests)
        self.extensions: dict[str, str] = {}

    @property
    def complete(self) -> bool:
        return self._state == "done"

    @property
    def username(self) -> str | None:
        return self._grant.principal if self._grant is not None and self.complete else None

    @property
    def session_lifetime_ms(self) -> int:
        return self._grant.session_lifetime_ms if self._grant is not None and self.complete else 0

    def step(self, client_token: bytes) -> bytes:
        if self._state == "initial":
            token, self.extensions = parse_client_first_message(client_token)
            try:
                self._grant = self._validator(token, dict(self.extensions))
            except AuthenticationError as exc:
                self.failure = str(exc)
                self._state = "refused"
                return b'{"status":"invalid_token"}'
            self._state = "done"
            return b""
        if self._state == "refused":
            raise AuthenticationError(f"OAUTHBEARER token refused: {self.failure}")
        raise AuthenticationError(f"unexpected OAUTHBEARER message in state {self._state}")


def failure_message(mechanism: str) -> str:
    """What a client whose credentials are wrong is told: no detail, so an attacker cannot probe user names."""
    return f"SASL {mechanism} authentication failed: invalid credentials"


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """A user's server-side SCRAM record (RFC 5802 section 3): salt, iterations and two keys, never the password."""

    mechanism: str
    salt: bytes = field(repr=False)
    iterations: int
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)

    @classmethod
    def derive(cls, mechanism: str, password: str, *, salt: bytes | None = None,
               iterations: int = SCRAM_MIN_ITERATIONS) -> ScramCredential:
        """Salt (16 random bytes unless given) and hash ``password`` the way a SCRAM server stores it."""
        hash_name = scram_hash(mechanism)
        if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
            raise ConfigError(f"SCRAM iterations must be within {SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS}, "
                              f"got {iterations}")
        salt = secrets.token_bytes(16) if salt is None else salt
        if not salt:
            raise ConfigError("SCRAM salt must not be empty")
        salted = salted_password(mechanism, password, salt, iterations)
        client_key = hmac_digest(hash_name, salted, b"Client Key")
        return cls(mechanism, salt, iterations, hashlib.new(hash_name, client_key).digest(),
                   hmac_digest(hash_name, salted, b"Server Key"))

    def matches(self, password: str) -> bool:
        """Whether ``password`` hashes to this record (constant-time comparison): how PLAIN is checked."""
        other = ScramCredential.derive(self.mechanism, password, salt=self.salt, iterations=self.iterations)
        return hmac.compare_digest(other.stored_key, self.stored_key)


CredentialLookup = Callable[[str], "ScramCredential | None"]


class SaslServer(Protocol):
    """The server side of one exchange: ``step(client_token)`` until ``complete``; failures raise."""

    mechanism: str

    @property
    def complete(self) -> bool: ...

    @property
    def username(self) -> str | None:
        """The authenticated user once ``complete``."""
        ...

    def step(self, client_token: bytes) -> bytes:
        """Consume a client token, return the server's answer; ``AuthenticationError`` when it is refused."""
        ...


class _UserExchange:
    """``complete`` and ``username`` of a user/password exchange (PLAIN, SCRAM): its state reached "done"."""

    __slots__ = ()
    _state: str
    _username: str | None

    @property
    def complete(self) -> bool:
        return self._state == "done"

    @property
    def username(self) -> str | None:
        return self._username if self.complete else None


class PlainServer(_UserExchange):
    """RFC 4616 server: one ``authzid NUL authcid NUL passwd`` message, checked against a stored credential."""

    mechanism = "PLAIN"
    __slots__ = ("_lookup", "_state", "_username")

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self._state = "initial"
        self._username: str | None = None

    def __repr__(self) -> str:
        return f"PlainServer(state={self._state}, username={self._username!r})"

    def step(self, client_token: bytes) -> bytes:
        if self._state != "initial":
            raise AuthenticationError(f"unexpected PLAIN message in state {self._state}")
        self._state = "failed"
        parts = client_token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationError("malformed PLAIN message (expected authzid NUL authcid NUL password)")
        try:
            authzid, authcid, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationError("PLAIN message is not valid UTF-8") from None
        if not authcid or not password:
            raise AuthenticationError("PLAIN message has an empty user name or password")
        if authzid and authzid != authcid:
            raise AuthenticationError("PLAIN authorization id differs from the user name")
        credential = self._lookup(authcid)
        if credential is None or not credential.matches(password):
            raise AuthenticationError(failure_message(self.mechanism))
        self._username = authcid
        self._state = "done"
        return b""


def _unescape_scram_name(name: str) -> str:
    """Inverse of ``_scram_name``; any other '=' sequence is malformed (RFC 5802 saslname)."""
    out, i = [], 0
    while i < len(name):
        ch = name[i]
        if ch == "=":
            code = name[i:i + 3]
            if code == "=2C":
                out.append(",")
            elif code == "=3D":
                out.append("=")
            else:
                raise AuthenticationError("malformed SCRAM user name (bad '=' escape)")
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class ScramServer(_UserExchange):
    """RFC 5802 server side of SCRAM-SHA-256/512 without channel binding.

    Checks what a Kafka broker checks: the gs2 header asks for no channel binding, the authorization id (if
    any) is the user, the client-final message echoes the gs2 header and the combined nonce, and the proof
    hashes to the stored key.  Unknown users fail exactly like wrong passwords.
    """

    __slots__ = ("mechanism", "_hash", "_lookup", "_nonce_factory", "_state", "_username", "_gs2_header",
                 "_client_first_bare", "_server_first", "_nonce", "_credential")

    def __init__(self, mechanism: str, lookup: CredentialLookup, *,
                 nonce_factory: Callable[[], str] | None = None) -> None:
        self._hash = scram_hash(mechanism)
        self.mechanism = mechanism
        self._lookup = lookup
        self._nonce_factory = nonce_factory or (lambda: secrets.token_urlsafe(24))
        self._state = "initial"
        self._username: str | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None

    def __repr__(self) -> str:
        return f"ScramServer({self.mechanism}, state={self._state}, username={self._username!r})"

    def step(self, client_token: bytes) -> bytes:
        state = self._state
        self._state = "failed"   # until this step succeeds
        try:
            message = client_token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationError("SCRAM client message is not valid UTF-8") from None
        if state == "initial":
            answer = self._server_first_message(message)
            self._state = "sent-first"
        elif state == "sent-first":
            answer = self._server_final_message(message)
            self._state = "done"
        else:
            raise AuthenticationError(f"unexpected SCRAM client message in state {state}")
        return answer.encode()

    def _server_first_message(self, client_first: str) -> str:
        flag, _, rest = client_first.partition(",")
        authzid, sep, bare = rest.partition(",")
        if not sep:
            raise AuthenticationError("malformed SCRAM client-first message (no gs2 header)")
        if flag.startswith("p="):
            raise AuthenticationError("SCRAM channel binding is not supported")
        if flag not in ("n", "y"):
            raise AuthenticationError(f"malformed SCRAM gs2 header flag {flag[:8]!r}")
        if authzid and not authzid.startswith("a="):
            raise AuthenticationError("malformed SCRAM authorization id")
        parts = bare.split(",")
        if len(parts) < 2 or not parts[0].startswith("n=") or not parts[1].startswith("r="):
            raise AuthenticationError("SCRAM client-first message must start with the user name and nonce")
        username = _unescape_scram_name(parts[0][2:])
        client_nonce = parts[1][2:]
        if not username or not client_nonce:
            raise AuthenticationError("SCRAM client-first message has an empty user name or nonce")
        if authzid and _unescape_scram_name(authzid[2:]) != username:
            raise AuthenticationError("SCRAM authorization id differs from the user name")
        credential = self._lookup(username)
        if credential is None or credential.mechanism != self.mechanism:
            raise AuthenticationError(failure_message(self.mechanism))
        server_nonce = self._nonce_factory()
        if not server_nonce or "," in server_nonce:
            raise ValueError("SCRAM server nonce must be non-empty printable text without ','")
        self._username = username
        self._credential = credential
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = client_nonce + server_nonce
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        return self._server_first

    def _server_final_message(self, client_final: str) -> str:
        credential = self._credential
        assert credential is not None
        without_proof, sep, proof_b64 = client_final.rpartition(",p=")
        if not sep:
            raise AuthenticationError("SCRAM client-final message has no proof")
        parts = without_proof.split(",")
        if len(parts) < 2 or not parts[0].startswith("c=") or not parts[1].startswith("r="):
            raise AuthenticationError("SCRAM client-final message must start with channel binding and nonce")
        try:
            binding = base64.b64decode(parts[0][2:], validate=True)
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise AuthenticationError("SCRAM client-final message has invalid base64") from None
        if binding != self._gs2_header.encode():
            raise AuthenticationError("SCRAM channel binding data does not match the gs2 header")
        if parts[1][2:] != self._nonce:
            raise AuthenticationError("SCRAM client-final nonce does not match the exchange")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac_digest(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationError(failure_message(self.mechanism))
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise AuthenticationError(failure_message(self.mechanism))
        verifier = hmac_digest(self._hash, credential.server_key, auth_message)
        return f"v={base64.b64encode(verifier).decode()}"


class SaslUserTable:
    """Users a SASL server accepts, per mechanism, stored as SCRAM credentials (PLAIN included).

    ``users`` maps user name to password; the passwords are hashed at construction and not kept.
    """

    __slots__ = ("mechanisms", "_credentials", "oauth_validator")

    def __init__(self, users: Mapping[str, str], *, mechanisms: Iterable[str] = MECHANISMS,
                 iterations: int = SCRAM_MIN_ITERATIONS, oauth_validator: OAuthValidator | None = None) -> None:
        enabled = tuple(mechanisms)
        if not enabled:
            raise ConfigError("sasl mechanisms: at least one is needed")
        for mechanism in enabled:
            if mechanism not in CLIENT_MECHANISMS:
                raise ConfigError(f"sasl mechanisms: {mechanism!r} is not one of {', '.join(CLIENT_MECHANISMS)}")
        if ("OAUTHBEARER" in enabled) != (oauth_validator is not None):
            raise ConfigError("sasl mechanisms: OAUTHBEARER needs an oauth_validator, and a validator needs "
                              "OAUTHBEARER among the mechanisms")
        self.oauth_validator = oauth_validator
        if len(set(enabled)) != len(enabled):
            raise ConfigError(f"sasl mechanisms: duplicates in {enabled}")
        self.mechanisms = enabled
        self._credentials: dict[tuple[str, str], ScramCredential] = {}
        for username, password in users.items():
            if not isinstance(username, str) or not username:
                raise ConfigError(f"sasl users: user names must be non-empty strings, got {username!r}")
            if not isinstance(password, str) or not password:
                raise ConfigError(f"sasl users: the password of {username!r} must be a non-empty string")
            for mechanism in enabled:
                if mechanism == "OAUTHBEARER":
                    continue
                scram = "SCRAM-SHA-256" if mechanism == "PLAIN" else mechanism
                self._credentials[(mechanism, username)] = ScramCredential.derive(
                    scram, password, iterations=iterations)

    def __repr__(self) -> str:
        users = len({user for _, user in self._credentials})
        return f"SaslUserTable(mechanisms={list(self.mechanisms)}, users={users})"

    def credential(self, mechanism: str, username: str) -> ScramCredential | None:
        return self._credentials.get((mechanism, username))

    def new_server(self, mechanism: str) -> SaslServer:
        """A fresh server state machine for one exchange with ``mechanism`` (which must be enabled)."""
        if mechanism not in self.mechanisms:
            raise ConfigError(f"SASL mechanism {mechanism!r} is not enabled (have {', '.join(self.mechanisms)})")
        if mechanism == "PLAIN":
            return PlainServer(lambda user: self.credential("PLAIN", user))
        if mechanism == "OAUTHBEARER":
            assert self.oauth_validator is not None
            return OAuthBearerServer(self.oauth_validator)
        return ScramServer(mechanism, lambda user: self.credential(mechanism, user))
