"""What Python's full collections walk while a broker is down (issue 35 item 6), on librdkafka's mock cluster.

A task per record awaiting ``Producer.send`` (the failure benchmarks' ``tasks`` load) with the leader of the
records' partitions down: the records wait for the delivery timeout, and every object each of them keeps is
tracked by the cyclic collector, survives into the oldest generation and is walked by each full collection. This
counts those objects by type (per pending record), times a full collection with and without the backlog, and,
with the collector off, counts the cyclic garbage the records leave when they succeed and when they expire (what
reference counting cannot free). Prints one JSON document; medians and the worst of ``--rounds`` for the timings.

    python benchmarks/bench_gc_backlog.py [--records 15000] [--rounds 3] > bench-results/gc-backlog.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import os
import statistics
import time
from typing import Any

from akresil import Producer
from akresil.bench.mock_runner import create_topic
from akresil.testing.rdkafka_mock import MockCluster

TOPIC = "gc-backlog"
VALUE = b"v" * 100
DOWN_NODE = 2          # leads partitions 1 and 4 (partition p on broker p % 3 + 1)
DOWN_PARTITIONS = (1, 4)


def _full_collection_ms() -> float:
    t = time.perf_counter()
    gc.collect()
    return (time.perf_counter() - t) * 1e3


async def backlog(records: int) -> dict[str, Any]:
    """Tracked objects per pending record and full-collection ms without / with ``records`` pending."""
    with MockCluster(3) as mock:
        create_topic(mock, TOPIC, {p: p % 3 + 1 for p in range(6)})
        async with Producer(bootstrap_servers=mock.bootstrap_servers, delivery_timeout_ms=120_000,
                            request_timeout_ms=30_000, linger_ms=5) as producer:
            await asyncio.gather(*(producer.send(TOPIC, VALUE, partition=p % 6) for p in range(60)))
            mock.broker_set_down(DOWN_NODE)
            await asyncio.sleep(0.5)
            gc.collect()
            before = collections.Counter(type(o).__name__ for o in gc.get_objects())
            without_ms = _full_collection_ms()

            async def one(partition: int) -> None:
                try:
                    await producer.send(TOPIC, VALUE, partition=partition)
                except Exception:   # noqa: BLE001 - only the pending state is measured
                    pass
            tasks: set[asyncio.Task[None]] = set()
            for i in range(records):
                task = asyncio.create_task(one(DOWN_PARTITIONS[i % 2]))
                tasks.add(task)
                task.add_done_callback(tasks.discard)     # the asyncio docs' idiom for fire-and-forget tasks
            await asyncio.sleep(1.0)
            gc.collect()
            after = collections.Counter(type(o).__name__ for o in gc.get_objects())
            with_ms = _full_collection_ms()
            pending = len(tasks)
            mock.broker_set_up(DOWN_NODE)
            await asyncio.gather(*list(tasks))
    diff = {name: round(n / pending, 2) for name, n in (after - before).most_common() if n >= pending / 20}
    return {"pending": pending, "tracked_per_pending_record": round(sum((after - before).values()) / pending, 2),
            "by_type": diff, "full_collection_ms_without": without_ms, "full_collection_ms_with": with_ms,
            "heap_objects_without": sum(before.values()), "heap_objects_with": sum(after.values())}


async def cyclic_garbage(records: int, down: bool) -> dict[str, Any]:
    """Unreachable objects (cycles) left after ``records`` tasks awaiting send completed, collector off."""
    with MockCluster(3) as mock:
        create_topic(mock, TOPIC, {p: p % 3 + 1 for p in range(6)})
        async with Producer(bootstrap_servers=mock.bootstrap_servers, delivery_timeout_ms=1500,
                            request_timeout_ms=1000, linger_ms=5) as producer:
            await asyncio.gather(*(producer.send(TOPIC, VALUE, partition=p % 6) for p in range(60)))
            if down:
                mock.broker_set_down(DOWN_NODE)

            async def one(partition: int) -> None:
                try:
                    await producer.send(TOPIC, VALUE, partition=partition)
                except Exception:   # noqa: BLE001 - expiry is the point when down
                    pass
            gc.collect()
            gc.disable()
            try:
                tasks: set[asyncio.Task[None]] = set()
                for i in range(records):
                    task = asyncio.create_task(one(i % 6))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                    if i % 500 == 499:
                        await asyncio.sleep(0.02)
                while tasks:
                    await asyncio.sleep(0.05)
                unreachable = gc.collect()
            finally:
                gc.enable()
    return {"records": records, "unreachable_objects": unreachable, "per_record": round(unreachable / records, 4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=15_000, help="pending records (default 15,000: 10 s of a "
                        "third of 5,000 records/s, the dead node's share in the broker-bounce scenario)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.records < 1 or args.rounds < 1:
        parser.error("--records and --rounds must be >= 1")
    runs = [asyncio.run(backlog(args.records)) for _ in range(args.rounds)]
    out: dict[str, Any] = {"load_average": os.getloadavg(), "backlog": runs[-1]}
    for key in ("full_collection_ms_without", "full_collection_ms_with"):
        values = [r[key] for r in runs]
        out["backlog"][key] = {"median": round(statistics.median(values), 1), "worst": round(max(values), 1)}
    out["cyclic_garbage"] = {"broker_up": asyncio.run(cyclic_garbage(20_000, down=False)),
                             "broker_down": asyncio.run(cyclic_garbage(20_000, down=True))}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
