"""A client's background tasks, in a task group that a task of the client's own enters and leaves.

anyio (like trio) lets only the task that entered a task group leave it.  A client whose ``start()`` entered its
task group in the caller's task could be closed only from that same task; a pytest-asyncio fixture (set-up and
teardown are two tasks) or ``await asyncio.create_task(client.start())`` then failed with "Attempted to exit
cancel scope in a different task".  ``TaskOwner`` spawns one host task that enters the group and waits in it;
``open()`` and ``close()`` only talk to that task, so they may run in any task of the event loop.

It stays structured: ``close()`` cancels the group and waits (shielded) until the host left it, so no task
outlives it; an exception a background task raises ends the group at once, ``on_failure`` hands the client a
``ClientClosedError`` caused by it (the client's next call raises that) and ``close()`` re-raises it.
``on_closed`` runs once all tasks ended (the client tells its hooks, which drop its gauges).  The host is an asyncio task under asyncio and a trio
system task under trio (the one kind of trio task no caller's nursery owns); both end with the event loop if the
client is never closed.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Callable

import anyio
import anyio.abc

from .. import errors
from .backend import running_asyncio_loop


class TaskOwner:
    """Owns one client's task group from ``open()`` to ``close()``, whichever tasks call them."""

    __slots__ = ("_name", "_on_failure", "_on_closed", "_tg", "_entered", "_done", "_host", "_opened", "error")

    def __init__(self, name: str, on_failure: Callable[[errors.ClientClosedError], None] | None = None,
                 on_closed: Callable[[], None] | None = None) -> None:
        self._name = name
        self._on_failure = on_failure
        self._on_closed = on_closed
        self._tg: anyio.abc.TaskGroup | None = None
        self._entered = anyio.Event()
        self._done = anyio.Event()
        #: the asyncio host task (the event loop keeps only a weak reference to it)
        self._host: asyncio.Task[None] | None = None
        self._opened = False
        #: what a background task raised (the group ended with it); None while all is well
        self.error: BaseException | None = None

    async def open(self) -> anyio.abc.TaskGroup:
        """Spawn the host task; return its task group once entered (``start()``/``start_soon()`` from any task)."""
        if self._opened:
            raise errors.IllegalStateError(f"{self._name}: background tasks already started")
        self._opened = True
        loop = running_asyncio_loop()
        if loop is None:       # not asyncio: trio, anyio's other back-end
            import trio
            trio.lowlevel.spawn_system_task(self._run, name=self._name, context=contextvars.copy_context())
        else:
            self._host = loop.create_task(self._run(), name=self._name)
        with anyio.CancelScope(shield=True):   # the host enters at its first step: no task is left half-born
            await self._entered.wait()
        if self._tg is None:
            raise errors.ClientClosedError(f"{self._name}: background tasks ended at start") from self.error
        return self._tg

    async def _run(self) -> None:
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self._entered.set()
                await anyio.sleep_forever()
        except Exception as exc:  # noqa: BLE001 - a background task failed: on_failure and close() surface it
            if isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            self.error = exc
            if self._on_failure is not None:
                stopped = errors.ClientClosedError(
                    f"{self._name}: a background task failed ({type(exc).__name__}: {exc}); close the client")
                stopped.__cause__ = exc
                self._on_failure(stopped)
        finally:
            self._tg = None
            self._entered.set()
            self._done.set()

    async def close(self) -> None:
        """Cancel every background task and wait until all ended; re-raise what one of them raised."""
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        if self._opened:
            with anyio.CancelScope(shield=True):
                await self._done.wait()
        on_closed, self._on_closed = self._on_closed, None
        if on_closed is not None:
            on_closed()
        error, self.error = self.error, None
        if error is not None:
            raise error
