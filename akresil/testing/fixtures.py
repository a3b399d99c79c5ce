"""What the pytest plugin's fixtures hand to tests (``akresil.pytest_plugin``): ``TopicFactory`` creates unique
topics on the caller's event loop, ``KafkaFaults`` scripts a threaded ``FaultProxy`` from async code under
asyncio or trio.  Neither needs pytest: use them from any test runner."""

from __future__ import annotations

import threading
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Iterable, TypeVar

import anyio
import anyio.to_thread

from ..admin import Admin
from ..types import NewTopic, TopicPartition
from .proxy import FaultProxy

__all__ = ["KafkaFaults", "TopicFactory"]

_T = TypeVar("_T")


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


class KafkaFaults:
    """Script a running ``FaultProxy`` from async test code, under asyncio or trio.

    Each coroutine runs the proxy's thread-safe method on a worker thread.  The context managers undo their
    fault on exit, also when the block raises, so a failing test leaves the proxy healthy for its teardown.
    The proxy itself stays reachable as ``.proxy`` for assertions on its recordings.
    """

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy

    async def _call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    async def move_leader(self, topic: str, partition: int, to_node: int, *, hint: bool = True,
                          stale_metadata_for_s: float = 0.0) -> int:
        """Move leadership (epoch + 1, KIP-951 hints unless ``hint=False``); returns the new epoch."""
        return await self._call(self.proxy.move_leader, topic, partition, to_node, hint=hint,
                                stale_metadata_for_s=stale_metadata_for_s)

    async def fail_requests(self, api_key: int, error_code: int, count: int | None = 1, node: int | None = None,
                            partitions: Iterable[TopicPartition] | None = None) -> None:
        """Answer the next ``count`` such requests (per partition for Produce/Fetch) with ``error_code``."""
        await self._call(self.proxy.fail_requests, api_key, error_code, count, node, partitions)

    async def throttle(self, node: int, ms: int, client_id: str | None = None, *, count: int = 1) -> None:
        """The next ``count`` responses from ``node`` carry ``throttle_time_ms=ms`` (KIP-219)."""
        await self._call(self.proxy.throttle, node, ms, client_id, count=count)

    async def drop_connections(self, node: int | None = None) -> int:
        """Reset every client connection on ``node`` (None: all); returns how many."""
        return await self._call(self.proxy.drop_connections, node)

    async def stop_node(self, node: int) -> None:
        await self._call(self.proxy.stop_node, node)

    async def start_node(self, node: int) -> None:
        await self._call(self.proxy.start_node, node)

    async def clear(self) -> None:
        """Drop every rule and move moved partitions back (recordings stay)."""
        await self._call(self.proxy.clear)

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
        await self._call(self.proxy.add_latency, node, ms, api_key)
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await self._call(self.proxy.remove_latency, node, ms, api_key)
