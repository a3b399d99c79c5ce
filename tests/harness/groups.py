"""What consumer-group tests share on any broker: producing numbered records, a listener that commits on revoke and
records what a member was given, gave up and lost, consuming with a commit after each batch, and confluent-kafka's
consumer as a peer member.  Checks are on (partition, offset) pairs, so "consumed once" is exact."""

from __future__ import annotations

import threading
from typing import Any, Callable

import anyio

from akresil import Consumer, Producer, TopicPartition, errors
from akresil.types import ConsumerRecord

#: classic members heartbeat often and time out at Kafka's minimum (6 s); KIP-848 sessions are the broker's
FAST: dict[str, Any] = dict(fetch_max_wait_ms=100, retry_backoff_ms=50, auto_offset_reset="earliest",
                            enable_auto_commit=False, request_timeout_ms=15_000)


def member_config(protocol: str) -> dict[str, Any]:
    if protocol == "classic":
        return {**FAST, "group_protocol": "classic", "session_timeout_ms": 6_000, "heartbeat_interval_ms": 500}
    return {**FAST, "group_protocol": "consumer"}


async def produce(bootstrap: str, topic: str, per_partition: int, partitions: int, tag: str = "v"
                  ) -> set[tuple[int, int]]:
    """``per_partition`` records to each partition; returns every (partition, offset)."""
    async with Producer(bootstrap_servers=bootstrap, linger_ms=2) as producer:
        mds = []
        for p in range(partitions):
            mds += await producer.send_many(topic, [(None, b"%s-%d-%d" % (tag.encode(), p, i))
                                                    for i in range(per_partition)], partition=p)
    return {(md.partition, md.offset) for md in mds}


class Tracker:
    """Commits on revoke (manual commits) and records what the member was given, gave up and lost."""

    def __init__(self) -> None:
        self.consumer: Consumer | None = None
        self.assigned: list[set[TopicPartition]] = []
        self.revoked: list[set[TopicPartition]] = []
        self.lost: list[set[TopicPartition]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.revoked.append(revoked)
        assert self.consumer is not None
        try:
            await self.consumer.commit()
        except errors.ClientClosedError:     # on close, the revoke comes after the consumer stopped serving calls
            pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned.append(assigned)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.lost.append(lost)


def tracked(topic: str, bootstrap: str, group: str, protocol: str, tracker: Tracker, **config: Any) -> Consumer:
    consumer = Consumer(topic, bootstrap_servers=bootstrap, group_id=group, listener=tracker,
                        **{**member_config(protocol), **config})
    tracker.consumer = consumer
    return consumer


async def consume(consumer: Consumer, sink: list[ConsumerRecord], stop: Callable[[], bool], *,
                  max_records: int = 20) -> None:
    """A few records a turn, committing after each batch: positions move in small steps."""
    while not stop():
        batch = await consumer.getmany(timeout_ms=100, max_records=max_records)
        for records in batch.values():
            sink.extend(records)
        if batch:
            await consumer.commit()


def keys(records: list[ConsumerRecord]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


async def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    with anyio.move_on_after(timeout_s):
        while not condition():
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"not within {timeout_s} s: {what}")


async def settle(consumers: list[Consumer], until: Callable[[], bool], timeout_s: float = 60) -> None:
    """Poll every consumer until ``until()`` (their group work happens while they poll)."""
    with anyio.fail_after(timeout_s):
        while not until():
            for c in consumers:
                await c.getmany(timeout_ms=20)


def ck_member(bootstrap: str, group: str, topic: str, protocol: str, got: list[tuple[int, int]],
              stop: threading.Event) -> None:
    """confluent-kafka's consumer in the group (a thread): commits each record it takes."""
    import confluent_kafka

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                              "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 3}
    if protocol == "classic":
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer = confluent_kafka.Consumer(config)
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            m = consumer.poll(0.1)
            if m is not None and m.error() is None:
                got.append((m.partition(), m.offset()))
                consumer.commit(message=m, asynchronous=False)
    finally:
        consumer.close()
