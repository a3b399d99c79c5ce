"""What runs between a Produce answer and the next Produce to that node (the answer-ordering change, 2026-11-29).

A task per record awaiting ``send`` at ``--rate`` records/s (6 partitions, ``acks=all``, linger 5 ms) on a 3-broker
Apache Kafka (``--harness apache``, the default) or librdkafka's mock. Event hooks count, for each Produce answer,
the records the application saw acknowledged before the sender started the next Produce to the same node, and the
time between the answer and that request. Before the change those were the continuations of the answered records
(each completion schedules one, and the event loop ran them all before the sender's next turn); now the next
request is planned inside the answer's handler. Prints one JSON document. Not in CI.

    python benchmarks/probe_answer_order.py [--harness apache|mock] [--rate 2000] [--seconds 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any

from akresil import Admin, NewTopic, Producer


class Probe:
    """Event hook: per Produce answer, acknowledgements seen and ms elapsed until the node's next Produce."""

    def __init__(self) -> None:
        self.acks = 0
        self._answered: dict[int, tuple[int, float]] = {}
        self.acks_between: list[int] = []
        self.gap_ms: list[float] = []

    def on_response_received(self, node_id: int = -1, api_key: Any = None, **_: Any) -> None:
        if int(api_key) == 0:                                    # Produce
            self._answered[node_id] = (self.acks, time.perf_counter())

    def on_request_sent(self, node_id: int = -1, **_: Any) -> None:
        seen = self._answered.pop(node_id, None)
        if seen is not None:
            self.acks_between.append(self.acks - seen[0])
            self.gap_ms.append((time.perf_counter() - seen[1]) * 1000.0)

    def reset(self) -> None:
        self._answered.clear()
        self.acks_between.clear()
        self.gap_ms.clear()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_round(bootstrap: str, topic: str, rate: int, seconds: float) -> dict[str, Any]:
    probe = Probe()
    latencies: list[float] = []
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5, acks="all", hooks=[probe]) as producer:
        await asyncio.gather(*(producer.send(topic, b"w", partition=i % 6) for i in range(60)))
        probe.reset()

        async def record(at: float, partition: int) -> None:
            await producer.send(topic, b"x" * 100, partition=partition)
            probe.acks += 1
            latencies.append((time.perf_counter() - at) * 1000.0)

        tasks: set[asyncio.Task[None]] = set()
        t0, n, started = time.perf_counter(), int(rate * seconds), 0
        while started < n:
            due = min(n, int((time.perf_counter() - t0) * rate) + 1)
            while started < due:
                task = asyncio.create_task(record(t0 + started / rate, started % 6))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                started += 1
            await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)
    return {"answers": len(probe.gap_ms),
            "acks_before_next_request_median": statistics.median(probe.acks_between),
            "answer_to_next_request_ms_median": round(statistics.median(probe.gap_ms), 3),
            "answer_to_next_request_ms_p90": round(_pct(probe.gap_ms, 0.9), 3),
            "latency_from_schedule_ms_p50": round(_pct(latencies, 0.5), 2),
            "latency_from_schedule_ms_p99": round(_pct(latencies, 0.99), 2)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness", choices=("apache", "mock"), default="apache")
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    topic = "probe-answer-order"
    rounds: list[dict[str, Any]] = []
    if args.harness == "mock":
        from akresil.testing.rdkafka_mock import MockCluster
        with MockCluster(3) as mock:
            mock.create_topic(topic, 6, 3)
            for _ in range(args.rounds):
                rounds.append(await one_round(mock.bootstrap_servers, topic, args.rate, args.seconds))
    else:
        from akresil.testing.kafka_cluster import KafkaCluster
        async with KafkaCluster(brokers=3) as cluster:
            async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
                await admin.create_topics([NewTopic(topic, 6, 3)])
            for _ in range(args.rounds):
                rounds.append(await one_round(cluster.bootstrap_servers, topic, args.rate, args.seconds))
    json.dump({"harness": args.harness, "rate": args.rate, "seconds": args.seconds, "load_avg": os.getloadavg(),
               "rounds": rounds}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    asyncio.run(main())
