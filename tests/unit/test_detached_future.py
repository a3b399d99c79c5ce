"""``enqueue(..., on_delivery=cb)``: the batch calls ``cb`` itself and holds no future (``core.batch.Detached``).

A caller that drops the returned future (the delivery-callback idiom) leaves nothing per pending record for
Python's collector; a caller that keeps it gets the same answers as from any other future: its outcome read
from the batch when asked, or delivered by the batch once something waits on it. Driven against an offline
producer whose batches the test acknowledges, fails or splits itself, as a broker would.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import pytest

from akresil import errors
from akresil.delivery import DeliveryFuture, NotDeliveredError
from akresil.types import RecordMetadata, TopicPartition

from .test_producer_bulk import Offline, drain_all

T0 = TopicPartition("t", 0)
Outcomes = list[tuple[RecordMetadata | None, BaseException | None]]


async def enqueue(o: Offline, n: int, got: Outcomes, *, value: bytes = b"v" * 10) -> list[DeliveryFuture]:
    futs = []
    for _ in range(n):
        futs.append(await o.producer.enqueue("t", value, partition=0,
                                             on_delivery=lambda md, err: got.append((md, err))))
    return futs


def offline() -> Offline:
    """An offline producer whose futures belong to the running loop, as after ``start()`` under asyncio."""
    o = Offline(1)
    o.producer._loop = asyncio.get_running_loop()                   # noqa: SLF001
    return o


def ack(o: Offline) -> None:
    o.ack_all()


async def awaited(fut: DeliveryFuture) -> RecordMetadata:
    return await fut


async def test_a_dropped_future_is_freed_at_once_and_its_callback_still_runs() -> None:
    o = offline()
    got: Outcomes = []
    futs = await enqueue(o, 5, got)
    refs = [weakref.ref(f) for f in futs]
    del futs
    # the first record opened the batch (its future is held there); the next four joined it detached
    assert [r() is None for r in refs] == [False, True, True, True, True]
    ack(o)
    assert [md.offset for md, err in got if md is not None] == [0, 1, 2, 3, 4]
    assert all(err is None for _, err in got)


async def test_a_kept_detached_future_reads_its_outcome_from_the_batch() -> None:
    o = offline()
    got: Outcomes = []
    futs = await enqueue(o, 3, got)
    last = futs[-1]
    assert last._src is not None                                    # noqa: SLF001 - detached
    assert not last.done() and last.delivery_outcome() is None
    with pytest.raises(NotDeliveredError):
        last.result()
    assert "pending" in repr(last)
    ack(o)
    assert last.done() and not last.cancelled() and last.exception() is None
    assert [f.result().offset for f in futs] == [0, 1, 2]
    assert (await last).offset == 2
    md = last.result()
    assert (md.topic, md.partition, md.serialized_key_size, md.serialized_value_size) == ("t", 0, -1, 10)
    assert len(got) == 3                                            # each callback exactly once


async def test_awaiting_before_completion_takes_the_slot_and_the_callback_runs_once() -> None:
    o = offline()
    got: Outcomes = []
    futs = await enqueue(o, 4, got)
    waiter = asyncio.ensure_future(awaited(futs[2]))  # a task parks on it before the broker answers
    done_calls: list[DeliveryFuture] = []
    futs[3].add_done_callback(done_calls.append)
    await asyncio.sleep(0)
    assert futs[2]._src is None and futs[3]._src is None            # noqa: SLF001 - attached now
    ack(o)
    assert (await waiter).offset == 2
    await asyncio.sleep(0)
    assert done_calls == [futs[3]]
    assert sorted(md.offset for md, _ in got if md is not None) == [0, 1, 2, 3]
    assert len(got) == 4
    results = await asyncio.gather(*futs)
    assert [r.offset for r in results] == [0, 1, 2, 3]


async def test_a_failed_batch_reaches_kept_futures_and_callbacks() -> None:
    o = offline()
    got: Outcomes = []
    futs = await enqueue(o, 3, got)
    (batch,) = drain_all(o.acc, o.producer._cluster.clock())       # noqa: SLF001
    error = errors.DeliveryTimeoutError("expired in the test")
    batch.fail(error)
    assert [err for _, err in got] == [error] * 3
    for fut in futs:
        assert fut.done() and fut.exception() is error
        with pytest.raises(errors.DeliveryTimeoutError):
            await fut
    assert futs[1].delivery_outcome() == (None, error)


async def test_a_cancelled_detached_future_still_learns_the_outcome() -> None:
    o = offline()
    got: Outcomes = []
    futs = await enqueue(o, 2, got)
    assert futs[1].cancel() and futs[1].cancelled()
    assert not futs[1].cancel()
    with pytest.raises(asyncio.CancelledError):
        futs[1].result()
    ack(o)
    outcome = futs[1].delivery_outcome()
    assert outcome is not None and outcome[0] is not None and outcome[0].offset == 1
    assert len(got) == 2                       # the record was not recalled: its callback ran


async def test_a_split_batch_forwards_its_detached_records_to_the_pieces() -> None:
    o = offline()
    got: Outcomes = []
    futs = await enqueue(o, 6, got, value=b"x" * 100)
    clock = o.producer._cluster.clock                              # noqa: SLF001
    (batch,) = drain_all(o.acc, clock())
    pieces = o.acc.split(batch, clock())
    assert len(pieces) >= 2
    assert not futs[4].done()                                       # forwarded, still pending
    waiter = asyncio.ensure_future(awaited(futs[5]))
    await asyncio.sleep(0)
    (first,) = drain_all(o.acc, clock())           # the first piece in flight (the next waits behind it)
    assert first.record_count > 1 and o.acc.split(first, clock())    # refused too: split again
    for _ in range(10):                             # acknowledged piece after piece, in record order
        ack(o)
    assert [f.result().offset for f in futs] == [0, 1, 2, 3, 4, 5]
    assert (await waiter).offset == 5
    assert sorted(md.offset for md, _ in got if md is not None) == [0, 1, 2, 3, 4, 5]


async def test_a_callback_sees_the_other_records_of_its_batch_done() -> None:
    o = offline()
    seen: list[Any] = []
    futs: list[DeliveryFuture] = []

    def cb(md: RecordMetadata | None, err: BaseException | None) -> None:
        seen.append([f.done() for f in futs])
    for _ in range(3):
        futs.append(await o.producer.enqueue("t", b"v", partition=0, on_delivery=cb))
    ack(o)
    assert seen == [[True, True, True]] * 3
