"""Consumer throughput: akresil ``getmany`` and ``async for`` vs aiokafka ``getmany``, one run.

One embedded Tansu broker; one topic filled once with N records of the given value size (akresil's bulk
producer). Every client then reads the whole topic from the beginning with manual assignment (no group: the
measurement is fetch + decode, not rebalancing), the clock running from the first ``getmany`` call until the
last record arrives. Each client is timed ``--rounds`` times in alternation; the best round counts.
Prints one JSON document (orjson) with msg/s and the ratios the consumer issue names (target >= 1.5).

    python benchmarks/bench_consume.py [--records 200000] [--size 100] [--partitions 3] [--rounds 3] [--out F]
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

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil.testing import EmbeddedBroker

Runner = Callable[[str, str, int, int], Awaitable[float]]
BATCH = 10_000


async def akresil_getmany(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        got = 0
        t0 = time.perf_counter()
        while got < n:
            for records in (await c.getmany(timeout_ms=10_000, max_records=BATCH)).values():
                got += len(records)
        return time.perf_counter() - t0


async def akresil_async_for(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=BATCH) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        got = 0
        t0 = time.perf_counter()
        async for _ in c:
            got += 1
            if got >= n:
                break
        return time.perf_counter() - t0


async def aiokafka_getmany(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    await c.start()
    try:
        c.assign([ATP(topic, p) for p in range(partitions)])
        got = 0
        t0 = time.perf_counter()
        while got < n:
            for records in (await c.getmany(timeout_ms=10_000, max_records=BATCH)).values():
                got += len(records)
        return time.perf_counter() - t0
    finally:
        await c.stop()


CLIENTS: dict[str, Runner] = {
    "akresil_getmany": akresil_getmany,
    "akresil_async_for": akresil_async_for,
    "aiokafka_getmany": aiokafka_getmany,
}


async def fill(bootstrap: str, topic: str, partitions: int, n: int, size: int) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    value = os.urandom(size)
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=65_536) as p:
        items = [(None, value)] * BATCH
        for start in range(0, n, BATCH):
            await p.send_many(topic, items[: min(BATCH, n - start)])


async def main(args: argparse.Namespace) -> dict[str, Any]:
    async with EmbeddedBroker(kind="tansu") as broker:
        bootstrap = broker.bootstrap_servers
        topic = f"bench-consume-{args.size}"
        t0 = time.perf_counter()
        await fill(bootstrap, topic, args.partitions, args.records, args.size)
        print(f"  filled {args.records} records in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        per: dict[str, list[float]] = {name: [] for name in CLIENTS}
        for rnd in range(args.rounds):
            for name, run in CLIENTS.items():
                elapsed = await run(bootstrap, topic, args.partitions, args.records)
                per[name].append(args.records / elapsed)
                print(f"  {name:<18} round {rnd}: {per[name][-1]:>10,.0f} msg/s", file=sys.stderr)
    best = {name: max(v) for name, v in per.items()}
    return {
        "msg_per_s": {k: round(v) for k, v in best.items()},
        "mb_per_s": {k: round(v * args.size / 1e6, 2) for k, v in best.items()},
        "median_msg_per_s": {k: round(statistics.median(v)) for k, v in per.items()},
        "ratios": {
            "getmany_vs_aiokafka": round(best["akresil_getmany"] / best["aiokafka_getmany"], 2),
            "async_for_vs_aiokafka": round(best["akresil_async_for"] / best["aiokafka_getmany"], 2),
        },
    }


def environment() -> dict[str, Any]:
    import aiokafka

    from akresil.protocol.records import C_ACCELERATED
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(), "aiokafka": aiokafka.__version__, "c_records": C_ACCELERATED}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    ns = parser.parse_args()
    doc = {"benchmark": "consume", "records": ns.records, "value_size": ns.size, "partitions": ns.partitions,
           "environment": environment(), "results": asyncio.run(main(ns))}
    blob = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    if ns.out:
        with open(ns.out, "wb") as f:
            f.write(blob)
    sys.stdout.buffer.write(blob + b"\n")
