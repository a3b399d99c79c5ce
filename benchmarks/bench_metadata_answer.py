"""CPU of one Metadata answer at scale: decoding it, then merging it into the metadata cache (issue 35).

A client decodes and merges a Metadata answer at start and at every refresh (``metadata_max_age_ms``, every
NOT_LEADER_OR_FOLLOWER); at 10,000 partitions or 10,000 topics that is one large answer each time. This times,
with ``time.thread_time``, the start (a fresh cache) and a run of refreshes into one cache (the same answer each
time: the common case), for 10,000 partitions of one topic and 10,000 topics of one partition, 3 brokers.

    PYTHONPATH=. python benchmarks/bench_metadata_answer.py [--rounds 15] [--version 12] [--collector off] [--want-all]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from typing import Any

from akresil.core.metadata import MetadataCache
from akresil.protocol import api
from akresil.protocol.api import ApiKey

CASES = {"10000-partitions": (1, 10_000), "10000-topics": (10_000, 1)}


def answer(topics: int, partitions: int, brokers: int = 3) -> dict[str, Any]:
    """A healthy cluster's answer: every partition replicated 3 times, leaders spread over the brokers."""
    return {
        "throttle_time_ms": 0, "cluster_id": "bench", "controller_id": 0,
        "brokers": [{"node_id": b, "host": "127.0.0.1", "port": 9092 + b, "rack": None} for b in range(brokers)],
        "topics": [{
            "error_code": 0, "name": f"topic-{t:05d}", "topic_id": (t + 1).to_bytes(16, "big"), "is_internal": False,
            "topic_authorized_operations": -2147483648,
            "partitions": [{"error_code": 0, "partition_index": p, "leader_id": p % brokers, "leader_epoch": 1,
                            "replica_nodes": [(p + k) % brokers for k in range(3)],
                            "isr_nodes": [(p + k) % brokers for k in range(3)], "offline_replicas": []}
                           for p in range(partitions)]}
            for t in range(topics)],
    }


def run(case: str, version: int, rounds: int, want_all: bool = False) -> dict[str, Any]:
    topics, partitions = CASES[case]
    body = answer(topics, partitions)
    frame = api.encode_response(ApiKey.METADATA, version, 1, body)[4:]
    cache = MetadataCache()
    if want_all:
        cache.set_topics([t["name"] for t in body["topics"]], 0.0)
    t0 = time.thread_time()
    response = api.decode_response(ApiKey.METADATA, version, frame)
    t1 = time.thread_time()
    cache.update_from_metadata(response, 0.0)
    t2 = time.thread_time()
    del response
    decode, merge = [], []
    for i in range(rounds):
        a = time.thread_time()
        response = api.decode_response(ApiKey.METADATA, version, frame)
        b = time.thread_time()
        cache.update_from_metadata(response, float(i + 1))
        c = time.thread_time()
        del response
        decode.append(b - a)
        merge.append(c - b)
    total = [d + m for d, m in zip(decode, merge)]

    def ms(xs: list[float]) -> dict[str, float]:
        return {"median_ms": round(statistics.median(xs) * 1e3, 2), "worst_ms": round(max(xs) * 1e3, 2)}

    return {"case": case, "version": version, "want_all": want_all, "frame_bytes": len(frame), "rounds": rounds,
            "start": {"decode_ms": round((t1 - t0) * 1e3, 2), "merge_ms": round((t2 - t1) * 1e3, 2)},
            "refresh_decode": ms(decode), "refresh_merge": ms(merge), "refresh_total": ms(total)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="refreshes timed per case")
    parser.add_argument("--version", type=int, default=12, help="Metadata response version")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--collector", choices=("on", "off"), default="on",
                        help="off: Python's cyclic collector disabled while timing (the code's own cost alone)")
    parser.add_argument("--want-all", action="store_true",
                        help="the cache wants every topic of the answer (a client producing to or subscribed to all)")
    args = parser.parse_args()
    if args.collector == "off":
        gc.disable()
    results = [run(case, args.version, args.rounds, args.want_all) for case in args.cases.split(",")]
    for r in results:
        print(f"{r['case']:17s} {r['frame_bytes']:>8d} B  start decode {r['start']['decode_ms']:6.1f} ms "
              f"merge {r['start']['merge_ms']:6.1f} ms | refresh (median/worst of {r['rounds']}) "
              f"decode {r['refresh_decode']['median_ms']:.1f}/{r['refresh_decode']['worst_ms']:.1f} "
              f"merge {r['refresh_merge']['median_ms']:.1f}/{r['refresh_merge']['worst_ms']:.1f} "
              f"total {r['refresh_total']['median_ms']:.1f}/{r['refresh_total']['worst_ms']:.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
