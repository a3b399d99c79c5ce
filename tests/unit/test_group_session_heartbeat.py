"""GroupSession with the heartbeat-only protocols (``ShareGroupMember``, ``ConsumerGroupMember``) against a
scripted in-memory cluster whose clock moves only when the test says so."""

from __future__ import annotations

import random
from typing import Any, Callable

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from akresil import errors
from akresil.config import resolve
from akresil.core.events import REBALANCE, REBALANCE_FAILED, Hooks, RecordingHook
from akresil.core.group_heartbeat import MemberPhase
from akresil.core.metadata import MetadataSnapshot
from akresil.net.cluster import Lane, lane_of
from akresil.net.coordinator import CoordinatorLocator
from akresil.net.group_heartbeat import ConsumerGroupMember, ShareGroupMember
from akresil.net.group_session import GroupSession, MembershipFactory
from akresil.protocol.api import ApiKey
from akresil.types import TopicPartition as TP

TID = bytes(range(16))


class FakeCluster:
    """Answers FindCoordinator with node 1 and heartbeats from a script; records what was sent."""

    def __init__(self, answers: list[dict[str, Any] | BaseException]) -> None:
        self.answers = answers
        self.sent: list[dict[str, Any]] = []
        self.nodes: list[int] = []
        self.rng = random.Random(0)
        self.metadata = type("M", (), {})()
        self.metadata.snapshot = MetadataSnapshot(brokers={1: object()})  # type: ignore[dict-item]
        self.now = 0.0
        self.coordinators = CoordinatorLocator(self)  # type: ignore[arg-type]
        self.recorded = RecordingHook()
        self.hooks = Hooks([self.recorded])
        self.metadata_listeners: list[Callable[[], None]] = []
        self.refreshes: list[str] = []

    def clock(self) -> float:
        return self.now

    async def request_any(self, api: ApiKey, body: Any, **kw: Any) -> tuple[int, int, dict[str, Any]]:
        return 1, 3, {"error_code": 0, "node_id": 1, "host": "h", "port": 1}

    async def request(self, node: int, api: ApiKey, body: dict[str, Any], **kw: Any) -> tuple[int, dict[str, Any]]:
        self.sent.append(body)
        self.nodes.append(node)
        answer = self.answers.pop(0) if self.answers else {"error_code": 0, "member_epoch": 1,
                                                           "heartbeat_interval_ms": 60_000}
        if isinstance(answer, BaseException):
            raise answer
        return 1, answer

    def on_metadata_change(self, callback: Callable[[], None]) -> None:
        self.metadata_listeners.append(callback)

    def request_metadata_refresh(self, cause: str) -> None:
        self.refreshes.append(cause)

    def learn_topic(self, name: str, tid: bytes) -> None:
        self.metadata.snapshot = MetadataSnapshot(brokers={1: object()}, topic_ids={name: tid})  # type: ignore[dict-item]
        for callback in self.metadata_listeners:
            callback()


def session(cluster: FakeCluster, membership: MembershipFactory = ShareGroupMember, **kw: Any) -> GroupSession:
    cfg = resolve("consumer", {"group_id": "g", "request_timeout_ms": 1000, "retry_backoff_ms": 10,
                               "retry_backoff_max_ms": 100, **kw})
    return GroupSession(cluster, cfg, membership, subscription=lambda: {"t"})  # type: ignore[arg-type]


def ok(epoch: int, assignment: Any = None) -> dict[str, Any]:
    return {"error_code": 0, "member_epoch": epoch, "heartbeat_interval_ms": 60_000, "assignment": assignment}


def test_a_target_is_taken_once_the_metadata_names_its_topic() -> None:
    """The heartbeat brings a target by topic id; the membership loop (not the heartbeat task) takes it, as soon
    as a metadata change names the topic, with no extra heartbeat; the rebalance event follows the assignment."""
    async def main() -> None:
        cluster = FakeCluster([ok(1, {"topic_partitions": [{"topic_id": TID, "partitions": [0, 1]}]})])
        s = session(cluster)
        async with anyio.create_task_group() as tg:
            await tg.start(s.run)
            await wait_all_tasks_blocked()
            assert len(cluster.sent) == 1 and s.assignment == frozenset()   # the next heartbeat is 60 s away
            assert cluster.refreshes == ["share-group-assignment-unknown-topic-id"]   # asked once
            assert cluster.recorded.named(REBALANCE) == []
            cluster.learn_topic("t", TID)
            await wait_all_tasks_blocked()
            assert s.assignment == {TP("t", 0), TP("t", 1)} and len(cluster.sent) == 1
            [event] = cluster.recorded.named(REBALANCE)
            assert event["group_id"] == "g" and event["generation"] == 1 and event["revoked"] == []
            assert event["assigned"] == [TP("t", 0), TP("t", 1)] and event["duration_ms"] == 0
            tg.cancel_scope.cancel()

    anyio.run(main)


