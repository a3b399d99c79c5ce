"""Sans-IO framing and correlation for Kafka's request/response wire: no sockets, no clock, no tasks.

Kafka frames every message as a 4-byte big-endian size followed by that many bytes; a response starts with
the request's correlation id, and a broker answers the requests of one connection strictly in the order it
received them.  ``FrameDecoder`` turns an arbitrary chunking of the byte stream into whole frames and
``InFlight`` checks each response against the oldest outstanding request, so a lost, duplicated or invented
correlation id is caught as a protocol error instead of handing a caller someone else's answer.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Generic, Iterator, Protocol, TypeVar

from ..errors import KafkaConnectionError, ProtocolError

#: Default cap on one response frame (the ``receive_message_max_bytes`` setting, librdkafka's
#: ``receive.message.max.bytes``).  A garbage size prefix (a TLS alert or an HTTP reply read as Kafka) must
#: not make us buffer gigabytes, so anything larger is a protocol error.  Java's default fetch.max.bytes is
#: 50 MiB, so 100 MiB leaves room for every sane configuration.
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
#: the client setting that sets ``max_frame_bytes``: named in the error so the fix is one search away
MAX_FRAME_SETTING = "receive_message_max_bytes"

_INT32_MAX = 2**31 - 1
# Compact the receive buffer once this many consumed bytes sit at its front.
_COMPACT_AT = 1 << 16
# A frame at least this large is collected in pieces and joined once (``FrameDecoder``).
_LARGE = 1 << 16


def frame_correlation_id(frame: bytes | bytearray | memoryview) -> int:
    """The correlation id that opens every response frame (size prefix already stripped)."""
    if len(frame) < 4:
        raise ProtocolError(f"response frame of {len(frame)} bytes is too short to hold a correlation id")
    return int.from_bytes(frame[:4], "big", signed=True)


class FrameTooLargeError(ProtocolError):
    """A frame's size prefix is above ``max_frame_bytes``: a response bigger than the client accepts, or a
    stream that is not Kafka (the two cannot be told apart, so the connection closes either way)."""

    def __init__(self, *args: object, size: int = -1, limit: int = -1) -> None:
        super().__init__(*args)
        self.size = size
        self.limit = limit


TLS_ANSWER = ("the broker answered with a TLS record, not a Kafka response: the listener expects TLS "
              "(security_protocol='SSL', or 'SASL_SSL' with SASL)")


def looks_like_tls_record(header: bytes | bytearray) -> bool:
    """A TLS record header (content type 20..23, protocol version 3.0..3.4): what a Kafka SSL listener sends a
    plaintext client (an alert).  As a frame size these bytes read as 335..403 MB, beyond any sane limit."""
    return len(header) >= 3 and 20 <= header[0] <= 23 and header[1] == 3 and header[2] <= 4


def frame_too_large(size: int, limit: int) -> FrameTooLargeError:
    return FrameTooLargeError(
        f"frame size {size} is outside 0..{limit}: larger than {MAX_FRAME_SETTING}={limit}. If the broker "
        f"really sends responses this big, raise {MAX_FRAME_SETTING} (or lower fetch_max_bytes / "
        f"max_partition_fetch_bytes); otherwise the stream is corrupt or not Kafka", size=size, limit=limit)


_TOO_LARGE = re.compile(rf"frame size (\d+) is outside 0\.\.(\d+): larger than {MAX_FRAME_SETTING}=")


def find_frame_too_large(exc: BaseException | None) -> FrameTooLargeError | None:
    """The ``FrameTooLargeError`` behind ``exc``: ``exc`` itself, one in its ``__cause__`` chain, or one a
    layer re-raised as a plain ``ProtocolError`` with the message kept (rebuilt from that message)."""
    for _ in range(8):
        if exc is None:
            return None
        if isinstance(exc, FrameTooLargeError):
            return exc
        if isinstance(exc, (ProtocolError, KafkaConnectionError)):
            found = _TOO_LARGE.search(str(exc))
            if found:
                return FrameTooLargeError(str(exc), size=int(found[1]), limit=int(found[2]))
        exc = exc.__cause__
    return None


class FrameDecoder:
    """Reassembles length-prefixed frames from byte chunks of any size.

    ``feed()`` returns every frame the new bytes completed; a partial frame waits for more.  Consumed bytes
    are dropped lazily, so a chunk holding many small responses costs one slice per frame rather than one
    copy of the rest of the buffer per frame.  A frame of ``_LARGE`` bytes or more (a consumer's Fetch answer:
    1 MiB per partition by default) is not grown in the buffer: its chunks are kept as they arrive and joined
    once when it is complete, so each of its bytes is copied once here.  Growing a bytearray and slicing the
    frame out of it copied it two to three times, a tenth of a Spark read task's CPU at 1 KiB values.
    """

    __slots__ = ("max_frame_bytes", "_buf", "_pos", "_parts", "_missing")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not 0 < max_frame_bytes <= _INT32_MAX:
            raise ValueError(f"max_frame_bytes must be in 1..{_INT32_MAX}, got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._pos = 0
        #: the pieces of a large frame received so far, and how many of its bytes are still to come
        self._parts: list[bytes] | None = None
        self._missing = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        pending = 4 + sum(map(len, self._parts)) if self._parts is not None else 0   # with its size prefix
        return len(self._buf) - self._pos + pending

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``data``; return the frames (without size prefix) it completed, oldest first."""
        parts = self._parts
        if parts is None:
            return self._feed(data)
        missing = self._missing
        if len(data) < missing:
            parts.append(bytes(data))       # a copy only if the caller's buffer is not immutable bytes
            self._missing = missing - len(data)
            return []
        with memoryview(data) as view:
            parts.append(bytes(view[:missing]))
            rest = view[missing:]
            self._parts = None
            frames = [b"".join(parts)]
            if len(rest):
                frames.extend(self._feed(rest))
            rest.release()
        return frames

    def _feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = self._pos
        end = len(buf)
        with memoryview(buf) as view:   # one copy per frame: ``bytes(buf[a:b])`` copies twice
            while end - pos >= 4:
                size = int.from_bytes(view[pos:pos + 4], "big", signed=True)
                if size < 0 or size > self.max_frame_bytes:
                    if looks_like_tls_record(buf[pos:pos + 3]):
                        raise ProtocolError(TLS_ANSWER)
                    if size > 0:
                        raise frame_too_large(size, self.max_frame_bytes)
                    raise ProtocolError(
                        f"frame size {size} is outside 0..{self.max_frame_bytes} (corrupt stream or not Kafka)")
                stop = pos + 4 + size
                if stop > end:
                    if size >= _LARGE:      # the rest arrives in pieces: keep them, join once
                        self._parts = [bytes(view[pos + 4:end])]
                        self._missing = stop - end
                        pos = end
                    break
                frames.append(bytes(view[pos + 4:stop]))
                pos = stop
        if pos == end:
            buf.clear()
            pos = 0
        elif pos >= _COMPACT_AT:
            del buf[:pos]
            pos = 0
        self._pos = pos
        return frames


