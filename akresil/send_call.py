"""``SendCall``: what ``Producer.send`` returns under asyncio, a coroutine that is also the record's future.

A task per record awaiting ``send`` is the everyday idiom, and with a broker down every pending record's objects
survive into the oldest generation, where each full collection walks them (issue 35). A native ``async def send``
keeps a coroutine (and its frame) alive per pending record beside the record's ``DeliveryFuture``. ``SendCall``
folds the two into one object: it is a coroutine to asyncio (``create_task``, ``gather``, ``await`` take it as
they take ``send(...)``'s coroutine), and on its first step it buffers the record with itself as the record's
future, drops its arguments, and from then on is awaited as that future.

Like a coroutine it does nothing until it is awaited or run as a task. When the record cannot be buffered
without waiting (metadata unknown, ``buffer_memory`` full, an event-loop turn due) it drives the producer's
native coroutine for the rest instead, so every waiting path is the one ``enqueue`` uses.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import TYPE_CHECKING, Any, Coroutine, Generator

from .delivery import _DONE, _PENDING, DeliveryFuture
from .types import RecordMetadata

if TYPE_CHECKING:
    from .producer import Producer


class SendCall(DeliveryFuture):
    """One ``Producer.send(...)`` call: not started, then the record's pending future (or a slow-path coroutine)."""

    __slots__ = ("_args", "_slow")

    def __init__(self, loop: asyncio.AbstractEventLoop, args: tuple[Any, ...]) -> None:
        # DeliveryFuture's slots set here, not through its __init__: one call per record less (a test pins that
        # every slot is set)
        self._value: RecordMetadata | BaseException | None = None
        self._state = _PENDING
        self._loop = loop
        self._cb = self._cb_ctx = self._more = self._on_delivery = self._src = None
        self._pos = 0
        # None, not False, until started: asyncio's ``isfuture`` must not take an unstarted call for a future
        # (``gather``/``ensure_future`` would wait on it instead of running it as a task)
        self._asyncio_future_blocking = None  # type: ignore[assignment]
        #: (producer, topic, value, key, partition, timestamp_ms, headers) until the first step, then None (a tuple,
        #: not seven slots: it lives only until the first step, and slots would be walked by every collection for
        #: as long as the record is pending)
        self._args: tuple[Any, ...] | None = args
        #: the producer's coroutine driven instead when the record could not be buffered at once
        self._slow: Coroutine[Any, Any, RecordMetadata] | None = None

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        return self

    def send(self, value: None = None) -> Any:
        """One step: the first buffers the record; later ones are the future's (or the slow coroutine's, which
        yields whatever it awaits: hence ``Any``). Also ``__next__``: a task or an ``await`` steps a non-generator
        with ``__next__``, which would otherwise be one more Python call per step."""
        args = self._args
        if args is not None:
            self._args = None
            producer: Producer[Any, Any]
            producer, topic, value_, key, partition, timestamp_ms, headers = args
            result = producer._enqueue_nowait(topic, value_, key, partition, timestamp_ms, headers, None, self)
            if result is not self:
                self._slow = producer._send_rest(result, topic, value_, key,  # type: ignore[arg-type]
                                                 partition, timestamp_ms, headers)
        slow = self._slow
        if slow is not None:
            return slow.send(value)
        # the future's own step (``DeliveryFuture.send``) inline; a SendCall is never detached
        if self._state == _PENDING:
            self._asyncio_future_blocking = True
            return self
        outcome = self._value
        if self._state == _DONE and not isinstance(outcome, BaseException):
            raise StopIteration(outcome)
        raise StopIteration(self.result())        # (result() raises: the error, or CancelledError)

    __next__ = send

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if self._slow is not None:
            return self._slow.throw(typ, val, tb)
        self._args = None                      # thrown in before the first step: the record is never sent
        return DeliveryFuture.throw(self, typ, val, tb)

    def close(self) -> None:
        """Never stepped: the record is not sent (as a closed coroutine). Pending: the record stays buffered."""
        self._args = None
        if self._slow is not None:
            self._slow.close()

    def __del__(self) -> None:
        """A call dropped without ever being awaited or run warns, as Python does for a never-awaited coroutine:
        a forgotten ``await producer.send(...)`` sends nothing, and that must not pass silently."""
        args = self._args
        if args is not None:
            warnings.warn(f"Producer.send({args[1]!r}, ...) was never awaited: the record was not sent",
                          RuntimeWarning, stacklevel=2)

    def __repr__(self) -> str:
        if self._args is not None:
            return "<SendCall not started>"
        if self._slow is not None:
            return f"<SendCall waiting {self._slow!r}>"
        return "<SendCall " + DeliveryFuture.__repr__(self)[len("<DeliveryFuture "):]
