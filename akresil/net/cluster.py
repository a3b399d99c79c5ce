"""The shared I/O shell of every client: connections per node, metadata refresh, request routing.

``Cluster`` owns one connection per broker, the core's node states (reconnect backoff, KIP-219 mute windows)
and the copy-on-write metadata cache.  It never decides policy itself: it asks the core when a node may be
sent to and what a response means, and sleeps until the earliest timer the core names.  Every task it starts
lives in its own task group, so ``close()`` leaves nothing running.

An authentication failure (SASL refused, TLS certificate not verified) on any connection, bootstrap or later,
is fatal for the whole client, as documented in docs/security.md: a refused password would be refused again
and brokers count failed attempts. ``fatal_error`` keeps it; no connection is opened after it, metadata
waiters and listeners are woken so that each client raises it from its next call. The background refresher
records it instead of raising, since an exception escaping it would cancel the client's task group from
under the application's own call (seen as a bare cancellation, not as the authentication error).
"""

from __future__ import annotations

import enum
import ipaddress
import logging
import random
import socket
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, cast

import anyio

from .. import errors
from ..config import Config
from ..core import events
from ..core.backoff import ExponentialBackoff
from ..core.events import Hooks
from ..core.metadata import MetadataCache
from ..core.node_state import NodeState
from ..core.rebootstrap import REBOOTSTRAP_REQUIRED, MetadataRecovery
from ..protocol.api import ApiKey
from .clock import Clock, monotonic_ms
from .connection import Connection, SaslConfig
from .coordinator import CoordinatorLocator
from .framing import find_frame_too_large
from .signals import Broadcast

if TYPE_CHECKING:
    from .request_types import ClusterRequest, ClusterRequestAny
    from ..protocol.messages import MetadataRequest, MetadataResponse

log = logging.getLogger(__name__)

ZERO_UUID = bytes(16)
#: a request body, or a function making it from the negotiated version (``net.request_types`` types both per API)
Body = Mapping[str, Any]
BodyBuilder = Callable[[int], Body]


def unchecked(cluster: Cluster) -> Callable[..., Awaitable[tuple[int, dict[str, Any]]]]:
    """``cluster.request`` for a sender whose API key is chosen at run time (the typed overloads need a literal
    key): body and answer are plain dicts the type checker does not look into. The same bound method."""
    return cluster.request  # type: ignore[return-value]

class Lane(enum.Enum):
    """Which of a broker's connections a request goes on; ``lane_of`` picks it from the API key, so callers name
    only the broker (the node id) and every metric carries that broker's id."""

    SHARED = "shared"
    #: a group member's traffic to its coordinator (as the Java client and librdkafka keep a connection of
    #: their own for it, and franz-go one for JoinGroup / SyncGroup): a broker answers one connection's requests
    #: in order, so a heartbeat behind a long-poll Fetch or ShareFetch on the shared connection waited up to
    #: ``fetch_max_wait_ms``, and with it every rebalance step (acknowledging a revocation)
    GROUP = "group"


#: the APIs of group membership and of a group's offsets (a member's and the admin's alike)
_GROUP_LANE = frozenset({ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
                         ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.CONSUMER_GROUP_HEARTBEAT,
                         ApiKey.SHARE_GROUP_HEARTBEAT})


def lane_of(api_key: ApiKey) -> Lane:
    """The connection a request of ``api_key`` goes on."""
    return Lane.GROUP if api_key in _GROUP_LANE else Lane.SHARED


