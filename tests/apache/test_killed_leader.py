"""Leader moves, then a killed broker that leads partitions (SIGKILL), under a steady idempotent load, on Apache
Kafka.

Replication factor 3, acks=all, enable_idempotence.  Every partition's leader moves twice (reassignment +
preferred election: in-flight batches are refused NOT_LEADER_OR_FOLLOWER and retried with their sequence numbers
on the new leader); then the leader of partition 0 is killed: the controller fences it when its session ends
and elects new leaders from the in-sync replicas.  Records keyed so that each key has one partition and a
sequence number in its value.  Checked: every record acknowledged, and the log holds each key's records once,
in order, with no gap, each at the offset its acknowledgement reported (a retried batch that the new leader
already had is answered with its original offsets, not appended again); a consumer reading all along keeps
reading the dead broker's partitions from their new leaders while the broker is still down, and loses nothing.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

import anyio
from akresil import Consumer, Producer, TopicPartition
from akresil.core import events
from akresil.net.clock import monotonic_ms
from akresil.testing import KafkaCluster

from .conftest import TopicMaker, broker_down
from .resilience import TimedHook, wait_leader

PARTITIONS = 3
KEYS = 6                 # key k goes to partition k % PARTITIONS
EVERY_S = 0.005          # one record every 5 ms, keys in turn


async def test_leader_moves_and_a_killed_leader_keep_idempotent_keys_in_order_and_the_consumer_follows(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    topic = await make_topic(partitions=PARTITIONS, replication_factor=3)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    acked: dict[bytes, tuple[float, int, int]] = {}          # value -> (acked at, partition, offset)
    failed: list[tuple[bytes, BaseException]] = []
    consumed: list[tuple[float, Any]] = []
    sent = 0
    stop = anyio.Event()

    def on_delivery(value: bytes) -> Callable[[Any, BaseException | None], None]:
        def done(md: Any, error: BaseException | None) -> None:
            if error is not None:
                failed.append((value, error))
            else:
                acked[value] = (monotonic_ms(), md.partition, md.offset)
        return done

    hook = TimedHook()
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, linger_ms=2, acks="all",
                        enable_idempotence=True, client_id=unique("killed-p"), hooks=[hook]) as producer, \
            Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers, client_id=unique("killed-c"),
                     auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign(tps)

        async def produce() -> None:
            nonlocal sent
            seq = [0] * KEYS
            while not stop.is_set():
                k = sent % KEYS
                value = b"%d:%06d" % (k, seq[k])
                await producer.enqueue(topic, value, key=b"%d" % k, partition=k % PARTITIONS,
                                       on_delivery=on_delivery(value))
                seq[k] += 1
                sent += 1
                await anyio.sleep(EVERY_S)

        async def consume() -> None:
            while True:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    now = monotonic_ms()
                    consumed.extend((now, r) for r in records)

        def read_from(partition: int, acked_after: float) -> bool:
            """The consumer has read a record of ``partition`` that was acknowledged after ``acked_after``."""
            return any(r.partition == partition and acked.get(r.value, (0.0,))[0] > acked_after
                       for _, r in consumed)

        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            tg.start_soon(consume)
            with anyio.fail_after(15):
                while not all(read_from(p, 0.0) for p in range(PARTITIONS)):
                    await anyio.sleep(0.05)
            for _ in range(2):
                leaders = {p: (await kafka_cluster.leader(topic, p))[0] for p in range(PARTITIONS)}
                ids = kafka_cluster.broker_ids
                await kafka_cluster.move_leaders(topic, {p: ids[(ids.index(node) + 1) % len(ids)]
                                                         for p, node in leaders.items()})
                moved_at = monotonic_ms()
                with anyio.fail_after(30):               # records written after the move are read back
                    while not all(read_from(p, moved_at) for p in range(PARTITIONS)):
                        await anyio.sleep(0.05)
            victim, _ = await kafka_cluster.leader(topic, 0)
            async with broker_down(kafka_cluster, victim):
                new_leader, _ = await wait_leader(kafka_cluster, topic, 0, not_on=victim)
                elected_at = monotonic_ms()
                # while the victim is still down, the consumer reads what the new leader acknowledges
                with anyio.fail_after(30):
                    while not read_from(0, elected_at):
                        await anyio.sleep(0.05)
                read_while_down = monotonic_ms()
            resumed_at = monotonic_ms()
            await anyio.sleep(1.0)                        # a little load after the broker is back
            stop.set()
            await producer.flush()
            with anyio.fail_after(30):
                while len({r.value for _, r in consumed}) < len(acked):
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()

    assert not failed, failed[:5]
    # the moves did reach the producer: batches refused by the old leaders, retried under their sequence numbers
    reasons = {f["reason"] for _, f in hook.named(events.BATCH_RETRY, topic=topic)}
    assert "NotLeaderOrFollowerError" in reasons, reasons
    assert len(acked) == sent
    assert read_while_down < resumed_at and new_leader != victim
    # the log, as the consumer read it: every acknowledged record once, where its acknowledgement said
    where = {r.value: (r.partition, r.offset) for _, r in consumed}
    assert len(where) == len(consumed), "a record was read twice"
    assert {v: (p, o) for v, (_, p, o) in acked.items()} == where
    per_key: dict[bytes, list[int]] = defaultdict(list)
    offsets: dict[int, list[int]] = defaultdict(list)
    for _, r in sorted(consumed, key=lambda c: (c[1].partition, c[1].offset)):
        k, seq = r.value.split(b":")
        per_key[k].append(int(seq))
        offsets[r.partition].append(r.offset)
    assert all(seqs == list(range(len(seqs))) for seqs in per_key.values()), \
        {k: s for k, s in per_key.items() if s != list(range(len(s)))}
    assert all(offs == list(range(len(offs))) for offs in offsets.values())
