"""A topic the client has not asked about yet is looked up at once, not after a retry backoff (issue 18).

The first record to a topic the broker auto-creates waited ~100 ms: the refresh for the new topic was held
by the backoff that follows every Metadata answer, though the answer before it had not failed. Asserted
structurally through the hooks (when each refresh was due against when it was asked for, how many Metadata
requests went out, no failure or retry), not by wall time.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Iterator

import pytest

from akresil import Consumer, Producer, TopicPartition
from akresil.core import events
from akresil.net.clock import monotonic_ms
from akresil.testing import EmbeddedBroker

from ..harness.e2e import METADATA, fast_producer, gaps, harness, now_ms, unique_topic

pytestmark = pytest.mark.broker

_names = itertools.count()


def new_topic(prefix: str) -> str:
    return f"{prefix}-{int(time.time() * 1000) % 10**8}-{next(_names)}"


class Recorder:
    """Every event with the monotonic time (ms) it was emitted at, the clock the clients' cores run on."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, dict[str, Any]]] = []

    def on_event(self, name: str, fields: dict[str, Any]) -> None:
        self.events.append((monotonic_ms(), name, fields))

    def since(self, mark: int, name: str) -> list[tuple[float, dict[str, Any]]]:
        return [(at, f) for at, n, f in self.events[mark:] if n == name]

    def metadata_requests_since(self, mark: int) -> int:
        return sum(1 for _, n, f in self.events[mark:] if n == events.RESPONSE_RECEIVED and f["api_key"] == 3)


@pytest.fixture(params=["tansu", "noida"])
def auto_creating_broker(request: pytest.FixtureRequest, broker: EmbeddedBroker) -> Iterator[str]:
    """Both brokers create a topic on a Metadata request that allows it, with its leaders in the same answer
    (Apache Kafka's first answer says LEADER_NOT_AVAILABLE while the controller creates it)."""
    if request.param == "tansu":
        if broker.kind != "tansu":
            pytest.skip(f"the session broker is {broker.kind} (AKRESIL_TEST_BROKER)")
        yield broker.bootstrap_servers
    else:
        with EmbeddedBroker(kind="noida") as noida:
            yield noida.bootstrap_servers


async def test_first_record_to_a_new_topic_goes_without_a_metadata_backoff(auto_creating_broker: str) -> None:
    hook = Recorder()
    async with Producer(bootstrap_servers=auto_creating_broker, hooks=[hook], linger_ms=0) as p:
        await p.send(new_topic("warm"), b"warm-up")      # connections and producer id ready; a Metadata
        mark = len(hook.events)                          # answer just arrived: its backoff window is open
        md = await p.send(new_topic("first"), b"v")
        assert md.offset == 0
        asked = [(at, f) for at, f in hook.since(mark, events.METADATA_REFRESH_REQUESTED) if f["cause"] == "new-topic"]
        assert len(asked) == 1
        at, fields = asked[0]
        assert fields["due_at"] <= at, f"the new topic's refresh was held {fields['due_at'] - at:.1f} ms"
        # one Metadata round trip: the first answer had the partitions and leaders; nothing failed or retried
        assert hook.metadata_requests_since(mark) == 1
        assert not hook.since(mark, events.METADATA_REFRESH_FAILED)
        assert not hook.since(mark, events.BATCH_RETRY)
        assert [f["not_ready"] for _, f in hook.since(mark, events.METADATA_REFRESH)] == [[]]


async def test_a_consumer_assigned_right_after_start_looks_its_topic_up_at_once(broker: EmbeddedBroker) -> None:
    topic = new_topic("assigned")
    async with Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=0) as p:
        await p.send(topic, b"v", partition=0)
    hook = Recorder()
    async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest",
                        hooks=[hook]) as c:
        mark = len(hook.events)                          # the bootstrap answer's backoff window is open
        c.assign([TopicPartition(topic, 0)])
        got = await c.getmany(timeout_ms=5000)
        assert [r.value for records in got.values() for r in records] == [b"v"]
        asked = [(at, f) for at, f in hook.since(mark, events.METADATA_REFRESH_REQUESTED)
                 if f["cause"] == "subscription"]
        assert asked and asked[0][1]["due_at"] <= asked[0][0]
        assert not hook.since(mark, events.METADATA_REFRESH_FAILED)


async def test_leaderless_answers_are_re_asked_at_once_not_after_the_retry_backoff() -> None:
    """librdkafka's mock answers the first two Metadata requests for the topic with a leaderless partition
    (a topic still electing). Those answers are not failures: the client re-asks at once, then after ~1 ms,
    where before it waited retry_backoff_ms (1 s here) after each. Bound: half the backoff, plus the event
    loop's measured lateness: far from both behaviours."""
    async with harness("mock", None) as h:
        topic, warm = unique_topic("leaderless"), unique_topic("warm")
        await h.create_topic(topic, 1)
        await h.create_topic(warm, 1)
        hook = Recorder()
        async with fast_producer(h.bootstrap_servers, retry_backoff_ms=1000, retry_backoff_max_ms=1000,
                                 hooks=[hook]) as p:
            await p.send(warm, b"warm-up")
            for _ in range(2):
                await h._call(h.mock.push_leader_response, topic, 0, -1, -1)
            mark, start = len(hook.events), now_ms()
            md = await p.send(topic, b"v")
            assert (md.partition, md.offset) == (0, 0)
            asked = [r.time_ms for r in h.requests(METADATA, since_ms=start)]
            bound = 500 + h.lag.max_ms
            assert all(gap < bound for gap in gaps(asked)), (gaps(asked), bound)
            assert len(asked) == 3, asked
            not_ready = [f.get("not_ready") for _, f in hook.since(mark, events.METADATA_REFRESH)]
            assert not_ready == [[topic], [topic], []], not_ready
            assert not hook.since(mark, events.METADATA_REFRESH_FAILED)
