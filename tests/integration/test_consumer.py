"""Consumer against the embedded Tansu broker, directly and behind the FaultProxy."""

from __future__ import annotations

import itertools
import logging
import time
from typing import Any

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition
from akresil import errors
from akresil.consumer import NoOffsetForPartitionError
from akresil.testing import EmbeddedBroker, FaultProxy

from ..harness.e2e import loop_lag

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]

FETCH, METADATA = 1, 3
_names = itertools.count()


def topic_name(prefix: str) -> str:
    return f"{prefix}-{int(time.time() * 1000) % 10**8}-{next(_names)}"


async def make_topic(bootstrap: str, partitions: int = 1) -> str:
    name = topic_name("consumer")
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    return name


async def produce(bootstrap: str, topic: str, n: int, *, partition: int = 0, start: int = 0, **kw: Any) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=1) as p:
        for i in range(start, start + n):
            await p.enqueue(topic, b"v%d" % i, key=b"k%d" % i, partition=partition, **kw)
        await p.flush()


async def consume(c: Consumer, n: int, timeout_s: float = 10.0) -> list[Any]:
    out: list[Any] = []
    with anyio.fail_after(timeout_s):
        while len(out) < n:
            for records in (await c.getmany(timeout_ms=500)).values():
                out.extend(records)
    return out


@pytest.fixture
def bootstrap(broker: EmbeddedBroker) -> str:
    return broker.bootstrap_servers


@pytest.fixture(scope="module")
def noida() -> Any:
    """noida-db: Kafka-like error paths (OFFSET_OUT_OF_RANGE) and a correct ListOffsets LATEST.

    Tansu answers ListOffsets LATEST with the last batch's base offset + 1, not the high watermark, so the
    'latest' checks run here."""
    with EmbeddedBroker(kind="noida") as running:
        yield running.bootstrap_servers


async def test_manual_assign_round_trip(bootstrap: str) -> None:
    topic = await make_topic(bootstrap, 2)
    async with Producer(bootstrap_servers=bootstrap) as p:
        await p.send(topic, b"value-0", key=b"key-0", partition=0, timestamp_ms=1_700_000_000_000,
                     headers=[("h1", b"a"), ("h2", None)])
        await p.send(topic, None, key=None, partition=1, timestamp_ms=1_700_000_000_001)
        await p.send(topic, b"value-1", partition=0, timestamp_ms=1_700_000_000_002)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        got = sorted(await consume(c, 3), key=lambda r: (r.partition, r.offset))
        assert [(r.partition, r.offset, r.key, r.value, r.timestamp_ms) for r in got] == [
            (0, 0, b"key-0", b"value-0", 1_700_000_000_000), (0, 1, None, b"value-1", 1_700_000_000_002),
            (1, 0, None, None, 1_700_000_000_001)]
        assert list(got[0].headers) == [("h1", b"a"), ("h2", None)]
        assert got[0].timestamp_type == 0 and got[1].headers == ()
        assert await c.position(TopicPartition(topic, 0)) == 2
        assert c.highwater(TopicPartition(topic, 0)) == 2
        assert c.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}


async def test_seek_pause_resume(noida: str) -> None:
    bootstrap = noida
    topic = await make_topic(bootstrap, 2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    await produce(bootstrap, topic, 10, partition=0)
    await produce(bootstrap, topic, 10, partition=1)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp0, tp1])
        c.pause(tp1)
        assert c.paused() == {tp1}
        got = await consume(c, 10)
        assert {r.partition for r in got} == {0}
        assert await c.getmany(timeout_ms=300) == {}          # tp1 stays quiet while paused
        c.resume(tp1)
        assert {r.partition for r in await consume(c, 10)} == {1}
        c.seek(tp0, 7)
        assert [r.offset for r in await consume(c, 3)] == [7, 8, 9]
        await c.seek_to_beginning(tp1)
        assert await c.position(tp1) == 0
        assert [r.offset for r in await consume(c, 10)] == list(range(10))
        await c.seek_to_end(tp0)
        assert await c.position(tp0) == 10


