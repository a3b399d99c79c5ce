"""Next-generation groups on librdkafka's mock cluster (or Apache Kafka): akresil vs confluent-kafka (and the Java
client on Apache Kafka), in one run.

1. Share groups (KIP-932): records acknowledged per second while 1, 2 and 4 share consumers drain one
   topic (8 partitions, 100-byte values) and accept every record; the clock runs from the consumers'
   creation until the last record's acknowledgement has been committed (``close()`` is timed apart, as
   ``close_ms``: the slowest member's). Both clients in both modes, the same loop: explicit
   (``acknowledge()`` each record, then commit after each poll) and implicit (commit accepts the poll).
   confluent-kafka's ShareConsumers run in threads of this process (``commit_sync``); akresil's as tasks on
   one event loop (``commit()``). For akresil also the CPU time of its event-loop thread per acknowledged
   record (``cpu_us_per_ack``, median of the rounds): far less sensitive to other load on the machine than the
   rate. (confluent-kafka's CPU cannot be told apart from the mock's threads in this process.)
   On Apache Kafka also the Java client's ``KafkaShareConsumer`` (``java explicit`` / ``java implicit``): the
   same loop in threads of one JVM (``commitSync``), timed inside the JVM (see ``akresil.bench.java_groups``).
2. Rebalance time, KIP-848 (``group_protocol="consumer"``) vs classic: two members own 6 partitions; a third
   starts; the clock stops when the three hold disjoint, non-empty assignments covering every partition.
   The classic protocol only on Apache Kafka by default: see ``MOCK_CLASSIC_NOTE``.

Every measurement uses a fresh mock cluster (3 brokers), runs ``--rounds`` times (>= 3) and reports the
median and the worst. Prints one JSON document.

    python benchmarks/bench_groups.py [--rounds 3] [--records 20000]
    python benchmarks/bench_groups.py --broker apache [--kafka-brokers 1]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import threading
import time
from functools import partial
from typing import Any, Awaitable, Callable

import anyio

from akresil import Consumer, Producer, ShareConsumer, TopicPartition
from akresil.testing.rdkafka_mock import MockCluster, librdkafka_version

PARTITIONS = 8
SETTLE_TIMEOUT_S = 60.0
VALUE = b"v" * 100

#: why the classic rebalance row on librdkafka's mock measures the mock, not a client (investigated for issue 27)
MOCK_CLASSIC_NOTE = (
    "not comparable on librdkafka's mock: its classic coordinator holds a rebalance that a new member starts for "
    "that member's session.timeout.ms - 1 s (rd_kafka_mock_cgrp_classic_rebalance: the short wait is only for a "
    "rebalance in which no member was added), so any client's third member takes 44 s at the 45 s default; and it "
    "completes a SyncGroup round as soon as the leader's request brings every assignment, answering a follower "
    "whose SyncGroup comes later INVALID_REQUEST (with a null assignment), so akresil's two members, whose leader "
    "syncs first on one event loop, rejoin every 44 s and never settle. akresil does apply the mock's version cap "
    "(JoinGroup v5, SyncGroup v3, LeaveGroup v2; docs/brokers.md). Measure the classic protocol with --broker apache.")


def new_mock() -> MockCluster:
    mock = MockCluster(3)
    mock.share_set_auto_offset_reset(True)
    mock.share_set_heartbeat_interval(500)
    mock.consumer_group_set_heartbeat_interval(500)
    return mock


#: appended to the group ids: empty on a fresh mock, unique per round on Apache Kafka (groups outlive a round)
GROUP_TAG = ""


async def fill(mock: MockCluster, topic: str, records: int, partitions: int, *, create: bool = True) -> None:
    if create:
        mock.create_topic(topic, partitions)
    # 16 KiB batches (the Java default): a share fetch returns whole batches, the records it did not
    # acquire for this member are decoded and dropped, so huge batches would measure that waste
    async with Producer(bootstrap_servers=mock.bootstrap_servers, linger_ms=5, batch_size=16_384) as producer:
        per = records // partitions
        for p in range(partitions):
            await producer.send_many(topic, [(None, VALUE)] * per, partition=p)


# ------------------------------------------------------------------------------------------ share groups
#: akresil's CPU seconds (its event-loop thread only: the mock's threads share the process) per share round
CPU_S: list[float] = []
#: the slowest member's close() per share round, seconds
CLOSE_S: list[float] = []
#: per share round, seconds from the consumers' creation to the first record handed to any of them (group join,
#: assignment, first fetch: on Apache Kafka mostly the wait for the heartbeat that brings the assignment)
FIRST_S: list[float] = []
#: when set (``--timeline``), each commit of a share round appends ``time.perf_counter()`` here (one consumer)
COMMITS: list[float] | None = None


async def share_akresil(mock: MockCluster, topic: str, records: int, consumers: int,
                        mode: str = "explicit") -> float:
    """``explicit``: each record accepted with ``acknowledge()``, then ``commit()`` (the confluent-kafka loop);
    ``implicit``: ``commit()`` accepts what the poll handed out."""
    done = 0
    first_at = committed_at = 0.0
    closes: list[float] = []
    start = time.perf_counter()
    cpu = time.thread_time()

    async def member() -> None:
        nonlocal done, committed_at, first_at
        c = ShareConsumer(topic, bootstrap_servers=mock.bootstrap_servers, group_id=f"bench{GROUP_TAG}",
                          fetch_max_wait_ms=100, acknowledgement_mode=mode)  # type: ignore[arg-type]
        await c.start()
        try:
            while done < records:
                batch = await c.getmany(timeout_ms=100)
                n = 0
                for recs in batch.values():
                    if mode == "explicit":
                        for r in recs:
                            c.acknowledge(r)
                    n += len(recs)
                if n:
                    if not first_at:
                        first_at = time.perf_counter()
                    await c.commit()
                    if COMMITS is not None:
                        COMMITS.append(time.perf_counter())
                    done += n
                    if done >= records and not committed_at:
                        committed_at = time.perf_counter()
        finally:
            t = time.perf_counter()
            await c.close()
            closes.append(time.perf_counter() - t)
    async with anyio.create_task_group() as tg:
        for _ in range(consumers):
            tg.start_soon(member)
    CPU_S.append(time.thread_time() - cpu)
    CLOSE_S.append(max(closes))
    FIRST_S.append(first_at - start)
    return records / (committed_at - start)


def share_confluent(mock: MockCluster, topic: str, records: int, consumers: int, mode: str = "explicit") -> float:
    import confluent_kafka

    lock = threading.Lock()
    done = [0]
    committed_at = [0.0]
    first_at = [0.0]
    closes: list[float] = []

    def member() -> None:
        c = confluent_kafka.ShareConsumer({"bootstrap.servers": mock.bootstrap_servers, "group.id": f"bench{GROUP_TAG}",
                                           "share.acknowledgement.mode": mode, "log_level": 3})
        c.subscribe([topic])
        try:
            while done[0] < records:
                msgs = c.poll(0.1)
                n = 0
                for m in msgs:
                    if m.error() is None:
                        if mode == "explicit":
                            c.acknowledge(m)
                        n += 1
                if n:
                    if not first_at[0]:
                        first_at[0] = time.perf_counter()
                    c.commit_sync()
                    if COMMITS is not None:
                        COMMITS.append(time.perf_counter())
                    with lock:
                        done[0] += n
                        if done[0] >= records and not committed_at[0]:
                            committed_at[0] = time.perf_counter()
        finally:
            t = time.perf_counter()
            c.close()
            with lock:
                closes.append(time.perf_counter() - t)

    start = time.perf_counter()
    threads = [threading.Thread(target=member) for _ in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    CLOSE_S.append(max(closes))
    FIRST_S.append(first_at[0] - start)
    return records / (committed_at[0] - start)


#: the JVM running the Java client's columns (``--broker apache`` only), started by ``main``
JAVA: Any = None


def share_java(cluster: Any, topic: str, records: int, consumers: int, mode: str = "explicit") -> float:
    """The same loop with the Java client's ``KafkaShareConsumer`` (threads of one JVM, ``commitSync``)."""
    seconds, first_s, close_s = JAVA.share(cluster.bootstrap_servers, f"bench{GROUP_TAG}", topic, records,
                                           consumers, mode, timeout_s=SETTLE_TIMEOUT_S + records / 1000)
    FIRST_S.append(first_s)
    CLOSE_S.append(close_s)
    return records / seconds


