"""Session-wide fixtures: a real broker (started on first use, stopped at the end), the Apache Kafka tier's cluster
(started on first use, stopped after the last test that uses it) and free ports."""

from __future__ import annotations

import os
from typing import Callable, Iterator

import pytest

from akresil.pytest_plugin import configured_cluster
from akresil.testing import EmbeddedBroker, KafkaCluster, free_port as _free_port

#: KIP-392: each broker of the tier's cluster in a rack of its own, and leaders that point a consumer naming a rack
#: (``client_rack``) to the replica in it; consumers without a rack keep reading from leaders
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

_TIER_CLUSTER = pytest.StashKey[KafkaCluster]()
_LAST_TIER_TEST = pytest.StashKey[str]()


def rack(node_id: int) -> str:
    return f"rack-{node_id}"


def uses_tier_cluster(item: pytest.Item) -> bool:
    """Tests of the Apache Kafka tier: marked ``apache`` (tests/apache, and the ``apache`` parameter of a capability
    test in tests/capabilities), or asking for ``kafka_cluster`` themselves."""
    return item.get_closest_marker("apache") is not None or "kafka_cluster" in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tier's tests run together, from where the first of them stands (tests/apache, then the capability
    tests' ``apache`` parameters), so its cluster starts once and stops as soon as they are done: the rest of the
    suite does not share the machine with four idle JVMs."""
    tier = [item for item in items if uses_tier_cluster(item)]
    if not tier:
        return
    first = items.index(tier[0])
    rest = [item for item in items[first:] if not uses_tier_cluster(item)]
    items[first:] = tier + rest
    config.stash[_LAST_TIER_TEST] = tier[-1].nodeid


@pytest.fixture(scope="session")
def kafka_cluster(pytestconfig: pytest.Config) -> Iterator[KafkaCluster]:
    """The plugin's cluster (3 brokers, a controller, SASL/SSL listeners and ACLs), shared by every test of the
    tier and stopped after the last of them (``pytest_runtest_teardown`` below).  Its brokers sit in racks
    ``rack(id)``."""
    cluster = configured_cluster(pytestconfig)
    cluster.broker_config["replica.selector.class"] = RACK_AWARE_SELECTOR
    cluster.node_config.update({node: {"broker.rack": rack(node)} for node in cluster.broker_ids})
    with cluster:
        pytestconfig.stash[_TIER_CLUSTER] = cluster
        yield cluster


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    result = yield
    config = item.config
    if item.nodeid == config.stash.get(_LAST_TIER_TEST, None):
        cluster = config.stash.get(_TIER_CLUSTER, None)
        if cluster is not None:
            cluster.stop()    # the session fixture's own stop at the end finds nothing left to do
    return result


#: what the ``broker`` fixture runs: Tansu (default: it starts in well under a second), or ``AKRESIL_TEST_BROKER=kafka``
#: to run the same tests on Apache Kafka, the embedded broker users get where Java is
TEST_BROKER_KINDS = ("tansu", "kafka", "noida")


def _broker_kind() -> str:
    kind = os.environ.get("AKRESIL_TEST_BROKER", "tansu")
    if kind not in TEST_BROKER_KINDS:
        raise pytest.UsageError(f"AKRESIL_TEST_BROKER must be one of {', '.join(TEST_BROKER_KINDS)}, got {kind!r}")
    return kind


@pytest.fixture(scope="session")
def tansu_node() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(kind="tansu") as running:
        yield running


@pytest.fixture(scope="session")
def kafka_node() -> Iterator[EmbeddedBroker]:
    """One Apache Kafka node (the default embedded broker where Java is) for the whole session."""
    with EmbeddedBroker(kind="kafka") as running:
        yield running


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest) -> EmbeddedBroker:
    """One embedded broker for the whole session (use unique topic names per test): Tansu, the broker these tests
    were written for, unless ``AKRESIL_TEST_BROKER`` names another; a module marked ``kafka_too`` runs on Tansu and
    on Apache Kafka (tests/integration/conftest.py). The brokers stay up for the session."""
    kind = getattr(request, "param", None) or _broker_kind()
    node: EmbeddedBroker = request.getfixturevalue({"tansu": "tansu_node", "kafka": "kafka_node",
                                                    "noida": "noida"}[kind])
    return node


@pytest.fixture(scope="session")
def noida() -> Iterator[EmbeddedBroker]:
    """One noida-db broker for the whole session (the imitation with Kafka's transaction semantics and error paths;
    use unique topic names)."""
    with EmbeddedBroker(kind="noida") as running:
        yield running


@pytest.fixture
def free_port() -> int:
    """A 127.0.0.1 TCP port that was free a moment ago."""
    return _free_port()


@pytest.fixture
def free_port_factory() -> Callable[[], int]:
    """Call it for as many free ports as a test needs."""
    return _free_port
