"""Consumer groups on Apache Kafka, classic and KIP-848 (``group_protocol="consumer"``): rebalances when members
join and leave, a killed member's partitions moving to the survivor with its commits kept, and mixed groups where
the other member is confluent-kafka or the Java client (kafka-clients, ``akresil.testing.java_peer.JavaPeer``).

"Consumed once" in a mixed group holds because every member commits what it handed out before giving a
partition up (after each batch and on revoke); the checks are on (partition, offset) pairs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import anyio
import pytest

from akresil import Consumer, Producer, TopicPartition, errors
from akresil.testing import KafkaCluster
from akresil.testing.java_peer import JavaPeer
from akresil.types import ConsumerRecord

from .conftest import TopicMaker

ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = ["classic", "consumer"]
#: classic members heartbeat often and time out at the broker's minimum (6 s); KIP-848 sessions are the
#: broker's (10 s in the harness)
FAST = dict(fetch_max_wait_ms=100, retry_backoff_ms=50, auto_offset_reset="earliest", enable_auto_commit=False,
            request_timeout_ms=15_000)


def member_config(protocol: str) -> dict[str, Any]:
    if protocol == "classic":
        return {**FAST, "group_protocol": "classic", "session_timeout_ms": 6_000, "heartbeat_interval_ms": 500}
    return {**FAST, "group_protocol": "consumer"}


async def produce(bootstrap: str, topic: str, per_partition: int, partitions: int, tag: str = "v"
                  ) -> set[tuple[int, int]]:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=2) as producer:
        mds = []
        for p in range(partitions):
            mds += await producer.send_many(topic, [(None, b"%s-%d-%d" % (tag.encode(), p, i))
                                                    for i in range(per_partition)], partition=p)
    return {(md.partition, md.offset) for md in mds}


class Tracker:
    """Commits on revoke (manual commits) and records what the member was given, gave up and lost."""

    def __init__(self) -> None:
        self.consumer: Consumer | None = None
        self.assigned: list[set[TopicPartition]] = []
        self.revoked: list[set[TopicPartition]] = []
        self.lost: list[set[TopicPartition]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.revoked.append(revoked)
        assert self.consumer is not None
        try:
            await self.consumer.commit()
        except errors.ClientClosedError:     # on close, the revoke comes after the consumer stopped serving calls
            pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned.append(assigned)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.lost.append(lost)


def tracked(topic: str, bootstrap: str, group: str, protocol: str, tracker: Tracker) -> Consumer:
    consumer = Consumer(topic, bootstrap_servers=bootstrap, group_id=group, listener=tracker,
                        **member_config(protocol))
    tracker.consumer = consumer
    return consumer


async def consume(consumer: Consumer, sink: list[ConsumerRecord], stop: Callable[[], bool]) -> None:
    """A few records a turn, committing after each batch."""
    while not stop():
        batch = await consumer.getmany(timeout_ms=100, max_records=20)
        for records in batch.values():
            sink.extend(records)
        if batch:
            await consumer.commit()


def keys(records: list[ConsumerRecord]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


async def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    with anyio.move_on_after(timeout_s):
        while not condition():
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"not within {timeout_s} s: {what}")


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


def ck_member(bootstrap: str, group: str, topic: str, protocol: str, got: list[tuple[int, int]],
              stop: threading.Event) -> None:
    import confluent_kafka

    config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
              "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 3}
    if protocol == "classic":
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer = confluent_kafka.Consumer(config)
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            m = consumer.poll(0.1)
            if m is not None and m.error() is None:
                got.append((m.partition(), m.offset()))
                consumer.commit(message=m, asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_mixed_group_with_a_confluent_kafka_member(kafka_cluster: KafkaCluster, make_topic: TopicMaker,
                                                         unique: Callable[[str], str], protocol: str) -> None:
    """confluent-kafka's member starts alone on a first half; akresil's joins and takes part of the partitions,
    the second half is produced: every record is consumed once, by one of the two."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic, group = await make_topic(partitions=4), unique("g")
    produced = await produce(bootstrap, topic, 50, 4)
    ck_got: list[tuple[int, int]] = []
    stop = threading.Event()
    thread = threading.Thread(target=ck_member, args=(bootstrap, group, topic, protocol, ck_got, stop))
    thread.start()
    ours: list[ConsumerRecord] = []
    tracker = Tracker()
    try:
        await wait_until(lambda: bool(ck_got), 60, "confluent-kafka consumed")
        async with tracked(topic, bootstrap, group, protocol, tracker) as a:
            with anyio.fail_after(90):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(consume, a, ours, lambda: len(ours) + len(ck_got) >= 600)
                    await wait_until(lambda: bool(a.assignment()), 60, "akresil assigned")
                    assert len(a.assignment()) < 4, "the partitions are shared with the confluent-kafka member"
                    produced |= await produce(bootstrap, topic, 100, 4, tag="w")
    finally:
        stop.set()
        await anyio.to_thread.run_sync(thread.join)
    got = keys(ours) + ck_got
    assert len(got) == len(set(got)), "a record was consumed twice"
    assert set(got) == produced
    assert ours and ck_got


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


async def settle(consumers: list[Consumer], until: Callable[[], bool], timeout_s: float = 60) -> None:
    with anyio.fail_after(timeout_s):
        while not until():
            for c in consumers:
                await c.getmany(timeout_ms=20)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_static_member_that_comes_back_gets_its_partitions_without_a_rebalance(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str], protocol: str) -> None:
    """Static membership (``group_instance_id``, KIP-345; KIP-848's epoch -2 leave): both members close without
    giving their partitions up; the instance that comes back within the session timeout gets the same
    partitions, and (classic) the group's generation does not move."""
    topic, group = await make_topic(partitions=4), unique("g")
    cfg = dict(bootstrap_servers=kafka_cluster.bootstrap_servers, group_id=group, **member_config(protocol))
    async with Consumer(topic, group_instance_id="i-a", **cfg) as a, \
            Consumer(topic, group_instance_id="i-b", **cfg) as b:
        await settle([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
        before_a, generation = a.assignment(), a.group_metadata().generation_id
    async with Consumer(topic, group_instance_id="i-a", **cfg) as again:
        await settle([again], lambda: bool(again.assignment()))
        deadline = anyio.current_time() + 1.5
        await settle([again], lambda: anyio.current_time() > deadline)
        assert again.assignment() == before_a
        if protocol == "classic":
            assert again.group_metadata().generation_id == generation


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
