"""Splitting a batch the broker refused as too large (MESSAGE_TOO_LARGE), as the Java producer does, with the sans-IO
accumulator and a fake clock: the records are re-encoded into smaller batches in their order, keep their
completions (single records and ``send_many`` ranges), their delivery deadline and, for an idempotent producer, the
sequence numbers the refused batch had; batches behind them keep theirs. A lone record is never split."""

from __future__ import annotations

import random
from typing import Any

import pytest

from akresil.core.accumulator import RecordAccumulator
from akresil.core.batch import BatchState, BulkCompletion
from akresil.core.events import BATCH_SPLIT, Hooks, RecordingHook
from akresil.protocol.records import read_batches
from akresil.types import TopicPartition

T0 = TopicPartition("t", 0)
LEAD = {T0: (1, 3)}.get


def make(**kw: Any) -> RecordAccumulator:
    kw.setdefault("linger_ms", 5)
    kw.setdefault("delivery_timeout_ms", 10_000)
    kw.setdefault("request_timeout_ms", 500)
    kw.setdefault("batch_size", 1_000_000)
    kw.setdefault("rng", random.Random(0))
    return RecordAccumulator(**kw)


def drain_one(acc: RecordAccumulator, now: float) -> Any:
    batches = acc.drain(now, sendable={1}, leader_of=LEAD).batches
    [batch] = batches[1]
    return batch


def acknowledge_one(acc: RecordAccumulator) -> None:
    """The leader acknowledges one batch (one record, sequence 0) of the current producer id, as it must before
    an idempotent partition pipelines (``RecordAccumulator._blocked``): the batches after it start at sequence 1."""
    acc.append(T0, 0, None, b"first", (), None, now=0)
    acc.expedite([T0])
    first = drain_one(acc, 0)
    assert first.base_sequence == 0 and acc.on_batch_success(first, 0, 0)


def decoded(batch: Any) -> list[tuple[int, bytes | None, bytes | None, list[Any]]]:
    [view] = list(read_batches(batch.payload.build()))
    return [(r.timestamp, r.key, r.value, list(r.headers)) for r in view.records()]


