"""GroupSession with the classic protocol (``ClassicMember``) against a scripted in-process coordinator: request
flows, error paths, listener order, rebalance events. Timers are tens of milliseconds, so the whole file runs in
about a second."""

from __future__ import annotations

import inspect
import random
import time
from typing import Any, Callable

import anyio
import pytest

from akresil import errors
from akresil.config import resolve
from akresil.core.backoff import ExponentialBackoff
from akresil.core.events import REBALANCE, REBALANCE_FAILED, Hooks, RecordingHook
from akresil.core.group_state import MemberState
from akresil.core.metadata import BrokerInfo, MetadataSnapshot, PartitionInfo
from akresil.net.cluster import Lane, lane_of
from akresil.net.coordinator import CoordinatorLocator, CoordinatorTracker
from akresil.net.group_classic import ClassicMember
from akresil.net.group_offsets import GroupOffsets, check_offsets
from akresil.net.group_session import GroupSession
from akresil.protocol.api import ApiKey, decode_versioned, encode_versioned
from akresil.types import TopicPartition as TP

E = errors
GROUP = "g"
Handler = Callable[[dict[str, Any], int], dict[str, Any]]


class FakeCluster:
    """The slice of ``Cluster`` the coordinator uses; requests go to per-API handlers and are recorded."""

    def __init__(self, versions: dict[ApiKey, int] | None = None, topics: dict[str, int] | None = None) -> None:
        self.rng = random.Random(0)
        self.versions = {ApiKey.FIND_COORDINATOR: 4, ApiKey.JOIN_GROUP: 9, ApiKey.SYNC_GROUP: 5,
                         ApiKey.HEARTBEAT: 4, ApiKey.LEAVE_GROUP: 5, ApiKey.OFFSET_COMMIT: 9,
                         ApiKey.OFFSET_FETCH: 9, **(versions or {})}
        topics = topics if topics is not None else {"t": 4}
        self.metadata = type("M", (), {})()
        self.metadata.snapshot = MetadataSnapshot(
            brokers={1: BrokerInfo(1, "h", 1), 2: BrokerInfo(2, "h", 2)},
            topics={t: {p: PartitionInfo(t, p, 1, 0) for p in range(n)} for t, n in topics.items()})
        self.handlers: dict[ApiKey, Handler] = {}
        self.log: list[tuple[float, int | None, ApiKey, dict[str, Any]]] = []
        self.added_topics: set[str] = set()
        self.metadata_listeners: list[Callable[[], None]] = []
        self.coordinators = CoordinatorLocator(self)  # type: ignore[arg-type]
        self.recorded = RecordingHook()
        self.hooks = Hooks([self.recorded])

    def clock(self) -> float:
        return time.monotonic() * 1000.0

    def sent(self, api: ApiKey) -> list[dict[str, Any]]:
        return [body for _, _, key, body in self.log if key == api]

    async def request(self, node_id: int, api_key: ApiKey, body: Any, *, min_version: int = 0,
                      timeout_ms: int | None = None) -> tuple[int, dict[str, Any]]:
        version = self.versions[api_key]
        if version < min_version:
            raise E.UnsupportedVersionError(f"{api_key.name} v{min_version}+")
        payload = body(version) if callable(body) else body
        self.log.append((self.clock(), node_id, api_key, payload))
        await anyio.sleep(0)
        answer = self.handlers[api_key](payload, version)
        if inspect.isawaitable(answer):      # a request the broker holds (a JoinGroup waiting for other members)
            answer = await answer
        return version, answer

    def disconnect(self, node_id: int, error: BaseException | None = None, *, lane: Lane = Lane.SHARED) -> None:
        self.log.append((self.clock(), node_id, f"disconnect {lane.value}", {}))  # type: ignore[arg-type]

    async def request_any(self, api_key: ApiKey, body: Any, *, min_version: int = 0,
                          timeout_ms: int | None = None) -> tuple[int, int, dict[str, Any]]:
        version, response = await self.request(-1, api_key, body, min_version=min_version)
        return 1, version, response

    def add_topics(self, topics: Any) -> None:
        self.added_topics |= set(topics)

    async def wait_for_metadata(self, *, timeout_ms: float, until: Callable[[], bool]) -> None:
        if not until():
            raise TimeoutError

    def on_metadata_change(self, callback: Callable[[], None]) -> None:
        self.metadata_listeners.append(callback)


