"""Connection core against a scripted fake broker on loopback TCP, under asyncio and trio.

The fake peer parses only the request header's first fields (api key, version, correlation id) and answers
with hand-built frames, so these tests exercise pipelining, slots, timeouts, close and protocol errors
without depending on the codec.  Every test runs on both anyio backends through ``anyio.run``.
"""

from __future__ import annotations

import struct
import time
from typing import Any, Awaitable, Callable

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute

from akresil import errors
from akresil.net.backend import running_asyncio_loop
from akresil.net.connection import Connection
from akresil.net.framing import FrameDecoder
from akresil.net.loop_stream import LoopStream

from .conftest import BackendLookups

BACKENDS = ["asyncio", "trio"]
API = 1000  # any api key: the core does not interpret it
NO_RESPONSE_API = 18  # send_no_response encodes through the codec: an empty ApiVersions v0 body is 0 bytes


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


def encode(payload: bytes, api_key: int = API, version: int = 0) -> Callable[[int], bytes]:
    """A request frame: header v1 with a null client id, then ``payload``."""
    def build(cid: int) -> bytes:
        body = struct.pack(">hhih", api_key, version, cid, -1) + payload
        return struct.pack(">i", len(body)) + body
    return build


class Peer:
    """The broker side of one accepted connection."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.frames: list[bytes] = []
        self.received = 0

    async def read_request(self) -> tuple[int, int, int, bytes]:
        """(api_key, version, correlation_id, payload) of the next request."""
        while not self.frames:
            self.frames.extend(self.decoder.feed(await self.stream.receive()))
        frame = self.frames.pop(0)
        self.received += 1
        api_key, version, cid, _client = struct.unpack(">hhih", frame[:10])
        return api_key, version, cid, frame[10:]

    async def reply(self, cid: int, payload: bytes) -> None:
        body = struct.pack(">i", cid) + payload
        await self.stream.send(struct.pack(">i", len(body)) + body)


async def with_peer(handler: Callable[[Peer], Awaitable[None]],
                    body: Callable[[Connection], Awaitable[None]], **kwargs: Any) -> None:
    """Run ``handler`` as the broker and ``body`` against a Connection to it; clean up both."""
    async with anyio.create_task_group() as tg:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(SocketAttribute.local_port)

        async def serve(stream: anyio.abc.SocketStream) -> None:
            async with stream:
                try:
                    await handler(Peer(stream))
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass

        tg.start_soon(listener.serve, serve)
        # the stream Connection.connect opens: LoopStream under asyncio, anyio's elsewhere
        stream: anyio.abc.ByteStream = (await LoopStream.connect("127.0.0.1", port) if running_asyncio_loop() is not None
                                        else await anyio.connect_tcp("127.0.0.1", port))
        kwargs.setdefault("request_timeout_ms", 5_000)
        conn = Connection(stream, address=f"127.0.0.1:{port}", node_id=7, **kwargs)
        try:
            with anyio.fail_after(10):
                await body(conn)
        finally:
            await conn.close()
            tg.cancel_scope.cancel()


async def echo(peer: Peer) -> None:
    while True:
        _, _, cid, payload = await peer.read_request()
        await peer.reply(cid, payload)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pipelined_responses_reach_their_callers(backend: str) -> None:
    seen_depth = []

    async def batching_echo(peer: Peer) -> None:
        # Read as many requests as are in flight before answering, so the client really pipelines.
        while True:
            batch = [await peer.read_request()]
            while peer.frames:
                batch.append(await peer.read_request())
            seen_depth.append(len(batch))
            for _, _, cid, payload in batch:
                await peer.reply(cid, payload)

    async def body(conn: Connection) -> None:
        results: dict[int, bytes] = {}

        async def one(i: int) -> None:
            results[i] = await conn.request_raw(API, 0, encode(b"req-%d" % i))

        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(one, i)
        for i in range(200):
            assert results[i][4:] == b"req-%d" % i
        assert conn.in_flight == 0

    run(backend, lambda: with_peer(batching_echo, body, max_in_flight=16))
    assert max(seen_depth) > 1, "requests were never pipelined"
    assert max(seen_depth) <= 16


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_flight_is_bounded_and_callers_wait_for_a_slot(backend: str) -> None:
    peers: list[Peer] = []

    async def holding(peer: Peer) -> None:
        peers.append(peer)
        await anyio.sleep_forever()  # the test body drives this peer by hand

    async def body(conn: Connection) -> None:
        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(conn.request_raw, API, 0, encode(b"%d" % i))
            while not peers:
                await anyio.sleep(0.001)
            peer = peers[0]
            for _ in range(3):
                await peer.read_request()
            assert conn.in_flight == 3
            with anyio.move_on_after(0.1):
                await peer.read_request()
            assert peer.received == 3, "a 4th request was written while 3 were outstanding"
            await peer.reply(0, b"")  # one answer frees exactly one slot
            await peer.read_request()
            assert peer.received == 4
            with anyio.move_on_after(0.1):
                await peer.read_request()
            assert peer.received == 4
            for cid in (1, 2, 3):
                await peer.reply(cid, b"")
            await peer.read_request()
            await peer.reply(4, b"")
        assert conn.in_flight == 0

    run(backend, lambda: with_peer(holding, body, max_in_flight=3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_deadline_of_an_answered_request_does_not_fail_later_ones(backend: str) -> None:
    async def slow_second(peer: Peer) -> None:
        _, _, cid0, p0 = await peer.read_request()
        await peer.reply(cid0, p0)
        _, _, cid1, p1 = await peer.read_request()
        await anyio.sleep(0.3)  # well past the first request's 50 ms deadline
        await peer.reply(cid1, p1)

    async def body(conn: Connection) -> None:
        started: list[bool] = []

        async def first() -> None:
            started.append(True)  # set in the same scheduling step that allocates correlation id 0
            assert (await conn.request_raw(API, 0, encode(b"fast"), timeout_ms=50))[4:] == b"fast"

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            while not started:  # let "fast" take correlation id 0
                await anyio.sleep(0.001)
            assert (await conn.request_raw(API, 0, encode(b"slow"), timeout_ms=5_000))[4:] == b"slow"
        assert not conn.closed

    run(backend, lambda: with_peer(slow_second, body))


@pytest.mark.parametrize("backend", BACKENDS)
def test_request_timeout_fails_that_request_and_closes_the_connection(backend: str) -> None:
    async def silent(peer: Peer) -> None:
        while True:
            await peer.read_request()

    async def body(conn: Connection) -> None:
        outcome: dict[str, BaseException] = {}

        async def long_one() -> None:
            try:
                await conn.request_raw(API, 0, encode(b"a"), timeout_ms=10_000)
            except errors.KafkaError as exc:
                outcome["long"] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_one)
            await anyio.sleep(0.01)
            started = time.monotonic()
            with pytest.raises(errors.RequestTimeoutError, match=r"api 1000 v0 .* node 7 at 127.0.0.1:\d+ .* 100 ms"):
                await conn.request_raw(API, 0, encode(b"b"), timeout_ms=100)
            elapsed = time.monotonic() - started
        assert 0.09 <= elapsed < 2.0
        assert conn.closed
        assert type(outcome["long"]) is errors.KafkaConnectionError
        assert "timed out" in str(outcome["long"])
        with pytest.raises(errors.KafkaConnectionError):
            await conn.request_raw(API, 0, encode(b"c"))

    run(backend, lambda: with_peer(silent, body))


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_fails_every_pending_request_naming_the_node(backend: str) -> None:
    async def silent(peer: Peer) -> None:
        while True:
            await peer.read_request()

    async def body(conn: Connection) -> None:
        failures: list[BaseException] = []

        async def one(i: int) -> None:
            try:
                await conn.request_raw(API, 0, encode(b"%d" % i))
            except errors.KafkaError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            for i in range(4):  # 3 in flight, one waiting for a slot
                tg.start_soon(one, i)
            while conn.in_flight < 3:
                await anyio.sleep(0.001)
            await conn.close()
        assert len(failures) == 4
        assert all(type(f) is errors.KafkaConnectionError for f in failures)
        assert all("node 7 at 127.0.0.1:" in str(f) for f in failures)
        assert len({id(f) for f in failures}) == 4, "waiters must not share one exception object"

    run(backend, lambda: with_peer(silent, body, max_in_flight=3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_with_a_given_error(backend: str) -> None:
    async def silent(peer: Peer) -> None:
        await anyio.sleep_forever()

    async def body(conn: Connection) -> None:
        async def closer() -> None:
            await anyio.sleep(0.02)
            await conn.close(errors.ClientClosedError("client closed"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(closer)
            with pytest.raises(errors.ClientClosedError, match="client closed"):
                await conn.request_raw(API, 0, encode(b"x"))

    run(backend, lambda: with_peer(silent, body))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["wrong-correlation-id", "oversized", "negative-size", "truncated", "unsolicited"])
def test_malformed_input_raises_protocol_error_and_closes_only_this_connection(backend: str, case: str) -> None:
    async def bad_peer(peer: Peer) -> None:
        _, _, cid, _ = await peer.read_request()
        await peer.read_request()
        if case == "wrong-correlation-id":
            await peer.reply(cid + 1, b"")
        elif case == "oversized":
            await peer.stream.send(struct.pack(">i", 1 << 20) + b"\0" * 16)
        elif case == "negative-size":
            await peer.stream.send(struct.pack(">i", -5))
        elif case == "truncated":
            await peer.stream.send(struct.pack(">ii", 100, cid) + b"partial")
            await peer.stream.aclose()
            return
        elif case == "unsolicited":
            await peer.reply(cid, b"")
            await peer.reply(cid + 1, b"")
            await peer.reply(cid + 50, b"")
        await anyio.sleep_forever()

    async def body(conn: Connection) -> None:
        other_peer_ok: list[bytes] = []
        failures: list[BaseException] = []

        async def one(payload: bytes) -> None:
            try:
                await conn.request_raw(API, 0, encode(payload))
            except errors.KafkaError as exc:
                failures.append(exc)

        async def healthy() -> None:
            # A second connection to a healthy peer keeps working while the first dies.
            await with_peer(echo, lambda c: _append(other_peer_ok, c.request_raw(API, 0, encode(b"fine"))))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, b"1")
            tg.start_soon(one, b"2")
            tg.start_soon(healthy)
        if case == "unsolicited":
            # Both answers were fine; the stray frame is caught by whoever reads it (with the answers, or next).
            assert not failures
            with pytest.raises(errors.ProtocolError, match=r"correlation id 5\d (but the oldest|but no request)"):
                await conn.request_raw(API, 0, encode(b"3"))
        else:
            assert len(failures) == 2 and all(isinstance(f, errors.ProtocolError) for f in failures)
            assert "127.0.0.1" in str(failures[0])
        assert conn.closed
        assert other_peer_ok and other_peer_ok[0][4:] == b"fine"

    run(backend, lambda: with_peer(bad_peer, body, max_frame_bytes=1024))


async def _append(box: list[bytes], coro: Awaitable[bytes]) -> None:
    box.append(await coro)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancelled_caller_does_not_desynchronise_the_stream(backend: str) -> None:
    release = anyio.Event  # created inside the loop below

    async def body_factory() -> None:
        gate = release()

        async def slow_first(peer: Peer) -> None:
            _, _, cid0, p0 = await peer.read_request()
            _, _, cid1, p1 = await peer.read_request()
            await gate.wait()
            await peer.reply(cid0, p0)
            await peer.reply(cid1, p1)
            await echo(peer)

        async def body(conn: Connection) -> None:
            got: list[bytes] = []

            async def second() -> None:
                got.append(await conn.request_raw(API, 0, encode(b"second")))

            async with anyio.create_task_group() as tg:
                with anyio.move_on_after(0.05):  # the first caller (the reader) gives up
                    async with anyio.create_task_group() as inner:
                        inner.start_soon(conn.request_raw, API, 0, encode(b"first"), )
                        await anyio.sleep(0.01)
                        tg.start_soon(second)
                        await anyio.sleep_forever()
                gate.set()
            assert got[0][4:] == b"second"
            assert not conn.closed
            assert (await conn.request_raw(API, 0, encode(b"third")))[4:] == b"third"

        await with_peer(slow_first, body)

    run(backend, body_factory)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("broker_answers_acks0", [False, True])
def test_send_without_response_keeps_correlation_in_step(backend: str, broker_answers_acks0: bool) -> None:
    seen: list[tuple[int, int]] = []

    async def recording_echo(peer: Peer) -> None:
        while True:
            api_key, _, cid, payload = await peer.read_request()
            seen.append((api_key, cid))
            if api_key != NO_RESPONSE_API or broker_answers_acks0:  # Kafka skips acks=0; Tansu answers
                await peer.reply(cid, payload)

    async def body(conn: Connection) -> None:
        for _ in range(3):
            await conn.send_no_response(NO_RESPONSE_API, {}, version=0)
        assert conn.in_flight == 0
        assert (await conn.request_raw(API, 0, encode(b"after")))[4:] == b"after"
        await conn.send_no_response(NO_RESPONSE_API, {}, version=0)
        assert (await conn.request_raw(API, 0, encode(b"again")))[4:] == b"again"

    run(backend, lambda: with_peer(recording_echo, body, client_id=None))
    assert [a for a, _ in seen] == [NO_RESPONSE_API] * 3 + [API, NO_RESPONSE_API, API]
    assert [c for _, c in seen] == list(range(6))


@pytest.mark.parametrize("backend", BACKENDS)
def test_hooks_see_bytes_both_ways(backend: str) -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    class Recorder:
        def emit(self, event: str, /, **fields: Any) -> None:
            events.append((event, fields))

    async def body(conn: Connection) -> None:
        await conn.request_raw(API, 0, encode(b"12345"))

    run(backend, lambda: with_peer(echo, body, hooks=Recorder()))
    sent = sum(f["nbytes"] for e, f in events if e == "connection_bytes_sent")
    received = sum(f["nbytes"] for e, f in events if e == "connection_bytes_received")
    assert sent == 4 + 10 + 5 and received == 4 + 4 + 5
    assert all(f["node_id"] == 7 for _, f in events)


@pytest.mark.parametrize("backend", BACKENDS)
def test_connect_refused_and_timeout_are_connection_errors(backend: str) -> None:
    async def body() -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(SocketAttribute.local_port)
        await listener.aclose()
        with pytest.raises(errors.KafkaConnectionError, match=f"cannot connect to node 3 at 127.0.0.1:{port}"):
            await Connection.connect("127.0.0.1", port, node_id=3, connect_timeout_ms=2000)

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_peer_closing_fails_pending_with_connection_error(backend: str) -> None:
    async def hang_up(peer: Peer) -> None:
        await peer.read_request()
        await peer.stream.aclose()

    async def body(conn: Connection) -> None:
        with pytest.raises(errors.KafkaConnectionError, match="closed by the peer"):
            await conn.request_raw(API, 0, encode(b"x"))
        assert conn.closed

    run(backend, lambda: with_peer(hang_up, body))


def test_constructor_rejects_bad_settings() -> None:
    async def body() -> None:
        a, b = anyio.create_memory_object_stream[bytes](1)
        from anyio.streams.stapled import StapledObjectStream
        stream: Any = StapledObjectStream(a, b)
        with pytest.raises(errors.ConfigError, match="max_in_flight"):
            Connection(stream, max_in_flight=0)
        with pytest.raises(errors.ConfigError, match="request_timeout_ms"):
            Connection(stream, request_timeout_ms=0)
        a.close()
        b.close()

    anyio.run(body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_close_on_the_first_request_after_the_handshake_names_that_request_too(backend: str) -> None:
    """A broker closes on a request it cannot parse as it closes a SASL/TLS listener's plaintext client: the
    error names both readings, and the request (found when ShareFetch v2 lacked a field Kafka 4.4 reads)."""
    from akresil.net.connection import listener_hint
    from akresil.protocol.api import ApiKey

    async def hang_up(peer: Peer) -> None:
        await peer.read_request()
        await peer.stream.aclose()

    async def body(conn: Connection) -> None:
        conn.listener_hint = listener_hint(tls=False, sasl=False)     # as connect() sets it after ApiVersions
        with pytest.raises(errors.KafkaConnectionError) as info:
            await conn.request_raw(ApiKey.SHARE_FETCH, 2, encode(b"x", ApiKey.SHARE_FETCH, 2))
        message = str(info.value)
        assert "the listener may require SASL or TLS" in message
        assert "could not parse the SHARE_FETCH v2 request" in message

    run(backend, lambda: with_peer(hang_up, body))


def test_requests_resolve_the_back_end_once_not_per_request(backend_lookups: BackendLookups) -> None:
    """anyio finds the running back-end (through sniffio) on every CancelScope(), Event() and current_time();
    a connection resolves them when it is made, not four times per request."""
    async def body(conn: Connection) -> None:
        await conn.request_raw(API, 0, encode(b"warm"))
        backend_lookups.start()
        try:
            for i in range(20):
                assert (await conn.request_raw(API, 0, encode(b"r%d" % i)))[4:] == b"r%d" % i
        finally:
            backend_lookups.stop()

    run("asyncio", lambda: with_peer(echo, body))
    assert backend_lookups.calls == 0


def test_a_request_on_a_loop_stream_is_written_without_the_awaited_flush() -> None:
    """Under asyncio the frame goes to the transport at once when its buffer has room: no await, no cancel
    scope; the awaited ``_flush`` is left for a full buffer."""
    async def body(conn: Connection) -> None:
        assert isinstance(conn._stream, LoopStream)

        async def no_flush() -> None:
            raise AssertionError("awaited flush used for a transport with room")

        conn._flush = no_flush  # type: ignore[method-assign]
        for i in range(5):
            assert (await conn.request_raw(API, 0, encode(b"w%d" % i)))[4:] == b"w%d" % i

    run("asyncio", lambda: with_peer(echo, body))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_deadline_that_passed_with_no_reader_is_enforced_by_the_next_one(backend: str) -> None:
    """A caller that gave up left its request in flight, unanswered, past its deadline, while nobody read: the
    next request's reader closes the connection for it (Java closes a connection on a request timeout)."""
    async def silent(peer: Peer) -> None:
        while True:
            await peer.read_request()

    async def body(conn: Connection) -> None:
        with anyio.move_on_after(0.02):
            await conn.request_raw(API, 0, encode(b"given up"), timeout_ms=50)
        await anyio.sleep(0.15)               # its deadline passes with no reader
        with pytest.raises(errors.KafkaConnectionError, match=r"api 1000 request \(correlation id 0\) timed out"):
            await conn.request_raw(API, 0, encode(b"next"), timeout_ms=5_000)
        assert conn.closed

    run(backend, lambda: with_peer(silent, body))


def test_a_request_on_a_loop_stream_waits_for_its_answer_under_no_cancel_scope() -> None:
    """Under asyncio the connection's one timer watches the deadlines: the reader's waits enter no cancel scope
    (~4 us each); request timeouts still fire (``test_request_timeout_fails_that_request_and_closes_...``)."""
    from akresil.net.backend import LoopPrimitives

    async def body(conn: Connection) -> None:
        assert isinstance(conn._stream, LoopStream)

        class NoScope:
            def __init__(self, **_kw: object) -> None:
                raise AssertionError("a cancel scope entered for a request on a LoopStream")

        conn._rt = LoopPrimitives(NoScope, conn._rt.event, conn._rt.now)  # type: ignore[arg-type]
        for i in range(5):
            assert (await conn.request_raw(API, 0, encode(b"s%d" % i), timeout_ms=1_000 - i))[4:] == b"s%d" % i

    run("asyncio", lambda: with_peer(echo, body))
