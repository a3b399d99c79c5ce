"""The failure scenarios on librdkafka's mock cluster (``akresil bench --harness mock``).

Each client phase gets a fresh 3-broker ``MockCluster`` (so its request log and its error stacks belong to that
client alone) and the same load and seeded script as on the proxy (``runner.PhaseBase``).  The mock has no
CreateTopics: the topic is created through the binding, partition *p* pinned to broker ``p % nodes + 1`` as
``FaultProxy`` lays leaders out, so the seeded node of ``broker-bounce`` and ``retry-storm`` leads the same
partitions on both harnesses.  Script steps map onto the mock as follows:

* ``move_all_leaders``: ``set_leader`` rotates each partition to the next broker (epoch + 1; Produce v10 to the
  old leader is answered NOT_LEADER_OR_FOLLOWER with the KIP-951 CurrentLeader and NodeEndpoints);
* ``stop_node`` / ``start_node``: ``broker_set_down`` / ``broker_set_up`` (connections refused, leadership
  stays, as with the proxy);
* ``fail_produce`` / ``clear``: see ``fail_produce``.

The mock's ops (``create_topic``, ``set_leader``, ``broker_set_down``, ...) block until the mock's thread has
served them, and librdkafka 2.16 sometimes leaves one waiting until that thread's next socket event or its 1 s
poll timeout.  Made on the event loop, such a call would also stop the clients whose requests wake the mock:
about 1 in 100 took 1 s and froze the load with it.  So every call that changes the mock runs in a worker
thread (measured: at most a few ms while the clients keep sending); the request log's calls only take a lock.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..testing.rdkafka_mock import MockCluster
from .clients import ProducerAdapter, now_s
from .mock_scenarios import MockPhaseData, storm_errors, summarize_mock
from .runner import PhaseBase, ProgressFn, close_all, no_progress
from .scenarios import PRODUCE, AppliedStep, Scenario
from .script import FaultStep


def pinned_leader(partition: int, nodes: int) -> int:
    """The broker that leads ``partition`` when the topic is created (FaultProxy's layout)."""
    return partition % nodes + 1


def fail_produce(cluster: MockCluster, node: int, error_code: int, count: int) -> None:
    """Answer the next ``count`` Produce requests to ``node`` with ``error_code``, until ``clear_request_errors``.

    The mock can clear only its cluster-wide error stack, not a broker's, so the errors go on the cluster-wide
    stack and every other broker gets a broker stack of its own (one error-free entry): a broker with a stack
    for an API never consults the cluster-wide one, even once its own is empty.  The failing node must not
    have a broker stack for Produce: true on the fresh cluster of every phase.
    """
    for other in cluster.broker_ids:
        if other != node:
            cluster.push_request_errors_with_rtt(other, PRODUCE, [(0, 0)])
    cluster.push_request_errors(PRODUCE, [error_code] * count)


def create_topic(cluster: MockCluster, topic: str, leaders: dict[int, int]) -> None:
    """Create ``topic`` with partition -> leader broker ``leaders`` (the mock has no CreateTopics)."""
    cluster.create_topic(topic, len(leaders), 1)
    for partition, node in leaders.items():
        cluster.set_leader(topic, partition, node)


class MockPhase(PhaseBase[MockCluster]):
    """One client's run of one failure scenario on a fresh librdkafka mock cluster."""

    def __init__(self, scenario: Scenario, client: str, seed: int, progress: ProgressFn = no_progress) -> None:
        super().__init__(scenario, client, seed, progress)
        self._leaders = {p: pinned_leader(p, scenario.nodes) for p in range(scenario.partitions)}
        self._down: set[int] = set()
        self.leaders: dict[int, int] = {}

    async def run(self) -> MockPhaseData:
        sc = self.scenario
        producers: list[ProducerAdapter] = []
        with MockCluster(sc.nodes) as cluster:
            await asyncio.to_thread(create_topic, cluster, self.topic, dict(self._leaders))
            cluster.start_request_tracking()
            try:
                start = await self._drive(cluster, cluster.bootstrap_servers, producers)
            finally:
                await close_all(producers)
            requests = cluster.stop_request_tracking()
        return MockPhaseData(scenario=sc, client=self.client, start_s=start, log=self.log, requests=requests,
                             applied=self.applied, leaders=self.leaders)

    def _begin_recording(self, cluster: MockCluster) -> None:
        self.leaders = dict(self._leaders)
        cluster.clear_requests()

    async def _apply(self, cluster: MockCluster, step: FaultStep, start: float) -> AppliedStep:
        applied = AppliedStep(step, now_s())
        args = step.args
        if step.action == "move_all_leaders":
            targets = {p: node % self.scenario.nodes + 1 for p, node in self._leaders.items()}
            await asyncio.to_thread(self._move, cluster, targets)
            self._leaders.update(targets)
            applied.moved = [((self.topic, p), node) for p, node in targets.items()]
            # the moves land one partition after another: the move counts from when the last one had
            applied.at_s = now_s()
        elif step.action == "stop_node":
            self._down.add(int(args["node"]))      # first: a cancelled call may still take the broker down
            await asyncio.to_thread(cluster.broker_set_down, int(args["node"]))
        elif step.action == "start_node":
            await asyncio.to_thread(cluster.broker_set_up, int(args["node"]))
            self._down.discard(int(args["node"]))
        elif step.action == "fail_produce":
            await asyncio.to_thread(fail_produce, cluster, int(args["node"]), int(args["error_code"]),
                                    storm_errors(step.window_s))
        elif step.action == "clear":
            await asyncio.to_thread(cluster.clear_request_errors, PRODUCE)
        else:   # the throttle scenario is skipped on the mock; this guards a new action without a mapping
            raise ValueError(f"fault step action {step.action!r} cannot be expressed on librdkafka's mock cluster")
        return applied

    def _move(self, cluster: MockCluster, targets: dict[int, int]) -> None:
        for partition, node in targets.items():
            cluster.set_leader(self.topic, partition, node)

    async def _undo_faults(self, cluster: MockCluster) -> None:
        await asyncio.to_thread(cluster.clear_request_errors, PRODUCE)
        for node in sorted(self._down):
            await asyncio.to_thread(cluster.broker_set_up, node)
        self._down.clear()


async def run_failure_on_mock(scenario: Scenario, client: str, seed: int, progress: ProgressFn = no_progress
                              ) -> tuple[dict[str, Any], dict[str, Any]]:
    return await MockPhase(scenario, client, seed, progress).run_summarized(summarize_mock)
