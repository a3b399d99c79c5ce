"""Cost against scale: partitions 10 -> 50,000 (one topic and many), brokers 3 -> 30, 10,000 topics of metadata, on
librdkafka's mock cluster (or the consume side on Apache Kafka, ``--harness apache``); akresil vs confluent-kafka vs
aiokafka, in one run.

Every case is ``PARTITIONS[/TOPICS][@BROKERS]`` (``10000/1000@3``: 10,000 partitions in 1,000 topics of 10, on 3
brokers). Each measurement runs in a process of its own (the mock lives in this one), so its CPU seconds
(``time.process_time``: every thread of the client's process, librdkafka's and the JVM's included) and its peak RSS
are the client's alone. (No Java column: the Java client reads the mock's malformed ApiVersions answer as a
throttle of 1,179,648 ms and waits it out, see ``JAVA_NOTE``.)

* **produce**: ``--records`` records of 100 B, record *i* to the *i*-th partition of the case round robin (an
  explicit partition: every client carries the same load per partition, whatever its partitioner does), acks=all,
  linger 5 ms, each client's everyday idiom (``PRODUCE_IDIOMS``) and akresil's fastest path (``send_many``), into
  a fresh mock cluster; timed from the first record handed over to the last acknowledgement, after an untimed
  warm-up (a record to every partition of the case, so every client knows their metadata, and ``--warmup``
  records to another topic: the steady state of a service, not its first second);
* **consume**: every partition of a cluster filled once (by akresil's ``send_many``), read from offset 0 with
  manual assignment, each client's everyday idiom (``CONSUME_IDIOMS``); timed from creating the consumer to the
  last record, after an untimed warm-up in the same process (``--consume-warmup`` records of another topic read
  the same way by a consumer of their own, so one-time costs such as imports are not in the timed part, as the
  produce warm-up keeps them out of the produce figures). Offset 0, not "the beginning": librdkafka resolves ``OFFSET_BEGINNING`` with one ListOffsets
  request per partition (10,000 at 10,000 partitions, measured on the mock), which would time that instead of
  the reading.

``--harness apache`` measures the **consume** side on Apache Kafka, the reference broker (the mock answers a
Fetch v12+ with records for ~214 partitions whatever ``max_bytes`` is, and keeps no fetch sessions): a local KRaft
cluster (``akresil.testing.KafkaCluster``, a JVM per broker and one controller, ``--kafka-heap-mb`` each) per
case, RF 1, filled and read as above; each round also counts the client's own Fetch requests (``fetch_requests``:
akresil's and aiokafka's connections counted in the worker, librdkafka's from its ``debug=protocol`` log). A
KRaft controller refuses one operation of more than 10,000 records, so a topic of more than 5,000 partitions is
created at 5,000 and raised in steps of 5,000 (CreatePartitions). Produce idioms and the asyncio floor are mock-only.

Before the first round akresil is compiled to bytecode (``akresil.bench.bytecode``), as ``pip install`` does: the
consume window includes the modules the consumer imports on its first Fetch, and from a checkout with
``PYTHONDONTWRITEBYTECODE=1`` each round would compile them (``--no-compile`` measures that case; the JSON's
``akresil_bytecode`` says which).

Figures per round: wall seconds, CPU seconds (and µs per record), records/s, the base RSS before the timed work
and its peak during it (the kernel's peak is reset first), and that growth per partition. Each case runs
``--rounds`` rounds, the idiom order rotating, and reports the **median and the worst round**. An idiom whose round
takes longer than ``--max-round-s`` is not run at larger partition counts (``skipped`` says so). ``targets``
compares the issue-35 targets. Prints one JSON document; ``--plot`` draws cost against partitions.

    python benchmarks/bench_scale.py [--cases 10,1000,10000,50000,...] [--rounds 3] [--records 200000]
        [--plot docs/img/bench/scale.png] > bench-results/scale.json
    python benchmarks/bench_scale.py --harness apache [--cases 10000] [--rounds 3] > bench-results/scale-apache.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

VALUE = b"v" * 100
LINGER_MS = 5

#: produce idioms: the name in the results -> how the worker spells it (see ``produce_body``)
PRODUCE_IDIOMS = (
    "akresil gather",       # await enqueue() per record, asyncio.gather(*futures)
    "akresil callback",     # await enqueue(..., on_delivery=cb) per record, wait for the last callback
    "akresil tasks",        # asyncio.gather(*(send() for each record)): a task per record awaiting send
    "akresil send_many",    # the fastest path: one send_many per partition, gathered
    "confluent callback",   # produce(on_delivery=cb) + poll(0) per record (BufferError: poll(0.1)), flush()
    "aiokafka gather",      # await send() per record, asyncio.gather(*futures)
)
CONSUME_IDIOMS = (
    "akresil getmany",      # await getmany(timeout_ms=1000) (default max_records: max_poll_records 500)
    "akresil async_for",    # async for record in consumer
    "confluent consume",    # consume(num_messages=500, timeout=1.0)
    "confluent poll",       # poll(1.0): one message per call
    "aiokafka getmany",     # await getmany(timeout_ms=1000)
)
#: why the Java client has no column here (found running kafka-clients 4.4.0 against librdkafka 2.16's mock)
JAVA_NOTE = ("kafka-clients 4.4 sends ApiVersions v4; librdkafka 2.16's mock answers it with a body the Java "
             "client parses as a throttle of 1,179,648 ms (NetworkClient: 'Connection to node -1 is throttled'), "
             "so it never sends a record (akresil falls back to ApiVersions v0-v2 there, docs/brokers.md)")
#: the consume-side cases on Apache Kafka (``--harness apache``): a JVM per broker on this machine, so no 30 brokers
APACHE_CASES = ("10000",)
#: brokers a local Apache Kafka cluster can have (``KafkaCluster``)
APACHE_MAX_BROKERS = 9
#: partitions per CreateTopics / CreatePartitions: a KRaft controller refuses an operation of more than 10,000 records
#: ("Unable to perform excessively large batch operation"), a topic being one record and each partition another
APACHE_PARTITIONS_PER_OP = 5000
DEFAULT_CASES = ("10", "1000", "10000", "50000", "1000/100", "10000/1000", "50000/5000", "10000/10000",
                 "1000@30", "10000@30")
#: the cases the plot draws against partitions: one topic, 3 brokers (solid) and 10 partitions per topic (dashed)
_CASE = re.compile(r"^(\d+)(?:/(\d+))?(?:@(\d+))?$")


@dataclass(frozen=True)
class Case:
    partitions: int
    topics: int = 1
    brokers: int = 3

    @property
    def name(self) -> str:
        return f"{self.partitions}/{self.topics}@{self.brokers}"

    @property
    def per_topic(self) -> int:
        return self.partitions // self.topics


def parse_case(text: str) -> Case:
    """``PARTITIONS[/TOPICS][@BROKERS]``; ValueError naming ``--cases`` for anything else."""
    m = _CASE.match(text.strip())
    if not m:
        raise ValueError(f"--cases: {text!r} is not PARTITIONS[/TOPICS][@BROKERS] (e.g. 10000/1000@3)")
    case = Case(int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 3))
    if case.partitions < 1 or case.topics < 1 or case.brokers < 1:
        raise ValueError(f"--cases: {text!r}: partitions, topics and brokers must be >= 1")
    if case.partitions % case.topics:
        raise ValueError(f"--cases: {text!r}: {case.partitions} partitions do not divide into {case.topics} topics")
    return case


def layout(prefix: str, topics: int, per_topic: int) -> list[tuple[str, int]]:
    """Every (topic, partition) of a case, in the order records go round robin."""
    return [(f"{prefix}-{t}", p) for t in range(topics) for p in range(per_topic)]


# ============================================================================================ the worker process
def _status_kib(field: str) -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return float(line.split()[1])
    except OSError:
        pass
    return -1.0


def _reset_peak() -> float:
    """The current RSS in KiB, after resetting the kernel's peak RSS (VmHWM) to it (Linux ``clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_kib("VmRSS")


