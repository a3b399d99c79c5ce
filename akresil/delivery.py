"""``DeliveryFuture``: the outcome of one produced record, a real future of the running backend.

Under asyncio it speaks asyncio's future protocol (``_asyncio_future_blocking``, ``get_loop``,
``add_done_callback``, ``cancel`` ...), so ``await``, ``asyncio.gather``, ``wait``, ``as_completed``,
``shield``, ``wait_for`` and ``timeout`` take it as it is: no Task is wrapped around it and no event is
created per awaited record. An awaiting task parks on the future itself and is woken by one ``call_soon``
when the record completes. Under trio (or any other anyio backend) awaiting it waits on an event created
only if somebody awaits before completion, and done-callbacks run synchronously at completion.

Why not an ``asyncio.Future``: creating one per record costs a loop lookup and several objects, and the
cyclic GC scans every live object; with one task per record a backlog of pending records (a broker down
for the delivery timeout) made full collections long enough to stall every other partition. This class is
one object per record (two once a task awaits it).

Cancelling never recalls the record (a produced record cannot be withdrawn): ``cancel()`` only makes
the awaiters stop waiting (``CancelledError``). The record is still delivered or failed by the producer,
and that outcome still reaches ``on_delivery`` (``Producer.enqueue(..., on_delivery=cb)``) and is kept:
``delivery_outcome()`` returns it after a cancel.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from contextvars import Context
from typing import TYPE_CHECKING, Any, Callable, Generator, Optional

import anyio

from . import errors
from .types import RecordMetadata

if TYPE_CHECKING:
    from .core.batch import Detached

log = logging.getLogger(__name__)

#: ``on_delivery(metadata, error)``: exactly one of them is None; called once, synchronously, at completion
DeliveryCallback = Callable[[Optional[RecordMetadata], Optional[BaseException]], None]

_PENDING, _DONE, _CANCELLED = 0, 1, 2


class DeliveryFuture:
    """Completion of one record. ``await fut`` returns its ``RecordMetadata`` or raises its error."""

    # all set in __init__: the object is created once per record and walked by every collection it lives through
    __slots__ = ("_value", "_state", "_loop", "_cb", "_cb_ctx", "_more", "_on_delivery", "_asyncio_future_blocking",
                 "_src", "_pos", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None,
                 on_delivery: DeliveryCallback | None = None) -> None:
        #: the outcome, None until it arrives (also after a cancel): the RecordMetadata, or the exception
        self._value: RecordMetadata | BaseException | None = None
        self._state = _PENDING
        #: the asyncio loop it belongs to; None under other backends (trio)
        self._loop = loop
        #: first done-callback and its context, kept out of a list: one waiting task is the common case
        self._cb: Callable[[DeliveryFuture], Any] | None = None
        self._cb_ctx: Context | None = None
        self._more: list[tuple[Callable[[DeliveryFuture], Any], Context | None]] | None = None
        self._on_delivery = on_delivery
        self._asyncio_future_blocking = False
        #: a detached future (``detached_future``): its batch's view and its record's slot there; None once settled
        self._src: Detached | None = None
        self._pos = 0

    def _settle(self, wait: bool) -> None:
        """A detached future learns its record's outcome if the batch has it; if not and ``wait``, the batch will
        call this future at completion (it waits like any other from then on)."""
        src = self._src
        assert src is not None
        if wait and src.attach(self._pos, self):      # still pending: the batch will call this future
            self._src = None
            return
        outcome = src.outcome(self._pos)
        if outcome is None:
            return
        self._src = None
        metadata, error = outcome
        self._value = error if error is not None else metadata
        if self._state == _PENDING:
            self._state = _DONE

    # ------------------------------------------------------------------ the core's record callback
    def __call__(self, metadata: RecordMetadata | None, error: BaseException | None) -> None:
        """The producer reports the record's outcome (exactly once)."""
        if self._value is not None:
            return
        self._value = error if error is not None else metadata
        pending = self._state == _PENDING
        if pending:
            self._state = _DONE
        if self._on_delivery is not None:
            try:
                self._on_delivery(metadata, error)
            except Exception:  # noqa: BLE001 - a user callback must not break the sender
                log.exception("on_delivery callback %r raised", self._on_delivery)
        # ``_wake`` inlined for the common cases (nobody waits; one waiter under asyncio): once per record
        if pending and self._cb is not None:
            if self._more is None and self._loop is not None:
                _schedule(self._loop, self._cb, self, self._cb_ctx)
                self._cb = self._cb_ctx = None
            else:
                self._wake()

    def _wake(self) -> None:
        cb = self._cb
        if cb is None:
            return
        loop = self._loop
        if loop is not None:
            _schedule(loop, cb, self, self._cb_ctx)
            if self._more:
                for fn, ctx in self._more:
                    _schedule(loop, fn, self, ctx)
        else:
            _run_callback(cb, self)
            if self._more:
                for fn, _ in self._more:
                    _run_callback(fn, self)
        self._cb = self._cb_ctx = self._more = None

    # ------------------------------------------------------------------ future API
    def done(self) -> bool:
        if self._src is not None:
            self._settle(False)
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def result(self) -> RecordMetadata:
        if self._src is not None:
            self._settle(False)
        state = self._state
        if state == _DONE:
            value = self._value
            if isinstance(value, BaseException):
                # one error instance is shared by a batch's records: raise it with a fresh traceback each time,
                # or every raise would chain the raising frame onto it and keep all of them alive
                raise value.with_traceback(None)
            return value  # type: ignore[return-value]
        if state == _CANCELLED:
            raise asyncio.CancelledError("waiting for the record's delivery was cancelled (the record was not)")
        raise NotDeliveredError("record not delivered yet")

    def exception(self) -> BaseException | None:
        if self._src is not None:
            self._settle(False)
        if self._state == _CANCELLED:
            raise asyncio.CancelledError("waiting for the record's delivery was cancelled (the record was not)")
        if self._state != _DONE:
            raise NotDeliveredError("record not delivered yet")
        value = self._value
        return value if isinstance(value, BaseException) else None

    def delivery_outcome(self) -> tuple[RecordMetadata | None, BaseException | None] | None:
        """``(metadata, error)`` once the record's outcome is known, else None; unaffected by ``cancel()``."""
        if self._src is not None:
            self._settle(False)
        value = self._value
        if value is None:
            return None
        return (None, value) if isinstance(value, BaseException) else (value, None)

    def add_done_callback(self, fn: Callable[[DeliveryFuture], Any], *, context: Context | None = None) -> None:
        """Call ``fn(fut)`` once done: under asyncio from the loop (``call_soon``), as asyncio does; under other
        backends synchronously at completion. Already done: scheduled (asyncio) or called now."""
        if self._src is not None:
            self._settle(True)
        if self._state != _PENDING:
            loop = self._loop
            if loop is not None:
                _schedule(loop, fn, self, context)
            else:
                _run_callback(fn, self)
            return
        if self._cb is None:
            self._cb, self._cb_ctx = fn, context
        else:
            if self._more is None:
                self._more = []
            self._more.append((fn, context))

    def remove_done_callback(self, fn: Callable[[DeliveryFuture], Any]) -> int:
        removed = 0
        if self._more:
            kept = [(f, c) for f, c in self._more if f != fn]
            removed = len(self._more) - len(kept)
            self._more = kept or None
        if self._cb is not None and self._cb == fn:
            removed += 1
            if self._more:
                self._cb, self._cb_ctx = self._more.pop(0)
            else:
                self._cb = self._cb_ctx = None
        return removed

    def cancel(self, msg: Any = None) -> bool:
        """Stop waiting: awaiters get ``CancelledError``. The record itself is not recalled (see the module)."""
        if self._src is not None:
            self._settle(False)
        if self._state != _PENDING:
            return False
        self._state = _CANCELLED
        self._wake()
        return True

    def get_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("DeliveryFuture: not running under asyncio")
        return self._loop

    # ------------------------------------------------------------------ awaiting
    async def wait(self) -> RecordMetadata:
        return await self

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if self._loop is not None:
            # Under asyncio the future is its own await iterator (no generator object per await, which the
            # cyclic GC would scan for every pending record): ``send`` yields the future itself while pending,
            # asyncio's protocol for a task to park on it, and stops with the result once done. It keeps no
            # per-await state, so any number of tasks may await it at once.
            return self  # type: ignore[return-value]
        return self._await_event()

    def _await_event(self) -> Generator[Any, None, RecordMetadata]:
        """Other backends (trio): wait on an event created only when someone awaits before completion (its
        ``set`` is a done-callback: they run synchronously at completion there)."""
        if self._state == _PENDING:
            event = anyio.Event()
            self.add_done_callback(lambda _: event.set())
            yield from event.wait().__await__()
        return self.result()

    def send(self, value: None = None) -> DeliveryFuture:
        """Await-iterator step (asyncio): the future to park on, or StopIteration carrying the result. Also
        ``__next__``: an ``await`` steps a non-generator with ``__next__``, which would otherwise be one more Python
        call per step."""
        if self._src is not None:
            self._settle(True)
        state = self._state
        if state == _PENDING:
            self._asyncio_future_blocking = True
            return self
        outcome = self._value
        if state == _DONE and not isinstance(outcome, BaseException):
            raise StopIteration(outcome)
        raise StopIteration(self.result())        # (result() raises: the error, or CancelledError)

    __next__ = send

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> DeliveryFuture:
        """A cancellation (or any exception) thrown into the awaiting coroutine surfaces at its ``await``.

        (No ``close`` method on purpose: with ``send``, ``throw`` and ``close`` ``collections.abc.Coroutine``
        would recognize the future as a coroutine, and asyncio refuses coroutines in ``wait``.)"""
        if val is None:
            val = typ() if isinstance(typ, type) else typ
        if tb is not None:
            val = val.with_traceback(tb)
        raise val

    def __iter__(self) -> Generator[Any, None, RecordMetadata]:
        return self.__await__()

    def __repr__(self) -> str:
        if self._src is not None:
            self._settle(False)
        state = ("pending", "done", "cancelled")[self._state]
        error = self._value if isinstance(self._value, BaseException) else None
        return f"<DeliveryFuture {state}{' error=' + repr(error) if error is not None else ''}>"


