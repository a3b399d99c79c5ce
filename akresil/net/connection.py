"""One Kafka connection on anyio: framing, pipelined requests, request timeouts, TLS, SASL, ApiVersions.

Reading is done by the callers themselves, leader/follower style (as httpcore's HTTP/2 connection does):
whichever waiting caller finds no reader becomes the reader, reads frames and hands each one to the caller
it answers, and passes the reader role on when its own response has arrived.  So the connection owns no
background task at all: nothing to start, nothing to leak, ``close()`` may be called from any task, and it
runs the same under asyncio and trio.  Kafka never sends unsolicited bytes, so a connection nobody waits on
needs no reader.

Writes are coalesced: a caller that finds a write in progress only appends its frame to the outgoing list,
and the writing caller sends everything queued in one ``send``.  A send is shielded from cancellation (a
half-written frame would desynchronise the stream for everyone) and bounded by the request timeout.

Request timeouts follow the Java client: the clock starts when the request is handed to the connection,
and an expired request closes the whole connection (a late response would otherwise be matched against the
wrong request); the timed-out caller gets ``RequestTimeoutError``, the others ``KafkaConnectionError``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
import math
import socket
import ssl
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

import anyio
import anyio.abc
from anyio.streams.tls import TLSStream

from .. import __version__, errors
from ..protocol.api import (CLIENT_VERSIONS, ApiKey, broker_versions, decode_answer, decode_response, encode_request,
                            negotiate)
from .clock import Clock, monotonic_ms
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, InFlight
from .backend import loop_primitives, running_asyncio_loop
from .loop_stream import LoopStream
from .sasl import SaslConfig

if TYPE_CHECKING:
    from .request_types import ConnectionRequest
    from ..protocol.messages import ApiVersionsRequest

__all__ = ["Connection", "SaslConfig", "EncodeFn", "SupportsEmit"]

log = logging.getLogger(__name__)

# Event names emitted to ``hooks`` (fields in comments).
BYTES_SENT = "connection_bytes_sent"          # node_id, nbytes
BYTES_RECEIVED = "connection_bytes_received"  # node_id, nbytes
RESPONSE_RECEIVED = "response_received"       # node_id, api_key, version, latency_ms, response (decoded)

#: encode(correlation_id) -> the whole request frame, size prefix included
EncodeFn = Callable[[int], bytes]

_STREAM_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


class SupportsEmit(Protocol):
    def emit(self, event: str, /, **fields: Any) -> None: ...


class _Pending:
    """A request awaiting its response; the reader fills ``frame`` or ``error`` and sets ``event``."""

    __slots__ = ("correlation_id", "api_key", "version", "sent_at", "deadline", "timeout_ms", "frame", "error",
                 "event", "abandoned", "response_optional")

    def __init__(self, correlation_id: int, api_key: int, version: int, sent_at: float, deadline: float,
                 response_optional: bool = False) -> None:
        self.correlation_id = correlation_id
        self.response_optional = response_optional
        self.api_key = api_key
        self.version = version
        self.sent_at = sent_at
        self.deadline = deadline
        self.timeout_ms = deadline - sent_at
        self.frame: bytes | None = None
        self.error: BaseException | None = None
        self.event: anyio.Event | None = None
        self.abandoned = False


class _DeadlinePassed(Exception):
    """The connection's timer interrupting the reader's wait on a ``LoopStream``: a request's deadline passed."""


def _fresh(error: BaseException) -> BaseException:
    """A copy of ``error`` for one waiter, so concurrent raises do not share (and grow) one traceback."""
    try:
        copy = type(error)(*error.args)
    except Exception:
        return error
    copy.__cause__ = error.__cause__
    if isinstance(error, errors.KafkaConnectionError) and isinstance(copy, errors.KafkaConnectionError):
        copy.reason = error.reason
    return copy


