"""``receive_message_max_bytes``: the cap on one response frame, from the config through Cluster to the decoder.

A Fetch answer bigger than the cap cannot be received; the same Fetch would get the same answer, so instead of
retrying silently the consumer raises, from the poll that reaches the partitions, an error that names the
setting to raise. The Fetch itself asks for no more than the cap can carry (as librdkafka keeps
fetch.max.bytes below receive.message.max.bytes), so only a first batch bigger than the cap (which a broker
sends anyway, KIP-74) gets there.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil.config import resolve
from akresil.core.fetch_state import FetchPartition, FetchRequest, FetchState
from akresil.net.fetcher import Fetcher
from akresil.net.framing import FrameTooLargeError
from akresil.testing import EmbeddedBroker

from ..harness.e2e import unique_topic

BIG = 5_000
LIMIT = 2_000


async def _topic_with_a_big_record(broker: EmbeddedBroker) -> str:
    topic = unique_topic("maxframe")
    async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    async with Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=0) as producer:
        await producer.send(topic, b"x" * BIG, partition=0)
    return topic


@pytest.mark.broker
async def test_a_fetch_answer_above_the_cap_raises_an_error_naming_the_setting(broker: EmbeddedBroker) -> None:
    topic = await _topic_with_a_big_record(broker)
    tp = TopicPartition(topic, 0)
    consumer = Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest",
                        receive_message_max_bytes=LIMIT, retry_backoff_ms=20, retry_backoff_max_ms=50)
    consumer.assign([tp])
    with anyio.fail_after(30):
        async with consumer:       # bootstrap and ListOffsets answers are small: the cap lets them through
            with pytest.raises(FrameTooLargeError) as info:
                while True:
                    await consumer.getmany(timeout_ms=500)
            message = str(info.value)
            assert f"larger than receive_message_max_bytes={LIMIT}" in message
            assert f"for {topic}-0" in message and "raise receive_message_max_bytes" in message
            assert info.value.limit == LIMIT and info.value.size > BIG
            with pytest.raises(FrameTooLargeError):            # not retried into oblivion: raised again
                await consumer.getmany(timeout_ms=0)
            with pytest.raises(FrameTooLargeError):            # the partition's error, until a seek
                await consumer.position(tp)
            consumer.seek(tp, 1)                               # past the big record: clears the error
            assert await consumer.getmany(timeout_ms=100) == {}


@pytest.mark.broker
async def test_the_same_record_is_consumed_with_room_in_the_cap(broker: EmbeddedBroker) -> None:
    topic = await _topic_with_a_big_record(broker)
    consumer = Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest",
                        receive_message_max_bytes=4 * BIG)
    consumer.assign([TopicPartition(topic, 0)])
    with anyio.fail_after(30):
        async with consumer:
            got: list[bytes] = []
            while not got:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records]
    assert got == [b"x" * BIG]


@pytest.mark.broker
async def test_the_cap_bounds_responses_not_requests(broker: EmbeddedBroker) -> None:
    """The cap bounds responses, not what a client sends: a record four times the cap is produced."""
    topic = unique_topic("maxframe")
    async with Admin(bootstrap_servers=broker.bootstrap_servers, receive_message_max_bytes=1_000_000) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    async with Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=0,
                        receive_message_max_bytes=64 * 1024) as producer:
        md = await producer.send(topic, b"y" * (128 * 1024), partition=0)
    assert md.offset == 0


# --------------------------------------------------------------------------------- the Fetch's max_bytes
class _Cluster:
    def on_metadata_change(self, callback: Any) -> None:
        pass


@pytest.mark.parametrize(("fetch_max_bytes", "cap", "expected"), [
    (52_428_800, 104_857_600, 52_428_800),     # defaults: fetch_max_bytes fits
    (52_428_800, 10_000, 10_000 - 512),        # the cap wins, minus room for the response's own fields
    (1_000, 10_000, 1_000),
])
def test_fetch_asks_for_no_more_than_one_frame_carries(fetch_max_bytes: int, cap: int, expected: int) -> None:
    config = resolve("consumer", {"fetch_max_bytes": fetch_max_bytes, "receive_message_max_bytes": cap})
    state = FetchState(fetch_max_bytes=fetch_max_bytes)
    fetcher = Fetcher(_Cluster(), state, config)  # type: ignore[arg-type]
    request = FetchRequest(1, (FetchPartition(TopicPartition("t", 0), 0, 0, 0),), 12, {})
    assert fetcher._body(request, 12)["max_bytes"] == expected
