"""A fake Kafka broker that answers ApiVersions correctly and then misbehaves in one chosen way.

It listens on 127.0.0.1 (asyncio, in the test's own loop) and speaks just enough Kafka for a client to get past
the handshake: ApiVersions is answered with akresil's own schema ranges, so the client negotiates as it would
with a real broker and its next request (Metadata, Produce, ...) meets the misbehaviour:

``garbage``          bytes that are not Kafka at all (an HTTP error page: its first 4 bytes read as a ~1.2 GB size)
``garbage_body``     a well-framed response with the right correlation id whose body is 0xff filler
``truncated``        a size prefix promising 100 bytes, 20 of them, then close
``unknown_cid``      a valid response of the right API under a correlation id nobody asked for
``wrong_api``        a valid body of another API (Metadata for everything, Produce for Metadata)
``oversized``        a 2 GiB size prefix, then silence with the socket left open
``slowloris``        a valid response dribbled one byte every ``interval_s`` seconds

Every accepted connection and request is recorded, and ``closed_by_client`` counts connections the client
closed (the harness keeps its side open unless the mode closes it), so a test can assert the client gave up
on the connection rather than waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import dataclass, field
from typing import Any

from akresil.errors import ProtocolError
from akresil.protocol import api
from akresil.protocol.api import ApiKey

MODES = ("garbage", "garbage_body", "truncated", "unknown_cid", "wrong_api", "oversized", "slowloris")

#: what an HTTP server answers to Kafka bytes; read as a Kafka size prefix it claims 0x48545450 bytes
HTTP_ERROR = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
TWO_GIB = 0x7FFFFFFF


@dataclass
class Seen:
    """One request the hostile broker read: API, version, correlation id."""

    api_key: int
    version: int
    correlation_id: int


@dataclass
class HostileBroker:
    """``async with HostileBroker("truncated") as hb: ... hb.bootstrap_servers``"""

    mode: str
    interval_s: float = 1.0
    node_id: int = 1
    host: str = "127.0.0.1"
    port: int = 0
    requests: list[Seen] = field(default_factory=list)
    connections: int = 0
    closed_by_client: int = 0
    _server: asyncio.base_events.Server | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown hostile mode {self.mode!r}; choose from {', '.join(MODES)}")

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    async def __aenter__(self) -> HostileBroker:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    def non_handshake_requests(self) -> list[Seen]:
        return [r for r in self.requests if r.api_key != ApiKey.API_VERSIONS]

    # ------------------------------------------------------------------ serving
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:
                try:
                    size = struct.unpack(">i", await reader.readexactly(4))[0]
                    frame = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    self.closed_by_client += 1
                    return
                try:
                    header, body = api.decode_request(frame)
                except ProtocolError:
                    return
                seen = Seen(header["api_key"], header["api_version"], header["correlation_id"])
                self.requests.append(seen)
                if seen.api_key == ApiKey.API_VERSIONS:
                    writer.write(_api_versions(seen))
                    await writer.drain()
                    continue
                if await self._misbehave(seen, body, reader, writer):
                    return
        except asyncio.CancelledError:
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()
            self._tasks.discard(task)

    async def _misbehave(self, seen: Seen, body: dict[str, Any], reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> bool:
        """Answer ``seen`` the hostile way; True when the connection should end here."""
        cid = seen.correlation_id
        mode = self.mode
        if mode == "garbage":
            writer.write(HTTP_ERROR)
        elif mode == "garbage_body":
            header = struct.pack(">i", cid) + (b"\x00" if _flexible_response(seen) else b"")
            payload = header + b"\xff" * 64
            writer.write(struct.pack(">i", len(payload)) + payload)
        elif mode == "truncated":
            writer.write(struct.pack(">ii", 100, cid) + b"\x00" * 16)
            await writer.drain()
            return True
        elif mode == "unknown_cid":
            writer.write(_valid_response(seen, cid + 1000))
        elif mode == "wrong_api":
            writer.write(_wrong_api_response(seen))
        elif mode == "oversized":
            writer.write(struct.pack(">ii", TWO_GIB, cid) + b"\x00" * 64)
        else:  # slowloris: a correct answer, one byte at a time, until it is done or the client hangs up
            for byte in _valid_response(seen, cid):
                if reader.at_eof() or writer.is_closing():
                    self.closed_by_client += 1
                    return True
                try:
                    writer.write(bytes((byte,)))
                    await writer.drain()
                except ConnectionError:
                    self.closed_by_client += 1
                    return True
                await asyncio.sleep(self.interval_s)
        await writer.drain()
        # stay open (silent) until the client closes: a client that waits for more bytes hangs here
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass
        self.closed_by_client += 1
        return True


# --------------------------------------------------------------------------- frames
def _api_versions(seen: Seen) -> bytes:
    lo, hi = api.SCHEMA_VERSIONS[ApiKey.API_VERSIONS]
    keys = [{"api_key": int(k), "min_version": a, "max_version": b} for k, (a, b) in api.SCHEMA_VERSIONS.items()]
    if lo <= seen.version <= hi:
        return api.encode_response(ApiKey.API_VERSIONS, seen.version, seen.correlation_id,
                                   {"error_code": 0, "api_keys": keys})
    # KIP-511: an unknown ApiVersions version is answered UNSUPPORTED_VERSION in the v0 layout
    return api.encode_response(ApiKey.API_VERSIONS, 0, seen.correlation_id,
                               {"error_code": api.UNSUPPORTED_VERSION, "api_keys": keys})


def _flexible_response(seen: Seen) -> bool:
    return api.response_header_version(seen.api_key, seen.version) >= 1


def _valid_response(seen: Seen, correlation_id: int) -> bytes:
    """A well-formed answer of the right API and version: every field at its default."""
    return api.encode_response(seen.api_key, seen.version, correlation_id, {})


_METADATA_BODY = {
    "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9}],
    "cluster_id": "hostile", "controller_id": 1,
    "topics": [{"error_code": 0, "name": "t", "topic_id": bytes(16), "partitions": [
        {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
         "replica_nodes": [1], "isr_nodes": [1]}]}],
}
_PRODUCE_BODY = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 0,
                                                                     "base_offset": 5}]}]}


def _wrong_api_response(seen: Seen) -> bytes:
    """A valid body of another API, with the response header layout the client expects."""
    flexible = _flexible_response(seen)
    if seen.api_key == ApiKey.METADATA:
        return api.encode_response(ApiKey.PRODUCE, 9 if flexible else 7, seen.correlation_id, _PRODUCE_BODY)
    return api.encode_response(ApiKey.METADATA, 12 if flexible else 8, seen.correlation_id, _METADATA_BODY)
