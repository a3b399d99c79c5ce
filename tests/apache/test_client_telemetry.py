"""KIP-714 client metrics push on Apache Kafka: a broker with a client-telemetry plugin (``TelemetrySink``, compiled
against the tier's Kafka jars and registered in ``metric.reporters``) and a client-metrics subscription receives
the subscribed akresil series from a producer and a consumer, OTLP-encoded and decoded by Kafka's own classes.

The broker is a one-node cluster of its own: the plugin is broker configuration, and the shared tier cluster stays
as every other test expects it (no broker there advertises the telemetry APIs).
"""

from __future__ import annotations

from typing import Any, Iterator

import anyio
import pytest

from akresil import Consumer, Producer, __version__, errors
from akresil.admin import topic_id_text
from akresil.admin_types import ConfigResource
from akresil.core.series import LATENCY_BUCKETS
from akresil.testing import KafkaCluster
from akresil.testing.telemetry_sink import TelemetrySink, metrics_of

SUBSCRIBED = ("akresil.producer.", "akresil.consumer.", "akresil.request.duration", "akresil.connections")


@pytest.fixture(scope="module")
def sink(tmp_path_factory: pytest.TempPathFactory) -> TelemetrySink:
    return TelemetrySink(tmp_path_factory.mktemp("telemetry") / "pushes.jsonl")


@pytest.fixture(scope="module")
def telemetry_cluster(sink: TelemetrySink) -> Iterator[KafkaCluster]:
    with KafkaCluster(1, classpath=[sink.classes()], broker_config=sink.broker_config(), heap_mb=256) as cluster:
        yield cluster


def points(pushes: list[dict[str, Any]], name: str, **attributes: str) -> list[dict[str, Any]]:
    """Every point of metric ``name`` whose attributes include ``attributes``, over ``pushes``."""
    return [p for push in pushes for m in metrics_of(push) if m["name"] == name for p in m["points"]
            if all(p["attributes"].get(k) == v for k, v in attributes.items())]


def kinds(pushes: list[dict[str, Any]], name: str) -> set[tuple[str, Any, Any]]:
    return {(m["kind"], m.get("temporality"), m.get("monotonic")) for push in pushes for m in metrics_of(push)
            if m["name"] == name}