class FakeGroup:
    """A one-member-at-a-time classic group coordinator: MEMBER_ID_REQUIRED on first join, the joiner is
    leader, SyncGroup hands back the leader's assignment for it."""

    def __init__(self, cluster: FakeCluster, node: int = 1) -> None:
        self.cluster = cluster
        self.node = node
        self.generation = 0
        self.members = 0
        self.heartbeat_errors: list[int] = []
        self.commit_errors: list[int] = []
        self.join_errors: list[int] = []
        self.committed: dict[TP, int] = {}
        self.sync_assignment: list[TP] | None = None  # override what SyncGroup returns
        c = cluster.handlers
        c[ApiKey.FIND_COORDINATOR] = self.find
        c[ApiKey.JOIN_GROUP] = self.join
        c[ApiKey.SYNC_GROUP] = self.sync
        c[ApiKey.HEARTBEAT] = self.heartbeat
        c[ApiKey.LEAVE_GROUP] = lambda body, v: {"error_code": 0, "members": []}
        c[ApiKey.OFFSET_COMMIT] = self.commit
        c[ApiKey.OFFSET_FETCH] = self.fetch

    def find(self, body: dict[str, Any], v: int) -> dict[str, Any]:
        entry = {"node_id": self.node, "host": "h", "port": self.node, "error_code": 0}
        return {"coordinators": [{"key": GROUP, **entry}]} if v >= 4 else entry

    def join(self, body: dict[str, Any], v: int) -> dict[str, Any]:
        if self.join_errors:
            return {"error_code": self.join_errors.pop(0), "generation_id": -1, "protocol_name": None,
                    "leader": "", "member_id": body["member_id"], "members": []}
        if not body["member_id"] and body.get("group_instance_id") is None:
            self.members += 1
            return {"error_code": E.MemberIdRequiredError.errno, "generation_id": -1, "protocol_name": None,
                    "leader": "", "member_id": f"member-{self.members}", "members": []}
        member = body["member_id"] or f"static-{body['group_instance_id']}"
        self.generation += 1
        proto = body["protocols"][0]
        return {"error_code": 0, "generation_id": self.generation, "protocol_name": proto["name"],
                "leader": member, "member_id": member,
                "members": [{"member_id": member, "group_instance_id": body.get("group_instance_id"),
                             "metadata": proto["metadata"]}]}

    def sync(self, body: dict[str, Any], v: int) -> dict[str, Any]:
        if self.sync_assignment is not None:
            parts: dict[str, list[int]] = {}
            for tp in self.sync_assignment:
                parts.setdefault(tp.topic, []).append(tp.partition)
            raw = encode_versioned("ConsumerProtocolAssignment", 0, {
                "assigned_partitions": [{"topic": t, "partitions": p} for t, p in parts.items()]})
        else:
            raw = next(a["assignment"] for a in body["assignments"] if a["member_id"] == body["member_id"])
        return {"error_code": 0, "assignment": raw}

    def heartbeat(self, body: dict[str, Any], v: int) -> dict[str, Any]:
        return {"error_code": self.heartbeat_errors.pop(0) if self.heartbeat_errors else 0}

    def commit(self, body: dict[str, Any], v: int) -> dict[str, Any]:
        code = self.commit_errors.pop(0) if self.commit_errors else 0
        out = []
        for topic in body["topics"]:
            for p in topic["partitions"]:
                if code == 0:
                    self.committed[TP(topic["name"], p["partition_index"])] = p["committed_offset"]
            out.append({"name": topic["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": code} for p in topic["partitions"]]})
        return {"topics": out}

    def fetch(self, body: dict[str, Any], v: int) -> dict[str, Any]:
        topics = body["groups"][0]["topics"] if v >= 8 else body["topics"]
        out = [{"name": t["name"], "partitions": [
            {"partition_index": p, "committed_offset": self.committed.get(TP(t["name"], p), -1),
             "metadata": "", "error_code": 0} for p in t["partition_indexes"]]} for t in topics]
        if v >= 8:
            return {"groups": [{"group_id": GROUP, "topics": out, "error_code": 0}]}
        return {"topics": out, "error_code": 0}


