"""LoopStream: asyncio TCP that stays registered for reading, with anyio's ByteStream behaviour."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import anyio
import pytest

from akresil.net import loop_stream
from akresil.net.loop_stream import LoopStream


async def with_server(handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
                      body: Callable[[LoopStream], Awaitable[None]]) -> None:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stream = await LoopStream.connect("127.0.0.1", port)
    try:
        await asyncio.wait_for(body(stream), 10)
    finally:
        await stream.aclose()
        server.close()


def answers_once(payload: bytes) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A server that writes ``payload`` once the client sent a byte, then waits for another."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.write(payload)
        await writer.drain()
        await reader.read(1)
    return handler


def transport_of(stream: LoopStream) -> Any:
    return stream._transport


def test_bytes_arrive_in_order_and_the_socket_stays_registered_between_receives() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(100):
            writer.write(data.upper())
            await writer.drain()
        writer.close()

    async def body(stream: LoopStream) -> None:
        got = b""
        for word in (b"one", b"two", b"three"):
            await stream.send(word)
            while not got.endswith(word.upper()):
                got += await stream.receive()
            # anyio's stream pauses reading after every receive (two selector changes per wait)
            assert transport_of(stream).is_reading()
        assert got == b"ONETWOTHREE"

    asyncio.run(with_server(answer, body))


def test_end_of_stream_after_everything_queued_was_read() -> None:
    async def say_and_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"last words")
        await writer.drain()
        writer.close()

    async def body(stream: LoopStream) -> None:
        got = b""
        with pytest.raises(anyio.EndOfStream):
            while True:
                got += await stream.receive()
        assert got == b"last words"
        with pytest.raises(anyio.EndOfStream):
            await stream.receive()

    asyncio.run(with_server(say_and_close, body))


def test_max_bytes_splits_a_chunk_without_losing_the_rest() -> None:
    async def say(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"abcdefghij")
        await writer.drain()
        await reader.read(1)

    async def body(stream: LoopStream) -> None:
        got = b""
        while len(got) < 10:
            part = await stream.receive(3)
            assert len(part) <= 3
            got += part
        assert got == b"abcdefghij"

    asyncio.run(with_server(say, body))


def test_aclose_wakes_a_waiting_reader_and_later_calls_fail_closed() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)

    async def body(stream: LoopStream) -> None:
        waiting = asyncio.ensure_future(stream.receive())
        await asyncio.sleep(0.01)
        await stream.aclose()
        with pytest.raises(anyio.ClosedResourceError):
            await waiting
        with pytest.raises(anyio.ClosedResourceError):
            await stream.send(b"x")

    asyncio.run(with_server(silent, body))


def test_a_cancelled_receive_leaves_the_stream_usable() -> None:
    async def body(stream: LoopStream) -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(stream.receive(), 0.05)
        await stream.send(b"go")
        assert await stream.receive() == b"late"

    asyncio.run(with_server(answers_once(b"late"), body))


def test_reading_pauses_above_the_high_water_mark_and_resumes_below_the_low(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that stopped reading makes the socket stop being read (as a full TCP window would), instead of
    queueing without bound."""
    monkeypatch.setattr(loop_stream, "HIGH_WATER", 64 * 1024)
    monkeypatch.setattr(loop_stream, "LOW_WATER", 16 * 1024)
    blob = bytes(range(256)) * 4096            # 1 MiB

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(blob)
        await writer.drain()
        await reader.read(1)

    async def body(stream: LoopStream) -> None:
        for _ in range(200):
            if stream._protocol.paused:
                break
            await asyncio.sleep(0.005)
        assert stream._protocol.paused and not transport_of(stream).is_reading()
        assert stream._protocol.queued <= 64 * 1024 + 256 * 1024      # one socket read past the mark at most
        got = bytearray()
        while len(got) < len(blob):
            got += await stream.receive(1 << 20)
        assert bytes(got) == blob and transport_of(stream).is_reading()

    asyncio.run(with_server(flood, body))


def test_a_reset_connection_is_a_broken_resource() -> None:
    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import socket
        import struct
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))   # close sends RST
        writer.transport.abort()

    async def body(stream: LoopStream) -> None:
        with pytest.raises((anyio.BrokenResourceError, anyio.EndOfStream)):
            for _ in range(100):
                await stream.send(b"x" * 1000)
                await stream.receive()

    asyncio.run(with_server(reset, body))


def test_write_now_writes_only_when_send_would_not_wait() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(100):
            writer.write(data)
            await writer.drain()

    async def body(stream: LoopStream) -> None:
        assert stream.write_now(b"now")
        assert await stream.receive() == b"now"
        stream._protocol.write_paused = True        # the transport's buffer above its high-water mark
        assert not stream.write_now(b"later")
        stream._protocol.resume_writing()
        assert stream.write_now(b"again")
        assert await stream.receive() == b"again"
        await stream.aclose()
        assert not stream.write_now(b"closed")

    asyncio.run(with_server(answer, body))


def test_interrupt_ends_a_waiting_receive_and_queued_data_comes_first() -> None:
    class Due(Exception):
        pass

    async def body(stream: LoopStream) -> None:
        waiting = asyncio.ensure_future(stream.receive())
        await asyncio.sleep(0.01)
        stream.interrupt(Due("waiting"))
        with pytest.raises(Due, match="waiting"):
            await waiting
        await stream.send(b"go")
        while not stream._protocol.chunks:      # the answer is queued before the next interrupt
            await asyncio.sleep(0.001)
        stream.interrupt(Due("not waiting"))
        assert await stream.receive() == b"data"
        with pytest.raises(Due, match="not waiting"):   # raised by the next receive that would wait
            await stream.receive()
        with pytest.raises(asyncio.TimeoutError):       # and only once
            await asyncio.wait_for(stream.receive(), 0.02)

    asyncio.run(with_server(answers_once(b"data"), body))