async def test_a_subscribed_producer_and_consumer_push_their_series_until_they_close(
        telemetry_cluster: KafkaCluster, sink: TelemetrySink) -> None:
    bootstrap = telemetry_cluster.bootstrap_servers
    topic, group = "telemetry-orders", "telemetry-billing"
    async with telemetry_cluster.admin() as admin:
        (await admin.incremental_alter_configs({ConfigResource("client_metrics", "akresil-tier"): {
            "metrics": ",".join(SUBSCRIBED), "interval.ms": "500", "match": "client_id=telemetry-.*"}})
         ).raise_on_error()
    await telemetry_cluster.create_topic(topic, partitions=1, replication_factor=1)

    def of(client_id: str) -> list[dict[str, Any]]:
        return [push for push in sink.pushes() if push["client_id"] == client_id]

    async def until(condition: Any) -> None:
        with anyio.fail_after(60):
            while not condition():
                await anyio.sleep(0.1)

    async with Producer(bootstrap_servers=bootstrap, client_id="telemetry-producer", linger_ms=0) as producer, \
            Producer(bootstrap_servers=bootstrap, client_id="telemetry-off", linger_ms=0,
                     enable_metrics_push=False) as silent:
        for i in range(5):
            await producer.send(topic, b"order-%d" % i)
        await silent.send_many(topic, [(None, b"quiet-1"), (None, b"quiet-2")])
        # the five acknowledged records reach the broker in the producer's pushes (as deltas that add up)
        await until(lambda: sum(p["value"] for p in points(of("telemetry-producer"), "akresil.producer.records_sent",
                                                            topic=topic)) == 5)
    async with Consumer(topic, bootstrap_servers=bootstrap, client_id="telemetry-consumer", group_id=group,
                        auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        got = 0
        while got < 7:
            got += sum(len(records) for records in (await consumer.getmany(timeout_ms=1_000)).values())
        await until(lambda: sum(p["value"] for p in points(of("telemetry-consumer"),
                                                            "akresil.consumer.records_consumed", topic=topic)) == 7)
        assigned = points(of("telemetry-consumer"), "akresil.consumer.assigned_partitions")

    pushes = sink.pushes()
    producer_pushes, consumer_pushes = of("telemetry-producer"), of("telemetry-consumer")

    # each pushing client: one instance id the broker gave it, pushes until close, the last one terminating
    for own in (producer_pushes, consumer_pushes):
        assert len({p["client_instance_id"] for p in own}) == 1
        assert [p["terminating"] for p in own] == [False] * (len(own) - 1) + [True]
    assert producer_pushes[0]["client_instance_id"] != consumer_pushes[0]["client_instance_id"]
    # enable_metrics_push=False pushes nothing; the admin does not match the subscription, so gets nothing to push
    assert {p["client_id"] for p in pushes} == {"telemetry-producer", "telemetry-consumer"}

    # the subscription's prefixes, and only they, with the series table's kinds, units and buckets
    names = {m["name"] for push in pushes for m in metrics_of(push)}
    assert names and all(name.startswith(SUBSCRIBED) for name in names), names
    assert {"akresil.producer.records_sent", "akresil.consumer.records_consumed", "akresil.request.duration",
            "akresil.connections"} <= names
    assert kinds(pushes, "akresil.producer.records_sent") == {("sum", "AGGREGATION_TEMPORALITY_DELTA", True)}
    assert kinds(pushes, "akresil.request.duration") == {("histogram", "AGGREGATION_TEMPORALITY_DELTA", None)}
    assert kinds(pushes, "akresil.connections") == {("gauge", None, None)}

    # values: deltas add up to what happened (each push counted once), histograms are consistent
    assert sum(p["value"] for p in points(producer_pushes, "akresil.producer.records_sent", topic=topic)) == 5
    assert sum(p["value"] for p in points(consumer_pushes, "akresil.consumer.records_consumed", topic=topic)) == 7
    produce = points(producer_pushes, "akresil.request.duration", api="Produce")
    assert sum(p["count"] for p in produce) == 5                     # linger_ms=0, one send at a time
    for p in produce:
        assert sum(p["bucket_counts"]) == p["count"] and p["bounds"] == list(LATENCY_BUCKETS) and p["sum"] > 0
        assert p["start"] < p["time"]
    assert all(p["value"] >= 1 for p in points(pushes, "akresil.connections"))
    assert assigned and all(p["value"] == 1 for p in assigned)

    # who pushed: the scope names akresil and its version, the consumer's resource its group
    scopes = {(s["name"], s["version"]) for push in pushes for r in push["resources"] for s in r["scopes"]}
    assert scopes == {("akresil", __version__)}
    assert {r["attributes"].get("group_id") for push in consumer_pushes for r in push["resources"]} == {group}


async def test_client_instance_id_is_the_id_the_broker_knows_the_pushes_by(
        telemetry_cluster: KafkaCluster, sink: TelemetrySink) -> None:
    """``client_instance_id(timeout_ms)`` (Java's ``clientInstanceId(timeout)``), asked at once after start, waits
    for the id Apache Kafka assigned: the one its telemetry plugin receives the client's pushes under (printed by
    Kafka in its base64 form)."""
    async with telemetry_cluster.admin() as admin:
        (await admin.incremental_alter_configs({ConfigResource("client_metrics", "akresil-tier-id"): {
            "metrics": "akresil.request.duration", "interval.ms": "500", "match": "client_id=instance-id"}})
         ).raise_on_error()
    async with Producer(bootstrap_servers=telemetry_cluster.bootstrap_servers, client_id="instance-id") as producer:
        assigned = await producer.client_instance_id(60_000)
        with anyio.fail_after(60):
            while not any(push["client_id"] == "instance-id" for push in sink.pushes()):
                await anyio.sleep(0.1)
        assert await producer.client_instance_id(0) == assigned
    ids = {push["client_instance_id"] for push in sink.pushes() if push["client_id"] == "instance-id"}
    assert ids == {topic_id_text(assigned.bytes)}


async def test_client_instance_id_without_a_telemetry_plugin_says_so(kafka_cluster: KafkaCluster) -> None:
    """The tier's shared cluster has no client-telemetry plugin, so Apache Kafka does not offer the KIP-714 APIs:
    ``UnsupportedVersionError`` once the client found that out (not a wait for the timeout); with
    ``enable_metrics_push=False`` an ``IllegalStateError`` as in Java."""
    async with Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers) as consumer, \
            Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers, enable_metrics_push=False) as silent:
        with pytest.raises(errors.UnsupportedVersionError, match="no client telemetry"):
            await consumer.client_instance_id(60_000)
        with pytest.raises(errors.IllegalStateError, match="enable_metrics_push=False"):
            await silent.client_instance_id(60_000)
