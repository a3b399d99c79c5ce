"""``akresil bench service``: the idioms services write, akresil vs aiokafka vs confluent-kafka in one run.

Idioms (each client's natural spelling of it):

* ``gather``: buffer N records, keep their futures, ``await asyncio.gather(*futs)``;
* ``for_await``: the same futures awaited one by one in a ``for`` loop;
* ``tasks@R``: open loop, one task per record started at its scheduled time (R records/s for ``duration_s``),
  each awaiting the client's send-and-wait; latency counts from the scheduled time, not from when the task ran;
* ``callbacks``: a delivery callback per record, no future awaited;
* ``getmany`` / ``async_for``: consume a pre-filled topic (confluent-kafka: ``consume(num_messages)``);
* ``first_ack``: a started producer's first record to a topic that does not exist yet (the broker creates it).

confluent-kafka has no asyncio API: its futures follow Confluent's asyncio example (a delivery callback resolves
an asyncio future through ``call_soon_threadsafe``, a thread polls). Every figure is the **median over the rounds
and the worst round**; CPU is ``time.process_time`` of the whole process per record (for confluent-kafka that
includes librdkafka's threads). Output: one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import statistics
import threading
import time
from typing import Any, Awaitable, Callable

import orjson

from ..admin import Admin
from ..consumer import Consumer
from ..producer import Producer
from ..types import NewTopic

CLIENTS = ("akresil", "aiokafka", "confluent")
VALUE = b"v" * 100
LINGER_MS = 5


# ---------------------------------------------------------------------------------------------- producers
class Adapter:
    """One client's producer, spelled as its users spell each idiom."""

    name = ""

    async def start(self, bootstrap: str) -> None: ...
    async def stop(self) -> None: ...
    async def buffer(self, topic: str) -> Awaitable[Any]:       # returns the record's future
        raise NotImplementedError
    async def send_wait(self, topic: str) -> None: ...
    async def with_callback(self, topic: str, cb: Callable[[], None]) -> None: ...


class AkresilAdapter(Adapter):
    name = "akresil"

    async def start(self, bootstrap: str) -> None:
        self.p = Producer(bootstrap_servers=bootstrap, linger_ms=LINGER_MS)
        await self.p.start()

    async def stop(self) -> None:
        await self.p.close()

    async def buffer(self, topic: str) -> Awaitable[Any]:
        return await self.p.enqueue(topic, VALUE)

    async def send_wait(self, topic: str) -> None:
        await self.p.send(topic, VALUE)

    async def with_callback(self, topic: str, cb: Callable[[], None]) -> None:
        await self.p.enqueue(topic, VALUE, on_delivery=lambda md, err: cb())


class AiokafkaAdapter(Adapter):
    name = "aiokafka"

    async def start(self, bootstrap: str) -> None:
        from aiokafka import AIOKafkaProducer
        self.p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=LINGER_MS)
        await self.p.start()

    async def stop(self) -> None:
        await self.p.stop()

    async def buffer(self, topic: str) -> Awaitable[Any]:
        fut: Awaitable[Any] = await self.p.send(topic, VALUE)
        return fut

    async def send_wait(self, topic: str) -> None:
        await self.p.send_and_wait(topic, VALUE)

    async def with_callback(self, topic: str, cb: Callable[[], None]) -> None:
        fut = await self.p.send(topic, VALUE)
        fut.add_done_callback(lambda f: cb())


class ConfluentAdapter(Adapter):
    """Confluent's asyncio pattern: a poll thread runs delivery callbacks, which resolve loop futures."""

    name = "confluent"

    async def start(self, bootstrap: str) -> None:
        import confluent_kafka
        self.loop = asyncio.get_running_loop()
        self.p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": LINGER_MS,
                                           "queue.buffering.max.messages": 2_000_000})
        self._stop = False
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop:
            self.p.poll(0.05)

    async def stop(self) -> None:
        await asyncio.to_thread(self.p.flush, 30)
        self._stop = True
        await asyncio.to_thread(self._thread.join)

    def _produce(self, topic: str, on_delivery: Callable[[Any, Any], None]) -> None:
        while True:
            try:
                self.p.produce(topic, VALUE, on_delivery=on_delivery)
                return
            except BufferError:
                time.sleep(0.001)

    async def buffer(self, topic: str) -> Awaitable[Any]:
        fut = self.loop.create_future()
        loop = self.loop

        def done(err: Any, msg: Any) -> None:
            if err is not None:
                loop.call_soon_threadsafe(_set_exception, fut, RuntimeError(str(err)))
            else:
                loop.call_soon_threadsafe(_set_result, fut, msg)
        self._produce(topic, done)
        return fut

    async def send_wait(self, topic: str) -> None:
        await await_(await self.buffer(topic))

    async def with_callback(self, topic: str, cb: Callable[[], None]) -> None:
        self._produce(topic, lambda err, msg: cb())


