"""Consumer groups on every broker and group protocol that has them here: a mixed group with confluent-kafka's
consumer as the other member (every record consumed once, by one of the two), and static members (KIP-345; KIP-848's
epoch -2 leave) that come back to their own partitions.

Broker-only group tests stay with their broker: tests/apache/test_groups.py (rebalances on join and leave, a killed
member, the Java client in the group, cooperative-sticky), tests/integration/test_consumer_group_protocol.py (the
mock's KIP-848 assignor and session expiry).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import anyio
import pytest

from akresil import Consumer, errors
from akresil.testing import BrokerControl
from akresil.types import ConsumerRecord

from ..harness.groups import Tracker, ck_member, consume, keys, member_config, produce, settle, tracked, wait_until
from .conftest import on_group_brokers


def mock_group_settings(control: BrokerControl) -> None:
    """librdkafka's mock gives KIP-848 members its own heartbeat interval (5 s); a short one makes assignment
    changes reach members as quickly as on the tier's Kafka (1 s)."""
    from akresil.testing.rdkafka_mock import MockControl
    if isinstance(control, MockControl):
        control.mock.consumer_group_set_heartbeat_interval(200)


#: the mock's classic groups: its SyncGroup barrier answers a follower's late SyncGroup with INVALID_REQUEST after
#: the leader's (docs/brokers.md), so a group of several members does not settle (seen: never within 90 s)
MOCK_CLASSIC = ("mock", "classic")


# noida-db left out: it answered confluent-kafka's commit right after akresil's member joined with
# ILLEGAL_GENERATION (seen on every run), which ends the peer's thread: a failure of the peer on that imitation
@on_group_brokers("classic", "consumer", exclude=[MOCK_CLASSIC, ("noida", "classic")])
async def test_mixed_group_with_a_confluent_kafka_member(control: BrokerControl, unique: Callable[[str], str],
                                                         protocol: str) -> None:
    """confluent-kafka's member starts alone on a first batch; akresil's joins and takes part of the partitions
    (revoked from the other member first), and a second batch is produced: every record is consumed once, by one
    of the two."""
    mock_group_settings(control)
    bootstrap = control.bootstrap_servers
    topic, group = await control.create_topic(unique("mixed"), partitions=4), unique("g")
    produced = await produce(bootstrap, topic, 100, 4)
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
                    # slowly (10 records a turn, a commit after each): positions move in small steps, so a
                    # partition that changes hands mid-way would show a record consumed twice
                    tg.start_soon(lambda: consume(a, ours, lambda: len(ours) + len(ck_got) >= 4 * (100 + 300),
                                                  max_records=10))
                    await wait_until(lambda: bool(a.assignment()), 60, "akresil assigned")
                    assert len(a.assignment()) < 4, "the partitions are shared with the confluent-kafka member"
                    produced |= await produce(bootstrap, topic, 300, 4, tag="w")
    finally:
        stop.set()
        await anyio.to_thread.run_sync(thread.join)
    got = keys(ours) + ck_got
    assert len(got) == len(set(got)), "a record was consumed twice"
    assert set(got) == produced
    assert ours and ck_got


# Tansu 0.6 left out: the returning instance was given all four partitions, the other static member (closed without
# leaving, within its session timeout) no longer in the group, where Kafka keeps it (docs/brokers.md)
@on_group_brokers("classic", "consumer", exclude=[MOCK_CLASSIC, ("tansu", "classic")])
async def test_a_static_member_that_comes_back_gets_its_partitions_without_a_rebalance(
        control: BrokerControl, unique: Callable[[str], str], protocol: str) -> None:
    """Static membership (``group_instance_id``, KIP-345; KIP-848's epoch -2 leave): both members close without
    giving their partitions up; the instance that comes back within the session timeout gets the same
    partitions, and (classic) the group's generation does not move."""
    mock_group_settings(control)
    topic, group = await control.create_topic(unique("static"), partitions=4), unique("g")
    cfg: dict[str, Any] = dict(bootstrap_servers=control.bootstrap_servers, group_id=group, **member_config(protocol))
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


@on_group_brokers("classic", "consumer", exclude=[MOCK_CLASSIC])
async def test_a_commit_after_the_poll_interval_passed_fails_and_the_next_poll_rejoins(
        control: BrokerControl, unique: Callable[[str], str], protocol: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """A member that stops polling for longer than ``max_poll_interval_ms`` leaves the group, saying why (the
    classic protocol only said it lost its partitions); its ``commit()`` before the next poll raises
    ``CommitFailedError`` naming the lost partitions (it committed nothing and returned, so the records'
    redelivery came as a surprise); the next poll joins again and they come back."""
    mock_group_settings(control)
    caplog.set_level(logging.WARNING, logger="akresil.net.group_session")
    bootstrap = control.bootstrap_servers
    topic, group = await control.create_topic(unique("slow"), partitions=2), unique("g")
    await produce(bootstrap, topic, 5, 2)
    config = {**member_config(protocol), "max_poll_interval_ms": 1_500, "enable_auto_commit": False}
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=group, **config) as consumer:
        first: list[ConsumerRecord] = []
        with anyio.fail_after(60):
            while not first:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    first += records
            await wait_until(lambda: not consumer.assignment(), 30, "the member left after the poll interval")
        assert "no poll within max_poll_interval_ms=1500; leaving the group" in caplog.text
        with pytest.raises(errors.CommitFailedError, match="were lost since the last poll"):
            await consumer.commit()
        handed = {(r.partition, r.offset) for r in first}
        again: set[tuple[int, int]] = set()
        with anyio.fail_after(60):
            while not handed <= again:        # delivered again: nothing of them was committed
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    again |= {(r.partition, r.offset) for r in records}
        await consumer.commit()