class Recorder:
    def __init__(self, events: list[tuple[str, Any]]) -> None:
        self.events = events

    async def on_partitions_assigned(self, tps: set[TP]) -> None:
        self.events.append(("assigned", frozenset(tps)))

    async def on_partitions_revoked(self, tps: set[TP]) -> None:
        self.events.append(("revoked", frozenset(tps)))

    async def on_partitions_lost(self, tps: set[TP]) -> None:
        self.events.append(("lost", frozenset(tps)))


def config(**kw: Any) -> Any:
    base = dict(group_id=GROUP, session_timeout_ms=400, heartbeat_interval_ms=20, retry_backoff_ms=20,
                retry_backoff_max_ms=200, request_timeout_ms=2_000)
    return resolve("consumer", {**base, **kw})


def coordinator(cluster: FakeCluster, events: list[tuple[str, Any]], *, topics: set[str] | None = None,
                positions: dict[TP, int] | None = None, listener: Any = None, **kw: Any) -> GroupSession:
    def for_revoke() -> dict[TP, int]:
        events.append(("positions", None))
        return dict(positions or {})

    return GroupSession(cluster, config(**kw), ClassicMember,  # type: ignore[arg-type]
                        subscription=lambda: topics if topics is not None else {"t"},
                        listener=listener or Recorder(events),
                        on_assignment_changed=lambda: events.append(("changed", None)), positions_for_revoke=for_revoke)


def state(gc: GroupSession) -> MemberState:
    member = gc.member
    assert isinstance(member, ClassicMember)
    return member.state


def standalone(cluster: FakeCluster, request_timeout_ms: int = 2_000) -> GroupOffsets:
    """The offsets path of a consumer with manual assignment: no member, generation -1."""
    backoff = ExponentialBackoff(20, 200, rng=cluster.rng)
    return GroupOffsets(cluster, CoordinatorTracker(cluster, GROUP, backoff=backoff),  # type: ignore[arg-type]
                        request_timeout_ms=request_timeout_ms, backoff=backoff)


ALL4 = frozenset(TP("t", p) for p in range(4))


async def until(cond: Callable[[], bool], timeout: float = 3.0) -> None:
    with anyio.fail_after(timeout):
        while not cond():
            await anyio.sleep(0.005)


# ---------------------------------------------------------------------------- joining
async def test_member_id_required_then_leader_assigns_itself() -> None:
    cluster, events = FakeCluster(), []
    group = FakeGroup(cluster)
    gc = coordinator(cluster, events)
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        joins = cluster.sent(ApiKey.JOIN_GROUP)
        assert [j["member_id"] for j in joins] == ["", "member-1"]
        assert joins[0]["protocol_type"] == "consumer" and joins[0]["rebalance_timeout_ms"] == 300_000
        assert [p["name"] for p in joins[0]["protocols"]] == ["range", "cooperative-sticky"]
        _, sub = decode_versioned("ConsumerProtocolSubscription", joins[1]["protocols"][0]["metadata"])
        assert sub["topics"] == ["t"]
        assert cluster.sent(ApiKey.FIND_COORDINATOR)[0] == {"key_type": 0, "coordinator_keys": [GROUP]}
        assert gc.assignment == ALL4 and gc.generation_id == 1 and gc.member_id == "member-1"
        assert events[-2:] == [("changed", None), ("assigned", ALL4)]
        assert "t" in cluster.added_topics
        # one completed rebalance; KIP-394's MEMBER_ID_REQUIRED round is part of joining, not a failure
        [done] = cluster.recorded.named(REBALANCE)
        assert done["generation"] == 1 and done["assigned"] == sorted(ALL4) and done["revoked"] == []
        assert done["group_id"] == GROUP and done["duration_ms"] >= 0
        assert cluster.recorded.named(REBALANCE_FAILED) == []
        # heartbeats flow at the interval, for the current generation
        await until(lambda: len(cluster.sent(ApiKey.HEARTBEAT)) >= 3)
        hb = cluster.sent(ApiKey.HEARTBEAT)[0]
        assert hb == {"group_id": GROUP, "generation_id": 1, "member_id": "member-1", "group_instance_id": None}
        times = [t for t, _, k, _ in cluster.log if k == ApiKey.HEARTBEAT]
        assert all(b - a >= 19 for a, b in zip(times, times[1:]))
        await gc.leave()
        tg.cancel_scope.cancel()
    leaves = cluster.sent(ApiKey.LEAVE_GROUP)
    assert leaves[0]["members"][0]["member_id"] == "member-1"
    assert ("revoked", ALL4) in events


