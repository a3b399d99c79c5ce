"""The I/O shell of the benchmarks: broker, one fresh fault proxy per client phase, offered load, fault script.

Clients run one after another, each against a fresh topic and a fresh ``FaultProxy`` (so the proxy's
recordings belong to that client alone), and meet the same script at the same offsets.  The proxy runs in a
process of its own (``FaultProxyProcess``), as a broker would: in the measuring process its thread took the GIL
and its recordings grew the heap the cyclic GC scans, which slowed the Python clients and not confluent-kafka.
Clients run on the caller's loop (confluent-kafka in its own threads).  The load is open-loop: records are offered at a fixed rate whatever
the client does, so a stall shows as latency and a dip in acknowledgements, not as a slower generator.
``PhaseBase`` holds what does not depend on the broker side, so ``mock_runner`` offers librdkafka's mock
cluster exactly the same load and script.  The load's idiom (``Scenario.load``, ``--load``) is a task per record
awaiting the client's send-and-wait, or a hand-over with the client's delivery callback; each record's scheduled
time is logged with it, so latency can count from when the record was due, not from when the client took it.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import math
import random
import time
from abc import ABC, abstractmethod
from typing import Any, Callable, Generic, TypeVar, cast

from ..admin import Admin
from ..testing import EmbeddedBroker, FaultProxy
from ..testing.proxy_process import FaultProxyProcess
from ..types import NewTopic
from . import clients as bench_clients
from .clients import ProducerAdapter, Settings, make_producer, now_s
from .gc_log import GcLog
from .scenarios import (PRODUCE, AppliedStep, PhaseData, PhaseRecord, Scenario, SteadyConfig, fault_windows,
                        summarize)
from .script import FaultStep
from .stats import DeliveryLog

#: how often the load generator wakes up to hand over the records that became due
TICK_S = 0.005
#: how long warm-up records (metadata, connections) may take before the phase gives up
WARMUP_TIMEOUT_S = 20.0
#: how often the drain checks whether every record completed
DRAIN_POLL_S = 0.02

ProgressFn = Callable[[str, str, float, float, int, int], None]   # scenario, client, elapsed, duration, acked, failed
#: the broker side a phase scripts faults on (``FaultProxy``, or the mock's ``MockCluster``)
H = TypeVar("H")


def no_progress(*_: Any) -> None:
    return None


class PhaseBase(ABC, Generic[H]):
    """One client's run of one failure scenario, whatever the broker side: producers, warm-up, the offered load
    and the fault script's clock.  Subclasses say how a step is applied to their harness ``H``."""

    def __init__(self, scenario: Scenario, client: str, seed: int, progress: ProgressFn = no_progress) -> None:
        self.scenario = scenario
        self.client = client
        self.seed = seed
        self.progress = progress
        self.topic = f"bench-{scenario.name}-{client}-{seed}-{random.randrange(1 << 30):08x}"
        self.log = DeliveryLog()
        self.applied: list[AppliedStep] = []
        #: ``tasks`` load: the task of every record not yet completed
        self._tasks: set[asyncio.Task[None]] = set()
        #: Python's collections while the load was offered (``gc.callbacks``)
        self.gc = GcLog()

    async def _drive(self, harness: H, bootstrap: str, producers: list[ProducerAdapter]) -> float:
        """Start and warm up the producers (appended to ``producers``, which the caller closes on failure), offer
        the load while the script runs, undo the faults, drain and close; returns the instant the load began."""
        sc = self.scenario
        # the previous phase's garbage (another client's, often in reference cycles) is collected now, not by
        # a full collection in the middle of this client's load: no client pays for the one before it
        gc.collect()
        for i in range(sc.producers):
            p = make_producer(self.client, bootstrap, f"bench-{self.client}-{i}", sc.settings)
            producers.append(p)
            await p.start()
        value = random.Random(self.seed).randbytes(sc.value_size)
        await self._warm_up(producers, value)
        self._begin_recording(harness)
        if sc.gc_freeze:
            gc.collect()
            gc.freeze()
        start = now_s()
        script_task = asyncio.create_task(self._script(harness, start))
        self.gc.start()
        try:
            await self._offer(producers, value, start)
        finally:
            self.gc.stop()
            if sc.gc_freeze:
                gc.unfreeze()
            script_task.cancel()
            await asyncio.gather(script_task, return_exceptions=True)
            await self._undo_faults(harness)
        deadline = now_s() + sc.drain_s
        while not self.log.all_done() and now_s() < deadline:
            await asyncio.sleep(DRAIN_POLL_S)
        # what completes from here on (records failed by close, cancelled tasks) stays "unfinished"
        self.log.seal()
        await close_all(producers)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return start

    def gc_summary(self, data: PhaseRecord) -> dict[str, Any]:
        """Python's collections during the load, and those that started inside a fault window."""
        return self.gc.summary(fault_windows(data, data.start_s + self.scenario.duration_s))

    async def run_summarized(self, summarize: Callable[[Any], tuple[dict[str, Any], dict[str, Any]]]
                             ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``run()``, then the harness's ``summarize`` of the phase with Python's collections added (``gc``)."""
        data = await self.run()
        summary, series = summarize(data)
        summary["gc"] = self.gc_summary(data)
        return summary, series

    async def _warm_up(self, producers: list[ProducerAdapter], value: bytes) -> None:
        """Every partition through every producer, so every client knows every node before the load starts."""
        parts = self.scenario.partitions
        sends = [p.send(self.topic, value, i % parts) for p in producers for i in range(parts * 2)]
        try:
            await asyncio.wait_for(asyncio.gather(*sends), WARMUP_TIMEOUT_S)
        except Exception as exc:   # noqa: BLE001 - any failure here means the phase cannot be measured
            raise RuntimeError(f"{self.client}: warm-up records were not delivered: {exc!r}") from exc

    @abstractmethod
    async def run(self) -> Any:
        """The whole phase on this harness: what its ``summarize`` takes (``PhaseData`` or ``MockPhaseData``)."""

    @abstractmethod
    def _begin_recording(self, harness: H) -> None:
        """Note the partition leaders and forget what the warm-up left in the recordings: the load starts."""

    @abstractmethod
    async def _apply(self, harness: H, step: FaultStep, start: float) -> AppliedStep: ...

    @abstractmethod
    async def _undo_faults(self, harness: H) -> None:
        """Leave no fault in force for the drain, whatever the script reached."""

    async def _offer(self, producers: list[ProducerAdapter], value: bytes, start: float) -> None:
        """Open loop: record *i* is due at ``start + i / rate`` (its scheduled time, logged with it) and goes to
        partition ``i % partitions`` (round robin: the same load per node for every client) in the scenario's
        idiom: a task awaiting the client's send-and-wait, or a hand-over with a delivery callback."""
        sc = self.scenario
        tasks = sc.load == "tasks"
        loop = asyncio.get_running_loop()
        total = math.ceil(sc.rate * sc.duration_s)      # every record scheduled before the end
        sent = 0
        last_report = 0.0
        while sent < total:
            elapsed = now_s() - start
            due = min(int(sc.rate * elapsed) + 1, total) - sent
            for _ in range(due):
                partition = sent % sc.partitions
                producer = producers[sent % len(producers)]
                idx = self.log.begin(now_s(), partition, start + sent / sc.rate)
                sent += 1
                if tasks:
                    task = loop.create_task(self._send(producer, value, idx, partition))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                else:
                    await producer.enqueue(self.topic, value, partition, functools.partial(self._done, idx))
            if elapsed - last_report >= 0.25:
                last_report = elapsed
                self.progress(sc.name, self.client, elapsed, sc.duration_s, self.log.acked_count,
                              self.log.failed_count)
            await asyncio.sleep(TICK_S)
        await asyncio.sleep(max(0.0, start + sc.duration_s - now_s()))     # the script runs its full length

    async def _send(self, producer: ProducerAdapter, value: bytes, idx: int, partition: int) -> None:
        try:
            acked = producer.acked_partition(await producer.send_awaitable(self.topic, value, partition))
        except Exception as exc:   # noqa: BLE001 - every failure is a data point
            self.log.failed(idx, now_s(), producer.error_kind(exc))
        else:
            self.log.succeeded(idx, now_s(), acked)

    def _done(self, idx: int, partition: int | None, kind: str | None) -> None:
        if kind is None:
            assert partition is not None
            self.log.succeeded(idx, now_s(), partition)
        else:
            self.log.failed(idx, now_s(), kind)

    async def _script(self, harness: H, start: float) -> None:
        cursor = self.scenario.script.cursor()
        while not cursor.done:
            at = cursor.next_at()
            assert at is not None
            await asyncio.sleep(max(0.0, start + at - now_s()))
            for step in cursor.due(now_s() - start):
                self.applied.append(await self._apply(harness, step, start))


def _new_proxy(broker: str, **kwargs: Any) -> FaultProxy:
    """A fault proxy in its own process, scripted through ``FaultProxy``'s synchronous calls."""
    return cast(FaultProxy, FaultProxyProcess(broker, **kwargs))


class Phase(PhaseBase[FaultProxy]):
    """One client's run of one failure scenario through a fresh ``FaultProxy`` in front of ``broker``."""

    def __init__(self, broker: str, scenario: Scenario, client: str, seed: int,
                 progress: ProgressFn = no_progress) -> None:
        super().__init__(scenario, client, seed, progress)
        self.broker = broker
        self.leaders: dict[int, int] = {}

    async def run(self) -> PhaseData:
        sc = self.scenario
        await create_topic(self.broker, self.topic, sc.partitions)
        proxy = _new_proxy(self.broker, nodes=sc.nodes)
        await asyncio.to_thread(proxy.start)
        producers: list[ProducerAdapter] = []
        try:
            start = await self._drive(proxy, proxy.bootstrap_servers, producers)
            return PhaseData(scenario=sc, client=self.client, start_s=start, log=self.log,
                             requests=proxy.requests(), responses=proxy.responses(),
                             connections=proxy.connections(), applied=self.applied, leaders=self.leaders)
        finally:
            await close_all(producers)
            await asyncio.to_thread(proxy.stop)

    def _begin_recording(self, proxy: FaultProxy) -> None:
        self.leaders = {p: proxy.leader(self.topic, p)[0] for p in range(self.scenario.partitions)}
        proxy.recorder.clear()

    async def _apply(self, proxy: FaultProxy, step: FaultStep, start: float) -> AppliedStep:
        applied = AppliedStep(step, now_s())
        args = step.args
        if step.action == "move_all_leaders":
            moved = proxy.move_all_leaders(topic=self.topic)
            applied.moved = [(tp, proxy.leader(*tp)[0]) for tp in moved]
        elif step.action == "throttle_all_nodes":
            # a window fixed at the script's instant (the proxy and the bench share time.monotonic), so the
            # throttle is in force exactly where the plots shade it, however late this task woke up
            applied.at_s = start + step.at_s
            for node in proxy.node_ids:
                proxy.throttle_window(node, int(args["ms"]), start_ms=applied.at_s * 1000.0)
        elif step.action == "stop_node":
            await asyncio.to_thread(proxy.stop_node, int(args["node"]))
        elif step.action == "start_node":
            await asyncio.to_thread(proxy.start_node, int(args["node"]))
        elif step.action == "fail_produce":
            proxy.fail_requests(PRODUCE, int(args["error_code"]), count=None, node=int(args["node"]))
        elif step.action == "clear":
            proxy.clear()
        else:   # FaultStep validates actions; this guards a new action without a handler
            raise ValueError(f"fault step action {step.action!r} has no handler in the runner")
        return applied

    async def _undo_faults(self, proxy: FaultProxy) -> None:
        proxy.clear()
        for node in proxy.node_ids:
            if not proxy.is_node_up(node):
                await asyncio.to_thread(proxy.start_node, node)


async def close_all(producers: list[ProducerAdapter]) -> None:
    """Close in reverse start order: an akresil Producer started in a task holds a task group (a cancel scope)
    on that task, and anyio scopes must be exited innermost first."""
    while producers:
        await producers.pop().close()


async def create_topic(broker: str, topic: str, partitions: int) -> None:
    async with Admin(bootstrap_servers=broker) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])


