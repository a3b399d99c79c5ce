"""The producer scheduler's turn, driven with a fake clock: what it sends, to whom, and how long it sleeps.

``Sender._turn()`` is synchronous: it expires, drains and returns the sleep until the earliest timer.  These
tests call it directly with a fake clock and fake connections, so every rule is checked at exact times.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import anyio
import pytest

from akresil import errors
from akresil.config import resolve
from akresil.core.accumulator import RecordAccumulator
from akresil.net.cluster import Cluster, Lane
from akresil.net.scheduler import Sender
from akresil.protocol.api import ApiKey
from akresil.types import TopicPartition

from .test_turn_loop import what_a_timer_ended_turn_sees

pytestmark = pytest.mark.anyio

TP = TopicPartition("t", 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class FakeConn:
    closed = False

    def __init__(self, produce_version: int = 11) -> None:
        self.versions = {ApiKey.PRODUCE: produce_version}


class TaskRecorder:
    """Stands in for the sender's task group: records the tasks instead of running them, so the Produce
    requests the sender formed stay in its queue for its workers (``Sender._jobs``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.sender: Sender | None = None

    def start_soon(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        self.calls.append((getattr(fn, "__name__", fn), *args))

    def produces(self) -> list[tuple[int, list[Any]]]:
        """(node_id, batches) of every Produce request formed, in order, then forget them."""
        assert self.sender is not None
        jobs = self.sender._jobs                    # noqa: SLF001
        out = [(job[0], job[4]) for job in jobs]
        jobs.clear()
        return out


def metadata(leader: int, epoch: int) -> dict[str, Any]:
    """Partition 0 led by ``leader``; partition 1 by node 2 (for tests that need a second, healthy one)."""
    return {"brokers": [{"node_id": n, "host": "127.0.0.1", "port": 9000 + n, "rack": None} for n in (1, 2)],
            "controller_id": 1, "cluster_id": "c",
            "topics": [{"name": "t", "error_code": 0, "topic_id": bytes(16), "is_internal": False,
                        "partitions": [{"partition_index": p, "leader_id": lead, "leader_epoch": epoch,
                                        "replica_nodes": [1, 2], "isr_nodes": [1, 2], "offline_replicas": [],
                                        "error_code": 0} for p, lead in ((0, leader), (1, 2))]}]}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def make(idempotent: bool = False, **overrides: Any) -> tuple[Sender, FakeClock, TaskRecorder, list[Any]]:
    cfg = resolve("producer", {"enable_idempotence": idempotent, "acks": -1 if idempotent else 1, "linger_ms": 5,
                               "delivery_timeout_ms": 3_000, "request_timeout_ms": 1_000,
                               "retry_backoff_ms": 100, "retry_backoff_max_ms": 1_000, **overrides})
    clock = FakeClock()
    rng = random.Random(7)
    cluster = Cluster(cfg, clock=clock, rng=rng)
    cluster.metadata.update_from_metadata(metadata(leader=1, epoch=5), clock())
    for node in (1, 2):
        cluster._conns[(node, Lane.SHARED)] = FakeConn()    # noqa: SLF001 - connected nodes without sockets
        cluster.node(node).on_connected(clock())
    acc = RecordAccumulator(batch_size=cfg.batch_size, linger_ms=cfg.linger_ms,
                            delivery_timeout_ms=cfg.delivery_timeout_ms, request_timeout_ms=cfg.request_timeout_ms,
                            retry_backoff_ms=cfg.retry_backoff_ms, retry_backoff_max_ms=cfg.retry_backoff_max_ms,
                            enable_idempotence=idempotent, rng=NoJitter())
    if idempotent:
        acc.set_producer_identity(1000, 0)
    sender = Sender(cluster, acc, cfg)
    tasks = TaskRecorder()
    sender._tg = tasks                              # type: ignore[assignment]  # noqa: SLF001
    tasks.sender = sender
    results: list[Any] = []
    return sender, clock, tasks, results


class NoJitter:
    def uniform(self, a: float, b: float) -> float:
        return 1.0


def append(sender: Sender, clock: FakeClock, results: list[Any], value: bytes = b"v") -> None:
    sender.acc.append(TP, 0, None, value, (), lambda md, err: results.append(err or md), now=clock())


def not_leader_response(leader: int | None, epoch: int) -> dict[str, Any]:
    hint = None if leader is None else {"leader_id": leader, "leader_epoch": epoch}
    return {"throttle_time_ms": 0,
            "node_endpoints": [] if leader is None else [{"node_id": leader, "host": "127.0.0.1",
                                                          "port": 9000 + leader, "rack": None}],
            "responses": [{"name": "t", "partition_responses": [{
                "index": 0, "error_code": errors.NotLeaderOrFollowerError.errno, "base_offset": -1,
                "log_append_time_ms": -1, "log_start_offset": -1, "record_errors": [], "error_message": None,
                "current_leader": hint}]}]}


def ok_response(offset: int = 42, partition: int = 0) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "node_endpoints": None, "responses": [{"name": "t", "partition_responses": [{
        "index": partition, "error_code": 0, "base_offset": offset, "log_append_time_ms": -1, "log_start_offset": 0,
        "record_errors": [], "error_message": None, "current_leader": None}]}]}


def finish(sender: Sender, node: int, batches: list[Any], response: dict[str, Any], clock: FakeClock) -> None:
    """What ``_produce`` does when a response arrives (without the connection)."""
    state = sender.cluster.node(node)
    state.on_request_done(clock())
    state.on_response(int(ApiKey.PRODUCE), 11, response.get("throttle_time_ms") or 0, clock())
    sender._handle_response(node, response, batches, clock())   # noqa: SLF001


def acknowledge_one(sender: Sender, clock: FakeClock, tasks: TaskRecorder, tp: TopicPartition = TP) -> None:
    """The leader of ``tp`` acknowledges one batch (one record, sequence 0) of the producer id, as it must before
    an idempotent partition pipelines (``RecordAccumulator._blocked``): the batches after it start at sequence 1."""
    sender.acc.append(tp, 0, None, b"first", (), None, now=clock())
    sender.acc.expedite([tp])
    sender._turn()                                  # noqa: SLF001
    [(node, [batch])] = tasks.produces()
    assert batch.tp == tp and batch.base_sequence == 0
    finish(sender, node, [batch], ok_response(0, partition=tp.partition), clock)


async def test_sleeps_until_linger_end_then_sends_to_the_leader() -> None:
    sender, clock, tasks, results = await make()
    append(sender, clock, results)
    assert sender._turn() == pytest.approx(5.0)     # noqa: SLF001 - linger_ms
    assert tasks.produces() == []
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    [(node, batches)] = tasks.produces()
    assert node == 1 and batches[0].tp == TP
    finish(sender, 1, batches, ok_response(7), clock)
    assert results[0].offset == 7


async def test_idle_sender_sleeps_until_woken() -> None:
    sender, _, _, _ = await make()
    assert sender._turn() is None                   # noqa: SLF001 - nothing to do: no timer at all


async def test_muted_node_gets_nothing_until_the_window_ends() -> None:
    # a delivery timeout whose append window (10%) ends after the mute: the only timer here is the mute's
    sender, clock, tasks, results = await make(delivery_timeout_ms=30_000)
    sender.cluster.node(1).on_response(int(ApiKey.PRODUCE), 8, 400, clock())   # KIP-219 mute for 400 ms
    start = clock.now
    append(sender, clock, results)
    clock.now += 5                                   # lingered: ready, but the node is muted
    delay = sender._turn()                           # noqa: SLF001
    assert tasks.produces() == []
    assert delay == pytest.approx(start + 400 - clock.now)    # sleeps exactly to the mute end
    clock.now = start + 399.9
    sender._turn()                                   # noqa: SLF001
    assert tasks.produces() == []
    clock.now = start + 400
    sender._turn()                                   # noqa: SLF001
    assert [n for n, _ in tasks.produces()] == [1]


async def test_a_batch_stalled_behind_a_muted_node_stops_taking_records_after_its_append_window() -> None:
    """KIP-91 per record: a record must not join a batch that is already close to its deadline (the batch's
    deadline is every record's). After 10% of delivery_timeout_ms the open batch closes; the sender wakes
    for that, and a later record starts a batch with its own deadline."""
    sender, clock, tasks, results = await make()                      # delivery_timeout_ms 3000: window 300
    sender.cluster.node(1).on_response(int(ApiKey.PRODUCE), 8, 2_000, clock())   # muted for 2 s
    start = clock.now
    append(sender, clock, results)
    assert sender._turn() == pytest.approx(5)                         # noqa: SLF001 - linger
    clock.now = start + 5
    assert sender._turn() == pytest.approx(295)                       # noqa: SLF001 - the append window end
    clock.now = start + 300
    sender._turn()                                                    # noqa: SLF001
    append(sender, clock, results)
    first, second = sender.acc.batches()
    assert not first.open and second.created_at == start + 300
    assert second.deadline - start == pytest.approx(3_300)
    clock.now = start + 2_000
    sender._turn()                                                    # noqa: SLF001 - mute over: both go
    assert [b.created_at for _, bs in tasks.produces() for b in bs] == [start, start + 300]


async def test_throttle_on_a_pre_kip219_version_does_not_mute() -> None:
    sender, clock, tasks, results = await make()
    sender.cluster.node(1).on_response(int(ApiKey.PRODUCE), 5, 400, clock())   # broker already delayed it
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                   # noqa: SLF001
    assert [n for n, _ in tasks.produces()] == [1]


async def test_advancing_leader_hint_retries_at_once_on_the_new_leader() -> None:
    sender, clock, tasks, results = await make()
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                   # noqa: SLF001
    [(_, batches)] = tasks.produces()
    finish(sender, 1, batches, not_leader_response(leader=2, epoch=6), clock)
    assert sender.cluster.metadata.snapshot.leader_of(TP) == (2, 6)
    assert sender._turn() is not None                # noqa: SLF001
    [(node, retried)] = tasks.produces()             # same instant: no backoff
    assert node == 2 and retried[0] is batches[0]
    # a second NOT_LEADER at the same epoch backs off (first retry backoff: 100 ms, no jitter)
    finish(sender, 2, retried, not_leader_response(leader=2, epoch=6), clock)
    delay = sender._turn()                           # noqa: SLF001
    assert tasks.produces() == []
    assert delay == pytest.approx(200.0)             # second failure: 100 * 2**1
    clock.now += 200
    sender._turn()                                   # noqa: SLF001
    assert [n for n, _ in tasks.produces()] == [2]


async def test_stale_hint_is_ignored_and_the_retry_backs_off() -> None:
    sender, clock, tasks, results = await make()
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                   # noqa: SLF001
    [(_, batches)] = tasks.produces()
    finish(sender, 1, batches, not_leader_response(leader=2, epoch=4), clock)   # older epoch than known (5)
    assert sender.cluster.metadata.snapshot.leader_of(TP) == (1, 5)
    delay = sender._turn()                           # noqa: SLF001
    assert tasks.produces() == []
    assert delay == pytest.approx(100.0)


async def test_stale_metadata_after_a_hint_does_not_roll_back() -> None:
    sender, clock, tasks, results = await make()
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                   # noqa: SLF001
    [(_, batches)] = tasks.produces()
    finish(sender, 1, batches, not_leader_response(leader=2, epoch=6), clock)
    sender.cluster.metadata.update_from_metadata(metadata(leader=1, epoch=5), clock())   # stale refresh
    sender._turn()                                   # noqa: SLF001
    assert [n for n, _ in tasks.produces()] == [2]


@pytest.mark.parametrize("hint", [(2, 6), None])
async def test_stale_not_leader_after_metadata_moved_the_leader_retries_at_once(hint: tuple[int, int] | None
                                                                                ) -> None:
    """Issue 28's interleaving on the producer side: a Produce is out to node 1 (epoch 5) when a Metadata answer
    names node 2 (epoch 6); node 1's NOT_LEADER_OR_FOLLOWER then repeats (2, 6) or carries no hint. The hint
    does not advance the cache, but the batch saw the epoch rise since it was sent: it goes to node 2 at once."""
    sender, clock, tasks, results = await make()
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                   # noqa: SLF001
    [(node, batches)] = tasks.produces()
    assert node == 1
    sender.cluster.metadata.update_from_metadata(metadata(leader=2, epoch=6), clock())   # refresh: moved
    clock.now += 1
    leader, epoch = hint if hint is not None else (None, -1)
    finish(sender, 1, batches, not_leader_response(leader=leader, epoch=epoch), clock)
    sender._turn()                                   # noqa: SLF001
    assert [n for n, _ in tasks.produces()] == [2]   # same instant: no backoff


async def test_in_flight_batch_expires_at_its_delivery_deadline() -> None:
    sender, clock, tasks, results = await make()
    created = clock.now
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                   # noqa: SLF001
    [(_, batches)] = tasks.produces()
    clock.now = created + 3_000 - 0.1
    delay = sender._turn()                           # noqa: SLF001 - sleeps until the deadline
    assert results == [] and delay == pytest.approx(0.1)
    clock.now = created + 3_000
    sender._turn()                                   # noqa: SLF001
    assert isinstance(results[0], errors.DeliveryTimeoutError)
    finish(sender, 1, batches, ok_response(), clock)  # the late response is ignored for that batch
    assert len(results) == 1


async def test_unknown_leader_requests_a_metadata_refresh() -> None:
    sender, clock, tasks, results = await make()
    sender.cluster.metadata.update_from_metadata(metadata(leader=-1, epoch=7), clock())
    append(sender, clock, results)
    clock.now += 5
    before = sender.cluster.metadata.refresh_causes
    sender._turn()                                   # noqa: SLF001
    assert tasks.produces() == []
    assert "unknown-leader" in sender.cluster.metadata.refresh_causes and "unknown-leader" not in before


async def test_a_leader_missing_from_the_brokers_list_is_unknown_not_connected_to() -> None:
    """A broker that is down drops out of Metadata's brokers list while its partitions still name it (librdkafka's
    mock does this; so does Kafka until the controller moves leadership). There is no address to connect to:
    the partition waits for metadata like an unknown leader, instead of a connect task per turn that fails at
    once (which spun the loop and stalled every other broker's partitions)."""
    sender, clock, tasks, results = await make()
    down = metadata(leader=3, epoch=6)            # node 3 leads partition 0 but is not among brokers 1, 2
    sender.cluster.metadata.update_from_metadata(down, clock())
    sender.acc.append(TP, 0, None, b"v", (), lambda md, err: results.append(err or md), now=clock())
    live = TopicPartition("t", 1)
    sender.acc.append(live, 0, None, b"w", (), lambda md, err: results.append(err or md), now=clock())
    clock.now += 5
    for _ in range(20):
        sender._turn()                               # noqa: SLF001
    assert [c for c in tasks.calls if c[0] == "_connect"] == []
    assert [(node, [b.tp for b in batches]) for node, batches in tasks.produces()] == [(2, [live])]
    assert "unknown-leader" in sender.cluster.metadata.refresh_causes


def error_response(code: int) -> dict[str, Any]:
    response = ok_response()
    part = response["responses"][0]["partition_responses"][0]
    part["error_code"], part["base_offset"] = code, -1
    return response


class _TxnCore:
    def __init__(self) -> None:
        self.abortable_errors: list[BaseException] = []

    def abortable(self, error: BaseException) -> None:
        self.abortable_errors.append(error)


class _Txn:
    def __init__(self) -> None:
        self.core = _TxnCore()


@pytest.mark.parametrize("transactional", [False, True])
async def test_out_of_order_behind_a_failed_older_batch_is_retried_with_its_sequence(transactional: bool) -> None:
    """Java's canRetry: the later batch's gap closes with the older batch's retry, so it is retried with its
    sequence; in a transaction too (it made the transaction abortable before: a needless abort under chaos)."""
    sender, clock, tasks, results = await make(idempotent=True, batch_size=64)
    acknowledge_one(sender, clock, tasks)
    append(sender, clock, results, b"a" * 40)      # batch 0
    append(sender, clock, results, b"b" * 40)      # batch 1 (batch 0 is full)
    sender.acc.expedite([TP])                       # ready behind the batch in flight (not only lingered)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001 - batch 0 goes out
    sender._turn()                                  # noqa: SLF001 - batch 1 pipelined behind it
    sent = tasks.produces()
    assert [b.base_sequence for _, bs in sent for b in bs] == [1, 2]
    first, second = sent[0][1], sent[1][1]
    txn = _Txn()
    if transactional:
        sender.txn = txn                            # type: ignore[assignment]
    finish(sender, 1, first, error_response(errors.NotEnoughReplicasError.errno), clock)   # retriable
    finish(sender, 1, second, error_response(errors.OutOfOrderSequenceNumberError.errno), clock)
    assert results == []                            # nothing failed: both will be resent in order
    assert second[0].base_sequence == 2 and not second[0].done
    assert txn.core.abortable_errors == []


async def test_a_refused_first_batch_is_not_overtaken_while_the_leader_does_not_know_the_producer_id() -> None:
    """A Kafka broker takes any first sequence from a producer id it has no state for on the partition: had the
    second batch gone out behind the first, the first refused unwritten (NOT_ENOUGH_REPLICAS) would let the second
    be written ahead of it (Apache Kafka 4.4: records 28..70 of a partition ahead of record 1). The second goes
    only once the first's retry is acknowledged, so the broker sees sequence 0, then 1."""
    sender, clock, tasks, results = await make(idempotent=True, batch_size=64)
    append(sender, clock, results, b"a" * 40)       # batch 0
    append(sender, clock, results, b"b" * 40)       # batch 1 (batch 0 is full)
    sender.acc.expedite([TP])                       # both complete: only the gate holds batch 1
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    sender._turn()                                  # noqa: SLF001
    [(node, first)] = tasks.produces()              # batch 0 alone
    assert node == 1 and first[0].base_sequence == 0
    finish(sender, 1, first, error_response(errors.NotEnoughReplicasError.errno), clock)   # not written
    sender._turn()                                  # noqa: SLF001
    assert tasks.produces() == []                   # batch 1 does not overtake the retry's backoff
    clock.now += 100
    sender._turn()                                  # noqa: SLF001
    sender._turn()                                  # noqa: SLF001
    [(_, retried)] = tasks.produces()
    assert retried == first                         # the retry alone: batch 1 still waits for its answer
    finish(sender, 1, retried, ok_response(0), clock)
    sender._turn()                                  # noqa: SLF001
    [(_, second)] = tasks.produces()
    assert (second[0].producer_epoch, second[0].base_sequence) == (0, 1)
    finish(sender, 1, second, ok_response(1), clock)
    assert [md.offset for md in results] == [0, 1] and not sender._identity_reset_wanted   # noqa: SLF001


def init_pid_started(tasks: TaskRecorder) -> bool:
    return any(c[0] == "_init_producer_id" for c in tasks.calls)


async def test_a_failed_sequenced_batch_bumps_the_epoch() -> None:
    """KIP-360 as Java's idempotent producer does it: same producer id, epoch + 1, sequences from 0; no
    InitProducerId round trip."""
    sender, clock, tasks, results = await make(idempotent=True)
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    [(_, batches)] = tasks.produces()
    assert (batches[0].producer_epoch, batches[0].base_sequence) == (0, 0)
    finish(sender, 1, batches, error_response(errors.InvalidRecordError.errno), clock)   # not retriable
    assert isinstance(results[0], errors.InvalidRecordError)
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001 - nothing in flight: bump, then send
    assert (sender.acc.producer_id, sender.acc.producer_epoch) == (1000, 1)
    [(_, batches)] = tasks.produces()
    assert (batches[0].producer_id, batches[0].producer_epoch, batches[0].base_sequence) == (1000, 1, 0)
    assert not init_pid_started(tasks)


async def test_an_expired_sequenced_batch_bumps_the_epoch() -> None:
    sender, clock, tasks, results = await make(idempotent=True)
    created = clock.now
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    [(_, batches)] = tasks.produces()
    finish(sender, 1, batches, error_response(errors.NotEnoughReplicasError.errno), clock)  # retried later
    clock.now = created + 3_000
    sender._turn()                                  # noqa: SLF001 - expires while backing off
    assert isinstance(results[0], errors.DeliveryTimeoutError)
    sender._turn()                                  # noqa: SLF001
    assert (sender.acc.producer_id, sender.acc.producer_epoch) == (1000, 1)


async def test_an_expired_batch_whose_successor_was_acknowledged_needs_no_bump() -> None:
    """Java's sequence resolution: a batch expired in flight, but the broker then acknowledged the next one of
    its partition, which it only does after writing the expired one; the sequence has no gap, the epoch stays."""
    sender, clock, tasks, results = await make(idempotent=True, batch_size=64)
    acknowledge_one(sender, clock, tasks)
    first_created = clock.now
    append(sender, clock, results, b"a" * 40)               # batch 0
    clock.now += 5
    sender._turn()                                          # noqa: SLF001
    clock.now += 1_000
    append(sender, clock, results, b"b" * 40)               # batch 1, created 1 s later
    sender.acc.expedite([TP])                       # ready behind the batch in flight (not only lingered)
    clock.now += 5
    sender._turn()                                          # noqa: SLF001
    (_, b0), (_, b1) = tasks.produces()
    clock.now = first_created + 3_000
    sender._turn()                                          # noqa: SLF001 - batch 0 expires in flight
    assert isinstance(results[0], errors.DeliveryTimeoutError)
    append(sender, clock, results, b"c" * 40)               # waits: partition 0's sequence is unresolved
    clock.now += 5
    sender._turn()                                          # noqa: SLF001
    assert tasks.produces() == []
    finish(sender, 1, b1, ok_response(43), clock)           # sequence 1 accepted: sequence 0 was written
    sender._turn()                                          # noqa: SLF001
    assert sender.acc.producer_epoch == 0 and not sender._identity_reset_wanted   # noqa: SLF001
    [(_, b2)] = tasks.produces()
    assert (b2[0].producer_epoch, b2[0].base_sequence) == (0, 3)


async def test_a_gapped_partition_is_held_while_a_healthy_one_keeps_sending() -> None:
    """KIP-360 per partition: partition 0's expired batch waits for its own batches in flight; partition 1
    (another node) goes on sending meanwhile, then restarts at sequence 0 only after its own old-epoch batch."""
    sender, clock, tasks, results = await make(idempotent=True, batch_size=64)
    tp1 = TopicPartition("t", 1)

    def append1(value: bytes) -> None:
        sender.acc.append(tp1, 0, None, value, (), lambda md, err: results.append(err or md), now=clock())

    acknowledge_one(sender, clock, tasks)                   # p0 may pipeline (p1 sends one batch at a time)
    created = clock.now
    append(sender, clock, results, b"a" * 40)               # p0 batch 0
    clock.now += 5
    sender._turn()                                          # noqa: SLF001
    clock.now += 1_000
    append(sender, clock, results, b"b" * 40)               # p0 batch 1
    sender.acc.expedite([TP])                       # ready behind the batch in flight (not only lingered)
    clock.now += 5
    sender._turn()                                          # noqa: SLF001
    (_, p0b0), (_, p0b1) = tasks.produces()
    clock.now = created + 3_000
    sender._turn()                                          # noqa: SLF001 - p0 batch 0 expires in flight
    append1(b"x" * 40)
    clock.now += 5
    sender._turn()                                          # noqa: SLF001
    [(node, q0)] = tasks.produces()
    assert node == 2 and (q0[0].tp, q0[0].producer_epoch, q0[0].base_sequence) == (tp1, 0, 0)   # not held
    finish(sender, 1, p0b1, error_response(errors.OutOfOrderSequenceNumberError.errno), clock)  # a real gap
    sender._turn()                                          # noqa: SLF001 - p0 resolved: bump at once
    assert sender.acc.producer_epoch == 1
    clock.now += 100                                        # the retry's backoff
    sender._turn()                                          # noqa: SLF001
    resent = tasks.produces()
    assert [(b.tp, b.base_sequence) for _, bs in resent for b in bs] == [(TP, 0)]   # p0's retry, epoch 1
    append1(b"y" * 40)                                      # p1 still has its epoch-0 batch out: waits
    clock.now += 5
    sender._turn()                                          # noqa: SLF001
    assert tasks.produces() == []
    finish(sender, 2, q0, ok_response(0, partition=1), clock)
    sender._turn()                                          # noqa: SLF001
    [(node, q1)] = tasks.produces()
    assert node == 2 and (q1[0].producer_epoch, q1[0].base_sequence) == (1, 0)


@pytest.mark.parametrize("code", [errors.OutOfOrderSequenceNumberError.errno, errors.UnknownProducerIdError.errno])
async def test_a_real_sequence_gap_is_retried_under_a_bumped_epoch(code: int) -> None:
    """OUT_OF_ORDER_SEQUENCE_NUMBER with no older batch to blame, or UNKNOWN_PRODUCER_ID: the records are not
    failed; the batch goes again at sequence 0 of epoch + 1 (Java's TransactionManager.canRetry)."""
    sender, clock, tasks, results = await make(idempotent=True)
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    [(_, batches)] = tasks.produces()
    sender.acc._partitions[TP].next_sequence = 7    # noqa: SLF001 - pretend earlier batches were acknowledged
    finish(sender, 1, batches, error_response(code), clock)
    assert results == [] and not batches[0].done
    clock.now += 100                                # retry backoff
    sender._turn()                                  # noqa: SLF001
    [(_, retried)] = tasks.produces()
    assert retried[0] is batches[0]
    assert (retried[0].producer_epoch, retried[0].base_sequence) == (1, 0)
    finish(sender, 1, retried, ok_response(50), clock)
    assert results[0].offset == 50
    assert not sender._bump_unconfirmed             # noqa: SLF001 - the broker took the new epoch


@pytest.mark.parametrize("refusal", [errors.ProducerFencedError.errno, errors.OutOfOrderSequenceNumberError.errno])
async def test_a_refused_bump_falls_back_to_a_new_producer_id(refusal: int) -> None:
    """Tansu 0.6 answers a client-side bump with PRODUCER_FENCED (and InitProducerId(id, epoch) with an error):
    the producer then takes a fresh id, and later gaps skip the doomed bump."""
    sender, clock, tasks, results = await make(idempotent=True)
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    [(_, batches)] = tasks.produces()
    finish(sender, 1, batches, error_response(errors.OutOfOrderSequenceNumberError.errno), clock)
    clock.now += 100
    sender._turn()                                  # noqa: SLF001 - epoch 1, sequence 0
    [(_, retried)] = tasks.produces()
    assert retried[0].producer_epoch == 1
    finish(sender, 1, retried, error_response(refusal), clock)
    clock.now += 200
    sender._turn()                                  # noqa: SLF001 - the bump did not take: ask for a new id
    assert sender.acc.producer_id == -1
    assert tasks.produces() == [] and init_pid_started(tasks)
    assert results == []                            # still within delivery_timeout_ms: not failed
    sender.acc.set_producer_identity(2000, 0)       # what InitProducerId brought
    sender._init_pid_running = False                # noqa: SLF001
    tasks.calls.clear()
    clock.now += 400
    sender._turn()                                  # noqa: SLF001
    [(_, again)] = tasks.produces()
    assert (again[0].producer_id, again[0].producer_epoch, again[0].base_sequence) == (2000, 0, 0)
    finish(sender, 1, again, ok_response(3), clock)
    assert results[0].offset == 3
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    [(_, later)] = tasks.produces()
    finish(sender, 1, later, error_response(errors.InvalidRecordError.errno), clock)
    append(sender, clock, results)
    sender._turn()                                  # noqa: SLF001 - a new gap: straight to a new id, no bump
    assert sender.acc.producer_id == -1 and init_pid_started(tasks)


async def test_a_live_partition_refused_for_the_identity_goes_again_at_once() -> None:
    """A dead node's expired batch resets the identity; a live partition's next batch, sent under the bumped
    epoch on a broker that refuses bumps (Tansu), is refused: it goes again as soon as the new producer id is
    there, without a retry backoff (that stall hit every live partition at once)."""
    tp1 = TopicPartition("t", 1)
    sender, clock, tasks, results = await make(idempotent=True)
    created = clock.now
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001 - node 1's batch goes out and is never answered
    assert len(tasks.produces()) == 1
    clock.now = created + 3_000
    sender._turn()                                  # noqa: SLF001 - it expires in flight: reset (epoch 1)
    assert isinstance(results[0], errors.DeliveryTimeoutError)
    sender._turn()                                  # noqa: SLF001
    assert (sender.acc.producer_id, sender.acc.producer_epoch) == (1000, 1)
    sender.acc.append(tp1, 0, None, b"w", (), lambda md, err: results.append(err or md), now=clock())
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    [(node, live)] = tasks.produces()
    assert node == 2 and (live[0].producer_epoch, live[0].base_sequence) == (1, 0)
    refused = error_response(errors.ProducerFencedError.errno)
    refused["responses"][0]["partition_responses"][0]["index"] = 1
    finish(sender, 2, live, refused, clock)
    sender._turn()                                  # noqa: SLF001 - the bump did not take: a new id
    assert sender.acc.producer_id == -1 and init_pid_started(tasks)
    sender.acc.set_producer_identity(2000, 0)       # InitProducerId answered (same instant)
    sender._init_pid_running = False                # noqa: SLF001
    sender._turn()                                  # noqa: SLF001
    [(node, again)] = tasks.produces()              # no retry backoff
    assert node == 2 and again[0] is live[0]
    assert (again[0].producer_id, again[0].producer_epoch, again[0].base_sequence) == (2000, 0, 0)
    finish(sender, 2, again, ok_response(7, partition=1), clock)
    assert results[1].offset == 7


async def test_an_exhausted_epoch_takes_a_new_producer_id() -> None:
    sender, clock, tasks, results = await make(idempotent=True)
    sender.acc.set_producer_identity(1000, 32767)
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    [(_, batches)] = tasks.produces()
    finish(sender, 1, batches, error_response(errors.InvalidRecordError.errno), clock)
    append(sender, clock, results)
    sender._turn()                                  # noqa: SLF001
    assert sender.acc.producer_id == -1 and init_pid_started(tasks)
    assert tasks.produces() == []                   # the new record waits for the new id


async def test_the_bump_waits_for_in_flight_batches_and_holds_new_sends() -> None:
    """Batches in flight under the old epoch finish first (they keep their order); nothing new goes out under
    the gapped epoch meanwhile."""
    sender, clock, tasks, results = await make(idempotent=True, batch_size=64)
    acknowledge_one(sender, clock, tasks)
    append(sender, clock, results, b"a" * 40)       # batch 0
    append(sender, clock, results, b"b" * 40)       # batch 1
    sender.acc.expedite([TP])                       # ready behind the batch in flight (not only lingered)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001 - both go out, pipelined
    sent = tasks.produces()
    assert [b.base_sequence for _, bs in sent for b in bs] == [1, 2]
    finish(sender, 1, sent[0][1], error_response(errors.InvalidRecordError.errno), clock)   # batch 0 fails
    append(sender, clock, results, b"c" * 40)       # batch 2
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    assert tasks.produces() == [] and sender.acc.producer_epoch == 0      # batch 1 still in flight
    finish(sender, 1, sent[1][1], error_response(errors.OutOfOrderSequenceNumberError.errno), clock)
    clock.now += 100
    sender._turn()                                  # noqa: SLF001
    assert sender.acc.producer_epoch == 1
    resent = [b for _, bs in tasks.produces() for b in bs]
    assert resent[0] is sent[1][1][0] and resent[0].base_sequence == 0     # batch 1 first, from 0


async def test_one_turn_pipelines_ready_batches_up_to_the_in_flight_limit() -> None:
    sender, clock, tasks, results = await make(idempotent=True, batch_size=64)
    acknowledge_one(sender, clock, tasks)
    for i in range(8):
        append(sender, clock, results, bytes([65 + i]) * 40)     # 8 full batches of one partition
    sender._turn()                                  # noqa: SLF001 - full batches do not wait for linger
    sent = tasks.produces()
    assert len(sent) == 5                           # max_in_flight_requests_per_connection
    assert [b.base_sequence for _, bs in sent for b in bs] == [1, 2, 3, 4, 5]
    finish(sender, 1, sent[0][1], ok_response(1), clock)
    sender._turn()                                  # noqa: SLF001
    assert [b.base_sequence for _, bs in tasks.produces() for b in bs] == [6]


async def test_records_behind_a_request_in_flight_wait_for_its_answer_and_go_in_one_request() -> None:
    """Five small requests in flight made each record wait out up to five replication rounds on a Kafka broker
    (it answers a connection's requests one at a time); now they gather until the node answers."""
    sender, clock, tasks, results = await make(idempotent=True)
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    [(_, first)] = tasks.produces()
    for _ in range(3):
        append(sender, clock, results)
        clock.now += 5
        assert sender._turn() is not None           # noqa: SLF001 - a timer, never a busy loop
        assert tasks.produces() == []               # node 1 has not answered: nothing more goes to it
    finish(sender, 1, first, ok_response(0), clock)
    sender._turn()                                  # noqa: SLF001
    [(node, [batch])] = tasks.produces()
    assert node == 1 and batch.record_count == 3 and batch.base_sequence == 1


async def test_retry_whose_leader_moved_by_metadata_is_sent_in_the_same_turn() -> None:
    """A backing-off retry becomes ready when a metadata refresh raises its partition's epoch (no hint): the
    turn that sees the new epoch must send it, or no timer is left to wake the scheduler for it."""
    sender, clock, tasks, results = await make()
    append(sender, clock, results)
    clock.now += 5
    sender._turn()                                   # noqa: SLF001
    [(_, batches)] = tasks.produces()
    finish(sender, 1, batches, not_leader_response(leader=None, epoch=-1), clock)   # no hint: backs off
    assert sender._turn() == pytest.approx(100.0)    # noqa: SLF001
    sender.cluster.metadata.update_from_metadata(metadata(leader=2, epoch=6), clock())   # refresh: moved
    delay = sender._turn()                           # noqa: SLF001
    assert [n for n, _ in tasks.produces()] == [2]
    assert delay is None or delay > 0


async def test_a_gap_behind_a_retry_under_a_fresh_bump_is_not_a_refusal() -> None:
    """Under a bumped, not yet confirmed epoch, OUT_OF_ORDER_SEQUENCE_NUMBER for sequence 1 pipelined behind a
    retriable failure of sequence 0 is the usual "behind a retry" case, not the broker refusing the bump."""
    sender, clock, tasks, results = await make(idempotent=True, batch_size=64)
    acknowledge_one(sender, clock, tasks)           # an epoch bump of a known producer id pipelines at once
    append(sender, clock, results, b"a" * 40)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    [(_, first)] = tasks.produces()
    finish(sender, 1, first, error_response(errors.InvalidRecordError.errno), clock)      # gap: bump next
    append(sender, clock, results, b"b" * 40)
    append(sender, clock, results, b"c" * 40)
    sender.acc.expedite([TP])                       # ready behind the batch in flight (not only lingered)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    sent = tasks.produces()
    assert [(b.producer_epoch, b.base_sequence) for _, bs in sent for b in bs] == [(1, 0), (1, 1)]
    finish(sender, 1, sent[0][1], error_response(errors.NotEnoughReplicasError.errno), clock)
    finish(sender, 1, sent[1][1], error_response(errors.OutOfOrderSequenceNumberError.errno), clock)
    assert sender._local_bump_works and not sender._identity_reset_wanted    # noqa: SLF001
    assert len(results) == 1                        # only the InvalidRecord batch failed
    clock.now += 100
    sender._turn()                                  # noqa: SLF001
    resent = [(b.producer_epoch, b.base_sequence) for _, bs in tasks.produces() for b in bs]
    assert resent[0] == (1, 0)                      # same epoch, same sequences, in order


async def test_message_too_large_splits_the_batch_and_sends_the_pieces_at_once() -> None:
    """MESSAGE_TOO_LARGE for a batch of several records: no attempt is counted, no backoff, the pieces go out in the
    next turn with the refused batch's sequence numbers, and the batch pipelined behind it (answered
    OUT_OF_ORDER_SEQUENCE_NUMBER) is retried behind them. A lone record refused so fails with the error, and the
    gap it leaves is closed as any other (KIP-360: a new epoch for what follows)."""
    sender, clock, tasks, results = await make(idempotent=True, batch_size=4_200)
    acknowledge_one(sender, clock, tasks)           # offset 0, sequence 0
    for i in range(8):
        append(sender, clock, results, b"%d" % i + b"x" * 999)
    sender.acc.expedite([TP])                       # the second batch goes behind the first (not only lingered)
    clock.now += 5
    sender._turn()                                  # noqa: SLF001
    [big], [behind] = [bs for _, bs in tasks.produces()]     # 4 records each (the batch size), both in flight
    assert (big.record_count, big.base_sequence, behind.base_sequence) == (4, 1, 5)
    finish(sender, 1, [big], error_response(errors.MessageSizeTooLargeError.errno), clock)
    finish(sender, 1, [behind], error_response(errors.OutOfOrderSequenceNumberError.errno), clock)
    assert results == [] and not sender._identity_reset_wanted     # noqa: SLF001 - nothing failed, no gap
    sender._turn()                                  # noqa: SLF001 - same instant: no backoff for the pieces

    def sent() -> list[tuple[int, int, int]]:
        return [(b.record_count, b.base_sequence, b.attempts) for _, bs in tasks.produces() for b in bs]

    pieces = [b for b in sender.acc.batches() if b.piece]
    assert sent() == [(2, 1, 0)]                    # one piece at a time: the next waits for it
    finish(sender, 1, [pieces[0]], ok_response(1), clock)
    sender._turn()                                  # noqa: SLF001
    assert sent() == [(2, 3, 0)]
    finish(sender, 1, [pieces[1]], error_response(errors.MessageSizeTooLargeError.errno), clock)   # halved again
    sender._turn()                                  # noqa: SLF001
    assert sent() == [(1, 3, 0)]
    singles = [b for b in sender.acc.batches() if b.piece]
    finish(sender, 1, singles[:1], ok_response(3), clock)
    sender._turn()                                  # noqa: SLF001
    assert sent() == [(1, 4, 0)]
    finish(sender, 1, singles[1:2], error_response(errors.MessageSizeTooLargeError.errno), clock)   # one record
    assert len(results) == 4 and isinstance(results[-1], errors.MessageSizeTooLargeError)
    assert [md.offset for md in results[:3]] == [1, 2, 3]
    clock.now += 1_000
    sender._turn()                                  # noqa: SLF001
    [resent] = [b for _, bs in tasks.produces() for b in bs]
    assert resent is behind and (resent.producer_epoch, resent.base_sequence) == (1, 0)   # after the gap: new epoch


class _TxnVersionCore:
    transactional_id = "tx"

    def __init__(self, v2: bool) -> None:
        self.v2 = v2


@pytest.mark.parametrize(("transactions", "offered", "expected"), [
    (None, 12, 12), ("v1", 12, 11), ("v2", 12, 12), ("v1", 11, 11), ("v2", 11, 11)])
async def test_produce_v12_is_used_except_for_a_transaction_on_v1(transactions: str | None, offered: int,
                                                                  expected: int) -> None:
    """Produce v12 is v11 plus one meaning: a transactional producer's partition joins its transaction with it
    (KIP-890 part 2). A transaction on protocol v1 (its partitions added with AddPartitionsToTxn) stays on v11."""
    sender, clock, tasks, results = await make(idempotent=True)
    sender.cluster._conns[(1, Lane.SHARED)] = FakeConn(offered)     # noqa: SLF001
    if transactions is not None:
        txn = _Txn()
        txn.core = _TxnVersionCore(transactions == "v2")   # type: ignore[assignment]
        sender.txn = txn                                    # type: ignore[assignment]
    append(sender, clock, results)
    [batch] = sender.acc.drain(clock() + 5, sendable={1}, leader_of=sender.cluster.metadata.snapshot.leader_of
                               ).batches[1]
    sender._send(1, [batch], clock())                # noqa: SLF001
    [(_, _, version, body, _)] = sender._jobs        # noqa: SLF001 - the request formed for a worker
    assert version == expected
    assert body["transactional_id"] == (None if transactions is None else "tx")


class AnsweringConn(FakeConn):
    """A connection whose Produce is answered at once with success."""

    async def request(self, api_key: Any, body: Any, *, version: int) -> dict[str, Any]:
        return ok_response(7)


async def test_an_answer_sends_the_next_request_before_the_records_complete() -> None:
    """With a task per record (or gather), each completion schedules an application continuation, and the loop
    runs them in order: the next Produce must be started before the answered batch's records complete, or it
    waits behind every one of them (on Apache Kafka with acks=all: 10-25 continuations, 0.6-4 ms)."""
    sender, clock, tasks, _ = await make()
    order: list[str] = []
    sender._loop._turn, sender._loop._done = sender._turn, lambda: False   # noqa: SLF001 - as while it runs
    sender.acc.append(TP, 0, None, b"a", (), lambda md, err: order.append("first acked"), now=clock())
    clock.now += 5
    sender._turn()                                   # noqa: SLF001
    [(node, first)] = tasks.produces()
    sender.acc.append(TP, 0, None, b"b", (), lambda md, err: order.append("second acked"), now=clock())
    clock.now += 5                                   # lingered, but node 1 still owes the first answer
    sender._turn()                                   # noqa: SLF001
    assert tasks.produces() == []

    real_start_soon = tasks.start_soon

    def start_soon(fn: Any, *args: Any) -> None:
        order.append(f"started {getattr(fn, '__name__', fn)}")
        real_start_soon(fn, *args)

    tasks.start_soon = start_soon                    # type: ignore[method-assign]
    await sender._produce(node, AnsweringConn(), 11, {}, first)   # noqa: SLF001
    assert order == ["started _work", "first acked"]     # a worker for the next request, then the records
    [(_, second)] = tasks.produces()
    assert [b.record_count for b in second] == [1]


async def test_a_linger_end_lets_records_due_at_the_same_instant_join_the_batch() -> None:
    """A task per record offered in bursts: when a linger ends in the same event-loop pass as the application's
    timer that makes the next records' tasks runnable, the sender's turn runs after them, so those records join the
    batch instead of waiting a whole linger for the next one (the bench's p50 paid that on every other burst). Only
    a linger end settles: a delivery deadline is taken at once (a record due to expire is not held a pass)."""
    sender, clock, tasks, results = await make()
    append(sender, clock, results)
    assert sender._turn() == 5.0                                    # noqa: SLF001 - sleeps until the linger end
    assert sender._loop.settle_after_timer                          # noqa: SLF001
    clock.now += 5
    assert sender._turn() == 2_995.0                                # noqa: SLF001 - sent; next: its deadline
    assert [len(b) for _, b in tasks.produces()] == [1]
    assert not sender._loop.settle_after_timer                      # noqa: SLF001
    assert await what_a_timer_ended_turn_sees(settle=True) == "the record"


async def test_requests_are_sent_by_long_lived_workers_not_a_task_each() -> None:
    """A task spawned per Produce request cost ~12 % of the CPU of a record sent alone: a worker that finished
    one request takes the next, and the pool grows only while more requests are in flight than it has workers."""
    sender, clock, tasks, results = await make()
    sender.cluster._conns[(1, Lane.SHARED)] = AnsweringConn()     # noqa: SLF001
    spawned: list[str] = []
    async with anyio.create_task_group() as tg:
        def start_soon(fn: Any, *args: Any) -> None:
            spawned.append(getattr(fn, "__name__", fn))
            tg.start_soon(fn, *args)

        tasks.start_soon = start_soon                # type: ignore[method-assign]
        for i in range(10):
            append(sender, clock, results)
            clock.now += 5
            sender._turn()                           # noqa: SLF001
            for _ in range(20):
                if len(results) > i:
                    break
                await anyio.sleep(0)
        assert len(results) == 10 and not any(isinstance(r, BaseException) for r in results)
        tg.cancel_scope.cancel()
    assert spawned == ["_work"]
    assert sender._idle == deque()                    # noqa: SLF001 - a cancelled idle worker leaves no wake-up
