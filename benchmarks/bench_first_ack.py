"""First acknowledgement of a record to a topic the producer does not know yet: akresil, aiokafka, confluent-kafka.

One embedded broker (Tansu by default, ``--broker noida`` for the other). Per client and round: start a
producer (linger 0 for all three, so the figure is the metadata and produce exchange, not batching), send one
record to a pre-created topic and wait for its ack (connections, producer id and metadata are warm), then time
``send`` to ack of one record to (a) a brand-new topic the broker auto-creates and (b) an existing topic the
producer has not used yet. Rounds alternate the clients; the median and the worst of ``--rounds`` are reported.
Tansu lists every topic in each Metadata answer, so on it (b) may need no Metadata round trip at all.

    python benchmarks/bench_first_ack.py [--rounds 5] [--broker tansu|noida] [--out F]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import time
from typing import Any, Awaitable, Callable

import orjson

from akresil import Admin, NewTopic, Producer
from akresil.testing import EmbeddedBroker

Timer = Callable[[str, str, str, str], Awaitable[tuple[float, float]]]
_names = itertools.count()


def fresh(prefix: str) -> str:
    return f"{prefix}-{int(time.time() * 1000) % 10**8}-{next(_names)}"


async def akresil_first_ack(bootstrap: str, warm: str, new: str, existing: str) -> tuple[float, float]:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as p:
        await p.send(warm, b"warm-up")
        t0 = time.perf_counter()
        await p.send(new, b"v")
        t1 = time.perf_counter()
        await p.send(existing, b"v")
        return (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000


async def aiokafka_first_ack(bootstrap: str, warm: str, new: str, existing: str) -> tuple[float, float]:
    from aiokafka import AIOKafkaProducer
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await p.start()
    try:
        await p.send_and_wait(warm, b"warm-up")
        t0 = time.perf_counter()
        await p.send_and_wait(new, b"v")
        t1 = time.perf_counter()
        await p.send_and_wait(existing, b"v")
        return (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000
    finally:
        await p.stop()


async def confluent_first_ack(bootstrap: str, warm: str, new: str, existing: str) -> tuple[float, float]:
    from confluent_kafka import Producer as CProducer

    def run() -> tuple[float, float]:
        p = CProducer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        acked: list[float] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                raise RuntimeError(f"confluent-kafka delivery failed: {err}")
            acked.append(time.perf_counter())

        def ack(topic: str) -> float:
            t0 = time.perf_counter()
            p.produce(topic, b"v", on_delivery=on_delivery)
            p.flush(30)
            return (acked[-1] - t0) * 1000

        ack(warm)
        return ack(new), ack(existing)

    return await asyncio.to_thread(run)


CLIENTS: dict[str, Timer] = {"akresil": akresil_first_ack, "aiokafka": aiokafka_first_ack,
                             "confluent_kafka": confluent_first_ack}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    async with EmbeddedBroker(kind=args.broker, stop_timeout_s=1.0) as broker:
        bootstrap = broker.bootstrap_servers
        new: dict[str, list[float]] = {name: [] for name in CLIENTS}
        existing: dict[str, list[float]] = {name: [] for name in CLIENTS}
        for rnd in range(args.rounds):
            for name, timer in CLIENTS.items():
                warm, there = fresh("warm"), fresh("existing")
                async with Admin(bootstrap_servers=bootstrap) as admin:
                    await admin.create_topics([NewTopic(warm, 1, 1), NewTopic(there, 1, 1)])
                a, b = await timer(bootstrap, warm, fresh("new"), there)
                new[name].append(a)
                existing[name].append(b)
                print(f"  {name:<16} round {rnd}: new topic {a:7.2f} ms   existing, unused topic {b:6.2f} ms",
                      file=sys.stderr)
    return {kind: {name: {"median_ms": round(statistics.median(v), 2), "worst_ms": round(max(v), 2),
                          "rounds_ms": [round(x, 2) for x in v]} for name, v in table.items()}
            for kind, table in (("new_topic", new), ("existing_unused_topic", existing))}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--broker", choices=("tansu", "noida"), default="tansu")
    parser.add_argument("--out", default=None)
    ns = parser.parse_args()
    doc = {"benchmark": "first_ack", "broker": ns.broker, "results": asyncio.run(main(ns))}
    blob = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    if ns.out:
        with open(ns.out, "wb") as f:
            f.write(blob)
    sys.stdout.buffer.write(blob + b"\n")