#: per asyncio loop: done-callbacks due, run by ``_run_pending`` (asyncio runs done-callbacks from the loop, never
#: inside ``set_result``; this keeps that, batched), flat: callback, future, context, callback, ... (no tuple per
#: callback: gathering 200,000 records completed ahead queues 200,000 of them at once, and each tuple would be one
#: more object for every collection to walk until its turn)
_pending: dict[asyncio.AbstractEventLoop, deque[Any]] = {}
#: callbacks run per loop pass: a response that completes thousands of records (a recovered broker's backlog)
#: wakes their tasks in slices, so the loop reads other connections' responses in between
_SLICE = 256


def _schedule(loop: asyncio.AbstractEventLoop, fn: Callable[[DeliveryFuture], Any], fut: DeliveryFuture,
              ctx: Context | None) -> None:
    """Run ``fn(fut)`` from ``loop`` soon; the first one since the loop last ran them schedules one callback
    that runs them all (a batch completes hundreds of records at once: one Handle instead of one each)."""
    pending = _pending.get(loop)
    if pending is None:
        pending = _pending[loop] = deque()
        loop.call_soon(_run_pending, loop)
    pending.extend((fn, fut, ctx))


def _run_pending(loop: asyncio.AbstractEventLoop) -> None:
    pending = _pending.get(loop)
    if pending is None:
        return
    pop = pending.popleft
    for _ in range(min(_SLICE, len(pending) // 3)):
        fn, fut, ctx = pop(), pop(), pop()
        try:
            if ctx is None:
                fn(fut)
            else:
                ctx.run(fn, fut)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - as asyncio's Handle does: report, go on with the rest
            loop.call_exception_handler({"message": f"Exception in DeliveryFuture callback {fn!r}",
                                         "exception": exc, "future": fut})
    if pending:
        loop.call_soon(_run_pending, loop)      # the rest after the loop has polled I/O once
    else:
        del _pending[loop]


def _run_callback(fn: Callable[[DeliveryFuture], Any], fut: DeliveryFuture) -> None:
    try:
        fn(fut)
    except Exception:  # noqa: BLE001 - one bad callback must not stop the others
        log.exception("done callback %r raised", fn)


class NotDeliveredError(errors.IllegalStateError, asyncio.InvalidStateError):
    """``result()`` / ``exception()`` before the record's outcome is known (asyncio's InvalidStateError too)."""


def detached_future(loop: asyncio.AbstractEventLoop | None, on_delivery: DeliveryCallback, src: Detached,
                    pos: int, _new: Callable[[type[DeliveryFuture]], DeliveryFuture] = object.__new__
                    ) -> DeliveryFuture:
    """A future its batch does not hold: the batch calls ``on_delivery`` itself, so a caller that drops the future
    leaves nothing per pending record. Kept, it reads its outcome from ``src`` when asked, and takes the record's
    slot over (the batch then calls it, and it calls ``on_delivery``) once something waits on it before completion
    (``_settle``). Made once per record of the delivery-callback idiom, so its slots are set here directly: a third
    of the CPU of ``DeliveryFuture(loop, on_delivery)`` plus two stores."""
    fut = _new(DeliveryFuture)
    fut._value = fut._cb = fut._cb_ctx = fut._more = None
    fut._state = _PENDING
    fut._loop = loop
    fut._on_delivery = on_delivery
    fut._asyncio_future_blocking = False
    fut._src = src
    fut._pos = pos
    return fut
