"""OAUTHBEARER tokens for the connections of one client (KIP-255, KIP-768).

``TokenSource`` wraps the application's token provider (``sasl_oauth_token_provider``): a callable, sync or
async, returning an ``OAuthToken`` or a JWT string (its ``exp`` claim gives the expiry). The token is shared by
every connection of the client and refreshed once 80% of its lifetime has passed (the Java client's default
refresh window), so new connections and re-authentications never present an expiring token. A sync provider
runs in a worker thread (it may do blocking HTTP). Provider failures:

* ``AuthenticationError`` (e.g. the identity provider refused the client credentials) is fatal, like a broker's
  refusal: retrying would be refused again;
* anything else is a transient failure of the connection attempt (reconnect backoff, then a new try); while a
  refresh fails, the current token keeps being used until it expires.

``OidcClientCredentials`` is the built-in provider: the OAuth 2 client-credentials grant against a token
endpoint (KIP-768's ``sasl.oauthbearer.token.endpoint.url``), client authentication with HTTP Basic.
"""

from __future__ import annotations

import base64
import inspect
import json
import logging
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Mapping

import anyio
import anyio.to_thread

from .. import errors
from ..errors import ConfigError
from .sasl import OAuthToken, check_extensions, jwt_claims

log = logging.getLogger(__name__)

#: refresh once this fraction of the token's lifetime has passed (Java: sasl.login.refresh.window.factor)
REFRESH_FRACTION = 0.8

WallClock = Callable[[], int]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def to_token(raw: object, extensions: Mapping[str, str] | None = None) -> OAuthToken:
    """A provider's answer as an ``OAuthToken``: an ``OAuthToken`` as is, a JWT string through its claims."""
    if isinstance(raw, OAuthToken):
        return raw
    if isinstance(raw, str):
        claims = jwt_claims(raw)
        exp = claims.get("exp")
        if not isinstance(exp, (int, float)) or isinstance(exp, bool):
            raise ConfigError("OAuth token: the JWT has no numeric 'exp' claim; return an OAuthToken with "
                              "expires_at_ms instead")
        sub = claims.get("sub")
        return OAuthToken(raw, int(exp * 1000), principal=sub if isinstance(sub, str) else None,
                          extensions=dict(extensions or {}))
    raise ConfigError(f"sasl_oauth_token_provider: returned {type(raw).__name__}; expected an OAuthToken or a "
                      f"JWT string")


