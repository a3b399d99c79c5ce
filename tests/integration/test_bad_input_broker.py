"""Bad calls on a *running* producer fail at the call site, naming the problem, and lose nothing buffered.

A producer with a long linger holds good records in its buffer; every kind of bad call is made in between
(illegal topic, non-bytes key/value without serializer, bad headers, oversized records, bad send_many items,
bad partitions); afterwards ``flush()`` delivers exactly the good records, in order, and the partition read
back with raw Fetch holds nothing from the failed calls.
"""

from __future__ import annotations

import uuid
from typing import Any, Awaitable, Callable

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil import errors
from akresil.testing import EmbeddedBroker

from ..harness.raw_fetch import read_partition, records_of

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]

BadCall = Callable[[Producer, str], Awaitable[Any]]

#: (label, call, exception class, words the message must contain)
BAD_CALLS: list[tuple[str, BadCall, type[Exception], str]] = [
    ("send-illegal-topic", lambda p, t: p.send("no spaces", b"v"), errors.InvalidTopicError, "illegal characters ' '"),
    ("enqueue-dot-topic", lambda p, t: p.enqueue("..", b"v"), errors.InvalidTopicError, "cannot be '..'"),
    ("enqueue-long-topic", lambda p, t: p.enqueue("x" * 250, b"v"), errors.InvalidTopicError, "maximum is 249"),
    ("enqueue-empty-topic", lambda p, t: p.enqueue("", b"v"), errors.InvalidTopicError, "non-empty"),
    ("send_many-illegal-topic", lambda p, t: p.send_many("a/b", [(None, b"v")]), errors.InvalidTopicError,
     "illegal characters '/'"),
    ("str-value", lambda p, t: p.enqueue(t, "text"), TypeError, "value must be bytes or None (got str)"),
    ("int-key", lambda p, t: p.enqueue(t, b"v", key=7), TypeError, "key must be bytes or None (got int)"),
    ("dict-value", lambda p, t: p.send(t, {"a": 1}), TypeError, "value_serializer"),
    ("str-header-value", lambda p, t: p.enqueue(t, b"v", headers=[("h", "s")]), TypeError,
     "headers must be (str, bytes | None) pairs"),
    ("bytes-header-key", lambda p, t: p.enqueue(t, b"v", headers=[(b"h", b"v")]), TypeError, "headers must be"),
    ("header-triple", lambda p, t: p.enqueue(t, b"v", headers=[("h", b"v", 1)]), TypeError, "headers must be"),
    ("oversized", lambda p, t: p.enqueue(t, b"x" * 20_000), errors.RecordTooLargeError,
     "exceeds max_request_size (10000)"),
    ("oversized-headers", lambda p, t: p.send(t, b"v", headers=[("h", b"x" * 20_000)]), errors.RecordTooLargeError,
     "max_request_size"),
    ("send_many-bad-item", lambda p, t: p.send_many(t, [(None, b"never-1"), (None, "bad")]), TypeError,
     "record 1"),
    ("send_many-not-a-pair", lambda p, t: p.send_many(t, [(None, b"never-2"), b"v"]), TypeError,
     "must be a (key, value) pair"),
    ("send_many-oversized", lambda p, t: p.send_many(t, [(None, b"never-3"), (None, b"x" * 20_000)]),
     errors.RecordTooLargeError, "max_request_size"),
    ("partition-out-of-range", lambda p, t: p.enqueue(t, b"v", partition=5), ValueError, "partition 5"),
    ("partition-negative", lambda p, t: p.enqueue(t, b"v", partition=-1), ValueError, "partition -1"),
    ("partition-str", lambda p, t: p.enqueue(t, b"v", partition="0"), TypeError, "partition must be an int"),
    ("partition-bool", lambda p, t: p.send(t, b"v", partition=True), TypeError, "partition must be an int"),
    ("timestamp-str", lambda p, t: p.enqueue(t, b"v", timestamp_ms="now"), TypeError,
     "timestamp_ms must be an int"),
    ("timestamp-float", lambda p, t: p.send(t, b"v", timestamp_ms=1.5e12), TypeError, "timestamp_ms must be an int"),
    ("timestamp-negative", lambda p, t: p.enqueue(t, b"v", timestamp_ms=-5), ValueError,
     "timestamp_ms must be >= 0"),
    ("send_many-partition-str", lambda p, t: p.send_many(t, [(None, b"never-4")], partition="0"), TypeError,
     "partition must be an int"),
    ("send_many-timestamp-negative", lambda p, t: p.send_many(t, [(None, b"never-5")], timestamp_ms=-1),
     ValueError, "timestamp_ms must be >= 0"),
    ("send_many-empty-timestamp-str", lambda p, t: p.send_many(t, [], timestamp_ms="now"), TypeError,
     "timestamp_ms"),
    # checked before waiting for the metadata of a topic the producer does not know yet
    ("unknown-topic-partition-str", lambda p, t: p.send(t + "-unknown", b"v", partition="1"), TypeError,
     "partition must be an int"),
    ("unknown-topic-timestamp-negative", lambda p, t: p.enqueue(t + "-unknown", b"v", timestamp_ms=-1), ValueError,
     "timestamp_ms must be >= 0"),
    # a topic created after the producer's last Metadata: the answer this call asks for settles it (the call
    # waited max_block_ms, then blamed the topic)
    ("uncached-topic-partition-out-of-range", lambda p, t: _send_to_a_topic_created_now(p, t, partition=5),
     ValueError, "partition 5 given for topic"),
]