async def test_async_for_positions_count_only_yielded_records(bootstrap: str) -> None:
    topic = await make_topic(bootstrap)
    tp = TopicPartition(topic, 0)
    await produce(bootstrap, topic, 20)
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=50) as c:
        c.assign([tp])
        seen = []
        with anyio.fail_after(10):
            async for rec in c:
                seen.append(rec.offset)
                if len(seen) == 5:
                    break
        assert seen == [0, 1, 2, 3, 4]
        assert await c.position(tp) == 5                  # 15 more were taken, but not yielded
        c.seek(tp, 18)
        rec = await c.getone()
        assert rec.offset == 18 and rec.value == b"v18"


async def test_auto_offset_reset_policies(noida: str, caplog: pytest.LogCaptureFixture) -> None:
    bootstrap = noida
    topic = await make_topic(bootstrap)
    tp = TopicPartition(topic, 0)
    await produce(bootstrap, topic, 5)
    caplog.set_level(logging.INFO, logger="akresil.net.fetcher")
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="latest") as latest, \
            Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as earliest:
        latest.assign([tp])
        earliest.assign([tp])
        assert await latest.position(tp) == 5
        # said at INFO: why "latest" (the default) sees nothing of what the topic held
        assert f"reset 1 partition(s) to the log end: {topic}-0@5" in caplog.text
        assert [r.offset for r in await consume(earliest, 5)] == [0, 1, 2, 3, 4]
        assert await latest.getmany(timeout_ms=200) == {}
        await produce(bootstrap, topic, 1, start=5)
        assert [r.value for r in await consume(latest, 1)] == [b"v5"]
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="none") as strict:
        strict.assign([tp])
        with pytest.raises(NoOffsetForPartitionError, match="auto_offset_reset='none'"):
            await strict.getmany(timeout_ms=2000)
        strict.seek(tp, 3)
        assert [r.offset for r in await consume(strict, 3)] == [3, 4, 5]


async def test_commit_and_restart_resumes_from_committed(bootstrap: str) -> None:
    topic = await make_topic(bootstrap)
    tp = TopicPartition(topic, 0)
    group = topic_name("group")
    await produce(bootstrap, topic, 10)
    async with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False) as c:
        c.assign([tp])
        assert await c.committed(tp) is None
        await consume(c, 10)
        c.seek(tp, 6)
        await c.commit()
        assert await c.committed(tp) == 6
    async with Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert [r.offset for r in await consume(c, 4)] == [6, 7, 8, 9]
        await c.commit({tp: (8, "checkpoint")})
        assert await c.committed(tp) == 8
    # auto-commit on close stored the position the second consumer reached
    async with Consumer(bootstrap_servers=bootstrap, group_id=group) as c:
        c.assign([tp])
        assert await c.committed(tp) == 10
        assert await c.position(tp) == 10


async def test_commit_needs_a_group(bootstrap: str) -> None:
    topic = await make_topic(bootstrap)
    async with Consumer(bootstrap_servers=bootstrap) as c:
        c.assign([TopicPartition(topic, 0)])
        with pytest.raises(errors.IllegalStateError, match="group_id"):
            await c.commit()


