"""pytest plugin (entry point ``pytest11``, installed with ``akresil[testing]``): Kafka fixtures for your tests.

Fixtures, all prefixed ``kafka_`` so they never shadow a project's own ``broker`` fixture:

* ``kafka_broker`` (session): an ``EmbeddedBroker``, by default ``kind="auto"``: a one-node Apache Kafka where
  Java 17+ is (its jars fetched once into a cache), else Tansu with a warning (also in the terminal summary).
  ``--kafka-broker=tansu`` (or the ini option ``kafka_broker = tansu``) keeps the fast imitation, ``noida`` picks
  noida-db (Kafka-like error paths, faster rebalances), ``kafka`` insists on Apache Kafka (``apache`` is the
  same).
* ``kafka_cluster`` (session): a real Apache Kafka cluster (``akresil.testing.KafkaCluster``, 3 brokers and a
  controller by default: ``--kafka-cluster-brokers``/ini ``kafka_cluster_brokers``; ``--kafka-version``), with
  SASL/SSL listeners and ACLs, and the controls a test needs (kill/stop/start a broker, move a leader, quotas).
* ``kafka_bootstrap`` (session): that broker's ``bootstrap_servers`` string.
* ``kafka_proxy`` (function): a ``FaultProxy`` in front of the broker, configured by the
  ``@pytest.mark.kafka_proxy(nodes=3, ...)`` marker (keyword arguments of ``FaultProxy``).
* ``kafka_faults`` (function): ``akresil.testing.KafkaFaults``, coroutines and context managers that script
  that proxy from inside an async test (a stopped node comes back, added latency goes away, when a block exits).
* ``kafka_topic_factory`` (function): ``await kafka_topic_factory(partitions=3)`` creates a topic with a
  unique name and returns the name; the topics are deleted when the test ends.

Every fixture is synchronous, so none needs an event loop: they work unchanged under pytest-asyncio and
under anyio's plugin on asyncio or trio.  The proxy is an asyncio program, so it runs on its own thread
(``FaultProxy``'s blocking form) and ``KafkaFaults`` calls its thread-safe script methods from a worker
thread: the test's event loop, whichever it is, never blocks on the proxy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Literal, cast

import pytest

if TYPE_CHECKING:   # imported where used: pytest loads this plugin in every session of a project with akresil
    from .testing.broker import EmbeddedBroker
    from .testing.fixtures import KafkaFaults, TopicFactory
    from .testing.kafka_cluster import KafkaCluster
    from .testing.proxy import FaultProxy

__all__ = ["BROKER_KINDS"]

Kind = Literal["auto", "kafka", "tansu", "noida", "apache"]
BROKER_KINDS: tuple[Kind, ...] = ("auto", "kafka", "tansu", "noida", "apache")
#: why ``kafka_broker`` runs Tansu although "auto" was asked for (said once more in the terminal summary)
_FALLBACK = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("akresil", "akresil Kafka fixtures")
    group.addoption("--kafka-broker", dest="kafka_broker", default=None, choices=BROKER_KINDS,
                    help="embedded broker behind the kafka_broker fixture (default: the kafka_broker ini "
                         "option, else auto: Apache Kafka where Java 17+ is, else tansu)")
    parser.addini("kafka_broker", "broker behind the kafka_broker fixture: auto, kafka (or apache), tansu or noida",
                  default="auto")
    group.addoption("--kafka-cluster-brokers", dest="kafka_cluster_brokers", default=None, type=int,
                    help="brokers of the kafka_cluster fixture's Apache Kafka cluster (default 3)")
    parser.addini("kafka_cluster_brokers", "brokers of the kafka_cluster fixture's Apache Kafka cluster",
                  default="3")
    group.addoption("--kafka-version", dest="kafka_version", default=None,
                    help="Apache Kafka release for kafka_cluster and a Kafka kafka_broker (default: "
                         "AKRESIL_KAFKA_VERSION, else akresil's pinned 4.x release)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kafka_proxy(**kwargs): keyword arguments for the FaultProxy of the kafka_proxy fixture "
                   "(nodes=3, coordinator_node=..., controller_node=..., ...)")


def broker_kind(config: pytest.Config) -> Kind:
    """The broker chosen by ``--kafka-broker``, else the ``kafka_broker`` ini option."""
    chosen = config.getoption("kafka_broker") or str(config.getini("kafka_broker")).strip() or "auto"
    if chosen not in BROKER_KINDS:
        raise pytest.UsageError(f"kafka_broker: expected one of {', '.join(BROKER_KINDS)}, got {chosen!r}")
    return cast(Kind, chosen)


@pytest.fixture(scope="session")
def kafka_broker(pytestconfig: pytest.Config) -> Iterator[EmbeddedBroker]:
    """One broker for the whole session (in-memory or temporary storage: use unique topic names)."""
    kind = broker_kind(pytestconfig)
    from .testing.broker import EmbeddedBroker
    with EmbeddedBroker(kind="kafka" if kind == "apache" else kind,
                        kafka_version=pytestconfig.getoption("kafka_version")) as broker:
        if broker.fallback_reason is not None:
            pytestconfig.stash[_FALLBACK] = broker.fallback_reason
        yield broker


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    reason = config.stash.get(_FALLBACK, None)
    if reason is not None:
        terminalreporter.write_line(f"akresil: kafka_broker ran Tansu, not Apache Kafka: {reason} "
                                    "(--kafka-broker=tansu says that is intended)", yellow=True)


@pytest.fixture(scope="session")
def kafka_cluster(pytestconfig: pytest.Config) -> Iterator[KafkaCluster]:
    """A real Apache Kafka cluster for the whole session: PLAINTEXT, SASL_PLAINTEXT, SSL and SASL_SSL listeners,
    ACLs (PLAINTEXT and the ``admin`` user are super users).  Tests that stop a broker must start it again."""
    with configured_cluster(pytestconfig) as cluster:
        yield cluster


def configured_cluster(config: pytest.Config) -> KafkaCluster:
    """The ``kafka_cluster`` fixture's cluster, not started (``with configured_cluster(config) as c``): for a
    conftest that wants the same cluster with another scope (e.g. ``package``, to stop it after a folder)."""
    from .testing.kafka_cluster import KafkaCluster
    brokers = config.getoption("kafka_cluster_brokers") or int(str(config.getini("kafka_cluster_brokers")))
    return KafkaCluster(brokers=brokers, security=True, version=config.getoption("kafka_version"))


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: EmbeddedBroker) -> str:
    """``bootstrap_servers`` of the session's broker (no proxy in between)."""
    return kafka_broker.bootstrap_servers


