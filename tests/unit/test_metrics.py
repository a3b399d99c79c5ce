"""ClientMetrics: events from the real core emitters become Prometheus samples, per client, at no cost when off."""

from __future__ import annotations

import random
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from akresil.core.accumulator import RecordAccumulator
from akresil.core.backoff import ExponentialBackoff
from akresil.core.events import Hooks
from akresil.core.metadata import BrokerInfo, MetadataCache
from akresil.core.node_state import NodeState
from akresil.errors import NotLeaderOrFollowerError, RequestTimedOutError
from akresil.metrics import ClientMetrics, api_name, serve
from akresil.protocol.api import ApiKey
from akresil.types import TopicPartition

TP = TopicPartition("t", 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def setup(client_id: str = "c1", registry: CollectorRegistry | None = None, clock: FakeClock | None = None
          ) -> tuple[CollectorRegistry, ClientMetrics, Hooks]:
    registry = registry if registry is not None else CollectorRegistry()
    metrics = ClientMetrics(registry, client_id=client_id, kind="producer", clock=clock or FakeClock())
    return registry, metrics, Hooks([metrics])


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def node(hooks: Hooks, node_id: int = 1) -> NodeState:
    return NodeState(node_id, reconnect_backoff=ExponentialBackoff(50, 1000, rng=random.Random(0)), hooks=hooks)


def test_api_names_are_kafkas() -> None:
    assert api_name(ApiKey.LIST_OFFSETS) == "ListOffsets"
    assert api_name(0) == "Produce"
    assert api_name(999) == "999"


def test_throttle_histogram_and_mute_window_follow_the_clock() -> None:
    clock = FakeClock()
    registry, _, hooks = setup(clock=clock)
    state = node(hooks)
    state.on_response(ApiKey.PRODUCE, 9, 400, now=clock.now)          # KIP-219 version: mutes
    state.on_response(ApiKey.FETCH, 4, 250, now=clock.now)            # pre-KIP-219 Fetch: no mute
    assert value(registry, "akresil_throttle_seconds_count", client_id="c1", node_id="1", api="Produce") == 1
    assert value(registry, "akresil_throttle_seconds_sum", client_id="c1", node_id="1", api="Produce") == 0.4
    assert value(registry, "akresil_throttle_seconds_sum", client_id="c1", node_id="1", api="Fetch") == 0.25
    assert value(registry, "akresil_throttle_mute_seconds", client_id="c1", node_id="1") == pytest.approx(0.4)
    clock.now += 300
    assert value(registry, "akresil_throttle_mute_seconds", client_id="c1", node_id="1") == pytest.approx(0.1)
    clock.now += 500
    assert value(registry, "akresil_throttle_mute_seconds", client_id="c1", node_id="1") == 0.0


def test_connections_in_flight_and_reconnect_backoff() -> None:
    registry, _, hooks = setup()
    a, b = node(hooks, 1), node(hooks, 2)
    for s in (a, b):
        s.on_connecting(0)
        s.on_connected(1)
    assert value(registry, "akresil_connections", client_id="c1") == 2
    a.on_request_sent(2)
    a.on_request_sent(2)
    assert value(registry, "akresil_requests_in_flight", client_id="c1", node_id="1") == 2
    hooks.emit("request_done", node_id=1, in_flight=1)
    assert value(registry, "akresil_requests_in_flight", client_id="c1", node_id="1") == 1
    a.on_disconnected(3, failed=True)
    b.on_disconnected(3, failed=False)
    assert value(registry, "akresil_connections", client_id="c1") == 0
    assert value(registry, "akresil_connects_total", client_id="c1", node_id="1") == 1
    assert value(registry, "akresil_disconnects_total", client_id="c1", node_id="1", failed="true") == 1
    assert value(registry, "akresil_disconnects_total", client_id="c1", node_id="2", failed="false") == 1
    assert value(registry, "akresil_backoff_seconds_count", client_id="c1", source="reconnect") == 1


def test_leader_hints_and_metadata_refresh_causes() -> None:
    registry, _, hooks = setup()
    cache = MetadataCache(rng=random.Random(0), hooks=hooks)
    cache.request_refresh("not-leader", now=0)
    cache.update_from_metadata({
        "brokers": [{"node_id": 1, "host": "h", "port": 1}], "topics": [
            {"error_code": 0, "name": "t", "partitions": [
                {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 3}]}]}, now=0)
    assert value(registry, "akresil_metadata_refreshes_total", client_id="c1", cause="bootstrap") == 1
    assert value(registry, "akresil_metadata_refreshes_total", client_id="c1", cause="not-leader") == 1
    assert value(registry, "akresil_metadata_refresh_requests_total", client_id="c1", cause="not-leader") == 1
    assert cache.apply_leader_hint(TP, 2, 4, BrokerInfo(2, "h2", 2, None))
    assert not cache.apply_leader_hint(TP, 1, 4)
    assert value(registry, "akresil_leader_hints_total", client_id="c1", topic="t", outcome="accepted",
                 reason="advanced") == 1
    assert value(registry, "akresil_leader_hints_total", client_id="c1", topic="t", outcome="ignored",
                 reason="not-advancing") == 1
    cache.on_refresh_failed(now=10)
    assert value(registry, "akresil_metadata_refresh_failures_total", client_id="c1") == 1
    assert value(registry, "akresil_backoff_seconds_count", client_id="c1", source="metadata") == 1


def test_accumulator_sent_retried_and_expired_records() -> None:
    registry, _, hooks = setup()
    acc = RecordAccumulator(linger_ms=0, delivery_timeout_ms=1000, request_timeout_ms=500, rng=random.Random(0),
                            hooks=hooks)
    lead = {TP: (1, 0)}.get
    for i in range(3):
        acc.append(TP, 1, None, b"v%d" % i, now=0)
    batch = acc.drain(0, sendable={1}, leader_of=lead).batches[1][0]
    acc.on_batch_error(batch, RequestTimedOutError(), now=1, leader_epoch=0)
    assert value(registry, "akresil_producer_batch_retries_total", client_id="c1", topic="t",
                 reason="RequestTimedOutError") == 1
    assert value(registry, "akresil_backoff_seconds_count", client_id="c1", source="retry") == 1
    batch = acc.drain(500, sendable={1}, leader_of=lead).batches[1][0]
    acc.on_batch_error(batch, NotLeaderOrFollowerError(), now=501, leader_epoch=1)   # epoch rose: immediate
    assert value(registry, "akresil_producer_immediate_retries_total", client_id="c1", topic="t") == 1
    batch = acc.drain(501, sendable={1}, leader_of={TP: (1, 1)}.get).batches[1][0]
    assert acc.on_batch_success(batch, 10, now=502)
    assert value(registry, "akresil_producer_records_sent_total", client_id="c1", topic="t") == 3
    acc.append(TP, 1, None, b"late", now=600)
    acc.expire(1700)
    assert value(registry, "akresil_producer_records_expired_total", client_id="c1", topic="t",
                 stage="queued") == 1
    assert value(registry, "akresil_producer_record_errors_total", client_id="c1", topic="t",
                 error="DeliveryTimeoutError") == 1


def test_retry_reasons_are_labelled() -> None:
    registry, _, hooks = setup()
    hooks.emit("batch_retry", topic="t", partition=0, attempt=1, reason="not-leader", skip_backoff=False,
               backoff_ms=120.0, records=7)
    assert value(registry, "akresil_producer_batch_retries_total", client_id="c1", topic="t",
                 reason="not-leader") == 1
    assert value(registry, "akresil_producer_record_retries_total", client_id="c1", topic="t",
                 reason="not-leader") == 7
    assert value(registry, "akresil_backoff_seconds_sum", client_id="c1", source="retry") == pytest.approx(0.12)


def test_batch_sent_size_records_and_first_attempt_queue_time() -> None:
    registry, _, hooks = setup()
    hooks.emit("batch_sent", node_id=1, topic="t", partition=0, records=10, size_bytes=900, attempt=0,
               queue_ms=25.0)
    hooks.emit("batch_sent", node_id=1, topic="t", partition=0, records=10, size_bytes=900, attempt=1,
               queue_ms=400.0)
    assert value(registry, "akresil_producer_batch_size_bytes_sum", client_id="c1", topic="t") == 1800
    assert value(registry, "akresil_producer_batch_records_count", client_id="c1", topic="t") == 2
    assert value(registry, "akresil_producer_record_queue_time_seconds_count", client_id="c1") == 1
    assert value(registry, "akresil_producer_record_queue_time_seconds_sum", client_id="c1") == 0.025


def test_request_latency_by_api_and_node() -> None:
    registry, _, hooks = setup()
    hooks.emit("response_received", node_id=2, api_key=ApiKey.PRODUCE, version=9, latency_ms=12.5, response={})
    hooks.emit("response_received", node_id=None, api_key=ApiKey.METADATA, version=12, latency_ms=3.0,
               response={})
    assert value(registry, "akresil_request_duration_seconds_sum", client_id="c1", node_id="2",
                 api="Produce") == 0.0125
    assert value(registry, "akresil_request_duration_seconds_count", client_id="c1", node_id="bootstrap",
                 api="Metadata") == 1


def test_consumer_lag_follows_assignment() -> None:
    registry = CollectorRegistry()
    metrics = ClientMetrics(registry, client_id="k", kind="consumer")
    hooks = Hooks([metrics])
    hooks.emit("records_consumed", topic="t", partition=0, records=5, bytes=50, lag=7)
    hooks.emit("records_consumed", topic="t", partition=1, records=2, bytes=20, lag=0)
    assert value(registry, "akresil_consumer_records_consumed_total", client_id="k", topic="t") == 7
    assert value(registry, "akresil_consumer_consumed_bytes_total", client_id="k", topic="t") == 70
    assert value(registry, "akresil_consumer_lag_records", client_id="k", topic="t", partition="0") == 7
    hooks.emit("rebalance", group_id="g", generation=2, assigned=[TopicPartition("t", 1)],
               revoked=[TopicPartition("t", 0)], duration_ms=1300.0)
    assert value(registry, "akresil_consumer_lag_records", client_id="k", topic="t", partition="0") is None
    assert value(registry, "akresil_consumer_lag_records", client_id="k", topic="t", partition="1") == 0
    assert value(registry, "akresil_consumer_assigned_partitions", client_id="k") == 1
    assert value(registry, "akresil_consumer_rebalances_total", client_id="k") == 1
    assert value(registry, "akresil_consumer_rebalance_duration_seconds_sum", client_id="k") == 1.3
    hooks.emit("records_consumed", topic="t", partition=0, records=1, bytes=1, lag=3)   # re-assigned later
    assert value(registry, "akresil_consumer_lag_records", client_id="k", topic="t", partition="0") == 3
    hooks.emit("rebalance_failed", group_id="g", error="RebalanceInProgressError")
    assert value(registry, "akresil_consumer_rebalance_failures_total", client_id="k",
                 error="RebalanceInProgressError") == 1


def test_two_clients_share_one_registry_by_client_id() -> None:
    registry, _, hooks_a = setup("a")
    _, _, hooks_b = setup("b", registry=registry)
    hooks_a.emit("batch_completed", topic="t", partition=0, records=4, attempts=1, error=None)
    hooks_b.emit("batch_completed", topic="t", partition=0, records=6, attempts=1, error=None)
    assert value(registry, "akresil_producer_records_sent_total", client_id="a", topic="t") == 4
    assert value(registry, "akresil_producer_records_sent_total", client_id="b", topic="t") == 6


def test_close_removes_the_clients_gauges_but_keeps_counters() -> None:
    clock = FakeClock()
    registry, metrics, hooks = setup(clock=clock)
    state = node(hooks)
    state.on_connecting(0)
    state.on_connected(0)
    state.on_request_sent(0)
    state.on_response(ApiKey.PRODUCE, 9, 1000, now=clock.now)
    metrics.close()
    assert value(registry, "akresil_connections", client_id="c1") is None
    assert value(registry, "akresil_requests_in_flight", client_id="c1", node_id="1") is None
    assert value(registry, "akresil_throttle_mute_seconds", client_id="c1", node_id="1") is None
    assert value(registry, "akresil_connects_total", client_id="c1", node_id="1") == 1


def test_a_faulty_registry_or_label_is_refused_clearly() -> None:
    with pytest.raises(TypeError, match="metrics_registry.*CollectorRegistry.*dict"):
        ClientMetrics({}, client_id="c", kind="producer")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        ClientMetrics(CollectorRegistry(), client_id="c", kind="streams")
    with pytest.raises(ValueError, match="client_id"):
        ClientMetrics(CollectorRegistry(), client_id="", kind="producer")
    with pytest.raises(ValueError, match="port"):
        serve(70000)


def test_disabled_metrics_register_no_hook() -> None:
    from akresil.producer import Producer
    assert len(Producer(bootstrap_servers="127.0.0.1:1").hooks) == 0
    assert len(Producer(bootstrap_servers="127.0.0.1:1", metrics_registry=CollectorRegistry()).hooks) == 1


def test_serve_exposes_the_registry_over_http() -> None:
    registry, _, hooks = setup()
    hooks.emit("batch_completed", topic="served", partition=0, records=3, attempts=1, error=None)
    with serve(0, registry) as server:
        assert server.port > 0
        body = urllib.request.urlopen(server.url, timeout=5).read().decode()
    assert 'akresil_producer_records_sent_total{client_id="c1",topic="served"} 3.0' in body
