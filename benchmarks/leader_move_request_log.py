"""Leader moves on Apache Kafka with the brokers' request log (issue 35 item 3): akresil trees and aiokafka.

One 3-broker ``KafkaCluster`` whose brokers log every request (``kafka.request.logger`` at DEBUG, a file per
broker: client id, partitions and sizes, each partition's answer, the broker's queue / local / remote times).
Per round and phase a fresh topic in the leader-move bench's layout (6 partitions, 3 replicas, leader
``p % 3 + 1``), 12 warm-up records, then ``--seconds`` of 2,000 records/s of 100 B, a task per record awaiting the
send, ``acks=all``, ``linger_ms=5``; every partition's leader moved at 2, 4 and 6 s (reassignment + election, as
the bench does). Each phase runs in its own process: ``--trees name=path,...`` runs akresil from each source tree
(``PYTHONPATH``), alternating the order per round, so a change and a base worktree meet the same brokers; ``aiokafka``
as a tree name runs aiokafka instead. Prints a line per phase and writes a JSON document: latency from schedule
(all, before the first move began, the second after each move began), and from the request log the phase's
Produce requests and per-partition answers by error code (NOT_LEADER_OR_FOLLOWER = 6, OUT_OF_ORDER_SEQUENCE = 45),
and how many NOT_LEADER_OR_FOLLOWER answers left a request the broker had held for another partition's followers
(``remoteTimeMs`` >= 100: a partition that rode with a moved one's first Produce to its new leader).
Not in CI.

    python benchmarks/leader_move_request_log.py --trees base=/work/wt/x-base,new=/work/wt/x,aiokafka= --rounds 2 \\
        --out moves.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from akresil.bench.command import parse_broker_config
from akresil.testing.kafka_cluster import KafkaCluster, KafkaNode
from akresil.types import NewTopic

PARTITIONS = 6
RATE = 2000
MOVES_AT_S = (2.0, 4.0, 6.0)
_LINE = re.compile(r"^\[(\d+)\] Completed request:(.*)$")


class LoggedCluster(KafkaCluster):
    """A ``KafkaCluster`` whose brokers also write ``kafka.request.logger`` (DEBUG) to ``requests.log``."""

    @staticmethod
    def _log4j(node: KafkaNode) -> str:
        return KafkaCluster._log4j(node) + (
            "appender.req.type = File\n"
            "appender.req.name = REQ\n"
            f"appender.req.fileName = {node.workdir / 'requests.log'}\n"
            "appender.req.layout.type = PatternLayout\n"
            "appender.req.layout.pattern = [%d{UNIX_MILLIS}] %m%n\n"
            "logger.req.name = kafka.request.logger\n"
            "logger.req.level = DEBUG\n"
            "logger.req.additivity = false\n"
            "logger.req.appenderRef.req.ref = REQ\n")


#: a Produce the broker kept this long waiting for its followers (``remoteTimeMs``) was held, not answered in turn
HELD_MS = 100.0


def produce_answers(cluster: KafkaCluster, client_id: str) -> tuple[int, dict[int, int], int, float]:
    """(Produce requests of ``client_id``, its per-partition answers by error code, the NOT_LEADER_OR_FOLLOWER
    answers that came out of a held request: a partition refused only after another partition of the same request
    had waited ``HELD_MS`` or more for its followers, and the longest such wait in ms) from the brokers' logs."""
    requests, codes, refused_after_hold, longest = 0, dict[int, int](), 0, 0.0
    for node in cluster.nodes.values():
        path = node.workdir / "requests.log"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            m = _LINE.match(line)
            if not m:
                continue
            try:
                doc = json.loads(m.group(2))
            except json.JSONDecodeError:
                continue
            header = doc.get("requestHeader", {})
            if header.get("requestApiKey") != 0 or header.get("clientId") != client_id:
                continue
            requests += 1
            remote = doc.get("remoteTimeMs") or 0.0
            held, longest = remote >= HELD_MS, max(longest, remote)
            for topic in (doc.get("response") or {}).get("responses", ()):
                for part in topic["partitionResponses"]:
                    codes[part["errorCode"]] = codes.get(part["errorCode"], 0) + 1
                    refused_after_hold += held and part["errorCode"] == 6
    return requests, codes, refused_after_hold, round(longest, 1)


