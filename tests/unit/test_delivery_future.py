"""DeliveryFuture speaks the running backend's future protocol (asyncio's, or trio through events)."""

from __future__ import annotations

import asyncio
import gc
import sys

import pytest
import trio

from akresil import errors
from akresil.delivery import DeliveryFuture, NotDeliveredError
from akresil.types import RecordMetadata


def md(offset: int) -> RecordMetadata:
    return RecordMetadata("t", 0, offset, 1000, 1, 1)


def fresh(n: int = 1, **kw: object) -> list[DeliveryFuture]:
    loop = asyncio.get_running_loop()
    return [DeliveryFuture(loop, **kw) for _ in range(n)]   # type: ignore[arg-type]


def complete_later(futs: list[DeliveryFuture], error: BaseException | None = None) -> None:
    loop = asyncio.get_running_loop()
    for i, fut in enumerate(futs):
        loop.call_soon(fut, None if error else md(i), error)


async def test_is_an_asyncio_future_and_gather_wraps_no_task() -> None:
    futs = fresh(50)
    assert all(asyncio.isfuture(f) for f in futs)
    created: list[object] = []
    loop = asyncio.get_running_loop()
    factory = loop.get_task_factory()
    loop.set_task_factory(lambda lp, coro, **kw: created.append(coro) or asyncio.Task(coro, loop=lp, **kw))
    try:
        complete_later(futs)
        results = await asyncio.gather(*futs)
    finally:
        loop.set_task_factory(factory)
    assert [r.offset for r in results] == list(range(50))
    assert created == []       # gather took the futures as they are


async def test_await_returns_metadata_and_raises_the_error() -> None:
    ok, bad = fresh(2)
    loop = asyncio.get_running_loop()
    loop.call_soon(ok, md(7), None)
    loop.call_soon(bad, None, errors.DeliveryTimeoutError("expired"))
    assert (await ok).offset == 7
    with pytest.raises(errors.DeliveryTimeoutError):
        await bad
    assert ok.done() and not ok.cancelled() and ok.exception() is None


async def test_shared_error_does_not_grow_a_traceback_per_raise() -> None:
    """A batch's records share one exception: raising it from many tasks must not chain their frames."""
    futs = fresh(200)
    shared = errors.DeliveryTimeoutError("expired")

    async def waiter(f: DeliveryFuture) -> None:
        with pytest.raises(errors.DeliveryTimeoutError):
            await f

    tasks = [asyncio.create_task(waiter(f)) for f in futs]
    await asyncio.sleep(0)
    complete_later(futs, shared)
    await asyncio.gather(*tasks)
    depth, tb = 0, shared.__traceback__
    while tb is not None:
        depth, tb = depth + 1, tb.tb_next
    assert depth < 10


async def test_wait_and_as_completed() -> None:
    futs = fresh(5)
    complete_later(futs[:3])
    done, pending = await asyncio.wait(futs, timeout=0.5)
    assert done == set(futs[:3]) and pending == set(futs[3:])
    complete_later(futs[3:])
    seen = [(await f).offset for f in asyncio.as_completed(futs[3:])]
    assert sorted(seen) == [0, 1]


async def test_wait_for_timeout_cancels_the_wait_not_the_record() -> None:
    got: list[tuple[object, object]] = []
    (fut,) = fresh(1, on_delivery=lambda m, e: got.append((m, e)))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(fut, 0.01)
    assert fut.cancelled() and fut.delivery_outcome() is None
    fut(md(3), None)                       # the producer still reports the record's outcome
    assert got == [(md(3), None)]
    assert fut.delivery_outcome() == (md(3), None)
    assert fut.cancelled()                 # the future stays cancelled, as asyncio's would


async def test_cancelling_an_awaiting_task_is_prompt_and_keeps_the_outcome() -> None:
    got: list[object] = []
    (fut,) = fresh(1, on_delivery=lambda m, e: got.append(m))
    task = asyncio.create_task(fut.wait())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    fut(md(1), None)
    assert got == [md(1)]


async def test_shield_keeps_the_future_when_the_waiter_is_cancelled() -> None:
    (fut,) = fresh(1)
    async def waiter() -> RecordMetadata:
        return await asyncio.shield(fut)

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not fut.cancelled()
    fut(md(2), None)
    assert (await fut).offset == 2


async def test_timeout_context_manager() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("asyncio.timeout needs 3.11")
    (fut,) = fresh(1)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await fut


async def test_done_callbacks_run_from_the_loop_in_order_and_can_be_removed() -> None:
    (fut,) = fresh(1)
    calls: list[str] = []
    a, b, c = (lambda f: calls.append("a")), (lambda f: calls.append("b")), (lambda f: calls.append("c"))
    fut.add_done_callback(a)
    fut.add_done_callback(b)
    fut.add_done_callback(c)
    assert fut.remove_done_callback(a) == 1
    fut(md(0), None)
    assert calls == []                     # scheduled with call_soon, as asyncio does
    await asyncio.sleep(0)
    assert calls == ["b", "c"]
    fut.add_done_callback(a)               # already done: scheduled at once
    await asyncio.sleep(0)
    assert calls == ["b", "c", "a"]


async def test_result_before_delivery_and_completion_twice() -> None:
    (fut,) = fresh(1)
    with pytest.raises(asyncio.InvalidStateError):
        fut.result()
    with pytest.raises(errors.IllegalStateError):
        fut.exception()
    assert isinstance(NotDeliveredError("x"), asyncio.InvalidStateError)
    fut(md(5), None)
    fut(None, errors.DeliveryTimeoutError("late"))     # a second report changes nothing
    assert fut.result().offset == 5
    assert not fut.cancel()


