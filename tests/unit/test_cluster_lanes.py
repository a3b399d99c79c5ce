"""Cluster picks a broker's connection from the request's API key: callers name only the broker.

A group member's traffic (JoinGroup, SyncGroup, heartbeats, offsets) goes on a connection of its own to the
coordinator's broker, so it never waits behind a long-poll Fetch on the shared one; every event and metric names
the broker by its id (once the coordinator's connection was labelled node 2147483536 on some series)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from akresil.config import resolve
from akresil.core.events import NODE_STATE, REQUEST_SENT, Hooks, RecordingHook
from akresil.metrics import ClientMetrics
from akresil.net import cluster as cluster_module
from akresil.net.cluster import Cluster, Lane, lane_of
from akresil.protocol.api import ApiKey

GROUP_APIS = (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT,
              ApiKey.OFFSET_FETCH, ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_HEARTBEAT)
SHARED_APIS = (ApiKey.FETCH, ApiKey.PRODUCE, ApiKey.METADATA, ApiKey.LIST_OFFSETS, ApiKey.FIND_COORDINATOR,
               ApiKey.DESCRIBE_GROUPS, ApiKey.TXN_OFFSET_COMMIT, ApiKey.SHARE_FETCH)


class FakeConnection:
    """What Cluster needs of a connection; each one records the requests it carried."""

    opened: list["FakeConnection"] = []

    def __init__(self, host: str, port: int, node_id: int) -> None:
        self.address, self.node_id = (host, port), node_id
        self.closed = False
        self.versions = {api: 9 for api in ApiKey}
        self.api_ranges = {api: (0, 9) for api in ApiKey}
        self.finalized_features: dict[str, int] = {}
        self.finalized_features_epoch = -1
        self.stepped_api_versions: int | None = None
        self.carried: list[ApiKey] = []

    @classmethod
    async def connect(cls, host: str, port: int, *, node_id: int, **_: Any) -> "FakeConnection":
        conn = cls(host, port, node_id)
        cls.opened.append(conn)
        return conn

    def reauthentication_due(self, now: float) -> bool:
        return False

    async def request(self, api_key: ApiKey, payload: Any, *, version: int, timeout_ms: int | None) -> dict[str, Any]:
        self.carried.append(api_key)
        return {}

    async def close(self, error: BaseException | None = None) -> None:
        self.closed = True


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[FakeConnection]:
    FakeConnection.opened = []
    monkeypatch.setattr(cluster_module, "Connection", FakeConnection)
    return FakeConnection.opened


def a_cluster(hooks: Hooks) -> Cluster:
    cluster = Cluster(resolve("consumer", {"bootstrap_servers": "127.0.0.1:9092"}), hooks=hooks)
    cluster.metadata.update_from_metadata({"brokers": [{"node_id": 1, "host": "h1", "port": 1}], "topics": [],
                                           "controller_id": 1}, 0.0)
    return cluster


def test_group_apis_go_on_the_group_lane_the_rest_on_the_shared_one() -> None:
    assert {lane_of(api) for api in GROUP_APIS} == {Lane.GROUP}
    assert {lane_of(api) for api in SHARED_APIS} == {Lane.SHARED}


def test_one_broker_two_connections_and_one_node_label(connections: list[FakeConnection]) -> None:
    registry = CollectorRegistry()
    recorded = RecordingHook()
    hooks = Hooks([recorded, ClientMetrics(registry, client_id="c", kind="consumer")])
    cluster = a_cluster(hooks)

    async def main() -> None:
        for api in (*SHARED_APIS, *GROUP_APIS):
            await cluster.request(1, api, {})

    anyio.run(main)
    assert len(connections) == 2 and {c.address for c in connections} == {("h1", 1)}
    shared, group = connections
    assert shared.carried == list(SHARED_APIS) and group.carried == list(GROUP_APIS)
    assert {c.node_id for c in connections} == {1}
    sent = recorded.named(REQUEST_SENT)
    assert {f["node_id"] for f in sent} == {1} and {f["lane"] for f in sent} == {"shared", "group"}
    assert {(f["node_id"], f["lane"], f["state"]) for f in recorded.named(NODE_STATE)} >= {
        (1, "shared", "connected"), (1, "group", "connected")}
    # both connections count, under the one broker id
    assert registry.get_sample_value("akresil_connects_total", {"client_id": "c", "node_id": "1"}) == 2
    assert registry.get_sample_value("akresil_connections", {"client_id": "c"}) == 2
    assert registry.get_sample_value("akresil_requests_in_flight", {"client_id": "c", "node_id": "1"}) == 0
    labelled = {s.labels.get("node_id") for m in registry.collect() for s in m.samples if "node_id" in s.labels}
    assert labelled == {"1"}


def test_disconnecting_one_lane_leaves_the_other(connections: list[FakeConnection]) -> None:
    cluster = a_cluster(Hooks())

    async def main() -> None:
        await cluster.request(1, ApiKey.FETCH, {})
        await cluster.request(1, ApiKey.JOIN_GROUP, {})
        cluster.disconnect(1, lane=lane_of(ApiKey.JOIN_GROUP))
        assert cluster.connected(1) is connections[0]
        assert cluster.connected(1, Lane.GROUP) is None
        await cluster.request(1, ApiKey.LEAVE_GROUP, {})    # a new group connection

    anyio.run(main)
    assert [c.carried for c in connections] == [[ApiKey.FETCH], [ApiKey.JOIN_GROUP], [ApiKey.LEAVE_GROUP]]


def test_no_connection_opens_after_a_refused_login_ends_its_backoff(connections: list[FakeConnection]) -> None:
    """A connection waiting out its reconnect backoff when another one's login is refused must not connect."""
    from akresil import errors

    cluster = a_cluster(Hooks())
    cluster.node(1, Lane.GROUP).on_disconnected(cluster.clock(), failed=True)   # in reconnect backoff
    raised: list[BaseException] = []

    async def reconnect() -> None:
        try:
            await cluster.connection(1, Lane.GROUP)
        except errors.AuthenticationError as exc:
            raised.append(exc)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reconnect)
            await anyio.sleep(0)          # the reconnect is now sleeping out its backoff
            cluster._set_fatal(errors.AuthenticationError("refused on node 2"))

    anyio.run(main)
    assert connections == [] and len(raised) == 1


async def test_cluster_wide_requests_use_an_open_bootstrap_connection_while_no_broker_is_connected(
        connections: list[FakeConnection]) -> None:
    """Issue 35 item 5: after the first Metadata (on a bootstrap server's connection, which stays open) the share
    consumer's FindCoordinator went to a broker from the metadata and waited for its connection to open. The open
    bootstrap connection is a candidate as well; a broker equally loaded still comes first, and a bootstrap server
    without a connection is not tried while brokers are known."""
    cluster = a_cluster(Hooks())
    cluster.metadata.update_from_metadata({"brokers": [{"node_id": n, "host": f"h{n}", "port": n} for n in (1, 2, 3)],
                                           "topics": [], "controller_id": 1}, 0.0)
    picks = {cluster.least_loaded_node() for _ in range(50)}
    assert picks == {1, 2, 3}                        # nothing connected: any broker, never the bootstrap address
    await cluster.connection(-1)
    assert {cluster.least_loaded_node() for _ in range(50)} == {-1}
    await cluster.request_any(ApiKey.FIND_COORDINATOR, {})
    assert [c.node_id for c in connections] == [-1] and connections[0].carried == [ApiKey.FIND_COORDINATOR]
    await cluster.connection(2)
    assert {cluster.least_loaded_node() for _ in range(50)} == {2}
