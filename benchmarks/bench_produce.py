"""Producer throughput: akresil send / enqueue / send_many vs aiokafka send vs confluent-kafka, one run.

Every client produces the same number of records with the same value size to its own fresh topic on one
embedded Tansu broker, with its own best default settings (idempotence as each client defaults, linger 5 ms).
Prints one JSON document (orjson) with msg/s, MB/s and the ratios the producer issue names:
``enqueue / aiokafka`` (target >= 2) and ``send_many / confluent`` (target >= 1).

    python benchmarks/bench_produce.py [--records 100000] [--sizes 100,1024] [--rounds 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from typing import Any, Awaitable, Callable

import orjson

from akresil import Admin, NewTopic, Producer
from akresil.testing import EmbeddedBroker

Runner = Callable[[str, str, int, bytes], Awaitable[None]]

#: akresil's settings: its defaults (batch_size 256 KiB, see docs/architecture.md), linger as the others
AKRESIL = {"linger_ms": 5}


async def akresil_send(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    """One ``await send()`` per record from 1000 concurrent tasks (as a service handling many requests)."""
    async with Producer(bootstrap_servers=bootstrap, **AKRESIL) as p:
        workers = 1000

        async def worker(count: int) -> None:
            for _ in range(count):
                await p.send(topic, value)
        await asyncio.gather(*(worker(n // workers + (1 if w < n % workers else 0)) for w in range(workers)))


async def akresil_enqueue(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    async with Producer(bootstrap_servers=bootstrap, **AKRESIL) as p:
        futs = [await p.enqueue(topic, value) for _ in range(n)]
        for f in futs:
            await f


async def akresil_send_many(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    """Calls of 10 000 records, up to 4 in flight (as a pipeline hands over chunks while earlier ones are
    acknowledged; the other clients also keep many records in flight)."""
    async with Producer(bootstrap_servers=bootstrap, **AKRESIL) as p:
        chunk = 10_000
        items = [(None, value)] * chunk
        window = asyncio.Semaphore(4)

        async def one(count: int) -> None:
            async with window:
                await p.send_many(topic, items[:count])
        await asyncio.gather(*(one(min(chunk, n - start)) for start in range(0, n, chunk)))


async def aiokafka_send(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    """aiokafka's documented fast path: ``await send()`` returns a future once buffered."""
    from aiokafka import AIOKafkaProducer
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await p.start()
    try:
        futs = [await p.send(topic, value) for _ in range(n)]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def confluent_produce(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    import confluent_kafka

    def run() -> None:
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                      "queue.buffering.max.messages": 2_000_000})
        for _ in range(n):
            while True:
                try:
                    p.produce(topic, value)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        remaining = p.flush(60)
        if remaining:
            raise RuntimeError(f"confluent-kafka left {remaining} records undelivered")
    await asyncio.to_thread(run)


CLIENTS: dict[str, Runner] = {
    "akresil_send": akresil_send,
    "akresil_enqueue": akresil_enqueue,
    "akresil_send_many": akresil_send_many,
    "aiokafka_send": aiokafka_send,
    "confluent": confluent_produce,
}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with EmbeddedBroker(kind="tansu") as broker:
        bootstrap = broker.bootstrap_servers
        async with Admin(bootstrap_servers=bootstrap) as admin:
            for size in args.sizes:
                value = os.urandom(size)
                per: dict[str, list[float]] = {name: [] for name in CLIENTS}
                for rnd in range(args.rounds):
                    for name, run in CLIENTS.items():
                        topic = f"bench-{name}-{size}-{rnd}"
                        await admin.create_topics([NewTopic(topic, args.partitions, 1)])
                        t0 = time.perf_counter()
                        await run(bootstrap, topic, args.records, value)
                        per[name].append(args.records / (time.perf_counter() - t0))
                        print(f"  {size:>5} B {name:<18} round {rnd}: {per[name][-1]:>10,.0f} msg/s",
                              file=sys.stderr)
                best = {name: max(v) for name, v in per.items()}
                results[f"{size}B"] = {
                    "msg_per_s": {k: round(v) for k, v in best.items()},
                    "mb_per_s": {k: round(v * size / 1e6, 2) for k, v in best.items()},
                    "median_msg_per_s": {k: round(statistics.median(v)) for k, v in per.items()},
                    "ratios": {
                        "enqueue_vs_aiokafka": round(best["akresil_enqueue"] / best["aiokafka_send"], 2),
                        "send_vs_aiokafka": round(best["akresil_send"] / best["aiokafka_send"], 2),
                        "send_many_vs_confluent": round(best["akresil_send_many"] / best["confluent"], 2),
                        "send_many_vs_aiokafka": round(best["akresil_send_many"] / best["aiokafka_send"], 2),
                    },
                }
    return results


def environment() -> dict[str, Any]:
    import aiokafka
    import confluent_kafka
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(), "aiokafka": aiokafka.__version__,
            "confluent_kafka": confluent_kafka.version()[0], "librdkafka": confluent_kafka.libversion()[0]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1024])
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=None)
    ns = parser.parse_args()
    doc = {"benchmark": "produce", "records": ns.records, "environment": environment(),
           "results": asyncio.run(main(ns))}
    blob = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    if ns.out:
        with open(ns.out, "wb") as f:
            f.write(blob)
    sys.stdout.buffer.write(blob + b"\n")
