"""``LoopStream``: a plain TCP byte stream for asyncio that keeps the socket registered for reading.

anyio's asyncio ``SocketStream`` resumes reading when ``receive`` starts waiting and pauses it when it returns:
two selector changes per wait (an ``epoll_ctl`` each, a new ``Handle`` and the selector's Python bookkeeping),
and a loop pass of its own for every chunk that was already there. A Kafka connection waits once per answer, so
this was a fixed share of every request's CPU (~17 % of a Metadata round trip, measured with py-spy). Here the
protocol queues what arrives and wakes the one waiting reader; reading pauses only when more than
``HIGH_WATER`` bytes are queued unread (a consumer that stopped reading), and resumes below ``LOW_WATER``.

Used for plain TCP under asyncio (``connect``); TLS and other backends keep anyio's streams. It implements
anyio's ``ByteStream`` (so ``TLSStream`` could wrap it) and its errors: ``EndOfStream`` once the peer closed and
everything queued was read, ``BrokenResourceError`` after a socket error, ``ClosedResourceError`` after
``aclose``.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from typing import Any, Callable, Mapping

import anyio
import anyio.abc

#: queued unread bytes above which the socket stops being read (as a TCP window would), and below which it
#: resumes: far above a Fetch answer's size (``fetch_max_bytes`` is 50 MiB by default, but arrives in chunks
#: that the connection's frame decoder takes as they come)
HIGH_WATER = 4 * 1024 * 1024
LOW_WATER = 1024 * 1024


class _Reader(asyncio.Protocol):
    """The transport's protocol: queues chunks, wakes the waiting reader and writer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: deque[bytes] = deque()
        self.queued = 0
        self.paused = False
        self.eof = False
        self.lost = False
        self.error: BaseException | None = None
        self.reader: asyncio.Future[None] | None = None
        self.write_paused = False
        self.writer: asyncio.Future[None] | None = None
        #: raised by the next ``receive`` that has nothing to return (``LoopStream.interrupt``)
        self.interrupt: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.queued += len(data)
        if self.queued > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        return False             # the transport closes itself; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.eof = True
        if exc is not None and self.error is None:
            self.error = exc
        self._wake_reader()
        self._wake_writer()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_writer()

    def _wake_reader(self) -> None:
        _wake(self.reader)

    def _wake_writer(self) -> None:
        _wake(self.writer)


def _wake(fut: asyncio.Future[None] | None) -> None:
    """Wake whoever waits on ``fut`` (a reader or a writer), if anyone still does."""
    if fut is not None and not fut.done():
        fut.set_result(None)


class LoopStream(anyio.abc.ByteStream):
    """One TCP connection through an asyncio transport that stays registered for reading (see the module)."""

    def __init__(self, transport: asyncio.Transport, protocol: _Reader) -> None:
        self._transport = transport
        self._protocol = protocol
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._receiving = False

    @classmethod
    async def connect(cls, host: str, port: int) -> LoopStream:
        """Open a TCP connection (every address of ``host`` tried, IPv6 and IPv4 staggered as anyio does);
        raises ``OSError`` as the socket layer reports it."""
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_connection(_Reader, host, port, happy_eyeballs_delay=0.25)
        return cls(transport, protocol)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._receiving:
            raise anyio.BusyResourceError("reading from")
        p = self._protocol
        if not p.chunks:
            self._check_readable()
            self._receiving = True
            fut: asyncio.Future[None] = self._loop.create_future()
            p.reader = fut
            try:
                await fut
            finally:
                p.reader = None
                self._receiving = False
            if not p.chunks:
                self._check_readable()
                raise anyio.EndOfStream     # (woken without data only by the end of the stream or an interrupt)
        chunk = p.chunks.popleft()
        if len(chunk) > max_bytes:
            chunk, rest = chunk[:max_bytes], chunk[max_bytes:]
            p.chunks.appendleft(rest)
        p.queued -= len(chunk)
        if p.paused and p.queued < LOW_WATER and not p.lost:
            p.paused = False
            self._transport.resume_reading()
        return chunk

    def interrupt(self, error: BaseException) -> None:
        """Make the waiting ``receive`` (or the next one that would wait) raise ``error`` instead: how the
        owner's timer ends a wait without a cancel scope around every wait (``Connection``'s deadlines)."""
        p = self._protocol
        p.interrupt = error
        p._wake_reader()

    def _check_readable(self) -> None:
        p = self._protocol
        error = p.interrupt
        if error is not None:
            p.interrupt = None
            raise error
        if self._closed:
            raise anyio.ClosedResourceError
        if p.error is not None:
            raise anyio.BrokenResourceError from p.error
        if p.eof:
            raise anyio.EndOfStream

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        p = self._protocol
        if p.lost or self._transport.is_closing():
            raise anyio.BrokenResourceError from p.error
        self._transport.write(item)
        while p.write_paused and not p.lost:
            # the transport's buffer is above its high-water mark: wait until the kernel took enough
            fut: asyncio.Future[None] = self._loop.create_future()
            p.writer = fut
            try:
                await fut
            finally:
                p.writer = None
        if p.lost and p.error is not None:
            raise anyio.BrokenResourceError from p.error

    def write_now(self, data: bytes) -> bool:
        """Write without waiting if the transport's buffer has room (the common case: the kernel takes it at
        once); False, writing nothing, when ``send`` would have to wait or raise."""
        p = self._protocol
        if self._closed or p.lost or p.write_paused or self._transport.is_closing():
            return False
        self._transport.write(data)
        return True

    async def send_eof(self) -> None:
        if not self._transport.is_closing():
            self._transport.write_eof()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._transport.close()
        self._protocol._wake_reader()
        self._protocol._wake_writer()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        sock: socket.socket | None = self._transport.get_extra_info("socket")
        if sock is None:
            return {}
        return {
            anyio.abc.SocketAttribute.raw_socket: lambda: sock,
            anyio.abc.SocketAttribute.family: lambda: sock.family,
            anyio.abc.SocketAttribute.local_address: lambda: sock.getsockname(),
            anyio.abc.SocketAttribute.remote_address: lambda: sock.getpeername(),
            anyio.abc.SocketAttribute.local_port: lambda: sock.getsockname()[1],
            anyio.abc.SocketAttribute.remote_port: lambda: sock.getpeername()[1],
        }
