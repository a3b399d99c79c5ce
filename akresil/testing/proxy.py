"""FaultProxy: a Kafka-aware TCP proxy presenting N virtual brokers in front of one real broker.

Each virtual node listens on its own loopback port; every client connection gets its own upstream connection
to the real broker, so correlation ids and per-connection ordering carry through unchanged.  Frames are cut at
the 4-byte size prefix and only the request header is parsed on the pass-through path; bodies are decoded only
where the proxy must rewrite them (Metadata, FindCoordinator, DescribeCluster, capped ApiVersions) or where a
scripted fault touches them (moved leaders, failing requests, throttles).  The decisions themselves live in
``faults.FaultState`` (sans-IO); this module is the I/O shell and the sync/async script surface.

Two ways to run it:

* async: ``async with FaultProxy(upstream, nodes=3) as proxy:`` on the caller's event loop;
* sync: ``proxy.start()`` / ``proxy.stop()`` run a private loop in a daemon thread.

Every script method has a plain (sync, thread-safe) form and an ``a``-prefixed coroutine form.

It can also be the secure front of a broker that has none (Tansu 0.6 serves neither TLS nor SASL PLAIN):
``ssl_context`` makes every virtual node a TLS listener, and ``sasl_users`` makes the proxy authenticate each
client connection itself (PLAIN, SCRAM-SHA-256/512; ``faults.SaslGate`` holds Kafka's rules) before anything
reaches the broker.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import ssl
import struct
import threading
import time
from collections import deque
from typing import Any, Callable, Coroutine, Iterable, Mapping, Sequence, TypeVar

from ..errors import ProtocolError
from ..net.sasl import MECHANISMS
from .sasl_server import OAuthValidator, SaslUserTable
from ..protocol import api as codec
from .faults import (API_VERSIONS, DESCRIBE_CLUSTER, FETCH, FIND_COORDINATOR, LIST_OFFSETS, METADATA, PRODUCE,
                     SASL_AUTHENTICATE, SASL_HANDSHAKE, SASL_MAX_RECEIVE_BYTES, AppendedBatches, BatchKey,
                     FaultState, GateAction, PartitionAnswer, SaslGate, collect_error_codes, idempotent_batches,
                     partition_errors, request_partitions, throttle_mutes_client)
from .recorder import (ConnectionEvent, LeaderHint, RecordedRequest, RecordedResponse, Recorder,
                       TopicPartition)

log = logging.getLogger(__name__)

T = TypeVar("T")
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")
#: responses the proxy always decodes and rewrites
_REWRITTEN = frozenset({METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER})
#: requests whose topic-partitions are recorded (decoding them is cheap: records stay opaque bytes)
_PARTITIONED_REQUESTS = frozenset({PRODUCE, FETCH, LIST_OFFSETS})
#: sanity bounds for a request header (Kafka's API keys and versions are far below them)
MAX_API_KEY = 127
MAX_API_VERSION = 63
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
#: how long a dropped connection keeps reading the broker's answers to requests it had forwarded
UPSTREAM_DRAIN_TIMEOUT_S = 5.0


def now_ms() -> float:
    """The proxy's clock: ``time.monotonic()`` in ms, the same source as asyncio's ``loop.time()``."""
    return time.monotonic() * 1000.0


# ---------------------------------------------------------------------------------------------- framing
#: how long stop() waits for connections to close by themselves before aborting them
_STOP_GRACE_S = 2.0

class RequestHeader:
    """The parsed request header of one frame, plus where its body starts."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "body_offset")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                 body_offset: int) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.body_offset = body_offset


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtocolError("request header: truncated tagged-field varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("request header: tagged-field varint longer than 5 bytes")


def parse_request_header(frame: bytes) -> RequestHeader:
    """Parse a request header without touching the body; raises ProtocolError on garbage.

    APIs the codec has no schema for are still forwarded (clients send DescribeConfigs,
    OffsetForLeaderEpoch, ...): their ``body_offset`` is -1 because the header version is unknown."""
    if len(frame) < _HEADER.size:
        raise ProtocolError(f"request frame of {len(frame)} bytes is shorter than a request header")
    api_key, version, corr, id_len = _HEADER.unpack_from(frame, 0)
    if not 0 <= api_key <= MAX_API_KEY:
        raise ProtocolError(f"request header: api_key {api_key} is not a Kafka API")
    if not 0 <= version <= MAX_API_VERSION:
        raise ProtocolError(f"request header: api_version {version} of api_key {api_key} is out of range")
    pos = _HEADER.size
    client_id: str | None = None
    if id_len >= 0:
        end = pos + id_len
        if end > len(frame):
            raise ProtocolError("request header: client_id runs past the end of the frame")
        try:
            client_id = frame[pos:end].decode()
        except UnicodeDecodeError as exc:
            raise ProtocolError("request header: client_id is not UTF-8") from exc
        pos = end
    elif id_len != -1:
        raise ProtocolError(f"request header: bad client_id length {id_len}")
    header_version = _header_version(api_key, version)
    if header_version is None:
        return RequestHeader(api_key, version, corr, client_id, -1)
    if header_version >= 2:
        count, pos = _read_uvarint(frame, pos)
        for _ in range(count):
            _, pos = _read_uvarint(frame, pos)
            size, pos = _read_uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise ProtocolError("request header: tagged fields run past the end of the frame")
    return RequestHeader(api_key, version, corr, client_id, pos)


_header_versions: dict[tuple[int, int], int | None] = {}


def _header_version(api_key: int, version: int) -> int | None:
    key = (api_key, version)
    try:
        return _header_versions[key]
    except KeyError:
        pass
    try:
        hv: int | None = codec.request_header_version(api_key, version)
    except Exception:   # no schema for this API / version: forward it untouched
        hv = None
    _header_versions[key] = hv
    return hv


def produce_acks(frame: bytes, header: RequestHeader) -> int:
    """``acks`` of a Produce request read straight from the bytes (acks=0 gets no response)."""
    pos = header.body_offset
    v = header.api_version
    if v >= 3:   # transactional_id precedes acks
        if v >= 9:
            n, pos = _read_uvarint(frame, pos)
            pos += max(n - 1, 0)
        else:
            (n,) = struct.unpack_from(">h", frame, pos)
            pos += 2 + max(n, 0)
    if pos + 2 > len(frame):
        raise ProtocolError("Produce request: truncated before acks")
    acks: int = struct.unpack_from(">h", frame, pos)[0]
    return acks


# ---------------------------------------------------------------------------------------------- connections
class _Slot:
    """One request awaiting its response on a client connection (responses go back in request order)."""

    __slots__ = ("api_key", "version", "corr", "client_id", "arrival_ms", "answers", "raw", "body", "ready",
                 "release_ms", "throttle_ms", "window_end_ms", "delayed", "synthesized", "request_body", "sent",
                 "reply", "close_reason")

    def __init__(self, api_key: int, version: int, corr: int, client_id: str | None, arrival_ms: float) -> None:
        self.api_key = api_key
        self.version = version
        self.corr = corr
        self.client_id = client_id
        self.arrival_ms = arrival_ms
        self.answers: list[PartitionAnswer] = []
        self.raw: bytes | None = None          # upstream response frame (without size prefix)
        self.body: dict[str, Any] | None = None  # synthesized response body
        self.ready = False
        self.release_ms = 0.0
        self.throttle_ms: int | None = None
        #: the throttle came from a window (``FaultState.add_throttle_window``) ending then: requests are
        #: recorded against it but not held
        self.window_end_ms: float | None = None
        self.delayed = False
        self.synthesized = False
        self.request_body: dict[str, Any] | None = None
        #: idempotent batches of a forwarded Produce request, per partition (see ``AppendedBatches``)
        self.sent: dict[tuple[str, int], BatchKey] | None = None
        #: bytes to send as they are (a bare SASL token after SaslHandshake v0), bypassing the codec
        self.reply: bytes | None = None
        #: close the connection once this answer is written (a failed authentication), with this reason
        self.close_reason: str | None = None


class _Pending:
    __slots__ = ("header", "frame", "body", "arrival_ms")

    def __init__(self, header: RequestHeader, frame: bytes, body: dict[str, Any] | None, arrival_ms: float) -> None:
        self.header = header
        self.frame = frame
        self.body = body
        self.arrival_ms = arrival_ms


class _Connection:
    """A client connection on one virtual node and its private upstream connection."""

    def __init__(self, proxy: FaultProxy, node_id: int, conn_id: int, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.state = proxy.state
        self.node_id = node_id
        self.conn_id = conn_id
        self.reader = reader
        self.writer = writer
        self.up_reader: asyncio.StreamReader | None = None
        self.up_writer: asyncio.StreamWriter | None = None
        self.slots: deque[_Slot] = deque()      # every request still owed a response, in order
        self.upstream: deque[_Slot] = deque()   # forwarded requests awaiting the broker, in order
        self.backlog: deque[_Pending] = deque()  # requests held while the connection is muted
        #: a next-response throttle mutes the connection: requests arriving before this are held
        self.mute_until_ms = 0.0
        #: a throttle window told the client to be quiet until this; requests are recorded, not held
        self.notice_until_ms = 0.0
        self.closed = False
        #: the client side is gone but requests already forwarded are still read from the broker, as a real
        #: broker still appends (and remembers) a Produce whose client disconnected
        self._draining = False
        self._close_reason = ""
        self._flush_timer: asyncio.TimerHandle | None = None
        self._drain_timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        #: server-side SASL state when the proxy authenticates clients, else None
        self.gate: SaslGate | None = SaslGate(proxy.sasl) if proxy.sasl is not None else None

    # -------------------------------------------------------------- lifecycle
    async def run(self) -> None:
        proxy = self.proxy
        try:
            try:
                self.up_reader, self.up_writer = await asyncio.wait_for(
                    asyncio.open_connection(proxy.upstream_host, proxy.upstream_port),
                    proxy.connect_timeout_s)
            except (OSError, asyncio.TimeoutError) as exc:
                self.close(f"upstream connect failed: {exc}")
                return
            up_task = asyncio.create_task(self._upstream_loop(), name=f"fault-proxy-up-{self.conn_id}")
            try:
                await self._client_loop()
            finally:
                self.close(self._close_reason or "client closed")
                if self._draining:
                    await asyncio.wait({up_task}, timeout=UPSTREAM_DRAIN_TIMEOUT_S)
                    self._stop_draining()
                up_task.cancel()
                await asyncio.gather(up_task, return_exceptions=True)
        except Exception:   # never let one connection take the proxy down
            log.exception("fault proxy connection %d failed", self.conn_id)
            self.close("internal error")
        finally:
            await self._wait_closed()

    def close(self, reason: str, *, abort: bool = False, drain_upstream: bool = False) -> None:
        """``drain_upstream``: keep reading the broker's answers to requests already forwarded (the client
        never sees them) so idempotent batches appended meanwhile are remembered, then close that side too."""
        if self.closed:
            if not drain_upstream:
                self._stop_draining()
            return
        self.closed = True
        self._close_reason = reason
        for timer in (self._flush_timer, self._drain_timer):
            if timer is not None:
                timer.cancel()
        self._draining = drain_upstream and bool(self.upstream) and self.up_writer is not None
        for w in (self.writer,) if self._draining else (self.writer, self.up_writer):
            if w is None:
                continue
            try:
                if abort:
                    w.transport.abort()
                else:
                    w.close()
            except Exception:  # already torn down
                pass
        self.proxy._connection_closed(self, reason)

    def abort_transports(self) -> None:
        for w in (self.writer, self.up_writer):
            if w is not None:
                try:
                    w.transport.abort()
                except Exception:  # already torn down
                    pass

    def _stop_draining(self) -> None:
        if self._draining:
            self._draining = False
            if self.up_writer is not None:
                self.up_writer.transport.abort()

    async def _wait_closed(self) -> None:
        for w in (self.writer, self.up_writer):
            if w is None:
                continue
            try:
                await w.wait_closed()
            except Exception:
                pass

    # -------------------------------------------------------------- client -> proxy
    async def _client_loop(self) -> None:
        reader = self.reader
        proxy = self.proxy
        state = self.state
        recorder = proxy.recorder
        max_frame = proxy.max_frame_bytes
        gate = self.gate
        while not self.closed:
            try:
                size_bytes = await reader.readexactly(4)
            except (asyncio.IncompleteReadError, ConnectionError):
                self._close_reason = "client closed"
                return
            (size,) = _SIZE.unpack(size_bytes)
            authenticating = gate is not None and not gate.authenticated
            raw_token = gate is not None and gate.expects_raw_token
            if (size < (0 if raw_token else _HEADER.size)
                    or size > (SASL_MAX_RECEIVE_BYTES if authenticating else max_frame)):
                self._close_reason = f"bad frame size {size}"
                return
            try:
                frame = await reader.readexactly(size)
            except (asyncio.IncompleteReadError, ConnectionError):
                self._close_reason = "client closed mid-frame"
                return
            if raw_token:
                assert gate is not None
                self._raw_token(gate, frame)
                continue
            arrival = now_ms()
            try:
                header = parse_request_header(frame)
                body = None
                api_key = header.api_key
                if header.body_offset >= 0 and (
                        (authenticating or api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE)) and gate is not None
                        or (api_key in _PARTITIONED_REQUESTS and proxy.record_partitions)
                        or api_key == PRODUCE
                        or (api_key in (PRODUCE, FETCH) and state.needs_partition_plan(api_key))
                        or state.has_fail_rule(api_key)):
                    body = codec.decode_request(frame)[1]
            except Exception as exc:
                self._close_reason = f"malformed request: {exc}"
                log.info("fault proxy node %d conn %d: closing, %s", self.node_id, self.conn_id, exc)
                return
            held = arrival < self.mute_until_ms
            in_window = held or arrival < self.notice_until_ms
            recorder.add_request(RecordedRequest(
                node_id=self.node_id, connection_id=self.conn_id, client_id=header.client_id,
                api_key=header.api_key, api_version=header.api_version, correlation_id=header.correlation_id,
                time_ms=arrival,
                partitions=request_partitions(api_key, header.api_version, body, state) if body else (),
                in_throttle_window=in_window))
            pending = _Pending(header, frame, body, arrival)
            if held or self.backlog:
                self.backlog.append(pending)
                self._schedule_drain()
            else:
                self._process(pending)
            up = self.up_writer
            if up is not None and up.transport.get_write_buffer_size() > 1 << 20:
                await up.drain()

    def _schedule_drain(self) -> None:
        if self._drain_timer is None and not self.closed:
            self._drain_timer = self._loop.call_at(self.mute_until_ms / 1000.0, self._drain)

    def _drain(self) -> None:
        self._drain_timer = None
        while self.backlog and not self.closed:
            if now_ms() < self.mute_until_ms:
                self._schedule_drain()
                return
            self._process(self.backlog.popleft())

    def _raw_token(self, gate: SaslGate, token: bytes) -> None:
        """A bare SASL token (after SaslHandshake v0): answer it with a bare token, or close."""
        decision = gate.on_raw_token(token)
        if decision.action is not GateAction.ANSWER:
            log.debug("fault proxy node %d conn %d: closing, %s", self.node_id, self.conn_id, decision.reason)
            self._close_reason = decision.reason
            self.close(decision.reason)
            return
        slot = _Slot(SASL_AUTHENTICATE, 0, -1, None, now_ms())
        slot.reply = _SIZE.pack(len(decision.raw or b"")) + (decision.raw or b"")
        slot.throttle_ms = 0
        self._answer_locally(slot)

    def _process(self, p: _Pending) -> None:
        """Decide one request: forward it as is, forward part of it, or answer it here."""
        if self.closed:
            return
        h = p.header
        state = self.state
        api_key = h.api_key
        slot = _Slot(api_key, h.api_version, h.correlation_id, h.client_id, p.arrival_ms)
        gate = self.gate
        if gate is not None and (not gate.authenticated or api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE)
                                 or gate.session_expires_at_ms is not None):
            decision = gate.on_request(api_key, h.api_version, p.body, now_ms=p.arrival_ms)
            if decision.action is GateAction.CLOSE:
                log.debug("fault proxy node %d conn %d: closing, %s", self.node_id, self.conn_id, decision.reason)
                self._close_reason = decision.reason
                self.close(decision.reason)
                return
            if decision.action is GateAction.ANSWER:
                slot.body = decision.body
                slot.synthesized = True
                if decision.close_after:
                    slot.close_reason = decision.reason
                self._answer_locally(slot)
                return
        slot.release_ms = p.arrival_ms + state.latency_ms(self.node_id, api_key) if state.has_latency() else 0.0
        expects_response = not (api_key == PRODUCE and produce_acks(p.frame, h) == 0)
        if api_key == PRODUCE and expects_response and p.body is not None:
            slot.sent = idempotent_batches(p.body) or None
        if p.body is not None and api_key in (PRODUCE, FETCH) and state.needs_partition_plan(api_key):
            plan = state.plan_partitions(api_key, h.api_version, self.node_id, p.body)
            if plan.modified:
                if not expects_response and plan.answers:
                    # an acks=0 producer cannot be told about errors: Kafka closes the connection
                    self.close("acks=0 produce hit a scripted error")
                    return
                slot.answers = plan.answers
                if plan.forward is None:
                    slot.body = state.merge_answers(api_key, h.api_version, None, plan.answers)
                    slot.synthesized = True
                    self._answer_locally(slot)
                    return
                data = codec.encode_request(api_key, h.api_version, h.correlation_id, h.client_id, plan.forward)
                self._forward(slot, data, expects_response)
                return
        elif p.body is not None and api_key not in (PRODUCE, FETCH):
            code = state.take_fail(api_key, self.node_id)
            if code is not None:
                slot.body = state.error_response(api_key, h.api_version, code, p.body)
                slot.synthesized = True
                slot.request_body = p.body
                self._answer_locally(slot)
                return
        self._forward(slot, _SIZE.pack(len(p.frame)) + p.frame, expects_response)

    def _forward(self, slot: _Slot, data: bytes, expects_response: bool) -> None:
        assert self.up_writer is not None
        self.up_writer.write(data)
        if expects_response:
            self.slots.append(slot)
            self.upstream.append(slot)

    def _answer_locally(self, slot: _Slot) -> None:
        slot.ready = True
        self.slots.append(slot)
        self._flush()

    # -------------------------------------------------------------- broker -> proxy
    async def _upstream_loop(self) -> None:
        reader = self.up_reader
        assert reader is not None
        try:
            while not self.closed or (self._draining and self.upstream):
                size_bytes = await reader.readexactly(4)
                (size,) = _SIZE.unpack(size_bytes)
                if size < 4:
                    raise ProtocolError(f"broker sent a frame of {size} bytes")
                frame = await reader.readexactly(size)
                if not self.upstream:
                    raise ProtocolError("broker sent a response nobody asked for")
                slot = self.upstream.popleft()
                (corr,) = _SIZE.unpack_from(frame, 0)
                if corr != slot.corr:
                    raise ProtocolError(f"broker answered correlation id {corr}, expected {slot.corr}")
                slot.raw = frame
                slot.ready = True
                if slot.sent:
                    self._remember_produce(slot)
                self._flush()
            self._stop_draining()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close("broker closed the connection")
        except ProtocolError as exc:
            log.warning("fault proxy conn %d: %s", self.conn_id, exc)
            self.close(str(exc))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("fault proxy conn %d: upstream loop failed", self.conn_id)
            self.close("internal error")

    def _remember_produce(self, slot: _Slot) -> None:
        """Feed ``AppendedBatches`` with a Produce answer and give a retried duplicate Kafka's answer."""
        assert slot.raw is not None and slot.sent is not None
        try:
            body = codec.decode_response(PRODUCE, slot.version, slot.raw)
        except Exception as exc:
            log.warning("fault proxy: cannot decode Produce v%d response (%s)", slot.version, exc)
            return
        appended = self.proxy.appended
        if appended.rewrite_duplicates(slot.sent, body):
            slot.body = body
        appended.note_response(slot.sent, body)

    # -------------------------------------------------------------- proxy -> client
    def _flush(self) -> None:
        """Write every response at the head of the queue that is ready and due, in request order."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        slots = self.slots
        while slots and slots[0].ready and not self.closed:
            slot = slots[0]
            now = now_ms()
            if slot.throttle_ms is None:
                throttle = self.state.take_throttle(self.node_id, slot.client_id, slot.api_key, slot.version,
                                                    now_ms=now)
                slot.throttle_ms = throttle.ms
                slot.window_end_ms = throttle.window_end_ms
                if slot.throttle_ms and not throttle_mutes_client(slot.api_key, slot.version):
                    # before KIP-219 the broker itself held the throttled response back
                    slot.release_ms = max(slot.release_ms, now + slot.throttle_ms)
                    slot.delayed = True
                    if slot.window_end_ms is None:
                        self.mute_until_ms = max(self.mute_until_ms, slot.release_ms)
            if slot.release_ms > now:
                self._flush_timer = self._loop.call_at(slot.release_ms / 1000.0, self._flush)
                return
            slots.popleft()
            try:
                data, body = self._finish(slot, now)
            except Exception:
                log.exception("fault proxy conn %d: cannot build response for api %d v%d", self.conn_id,
                              slot.api_key, slot.version)
                self.close("internal error building a response")
                return
            self.writer.write(data)
            # recorded at ``now``, when the throttle was decided: nothing is read between then and the write
            # (one loop), so a request stamped later was read after this response was written, and a
            # throttle announced at ``now`` ends where its window does
            if slot.reply is None:
                try:
                    self._record_response(slot, body, slot.throttle_ms or 0, now)
                except Exception:   # a recording bug must not break the client's connection
                    log.exception("fault proxy conn %d: cannot record response for api %d v%d", self.conn_id,
                                  slot.api_key, slot.version)
            if slot.close_reason is not None:
                # Kafka closes a connection whose authentication failed once the answer is out; close()
                # still flushes what was just written
                log.debug("fault proxy node %d conn %d: closing, %s", self.node_id, self.conn_id,
                          slot.close_reason)
                self._close_reason = slot.close_reason
                self.close(slot.close_reason)
                return
            if slot.throttle_ms and not slot.delayed:
                # the client's mute starts when the throttled response leaves; a mute only moves forward
                if slot.window_end_ms is None:
                    self.mute_until_ms = max(self.mute_until_ms, now + slot.throttle_ms)
                else:
                    self.notice_until_ms = max(self.notice_until_ms, now + slot.throttle_ms)

    def _finish(self, slot: _Slot, now: float) -> tuple[bytes, dict[str, Any] | None]:
        """Rewrite a response as the scripted faults require; returns the bytes to send and the decoded body
        (None when it was not decoded) for the recording."""
        if slot.reply is not None:
            return slot.reply, None
        state = self.state
        proxy = self.proxy
        api_key, version = slot.api_key, slot.version
        throttle = slot.throttle_ms or 0
        body = slot.body
        must_rewrite = (body is not None or bool(slot.answers) or throttle > 0 or api_key in _REWRITTEN
                        or (api_key == API_VERSIONS and (state.has_version_caps() or self.gate is not None)))
        if body is None and (must_rewrite or proxy.inspect_responses):
            assert slot.raw is not None
            try:
                body = codec.decode_response(api_key, version, slot.raw)
            except Exception as exc:
                if must_rewrite:
                    log.warning("fault proxy: cannot decode %d v%d response (%s); passing it through",
                                api_key, version, exc)
                body = None
                must_rewrite = False
        if body is not None and must_rewrite:
            if slot.answers and not slot.synthesized:
                body = state.merge_answers(api_key, version, body, slot.answers)
            if api_key == METADATA:
                state.rewrite_metadata(body, version, now)
            elif api_key == FIND_COORDINATOR:
                state.rewrite_find_coordinator(body, version)
            elif api_key == DESCRIBE_CLUSTER:
                state.rewrite_describe_cluster(body, version)
            elif api_key == API_VERSIONS:
                state.rewrite_api_versions(body)
                if self.gate is not None and not body.get("error_code"):
                    self.gate.rewrite_api_versions(body)
            if throttle:
                body["throttle_time_ms"] = throttle
            data = codec.encode_response(api_key, version, slot.corr, body)
        else:
            assert slot.raw is not None
            data = _SIZE.pack(len(slot.raw)) + slot.raw
        return data, body

    def _record_response(self, slot: _Slot, body: dict[str, Any] | None, throttle: int, written_ms: float
                         ) -> None:
        perr: dict[TopicPartition, int] = {}
        hints: tuple[LeaderHint, ...] = ()
        errors: tuple[int, ...] | None = None
        if body is not None:
            errors = collect_error_codes(body)
            if slot.api_key in (PRODUCE, FETCH):
                perr = partition_errors(slot.api_key, slot.version, body, self.state)
            if throttle == 0:
                throttle = body.get("throttle_time_ms", 0) or 0
        if slot.answers:
            hints = tuple(LeaderHint(a.topic, a.partition, a.hint[0], a.hint[1])
                          for a in slot.answers if a.hint is not None)
        self.proxy.recorder.add_response(RecordedResponse(
            node_id=self.node_id, connection_id=self.conn_id, client_id=slot.client_id, api_key=slot.api_key,
            api_version=slot.version, correlation_id=slot.corr, time_ms=written_ms, error_codes=errors,
            partition_errors=perr, throttle_time_ms=throttle, hints=hints, synthesized=slot.synthesized))


# ---------------------------------------------------------------------------------------------- the proxy
class _Node:
    def __init__(self, node_id: int, port: int) -> None:
        self.node_id = node_id
        self.port = port
        self.server: asyncio.base_events.Server | None = None
        #: stopped by the script: the listener stays open and resets every connection (recorded "refused")
        self.stopped = False


class FaultProxy:
    """N virtual brokers on loopback in front of one real broker, with a script API for faults.

    ``upstream``: ``"host:port"`` (the first of a comma-separated list is used) or ``(host, port)``.
    ``nodes``: how many virtual brokers (ids 1..N) or the explicit ids.  ``ports``: fixed ports (default: free
    ones).  ``coordinator_node`` / ``controller_node``: the node FindCoordinator and Metadata/DescribeCluster
    name (default: the first node).  ``inspect_responses``: decode every response to record its error codes
    (turn off for benchmarks: then only rewritten responses are inspected).

    Secure front: ``ssl_context`` (a server-side ``ssl.SSLContext`` with its certificate loaded) makes every
    node a TLS listener; ``sasl_users`` (user name -> password, hashed at once and not kept) makes the proxy
    authenticate every connection itself with ``sasl_mechanisms`` before forwarding anything.
    ``sasl_oauth_validator(token, extensions) -> OAuthGrant`` (raising ``AuthenticationError`` to refuse) adds
    OAUTHBEARER; the grant's session lifetime is sent to the client (KIP-368) and a request arriving after it
    ends closes the connection, as a Kafka broker does.
    """

    def __init__(self, upstream: str | tuple[str, int], nodes: int | Sequence[int] = 3, *,
                 host: str = "127.0.0.1", ports: Sequence[int] | None = None, coordinator_node: int | None = None,
                 controller_node: int | None = None, record_partitions: bool = True,
                 inspect_responses: bool = True, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 connect_timeout_s: float = 5.0, ssl_context: ssl.SSLContext | None = None,
                 sasl_users: Mapping[str, str] | None = None,
                 sasl_mechanisms: Sequence[str] = MECHANISMS,
                 sasl_oauth_validator: OAuthValidator | None = None) -> None:
        self.upstream_host, self.upstream_port = _parse_upstream(upstream)
        if isinstance(nodes, bool):
            raise TypeError(f"nodes: expected a count or a sequence of node ids, got {nodes!r}")
        if isinstance(nodes, int):
            if nodes < 1:
                raise ValueError(f"nodes: need at least one virtual node, got {nodes}")
            node_ids: tuple[int, ...] = tuple(range(1, nodes + 1))
        else:
            node_ids = tuple(nodes)
        if ports is not None and len(ports) != len(node_ids):
            raise ValueError(f"ports: need one port per node ({len(node_ids)}), got {len(ports)}")
        if max_frame_bytes < 64:
            raise ValueError(f"max_frame_bytes: must be >= 64, got {max_frame_bytes}")
        self.state = FaultState(node_ids, coordinator_node=coordinator_node, controller_node=controller_node)
        self.recorder = Recorder()
        #: answers to recent idempotent batches, shared by every connection (a retry arrives on a new one)
        self.appended = AppendedBatches()
        self.host = host
        self.record_partitions = record_partitions
        self.inspect_responses = inspect_responses
        self.max_frame_bytes = max_frame_bytes
        self.connect_timeout_s = connect_timeout_s
        if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
            raise ValueError(f"ssl_context: expected an ssl.SSLContext, got {type(ssl_context).__name__}")
        self.ssl_context = ssl_context
        if isinstance(sasl_mechanisms, str):
            raise ValueError(f"sasl_mechanisms: expected a sequence of mechanism names, got {sasl_mechanisms!r}")
        #: the users the proxy authenticates (None: no SASL, connections are forwarded unauthenticated)
        if sasl_oauth_validator is not None and "OAUTHBEARER" not in sasl_mechanisms:
            sasl_mechanisms = (*sasl_mechanisms, "OAUTHBEARER") if sasl_users is not None else ("OAUTHBEARER",)
        self.sasl: SaslUserTable | None = (
            SaslUserTable(sasl_users or {}, mechanisms=sasl_mechanisms, oauth_validator=sasl_oauth_validator)
            if sasl_users is not None or sasl_oauth_validator is not None else None)
        self._nodes = {n: _Node(n, ports[i] if ports else 0) for i, n in enumerate(node_ids)}
        self._conns: dict[int, _Connection] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._running = False

    # ------------------------------------------------------------------ topology
    @property
    def node_ids(self) -> tuple[int, ...]:
        return self.state.node_ids

    def port(self, node: int) -> int:
        return self._node(node).port

    def address(self, node: int) -> str:
        return f"{self.host}:{self.port(node)}"

    @property
    def bootstrap_servers(self) -> str:
        """Every virtual node, comma-separated (what a client's ``bootstrap_servers`` takes)."""
        return ",".join(self.address(n) for n in self.node_ids)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the proxy runs on (its own thread's after ``start()``); None when stopped."""
        return self._loop if self._running else None

    def leader(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader node id, leader epoch) the proxy currently presents for a partition."""
        return self.state.leader(topic, partition)

    def _node(self, node: int) -> _Node:
        try:
            return self._nodes[node]
        except KeyError:
            raise ValueError(f"node: {node!r} is not a virtual node id (have {list(self.node_ids)})") from None

    # ------------------------------------------------------------------ lifecycle (async)
    async def astart(self) -> FaultProxy:
        """Bind every virtual node on the running loop."""
        if self._running:
            raise RuntimeError("FaultProxy is already running")
        self._loop = asyncio.get_running_loop()
        self._running = True
        try:
            for node in self._nodes.values():
                await self._listen(node)
        except BaseException:
            await self.astop()
            raise
        return self

    async def astop(self) -> None:
        """Close listeners and every connection, and wait for their tasks: nothing is left running."""
        if not self._running:
            return
        self._running = False
        for node in self._nodes.values():
            if node.server is not None:
                node.server.close()
        # close connections before waiting for the servers: since Python 3.11.5 (and in 3.12)
        # Server.wait_closed() also waits for every accepted connection to end, so the reverse order hangs
        # while a client keeps its socket open
        conns = list(self._conns.values())
        for conn in conns:
            conn.close("proxy stopped")
        # Orderly shutdown first; a peer that never reads (or a transport that never reports connection_lost)
        # must not hang stop(): after a grace period, abort the transports and cancel what is left.
        servers = [node.server for node in self._nodes.values() if node.server is not None]
        for node in self._nodes.values():
            node.server = None
        try:
            await asyncio.wait_for(self._drain_tasks(servers), _STOP_GRACE_S)
        except asyncio.TimeoutError:
            log.warning("fault proxy: %d connection task(s) did not finish in %.1f s; aborting them",
                        len(self._tasks), _STOP_GRACE_S)
            for conn in conns:
                conn.abort_transports()
            for task in list(self._tasks):
                task.cancel()
            while self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _drain_tasks(self, servers: list[asyncio.base_events.Server]) -> None:
        for server in servers:
            await server.wait_closed()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def __aenter__(self) -> FaultProxy:
        return await self.astart()

    async def __aexit__(self, *exc: object) -> None:
        await self.astop()

    async def _listen(self, node: _Node) -> None:
        def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._accept(node.node_id, reader, writer)

        node.server = await asyncio.start_server(
            on_connect, self.host, node.port, reuse_address=True, ssl=self.ssl_context,
            ssl_handshake_timeout=self.connect_timeout_s if self.ssl_context is not None else None)
        node.port = node.server.sockets[0].getsockname()[1]
        self.state.set_endpoint(node.node_id, self.host, node.port)

    def _accept(self, node_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn_id = next(self._ids)
        node = self._nodes[node_id]
        if not self._running or node.server is None or node.stopped:
            # recorded before the reset: a client seeing the reset finds the attempt already counted
            self.recorder.add_connection_event(ConnectionEvent(
                node_id, conn_id, "refused", now_ms(), "node stopped" if node.stopped else "proxy stopping"))
            _reset(writer)
            return
        conn = _Connection(self, node_id, conn_id, reader, writer)
        self._conns[conn_id] = conn
        self.recorder.add_connection_event(ConnectionEvent(node_id, conn_id, "open", now_ms()))
        task = asyncio.create_task(conn.run(), name=f"fault-proxy-conn-{conn_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _connection_closed(self, conn: _Connection, reason: str) -> None:
        if self._conns.pop(conn.conn_id, None) is not None:
            self.recorder.add_connection_event(
                ConnectionEvent(conn.node_id, conn.conn_id, "close", now_ms(), reason))

    # ------------------------------------------------------------------ lifecycle (sync)
    def start(self) -> FaultProxy:
        """Run the proxy on a private event loop in a daemon thread; returns once every node listens."""
        if self._thread is not None:
            raise RuntimeError("FaultProxy is already running")
        loop = asyncio.new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.astart())
            except BaseException as exc:   # report to start()'s caller
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        thread = threading.Thread(target=main, name="fault-proxy", daemon=True)
        self._thread = thread
        thread.start()
        started.wait()
        if failure:
            thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop a proxy started with ``start()``: close everything and join its thread."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        asyncio.run_coroutine_threadsafe(self.astop(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run_sync(self, make: Callable[[], Coroutine[Any, Any, T]], name: str) -> T:
        """Run an I/O script step on the proxy's loop from another thread."""
        loop = self._loop
        if loop is None or not self._running:
            raise RuntimeError(f"{name}: the proxy is not running")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError(f"{name}: called on the proxy's own event loop; use `await proxy.a{name}(...)`")
        return asyncio.run_coroutine_threadsafe(make(), loop).result()

    # ------------------------------------------------------------------ script: leadership
    def move_leader(self, topic: str, partition: int, to_node: int, *, hint: bool = True,
                    stale_metadata_for_s: float = 0.0) -> int:
        """Move a partition's leadership to ``to_node`` with a bumped epoch; returns the new epoch.

        Every other node then answers Produce / Fetch for it with NOT_LEADER_OR_FOLLOWER, with a KIP-951
        hint (CurrentLeader + NodeEndpoints) on Produce v10+ / Fetch v16+ unless ``hint=False``.
        ``stale_metadata_for_s``: Metadata keeps reporting the old leader and epoch for that long.
        """
        return self.state.move_leader(topic, partition, to_node, now_ms=now_ms(), hint=hint,
                                      stale_metadata_for_ms=stale_metadata_for_s * 1000.0)

    async def amove_leader(self, topic: str, partition: int, to_node: int, *, hint: bool = True,
                           stale_metadata_for_s: float = 0.0) -> int:
        return self.move_leader(topic, partition, to_node, hint=hint, stale_metadata_for_s=stale_metadata_for_s)

    def move_all_leaders(self, to_node: int | None = None, *, from_node: int | None = None,
                         topic: str | None = None, hint: bool = True,
                         stale_metadata_for_s: float = 0.0) -> list[TopicPartition]:
        """Move every partition the proxy has seen in Metadata (``to_node=None``: rotate to the next node)."""
        return self.state.move_all_leaders(to_node, now_ms=now_ms(), from_node=from_node, topic=topic, hint=hint,
                                           stale_metadata_for_ms=stale_metadata_for_s * 1000.0)

    async def amove_all_leaders(self, to_node: int | None = None, *, from_node: int | None = None,
                                topic: str | None = None, hint: bool = True,
                                stale_metadata_for_s: float = 0.0) -> list[TopicPartition]:
        return self.move_all_leaders(to_node, from_node=from_node, topic=topic, hint=hint,
                                     stale_metadata_for_s=stale_metadata_for_s)

    def set_coordinator(self, node: int) -> None:
        """Name ``node`` in FindCoordinator answers from now on."""
        self.state.set_coordinator(node)

    async def aset_coordinator(self, node: int) -> None:
        self.set_coordinator(node)

    # ------------------------------------------------------------------ script: rules
    def throttle(self, node: int, ms: int, client_id: str | None = None, *, count: int = 1,
                 from_now: bool = False) -> None:
        """The next ``count`` response(s) from ``node`` (to ``client_id``, or anyone) carry
        ``throttle_time_ms=ms``, and the proxy then holds that connection's requests for ``ms`` (recording
        each one that arrives inside the window).  Versions before KIP-219 get the response delayed instead.

        ``from_now=True``: a window fixed in time instead, ``throttle_window(node, ms, client_id)``."""
        if from_now:
            if count != 1:
                raise ValueError(f"throttle: count={count!r} counts next-response throttles; with from_now=True "
                                 f"every response inside the {ms} ms window is throttled")
            self.throttle_window(node, ms, client_id)
            return
        self.state.add_throttle(node, ms, client_id=client_id, count=count)

    async def athrottle(self, node: int, ms: int, client_id: str | None = None, *, count: int = 1,
                        from_now: bool = False) -> None:
        self.throttle(node, ms, client_id, count=count, from_now=from_now)

    def throttle_window(self, node: int, ms: int, client_id: str | None = None, *,
                        start_ms: float | None = None) -> tuple[float, float]:
        """Throttle ``node`` (for ``client_id``, or anyone) from ``start_ms`` (default: now, on the proxy's
        clock ``time.monotonic() * 1000``) for ``ms``; returns the window ``(start_ms, end_ms)``.

        Every response written inside it carries ``throttle_time_ms`` = the time left, as a Kafka >= 2.0
        broker answers at once and leaves the waiting to the client (KIP-219): requests are not held, but
        one arriving on a connection after a throttled response was written to it, and before that throttle
        ran out, is recorded with ``in_throttle_window=True``.  Versions before KIP-219 get the response
        delayed by the time left instead."""
        window = self.state.add_throttle_window(node, ms, start_ms=now_ms() if start_ms is None else start_ms,
                                                client_id=client_id)
        return window.start_ms, window.end_ms

    async def athrottle_window(self, node: int, ms: int, client_id: str | None = None, *,
                               start_ms: float | None = None) -> tuple[float, float]:
        return self.throttle_window(node, ms, client_id, start_ms=start_ms)

    def add_latency(self, node: int | None, ms: float, api_key: int | None = None) -> None:
        """Delay responses from ``node`` (None: every node), optionally only for one API, by ``ms``."""
        self.state.add_latency(node, ms, api_key=api_key)

    async def aadd_latency(self, node: int | None, ms: float, api_key: int | None = None) -> None:
        self.add_latency(node, ms, api_key)

    def remove_latency(self, node: int | None, ms: float | None = None, api_key: int | None = None) -> int:
        """Undo ``add_latency(node, ms, api_key)``: one rule of exactly ``ms`` (ValueError when there is
        none), or with ``ms=None`` every rule added for that ``node`` and ``api_key``; returns how many."""
        return self.state.remove_latency(node, ms, api_key=api_key)

    async def aremove_latency(self, node: int | None, ms: float | None = None, api_key: int | None = None) -> int:
        return self.remove_latency(node, ms, api_key)

    def fail_requests(self, api_key: int, error_code: int, count: int | None = 1, node: int | None = None,
                      partitions: Iterable[TopicPartition] | None = None) -> None:
        """Answer the next ``count`` matching requests (None: until ``clear()``) with ``error_code`` instead
        of forwarding them; Produce / Fetch per partition (``partitions`` limits which)."""
        self.state.add_fail_rule(api_key, error_code, count=count, node=node, partitions=partitions)

    async def afail_requests(self, api_key: int, error_code: int, count: int | None = 1, node: int | None = None,
                             partitions: Iterable[TopicPartition] | None = None) -> None:
        self.fail_requests(api_key, error_code, count, node, partitions)

    def cap_version(self, api_key: int, max_version: int | None) -> None:
        """Advertise at most ``max_version`` of ``api_key`` in ApiVersions (-1: hide it; None: no cap)."""
        self.state.cap_version(api_key, max_version)

    async def acap_version(self, api_key: int, max_version: int | None) -> None:
        self.cap_version(api_key, max_version)

    def clear(self) -> None:
        """Drop all scripted rules (throttles, latency, failures, caps, stale metadata) and move every moved
        partition back to its default leader (with a further epoch bump).  Recordings are kept."""
        self.state.clear()

    async def aclear(self) -> None:
        self.clear()

    # ------------------------------------------------------------------ script: connections and nodes
    async def adrop_connections(self, node: int | None = None) -> int:
        """Abort every client connection on ``node`` (None: all nodes); returns how many were dropped."""
        if node is not None:
            self._node(node)
        victims = [c for c in self._conns.values() if node is None or c.node_id == node]
        for c in victims:
            c.close("dropped by script", abort=True, drain_upstream=True)
        await asyncio.sleep(0)
        return len(victims)

    def drop_connections(self, node: int | None = None) -> int:
        return self._run_sync(lambda: self.adrop_connections(node), "drop_connections")

    async def astop_node(self, node: int) -> None:
        """Take a virtual node down: its open connections are aborted and, while it is down, its port
        accepts and at once resets every connection (recorded as "refused"), so a client sees a fast reset
        and ``connections(node, "refused")`` counts its connection attempts.  With ``ssl_context`` the reset
        comes right after the TLS handshake (asyncio hands over a connection only then)."""
        n = self._node(node)
        n.stopped = True
        for c in [c for c in self._conns.values() if c.node_id == node]:
            c.close("node stopped", abort=True)
        await asyncio.sleep(0)

    def stop_node(self, node: int) -> None:
        self._run_sync(lambda: self.astop_node(node), "stop_node")

    async def astart_node(self, node: int) -> None:
        """Bring a stopped virtual node back (same port)."""
        n = self._node(node)
        n.stopped = False
        if self._running and n.server is None:
            await self._listen(n)

    def start_node(self, node: int) -> None:
        self._run_sync(lambda: self.astart_node(node), "start_node")

    def is_node_up(self, node: int) -> bool:
        n = self._node(node)
        return n.server is not None and not n.stopped

    # ------------------------------------------------------------------ recordings
    def requests(self, api_key: int | None = None, *, node: int | None = None, **filters: Any
                 ) -> tuple[RecordedRequest, ...]:
        """Recorded requests (see ``Recorder.requests`` for the filters)."""
        return self.recorder.requests(api_key, node=node, **filters)

    def responses(self, api_key: int | None = None, *, node: int | None = None, **filters: Any
                  ) -> tuple[RecordedResponse, ...]:
        """Recorded responses (see ``Recorder.responses`` for the filters)."""
        return self.recorder.responses(api_key, node=node, **filters)

    def connections(self, node: int | None = None, kind: str | None = None) -> tuple[ConnectionEvent, ...]:
        return self.recorder.connections(node, kind)

    @property
    def open_connections(self) -> int:
        return len(self._conns)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close a connection with a TCP reset (SO_LINGER 0), not an orderly FIN: what a client sees from a port
    nobody serves."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:   # already closed by the peer
            pass
    writer.transport.abort()


def _parse_upstream(upstream: str | tuple[str, int]) -> tuple[str, int]:
    if isinstance(upstream, tuple):
        host, port = upstream
    elif isinstance(upstream, str):
        first = upstream.split(",")[0].strip()
        host, sep, port_s = first.rpartition(":")
        if not sep or not host or not port_s.isdigit():
            raise ValueError(f"upstream: expected 'host:port', got {upstream!r}")
        port = int(port_s)
    else:
        raise ValueError(f"upstream: expected 'host:port' or (host, port), got {upstream!r}")
    if not 0 < int(port) < 65536:
        raise ValueError(f"upstream: port {port} out of range")
    return str(host), int(port)