@pytest.mark.parametrize("rack", ["r2", ""])
async def test_the_subscription_names_the_client_rack(rack: str) -> None:
    """KIP-881 (as the Java client): the leader's assignor learns each member's rack from its subscription."""
    cluster, events = FakeCluster(), []
    FakeGroup(cluster)
    gc = coordinator(cluster, events, client_rack=rack)
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        tg.cancel_scope.cancel()
    _, sub = decode_versioned("ConsumerProtocolSubscription",
                              cluster.sent(ApiKey.JOIN_GROUP)[-1]["protocols"][0]["metadata"])
    assert sub["rack_id"] == (rack or None)


async def test_group_requests_go_on_the_coordinators_own_connection() -> None:
    """A broker answers one connection's requests in order: a JoinGroup, SyncGroup or Heartbeat on the
    connection that carries a long-poll Fetch to the same broker would wait up to fetch_max_wait_ms behind it
    (twice per rebalance: the heartbeat that learns of it, then the rejoin)."""
    cluster, events = FakeCluster(), []
    FakeGroup(cluster)
    gc = coordinator(cluster, events)
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        await until(lambda: len(cluster.sent(ApiKey.HEARTBEAT)) >= 1)
        await gc.leave()
        tg.cancel_scope.cancel()
    group_apis = (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP)
    nodes = {api: {n for _, n, k, _ in cluster.log if k == api} for api in group_apis}
    # the coordinator's broker id, nothing else: the cluster puts these APIs on its group connection
    assert nodes == {api: {1} for api in group_apis}
    assert {lane_of(api) for api in group_apis} == {Lane.GROUP}


async def test_static_member_joins_directly_and_does_not_leave() -> None:
    cluster, events = FakeCluster(), []
    FakeGroup(cluster)
    gc = coordinator(cluster, events, group_instance_id="box-1")
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        assert cluster.sent(ApiKey.JOIN_GROUP)[0]["group_instance_id"] == "box-1"
        assert len(cluster.sent(ApiKey.JOIN_GROUP)) == 1
        await gc.leave()
        tg.cancel_scope.cancel()
    assert cluster.sent(ApiKey.LEAVE_GROUP) == []


async def test_static_membership_needs_join_group_v5() -> None:
    cluster, events = FakeCluster(versions={ApiKey.JOIN_GROUP: 4}), []
    FakeGroup(cluster)
    gc = coordinator(cluster, events, group_instance_id="box-1")
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3), pytest.raises(E.UnsupportedVersionError):
            await gc.wait_assignment()
        tg.cancel_scope.cancel()


# ---------------------------------------------------------------------------- heartbeat error paths
async def test_unknown_member_loses_partitions_and_rejoins_as_new_member() -> None:
    cluster, events = FakeCluster(), []
    group = FakeGroup(cluster)
    gc = coordinator(cluster, events, positions={TP("t", 0): 5})
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        events.clear()
        group.heartbeat_errors = [E.UnknownMemberIdError.errno]
        await until(lambda: gc.generation_id == 2 and state(gc) is MemberState.STABLE)
        assert events[0] == ("lost", ALL4)  # no commit ("positions") before losing
        assert ("positions", None) not in events
        assert [j["member_id"] for j in cluster.sent(ApiKey.JOIN_GROUP)][-2:] == ["", "member-2"]
        assert gc.assignment == ALL4
        await gc.leave()
        tg.cancel_scope.cancel()


