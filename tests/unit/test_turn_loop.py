"""TurnLoop.turn_now: a turn taken from an answer's handler wakes the loop only for a sooner timer; a turn that asks
for it (``settle_after_timer``) runs, when its timer ends, after what the same event-loop pass made runnable."""

from __future__ import annotations

import asyncio
import time

from akresil.net.signals import Broadcast, TurnLoop

from .conftest import BackendLookups


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_turn_now_wakes_the_loop_only_for_a_sooner_timer() -> None:
    loop = TurnLoop()
    delays: list[float | None] = [60_000.0]        # what the next turns return (the last one for good)
    turns: list[str] = []
    stop = False

    def turn() -> float | None:
        turns.append("turn")
        return delays.pop(0) if len(delays) > 1 else delays[0]

    task = asyncio.create_task(loop.run(turn, done=lambda: stop))
    await _settle()
    assert turns == ["turn"]                        # the loop sleeps for a minute

    delays[0] = 120_000.0                           # a later timer: no second pass
    loop.turn_now()
    await _settle()
    assert turns == ["turn", "turn"]

    delays[0] = None                                # no timer at all: no second pass either
    loop.turn_now()
    await _settle()
    assert len(turns) == 3

    # a sooner timer: turn_now's turn asks for 1 ms, so the loop wakes and takes its own turn, which asks for no
    # timer (a 1 ms one asked again would add a turn per elapsed millisecond: as many as the machine's load)
    delays[:] = [1.0, None]
    loop.turn_now()
    await _settle()
    assert len(turns) == 5

    stop = True
    loop.wake()
    await asyncio.wait_for(task, 5)


async def test_turn_now_outside_a_running_loop_takes_no_turn() -> None:
    loop = TurnLoop()
    ran: list[int] = []

    def turn() -> float | None:
        ran.append(1)
        return None

    loop.turn_now()                                 # no loop yet: nothing is run
    task = asyncio.create_task(loop.run(turn, done=lambda: len(ran) >= 1))
    await _settle()
    loop.wake()
    await asyncio.wait_for(task, 5)
    loop.turn_now()                                 # the loop has ended: its turn is not taken again
    assert ran == [1]


async def test_turn_now_on_a_done_loop_only_wakes_it_so_it_ends() -> None:
    loop = TurnLoop()
    stop = False
    turns: list[int] = []

    def turn() -> float | None:
        turns.append(1)
        return None

    task = asyncio.create_task(loop.run(turn, done=lambda: stop))
    await _settle()
    stop = True
    loop.turn_now()                                 # done: no turn is taken, the loop is woken and ends
    await asyncio.wait_for(task, 5)
    assert turns == [1]


async def test_turns_and_broadcasts_resolve_the_back_end_once(backend_lookups: BackendLookups) -> None:
    """A sleeping turn made four look-ups of the running back-end through anyio's generic Event(),
    current_time() and move_on_after(); the loop resolves them when it starts."""
    loop = TurnLoop()
    fired = Broadcast()
    turns: list[int] = []
    stop = False

    def turn() -> float | None:
        turns.append(1)
        return 0.01 if len(turns) < 40 else None

    task = asyncio.create_task(loop.run(turn, done=lambda: stop))
    fired.fire()
    while len(turns) < 3:
        await asyncio.sleep(0)
    backend_lookups.start()
    while len(turns) < 40:
        await asyncio.sleep(0.001)
        fired.fire()
    backend_lookups.stop()
    stop = True
    loop.wake()
    await task
    assert backend_lookups.calls == 0



async def what_a_timer_ended_turn_sees(settle: bool) -> str:
    """A turn sleeps 5 ms; an application timer due 1 ms earlier makes a task runnable that appends a record
    one callback later (a task woken by its ``sleep`` creating the task that sends). The loop is held past both
    timers, so they run out in the same pass, the application's first: what does the next turn see?"""
    loop = asyncio.get_running_loop()
    tl = TurnLoop()
    appended: list[str] = []
    seen: list[str] = []

    def turn() -> float | None:
        if not seen:
            seen.append("slept")
            due = loop.time() + 0.004
            loop.call_at(due, lambda: loop.call_soon(lambda: loop.call_soon(appended.append, "record")))
            loop.call_soon(time.sleep, 0.02)           # a busy loop: both timers are due when it looks again
            tl.settle_after_timer = settle
            return 5.0
        seen.append("the record" if appended else "nothing")
        loop.call_soon(tl.wake)                        # so the loop looks at done() again and ends
        return None

    await asyncio.wait_for(tl.run(turn, done=lambda: len(seen) >= 2), 5)
    return seen[1]


async def test_a_timer_ending_turn_lets_what_the_same_pass_made_runnable_run_first() -> None:
    """The producer's linger end and an application's send due at the same instant: without settling the turn
    drains the batch before the task appends, and that record waits a whole linger more."""
    assert await what_a_timer_ended_turn_sees(settle=True) == "the record"


async def test_without_settling_a_timer_ending_turn_runs_before_them() -> None:
    """Any other timer (a delivery deadline, the fetchers') takes its turn at once."""
    assert await what_a_timer_ended_turn_sees(settle=False) == "nothing"