class Connection:
    """A framed, pipelined Kafka connection.  Build it with :meth:`connect`; the constructor wraps a stream."""

    def __init__(self, stream: anyio.abc.ByteStream, *, client_id: str | None = "akresil",
                 request_timeout_ms: float = 30_000, max_in_flight: int = 5, node_id: int | None = None,
                 address: str = "", max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 hooks: SupportsEmit | None = None, clock: Clock = monotonic_ms) -> None:
        if max_in_flight < 1:
            raise errors.ConfigError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if request_timeout_ms <= 0:
            raise errors.ConfigError(f"request_timeout_ms must be > 0, got {request_timeout_ms}")
        self._stream = stream
        #: the back-end's CancelScope, Event and clock, resolved once (``net.backend``): four look-ups per request
        self._rt = loop_primitives()
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight
        self.node_id = node_id
        self.address = address
        self.hooks = hooks
        self._clock = clock
        self._decoder = FrameDecoder(max_frame_bytes)
        self._inflight: InFlight[_Pending] = InFlight()
        # In-flight slots: a counter plus a FIFO of waiters, so the uncontended path never awaits.
        self._free_slots = max_in_flight
        self._slot_waiters: deque[anyio.Event] = deque()
        self._out: list[bytes] = []
        self._writing = False
        self._reader: _Pending | None = None
        #: how the reader learns that a request's deadline passed. On a ``LoopStream`` (asyncio, plain TCP): one
        #: loop timer per connection, armed at or before the earliest deadline and re-armed lazily when it
        #: fires early, which interrupts the reader's wait: no cancel scope per wait (~4 us each, ~5 % of a
        #: small request). On other streams: a cancel scope around the reader's waits, its deadline lowered
        #: as requests with earlier deadlines arrive.
        self._loop_stream = stream if isinstance(stream, LoopStream) else None
        self._loop = running_asyncio_loop() if self._loop_stream is not None else None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = math.inf
        self._deadline_passed = False
        self._reader_scope: anyio.CancelScope | None = None
        self._reader_deadline = math.inf
        self._timeout_s = request_timeout_ms / 1000.0
        self._closed = False
        self._close_error: BaseException | None = None
        #: negotiated version per API (highest common); filled by the ApiVersions handshake
        self.versions: dict[Any, int] = {}
        #: the broker's advertised (min, max) per API key
        self.api_ranges: dict[Any, tuple[int, int]] = {}
        #: the cluster's finalized feature levels as this broker knew them (ApiVersions v3+), and their epoch
        #: (-1: none reported); the client keeps those of the highest epoch (``Cluster.feature_level``)
        self.finalized_features: dict[str, int] = {}
        self.finalized_features_epoch = -1
        #: the ApiVersions version this connection settled on by stepping down past rejections whose body it could
        #: not read (librdkafka's mock), else None: the cluster starts its later connections there
        self.stepped_api_versions: int | None = None
        #: SASL session lifetime the broker granted (KIP-368), 0 if none
        self.session_lifetime_ms = 0
        #: when to re-authenticate (85% into the session, as Java's lower bound), None without a lifetime
        self.reauthenticate_at: float | None = None
        #: latency of the most recent completed request (ms from hand-over to response)
        self.last_latency_ms = 0.0
        #: what a close by the peer before any answer but ApiVersions suggests (``listener_hint``); cleared by
        #: the first other response, after which a close means something else
        self.listener_hint: str | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    async def connect(cls, host: str, port: int, *, client_id: str | None = "akresil",
                      ssl_context: ssl.SSLContext | None = None, server_hostname: str | None = None,
                      sasl: SaslConfig | None = None, connect_timeout_ms: float = 10_000,
                      request_timeout_ms: float = 30_000, max_in_flight: int = 5, node_id: int | None = None,
                      max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, hooks: SupportsEmit | None = None,
                      clock: Clock = monotonic_ms, api_versions_version: int | None = None) -> Connection:
        """Open TCP (and TLS), negotiate API versions, authenticate with SASL; return a ready connection.

        ``connect_timeout_ms`` bounds TCP and TLS set-up; the ApiVersions and SASL requests each get
        ``request_timeout_ms``.  Failures raise ``KafkaConnectionError`` (retriable), ``AuthenticationError``
        (bad credentials, TLS verification failure: not retriable) or ``UnsupportedVersionError``.
        """
        address = f"{host}:{port}"
        where = f"node {node_id} at {address}" if node_id is not None else address
        # Addresses come from Metadata responses too: a broken or hostile broker can advertise any int32
        # port, which the socket layer would reject with an error outside the Kafka hierarchy.
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise errors.KafkaConnectionError(f"cannot connect to {where}: port {port!r} is not in 1..65535")
        if not isinstance(host, str) or not host or "\x00" in host:
            raise errors.KafkaConnectionError(f"cannot connect to {where}: host {host!r} is not a host name")
        stream: anyio.abc.ByteStream
        try:
            with anyio.fail_after(connect_timeout_ms / 1000.0):
                tcp: anyio.abc.ByteStream
                if ssl_context is None and running_asyncio_loop() is not None:
                    tcp = await LoopStream.connect(host, port)     # no selector change per wait (loop_stream)
                else:
                    tcp = await anyio.connect_tcp(host, port)
                _set_nodelay(tcp)
                stream = tcp
                if ssl_context is not None:
                    try:
                        stream = await TLSStream.wrap(tcp, hostname=server_hostname or host,
                                                      ssl_context=ssl_context, standard_compatible=False)
                    except BaseException:
                        await anyio.aclose_forcefully(tcp)
                        raise
        except TimeoutError:
            reason = f"connect timed out after {connect_timeout_ms:g} ms"
            raise errors.KafkaConnectionError(f"cannot connect to {where}: {reason}", reason=reason) from None
        except ssl.SSLError as exc:
            raise errors.AuthenticationError(f"TLS handshake with {where} failed: {exc}") from exc
        except (OSError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            reason = connect_failure_reason(exc)
            raise errors.KafkaConnectionError(f"cannot connect to {where}: {reason}", reason=reason) from exc
        conn = cls(stream, client_id=client_id, request_timeout_ms=request_timeout_ms,
                   max_in_flight=max_in_flight, node_id=node_id, address=address,
                   max_frame_bytes=max_frame_bytes, hooks=hooks, clock=clock)
        conn.listener_hint = listener_hint(tls=ssl_context is not None, sasl=sasl is not None)
        try:
            await conn.negotiate_versions(api_versions_version)
            if sasl is not None:
                await conn.authenticate(sasl)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await conn.close(exc if isinstance(exc, errors.KafkaError) else None)
            raise
        return conn

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"in_flight={len(self._inflight)}"
        return f"<Connection {self._where()} {state}>"

    def _where(self) -> str:
        if self.node_id is not None:
            return f"node {self.node_id} at {self.address}" if self.address else f"node {self.node_id}"
        return self.address or "peer"

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        """Requests written (or queued to write) whose response has not arrived."""
        return len(self._inflight)

    # ------------------------------------------------------------------ requests
    async def _request(self, api_key: ApiKey, body: Mapping[str, Any], *, version: int | None = None,
                       timeout_ms: float | None = None) -> dict[str, Any]:
        """Send one request and return its decoded response (a snake_case field dict).

        ``version`` defaults to the negotiated one.  Waits for an in-flight slot first.  Raises
        ``RequestTimeoutError`` (and closes the connection) when no response comes within ``timeout_ms``
        (default ``request_timeout_ms``), ``KafkaConnectionError`` when the connection dies, and
        ``ProtocolError`` for a malformed response.  Error codes inside the response are the caller's.
        Callers use it as ``request``, typed per API (``net.request_types``).
        """
        if version is None:
            version = self._version_for(api_key)
        client_id = self.client_id
        frame = await self.request_raw(
            api_key, version, lambda cid: encode_request(api_key, version, cid, client_id, body),
            timeout_ms=timeout_ms)
        try:
            response = decode_answer(api_key, version, frame, body)
        except Exception as exc:
            error = errors.ProtocolError(
                f"malformed {_api_name(api_key)} v{version} response from {self._where()}: {exc}")
            error.__cause__ = exc
            with anyio.CancelScope(shield=True):
                await self.close(error)
            raise error from exc
        if self.hooks is not None:
            self.hooks.emit(RESPONSE_RECEIVED, node_id=self.node_id, api_key=api_key, version=version,
                            latency_ms=self.last_latency_ms, response=response)
        return response

    if TYPE_CHECKING:
        #: ``_request`` as the type checker sees it: the response type follows the API key
        request: ConnectionRequest
    else:
        request = _request

    async def send_no_response(self, api_key: Any, body: dict[str, Any], *, version: int | None = None) -> None:
        """Write a request the broker will not answer (Produce with acks=0); no in-flight slot is taken."""
        if version is None:
            version = self._version_for(api_key)
        self._check_open()
        cid = self._inflight.next_correlation_id()
        frame = encode_request(api_key, version, cid, self.client_id, body)
        now = self._clock()
        # Queued as an optional entry: Kafka sends nothing back, but a broker that does answer must not
        # desynchronise the stream (Tansu 0.6 answers acks=0 Produce).
        entry = _Pending(cid, api_key, version, now, now, response_optional=True)
        entry.abandoned = True
        self._inflight.add(entry)
        self._out.append(frame)
        if not self._writing and not self._write_now():
            await self._flush()
        self._check_open()

    def _version_for(self, api_key: Any) -> int:
        version = self.versions.get(api_key)
        if version is None:
            raise errors.UnsupportedVersionError(
                f"{self._where()} has no version of {_api_name(api_key)} in common with akresil "
                f"(broker: {self.api_ranges.get(api_key, 'not offered')})")
        return version

    def _check_open(self) -> None:
        if self._closed:
            raise _fresh(self._close_error or errors.KafkaConnectionError(f"connection to {self._where()} is closed"))

    async def request_raw(self, api_key: Any, version: int, encode: EncodeFn, *,
                          timeout_ms: float | None = None) -> bytes:
        """Send ``encode(correlation_id)`` (a whole frame) and return the response frame without size prefix.

        The codec-free core of :meth:`request`: pipelining, slots, timeouts and correlation all live here.
        """
        self._check_open()
        if self._free_slots > 0 and not self._slot_waiters:
            self._free_slots -= 1
        else:
            await self._wait_for_slot()
        inflight = self._inflight
        cid = inflight.next_correlation_id()
        try:
            frame = encode(cid)
        except BaseException:
            self._release_slot()
            raise
        now = self._clock()
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        pending = _Pending(cid, api_key, version, now, now + timeout)
        pending.timeout_ms = timeout
        inflight.add(pending)
        if self._loop is not None:
            if pending.deadline < self._timer_due:
                self._arm_timer(pending.deadline, now)
        else:
            scope = self._reader_scope
            if scope is not None and pending.deadline < self._reader_deadline:
                self._reader_deadline = pending.deadline
                scope.deadline = self._rt.now() + (pending.deadline - now) / 1000.0
        self._out.append(frame)
        if not self._writing and not self._write_now():
            await self._flush()
        try:
            while pending.frame is None and pending.error is None:
                if self._reader is None:
                    await self._read_for(pending)
                else:
                    pending.event = event = self._rt.event()
                    await event.wait()
        except BaseException:
            # Cancelled from outside: the response must still be read and dropped to keep the stream in step,
            # and if we had been woken to take over reading, someone else must take over instead.
            pending.abandoned = True
            if self._reader is None:
                self._wake_next_reader()
            raise
        if pending.frame is not None:
            self.last_latency_ms = self._clock() - pending.sent_at
            return pending.frame
        assert pending.error is not None
        raise pending.error

    async def _wait_for_slot(self) -> None:
        """Queue (FIFO) for an in-flight slot; raise the close error if the connection closes meanwhile."""
        event = anyio.Event()
        self._slot_waiters.append(event)
        try:
            while True:
                await event.wait()
                self._check_open()
                if self._free_slots > 0:
                    self._free_slots -= 1
                    return
                event = anyio.Event()  # a newcomer took the slot between wake-up and now: keep our place
                self._slot_waiters.appendleft(event)
        except BaseException:
            try:
                self._slot_waiters.remove(event)
            except ValueError:
                self._wake_slot_waiter()  # we were handed a wake-up we will not use: pass it on
            raise

    def _release_slot(self) -> None:
        self._free_slots += 1
        self._wake_slot_waiter()

    def _wake_slot_waiter(self) -> None:
        if self._free_slots > 0 and self._slot_waiters:
            self._slot_waiters.popleft().set()

    # ------------------------------------------------------------------ I/O
    def _write_now(self) -> bool:
        """Hand what is queued to a ``LoopStream``'s transport when its buffer has room: no await and no cancel
        scope (anyio's asyncio CancelScope costs ~4 % of a small request entering and leaving); False leaves it
        to ``_flush`` (another stream, or a full, closed or broken one: the awaited path waits or reports)."""
        stream = self._stream
        if stream.__class__ is not LoopStream:
            return False
        out = self._out
        data = out[0] if len(out) == 1 else b"".join(out)
        if not stream.write_now(data):
            return False
        out.clear()
        if self.hooks is not None:
            self.hooks.emit(BYTES_SENT, node_id=self.node_id, nbytes=len(data))
        return True

    async def _flush(self) -> None:
        """Send everything queued, coalesced; shielded (a torn frame breaks the stream) but time-bounded."""
        self._writing = True
        error: BaseException | None = None
        out = self._out
        try:
            # One scope that is both shielded and deadline-bound: cheaper than nesting two.
            rt = self._rt
            with rt.scope(shield=True, deadline=rt.now() + self._timeout_s) as scope:
                while out:
                    data = out[0] if len(out) == 1 else b"".join(out)
                    out.clear()
                    await self._stream.send(data)
                    if self.hooks is not None:
                        self.hooks.emit(BYTES_SENT, node_id=self.node_id, nbytes=len(data))
            if scope.cancelled_caught:
                error = errors.RequestTimeoutError(
                    f"writing to {self._where()} stalled for {self.request_timeout_ms:g} ms")
        except _STREAM_ERRORS as exc:
            if not self._closed:
                error = errors.KafkaConnectionError(f"connection to {self._where()} failed while writing: "
                                                    f"{exc!r}")
                error.__cause__ = exc
        finally:
            self._writing = False
        if error is not None:
            with anyio.CancelScope(shield=True):
                await self.close(error)

    def _earliest_deadline(self) -> float:
        deadlines = [e.deadline for e in self._inflight if not e.response_optional]
        return min(deadlines) if deadlines else math.inf

    def _arm_timer(self, due: float, now: float) -> None:
        """(``LoopStream`` only) fire ``_on_timer`` at ``due`` (the connection's clock), replacing the timer."""
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due = due
        self._timer = self._loop.call_later(max(0.0, (due - now) / 1000.0), self._on_timer)

    def _on_timer(self) -> None:
        """A deadline may have passed: re-arm for the earliest one if none has (the requests it was armed for
        were answered), else make the reader expire them, or the next reader if none reads now."""
        self._timer = None
        self._timer_due = math.inf
        if self._closed:
            return
        earliest = self._earliest_deadline()
        if earliest == math.inf:
            return
        now = self._clock()
        if earliest > now:
            self._arm_timer(earliest, now)
        elif self._reader is not None:
            assert self._loop_stream is not None
            self._loop_stream.interrupt(_DeadlinePassed())
        else:
            self._deadline_passed = True

    async def _read_for(self, pending: _Pending) -> None:
        """Be the reader until ``pending`` is answered (or the connection dies), then hand the role on.

        The reader also enforces every request's timeout, costing no timer per request: on a ``LoopStream``
        the connection's one timer interrupts its wait (``_on_timer``); otherwise it reads under one cancel
        scope whose deadline is the earliest outstanding deadline (lowered by ``request_raw`` when a request
        with an earlier one arrives), and a deadline that fired for a request answered in the meantime just
        restarts the scope.
        """
        self._reader = pending
        try:
            while pending.frame is None and pending.error is None:
                if self._loop is not None:      # the connection's timer interrupts the wait when one is due
                    due, self._deadline_passed = self._deadline_passed, False
                    if not due:
                        try:
                            await self._read_frames(pending)
                        except _DeadlinePassed:
                            due = True
                else:                           # the wait under a scope at the earliest deadline
                    earliest = self._earliest_deadline()
                    self._reader_deadline = earliest
                    delay_s = (earliest - self._clock()) / 1000.0
                    with self._rt.scope(deadline=self._rt.now() + delay_s) as scope:
                        self._reader_scope = scope
                        try:
                            await self._read_frames(pending)
                        finally:
                            self._reader_scope = None
                    due = scope.cancelled_caught
                if due:
                    await self._expire(self._clock())
        finally:
            self._reader = None
            self._wake_next_reader()

    async def _read_frames(self, pending: _Pending) -> None:
        stream, decoder, inflight = self._stream, self._decoder, self._inflight
        while pending.frame is None and pending.error is None:
            try:
                data = await stream.receive()
            except _STREAM_ERRORS as exc:
                if not self._closed:
                    error: errors.KafkaError
                    if decoder.buffered:
                        error = errors.ProtocolError(
                            f"connection to {self._where()} ended inside a frame "
                            f"({decoder.buffered} bytes of a truncated response)")
                    else:
                        reason = "closed by the peer" if isinstance(exc, anyio.EndOfStream) else f"failed: {exc!r}"
                        if self.listener_hint is not None:
                            reason = f"{reason} {self.listener_hint}"
                            if pending.api_key != ApiKey.API_VERSIONS:
                                # a broker also closes on a request it cannot parse (a layout it reads differently)
                                reason = (f"{reason}; or the broker could not parse the {_api_name(pending.api_key)} "
                                          f"v{pending.version} request it closed on")
                        error = errors.KafkaConnectionError(f"connection to {self._where()} {reason}",
                                                            reason=f"connection {reason}")
                    with anyio.CancelScope(shield=True):
                        await self.close(error)
                return
            if self.hooks is not None:
                self.hooks.emit(BYTES_RECEIVED, node_id=self.node_id, nbytes=len(data))
            try:
                for frame in decoder.feed(data):
                    entry = inflight.match(frame)
                    if entry.api_key != ApiKey.API_VERSIONS:
                        self.listener_hint = None    # the listener speaks what we speak past the handshake
                    if entry.response_optional:
                        continue
                    self._release_slot()
                    if entry.abandoned:
                        continue
                    entry.frame = frame
                    if entry.event is not None:
                        entry.event.set()
            except errors.ProtocolError as exc:
                with anyio.CancelScope(shield=True):
                    await self.close(errors.ProtocolError(f"{exc} (from {self._where()})"))
                return

    async def _expire(self, now: float) -> None:
        """Fail requests past their deadline with RequestTimeoutError and close the connection (as Java does)."""
        expired = [e for e in self._inflight if not e.response_optional and e.deadline <= now]
        if not expired:
            return
        for entry in expired:
            entry.error = errors.RequestTimeoutError(
                f"{_api_name(entry.api_key)} v{entry.version} request (correlation id {entry.correlation_id}) "
                f"to {self._where()} got no response within {entry.timeout_ms:g} ms")
        first = expired[0]
        with anyio.CancelScope(shield=True):
            await self.close(errors.KafkaConnectionError(
                f"connection to {self._where()} closed: {_api_name(first.api_key)} request "
                f"(correlation id {first.correlation_id}) timed out"))

    def _wake_next_reader(self) -> None:
        """Wake the oldest caller still waiting for a response so that it takes over reading."""
        for entry in self._inflight:
            if entry.event is not None and not entry.abandoned and entry.frame is None and entry.error is None:
                entry.event.set()
                return

    # ------------------------------------------------------------------ close
    async def close(self, error: BaseException | None = None) -> None:
        """Close the connection; every pending request fails with ``error`` (default: KafkaConnectionError).

        Idempotent and safe from any task.  The socket is closed forcefully (no TLS close_notify wait): the
        connection is being abandoned, not drained.
        """
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if error is None:
            error = errors.KafkaConnectionError(f"connection to {self._where()} closed")
        self._close_error = error
        self._out.clear()
        for entry in self._inflight.drain():
            if entry.response_optional:
                continue
            if entry.error is None and entry.frame is None:
                entry.error = _fresh(error)
            if entry.event is not None:
                entry.event.set()
        self._free_slots = self.max_in_flight
        while self._slot_waiters:
            self._slot_waiters.popleft().set()
        if error is not None and not isinstance(error, errors.ClientClosedError):
            log.debug("closing connection to %s: %s", self._where(), error)
        await anyio.aclose_forcefully(self._stream)

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.close()

    # ------------------------------------------------------------------ handshake
    async def negotiate_versions(self, start: int | None = None) -> None:
        """ApiVersions: learn the broker's ranges and pick the highest common version of every API.

        Starts with the newest ApiVersions akresil speaks.  A broker that does not know it answers
        UNSUPPORTED_VERSION with a v0 body listing its own ApiVersions range; we retry with that version, or,
        when the body cannot be parsed (librdkafka's mock cluster sends a malformed one), one version lower.
        ``start``: the version to try first when lower than the newest (``stepped_api_versions`` of another
        connection to the same cluster: one request instead of a rejected one per step).
        """
        key = ApiKey.API_VERSIONS
        version = CLIENT_VERSIONS[key][1] if start is None else min(start, CLIENT_VERSIONS[key][1])
        stepped = False
        body: ApiVersionsRequest = {"client_software_name": "akresil", "client_software_version": __version__}
        while True:
            def encode(cid: int, v: int = version) -> bytes:
                return encode_request(key, v, cid, self.client_id, body)

            frame = await self.request_raw(key, version, encode)
            # ApiVersions responses always use header v0, and error_code is the body's first field in every
            # version, so it can be read before knowing which body layout the broker chose.
            if len(frame) < 6:
                raise await self._fail(errors.ProtocolError(
                    f"ApiVersions v{version} response from {self._where()} is truncated ({len(frame)} bytes)"))
            code = int.from_bytes(frame[4:6], "big", signed=True)
            if code == errors.UnsupportedVersionError.errno:
                fallback = version - 1
                try:
                    theirs = broker_versions(decode_response(key, 0, frame)).get(int(key))
                except errors.ProtocolError:
                    # unparsable body (librdkafka's mock, a supported test broker): step down one version, as
                    # KIP-511 asks of a client whatever the broker
                    theirs = None
                    stepped = True
                if theirs is not None and theirs[1] < version:
                    fallback = theirs[1]
                if fallback < 0:
                    raise await self._fail(errors.UnsupportedVersionError(
                        f"{self._where()} rejected every ApiVersions version akresil speaks"))
                log.debug("%s rejected ApiVersions v%d; retrying with v%d", self._where(), version, fallback)
                version = fallback
                continue
            if code:
                raise await self._fail(errors.error_for_code(code)(
                    f"ApiVersions v{version} to {self._where()} failed with error code {code}"))
            try:
                response = decode_response(key, version, frame)
            except Exception as exc:
                raise await self._fail(errors.ProtocolError(
                    f"malformed ApiVersions v{version} response from {self._where()}: {exc}")) from exc
            break
        self.stepped_api_versions = version if stepped else None
        ranges: dict[Any, tuple[int, int]] = {}
        for api, span in broker_versions(response).items():
            try:
                ranges[ApiKey(api)] = span
            except ValueError:
                ranges[api] = span  # an API akresil does not speak: kept for diagnostics
        self.api_ranges = ranges
        self.versions = negotiate(ranges)
        self.finalized_features = {f["name"]: int(f["max_version_level"])
                                   for f in response.get("finalized_features") or ()}
        epoch = response.get("finalized_features_epoch")
        self.finalized_features_epoch = -1 if epoch is None else int(epoch)

    async def authenticate(self, sasl: SaslConfig) -> None:
        """SaslHandshake v1 then SaslAuthenticate rounds until the mechanism completes (KIP-152)."""
        where = self._where()
        if self.versions.get(ApiKey.SASL_HANDSHAKE, -1) < 1 or ApiKey.SASL_AUTHENTICATE not in self.versions:
            raise await self._fail(errors.UnsupportedVersionError(
                f"{where} does not offer SaslHandshake v1+ and SaslAuthenticate (pre-1.0 broker?)"))
        handshake = await self.request(ApiKey.SASL_HANDSHAKE, {"mechanism": sasl.mechanism}, version=1)
        if handshake["error_code"]:
            offered = ", ".join(handshake.get("mechanisms") or ()) or "none"
            raise await self._fail(errors.AuthenticationError(
                f"{where} does not accept SASL mechanism {sasl.mechanism} (offers: {offered}; "
                f"error code {handshake['error_code']})"))
        try:
            client = await sasl.start()
        except errors.KafkaError as exc:
            raise await self._fail(exc) from None
        token: bytes | None = client.first()
        lifetime_ms = 0
        while token is not None:
            response = await self.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token})
            if response["error_code"]:
                detail = response.get("error_message") or f"error code {response['error_code']}"
                raise await self._fail(errors.AuthenticationError(
                    f"SASL {sasl.mechanism} authentication as {sasl.identity} with {where} failed: {detail}"))
            lifetime_ms = response.get("session_lifetime_ms") or 0
            try:
                token = client.step(response.get("auth_bytes") or b"")
            except errors.KafkaError as exc:
                raise await self._fail(exc) from None
        if not client.complete:
            raise await self._fail(errors.AuthenticationError(
                f"SASL {sasl.mechanism} exchange with {where} ended before the mechanism completed"))
        self.session_lifetime_ms = lifetime_ms
        if self.session_lifetime_ms > 0:
            self.reauthenticate_at = self._clock() + self.session_lifetime_ms * 0.85

    def reauthentication_due(self, now: float) -> bool:
        """The SASL session is 85% through its lifetime and nothing is in flight: time to reconnect."""
        return self.reauthenticate_at is not None and now >= self.reauthenticate_at and not self._inflight

    async def _fail(self, error: BaseException) -> BaseException:
        """Close with ``error`` and return it for the caller to raise."""
        with anyio.CancelScope(shield=True):
            await self.close(error)
        return error


