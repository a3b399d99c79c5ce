"""KIP-227 fetch sessions on Apache Kafka: after a node's first (full) Fetch the consumer's Fetches are incremental,
and records are read exactly once, in order, across a change of assignment (partitions forgotten, then listed
again) and a restarted broker (its sessions are gone: the consumer falls back to a full Fetch and goes on); on
close the consumer closes the sessions of idle brokers (a Fetch at epoch -1 that each answers without a session)
and does not wait for a broker holding a long poll of ours."""

from __future__ import annotations

from typing import Any, Callable

import anyio
from akresil import Consumer, Producer, TopicPartition
from akresil.protocol.api import ApiKey
from akresil.testing import KafkaCluster

from .conftest import TopicMaker, broker_down
from .resilience import wait_leader

PARTITIONS = 6
PER_ROUND = 20           # records per partition per round


async def test_incremental_fetches_read_every_record_once_across_reassignment_and_a_broker_restart(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    topic = await make_topic(partitions=PARTITIONS, replication_factor=3)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    read: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    rounds = 0
    fetch_answers: list[tuple[int, Any]] = []

    class Answers:
        def on_response_received(self, node_id: int, api_key: int, version: int, latency_ms: float,
                                 response: Any) -> None:
            if api_key == ApiKey.FETCH:
                fetch_answers.append((node_id, response))

    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, acks="all", linger_ms=1,
                        client_id=unique("sess-p")) as producer, \
            Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers, client_id=unique("sess-c"),
                     auto_offset_reset="earliest", fetch_max_wait_ms=100, hooks=[Answers()]) as consumer:
        state = consumer._state
        closing: list[int] = []
        build_close_body = state.build_close_body

        def spy(session_id: int, **kw: Any) -> Any:
            closing.append(session_id)
            return build_close_body(session_id, **kw)
        state.build_close_body = spy         # type: ignore[method-assign]

        async def produce(partitions: list[int]) -> None:
            nonlocal rounds
            for p in partitions:
                await producer.send_many(topic, [(None, b"%d:%d:%03d" % (p, rounds, i)) for i in range(PER_ROUND)],
                                         partition=p)
            rounds += 1

        async def read_until(counts: dict[int, int]) -> None:
            with anyio.fail_after(30):
                while any(len(read[p]) < n for p, n in counts.items()):
                    for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                        read[tp.partition].extend(r.value for r in records)

        consumer.assign(tps)
        await produce(list(range(PARTITIONS)))
        await read_until({p: PER_ROUND for p in range(PARTITIONS)})
        with anyio.fail_after(10):           # idle long polls of the session: incremental Fetches
            while state.session_counts()["incremental"] < 3:
                await consumer.getmany(timeout_ms=100)
        assert any(s.session_id != 0 for s in state.sessions.values())

        # a change of assignment: half the partitions leave every session (forgotten), then come back
        kept = list(range(PARTITIONS // 2))
        positions = {tp: await consumer.position(tp) for tp in tps}
        consumer.assign([tps[p] for p in kept])
        await produce(list(range(PARTITIONS)))
        await read_until({p: 2 * PER_ROUND for p in kept})
        consumer.assign(tps)
        for p in range(PARTITIONS // 2, PARTITIONS):
            consumer.seek(tps[p], positions[tps[p]])
        await read_until({p: 2 * PER_ROUND for p in range(PARTITIONS)})

        # a restarted broker: the sessions it held are gone; the consumer's next Fetch there is a full one
        full_before = state.session_counts()["full"]
        lead = consumer._cluster.metadata.snapshot.leader_of(tps[0])
        assert lead is not None
        victim = lead[0]
        async with broker_down(kafka_cluster, victim, kill=False):    # a controlled shutdown moves leaders at once
            await wait_leader(kafka_cluster, topic, 0, not_on=victim)
            await produce(list(range(PARTITIONS)))
            await read_until({p: 3 * PER_ROUND for p in range(PARTITIONS)})
        await kafka_cluster.move_leader(topic, 0, victim)     # fetched from the restarted broker again
        await produce(list(range(PARTITIONS)))
        await read_until({p: 4 * PER_ROUND for p in range(PARTITIONS)})
        counts = state.session_counts()
        assert counts["full"] > full_before, counts
        open_sessions = {s.session_id for s in state.sessions.values() if s.session_id}
        assert open_sessions
        # close() leaves alone a session whose broker holds a long poll of ours (it would wait fetch_max_wait_ms
        # for it): paused, the consumer plans no Fetch, so once the held ones are answered every broker is idle
        consumer.pause(*tps)
        with anyio.fail_after(10):
            while state.busy_nodes:
                await anyio.sleep(0.02)
        answered = len(fetch_answers)

    assert sorted(closing) == sorted(open_sessions)
    last = fetch_answers[answered:]
    assert len([r for _, r in last if r["error_code"] == 0 and r["session_id"] == 0 and not r["responses"]]) \
        >= len(open_sessions), last

    for p in range(PARTITIONS):
        assert read[p] == [b"%d:%d:%03d" % (p, r, i) for r in range(rounds) for i in range(PER_ROUND)], p


async def test_close_does_not_wait_for_a_held_long_poll_and_closes_only_idle_sessions(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    """A broker holding one of our Fetches (nothing to read, ``fetch_max_wait_ms`` 30 s) reads the close-session
    Fetch only after answering it: ``close()`` sends none to it and returns without waiting the long poll out."""
    topic = await make_topic(partitions=3, replication_factor=1)
    tps = [TopicPartition(topic, p) for p in range(3)]
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, client_id=unique("held-p")) as producer:
        for tp in tps:
            await producer.send(topic, b"x", partition=tp.partition)
    consumer = Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers, client_id=unique("held-c"),
                        auto_offset_reset="earliest", fetch_max_wait_ms=30_000)
    consumer.assign(tps)
    closing: list[int] = []
    with anyio.fail_after(20):         # a hang guard: waiting out the 30 s long polls would exceed it
        async with consumer:
            state = consumer._state
            build_close_body = state.build_close_body

            def spy(session_id: int, **kw: Any) -> Any:
                closing.append(session_id)
                return build_close_body(session_id, **kw)
            state.build_close_body = spy         # type: ignore[method-assign]
            got = 0
            while got < len(tps):
                got += sum(len(v) for v in (await consumer.getmany(timeout_ms=1000)).values())
            # caught up: the next Fetches are long polls the brokers hold
            while not (state.busy_nodes and any(s.session_id for s in state.sessions.values())):
                await anyio.sleep(0.02)
            held = {node: s.session_id for node, s in state.sessions.items() if node in state.busy_nodes}
            assert held
    assert not set(closing) & set(held.values()), (closing, held)