async def test_subscription_without_group_reads_every_partition_and_pattern_matches(bootstrap: str) -> None:
    topic = await make_topic(bootstrap, 3)
    for p in range(3):
        await produce(bootstrap, topic, 2, partition=p)
    async with Consumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        got = await consume(c, 6)
        assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in range(3) for o in range(2)]
    async with Consumer(pattern=f"^{topic}$", bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        assert len(await consume(c, 6)) == 6
        assert c.subscription() == {topic}


async def test_out_of_range_position_resets(noida: str) -> None:
    topic = await make_topic(noida)
    tp = TopicPartition(topic, 0)
    await produce(noida, topic, 4)
    async with Consumer(bootstrap_servers=noida, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 1_000)
        assert [r.offset for r in await consume(c, 4)] == [0, 1, 2, 3]
    async with Consumer(bootstrap_servers=noida, auto_offset_reset="none") as c:
        c.assign([tp])
        c.seek(tp, 1_000)
        with pytest.raises(errors.OffsetOutOfRangeError, match="offset 1000 is out of range"):
            await c.getmany(timeout_ms=3000)


async def test_no_poll_waits_out_a_long_poll_while_records_are_unread() -> None:
    """Issue 18: a Fetch carrying only a caught-up partition long-polled (fetch_max_wait_ms) while the other
    partition's records were still held back by the prefetch bound; once the application drained them, their
    next Fetch waited behind the long poll. With max_wait 5 s, a poll that comes back empty after 2.5 s while
    the position is behind the log end is that stall (the fix answers in milliseconds). Its own broker: Tansu
    does not stop while a long poll is open, so it is killed at once instead of slowing the session's teardown."""
    async with EmbeddedBroker(kind="tansu", stop_timeout_s=0.2) as broker:
        await _no_long_poll_while_records_are_unread(broker.bootstrap_servers)


async def _no_long_poll_while_records_are_unread(bootstrap: str) -> None:
    topic = await make_topic(bootstrap, 2)
    n = 10_000
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=4096) as p:   # ~37 per batch
        for _ in range(n):
            await p.enqueue(topic, b"x" * 100, partition=0)                              # partition 1 stays empty
        await p.flush()
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    # each answer (Tansu bounds it by max_bytes) buffers ~17 batches of partition 0: more than
    # max_partition_fetch_bytes, so it is held back while the application reads 50 records at a time and
    # partition 1 is caught up at 0
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=5000,
                        max_partition_fetch_bytes=16_384, fetch_max_bytes=65_536) as c:
        c.assign([tp0, tp1])
        got = 0
        while got < n:
            batches = await c.getmany(timeout_ms=2500, max_records=50)
            assert batches, f"a poll waited 2.5 s with {n - got} records unread (position {await c.position(tp0)})"
            got += sum(len(records) for records in batches.values())
            await anyio.sleep(0)      # the application awaits between polls (its own work): the fetcher runs
        assert got == n and await c.position(tp1) == 0


def test_bad_arguments_are_named() -> None:
    with pytest.raises(errors.ConfigError, match="pattern: .* not a valid regex"):
        Consumer(pattern="(", bootstrap_servers="127.0.0.1:1")
    with pytest.raises(errors.ConfigError, match="topics or a pattern"):
        Consumer("a", pattern="b", bootstrap_servers="127.0.0.1:1")
    with pytest.raises(errors.ConfigError, match="auto_offset_reset"):
        Consumer("a", auto_offset_reset="smallest")
    with pytest.raises(errors.InvalidTopicError):
        Consumer("bad topic!")


# ------------------------------------------------------------------------------------------ FaultProxy
async def test_leader_move_with_hint_refetches_from_new_leader_before_metadata(broker: EmbeddedBroker) -> None:
    topic = await make_topic(broker.bootstrap_servers)
    tp = TopicPartition(topic, 0)
    await produce(broker.bootstrap_servers, topic, 5)
    async with FaultProxy(broker.bootstrap_servers, nodes=3) as proxy, loop_lag() as lag:
        async with Consumer(bootstrap_servers=proxy.bootstrap_servers, auto_offset_reset="earliest",
                            fetch_max_wait_ms=100) as c:
            c.assign([tp])
            assert len(await consume(c, 5)) == 5
            old, _ = proxy.leader(topic, 0)
            new = next(n for n in proxy.node_ids if n != old)
            # metadata answers arrive late: the new leader can only come from the KIP-951 hint
            await proxy.aadd_latency(None, 400, api_key=METADATA)
            moved_at = time.monotonic() * 1000.0
            await proxy.amove_leader(topic, 0, new)
            await produce(broker.bootstrap_servers, topic, 3, start=5)
            assert [r.offset for r in await consume(c, 3)] == [5, 6, 7]
            fetches_new = proxy.requests(FETCH, node=new, since_ms=moved_at)
            assert fetches_new, "no Fetch reached the new leader"
            md_responses = proxy.responses(METADATA, since_ms=moved_at)
            first_md = min((r.time_ms for r in md_responses), default=float("inf"))
            assert fetches_new[0].time_ms < first_md
            hinted = [r for r in proxy.responses(FETCH, node=old, since_ms=moved_at) if r.hints]
            assert hinted and fetches_new[0].time_ms - hinted[0].time_ms < lag.slack_ms(150), lag.max_ms


