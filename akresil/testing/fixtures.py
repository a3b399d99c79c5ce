"""What the pytest plugin's fixtures hand to tests (``akresil.pytest_plugin``): ``TopicFactory`` creates unique
topics on the caller's event loop, ``FaultProxyControl`` (``KafkaFaults``) is the ``BrokerControl`` of a
``FaultProxy``, scripting it from async code under asyncio or trio.  Neither needs pytest: use them from any test
runner."""

from __future__ import annotations

import asyncio
import threading
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Iterable, Mapping, Protocol

import anyio
import anyio.to_thread

from ..admin import Admin
from ..types import NewTopic, TopicPartition
from .control import FEATURES, PROXY, Capability, ControlDefaults, create_topic_through
from .proxy import FaultProxy

__all__ = ["FaultProxyControl", "KafkaFaults", "MemberControl", "TopicFactory"]


class TopicFactory:
    """Creates uniquely named topics through ``Admin`` on the caller's event loop; remembers them for clean-up."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.created: list[str] = []

    async def __call__(self, partitions: int = 1, *, prefix: str = "test",
                       configs: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        async with Admin(bootstrap_servers=self.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(name, num_partitions=partitions, configs=configs)])
        self.created.append(name)
        return name

    def delete_created(self) -> None:
        """Delete every topic this factory created.  Runs on a thread of its own with a fresh event loop:
        fixture teardown may run where a test framework owns (but is not running) the thread's loop."""
        if not self.created:
            return
        names, self.created = list(self.created), []
        failure: list[BaseException] = []

        async def delete() -> None:
            async with Admin(bootstrap_servers=self.bootstrap_servers) as admin:
                await admin.delete_topics(names)

        def main() -> None:
            try:
                anyio.run(delete)
            except BaseException as exc:   # reported on the test's thread below
                failure.append(exc)

        thread = threading.Thread(target=main, name="kafka-topic-cleanup", daemon=True)
        thread.start()
        thread.join()
        if failure:
            raise RuntimeError(f"kafka_topic_factory: deleting {names} failed: {failure[0]!r}") from failure[0]


