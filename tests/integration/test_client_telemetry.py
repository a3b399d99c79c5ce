"""KIP-714 on the wire against a scripted broker that offers the telemetry APIs: what a client asks and pushes, how
it follows an UNKNOWN_SUBSCRIPTION_ID, that a refused push loses nothing, the codec it picks, the terminating
push on close, and ``enable_metrics_push=False``.  (tests/apache/test_client_telemetry.py runs it on Apache
Kafka with a receiver plugin.)"""

from __future__ import annotations

import asyncio

import uuid
from typing import Any

import anyio
import pytest

metrics_pb2 = pytest.importorskip("opentelemetry.proto.metrics.v1.metrics_pb2")

from akresil import Admin, errors
from akresil.core.telemetry import ZERO_UUID
from akresil.protocol.api import ApiKey
from akresil.protocol.records import codec_available
from tests.harness.scripted_broker import ScriptedCluster

INSTANCE = bytes(range(16, 32))
OFFER_TELEMETRY: dict[int, tuple[int, int] | None] = {ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: (0, 0),
                                                      ApiKey.PUSH_TELEMETRY: (0, 0)}


def subscription(subscription_id: int) -> dict[str, Any]:
    return {"error_code": 0, "client_instance_id": INSTANCE, "subscription_id": subscription_id,
            "accepted_compression_types": [3, 1], "push_interval_ms": 100, "telemetry_max_bytes": 1 << 20,
            "delta_temporality": True, "requested_metrics": ["akresil.request."]}


def decoded(push: dict[str, Any]) -> Any:
    from aiokafka import codec
    data = push["metrics"]
    data = {0: bytes, 1: codec.gzip_decode, 3: codec.lz4_decode}[push["compression_type"]](data)
    return metrics_pb2.MetricsData.FromString(bytes(data))


def request_counts(push: dict[str, Any]) -> dict[str, int]:
    """The request-duration observations of one push, by API."""
    counts: dict[str, int] = {}
    for rm in decoded(push).resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                assert metric.name.startswith("akresil.request."), metric.name
                for point in metric.histogram.data_points:
                    api = {kv.key: kv.value.string_value for kv in point.attributes}["api"]
                    counts[api] = counts.get(api, 0) + point.count
    return counts


async def test_subscribe_push_follow_a_new_subscription_and_terminate_on_close() -> None:
    pushes: list[dict[str, Any]] = []

    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        gets = cluster.calls(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
        if key == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS:
            return subscription(len(gets))           # 1, then 2 after the broker forgot the first
        assert key == ApiKey.PUSH_TELEMETRY
        pushes.append(body)
        if body["subscription_id"] == 1:
            return {"error_code": errors.UnknownSubscriptionIdError.errno}
        return {"error_code": 0}

    async with ScriptedCluster(handler, versions=OFFER_TELEMETRY) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, client_id="telemetry-admin") as admin:
            with anyio.fail_after(30):
                while sum(p["subscription_id"] == 2 for p in pushes) < 2:
                    await anyio.sleep(0.02)
            assert admin is not None
        gets = cluster.calls(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)

    # the first request asks for an instance id; the refused push makes the client ask again at once, with it
    assert [g.body["client_instance_id"] for g in gets] == [ZERO_UUID, INSTANCE]
    assert [p["subscription_id"] for p in pushes][:2] == [1, 2]
    assert all(p["client_instance_id"] == INSTANCE for p in pushes)
    # the broker's preferred codec among those this process has; the last push (on close) is the terminating one
    assert {p["compression_type"] for p in pushes} == {3 if codec_available(3) else 1}
    assert [p["terminating"] for p in pushes] == [False] * (len(pushes) - 1) + [True]
    # deltas from the last accepted push: the refused first push's observations arrive in the next one
    accepted = [request_counts(p) for p in pushes if p["subscription_id"] == 2]
    assert sum(c.get("Metadata", 0) for c in accepted) == len(cluster.calls(ApiKey.METADATA))
    assert sum(c.get("GetTelemetrySubscriptions", 0) for c in accepted) == 2


async def test_a_push_under_way_at_close_is_answered_before_the_terminating_one_so_no_delta_goes_twice() -> None:
    """close() while a periodic push is at the broker: the client waits for its answer (bounded) instead of giving it
    up, so the terminating push carries only what happened after it; given up, its deltas went again (seen on Apache
    Kafka: a producer's five records counted ten times)."""
    pushes: list[dict[str, Any]] = []
    held = asyncio.Event()

    async def hold_then_accept() -> dict[str, Any]:
        held.set()
        await asyncio.sleep(0.3)
        return {"error_code": 0}

    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> Any:
        if key == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS:
            return subscription(2)
        assert key == ApiKey.PUSH_TELEMETRY
        pushes.append(body)
        return hold_then_accept() if len(pushes) == 1 else {"error_code": 0}

    async with ScriptedCluster(handler, versions=OFFER_TELEMETRY) as cluster:
        admin = Admin(bootstrap_servers=cluster.bootstrap_servers, client_id="telemetry-close")
        async with admin:
            await admin.describe_cluster()
            with anyio.fail_after(30):
                await held.wait()                  # the first periodic push is at the broker, its answer held
        metadata_calls = len(cluster.calls(ApiKey.METADATA))
    assert [p["terminating"] for p in pushes] == [False, True]
    assert sum(request_counts(p).get("Metadata", 0) for p in pushes) == metadata_calls