class HasCorrelationId(Protocol):
    correlation_id: int
    #: True for a request the broker should not answer (Produce acks=0) but might anyway
    response_optional: bool


T = TypeVar("T", bound=HasCorrelationId)

#: How many unanswered acks=0 requests to remember at the head of the queue before forgetting the oldest.
MAX_OPTIONAL_BACKLOG = 4096


class InFlight(Generic[T]):
    """FIFO of the requests awaiting a response on one connection, and the correlation-id allocator.

    Requests the broker should not answer (Produce with acks=0) are queued too, as *optional*: Kafka skips
    them, but some brokers (Tansu 0.6) answer them anyway.  A response that does not match an optional head
    entry means the broker skipped that request, so the entry is dropped and matching continues; a response
    that does match it is consumed and returned (the caller discards it).

    Correlation ids are 32-bit signed; they wrap to 0 after ``2**31 - 1`` (uniqueness only matters among
    the requests outstanding at once).
    """

    __slots__ = ("_queue", "_next_id", "_required")

    def __init__(self, first_correlation_id: int = 0) -> None:
        if not 0 <= first_correlation_id <= _INT32_MAX:
            raise ValueError(f"correlation ids are int32 >= 0, got {first_correlation_id}")
        self._queue: deque[T] = deque()
        self._next_id = first_correlation_id
        self._required = 0

    def __len__(self) -> int:
        """Outstanding requests that expect a response (optional ones are not counted)."""
        return self._required

    def __iter__(self) -> Iterator[T]:
        return iter(self._queue)

    def next_correlation_id(self) -> int:
        cid = self._next_id
        self._next_id = 0 if cid >= _INT32_MAX else cid + 1
        return cid

    def add(self, entry: T) -> None:
        queue = self._queue
        queue.append(entry)
        if not entry.response_optional:
            self._required += 1
        elif len(queue) > MAX_OPTIONAL_BACKLOG and queue[0].response_optional:
            queue.popleft()

    def match(self, frame: bytes | bytearray | memoryview) -> T:
        """Pop and return the request ``frame`` answers; ProtocolError unless it is the oldest outstanding."""
        cid = frame_correlation_id(frame)
        queue = self._queue
        while queue and queue[0].response_optional and queue[0].correlation_id != cid:
            queue.popleft()  # the broker (correctly) did not answer this acks=0 request
        if not queue:
            raise ProtocolError(f"received a response with correlation id {cid} but no request is outstanding")
        head = queue[0]
        if head.correlation_id != cid:
            raise ProtocolError(
                f"received correlation id {cid} but the oldest outstanding request has {head.correlation_id}")
        entry = queue.popleft()
        if not entry.response_optional:
            self._required -= 1
        return entry

    def drain(self) -> list[T]:
        """Remove and return every outstanding request (the connection died)."""
        entries = list(self._queue)
        self._queue.clear()
        self._required = 0
        return entries
