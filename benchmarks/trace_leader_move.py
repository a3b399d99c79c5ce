"""Where a record waits when leaders move on Apache Kafka (issue 35 item 3): akresil's request timeline.

A 3-broker Apache Kafka cluster (``KafkaCluster``), one topic of 6 partitions with 3 replicas, an idempotent
``acks=all`` producer fed at ``--rate`` records/s by a task per record awaiting ``send`` (the leader-move
benchmark's load), and every partition's leader moved to another replica every ``--move-every`` seconds (a
replica reorder and a preferred-leader election, as ``akresil bench leader-move --harness apache`` does).
akresil's event hooks record each batch sent, retried and completed and each Produce answer's latency, so a slow
record can be attributed: did akresil hold it (queued behind a retry, backing off, waiting for metadata) or did a
broker hold the Produce carrying it (an ``acks=all`` request waits in the broker until the followers have the
records; an old leader answers NOT_LEADER_OR_FOLLOWER only when the move reaches it)?

Prints one JSON document: latency from schedule (p50, p99, max), the moves, every Produce a broker held longer
than ``--held-ms`` (node, latency, what it answered), and per slow window the partitions' batches with each
attempt's node and wait. ``--broker-config k=v,...`` passes broker settings (e.g.
``replica.fetch.backoff.ms=50``) to test a hypothesis about the broker's side.

    python benchmarks/trace_leader_move.py [--seconds 12] [--rate 2000] [--move-every 2] > trace.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

import anyio

from akresil import Producer
from akresil.protocol.api import ApiKey
from akresil.bench.command import parse_broker_config
from akresil.testing.kafka_cluster import KafkaCluster

TOPIC = "trace-leader-move"
PARTITIONS = 6
VALUE = b"x" * 100
#: events too frequent to keep and not needed for the attribution
_SKIPPED = frozenset({"connection_bytes_sent", "connection_bytes_received", "request_sent", "request_done"})


class Recorder:
    """An akresil event hook keeping (ms since start, event, fields) for the attribution."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.events: list[tuple[float, str, dict[str, Any]]] = []

    def ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1e3

    def on_event(self, name: str, fields: dict[str, Any]) -> None:
        if name in _SKIPPED:
            return
        kept = {k: v if isinstance(v, (int, float, str, type(None))) else str(v)
                for k, v in fields.items() if k != "response"}
        if name == "response_received":
            kept["api_key"] = ApiKey(fields["api_key"]).name
            errors = sorted({p["error_code"] for t in (fields.get("response") or {}).get("responses", ())
                             for p in t.get("partition_responses", ())} - {0}) if fields["api_key"] == 0 else []
            kept["errors"] = errors
        self.events.append((round(self.ms(), 1), name, kept))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 1) if ordered else 0.0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    broker_config = parse_broker_config(args.broker_config)
    rec = Recorder()
    latencies: list[tuple[float, float, int]] = []       # (scheduled ms, latency ms, partition)
    moves: list[dict[str, Any]] = []
    async with KafkaCluster(brokers=3, broker_config=broker_config) as cluster:
        await cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=5,
                            hooks=[rec]) as producer:
            for i in range(10 * PARTITIONS):                      # connections, producer id, metadata
                await producer.send(TOPIC, b"w", partition=i % PARTITIONS)
            rec.t0 = time.perf_counter()
            rec.events.clear()
            total = int(args.seconds * args.rate)
            gap_ms = 1000.0 / args.rate

            async def one(i: int, at: float) -> None:
                await producer.send(TOPIC, VALUE, partition=i % PARTITIONS)
                latencies.append((at, rec.ms() - at, i % PARTITIONS))

            async def mover() -> None:
                k = 1
                while k * args.move_every < args.seconds:
                    await anyio.sleep(max(0.0, (k * args.move_every * 1000 - rec.ms()) / 1000))
                    async with cluster.admin() as admin:
                        parts = (await admin.describe_topics([TOPIC]))[TOPIC].partitions
                    targets = {p.partition: next(r for r in p.replicas if r != p.leader) for p in parts}
                    started = rec.ms()
                    epochs = await cluster.move_leaders(TOPIC, targets)
                    moves.append({"started_ms": round(started, 1), "done_ms": round(rec.ms(), 1),
                                  "leaders": targets, "epochs": epochs})
                    k += 1

            async with anyio.create_task_group() as tg:
                tg.start_soon(mover)
                for i in range(total):
                    at = i * gap_ms
                    delay = (at - rec.ms()) / 1000
                    if delay > 0:
                        await anyio.sleep(delay)
                    tg.start_soon(one, i, at)
    return report(args, rec.events, latencies, moves)


