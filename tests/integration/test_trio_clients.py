"""The core producer / consumer scenarios under both anyio backends, asyncio and trio, against Tansu.

Each test is a plain function that runs one scenario with ``anyio.run(..., backend=...)``, so the clients get
no help from pytest-asyncio: whatever is asyncio-only in them fails the trio run.  Every scenario ends by
checking that closing the clients left no task of theirs running.  FaultProxy runs on its own thread (it is an
asyncio program), so it fronts the trio runs too.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil.runner import HandlerContext, Runner, RunnerRebalanceListener
from akresil.testing import EmbeddedBroker, FaultProxy
from akresil.types import ConsumerRecord

from ..harness.e2e import unique_topic

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too, pytest.mark.parametrize("backend", ["asyncio", "trio"])]

FAST = dict(fetch_max_wait_ms=50, request_timeout_ms=10_000)


def run(backend: str, scenario: Callable[[], Awaitable[None]]) -> None:
    """Run ``scenario`` on ``backend`` and check that it left none of its tasks behind."""
    async def main() -> None:
        before = {task.id for task in anyio.get_running_tasks()}
        await scenario()
        leftover = [task for task in anyio.get_running_tasks() if task.id not in before]
        assert leftover == [], f"tasks still running after close: {[t.name for t in leftover]}"

    anyio.run(main, backend=backend)


async def create(bootstrap: str, topic: str, partitions: int = 2) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])


async def read(consumer: Consumer, count: int, *, timeout_s: float = 15) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    with anyio.fail_after(timeout_s):
        while len(got) < count:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                got.extend(records)
    return got


def test_idempotent_send_enqueue_send_many_round_trip(broker: EmbeddedBroker, backend: str) -> None:
    async def scenario() -> None:
        topic = unique_topic(f"trio-rt-{backend}")
        await create(broker.bootstrap_servers, topic)
        async with Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=2,
                            enable_idempotence=True) as producer:
            first = await producer.send(topic, b"send", key=b"k", partition=0, headers=[("h", b"1")])
            futures = [await producer.enqueue(topic, b"enq-%d" % i, partition=1) for i in range(50)]
            many = await producer.send_many(topic, [(b"k%d" % i, b"many-%d" % i) for i in range(200)],
                                            partition=0)
            enqueued = [await f for f in futures]
            await producer.flush()
        assert first.offset == 0 and [md.offset for md in many] == list(range(1, 201))
        assert [md.offset for md in enqueued] == list(range(50))
        async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest",
                            **FAST) as consumer:
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            records = await read(consumer, 251)
        by_partition = {p: [r for r in records if r.partition == p] for p in (0, 1)}
        assert [r.value for r in by_partition[0]] == [b"send"] + [b"many-%d" % i for i in range(200)]
        assert [r.value for r in by_partition[1]] == [b"enq-%d" % i for i in range(50)]
        assert by_partition[0][0].key == b"k" and list(by_partition[0][0].headers) == [("h", b"1")]

    run(backend, scenario)


def test_consumer_assign_seek_getmany_and_async_for(broker: EmbeddedBroker, backend: str) -> None:
    async def scenario() -> None:
        topic = unique_topic(f"trio-seek-{backend}")
        tp = TopicPartition(topic, 0)
        await create(broker.bootstrap_servers, topic, partitions=1)
        async with Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=1) as producer:
            await producer.send_many(topic, [(None, b"%03d" % i) for i in range(30)], partition=0)
        async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest",
                            **FAST) as consumer:
            consumer.assign([tp])
            assert [r.offset for r in await read(consumer, 30)] == list(range(30))
            assert await consumer.position(tp) == 30
            consumer.seek(tp, 25)
            seen: list[int] = []
            with anyio.fail_after(10):
                async for record in consumer:
                    seen.append(record.offset)
                    if record.offset == 29:
                        break
            assert seen == [25, 26, 27, 28, 29]
            await consumer.seek_to_beginning(tp)
            assert (await read(consumer, 1))[0].offset == 0

    run(backend, scenario)


def test_consumer_group_subscribe_and_commit(broker: EmbeddedBroker, backend: str) -> None:
    async def scenario() -> None:
        topic, group = unique_topic(f"trio-grp-{backend}"), unique_topic("g")
        await create(broker.bootstrap_servers, topic)
        async with Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=1) as producer:
            for p in (0, 1):
                await producer.send_many(topic, [(None, b"%d-%d" % (p, i)) for i in range(20)], partition=p)
        config: dict[str, Any] = dict(bootstrap_servers=broker.bootstrap_servers, group_id=group,
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      session_timeout_ms=6_000, heartbeat_interval_ms=500, **FAST)
        async with Consumer(topic, **config) as consumer:
            assert len(await read(consumer, 40, timeout_s=20)) == 40
            await consumer.commit()
            for p in (0, 1):
                assert await consumer.committed(TopicPartition(topic, p)) == 20
        async with Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=1) as producer:
            await producer.send(topic, b"after", partition=1)
        async with Consumer(**config) as consumer:   # same group, assigned: starts at the commits
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            records = await read(consumer, 1, timeout_s=20)
            assert [(r.partition, r.offset, r.value) for r in records] == [(1, 20, b"after")]

    run(backend, scenario)


def test_runner_consume_handle_produce(broker: EmbeddedBroker, backend: str) -> None:
    async def scenario() -> None:
        src, out, group = unique_topic(f"trio-run-in-{backend}"), unique_topic("trio-run-out"), unique_topic("g")
        await create(broker.bootstrap_servers, src)
        await create(broker.bootstrap_servers, out)
        async with Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=1) as producer:
            for p in (0, 1):
                await producer.send_many(src, [(None, b"r%d-%02d" % (p, i)) for i in range(15)], partition=p)

        async def handler(record: ConsumerRecord, ctx: HandlerContext) -> None:
            await ctx.send(out, (record.value or b"").upper(), partition=record.partition)

        listener = RunnerRebalanceListener()
        async with Consumer(src, bootstrap_servers=broker.bootstrap_servers, group_id=group,
                            auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6_000,
                            heartbeat_interval_ms=500, listener=listener, **FAST) as consumer, \
                Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=1) as producer:
            async with Runner(consumer, handler, producer=producer, rebalance_listener=listener,
                              commit_interval_ms=50) as runner:
                with anyio.fail_after(20):
                    while {tp.partition: s.committed_offset for tp, s in runner.partitions().items()} != {0: 15, 1: 15}:
                        await anyio.sleep(0.05)
        async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest",
                            **FAST) as consumer:
            consumer.assign([TopicPartition(out, 0), TopicPartition(out, 1)])
            values = sorted(r.value for r in await read(consumer, 30))
        assert values == sorted(b"R%d-%02d" % (p, i) for p in (0, 1) for i in range(15))

    run(backend, scenario)


def test_producer_through_leader_move_and_throttle(broker: EmbeddedBroker, backend: str) -> None:
    with FaultProxy(broker.bootstrap_servers, nodes=3) as proxy:
        async def scenario() -> None:
            topic = unique_topic(f"trio-proxy-{backend}")
            await create(proxy.bootstrap_servers, topic, partitions=1)
            async with Producer(bootstrap_servers=proxy.bootstrap_servers, linger_ms=1,
                                retry_backoff_ms=20) as producer:
                assert (await producer.send(topic, b"before", partition=0)).offset == 0
                old_leader, _ = proxy.leader(topic, 0)
                new_leader = next(n for n in proxy.node_ids if n != old_leader)
                proxy.move_leader(topic, 0, new_leader)
                assert (await producer.send(topic, b"moved", partition=0)).offset == 1
                proxy.throttle(new_leader, 300)
                throttled = await producer.send(topic, b"throttled", partition=0)
                after = await producer.send(topic, b"after", partition=0)
            assert (throttled.offset, after.offset) == (2, 3)
            produce = proxy.requests(0, node=new_leader)
            assert produce and not any(r.in_throttle_window for r in produce)   # KIP-219: it waited the mute out
            # exactly one response carried the throttle: the node's next answer of any API (a Produce, or the
            # client's Metadata or KIP-714 telemetry request if one went first), and nothing the client sent
            # reached the node inside its window
            assert [r.throttle_time_ms for r in proxy.responses(node=new_leader)].count(300) == 1
            assert not any(r.in_throttle_window for r in proxy.requests(node=new_leader))

        run(backend, scenario)
