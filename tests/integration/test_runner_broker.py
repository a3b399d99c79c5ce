"""The runner with the real Consumer and Producer against the embedded broker (Tansu): a handler that never
recovers makes run() raise TaskTimeoutError on time.  (A stuck partition catching up while the other commits runs on
every broker with groups: tests/capabilities/test_runner.py.)
"""

from __future__ import annotations

import time
import uuid

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil.errors import TaskTimeoutError
from akresil.runner import HandlerContext, Runner
from akresil.testing import EmbeddedBroker
from akresil.types import ConsumerRecord

from ..harness.e2e import loop_lag

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]

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


async def test_a_record_the_deserializer_refuses_goes_to_the_dead_letter_topic_as_fetched(
        broker: EmbeddedBroker) -> None:
    """The real consumer raises ``RecordDeserializationError`` for it; the runner (``on_error="dead_letter"``)
    sends its bytes to the dead-letter topic, seeks past it, and the partition goes on and commits to its end."""
    bootstrap = broker.bootstrap_servers
    src, dlt, group = name("runner-poison"), name("runner-poison-dlt"), name("runner-poison-g")
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in (src, dlt)])
    async with Producer(bootstrap_servers=bootstrap) as producer:
        await producer.send_many(src, [(b"k0", b"0"), (b"k1", b"1"), (b"k2", b"\xff"), (b"k3", b"3")], partition=0)
    handled: list[int] = []

    async def handler(record: ConsumerRecord[bytes, int], ctx: HandlerContext) -> None:
        handled.append(record.value or 0)

    tp = TopicPartition(src, 0)
    async with consumer_for(bootstrap, src, group, value_deserializer=lambda v: int(v.decode())) as consumer, \
            Producer(bootstrap_servers=bootstrap) as producer:
        runner = Runner(consumer, handler, producer=producer, on_error="dead_letter", dead_letter_topic=dlt,
                        commit_interval_ms=0)
        async with runner:
            with anyio.fail_after(30):
                while await consumer.committed(tp) != 4:
                    await anyio.sleep(0.05)
    assert handled == [0, 1, 3]
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as reader:
        reader.assign([TopicPartition(dlt, 0)])
        with anyio.fail_after(30):
            got: list[ConsumerRecord] = []
            while not got:
                got.extend((await reader.getmany(timeout_ms=500)).get(TopicPartition(dlt, 0), []))
    [dead] = got
    assert (dead.key, dead.value) == (b"k2", b"\xff")
    assert (b"akresil.errors.RecordDeserializationError" in dict(dead.headers).values())
