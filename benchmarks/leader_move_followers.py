"""What a moved partition's first ``acks=all`` Produce waits for at its new leader (issue 35 item 3).

Reads a directory written by ``leader_move_request_log.py --keep-logs DIR`` (the brokers' request logs and each
phase's client timeline) and, for every phase, move and partition, puts side by side what the client saw and what
the brokers did: the worst latency from schedule of the partition's records scheduled between this move and the
next, the first Produce the new leader accepted for it (when it arrived, when it was answered, ``remoteTimeMs``:
the wait for the followers), and for each follower its fetches of that partition from the new leader after the
move began: the errors it met (UNKNOWN_LEADER_EPOCH = 75: the follower knew the new epoch before the leader did;
a diverging epoch: it had to truncate first) and when it first fetched past the offset of that Produce, which is
when the leader's high watermark could move and the Produce be answered. A follower whose fetch was refused backs
off the partition for ``replica.fetch.backoff.ms`` (1,000 ms by default); a fetch parked before the partition
joined the follower's session waits out ``replica.fetch.wait.max.ms`` (500 ms) first.

Prints a summary per client (how the slow pairs split by cause) and writes one JSON document. Not in CI.

    python benchmarks/leader_move_followers.py DIR --out followers.json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
from collections import defaultdict
from typing import Any

_LINE = re.compile(r"^\[(\d+)\] Completed request:(.*)$")
PARTITIONS = 6
NODES = 3
#: a Produce answered later than this after it arrived was held for the followers
HELD_MS = 100.0
#: a (move, partition) is slow when its worst record waited this long
SLOW_MS = 700.0


def _leader_after(partition: int, moves: int) -> int:
    """The leader of ``partition`` after ``moves`` moves in the script's layout (``p % 3 + 1``, each move +1)."""
    return (partition % NODES + moves) % NODES + 1


def load_requests(folder: str) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]], dict[str, str]]:
    """(Produce requests by client id, follower Fetch requests, topic id -> name) from the brokers' logs."""
    produces: dict[str, list[dict[str, Any]]] = defaultdict(list)
    fetches: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(folder, "requests-*.log"))):
        node = int(path.rsplit("-", 1)[1].split(".")[0])
        with open(path) as f:
            for line in f:
                m = _LINE.match(line)
                if not m or '"requestApiKey":' not in line:
                    continue
                if '"requestApiKey":3,' in line:
                    doc = json.loads(m.group(2))
                    for t in (doc.get("response") or {}).get("topics", ()):
                        if t.get("name") and t.get("topicId"):
                            names[t["topicId"]] = t["name"]
                    continue
                is_produce = '"requestApiKey":0,' in line
                if not is_produce and not ('"requestApiKey":1,' in line and "-fetcher-" in line):
                    continue
                doc = json.loads(m.group(2))
                end_ms = int(m.group(1))
                row = {"node": node, "end_ms": end_ms, "start_ms": end_ms - doc["totalTimeMs"],
                       "remote_ms": doc["remoteTimeMs"]}
                if is_produce:
                    row["answers"] = {p["index"]: (p["errorCode"], p["baseOffset"])
                                      for t in doc["response"]["responses"] for p in t["partitionResponses"]}
                    produces[doc["requestHeader"]["clientId"]].append(row)
                else:
                    row["follower"] = int(doc["requestHeader"]["clientId"].split("-")[1])
                    row["asked"] = {(t["topicId"], p["partition"]): p["fetchOffset"]
                                    for t in doc["request"]["topics"] for p in t["partitions"]}
                    row["errors"] = {(t["topicId"], p["partitionIndex"]):
                                     "diverging" if p.get("divergingEpoch") else p["errorCode"]
                                     for t in doc["response"]["responses"] for p in t["partitions"]
                                     if p["errorCode"] or p.get("divergingEpoch")}
                    fetches.append(row)
    return produces, fetches, names