class Timed:
    """Wall and CPU seconds and peak RSS of one section of the worker."""

    def __enter__(self) -> Timed:
        gc.collect()
        self.base_kib = _reset_peak()
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self.t0
        self.cpu_s = time.process_time() - self.c0
        self.peak_kib = _status_kib("VmHWM")

    def figures(self, records: int) -> dict[str, float]:
        return {"records": records, "wall_s": self.wall_s, "cpu_s": self.cpu_s, "peak_rss_kib": self.peak_kib,
                "base_rss_kib": self.base_kib}


async def _warm_up_released() -> None:
    """Yield once before the clock starts. Until the worker's task next yields, the event-loop handle that woke
    it from the warm-up's last ``await`` keeps what that awaited future held alive (at 10,000 partitions a
    ``gather`` of 10,000 finished tasks and their coroutines): every full collection of the timed part would walk
    the warm-up."""
    await asyncio.sleep(0)


async def _akresil_produce(spec: dict[str, Any]) -> dict[str, float]:
    from akresil import Producer
    idiom, n = spec["idiom"], spec["records"]
    tps = layout(spec["prefix"], spec["topics"], spec["per_topic"])
    count = len(tps)
    async with Producer(bootstrap_servers=spec["bootstrap"], linger_ms=LINGER_MS) as p:
        warm = [(None, VALUE)] * max(1, spec["warmup"] // spec["brokers"])
        await asyncio.gather(*(p.send_many("warm", warm, partition=b) for b in range(spec["brokers"])))
        await asyncio.gather(*(p.send(topic, VALUE, partition=partition) for topic, partition in tps))
        items: list[list[tuple[None, bytes]]] = []
        if idiom == "akresil send_many":     # the caller's data, as it holds it: built before the clock starts
            items = [[(None, VALUE)] * (n // count + (1 if i < n % count else 0)) for i in range(count)]
        await _warm_up_released()
        with Timed() as timed:
            if idiom == "akresil gather":
                futs = []
                for i in range(n):
                    topic, partition = tps[i % count]
                    futs.append(await p.enqueue(topic, VALUE, partition=partition))
                await asyncio.gather(*futs)
            elif idiom == "akresil callback":
                done = asyncio.Event()
                left = [n]
                errors: list[BaseException] = []

                def on_delivery(md: Any, err: BaseException | None) -> None:
                    if err is not None:
                        errors.append(err)
                    left[0] -= 1
                    if not left[0]:
                        done.set()
                for i in range(n):
                    topic, partition = tps[i % count]
                    await p.enqueue(topic, VALUE, partition=partition, on_delivery=on_delivery)
                await done.wait()
                if errors:
                    raise errors[0]
            elif idiom == "akresil tasks":
                await asyncio.gather(*(p.send(topic, VALUE, partition=partition)
                                       for topic, partition in (tps[i % count] for i in range(n))))
            elif idiom == "akresil send_many":
                await asyncio.gather(*(p.send_many(topic, rows, partition=partition)
                                       for (topic, partition), rows in zip(tps, items) if rows))
            else:
                raise ValueError(f"unknown idiom {idiom!r}")
    return timed.figures(n)


async def _aiokafka_produce(spec: dict[str, Any]) -> dict[str, float]:
    from aiokafka import AIOKafkaProducer
    n = spec["records"]
    tps = layout(spec["prefix"], spec["topics"], spec["per_topic"])
    count = len(tps)
    p = AIOKafkaProducer(bootstrap_servers=spec["bootstrap"], linger_ms=LINGER_MS, acks="all")
    await p.start()
    try:
        warm = [await p.send("warm", VALUE, partition=i % spec["brokers"]) for i in range(spec["warmup"])]
        warm += [await p.send(topic, VALUE, partition=partition) for topic, partition in tps]
        await asyncio.gather(*warm)
        await _warm_up_released()
        with Timed() as timed:
            futs = []
            for i in range(n):
                topic, partition = tps[i % count]
                futs.append(await p.send(topic, VALUE, partition=partition))
            await asyncio.gather(*futs)
    finally:
        await p.stop()
    return timed.figures(n)


def _confluent_producer(bootstrap: str) -> Any:
    import confluent_kafka
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": LINGER_MS, "acks": "all",
                                     "log_level": 3})


def _confluent_produce(spec: dict[str, Any]) -> dict[str, float]:
    n = spec["records"]
    tps = layout(spec["prefix"], spec["topics"], spec["per_topic"])
    count = len(tps)
    p = _confluent_producer(spec["bootstrap"])
    failed: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(err)

    def produce(topic: str, partition: int) -> None:
        while True:
            try:
                p.produce(topic, VALUE, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:        # the local queue is full: serve callbacks, then try again
                p.poll(0.1)
        p.poll(0)

    for i in range(spec["warmup"]):
        produce("warm", i % spec["brokers"])
    for topic, partition in tps:
        produce(topic, partition)
    p.flush(120)
    with Timed() as timed:
        for i in range(n):
            topic, partition = tps[i % count]
            produce(topic, partition)
        left = p.flush(600)
    if left or failed:
        raise RuntimeError(f"confluent-kafka: {left} records not delivered, {len(failed)} failed: {failed[:1]}")
    return timed.figures(n)


def _count_fetches(cls: Any, method: str, is_fetch: Callable[[Any], bool]) -> list[int]:
    """Wrap ``cls.method`` (a connection's send) to count the Fetch requests this process sends; one comparison
    per request, nothing per partition or record. Returns the one-element counter."""
    count = [0]
    original = getattr(cls, method)

    def counted(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        if is_fetch(request):
            count[0] += 1
        return original(self, request, *args, **kwargs)
    setattr(cls, method, counted)
    return count


async def _akresil_consume(spec: dict[str, Any]) -> dict[str, float]:
    from akresil import Consumer, TopicPartition
    idiom, n = spec["idiom"], spec["records"]
    tps = [TopicPartition(t, p) for t, p in layout(spec["prefix"], spec["topics"], spec["per_topic"])]
    fetches: list[int] | None = None
    if spec.get("count_fetches"):
        from akresil.net.connection import Connection
        from akresil.protocol.api import ApiKey
        fetches = _count_fetches(Connection, "request_raw", lambda api_key: api_key == ApiKey.FETCH)

    async def read(tps: list[TopicPartition], n: int) -> int:
        got = 0
        async with Consumer(bootstrap_servers=spec["bootstrap"], auto_offset_reset="earliest") as c:
            c.assign(tps)
            for tp in tps:
                c.seek(tp, 0)
            if idiom == "akresil getmany":
                while got < n:
                    batches = await c.getmany(timeout_ms=1000)
                    got += sum(map(len, batches.values()))
            elif idiom == "akresil async_for":
                async for _ in c:
                    got += 1
                    if got >= n:
                        break
            else:
                raise ValueError(f"unknown idiom {idiom!r}")
        return got

    if spec.get("consume_warmup"):
        await read([TopicPartition(t, p) for t, p in _warm_partitions(spec)], spec["consume_warmup"])
    await _warm_up_released()
    with Timed() as timed:
        got = await read(tps, n)
    return _with_fetches(timed.figures(got), fetches)


#: the topic the produce idioms warm up on and the consume idioms read first (``--consume-warmup``)
WARM_TOPIC = "warm"


def _warm_partitions(spec: dict[str, Any]) -> list[tuple[str, int]]:
    """What a consume round reads before its timed part (``--consume-warmup`` records, written by the fill), with
    the same idiom in a consumer of its own: the process's one-time costs (imports: akresil's record codec loads
    aiokafka's, ~0.1 s of a 1 s round at 10,000 partitions) are then out of the timed part for every client, as the
    produce idioms' warm-up takes them out of theirs. The timed part still creates its consumer, fetches its
    metadata and reads every partition from offset 0."""
    return [(WARM_TOPIC, b) for b in range(spec["brokers"])]


def _with_fetches(figures: dict[str, float], fetches: list[int] | None) -> dict[str, float]:
    if fetches is not None:
        figures["fetch_requests"] = fetches[0]
    return figures


async def _aiokafka_consume(spec: dict[str, Any]) -> dict[str, float]:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    n = spec["records"]
    tps = [TopicPartition(t, p) for t, p in layout(spec["prefix"], spec["topics"], spec["per_topic"])]
    fetches: list[int] | None = None
    if spec.get("count_fetches"):
        from aiokafka.conn import AIOKafkaConnection
        fetches = _count_fetches(AIOKafkaConnection, "send",
                                 lambda request: type(request).__name__.startswith("FetchRequest"))

    async def read(tps: list[TopicPartition], n: int) -> int:
        got = 0
        c = AIOKafkaConsumer(bootstrap_servers=spec["bootstrap"], auto_offset_reset="earliest",
                             enable_auto_commit=False)
        await c.start()
        try:
            c.assign(tps)
            for tp in tps:
                c.seek(tp, 0)
            while got < n:
                batches = await c.getmany(timeout_ms=1000)
                got += sum(map(len, batches.values()))
        finally:
            await c.stop()
        return got

    if spec.get("consume_warmup"):
        await read([TopicPartition(t, p) for t, p in _warm_partitions(spec)], spec["consume_warmup"])
    await _warm_up_released()
    with Timed() as timed:
        got = await read(tps, n)
    return _with_fetches(timed.figures(got), fetches)


def _confluent_consume(spec: dict[str, Any]) -> dict[str, float]:
    import confluent_kafka
    idiom, n = spec["idiom"], spec["records"]
    tps = layout(spec["prefix"], spec["topics"], spec["per_topic"])
    config: dict[str, Any] = {"bootstrap.servers": spec["bootstrap"], "group.id": "bench-scale",
                              "enable.auto.commit": False, "log_level": 3}

    def read(config: dict[str, Any], tps: list[tuple[str, int]], n: int) -> int:
        got = 0
        c = confluent_kafka.Consumer(config)
        try:
            c.assign([confluent_kafka.TopicPartition(t, p, 0) for t, p in tps])
            if idiom == "confluent consume":
                while got < n:
                    got += sum(1 for m in c.consume(num_messages=500, timeout=1.0) if m.error() is None)
            else:
                while got < n:
                    m = c.poll(1.0)
                    if m is not None and m.error() is None:
                        got += 1
        finally:
            c.close()
        return got

    if spec.get("consume_warmup"):
        read(dict(config), _warm_partitions(spec), spec["consume_warmup"])
    sent = _SentFetches()
    if spec.get("count_fetches"):      # librdkafka logs a line per request sent (two per round trip in all)
        import logging
        logger = logging.getLogger("bench_scale.librdkafka")
        logger.addHandler(sent)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        del config["log_level"]
        config.update({"debug": "protocol", "logger": logger})
    with Timed() as timed:
        got = read(config, tps, n)
    return _with_fetches(timed.figures(got), [sent.count] if spec.get("count_fetches") else None)


class _SentFetches(logging.Handler):
    """Counts librdkafka's ``Sent FetchRequest`` debug lines (``debug=protocol``)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "Sent FetchRequest" in record.getMessage():
            self.count += 1


#: the per-record idioms with no client under them: what asyncio itself costs per record (see ``asyncio_floor``)
FLOOR_IDIOMS = ("gather", "tasks")


async def _asyncio_floor(spec: dict[str, Any]) -> dict[str, float]:
    """The idiom's own cost in this interpreter: a future per record, resolved the way a client resolves it (a
    loop callback per batch of acknowledgements), gathered (``gather``); or a task per record awaiting such a
    future (``tasks``). A client's per-record CPU under one of these idioms is at least this."""
    loop = asyncio.get_running_loop()
    n, batch = spec["records"], 1000
    futs: list[asyncio.Future[None]] = []

    def resolve(first: int) -> None:
        for f in futs[first:first + batch]:
            f.set_result(None)

    async def one() -> None:
        f: asyncio.Future[None] = loop.create_future()
        futs.append(f)
        await f

    with Timed() as timed:
        if spec["idiom"] == "gather":
            for _ in range(n):
                futs.append(loop.create_future())
            gathered = asyncio.gather(*futs)
        else:
            gathered = asyncio.gather(*(one() for _ in range(n)))
            while len(futs) < n:
                await asyncio.sleep(0)
        for first in range(0, n, batch):
            loop.call_soon(resolve, first)
        await gathered
    return timed.figures(n)


def worker(spec: dict[str, Any]) -> dict[str, float]:
    """One measurement in this process (``--worker``)."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    idiom = spec["idiom"]
    client = idiom.split()[0]
    if spec["kind"] == "fill":
        from akresil import Producer
        tps = layout(spec["prefix"], spec["topics"], spec["per_topic"])
        n, count = spec["records"], len(tps)

        async def fill() -> None:
            async with Producer(bootstrap_servers=spec["bootstrap"], linger_ms=LINGER_MS) as p:
                for start in range(0, count, 1000):    # a bounded number of calls in flight at once
                    await asyncio.gather(*(
                        p.send_many(t, [(None, VALUE)] * (n // count + (1 if i < n % count else 0)), partition=q)
                        for i, (t, q) in enumerate(tps[start:start + 1000], start)
                        if n // count or i < n % count))
                warm = spec.get("consume_warmup", 0)
                if warm:            # what each consume round reads first, untimed (``_warm_partitions``)
                    brokers = spec["brokers"]
                    await asyncio.gather(*(
                        p.send_many(WARM_TOPIC, [(None, VALUE)] * (warm // brokers + (1 if b < warm % brokers else 0)),
                                    partition=b) for b in range(brokers) if warm // brokers or b < warm % brokers))
        asyncio.run(fill())
        return {"records": n}
    if spec["kind"] == "floor":
        return asyncio.run(_asyncio_floor(spec))
    if spec["kind"] == "produce":
        if client == "akresil":
            return asyncio.run(_akresil_produce(spec))
        if client == "aiokafka":
            return asyncio.run(_aiokafka_produce(spec))
        return _confluent_produce(spec)
    if client == "akresil":
        return asyncio.run(_akresil_consume(spec))
    if client == "aiokafka":
        return asyncio.run(_aiokafka_consume(spec))
    return _confluent_consume(spec)


# ============================================================================================ the orchestrator
def run_worker(spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; its last stdout line is its JSON result."""
    load = os.getloadavg()[0]
    try:
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout_s:g} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {done.returncode}: {' | '.join(tail)}"}
    result: dict[str, Any] = json.loads(lines[-1])
    result["load_1m"] = round((load + os.getloadavg()[0]) / 2, 2)
    return result


def new_cluster(case: Case, prefix: str) -> Any:
    """A fresh mock cluster with the case's topics and a warm-up topic (a partition per broker)."""
    from akresil.testing.rdkafka_mock import MockCluster
    mock = MockCluster(case.brokers)
    for t in range(case.topics):
        mock.create_topic(f"{prefix}-{t}", case.per_topic, 1)
    mock.create_topic(WARM_TOPIC, case.brokers, 1)
    return mock


@dataclass
class Served:
    """The cluster a case's consumers read: its bootstrap servers and, on Apache Kafka, its JVMs' pids (brokers and
    controller), whose CPU seconds each round also reports (``broker_cpu_s``: the broker's cost of serving it)."""
    bootstrap: str
    jvm_pids: list[int]

    def jvm_cpu_s(self) -> float | None:
        if not self.jvm_pids:
            return None
        ticks = 0
        for pid in self.jvm_pids:
            with open(f"/proc/{pid}/stat") as f:       # utime and stime: fields 14 and 15, after "(comm)"
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def settle(self, idle_cores: float = 0.3, window_s: float = 2.0, limit_s: float = 120.0) -> tuple[float, float]:
        """Wait until the JVMs use less than ``idle_cores`` over ``window_s`` (after creating thousands of
        partitions and the fill the brokers stay busy for a while, and a round timed then pays for it; an idle
        3-broker cluster uses ~0.1-0.2 of a core), at most ``limit_s``. Returns the seconds waited and the cores
        the JVMs used in the last window (their idle cost, part of every round's ``broker_cpu_s``)."""
        t0 = time.monotonic()
        before = self.jvm_cpu_s()
        cores = 0.0
        while before is not None and time.monotonic() - t0 < limit_s:
            time.sleep(window_s)
            after = self.jvm_cpu_s()
            assert after is not None
            cores = (after - before) / window_s
            if cores < idle_cores:
                break
            before = after
        return time.monotonic() - t0, cores


@contextlib.contextmanager
def consume_cluster(case: Case, args: argparse.Namespace) -> Any:
    """The cluster the consume idioms of a case read: a fresh mock, or (``--harness apache``) a fresh Apache Kafka
    cluster with the case's topics, every partition led. Yields a ``Served``."""
    if args.harness == "mock":
        with new_cluster(case, "c") as mock:
            yield Served(mock.bootstrap_servers, [])
        return
    from akresil.testing import KafkaCluster
    with KafkaCluster(brokers=case.brokers, heap_mb=args.kafka_heap_mb) as cluster:
        asyncio.run(create_apache_topics(cluster, case, "c"))
        pids = [node.java_pid() for node in cluster.nodes.values()]
        yield Served(cluster.bootstrap_servers, [pid for pid in pids if pid is not None])


def apache_topic_ops(case: Case, prefix: str) -> list[tuple[str, list[str], int]]:
    """The admin operations that make the case's topics on Apache Kafka, in order: ``("create", names,
    partitions)`` (CreateTopics) and ``("raise", [name], total)`` (CreatePartitions), each under the controller's
    10,000-record limit per operation (a record per topic and per partition)."""
    names = [f"{prefix}-{t}" for t in range(case.topics)]
    first = min(case.per_topic, APACHE_PARTITIONS_PER_OP)
    per_op = max(1, APACHE_PARTITIONS_PER_OP // first)
    ops = [("create", names[start:start + per_op], first) for start in range(0, len(names), per_op)]
    for total in range(first + APACHE_PARTITIONS_PER_OP, case.per_topic + APACHE_PARTITIONS_PER_OP,
                       APACHE_PARTITIONS_PER_OP):
        ops += [("raise", [name], min(total, case.per_topic)) for name in names]
    return ops


async def create_apache_topics(cluster: Any, case: Case, prefix: str) -> None:
    """The case's topics on Apache Kafka (RF 1, ``apache_topic_ops``), then wait until Metadata gives every
    partition a leader (the brokers create their logs after the controller commits: ~12 s for 10,000 partitions
    on this machine)."""
    from akresil.types import NewTopic
    async with cluster.admin() as admin:
        await admin.create_topics([NewTopic(WARM_TOPIC, num_partitions=case.brokers, replication_factor=1)])
        for op, names, count in apache_topic_ops(case, prefix):
            if op == "create":
                await admin.create_topics([NewTopic(name, num_partitions=count, replication_factor=1)
                                           for name in names])
            else:
                (await admin.create_partitions({names[0]: count})).raise_on_error()
        names = [f"{prefix}-{t}" for t in range(case.topics)]
        deadline = time.monotonic() + 300
        while True:
            led = 0
            for start in range(0, len(names), 1000):
                found = await admin.describe_topics(names[start:start + 1000])
                led += sum(1 for d in found.values() for p in d.partitions if p.leader >= 0)
            warm = await admin.describe_topics([WARM_TOPIC])
            led_warm = sum(1 for d in warm.values() for p in d.partitions if p.leader >= 0)
            if led == case.partitions and led_warm == case.brokers:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Apache Kafka: {led} of {case.partitions} partitions have a leader after 300 s")
            await asyncio.sleep(1)


#: figure -> higher is better (for the worst round)
FIGURES = {"wall_s": False, "cpu_s": False, "cpu_us_per_record": False, "records_per_s": True,
           "peak_rss_mib": False, "rss_growth_mib": False, "kib_per_partition": False, "fetch_requests": False,
           "broker_cpu_s": False, "load_1m": False}


def derive(raw: dict[str, Any], case: Case) -> dict[str, Any]:
    """The reported figures of one round from the worker's raw ones."""
    if "error" in raw:
        return raw
    n = raw["records"] or 1
    growth = max(0.0, raw["peak_rss_kib"] - raw["base_rss_kib"])
    return {"records": raw["records"], "wall_s": raw["wall_s"], "cpu_s": raw["cpu_s"],
            "cpu_us_per_record": raw["cpu_s"] / n * 1e6, "records_per_s": n / raw["wall_s"],
            "peak_rss_mib": raw["peak_rss_kib"] / 1024, "rss_growth_mib": growth / 1024,
            "kib_per_partition": growth / case.partitions, "fetch_requests": raw.get("fetch_requests"),
            "broker_cpu_s": raw.get("broker_cpu_s"), "load_1m": raw.get("load_1m")}


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and worst round of every figure (failed rounds are listed apart)."""
    import statistics
    good = [r for r in rounds if "error" not in r]
    out: dict[str, Any] = {"rounds": len(good)}
    errors = [r["error"] for r in rounds if "error" in r]
    if errors:
        out["errors"] = errors
    for key, higher in FIGURES.items():
        values = [r[key] for r in good if r.get(key) is not None]
        if values:
            out[key] = {"median": round(statistics.median(values), 4),
                        "worst": round(min(values) if higher else max(values), 4),
                        "all": [round(v, 4) for v in values]}
    return out


def run_case(case: Case, args: argparse.Namespace, slow: dict[str, tuple[int, float]],
             progress: Callable[[str], None]) -> dict[str, Any]:
    result: dict[str, Any] = {"case": case.name, "partitions": case.partitions, "topics": case.topics,
                              "brokers": case.brokers, "produce": {}, "consume": {}, "skipped": {}}
    base = {"records": args.records, "warmup": args.warmup, "consume_warmup": args.consume_warmup,
            "topics": case.topics, "per_topic": case.per_topic,
            "brokers": case.brokers, "timeout_s": args.timeout, "count_fetches": args.harness == "apache"}

    def wanted(idiom: str) -> bool:
        if idiom in slow and case.partitions > slow[idiom][0]:
            result["skipped"][idiom] = (f"a round at {slow[idiom][0]} partitions took {slow[idiom][1]:.0f} s "
                                        f"(> --max-round-s {args.max_round_s:g})")
            return False
        return True

    def note(idiom: str, res: dict[str, Any]) -> None:
        if "error" not in res and res["wall_s"] > args.max_round_s and idiom not in slow:
            slow[idiom] = (case.partitions, res["wall_s"])
        shown = {k: round(v, 3) for k, v in res.items() if isinstance(v, (int, float)) and k != "records"}
        progress(f"{case.name} {idiom}: {res.get('error') or shown}")

    produce = [i for i in args.produce if wanted(i)]
    rounds: dict[str, list[dict[str, Any]]] = {i: [] for i in produce}
    for r in range(args.rounds):
        for idiom in produce[r % max(1, len(produce)):] + produce[:r % max(1, len(produce))]:
            if idiom in slow and slow[idiom][0] == case.partitions and rounds[idiom]:
                continue      # too slow for more rounds here
            with new_cluster(case, "p") as mock:
                raw = run_worker({**base, "kind": "produce", "idiom": idiom, "prefix": "p",
                                  "bootstrap": mock.bootstrap_servers}, args.timeout)
            res = derive(raw, case)
            rounds[idiom].append(res)
            note(idiom, res)
    result["produce"] = {i: summarize(v) for i, v in rounds.items()}

    consume = [i for i in args.consume if wanted(i)]
    if consume:
        with consume_cluster(case, args) as served:
            filled = run_worker({**base, "kind": "fill", "idiom": "akresil fill", "prefix": "c",
                                 "bootstrap": served.bootstrap}, args.timeout)
            if served.jvm_pids:
                waited, cores = served.settle()
                result["broker_settle"] = {"waited_s": round(waited, 1), "idle_cores": round(cores, 3)}
            if "error" in filled:
                result["skipped"].update({i: f"filling the topics failed: {filled['error']}" for i in consume})
                consume = []
            rounds = {i: [] for i in consume}
            for r in range(args.rounds):
                for idiom in consume[r % max(1, len(consume)):] + consume[:r % max(1, len(consume))]:
                    if idiom in slow and slow[idiom][0] == case.partitions and rounds[idiom]:
                        continue
                    jvm0 = served.jvm_cpu_s()
                    raw = run_worker({**base, "kind": "consume", "idiom": idiom, "prefix": "c",
                                      "bootstrap": served.bootstrap}, args.timeout)
                    if jvm0 is not None:
                        raw["broker_cpu_s"] = served.jvm_cpu_s() - jvm0   # type: ignore[operator]
                    res = derive(raw, case)
                    rounds[idiom].append(res)
                    note(idiom, res)
        result["consume"] = {i: summarize(v) for i, v in rounds.items()}
    return result


# ============================================================================================ targets and report
def _fig(case: dict[str, Any] | None, kind: str, idiom: str, key: str, which: str) -> float | None:
    try:
        return float(case[kind][idiom][key][which])   # type: ignore[index]
    except (KeyError, TypeError):
        return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def ratios(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Per case: akresil's figure over each peer's, medians and worst rounds (produce: CPU seconds, lower is
    better; consume: records/s, higher is better, and CPU seconds, the figure a loaded machine moves least)."""
    out: dict[str, Any] = {}
    for case in cases:
        per: dict[str, Any] = {}
        for kind, key in (("produce", "cpu_s"), ("consume", "records_per_s"), ("consume", "cpu_s")):
            for mine in case[kind]:
                if not mine.startswith("akresil"):
                    continue
                for peer in case[kind]:
                    if peer.startswith("akresil"):
                        continue
                    per[f"{mine} / {peer} {key}"] = {
                        "median": _ratio(_fig(case, kind, mine, key, "median"), _fig(case, kind, peer, key, "median")),
                        "worst": _ratio(_fig(case, kind, mine, key, "worst"), _fig(case, kind, peer, key, "worst"))}
        out[case["case"]] = per
    return out


def targets(cases: list[dict[str, Any]], floors: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Issue 35's targets, median and worst round, and whether the median meets each. A per-record target also
    gives asyncio's own cost of the idiom (``floor_ratio``: that cost over librdkafka's whole per-record CPU): a
    limit below it cannot be met by any client under that idiom."""
    by = {c["case"]: c for c in cases}
    out: list[dict[str, Any]] = []

    def add(what: str, case: str, kind: str, mine: str, peer: str, key: str, limit: float, higher: bool) -> None:
        c = by.get(case)
        med = _ratio(_fig(c, kind, mine, key, "median"), _fig(c, kind, peer, key, "median"))
        worst = _ratio(_fig(c, kind, mine, key, "worst"), _fig(c, kind, peer, key, "worst"))
        met = None if med is None else (med >= limit if higher else med <= limit)
        out.append({"target": what, "case": case, "median": med, "worst": worst,
                    "limit": f"{'>=' if higher else '<='} {limit}", "met": met})

    add("consumer records/s vs confluent-kafka", "10000/1@3", "consume", "akresil getmany", "confluent consume",
        "records_per_s", 1.0, True)
    for idiom in ("akresil gather", "akresil callback", "akresil tasks", "akresil send_many"):
        add("produce CPU vs confluent-kafka", "10000/1@3", "produce", idiom, "confluent callback", "cpu_s", 1.0,
            False)
    for idiom in ("akresil gather", "akresil callback", "akresil tasks"):
        add("CPU per record vs librdkafka", "10/1@3", "produce", idiom, "confluent callback", "cpu_us_per_record",
            1.5, False)
        floor = (floors or {}).get(idiom.split()[1], {}).get("cpu_us_per_record", {}).get("median")
        peer = _fig(by.get("10/1@3"), "produce", "confluent callback", "cpu_us_per_record", "median")
        if floor is not None:
            out[-1]["asyncio_floor_us"] = floor
            out[-1]["floor_ratio"] = _ratio(floor, peer)
    return out


def plot(cases: list[dict[str, Any]], path: str, broker: str = "librdkafka's mock") -> None:
    """Cost against partitions: produce CPU seconds, consume seconds and memory per partition, log-log; one topic
    on 3 brokers solid, 10 partitions per topic dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    panels = (("produce", "cpu_s", "produce: CPU seconds"), ("consume", "wall_s", "consume: seconds"),
              ("produce", "kib_per_partition", "produce: peak RSS growth, KiB per partition"))
    colors: dict[str, Any] = {}
    palette = plt.get_cmap("tab10")
    for ax, (kind, key, title) in zip(axes, panels):
        for style, select in (("-", lambda c: c["topics"] == 1 and c["brokers"] == 3),
                              ("--", lambda c: c["brokers"] == 3 and c["partitions"] == 10 * c["topics"])):
            chosen = sorted((c for c in cases if select(c)), key=lambda c: c["partitions"])
            idioms = {i for c in chosen for i in c[kind]}
            for idiom in sorted(idioms):
                pts = [(c["partitions"], _fig(c, kind, idiom, key, "median")) for c in chosen]
                pts = [(x, y) for x, y in pts if y is not None and y > 0]
                if len(pts) < 2 and style == "--":
                    continue
                color = colors.setdefault(idiom, palette(len(colors) % 10))
                ax.plot([x for x, _ in pts], [y for _, y in pts], style, marker="o", color=color,
                        label=idiom if style == "-" else None)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("partitions")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"bench_scale on {broker} (3 brokers; solid: one topic, dashed: 10 partitions per topic)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--harness", choices=("mock", "apache"), default="mock",
                   help="librdkafka's mock cluster (default), or Apache Kafka for the consume side")
    p.add_argument("--cases", default=None,
                   help=f"comma-separated PARTITIONS[/TOPICS][@BROKERS] (default: {','.join(DEFAULT_CASES)}; "
                        f"with --harness apache: {','.join(APACHE_CASES)})")
    p.add_argument("--rounds", type=int, default=3, help="rounds per idiom and case (default 3)")
    p.add_argument("--records", type=int, default=200_000, help="records per round (default 200000)")
    p.add_argument("--warmup", type=int, default=20_000, help="untimed records per producer first (default 20000)")
    p.add_argument("--consume-warmup", type=int, default=1000,
                   help="records each consume round reads first, untimed, with the same idiom in a consumer of its "
                        "own (default 1000; 0: timed from a cold process)")
    p.add_argument("--produce", default=None, help="produce idioms (default: all; none with --harness apache)")
    p.add_argument("--consume", default=",".join(CONSUME_IDIOMS), help="consume idioms (default: all)")
    p.add_argument("--max-round-s", type=float, default=120.0,
                   help="an idiom whose round takes longer is not run at more partitions (default 120)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before a round is given up (default 900)")
    p.add_argument("--kafka-heap-mb", type=int, default=512,
                   help="--harness apache: each broker JVM's maximum heap in MiB (default 512)")
    p.add_argument("--plot", default=None, help="write the cost-against-partitions plot here (PNG)")
    p.add_argument("--no-compile", action="store_true",
                   help="do not compile akresil to bytecode first (akresil.bench.bytecode: a checkout run with "
                        "PYTHONDONTWRITEBYTECODE=1 would otherwise time the compiler in each round)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    apache = args.harness == "apache"
    if args.produce is None:
        args.produce = "" if apache else ",".join(PRODUCE_IDIOMS)
    if args.cases is None:
        args.cases = ",".join(APACHE_CASES if apache else DEFAULT_CASES)
    try:
        cases = [parse_case(c) for c in args.cases.split(",") if c.strip()]
    except ValueError as exc:
        p.error(str(exc))
    if apache and args.produce.strip():
        p.error("--produce: --harness apache measures the consume side only (pass --produce \"\")")
    too_many = [c.name for c in cases if apache and c.brokers > APACHE_MAX_BROKERS]
    if too_many:
        p.error(f"--cases: {', '.join(too_many)}: a local Apache Kafka cluster has at most {APACHE_MAX_BROKERS} "
                "brokers")
    if args.kafka_heap_mb < 128:
        p.error("--kafka-heap-mb: must be >= 128")
    for opt, known in (("produce", PRODUCE_IDIOMS), ("consume", CONSUME_IDIOMS)):
        chosen = [i.strip() for i in getattr(args, opt).split(",") if i.strip()]
        bad = [i for i in chosen if i not in known]
        if bad:
            p.error(f"--{opt}: unknown {', '.join(bad)} (choose from {', '.join(known)})")
        setattr(args, opt, chosen)
    for name in ("rounds", "records"):
        if getattr(args, name) < 1:
            p.error(f"--{name}: must be >= 1")
    if args.consume_warmup < 0:
        p.error("--consume-warmup: must be >= 0")

    from akresil.bench.bytecode import compile_akresil
    from akresil.bench.report import environment

    bytecode = "source (--no-compile)" if args.no_compile else compile_akresil()

    def progress(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {line}", file=sys.stderr, flush=True)

    env = environment()
    slow: dict[str, tuple[int, float]] = {}
    results = [run_case(c, args, slow, progress) for c in sorted(cases, key=lambda c: (c.partitions, c.topics,
                                                                                        c.brokers))]
    floors: dict[str, Any] = {}
    for idiom in () if apache else FLOOR_IDIOMS:      # the floors explain produce targets: mock runs only
        rounds = []
        for _ in range(args.rounds):
            raw = run_worker({"kind": "floor", "idiom": idiom, "records": args.records}, args.timeout)
            rounds.append(raw if "error" in raw else {"cpu_us_per_record": raw["cpu_s"] / raw["records"] * 1e6,
                                                      "load_1m": raw.get("load_1m")})
        floors[idiom] = summarize(rounds)
        progress(f"asyncio floor {idiom}: {floors[idiom].get('cpu_us_per_record') or floors[idiom]}")
    env["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    broker = "librdkafka mock"
    if apache:
        from akresil.testing.kafka_jars import kafka_version
        broker = f"Apache Kafka {kafka_version(None)}, RF 1, broker heap {args.kafka_heap_mb} MiB"
    doc = {"benchmark": "scale", "broker": broker, "records": args.records, "value_bytes": len(VALUE),
           "warmup": args.warmup, "consume_warmup": args.consume_warmup, "rounds": args.rounds, "linger_ms": LINGER_MS, "acks": "all",
           "akresil_bytecode": bytecode,
           "command": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]]), "environment": env,
           "java": JAVA_NOTE if not apache else "not measured here: the Java client is not one of CONSUME_IDIOMS", "cases": results, "ratios": ratios(results), "asyncio_floor": floors,
           "targets": targets(results, floors)}
    if args.plot:
        plot(results, args.plot, "Apache Kafka" if apache else "librdkafka's mock")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