async def test_enable_metrics_push_false_asks_for_nothing() -> None:
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError(f"unexpected request {ApiKey(key).name}")

    async with ScriptedCluster(handler, versions=OFFER_TELEMETRY) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, enable_metrics_push=False) as admin:
            await admin.describe_cluster()        # a Metadata round trip: the client is up and talking
    assert [r.api_key for r in cluster.requests] == [ApiKey.METADATA] * len(cluster.requests)


async def test_client_instance_id_waits_for_the_id_the_broker_assigned() -> None:
    """``client_instance_id(timeout_ms)`` (Java's ``clientInstanceId(timeout)``) of each client kind: called at
    once after ``start()`` it waits for the first GetTelemetrySubscriptions answer and returns the id it assigned,
    also when that answer subscribes the client to nothing; not started it is an ``IllegalStateError``, closed a
    ``ClientClosedError``."""
    from akresil import Consumer, Producer, ShareConsumer

    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if key == ApiKey.FIND_COORDINATOR:      # the share consumer looks its group's coordinator up at start
            return {"coordinators": [{"key": k, "node_id": 1, "host": "127.0.0.1", "port": cluster.ports[1],
                                      "error_code": 0} for k in body["coordinator_keys"]]}
        assert key == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, f"unexpected request {ApiKey(key).name}"
        return {**subscription(1), "requested_metrics": []}       # an id, and no metrics wanted

    async with ScriptedCluster(handler, versions=OFFER_TELEMETRY) as cluster:
        boot = cluster.bootstrap_servers
        clients = [Admin(bootstrap_servers=boot), Consumer(bootstrap_servers=boot),
                   Producer(bootstrap_servers=boot, enable_idempotence=False, acks=1),
                   ShareConsumer(bootstrap_servers=boot, group_id="instance-id")]
        for client in clients:
            with pytest.raises(errors.IllegalStateError, match="not started"):
                await client.client_instance_id(0)
            async with client:
                assert await client.client_instance_id(30_000) == uuid.UUID(bytes=INSTANCE)
                assert await client.client_instance_id(timeout_ms=0) == uuid.UUID(bytes=INSTANCE)   # known now
            with pytest.raises(errors.ClientClosedError):
                await client.client_instance_id(0)
    assert len(cluster.calls(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)) == len(clients)


async def test_client_instance_id_without_metrics_push_is_an_illegal_state() -> None:
    """As Java's ``IllegalStateException``: no telemetry, no id; the message names the option."""
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError(f"unexpected request {ApiKey(key).name}")

    async with ScriptedCluster(handler, versions=OFFER_TELEMETRY) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers, enable_metrics_push=False) as admin:
            with pytest.raises(errors.IllegalStateError, match="enable_metrics_push=False"):
                await admin.client_instance_id(30_000)
            with pytest.raises(ValueError, match="timeout_ms"):
                await Admin(bootstrap_servers=cluster.bootstrap_servers).client_instance_id(-1)


async def test_client_instance_id_on_a_cluster_without_telemetry_says_so() -> None:
    """A broker that does not offer the KIP-714 APIs (Apache Kafka without a client-telemetry plugin) assigns no
    id: the call raises ``UnsupportedVersionError`` once the client found that out, not a timeout."""
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError(f"unexpected request {ApiKey(key).name}")

    async with ScriptedCluster(handler) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            with pytest.raises(errors.UnsupportedVersionError, match="no client telemetry"):
                await admin.client_instance_id(60_000)


async def test_client_instance_id_times_out_while_the_cluster_has_not_answered() -> None:
    """No answer yet (here: the broker drops the connection on GetTelemetrySubscriptions, so the client asks
    again only after the push interval): ``KafkaTimeoutError`` (where Java returns null)."""
    def handler(node: int, key: int, version: int, body: dict[str, Any]) -> dict[str, Any] | None:
        assert key == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, f"unexpected request {ApiKey(key).name}"
        return None

    async with ScriptedCluster(handler, versions=OFFER_TELEMETRY) as cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            with pytest.raises(errors.KafkaTimeoutError, match="timeout_ms=50"):
                await admin.client_instance_id(50)
