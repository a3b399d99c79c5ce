"""One script surface over both fault harnesses, so each end-to-end test runs against both.

``ProxyHarness`` fronts Tansu with ``akresil.testing.FaultProxy`` (3 virtual nodes); ``MockHarness`` drives
librdkafka's mock cluster (3 brokers) through ``akresil.testing.rdkafka_mock``.  Both pin partition *p* of a
test topic to node ``p % 3 + 1`` and report what reached the wire as ``WireRequest(node, time_ms)`` on the
``time.monotonic()`` clock in milliseconds, the clock akresil itself schedules on, so a test can compare
gaps on the wire with the backoff, mute and deadline values it configured.

Each harness is its broker's ``BrokerControl`` (``FaultProxyControl``, ``MockControl``: ``move_leader``,
``stop_node``, ...) with the wire log and request faults added.  A harness only offers what its broker can express:
``supports(feature)`` says which faults it has (the mock cannot throttle and cannot tell partitions apart in its
request log), and tests skip what is missing.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import NamedTuple

import anyio

from akresil import Producer
from akresil.testing import EmbeddedBroker, FaultProxy, FaultProxyControl
from akresil.testing.control import TANSU
from akresil.testing.rdkafka_mock import ApiKey, MockCluster, MockControl

NODES = (1, 2, 3)
PRODUCE = int(ApiKey.PRODUCE)
METADATA = int(ApiKey.METADATA)

#: faults every harness expresses; the proxy adds the rest
COMMON_FEATURES = frozenset({"fail_produce", "move_leader", "stale_metadata", "stop_node", "delay_produce",
                             "delay_metadata"})
PROXY_FEATURES = COMMON_FEATURES | {"throttle", "cap_version", "partition_log"}


class WireRequest(NamedTuple):
    """A request as the broker side saw it: which node, when (monotonic ms)."""

    node: int
    time_ms: float


def now_ms() -> float:
    """The test's clock: the same ``time.monotonic()`` the proxy, the mock and akresil use."""
    return time.monotonic() * 1000.0


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def default_leader(partition: int) -> int:
    """The node both harnesses make leader of ``partition`` when a topic is created."""
    return NODES[partition % len(NODES)]