async def test_throttled_node_gets_no_fetch_inside_the_window(broker: EmbeddedBroker) -> None:
    topic = await make_topic(broker.bootstrap_servers)
    tp = TopicPartition(topic, 0)
    await produce(broker.bootstrap_servers, topic, 3)
    async with FaultProxy(broker.bootstrap_servers, nodes=1) as proxy:
        async with Consumer(bootstrap_servers=proxy.bootstrap_servers, auto_offset_reset="earliest",
                            fetch_max_wait_ms=50) as c:
            c.assign([tp])
            assert len(await consume(c, 3)) == 3
            await proxy.athrottle(1, 600, count=1)
            t0 = time.monotonic()
            await produce(broker.bootstrap_servers, topic, 2, start=3)
            got = await consume(c, 2)
            assert [r.offset for r in got] == [3, 4]
            await anyio.sleep(0.9)        # past the 600 ms window: fetching must have resumed
            throttled = [r for r in proxy.responses(FETCH, node=1) if r.throttle_time_ms > 0]
            assert throttled, "the proxy did not throttle a Fetch"
            assert proxy.requests(FETCH, node=1, in_throttle_window=True) == ()
            later = [r for r in proxy.requests(FETCH, node=1) if r.time_ms > throttled[0].time_ms]
            assert later and later[0].time_ms - throttled[0].time_ms >= 590
            assert time.monotonic() - t0 < 5


# ------------------------------------------------------------------------------------------ groups
async def _poll_until(consumers: list[Consumer], done: Any, timeout_s: float = 20.0) -> list[Any]:
    """Poll every consumer until ``done(seen)`` holds for the records seen so far; returns them."""
    seen: list[Any] = []
    with anyio.fail_after(timeout_s):
        while not done(seen):
            for c in consumers:
                for records in (await c.getmany(timeout_ms=50)).values():
                    seen.extend(records)
    return seen


async def test_group_members_split_partitions_and_commits_survive_restart(noida: str) -> None:
    topic = await make_topic(noida, 4)
    group = topic_name("group")
    for p in range(4):
        await produce(noida, topic, 3, partition=p)
    everything = {TopicPartition(topic, p) for p in range(4)}
    opts: dict[str, Any] = dict(bootstrap_servers=noida, group_id=group, auto_offset_reset="earliest",
                                heartbeat_interval_ms=200, session_timeout_ms=6000)
    revoked: list[set[TopicPartition]] = []

    class Listener:
        async def on_partitions_revoked(self, tps: set[TopicPartition]) -> None:
            revoked.append(tps)

    async with Consumer(topic, listener=Listener(), **opts) as a:
        first = await consume(a, 12)
        assert sorted((r.partition, r.offset) for r in first) == [(p, o) for p in range(4) for o in range(3)]
        assert a.assignment() == everything
        async with Consumer(topic, **opts) as b:
            during = await _poll_until([a, b], lambda _: bool(a.assignment()) and bool(b.assignment())
                                       and a.assignment() | b.assignment() == everything
                                       and not a.assignment() & b.assignment())
            assert revoked, "a's partitions were not revoked for the rebalance"
            target = min(b.assignment())
            await produce(noida, topic, 1, partition=target.partition, start=3)
            during += await _poll_until([a, b], lambda seen: len(seen) >= 1)
            # a committed on revoke, so b starts at offset 3: nothing is delivered twice
            assert [(r.partition, r.offset, r.value) for r in during] == [(target.partition, 3, b"v3")]
        # b left: a takes every partition back, again without redelivery
        again = await _poll_until([a], lambda _: a.assignment() == everything)
        assert again == []
    async with Consumer(topic, **opts) as c:
        after = await _poll_until([c], lambda _: c.assignment() == everything)
        after += [r for rs in (await c.getmany(timeout_ms=500)).values() for r in rs]
        assert after == []
        committed = {tp: await c.committed(tp) for tp in everything}
        assert committed == {tp: 4 if tp == target else 3 for tp in everything}
