"""``Producer.send`` under asyncio returns a ``SendCall``: a coroutine that is also the record's future, so a task
per pending record keeps one akresil object alive, not a coroutine frame plus a future (issue 35 item 6). Runs
against the offline producer of ``test_producer_bulk`` (the test acknowledges batches as a broker would)."""

from __future__ import annotations

import asyncio
import gc
import warnings
import types
from typing import Any

import pytest

from akresil import errors
from akresil.delivery import DeliveryFuture
from akresil.send_call import SendCall

from .test_producer_bulk import Offline


def offline(**config: Any) -> Offline:
    o = Offline(**config)
    o.producer._loop = asyncio.get_running_loop()       # noqa: SLF001 - what start() sets under asyncio
    return o


def akresil_objects() -> int:
    """GC-tracked objects of akresil's own: instances of its classes and its coroutines."""
    n = 0
    for obj in gc.get_objects():
        if isinstance(obj, types.CoroutineType):
            n += "akresil" in obj.cr_code.co_filename
        else:
            module = getattr(type(obj), "__module__", None)
            n += isinstance(module, str) and module.startswith("akresil")
    return n


async def test_a_pending_send_keeps_one_akresil_object() -> None:
    o = offline()
    producer = o.producer

    async def one(i: int) -> int:
        return (await producer.send("t", b"v", partition=i % 3)).offset

    warm = asyncio.create_task(one(0))
    await o.run(warm)
    gc.collect()
    before = akresil_objects()
    tasks = [asyncio.create_task(one(i)) for i in range(300)] + \
            [asyncio.create_task(producer.send("t", b"v", partition=i % 3)) for i in range(300)]
    await asyncio.sleep(0)
    gc.collect()
    per_record = (akresil_objects() - before) / len(tasks)
    assert per_record == pytest.approx(1.0, abs=0.05)     # the SendCall only (it was a coroutine + a future)
    o.ack_all()
    results = await asyncio.gather(*tasks)
    assert len(results) == 600 and sum(b.record_count for b in o.sent) == 601


async def test_it_is_a_coroutine_to_asyncio_and_lazy_like_one() -> None:
    o = offline()
    call = o.producer.send("t", b"v", partition=0)
    assert isinstance(call, SendCall)
    assert asyncio.iscoroutine(call) and not asyncio.isfuture(call)
    call.close()                                           # never awaited: nothing was buffered
    assert not o.acc.incomplete_batches
    o.ack_all()
    assert o.sent == []
    md = await o.run(asyncio.gather(o.producer.send("t", b"a", partition=1), o.producer.send("t", b"b", partition=1)))
    assert [m.offset for m in md] == [0, 1] and all(m.partition == 1 for m in md)
    assert (await o.run(asyncio.wait_for(o.producer.send("t", b"c", partition=1), 5))).offset == 2


async def test_bad_input_raises_at_the_await() -> None:
    o = offline()
    call = o.producer.send("t", 12345, partition=0)         # type: ignore[arg-type]
    with pytest.raises(TypeError, match="value"):
        await call
    # a partition beyond the cached metadata is checked against an answer asked for now: the test plays the
    # broker and answers (without an answer the send would wait max_block_ms, 60 s, for one)
    task = asyncio.ensure_future(o.producer.send("t", b"v", partition=7))
    await asyncio.sleep(0)
    assert not task.done()
    o.answer_metadata(3)
    with pytest.raises(ValueError, match="partition 7"):
        await asyncio.wait_for(task, 5)


async def test_a_partition_missing_from_its_topics_first_metadata_raises_at_once() -> None:
    # the producer knew nothing of the topic, so the Metadata this send asks for is the fresh answer: a
    # partition beyond it is bad input at once (it waited max_block_ms, 60 s, and then blamed the topic)
    o = offline()
    task = asyncio.ensure_future(o.producer.send("u", b"v", partition=7))
    await asyncio.sleep(0)
    assert not task.done()
    o.answer_metadata(3, topic="u")
    with pytest.raises(ValueError, match="partition 7 given for topic 'u' is not in \\[0, 3\\)"):
        await asyncio.wait_for(task, 5)


async def test_cancelling_the_waiter_does_not_recall_the_record() -> None:
    o = offline()
    task = asyncio.create_task(o.producer.send("t", b"v", partition=2))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    o.ack_all()
    assert sum(b.record_count for b in o.sent) == 1


async def test_metadata_not_known_yet_takes_the_waiting_path() -> None:
    o = offline(max_block_ms=5000)
    task = asyncio.create_task(o.producer.send("later", b"v", partition=0))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done() and "waiting" in repr(task.get_coro())   # driving the producer's waiting coroutine
    task.cancel()                                                   # reaches that coroutine's await
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not o.acc.incomplete_batches


async def test_a_call_never_awaited_warns_and_sends_nothing() -> None:
    o = offline()
    call = o.producer.send("orders", b"v", partition=0)
    with pytest.warns(RuntimeWarning, match=r"Producer.send\('orders', ...\) was never awaited"):
        del call
        gc.collect()
    assert not o.acc.incomplete_batches


async def test_a_started_or_closed_call_does_not_warn() -> None:
    o = offline()
    closed = o.producer.send("t", b"v", partition=0)
    closed.close()                                          # closed explicitly: the caller chose not to send
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        md = await o.run(asyncio.ensure_future(o.producer.send("t", b"w", partition=0)))
        del closed
        gc.collect()
    assert md.offset == 0


async def test_a_call_sets_every_slot_of_the_future_it_is() -> None:
    """``SendCall.__init__`` sets ``DeliveryFuture``'s slots itself (no ``super().__init__`` per record): none may be
    left unset, or reading it raises ``AttributeError`` far from the cause."""
    o = offline()
    call = o.producer.send("t", b"v", partition=0)
    assert isinstance(call, SendCall)
    names = [n for cls in type(call).__mro__ for n in getattr(cls, "__slots__", ()) if n != "__weakref__"]
    assert len(names) > 10
    for name in names:
        getattr(call, name)           # raises AttributeError for a slot never set
    fresh = DeliveryFuture(asyncio.get_running_loop())
    assert {n: getattr(call, n) for n in names if n in DeliveryFuture.__slots__} == \
        {n: getattr(fresh, n) for n in names if n in DeliveryFuture.__slots__ and n != "_asyncio_future_blocking"} | \
        {"_asyncio_future_blocking": None}
    call.close()


async def test_stepping_with_next_or_send_is_the_same_step() -> None:
    """A task and an ``await`` step a non-generator with ``__next__``: it must be the very step ``send`` is (first
    step buffers the record and parks; then the metadata, the error or CancelledError)."""
    o = offline()
    ok = o.producer.send("t", b"v", partition=0)
    assert type(ok).__next__ is type(ok).send
    assert ok.__next__() is ok and ok._asyncio_future_blocking is True        # buffered, pending: park on it
    assert o.acc.incomplete_batches
    o.ack_all()
    with pytest.raises(StopIteration) as stop:
        ok.__next__()
    assert stop.value.value.offset == 0

    bad = o.producer.send("t", b"v", partition=1)
    assert bad.send(None) is bad
    error = errors.DeliveryTimeoutError("expired")
    bad(None, error)
    with pytest.raises(errors.DeliveryTimeoutError):
        bad.__next__()

    gone = o.producer.send("t", b"v", partition=2)
    assert gone.__next__() is gone
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        gone.__next__()
    o.ack_all()                          # the record itself still goes
    assert gone.delivery_outcome() is not None and sum(b.record_count for b in o.sent) == 3
