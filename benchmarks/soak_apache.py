"""One-hour soak on Apache Kafka (issue #35, item 4; not in CI): does the client stay the same size and speed?

A 3-broker Apache Kafka cluster (``akresil.testing.KafkaCluster``), one topic (6 partitions, replication factor 3,
``min.insync.replicas=2``), an idempotent producer with ``acks=all`` driven open-loop at a fixed rate (a task per
record awaiting ``send``; latency is taken from the record's *scheduled* time, so a stall shows up as latency rather
than as a slower offered load; a failure is counted in the minute it was scheduled, never dropped), and a 2-member
consumer group reading everything.  Every minute the leaders of half the partitions move (a reassignment that
reorders the replicas, then a preferred-leader election: ``KafkaCluster.move_leaders``, what an operator does).

Every ``--sample-s`` seconds the client process samples its resident memory (``/proc/self/status`` VmRSS), open
sockets (``/proc/self/fd`` links to ``socket:``), asyncio tasks (all, and the "background" ones: all minus the
per-record send tasks in flight and the soak's own), and GC collections.  Each minute gets produce latency
p50/p99/max (by scheduled minute), end-to-end lag p99 (from a record's acknowledgement to its receipt by a group
member, by receipt minute) and counts.  At the end: RSS growth after warm-up against the 5 % target, the trend of
sockets and tasks, whether per-minute p99 stayed steady, the counts (acked, failed, consumed, duplicated, missing).

    python benchmarks/soak_apache.py --minutes 60 --rate 500 --out soak.json --plot docs/img/bench/soak.png
    python benchmarks/soak_apache.py --minutes 5 --tracemalloc   # where the growth is allocated (slower)

Prints one JSON document (orjson) and writes it to ``--out``; exit status 1 when a target is missed or a record
is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import platform
import statistics
import sys
import time
import tracemalloc
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from akresil import Consumer, Producer

RECORD_BYTES = 100
RSS_GROWTH_LIMIT = 0.05
P99_STEADY_LIMIT = 1.5   # last third of the run's median per-minute p99 over the first third's (after warm-up)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0, help="minutes of producing")
    ap.add_argument("--rate", type=float, default=500.0, help="records/s offered (open loop)")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--warmup-minutes", type=float, default=5.0,
                    help="minutes excluded from the growth figures (caches, pools, JIT-less Python warm-up)")
    ap.add_argument("--sample-s", type=float, default=10.0, help="seconds between resource samples")
    ap.add_argument("--move-every-s", type=float, default=60.0, help="seconds between leader moves")
    ap.add_argument("--drain-timeout-s", type=float, default=120.0, help="seconds the group may take to catch up")
    ap.add_argument("--bootstrap", default=None, help="an already running cluster (no leader moves without "
                                                      "KafkaCluster: they are skipped)")
    ap.add_argument("--tracemalloc", action="store_true",
                    help="diff tracemalloc snapshots (end of warm-up vs end) and report the top growing lines")
    ap.add_argument("--reanalyse", type=Path, default=None, metavar="JSON",
                    help="no run: recompute the verdicts (and --plot) from a saved report")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    ap.add_argument("--plot", type=Path, default=None, help="write a PNG of RSS, sockets, tasks and p99 here")
    ap.add_argument("--verbose", action="store_true", help="log akresil warnings to stderr")
    args = ap.parse_args(argv)
    for name in ("minutes", "rate", "sample_s", "move_every_s", "drain_timeout_s"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be > 0")
    if args.warmup_minutes < 0 or args.warmup_minutes >= args.minutes:
        ap.error("--warmup-minutes must be >= 0 and < --minutes")
    if args.partitions < 1:
        ap.error("--partitions must be >= 1")
    return args


# ---------------------------------------------------------------------------------------------- process probes
def rss_mib() -> float:
    """Resident set size of this process (VmRSS), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_sockets() -> int:
    """File descriptors of this process that are sockets."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                n += 1
        except OSError:       # closed between listdir and readlink
            continue
    return n


def pct(sorted_values: Any, q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (nan when empty)."""
    if not len(sorted_values):
        return float("nan")
    return float(sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))])


