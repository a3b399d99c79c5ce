"""The librdkafka mock-cluster harness, proven with clients that are not akresil.

confluent-kafka drives produce/consume/metadata; raw Kafka frames encoded with kafka-python's
schema classes check the wire-level claims (leader epochs, KIP-951 hints) byte-exactly.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from akresil.testing.rdkafka_mock import (
    TRANSPORT_ERROR,
    ApiKey,
    MockCluster,
    MockClusterError,
    MockRequest,
)

pytestmark = pytest.mark.broker

NOT_LEADER_OR_FOLLOWER = 6
TOPIC_AUTHORIZATION_FAILED = 29


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(3) as mock:
        yield mock


def _producer(cluster: MockCluster, **conf: Any) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "linger.ms": 0,
            "log_level": 0,
            "retry.backoff.ms": 20,
            **conf,
        }
    )


def _produce(producer: Any, topic: str, partition: int, count: int = 1) -> list[tuple[Any, int]]:
    """Produce and wait; returns (error or None, offset) per record."""
    results: list[tuple[Any, int]] = []
    for i in range(count):
        producer.produce(
            topic,
            b"value-%d" % i,
            key=b"k",
            partition=partition,
            on_delivery=lambda err, msg: results.append((err, msg.offset())),
        )
    assert producer.flush(10) == 0
    return results


def _leaders(cluster: MockCluster, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 0})
    metadata = admin.list_topics(topic, timeout=5)
    return {p.id: p.leader for p in metadata.topics[topic].partitions.values()}


def _rpc(address: tuple[str, int], request: Any, response_cls: Any, version: int) -> Any:
    """One framed request/response on a fresh connection (no ApiVersions needed by the mock)."""
    request.with_header(correlation_id=7, client_id="harness-test")
    frame = request.encode(version=version, header=True, framed=True)
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(frame)
        (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        body = sock.recv(size, socket.MSG_WAITALL)
    response = response_cls.decode(body, version=version, header=True)
    assert response.header.correlation_id == 7
    return response


def _metadata_partition(cluster: MockCluster, broker_id: int, topic: str) -> Any:
    from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
    )
    response = _rpc(cluster.broker_address(broker_id), request, MetadataResponse, 12)
    (topic_md,) = response.topics
    return topic_md.partitions[0]


def _produce_v10(cluster: MockCluster, broker_id: int, topic: str) -> Any:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    builder.append(0, 1_700_000_000_000, b"k", b"v", [])
    data = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            data(
                name=topic,
                partition_data=[data.PartitionProduceData(index=0, records=bytes(builder.build()))],
            )
        ],
    )
    return _rpc(cluster.broker_address(broker_id), request, ProduceResponse, 10)


# --------------------------------------------------------------------------- topics, produce
def test_created_topic_is_visible_in_metadata_and_round_trips(cluster: MockCluster) -> None:
    from confluent_kafka import Consumer, TopicPartition

    assert cluster.broker_ids == (1, 2, 3)
    assert len(cluster.bootstrap_servers.split(",")) == 3
    cluster.create_topic("orders", partitions=4, replication_factor=3)
    leaders = _leaders(cluster, "orders")
    assert sorted(leaders) == [0, 1, 2, 3]
    assert set(leaders.values()) <= {1, 2, 3}

    producer = _producer(cluster)
    results = _produce(producer, "orders", partition=2, count=3)
    assert results == [(None, 0), (None, 1), (None, 2)]

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "harness",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        consumer.assign([TopicPartition("orders", 2, 0)])
        values = []
        deadline = time.monotonic() + 5
        while len(values) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
        assert values == [b"value-0", b"value-1", b"value-2"]
    finally:
        consumer.close()


def test_set_leader_moves_leadership_and_bumps_the_epoch(cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, 3)
    cluster.set_leader("t", 0, 1)
    before = _metadata_partition(cluster, 3, "t")
    assert before.leader_id == 1
    cluster.set_leader("t", 0, 2)
    after = _metadata_partition(cluster, 3, "t")
    assert after.leader_id == 2
    assert after.leader_epoch == before.leader_epoch + 1
    assert _leaders(cluster, "t") == {0: 2}


def test_old_leader_answers_produce_v10_with_kip951_hint(cluster: MockCluster) -> None:
    """DESIGN.md's claim, on the wire: NOT_LEADER_OR_FOLLOWER + CurrentLeader + NodeEndpoints."""
    cluster.create_topic("t", 1, 3)
    cluster.set_leader("t", 0, 1)
    cluster.set_leader("t", 0, 2)
    epoch = _metadata_partition(cluster, 2, "t").leader_epoch

    stale = _produce_v10(cluster, 1, "t")
    (part,) = stale.responses[0].partition_responses
    assert part.error_code == NOT_LEADER_OR_FOLLOWER
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (2, epoch)
    endpoints = {e.node_id: (e.host, e.port) for e in stale.node_endpoints}
    assert endpoints == {2: cluster.broker_address(2)}

    fresh = _produce_v10(cluster, 2, "t")
    (ok,) = fresh.responses[0].partition_responses
    assert (ok.error_code, ok.base_offset, ok.log_append_time_ms) == (0, 0, 1234)