async def _create(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])


async def _send_to_a_topic_created_now(producer: Producer, topic: str, **kwargs: Any) -> Any:
    name = f"{topic}-new-{uuid.uuid4().hex[:6]}"
    await _create(",".join(producer.config.bootstrap_servers), name)
    return await producer.send(name, b"v", **kwargs)


async def test_bad_calls_raise_at_the_call_site_and_buffered_records_survive(broker: EmbeddedBroker) -> None:
    topic = f"bad-input-{uuid.uuid4().hex[:8]}"
    await _create(broker.bootstrap_servers, topic)
    good: list[bytes] = []
    futures = []
    async with Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=60_000,
                        max_request_size=10_000) as producer:
        with anyio.fail_after(60):
            for label, call, error, words in BAD_CALLS:
                value = f"good-before-{label}".encode()
                futures.append(await producer.enqueue(topic, value, partition=0))
                good.append(value)
                with pytest.raises(error) as info:
                    await call(producer, topic)
                assert words in str(info.value), f"{label}: {info.value}"
            assert not any(f.done() for f in futures)  # all still buffered (linger): the bad calls flushed nothing
            await producer.flush()
            mds = [await f for f in futures]
    assert [md.offset for md in mds] == list(range(len(good)))
    stored = records_of(await read_partition(broker.bootstrap_servers, topic, 0, until_offset=len(good)))
    assert [r.value for r in stored] == good  # nothing from a failed call (not even send_many's good head)


async def test_consumer_bad_calls_on_a_running_consumer_keep_its_assignment(broker: EmbeddedBroker) -> None:
    topic = f"bad-input-c-{uuid.uuid4().hex[:8]}"
    await _create(broker.bootstrap_servers, topic)
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        await producer.send_many(topic, [(None, b"a"), (None, b"b")], partition=0)
    async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        with pytest.raises(errors.InvalidTopicError, match="illegal characters"):
            consumer.assign([tp, TopicPartition("bad topic", 0)])
        with pytest.raises(TypeError, match="got a single"):
            consumer.assign(tp)
        with pytest.raises(ValueError, match="offset must be an int >= 0"):
            consumer.seek(tp, -5)
        with pytest.raises(ValueError, match="max_records"):
            await consumer.getmany(max_records=0)
        assert consumer.assignment() == {tp}
        got: list[bytes | None] = []
        with anyio.fail_after(30):
            while len(got) < 2:
                got.extend(r.value for r in (await consumer.getmany(timeout_ms=1_000)).get(tp, []))
        assert got == [b"a", b"b"]


