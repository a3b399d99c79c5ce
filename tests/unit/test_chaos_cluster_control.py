"""``KafkaClusterControl``, the chaos soak's control for a real Apache Kafka cluster, on a fake cluster: which
quota a throttle sets and when it is lifted, restarts in the background that moves and kills wait for, the
faults a real broker cannot take, and how a member kill is checked.  The real thing runs in
tests/capabilities/test_chaos_soak.py (its Apache Kafka case)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import anyio
import pytest

from akresil.admin_types import ClientQuotaEntity, GroupDescription, MemberDescription
from akresil.core.admin_call import ItemResults
from akresil.errors import GroupIdNotFoundError
from akresil.testing.chaos import (DEFAULT_WEIGHTS, Fault, FaultProxyControl, FaultRunner, KafkaClusterControl,
                                   ScheduleSpec, SoakConfig, Step, generate_schedule, run_soak, unsupported_faults)
from akresil.testing.proxy import FaultProxy
from akresil.testing.control import KAFKA
from akresil.types import TopicPartition


class FakeAdmin:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    async def alter_client_quotas(self, entries: dict[ClientQuotaEntity, dict[str, float | None]]) -> Any:
        self.cluster.quota_calls.append(entries)
        return ItemResults(list(entries), {e: None for e in entries}, {})

    async def describe_consumer_groups(self, groups: list[str]) -> Any:
        (group,) = groups
        if self.cluster.group_members is None:
            return ItemResults([group], {}, {group: GroupIdNotFoundError(f"Group {group} is not a classic group.")})
        members = tuple(MemberDescription(f"m-{c}", None, c, "/127.0.0.1", frozenset())
                        for c in self.cluster.group_members)
        return ItemResults([group], {group: GroupDescription(group, "PreparingRebalance", "consumer", "range",
                                                             members, 1)}, {})

    async def create_topics(self, topics: list[Any]) -> None:
        self.cluster.created.extend(topics)


class FakeCluster:
    broker_ids = [1, 2, 3]
    bootstrap_servers = "127.0.0.1:1"
    capabilities = KAFKA

    def __init__(self) -> None:
        self.quota_calls: list[dict[ClientQuotaEntity, dict[str, float | None]]] = []
        self.group_members: list[str] | None = []
        self.created: list[Any] = []
        self.calls: list[tuple[str, int]] = []
        self.start_gate = anyio.Event()
        self.start_fails = False
        self.nodes: dict[int, Any] = {}

    @asynccontextmanager
    async def admin(self) -> AsyncIterator[FakeAdmin]:
        yield FakeAdmin(self)

    async def move_leader(self, topic: str, partition: int, to_node: int, *, timeout_s: float = 30.0) -> int:
        self.calls.append(("move", to_node))
        return 1

    async def kill_node(self, node: int) -> None:
        self.calls.append(("kill", node))

    async def start_node(self, node: int) -> None:
        await self.start_gate.wait()
        if self.start_fails:
            raise RuntimeError("broker 2 exited while starting")
        self.calls.append(("started", node))


class FakeMembers:
    def __init__(self, cluster: FakeCluster, leaves: bool = False) -> None:
        self.cluster, self.leaves = cluster, leaves
        self.ids = ["chaos-c0", "chaos-c1"]

    def client_id(self, member: int) -> str:
        return self.ids[member]

    def client_ids(self) -> list[str]:
        return list(self.ids)

    async def kill(self, member: int) -> None:
        victim = self.ids[member]
        self.ids[member] = f"{victim}-r1"
        if self.leaves and self.cluster.group_members is not None:
            self.cluster.group_members.remove(victim)


class GatedSleep:
    """A throttle window that ends when the test says so."""

    def __init__(self) -> None:
        self.windows: list[tuple[float, anyio.Event]] = []

    async def __call__(self, seconds: float) -> None:
        ended = anyio.Event()
        self.windows.append((seconds, ended))
        await ended.wait()


def quota(call: dict[ClientQuotaEntity, dict[str, float | None]]) -> dict[str | None, float | None]:
    """client id -> the byte rate set (None: removed); produce and fetch always move together."""
    out = {}
    for entity, values in call.items():
        assert values["producer_byte_rate"] == values["consumer_byte_rate"]
        out[entity.client_id] = values["producer_byte_rate"]
    return out


async def settle() -> None:
    for _ in range(10):
        await anyio.sleep(0)


async def test_throttle_quotas_every_soak_client_then_lifts_when_the_last_window_ends() -> None:
    cluster, sleep = FakeCluster(), GatedSleep()
    control = KafkaClusterControl(cluster, throttle_byte_rate=2048.0, sleep=sleep)  # type: ignore[arg-type]
    control.attach(FakeMembers(cluster), "g", ["chaos-p0", "chaos-p1"])
    async with control:
        await control.throttle(node=2, ms=300, count=2)
        await settle()
        assert [quota(c) for c in cluster.quota_calls] == [
            {"chaos-c0": 2048.0, "chaos-c1": 2048.0, "chaos-p0": 2048.0, "chaos-p1": 2048.0}]
        assert [s for s, _ in sleep.windows] == [0.6]       # ms * count
        await control.throttle(node=1, ms=100, count=1)   # overlapping: nothing set twice
        await settle()
        assert len(cluster.quota_calls) == 1
        sleep.windows[0][1].set()                          # the first window ends: the second still holds
        await settle()
        assert len(cluster.quota_calls) == 1
        sleep.windows[1][1].set()
        await settle()
        assert quota(cluster.quota_calls[-1]) == dict.fromkeys(["chaos-c0", "chaos-c1", "chaos-p0", "chaos-p1"])
    assert len(cluster.quota_calls) == 2                   # nothing left to lift on the way out


async def test_leaving_the_control_lifts_a_quota_still_in_force() -> None:
    cluster, sleep = FakeCluster(), GatedSleep()
    control = KafkaClusterControl(cluster, sleep=sleep)  # type: ignore[arg-type]
    control.attach(FakeMembers(cluster), "g", ["chaos-p0"])
    async with control:
        await control.throttle(node=1, ms=5_000, count=1)
    assert [quota(c) for c in cluster.quota_calls] == [
        {"chaos-c0": 1024.0, "chaos-c1": 1024.0, "chaos-p0": 1024.0},
        {"chaos-c0": None, "chaos-c1": None, "chaos-p0": None}]


async def test_throttle_outside_async_with_is_refused() -> None:
    control = KafkaClusterControl(FakeCluster())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="async with"):
        await control.throttle(node=1, ms=10, count=1)
    with pytest.raises(ValueError, match="throttle_byte_rate"):
        KafkaClusterControl(FakeCluster(), throttle_byte_rate=0)  # type: ignore[arg-type]


async def test_restart_runs_in_the_background_and_a_move_to_it_or_the_next_kill_waits() -> None:
    cluster = FakeCluster()
    control = KafkaClusterControl(cluster)  # type: ignore[arg-type]
    async with control:
        await control.stop_node(2)
        await control.start_node(2)                        # returns before the broker serves
        assert cluster.calls == [("kill", 2)]
        await control.move_leader("t", 0, 3)               # another target: at once
        assert cluster.calls[-1] == ("move", 3)
        async with anyio.create_task_group() as tg:
            tg.start_soon(control.move_leader, "t", 1, 2)
            tg.start_soon(control.stop_node, 3)
            await settle()
            assert cluster.calls == [("kill", 2), ("move", 3)]   # both wait for broker 2
            cluster.start_gate.set()
        assert cluster.calls[:3] == [("kill", 2), ("move", 3), ("started", 2)]
        assert sorted(cluster.calls[3:]) == [("kill", 3), ("move", 2)]
        await control.start_node(3)
    assert cluster.calls[-1] == ("started", 3)             # leaving waits for the restart it began
    assert control.errors == []


async def test_a_failed_restart_is_recorded_not_raised() -> None:
    cluster = FakeCluster()
    cluster.start_fails = True
    cluster.start_gate.set()
    control = KafkaClusterControl(cluster)  # type: ignore[arg-type]
    async with control:
        await control.start_node(2)
    assert control.errors == ["start_node {'node': 2}: RuntimeError: broker 2 exited while starting"]


async def test_faults_a_broker_cannot_take_get_zero_weight_and_raise_if_scripted() -> None:
    control = KafkaClusterControl(FakeCluster())  # type: ignore[arg-type]
    # derived from what the cluster can do (its capabilities, with the quota throttle the control adds)
    assert unsupported_faults(control.capabilities) == KafkaClusterControl.UNSUPPORTED == \
        {Fault.DROP_CONNECTIONS, Fault.LATENCY, Fault.FAIL_REQUESTS}
    assert unsupported_faults(FaultProxyControl(FaultProxy("127.0.0.1:9")).capabilities) == frozenset()
    runner = FaultRunner(control, [])
    for step in (Step(0, "drop_connections", {"node": 1}), Step(0, "latency", {"node": 1, "ms": 5.0}),
                 Step(0, "fail_requests", {"api_key": 0, "error_code": 6, "count": 1, "node": 1})):
        await runner._apply(step, 0.0)
    assert len(runner.errors) == 3 and all("cannot be made to do this" in e for e in runner.errors)
    # what run_soak builds for this control: none of them in the script
    weights = {k: (0.0 if k in unsupported_faults(control.capabilities) else w) for k, w in DEFAULT_WEIGHTS.items()}
    events = generate_schedule(ScheduleSpec(duration_ms=60_000.0, nodes=[1, 2, 3], failover_ms=None, members=2,
                                            partitions=[TopicPartition("t", p) for p in range(6)],
                                            weights=weights), 1)
    assert {e.fault for e in events} == {Fault.MOVE_LEADER, Fault.THROTTLE, Fault.STOP_NODE, Fault.KILL_CONSUMER}
    assert not any("failover_from" in e.args for e in events)   # Kafka's controller fails over by itself


@pytest.mark.parametrize("leaves, listed, expect_left, expect_unchecked", [
    (False, ["chaos-c0", "chaos-c1"], 0, 0),   # a crash: the coordinator lists it until its session ends
    (True, ["chaos-c0", "chaos-c1"], 1, 0),    # it sent LeaveGroup: gone at once
    (False, None, 0, 1),                       # a KIP-848 group: DescribeGroups does not describe it
])
async def test_a_killed_member_must_still_be_listed_right_after_the_kill(leaves: bool, listed: list[str] | None,
                                                                         expect_left: int,
                                                                         expect_unchecked: int) -> None:
    cluster = FakeCluster()
    cluster.group_members = listed
    members = FakeMembers(cluster, leaves=leaves)
    control = KafkaClusterControl(cluster)  # type: ignore[arg-type]
    control.attach(members, "g", [])
    await control.kill_consumer(0)
    assert members.ids == ["chaos-c0-r1", "chaos-c1"]
    assert (control.killed_left, control.killed_unchecked) == (expect_left, expect_unchecked)


async def test_topic_layout_is_the_scripts_with_three_replicas() -> None:
    cluster = FakeCluster()
    await KafkaClusterControl(cluster).create_topic("t", 4)  # type: ignore[arg-type]
    (topic,) = cluster.created
    assert topic.replica_assignment == {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2], 3: [1, 2, 3]}


async def test_run_soak_takes_a_broker_address_or_a_control_not_both() -> None:
    control = KafkaClusterControl(FakeCluster())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exactly one"):
        await run_soak(SoakConfig(), "127.0.0.1:9092", control=control)
    with pytest.raises(ValueError, match="exactly one"):
        await run_soak(SoakConfig())
    with pytest.raises(ValueError, match="group_protocol"):
        await run_soak(SoakConfig(group_protocol="kip848"), control=control)  # type: ignore[arg-type]