def slope_per_hour(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (seconds), per hour."""
    if len(xs) < 2:
        return 0.0
    return statistics.linear_regression(xs, ys).slope * 3600.0


# ---------------------------------------------------------------------------------------------- the soak state
@dataclass
class Minute:
    """Produce outcomes of the records scheduled in one minute."""
    scheduled: int = 0
    resolved: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    latency_ms: array = field(default_factory=lambda: array("d"))

    def summary(self, index: int) -> dict[str, Any]:
        lat = sorted(self.latency_ms)
        return {"minute": index, "scheduled": self.scheduled, "acked": len(lat), "failed": self.failed,
                "errors": self.errors, "p50_ms": round(pct(lat, 0.50), 1), "p99_ms": round(pct(lat, 0.99), 1),
                "max_ms": round(lat[-1], 1) if lat else float("nan")}


@dataclass
class Soak:
    args: argparse.Namespace
    topic: str
    t0: float = 0.0
    produced: int = 0
    acked: int = 0
    failed: int = 0
    consumed: int = 0
    duplicated: int = 0
    foreign: int = 0
    in_flight: int = 0
    seen: bytearray = field(default_factory=bytearray)
    acked_bits: bytearray = field(default_factory=bytearray)
    ack_at: dict[int, float] = field(default_factory=dict)       # acked, not yet received
    received_at: dict[int, float] = field(default_factory=dict)  # received before its acknowledgement came back
    minutes: dict[int, Minute] = field(default_factory=dict)
    lag_ms: dict[int, array] = field(default_factory=dict)       # by receipt minute
    done_minutes: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    moves: list[dict[str, Any]] = field(default_factory=list)
    producing: bool = True
    moving: asyncio.Lock = field(default_factory=asyncio.Lock)

    def minute_of(self, t: float) -> int:
        return int((t - self.t0) // 60)

    # -- produce
    async def send_one(self, producer: Producer, seq: int, scheduled: float) -> None:
        m = self.minutes[self.minute_of(scheduled)]
        try:
            await producer.send(self.topic, seq.to_bytes(8, "big") + PAD)
        except Exception as e:  # noqa: BLE001 - every failure is counted, by type, in its scheduled minute
            self.failed += 1
            m.failed += 1
            name = type(e).__name__
            m.errors[name] = m.errors.get(name, 0) + 1
        else:
            now = time.monotonic()
            self.acked += 1
            m.latency_ms.append((now - scheduled) * 1000.0)
            self.acked_bits[seq] = 1
            got = self.received_at.pop(seq, None)
            if got is None:
                self.ack_at[seq] = now
            else:
                self.record_lag(got, got - now)
        finally:
            m.resolved += 1
            self.in_flight -= 1

    async def produce(self, producer: Producer, tasks: set[asyncio.Task[None]]) -> None:
        """Open loop: records are due at t0 + seq / rate whatever the client's speed."""
        rate, end = self.args.rate, self.t0 + self.args.minutes * 60.0
        seq = 0
        while True:
            now = time.monotonic()
            due = min(int((now - self.t0) * rate), int(self.args.minutes * 60.0 * rate))
            while seq < due:
                scheduled = self.t0 + seq / rate
                minute = self.minute_of(scheduled)
                m = self.minutes.get(minute)
                if m is None:
                    m = self.minutes[minute] = Minute()
                m.scheduled += 1
                self.produced += 1
                self.in_flight += 1
                task = asyncio.create_task(self.send_one(producer, seq, scheduled))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                seq += 1
            if now >= end:
                break
            await asyncio.sleep(0.005)
        self.producing = False

    # -- consume
    def record_lag(self, received: float, lag_s: float) -> None:
        minute = self.minute_of(received)
        bucket = self.lag_ms.get(minute)
        if bucket is None:
            bucket = self.lag_ms[minute] = array("d")
        bucket.append(lag_s * 1000.0)

    async def member(self, index: int, stop: asyncio.Event, bootstrap: str) -> None:
        async with Consumer(self.topic, bootstrap_servers=bootstrap, group_id=f"soak-{self.topic}",
                            auto_offset_reset="earliest", client_id=f"soak-member-{index}") as c:
            while not stop.is_set():
                batches = await c.getmany(timeout_ms=200)
                now = time.monotonic()
                for records in batches.values():
                    for rec in records:
                        value = rec.value
                        if value is None or len(value) != RECORD_BYTES:
                            self.foreign += 1
                            continue
                        seq = int.from_bytes(value[:8], "big")
                        if self.seen[seq]:
                            self.duplicated += 1
                            continue
                        self.seen[seq] = 1
                        self.consumed += 1
                        acked = self.ack_at.pop(seq, None)
                        if acked is None:
                            self.received_at[seq] = now
                        else:
                            self.record_lag(now, now - acked)

    # -- per-minute figures and samples
    def close_minutes(self, now: float, final: bool = False) -> None:
        current = self.minute_of(now)
        for minute in sorted(self.minutes):
            m = self.minutes[minute]
            if (minute < current or final) and m.resolved == m.scheduled:
                row = m.summary(minute)
                lag = sorted(self.lag_ms.pop(minute, ()))
                row["lag_p99_ms"] = round(pct(lag, 0.99), 1)
                row["lag_received"] = len(lag)
                self.done_minutes.append(row)
                del self.minutes[minute]

    async def sampler(self, tasks: set[asyncio.Task[None]], own_tasks: int, tm: dict[str, Any]) -> None:
        warm_end = self.t0 + self.args.warmup_minutes * 60.0
        next_at = self.t0
        while True:
            next_at += self.args.sample_s
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            async with self.moving:          # not while a leader move's admin client holds its sockets
                now = time.monotonic()
                all_tasks = len(asyncio.all_tasks())
                sending = sum(1 for t in tasks if not t.done())   # the set drops a finished task a turn later
                self.samples.append({
                    "t_s": round(now - self.t0, 1), "rss_mib": round(rss_mib(), 2), "sockets": open_sockets(),
                    "tasks": all_tasks, "send_tasks": sending,
                    "background_tasks": all_tasks - sending - own_tasks,
                    "gc_collections": [s["collections"] for s in gc.get_stats()],
                    "produced": self.produced, "acked": self.acked, "failed": self.failed,
                    "consumed": self.consumed, "duplicated": self.duplicated,
                    "awaiting_receipt": len(self.ack_at), "received_before_ack": len(self.received_at)})
                self.close_minutes(now)
                if tm.get("on") and "warm" not in tm and now >= warm_end:
                    tm["warm"] = tracemalloc.take_snapshot()
                s = self.samples[-1]
                print(f"[soak] {s['t_s']:7.0f}s rss {s['rss_mib']:.1f} MiB sockets {s['sockets']} "
                      f"tasks {s['background_tasks']}+{s['send_tasks']} acked {s['acked']} failed {s['failed']} "
                      f"consumed {s['consumed']}", file=sys.stderr, flush=True)

    async def mover(self, cluster: Any) -> None:
        """Every interval, move the leaders of half the partitions (alternate halves) one broker on."""
        brokers = cluster.broker_ids
        round_ = 0
        while self.producing:
            await asyncio.sleep(self.args.move_every_s - (time.monotonic() - self.t0) % self.args.move_every_s)
            if not self.producing:
                break
            round_ += 1
            async with self.moving:
                started = time.monotonic()
                try:
                    async with cluster.admin() as admin:
                        desc = (await admin.describe_topics([self.topic]))[self.topic].partitions
                    leaders = {p.partition: p.leader for p in desc}
                    chosen = [p for p in sorted(leaders) if p % 2 == round_ % 2]
                    targets = {p: brokers[(brokers.index(leaders[p]) + 1) % len(brokers)]
                               if leaders[p] in brokers else brokers[0] for p in chosen}
                    await cluster.move_leaders(self.topic, targets, timeout_s=60.0)
                    error = None
                except Exception as e:  # noqa: BLE001 - a failed move is reported, the soak goes on
                    targets, error = {}, f"{type(e).__name__}: {e}"
                self.moves.append({"t_s": round(started - self.t0, 1), "took_ms": round(
                    (time.monotonic() - started) * 1000.0, 1), "moved": {str(p): n for p, n in targets.items()},
                    "error": error})


PAD = b"\x00" * (RECORD_BYTES - 8)


# ---------------------------------------------------------------------------------------------- verdicts
def analyse(samples: list[dict[str, Any]], minutes: list[dict[str, Any]], config: dict[str, Any]
            ) -> dict[str, Any]:
    """Verdicts from a run's samples and minute rows (also ``--reanalyse`` on a saved JSON).  Only samples taken
    while producing count: the one the sampler may take as the clients close is not the steady state."""
    warm_s = config["warmup_minutes"] * 60.0
    end_s = config["minutes"] * 60.0
    after = [s for s in samples if warm_s < s["t_s"] <= end_s - 1.0]
    if len(after) < 4:
        return {"error": "too few samples after warm-up for a verdict"}
    per_min = max(1, round(60.0 / config["sample_s"]))
    base = statistics.fmean(s["rss_mib"] for s in after[:per_min])
    last = statistics.fmean(s["rss_mib"] for s in after[-per_min:])
    xs = [s["t_s"] for s in after]
    growth = (last - base) / base
    out: dict[str, Any] = {
        "warmup": f"the first {config['warmup_minutes']:g} minutes are excluded; RSS growth compares the mean of "
                  "the first minute of samples after warm-up with the mean of the last minute's",
        "rss_after_warmup_mib": round(base, 2), "rss_end_mib": round(last, 2),
        "rss_peak_mib": round(max(s["rss_mib"] for s in after), 2),
        "rss_growth_pct": round(growth * 100.0, 2),
        "rss_slope_mib_per_h": round(slope_per_hour(xs, [s["rss_mib"] for s in after]), 2),
    }
    thirds = max(1, len(after) // 3)
    for key in ("sockets", "background_tasks"):
        # a sample from before the sampler skipped finished send tasks can read negative: not a count, left out
        kept = [s for s in after if s[key] >= 0]
        ys = [float(s[key]) for s in kept]
        out[f"{key}_min_max"] = [int(min(ys)), int(max(ys))]
        out[f"{key}_slope_per_h"] = round(slope_per_hour([s["t_s"] for s in kept], ys), 2)
        # flat: the last third never goes above the first third's highest (a pool may breathe, not climb)
        out[f"{key}_flat"] = max(ys[-thirds:]) <= max(ys[:thirds])
    rows = [r for r in minutes if r["minute"] * 60 >= warm_s and r["acked"]]
    p99s = [r["p99_ms"] for r in rows]
    if len(p99s) >= 3:
        k = max(1, len(p99s) // 3)
        first, last_ = statistics.median(p99s[:k]), statistics.median(p99s[-k:])
        out["p99_per_minute_ms"] = {"median": round(statistics.median(p99s), 1), "min": min(p99s),
                                    "max": max(p99s), "first_third_median": first, "last_third_median": last_,
                                    "slope_ms_per_h": round(slope_per_hour(
                                        [r["minute"] * 60.0 for r in rows], p99s), 1)}
        out["p99_steady"] = last_ <= P99_STEADY_LIMIT * first
    lags = [r["lag_p99_ms"] for r in rows if r["lag_received"]]
    if lags:
        out["lag_p99_per_minute_ms"] = {"median": round(statistics.median(lags), 1), "max": max(lags)}
    out["targets"] = {
        "rss_growth_le_5pct": growth <= RSS_GROWTH_LIMIT,
        "sockets_flat": out["sockets_flat"], "tasks_flat": out["background_tasks_flat"],
        "p99_steady": out.get("p99_steady", False),
        "nothing_missing": None,  # filled in by main
    }
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    end_s = report["config"]["minutes"] * 60.0 - 1.0
    samples, minutes = [s for s in report["samples"] if s["t_s"] <= end_s], report["minutes"]
    t = [s["t_s"] / 60.0 for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(8, 9), sharex=True)
    axes[0].plot(t, [s["rss_mib"] for s in samples], color="tab:blue")
    axes[0].set_ylabel("RSS (MiB)")
    axes[1].plot(t, [s["sockets"] for s in samples], color="tab:green")
    axes[1].set_ylabel("open sockets")
    bg = [s for s in samples if s["background_tasks"] >= 0]    # see analyse: a negative count is no count
    axes[2].plot([s["t_s"] / 60.0 for s in bg], [s["background_tasks"] for s in bg], color="tab:purple",
                 label="background")
    axes[2].plot(t, [s["send_tasks"] for s in samples], color="tab:gray", alpha=0.6, label="send() in flight")
    axes[2].set_ylabel("asyncio tasks")
    axes[2].legend(loc="upper right", fontsize=8)
    mx = [r["minute"] + 0.5 for r in minutes]
    axes[3].plot(mx, [r["p99_ms"] for r in minutes], color="tab:red", marker=".", label="produce p99")
    axes[3].plot(mx, [r["p50_ms"] for r in minutes], color="tab:orange", marker=".", label="produce p50")
    axes[3].plot(mx, [r["lag_p99_ms"] for r in minutes], color="tab:brown", marker=".", alpha=0.7,
                 label="ack→receipt p99")
    axes[3].set_ylabel("ms (per minute)")
    axes[3].set_yscale("log")
    axes[3].legend(loc="upper right", fontsize=8)
    axes[3].set_xlabel("minutes")
    warm = report["config"]["warmup_minutes"]
    for ax in axes:
        ax.axvline(warm, color="black", linestyle=":", linewidth=1)
        ax.grid(alpha=0.3)
    c = report["config"]
    fig.suptitle(f"akresil soak on Apache Kafka {report.get('kafka', '')}: {c['rate']:g} records/s acks=all, "
                 f"leaders moved every {c['move_every_s']:g} s", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


async def run(args: argparse.Namespace, bootstrap: str, cluster: Any) -> dict[str, Any]:
    topic = f"soak-{os.getpid()}"
    if cluster is not None:
        await cluster.create_topic(topic, partitions=args.partitions, replication_factor=3,
                                   configs={"min.insync.replicas": "2"})
    else:
        from akresil import Admin, NewTopic
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, num_partitions=args.partitions, replication_factor=3,
                                                configs={"min.insync.replicas": "2"})])
    soak = Soak(args, topic)
    capacity = int(args.minutes * 60.0 * args.rate) + 1
    soak.seen = bytearray(capacity)           # allocated up front: the harness's own memory must not grow
    soak.acked_bits = bytearray(capacity)
    tm: dict[str, Any] = {"on": args.tracemalloc}
    if args.tracemalloc:
        tracemalloc.start(10)
    stop = asyncio.Event()
    send_tasks: set[asyncio.Task[None]] = set()
    async with Producer(bootstrap_servers=bootstrap, acks="all", client_id="soak-producer") as producer:
        await producer.send(topic, b"warm-up metadata")   # not a sequence record: counted as foreign on receipt
        soak.t0 = time.monotonic()
        members = [asyncio.create_task(soak.member(i, stop, bootstrap)) for i in range(2)]
        mover = asyncio.create_task(soak.mover(cluster)) if cluster is not None else None
        # the soak's own tasks (this one, the members, the mover, the sampler) are not the client's
        own = 1 + len(members) + (mover is not None) + 1
        sampler = asyncio.create_task(soak.sampler(send_tasks, own, tm))
        await soak.produce(producer, send_tasks)
        if send_tasks:
            await asyncio.gather(*list(send_tasks))
        sampler.cancel()      # the steady state ends here: no sample of clients closing
    drain_end = time.monotonic() + args.drain_timeout_s
    while soak.consumed < soak.acked and time.monotonic() < drain_end:
        await asyncio.sleep(0.2)
    stop.set()
    await asyncio.gather(*members)
    if mover is not None:
        mover.cancel()
    soak.close_minutes(time.monotonic(), final=True)
    missing = sum(1 for i in range(soak.produced) if soak.acked_bits[i] and not soak.seen[i])
    report: dict[str, Any] = {
        "bench": "soak_apache", "python": platform.python_version(),
        "kafka": getattr(cluster, "version", None),
        "config": {"minutes": args.minutes, "rate": args.rate, "partitions": args.partitions, "replication": 3,
                   "min_insync_replicas": 2, "acks": "all", "record_bytes": RECORD_BYTES, "consumers": 2,
                   "warmup_minutes": args.warmup_minutes, "sample_s": args.sample_s,
                   "move_every_s": args.move_every_s if cluster is not None else None},
        "load_avg_end": list(os.getloadavg()), "cpu_count": os.cpu_count(),
        "counts": {"produced": soak.produced, "acked": soak.acked, "failed": soak.failed,
                   "consumed": soak.consumed, "duplicated": soak.duplicated, "missing": missing,
                   "leader_moves": len(soak.moves), "leader_moves_failed": sum(1 for m in soak.moves if m["error"])},
    }
    verdict = analyse(soak.samples, soak.done_minutes, report["config"])
    if "targets" in verdict:
        verdict["targets"]["nothing_missing"] = missing == 0
    report["verdict"] = verdict
    if args.tracemalloc and "warm" in tm:
        end = tracemalloc.take_snapshot()
        diff = end.compare_to(tm["warm"], "traceback")
        report["tracemalloc_top_growth"] = [
            {"size_kib": round(d.size_diff / 1024, 1), "count": d.count_diff,
             "where": [f"{fr.filename}:{fr.lineno}" for fr in d.traceback][-4:]}
            for d in diff[:15]]
        tracemalloc.stop()
    report["minutes"] = soak.done_minutes
    report["moves"] = soak.moves
    report["samples"] = soak.samples
    return report


def main() -> int:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING if args.verbose else logging.ERROR, stream=sys.stderr)
    if args.reanalyse is not None:
        report = orjson.loads(args.reanalyse.read_bytes())
        verdict = analyse(report["samples"], report["minutes"], report["config"])
        if "targets" in verdict:
            verdict["targets"]["nothing_missing"] = report["counts"]["missing"] == 0
        report["verdict"] = verdict
        return finish(args, report)
    cluster = None
    if args.bootstrap is None:
        from akresil.testing import KafkaCluster
        cluster = KafkaCluster(brokers=3).start()
    try:
        bootstrap = args.bootstrap or cluster.bootstrap_servers
        report = asyncio.run(run(args, bootstrap, cluster))
    finally:
        if cluster is not None:
            cluster.stop()
    return finish(args, report)


def finish(args: argparse.Namespace, report: dict[str, Any]) -> int:
    text = orjson.dumps(report, option=orjson.OPT_INDENT_2).decode()
    sys.stdout.write(text + "\n")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.plot:
        plot(report, args.plot)
    targets = report["verdict"].get("targets", {})
    return 0 if targets and all(targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
