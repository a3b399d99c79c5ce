"""A share consumer's start-up, request by request (issue 35 item 5): the group's FindCoordinator goes on the bootstrap
connection alongside the first Metadata, and the membership starts before the leaders' connections are opened, so
the first heartbeat (which the first fetch waits for) is not queued behind their set-up round trips."""

from __future__ import annotations

import random
from typing import Any

import anyio
import anyio.abc
import pytest

from akresil import ShareConsumer
from akresil.client_runtime import ClientRuntime
from akresil.config import resolve
from akresil.net import cluster as cluster_module
from akresil.net.cluster import Cluster
from akresil.net.coordinator import GROUP, TRANSACTION
from akresil.protocol.api import ApiKey

BOOTSTRAP = ("127.0.0.1", 9092)
BROKER = ("h1", 1)


class Wire:
    """What the fake connections carried, in order: (address, API key); the FindCoordinator answer's error code."""

    def __init__(self, find_error: int = 0) -> None:
        self.carried: list[tuple[tuple[str, int], ApiKey]] = []
        self.opened: list[tuple[str, int]] = []
        self.find_error = find_error


def fake_connection(wire: Wire) -> type:
    class FakeConnection:
        def __init__(self, address: tuple[str, int]) -> None:
            self.address, self.closed = address, False
            self.versions = {ApiKey.METADATA: 12, ApiKey.FIND_COORDINATOR: 4}
            self.api_ranges = {api: (0, v) for api, v in self.versions.items()}
            self.finalized_features: dict[str, int] = {}
            self.finalized_features_epoch = -1
            self.stepped_api_versions: int | None = None

        @classmethod
        async def connect(cls, host: str, port: int, **_: Any) -> "FakeConnection":
            wire.opened.append((host, port))
            await anyio.sleep(0)
            return cls((host, port))

        def reauthentication_due(self, now: float) -> bool:
            return False

        async def request(self, api_key: ApiKey, payload: Any, *, version: int, timeout_ms: int | None) -> Any:
            wire.carried.append((self.address, api_key))
            await anyio.sleep(0)
            if api_key is ApiKey.METADATA:
                return {"brokers": [{"node_id": 1, "host": BROKER[0], "port": BROKER[1]}], "topics": [],
                        "controller_id": 1, "cluster_id": "c"}
            assert api_key is ApiKey.FIND_COORDINATOR
            code = wire.find_error
            return {"coordinators": [{"key": key, "node_id": -1 if code else 1, "host": BROKER[0], "port": BROKER[1],
                                      "error_code": code, "error_message": None} for key in payload["coordinator_keys"]]}

        async def close(self, error: BaseException | None = None) -> None:
            self.closed = True

    return FakeConnection


def a_cluster(monkeypatch: pytest.MonkeyPatch, wire: Wire) -> Cluster:
    monkeypatch.setattr(cluster_module, "Connection", fake_connection(wire))
    config = resolve("consumer", {"bootstrap_servers": f"{BOOTSTRAP[0]}:{BOOTSTRAP[1]}", "retry_backoff_ms": 1,
                                  "retry_backoff_max_ms": 2})
    return Cluster(config, rng=random.Random(0))


def test_the_groups_coordinator_is_asked_on_the_bootstrap_connection_with_the_first_metadata(
        monkeypatch: pytest.MonkeyPatch) -> None:
    wire = Wire()
    cluster = a_cluster(monkeypatch, wire)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            await cluster.start(tg, coordinators=(("g", GROUP),))
            await anyio.wait_all_tasks_blocked()
            assert cluster.coordinators.cached("g") == 1      # a member's first find() needs no round trip
            await cluster.close()
            tg.cancel_scope.cancel()

    anyio.run(main)
    assert wire.opened == [BOOTSTRAP]                         # no connection of its own for the lookup
    assert wire.carried == [(BOOTSTRAP, ApiKey.METADATA), (BOOTSTRAP, ApiKey.FIND_COORDINATOR)]


def test_a_failed_early_lookup_leaves_the_member_to_ask_again(monkeypatch: pytest.MonkeyPatch) -> None:
    wire = Wire(find_error=15)                                # COORDINATOR_NOT_AVAILABLE (a cluster still starting)
    cluster = a_cluster(monkeypatch, wire)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            await cluster.start(tg, coordinators=(("g", GROUP),))      # the start does not fail for it
            await anyio.wait_all_tasks_blocked()
            assert cluster.coordinators.cached("g") is None
            wire.find_error = 0
            assert await cluster.coordinators.find("g") == 1  # asked again, as without the early lookup
            await cluster.close()
            tg.cancel_scope.cancel()

    anyio.run(main)
    assert [api for _, api in wire.carried].count(ApiKey.FIND_COORDINATOR) == 2