async def test_rebalance_in_progress_eager_commits_then_revokes_then_rejoins() -> None:
    cluster, events = FakeCluster(), []
    group = FakeGroup(cluster)
    gc = coordinator(cluster, events, positions={TP("t", 1): 42, TP("x", 0): 1})
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        events.clear()
        group.heartbeat_errors = [E.RebalanceInProgressError.errno]
        await until(lambda: gc.generation_id == 2 and state(gc) is MemberState.STABLE)
        names = [e for e, _ in events]
        assert names[:3] == ["positions", "revoked", "changed"]
        assert group.committed == {TP("t", 1): 42}  # only revoked partitions are committed
        commit = cluster.sent(ApiKey.OFFSET_COMMIT)[0]
        assert commit["generation_id_or_member_epoch"] == 1 and commit["member_id"] == "member-1"
        assert cluster.sent(ApiKey.JOIN_GROUP)[-1]["member_id"] == "member-1"  # same member
        assert cluster.sent(ApiKey.JOIN_GROUP)[-1]["reason"] == "group is rebalancing"
        await gc.leave()
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("second_code, committed", [(0, {TP("t", 1): 42}),
                                                    (E.IllegalGenerationError.errno, {})])
async def test_revoke_commit_retries_next_generation_when_broker_bumped_it_early(
        second_code: int, committed: dict[TP, int]) -> None:
    """noida-db starts generation N+1 when a rebalance begins: the revoke commit for N is ILLEGAL_GENERATION
    and is retried once for N+1; if that fails too (Kafka), the member rejoins with the same member id."""
    cluster, events = FakeCluster(), []
    group = FakeGroup(cluster)
    gc = coordinator(cluster, events, positions={TP("t", 1): 42})
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        group.commit_errors = [E.IllegalGenerationError.errno, second_code]
        group.heartbeat_errors = [E.RebalanceInProgressError.errno]
        await until(lambda: gc.generation_id == 2 and state(gc) is MemberState.STABLE)
        commits = cluster.sent(ApiKey.OFFSET_COMMIT)
        assert [c["generation_id_or_member_epoch"] for c in commits] == [1, 2]
        assert group.committed == committed
        assert cluster.sent(ApiKey.JOIN_GROUP)[-1]["member_id"] == "member-1"  # no ghost member left behind
        await gc.leave()
        tg.cancel_scope.cancel()


async def test_cooperative_keeps_partitions_and_revokes_only_what_moved() -> None:
    cluster, events = FakeCluster(), []
    group = FakeGroup(cluster)
    gc = coordinator(cluster, events, partition_assignment_strategy=["cooperative-sticky"])
    assert gc.rebalance_protocol == "cooperative"
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        events.clear()
        group.sync_assignment = [TP("t", 0), TP("t", 1)]  # the leader moves 2 and 3 away
        group.heartbeat_errors = [E.RebalanceInProgressError.errno]
        await until(lambda: gc.generation_id >= 2 and gc.assignment == {TP("t", 0), TP("t", 1)})
        assert ("revoked", frozenset({TP("t", 2), TP("t", 3)})) in events
        assert ("assigned", frozenset()) in events
        join2 = cluster.sent(ApiKey.JOIN_GROUP)[2]
        _, sub = decode_versioned("ConsumerProtocolSubscription", join2["protocols"][0]["metadata"])
        assert sub["owned_partitions"] == [{"topic": "t", "partitions": [0, 1, 2, 3]}]  # kept while joining
        assert sub["generation_id"] == 1
        # the revocation triggers a follow-up rebalance right away
        await until(lambda: gc.generation_id >= 3)
        await gc.leave()
        tg.cancel_scope.cancel()


async def test_fenced_static_member_is_fatal() -> None:
    cluster, events = FakeCluster(), []
    group = FakeGroup(cluster)
    gc = coordinator(cluster, events, group_instance_id="box-1")
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        group.heartbeat_errors = [E.FencedInstanceIdError.errno]
        await until(lambda: gc.fatal_error is not None)
        with pytest.raises(E.FencedInstanceIdError):
            await gc.wait_assignment()
        with pytest.raises(E.FencedInstanceIdError):
            await gc.commit({TP("t", 0): (1, None, None)})
        await until(lambda: ("lost", ALL4) in events)
    # run() returned by itself: the task group exited without cancellation


