"""One Spark batch-write task's work without Spark: the Arrow batches a task of the 100 B write gets (string key,
``--size`` B string value, 10 000 rows per batch as Spark's ``maxRecordsPerBatch``) through ``deliver_batches``
into a fresh 4-partition topic per round, with the worker's cached producer; prints each round's seconds and the
cyclic GC's collections (count and seconds per generation) over all rounds.

    python benchmarks/spark_write_task.py --bootstrap HOST:PORT [--rows 500000] [--rounds 4]
    python benchmarks/spark_write_task.py           # starts a 3-broker KafkaCluster itself

For an A/B, start one cluster and run this script alternately from two trees against it (the first round of a
process pays the producer's start and the imports: compare the later rounds).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import time
import uuid
from typing import Any, Iterator

import anyio
import pyarrow as pa

import akresil
from akresil import Admin, NewTopic
from akresil.spark.options import parse_write_options
from akresil.spark.writer import deliver_batches

PER_BATCH = 10_000


def batches(rows: int, size: int) -> list[pa.RecordBatch]:
    out = []
    for base in range(0, rows, PER_BATCH):
        ids = range(base, min(rows, base + PER_BATCH))
        out.append(pa.RecordBatch.from_arrays([pa.array([str(i) for i in ids]),
                                               pa.array([str(i).rjust(size, "0") for i in ids])],
                                              names=["key", "value"]))
    return out


@contextlib.contextmanager
def bootstrap(given: str | None) -> Iterator[str]:
    if given:
        yield given
        return
    from akresil.testing.kafka_cluster import KafkaCluster
    with KafkaCluster(brokers=3) as cluster:
        yield cluster.bootstrap_servers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap")
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    data = batches(args.rows, args.size)
    collections = {g: [0, 0.0] for g in range(3)}
    started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            c = collections[info["generation"]]
            c[0] += 1
            c[1] += time.perf_counter() - started[0]

    with bootstrap(args.bootstrap) as bs:
        async def create() -> str:
            name = f"task-{uuid.uuid4().hex[:10]}"
            async with Admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic(name, 4)])
            return name

        seconds = []
        gc.callbacks.append(on_gc)
        for _ in range(args.rounds):
            opts = parse_write_options({"kafka.bootstrap.servers": bs, "topic": anyio.run(create)})
            t0 = time.perf_counter()
            done = deliver_batches(iter(data), opts, ("key", "value"), 0, 0)
            seconds.append(time.perf_counter() - t0)
            if done.records != args.rows:
                raise AssertionError(f"{done.records} records landed, expected {args.rows}: {done.report}")
        gc.callbacks.remove(on_gc)
    tree = os.path.dirname(os.path.dirname(akresil.__file__))
    print(tree, "rounds s:", " ".join(f"{s:.3f}" for s in seconds), "gc (count, s) per generation:",
          {g: (n, round(s, 3)) for g, (n, s) in collections.items()})


if __name__ == "__main__":
    main()