def test_a_broker_without_the_api_fails_the_member_with_a_clear_error() -> None:
    async def main() -> None:
        cluster = FakeCluster([errors.UnsupportedVersionError("node 1 does not support SHARE_GROUP_HEARTBEAT")])
        s = session(cluster)
        with anyio.fail_after(5):
            await s.run()      # returns by itself: the member is done
        assert isinstance(s.member, ShareGroupMember) and s.member.core.phase is MemberPhase.FATAL
        with pytest.raises(errors.UnsupportedVersionError, match="Kafka 4.0"):
            await s.wait_assignment()
        assert [e["error"] for e in cluster.recorded.named(REBALANCE_FAILED)] == ["UnsupportedVersionError"]

    anyio.run(main)


def test_a_poll_timeout_sends_one_leave_heartbeat_then_nothing_until_the_next_poll() -> None:
    async def main() -> None:
        assignment = {"topic_partitions": [{"topic_id": TID, "partitions": [0]}]}
        cluster = FakeCluster([ok(4, assignment), ok(4), ok(-1), ok(5, assignment), ok(5)])  # the third: the leave
        cluster.learn_topic("t", TID)
        s = session(cluster, ConsumerGroupMember, max_poll_interval_ms=1_000)
        async with anyio.create_task_group() as tg:
            await tg.start(s.run)
            await wait_all_tasks_blocked()
            # joined, took partition 0, reported it at once (the coordinator waits for that)
            assert [b["member_epoch"] for b in cluster.sent] == [0, 4] and s.assignment == {TP("t", 0)}
            cluster.now = 1_000                                   # the poll timer runs out
            s.notify()
            await wait_all_tasks_blocked()
            assert [b["member_epoch"] for b in cluster.sent] == [0, 4, -1]
            assert s.member.generation_id == 0 and s.assignment == frozenset()   # lost, not revoked
            cluster.now = 100_000                                 # long after: still silent
            s.notify()
            await wait_all_tasks_blocked()
            assert len(cluster.sent) == 3
            s.poll_happened(100_000)
            await wait_all_tasks_blocked()
            assert [b["member_epoch"] for b in cluster.sent] == [0, 4, -1, 0, 5]
            assert s.member.generation_id == 5 and s.assignment == {TP("t", 0)}
            tg.cancel_scope.cancel()

    anyio.run(main)


def test_heartbeats_go_on_the_coordinators_own_connection() -> None:
    """A broker answers one connection's requests in order: a heartbeat sent on the connection that carries a
    long-poll (Share)Fetch would wait up to fetch_max_wait_ms behind it, and every rebalance step with it."""
    async def main() -> None:
        cluster = FakeCluster([ok(1)])
        s = session(cluster)
        async with anyio.create_task_group() as tg:
            await tg.start(s.run)
            await wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
        # the coordinator's broker id; the cluster puts heartbeats on its group connection
        assert cluster.nodes == [1]
        assert lane_of(ApiKey.CONSUMER_GROUP_HEARTBEAT) is Lane.GROUP
        assert lane_of(ApiKey.SHARE_GROUP_HEARTBEAT) is Lane.GROUP

    anyio.run(main)


@pytest.mark.parametrize("where", ["heartbeat", "find_coordinator"])
def test_a_request_cut_off_by_the_client_closing_ends_the_heartbeats_quietly(where: str) -> None:
    """``Consumer.close()`` closes its connections before it cancels its background tasks, so a heartbeat (or a
    coordinator lookup) in flight then fails with ``ClientClosedError``.  That ends the heartbeats; raised out of
    ``run()`` it failed the client's task group and ``close()`` re-raised it (seen on Apache Kafka: both members
    of a KIP-848 group raised from ``async with Consumer(...)`` at the chaos soak's end)."""
    async def main() -> None:
        closed = errors.ClientClosedError("client closed")
        cluster = FakeCluster([closed])
        if where == "find_coordinator":
            async def lookup(*args: Any, **kw: Any) -> Any:
                raise closed
            cluster.request_any = lookup  # type: ignore[method-assign]
        s = session(cluster)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                await tg.start(s.run)
                await wait_all_tasks_blocked()
                assert len(cluster.sent) == (1 if where == "heartbeat" else 0)
                assert s.fatal_error is None
                tg.cancel_scope.cancel()    # what the client's close() does next

    anyio.run(main)


@pytest.mark.parametrize("membership", [ShareGroupMember, ConsumerGroupMember])
@pytest.mark.parametrize("rack", ["r2", ""])
def test_the_joining_heartbeat_names_the_client_rack(membership: MembershipFactory, rack: str) -> None:
    """KIP-881 (as the Java client): the coordinator learns the member's rack from ``client_rack``."""
    async def main() -> None:
        cluster = FakeCluster([ok(1)])
        s = session(cluster, membership, client_rack=rack)
        async with anyio.create_task_group() as tg:
            await tg.start(s.run)
            await wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
        assert cluster.sent[0]["rack_id"] == (rack or None)

    anyio.run(main)