def _set_result(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


async def await_(fut: Awaitable[Any]) -> Any:
    return await fut


ADAPTERS: dict[str, type[Adapter]] = {"akresil": AkresilAdapter, "aiokafka": AiokafkaAdapter,
                                      "confluent": ConfluentAdapter}


# ---------------------------------------------------------------------------------------------- measurements
class Round:
    """Wall and CPU time of one measured section."""

    def __enter__(self) -> Round:
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.c0


async def closed_loop(adapter: Adapter, topic: str, n: int, idiom: str) -> dict[str, float]:
    with Round() as r:
        if idiom == "gather":
            futs = [await adapter.buffer(topic) for _ in range(n)]
            await asyncio.gather(*futs)
        elif idiom == "for_await":
            futs = [await adapter.buffer(topic) for _ in range(n)]
            for f in futs:
                await f
        elif idiom == "callbacks":
            done = asyncio.Event()
            left = [n]
            loop = asyncio.get_running_loop()
            threaded = isinstance(adapter, ConfluentAdapter)

            def cb() -> None:
                left[0] -= 1
                if left[0] == 0:
                    loop.call_soon_threadsafe(done.set) if threaded else done.set()
            for _ in range(n):
                await adapter.with_callback(topic, cb)
            await done.wait()
        else:
            raise ValueError(f"unknown idiom {idiom!r}")
    return {"msg_per_s": n / r.wall, "cpu_us_per_record": r.cpu / n * 1e6}


async def open_loop(adapter: Adapter, topic: str, rate: int, duration_s: float) -> dict[str, float]:
    """One task per record at its scheduled time; latency from the schedule (a stalled loop counts)."""
    latencies: list[float] = []
    failed = [0]
    n = int(rate * duration_s)

    async def one(scheduled: float) -> None:
        try:
            await adapter.send_wait(topic)
        except Exception:  # noqa: BLE001 - counted, the run goes on
            failed[0] += 1
            return
        latencies.append(time.perf_counter() - scheduled)

    tasks: set[asyncio.Task[None]] = set()
    with Round() as r:
        t0 = time.perf_counter()
        started = 0
        while started < n:
            due = min(n, int((time.perf_counter() - t0) * rate) + 1)
            while started < due:
                task = asyncio.create_task(one(t0 + started / rate))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                started += 1
            await asyncio.sleep(0.001)
        if tasks:
            await asyncio.gather(*tasks)
    latencies.sort()

    def pick(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000
    return {"p50_ms": pick(0.5), "p99_ms": pick(0.99), "p999_ms": pick(0.999), "max_ms": latencies[-1] * 1000,
            "achieved_per_s": n / r.wall, "cpu_us_per_record": r.cpu / n * 1e6, "failed": failed[0]}


async def first_ack(adapter: Adapter, topic: str) -> dict[str, float]:
    t0 = time.perf_counter()
    await adapter.send_wait(topic)
    return {"ms": (time.perf_counter() - t0) * 1000}


async def consume(client: str, bootstrap: str, topic: str, n: int, idiom: str) -> dict[str, float] | None:
    with Round() as r:
        if client == "akresil":
            async with Consumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
                got = 0
                if idiom == "getmany":
                    while got < n:
                        batches = await c.getmany(timeout_ms=1000, max_records=10_000)
                        got += sum(len(v) for v in batches.values())
                else:
                    async for _ in c:
                        got += 1
                        if got >= n:
                            break
        elif client == "aiokafka":
            from aiokafka import AIOKafkaConsumer
            c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
            await c.start()
            try:
                got = 0
                if idiom == "getmany":
                    while got < n:
                        batches = await c.getmany(timeout_ms=1000, max_records=10_000)
                        got += sum(len(v) for v in batches.values())
                else:
                    async for _ in c:
                        got += 1
                        if got >= n:
                            break
            finally:
                await c.stop()
        else:
            if idiom != "getmany":
                return None        # no asyncio iteration in confluent-kafka
            got = await asyncio.to_thread(_confluent_consume, bootstrap, topic, n)
    return {"msg_per_s": got / r.wall, "cpu_us_per_record": r.cpu / got * 1e6}


def _confluent_consume(bootstrap: str, topic: str, n: int) -> int:
    """Assigned partitions from the beginning (no group join: that costs seconds on Tansu, not the client)."""
    import confluent_kafka
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{os.getpid()}-{topic}",
                                  "enable.auto.commit": False})
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in parts])
    got = 0
    try:
        while got < n:
            got += sum(1 for m in c.consume(num_messages=10_000, timeout=1.0) if m.error() is None)
    finally:
        c.close()
    return got