@pytest.fixture
def kafka_proxy(request: pytest.FixtureRequest, kafka_broker: EmbeddedBroker) -> Iterator[FaultProxy]:
    """A fresh ``FaultProxy`` (own thread) in front of the session's broker; clients connect to
    ``kafka_proxy.bootstrap_servers``.  ``@pytest.mark.kafka_proxy(nodes=5)`` configures it."""
    marker = request.node.get_closest_marker("kafka_proxy")
    if marker is not None and marker.args:
        raise pytest.UsageError("@pytest.mark.kafka_proxy takes keyword arguments only (FaultProxy's), "
                                f"got positional {marker.args!r}")
    kwargs: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    from .testing.proxy import FaultProxy
    with FaultProxy(kafka_broker.bootstrap_servers, **kwargs) as proxy:
        yield proxy


@pytest.fixture
def kafka_faults(kafka_proxy: FaultProxy) -> KafkaFaults:
    """Async fault scripting for ``kafka_proxy`` (see ``KafkaFaults``)."""
    from .testing.fixtures import KafkaFaults
    return KafkaFaults(kafka_proxy)


@pytest.fixture
def kafka_topic_factory(kafka_bootstrap: str) -> Iterator[TopicFactory]:
    """``await kafka_topic_factory(partitions=1, prefix="test", configs=None)`` -> a new topic's name."""
    from .testing.fixtures import TopicFactory
    factory = TopicFactory(kafka_bootstrap)
    yield factory
    factory.delete_created()