async def run_steady(broker: str, cfg: SteadyConfig, client: str, seed: int,
                     progress: ProgressFn = no_progress) -> dict[str, Any]:
    """Produce then consume ``cfg.records`` records per size through a fault-free proxy, after an untimed warm-up
    (module imports and first-use costs are not throughput)."""
    out: dict[str, Any] = {}
    proxy = _new_proxy(broker, nodes=cfg.nodes, inspect_responses=False, record_partitions=False)
    await asyncio.to_thread(proxy.start)
    try:
        await _produce_then_consume(proxy.bootstrap_servers, cfg.partitions, client, "warmup", seed, b"w" * 100,
                                    WARMUP_RECORDS)
        for size in cfg.sizes:
            value = random.Random(seed).randbytes(size)
            produce_s, got, consume_s = await _produce_then_consume(
                proxy.bootstrap_servers, cfg.partitions, client, f"{size}", seed, value, cfg.records,
                lambda step, done, acked: progress("steady", f"{client} {size} B {step}", done, 1.0, acked, 0))
            out[f"{size}B"] = {
                "produce_msg_per_s": round(cfg.records / produce_s), "consume_msg_per_s": round(got / consume_s),
                "produce_mb_per_s": round(cfg.records * size / produce_s / 1e6, 2),
                "consume_mb_per_s": round(got * size / consume_s / 1e6, 2)}
    finally:
        await asyncio.to_thread(proxy.stop)
    return out


