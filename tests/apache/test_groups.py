"""Consumer groups on Apache Kafka, classic and KIP-848 (``group_protocol="consumer"``): rebalances when members
join and leave, a killed member's partitions moving to the survivor with its commits kept, mixed groups where the
other member is the Java client (kafka-clients, ``akresil.testing.java_peer.JavaPeer``), cooperative-sticky.  A mixed
group with confluent-kafka and static members run on every broker with groups: tests/capabilities/test_groups.py.

"Consumed once" in a mixed group holds because every member commits what it handed out before giving a
partition up (after each batch and on revoke); the checks are on (partition, offset) pairs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import anyio
import pytest

from akresil import Consumer, TopicPartition
from akresil.testing import KafkaCluster
from akresil.testing.java_peer import JavaPeer
from akresil.types import ConsumerRecord

from ..harness.groups import Tracker, consume, keys, member_config, produce, settle, tracked, wait_until
from .conftest import TopicMaker

ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = ["classic", "consumer"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_members_split_on_join_take_back_on_leave_and_commits_survive(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str], protocol: str) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group = await make_topic(partitions=4), unique("g")
    everything = {TopicPartition(topic, p) for p in range(4)}
    produced = await produce(bootstrap, topic, 50, 4)
    sinks: list[list[ConsumerRecord]] = [[], []]
    trackers = [Tracker(), Tracker()]

    def total() -> int:
        return len({k for s in sinks for k in keys(s)})

    async with tracked(topic, bootstrap, group, protocol, trackers[0]) as a:
        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                tg.start_soon(consume, a, sinks[0], lambda: total() >= 500)
                await wait_until(lambda: a.assignment() == everything and total() >= 200, 60, "a read alone")
                async with tracked(topic, bootstrap, group, protocol, trackers[1]) as b:
                    async with anyio.create_task_group() as tg_b:
                        tg_b.start_soon(consume, b, sinks[1], lambda: total() >= 400)
                        await wait_until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 60,
                                         "a 2/2 split")
                        assert a.assignment() | b.assignment() == everything
                        produced |= await produce(bootstrap, topic, 50, 4, tag="w")
                # b left the group: a gets its partitions back and reads what comes next from all of them
                await wait_until(lambda: a.assignment() == everything, 60, "a owns everything again")
                produced |= await produce(bootstrap, topic, 25, 4, tag="x")
        revoked_while_member = list(trackers[0].revoked)    # closing revokes everything: not a rebalance
    got = keys(sinks[0]) + keys(sinks[1])
    assert len(got) == len(set(got)), "a record was consumed twice"
    assert set(got) == produced
    assert sinks[1], "the second member consumed"
    assert revoked_while_member and not any(t.lost for t in trackers)
    if protocol == "consumer":   # KIP-848 is incremental: a gives up only what moves to b, never everything
        assert all(r < everything for r in revoked_while_member), revoked_while_member
    # the commits are the group's: a new member starts where the others stopped and finds nothing to read
    async with kafka_cluster.admin() as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    assert {tp: o.committed for tp, o in offsets.items()} == {tp: 125 for tp in everything}
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **member_config(protocol)) as late:
        await wait_until(lambda: late.assignment() == everything, 60, "late member assigned")
        with anyio.move_on_after(2):
            while True:
                assert await late.getmany(timeout_ms=200) == {}


KILLED_MEMBER = """
import sys, anyio
from akresil import Consumer
async def main():
    bootstrap, topic, group, protocol, want = sys.argv[1:6]
    extra = dict(session_timeout_ms=6000, heartbeat_interval_ms=500) if protocol == "classic" else {}
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=group, group_protocol=protocol,
                        auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=100,
                        **extra) as c:
        got = 0
        while got < int(want):
            for records in (await c.getmany(timeout_ms=200)).values():
                got += len(records)
            await c.commit()
        print("COMMITTED", ",".join(sorted(str(tp.partition) for tp in c.assignment())), flush=True)
        await anyio.sleep(3600)