def state_of(batch: Any) -> tuple[int, int, int]:
    [view] = list(read_batches(batch.payload.build()))
    return view.producer_id, view.producer_epoch, view.base_sequence


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_refused_batch_is_split_in_order_and_keeps_completions_and_sequences(idempotent: bool) -> None:
    hook = RecordingHook()
    acc = make(enable_idempotence=idempotent, hooks=Hooks([hook]))
    if idempotent:
        acc.set_producer_identity(7, 2)
        acknowledge_one(acc)    # so that the newer batch below may be pipelined behind the one refused
    done: dict[int, Any] = {}
    # 20 single records (with headers and their own timestamps), then a send_many run of 30, then 10 singles
    for i in range(20):
        acc.append(T0, 1_000 + i, b"k%d" % i, b"v" * 200, [("h", b"%d" % i)],
                   lambda md, err, i=i: done.__setitem__(i, err or md), now=0)
    bulk = [(None, b"b" * 200) for _ in range(30)]
    sink = BulkCompletion(bulk)
    acc.append_many(T0, bulk, range(30), 0, 5_000, [], sink, now=0)
    for i in range(20, 30):
        acc.append(T0, 2_000 + i, None, b"w" * 200, (), lambda md, err, i=i: done.__setitem__(i, err or md), now=0)
    used_before = acc.buffered_bytes
    big = drain_one(acc, 10)
    records = decoded(big)
    assert big.record_count == 60 and big.base_sequence == (1 if idempotent else -1)
    # a newer batch of the partition, drained behind it (pipelined): it keeps its place and sequence
    acc.append(T0, 9_000, None, b"later", (), lambda md, err: done.__setitem__("later", err or md), now=20)
    acc.expedite([T0])          # ready behind the batch in flight (a lingered one would wait for its answer)
    later = drain_one(acc, 30)
    assert later.base_sequence == (61 if idempotent else -1)

    pieces = acc.split(big, now=40)

    assert len(pieces) >= 2 and big.done and not done          # nothing completed, nothing failed
    assert sum(p.record_count for p in pieces) == 60
    assert [r for p in pieces for r in decoded(p)] == records   # same records, same order, same timestamps
    assert all(len(p.payload.build()) <= len(big.payload.build()) // 2 for p in pieces)
    assert all(p.deadline == big.deadline and p.created_at == big.created_at for p in pieces)
    assert all(p.state is BatchState.QUEUED and p.attempts == 0 for p in pieces)
    # the pieces sit before the newer batch in creation order, and the queue gives them out in order
    assert [p.index for p in pieces] == sorted(p.index for p in pieces) and pieces[-1].index < later.index
    if idempotent:   # the refused batch's sequences, divided: the batch behind it stays valid
        seqs = [p.base_sequence for p in pieces]
        assert seqs[0] == 1 and all(seqs[i + 1] == seqs[i] + pieces[i].record_count for i in range(len(seqs) - 1))
        assert all(state_of(p) == (7, 2, p.base_sequence) for p in pieces)
    assert acc.incomplete_batches == len(pieces) + 1
    # the pieces hold the records' memory (their estimates and a header each) instead of the refused batch
    assert acc.buffered_bytes == sum(p.reserved_bytes for p in pieces) + later.reserved_bytes
    assert used_before - 61 <= sum(p.reserved_bytes for p in pieces) <= used_before + 61 * (len(pieces) - 1)
    [event] = hook.named(BATCH_SPLIT)
    assert event["records"] == 60 and event["batches"] == len(pieces)

    # the broker takes the pieces in order: offsets follow the records' order, each completion fires once
    offset = 0
    for expected in pieces:
        got = drain_one(acc, 50)
        assert got is expected
        if idempotent:
            assert state_of(got)[2] == got.base_sequence     # not re-sequenced when drained
        acc.on_batch_success(got, offset, 60)
        offset += got.record_count
    assert [done[i].offset for i in range(20)] == list(range(20))
    assert [done[i].offset for i in range(20, 30)] == list(range(50, 60))
    assert [md.offset for md in sink.results] == list(range(20, 50)) and sink.done
    assert [done[i].timestamp_ms for i in (0, 19, 29)] == [1_000, 1_019, 2_029]
    acc.on_batch_success(later, 60, 70)
    assert done["later"].offset == 60
    assert acc.incomplete_batches == 0 and acc.buffered_bytes == 0


def test_a_lone_record_is_not_split() -> None:
    acc = make()
    acc.append(T0, 1, None, b"x" * 500, (), None, now=0)
    batch = drain_one(acc, 10)
    assert acc.split(batch, now=20) == []


def test_pieces_go_one_at_a_time_and_are_halved_again_down_to_single_records() -> None:
    """A broker that takes only single records: each refusal halves the size (never cutting a record); a piece is
    drained only once no older batch of its partition is in flight (pipelined, a later piece could be written before
    an earlier one was refused), so the records land in their order."""
    acc = make(enable_idempotence=True)
    acc.set_producer_identity(1, 0)
    for i in range(16):
        acc.append(T0, i, None, b"%02d" % i + b"x" * 998, (), None, now=0)
    accepted: list[bytes] = []
    refusals = 0
    while drained := acc.drain(30, sendable={1}, leader_of=LEAD).batches:
        [batch] = drained[1]                       # never two pieces in flight at once
        if batch.record_count > 1:
            assert acc.split(batch, now=20)
            refusals += 1
        else:
            acc.on_batch_success(batch, len(accepted), now=20)
            accepted.append(decoded(batch)[0][2][:2])
            assert state_of(batch)[2] == len(accepted) - 1       # sequence = offset: nothing skipped
    assert accepted == [b"%02d" % i for i in range(16)]
    assert refusals <= 15 and acc.incomplete_batches == 0


def test_the_smallest_refused_size_of_a_topic_sizes_later_splits() -> None:
    """Once the broker refused a batch of S bytes for a topic, a later refused batch of that topic is cut straight
    into pieces of at most S/2, not halved again round after round."""
    acc = make()
    for i in range(8):
        acc.append(T0, i, None, b"x" * 1_000, (), None, now=0)
    first = drain_one(acc, 10)
    halves = acc.split(first, now=20)
    assert len(halves) == 2
    small = drain_one(acc, 30)                      # the first half (4 records) is refused too
    assert small is halves[0]
    quarters = acc.split(small, now=40)
    assert [q.record_count for q in quarters] == [2, 2]
    for q in quarters:
        acc.on_batch_success(drain_one(acc, 50), 0, 50)
    acc.on_batch_success(drain_one(acc, 50), 0, 50)   # the other half (4 records) went through
    for i in range(8):
        acc.append(T0, i, None, b"y" * 1_000, (), None, now=100)
    again = drain_one(acc, 110)
    assert [p.record_count for p in acc.split(again, now=120)] == [2, 2, 2, 2]
