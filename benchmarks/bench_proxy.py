"""Produce throughput straight to Tansu vs through akresil's FaultProxy (target: < 20% overhead).

One run: ``--rounds`` alternating direct / proxied rounds, 100-byte values, fresh topic each; prints one
JSON document (orjson) with the overhead from the best rounds (``overhead_ratio``) and from the medians.  The proxy runs with
no scripted faults, i.e. on its pass-through path: only request headers are parsed, Produce requests are
decoded for recording (records stay opaque bytes) and responses are decoded for their error codes unless
``--lean``.

    python benchmarks/bench_proxy.py --client confluent --messages 500000
    python benchmarks/bench_proxy.py --client aiokafka --messages 200000 --proxy-in process

``--proxy-in thread`` (default) runs the proxy in this process on its own thread, as a user's test would;
``process`` gives it its own interpreter so the client and the proxy do not share a GIL.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sys
import time
from typing import Any

import orjson

from akresil.testing.broker import EmbeddedBroker
from akresil.testing.proxy import FaultProxy

VALUE = b"x" * 100


# ------------------------------------------------------------------------------------------ clients
def produce_confluent(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                  "queue.buffering.max.messages": 1_000_000})
    failures = 0

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal failures
        if err is not None:
            failures += 1

    p.produce(topic, VALUE, on_delivery=on_delivery)   # metadata + connections before the clock starts
    p.flush(30)
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, VALUE, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.001)
    if p.flush(120) != 0 or failures:
        raise RuntimeError(f"confluent-kafka: {failures} deliveries failed")
    return time.perf_counter() - t0


def produce_aiokafka(bootstrap: str, topic: str, n: int) -> float:
    from aiokafka import AIOKafkaProducer

    async def run() -> float:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all", max_batch_size=256 * 1024)
        await p.start()
        try:
            await p.send_and_wait(topic, VALUE)
            t0 = time.perf_counter()
            futs = []
            for i in range(n):
                futs.append(await p.send(topic, VALUE))
                if len(futs) >= 20_000:
                    await asyncio.gather(*futs)
                    futs.clear()
            await asyncio.gather(*futs)
            return time.perf_counter() - t0
        finally:
            await p.stop()

    return asyncio.run(run())


CLIENTS = {"confluent": produce_confluent, "aiokafka": produce_aiokafka}


# ------------------------------------------------------------------------------------------ proxy hosting
def _proxy_process(upstream: str, nodes: int, lean: bool, conn: Any) -> None:
    proxy = FaultProxy(upstream, nodes=nodes, record_partitions=not lean, inspect_responses=not lean).start()
    conn.send(proxy.bootstrap_servers)
    conn.recv()   # wait for "stop"
    counts = (len(proxy.requests()), len(proxy.responses()))
    proxy.stop()
    conn.send(counts)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def run(client: str, messages: int, nodes: int, proxy_in: str, lean: bool, rounds: int) -> dict[str, Any]:
    """Alternate direct and proxied runs (fresh topic each) so background load hits both alike."""
    produce = CLIENTS[client]
    broker = EmbeddedBroker(kind="tansu").start()
    upstream = broker.bootstrap_servers
    direct: list[float] = []
    proxied: list[float] = []
    proxy_cpu_s = 0.0
    recorded = (0, 0)
    try:
        produce(upstream, "warmup", min(messages, 20_000))
        if proxy_in == "thread":
            proxy = FaultProxy(upstream, nodes=nodes, record_partitions=not lean,
                               inspect_responses=not lean).start()
            assert proxy._thread is not None and proxy._thread.ident is not None
            cpu_clock = time.pthread_getcpuclockid(proxy._thread.ident)
            try:
                for i in range(rounds):
                    direct.append(messages / produce(upstream, f"direct-{i}", messages))
                    c0 = time.clock_gettime(cpu_clock)
                    proxied.append(messages / produce(proxy.bootstrap_servers, f"proxied-{i}", messages))
                    proxy_cpu_s += time.clock_gettime(cpu_clock) - c0
                recorded = (len(proxy.requests()), len(proxy.responses()))
            finally:
                proxy.stop()
        else:
            parent, child = mp.Pipe()
            proc = mp.get_context("spawn").Process(target=_proxy_process, args=(upstream, nodes, lean, child))
            proc.start()
            bootstrap = parent.recv()
            for i in range(rounds):
                direct.append(messages / produce(upstream, f"direct-{i}", messages))
                proxied.append(messages / produce(bootstrap, f"proxied-{i}", messages))
            parent.send("stop")
            recorded = parent.recv()
            proc.join(10)
    finally:
        broker.stop()
    direct_rate, proxied_rate = _median(direct), _median(proxied)
    # on a shared machine background load only ever slows a round down: best-of-N is the steadier estimate
    direct_best, proxied_best = max(direct), max(proxied)
    total_mb = rounds * messages * len(VALUE) / 1e6
    return {
        "benchmark": "fault_proxy_produce_throughput",
        "client": client,
        "messages_per_round": messages,
        "rounds": rounds,
        "value_bytes": len(VALUE),
        "virtual_nodes": nodes,
        "proxy_in": proxy_in,
        "proxy_recording": "headers only" if lean else "requests with partitions, responses with error codes",
        "direct_msgs_per_s": round(direct_rate),
        "proxied_msgs_per_s": round(proxied_rate),
        "direct_rounds": [round(r) for r in direct],
        "proxied_rounds": [round(r) for r in proxied],
        "direct_best_msgs_per_s": round(direct_best),
        "proxied_best_msgs_per_s": round(proxied_best),
        "overhead_ratio": round(1 - proxied_best / direct_best, 4),
        "overhead_ratio_median": round(1 - proxied_rate / direct_rate, 4),
        "proxy_cpu_ms_per_mb": round(proxy_cpu_s * 1000 / total_mb, 3) if proxy_in == "thread" else None,
        "requests_recorded": recorded[0],
        "responses_recorded": recorded[1],
        "python": sys.version.split()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--client", choices=sorted(CLIENTS), default="confluent")
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--proxy-in", choices=("thread", "process"), default="thread")
    ap.add_argument("--lean", action="store_true", help="record headers only (no body decoding)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="alternating direct/proxied rounds (best and median reported)")
    args = ap.parse_args()
    if args.messages < 1:
        ap.error("--messages must be >= 1")
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    result = run(args.client, args.messages, args.nodes, args.proxy_in, args.lean, args.rounds)
    sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")


if __name__ == "__main__":
    main()
