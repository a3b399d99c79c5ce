"""One script surface over both fault harnesses, so each end-to-end test runs against both.

``ProxyHarness`` fronts Tansu with ``akresil.testing.FaultProxy`` (3 virtual nodes); ``MockHarness`` drives
librdkafka's mock cluster (3 brokers) through ``akresil.testing.rdkafka_mock``.  Both pin partition *p* of a
test topic to node ``p % 3 + 1`` and report what reached the wire as ``WireRequest(node, time_ms)`` on the
``time.monotonic()`` clock in milliseconds, the clock akresil itself schedules on, so a test can compare
gaps on the wire with the backoff, mute and deadline values it configured.

A harness only offers what its broker can express: ``supports(feature)`` says which faults it has (the mock
cannot throttle and cannot tell partitions apart in its request log), and tests skip what is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import NamedTuple

from akresil import Admin, NewTopic, Producer
from akresil.testing import EmbeddedBroker, FaultProxy
from akresil.testing.rdkafka_mock import ApiKey, MockCluster

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
    only the bounds it actually disturbed, and an idle one keeps them tight. Lower bounds never use it."""

    def __init__(self, period_s: float = 0.005) -> None:
        self.period_s = period_s
        self.max_ms = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(self.period_s)
            self.max_ms = max(self.max_ms, (time.monotonic() - t0 - self.period_s) * 1000.0)

    def start(self) -> "LoopLag":
        self._task = asyncio.get_running_loop().create_task(self._run(), name="e2e-loop-lag")
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def slack_ms(self, base_ms: float = SLACK_MS) -> float:
        """``base_ms`` plus the worst timer lateness seen so far."""
        return base_ms + self.max_ms


@contextlib.asynccontextmanager
async def loop_lag() -> AsyncIterator[LoopLag]:
    lag = LoopLag().start()
    try:
        yield lag
    finally:
        await lag.stop()


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
class ProxyHarness:
    """FaultProxy (3 virtual nodes) in front of an embedded Tansu broker, on the test's event loop."""

    name = "proxy"
    features = PROXY_FEATURES
    #: the event loop's timer lateness while the harness runs (set by ``proxy_harness``)
    lag: LoopLag

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.bootstrap_servers = proxy.bootstrap_servers

    def supports(self, feature: str) -> bool:
        return feature in self.features

    async def create_topic(self, topic: str, partitions: int = 1) -> None:
        async with Admin(bootstrap_servers=self.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        for p in range(partitions):
            assert self.proxy.leader(topic, p)[0] == default_leader(p), "proxy leader layout changed"

    def leader(self, topic: str, partition: int) -> int:
        return self.proxy.leader(topic, partition)[0]

    def produce_requests(self, topic: str, partition: int, *, since_ms: float | None = None,
                         client_id: str | None = None) -> list[WireRequest]:
        return [WireRequest(r.node_id, r.time_ms) for r in self.proxy.requests(
            PRODUCE, partition=(topic, partition), since_ms=since_ms, client_id=client_id)]

    def requests(self, api_key: int, *, since_ms: float | None = None) -> list[WireRequest]:
        return [WireRequest(r.node_id, r.time_ms) for r in self.proxy.requests(api_key, since_ms=since_ms)]

    async def fail_produce(self, error_code: int, count: int, node: int | None = None) -> None:
        """The next ``count`` Produce requests (to ``node``, or any) fail with ``error_code``."""
        self.proxy.fail_requests(PRODUCE, error_code, count=count, node=node)

    async def move_leader(self, topic: str, partition: int, to_node: int, *, stale_for_s: float = 0.0,
                          stale_epoch: int | None = None) -> None:
        """Move leadership; with ``stale_for_s`` Metadata keeps naming the old leader for that long."""
        self.proxy.move_leader(topic, partition, to_node, stale_metadata_for_s=stale_for_s)

    async def stop_node(self, node: int) -> None:
        await self.proxy.astop_node(node)

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
class MockHarness:
    """librdkafka's mock cluster (3 brokers) with request tracking on from the start."""

    name = "mock"
    features = COMMON_FEATURES
    #: the event loop's timer lateness while the harness runs (set by ``harness``)
    lag: LoopLag

    def __init__(self, mock: MockCluster) -> None:
        self.mock = mock
        self.bootstrap_servers = mock.bootstrap_servers
        self._leaders: dict[tuple[str, int], int] = {}
        mock.start_request_tracking()

    def supports(self, feature: str) -> bool:
        return feature in self.features

    async def _call(self, fn: Callable[..., object], *args: object) -> None:
        """A mock-cluster call in a worker thread: it waits for the mock's own thread to serve it, which now
        and then takes ~1 s, and the event loop (the client under test) must not freeze meanwhile."""
        await asyncio.to_thread(fn, *args)

    async def create_topic(self, topic: str, partitions: int = 1) -> None:
        await self._call(self.mock.create_topic, topic, partitions, 1)
        for p in range(partitions):
            await self._call(self.mock.set_leader, topic, p, default_leader(p))
            self._leaders[(topic, p)] = default_leader(p)

    def leader(self, topic: str, partition: int) -> int:
        return self._leaders[(topic, partition)]

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

    async def move_leader(self, topic: str, partition: int, to_node: int, *, stale_for_s: float = 0.0,
                          stale_epoch: int | None = None) -> None:
        """Move leadership (epoch + 1); with ``stale_for_s`` the next Metadata answers name the old leader
        with ``stale_epoch`` (the mock queues answers, not a duration: a generous number is pushed)."""
        old = self._leaders[(topic, partition)]
        await self._call(self.mock.set_leader, topic, partition, to_node)
        self._leaders[(topic, partition)] = to_node
        if stale_for_s > 0:
            if stale_epoch is None:
                raise ValueError("stale_epoch: the mock needs the old leader epoch to report it")
            for _ in range(20):
                await self._call(self.mock.push_leader_response, topic, partition, old, stale_epoch)

    async def stop_node(self, node: int) -> None:
        await self._call(self.mock.broker_set_down, node)

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