def gaps(times: Sequence[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


#: wall-clock allowance for the event loop and the round trip on a loaded 2-core machine; lower bounds stay exact
SLACK_MS = 120.0


class LoopLag:
    """How late this event loop runs its timers while a test runs: a task sleeps ``period`` at a time and keeps
    the worst oversleep. A client's timer (a backoff end, a mute end) is late by about as much when the machine
    is loaded, so upper bounds on wire timing add ``max_ms`` to their slack: a shared CI machine then widens
    only the bounds it actually disturbed, and an idle one keeps them tight. Lower bounds never use it.
    Runs under asyncio and trio."""

    def __init__(self) -> None:
        self.max_ms = 0.0

    async def _run(self, period_s: float) -> None:
        while True:
            t0 = time.monotonic()
            await anyio.sleep(period_s)
            self.max_ms = max(self.max_ms, (time.monotonic() - t0 - period_s) * 1000.0)

    def slack_ms(self, base_ms: float = SLACK_MS) -> float:
        """``base_ms`` plus the worst timer lateness seen so far."""
        return base_ms + self.max_ms


@contextlib.asynccontextmanager
async def loop_lag(period_s: float = 0.005) -> AsyncIterator[LoopLag]:
    lag = LoopLag()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lag._run, period_s, name="e2e-loop-lag")
        try:
            yield lag
        finally:
            tg.cancel_scope.cancel()


def check_backoff_gaps(observed: Sequence[float], expected: Sequence[float], *, jitter: float = 0.2,
                       slack_ms: float = SLACK_MS) -> list[str]:
    """Problems with observed retry gaps vs KIP-580 backoffs (empty list: within bounds).

    Each gap must lie in ``[b * (1 - jitter), b * (1 + jitter) + slack]``: the lower bound is exact (a
    client never retries early; the broker's answer only adds to the gap), the slack covers the round trip
    and the event loop's wake-up latency.
    """
    problems = []
    if len(observed) != len(expected):
        problems.append(f"{len(observed)} gaps observed, {len(expected)} expected: {observed}")
    for i, (gap, base) in enumerate(zip(observed, expected)):
        low, high = base * (1 - jitter), base * (1 + jitter) + slack_ms
        if not low <= gap <= high:
            problems.append(f"gap {i}: {gap:.1f} ms outside [{low:.1f}, {high:.1f}] for backoff {base} ms")
    return problems


# ---------------------------------------------------------------------------------------------- proxy
class ProxyHarness(FaultProxyControl):
    """FaultProxy (3 virtual nodes) in front of an embedded Tansu broker, on the test's event loop: its
    ``BrokerControl`` (leader moves, node stops), the wire log and request faults on top."""

    name = "proxy"
    features = PROXY_FEATURES
    #: the event loop's timer lateness while the harness runs (set by ``proxy_harness``)
    lag: LoopLag

    def __init__(self, proxy: FaultProxy) -> None:
        super().__init__(proxy, upstream=TANSU)

    def supports(self, feature: str) -> bool:
        return feature in self.features

    async def create_topic(self, name: str | None = None, partitions: int = 1, *, replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None) -> str:
        topic = await super().create_topic(name, partitions=partitions, replication_factor=replication_factor,
                                           configs=configs)
        for p in range(partitions):
            assert self.proxy.leader(topic, p)[0] == default_leader(p), "proxy leader layout changed"
        return topic

    def produce_requests(self, topic: str, partition: int, *, since_ms: float | None = None,
                         client_id: str | None = None) -> list[WireRequest]:
        return [WireRequest(r.node_id, r.time_ms) for r in self.proxy.requests(
            PRODUCE, partition=(topic, partition), since_ms=since_ms, client_id=client_id)]

    def requests(self, api_key: int, *, since_ms: float | None = None) -> list[WireRequest]:
        return [WireRequest(r.node_id, r.time_ms) for r in self.proxy.requests(api_key, since_ms=since_ms)]

    async def fail_produce(self, error_code: int, count: int, node: int | None = None) -> None:
        """The next ``count`` Produce requests (to ``node``, or any) fail with ``error_code``."""
        self.proxy.fail_requests(PRODUCE, error_code, count=count, node=node)

    async def delay_produce(self, node: int, ms: int) -> None:
        self.proxy.add_latency(node, ms, api_key=PRODUCE)

    async def delay_metadata(self, ms: int) -> None:
        self.proxy.add_latency(None, ms, api_key=METADATA)


@contextlib.asynccontextmanager
async def proxy_harness(broker: EmbeddedBroker) -> AsyncIterator[ProxyHarness]:
    async with FaultProxy(broker.bootstrap_servers, nodes=len(NODES)) as proxy:
        h = ProxyHarness(proxy)
        async with loop_lag() as h.lag:
            yield h


# ---------------------------------------------------------------------------------------------- mock
class MockHarness(MockControl):
    """librdkafka's mock cluster (3 brokers) with request tracking on from the start: its ``BrokerControl``
    (leader moves, stale Metadata, node stops), the wire log and request faults on top."""

    name = "mock"
    features = COMMON_FEATURES
    #: the event loop's timer lateness while the harness runs (set by ``harness``)
    lag: LoopLag

    def __init__(self, mock: MockCluster) -> None:
        super().__init__(mock)
        mock.start_request_tracking()

    def supports(self, feature: str) -> bool:
        return feature in self.features

    async def create_topic(self, name: str | None = None, partitions: int = 1, *, replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None) -> str:
        return await super().create_topic(name, partitions=partitions, replication_factor=replication_factor,
                                          configs=configs)

    def produce_requests(self, topic: str, partition: int, *, since_ms: float | None = None,
                         client_id: str | None = None) -> list[WireRequest]:
        """Every Produce the mock saw: its log names no partition, so tests use one partition here."""
        return self.requests(PRODUCE, since_ms=since_ms)

    def requests(self, api_key: int, *, since_ms: float | None = None) -> list[WireRequest]:
        out = [WireRequest(r.broker_id, r.timestamp_us / 1000.0) for r in self.mock.get_requests()
               if r.api_key == api_key]
        return [r for r in out if since_ms is None or r.time_ms >= since_ms]

    async def fail_produce(self, error_code: int, count: int, node: int | None = None) -> None:
        """The next ``count`` Produce requests (to ``node``, or any) fail with ``error_code``."""
        if node is None:
            await self._call(self.mock.push_request_errors, PRODUCE, [error_code] * count)
        else:
            await self._call(self.mock.push_request_errors_with_rtt, node, PRODUCE, [(error_code, 0)] * count)

    async def delay_produce(self, node: int, ms: int) -> None:
        """Delay the next Produce answer from ``node`` by ``ms`` (the proxy delays every one)."""
        await self._call(self.mock.push_request_errors_with_rtt, node, PRODUCE, [(0, ms)])

    async def delay_metadata(self, ms: int) -> None:
        for node in NODES:
            await self._call(self.mock.push_request_errors_with_rtt, node, METADATA, [(0, ms)] * 8)


@contextlib.contextmanager
def mock_harness() -> Iterator[MockHarness]:
    with MockCluster(len(NODES)) as mock:
        yield MockHarness(mock)


@contextlib.asynccontextmanager
async def harness(kind: str, broker: EmbeddedBroker | None) -> AsyncIterator[ProxyHarness | MockHarness]:
    """``kind``: "proxy" (needs the Tansu ``broker``) or "mock"."""
    if kind == "proxy":
        assert broker is not None
        async with proxy_harness(broker) as h:
            yield h
    elif kind == "mock":
        with mock_harness() as m:
            async with loop_lag() as m.lag:
                yield m
    else:
        raise ValueError(f"kind: expected 'proxy' or 'mock', got {kind!r}")


def fast_producer(bootstrap_servers: str, **overrides: object) -> Producer:
    """A producer with the short timeouts the end-to-end tests assert against."""
    config: dict[str, object] = dict(bootstrap_servers=bootstrap_servers, linger_ms=0, delivery_timeout_ms=3000,
                                     request_timeout_ms=1000, retry_backoff_ms=50, retry_backoff_max_ms=400,
                                     client_id=f"e2e-{uuid.uuid4().hex[:8]}")
    config.update(overrides)
    return Producer(**config)
