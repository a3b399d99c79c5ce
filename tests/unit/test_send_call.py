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
    with pytest.raises((ValueError, errors.KafkaError), match="partition"):
        await o.producer.send("t", b"v", partition=7)


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
