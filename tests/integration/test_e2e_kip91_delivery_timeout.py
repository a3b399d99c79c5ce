"""KIP-91 on the wire: a record whose leader is unreachable fails with DeliveryTimeoutError at its deadline.

The deadline is ``batch creation + delivery_timeout_ms``; the record must fail neither earlier (minus timer
slack) nor much later, whether its batch waits in the queue for a dead node or sits in flight on a request
the broker never answers in time.
"""

from __future__ import annotations

import pytest

from akresil.core import events
from akresil.core.events import RecordingHook
from akresil.errors import DeliveryTimeoutError

from ..harness.e2e import fast_producer, harness, now_ms, unique_topic

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too, pytest.mark.parametrize("kind", ["proxy", "mock"])]

DELIVERY_TIMEOUT_MS = 3000
EARLY_SLACK_MS = 15      # timer rounding: the deadline is checked on the event loop's clock
LATE_SLACK_MS = 200     # plus the event loop's measured lateness (``LoopLag``)


def assert_on_deadline(elapsed_ms: float, late_slack_ms: float) -> None:
    assert DELIVERY_TIMEOUT_MS - EARLY_SLACK_MS <= elapsed_ms <= DELIVERY_TIMEOUT_MS + late_slack_ms, \
        (elapsed_ms, late_slack_ms)


async def test_record_for_a_down_leader_expires_at_its_deadline(kind: str, broker) -> None:
    hook = RecordingHook()
    async with harness(kind, broker) as h:
        topic = unique_topic("kip91-down")
        await h.create_topic(topic, 2)
        async with fast_producer(h.bootstrap_servers, hooks=[hook]) as producer:
            await producer.send(topic, b"warm-up", partition=0)
            await h.stop_node(1)

            start = now_ms()
            doomed = await producer.enqueue(topic, b"doomed", partition=0)
            alive = await producer.send(topic, b"other partition, other node", partition=1)
            with pytest.raises(DeliveryTimeoutError) as info:
                await doomed
            elapsed = now_ms() - start

    assert_on_deadline(elapsed, h.lag.slack_ms(LATE_SLACK_MS))
    assert alive.partition == 1                    # the dead node holds up nobody else
    assert "delivery_timeout_ms (3000)" in str(info.value)
    expired = [e for e in hook.named(events.BATCH_EXPIRED) if e["topic"] == topic]
    assert len(expired) == 1 and expired[0]["partition"] == 0 and expired[0]["stage"] != "in-flight"


async def test_in_flight_batch_expires_while_its_request_is_outstanding(kind: str, broker) -> None:
    """request_timeout_ms == delivery_timeout_ms: the deadline comes first, with the request still open."""
    hook = RecordingHook()
    async with harness(kind, broker) as h:
        topic = unique_topic("kip91-inflight")
        await h.create_topic(topic, 1)
        async with fast_producer(h.bootstrap_servers, hooks=[hook], request_timeout_ms=DELIVERY_TIMEOUT_MS,
                                 delivery_timeout_ms=DELIVERY_TIMEOUT_MS) as producer:
            await producer.send(topic, b"warm-up", partition=0)
            await h.delay_produce(1, 10_000)

            start = now_ms()
            with pytest.raises(DeliveryTimeoutError) as info:
                await producer.send(topic, b"stuck", partition=0)
            elapsed = now_ms() - start
            sent = h.produce_requests(topic, 0, since_ms=start)
            await producer.close(timeout=1)

    assert_on_deadline(elapsed, h.lag.slack_ms(LATE_SLACK_MS))
    assert len(sent) == 1 and sent[0].node == 1, sent     # one attempt, never answered in time
    assert "in-flight" in str(info.value)
    expired = [e for e in hook.named(events.BATCH_EXPIRED) if e["topic"] == topic]
    assert [e["stage"] for e in expired] == ["in-flight"]
