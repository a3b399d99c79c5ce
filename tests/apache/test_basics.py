"""Produce, consume, compression, both group protocols and every listener kind, on Apache Kafka."""

from __future__ import annotations

import base64
import json
import time
from typing import Any, Callable

import pytest

from akresil import Consumer, Producer, TopicPartition
from akresil.errors import SaslAuthenticationFailedError, TopicAuthorizationFailedError
from akresil.testing import SASL_USERS, KafkaCluster

from .conftest import TopicMaker


async def consume_n(consumer: Consumer[bytes, bytes], n: int, timeout_s: float = 60.0) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=500)).values():
            out.extend(records)
    return out


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_produce_consume_every_compression(kafka_cluster: KafkaCluster, make_topic: TopicMaker,
                                                 compression: str) -> None:
    topic = await make_topic(partitions=3)
    values = [b"v%05d" % i * 10 for i in range(2000)]
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, compression_type=compression,
                        linger_ms=5) as producer:
        futures = [await producer.enqueue(topic, v, key=b"k%d" % (i % 7), headers=[("i", b"%d" % i)])
                   for i, v in enumerate(values)]
        for f in futures:
            await f
    async with Consumer(topic, bootstrap_servers=kafka_cluster.bootstrap_servers,
                        auto_offset_reset="earliest") as consumer:
        got = await consume_n(consumer, len(values))
    assert sorted(r.value for r in got) == sorted(values)
    # per key, the order of sending is kept (one partition per key)
    by_key: dict[bytes, list[int]] = {}
    for r in sorted(got, key=lambda r: (r.partition, r.offset)):
        by_key.setdefault(r.key, []).append(int(dict(r.headers)["i"]))
    assert all(seq == sorted(seq) for seq in by_key.values())


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_group_consumes_everything_once_and_commits(kafka_cluster: KafkaCluster, make_topic: TopicMaker,
                                                          unique: Callable[[str], str], protocol: str) -> None:
    topic = await make_topic(partitions=4)
    group = unique("g")
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as producer:
        await producer.send_many(topic, [(None, b"%d" % i) for i in range(400)])
    async with Consumer(topic, bootstrap_servers=kafka_cluster.bootstrap_servers, group_id=group,
                        group_protocol=protocol, auto_offset_reset="earliest",
                        enable_auto_commit=False) as consumer:
        got = await consume_n(consumer, 400)
        await consumer.commit()
    assert sorted(int(r.value) for r in got) == list(range(400))
    async with kafka_cluster.admin() as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    assert sum(o.committed or 0 for o in offsets.values()) == 400
    assert all(o.lag == 0 for o in offsets.values())


def _unsecured_jwt(sub: str) -> str:
    def part(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': sub, 'iat': now, 'exp': now + 3600})}."


def _listener_configs(cluster: KafkaCluster) -> dict[str, dict[str, Any]]:
    admin_password = SASL_USERS["admin"]
    return {
        "SASL_PLAINTEXT/PLAIN": dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                     sasl_plain_username="admin", sasl_plain_password=admin_password),
        "SASL_PLAINTEXT/SCRAM-SHA-256": dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                                             sasl_plain_username="admin", sasl_plain_password=admin_password),
        "SASL_SSL/SCRAM-SHA-512": dict(security_protocol="SASL_SSL", ssl_context=cluster.ssl_context(),
                                       sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="admin",
                                       sasl_plain_password=admin_password),
        "SSL": dict(security_protocol="SSL", ssl_context=cluster.ssl_context()),
        "SASL_PLAINTEXT/OAUTHBEARER": dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                                           sasl_oauth_token_provider=lambda: _unsecured_jwt("admin")),
        "SASL_SSL/OAUTHBEARER": dict(security_protocol="SASL_SSL", ssl_context=cluster.ssl_context(),
                                     sasl_mechanism="OAUTHBEARER",
                                     sasl_oauth_token_provider=lambda: _unsecured_jwt("admin")),
    }


@pytest.mark.parametrize("case", ["SASL_PLAINTEXT/PLAIN", "SASL_PLAINTEXT/SCRAM-SHA-256", "SASL_SSL/SCRAM-SHA-512",
                                  "SSL", "SASL_PLAINTEXT/OAUTHBEARER", "SASL_SSL/OAUTHBEARER"])
async def test_every_listener_and_mechanism_end_to_end(kafka_cluster: KafkaCluster, make_topic: TopicMaker,
                                                       unique: Callable[[str], str], case: str) -> None:
    topic = await make_topic(partitions=2)
    config = _listener_configs(kafka_cluster)[case]
    bootstrap = kafka_cluster.bootstrap(config["security_protocol"])
    async with Producer(bootstrap_servers=bootstrap, **config) as producer:
        mds = await producer.send_many(topic, [(b"k", b"v%d" % i) for i in range(20)])
    assert len({(m.partition, m.offset) for m in mds}) == 20
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=unique("g"), auto_offset_reset="earliest",
                        **config) as consumer:
        got = await consume_n(consumer, 20)
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(20))


async def test_wrong_password_is_an_authentication_error(kafka_cluster: KafkaCluster) -> None:
    with pytest.raises(SaslAuthenticationFailedError):
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap("SASL_PLAINTEXT"),
                            security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                            sasl_plain_username="alice", sasl_plain_password="wrong", bootstrap_timeout_ms=10_000):
            pass


async def test_acls_deny_then_allow_a_user(kafka_cluster: KafkaCluster, make_topic: TopicMaker) -> None:
    from akresil.admin_types import AclBinding
    topic = await make_topic()
    alice = dict(bootstrap_servers=kafka_cluster.bootstrap("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                 sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                 sasl_plain_password=SASL_USERS["alice"], delivery_timeout_ms=10_000, request_timeout_ms=5_000,
                 linger_ms=0)
    async with Producer(**alice) as producer:
        with pytest.raises(TopicAuthorizationFailedError):
            await producer.send(topic, b"denied")
    binding = AclBinding(resource_type="topic", resource_name=topic, principal="User:alice", operation="write")
    async with kafka_cluster.admin() as admin:
        (await admin.create_acls([binding])).raise_on_error()

    async def allowed() -> bool:
        try:
            async with Producer(**alice) as producer:
                await producer.send(topic, b"allowed")
            return True
        except TopicAuthorizationFailedError:
            return False   # the ACL reaches every broker through the metadata log: a moment later
    await kafka_cluster.wait_for(allowed, timeout_s=30)
    async with Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        got = await consume_n(consumer, 1)
    assert [r.value for r in got] == [b"allowed"]


@pytest.mark.parametrize("listener, client, says", [
    ("SASL_PLAINTEXT", {}, "closed by the peer during or right after ApiVersions: the listener may require SASL"),
    ("SSL", {}, "answered with a TLS record, not a Kafka response: the listener expects TLS"),
    ("SSL", {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
             "sasl_plain_password": "x"}, "answered with a TLS record"),
], ids=["plaintext-on-sasl", "plaintext-on-ssl", "sasl-on-ssl"])
async def test_a_client_on_the_wrong_listener_is_told_what_it_needs(kafka_cluster: KafkaCluster, listener: str,
                                                                     client: dict[str, Any], says: str) -> None:
    from akresil.errors import NoBrokersAvailableError
    with pytest.raises(NoBrokersAvailableError, match=says):
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap(listener), bootstrap_timeout_ms=2_000,
                            **client):
            pass