def _set_nodelay(stream: anyio.abc.ByteStream) -> None:
    """Kafka requests are small and latency-bound: disable Nagle (both backends usually do already)."""
    sock = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _api_name(api_key: Any) -> str:
    return getattr(api_key, "name", None) or f"api {api_key}"


def listener_hint(*, tls: bool, sasl: bool) -> str | None:
    """What a listener that closes a new connection during or right after ApiVersions probably wants: a Kafka
    SASL listener answers ApiVersions, then closes on any request but SaslHandshake; a TLS listener closes
    on the plaintext bytes at once.  None when the client already uses both."""
    if tls and sasl:
        return None
    if tls:
        needs = "SASL (security_protocol='SASL_SSL' and sasl_mechanism)"
    elif sasl:
        needs = "TLS (security_protocol='SASL_SSL')"
    else:
        needs = "SASL or TLS (security_protocol='SASL_PLAINTEXT', 'SSL' or 'SASL_SSL')"
    return f"during or right after ApiVersions: the listener may require {needs}"


def connect_failure_reason(exc: BaseException) -> str:
    """A failed connect attempt's cause in words. anyio reports a host whose every address failed as
    "All connection attempts failed" and keeps the last address's error as ``__cause__``: name that one."""
    if isinstance(exc, socket.gaierror):
        return f"host name does not resolve ({exc.strerror or exc})"
    inner = exc.__cause__
    if type(exc) is OSError and exc.errno is None and isinstance(inner, OSError):
        return connect_failure_reason(inner)
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return str(exc) or type(exc).__name__