def test_confluent_producer_with_stale_leader_is_redirected(cluster: MockCluster) -> None:
    """A real client's Produce (v10 in librdkafka 2.16) hits the old leader, then the new one."""
    cluster.create_topic("t", 1, 3)
    cluster.set_leader("t", 0, 1)
    producer = _producer(cluster)
    assert _produce(producer, "t", 0) == [(None, 0)]
    cluster.set_leader("t", 0, 3)
    cluster.start_request_tracking()
    assert _produce(producer, "t", 0) == [(None, 1)]
    produces = [r.broker_id for r in cluster.get_requests() if r.api_key == ApiKey.PRODUCE]
    assert produces[0] == 1
    assert produces[-1] == 3
    assert set(produces) == {1, 3}


def test_push_leader_response_scripts_the_next_metadata_answer(cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, 3)
    cluster.set_leader("t", 0, 2)
    epoch = _metadata_partition(cluster, 1, "t").leader_epoch
    cluster.push_leader_response("t", 0, 1, epoch - 1)
    stale = _metadata_partition(cluster, 1, "t")
    assert (stale.leader_id, stale.leader_epoch) == (1, epoch - 1)
    real = _metadata_partition(cluster, 1, "t")  # one pushed answer is used once
    assert (real.leader_id, real.leader_epoch) == (2, epoch)


# --------------------------------------------------------------------------- tracking
def test_request_tracking_records_broker_api_key_and_monotonic_time(cluster: MockCluster) -> None:
    cluster.create_topic("t", 2, 3)
    cluster.set_leader("t", 0, 2)
    cluster.set_leader("t", 1, 3)
    assert cluster.get_requests() == []
    producer = _producer(cluster)
    _produce(producer, "t", 0)  # warm up: connections, metadata (not tracked)

    start_us = time.monotonic_ns() // 1000
    cluster.start_request_tracking()
    _produce(producer, "t", 0)
    _produce(producer, "t", 1)
    requests = cluster.stop_request_tracking()
    end_us = time.monotonic_ns() // 1000
    assert all(isinstance(r, MockRequest) for r in requests)
    assert [(r.broker_id, r.api_key) for r in requests if r.api_key == ApiKey.PRODUCE] == [
        (2, 0),
        (3, 0),
    ]
    assert all(start_us <= r.timestamp_us <= end_us for r in requests)
    stamps = [r.timestamp_us for r in requests]
    assert stamps == sorted(stamps)

    _produce(producer, "t", 1)  # tracking stopped: nothing recorded
    assert cluster.get_requests() == []

    cluster.start_request_tracking()
    _produce(producer, "t", 1)
    assert [r.broker_id for r in cluster.get_requests() if r.api_key == ApiKey.PRODUCE] == [3]
    cluster.clear_requests()  # forgets, but keeps tracking
    assert cluster.get_requests() == []
    _produce(producer, "t", 0)
    assert [r.broker_id for r in cluster.get_requests() if r.api_key == ApiKey.PRODUCE] == [2]