def test_the_share_consumer_joins_before_it_connects_to_the_leaders_and_looks_its_coordinator_up_early(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = ShareConsumer("t", bootstrap_servers="127.0.0.1:9", group_id="g")
    order: list[str] = []

    async def started(name: str, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        order.append(name)
        task_status.started()

    async def runtime_start(_runtime: ClientRuntime, start_tasks: Any, **kw: Any) -> None:
        order.append(f"bootstrap {kw['coordinators']}")
        async with anyio.create_task_group() as tg:
            await start_tasks(tg)
            tg.cancel_scope.cancel()

    c._group.run = lambda **kw: started("membership", **kw)            # type: ignore[method-assign]
    c._fetcher.run = lambda **kw: started("fetcher", **kw)             # type: ignore[method-assign]
    c._fetcher.connect_leaders = lambda topics: order.append("leader connections")  # type: ignore[method-assign]
    monkeypatch.setattr(ClientRuntime, "start", runtime_start)        # the bootstrap itself is tested above
    anyio.run(c.start)
    assert order == ["bootstrap (('g', 0),)", "membership", "fetcher", "leader connections"]


@pytest.mark.parametrize("group_id, subscribe", [("g", True), ("g", False), (None, False)])
def test_a_consumer_with_a_group_looks_its_coordinator_up_with_the_bootstrap_metadata(
        monkeypatch: pytest.MonkeyPatch, group_id: str | None, subscribe: bool) -> None:
    """The join, or an assigned consumer's first OffsetFetch, needs the group's coordinator: asked alongside the
    bootstrap Metadata (as the share consumer does), not one round trip after it."""
    from akresil import Consumer, TopicPartition
    c: Consumer[bytes, bytes] = Consumer(*(["t"] if subscribe else []), bootstrap_servers="127.0.0.1:9",
                                         group_id=group_id)
    if not subscribe:
        c.assign([TopicPartition("t", 0)])
    seen: list[tuple[str, ...]] = []

    async def runtime_start(_runtime: ClientRuntime, start_tasks: Any, **kw: Any) -> None:
        seen.append(tuple(kw.get("coordinators", ())))

    monkeypatch.setattr(ClientRuntime, "start", runtime_start)
    anyio.run(c.start)
    assert seen == [() if group_id is None else ((group_id, GROUP),)]


@pytest.mark.parametrize("transactional_id", ["tx", None])
def test_a_transactional_producer_looks_its_coordinator_up_with_the_bootstrap_metadata(
        monkeypatch: pytest.MonkeyPatch, transactional_id: str | None) -> None:
    """``init_transactions()`` starts with the transaction coordinator: asked alongside the bootstrap Metadata."""
    from akresil import Producer
    p = Producer(bootstrap_servers="127.0.0.1:9", transactional_id=transactional_id)
    seen: list[tuple[tuple[str, int], ...]] = []

    async def runtime_start(_runtime: ClientRuntime, start_tasks: Any, **kw: Any) -> None:
        seen.append(tuple(kw.get("coordinators", ())))

    monkeypatch.setattr(ClientRuntime, "start", runtime_start)
    anyio.run(p.start)
    assert seen == [() if transactional_id is None else ((transactional_id, TRANSACTION),)]


def test_a_transaction_coordinator_looked_up_early_is_cached_under_its_key_type(
        monkeypatch: pytest.MonkeyPatch) -> None:
    wire = Wire()
    cluster = a_cluster(monkeypatch, wire)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            await cluster.start(tg, coordinators=(("tx", TRANSACTION),))
            await anyio.wait_all_tasks_blocked()
            assert cluster.coordinators.cached("tx", TRANSACTION) == 1
            assert cluster.coordinators.cached("tx", GROUP) is None       # a group of that name is another key
            await cluster.close()
            tg.cancel_scope.cancel()

    anyio.run(main)
    assert wire.carried == [(BOOTSTRAP, ApiKey.METADATA), (BOOTSTRAP, ApiKey.FIND_COORDINATOR)]


def test_bootstrap_addresses_given_as_ip_literals_are_not_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check that a bootstrap name exists asked the resolver (a worker thread) for every address, an IP literal
    too: a thread hop per address before the first connection (three on librdkafka's mock)."""
    asked: list[str] = []

    async def getaddrinfo(host: str, port: int, **_: Any) -> list[Any]:
        asked.append(host)
        return []

    monkeypatch.setattr(anyio, "getaddrinfo", getaddrinfo)
    config = resolve("consumer", {"bootstrap_servers": "127.0.0.1:9092,[::1]:9093,[fe80::1%eth0]:9094,kafka.example:9095"})
    anyio.run(Cluster(config)._check_bootstrap_resolves)
    assert asked == ["kafka.example"]