anyio.run(main)
"""


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_killed_member_s_partitions_move_and_its_commits_survive(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str], protocol: str) -> None:
    """The member alone reads a first batch and commits it, then is SIGKILLed (no LeaveGroup). The survivor
    joined meanwhile; once the broker expires the dead member, the survivor owns every partition and reads the
    second batch, never the first: the dead member's commits are the group's."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group = await make_topic(partitions=2), unique("g")
    first = await produce(bootstrap, topic, 20, 2, tag="first")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_MEMBER, bootstrap, topic, group, protocol,
                             str(len(first))], stdout=subprocess.PIPE, env=env, text=True)
    try:
        with anyio.fail_after(90):
            line = await anyio.to_thread.run_sync(proc.stdout.readline)   # type: ignore[union-attr]
        assert line.split() == ["COMMITTED", "0,1"], line
        tracker = Tracker()
        got: list[ConsumerRecord] = []
        async with tracked(topic, bootstrap, group, protocol, tracker) as survivor:
            # the survivor joins while the other member is alive and owns both partitions
            with anyio.fail_after(30):
                while not tracker.assigned and survivor.assignment() == frozenset():
                    await survivor.getmany(timeout_ms=100)
                    if protocol == "consumer":
                        break   # KIP-848: joining with nothing to take is a complete join
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            second = await produce(bootstrap, topic, 20, 2, tag="second")
            with anyio.fail_after(60):     # the broker's session timeout (6-10 s), then the move
                await consume(survivor, got, lambda: set(keys(got)) >= second)
            assert survivor.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert set(keys(got)) == second, "the survivor read only what the dead member had not committed"
    assert not (set(keys(got)) & first)


@pytest.mark.parametrize(("ours", "java"), [("classic", "classic"), ("consumer", "consumer"),
                                            ("consumer", "classic")])
async def test_mixed_group_with_a_java_member(kafka_cluster: KafkaCluster, make_topic: TopicMaker,
                                              unique: Callable[[str], str], ours: str, java: str) -> None:
    """The Java client (kafka-clients) as the other member; ("consumer", "classic") is a KIP-848 group with a
    classic member in it (the broker's migration path, KIP-848's upgrade story): each side speaks its own
    protocol to the same coordinator."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group = await make_topic(partitions=4), unique("g")
    produced = await produce(bootstrap, topic, 50, 4)
    extra = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500} if java == "classic" else {}
    ourselves: list[ConsumerRecord] = []
    tracker = Tracker()
    async with JavaPeer("consume", bootstrap=bootstrap, topic=topic, group=group, protocol=java,
                        config=extra) as peer:
        await peer.wait_until(lambda p: bool(p.records), 90)
        async with tracked(topic, bootstrap, group, ours, tracker) as a:
            with anyio.fail_after(90):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(consume, a, ourselves,
                                  lambda: len(ourselves) + len(peer.records) >= 600)
                    await wait_until(lambda: bool(a.assignment()), 60, "akresil assigned")
                    assert len(a.assignment()) < 4, "the partitions are shared with the Java member"
                    produced |= await produce(bootstrap, topic, 100, 4, tag="w")
        java_got = [(r["partition"], r["offset"]) for r in peer.records]
    got = keys(ourselves) + java_got
    assert len(got) == len(set(got)), "a record was consumed twice"
    assert set(got) == produced
    assert ourselves and java_got


async def test_cooperative_sticky_members_give_up_only_what_moves(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    """Classic group, cooperative-sticky (KIP-429): when a second member joins, the first keeps two of its
    partitions throughout and revokes only the two that move; a follow-up rebalance hands them over."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group = await make_topic(partitions=4), unique("g")
    trackers = [Tracker(), Tracker()]

    def make(i: int) -> Consumer:
        consumer = Consumer(topic, bootstrap_servers=bootstrap, group_id=group,
                            partition_assignment_strategy=["cooperative-sticky"], listener=trackers[i],
                            **member_config("classic"))
        trackers[i].consumer = consumer
        return consumer

    async with make(0) as a:
        await settle([a], lambda: len(a.assignment()) == 4)
        first = a.assignment()
        async with make(1) as b:
            await settle([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
            assert a.assignment() < first                       # a kept two of its own partitions
            assert trackers[0].revoked == [set(first - a.assignment())]   # only what moved, never everything
            assert b.group_metadata().generation_id >= 2        # the follow-up rebalance handed them to b


async def test_records_produced_by_the_java_client_are_consumed_by_an_akresil_group(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await make_topic(partitions=3)
    async with JavaPeer("produce", bootstrap=bootstrap, topic=topic, count=300, prefix="j") as peer:
        await peer.wait_until(lambda p: bool(p.of("done")), 90)
    acks = {(a["partition"], a["offset"]) for a in peer.of("ack")}
    assert len(acks) == 300
    got: list[ConsumerRecord] = []
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=unique("g"),
                        **member_config("consumer")) as consumer:
        with anyio.fail_after(60):
            await consume(consumer, got, lambda: len(got) >= 300)
    assert {(r.partition, r.offset) for r in got} == acks
    assert sorted(r.value for r in got) == sorted(b"j-%d" % i for i in range(300))
