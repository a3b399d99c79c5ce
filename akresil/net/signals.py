"""The two wake-up primitives of the I/O shell's scheduling tasks.

``TurnLoop`` is the loop every scheduler runs (the producer's ``Sender``, the consumer's ``Fetcher``): call a
synchronous ``turn()`` that asks the core what to do now and returns how long until its earliest timer, then
sleep exactly that long or until ``wake()`` — never a polling interval.  ``Broadcast`` is a re-arming event for
waiters of "something changed" (batches completed, records arrived): take ``current()`` *before* checking the
condition, then wait on it, and no notification can slip in between.
"""

from __future__ import annotations

from typing import Callable

import anyio
import anyio.lowlevel

from .backend import GENERIC, LoopPrimitives, loop_primitives


class TurnLoop:
    """Run ``turn()`` until ``done()``, sleeping the ms each turn returns (None: until ``wake()``)."""

    __slots__ = ("_wakeup", "_turn", "_done", "_until", "_rt", "settle_after_timer")

    def __init__(self) -> None:
        #: set by a turn whose timer, when it runs out, should let the event loop's pass finish first: the next
        #: turn then runs after the callbacks that same pass made runnable (the producer's linger end: tasks
        #: whose records are due at that instant append before the drain, instead of waiting a whole linger)
        self.settle_after_timer = False
        self._wakeup = anyio.Event()
        self._turn: Callable[[], float | None] | None = None
        self._done: Callable[[], bool] | None = None
        #: when the loop's sleep ends on its own (anyio time); None: only a wake() ends it
        self._until: float | None = None
        #: the running back-end's scope, event and clock, resolved when ``run`` starts (``net.backend``: a turn
        #: made four back-end look-ups through anyio's generic functions)
        self._rt = GENERIC

    def wake(self) -> None:
        self._wakeup.set()

    def turn_now(self) -> None:
        """Take a turn at once, from an answer's handler, and wake the loop only if that turn's timer is due
        sooner than the sleep the loop is in: one planning pass per answer instead of two. A loop that is not
        running, or is done, is only woken (so it sees ``done()``)."""
        if self._turn is None or self._done is None or self._done():
            self.wake()
            return
        delay_ms = self._turn()
        if delay_ms is not None and (self._until is None or self._rt.now() + delay_ms / 1000.0 < self._until):
            self.wake()

    async def run(self, turn: Callable[[], float | None], *, done: Callable[[], bool]) -> None:
        self._turn, self._done = turn, done
        self._rt = rt = loop_primitives()
        new_event, scope, now = rt.event, rt.scope, rt.now
        try:
            while not done():
                # re-armed before the turn: a wake() during or after the turn is never lost
                self._wakeup = new_event()
                delay_ms = turn()
                if delay_ms is None:
                    self._until = None
                    await self._wakeup.wait()
                elif delay_ms > 0:
                    self._until = until = now() + delay_ms / 1000.0
                    with scope(deadline=until):
                        await self._wakeup.wait()
                    if self.settle_after_timer and not self._wakeup.is_set():
                        # the timer ran out: whatever the same loop pass made runnable (an application task
                        # woken by its own timer, about to append) runs first, then the turn
                        await anyio.lowlevel.checkpoint()
        finally:
            self._turn = self._done = None


class Broadcast:
    """An event that re-arms when fired: ``fire()`` wakes everyone waiting on the current generation."""

    __slots__ = ("_event", "_rt")

    def __init__(self) -> None:
        self._event = anyio.Event()
        #: the back-end's Event class once known (``net.backend``): ``fire`` runs once per completion round
        self._rt: LoopPrimitives = GENERIC

    def current(self) -> anyio.Event:
        """The event the next ``fire()`` sets."""
        return self._event

    def fire(self) -> None:
        rt = self._rt
        if rt is GENERIC:           # made outside the loop (or under trio, which keeps anyio's look-up)
            rt = self._rt = loop_primitives()
        event, self._event = self._event, rt.event()
        event.set()
