"""Property tests: random appends, drains, broker answers, leader moves and expiries against a broker model.

Invariants: every record completes exactly once (success or error); successful records of a partition land in
the log in append order; nothing stays buffered at the end; late answers for expired batches are ignored.
"""

from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from akresil.core.accumulator import RecordAccumulator
from akresil.core.batch import ProducerBatch
from akresil.errors import DeliveryTimeoutError, InvalidRequestError, RequestTimedOutError
from akresil.types import TopicPartition

PARTITIONS = [TopicPartition("t", p) for p in range(3)]
NODES = (1, 2)
DELIVERY_TIMEOUT = 2000.0

STATS: dict[str, int] = defaultdict(int)

_OPS = {
    "append": st.tuples(st.just("append"), st.integers(0, 2), st.integers(1, 4)),
    "cycle": st.tuples(st.just("cycle"), st.sampled_from(NODES),
                       st.sampled_from(["ok"] * 6 + ["retriable"] * 3 + ["fatal", "lost"])),
    "advance": st.tuples(st.just("advance"), st.sampled_from([0.5, 3, 10, 60, 150, 400])),
    "drain": st.tuples(st.just("drain")),
    "respond": st.tuples(st.just("respond"), st.sampled_from(NODES),
                         st.sampled_from(["ok", "ok", "ok", "retriable", "fatal", "lost"])),
    "expire": st.tuples(st.just("expire")),
    "move": st.tuples(st.just("move"), st.integers(0, 2)),
    "flush": st.tuples(st.just("flush")),
}
# weights: mostly traffic, sometimes time jumps, leader moves and expiry
_KINDS = ["append"] * 6 + ["cycle"] * 6 + ["respond"] * 2 + ["drain", "advance", "expire", "move", "flush"]
op = st.sampled_from(_KINDS).flatmap(_OPS.__getitem__)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=10, max_size=120), idempotent=st.booleans(), seed=st.integers(0, 2**16))
def test_every_record_completes_once_and_order_is_kept(ops: list[tuple], idempotent: bool, seed: int) -> None:
    now = 0.0
    acc = RecordAccumulator(linger_ms=5, delivery_timeout_ms=DELIVERY_TIMEOUT, request_timeout_ms=500,
                            batch_size=120, buffer_memory=4000, retry_backoff_ms=20, retry_backoff_max_ms=200,
                            enable_idempotence=idempotent, max_in_flight=5 if idempotent else 1,
                            rng=random.Random(seed))
    if idempotent:
        acc.set_producer_identity(1000, 0)
    leaders = {tp: [NODES[tp.partition % 2], 0] for tp in PARTITIONS}
    appended: dict[TopicPartition, list[int]] = defaultdict(list)
    completed: dict[int, tuple] = {}
    log: dict[TopicPartition, list[int]] = defaultdict(list)      # the broker's partition logs (record ids)
    expected_seq: dict[TopicPartition, int] = defaultdict(int)
    outstanding: dict[int, list[ProducerBatch]] = {n: [] for n in NODES}   # per connection, FIFO
    lost: list[ProducerBatch] = []
    ids_of: dict[ProducerBatch, list[int]] = {}                   # batch -> record ids in batch order
    next_id = 0

    def callback(rid: int):
        def cb(md, err) -> None:
            assert rid not in completed, f"record {rid} completed twice"
            completed[rid] = (md, err)
        return cb

    def leader_of(tp: TopicPartition):
        node, epoch = leaders[tp]
        return node, epoch

    def respond(batch: ProducerBatch, outcome: str) -> None:
        if outcome == "ok":
            tp = batch.tp
            if idempotent and batch.base_sequence != expected_seq[tp]:
                acc.on_batch_error(batch, RequestTimedOutError("out of order: not written"), now,
                                   leader_epoch=leaders[tp][1])
                return
            base = len(log[tp])
            log[tp].extend(ids_of[batch])
            expected_seq[tp] += batch.record_count
            assert acc.on_batch_success(batch, base, now)
        elif outcome == "retriable":
            acc.on_batch_error(batch, RequestTimedOutError(), now, leader_epoch=leaders[batch.tp][1])
        else:
            acc.on_batch_error(batch, InvalidRequestError(), now)

    for step in ops:
        kind = step[0]
        if kind == "append":
            tp = PARTITIONS[step[1]]
            for _ in range(step[2]):
                rid = next_id
                next_id += 1
                res = acc.append(tp, int(now), None, b"%08d" % rid + b"x" * 20, callback=callback(rid), now=now)
                if not res.appended:
                    completed[rid] = (None, "rejected-buffer-full")   # the shell would block or raise
                    continue
                appended[tp].append(rid)
                ids_of.setdefault(res.batch, []).append(rid)
        elif kind == "cycle":       # linger passes, drain, and the node answers its oldest request
            now += 6
            for node, batches in acc.drain(now, sendable=set(NODES), leader_of=leader_of).batches.items():
                outstanding[node].extend(batches)
            queue = outstanding[step[1]]
            if queue:
                batch = queue.pop(0)
                if step[2] == "lost":
                    lost.append(batch)
                elif not batch.done:
                    respond(batch, step[2])
        elif kind == "advance":
            now += step[1]
        elif kind == "drain":
            for node, batches in acc.drain(now, sendable=set(NODES), leader_of=leader_of).batches.items():
                outstanding[node].extend(batches)
        elif kind == "respond":
            queue = outstanding[step[1]]
            if queue:
                batch = queue.pop(0)
                if step[2] == "lost":
                    lost.append(batch)
                elif batch.done:
                    assert not acc.on_batch_success(batch, 0, now)      # expired meanwhile: ignored
                else:
                    respond(batch, step[2])
        elif kind == "expire":
            for exp in acc.expire(now):
                assert now >= exp.batch.deadline
        elif kind == "move":
            tp = PARTITIONS[step[1]]
            leaders[tp][0] = NODES[(NODES.index(leaders[tp][0]) + 1) % 2]
            leaders[tp][1] += 1
        elif kind == "flush":
            acc.begin_flush()
            acc.end_flush()
        wake = acc.next_wakeup(now)
        assert wake is None or wake >= 0

    # the end: every deadline passes, so expiry alone must complete everything (queued, backing off or in
    # flight); answers that arrive after that are ignored
    now += DELIVERY_TIMEOUT + 1
    acc.expire(now)
    assert acc.incomplete_batches == 0 and acc.buffered_bytes == 0
    assert acc.next_wakeup(now) is None
    for batch in lost + [b for q in outstanding.values() for b in q]:
        assert acc.on_batch_error(batch, RequestTimedOutError(), now) is None
        assert not acc.on_batch_success(batch, 0, now)
    STATS["written"] += sum(len(ids) for ids in log.values())
    STATS["runs"] += 1

    # every record completed exactly once
    assert set(completed) == set(range(next_id))
    for tp, ids in log.items():
        assert ids == sorted(ids), f"{tp}: log order {ids} differs from append order"
        assert len(ids) == len(set(ids)), f"{tp}: duplicates in the log"
        for offset, rid in enumerate(ids):
            md, err = completed[rid]
            assert err is None and md.offset == offset and md.partition == tp.partition
    written = {rid for ids in log.values() for rid in ids}
    for rid, (md, err) in completed.items():
        if rid not in written:
            assert md is None and err is not None
            assert err == "rejected-buffer-full" or isinstance(err, (DeliveryTimeoutError, InvalidRequestError,
                                                                     RequestTimedOutError))