# --------------------------------------------------------------------------- partition and timestamp_ms
@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"partition": "0"}, TypeError, "partition"),
    ({"timestamp_ms": "now"}, TypeError, "timestamp_ms"),
    ({"timestamp_ms": -5}, ValueError, "timestamp_ms"),
])
async def test_partition_and_timestamp_are_checked(broker: EmbeddedBroker, kwargs: dict[str, Any],
                                                   error: type[Exception], words: str) -> None:
    topic = f"bad-input-g-{uuid.uuid4().hex[:8]}"
    await _create(broker.bootstrap_servers, topic)
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        with pytest.raises(error, match=words):
            await producer.send(topic, b"v", **kwargs)


async def test_bad_partition_and_timestamp_leave_a_transaction_usable(broker: EmbeddedBroker) -> None:
    """Inside a transaction the same calls raise at the call site and spoil nothing: the transaction commits
    with the good records."""
    topic = f"bad-input-tx-{uuid.uuid4().hex[:8]}"
    await _create(broker.bootstrap_servers, topic)
    async with Producer(bootstrap_servers=broker.bootstrap_servers,
                        transactional_id=f"bad-input-{uuid.uuid4().hex[:8]}") as producer:
        await producer.init_transactions()
        async with producer.transaction():
            await producer.send(topic, b"good-1", partition=0, timestamp_ms=1_700_000_000_000)
            for call, error in ((producer.send(topic, b"v", partition="0"), TypeError),
                                (producer.enqueue(topic, b"v", timestamp_ms=-5), ValueError),
                                (producer.send_many(topic, [(None, b"v")], timestamp_ms="now"), TypeError),
                                (producer.send_many(topic, [(None, b"v")], partition=-1), ValueError)):
                with pytest.raises(error, match="partition|timestamp_ms"):
                    await call
            assert producer.transaction_state == "in transaction"
            md = await producer.send(topic, b"good-2", partition=0)
        assert producer.transaction_state == "ready"
    assert md.offset == 1
    stored = records_of(await read_partition(broker.bootstrap_servers, topic, 0, until_offset=2))
    assert [r.value for r in stored if r.value is not None][:2] == [b"good-1", b"good-2"]


async def test_a_record_the_deserializer_refuses_is_named_and_skipped_by_a_seek(broker: EmbeddedBroker) -> None:
    topic = f"bad-input-d-{uuid.uuid4().hex[:8]}"
    await _create(broker.bootstrap_servers, topic)
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        await producer.send_many(topic, [(None, b"one"), (None, b"\xff\xfe"), (None, b"three")], partition=0)
    tp = TopicPartition(topic, 0)
    got: list[str] = []
    async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest",
                        value_deserializer=lambda v: v.decode("utf-8")) as consumer:
        consumer.assign([tp])
        with anyio.fail_after(30):
            while not got:
                got.extend(r.value for r in (await consumer.getmany(timeout_ms=1_000)).get(tp, []))
            assert got == ["one"]
            for _ in range(2):          # every poll says so until the application seeks
                with pytest.raises(errors.RecordDeserializationError) as info:
                    await consumer.getmany(timeout_ms=1_000)
                assert (info.value.topic_partition, info.value.offset, info.value.origin) == (tp, 1, "value")
                assert isinstance(info.value.__cause__, UnicodeDecodeError)
            consumer.seek(tp, info.value.next_offset)
            while len(got) < 2:
                got.extend(r.value for r in (await consumer.getmany(timeout_ms=1_000)).get(tp, []))
    assert got == ["one", "three"]
