"""Steady-state produce latency on a warmed 3-broker Apache Kafka (issue 35 item 3): akresil, akresil without
idempotence, aiokafka.

The leader-move benchmark's "before the first move" window is the first ~2 s of load on a topic created seconds
before, after a warm-up of a dozen records: every client meets the brokers' start-up transients there (Produce
requests held ~500 ms while the followers' fetchers pick the new partitions up). This measures the steady state
instead: per client and round a fresh topic (6 partitions, 3 replicas), ``--warm-s`` of the same load untimed,
then ``--seconds`` timed; a task per record awaiting the send, ``acks=all``, ``linger_ms=5``; latency of each
acknowledged record from its scheduled time. One cluster serves every round; the client order rotates, so the
cold first round does not always fall on the same client. Prints one JSON document (medians per client over the
rounds and every round). Not in CI.

    python benchmarks/steady_latency.py [--rounds 3] [--rate 2000] [--seconds 6] [--warm-s 2] > steady.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any, Awaitable, Callable

from akresil import Producer
from akresil.testing.kafka_cluster import KafkaCluster

PARTITIONS = 6
VALUE = b"x" * 100
CLIENTS = ("akresil", "akresil-no-idempotence", "aiokafka")


async def drive(send: Callable[[int], Awaitable[Any]], rate: int, seconds: float, warm_s: float) -> dict[str, float]:
    """Offer ``rate`` records/s (a task each) for ``warm_s`` untimed, then ``seconds`` timed; latency percentiles."""
    latencies: list[float] = []

    async def one(i: int, due: float) -> None:
        await send(i % PARTITIONS)
        latencies.append((time.perf_counter() - due) * 1000)

    for timed, span in ((False, warm_s), (True, seconds)):
        start = time.perf_counter()
        total, i, tasks = int(rate * span), 0, []
        while i < total:
            due = min(total, int((time.perf_counter() - start) * rate) + 1)
            while i < due:
                tasks.append(asyncio.create_task(one(i, start + i / rate)))
                i += 1
            await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)
        if not timed:
            latencies.clear()
    ordered = sorted(latencies)

    def q(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * p))], 2)
    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": round(ordered[-1], 1), "count": len(ordered)}


async def one_round(client: str, bootstrap: str, topic: str, args: argparse.Namespace) -> dict[str, float]:
    if client.startswith("akresil"):
        extra = {"enable_idempotence": False} if client == "akresil-no-idempotence" else {}
        async with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, **extra) as p:
            return await drive(lambda part: p.send(topic, VALUE, partition=part), args.rate, args.seconds, args.warm_s)
    from aiokafka import AIOKafkaProducer
    ap = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await ap.start()
    try:
        async def send(part: int) -> Any:
            return await (await ap.send(topic, VALUE, partition=part))
        return await drive(send, args.rate, args.seconds, args.warm_s)
    finally:
        await ap.stop()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    async with KafkaCluster(brokers=3) as cluster:
        for r in range(args.rounds):
            for client in CLIENTS[r % len(CLIENTS):] + CLIENTS[:r % len(CLIENTS)]:
                topic = f"steady-{client}-{r}"
                await cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
                res = await one_round(client, cluster.bootstrap_servers, topic, args)
                res.update(client=client, round=r)
                print(json.dumps(res), file=sys.stderr, flush=True)
                rounds.append(res)
    summary = {c: {k: statistics.median(x[k] for x in rounds if x["client"] == c) for k in ("p50", "p90", "p99")}
               for c in CLIENTS}
    return {"benchmark": "benchmarks/steady_latency.py", "rate": args.rate, "seconds": args.seconds,
            "warm_s": args.warm_s, "partitions": PARTITIONS, "replication_factor": 3, "acks": "all",
            "medians": summary, "rounds": rounds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="rounds per client (default 3)")
    p.add_argument("--rate", type=int, default=2000, help="records per second (default 2000)")
    p.add_argument("--seconds", type=float, default=6.0, help="timed seconds per round (default 6)")
    p.add_argument("--warm-s", type=float, default=2.0, help="untimed seconds of the same load first (default 2)")
    args = p.parse_args()
    if args.rounds < 1 or args.rate < 1 or args.seconds <= 0 or args.warm_s < 0:
        p.error("--rounds and --rate must be >= 1, --seconds > 0, --warm-s >= 0")
    print(json.dumps(run_sync(args), indent=1))


def run_sync(args: argparse.Namespace) -> dict[str, Any]:
    return asyncio.run(run(args))


if __name__ == "__main__":
    main()