async def test_on_delivery_raising_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def boom(m: object, e: object) -> None:
        raise ValueError("user bug")
    (fut,) = fresh(1, on_delivery=boom)
    fut(md(0), None)
    assert fut.result().offset == 0
    assert "on_delivery callback" in caplog.text


async def test_one_awaited_record_costs_few_gc_tracked_objects() -> None:
    """The objects the cyclic GC scans per pending awaited record (a broker down means thousands of them)."""
    loop = asyncio.get_running_loop()

    async def wait_on(f: object) -> None:
        await f  # type: ignore[misc]

    async def tracked_per_waiter(futs: list) -> float:  # type: ignore[type-arg]
        gc.collect()
        before = len(gc.get_objects())
        tasks = [asyncio.create_task(wait_on(f)) for f in futs]
        await asyncio.sleep(0)
        gc.collect()
        per_record = (len(gc.get_objects()) - before) / len(futs)
        for f in futs:
            f.set_result(None) if isinstance(f, asyncio.Future) else f(md(0), None)
        await asyncio.gather(*tasks)
        return per_record

    futs = fresh(2000)
    assert all(asyncio.ensure_future(f) is f for f in futs)      # the futures themselves: no task
    await tracked_per_waiter([loop.create_future() for _ in range(2000)])   # warm-up: first tasks cost more
    ours = await tracked_per_waiter(futs)
    plain = await tracked_per_waiter([loop.create_future() for _ in range(2000)])
    # a task parked on a DeliveryFuture costs what one parked on an asyncio.Future does (task, context,
    # coroutine, await iterator, wake-up callback); the event-based wait it replaces added seven more objects
    assert ours <= plain + 0.5


# ---------------------------------------------------------------------------------------------- trio

def test_trio_await_callbacks_and_cancel() -> None:
    async def main() -> None:
        got: list[object] = []
        fut = DeliveryFuture(None, on_delivery=lambda m, e: got.append(m))
        order: list[str] = []
        fut.add_done_callback(lambda f: order.append("cb"))
        results: list[RecordMetadata] = []

        async def waiter() -> None:
            results.append(await fut)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.sleep(0.01)
            fut(md(4), None)
        assert results == [md(4)] and got == [md(4)] and order == ["cb"]
        with pytest.raises(RuntimeError):
            fut.get_loop()

        # trio cancellation of a waiter leaves the record's future untouched
        other = DeliveryFuture(None)
        with trio.move_on_after(0.01):
            await other
        assert not other.done() and not other.cancelled()
        other(md(5), None)
        assert (await other).offset == 5

    trio.run(main)


async def test_many_tasks_await_one_future_and_a_done_future_returns_at_once() -> None:
    (fut,) = fresh(1)
    tasks = [asyncio.create_task(fut.wait()) for _ in range(5)]
    await asyncio.sleep(0)
    assert not any(t.done() for t in tasks)
    fut(md(9), None)
    assert [r.offset for r in await asyncio.gather(*tasks)] == [9] * 5
    assert (await fut).offset == 9          # awaiting a done future does not suspend


async def test_not_mistaken_for_a_coroutine() -> None:
    import collections.abc
    (fut,) = fresh(1)
    assert not asyncio.iscoroutine(fut) and not isinstance(fut, collections.abc.Coroutine)
    fut(md(0), None)


async def test_a_large_completion_wakes_waiters_in_slices_with_io_in_between() -> None:
    """Thousands of records completed at once (a recovered broker's backlog) must not run every waiter's
    callback in one loop pass: other connections' responses are read between slices."""
    from akresil import delivery
    futs = fresh(3 * delivery._SLICE)
    passes: list[int] = []
    for f in futs:
        f.add_done_callback(lambda fut: passes.append(ticks[0]))
    ticks = [0]

    async def ticker() -> None:
        while len(passes) < len(futs):
            ticks[0] += 1
            await asyncio.sleep(0)

    t = asyncio.create_task(ticker())
    for f in futs:
        f(md(0), None)
    await t
    assert len(set(passes)) >= 3          # at least three loop passes, not one
    assert passes == sorted(passes)       # in completion order


async def test_callbacks_due_add_no_object_per_record_for_the_collector() -> None:
    """Gathering records that completed ahead queues a done-callback per record at once: they wait in a flat
    queue, not a tuple each, which every full collection would walk until its turn came."""
    futs = fresh(2000)
    ran: list[DeliveryFuture] = []
    for f in futs:
        f.add_done_callback(ran.append)
    landed = md(0)                        # one shared result: only the queue itself may grow
    gc.collect()
    before = len(gc.get_objects())
    for f in futs:
        f(landed, None)
    grown = len(gc.get_objects()) - before
    assert grown < 50, f"{grown} objects tracked for 2000 queued callbacks"
    while len(ran) < len(futs):
        await asyncio.sleep(0)
    assert ran == futs                    # in completion order, each once


async def test_stepping_with_next_or_send_is_the_same_step() -> None:
    """An ``await`` steps the future with ``__next__`` (no generator): the very step ``send`` is."""
    assert DeliveryFuture.__next__ is DeliveryFuture.send
    ok, bad, gone = fresh(3)
    assert ok.__next__() is ok and ok._asyncio_future_blocking is True
    ok(md(3), None)
    with pytest.raises(StopIteration) as stop:
        ok.__next__()
    assert stop.value.value == md(3)
    bad(None, errors.DeliveryTimeoutError("expired"))
    with pytest.raises(errors.DeliveryTimeoutError):
        bad.__next__()
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        gone.__next__()
    gone(md(4), None)                    # the outcome after a cancel is kept, the step still says cancelled
    with pytest.raises(asyncio.CancelledError):
        gone.send(None)
    assert gone.delivery_outcome() == (md(4), None)