class Recorder:
    """akresil's event hook: (time, event, a few fields) of what the sender did, for the client-side timeline."""

    _KEPT = {"batch_sent": ("node_id", "partition", "records", "queue_ms", "attempt"),
             "response_received": ("node_id", "api_key", "latency_ms"),
             "metadata_request": ("node_id",), "metadata_refresh_requested": ("cause",),
             "batch_retry": ("partition", "reason", "attempt", "skip_backoff", "backoff_ms"),
             "batch_completed": ("partition", "records", "attempts")}

    def __init__(self) -> None:
        self.events: list[tuple[float, str, dict[str, Any]]] = []

    def on_event(self, name: str, fields: dict[str, Any]) -> None:
        kept = self._KEPT.get(name)
        if kept is not None:
            self.events.append((time.time(), name, {k: fields.get(k) for k in kept}))


async def client(bootstrap: str, topic: str, seconds: float, use_aiokafka: bool, idempotent: bool = True) -> None:
    """The load in this process: prints the load's start, then the latencies (s from start, ms) as JSON."""
    #: (scheduled s, ms from schedule, ms to the task's start, partition)
    latencies: list[tuple[float, float, float, int]] = []
    recorder = Recorder()
    if use_aiokafka:
        from aiokafka import AIOKafkaProducer
        ap = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, enable_idempotence=idempotent,
                              client_id=topic)
        await ap.start()

        async def send_aiokafka(part: int) -> Any:
            return await (await ap.send(topic, b"x" * 100, partition=part))
        send: Any = send_aiokafka
        close: Any = ap.stop
    else:
        from akresil import Producer
        p = Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, client_id=topic,
                     enable_idempotence=idempotent, hooks=[recorder])
        await p.start()

        def send_akresil(part: int) -> Any:
            return p.send(topic, b"x" * 100, partition=part)
        send = send_akresil
        close = p.close
    try:
        await asyncio.gather(*(send(i % PARTITIONS) for i in range(2 * PARTITIONS)))
        start = time.time()
        recorder.events.clear()
        cpu0 = time.process_time()
        print(json.dumps({"start": start}), flush=True)

        async def one(i: int, due: float) -> None:
            began = time.time()
            await send(i % PARTITIONS)
            done = time.time()
            latencies.append((round(due - start, 4), round((done - due) * 1000, 2), round((began - due) * 1000, 2),
                              i % PARTITIONS))

        total, i, tasks = int(RATE * seconds), 0, []
        while i < total:
            due = min(total, int((time.time() - start) * RATE) + 1)
            while i < due:
                tasks.append(asyncio.create_task(one(i, start + i / RATE)))
                i += 1
            await asyncio.sleep(0.005)
        await asyncio.gather(*tasks)
        cpu_s = time.process_time() - cpu0
    finally:
        await close()
    print(json.dumps({"latencies": latencies, "cpu_s": round(cpu_s, 3),
                      "events": [(round(t - start, 4), n, f) for t, n, f in recorder.events]}), flush=True)


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"count": 0}
    return {"count": len(ordered), "p50_ms": round(ordered[len(ordered) // 2], 1),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
            "max_ms": round(ordered[-1], 1)}


async def phase(cluster: KafkaCluster, name: str, tree: str, r: int, seconds: float,
                keep: str = "") -> dict[str, Any]:
    topic = f"lmrl-{name}-{r}-{int(time.time()) % 100000}"
    assignment = {p: [p % 3 + 1] + [(p % 3 + i) % 3 + 1 for i in range(1, 3)] for p in range(PARTITIONS)}
    async with cluster.admin() as admin:
        await admin.create_topics([NewTopic(topic, replica_assignment=assignment)])
    load = os.getloadavg()[0]
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", cluster.bootstrap_servers, topic, str(seconds), name,
        limit=1 << 26, stdout=asyncio.subprocess.PIPE, env=env)
    assert proc.stdout is not None
    start = json.loads(await proc.stdout.readline())["start"]
    leaders = {p: a[0] for p, a in assignment.items()}
    moves = []
    for at in MOVES_AT_S:
        if at >= seconds:
            break
        await asyncio.sleep(max(0.0, start + at - time.time()))
        targets = {p: n % 3 + 1 for p, n in leaders.items()}
        began = time.time() - start
        await cluster.move_leaders(topic, targets)
        leaders.update(targets)
        moves.append([round(began, 3), round(time.time() - start, 3)])
    result = json.loads(await proc.stdout.readline())
    latencies = [tuple(row[:3]) for row in result["latencies"]]
    if keep:     # the client's own timeline (latency per record with its partition, akresil's events), s from start
        os.makedirs(keep, exist_ok=True)
        with open(Path(keep) / f"client-{topic}.json", "w") as f:
            json.dump({"start_unix_s": start, "moves_s": moves, "latencies": result["latencies"],
                       "events": result["events"]}, f)
    first_at = MOVES_AT_S[0] if MOVES_AT_S[0] < seconds else seconds
    events = [e for e in result["events"] if 0 <= e[0] < first_at]
    queue = [f["queue_ms"] for _, n, f in events if n == "batch_sent"]
    rtt = [f["latency_ms"] for _, n, f in events if n == "response_received" and f["api_key"] == 0]
    per_batch = [f["records"] for _, n, f in events if n == "batch_sent"]
    sender = {"batches": len(queue), "records_per_batch_p50": _summary(per_batch).get("p50_ms"),
              "batch_queue_ms": _summary(queue), "produce_rtt_ms": _summary(rtt),
              "metadata_requests": sum(1 for _, n, _ in events if n == "metadata_request"),
              "refresh_causes": sorted({f["cause"] for _, n, f in events if n == "metadata_refresh_requested"})}
    await proc.wait()
    first = moves[0][0] if moves else seconds
    return {"phase": name, "round": r, "client_id": topic, "load_avg_1m": round(load, 2), "moves_s": moves,
            "client_cpu_s": result["cpu_s"], "akresil_before_first_move": sender if result["events"] else None,
            "all": _summary([lat for _, lat, _ in latencies]),
            "task_start_lag": _summary([lag for _, _, lag in latencies]),
            "from_task_start": _summary([lat - lag for _, lat, lag in latencies]),
            "before_first_move": _summary([lat for at, lat, _ in latencies if at < first]),
            "second_after_each_move": _summary([lat for at, lat, _ in latencies
                                                if any(b <= at < b + 1.0 for b, _ in moves)])}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    trees = [tuple(kv.split("=", 1)) for kv in args.trees.split(",") if kv]
    rows: list[dict[str, Any]] = []
    broker_config = parse_broker_config(args.broker_config)
    async with LoggedCluster(brokers=3, broker_config=broker_config) as cluster:
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for name, tree in order:
                row = await phase(cluster, name, tree, r, args.seconds, args.keep_logs)
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
        await asyncio.sleep(1.0)      # the last answers reach the log files
        if args.keep_logs:
            os.makedirs(args.keep_logs, exist_ok=True)
            for node_id, node in cluster.nodes.items():
                log = node.workdir / "requests.log"
                if log.exists():
                    (Path(args.keep_logs) / f"requests-{node_id}.log").write_bytes(log.read_bytes())
        for row in rows:
            (row["produce_requests"], row["partition_answers_by_code"], row["not_leader_after_a_hold"],
             row["longest_hold_ms"]) = produce_answers(cluster, row["client_id"])
    return {"benchmark": "benchmarks/leader_move_request_log.py", "command": " ".join(sys.argv),
            "broker_config": broker_config,
            "rate": RATE, "seconds": args.seconds, "phases": rows}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        bootstrap, topic, seconds, name = sys.argv[2:6]
        asyncio.run(client(bootstrap, topic, float(seconds), name.split("-")[0] == "aiokafka",
                           not name.endswith("-noidem")))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trees", required=True,
                   help="name=path,... akresil source trees (PYTHONPATH); a name starting aiokafka runs aiokafka; a name "
                        "ending -noidem turns idempotence off")
    p.add_argument("--rounds", type=int, default=2, help="rounds (default 2), the order reversed every round")
    p.add_argument("--seconds", type=float, default=8.0, help="seconds of load per phase (default 8)")
    p.add_argument("--out", required=True, help="where the JSON document goes")
    p.add_argument("--broker-config", default="", help="k=v,... settings for every broker")
    p.add_argument("--keep-logs", default="", help="copy the brokers' request logs into this directory, and each phase's client timeline "
                        "(client-TOPIC.json: every record's latency and partition, akresil's sender events)")
    args = p.parse_args()
    if args.rounds < 1 or args.seconds <= 0:
        p.error("--rounds must be >= 1 and --seconds > 0")
    doc = asyncio.run(run(args))
    for row in doc["phases"]:
        print(row["phase"], row["round"], "all", row["all"], "1 s after moves", row["second_after_each_move"],
              "answers", row["partition_answers_by_code"], "NOT_LEADER after a hold", row["not_leader_after_a_hold"],
              "longest hold", row["longest_hold_ms"],
              "load", row["load_avg_1m"])
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