# ---------------------------------------------------------------------------------------------- the run
def summarize(rounds: list[dict[str, float]], higher_is_better: dict[str, bool]) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": len(rounds)}
    for key, better_high in higher_is_better.items():
        values = [r[key] for r in rounds if key in r]
        if not values:
            continue
        out[key] = {"median": round(statistics.median(values), 2),
                    "worst": round(min(values) if better_high else max(values), 2),
                    "all": [round(v, 2) for v in values]}
    return out


THROUGHPUT = {"msg_per_s": True, "cpu_us_per_record": False}
LATENCY = {"p50_ms": False, "p99_ms": False, "p999_ms": False, "max_ms": False, "achieved_per_s": True,
           "cpu_us_per_record": False, "failed": False}


async def run(bootstrap: str, *, rounds: int = 5, records: int = 100_000, rates: tuple[int, ...] = (2000, 20000,
              50000), duration_s: float = 4.0, consume_records: int = 300_000, clients: tuple[str, ...] = CLIENTS,
              idioms: tuple[str, ...] | None = None,
              progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Every idiom for every client, ``rounds`` times, interleaved (client order rotates per round)."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    wanted = idioms or ("gather", "for_await", "callbacks", *(f"tasks@{r}" for r in rates), "getmany",
                        "async_for", "first_ack")
    raw: dict[str, dict[str, list[dict[str, float]]]] = {i: {c: [] for c in clients} for i in wanted}
    seq = [0]

    def topic(tag: str) -> str:
        seq[0] += 1
        return f"svc-{tag}-{os.getpid()}-{seq[0]}"

    async with Admin(bootstrap_servers=bootstrap) as admin:
        async def fresh(tag: str, partitions: int = 6) -> str:
            name = topic(tag)
            await admin.create_topics([NewTopic(name, partitions, 1)])
            return name

        consume_topic = None
        if "getmany" in wanted or "async_for" in wanted:
            consume_topic = await fresh("consume", 3)
            async with Producer(bootstrap_servers=bootstrap, linger_ms=LINGER_MS) as p:
                items = [(None, VALUE)] * 10_000
                for _ in range(consume_records // 10_000):
                    await p.send_many(consume_topic, items)

        for rnd in range(rounds):
            order = clients[rnd % len(clients):] + clients[:rnd % len(clients)]
            for client in order:
                adapter = ADAPTERS[client]()
                await adapter.start(bootstrap)
                try:
                    warm = await fresh("warm")
                    await adapter.send_wait(warm)          # connections and metadata before timing
                    for idiom in wanted:
                        gc.collect()       # the previous measurement's garbage is not this one's full collection
                        if idiom in ("gather", "for_await", "callbacks"):
                            t = await fresh(idiom)
                            await adapter.send_wait(t)
                            res = await closed_loop(adapter, t, records, idiom)
                        elif idiom.startswith("tasks@"):
                            t = await fresh("tasks")
                            await adapter.send_wait(t)
                            res = await open_loop(adapter, t, int(idiom.split("@")[1]), duration_s)
                        elif idiom == "first_ack":
                            res = await first_ack(adapter, topic("new"))
                        else:
                            continue
                        raw[idiom][client].append(res)
                        progress(f"round {rnd} {client:<9} {idiom:<12} " + " ".join(
                            f"{k}={v:,.2f}" for k, v in res.items()))
                finally:
                    await adapter.stop()
                for idiom in ("getmany", "async_for"):
                    if idiom in wanted and consume_topic is not None:
                        gc.collect()
                        res2 = await consume(client, bootstrap, consume_topic, consume_records, idiom)
                        if res2 is not None:
                            raw[idiom][client].append(res2)
                            progress(f"round {rnd} {client:<9} {idiom:<12} " + " ".join(
                                f"{k}={v:,.2f}" for k, v in res2.items()))

    results: dict[str, Any] = {}
    for idiom, per in raw.items():
        kind = LATENCY if idiom.startswith("tasks@") else {"ms": False} if idiom == "first_ack" else THROUGHPUT
        results[idiom] = {c: summarize(v, kind) for c, v in per.items() if v}
    return {"benchmark": "service", "rounds": rounds, "records": records, "consume_records": consume_records,
            "duration_s": duration_s, "results": results, "ratios": ratios(results)}


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets as ratios of medians (and of worst rounds where the target names them)."""
    out: dict[str, Any] = {}

    def med(idiom: str, client: str, key: str, which: str = "median") -> float | None:
        try:
            return float(results[idiom][client][key][which])
        except KeyError:
            return None

    for idiom in ("gather", "for_await", "callbacks", "getmany", "async_for"):
        a, b = med(idiom, "akresil", "msg_per_s"), med(idiom, "aiokafka", "msg_per_s")
        if a and b:
            out[f"{idiom}_vs_aiokafka"] = round(a / b, 2)
            wa, wb = med(idiom, "akresil", "msg_per_s", "worst"), med(idiom, "aiokafka", "msg_per_s", "worst")
            if wa and wb:
                out[f"{idiom}_worst_vs_aiokafka_worst"] = round(wa / wb, 2)
    for idiom in results:
        if idiom.startswith("tasks@"):
            a = med(idiom, "akresil", "p99_ms")
            for peer in ("aiokafka", "confluent"):
                b = med(idiom, peer, "p99_ms")
                if a and b:
                    out[f"{idiom}_p99_vs_{peer}"] = round(a / b, 2)
    for idiom in results:
        a = med(idiom, "akresil", "cpu_us_per_record")
        b = med(idiom, "aiokafka", "cpu_us_per_record")
        if a and b:
            out[f"{idiom}_cpu_vs_aiokafka"] = round(a / b, 2)
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=5, help="rounds per idiom and client (default 5)")
    p.add_argument("--records", type=int, default=100_000, help="records per closed-loop round (default 100000)")
    p.add_argument("--rates", default="2000,20000,50000", help="open-loop rates, records/s (default 2000,20000,"
                   "50000)")
    p.add_argument("--duration", type=float, default=4.0, help="seconds per open-loop round (default 4)")
    p.add_argument("--consume-records", type=int, default=300_000, help="records per consumer round")
    p.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated subset of "
                   f"{','.join(CLIENTS)}")
    p.add_argument("--idioms", default=None, help="comma-separated subset (default: all)")
    p.add_argument("--quick", action="store_true", help="2 rounds, 20k records, 2 s open loops")
    p.add_argument("--bootstrap-servers", default=None, help="use this broker instead of an embedded Tansu")
    p.add_argument("--out", default=None, help="also write the JSON document here")


def check(args: argparse.Namespace) -> dict[str, Any]:
    """Validated keyword arguments for ``run`` from parsed options (ValueError naming the option)."""
    clients = tuple(c.strip() for c in args.clients.split(",") if c.strip())
    bad = [c for c in clients if c not in CLIENTS]
    if bad or not clients:
        raise ValueError(f"--clients: unknown {', '.join(bad) or '(none)'} (choose from {', '.join(CLIENTS)})")
    try:
        rates = tuple(int(r) for r in args.rates.split(","))
    except ValueError:
        raise ValueError(f"--rates: expected comma-separated integers, got {args.rates!r}") from None
    if any(r <= 0 for r in rates):
        raise ValueError("--rates: every rate must be > 0")
    for name in ("rounds", "records", "consume_records"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be >= 1")
    if args.duration <= 0:
        raise ValueError("--duration: must be > 0")
    kw: dict[str, Any] = {"rounds": args.rounds, "records": args.records, "rates": rates,
                          "duration_s": args.duration, "consume_records": args.consume_records, "clients": clients}
    if args.idioms:
        kw["idioms"] = tuple(i.strip() for i in args.idioms.split(",") if i.strip())
    if args.quick:
        kw.update(rounds=min(args.rounds, 2), records=min(args.records, 20_000), duration_s=min(args.duration, 2.0),
                  consume_records=min(args.consume_records, 50_000))
    return kw


async def main(args: argparse.Namespace, progress: Callable[[str], None] = print) -> dict[str, Any]:
    kw = check(args)
    from ..testing import EmbeddedBroker
    from .report import environment
    if args.bootstrap_servers:
        doc = await run(args.bootstrap_servers, progress=progress, **kw)
    else:
        async with EmbeddedBroker(kind="tansu") as broker:
            doc = await run(broker.bootstrap_servers, progress=progress, **kw)
    doc["environment"] = environment()
    if args.out:
        with open(args.out, "wb") as f:
            f.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return doc
