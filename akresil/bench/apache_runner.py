"""The failure scenarios on Apache Kafka itself (``akresil bench --harness apache``): the reference broker.

One ``KafkaCluster`` (3 brokers and a controller) serves the whole run; each client phase gets a fresh topic
whose partition *p* is led by broker ``p % 3 + 1``, the layout of the other harnesses, so the seeded node of
``broker-bounce`` leads the same partitions everywhere.  Script steps are what an operator or a failure does to a
real cluster:

* ``move_all_leaders``: every partition's leader moves to the next broker by a replica reorder
  (AlterPartitionReassignments) and a preferred leader election, as ``kafka-reassign-partitions`` and
  ``kafka-leader-election`` would: the epoch rises, and Produce to the old leader is answered
  NOT_LEADER_OR_FOLLOWER with Kafka's own KIP-951 hints.  ``leader-move`` topics have 3 replicas;
* ``stop_node`` / ``start_node``: the broker's JVM is killed (SIGKILL, no controlled shutdown) and started again
  with its data; the step counts from when it serves again.  ``broker-bounce`` topics have 1 replica, so the
  dead broker's partitions are unavailable while it is down, as on the other harnesses;
* ``throttle_all_nodes``: a real client quota (``producer_byte_rate`` a quarter of the offered bytes/s) on every
  producer's client id for the window, removed after it: the brokers answer with ``throttle_time_ms`` and mute
  their side of the connection (KIP-219).  The broker decides how long each throttle lasts;
* ``fail_produce`` (``retry-storm``) cannot be scripted on a real broker: skipped.

No proxy stands between clients and brokers, so what only the wire shows (requests per node, requests inside
throttle windows, connection events) is ``None`` here ("–" in the tables); delivery, latency from schedule,
recovery and acknowledgements past the delivery timeout come from each client's own delivery log.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from ..testing.kafka_cluster import KafkaCluster
from ..types import NewTopic
from .clients import ProducerAdapter, now_s
from .mock_scenarios import ExtraMetrics, MockPhaseData, summarize_phase
from .runner import WARMUP_RECORDS, PhaseBase, ProgressFn, _produce_then_consume, close_all, no_progress
from .scenarios import HEADLINES, AppliedStep, Scenario, SteadyConfig, bounce_metrics, fault_windows
from .script import FaultScript, FaultStep

#: scenarios left out on Apache Kafka, and why
APACHE_SKIPS: dict[str, str] = {
    "retry-storm": "a real broker cannot be told to answer NOT_ENOUGH_REPLICAS on demand",
}
#: headline labels whose definition differs here (see ``mock_scenarios``: measured on the client's side)
_LABELS = {"move_to_first_success.median_ms": "median move → first ack ms (client side)"}
APACHE_HEADLINES: dict[str, list[tuple[str, str, str]]] = {
    name: [(_LABELS.get(path, label), path, better) for label, path, better in rows]
    for name, rows in HEADLINES.items() if name not in APACHE_SKIPS}
#: how much longer a ``broker-bounce`` load runs here: a killed broker's JVM takes seconds to serve again
RESTART_ALLOWANCE_S = 10.0
#: the quota during a throttle window, as a share of the bytes per second each producer offers
THROTTLE_SHARE = 0.25


def replicas_for(scenario: Scenario, partition: int, nodes: int) -> list[int]:
    """Partition ``partition``'s replica list: the leader of the other harnesses' layout first; three replicas
    where leaders move, one elsewhere (a killed broker's partitions are then unavailable, not failed over)."""
    leader = partition % nodes + 1
    if scenario.name != "leader-move":
        return [leader]
    return [leader] + [(leader + i - 1) % nodes + 1 for i in range(1, min(3, nodes))]


class ApachePhase(PhaseBase[KafkaCluster]):
    """One client's run of one failure scenario on the shared Apache Kafka cluster."""

    def __init__(self, cluster: KafkaCluster, scenario: Scenario, client: str, seed: int,
                 progress: ProgressFn = no_progress) -> None:
        super().__init__(scenario, client, seed, progress)
        self.cluster = cluster
        nodes = len(cluster.broker_ids)
        self._assignment = {p: replicas_for(scenario, p, nodes) for p in range(scenario.partitions)}
        self._leaders = {p: r[0] for p, r in self._assignment.items()}
        self._down: set[int] = set()
        self._throttled: list[str] = []
        self.leaders: dict[int, int] = {}

    async def run(self) -> MockPhaseData:
        async with self.cluster.admin() as admin:
            await admin.create_topics([NewTopic(self.topic, replica_assignment=self._assignment)])
        producers: list[ProducerAdapter] = []
        try:
            start = await self._drive(self.cluster, self.cluster.bootstrap_servers, producers)
        finally:
            await close_all(producers)
            await self._undo_faults(self.cluster)
        return MockPhaseData(scenario=self.scenario, client=self.client, start_s=start, log=self.log, requests=[],
                             applied=self.applied, leaders=self.leaders)

    def _begin_recording(self, cluster: KafkaCluster) -> None:
        self.leaders = dict(self._leaders)

    async def _apply(self, cluster: KafkaCluster, step: FaultStep, start: float) -> AppliedStep:
        applied = AppliedStep(step, now_s())
        args = step.args
        nodes = len(cluster.broker_ids)
        if step.action == "move_all_leaders":
            targets = {p: node % nodes + 1 for p, node in self._leaders.items()}
            await cluster.move_leaders(self.topic, targets)
            self._leaders.update(targets)
            applied.moved = [((self.topic, p), node) for p, node in targets.items()]
            applied.at_s = now_s()    # the move counts from when Metadata reported every new leader
        elif step.action == "stop_node":
            self._down.add(int(args["node"]))
            await cluster.kill_broker(int(args["node"]))
        elif step.action == "start_node":
            await cluster.start_broker(int(args["node"]))
            self._down.discard(int(args["node"]))
            applied.at_s = now_s()    # from when it serves again: a JVM takes seconds to start
        elif step.action == "throttle_all_nodes":
            sc = self.scenario
            per_producer = sc.rate * sc.value_size / sc.producers
            ids = [f"bench-{self.client}-{i}" for i in range(sc.producers)]
            for client_id in ids:
                await cluster.set_client_quota(client_id=client_id,
                                               producer_byte_rate=max(1024.0, per_producer * THROTTLE_SHARE))
            self._throttled = ids
            applied.at_s = now_s()
            asyncio.get_running_loop().call_later(step.window_s, lambda: asyncio.ensure_future(
                self._lift_quotas(cluster)))
        else:
            raise ValueError(f"fault step action {step.action!r} cannot be expressed on Apache Kafka")
        return applied

    async def _lift_quotas(self, cluster: KafkaCluster) -> None:
        ids, self._throttled = self._throttled, []
        for client_id in ids:
            await cluster.set_client_quota(client_id=client_id)

    async def _undo_faults(self, cluster: KafkaCluster) -> None:
        await self._lift_quotas(cluster)
        # a start cancelled with the script may still be bringing its broker up (its thread runs on)
        await cluster.wait_for(self._settled, timeout_s=cluster.startup_timeout_s)
        for node in sorted(set(cluster.broker_ids) - set(cluster.running_brokers())):
            await cluster.start_broker(node)
        self._down.clear()

    async def _settled(self) -> bool:
        return not self.cluster.starting_brokers()


def summarize_apache(data: MockPhaseData) -> tuple[dict[str, Any], dict[str, Any]]:
    """(summary metrics, per-second series) of one client's phase on Apache Kafka, keyed like the other
    harnesses'; what only a proxy or the mock's request log can see is ``None``."""
    return summarize_phase(data, _EXTRA, APACHE_SKIPS, "Apache Kafka", request_log=False)


def _leader_move(data: MockPhaseData, start: float, end: float, series: dict[str, Any]) -> dict[str, Any]:
    from .mock_scenarios import _leader_move as client_side_moves
    out = client_side_moves(data, start, end, series)
    series.pop("metadata_requests_per_s", None)
    return out


def _bounce(data: MockPhaseData, start: float, end: float, series: dict[str, Any]) -> dict[str, Any]:
    out = bounce_metrics(data, start, end, series, to_node=[], attempts=None)
    series.pop("produce_requests_to_node_per_s", None)
    out["produce_requests_first_s_after_return"] = None
    return out


def _throttle(data: MockPhaseData, start: float, end: float, series: dict[str, Any]) -> dict[str, Any]:
    windows = [a for a in data.applied if a.step.action == "throttle_all_nodes"]
    assert fault_windows(data, end)
    return {"throttle_windows": len(windows), "requests_in_throttle_windows": None,
            "requests_in_throttle_windows_within_5ms": None, "throttled_responses": None}


_EXTRA: dict[str, ExtraMetrics] = {
    "leader-move": _leader_move, "broker-bounce": _bounce, "throttle": _throttle}


def for_apache(scenario: Scenario) -> Scenario:
    """The scenario as run on Apache Kafka: every client asks for ``acks=all`` (the default of akresil, the Java
    client and librdkafka, not aiokafka's 1: on replicated topics the acks decide what a latency means), and a
    ``broker-bounce`` load runs ``RESTART_ALLOWANCE_S`` longer, since a broker's JVM needs seconds to serve again."""
    settings = replace(scenario.settings, acks="all")
    if scenario.name != "broker-bounce":
        return replace(scenario, settings=settings)
    script = FaultScript(scenario.script.duration_s + RESTART_ALLOWANCE_S, scenario.script.steps)
    return replace(scenario, settings=settings, script=script)


async def run_failure_on_apache(cluster: KafkaCluster, scenario: Scenario, client: str, seed: int,
                                progress: ProgressFn = no_progress) -> tuple[dict[str, Any], dict[str, Any]]:
    """One client's phase of ``scenario`` (already made ``for_apache``) on the cluster."""
    return await ApachePhase(cluster, scenario, client, seed, progress).run_summarized(summarize_apache)


async def run_steady_on_apache(cluster: KafkaCluster, cfg: SteadyConfig, client: str, seed: int,
                               progress: ProgressFn = no_progress) -> dict[str, Any]:
    """``steady`` straight against the cluster (no proxy): produce then consume ``cfg.records`` records per size,
    after an untimed warm-up."""
    import random
    bootstrap = cluster.bootstrap_servers
    await _produce_then_consume(bootstrap, cfg.partitions, client, "warmup", seed, b"w" * 100, WARMUP_RECORDS)
    out: dict[str, Any] = {}
    for size in cfg.sizes:
        value = random.Random(seed).randbytes(size)
        produce_s, got, consume_s = await _produce_then_consume(
            bootstrap, cfg.partitions, client, f"{size}", seed, value, cfg.records,
            lambda step, done, acked: progress("steady", f"{client} {size} B {step}", done, 1.0, acked, 0))
        out[f"{size}B"] = {
            "produce_msg_per_s": round(cfg.records / produce_s), "consume_msg_per_s": round(got / consume_s),
            "produce_mb_per_s": round(cfg.records * size / produce_s / 1e6, 2),
            "consume_mb_per_s": round(got * size / consume_s / 1e6, 2)}
    return out
