"""The long chaos soak (issue #10): idempotent producers and a 2-member consumer group behind a FaultProxy
whose seeded script moves leaders, throttles, drops connections, stops nodes and delays responses.

Prints one JSON document (orjson): the configuration, every ``SoakReport`` count (sent, acked, failed by
error, consumed, redelivered, duplicates, reordered, lost, pending at close, leaked tasks / fds) and the
broken invariants (``violations``, empty on success). Exit status 1 when an invariant broke.

    python benchmarks/bench_chaos.py --duration 300 --seed 1
    python benchmarks/bench_chaos.py --duration 60 --seed 7 --broker noida --auto-commit
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import sys
import time

import orjson

from akresil.testing.broker import EmbeddedBroker
from akresil.testing.chaos import DEFAULT_WEIGHTS, Fault, SoakConfig, run_soak


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of producing under faults")
    ap.add_argument("--seed", type=int, default=1, help="fault script and client mix seed")
    ap.add_argument("--broker", choices=("tansu", "noida"), default="tansu")
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rate", type=float, default=1_000.0, help="records/s per producer")
    ap.add_argument("--fault-interval-ms", type=float, default=800.0, help="mean gap between faults")
    commit = ap.add_mutually_exclusive_group()
    commit.add_argument("--auto-commit", dest="auto_commit", action="store_true", default=None)
    commit.add_argument("--manual-commit", dest="auto_commit", action="store_false")
    ap.add_argument("--drain-timeout", type=float, default=120.0, help="seconds the group may take to catch up")
    ap.add_argument("--verbose", action="store_true", help="log akresil warnings to stderr")
    return ap.parse_args(argv)


#: faults a broker cannot take part in, with the reason (docs/brokers.md): left out of its soaks, said so in the output
EXCLUDED: dict[str, dict[Fault, str]] = {
    "noida": {Fault.KILL_CONSUMER: "noida-db never expires a crashed member's session, so its partitions would "
                                   "stay unconsumed (docs/brokers.md)"},
}


async def main(args: argparse.Namespace) -> int:
    excluded = EXCLUDED.get(args.broker, {})
    weights = {fault: w for fault, w in DEFAULT_WEIGHTS.items() if fault not in excluded}
    cfg = SoakConfig(seed=args.seed, duration_s=args.duration, producers=args.producers,
                     partitions=args.partitions, records_per_s=args.rate, auto_commit=args.auto_commit,
                     drain_timeout_s=args.drain_timeout, mean_fault_interval_ms=args.fault_interval_ms,
                     weights=weights)
    started = time.monotonic()
    with EmbeddedBroker(kind=args.broker) as broker:
        report = await run_soak(cfg, broker.bootstrap_servers)
    out = {"bench": "chaos", "broker": args.broker, "python": platform.python_version(),
           "config": {"duration_s": cfg.duration_s, "seed": cfg.seed, "producers": cfg.producers,
                      "partitions": cfg.partitions, "records_per_s_per_producer": cfg.records_per_s,
                      "mean_fault_interval_ms": cfg.mean_fault_interval_ms,
                      "faults_excluded": {f.value: why for f, why in excluded.items()}},
           "wall_s": round(time.monotonic() - started, 1),
           "acked_per_s": round(report.acked / cfg.duration_s, 1),
           "report": report.to_dict(), "violations": report.violations()}
    sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 1 if out["violations"] else 0


if __name__ == "__main__":
    ns = parse_args()
    logging.basicConfig(level=logging.WARNING if ns.verbose else logging.ERROR, stream=sys.stderr)
    sys.exit(asyncio.run(main(ns)))
