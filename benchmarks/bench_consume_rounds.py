"""Consumer round-to-round steadiness: every round of a ``getmany`` loop, not the best one (issue 18).

One embedded Tansu broker, one topic of N records (akresil's bulk producer, as ``bench_consume.py``). Each
round, akresil and aiokafka in alternation read the whole topic from the beginning with
``getmany(max_records=10000)`` in a plain loop (manual assignment). Reported per round and client: msg/s,
the longest gap between two ``getmany`` returns (a long-poll stall shows as a gap near
``fetch_max_wait_ms``) and the number of polls that came back empty; then the median, the worst round and
akresil's ratio to aiokafka's median. A best-of-N figure hides a stall in one round in five: this does not.
``--await-between-polls`` makes the loop yield to the event loop once after each poll, as a service that
does its own I/O between polls would.

    python benchmarks/bench_consume_rounds.py [--records 300000] [--size 100] [--partitions 3] [--rounds 8]
                                              [--await-between-polls] [--out F]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, NamedTuple

import orjson

from akresil import Consumer, TopicPartition
from akresil.testing import EmbeddedBroker

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_consume import environment, fill  # noqa: E402  (same topic fill and environment record)

BATCH = 10_000
#: yield to the event loop after each poll (set from --await-between-polls)
AWAIT_BETWEEN_POLLS = False


class Round(NamedTuple):
    msg_per_s: float
    max_gap_ms: float
    #: records read before the longest gap (0: the first poll, which includes the offset lookup)
    max_gap_at: int
    empty_polls: int


async def _loop(getmany: Callable[[], Awaitable[dict[Any, list[Any]]]], n: int) -> Round:
    got = empty = 0
    t0 = last = time.perf_counter()
    max_gap = 0.0
    max_gap_at = 0
    while got < n:
        batches = await getmany()
        now = time.perf_counter()
        if now - last > max_gap:
            max_gap, max_gap_at = now - last, got
        last = now
        if not batches:
            empty += 1
        for records in batches.values():
            got += len(records)
        if AWAIT_BETWEEN_POLLS:
            await asyncio.sleep(0)
    return Round(n / (last - t0), max_gap * 1000.0, max_gap_at, empty)


async def akresil_getmany(bootstrap: str, topic: str, partitions: int, n: int) -> Round:
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        return await _loop(lambda: c.getmany(timeout_ms=10_000, max_records=BATCH), n)


async def aiokafka_getmany(bootstrap: str, topic: str, partitions: int, n: int) -> Round:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    await c.start()
    try:
        c.assign([ATP(topic, p) for p in range(partitions)])
        return await _loop(lambda: c.getmany(timeout_ms=10_000, max_records=BATCH), n)
    finally:
        await c.stop()


CLIENTS = {"akresil_getmany": akresil_getmany, "aiokafka_getmany": aiokafka_getmany}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    async with EmbeddedBroker(kind="tansu", stop_timeout_s=1.0) as broker:
        bootstrap = broker.bootstrap_servers
        topic = f"bench-rounds-{args.size}"
        await fill(bootstrap, topic, args.partitions, args.records, args.size)
        rounds: dict[str, list[Round]] = {name: [] for name in CLIENTS}
        for rnd in range(args.rounds):
            for name, run in CLIENTS.items():
                r = await run(bootstrap, topic, args.partitions, args.records)
                rounds[name].append(r)
                print(f"  {name:<17} round {rnd}: {r.msg_per_s:>10,.0f} msg/s  max gap {r.max_gap_ms:6.1f} ms "
                      f"(after {r.max_gap_at:>6} records)  empty polls {r.empty_polls}", file=sys.stderr)
    summary: dict[str, Any] = {}
    for name, rs in rounds.items():
        rates = [r.msg_per_s for r in rs]
        summary[name] = {"median_msg_per_s": round(statistics.median(rates)), "worst_msg_per_s": round(min(rates)),
                         "max_gap_ms": round(max(r.max_gap_ms for r in rs), 1),
                         "empty_polls": sum(r.empty_polls for r in rs),
                         "rounds": [{"msg_per_s": round(r.msg_per_s), "max_gap_ms": round(r.max_gap_ms, 1),
                                     "max_gap_after_records": r.max_gap_at, "empty_polls": r.empty_polls}
                                    for r in rs]}
    base = summary["aiokafka_getmany"]["median_msg_per_s"]
    ours = summary["akresil_getmany"]
    # each akresil round against the aiokafka round run right after it: steadier on a shared machine
    paired = [a.msg_per_s / b.msg_per_s for a, b in zip(rounds["akresil_getmany"], rounds["aiokafka_getmany"])]
    summary["ratios"] = {"median_vs_aiokafka": round(ours["median_msg_per_s"] / base, 2),
                         "worst_vs_aiokafka_median": round(ours["worst_msg_per_s"] / base, 2),
                         "paired_median": round(statistics.median(paired), 2), "paired_worst": round(min(paired), 2)}
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--await-between-polls", action="store_true")
    parser.add_argument("--out", default=None)
    ns = parser.parse_args()
    AWAIT_BETWEEN_POLLS = ns.await_between_polls
    doc = {"benchmark": "consume_rounds", "records": ns.records, "value_size": ns.size,
           "partitions": ns.partitions, "await_between_polls": ns.await_between_polls, "environment": environment(), "results": asyncio.run(main(ns))}
    blob = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    if ns.out:
        with open(ns.out, "wb") as f:
            f.write(blob)
    sys.stdout.buffer.write(blob + b"\n")
