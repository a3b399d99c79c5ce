"""HeartbeatLoop (the I/O shell of KIP-848/932 membership) against a scripted in-memory cluster."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from akresil import errors
from akresil.core.backoff import ExponentialBackoff
from akresil.core.group_heartbeat import MemberPhase, ShareMembership
from akresil.net.cluster import broker_of, coordinator_lane
from akresil.net.heartbeat_loop import HeartbeatLoop
from akresil.net.coordinator import CoordinatorLocator
from akresil.protocol.api import ApiKey


class FakeCluster:
    """Answers FindCoordinator with node 1 and heartbeats from a script; records what was sent."""

    def __init__(self, answers: list[dict[str, Any] | BaseException]) -> None:
        self.answers = answers
        self.sent: list[dict[str, Any]] = []
        self.nodes: list[int] = []
        self.config = SimpleNamespace(request_timeout_ms=1000)
        self.metadata = SimpleNamespace(snapshot=SimpleNamespace(brokers={1: object()}))
        self.now = 0.0
        self.coordinators = CoordinatorLocator(self)  # type: ignore[arg-type]

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


def member() -> ShareMembership:
    m = ShareMembership("g", backoff=ExponentialBackoff(10, 100, rng=random.Random(0), jitter=0.0))
    m.subscribe(frozenset({"t"}), 0)      # a member joins only with topics
    return m


def ok(epoch: int, assignment: Any = None) -> dict[str, Any]:
    return {"error_code": 0, "member_epoch": epoch, "heartbeat_interval_ms": 60_000, "assignment": assignment}


def test_change_callback_runs_after_an_assignment_and_on_request() -> None:
    async def main() -> None:
        cluster = FakeCluster([ok(1, {"topic_partitions": [{"topic_id": bytes(16), "partitions": [0]}]})])
        m = member()
        calls: list[int] = []

        async def on_change() -> None:
            calls.append(m.target_version)

        loop = HeartbeatLoop(cluster, m, ApiKey.SHARE_GROUP_HEARTBEAT, on_change=on_change,  # type: ignore[arg-type]
                             protocol_name="share")
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop.run)
            await wait_all_tasks_blocked()
            assert calls == [1] and len(cluster.sent) == 1      # the next heartbeat is 60 s away
            loop.request_change_callback()                        # e.g. metadata now names a topic id
            await wait_all_tasks_blocked()
            assert calls == [1, 1] and len(cluster.sent) == 1     # a callback, not another heartbeat
            loop.stop()

    anyio.run(main)


def test_a_broker_without_the_api_fails_the_member_with_a_clear_error() -> None:
    async def main() -> None:
        cluster = FakeCluster([errors.UnsupportedVersionError("node 1 does not support SHARE_GROUP_HEARTBEAT")])
        m = member()

        async def on_change() -> None:
            pass

        loop = HeartbeatLoop(cluster, m, ApiKey.SHARE_GROUP_HEARTBEAT, on_change=on_change,  # type: ignore[arg-type]
                             protocol_name="share")
        with anyio.fail_after(5):
            await loop.run()
        assert m.phase is MemberPhase.FATAL
        with pytest.raises(errors.UnsupportedVersionError, match="Kafka 4.0"):
            raise m.fatal_error  # type: ignore[misc]

    anyio.run(main)


def test_a_poll_timeout_sends_one_leave_heartbeat_then_nothing_until_the_next_poll() -> None:
    async def main() -> None:
        cluster = FakeCluster([ok(4), ok(-1), ok(5)])          # the second answers the leave
        m = ShareMembership("g", backoff=ExponentialBackoff(10, 100, rng=random.Random(0), jitter=0.0),
                            max_poll_interval_ms=1_000)
        m.subscribe(frozenset({"t"}), 0)
        m.poll(0)
        changes: list[MemberPhase] = []

        async def on_change() -> None:
            changes.append(m.phase)

        loop = HeartbeatLoop(cluster, m, ApiKey.SHARE_GROUP_HEARTBEAT, on_change=on_change,  # type: ignore[arg-type]
                             protocol_name="share")
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop.run)
            await wait_all_tasks_blocked()
            assert [b["member_epoch"] for b in cluster.sent] == [0]
            cluster.now = 1_000                                   # the poll timer runs out
            loop.wake()
            await wait_all_tasks_blocked()
            assert [b["member_epoch"] for b in cluster.sent] == [0, -1]
            assert m.phase is MemberPhase.STALE and changes[-1] is MemberPhase.STALE
            cluster.now = 100_000                                 # long after: still silent
            loop.wake()
            await wait_all_tasks_blocked()
            assert len(cluster.sent) == 2
            assert m.poll(100_000) is True
            loop.wake()
            await wait_all_tasks_blocked()
            assert [b["member_epoch"] for b in cluster.sent] == [0, -1, 0]
            assert m.phase is MemberPhase.STABLE and m.member_epoch == 5
            loop.stop()

    anyio.run(main)


def test_heartbeats_go_on_the_coordinators_own_connection() -> None:
    """A broker answers one connection's requests in order: a heartbeat sent on the connection that carries a
    long-poll (Share)Fetch would wait up to fetch_max_wait_ms behind it, and every rebalance step with it."""
    async def main() -> None:
        cluster = FakeCluster([ok(1)])
        loop = HeartbeatLoop(cluster, member(), ApiKey.SHARE_GROUP_HEARTBEAT,  # type: ignore[arg-type]
                             on_change=_nothing, protocol_name="share")
        member_ = loop.membership
        member_.subscribe(frozenset({"t"}), cluster.now)
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop.run)
            await wait_all_tasks_blocked()
            loop.stop()
        assert cluster.nodes == [coordinator_lane(1)]
        assert broker_of(cluster.nodes[0]) == 1 and broker_of(1) == 1

    anyio.run(main)


async def _nothing() -> None:
    return None


def test_coordinator_lane_refuses_what_is_not_a_broker_id() -> None:
    with pytest.raises(ValueError, match="not a broker id"):
        coordinator_lane(-1)
    with pytest.raises(ValueError, match="not a broker id"):
        coordinator_lane(coordinator_lane(1))


@pytest.mark.parametrize("where", ["heartbeat", "find_coordinator"])
def test_a_request_cut_off_by_the_client_closing_ends_the_loop_quietly(where: str) -> None:
    """``Consumer.close()`` closes its connections before it cancels its background tasks, so a heartbeat (or a
    coordinator lookup) in flight then fails with ``ClientClosedError``.  That ends the loop; raised out of
    ``run()`` it failed the client's task group and ``close()`` re-raised it (seen on Apache Kafka: both members
    of a KIP-848 group raised from ``async with Consumer(...)`` at the chaos soak's end)."""
    async def main() -> None:
        closed = errors.ClientClosedError("client closed")
        cluster = FakeCluster([closed])
        if where == "find_coordinator":
            async def lookup(*args: Any, **kw: Any) -> Any:
                raise closed
            cluster.request_any = lookup  # type: ignore[method-assign]

        async def on_change() -> None:
            pass

        loop = HeartbeatLoop(cluster, member(), ApiKey.SHARE_GROUP_HEARTBEAT, on_change=on_change,  # type: ignore[arg-type]
                             protocol_name="share")
        with anyio.fail_after(5):
            await loop.run()
        assert len(cluster.sent) == (1 if where == "heartbeat" else 0)
        assert loop.membership.phase is not MemberPhase.FATAL

    anyio.run(main)
