"""KIP-91 on Apache Kafka: records for partitions whose only replica is on a broker that is down fail with
``DeliveryTimeoutError`` at their deadline (creation + ``delivery_timeout_ms``), records for partitions on other
brokers keep being acknowledged meanwhile, and once the broker is back new records to its partitions succeed.

The topic has replication factor 1 (partition 0 on the victim, partition 1 on another broker), so nothing
elects a new leader: a killed broker is still the leader in Metadata until the controller fences it (its
session ends), then the partition has none; a stopped one (controlled shutdown) leaves it leaderless at once.
"""

from __future__ import annotations

from typing import Any, Callable

import anyio
import pytest

from akresil import Producer
from akresil.core import events
from akresil.errors import DeliveryTimeoutError
from akresil.net.clock import monotonic_ms
from akresil.testing import KafkaCluster

from .conftest import broker_down
from .resilience import TimedHook, loop_lag, pinned_topic

DELIVERY_TIMEOUT_MS = 4000
EARLY_SLACK_MS = 15      # the deadline is checked on the event loop's clock
LATE_SLACK_MS = 300      # a timer wake-up, plus the event loop's measured lateness
DOOMED_EVERY_S = 1.0     # one record for the down broker's partition at 0, 1 and 2 s into the outage
LIVE_EVERY_S = 0.02
VICTIM, LIVE = 3, 1


class Outcomes:
    """When each record was enqueued and when (and how) it completed, on akresil's clock."""

    def __init__(self) -> None:
        self.enqueued: dict[int, float] = {}
        self.done: dict[int, tuple[float, Any, BaseException | None]] = {}

    def callback(self, i: int) -> Callable[[Any, BaseException | None], None]:
        self.enqueued[i] = monotonic_ms()

        def done(md: Any, error: BaseException | None) -> None:
            self.done[i] = (monotonic_ms(), md, error)
        return done


@pytest.mark.parametrize("how", ["kill", "stop"])
async def test_a_down_brokers_records_expire_on_time_while_other_partitions_flow(
        kafka_cluster: KafkaCluster, unique: Callable[[str], str], how: str) -> None:
    topic = await pinned_topic(kafka_cluster, unique("kip91"), {0: [VICTIM], 1: [LIVE]})
    hook = TimedHook()
    doomed, live = Outcomes(), Outcomes()
    async with loop_lag() as lag, Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, linger_ms=0,
                                           delivery_timeout_ms=DELIVERY_TIMEOUT_MS, request_timeout_ms=2000,
                                           client_id=unique("kip91"), hooks=[hook]) as producer:
        for p in (0, 1):
            await producer.send(topic, b"warm-up", partition=p)
        async with broker_down(kafka_cluster, VICTIM, kill=how == "kill"):
            async def doom() -> None:
                for i in range(3):
                    await producer.enqueue(topic, b"doomed-%d" % i, partition=0, on_delivery=doomed.callback(i))
                    await anyio.sleep(DOOMED_EVERY_S)

            async with anyio.create_task_group() as tg:
                tg.start_soon(doom)
                i = 0
                with anyio.fail_after(DELIVERY_TIMEOUT_MS / 1000 * 3 + 10):
                    while len(doomed.done) < 3:
                        await producer.enqueue(topic, b"live-%d" % i, partition=1, on_delivery=live.callback(i))
                        i += 1
                        await anyio.sleep(LIVE_EVERY_S)
            await producer.flush()
        outage_over = monotonic_ms()

        # back: once the broker leads its partition again, a new record to it is acknowledged
        await kafka_cluster.wait_for(lambda: _leads(kafka_cluster, topic, VICTIM), timeout_s=60)
        after = await producer.send(topic, b"after", partition=0)

    for i, (at, _, error) in sorted(doomed.done.items()):
        assert isinstance(error, DeliveryTimeoutError), (i, error)
        age = at - doomed.enqueued[i]
        assert DELIVERY_TIMEOUT_MS - EARLY_SLACK_MS <= age <= DELIVERY_TIMEOUT_MS + lag.slack_ms(LATE_SLACK_MS), \
            (i, age, lag.max_ms)
    expired = [f for _, f in hook.named(events.BATCH_EXPIRED, topic=topic)]
    assert [f["partition"] for f in expired] == [0, 0, 0], expired

    # the live partition never waited for the dead broker: every record acknowledged, none anywhere near the
    # delivery timeout the dead partition's records ran into, and acknowledgements all through the outage
    assert len(live.done) == len(live.enqueued) >= 100
    assert all(error is None for _, _, error in live.done.values())
    latencies = [at - live.enqueued[i] for i, (at, _, _) in live.done.items()]
    assert max(latencies) < lag.slack_ms(DELIVERY_TIMEOUT_MS / 4), (max(latencies), lag.max_ms)
    last_doomed = max(at for at, _, _ in doomed.done.values())
    assert any(at > last_doomed - 200 for at, _, _ in live.done.values())
    assert after.partition == 0 and after.offset == 1       # the doomed records were never written
    assert outage_over > last_doomed


async def _leads(cluster: KafkaCluster, topic: str, node: int) -> bool:
    leader, _ = await cluster.leader(topic, 0)
    return leader == node
