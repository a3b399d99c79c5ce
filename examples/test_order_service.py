"""Tests of examples/order_service.py with the akresil pytest plugin (``pip install 'akresil[testing]'``).

Run them with ``pytest examples/test_order_service.py``: pytest loads akresil's plugin and anyio's (anyio is an
akresil dependency) by themselves.  The fixtures (``kafka_bootstrap``, ``kafka_proxy``, ``kafka_faults``,
``kafka_topic_factory``) come from akresil's plugin; nothing here starts a broker by hand.
"""

from __future__ import annotations

import json

import anyio
import pytest

from akresil import Consumer, TopicPartition
from akresil.errors import NotEnoughReplicasError
from akresil.testing import FaultProxy, KafkaFaults, TopicFactory

from order_service import Order, OrderService, make_producer

pytestmark = pytest.mark.anyio

PRODUCE = 0


async def read_all(bootstrap: str, topic: str) -> list[bytes | None]:
    """Every value in partition 0 of ``topic``, from the start."""
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                        fetch_max_wait_ms=50) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        batches = await consumer.getmany(timeout_ms=5_000)
        return [record.value for records in batches.values() for record in records]


async def test_an_order_is_published(kafka_bootstrap: str, kafka_topic_factory: TopicFactory) -> None:
    topic = await kafka_topic_factory()
    async with make_producer(kafka_bootstrap) as producer:
        response = await OrderService(producer, topic).create_order(Order("o-1", "alice", 1250))
    assert response.status_code == 201 and response.body["offset"] == 0
    [value] = await read_all(kafka_bootstrap, topic)
    assert value is not None and json.loads(value)["order_id"] == "o-1"


async def test_transient_broker_errors_are_retried_with_backoff(
        kafka_proxy: FaultProxy, kafka_faults: KafkaFaults, kafka_topic_factory: TopicFactory,
        kafka_bootstrap: str) -> None:
    topic = await kafka_topic_factory()
    # the broker refuses the order twice with a retriable error, then accepts it
    await kafka_faults.fail_requests(PRODUCE, NotEnoughReplicasError.errno, count=2)
    async with make_producer(kafka_proxy.bootstrap_servers) as producer:
        response = await OrderService(producer, topic).create_order(Order("o-2", "bob", 990))

    assert response.status_code == 201
    attempts = kafka_proxy.requests(PRODUCE, partition=(topic, 0))
    assert len(attempts) == 3
    gaps = [later.time_ms - earlier.time_ms for earlier, later in zip(attempts, attempts[1:])]
    assert gaps[0] >= 80 and gaps[1] >= 160       # 100 ms, then 200 ms, each -20% jitter at most (KIP-580)
    assert len(await read_all(kafka_bootstrap, topic)) == 1   # idempotent: three attempts, one record


async def test_the_service_answers_503_within_its_delivery_timeout(
        kafka_proxy: FaultProxy, kafka_faults: KafkaFaults, kafka_topic_factory: TopicFactory) -> None:
    topic = await kafka_topic_factory()
    async with make_producer(kafka_proxy.bootstrap_servers, delivery_timeout_ms=1_500) as producer:
        service = OrderService(producer, topic)
        assert (await service.create_order(Order("o-3", "carol", 100))).status_code == 201
        leader, _ = kafka_proxy.leader(topic, 0)
        async with kafka_faults.node_down(leader):
            with anyio.fail_after(10):            # generous: the bound under test is delivery_timeout_ms
                response = await service.create_order(Order("o-4", "carol", 200))
        assert response.status_code == 503 and response.body["error"] == "DeliveryTimeoutError"
        # the node is back: the next order goes through on the same producer
        assert (await service.create_order(Order("o-5", "carol", 300))).status_code == 201
