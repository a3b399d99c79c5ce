"""One client's runtime: its configuration, hooks, cluster, KIP-714 telemetry and background tasks, from start to
close.  ``Producer``, ``Consumer``, ``ShareConsumer`` and ``Admin`` each own one and add only their own parts.

franz-go has one ``kgo.Client`` that owns the configuration, the hooks, the brokers and the metadata, with the
producer and the consumer as parts of it.  akresil's four clients are separate classes (as in the Java client), so
the part they share is this object rather than a base client: each resolves its keyword arguments through it
(``config.resolve``: an unknown key or a bad value is a ``ConfigError`` naming the key), gets its ``Hooks`` from it
(the user's hooks and tracer, and the Prometheus hook when ``metrics_registry`` is set) and its ``Cluster``, and
lets it run the life-cycle that every client has alike:

* ``start``: bootstrap (the first Metadata), then the metadata refresher, the telemetry task and the client's own
  tasks, all in one task group owned by a ``TaskOwner`` (``net/tasks.py``), so that ``start()`` and ``close()``
  may run in different tasks and no task outlives ``close()``; a failed start releases everything it began;
* ``close``: the client's graceful part first (deliver, commit, leave the group, acknowledge), then, whatever
  happened there, its stop, the terminating telemetry push, the connections and the tasks; once every task ended
  the hooks hear ``CLIENT_CLOSED`` (they drop the client's gauges); a background task's failure is re-raised.

``ClientLifecycle`` is the mix-in that gives the clients ``async with`` and ``client_instance_id()`` on top of it.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping

import anyio
import anyio.abc

from . import errors
from .config import Config, resolve
from .core.events import CLIENT_CLOSED, Hooks
from .core.tracing import TraceSite
from .net.cluster import Cluster
from .net.tasks import TaskOwner

if TYPE_CHECKING:
    from typing import Self

    from .net.telemetry import TelemetryPusher

__all__ = ["ClientRuntime", "ClientLifecycle"]

#: what a client starts in the task group once the cluster is bootstrapped
StartTasks = Callable[[anyio.abc.TaskGroup], Awaitable[None]]


class ClientRuntime:
    """Config, hooks, cluster, telemetry and the task owner of one client.

    ``kind``: the config table's client kind (``producer``, ``consumer``, ``admin``), also the metrics' ``kind``;
    ``role``: how messages name the client (``"share consumer"``); ``class_name``: the class users construct.
    ``extra``: keyword arguments the client reads itself (``hooks`` among them when the client takes hooks).
    """

    __slots__ = ("config", "hooks", "cluster", "telemetry", "role", "_class_name", "_tasks", "started", "closed",
                 "running")

    def __init__(self, kind: str, role: str, class_name: str, config: Mapping[str, Any], *,
                 extra: Iterable[str] = (), allow_auto_topic_creation: bool = False) -> None:
        self.role = role
        self._class_name = class_name
        self.config: Config = resolve(kind, config, extra=extra)
        self.hooks = Hooks(config.get("hooks") or ())
        if self.config.metrics_registry is not None:
            from .metrics import ClientMetrics
            self.hooks.add(ClientMetrics(self.config.metrics_registry, client_id=self.config.client_id, kind=kind))
        self.cluster = Cluster(self.config, hooks=self.hooks, allow_auto_topic_creation=allow_auto_topic_creation)
        #: KIP-714 client metrics push (``enable_metrics_push``)
        self.telemetry: TelemetryPusher | None = None
        if self.config.enable_metrics_push:
            from .net.telemetry import TelemetryPusher
            self.telemetry = TelemetryPusher(self.cluster)
        self._tasks: TaskOwner | None = None
        self.started = False
        self.closed = False
        #: started and not closed: the one flag a per-record path reads
        self.running = False

    def trace_site(self, kind: str) -> TraceSite:
        """What a tracer (``hooks.tracer``) is told about this client."""
        return TraceSite(kind, self.config.client_id, getattr(self.config, "group_id", None), self.cluster.metadata)

    async def client_instance_id(self, timeout_ms: float) -> uuid.UUID:
        """The KIP-714 client instance id the cluster assigned, waiting up to ``timeout_ms`` for it."""
        if self.telemetry is None:
            raise errors.IllegalStateError(
                f"{self.role} has no client instance id: telemetry is disabled (enable_metrics_push=False); "
                "create the client with enable_metrics_push=True")
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or not timeout_ms >= 0:
            raise ValueError(f"client_instance_id(): timeout_ms must be a number of ms >= 0, got {timeout_ms!r}")
        self.check_open()
        raw = self.telemetry.client_instance_id
        if raw is None:
            with anyio.move_on_after(timeout_ms / 1000.0):
                raw = await self.telemetry.instance_id()
            if raw is None:
                raise errors.KafkaTimeoutError(
                    f"{self.role}: no client instance id within timeout_ms={timeout_ms}: the cluster has not "
                    "answered GetTelemetrySubscriptions yet")
        return uuid.UUID(bytes=raw)

    # ------------------------------------------------------------------ checks
    def check_open(self) -> None:
        """``IllegalStateError`` before ``start()``, ``ClientClosedError`` after ``close()``."""
        if not self.started:
            raise errors.IllegalStateError(f"{self.role} not started: use 'async with {self._class_name}(...)' or "
                                           "await start()")
        if self.closed:
            raise errors.ClientClosedError(f"{self.role} is closed")

    def check_not_closed(self) -> None:
        """``ClientClosedError`` after ``close()`` (calls that also work before ``start()``)."""
        if self.closed:
            raise errors.ClientClosedError(f"{self.role} is closed")

    # ------------------------------------------------------------------ life-cycle
    async def start(self, start_tasks: StartTasks | None = None, *, before_bootstrap: Callable[[], None] | None = None,
                    on_failure: Callable[[errors.ClientClosedError], None] | None = None,
                    on_abort: Callable[[], None] | None = None,
                    coordinators: Iterable[tuple[str, int]] = ()) -> None:
        """Bootstrap and start the background tasks: the metadata refresher, telemetry, then ``start_tasks(tg)``.

        ``before_bootstrap`` runs first (the topics the bootstrap Metadata asks for); ``on_failure`` is handed the
        ``ClientClosedError`` a background task's failure becomes (the client's next call raises it); when the start
        fails, ``on_abort`` runs and everything begun is released before the error propagates. ``coordinators``: the
        (key, key type) pairs whose coordinators the bootstrap looks up alongside its Metadata (``Cluster.start``)."""
        if self.closed:
            raise errors.ClientClosedError(f"{self.role} is closed: create a new {self._class_name}")
        if self.started:
            raise errors.IllegalStateError(f"{self.role} already started")
        self.started = True
        tasks = self._tasks = TaskOwner(f"akresil-{self.role.replace(' ', '-')} {self.config.client_id}",
                                        on_failure=on_failure, on_closed=partial(self.hooks.emit, CLIENT_CLOSED))
        task_group = await tasks.open()
        try:
            if before_bootstrap is not None:
                before_bootstrap()
            if self.telemetry is not None:
                self.telemetry.prepare()          # the series are kept from the client's first request
            await self.cluster.start(task_group, coordinators=coordinators)
            if self.telemetry is not None:
                self.telemetry.start(task_group)
            if start_tasks is not None:
                await start_tasks(task_group)
        except BaseException:
            self.closed = True
            self._tasks = None
            try:
                if on_abort is not None:
                    on_abort()
            finally:
                await self._release(tasks)
            raise
        self.running = True

    async def close(self, drain: Callable[[], Awaitable[None]] | None = None,
                    stop: Callable[[], None] | None = None) -> None:
        """Close once, from any task: ``drain()`` (the client's graceful part, bounded by the client), then always
        ``stop()``, the terminating telemetry push, the connections and the background tasks (re-raising what one
        of them raised).  A client closed before it started releases nothing and stays closed."""
        if self.closed:
            return
        self.closed = True
        self.running = False
        tasks, self._tasks = self._tasks, None
        if tasks is None:
            return
        try:
            if drain is not None:
                await drain()
        finally:     # also when the caller is cancelled: nothing is left running
            try:
                if stop is not None:
                    stop()
            finally:
                await self._release(tasks)

    async def _release(self, tasks: TaskOwner) -> None:
        try:
            if self.telemetry is not None:
                with anyio.CancelScope(shield=True):
                    await self.telemetry.close()       # the terminating push goes before the connections
        finally:
            try:
                await self.cluster.close()
            finally:
                await tasks.close()


class ClientLifecycle:
    """``async with`` and ``client_instance_id()`` for a client that has a ``_runtime`` and ``start`` / ``close``."""

    _runtime: ClientRuntime

    async def start(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:     # a subclass stays itself
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def client_instance_id(self, timeout_ms: float) -> uuid.UUID:
        """The id the cluster assigned this client for KIP-714 metrics push (the Java client's
        ``clientInstanceId(timeout)``), the one the brokers' telemetry plugin receives its pushes under.

        Waits up to ``timeout_ms`` for the first GetTelemetrySubscriptions answer (0: only the id already known).
        Raises ``IllegalStateError`` when ``enable_metrics_push`` is off (as Java does) or the client is not
        started, ``UnsupportedVersionError`` when the cluster offers no client telemetry (Apache Kafka without a
        client-telemetry plugin), ``KafkaTimeoutError`` when no answer came in time (where Java returns null),
        ``ClientClosedError`` once closed."""
        return await self._runtime.client_instance_id(timeout_ms)