async def test_refused_login_on_heartbeat_reconnect_is_fatal_not_a_crash() -> None:
    """A heartbeat whose reconnect to the coordinator is refused (rotated credentials) makes the member fail
    with the AuthenticationError; the heartbeat task must not crash the task group that owns it."""
    cluster, events = FakeCluster(), []
    FakeGroup(cluster)
    gc = coordinator(cluster, events)
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()

        def refused(body: dict[str, Any], v: int) -> dict[str, Any]:
            raise E.SaslAuthenticationFailedError("authentication as 'alice' failed")

        cluster.handlers[ApiKey.HEARTBEAT] = refused
        await until(lambda: gc.fatal_error is not None)
        assert isinstance(gc.fatal_error, E.SaslAuthenticationFailedError)
        with pytest.raises(E.SaslAuthenticationFailedError):
            await gc.wait_assignment()
    # run() returned by itself: the task group exited without an ExceptionGroup


async def test_not_coordinator_rediscovers_with_backoff() -> None:
    cluster, events = FakeCluster(), []
    group = FakeGroup(cluster)
    gc = coordinator(cluster, events)
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        lookups = [0]

        def find(body: dict[str, Any], v: int) -> dict[str, Any]:
            lookups[0] += 1
            code = E.CoordinatorNotAvailableError.errno if lookups[0] <= 2 else 0
            return {"coordinators": [{"key": GROUP, "node_id": 2, "host": "h", "port": 2, "error_code": code}]}

        cluster.handlers[ApiKey.FIND_COORDINATOR] = find
        group.heartbeat_errors = [E.NotCoordinatorError.errno]
        await until(lambda: gc.coordinator.node == 2)
        times = [t for t, _, k, _ in cluster.log if k == ApiKey.FIND_COORDINATOR][-3:]
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert gaps[0] >= 16 and gaps[1] >= 32  # 20 ms then 40 ms, +-20% jitter (KIP-580)
        await until(lambda: any(n == 2 for _, n, k, _ in cluster.log if k == ApiKey.HEARTBEAT))
        assert gc.generation_id == 1 and state(gc) is MemberState.STABLE  # membership survived the move
        await gc.leave()
        tg.cancel_scope.cancel()


async def test_poll_timeout_leaves_and_rejoins_on_next_poll() -> None:
    cluster, events = FakeCluster(), []
    FakeGroup(cluster)
    gc = coordinator(cluster, events, max_poll_interval_ms=150, session_timeout_ms=1_000)
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        await until(lambda: len(cluster.sent(ApiKey.LEAVE_GROUP)) == 1)
        assert cluster.sent(ApiKey.LEAVE_GROUP)[0]["members"][0]["reason"].startswith("max_poll_interval_ms")
        await until(lambda: ("lost", ALL4) in events)
        joins = len(cluster.sent(ApiKey.JOIN_GROUP))
        await anyio.sleep(0.1)
        assert len(cluster.sent(ApiKey.JOIN_GROUP)) == joins  # no rejoin before the application polls
        gc.poll_happened(cluster.clock())
        with anyio.fail_after(3):
            await gc.wait_assignment()
        assert gc.assignment == ALL4 and len(cluster.sent(ApiKey.JOIN_GROUP)) > joins
        await gc.leave()
        tg.cancel_scope.cancel()


async def test_session_expiry_without_heartbeat_answers_loses_partitions() -> None:
    cluster, events = FakeCluster(), []
    FakeGroup(cluster)
    gc = coordinator(cluster, events, session_timeout_ms=150, heartbeat_interval_ms=20)
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()

        def dead(body: dict[str, Any], v: int) -> dict[str, Any]:
            raise E.KafkaConnectionError("coordinator down")

        cluster.handlers[ApiKey.HEARTBEAT] = dead
        cluster.handlers[ApiKey.FIND_COORDINATOR] = dead
        await until(lambda: ("lost", ALL4) in events)
        assert gc.generation_id == -1
        await gc.leave()
        tg.cancel_scope.cancel()