class TokenSource:
    """The current token of one client, fetched from the provider on demand and refreshed before expiry."""

    def __init__(self, provider: Callable[[], Any], *, clock: WallClock = wall_clock_ms,
                 refresh_fraction: float = REFRESH_FRACTION) -> None:
        if not callable(provider):
            raise ConfigError(f"sasl_oauth_token_provider: must be callable, got {type(provider).__name__}")
        self._provider = provider
        self._clock = clock
        self._fraction = refresh_fraction
        self._token: OAuthToken | None = None
        self._refresh_at = 0
        self._lock = anyio.Lock()
        #: how many times the provider was called (metrics, tests)
        self.fetches = 0

    @property
    def principal(self) -> str | None:
        return self._token.principal if self._token is not None else None

    @property
    def refresh_at_ms(self) -> int:
        return self._refresh_at

    async def token(self) -> OAuthToken:
        """The current token, asking the provider when there is none or its refresh time has come."""
        if self._token is not None and self._clock() < self._refresh_at:
            return self._token
        async with self._lock:
            now = self._clock()
            if self._token is not None and now < self._refresh_at:
                return self._token
            try:
                token = to_token(await self._call())
            except (errors.AuthenticationError, ConfigError):
                raise
            except Exception as exc:
                current = self._token
                if current is not None and now < current.expires_at_ms:
                    # keep the still-valid token; try again halfway to its expiry
                    self._refresh_at = now + max(1, (current.expires_at_ms - now) // 2)
                    log.warning("OAUTHBEARER token refresh failed (%s); using the current token until it expires",
                                exc)
                    return current
                raise errors.KafkaConnectionError(f"OAUTHBEARER token provider failed: {exc}") from exc
            if token.expires_at_ms <= now:
                raise errors.AuthenticationError(
                    f"OAUTHBEARER token provider returned a token that expired {now - token.expires_at_ms} ms ago")
            self.fetches += 1
            self._token = token
            self._refresh_at = now + int((token.expires_at_ms - now) * self._fraction)
            log.debug("OAUTHBEARER token for %s obtained: valid for %d ms, refreshed in %d ms", token.principal,
                      token.expires_at_ms - now, self._refresh_at - now)
            return token

    async def _call(self) -> Any:
        provider = self._provider
        if inspect.iscoroutinefunction(provider) or inspect.iscoroutinefunction(getattr(provider, "__call__", None)):
            return await provider()
        result = await anyio.to_thread.run_sync(provider)
        if inspect.isawaitable(result):
            result = await result
        return result


class OidcClientCredentials:
    """The OAuth 2 client-credentials grant (KIP-768): POST to ``token_endpoint_url`` and return the token.

    Use as ``sasl_oauth_token_provider=OidcClientCredentials(url, client_id, client_secret, scope="kafka")``.
    ``extensions`` are sent with every token (e.g. Confluent Cloud's ``logicalCluster``). A 4xx answer (bad
    client credentials, unknown scope) raises ``AuthenticationError`` and is fatal; 5xx and network errors are
    transient. ``ssl_context`` applies to an https endpoint."""

    def __init__(self, token_endpoint_url: str, client_id: str, client_secret: str, *, scope: str | None = None,
                 extensions: Mapping[str, str] | None = None, timeout_s: float = 10.0,
                 ssl_context: ssl.SSLContext | None = None, clock: WallClock = wall_clock_ms) -> None:
        parsed = urllib.parse.urlparse(token_endpoint_url if isinstance(token_endpoint_url, str) else "")
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"token_endpoint_url: expected an http(s) URL, got {token_endpoint_url!r}")
        for name, value in (("client_id", client_id), ("client_secret", client_secret)):
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{name}: expected a non-empty str")
        if scope is not None and (not isinstance(scope, str) or not scope):
            raise ConfigError(f"scope: expected a non-empty str or None, got {scope!r}")
        if not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ConfigError(f"timeout_s: expected a number > 0, got {timeout_s!r}")
        self.extensions = dict(extensions or {})
        check_extensions(self.extensions)
        self.token_endpoint_url = token_endpoint_url
        self.client_id = client_id
        self._secret = client_secret
        self.scope = scope
        self.timeout_s = float(timeout_s)
        self._ssl = ssl_context
        self._clock = clock

    def __repr__(self) -> str:
        return f"OidcClientCredentials({self.token_endpoint_url!r}, client_id={self.client_id!r}, scope={self.scope!r})"

    async def __call__(self) -> OAuthToken:
        return await anyio.to_thread.run_sync(self.fetch)

    def fetch(self) -> OAuthToken:
        """One blocking token request (the async ``__call__`` runs it in a worker thread)."""
        form = {"grant_type": "client_credentials"}
        if self.scope is not None:
            form["scope"] = self.scope
        basic = base64.b64encode(f"{urllib.parse.quote(self.client_id)}:{urllib.parse.quote(self._secret)}"
                                 .encode()).decode()
        request = urllib.request.Request(
            self.token_endpoint_url, data=urllib.parse.urlencode(form).encode(), method="POST",
            headers={"Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded",
                     "Accept": "application/json"})
        sent_at = self._clock()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._ssl) as response:
                payload = response.read(1 << 20)
        except urllib.error.HTTPError as exc:
            detail = exc.read(512).decode("utf-8", "replace")
            if 400 <= exc.code < 500:
                raise errors.AuthenticationError(
                    f"OAuth token endpoint {self.token_endpoint_url} refused client {self.client_id!r}: "
                    f"HTTP {exc.code} {detail}") from None
            raise OSError(f"OAuth token endpoint {self.token_endpoint_url} answered HTTP {exc.code}") from None
        try:
            doc = json.loads(payload)
            access = doc["access_token"]
        except (ValueError, KeyError, TypeError):
            raise OSError(f"OAuth token endpoint {self.token_endpoint_url} answered without an access_token") from None
        expires_in = doc.get("expires_in")
        if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool) and expires_in > 0:
            claims_sub = None
            try:
                sub = jwt_claims(access).get("sub")
                claims_sub = sub if isinstance(sub, str) else None
            except ConfigError:
                pass
            return OAuthToken(access, sent_at + int(expires_in * 1000), principal=claims_sub or self.client_id,
                              extensions=self.extensions)
        return to_token(access, self.extensions)