class FaultProxyControl(ControlDefaults):
    """The ``BrokerControl`` of a running ``FaultProxy``, from async code under asyncio or trio; with ``members``,
    what a chaos script's ``kill_consumer`` kills.

    The proxy may run on this event loop (``async with FaultProxy(...)``) or on a thread of its own (``start()``,
    as the pytest plugin's ``kafka_proxy``): steps that do I/O on the proxy's loop run there, the rest only change
    its thread-safe script state.  The context managers undo their fault on exit, also when the block raises, so
    a failing test leaves the proxy healthy for its teardown.  ``capabilities`` are the proxy's controls and the
    ``upstream`` broker's features (what the broker behind it implements: the proxy only forwards).  The proxy
    itself stays reachable as ``.proxy`` for assertions on its recordings.
    """

    def __init__(self, proxy: FaultProxy, members: MemberControl | None = None, *,
                 upstream: Iterable[Capability] = ()) -> None:
        self.proxy = proxy
        self.members = members
        self.capabilities: frozenset[Capability] = PROXY | (frozenset(upstream) & FEATURES)

    def __repr__(self) -> str:
        return f"<FaultProxyControl nodes={list(self.proxy.node_ids)} -> {self.proxy.upstream_host}:" \
               f"{self.proxy.upstream_port}>"

    @property
    def bootstrap_servers(self) -> str:
        return self.proxy.bootstrap_servers

    @property
    def node_ids(self) -> tuple[int, ...]:
        return self.proxy.node_ids

    async def _on_proxy_loop(self, step: str, *args: Any) -> Any:
        """``proxy.a<step>(*args)`` on the proxy's loop: awaited here when that is this loop, handed to it from
        asyncio (no thread), or ``proxy.<step>`` (which waits for the loop) from a worker thread under trio."""
        loop = self.proxy.loop
        if loop is None:
            raise RuntimeError(f"{step}: the proxy is not running")
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:   # trio
            here = None
        if here is loop:
            return await getattr(self.proxy, f"a{step}")(*args)
        if here is not None:
            coro = getattr(self.proxy, f"a{step}")(*args)
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))
        return await anyio.to_thread.run_sync(lambda: getattr(self.proxy, step)(*args))

    # ------------------------------------------------------------------ BrokerControl
    async def create_topic(self, name: str | None = None, *, partitions: int = 1, replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None) -> str:
        """CreateTopics through the proxy (the broker behind it creates the topic); partition p is then led by
        ``node_ids[p % N]``."""
        return await create_topic_through(self.bootstrap_servers, name, partitions=partitions,
                                          replication_factor=replication_factor, configs=configs)

    async def leader(self, topic: str, partition: int) -> tuple[int, int]:
        return self.proxy.leader(topic, partition)

    async def move_leader(self, topic: str, partition: int, to_node: int, *, hint: bool = True,
                          stale_metadata_for_s: float = 0.0) -> int:
        """Move leadership (epoch + 1, KIP-951 hints unless ``hint=False``); returns the new epoch.
        ``stale_metadata_for_s``: Metadata keeps naming the old leader for that long."""
        return self.proxy.move_leader(topic, partition, to_node, hint=hint, stale_metadata_for_s=stale_metadata_for_s)

    async def stop_node(self, node: int) -> None:
        """The node's connections are aborted and its port resets new ones until ``start_node``."""
        await self._on_proxy_loop("stop_node", node)

    async def kill_node(self, node: int) -> None:
        """As ``stop_node``: a proxy node has no controlled shutdown to skip."""
        await self._on_proxy_loop("stop_node", node)

    async def start_node(self, node: int) -> None:
        await self._on_proxy_loop("start_node", node)

    async def throttle(self, node: int, ms: int, client_id: str | None = None, *, count: int = 1) -> None:
        """The next ``count`` responses from ``node`` carry ``throttle_time_ms=ms`` (KIP-219)."""
        self.proxy.throttle(node, ms, client_id, count=count)

    # ------------------------------------------------------------------ what only the proxy does
    async def fail_requests(self, api_key: int, error_code: int, count: int | None = 1, node: int | None = None,
                            partitions: Iterable[TopicPartition] | None = None) -> None:
        """Answer the next ``count`` such requests (per partition for Produce/Fetch) with ``error_code``."""
        self.proxy.fail_requests(api_key, error_code, count, node, partitions)

    async def drop_connections(self, node: int | None = None) -> int:
        """Reset every client connection on ``node`` (None: all); returns how many."""
        return int(await self._on_proxy_loop("drop_connections", node))

    async def add_latency(self, node: int | None, ms: float, api_key: int | None = None) -> None:
        self.proxy.add_latency(node, ms, api_key)

    async def remove_latency(self, node: int | None, ms: float | None = None, api_key: int | None = None) -> None:
        self.proxy.remove_latency(node, ms, api_key)

    async def clear(self) -> None:
        """Drop every rule and move moved partitions back (recordings stay)."""
        self.proxy.clear()

    async def kill_consumer(self, member: int) -> None:
        """A chaos script's member kill (``members`` given at construction)."""
        if self.members is None:
            raise RuntimeError("kill_consumer: this control was given no group members to kill")
        await self.members.kill(member)

    @asynccontextmanager
    async def node_down(self, node: int) -> AsyncIterator[None]:
        """``node`` refuses connections inside the block and serves again after it."""
        await self.stop_node(node)
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await self.start_node(node)

    @asynccontextmanager
    async def latency(self, ms: float, node: int | None = None, api_key: int | None = None) -> AsyncIterator[None]:
        """Responses (from ``node``, of ``api_key``; None: all) are delayed by ``ms`` inside the block."""
        await self.add_latency(node, ms, api_key)
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await self.remove_latency(node, ms, api_key)


class MemberControl(Protocol):
    """Kills a consumer-group member without leaving and starts its replacement (the chaos soak's members)."""

    async def kill(self, member: int) -> None: ...


#: the name the pytest plugin's ``kafka_faults`` fixture has always handed out
KafkaFaults = FaultProxyControl
