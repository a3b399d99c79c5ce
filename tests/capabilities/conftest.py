"""Capability tests: one test body per capability, run on every broker that has it.

``control`` is the broker under test as a ``BrokerControl`` (akresil.testing.control); a test asks for the brokers
it needs with ``@on_brokers(Capability.SHARE_GROUPS, ...)``, which parametrizes ``control`` over every broker whose
capabilities include them:

* ``apache``: the tier's Apache Kafka cluster (tests/conftest.py ``kafka_cluster``: 3 brokers), marked ``apache``,
  so it runs with the tier (one cluster for the whole run) and ``-m "not apache"`` leaves it out;
* ``mock``: a fresh librdkafka mock cluster (3 brokers) per test;
* ``tansu`` / ``noida``: the embedded brokers (one node each, started once);
* ``proxy``: the fault proxy (3 virtual nodes) in front of Tansu, per test (on its own thread; the pytest plugin's
  ``@pytest.mark.kafka_proxy(...)`` passes it options).

The mock and the proxy come as the end-to-end harness's ``MockHarness`` / ``ProxyHarness`` (tests/harness/e2e.py):
their ``BrokerControl`` with the requests they saw and request-level faults, which a body may use where the broker
has them (``WIRE``).

A body that needs an imitation's knob (the mock's share-group settings) or must tell a broker's genuine difference
from a bug asks ``control.capabilities`` or the control's type, and says why in a comment.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Iterable, Iterator

import pytest

from akresil.testing import BrokerControl, Capability, EmbeddedBroker, FaultProxy, FaultProxyControl
from akresil.testing.control import KAFKA, MOCK, NOIDA, PROXY, TANSU

from ..harness.e2e import MockHarness, ProxyHarness

#: controls that also log the requests they saw and script request-level faults (tests/harness/e2e.py)
WIRE = (MockHarness, ProxyHarness)

#: every broker a capability test can run on, and what it has (the proxy: its controls and Tansu's features)
BROKERS: dict[str, frozenset[Capability]] = {"apache": KAFKA, "mock": MOCK, "tansu": TANSU, "noida": NOIDA,
                                             "proxy": PROXY | TANSU}


def adds_something(kind: str, needs: Iterable[Capability]) -> bool:
    """The proxy is a broker of its own only for what Tansu behind it lacks (its controls): a test of Tansu's own
    features through it would test Tansu twice."""
    return kind != "proxy" or not set(needs) <= TANSU


def on_brokers(*needs: Capability, only: Iterable[str] | None = None) -> pytest.MarkDecorator:
    """Parametrize ``control`` over the brokers that have every capability in ``needs`` (``only``: of those, the
    named ones)."""
    chosen = [kind for kind, caps in BROKERS.items() if set(needs) <= caps and (only is None or kind in only)
              and adds_something(kind, needs)]
    if not chosen:
        raise ValueError(f"no broker has all of {[n.name for n in needs]}" + (f" among {list(only)}" if only else ""))
    return pytest.mark.parametrize("control", [broker_case(kind) for kind in chosen], indirect=True)


#: the capability each ``group_protocol`` needs
GROUP_PROTOCOLS: dict[str, Capability] = {"classic": Capability.CLASSIC_GROUPS, "consumer": Capability.CONSUMER_GROUPS}


def on_group_brokers(*protocols: str, needs: Iterable[Capability] = (), only: Iterable[str] | None = None,
                     exclude: Iterable[tuple[str, str]] = ()) -> pytest.MarkDecorator:
    """Parametrize ``(control, protocol)`` over every broker and each of ``protocols`` (``group_protocol``) it has
    (with ``needs`` too; ``only``: those brokers; ``exclude``: (broker, protocol) pairs a test leaves out, saying
    why where it does)."""
    skip = set(exclude)
    pairs = [(kind, protocol) for kind, caps in BROKERS.items() for protocol in protocols
             if {GROUP_PROTOCOLS[protocol], *needs} <= caps and (only is None or kind in only)
             and (kind, protocol) not in skip and adds_something(kind, {GROUP_PROTOCOLS[protocol], *needs})]
    if not pairs:
        raise ValueError(f"no broker has the group protocols {protocols} with {[n.name for n in needs]}")
    return pytest.mark.parametrize(("control", "protocol"), [broker_case(kind, protocol) for kind, protocol in pairs],
                                   indirect=["control"])


def broker_case(kind: str, *values: object) -> Any:
    """One parameter set ``(control, *values)`` on broker ``kind``, marked as ``on_brokers`` marks it (for a test
    whose cases differ per broker: ``parametrize(("control", ...), [...], indirect=["control"])``)."""
    return pytest.param(kind, *values, id="-".join([kind, *map(str, values)]),
                        marks=pytest.mark.apache if kind == "apache" else pytest.mark.broker)


def kind_of(control: BrokerControl) -> str:
    """The ``BROKERS`` name of a control (for a body's few broker-specific settings)."""
    from akresil.testing import KafkaCluster
    from akresil.testing.rdkafka_mock import MockControl
    if isinstance(control, KafkaCluster):
        return "apache"
    if isinstance(control, MockControl):
        return "mock"
    if isinstance(control, FaultProxyControl):
        return "proxy"
    assert isinstance(control, EmbeddedBroker)
    return control.kind


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on Apache Kafka at a transaction.version (test_transactions.py) run in order of level, newest first,
    so the tier's cluster switches once per level."""
    def level(item: pytest.Item) -> int | None:
        callspec = getattr(item, "callspec", None)
        return callspec.params.get("transaction_version") if callspec is not None else None

    at = [i for i, item in enumerate(items) if level(item) is not None]
    for i, item in zip(at, sorted((items[i] for i in at), key=lambda item: -(level(item) or 0))):
        items[i] = item


@pytest.fixture
def control(request: pytest.FixtureRequest) -> Iterator[BrokerControl]:
    """The broker under test (its parameter is the ``BROKERS`` name; see ``on_brokers``)."""
    kind = request.param
    if kind == "apache":
        cluster = request.getfixturevalue("kafka_cluster")
        yield cluster
        started = cluster.restart_stopped_brokers()
        assert not started, f"the test left brokers {started} down"
    elif kind == "mock":
        from akresil.testing.rdkafka_mock import MockCluster
        with MockCluster(3) as mock:
            yield MockHarness(mock)
    elif kind == "tansu":
        yield request.getfixturevalue("broker")
    elif kind == "noida":
        yield request.getfixturevalue("noida")
    elif kind == "proxy":
        tansu: EmbeddedBroker = request.getfixturevalue("broker")
        marker = request.node.get_closest_marker("kafka_proxy")    # the pytest plugin's: FaultProxy's options
        options = {"nodes": 3, **(marker.kwargs if marker is not None else {})}
        with FaultProxy(tansu.bootstrap_servers, **options) as proxy:
            yield ProxyHarness(proxy)
    else:
        raise ValueError(f"control: unknown broker {kind!r} (have {list(BROKERS)})")


@pytest.fixture
def unique() -> Callable[[str], str]:
    """``unique("g")`` -> a name no other test uses (topics, groups, transactional ids)."""
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:10]}"