# --------------------------------------------------------------------------- faults
def test_push_request_errors_fail_the_next_produce(cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, 3)
    producer = _producer(cluster)
    _produce(producer, "t", 0)
    cluster.push_request_errors(ApiKey.PRODUCE, [TOPIC_AUTHORIZATION_FAILED])
    ((err, _),) = _produce(producer, "t", 0)
    assert err is not None and err.code() == TOPIC_AUTHORIZATION_FAILED
    # the stack is used up (a new client: librdkafka remembers the topic as unauthorized)
    assert _produce(_producer(cluster), "t", 0)[0][0] is None


def test_retriable_pushed_errors_are_retried_by_the_client(cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, 3)
    producer = _producer(cluster)
    _produce(producer, "t", 0)
    cluster.push_request_errors(ApiKey.PRODUCE, [NOT_LEADER_OR_FOLLOWER, NOT_LEADER_OR_FOLLOWER])
    cluster.start_request_tracking()
    assert _produce(producer, "t", 0)[0][0] is None
    produces = [r for r in cluster.get_requests() if r.api_key == ApiKey.PRODUCE]
    assert len(produces) == 3


def test_clear_request_errors_drops_queued_errors(cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, 3)
    producer = _producer(cluster)
    cluster.push_request_errors(ApiKey.PRODUCE, [TOPIC_AUTHORIZATION_FAILED])
    cluster.clear_request_errors(ApiKey.PRODUCE)
    assert _produce(producer, "t", 0)[0][0] is None


def test_per_broker_errors_with_rtt_delay_and_fail(cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, 3)
    cluster.set_leader("t", 0, 2)
    producer = _producer(cluster)
    _produce(producer, "t", 0)
    cluster.push_request_errors_with_rtt(
        2, ApiKey.PRODUCE, [(0, 300), (TOPIC_AUTHORIZATION_FAILED, 0)]
    )
    assert cluster.broker_error_stack_count(2, ApiKey.PRODUCE) == 2
    assert cluster.broker_error_stack_count(1, ApiKey.PRODUCE) == 0
    started = time.monotonic()
    assert _produce(producer, "t", 0)[0][0] is None
    assert time.monotonic() - started >= 0.29
    ((err, _),) = _produce(producer, "t", 0)
    assert err.code() == TOPIC_AUTHORIZATION_FAILED
    assert cluster.broker_error_stack_count(2, ApiKey.PRODUCE) == 0


def test_transport_error_drops_the_connection(cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, 3)
    cluster.set_leader("t", 0, 1)
    producer = _producer(cluster)
    _produce(producer, "t", 0)
    cluster.push_request_errors(ApiKey.PRODUCE, [TRANSPORT_ERROR])
    cluster.start_request_tracking()
    assert _produce(producer, "t", 0)[0][0] is None  # librdkafka reconnects and retries
    produces = [r for r in cluster.get_requests() if r.api_key == ApiKey.PRODUCE]
    assert len(produces) == 2


def test_broker_rtt_delays_every_response(cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, 3)
    cluster.set_leader("t", 0, 3)
    producer = _producer(cluster)
    _produce(producer, "t", 0)
    cluster.broker_set_rtt(3, 250)
    started = time.monotonic()
    _produce(producer, "t", 0)
    assert time.monotonic() - started >= 0.24
    cluster.broker_set_rtt(3, 0)
    started = time.monotonic()
    _produce(producer, "t", 0)
    assert time.monotonic() - started < 0.2


