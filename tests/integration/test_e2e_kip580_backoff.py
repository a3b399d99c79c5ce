"""KIP-580 on the wire: a failing produce is retried on the exponential schedule, within jitter bounds.

retry_backoff_ms=50 and retry_backoff_max_ms=400 give retries after 50, 100, 200, 400, 400 ms (+-20%);
the gaps between consecutive Produce requests the broker side records must match, and a delivered batch
does not leave the schedule advanced: the next failing record starts again at 50 ms.
"""

from __future__ import annotations

import pytest

from akresil.errors import NotEnoughReplicasError

from ..harness.e2e import check_backoff_gaps, fast_producer, gaps, harness, now_ms, unique_topic

pytestmark = [pytest.mark.broker, pytest.mark.parametrize("kind", ["proxy", "mock"])]

ERROR = NotEnoughReplicasError.errno   # retriable, and says nothing about leadership: only backoff applies


async def test_retries_follow_exponential_backoff_and_reset_after_success(kind: str, broker) -> None:
    async with harness(kind, broker) as h:
        topic = unique_topic("kip580")
        await h.create_topic(topic, 1)
        async with fast_producer(h.bootstrap_servers) as producer:
            await producer.send(topic, b"warm-up", partition=0)   # producer id, connections, metadata

            await h.fail_produce(ERROR, 5)
            start = now_ms()
            md = await producer.send(topic, b"retried", partition=0)
            attempts = h.produce_requests(topic, 0, since_ms=start)
            assert md.offset == 1
            assert len(attempts) == 6, attempts            # 5 failures, then the success
            assert {a.node for a in attempts} == {1}
            problems = check_backoff_gaps(gaps([a.time_ms for a in attempts]), [50, 100, 200, 400, 400],
                                          slack_ms=h.lag.slack_ms())
            assert not problems, problems

            # a fresh failure after a success backs off from the base again, not from the cap
            await h.fail_produce(ERROR, 2)
            start = now_ms()
            md = await producer.send(topic, b"after-success", partition=0)
            attempts = h.produce_requests(topic, 0, since_ms=start)
            assert md.offset == 2
            assert len(attempts) == 3, attempts
            problems = check_backoff_gaps(gaps([a.time_ms for a in attempts]), [50, 100], slack_ms=h.lag.slack_ms())
            assert not problems, problems
