"""``akresil demo``: a producer and a consumer group through leader moves, throttles and dropped connections.

Everything runs locally: the embedded broker (Apache Kafka where Java 17+ is, else Tansu), ``FaultProxy``
presenting it as three brokers, a metrics endpoint.  A chaos script moves partition leaders (KIP-951 hints), throttles a node (KIP-219 mute), fails
Produce requests (KIP-580 retries) and drops connections, while a live line shows progress.  The run ends with
proof that nothing was lost or duplicated:

* every send was acknowledged, each at a distinct (partition, offset);
* per partition the acknowledged offsets are exactly 0..n-1 and the high watermark is n: the log holds the
  acknowledged records and nothing else (a lost write would leave a gap, a duplicate an extra offset);
* the consumer read every acknowledged value exactly once.

The consumer is assigned every partition by default; ``group=True`` makes it join a consumer group instead.
(The ListOffsets route to the log end is not used: Tansu answers LATEST with the last batch's base offset + 1.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio
from prometheus_client import CollectorRegistry

from .admin import Admin
from .consumer import Consumer
from .metrics import serve
from .producer import Producer
from .protocol.api import ApiKey
from .testing import EmbeddedBroker, FaultProxy
from .testing.broker import Kind
from .types import NewTopic, TopicPartition

TOPIC = "akresil-demo"
GROUP = "akresil-demo-group"
NOT_LEADER_OR_FOLLOWER = 6
#: records per send_many call of one producer task
CHUNK = 200


@dataclass
class DemoState:
    """What the demo counts while it runs; the summary is computed from it."""

    sent: int = 0
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)      # value id -> (partition, offset)
    failed: dict[int, str] = field(default_factory=dict)                 # value id -> error
    consumed: dict[int, tuple[int, int]] = field(default_factory=dict)   # value id -> where it was read
    consumed_duplicates: int = 0
    consumer_error: str | None = None
    highwater: dict[int, int | None] = field(default_factory=dict)    # partition -> high watermark
    actions: dict[str, int] = field(default_factory=dict)
    last_action: str = "-"

    def note(self, action: str, detail: str) -> None:
        self.actions[action] = self.actions.get(action, 0) + 1
        self.last_action = detail


async def run_demo(*, duration_s: float = 15.0, partitions: int = 6, metrics_port: int = 0, kind: Kind = "auto",
                   rate: int = 10_000, group: bool = False, out: TextIO) -> bool:
    """Run the demo on the embedded broker ``kind`` (default: Apache Kafka where Java 17+ is, else Tansu); True
    when every check in the summary passed."""
    started = time.monotonic()

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    wanted = "Apache Kafka where Java is, else Tansu" if kind == "auto" else kind
    say(f"akresil demo: starting the embedded broker ({wanted}) behind a 3-node fault proxy ...")
    registry = CollectorRegistry()
    state = DemoState()
    async with EmbeddedBroker(kind=kind) as broker, FaultProxy(broker.bootstrap_servers, nodes=3) as proxy:
        bootstrap = proxy.bootstrap_servers
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(TOPIC, partitions)], ignore_existing=True)
        with serve(metrics_port, registry) as server:
            running = f"Apache Kafka {broker.kafka_version}" if broker.kind == "kafka" else broker.kind
            say(f"  broker {broker.bootstrap_servers} ({running}, started in {time.monotonic() - started:.1f} s); "
                f"virtual nodes {bootstrap}")
            say(f"  topic {TOPIC} ({partitions} partitions); metrics at {server.url}")
            async with Producer(bootstrap_servers=bootstrap, client_id="demo-producer", linger_ms=5,
                                retry_backoff_ms=50, metrics_registry=registry) as producer:
                caught_up = anyio.Event()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_consume, bootstrap, registry, partitions, group, state, caught_up)
                    async with anyio.create_task_group() as chaos_tg:
                        chaos_tg.start_soon(_chaos, proxy, duration_s, state)
                        chaos_tg.start_soon(_progress, state, started, duration_s, registry, out)
                        await _produce(producer, duration_s, rate, state)
                        chaos_tg.cancel_scope.cancel()
                    await producer.flush()
                    await proxy.aclear()
                    state.last_action = "faults cleared"
                    with anyio.move_on_after(30):
                        while len(state.consumed) < len(state.acked) and state.consumer_error is None:
                            await anyio.sleep(0.05)
                    caught_up.set()
            _progress_line(state, started, duration_s, registry, out, final=True)
    return _summary(state, partitions, registry, time.monotonic() - started, say)


async def _produce(producer: Producer, duration_s: float, rate: int, state: DemoState) -> None:
    """Two sender tasks at ``rate`` records/s in total, each value an increasing id."""
    deadline = time.monotonic() + duration_s
    next_id = 0

    async def sender() -> None:
        nonlocal next_id
        interval = 2 * CHUNK / rate
        while time.monotonic() < deadline:
            tick = time.monotonic()
            ids = list(range(next_id, next_id + CHUNK))
            next_id += CHUNK
            state.sent += CHUNK
            results = await producer.send_many(
                TOPIC, [(b"k%d" % (i % 97), b"%d" % i) for i in ids], raise_on_error=False)
            for i, res in zip(ids, results):
                if isinstance(res, BaseException):
                    state.failed[i] = f"{type(res).__name__}: {res}"
                else:
                    state.acked[i] = (res.partition, res.offset)
            await anyio.sleep(max(0.0, interval - (time.monotonic() - tick)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        tg.start_soon(sender)


async def _consume(bootstrap: str, registry: CollectorRegistry, partitions: int, group: bool, state: DemoState,
                   caught_up: anyio.Event) -> None:
    """Read until the producer side says everything acknowledged was seen, then note the high watermarks."""
    common: dict[str, Any] = dict(bootstrap_servers=bootstrap, client_id="demo-consumer",
                                  auto_offset_reset="earliest", metrics_registry=registry)
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    try:
        if group:
            consumer = Consumer(TOPIC, group_id=GROUP, **common)
        else:
            consumer = Consumer(**common)
            consumer.assign(tps)
        async with consumer:
            while not caught_up.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for records in batches.values():
                    for rec in records:
                        assert rec.value is not None, "the demo writes a value in every record"
                        value = int(rec.value)
                        if value in state.consumed:
                            state.consumed_duplicates += 1
                        else:
                            state.consumed[value] = (rec.partition, rec.offset)
            state.highwater = {tp.partition: consumer.highwater(tp) for tp in tps}
    except Exception as exc:   # noqa: BLE001 - reported in the summary, which then fails
        state.consumer_error = f"{type(exc).__name__}: {exc}"


async def _chaos(proxy: FaultProxy, duration_s: float, state: DemoState) -> None:
    """Cycle through the faults, one every ``duration / 8`` seconds (at least 0.5 s apart)."""
    step = max(0.5, duration_s / 8)
    nodes = list(proxy.node_ids)
    n = 0
    while True:
        await anyio.sleep(step)
        node = nodes[n % len(nodes)]
        action = n % 4
        if action == 0:
            moved = await proxy.amove_all_leaders(None, topic=TOPIC)
            state.note("leader moves", f"moved {len(moved)} leader(s) to the next node")
        elif action == 1:
            await proxy.athrottle(node, 500, count=2)
            state.note("throttles", f"throttled node {node} (500 ms)")
        elif action == 2:
            await proxy.afail_requests(ApiKey.PRODUCE, NOT_LEADER_OR_FOLLOWER, count=2, node=node)
            state.note("failed produce requests", f"node {node} fails 2 Produce requests")
        else:
            dropped = await proxy.adrop_connections(node)
            state.note("dropped connections", f"dropped {dropped} connection(s) to node {node}")
        n += 1


def _sample_sum(registry: CollectorRegistry, name: str, **labels: str) -> float:
    total = 0.0
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def _progress_line(state: DemoState, started: float, duration_s: float, registry: CollectorRegistry,
                   out: TextIO, *, final: bool = False) -> None:
    elapsed = time.monotonic() - started
    retries = _sample_sum(registry, "akresil_producer_batch_retries_total")
    throttles = _sample_sum(registry, "akresil_throttle_seconds_count")
    line = (f"[{elapsed:5.1f}s] sent {state.sent:>7} acked {len(state.acked):>7} "
            f"consumed {len(state.consumed):>7} | retries {retries:.0f} throttles {throttles:.0f} | "
            f"{state.last_action}")
    if out.isatty():
        print("\r\033[K" + line, end="\n" if final else "", file=out, flush=True)
    else:
        print(line, file=out, flush=True)


async def _progress(state: DemoState, started: float, duration_s: float, registry: CollectorRegistry,
                    out: TextIO) -> None:
    period = 0.25 if out.isatty() else 1.0
    while True:
        await anyio.sleep(period)
        _progress_line(state, started, duration_s, registry, out)


def _summary(state: DemoState, partitions: int, registry: CollectorRegistry, elapsed: float, say: Any) -> bool:
    acked = len(state.acked)
    # A retry of a batch the broker had already appended (its answer lost with a dropped connection) is
    # acknowledged without an offset when the broker answers DUPLICATE_SEQUENCE_NUMBER (Tansu does; Apache Kafka
    # returns the original offset): offset -1, as the Java client reports. Such a record's place is where the
    # consumer read it; every other acknowledgement must name exactly that place.
    unknown = {i for i, (_, offset) in state.acked.items() if offset < 0}
    mismatched = sum(1 for i, place in state.acked.items() if i not in unknown and state.consumed.get(i) != place)
    placed = {i: (state.consumed.get(i, place) if i in unknown else place) for i, place in state.acked.items()}
    distinct_offsets = len(set(placed.values()))
    by_partition: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for partition, offset in placed.values():
        by_partition[partition].append(offset)
    dense = all(sorted(offsets) == list(range(len(offsets))) for offsets in by_partition.values())
    in_log = sum(hw for hw in state.highwater.values() if hw is not None)
    log_ok = dense and all(state.highwater.get(p) == len(offsets) for p, offsets in by_partition.items())
    consumed_ok = state.consumed.keys() == state.acked.keys() and state.consumed_duplicates == 0
    unknown_note = (f" ({len(unknown)} acknowledged without an offset: the broker answered a retried batch"
                    " DUPLICATE_SEQUENCE_NUMBER; placed where they were read)" if unknown else "")
    checks: list[tuple[str, bool]] = [
        (f"sent {state.sent} == acked {acked} (failed {len(state.failed)})", state.sent == acked),
        (f"acked records at distinct offsets: {distinct_offsets} == {acked}{unknown_note}",
         distinct_offsets == acked),
        (f"each acknowledged offset is where its record was read: {mismatched} differ", mismatched == 0),
        (f"log: offsets 0..n-1 per partition, high watermarks sum to {in_log} == acked {acked}", log_ok),
        (f"consumed {len(state.consumed)} == acked {acked}, duplicates {state.consumed_duplicates}"
         + (f" ({state.consumer_error})" if state.consumer_error else ""), consumed_ok),
    ]
    say("")
    say(f"summary after {elapsed:.1f} s")
    faults = ", ".join(f"{k} {v}" for k, v in sorted(state.actions.items())) or "none"
    say(f"  faults injected: {faults}")
    metric_lines = [
        ("throttled responses", _sample_sum(registry, "akresil_throttle_seconds_count")),
        ("batch retries", _sample_sum(registry, "akresil_producer_batch_retries_total")),
        ("immediate retries (KIP-951)", _sample_sum(registry, "akresil_producer_immediate_retries_total")),
        ("leader hints accepted", _sample_sum(registry, "akresil_leader_hints_total", outcome="accepted")),
        ("metadata refreshes", _sample_sum(registry, "akresil_metadata_refreshes_total")),
        ("connections opened", _sample_sum(registry, "akresil_connects_total")),
    ]
    say("  metrics: " + ", ".join(f"{name} {value:.0f}" for name, value in metric_lines))
    for text, ok in checks:
        say(f"  [{'ok' if ok else 'FAIL'}] {text}")
    if state.failed:
        sample = next(iter(state.failed.values()))
        say(f"  first delivery failure: {sample}")
    passed = all(ok for _, ok in checks)
    say("PASS: nothing lost, nothing duplicated" if passed else "FAIL: see the checks above")
    return passed