def report(args: argparse.Namespace, events: list[tuple[float, str, dict[str, Any]]],
           latencies: list[tuple[float, float, int]], moves: list[dict[str, Any]]) -> dict[str, Any]:
    values = [lat for _, lat, _ in latencies]
    held = [{"at_ms": t, "node": f["node_id"], "latency_ms": round(f["latency_ms"], 1), "errors": f["errors"]}
            for t, name, f in events
            if name == "response_received" and f["api_key"] == "PRODUCE" and f["latency_ms"] >= args.held_ms]
    # slow windows: 500 ms buckets whose worst record waited more than --slow-ms, per partition
    worst: dict[int, dict[int, float]] = defaultdict(dict)
    for at, lat, part in latencies:
        bucket = int(at // 500) * 500
        worst[bucket][part] = max(worst[bucket].get(part, 0.0), lat)
    windows = []
    for bucket in sorted(worst):
        slow = sorted(p for p, lat in worst[bucket].items() if lat >= args.slow_ms)
        if not slow:
            continue
        lo, hi = bucket - 200, bucket + 500 + max(worst[bucket].values())
        timeline = [{"at_ms": t, "event": name, **{k: v for k, v in f.items() if k not in ("topic", "due_at")}}
                    for t, name, f in events if lo <= t <= hi and (
                        f.get("partition") in slow or name.startswith("metadata")
                        or (name == "response_received" and f["api_key"] == "PRODUCE"
                            and f["latency_ms"] >= args.held_ms))]
        windows.append({"scheduled_from_ms": bucket, "partitions": slow,
                        "worst_ms": {p: round(worst[bucket][p], 1) for p in slow}, "timeline": timeline})
    return {
        "benchmark": "trace_leader_move", "command": " ".join(["trace_leader_move.py", *sys.argv[1:]]),
        "rate": args.rate, "seconds": args.seconds, "move_every_s": args.move_every,
        "broker_config": args.broker_config, "load_avg": os.getloadavg(),
        "latency_ms": {"count": len(values), "p50": _pct(values, 0.5), "p99": _pct(values, 0.99),
                       "max": round(max(values), 1) if values else 0.0,
                       "median_of_all": round(statistics.median(values), 1) if values else 0.0},
        "moves": moves, "held_produce": held, "slow_windows": windows,
        "counts": {name: sum(1 for _, n, _ in events if n == name) for name in sorted({n for _, n, _ in events})},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=12.0, help="how long records are offered (default 12)")
    p.add_argument("--rate", type=int, default=2000, help="records per second (default 2000)")
    p.add_argument("--move-every", type=float, default=2.0, help="seconds between leader moves (default 2)")
    p.add_argument("--held-ms", type=float, default=300.0,
                   help="report Produce answers that took at least this long (default 300)")
    p.add_argument("--slow-ms", type=float, default=700.0,
                   help="a 500 ms window is slow when a record scheduled in it waited this long (default 700)")
    p.add_argument("--broker-config", default="", help="k=v,... broker settings for every broker")
    args = p.parse_args(argv)
    for name in ("seconds", "rate", "move_every"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')}: must be > 0")
    if any("=" not in kv for kv in args.broker_config.split(",") if kv):
        p.error("--broker-config: expected k=v pairs separated by commas")
    print(json.dumps(asyncio.run(run(args)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
