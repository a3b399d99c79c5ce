"""The running back-end's cancel scope, event and clock, resolved once per long-lived object.

``anyio.CancelScope()``, ``anyio.Event()`` and ``anyio.current_time()`` look the running back-end up on every
call (through sniffio, which asks asyncio for the current task: pure Python on 3.11), a few microseconds
each; a connection used four of them per request, ~20 % of a small request's CPU by py-spy. An object that
lives on one event loop (a connection) resolves them once with ``loop_primitives`` and calls the back-end's
own classes and clock directly: the same objects anyio would have built.
"""

from __future__ import annotations

import asyncio
from typing import Callable, NamedTuple

import anyio


class LoopPrimitives(NamedTuple):
    #: the back-end's CancelScope class (``anyio.CancelScope`` makes one of these)
    scope: type[anyio.CancelScope]
    #: the back-end's Event class
    event: type[anyio.Event]
    #: the back-end's clock in seconds (``anyio.current_time``), the one cancel-scope deadlines use
    now: Callable[[], float]


#: outside a running loop, or under trio: anyio's own look-ups on every call
GENERIC = LoopPrimitives(anyio.CancelScope, anyio.Event, anyio.current_time)


def running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The asyncio loop this task runs on; None under trio (no asyncio loop runs in this thread)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def loop_primitives() -> LoopPrimitives:
    """The running asyncio loop's primitives; ``GENERIC`` when no asyncio loop runs in this thread."""
    loop = running_asyncio_loop()
    if loop is None:
        return GENERIC
    return LoopPrimitives(type(anyio.CancelScope()), type(anyio.Event()), loop.time)