# ------------------------------------------------------------------------------------------ rebalances
def _settled(assignments: list[frozenset[TopicPartition]], partitions: int) -> bool:
    union = frozenset().union(*assignments)
    return (all(assignments) and len(union) == partitions
            and sum(map(len, assignments)) == partitions)


async def _settle(assignments: list[frozenset[TopicPartition]], members: int, what: str) -> None:
    """Wait until the first ``members`` assignments are settled on the 6 partitions (else ``TimeoutError``)."""
    with anyio.move_on_after(SETTLE_TIMEOUT_S) as scope:
        while not _settled(assignments[:members], 6):
            await anyio.sleep(0.005)
    if scope.cancelled_caught:
        raise TimeoutError(f"{what} did not settle within {SETTLE_TIMEOUT_S:g} s")


async def rebalance_akresil(mock: MockCluster, topic: str, protocol: str) -> float:
    """Assignments are followed through the rebalance listener, as confluent-kafka's through on_assign /
    on_revoke: the moment the member applies a change, not when its next ``getmany`` returns."""
    cfg: dict[str, Any] = dict(bootstrap_servers=mock.bootstrap_servers, group_id=f"bench-rb{GROUP_TAG}",
                               group_protocol=protocol, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    assignments: list[frozenset[TopicPartition]] = [frozenset()] * 3
    stop = anyio.Event()

    class Follow:
        def __init__(self, i: int) -> None:
            self.i = i

        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            assignments[self.i] = assignments[self.i] | assigned

        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            assignments[self.i] = assignments[self.i] - revoked

        async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
            assignments[self.i] = assignments[self.i] - lost

    async def member(i: int) -> None:
        async with Consumer(topic, listener=Follow(i), **cfg) as c:
            while not stop.is_set():
                await c.getmany(timeout_ms=20)

    async with anyio.create_task_group() as tg:
        tg.start_soon(member, 0)
        tg.start_soon(member, 1)
        await _settle(assignments, 2, "two akresil members")
        start = time.perf_counter()
        tg.start_soon(member, 2)
        await _settle(assignments, 3, "three akresil members")
        elapsed = time.perf_counter() - start
        stop.set()
    return elapsed


def rebalance_confluent(mock: MockCluster, topic: str, protocol: str) -> float:
    import confluent_kafka

    assignments: list[frozenset[TopicPartition]] = [frozenset()] * 3
    stop = threading.Event()

    def member(i: int) -> None:
        conf = {"bootstrap.servers": mock.bootstrap_servers, "group.id": f"bench-rb{GROUP_TAG}", "group.protocol": protocol,
                "auto.offset.reset": "earliest", "log_level": 3}
        c = confluent_kafka.Consumer(conf)

        def on_assign(consumer: Any, parts: list[Any]) -> None:
            # eager (classic range): everything was revoked first; incremental (KIP-848): only additions
            assignments[i] = assignments[i] | {TopicPartition(p.topic, p.partition) for p in parts}

        def on_revoke(consumer: Any, parts: list[Any]) -> None:
            gone = {TopicPartition(p.topic, p.partition) for p in parts}
            assignments[i] = assignments[i] - gone

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not stop.is_set():
                c.poll(0.05)
        finally:
            c.close()

    threads = [threading.Thread(target=member, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while not _settled(assignments[:2], 6):
            if time.monotonic() > deadline:
                raise TimeoutError("two confluent-kafka members did not settle")
            time.sleep(0.005)
        start = time.perf_counter()
        third = threading.Thread(target=member, args=(2,))
        third.start()
        threads.append(third)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while not _settled(assignments, 6):
            if time.monotonic() > deadline:
                raise TimeoutError("three confluent-kafka members did not settle")
            time.sleep(0.005)
        return time.perf_counter() - start
    finally:
        stop.set()
        for t in threads:
            t.join()


def rebalance_java(cluster: Any, topic: str, protocol: str) -> float:
    """The same settle with the Java client's ``KafkaConsumer`` (threads of one JVM, assignment read after each
    20 ms poll, as akresil's members do)."""
    return float(JAVA.rebalance(cluster.bootstrap_servers, f"bench-rb{GROUP_TAG}", topic, 6, protocol,
                                timeout_s=SETTLE_TIMEOUT_S))


# ------------------------------------------------------------------------------------------ driver
def _innermost(exc: BaseException) -> BaseException:
    """The error a task group wrapped (one failing member), so the report names it."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def rounds(n: int, once: Callable[[], float]) -> dict[str, Any]:
    values, errors = [], []
    for _ in range(n):
        try:
            values.append(once())
        except Exception as exc:   # a failed round is reported, not hidden
            err = _innermost(exc)
            errors.append(f"{type(err).__name__}: {err}")
    out: dict[str, Any] = {"rounds": values}
    if values:
        out["median"] = statistics.median(values)
    if errors:
        out["errors"] = errors
    return out


def _figure(result: Awaitable[float] | float) -> float:
    """A round body's figure: returned at once (a threaded client) or by a coroutine to run (an async one)."""
    if isinstance(result, (int, float)):
        return float(result)

    async def wait() -> float:
        return await result
    return anyio.run(wait)


def on_fresh_mock(body: Callable[[MockCluster, str], Awaitable[float] | float], fill_records: int,
                  partitions: int) -> float:
    with new_mock() as mock:
        topic = "bench-groups"
        anyio.run(fill, mock, topic, fill_records, partitions)
        return _figure(body(mock, topic))


def on_fresh_apache(cluster: Any, body: Callable[[Any, str], Awaitable[float] | float], fill_records: int,
                    partitions: int) -> float:
    """One round on Apache Kafka: a new topic and new group ids (with ``share.auto.offset.reset=earliest`` for
    the share group: Kafka's default is the log end), filled like the mock's."""
    import uuid

    from akresil.admin_types import ConfigResource
    global GROUP_TAG
    GROUP_TAG = "-" + uuid.uuid4().hex[:8]
    topic = f"bench-groups{GROUP_TAG}"

    async def setup() -> None:
        await cluster.create_topic(topic, partitions=partitions)
        async with cluster.admin() as admin:
            (await admin.incremental_alter_configs(
                {ConfigResource("group", f"bench{GROUP_TAG}"): {"share.auto.offset.reset": "earliest"}})
             ).raise_on_error()
        await fill(cluster, topic, fill_records, partitions, create=False)
    anyio.run(setup)
    return _figure(body(cluster, topic))


def profile_share(records: int) -> int:
    """Where akresil's CPU goes per acknowledged record: the mock's threads and other processes do not count."""
    import cProfile
    import pstats

    profiler = cProfile.Profile(time.thread_time)

    def body(mock: MockCluster, topic: str) -> float:
        async def run() -> float:
            profiler.enable()
            try:
                return await share_akresil(mock, topic, records, 1, "explicit")
            finally:
                profiler.disable()
        return anyio.run(run)

    rate = on_fresh_mock(body, records, PARTITIONS)
    print(f"explicit x1: {rate:,.0f} acks/s (profiled), {CPU_S[-1] / records * 1e6:.1f} CPU us/ack (profiled)",
          file=sys.stderr)
    pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
    return 0


def _mock_thread_cpu_s() -> float:
    """CPU seconds of this process's ``rdk:mock`` threads so far (the mock serves every broker on one), from
    ``/proc`` (Linux): nanosecond resolution, unlike the clock ticks of ``/proc/*/stat``."""
    import os

    total = 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "rdk:mock":
                    continue
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0]) / 1e9
        except FileNotFoundError:   # a thread that ended meanwhile
            continue
    return total


class _Commits(list):  # type: ignore[type-arg]
    """``COMMITS`` for ``--timeline``: each commit's time, and the mock threads' CPU seconds at it."""

    def __init__(self) -> None:
        super().__init__()
        self.mock_cpu: list[float] = []

    def append(self, t: float) -> None:
        self.mock_cpu.append(_mock_thread_cpu_s())
        super().append(t)


def timeline(records: int, n_rounds: int) -> dict[str, Any]:
    """One share consumer per client and mode on a fresh mock per round, with the mock's request tracking and its
    thread's CPU: the requests each client sends (ShareFetch, ShareAcknowledge), the time to its fourth commit
    (start-up: join, connections, the first leaders' fetches) and, over the commits after it (each one poll of
    ~500 records), the wall time per commit and how much of it the mock was busy. Both clients are bounded by
    the mock (one thread for all brokers), so the busy share says how well a client keeps a request in front of
    it. Medians of the rounds."""
    global COMMITS
    runs: list[tuple[str, Callable[..., Any]]] = [
        ("akresil explicit", lambda m, t: share_akresil(m, t, records, 1, "explicit")),
        ("akresil implicit", lambda m, t: share_akresil(m, t, records, 1, "implicit")),
        ("confluent-kafka explicit", lambda m, t: share_confluent(m, t, records, 1, "explicit")),
        ("confluent-kafka implicit", lambda m, t: share_confluent(m, t, records, 1, "implicit"))]
    out: dict[str, Any] = {}
    for client, fn in runs:
        per: dict[str, list[float]] = {}

        def body(mock: MockCluster, topic: str, fn: Any = fn) -> float:
            global COMMITS
            commits = COMMITS = _Commits()
            mock.start_request_tracking()
            start = time.perf_counter()
            try:
                rate = _figure(fn(mock, topic))
            finally:
                COMMITS = None
            tracked = mock.stop_request_tracking()
            per.setdefault("share_fetch", []).append(sum(1 for r in tracked if r.api_key == 78))
            per.setdefault("share_acknowledge", []).append(sum(1 for r in tracked if r.api_key == 79))
            if len(commits) > 5:
                wall = commits[-1] - commits[3]
                busy = commits.mock_cpu[-1] - commits.mock_cpu[3]
                per.setdefault("start_to_4th_commit_ms", []).append((commits[3] - start) * 1e3)
                per.setdefault("steady_ms_per_commit", []).append(wall / (len(commits) - 4) * 1e3)
                per.setdefault("mock_cpu_ms_per_commit", []).append(busy / (len(commits) - 4) * 1e3)
                per.setdefault("mock_busy", []).append(busy / wall)
            return rate

        for _ in range(n_rounds):
            per.setdefault("acks_per_s", []).append(on_fresh_mock(body, records, PARTITIONS))
        out[client] = {k: {"median": statistics.median(v), "rounds": v} for k, v in per.items()}
        print(f"{client}: " + ", ".join(f"{k} {v['median']:,.2f}" for k, v in out[client].items()), file=sys.stderr)
    COMMITS = None
    return out


def ack_cost(records: int, rounds: int) -> dict[str, Any]:
    """CPU ns per record of the per-record acknowledgement calls alone, no broker and no event loop: the share
    state's ``acknowledge_record`` (explicit mode's call per record) and ``accept_delivered`` (implicit mode's pass
    over a poll), and ``ShareConsumer.acknowledge`` (what the application calls: its checks, the clock read and
    the state's call), over ``records`` records acquired in one range; the best of ``rounds`` (the floor, the
    least disturbed by other load on the machine)."""
    import random
    import struct

    from akresil.core.backoff import ExponentialBackoff
    from akresil.core.share_state import AckType, ShareFetchState
    from akresil.protocol.records import build_batch

    tid, tp = bytes(range(1, 17)), TopicPartition("t", 0)
    raw = build_batch([(1000 + i, None, VALUE, []) for i in range(records)])
    records_bytes = struct.pack(">q", 0) + raw[8:]
    answer = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": 10**9,
              "node_endpoints": [], "responses": [{"topic_id": tid, "partitions": [{
                  "partition_index": 0, "error_code": 0, "error_message": None, "acknowledge_error_code": 0,
                  "acknowledge_error_message": None, "current_leader": {"leader_id": -1, "leader_epoch": -1},
                  "records": records_bytes,
                  "acquired_records": [{"first_offset": 0, "last_offset": records - 1, "delivery_count": 1}]}]}]}

    def delivered(st: ShareFetchState | None = None) -> tuple[ShareFetchState, list[Any]]:
        if st is None:
            st = ShareFetchState("g", backoff=ExponentialBackoff(100, 1000, rng=random.Random(0), jitter=0.0),
                                 max_records=records)
        st.member_id = "m"
        st.set_assignment([tp])
        (fetch,) = st.plan(0, leader_of=lambda _: 1, topic_id_of=lambda _: tid)
        st.on_fetch_response(fetch, answer, 10)
        return st, st.poll(records, 20)

    def consumer_holding() -> tuple[ShareConsumer, list[Any]]:
        """A consumer that is not connected, marked running as after ``start()``, its state fed the answer."""
        c = ShareConsumer("t", bootstrap_servers="127.0.0.1:9", group_id="g", acknowledgement_mode="explicit",
                          max_poll_records=records)
        c._runtime.started = c._runtime.running = True
        return c, delivered(c._state)[1]

    accept = int(AckType.ACCEPT)
    best = {"acknowledge_record": math.inf, "accept_delivered": math.inf, "consumer_acknowledge": math.inf}
    for _ in range(rounds):
        c, recs = consumer_holding()
        call = c.acknowledge
        t = time.process_time()
        for r in recs:
            call(r)
        best["consumer_acknowledge"] = min(best["consumer_acknowledge"], time.process_time() - t)
        st, recs = delivered()
        ack = st.acknowledge_record
        t = time.process_time()
        for r in recs:
            ack(r, accept, 30.0)
        best["acknowledge_record"] = min(best["acknowledge_record"], time.process_time() - t)
        st, recs = delivered()
        t = time.process_time()
        st.accept_delivered(recs, 30.0)
        best["accept_delivered"] = min(best["accept_delivered"], time.process_time() - t)
    return {f"{k}_ns_per_record": round(v / records * 1e9) for k, v in best.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--consumers", default="1,2,4")
    parser.add_argument("--protocols", default=None,
                        help="group protocols for the rebalance measurement (default: classic,consumer on Apache "
                             "Kafka, consumer on the mock, where the classic row measures the mock: "
                             "MOCK_CLASSIC_NOTE; empty: none)")
    parser.add_argument("--settle-timeout", type=float, default=60.0, help="seconds a rebalance may take")
    parser.add_argument("--broker", choices=("mock", "apache"), default="mock",
                        help="apache: a local Apache Kafka (akresil.testing.KafkaCluster, --kafka-brokers brokers, "
                             "a new topic and groups per round) instead of a fresh mock per round")
    parser.add_argument("--kafka-brokers", type=int, default=1)
    parser.add_argument("--profile", action="store_true",
                        help="instead: one akresil share consumer, explicit mode, under cProfile timed by its thread's "
                             "CPU (time.thread_time); prints the top functions by cumulative CPU to stderr")
    parser.add_argument("--timeline", action="store_true",
                        help="instead: one share consumer per client and mode on the mock with its request tracking "
                             "and thread CPU (requests sent, start-up, wall and mock CPU per commit); prints JSON")
    parser.add_argument("--ack-cost", action="store_true",
                        help="instead: the share state's per-record acknowledgement calls alone (no broker, no "
                             "event loop), CPU ns per record, best of --rounds; prints JSON")
    args = parser.parse_args(argv)
    if args.ack_cost:
        print(json.dumps(ack_cost(args.records, max(args.rounds, 3)), indent=2))
        return 0
    if args.profile:
        return profile_share(args.records)
    if args.timeline:
        print(json.dumps(timeline(args.records, max(args.rounds, 3)), indent=2))
        return 0
    if args.rounds < 3:
        parser.error("--rounds: at least 3 (the report gives medians and the worst)")
    counts = [int(x) for x in args.consumers.split(",")]
    global SETTLE_TIMEOUT_S
    SETTLE_TIMEOUT_S = args.settle_timeout
    report: dict[str, Any] = {
        "python": platform.python_version(), "platform": platform.platform(),
        "librdkafka": librdkafka_version(), "records": args.records, "partitions": PARTITIONS,
        "share_acks_per_s": {}, "rebalance_s": {}}
    apache = args.broker == "apache"
    protocols = [p for p in (args.protocols if args.protocols is not None
                             else "classic,consumer" if apache else "consumer").split(",") if p]
    if not apache:
        report["skipped"] = {"java": "the Java client runs only with --broker apache (no KafkaShareConsumer against "
                                     "librdkafka's mock)"}
        if "classic" not in protocols:
            report["skipped"]["rebalance classic"] = MOCK_CLASSIC_NOTE
    cluster: Any = None
    fresh: Callable[..., float] = on_fresh_mock
    global JAVA
    try:
        if apache:
            from akresil.bench.java_groups import JavaGroups
            from akresil.testing import KafkaCluster
            cluster = KafkaCluster(brokers=args.kafka_brokers).start()
            report["broker"] = f"Apache Kafka {cluster.version}, {args.kafka_brokers} broker(s)"
            fresh = partial(on_fresh_apache, cluster)
            JAVA = JavaGroups(cluster.version).start()
            report["java"] = f"kafka-clients {cluster.version} on Java {JAVA.java_version}, one JVM for the run"
        share_runs: list[tuple[str, Callable[..., Any]]] = [
            ("akresil explicit", lambda m, t, n: share_akresil(m, t, args.records, n, "explicit")),
            ("akresil implicit", lambda m, t, n: share_akresil(m, t, args.records, n, "implicit")),
            ("confluent-kafka explicit", lambda m, t, n: share_confluent(m, t, args.records, n, "explicit")),
            ("confluent-kafka implicit", lambda m, t, n: share_confluent(m, t, args.records, n, "implicit"))]
        if apache:
            share_runs += [("java explicit", lambda m, t, n: share_java(m, t, args.records, n, "explicit")),
                           ("java implicit", lambda m, t, n: share_java(m, t, args.records, n, "implicit"))]
            # the JIT compiles the hot path in one untimed round first (the Python clients have no JIT to warm)
            t0 = time.perf_counter()
            try:
                fresh(lambda m, t: share_java(m, t, args.records, 1, "explicit"), args.records, PARTITIONS)
                report["java_warmup_s"] = time.perf_counter() - t0
            except Exception as exc:   # the Java rows will show their own errors; the others still run
                report["java_warmup_error"] = f"{type(exc).__name__}: {exc}"
            # and the broker's: its first share group initialises the share-state topic (~2 s), and its own JIT
            # makes the first ~8 rounds up to 2x slower; without this, the client measured first loses
            for _ in range(4):
                fresh(lambda m, t: share_akresil(m, t, args.records, 1), args.records, PARTITIONS)
                fresh(lambda m, t: share_confluent(m, t, args.records, 1), args.records, PARTITIONS)
        for client, fn in share_runs:
            for n in counts:
                CPU_S.clear()
                CLOSE_S.clear()
                FIRST_S.clear()
                r = rounds(args.rounds, lambda fn=fn, n=n: fresh(  # type: ignore[misc]
                    lambda m, t: fn(m, t, n), args.records, PARTITIONS))
                if r["rounds"]:
                    r["worst"] = min(r["rounds"])
                if CPU_S:
                    r["cpu_us_per_ack"] = statistics.median(CPU_S) / args.records * 1e6
                if CLOSE_S:
                    r["close_ms"] = {"median": statistics.median(CLOSE_S) * 1e3, "worst": max(CLOSE_S) * 1e3}
                if FIRST_S:
                    r["first_record_ms"] = {"median": statistics.median(FIRST_S) * 1e3, "worst": max(FIRST_S) * 1e3}
                report["share_acks_per_s"][f"{client} x{n}"] = r
                print(f"share {client} x{n}: {r.get('median', 0):,.0f} acks/s (worst {r.get('worst', 0):,.0f})"
                      + (f", {r['cpu_us_per_ack']:.1f} CPU us/ack" if CPU_S else "")
                      + (f", first record {r['first_record_ms']['median']:.0f} ms" if FIRST_S else "")
                      + (f", close {r['close_ms']['median']:.0f} ms" if CLOSE_S else ""), file=sys.stderr)
        rebalance_runs: list[tuple[str, Callable[..., Any]]] = [
            ("akresil", rebalance_akresil), ("confluent-kafka", rebalance_confluent)]
        if apache:
            rebalance_runs.append(("java", rebalance_java))
        for client, fn in rebalance_runs:
            for protocol in protocols:
                r = rounds(args.rounds, lambda fn=fn, p=protocol: fresh(  # type: ignore[misc]
                    lambda m, t: fn(m, t, p), 600, 6))
                if r["rounds"]:
                    r["worst"] = max(r["rounds"])
                if protocol == "classic" and not apache:
                    r["note"] = MOCK_CLASSIC_NOTE
                report["rebalance_s"][f"{client} {protocol}"] = r
                print(f"rebalance {client} {protocol}: {r.get('median', float('nan')):.3f} s"
                      f" (worst {r.get('worst', float('nan')):.3f} s)"
                      + (f", {len(r['errors'])} failed: {r['errors'][0]}" if "errors" in r else ""), file=sys.stderr)
    finally:
        if JAVA is not None:
            JAVA.close()
            JAVA = None
        if cluster is not None:
            cluster.stop()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
