"""Client-side latency of the leader-move bench's load without a broker's replication (issue 35 item 3).

librdkafka's mock cluster (3 brokers, answers in well under a millisecond, no follower fetches) takes the
bench's load: a fresh topic of 6 partitions per phase, 12 warm-up records, then ``--seconds`` of ``--rate``
records/s of 100 B, a task per record awaiting the send, ``acks=all``, ``linger_ms=5``, the records handed over
every ``--tick-ms`` as the bench's generator does (5 ms there). What is left of the latency is the client's own:
its generator lag, its linger and how its sender's turn meets the application's tasks. Per phase: latency from
schedule (p50/p90/p99), process CPU (the mock's brokers are librdkafka threads of this process: their
work per request counts there) and the event loop's thread CPU (the client and the load generator), and for akresil the batches sent (records per batch, ms from a batch's
creation to its send) from its event hooks. Clients: ``akresil`` (the tree on ``PYTHONPATH``),
``akresil-noidem`` (idempotence off), ``aiokafka`` (its defaults: not idempotent). The order reverses every
round. Prints a JSON line per phase and one document at the end. Not in CI.

    python benchmarks/linger_burst_mock.py [--clients akresil,aiokafka] [--rounds 3] [--seconds 2] [--tick-ms 5] \\
        [--rtt-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from typing import Any

from akresil.testing.rdkafka_mock import MockCluster

PARTITIONS = 6
VALUE = b"x" * 100


def _pct(ordered: list[float], q: float) -> float:
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 2)


async def phase(bootstrap: str, topic: str, client: str, args: argparse.Namespace) -> dict[str, Any]:
    sent: list[tuple[float, int]] = []          # akresil: (ms from batch creation to send, records) per batch

    class Batches:
        def on_event(self, name: str, fields: dict[str, Any]) -> None:
            if name == "batch_sent":
                sent.append((fields["queue_ms"], fields["records"]))

    if client == "aiokafka":
        from aiokafka import AIOKafkaProducer
        ap = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await ap.start()

        async def send_aiokafka(part: int) -> Any:
            return await (await ap.send(topic, VALUE, partition=part))
        send: Any = send_aiokafka
        close: Any = ap.stop
    elif client in ("akresil", "akresil-noidem"):
        from akresil import Producer
        producer = Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, hooks=[Batches()],
                            enable_idempotence=client == "akresil")

        def send_akresil(part: int) -> Any:
            return producer.send(topic, VALUE, partition=part)
        await producer.start()
        send, close = send_akresil, producer.close
    else:
        raise SystemExit(f"--clients: unknown {client!r} (known: akresil, akresil-noidem, aiokafka)")
    latencies: list[float] = []
    try:
        await asyncio.gather(*(send(i % PARTITIONS) for i in range(2 * PARTITIONS)))
        sent.clear()
        start, cpu0, thread0 = time.perf_counter(), time.process_time(), time.thread_time()

        async def one(i: int, due: float) -> None:
            await send(i % PARTITIONS)
            latencies.append((time.perf_counter() - due) * 1000)

        total, i, tasks = int(args.rate * args.seconds), 0, []
        while i < total:
            due = min(total, int((time.perf_counter() - start) * args.rate) + 1)
            while i < due:
                tasks.append(asyncio.create_task(one(i, start + i / args.rate)))
                i += 1
            await asyncio.sleep(args.tick_ms / 1000)
        await asyncio.gather(*tasks)
        cpu_s, thread_s = time.process_time() - cpu0, time.thread_time() - thread0
    finally:
        await close()
    ordered = sorted(latencies)
    out: dict[str, Any] = {"client": client, "p50_ms": _pct(ordered, 0.5), "p90_ms": _pct(ordered, 0.9),
                           "p99_ms": _pct(ordered, 0.99), "cpu_s": round(cpu_s, 3),
                           "loop_thread_cpu_s": round(thread_s, 3),
                           "latency_ms_histogram": dict(sorted(Counter(min(int(x), 20) for x in ordered).items()))}
    if sent:
        out["batches"] = len(sent)
        out["records_per_batch_p50"] = statistics.median(r for _, r in sent)
        out["batch_queue_ms_p50"] = round(statistics.median(q for q, _ in sent), 2)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    clients = [c for c in args.clients.split(",") if c]
    rows: list[dict[str, Any]] = []
    with MockCluster(3) as mock:
        for r in range(args.rounds):
            for client in clients if r % 2 == 0 else clients[::-1]:
                topic = f"linger-burst-{client}-{r}"
                mock.create_topic(topic, PARTITIONS, 3)
                for broker in (1, 2, 3):
                    mock.broker_set_rtt(broker, args.rtt_ms)
                row = await phase(mock.bootstrap_servers, topic, client, args)
                row.update(round=r, load_avg_1m=round(os.getloadavg()[0], 2))
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    medians = {c: {k: statistics.median(x[k] for x in rows if x["client"] == c)
                   for k in ("p50_ms", "p99_ms", "cpu_s", "loop_thread_cpu_s")} | {"worst_p50_ms": max(x["p50_ms"] for x in rows
                                                                                  if x["client"] == c)}
               for c in clients}
    return {"benchmark": "benchmarks/linger_burst_mock.py", "command": " ".join(sys.argv), "rate": args.rate,
            "seconds": args.seconds, "tick_ms": args.tick_ms, "rtt_ms": args.rtt_ms, "medians": medians, "phases": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", default="akresil,aiokafka", help="akresil, akresil-noidem, aiokafka (default: "
                   "akresil,aiokafka)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3), the order reversed every round")
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per phase (default 2)")
    p.add_argument("--rate", type=int, default=2000, help="records per second (default 2000)")
    p.add_argument("--tick-ms", type=float, default=5.0, help="the generator's hand-over period (default 5, the "
                   "bench's)")
    p.add_argument("--rtt-ms", type=int, default=0, help="each mock broker's added round trip (default 0); a few ms "
                   "stands in for acks=all replication, so records wait behind a request in flight")
    args = p.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=1))


if __name__ == "__main__":
    main()