# ---------------------------------------------------------------------------- offsets
async def test_commit_and_fetch_committed_roundtrip_v9_and_v7() -> None:
    for versions in ({}, {ApiKey.OFFSET_FETCH: 7, ApiKey.OFFSET_COMMIT: 6, ApiKey.FIND_COORDINATOR: 3}):
        cluster, events = FakeCluster(versions=versions), []  # type: ignore[arg-type]
        FakeGroup(cluster)
        gc = coordinator(cluster, events)
        gc = standalone(cluster)
        # manual assignment: commits with no generation
        await gc.commit(check_offsets({TP("t", 0): (10, 3, "meta"), TP("t", 2): (7, None, None)}))
        body = cluster.sent(ApiKey.OFFSET_COMMIT)[0]
        assert body["generation_id_or_member_epoch"] == -1 and body["member_id"] == ""
        parts = body["topics"][0]["partitions"]
        assert parts[0] == {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 3,
                            "committed_metadata": "meta"}
        assert parts[1]["committed_leader_epoch"] == -1 and parts[1]["committed_metadata"] == ""
        got = await gc.fetch([TP("t", 0), TP("t", 1), TP("t", 2)])
        assert got == {TP("t", 0): 10, TP("t", 1): None, TP("t", 2): 7}
        fetch = cluster.sent(ApiKey.OFFSET_FETCH)[0]
        if versions:
            assert fetch["group_id"] == GROUP and fetch["require_stable"] is True
            assert cluster.sent(ApiKey.FIND_COORDINATOR)[0]["key"] == GROUP
        else:
            assert fetch["groups"][0]["group_id"] == GROUP


async def test_commit_retries_coordinator_errors_then_succeeds() -> None:
    cluster = FakeCluster()
    group = FakeGroup(cluster)
    group.commit_errors = [E.NotCoordinatorError.errno, E.CoordinatorLoadInProgressError.errno]
    await standalone(cluster).commit(check_offsets({TP("t", 0): (10, None, None)}))
    assert group.committed == {TP("t", 0): 10}
    assert len(cluster.sent(ApiKey.OFFSET_COMMIT)) == 3
    assert len(cluster.sent(ApiKey.FIND_COORDINATOR)) == 2  # rediscovered after NOT_COORDINATOR


@pytest.mark.parametrize("code, rejoin_only", [(E.IllegalGenerationError.errno, False),
                                                (E.UnknownMemberIdError.errno, False),
                                                (E.RebalanceInProgressError.errno, True)])
async def test_commit_after_rebalance_raises_commit_failed(code: int, rejoin_only: bool) -> None:
    cluster, events = FakeCluster(), []
    group = FakeGroup(cluster)
    gc = coordinator(cluster, events)
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        group.commit_errors = [code]
        with pytest.raises(E.CommitFailedError, match="rebalanced"):
            await gc.commit({TP("t", 0): (10, None, None)})
        if rejoin_only:
            await until(lambda: gc.generation_id == 2)
            assert cluster.sent(ApiKey.JOIN_GROUP)[-1]["member_id"] == "member-1"
        else:
            await until(lambda: ("lost", ALL4) in events)
            await until(lambda: gc.generation_id == 2)
            # ILLEGAL_GENERATION keeps the member id (the coordinator still knows it); UNKNOWN_MEMBER_ID drops it
            keep = code == E.IllegalGenerationError.errno
            assert (cluster.sent(ApiKey.JOIN_GROUP)[-1]["member_id"] == "member-1") is keep
        await gc.leave()
        tg.cancel_scope.cancel()


async def test_commit_non_retriable_error_is_raised_as_is() -> None:
    cluster = FakeCluster()
    group = FakeGroup(cluster)
    group.commit_errors = [E.OffsetMetadataTooLargeError.errno]
    with pytest.raises(E.OffsetMetadataTooLargeError, match=r"t\[0\]"):
        await standalone(cluster).commit(check_offsets({TP("t", 0): (10, None, "x" * 10)}))


async def test_commit_gives_up_after_request_timeout() -> None:
    cluster = FakeCluster()
    group = FakeGroup(cluster)
    group.commit_errors = [E.CoordinatorLoadInProgressError.errno] * 100
    start = time.monotonic()
    with pytest.raises(E.KafkaTimeoutError, match="request_timeout_ms=150"):
        await standalone(cluster, request_timeout_ms=150).commit(check_offsets({TP("t", 0): (10, None, None)}))
    # a commit that ignored request_timeout_ms would retry the 100 errors with backoff for tens of seconds
    assert time.monotonic() - start < 2.0


