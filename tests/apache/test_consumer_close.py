"""``close()`` while Apache Kafka holds the consumer's JoinGroup (issue 32): the member leaves without waiting the
rebalance out. A broker answers one connection's requests in order, so a LeaveGroup sent behind the held JoinGroup
waited with it (32 s measured: the request timeout); the consumer now drops that connection, leaves on a new one,
and the group goes on without it at once."""

from __future__ import annotations

from typing import Any, Callable

import anyio

from akresil import Admin, Consumer, TopicPartition
from akresil.core.group_state import MemberState
from akresil.net.group_classic import ClassicMember
from akresil.testing import KafkaCluster

from .conftest import TopicMaker

CLASSIC = dict(fetch_max_wait_ms=100, retry_backoff_ms=50, auto_offset_reset="earliest", enable_auto_commit=False,
               session_timeout_ms=6_000, heartbeat_interval_ms=500)


class HoldsTheRebalance:
    """A member whose ``on_partitions_revoked`` does not return until released: it keeps heartbeating (the
    session lives) but does not rejoin, so the coordinator holds every other member's JoinGroup for up to its
    rebalance timeout, as a slow application would."""

    def __init__(self) -> None:
        self.revoking = anyio.Event()
        self.release = anyio.Event()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.revoking.set()
        await self.release.wait()


async def members(admin: Admin, group: str) -> set[str]:
    return {m.member_id for m in (await admin.describe_consumer_groups([group]))[group].members}


async def test_close_while_the_broker_holds_the_join_leaves_at_once(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group = await make_topic(partitions=2), unique("g")
    slow = HoldsTheRebalance()
    cfg: dict[str, Any] = dict(bootstrap_servers=bootstrap, group_id=group, **CLASSIC)
    async with Admin(bootstrap_servers=bootstrap) as admin, \
            Consumer(topic, listener=slow, rebalance_timeout_ms=120_000, **cfg) as holder:
        with anyio.fail_after(60):
            while len(holder.assignment()) < 2:
                await holder.getmany(timeout_ms=50)
        joining: Consumer[Any, Any] = Consumer(topic, **cfg)
        await joining.start()
        session = joining._group
        assert session is not None and isinstance(session.member, ClassicMember)
        with anyio.fail_after(60):
            await slow.revoking.wait()           # the rebalance started; the holder will not rejoin
            while not (session.member.state is MemberState.PREPARING_REBALANCE and session.member_id
                       and session.member_id in await members(admin, group)):
                await anyio.sleep(0.1)           # the broker holds the joiner's JoinGroup now
        joiner = session.member_id
        # the guard is far below the 120 s the broker would hold the JoinGroup and the 30 s request timeout a
        # LeaveGroup queued behind it would have waited
        with anyio.fail_after(20):
            await joining.close()
        assert not slow.release.is_set()         # the rebalance could not have completed: the holder still revokes
        assert joiner not in await members(admin, group)   # the coordinator already dropped the member that left
        slow.release.set()
        with anyio.fail_after(60):
            while len(holder.assignment()) < 2:
                await holder.getmany(timeout_ms=50)
