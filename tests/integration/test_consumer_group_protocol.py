"""KIP-848 (``group_protocol="consumer"``) on librdkafka's mock cluster only: its assignor's incremental moves,
session expiry, a broker without the protocol.  A mixed group with confluent-kafka and static members run on the mock
and on Apache Kafka in tests/capabilities/test_groups.py.

The mock computes assignments itself (an even split over the members' subscriptions) and answers
ConsumerGroupHeartbeat v1; its heartbeat interval is set short so assignment changes reach members fast.
"""

from __future__ import annotations

from typing import Any, Callable

import anyio
import pytest

from akresil import Consumer, TopicPartition, errors
from akresil.testing.rdkafka_mock import MockCluster
from akresil.types import ConsumerRecord

from ..harness.e2e import unique_topic
from ..harness.groups import Tracker, produce

pytestmark = pytest.mark.broker
FAST = dict(fetch_max_wait_ms=100, request_timeout_ms=10_000, retry_backoff_ms=50, auto_offset_reset="earliest",
            group_protocol="consumer")


@pytest.fixture
def mock() -> Any:
    with MockCluster(3) as cluster:
        cluster.consumer_group_set_heartbeat_interval(200)
        yield cluster


async def consume(consumer: Consumer, sink: list[ConsumerRecord], stop: Callable[[], bool]) -> None:
    """Slowly (10 records a turn), committing after each batch: positions move in small steps."""
    while not stop():
        batch = await consumer.getmany(timeout_ms=50, max_records=10)
        for records in batch.values():
            sink.extend(records)
        if batch:
            await consumer.commit()
        await anyio.sleep(0.01)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_third_member_takes_partitions_incrementally_and_nothing_is_consumed_twice(mock: MockCluster,
                                                                                      backend: str) -> None:
    topic, group = unique_topic("kip848"), unique_topic("g")
    mock.create_topic(topic, 6)

    async def scenario() -> None:
        produced = await produce(mock.bootstrap_servers, topic, 150, 6)
        sinks: list[list[ConsumerRecord]] = [[], [], []]
        trackers = [Tracker(), Tracker(), Tracker()]

        def total() -> int:
            return sum(map(len, sinks))

        def make(i: int) -> Consumer:
            c = Consumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group, enable_auto_commit=False,
                         listener=trackers[i], **FAST)
            trackers[i].consumer = c
            return c

        async with make(0) as a, make(1) as b:
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(consume, a, sinks[0], lambda: total() >= len(produced))
                    tg.start_soon(consume, b, sinks[1], lambda: total() >= len(produced))
                    while not (len(a.assignment()) == 3 and len(b.assignment()) == 3):
                        await anyio.sleep(0.02)
                    before_a, before_b = a.assignment(), b.assignment()
                    seen_revokes = [len(trackers[0].revoked), len(trackers[1].revoked)]
                    assert before_a | before_b == {TopicPartition(topic, p) for p in range(6)}
                    assert total() < len(produced) // 2, "the third member must join while there is work left"
                    async with make(2) as c, anyio.create_task_group() as tg_c:
                        tg_c.start_soon(consume, c, sinks[2], lambda: total() >= len(produced))
                        while not (len(c.assignment()) == 2 and len(a.assignment()) == 2
                                   and len(b.assignment()) == 2):
                            await anyio.sleep(0.02)
                        # incremental: each old member gave up part of its partitions and kept consuming the
                        # rest (no stop-the-world revocation of everything). The mock's assignor is not sticky,
                        # so which partitions move is its choice, not ours.
                        for tracker, before, n in ((trackers[0], before_a, seen_revokes[0]),
                                                   (trackers[1], before_b, seen_revokes[1])):
                            moved = tracker.revoked[n:]
                            assert moved and all(r < before for r in moved), (before, tracker.revoked)
                        while total() < len(produced):
                            await anyio.sleep(0.05)
        keys = [(r.partition, r.offset) for sink in sinks for r in sink]
        assert len(keys) == len(set(keys)), "a record was consumed twice"
        assert set(keys) == produced
        assert all(sinks), "every member consumed"
        assert not any(t.lost for t in trackers)

    anyio.run(scenario, backend=backend)


def test_an_expired_member_loses_its_partitions_and_rejoins(mock: MockCluster) -> None:
    """The coordinator expires a member whose heartbeats stop arriving (here: its answers are delayed past
    the session timeout); the member hears UNKNOWN_MEMBER_ID, loses its partitions without committing and
    joins again. (An *injected* FENCED_MEMBER_EPOCH does not work on the mock: it still knows the member,
    so the rejoin at epoch 0 gets no assignment; see docs/brokers.md.)"""
    topic, group = unique_topic("kip848-fenced"), unique_topic("g")
    mock.create_topic(topic, 2)
    mock.consumer_group_set_session_timeout(1000)

    async def scenario() -> None:
        produced = await produce(mock.bootstrap_servers, topic, 20, 2)
        tracker = Tracker()
        got: list[ConsumerRecord] = []
        async with Consumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group,
                            enable_auto_commit=False, listener=tracker, **FAST) as c:
            tracker.consumer = c
            with anyio.fail_after(30):
                while len(c.assignment()) < 2:
                    await c.getmany(timeout_ms=50)
                assert c._group is not None
                coordinator = c._group.coordinator.node
                await anyio.to_thread.run_sync(mock.broker_set_rtt, coordinator, 2500)
                while not tracker.lost:
                    await c.getmany(timeout_ms=50)
                await anyio.to_thread.run_sync(mock.broker_set_rtt, coordinator, 0)
                assert tracker.lost == [{TopicPartition(topic, 0), TopicPartition(topic, 1)}]
                # nothing was committed: after the rejoin every record is consumed from the start again
                await consume(c, got, lambda: {(r.partition, r.offset) for r in got} >= produced)
            assert len(c.assignment()) == 2
            assert tracker.assigned[-1] == {TopicPartition(topic, 0), TopicPartition(topic, 1)}

    anyio.run(scenario)


def test_a_broker_without_the_consumer_protocol_fails_clearly(mock: MockCluster) -> None:
    topic = unique_topic("kip848-none")
    mock.create_topic(topic, 1)
    mock.set_api_version(68, -1, -1)

    async def scenario() -> None:
        async with Consumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id="g", **FAST) as c:
            with anyio.fail_after(10):
                while True:
                    await c.getmany(timeout_ms=100)

    with pytest.raises(BaseException) as caught:
        anyio.run(scenario)
    leaves = list(_leaves(caught.value))
    assert any(isinstance(e, errors.UnsupportedVersionError) and "group_protocol='consumer'" in str(e)
               for e in leaves), leaves


def _leaves(exc: BaseException) -> Any:
    if isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            yield from _leaves(e)
    else:
        yield exc


def test_consumer_protocol_config_errors_name_the_key() -> None:
    with pytest.raises(errors.ConfigError, match="group_protocol"):
        Consumer("t", bootstrap_servers="127.0.0.1:1", group_id="g", group_protocol="streams")
    with pytest.raises(errors.ConfigError, match="partition_assignment_strategy"):
        Consumer("t", bootstrap_servers="127.0.0.1:1", group_id="g", group_protocol="consumer",
                 partition_assignment_strategy="range")
    with pytest.raises(errors.ConfigError, match="group_remote_assignor"):
        Consumer("t", bootstrap_servers="127.0.0.1:1", group_id="g", group_remote_assignor="uniform")
    Consumer("t", bootstrap_servers="127.0.0.1:1", group_id="g", group_protocol="consumer",
             group_remote_assignor="uniform")

