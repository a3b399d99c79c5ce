"""The runner (at least once) with the real clients, on every broker and group protocol it runs on here (Apache
Kafka: classic and KIP-848; Tansu: classic): one partition's handler times out for a while; the other is handled
and committed meanwhile, the stuck one catches up after with backoff, outputs keep per-partition order, and a
restarted runner in the same group starts from the commits.  (Exactly once: test_transactions.py; a task timeout
with real clients: tests/integration/test_runner_broker.py.)"""

from __future__ import annotations

import time
from typing import Callable

import anyio

from akresil import Consumer, Producer, TopicPartition
from akresil.errors import KafkaTimeoutError
from akresil.runner import HandlerContext, Runner, RunnerRebalanceListener
from akresil.testing import BrokerControl
from akresil.types import ConsumerRecord

from .conftest import on_group_brokers

N = 40


def consumer_for(bootstrap: str, topic: str, group: str, protocol: str, **kw: object) -> Consumer:
    extra: dict[str, object] = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 500} \
        if protocol == "classic" else {}
    return Consumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                    auto_offset_reset="earliest", fetch_max_wait_ms=50,
                    group_protocol=protocol, **extra, **kw)  # type: ignore[arg-type]


async def read_all(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes | None]:
    tp = TopicPartition(topic, partition)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50) as c:
        c.assign([tp])
        got: list[bytes | None] = []
        with anyio.fail_after(30):
            while len(got) < count:
                batch = await c.getmany(timeout_ms=200)
                got.extend(r.value for r in batch.get(tp, []))
        return got


@on_group_brokers("classic", "consumer", only=("apache", "mock", "tansu"))
async def test_a_stuck_partition_catches_up_while_the_other_commits(
        control: BrokerControl, unique: Callable[[str], str], protocol: str) -> None:
    bootstrap = control.bootstrap_servers
    src = await control.create_topic(unique("runner-in"), partitions=2)
    out = await control.create_topic(unique("runner-out"), partitions=2)
    group = unique("runner-g")
    async with Producer(bootstrap_servers=bootstrap, linger_ms=2) as producer:
        for p in (0, 1):
            await producer.send_many(src, [(b"%d" % i, b"p%d-%03d" % (p, i)) for i in range(N)], partition=p)
    stuck: list[float] = []          # partition 0 times out for 1.5 s from its first record on
    finished_at: dict[int, float] = {}

    async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
        if record.partition == 0:
            if not stuck:
                stuck.append(time.monotonic() + 1.5)
            if time.monotonic() < stuck[0]:
                raise KafkaTimeoutError("downstream not answering")
        await ctx.send(out, record.value.upper() if record.value else None, record.key, partition=record.partition)
        if record.offset == N - 1:
            finished_at[record.partition] = time.monotonic()

    listener = RunnerRebalanceListener()
    async with consumer_for(bootstrap, src, group, protocol, listener=listener) as consumer, \
            Producer(bootstrap_servers=bootstrap, linger_ms=2) as producer:
        async with Runner(consumer, handler, producer=producer, rebalance_listener=listener,
                          commit_interval_ms=100, task_timeout_ms=30_000) as runner:
            with anyio.fail_after(60):
                while {tp.partition: s.committed_offset for tp, s in runner.partitions().items()} != {0: N, 1: N}:
                    await anyio.sleep(0.05)
            status = runner.partitions()[TopicPartition(src, 0)]
            assert not status.failing and not status.paused and status.timeouts == 0
            assert status.attempts > 3          # it retried while stuck...
        assert status.attempts < 40             # ...with backoff, not in a busy loop
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

    async with consumer_for(bootstrap, src, group, protocol) as consumer:
        async with Runner(consumer, recorder):
            with anyio.fail_after(60):
                while len(consumer.assignment()) < 2:
                    await anyio.sleep(0.05)
            await anyio.sleep(1.0)
    assert seen == []
