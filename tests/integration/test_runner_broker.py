"""The runner with the real Consumer and Producer against the embedded broker (Tansu).

One partition's handler times out for a while; the other partition is handled and committed meanwhile, the
stuck one catches up after, outputs keep per-partition order, and committed offsets survive a restart.
A handler that never recovers makes run() raise TaskTimeoutError on time.
"""

from __future__ import annotations

import time
import uuid

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil.errors import KafkaTimeoutError, TaskTimeoutError
from akresil.runner import HandlerContext, Runner, RunnerRebalanceListener
from akresil.testing import EmbeddedBroker
from akresil.types import ConsumerRecord

from ..harness.e2e import loop_lag

pytestmark = pytest.mark.broker

N = 40


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def setup_topics(bootstrap: str, *topics: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(t, num_partitions=2, replication_factor=1) for t in topics])
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for p in (0, 1):
            await producer.send_many(topics[0], [(b"%d" % i, b"p%d-%03d" % (p, i)) for i in range(N)], partition=p)


def consumer_for(bootstrap: str, topic: str, group: str, **kw: object) -> Consumer:
    return Consumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                    auto_offset_reset="earliest", fetch_max_wait_ms=50, session_timeout_ms=6_000,
                    heartbeat_interval_ms=500, **kw)


async def read_all(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes | None]:
    tp = TopicPartition(topic, partition)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50) as c:
        c.assign([tp])
        got: list[bytes | None] = []
        with anyio.fail_after(10):
            while len(got) < count:
                batch = await c.getmany(timeout_ms=200)
                got.extend(r.value for r in batch.get(tp, []))
        return got


async def test_stuck_partition_catches_up_while_the_other_commits(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    src, out, group = name("runner-in"), name("runner-out"), name("runner-g")
    await setup_topics(bootstrap, src, out)
    stuck: list[float] = []          # partition 0 times out for 1.5 s from its first record on
    finished_at: dict[int, float] = {}

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        if record.partition == 0:
            if not stuck:
                stuck.append(time.monotonic() + 1.5)
            if time.monotonic() < stuck[0]:
                raise KafkaTimeoutError("downstream not answering")
        await ctx.send(out, record.value.upper() if record.value else None, record.key,
                       partition=record.partition)
        if record.offset == N - 1:
            finished_at[record.partition] = time.monotonic()

    listener = RunnerRebalanceListener()
    async with consumer_for(bootstrap, src, group, listener=listener) as consumer, \
            Producer(bootstrap_servers=bootstrap, linger_ms=2) as producer:
        async with Runner(consumer, handler, producer=producer, rebalance_listener=listener,
                          commit_interval_ms=100, task_timeout_ms=30_000) as runner:
            with anyio.fail_after(15):
                while {tp.partition: s.committed_offset for tp, s in runner.partitions().items()} != {0: N, 1: N}:
                    await anyio.sleep(0.05)
            status = runner.partitions()[TopicPartition(src, 0)]
            assert not status.failing and not status.paused and status.timeouts == 0
            assert status.attempts > 3          # it retried while stuck...
        # ...but with backoff: far fewer attempts than a busy loop would make in 1.5 s
        assert status.attempts < 40
        assert finished_at[1] < stuck[0] <= finished_at[0]
        assert consumer.paused() == frozenset()
        assert await consumer.committed(TopicPartition(src, 0)) == N
        assert await consumer.committed(TopicPartition(src, 1)) == N

    for p in (0, 1):
        assert await read_all(bootstrap, out, p, N) == [b"P%d-%03d" % (p, i) for i in range(N)]

    # a restarted runner in the same group starts from the commits: nothing is handled twice
    seen: list[ConsumerRecord] = []

    async def recorder(record: ConsumerRecord, ctx: HandlerContext) -> None:
        seen.append(record)

    async with consumer_for(bootstrap, src, group) as consumer:
        async with Runner(consumer, recorder):
            with anyio.fail_after(10):
                while len(consumer.assignment()) < 2:
                    await anyio.sleep(0.05)
            await anyio.sleep(0.5)
    assert seen == []


async def test_task_timeout_is_raised_on_time_with_real_clients(broker: EmbeddedBroker) -> None:
    bootstrap = broker.bootstrap_servers
    src, group = name("runner-to"), name("runner-to-g")
    await setup_topics(bootstrap, src)
    first_timeout: list[float] = []

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        if record.partition == 0:
            first_timeout.append(time.monotonic())
            raise TimeoutError("external call timed out")

    async with consumer_for(bootstrap, src, group) as consumer, loop_lag() as lag:
        runner = Runner(consumer, handler, task_timeout_ms=800, commit_interval_ms=100)
        with anyio.fail_after(15):
            with pytest.raises(TaskTimeoutError) as info:
                await runner.run()
        failed_at = time.monotonic()
        assert isinstance(info.value.__cause__, TimeoutError)
        elapsed = failed_at - first_timeout[0]
        assert 0.8 <= elapsed < 1.3 + lag.max_ms / 1000, (elapsed, lag.max_ms)
        # 100, 200, 400 ms ... backoff (±20%), the last clamped to the deadline: 4 or 5 attempts when idle (0,
        # 120, 360, then 800 with the jitter high), fewer only if the machine delays them; never a tight loop
        assert 3 <= len(first_timeout) <= 12, first_timeout
        assert await consumer.committed(TopicPartition(src, 1)) == N
        assert await consumer.committed(TopicPartition(src, 0)) is None