def test_broker_down_refuses_connections_until_up(cluster: MockCluster) -> None:
    address = cluster.broker_address(2)
    socket.create_connection(address, timeout=2).close()
    cluster.broker_set_down(2)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(address, timeout=2)
    socket.create_connection(cluster.broker_address(1), timeout=2).close()  # others unaffected
    cluster.broker_set_up(2)
    socket.create_connection(address, timeout=2).close()


def test_broker_down_does_not_move_leadership_but_decommission_does(cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, 3)
    cluster.set_leader("t", 0, 1)
    cluster.broker_set_down(1)
    assert _metadata_partition(cluster, 2, "t").leader_id == 1
    cluster.broker_decommission(1)
    assert cluster.broker_ids == (2, 3)
    assert _metadata_partition(cluster, 2, "t").leader_id in (2, 3)
    with pytest.raises(ValueError, match="unknown broker_id 1"):
        cluster.broker_set_up(1)


# --------------------------------------------------------------------------- API hygiene
def test_bad_input_is_named(cluster: MockCluster) -> None:
    with pytest.raises(ValueError, match="unknown broker_id 9"):
        cluster.set_leader("t", 0, 9)
    with pytest.raises(ValueError, match="topic must not be empty"):
        cluster.create_topic("")
    with pytest.raises(ValueError, match="partitions must be in"):
        cluster.create_topic("t", 0)
    with pytest.raises(ValueError, match="replication_factor must be in"):
        cluster.create_topic("t", 1, 4)
    with pytest.raises(ValueError, match="errors must not be empty"):
        cluster.push_request_errors(ApiKey.PRODUCE, [])
    with pytest.raises(TypeError, match=r"errors\[1\] must be an \(error_code, rtt_ms\) tuple"):
        cluster.push_request_errors_with_rtt(1, 0, [(0, 1), 6])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="rtt_ms must be in"):
        cluster.broker_set_rtt(1, -5)
    with pytest.raises(TypeError, match="api_key must be an int"):
        cluster.push_request_errors("produce", [1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_version 3 > max_version 1"):
        cluster.set_api_version(ApiKey.PRODUCE, 3, 1)


def test_librdkafka_refusals_raise_mock_cluster_error(cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, 1)
    with pytest.raises(MockClusterError) as info:
        cluster.create_topic("t", 1, 1)
    assert info.value.code != 0 and "TOPIC_ALREADY_EXISTS" in info.value.name


def test_set_api_version_limits_what_is_advertised(cluster: MockCluster) -> None:
    cluster.create_topic("t", 1, 3)
    cluster.set_api_version(ApiKey.PRODUCE, 0, 7)
    producer = _producer(cluster)
    assert _produce(producer, "t", 0)[0][0] is None  # librdkafka still produces, at v7


def test_close_is_idempotent_and_further_use_is_refused() -> None:
    cluster = MockCluster(1)
    cluster.close()
    cluster.close()
    assert cluster.closed
    assert "closed" in repr(cluster)
    with pytest.raises(RuntimeError, match="MockCluster is closed"):
        cluster.create_topic("t")


def test_no_thread_leaks_and_an_unclosed_cluster_does_not_block_exit() -> None:
    script = textwrap.dedent(
        """
        import os, socket, time
        from akresil.testing.rdkafka_mock import MockCluster

        def threads():
            return len(os.listdir("/proc/self/task"))

        with MockCluster(1):
            pass  # loads the library and lets its one-time threads start
        base = threads()
        for _ in range(5):
            with MockCluster(3) as c:
                c.create_topic("t", 3)
                socket.create_connection(c.broker_address(1)).close()
                assert threads() > base
        # librdkafka's threads finish exiting just after rd_kafka_destroy returns: give them a moment
        for _ in range(200):
            if threads() == base:
                break
            time.sleep(0.01)
        assert threads() == base, (threads(), base)
        forgotten = MockCluster(3)  # never closed: its finalizer runs at interpreter exit
        forgotten.create_topic("t", 3)
        print("ok", base, flush=True)
        """
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok")
    assert time.monotonic() - started < 10