class Cluster:
    """Connections, node states and metadata shared by one client's tasks."""

    def __init__(self, config: Config, *, hooks: Hooks | None = None, clock: Clock = monotonic_ms,
                 rng: random.Random | None = None, allow_auto_topic_creation: bool = True) -> None:
        self.config = config
        self.hooks = hooks if hooks is not None else Hooks()   # an empty registry is falsy: keep the client's
        self.clock = clock
        self.rng = rng or random.Random()
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.metadata = MetadataCache(
            retry_backoff_ms=config.retry_backoff_ms, retry_backoff_max_ms=config.retry_backoff_max_ms,
            metadata_max_age_ms=config.metadata_max_age_ms, rng=self.rng, hooks=self.hooks,
            auto_create_topics=allow_auto_topic_creation)
        #: every coordinator this client talks to (groups, transactions, the admin's), found and cached once
        self.coordinators = CoordinatorLocator(self)
        #: when to give the known brokers up for bootstrap_servers (KIP-899 / KIP-1102)
        self.recovery = MetadataRecovery(enabled=config.metadata_recovery_strategy == "rebootstrap",
                                         trigger_ms=config.metadata_recovery_rebootstrap_trigger_ms)
        self._reconnect_backoff = ExponentialBackoff(
            config.reconnect_backoff_ms, config.reconnect_backoff_max_ms, rng=self.rng)
        #: per (node, lane): its node state, its connection, a connect in progress
        self._nodes: dict[tuple[int, Lane], NodeState] = {}
        self._conns: dict[tuple[int, Lane], Connection] = {}
        self._connecting: dict[tuple[int, Lane], anyio.Event] = {}
        self._bootstrap = [_split_host_port(s) for s in config.bootstrap_servers]
        self._refresh_wanted = anyio.Event()
        self._metadata_changed = Broadcast()
        self._metadata_listeners: list[Callable[[], None]] = []
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        #: the first authentication failure: every later connection attempt raises (a copy of) it
        self.fatal_error: errors.AuthenticationError | None = None
        #: finalized feature levels (``transaction.version`` ...) from the ApiVersions answer with the highest
        #: features epoch seen on any connection (Java's ``ApiVersions.getFinalizedFeaturesInfo``)
        self._features: dict[str, int] = {}
        self._features_epoch = -1
        #: where a connection's ApiVersions starts: the version an earlier connection stepped down to past
        #: rejections it could not read (librdkafka's mock: two round trips saved on every later connection)
        self._api_versions_start: int | None = None
        self._sasl = None
        if config.security_protocol.startswith("SASL_"):
            token_source = None
            if config.sasl_mechanism == "OAUTHBEARER":
                from .oauth import TokenSource
                token_source = TokenSource(config.sasl_oauth_token_provider)
            self._sasl = SaslConfig(mechanism=config.sasl_mechanism, username=config.sasl_plain_username,
                                    password=config.sasl_plain_password, token_source=token_source)
        self._ssl = config.ssl_context if config.security_protocol in ("SSL", "SASL_SSL") else None
        if config.security_protocol in ("SSL", "SASL_SSL") and self._ssl is None:
            import ssl
            self._ssl = ssl.create_default_context()

    # ------------------------------------------------------------------ lifecycle
    async def start(self, task_group: anyio.abc.TaskGroup, *,
                    coordinators: Iterable[tuple[str, int]] = ()) -> None:
        """Bootstrap (first Metadata) and start the background metadata refresher in ``task_group``.

        ``coordinators``: (key, key type) pairs, a group id or a transactional id, whose coordinator to look up on
        the bootstrap connection alongside the first Metadata (``CoordinatorLocator.prefetch``), so the client's
        first ``find`` is answered from the cache instead of a FindCoordinator round trip after the bootstrap."""
        self._tg = task_group
        await self._bootstrap_metadata(tuple(coordinators))
        task_group.start_soon(self._refresher, name="akresil-metadata-refresher")

    async def close(self) -> None:
        self._closed = True
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            with anyio.CancelScope(shield=True):
                await conn.close(errors.ClientClosedError("client closed"))
        self._refresh_wanted.set()
        self._metadata_changed.fire()

    # ------------------------------------------------------------------ nodes and connections
    def node(self, node_id: int, lane: Lane = Lane.SHARED) -> NodeState:
        """The state of the connection on ``lane`` to ``node_id`` (a broker id, or -1, -2, ... for the bootstrap
        addresses)."""
        key = (node_id, lane)
        state = self._nodes.get(key)
        if state is None:
            state = self._nodes[key] = NodeState(
                node_id, reconnect_backoff=self._reconnect_backoff,
                max_in_flight=self.config.max_in_flight_requests_per_connection, hooks=self.hooks,
                lane=lane.value)
        return state

    def _address(self, node_id: int) -> tuple[str, int]:
        if node_id < 0:
            return self._bootstrap[-node_id - 1]
        broker = self.metadata.snapshot.brokers.get(node_id)
        if broker is None:
            raise errors.KafkaConnectionError(f"node {node_id} is not in the cluster metadata")
        return broker.host, broker.port

    async def connection(self, node_id: int, lane: Lane = Lane.SHARED) -> Connection:
        """The node's connection on ``lane``, connecting (after any reconnect backoff) if needed."""
        key = (node_id, lane)
        while True:
            if self._closed:
                raise errors.ClientClosedError("client closed")
            if self.fatal_error is not None:
                raise _fresh(self.fatal_error)
            conn = self._conns.get(key)
            if conn is not None and not conn.closed and conn.reauthentication_due(self.clock()):
                # KIP-368: the broker closes a connection used after its SASL session expired; reconnect
                # (authenticating again, with a refreshed token) while this one is idle
                log.debug("node %s: SASL session ends soon; reconnecting to re-authenticate", node_id)
                self.disconnect(node_id, lane=lane)
                conn = None
            if conn is not None and not conn.closed:
                return conn
            pending = self._connecting.get(key)
            if pending is not None:
                await pending.wait()
                continue
            done = self._connecting[key] = anyio.Event()
            try:
                return await self._connect(node_id, lane)
            finally:
                del self._connecting[key]
                done.set()

    async def _connect(self, node_id: int, lane: Lane) -> Connection:
        state = self.node(node_id, lane)
        await self._sleep_until(lambda: state.next_connect_at(self.clock()))
        # another connection may have been refused its login (or the client closed) during the backoff
        if self._closed:
            raise errors.ClientClosedError("client closed")
        if self.fatal_error is not None:
            raise _fresh(self.fatal_error)
        host, port = self._address(node_id)
        state.on_connecting(self.clock())
        try:
            conn = await Connection.connect(
                host, port, client_id=self.config.client_id, ssl_context=self._ssl, sasl=self._sasl,
                connect_timeout_ms=self.config.socket_connection_setup_timeout_ms,
                request_timeout_ms=self.config.request_timeout_ms,
                max_in_flight=self.config.max_in_flight_requests_per_connection,
                max_frame_bytes=self.config.receive_message_max_bytes,
                node_id=node_id, hooks=self.hooks, clock=self.clock, api_versions_version=self._api_versions_start)
        except errors.AuthenticationError as exc:
            state.on_disconnected(self.clock(), failed=True)
            self._set_fatal(exc)
            raise
        except errors.KafkaConnectionError:
            state.on_disconnected(self.clock(), failed=True)
            self._check_reachable(node_id, lane)
            raise   # Connection.connect names the node, the address and the cause already
        except (OSError, errors.KafkaError) as exc:
            state.on_disconnected(self.clock(), failed=True)
            self._check_reachable(node_id, lane)
            reason = str(exc) or type(exc).__name__
            raise errors.KafkaConnectionError(
                f"cannot connect to node {node_id} at {host}:{port}: {reason}",
                reason=reason) from exc
        state.on_connected(self.clock())
        if conn.stepped_api_versions is not None:
            self._api_versions_start = conn.stepped_api_versions
        self._conns[(node_id, lane)] = conn
        self._learn_features(conn.finalized_features, conn.finalized_features_epoch)
        return conn

    def connected_nodes(self) -> list[tuple[int, Lane]]:
        """``(node id, lane)`` of every live connection now."""
        return [key for key, conn in self._conns.items() if not conn.closed]

    def _learn_features(self, features: dict[str, int], epoch: int) -> None:
        """Keep the finalized features of the highest epoch seen: brokers learn a change at different times."""
        if epoch > self._features_epoch:
            self._features, self._features_epoch = features, epoch

    def feature_level(self, name: str) -> int:
        """The cluster's finalized level of feature ``name`` as the newest ApiVersions answer says (0: none)."""
        return self._features.get(name, 0)

    def connected(self, node_id: int, lane: Lane = Lane.SHARED) -> Connection | None:
        """The node's live connection, or None (never connects: the scheduler's synchronous check)."""
        conn = self._conns.get((node_id, lane))
        return conn if conn is not None and not conn.closed else None

    def disconnect(self, node_id: int, error: BaseException | None = None, *, lane: Lane = Lane.SHARED) -> None:
        """Close the node's connection on ``lane`` (``error``: a failure, which starts the reconnect backoff)."""
        conn = self._conns.pop((node_id, lane), None)
        if conn is not None and self._tg is not None:
            self._tg.start_soon(conn.close, error)
        self.node(node_id, lane).on_disconnected(self.clock(), failed=error is not None)
        if error is not None:
            self._check_reachable(node_id, lane)

    async def _sleep_until(self, due: Callable[[], float | None]) -> None:
        """Sleep until ``due()`` (absolute ms, re-read after each wake: a mute may grow) is not in the future."""
        while True:
            at = due()
            if at is None:
                return
            delay = at - self.clock()
            if delay <= 0:
                return
            await anyio.sleep(delay / 1000.0)

    async def wait_sendable(self, node_id: int, lane: Lane = Lane.SHARED) -> None:
        """Wait out the node's mute window (KIP-219) and reconnect backoff: requests wait, they do not fail."""
        state = self.node(node_id, lane)
        await self._sleep_until(lambda: state.next_send_at(self.clock()))

    # ------------------------------------------------------------------ requests
    async def _request(self, node_id: int, api_key: ApiKey, body: Body | BodyBuilder, *,
                       min_version: int = 0, max_version: int | None = None,
                       timeout_ms: int | None = None) -> tuple[int, dict[str, Any]]:
        """Send one request to ``node_id`` and return ``(version, response)``.

        The request goes on the node's connection for its API (``lane_of``). ``body`` may be a function of the
        negotiated version.  Throttle time in the response is fed to the
        node state (which mutes the node when the version calls for it).  Connection failures close the
        connection and raise ``KafkaConnectionError``; error codes inside the response are the caller's.
        Callers use it as ``request``, typed per API (``net.request_types``).
        """
        lane = lane_of(api_key)
        await self.wait_sendable(node_id, lane)
        conn = await self.connection(node_id, lane)
        version = conn.versions.get(api_key)
        if version is None or version < min_version:
            raise errors.UnsupportedVersionError(
                f"node {node_id} does not support {api_key.name} v{min_version}+ (broker: {conn.api_ranges.get(api_key)})")
        if max_version is not None and version > max_version:
            version = max_version
        payload = body(version) if callable(body) else body
        state = self.node(node_id, lane)
        state.on_request_sent(self.clock())
        try:
            # the key is the caller's, typed by ``request``'s overloads
            send = cast("Callable[..., Awaitable[dict[str, Any]]]", conn.request)
            response = await send(api_key, payload, version=version, timeout_ms=timeout_ms)
        except errors.RequestTimeoutError as exc:
            self.disconnect(node_id, exc, lane=lane)
            raise
        except (errors.KafkaConnectionError, errors.ProtocolError) as exc:
            self.disconnect(node_id, exc, lane=lane)
            if find_frame_too_large(exc) is not None:   # retried like any broken stream, but never silently
                log.warning("%s response from node %s refused: %s", api_key.name, node_id, exc)
            raise errors.KafkaConnectionError(
                str(exc), reason=exc.reason if isinstance(exc, errors.KafkaConnectionError) else None) from exc
        finally:
            state.on_request_done(self.clock())
        throttle = response.get("throttle_time_ms") or 0
        state.on_response(int(api_key), version, throttle, self.clock())
        return version, response

    if TYPE_CHECKING:
        #: ``_request`` as the type checker sees it: the response type follows the API key
        request: ClusterRequest
    else:
        request = _request

    def least_loaded_node(self) -> int:
        """A node to send cluster-wide requests to: connected and idle first, muted or backing-off last. A bootstrap
        server whose connection is still open (the first Metadata's; telemetry keeps using it) is a candidate
        too, after an equally loaded broker: at start-up the brokers' own connections are still being opened,
        and a group's FindCoordinator waited for one of them instead of going out on the open one."""
        now = self.clock()
        bootstrap = [-(i + 1) for i in range(len(self._bootstrap))]
        candidates = list(self.metadata.snapshot.brokers)
        if candidates:
            candidates += [node_id for node_id in bootstrap if self.connected(node_id) is not None]
        else:
            candidates = bootstrap
        self.rng.shuffle(candidates)

        def rank(node_id: int) -> tuple[int, int, bool]:
            state = self.node(node_id)
            blocked = 1 if (state.next_send_at(now) or 0) > now else 0
            connected = 0 if self.connected(node_id) is not None else 1
            return blocked, connected * 1000 + state.in_flight, node_id < 0

        return min(candidates, key=rank)

    async def _request_any(self, api_key: ApiKey, body: Body | BodyBuilder, *, min_version: int = 0,
                           timeout_ms: int | None = None) -> tuple[int, int, dict[str, Any]]:
        """Send to the least loaded node, trying others on connection failure. Returns (node, version, response)."""
        last: BaseException | None = None
        tried: set[int] = set()
        for _ in range(max(3, len(self.metadata.snapshot.brokers))):
            node_id = self.least_loaded_node()
            if node_id in tried and len(tried) < len(self.metadata.snapshot.brokers or self._bootstrap):
                continue
            tried.add(node_id)
            try:
                version, response = await unchecked(self)(node_id, api_key, body, min_version=min_version,
                                                          timeout_ms=timeout_ms)
                return node_id, version, response
            except (errors.KafkaConnectionError, errors.RequestTimeoutError) as exc:
                last = exc
        assert last is not None
        raise last

    if TYPE_CHECKING:
        request_any: ClusterRequestAny
    else:
        request_any = _request_any

    # ------------------------------------------------------------------ metadata
    def add_topics(self, topics: Iterable[str]) -> None:
        """Ask for these topics' metadata too; a new one is refreshed at once (no backoff: nothing failed)."""
        if self.metadata.want_topics(topics, self.clock()) is not None:
            self._refresh_wanted.set()

    def set_topics(self, topics: Iterable[str], *, all_topics: bool = False) -> None:
        self.metadata.set_topics(topics, self.clock(), all_topics=all_topics)
        self._refresh_wanted.set()

    def request_metadata_refresh(self, cause: str, *, missing: bool = False) -> None:
        """Ask for an asynchronous, backed-off refresh (KIP-580 backoff inside the metadata cache).
        ``missing``: the cache lacks a leader or endpoint: a refresh in flight answers it (``core.metadata``)."""
        self.metadata.request_refresh(cause, self.clock(), missing=missing)
        self._refresh_wanted.set()

    async def wait_for_metadata(self, *, timeout_ms: float, until: Callable[[], bool]) -> None:
        """Wait until ``until()`` holds after metadata changes, refreshing as needed; TimeoutError after timeout."""
        with anyio.fail_after(timeout_ms / 1000.0):
            while not until():
                if self._closed:
                    raise errors.ClientClosedError("client closed")
                if self.fatal_error is not None:
                    raise _fresh(self.fatal_error)
                changed = self._metadata_changed.current()
                self.request_metadata_refresh("wait", missing=True)
                await changed.wait()

    async def _bootstrap_metadata(self, coordinators: tuple[tuple[str, int], ...] = ()) -> None:
        """The first Metadata, from any bootstrap server, in rounds over all of them for at most
        ``bootstrap_timeout_ms`` (one deadline for the whole wait, a connect or request in progress included).

        Rounds back off as retries do (KIP-580: ``retry_backoff_ms`` doubling to ``retry_backoff_max_ms``), and
        no address is tried inside its reconnect backoff. Failed rounds 1, 2, 4, 8 ... log one WARNING each,
        naming every address with its cause and the next attempt (the log backs off too: 6 lines in the default
        60 s, where one per round made 60); the rounds between them log at DEBUG. Giving up raises one error
        naming each address and its last cause once."""
        await self._check_bootstrap_resolves()
        timeout_ms = self.config.bootstrap_timeout_ms
        deadline = self.clock() + timeout_ms
        causes: dict[str, str] = {}
        rounds = 0
        trying: str | None = None
        round_backoff = ExponentialBackoff(self.config.retry_backoff_ms, self.config.retry_backoff_max_ms,
                                           rng=self.rng)
        with anyio.move_on_after(timeout_ms / 1000.0):
            while True:
                rounds += 1
                for i, (host, port) in enumerate(self._bootstrap):
                    trying = f"{host}:{port}"
                    try:
                        if coordinators:
                            # connected first, so the lookups go on this connection (pipelined with the Metadata)
                            await self.connection(-(i + 1))
                            assert self._tg is not None
                            for key, key_type in coordinators:
                                self._tg.start_soon(self.coordinators.prefetch, key, -(i + 1), key_type)
                            coordinators = ()
                        await self._refresh_from(-(i + 1))
                        return
                    except errors.AuthenticationError:
                        raise
                    except (errors.KafkaConnectionError, errors.RequestTimeoutError, errors.RebootstrapRequiredError,
                            OSError) as exc:
                        causes[trying] = _failure_reason(exc)
                    trying = None
                now = self.clock()
                next_at = max(now + round_backoff.backoff_ms(rounds),
                              min(self.node(-(i + 1)).next_connect_at(now) or now for i in range(len(self._bootstrap))))
                level = logging.WARNING if rounds & (rounds - 1) == 0 else logging.DEBUG
                log.log(level, "no bootstrap server answered (round %d): %s; next attempt in %.0f ms (start() gives "
                        "up in %.1f s, bootstrap_timeout_ms=%d; logged again after round %d)", rounds,
                        _listing(causes), next_at - now, max(0.0, deadline - now) / 1000.0, timeout_ms,
                        rounds * 2 if level == logging.WARNING else 1 << rounds.bit_length())
                await self._sleep_until(lambda: next_at)
        if trying is not None and trying not in causes:
            # cut off by the deadline: an earlier round's cause for this address says more, keep that one
            causes[trying] = f"no answer before bootstrap_timeout_ms ran out ({timeout_ms} ms)"
        for host, port in self._bootstrap:
            causes.setdefault(f"{host}:{port}", "not tried before bootstrap_timeout_ms ran out")
        raise errors.NoBrokersAvailableError(
            f"no bootstrap server answered within bootstrap_timeout_ms={timeout_ms} ({rounds} round(s)): "
            f"{_listing(causes)}")

    async def _check_bootstrap_resolves(self) -> None:
        """Refuse a bootstrap list none of whose names exists (ConfigError, at once), as Java's client does: a
        typo would otherwise be retried for the whole bootstrap_timeout_ms.  Names that do not exist next to
        ones that do get a WARNING and the others are tried.  Only a definite answer ("no such name") counts: a
        resolver that is temporarily down (EAI_AGAIN) is left to the retry rounds."""
        missing: dict[str, str] = {}
        for host, port in self._bootstrap:
            if _is_ip_literal(host):
                continue        # nothing to resolve: no resolver thread hop before the first connection
            try:
                await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except socket.gaierror as exc:
                if exc.errno in _NO_SUCH_NAME:
                    missing[f"{host}:{port}"] = exc.strerror or str(exc)
        if not missing:
            return
        listing = "; ".join(f"{address} ({why})" for address, why in missing.items())
        if len(missing) == len(self._bootstrap):
            raise errors.ConfigError(f"bootstrap_servers: no host name resolves: {listing}")
        log.warning("bootstrap_servers: %s not resolve: %s; trying the others",
                    "does" if len(missing) == 1 else "do", listing)

    def _metadata_body(self, version: int) -> MetadataRequest:
        md = self.metadata
        return metadata_request_body(None if md.all_topics else md.wanted_topics,
                                     allow_auto_topic_creation=self.allow_auto_topic_creation)

    async def _refresh_from(self, node_id: int) -> None:
        self.hooks.emit(events.METADATA_REQUEST, node_id=node_id)
        token = self.metadata.begin_refresh(self.clock())
        self.recovery.on_attempt(self.clock())
        _, response = await self.request(node_id, ApiKey.METADATA, self._metadata_body)
        self._take_metadata(node_id, response, token)

    async def request_metadata(self, topics: list[str] | None) -> MetadataResponse:
        """A Metadata answer from any broker for ``topics`` (None: every topic, []: none), merged into the
        cache (the admin client's fresh reads)."""
        body = metadata_request_body(topics, allow_auto_topic_creation=False)
        self.recovery.on_attempt(self.clock())
        node_id, _, response = await self.request_any(ApiKey.METADATA, body, min_version=1)
        self._take_metadata(node_id, response, None)
        return response

    def _take_metadata(self, node_id: int, response: MetadataResponse, token: int | None) -> None:
        """Merge a Metadata answer. REBOOTSTRAP_REQUIRED (KIP-1102, the one top-level error Metadata v13+ has)
        rebootstraps, with ``metadata_recovery_strategy='rebootstrap'``, and raises: the attempt failed."""
        code = response.get("error_code") or 0
        if self.recovery.on_answer(code):
            self._rebootstrap(f"node {node_id} answered REBOOTSTRAP_REQUIRED")
        if code == REBOOTSTRAP_REQUIRED:
            raise errors.RebootstrapRequiredError(f"Metadata from node {node_id}: "
                                                  f"{errors.RebootstrapRequiredError.description}")
        self.metadata.update_from_metadata(response, self.clock(), token=token)
        self._announce_metadata()

    # ------------------------------------------------------------------ rebootstrap (KIP-899 / KIP-1102)
    def _check_reachable(self, node_id: int, lane: Lane) -> None:
        """After a failed connection to a broker: rebootstrap when every known broker is unreachable."""
        if node_id < 0 or lane is not Lane.SHARED or self._closed:
            return
        if self.recovery.unreachable(self.node(b) for b in self.metadata.snapshot.brokers):
            self._rebootstrap("no known broker can be reached")

    def _rebootstrap(self, why: str) -> None:
        """Forget the brokers (their connections too) and ask ``bootstrap_servers`` for metadata again."""
        known = sorted(self.metadata.snapshot.brokers)
        log.warning("%s (brokers %s); rebootstrapping from bootstrap_servers %s (metadata_recovery_strategy="
                    "'rebootstrap')", why, known, ", ".join(f"{h}:{p}" for h, p in self._bootstrap))
        self.recovery.on_rebootstrap()
        for node_id, lane in [key for key in self._conns if key[0] >= 0]:
            self.disconnect(node_id, lane=lane)
        self.metadata.forget_brokers(self.clock())
        self._refresh_wanted.set()
        self._announce_metadata()

    def _set_fatal(self, exc: errors.AuthenticationError) -> None:
        """Keep the first authentication failure and wake everyone who waits on the cluster."""
        if self.fatal_error is None:
            self.fatal_error = exc
            self._refresh_wanted.set()
            self._announce_metadata()

    def on_metadata_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every metadata update or failed refresh (schedulers wake on it)."""
        self._metadata_listeners.append(callback)

    def _announce_metadata(self) -> None:
        self._metadata_changed.fire()
        for callback in self._metadata_listeners:
            callback()

    async def _refresher(self) -> None:
        """Background task: refresh when asked or when metadata is older than ``metadata_max_age_ms``."""
        while not self._closed:
            now = self.clock()
            due = self.metadata.next_refresh_at(now)
            if due is not None and due <= now:
                self._refresh_wanted = anyio.Event()
                try:
                    node_id = self.least_loaded_node()
                    await self._refresh_from(node_id)
                except errors.AuthenticationError as exc:
                    log.error("metadata refresh: authentication failed, the client stops: %s", exc)
                    self._set_fatal(exc)
                    return
                except errors.RebootstrapRequiredError:
                    continue            # rebootstrapped: the bootstrap servers are asked at once
                except (errors.KafkaError, OSError) as exc:
                    log.debug("metadata refresh failed: %s", exc)
                    self.metadata.on_refresh_failed(self.clock())
                    if self.recovery.overdue(self.clock()):
                        self._rebootstrap(f"no metadata for metadata_recovery_rebootstrap_trigger_ms="
                                          f"{self.recovery.trigger_ms:g}")
                    self._announce_metadata()
                continue
            wait_s = None if due is None else (due - now) / 1000.0
            with anyio.move_on_after(wait_s if wait_s is not None else 3600.0):
                await self._refresh_wanted.wait()
            self._refresh_wanted = anyio.Event()


def metadata_request_body(topics: Iterable[str] | None, *, allow_auto_topic_creation: bool) -> MetadataRequest:
    """A Metadata request body for any version: ``topics=None`` asks for every topic, ``[]`` for none."""
    return {"topics": None if topics is None else [{"name": t, "topic_id": ZERO_UUID} for t in topics],
            "allow_auto_topic_creation": allow_auto_topic_creation,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}


def _is_ip_literal(host: str) -> bool:
    """An IPv4 or IPv6 address (``[...]`` already stripped): there is no name to resolve."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])      # an IPv6 zone id does not parse
    except ValueError:
        return False
    return True


#: getaddrinfo's definite "this name does not exist" answers (EAI_NODATA is not defined everywhere)
_NO_SUCH_NAME = frozenset(code for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None))
                          if code is not None)


def _fresh(error: errors.AuthenticationError) -> errors.AuthenticationError:
    """A copy of ``error`` per raise, so concurrent raisers do not share (and grow) one traceback."""
    copy = type(error)(*error.args)
    copy.__cause__ = error.__cause__
    return copy


def _failure_reason(exc: BaseException) -> str:
    """The cause of a failed bootstrap attempt without the address (the listing names it once)."""
    if isinstance(exc, errors.KafkaConnectionError):
        return exc.reason
    return str(exc) or type(exc).__name__


def _listing(causes: dict[str, str]) -> str:
    return "; ".join(f"{address}: {cause}" for address, cause in causes.items())


def _split_host_port(server: str) -> tuple[str, int]:
    host, _, port = server.strip().rpartition(":")
    return host.strip("[]"), int(port)
