"""KIP-951 leader moves on every broker that moves leaders and hints where they went: Apache Kafka (reassignment +
preferred leader election, replication factor 3), librdkafka's mock (``set_leader``) and the fault proxy.

A Produce for a partition the broker no longer leads is answered NOT_LEADER_OR_FOLLOWER with the new leader in
``CurrentLeader`` (plus its address in ``NodeEndpoints``).  The producer runs with ``retry_backoff_ms`` = 2000, so a
retry that waited for a backoff or for Metadata would cost seconds: it must go to the new leader straight from the
refusal.  Where the broker can delay Metadata and logs requests (the mock, the proxy), the wire shows it too: the
retry left before any Metadata answer could have arrived.  Stale Metadata after the hint must not roll the leader
back (brokers that can serve stale Metadata).  Each test runs under asyncio and trio.

The consumer's side across real moves runs on Apache Kafka in tests/apache/test_kip951_leader_moves.py.
"""

from __future__ import annotations

from typing import Any, Callable

import anyio
import pytest

from akresil import Producer, TopicPartition
from akresil.core import events
from akresil.errors import NotLeaderOrFollowerError
from akresil.testing import BrokerControl, Capability
from akresil.testing.control import next_node

from ..apache.resilience import TimedHook
from ..harness.e2e import METADATA, PRODUCE, ProxyHarness, fast_producer, loop_lag, now_ms
from .conftest import WIRE, kind_of, on_brokers

pytestmark = pytest.mark.parametrize("backend", ["asyncio", "trio"])

BACKOFF_MS = 2000
BACKOFF_FLOOR_MS = BACKOFF_MS * 0.8      # KIP-580 jitter: nothing backed off comes sooner
NOT_LEADER = NotLeaderOrFollowerError.errno
SLOW_PATH: dict[str, Any] = dict(retry_backoff_ms=BACKOFF_MS, retry_backoff_max_ms=BACKOFF_MS)
#: every Metadata answer delayed this long where the broker can, so none can tell the producer of a move first
METADATA_DELAY_MS = 1200
#: how soon the hinted retry leaves on the wire (plus the event loop's measured lateness)
HINTED_RETRY_WITHIN_MS = 150
#: the whole send, refusal and hinted retry included, where Metadata is delayed: under any backoff's floor
WIRE_ELAPSED_MS = 800


async def topic_for_moves(control: BrokerControl, name: str) -> str:
    """One partition; on Apache Kafka replicated on all three brokers, since Kafka elects only in-sync replicas
    (the mock and the proxy move leadership anywhere)."""
    return await control.create_topic(name, partitions=1, replication_factor=3 if kind_of(control) == "apache" else 1)


def produce_answers(hook: TimedHook, mark: int, topic: str) -> list[tuple[float, int, dict[str, Any], Any]]:
    """(time, node, partition answer, node_endpoints) of each Produce answer for ``topic`` after ``mark``."""
    out = []
    for t, f in hook.since(mark, events.RESPONSE_RECEIVED, api_key=PRODUCE):
        for tr in f["response"]["responses"]:
            if tr["name"] == topic:
                out += [(t, f["node_id"], p, f["response"].get("node_endpoints")) for p in tr["partition_responses"]]
    return out


def check_hinted_retry(hook: TimedHook, mark: int, topic: str, *, old: int, new: int, epoch: int) -> None:
    sent = hook.since(mark, events.BATCH_SENT, topic=topic)
    assert [(f["node_id"], f["attempt"]) for _, f in sent] == [(old, 0), (new, 1)], sent   # attempts before
    answers = produce_answers(hook, mark, topic)
    assert [(node, p["error_code"]) for _, node, p, _ in answers] == [(old, NOT_LEADER), (new, 0)], answers
    refused_at, _, refusal, endpoints = answers[0]
    # what Apache Kafka sends: the new leader and its epoch, and the new leader's address
    assert refusal["current_leader"] == {"leader_id": new, "leader_epoch": epoch}, refusal
    assert new in {e["node_id"] for e in endpoints or ()}, endpoints
    # the hint advanced the client's metadata (no Metadata answer had told it yet) and the retry skipped the
    # backoff: it went to the new leader straight from the refusal
    hints = hook.since(mark, events.LEADER_HINT, topic=topic)
    assert [(f["accepted"], f["reason"], f["leader_id"], f["leader_epoch"]) for _, f in hints] == \
        [(True, "advanced", new, epoch)], hints
    retries = hook.since(mark, events.BATCH_RETRY, topic=topic)
    assert len(retries) == 1 and retries[0][1]["skip_backoff"] and retries[0][1]["backoff_ms"] <= 0, retries
    assert refused_at <= hints[0][0] <= retries[0][0] <= sent[1][0]


