"""What each embedded broker costs to start and to keep: Apache Kafka (the default where Java is), Tansu, noida-db.

Per kind and round, one ``EmbeddedBroker`` is started, as ``EmbeddedBroker(kind=...)`` and ``akresil broker`` do:
the wall time until it answers, the CPU seconds it spent getting there (the broker's own process, plus Kafka's
storage-format JVM), its resident memory once ready (the broker, plus Tansu's session-cap relay) and again after a
small workload (a 6-partition topic, 20,000 records of 100 bytes produced and consumed), and the time ``stop()``
takes.  "warm" means Kafka's jars are in the cache; ``--cold-rounds N`` (Kafka only) starts from an empty cache
each time, so the jars come from Maven Central (``AKRESIL_MAVEN_REPO``) first (``fetch_jars_s``; ``first_start_s``
is that plus the start).  ``--demo`` also times ``akresil
demo --kind K`` end to end (default 15 s of chaos).  Medians and the worst round; JSON on stdout.

    python benchmarks/bench_embedded_start.py [--rounds 3] [--cold-rounds 1] [--kinds kafka,tansu,noida] [--demo]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import orjson

from akresil import Consumer, NewTopic, Producer, TopicPartition
from akresil.admin import Admin
from akresil.testing import EmbeddedBroker, resolve_kafka_jars

RECORDS = 20_000
PARTITIONS = 6


def _proc_rss_mb(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _proc_cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")     # utime + stime


def broker_pids(broker: EmbeddedBroker) -> list[int]:
    """The broker process, and Tansu's relay when there is one."""
    pids = [broker.pid] if broker.pid is not None else []
    if broker._relay is not None:
        pids.append(broker._relay.pid)
    return pids


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def workload(bootstrap: str) -> None:
    topic = f"bench-start-{time.monotonic_ns()}"
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, PARTITIONS)])
    value = b"x" * 100
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for start in range(0, RECORDS, 2_000):
            await producer.send_many(topic, [(None, value)] * 2_000)
    seen = 0
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        with anyio.fail_after(120):
            while seen < RECORDS:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    seen += len(records)


def one_round(kind: str) -> dict[str, float]:
    cpu_before = _children_cpu_s()
    began = time.perf_counter()
    broker = EmbeddedBroker(kind=kind).start()          # type: ignore[arg-type]
    try:
        start_s = time.perf_counter() - began
        pids = broker_pids(broker)
        cpu_s = sum(_proc_cpu_s(pid) for pid in pids) + (_children_cpu_s() - cpu_before)
        rss_ready = sum(_proc_rss_mb(pid) for pid in pids)
        anyio.run(workload, broker.bootstrap_servers)
        rss_loaded = sum(_proc_rss_mb(pid) for pid in broker_pids(broker))
    finally:
        stopping = time.perf_counter()
        broker.stop()
        stop_s = time.perf_counter() - stopping
    return {"start_s": start_s, "start_cpu_s": cpu_s, "rss_mb_ready": rss_ready, "rss_mb_after_load": rss_loaded,
            "stop_s": stop_s}


def demo_round(kind: str, duration: float) -> dict[str, float]:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "akresil", "demo", "--kind", kind, "--duration", f"{duration:g}"],
                          capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - began
    if done.returncode != 0:     # counted, not fatal: a failed check is a finding (the summary goes to stderr)
        print(f"akresil demo --kind {kind} failed:\n{done.stderr[-1500:]}", file=sys.stderr, flush=True)
    return {"demo_wall_s": wall, "demo_passed": float(done.returncode == 0)}


def summarize(rounds: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": len(rounds)}
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        worst = min(values) if key.endswith("passed") else max(values)
        out[key] = {"median": round(statistics.median(values), 3), "worst": round(worst, 3)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold-rounds", type=int, default=1, help="Kafka starts from an empty jar cache")
    parser.add_argument("--kinds", default="kafka,tansu,noida")
    parser.add_argument("--demo", action="store_true", help="also time `akresil demo --kind K` per kind")
    parser.add_argument("--demo-duration", type=float, default=15.0)
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    results: dict[str, Any] = {"load_average_before": os.getloadavg(), "cpus": os.cpu_count(), "kinds": {}}
    for kind in kinds:
        print(f"{kind}: {args.rounds} warm round(s)", file=sys.stderr, flush=True)
        entry: dict[str, Any] = {"warm": summarize([one_round(kind) for _ in range(args.rounds)])}
        if kind == "kafka" and args.cold_rounds:
            cold = []
            for _ in range(args.cold_rounds):
                print("kafka: a cold round (jars from Maven Central)", file=sys.stderr, flush=True)
                with tempfile.TemporaryDirectory(prefix="akresil-cold-cache-") as cache:
                    os.environ["AKRESIL_KAFKA_CACHE"] = cache
                    try:
                        began = time.perf_counter()
                        resolve_kafka_jars()                # what a first start does before the JVMs
                        fetch_s = time.perf_counter() - began
                        measured = one_round(kind)
                        cold.append({"fetch_jars_s": fetch_s, **measured,
                                     "first_start_s": fetch_s + measured["start_s"]})
                    finally:
                        del os.environ["AKRESIL_KAFKA_CACHE"]
            entry["cold"] = summarize(cold)
        if args.demo:
            print(f"{kind}: akresil demo", file=sys.stderr, flush=True)
            entry["demo"] = summarize([demo_round(kind, args.demo_duration) for _ in range(args.rounds)])
        results["kinds"][kind] = entry
    results["load_average_after"] = os.getloadavg()
    sys.stdout.write(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
