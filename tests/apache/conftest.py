"""The Apache Kafka tier: every test here runs against a real KRaft cluster (``kafka_cluster``, the pytest
plugin's session fixture: 3 brokers, a controller, SASL/SSL listeners and ACLs), shared by the whole tier.

Tests use their own topics and groups (unique names), and a test that stops or kills a broker starts it again
before it ends (``broker_down``), so the next test finds three brokers.
"""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from akresil.pytest_plugin import configured_cluster
from akresil.testing import KafkaCluster

pytestmark = pytest.mark.apache

TopicMaker = Callable[..., Awaitable[str]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/apache/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.apache)


#: KIP-392: each broker in a rack of its own, and leaders that point a consumer naming a rack (``client_rack``)
#: to the replica in it; consumers without a rack keep reading from leaders
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def rack(node_id: int) -> str:
    return f"rack-{node_id}"


@pytest.fixture(scope="package")
def kafka_cluster(pytestconfig: pytest.Config) -> Iterator[KafkaCluster]:
    """The plugin's cluster, scoped to this folder: it is stopped once the tier is done, so the rest of the
    suite does not share the machine with four idle JVMs. Its brokers sit in racks ``rack(id)``."""
    cluster = configured_cluster(pytestconfig)
    cluster.broker_config["replica.selector.class"] = RACK_AWARE_SELECTOR
    cluster.node_config.update({node: {"broker.rack": rack(node)} for node in cluster.broker_ids})
    with cluster:
        yield cluster


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
