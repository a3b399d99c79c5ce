"""Transactional produce throughput: akresil's transactional producer vs akresil without transactions vs
aiokafka's transactional producer, on noida-db (the test broker with transaction semantics, docs/brokers.md).

Per client and round: a fresh topic (3 partitions), a producer started and warmed up (init_transactions and one
committed record), then ``--seconds`` of 100-byte records enqueued without waiting per record (akresil
``enqueue``, aiokafka ``send``), a transaction committed every ``--commit-ms`` (100 ms and 1 s by default;
the non-transactional run only ``flush``es at the same points, so the figures compare the transaction
overhead, not the flush points). Throughput counts records acknowledged within committed transactions.
Rounds alternate the clients; the median and the worst round of ``--rounds`` are reported as JSON.

    python benchmarks/bench_txn.py [--rounds 3] [--seconds 2] [--commit-ms 100,1000] [--out F]
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

VALUE = b"x" * 100
_names = itertools.count()


def fresh(prefix: str) -> str:
    return f"{prefix}-{int(time.time() * 1000) % 10**8}-{next(_names)}"


async def _commit_loop(seconds: float, commit_ms: float, produce_some: Callable[[], Awaitable[int]],
                       commit: Callable[[], Awaitable[None]],
                       begin: Callable[[], Awaitable[None] | None]) -> tuple[int, float]:
    """Produce for ``seconds``, committing every ``commit_ms``; returns the records of committed transactions
    and the seconds taken (the last commit included, start-up and warm-up not)."""
    done = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        result = begin()
        if result is not None:
            await result
        batch_end = min(end, time.perf_counter() + commit_ms / 1000)
        sent = 0
        while time.perf_counter() < batch_end:
            sent += await produce_some()
        await commit()
        done += sent
    return done, time.perf_counter() - start


async def akresil_run(bootstrap: str, topic: str, seconds: float, commit_ms: float, *, txn: bool) -> tuple[int, float]:
    config: dict[str, Any] = {"transactional_id": fresh("bench-tx")} if txn else {}
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5, **config) as p:
        if txn:
            await p.init_transactions()
            async with p.transaction():
                await p.send(topic, b"warm-up")
        else:
            await p.send(topic, b"warm-up")

        async def produce_some() -> int:
            for _ in range(1000):
                await p.enqueue(topic, VALUE)
            return 1000

        async def commit() -> None:
            await (p.commit_transaction() if txn else p.flush())

        return await _commit_loop(seconds, commit_ms, produce_some, commit,
                                  p.begin_transaction if txn else (lambda: None))


async def aiokafka_run(bootstrap: str, topic: str, seconds: float, commit_ms: float) -> tuple[int, float]:
    from aiokafka import AIOKafkaProducer
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, transactional_id=fresh("bench-aio"),
                         enable_idempotence=True)
    await p.start()
    try:
        async with p.transaction():
            await p.send_and_wait(topic, b"warm-up")

        async def produce_some() -> int:
            for _ in range(1000):
                await p.send(topic, VALUE)
            return 1000

        async def begin() -> None:
            await p.begin_transaction()

        return await _commit_loop(seconds, commit_ms, produce_some, p.commit_transaction, begin)
    finally:
        await p.stop()


CLIENTS: dict[str, Callable[[str, str, float, float], Awaitable[tuple[int, float]]]] = {
    "akresil-txn": lambda b, t, s, c: akresil_run(b, t, s, c, txn=True),
    "akresil-plain": lambda b, t, s, c: akresil_run(b, t, s, c, txn=False),
    "aiokafka-txn": aiokafka_run,
}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"broker": "noida", "seconds": args.seconds, "rounds": args.rounds,
                               "value_bytes": len(VALUE), "by_commit_ms": {}}
    with EmbeddedBroker(kind="noida") as broker:
        bs = broker.bootstrap_servers
        for commit_ms in args.commit_ms:
            per: dict[str, list[float]] = {name: [] for name in CLIENTS}
            for _ in range(args.rounds):
                for name, run in CLIENTS.items():
                    topic = fresh("bench-txn")
                    async with Admin(bootstrap_servers=bs) as admin:
                        await admin.create_topics([NewTopic(topic, 3, 1)])
                    count, elapsed = await run(bs, topic, args.seconds, commit_ms)
                    per[name].append(count / elapsed)
            results["by_commit_ms"][str(int(commit_ms))] = {
                name: {"median_records_per_s": round(statistics.median(v)), "worst_records_per_s": round(min(v)),
                       "rounds": [round(x) for x in v]} for name, v in per.items()}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--commit-ms", type=lambda s: [float(x) for x in s.split(",")], default=[100.0, 1000.0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0:
        parser.error("--rounds must be >= 1 and --seconds > 0")
    results = asyncio.run(main_async(args))
    data = orjson.dumps(results, option=orjson.OPT_INDENT_2)
    if args.out:
        with open(args.out, "wb") as f:
            f.write(data)
    sys.stdout.write(data.decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
