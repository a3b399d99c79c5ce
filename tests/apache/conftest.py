"""The Apache Kafka tier: every test here runs against a real KRaft cluster (``kafka_cluster``, tests/conftest.py:
3 brokers, a controller, SASL/SSL listeners and ACLs), shared by the whole tier with the ``apache`` parameters of
the capability tests (tests/capabilities), and stopped after the last of them.

Tests use their own topics and groups (unique names), and a test that stops or kills a broker starts it again
before it ends (``broker_down``), so the next test finds three brokers.
"""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from akresil.testing import KafkaCluster

from ..conftest import RACK_AWARE_SELECTOR, rack

__all__ = ["RACK_AWARE_SELECTOR", "TopicMaker", "broker_down", "rack"]

pytestmark = pytest.mark.apache

TopicMaker = Callable[..., Awaitable[str]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/apache/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.apache)


@pytest.fixture
def unique() -> Callable[[str], str]:
    """``unique("g")`` -> a name no other test uses (topics, groups, transactional ids)."""
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def make_topic(kafka_cluster: KafkaCluster) -> TopicMaker:
    """``await make_topic(partitions=3, replication_factor=3)`` -> a new topic's name."""
    async def make(partitions: int = 1, replication_factor: int = 3, configs: dict[str, str] | None = None) -> str:
        return await kafka_cluster.create_topic(partitions=partitions, replication_factor=replication_factor,
                                                configs=configs)
    return make


@asynccontextmanager
async def broker_down(cluster: KafkaCluster, node_id: int, *, kill: bool = True) -> AsyncIterator[None]:
    """Inside the block the broker is killed (or stopped with ``kill=False``); it is started again after it."""
    if kill:
        await cluster.kill_broker(node_id)
    else:
        await cluster.stop_broker(node_id)
    try:
        yield
    finally:
        await cluster.start_broker(node_id)


@pytest.fixture(autouse=True)
def all_brokers_back(kafka_cluster: KafkaCluster) -> Iterator[None]:
    """A test that left a broker down fails here and the broker is started for the next test."""
    yield
    started = kafka_cluster.restart_stopped_brokers()
    assert not started, f"the test left brokers {started} down"