#: records of the untimed steady warm-up
WARMUP_RECORDS = 2_000


async def _produce_then_consume(bootstrap: str, partitions: int, client: str, label: str, seed: int, value: bytes,
                                records: int, step: Callable[[str, float, int], None] = lambda *_: None
                                ) -> tuple[float, int, float]:
    """``records`` copies of ``value`` into a fresh topic by the client's bulk path, then all of them read back
    from the beginning; returns (produce seconds, records read, consume seconds)."""
    topic = f"bench-steady-{client}-{label}-{seed}-{random.randrange(1 << 30):08x}"
    await create_topic(bootstrap, topic, partitions)
    producer = make_producer(client, bootstrap, f"bench-{client}", Settings())
    await producer.start()
    try:
        await producer.prepare(topic, value)
        step("produce", 0.0, 0)
        t0 = time.perf_counter()
        await producer.produce_bulk(topic, value, records)
        produce_s = time.perf_counter() - t0
    finally:
        await producer.close()
    step("consume", 0.5, records)
    got, consume_s = await bench_clients.consume_timed(client, bootstrap, f"bench-{client}-consumer", topic,
                                                       partitions, records, timeout_s=60)
    if got < records:
        raise RuntimeError(f"{client}: consumed {got} of {records} records of {len(value)} B in 60 s")
    return produce_s, got, consume_s


async def run_failure(broker: str, scenario: Scenario, client: str, seed: int,
                      progress: ProgressFn = no_progress) -> tuple[dict[str, Any], dict[str, Any]]:
    return await Phase(broker, scenario, client, seed, progress).run_summarized(summarize)


class Broker:
    """The embedded broker for a whole run (async context manager), or an external one when given."""

    def __init__(self, bootstrap: str | None = None) -> None:
        self._external = bootstrap
        self._embedded: EmbeddedBroker | None = None

    async def __aenter__(self) -> str:
        if self._external:
            return self._external
        self._embedded = EmbeddedBroker(kind="tansu")
        await self._embedded.__aenter__()
        return self._embedded.bootstrap_servers

    async def __aexit__(self, *exc: object) -> None:
        if self._embedded is not None:
            await self._embedded.__aexit__(*exc)
