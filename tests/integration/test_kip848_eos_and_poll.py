"""KIP-848 groups (``group_protocol="consumer"``) where they meet the rest of the client, on librdkafka's mock:
the exactly-once runner (its TxnOffsetCommit carries the member epoch and member id) and
``max_poll_interval_ms`` (a member that stops polling leaves the group with epoch -1, its partitions go to
the others, and it joins again at its next poll)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from akresil import Consumer, Producer, TopicPartition
from akresil.net.group_heartbeat import ConsumerGroupMember
from akresil.protocol.api import ApiKey
from akresil.runner import HandlerContext, Runner
from akresil.testing.rdkafka_mock import MockCluster
from akresil.types import ConsumerRecord

from ..harness.e2e import unique_topic

pytestmark = pytest.mark.broker
FAST: dict[str, Any] = dict(fetch_max_wait_ms=100, request_timeout_ms=10_000, retry_backoff_ms=50,
                            auto_offset_reset="earliest", group_protocol="consumer")


@pytest.fixture
def mock() -> Any:
    with MockCluster(3) as cluster:
        cluster.consumer_group_set_heartbeat_interval(200)
        yield cluster


async def read_all(bootstrap: str, topic: str, partitions: int, expect: int) -> list[bytes]:
    out: list[bytes] = []
    # the mock's transaction markers fail their CRC check (docs/brokers.md)
    async with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed", fetch_max_wait_ms=50,
                        auto_offset_reset="earliest", check_crcs=False) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        with anyio.move_on_after(20):
            while len(out) < expect:
                for recs in (await c.getmany(timeout_ms=200)).values():
                    out.extend(r.value for r in recs if r.value is not None)
        with anyio.move_on_after(1):            # a duplicate would show up now
            while True:
                for recs in (await c.getmany(timeout_ms=200)).values():
                    out.extend(r.value for r in recs if r.value is not None)
    return out


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_exactly_once_runner_over_a_kip848_group(mock: MockCluster, backend: str) -> None:
    src, dst, group = unique_topic("eos848-in"), unique_topic("eos848-out"), unique_topic("g")
    mock.create_topic(src, 2)
    mock.create_topic(dst, 2)
    n = 300

    async def scenario() -> None:
        async with Producer(bootstrap_servers=mock.bootstrap_servers, linger_ms=0) as p:
            for part in (0, 1):
                await p.send_many(src, [(None, b"%d-%04d" % (part, i)) for i in range(n)], partition=part)

        async def copy(rec: ConsumerRecord, ctx: HandlerContext) -> None:
            await ctx.send(dst, rec.value, partition=rec.partition)

        async with Consumer(src, bootstrap_servers=mock.bootstrap_servers, group_id=group,
                            enable_auto_commit=False, isolation_level="read_committed", **FAST) as consumer, \
                Producer(bootstrap_servers=mock.bootstrap_servers, transactional_id=unique_topic("tx"),
                         linger_ms=2) as producer:
            await producer.init_transactions()
            mock.start_request_tracking()
            runner = Runner(consumer, copy, producer=producer, processing_guarantee="exactly_once",
                            commit_interval_ms=100)
            async with runner:
                with anyio.fail_after(30):
                    while len(runner.partitions()) < 2 or any(
                            s.committed_offset != n for s in runner.partitions().values()):
                        await anyio.sleep(0.05)
            requests = mock.stop_request_tracking()
            metadata = consumer.group_metadata()
            assert consumer._group is not None
            member = consumer._group.member
            assert isinstance(member, ConsumerGroupMember)
            assert metadata.generation_id == member.core.member_epoch > 0 and metadata.member_id == member.member_id
        # the mock answers TxnOffsetCommit without storing the offsets, so they are not read back here
        assert any(r.api_key == ApiKey.TXN_OFFSET_COMMIT for r in requests)
        out = await read_all(mock.bootstrap_servers, dst, 2, 2 * n)
        assert sorted(out) == sorted(b"%d-%04d" % (part, i) for part in (0, 1) for i in range(n))

    anyio.run(scenario, backend=backend)


class Listener:
    def __init__(self) -> None:
        self.lost: list[set[TopicPartition]] = []
        self.assigned: list[set[TopicPartition]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned.append(assigned)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.lost.append(lost)


def test_a_kip848_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll(mock: MockCluster) -> None:
    topic, group = unique_topic("poll848"), unique_topic("g")
    mock.create_topic(topic, 4)
    everything = {TopicPartition(topic, p) for p in range(4)}

    async def scenario() -> None:
        slow_listener = Listener()
        async with Consumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group,
                            max_poll_interval_ms=1_500, listener=slow_listener, **FAST) as slow, \
                Consumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=group, **FAST) as busy:
            with anyio.fail_after(30):
                while not (slow.assignment() and busy.assignment()):
                    await slow.getmany(timeout_ms=20)
                    await busy.getmany(timeout_ms=20)
                held = slow.assignment()
                # ``slow`` stops polling: after max_poll_interval_ms it leaves and ``busy`` gets everything
                while busy.assignment() != everything:
                    await busy.getmany(timeout_ms=50)
                assert slow_listener.lost == [held]       # lost, not revoked: nothing committed for them
                assert slow.assignment() == frozenset()
                # the next poll joins again and the partitions are shared again
                while not (slow.assignment() and busy.assignment()):
                    await slow.getmany(timeout_ms=20)
                    await busy.getmany(timeout_ms=20)
                assert slow_listener.assigned[-1] == set(slow.assignment())

    anyio.run(scenario)