async def test_bad_offsets_are_rejected_with_a_clear_error() -> None:
    cluster, events = FakeCluster(), []
    gc = coordinator(cluster, events)
    with pytest.raises(ValueError, match="offset must be an int >= 0"):
        await gc.commit({TP("t", 0): (-1, None, None)})
    with pytest.raises(ValueError, match="expected .offset, leader_epoch, metadata."):
        await gc.commit({TP("t", 0): 5})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="TopicPartition"):
        await gc.fetch_committed([("t", -1)])  # type: ignore[list-item]
    assert cluster.log == []


async def test_group_id_is_required() -> None:
    with pytest.raises(E.ConfigError, match="group_id"):
        GroupSession(FakeCluster(), resolve("consumer", {}), ClassicMember, subscription=set)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- rebalance events and the listener
async def test_rebalance_events_count_what_was_revoked_and_failed_attempts() -> None:
    """A rebalance runs from its first step (here: revoking everything, eager) to the new assignment; a failed
    JoinGroup in between is a ``rebalance_failed`` and the retry belongs to the same rebalance."""
    cluster, events = FakeCluster(), []
    group = FakeGroup(cluster)
    gc = coordinator(cluster, events)
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        group.join_errors = [E.CoordinatorLoadInProgressError.errno]
        group.heartbeat_errors = [E.RebalanceInProgressError.errno]
        await until(lambda: len(cluster.recorded.named(REBALANCE)) == 2)
        second = cluster.recorded.named(REBALANCE)[1]
        assert second["generation"] == 2 and second["revoked"] == sorted(ALL4) and second["assigned"] == sorted(ALL4)
        assert [f["error"] for f in cluster.recorded.named(REBALANCE_FAILED)] == ["CoordinatorLoadInProgressError"]
        await gc.leave()
        tg.cancel_scope.cancel()


class RevokedOnly:
    def __init__(self, events: list[tuple[str, Any]]) -> None:
        self.events = events

    async def on_partitions_revoked(self, tps: set[TP]) -> None:
        self.events.append(("revoked", frozenset(tps)))


async def test_a_listener_without_on_partitions_lost_hears_of_lost_partitions_as_revoked() -> None:
    """Java calls onPartitionsRevoked when the listener does not override onPartitionsLost; nothing is committed
    (another member may own the partitions already)."""
    cluster, events = FakeCluster(), []
    group = FakeGroup(cluster)
    gc = coordinator(cluster, events, positions={TP("t", 0): 5}, listener=RevokedOnly(events))
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await gc.wait_assignment()
        events.clear()
        group.heartbeat_errors = [E.UnknownMemberIdError.errno]
        await until(lambda: ("revoked", ALL4) in events)
        assert ("positions", None) not in events and group.committed == {}
        await gc.leave()
        tg.cancel_scope.cancel()


async def test_leaving_while_the_broker_holds_our_join_leaves_on_a_new_connection() -> None:
    """close() while the coordinator holds the JoinGroup (other members have not rejoined yet): a broker answers
    one connection's requests in order, so a LeaveGroup on that connection would wait up to the rebalance timeout
    behind it (32 s measured on Kafka and Tansu). The member drops that connection and leaves on a new one."""
    cluster, events = FakeCluster(), []
    group = FakeGroup(cluster)
    held = anyio.Event()

    async def hold(body: dict[str, Any], v: int) -> dict[str, Any]:
        held.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    def join(body: dict[str, Any], v: int) -> Any:
        return hold(body, v) if body["member_id"] else group.join(body, v)   # MEMBER_ID_REQUIRED, then held

    cluster.handlers[ApiKey.JOIN_GROUP] = join
    gc = coordinator(cluster, events)
    async with anyio.create_task_group() as tg:
        await tg.start(gc.run)
        with anyio.fail_after(3):
            await held.wait()
            await gc.leave()
        tg.cancel_scope.cancel()
    tail = [(node, api) for _, node, api, _ in cluster.log][-2:]
    assert tail == [(1, "disconnect group"), (1, ApiKey.LEAVE_GROUP)]
    assert cluster.sent(ApiKey.LEAVE_GROUP)[0]["members"][0]["member_id"] == "member-1"
