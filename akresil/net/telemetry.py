"""KIP-714 client metrics push, the I/O shell: one task per client asks a broker for the client's telemetry
subscription and pushes the subscribed metrics at its interval; closing the client sends a last push marked
terminating.

The state machine and the metrics are sans-IO (``core.telemetry``); this module picks the broker (one, kept while
it answers, as KIP-714 and the Java client do), sends GetTelemetrySubscriptions and PushTelemetry, encodes
(``protocol.otlp``) and compresses the payload with the first codec the broker accepts that this process has.
A client keeps the series table in memory (``TelemetryMetrics``, a hook like ``metrics_registry``'s) while a
subscription asks it for metrics: from its first request, so nothing of its first moments is missed, dropped once
the bootstrap broker turns out not to offer the telemetry APIs or the first answer subscribes it to nothing, and
kept (or taken up again) while subscriptions ask for metrics.  Elsewhere ``enable_metrics_push`` costs a GetTelemetrySubscriptions per push interval (on
a broker without the APIs, only a local version check every five minutes).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import anyio

from .. import __version__, errors
from ..core.telemetry import DEFAULT_PUSH_INTERVAL_MS, Phase, TelemetryMetrics, TelemetryState
from ..protocol.api import ApiKey
from ..protocol.otlp import encode_metrics_data
from ..protocol.records import CODEC_NAMES, codec_available, compress
from .signals import Broadcast

if TYPE_CHECKING:
    from .cluster import Cluster

log = logging.getLogger(__name__)

__all__ = ["TelemetryPusher", "TERMINATING_PUSH_TIMEOUT_MS"]

#: how long ``close()`` waits for the terminating push's answer at most (best effort: a close must not hang on it)
TERMINATING_PUSH_TIMEOUT_MS = 2_000


class TelemetryPusher:
    """KIP-714 for one client (``enable_metrics_push``), owned by its ``ClientRuntime``: ``prepare`` before the
    bootstrap, ``start`` after it, ``close`` before the connections go."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self.state = TelemetryState(cluster.rng)
        #: the series kept for pushes; None until a broker accepts telemetry
        self.metrics: TelemetryMetrics | None = None
        self._node: int | None = None
        self._scope: anyio.CancelScope | None = None
        self._done: anyio.Event | None = None
        #: set when the push at the broker now is answered (or failed); None while none is out
        self._pushing: anyio.Event | None = None
        #: fired after every answer, failure and at the end: what ``instance_id()`` waits for
        self._changed = Broadcast()
        #: why no instance id will come (the error class and its message), while the cluster gave none
        self._refusal: tuple[type[errors.KafkaError], str] | None = None
        self._closed = False
        config = cluster.config
        resource: list[tuple[str, str]] = []
        for key in ("group_id", "transactional_id", "group_instance_id"):
            value = getattr(config, key, None)
            if isinstance(value, str) and value:
                resource.append((key, value))
        self._resource = tuple(resource)

    @property
    def client_instance_id(self) -> bytes | None:
        """The id the broker gave this client (KIP-714), once a subscription was fetched."""
        return self.state.subscription.client_instance_id if self.state.subscription is not None else None

    async def instance_id(self) -> bytes:
        """The id the broker gave this client, waiting for the first GetTelemetrySubscriptions answer that has
        one; raises why none will come instead (the broker lacks the telemetry APIs, an answer ruled telemetry
        out for this client, the client closed)."""
        while True:
            changed = self._changed.current()      # taken before the checks: no answer slips in between
            subscription = self.state.subscription
            if subscription is not None:
                return subscription.client_instance_id
            if self._refusal is not None:
                error, message = self._refusal
                raise error(message)
            if self._closed:
                raise errors.ClientClosedError("the client closed before the cluster assigned it an instance id")
            await changed.wait()

    # ------------------------------------------------------------------ lifecycle
    def prepare(self) -> None:
        """Before the bootstrap: keep the series from the client's first request, until the bootstrap broker
        says whether the cluster takes telemetry at all (``start``)."""
        self._attach()

    def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """After the bootstrap: drop the series unless the bootstrap broker offers the telemetry APIs, and start
        asking for the subscription."""
        if not any(self._accepts_telemetry(node) for node, _ in self._cluster.connected_nodes()):
            self._detach()
        self._done = anyio.Event()
        self._scope = anyio.CancelScope()     # made here: a close() before the task first runs still cancels it
        task_group.start_soon(self._run, name="akresil-telemetry")

    async def close(self) -> None:
        """Stop the loop; when pushes were under way, send the terminating push (waiting at most
        ``TERMINATING_PUSH_TIMEOUT_MS`` for its answer); release the metrics."""
        self._closed = True
        pushing = self._pushing
        if pushing is not None:
            # a push the broker may be taking in already: wait for its answer (bounded), or its deltas, never
            # marked as pushed, would go again in the terminating push and the broker would count them twice
            with anyio.move_on_after(TERMINATING_PUSH_TIMEOUT_MS / 1000.0):
                await pushing.wait()
        if self._scope is not None:
            self._scope.cancel()
        if self._done is not None:
            await self._done.wait()
        try:
            if self.state.begin_close() and self.metrics is not None:
                with anyio.move_on_after(TERMINATING_PUSH_TIMEOUT_MS / 1000.0):
                    try:
                        await self._push(self._pick_node())
                    except (errors.KafkaError, OSError) as exc:
                        log.debug("terminating telemetry push failed: %r", exc)
        finally:
            self._detach()
            self._changed.fire()

    # ------------------------------------------------------------------ the loop
    async def _run(self) -> None:
        clock = self._cluster.clock
        assert self._scope is not None and self._done is not None
        try:
            with self._scope:
                while True:
                    due = self.state.due_at()
                    if due is None:
                        if not self.state.enabled:
                            log.info("client telemetry stopped (%s): the broker's answers rule it out for this "
                                     "client", self.state.phase.value)
                            self._detach()
                        return
                    delay = due - clock()
                    if delay > 0:
                        await anyio.sleep(delay / 1000.0)
                    await self._step()
        finally:
            self._done.set()

    async def _step(self) -> None:
        state, clock = self.state, self._cluster.clock
        node = self._pick_node()
        try:
            if state.phase is Phase.SUBSCRIPTION_NEEDED:
                instance = state.start_get()
                _, response = await self._cluster.request(node, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS,
                                                          {"client_instance_id": instance})
                phase = state.on_subscription(response, clock())
                if state.subscription is not None:
                    self._refusal = None
                elif not state.enabled:      # an answer that rules telemetry out for this client
                    error = int(response.get("error_code") or 0)
                    kind = errors.error_for_code(error) if error else errors.KafkaError
                    what = kind.__name__ if error else "an all-zero client instance id"
                    self._refusal = (kind, f"node {node} answered GetTelemetrySubscriptions with {what}: the "
                                           "cluster gives this client no instance id")
                if phase is Phase.PUSH_NEEDED:
                    self._attach()
                elif phase is Phase.SUBSCRIPTION_NEEDED and not response.get("error_code"):
                    self._detach()           # subscribed to nothing: no series to keep until that changes
            else:
                await self._push(node)
        except errors.UnsupportedVersionError as exc:
            # this broker has no telemetry plugin: ask again (perhaps another broker) after Java's default wait
            self._node = None
            state.on_failure(clock(), DEFAULT_PUSH_INTERVAL_MS)
            if state.subscription is None:
                self._refusal = (errors.UnsupportedVersionError,
                                 f"the cluster offers no client telemetry (KIP-714), so it assigns no client instance "
                                 f"id: {exc} (Apache Kafka offers it with a client-telemetry plugin on the brokers)")
        except (errors.KafkaConnectionError, errors.RequestTimeoutError, OSError) as exc:
            # ask again, another broker if need be, after the push interval: telemetry never hurries a reconnect
            log.debug("telemetry request to node %s failed: %r", node, exc)
            self._node = None
            subscription = state.subscription
            state.on_failure(clock(), subscription.push_interval_ms if subscription is not None
                             else DEFAULT_PUSH_INTERVAL_MS)
        except (errors.ClientClosedError, errors.AuthenticationError) as exc:
            state.enabled = False            # the client is closing, or failed for good: it raises that itself
            if state.subscription is None:
                self._refusal = (type(exc), str(exc))
        except Exception as exc:  # noqa: BLE001 - telemetry must never take the client down with it
            log.warning("client telemetry stopped after an unexpected error: %r", exc, exc_info=True)
            state.enabled = False
            if state.subscription is None:
                self._refusal = (errors.KafkaError, f"client telemetry stopped after an unexpected error: {exc!r}")
        finally:
            self._changed.fire()

    async def _push(self, node: int) -> None:
        state, clock = self.state, self._cluster.clock
        subscription, terminating = state.start_push()
        now_ns = time.time_ns()
        metrics, snapshot = (self.metrics.collect(subscription, now_ns) if self.metrics is not None else ([], {}))
        payload = encode_metrics_data(metrics, resource=self._resource, scope_name="akresil",
                                      scope_version=__version__)
        codec = next((c for c in subscription.compression_types if codec_available(c)), 0)
        data = compress(codec, payload)
        if len(data) > subscription.max_bytes > 0:
            log.warning("client telemetry: %d bytes of metrics (%s) exceed the broker's %d; not pushed",
                        len(data), CODEC_NAMES.get(codec, codec), subscription.max_bytes)
            state.skip_push(clock())
            return
        pushing = self._pushing = anyio.Event()
        try:
            _, response = await self._cluster.request(node, ApiKey.PUSH_TELEMETRY, {
                "client_instance_id": subscription.client_instance_id,
                "subscription_id": subscription.subscription_id,
                "terminating": terminating, "compression_type": codec, "metrics": data})
        finally:
            self._pushing = None
            pushing.set()
        error = int(response.get("error_code") or 0)
        if error == 0 and self.metrics is not None:
            self.metrics.pushed(snapshot, now_ns)
        elif error:
            log.debug("telemetry push refused: %s", errors.error_for_code(error).__name__)
        state.on_push(error, clock())

    # ------------------------------------------------------------------ helpers
    def _pick_node(self) -> int:
        """The broker telemetry goes to, kept while it answers: one the client is connected to already when
        there is one (telemetry opens no connection of its own then), else the least loaded."""
        if self._node is None:
            from .cluster import Lane
            connected = sorted((n for n, lane in self._cluster.connected_nodes() if lane is Lane.SHARED),
                               key=lambda n: n < 0)          # brokers from metadata before bootstrap addresses
            self._node = connected[0] if connected else self._cluster.least_loaded_node()
        return self._node

    def _accepts_telemetry(self, node: int) -> bool:
        conn = self._cluster.connected(node)
        return conn is not None and ApiKey.GET_TELEMETRY_SUBSCRIPTIONS in conn.versions \
            and ApiKey.PUSH_TELEMETRY in conn.versions

    def _attach(self) -> None:
        if self.metrics is not None:
            return
        config, cluster = self._cluster.config, self._cluster
        metrics = TelemetryMetrics(client_id=str(config.client_id), kind=config.kind, clock=cluster.clock,
                                   wall_ns=time.time_ns)
        for node, lane in cluster.connected_nodes():   # what the connection gauges would have heard so far
            metrics.on_node_state(node_id=node, lane=lane.value, state="connected")
        cluster.hooks.add(metrics)
        self.metrics = metrics

    def _detach(self) -> None:
        metrics, self.metrics = self.metrics, None
        if metrics is not None:
            self._cluster.hooks.remove(metrics)
            metrics.close()
