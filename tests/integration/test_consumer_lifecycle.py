"""A consumer never waits silently (issue 32): with nothing to consume it raises at once, and after ``close()`` every
call raises ``ClientClosedError`` (as the producer's do), while ``async for`` simply ends."""

from __future__ import annotations

import uuid
from typing import Any, Awaitable, Callable

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition, errors
from akresil.testing import EmbeddedBroker

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]


async def _topic(bootstrap: str, records: int = 0) -> str:
    topic = f"lifecycle-{uuid.uuid4().hex[:8]}"
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    if records:
        async with Producer(bootstrap_servers=bootstrap) as producer:
            await producer.send_many(topic, [(None, b"%d" % i) for i in range(records)], partition=0)
    return topic


async def _first(consumer: Consumer[Any, Any]) -> Any:
    async for record in consumer:
        return record
    return None


@pytest.mark.parametrize("group_id", ["g", None])
async def test_nothing_to_consume_raises_at_once_and_names_the_fix(broker: EmbeddedBroker, group_id: str | None) -> None:
    """Java's poll() throws IllegalStateException here; waiting would hang the application with no error."""
    topic = await _topic(broker.bootstrap_servers)
    async with Consumer(bootstrap_servers=broker.bootstrap_servers, group_id=group_id) as consumer:
        with anyio.fail_after(30):    # each call raises instead of waiting out its hour-long timeout
            for call in (lambda: consumer.getmany(timeout_ms=3_600_000), consumer.getone,
                         lambda: _first(consumer)):
                with pytest.raises(errors.IllegalStateError, match=r"no subscription and no assigned partitions.*"
                                                                   r"assign\(\[\.\.\.\]\)"):
                    await call()
        consumer.assign([TopicPartition(topic, 0)])
        assert await consumer.getmany(timeout_ms=0) == {}


CLOSED_CALLS: list[tuple[str, Callable[[Consumer[Any, Any], TopicPartition], Any]]] = [
    ("getmany", lambda c, tp: c.getmany()),
    ("getone", lambda c, tp: c.getone()),
    ("getone-partition", lambda c, tp: c.getone(tp)),
    ("commit", lambda c, tp: c.commit()),
    ("committed", lambda c, tp: c.committed(tp)),
    ("position", lambda c, tp: c.position(tp)),
    ("seek", lambda c, tp: c.seek(tp, 0)),
    ("seek_to_beginning", lambda c, tp: c.seek_to_beginning(tp)),
    ("seek_to_end", lambda c, tp: c.seek_to_end(tp)),
    ("pause", lambda c, tp: c.pause(tp)),
    ("resume", lambda c, tp: c.resume(tp)),
    ("paused", lambda c, tp: c.paused()),
    ("assign", lambda c, tp: c.assign([tp])),
    ("assignment", lambda c, tp: c.assignment()),
    ("subscription", lambda c, tp: c.subscription()),
    ("highwater", lambda c, tp: c.highwater(tp)),
    ("last_stable_offset", lambda c, tp: c.last_stable_offset(tp)),
    ("lag", lambda c, tp: c.lag(tp)),
    ("partitions_for", lambda c, tp: c.partitions_for(tp.topic)),
    ("group_metadata", lambda c, tp: c.group_metadata()),
    ("end_offsets", lambda c, tp: c.end_offsets([tp])),
    ("start", lambda c, tp: c.start()),
]


async def test_every_call_after_close_raises_client_closed_and_async_for_ends(broker: EmbeddedBroker) -> None:
    topic = await _topic(broker.bootstrap_servers, records=3)
    tp = TopicPartition(topic, 0)
    consumer: Consumer[Any, Any] = Consumer(bootstrap_servers=broker.bootstrap_servers, group_id="g",
                                            auto_offset_reset="earliest")
    consumer.assign([tp])
    async with consumer:
        assert (await consumer.getone()).offset == 0
    for name, call in CLOSED_CALLS:
        with pytest.raises(errors.ClientClosedError, match="closed"):
            result = call(consumer, tp)
            if isinstance(result, Awaitable):
                await result
        assert name
    assert await _first(consumer) is None     # the iteration is over, not an error
    await consumer.close()                    # closing again is fine


async def test_close_from_another_task_ends_async_for_and_fails_a_waiting_getone(broker: EmbeddedBroker) -> None:
    """The shutdown idiom: a signal handler (another task) closes the consumer; the service's ``async for`` ends
    cleanly, a ``getone()`` that was waiting raises ``ClientClosedError``."""
    topic = await _topic(broker.bootstrap_servers)
    outcomes: dict[str, Any] = {}
    consumer: Consumer[Any, Any] = Consumer(bootstrap_servers=broker.bootstrap_servers, fetch_max_wait_ms=100)
    consumer.assign([TopicPartition(topic, 0)])

    async def iterate() -> None:
        outcomes["async for"] = await _first(consumer)

    async def wait_one() -> None:
        try:
            await consumer.getone()
        except errors.ClientClosedError as exc:
            outcomes["getone"] = exc

    async with consumer:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(iterate)
                tg.start_soon(wait_one)
                await anyio.wait_all_tasks_blocked()
                await consumer.close()
    assert outcomes["async for"] is None and isinstance(outcomes["getone"], errors.ClientClosedError)