def phase_pairs(client: dict[str, Any], topic: str, produces: list[dict[str, Any]], fetches: list[dict[str, Any]],
                topic_id: str | None) -> list[dict[str, Any]]:
    """One row per (move, partition) of one phase."""
    t0 = client["start_unix_s"] * 1000
    began = [b for b, _ in client["moves_s"]]
    rows = []
    for k, b in enumerate(began, start=1):
        until = began[k] if k < len(began) else float("inf")
        lo_ms = t0 + b * 1000
        for p in range(PARTITIONS):
            worst = max((lat for at, lat, _, part in client["latencies"] if part == p and b <= at < until),
                        default=0.0)
            leader = _leader_after(p, k)
            first = next((r for r in sorted(produces, key=lambda r: r["start_ms"])
                          if r["node"] == leader and r["start_ms"] >= lo_ms and p in r["answers"]
                          and r["answers"][p][0] in (0, 6)), None)
            row: dict[str, Any] = {"move": k, "partition": p, "new_leader": leader, "worst_ms": round(worst, 1)}
            if first is not None:
                base = first["answers"][p][1]
                row["first_produce"] = {"arrived_s": round((first["start_ms"] - t0) / 1000, 3),
                                        "answered_s": round((first["end_ms"] - t0) / 1000, 3),
                                        "remote_ms": round(first["remote_ms"], 1), "error": first["answers"][p][0]}
                followers: dict[int, dict[str, Any]] = {}
                for f in sorted(fetches, key=lambda r: r["start_ms"]):
                    key = (topic_id, p)
                    if f["node"] != leader or f["start_ms"] < lo_ms - 50 or f["start_ms"] > first["end_ms"] + 50:
                        continue
                    mine = followers.setdefault(f["follower"], {"errors": [], "past_first_produce_s": None})
                    if key in f["errors"]:
                        mine["errors"].append([round((f["end_ms"] - t0) / 1000, 3), f["errors"][key]])
                    elif (key in f["asked"] and f["asked"][key] > base and mine["past_first_produce_s"] is None):
                        mine["past_first_produce_s"] = round((f["start_ms"] - t0) / 1000, 3)
                row["followers"] = followers
            rows.append(row)
    return rows


_CODES = {75: "UNKNOWN_LEADER_EPOCH", 74: "FENCED_LEADER_EPOCH", "diverging": "a diverging epoch"}


def cause(row: dict[str, Any]) -> str:
    """Why a slow (move, partition) waited, from the brokers' side."""
    first = row.get("first_produce")
    if first is None:
        return "no Produce at the new leader"
    if first["remote_ms"] < HELD_MS:
        # its new leader answered at once: the records waited elsewhere (in a request another node held)
        return "not held at the new leader"
    codes = {code for f in row.get("followers", {}).values() for _, code in f["errors"]}
    why = ("a follower's fetch met " + " and ".join(sorted(_CODES.get(c, str(c)) for c in codes)) if codes
           else "held until a follower's parked fetch ended")
    return why + (", answered NOT_LEADER at the next move" if first["error"] == 6 else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", help="a --keep-logs directory of leader_move_request_log.py")
    p.add_argument("--out", required=True, help="where the JSON document goes")
    args = p.parse_args()
    if not glob.glob(os.path.join(args.folder, "client-*.json")):
        p.error(f"{args.folder}: no client-*.json (run leader_move_request_log.py with --keep-logs)")
    produces, fetches, names = load_requests(args.folder)
    ids = {name: tid for tid, name in names.items()}
    phases = []
    for path in sorted(glob.glob(os.path.join(args.folder, "client-*.json"))):
        topic = os.path.basename(path)[len("client-"):-len(".json")]
        with open(path) as f:
            client = json.load(f)
        values = sorted(lat for _, lat, _, _ in client["latencies"])
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        pairs = phase_pairs(client, topic, produces.get(topic, []), fetches, ids.get(topic))
        for row in pairs:
            if row["worst_ms"] >= SLOW_MS:
                row["cause"] = cause(row)
            else:
                row.pop("followers", None)      # the fetch detail is kept for the slow pairs only
        phases.append({"phase": topic, "p99_ms": round(p99, 1), "moves_s": client["moves_s"], "pairs": pairs})
    summary: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for ph in phases:
        tree = ph["phase"].split("-")[1]
        for row in ph["pairs"]:
            if "cause" in row:
                summary[tree][row["cause"]] += 1
        summary[tree]["(move, partition) pairs"] += len(ph["pairs"])
    for tree, counts in sorted(summary.items()):
        p99s = [ph["p99_ms"] for ph in phases if ph["phase"].split("-")[1] == tree]
        print(tree, f"phases {len(p99s)}, p99 median {statistics.median(p99s):.0f} ms;",
              f"slow pairs (worst >= {SLOW_MS:.0f} ms) by cause:", dict(counts))
    with open(args.out, "w") as f:
        json.dump({"benchmark": "benchmarks/leader_move_followers.py", "folder": args.folder,
                   "slow_ms": SLOW_MS, "held_ms": HELD_MS,
                   "summary": {k: dict(v) for k, v in summary.items()}, "phases": phases}, f, indent=1)


if __name__ == "__main__":
    main()