def check_wire(h: Any, topic: str, start: float, elapsed: float, lag_slack_ms: float, *, old: int, new: int) -> None:
    """On a broker that logs requests and delayed every Metadata answer: the retry left within
    ``HINTED_RETRY_WITHIN_MS`` of the refusal, before any Metadata answer could have arrived."""
    attempts = h.produce_requests(topic, 0, since_ms=start)
    assert [a.node for a in attempts] == [old, new], attempts
    retry_gap = attempts[1].time_ms - attempts[0].time_ms
    assert retry_gap < min(lag_slack_ms, BACKOFF_FLOOR_MS), attempts
    assert elapsed < WIRE_ELAPSED_MS, elapsed
    md_requests = h.requests(METADATA, since_ms=start)
    if md_requests:     # each Metadata answer took METADATA_DELAY_MS
        assert attempts[1].time_ms < md_requests[0].time_ms + METADATA_DELAY_MS
    if isinstance(h, ProxyHarness):
        refused = h.proxy.responses(PRODUCE, node=old, since_ms=start, error_code=NOT_LEADER)
        assert refused and refused[0].hints and refused[0].hints[0].leader_id == new
        assert all(r.time_ms > attempts[1].time_ms for r in h.proxy.responses(METADATA, since_ms=start))


@on_brokers(Capability.MOVE_LEADER, Capability.LEADER_HINTS)
def test_produce_retry_goes_to_the_hinted_leader_at_once(control: BrokerControl, unique: Callable[[str], str],
                                                         backend: str) -> None:
    wire = isinstance(control, WIRE)

    async def scenario() -> None:
        topic = await topic_for_moves(control, unique("kip951-p"))
        hook = TimedHook()
        async with loop_lag() as lag, \
                Producer(bootstrap_servers=control.bootstrap_servers, linger_ms=0, client_id=unique("kip951-p"),
                         hooks=[hook], **SLOW_PATH) as producer:
            await producer.send(topic, b"warm-up", partition=0)
            leader, _ = await control.leader(topic, 0)
            if isinstance(control, WIRE):
                await control.delay_metadata(METADATA_DELAY_MS)
            for move in range(2):
                target = next_node(control.node_ids, leader)
                epoch = await control.move_leader(topic, 0, target)
                mark, start = hook.mark(), now_ms()
                md = await producer.send(topic, b"moved-%d" % move, partition=0)
                elapsed = now_ms() - start
                assert md.offset == move + 1
                check_hinted_retry(hook, mark, topic, old=leader, new=target, epoch=epoch)
                if wire and move == 0:     # (the mock delays a fixed number of Metadata answers)
                    check_wire(control, topic, start, elapsed, lag.slack_ms(HINTED_RETRY_WITHIN_MS),
                               old=leader, new=target)
                leader = target
                # the refusal also asked for Metadata (after a retry backoff): let it land before the next
                # move, or it could tell the producer about that move before any Produce does
                with anyio.fail_after(BACKOFF_MS * 1.2 / 1000 + METADATA_DELAY_MS / 1000 + 10):
                    while not hook.since(mark, events.METADATA_REFRESH):
                        await anyio.sleep(0.05)

    anyio.run(scenario, backend=backend)


@on_brokers(Capability.MOVE_LEADER, Capability.LEADER_HINTS, Capability.STALE_METADATA)
def test_stale_metadata_after_hint_does_not_roll_leader_back(control: BrokerControl, unique: Callable[[str], str],
                                                             backend: str) -> None:
    hook = TimedHook()

    async def scenario() -> None:
        topic = await topic_for_moves(control, unique("kip951-stale"))
        async with fast_producer(control.bootstrap_servers, hooks=[hook]) as producer:
            await producer.send(topic, b"warm-up", partition=0)
            # the epoch the client knows now is what stale metadata will keep reporting
            old_leader, old_epoch = producer._cluster.metadata.snapshot.leader_of(TopicPartition(topic, 0))
            assert (old_leader, old_epoch) == await control.leader(topic, 0)
            new_leader = next_node(control.node_ids, old_leader)
            await control.move_leader(topic, 0, new_leader, stale_metadata_for_s=5.0)  # type: ignore[call-arg]

            start = now_ms()
            await producer.send(topic, b"moved", partition=0)
            # the NOT_LEADER answer asked for a metadata refresh: wait until a stale answer was ignored
            with anyio.fail_after(3):
                while not hook.named(events.STALE_METADATA_IGNORED, topic=topic):
                    await anyio.sleep(0.01)
            later = now_ms()
            mds = [await producer.send(topic, f"after-{i}".encode(), partition=0) for i in range(5)]

        assert [md.offset for md in mds] == [2, 3, 4, 5, 6]
        ignored = [f for _, f in hook.named(events.STALE_METADATA_IGNORED, topic=topic)]
        assert ignored[0]["received_epoch"] == old_epoch < ignored[0]["known_epoch"]
        h: Any = control
        assert h.requests(METADATA, since_ms=start), "no metadata refresh happened after the move"
        attempts = h.produce_requests(topic, 0, since_ms=start)
        assert [a.node for a in attempts[:2]] == [old_leader, new_leader], attempts
        after = h.produce_requests(topic, 0, since_ms=later)
        assert len(after) == 5 and {a.node for a in after} == {new_leader}, after

    anyio.run(scenario, backend=backend)
