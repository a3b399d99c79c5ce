"""Where the slowest records of "before the first move" were scheduled (issue 35 item 3), on Apache Kafka.

``akresil bench leader-move --harness apache`` applies a move as an operator does (a replica reorder, then a
preferred-leader election) and, until the harness change of 2026-11-29 afternoon, counted the move from when
Metadata reported every new leader: the window "before the first move" then held the records scheduled during
the 0.3-1.6 s the reassignment and election took. This runs the same phase (``ApachePhase``, the bench's load,
warm-up and script) per client and round, notes when each move began and when it was confirmed, and gives the
window both ways: up to the confirmation (the old definition) and up to the move's start (``fault_windows`` now),
with the schedule span of the slowest 1 % of the old window. Prints one JSON line per phase, writes a JSON
document with every phase to ``--out``. Not in CI.

    python benchmarks/leader_move_window.py [--rounds 4] [--clients akresil,aiokafka] --out window.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
from typing import Any

from akresil.bench.apache_runner import ApachePhase, for_apache
from akresil.bench.clients import now_s
from akresil.bench.scenarios import AppliedStep, build
from akresil.bench.script import FaultStep
from akresil.testing.kafka_cluster import KafkaCluster


class TimedPhase(ApachePhase):
    """The bench's phase, noting when each step's application began and when it was confirmed (s from start)."""

    move_times: list[tuple[float, float]]

    async def _apply(self, cluster: KafkaCluster, step: FaultStep, start: float) -> AppliedStep:
        began = now_s()
        applied = await super()._apply(cluster, step, start)
        self.move_times.append((began - start, applied.at_s - start))
        return applied


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 1)


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with KafkaCluster(brokers=3) as cluster:
        for r in range(args.rounds):
            for client in args.clients.split(","):
                sc = for_apache(build("leader-move", quick=True, seed=r + 1))
                phase = TimedPhase(cluster, sc, client, r + 1)
                phase.move_times = []
                load = os.getloadavg()[0]
                data = await phase.run()
                log, start = data.log, data.start_s
                began, confirmed = phase.move_times[0]
                old = [(log.scheduled_s[i] - start, (log.done_s[i] - log.scheduled_s[i]) * 1000)
                       for i in range(len(log))
                       if log.scheduled_s[i] - start < confirmed and not math.isnan(log.done_s[i])]
                new = [lat for at, lat in old if at < began]
                p99 = _pct([lat for _, lat in old], 0.99)
                slow = [at for at, lat in old if lat >= p99]
                row = {"client": client, "round": r, "load_avg_1m": round(load, 2),
                       "moves_s": [[round(a, 3), round(b, 3)] for a, b in phase.move_times],
                       "to_confirmation": {"count": len(old), "p50_ms": _pct([lat for _, lat in old], 0.5),
                                           "p99_ms": p99},
                       "to_move_start": {"count": len(new), "p50_ms": _pct(new, 0.5), "p99_ms": _pct(new, 0.99),
                                         "max_ms": round(max(new), 1)},
                       "slowest_1pct_of_old_window_scheduled_s": [round(min(slow), 3), round(max(slow), 3)]}
                print(json.dumps(row), flush=True)
                out.append(row)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4, help="rounds per client (default 4)")
    p.add_argument("--clients", default="akresil,aiokafka", help="comma-separated bench clients")
    p.add_argument("--out", required=True, help="where the JSON document goes")
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    rows = asyncio.run(run(args))
    with open(args.out, "w") as f:
        json.dump({"benchmark": "benchmarks/leader_move_window.py", "phases": rows}, f, indent=1)


if __name__ == "__main__":
    main()
