"""FrameDecoder and InFlight: sans-IO, driven by plain calls."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from akresil.errors import ConfigError, ProtocolError
from akresil.net.framing import (DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FrameTooLargeError, InFlight,
                                 frame_correlation_id)


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@given(bodies=st.lists(st.binary(max_size=300), max_size=20), cuts=st.lists(st.integers(0, 7000), max_size=30))
@settings(max_examples=200, deadline=None)
def test_any_chunking_yields_the_same_frames(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(framed(b) for b in bodies)
    points = sorted({c for c in cuts if c < len(stream)} | {0, len(stream)})
    decoder = FrameDecoder()
    out: list[bytes] = []
    for start, stop in zip(points, points[1:]):
        out.extend(decoder.feed(stream[start:stop]))
    assert out == bodies
    assert decoder.buffered == 0


@given(sizes=st.lists(st.sampled_from([0, 3, 300, 70_000, 200_000]), max_size=8),
       cuts=st.lists(st.integers(0, 600_000), max_size=40), kind=st.sampled_from([bytes, bytearray, memoryview]))
@settings(max_examples=60, deadline=None)
def test_large_frames_are_joined_from_any_chunking(sizes: list[int], cuts: list[int], kind: type) -> None:
    """Frames of 64 KiB and more are collected in pieces (one copy): any chunking, mixed with small frames and
    with chunks in any buffer type, gives the same frames, and ``buffered`` counts the pieces held."""
    bodies = [bytes([i % 251]) * size + i.to_bytes(2, "big") for i, size in enumerate(sizes)]
    stream = b"".join(framed(b) for b in bodies)
    points = sorted({c for c in cuts if c < len(stream)} | {0, len(stream)})
    decoder = FrameDecoder()
    out: list[bytes] = []
    fed = 0
    for start, stop in zip(points, points[1:]):
        got = decoder.feed(kind(stream[start:stop]))
        assert all(type(frame) is bytes for frame in got)
        out.extend(got)
        fed = stop
        assert decoder.buffered == fed - sum(4 + len(b) for b in out)
        assert len(decoder._buf) - decoder._pos < 4 + 65_536     # a large frame is not grown in the buffer
    assert out == bodies
    assert decoder.buffered == 0


def test_partial_frame_waits_and_counts_buffered_bytes() -> None:
    decoder = FrameDecoder()
    data = framed(b"hello") + framed(b"world")
    assert decoder.feed(data[:7]) == []
    assert decoder.buffered == 7
    assert decoder.feed(data[7:12]) == [b"hello"]
    assert decoder.buffered == 3
    assert decoder.feed(data[12:]) == [b"world"]
    assert decoder.buffered == 0


def test_large_backlog_is_compacted() -> None:
    decoder = FrameDecoder()
    many = framed(b"x" * 1000) * 100
    frames = decoder.feed(many + b"\x00\x00")
    assert len(frames) == 100
    assert decoder.buffered == 2
    assert len(decoder._buf) == 2  # consumed prefix dropped, not kept around


@pytest.mark.parametrize("size", [-1, -(2**31), 1025])
def test_bad_sizes_are_protocol_errors(size: int) -> None:
    decoder = FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(ProtocolError, match=rf"frame size {size} is outside 0..1024"):
        decoder.feed(struct.pack(">i", size) + b"...")


def test_max_frame_bytes_validated() -> None:
    with pytest.raises(ValueError, match="max_frame_bytes"):
        FrameDecoder(0)


def test_frame_exactly_at_the_cap_is_accepted() -> None:
    decoder = FrameDecoder(max_frame_bytes=8)
    assert decoder.feed(framed(b"12345678")) == [b"12345678"]


def entry(cid: int, optional: bool = False) -> SimpleNamespace:
    return SimpleNamespace(correlation_id=cid, response_optional=optional)


def test_inflight_matches_fifo_and_rejects_mismatches() -> None:
    inflight: InFlight[SimpleNamespace] = InFlight()
    ids = [inflight.next_correlation_id() for _ in range(3)]
    assert ids == [0, 1, 2]
    for cid in ids:
        inflight.add(entry(cid))
    assert inflight.match(struct.pack(">i", 0) + b"body").correlation_id == 0
    with pytest.raises(ProtocolError, match="received correlation id 2 but the oldest outstanding request has 1"):
        inflight.match(struct.pack(">i", 2))
    assert len(inflight) == 2  # a mismatch consumes nothing
    assert [e.correlation_id for e in inflight.drain()] == [1, 2]
    with pytest.raises(ProtocolError, match="correlation id 9 but no request is outstanding"):
        inflight.match(struct.pack(">i", 9))


def test_correlation_ids_wrap_at_int32() -> None:
    inflight: InFlight[SimpleNamespace] = InFlight(first_correlation_id=2**31 - 1)
    assert inflight.next_correlation_id() == 2**31 - 1
    assert inflight.next_correlation_id() == 0
    with pytest.raises(ValueError):
        InFlight(first_correlation_id=-1)


def test_short_frame_has_no_correlation_id() -> None:
    with pytest.raises(ProtocolError, match="too short"):
        frame_correlation_id(b"\x00\x01")
    assert frame_correlation_id(struct.pack(">i", -7)) == -7


def test_optional_entries_are_skipped_or_consumed() -> None:
    inflight: InFlight[SimpleNamespace] = InFlight()
    for cid, optional in [(0, True), (1, True), (2, False), (3, True), (4, False)]:
        inflight.add(entry(cid, optional))
    assert len(inflight) == 2  # only entries that need an answer count as in flight
    # The broker skipped 0 but answered 1 (Tansu answers acks=0 Produce): 1 comes back, flagged optional.
    assert inflight.match(struct.pack(">i", 1)).response_optional
    assert inflight.match(struct.pack(">i", 2)).correlation_id == 2
    assert inflight.match(struct.pack(">i", 4)).correlation_id == 4
    assert len(inflight) == 0 and list(inflight) == []


def test_optional_backlog_is_bounded() -> None:
    from akresil.net.framing import MAX_OPTIONAL_BACKLOG

    inflight: InFlight[SimpleNamespace] = InFlight()
    for cid in range(MAX_OPTIONAL_BACKLOG + 10):
        inflight.add(entry(cid, True))
    assert len(list(inflight)) == MAX_OPTIONAL_BACKLOG


def test_oversize_frame_names_the_setting_to_raise() -> None:
    decoder = FrameDecoder(max_frame_bytes=2048)
    with pytest.raises(FrameTooLargeError) as info:
        decoder.feed(struct.pack(">i", 5000) + b"x" * 10)
    exc = info.value
    assert isinstance(exc, ProtocolError) and (exc.size, exc.limit) == (5000, 2048)
    assert "larger than receive_message_max_bytes=2048" in str(exc)
    assert "raise receive_message_max_bytes" in str(exc)
    # a negative size is garbage whatever the setting: no advice to raise it
    with pytest.raises(ProtocolError) as negative:
        FrameDecoder(max_frame_bytes=2048).feed(struct.pack(">i", -5) + b"x")
    assert not isinstance(negative.value, FrameTooLargeError)
    assert "receive_message_max_bytes" not in str(negative.value)


def test_frame_too_large_survives_the_per_waiter_copy() -> None:
    """Connection hands each waiter ``type(error)(*error.args)``: the class and message must survive it."""
    exc = FrameTooLargeError("frame size 9 is outside 0..8", size=9, limit=8)
    copy = type(exc)(*exc.args)
    assert isinstance(copy, FrameTooLargeError) and str(copy) == str(exc)


def test_the_config_default_is_the_decoder_default() -> None:
    from akresil.config import OPTIONS_BY_NAME, resolve

    assert OPTIONS_BY_NAME["receive_message_max_bytes"].default == DEFAULT_MAX_FRAME_BYTES
    for kind in ("producer", "consumer", "admin"):
        assert resolve(kind, {"receive_message_max_bytes": 4096}).receive_message_max_bytes == 4096
    with pytest.raises(ConfigError, match="receive_message_max_bytes: 999 is below the minimum 1000"):
        resolve("consumer", {"receive_message_max_bytes": 999})
    with pytest.raises(ConfigError, match="receive_message_max_bytes: expected int"):
        resolve("producer", {"receive_message_max_bytes": "1MB"})


def test_find_frame_too_large_sees_through_rewrapping() -> None:
    from akresil.errors import KafkaConnectionError
    from akresil.net.framing import find_frame_too_large

    with pytest.raises(FrameTooLargeError) as info:
        FrameDecoder(max_frame_bytes=1000).feed(struct.pack(">i", 4321))
    original = info.value
    assert find_frame_too_large(original) is original
    # the connection re-raises it as a plain ProtocolError with a suffix, the cluster as a connection error
    rewrapped = ProtocolError(f"{original} (from node 1 at 127.0.0.1:9092)")
    outer = KafkaConnectionError(str(rewrapped))
    outer.__cause__ = rewrapped
    found = find_frame_too_large(outer)
    assert isinstance(found, FrameTooLargeError) and (found.size, found.limit) == (4321, 1000)
    assert find_frame_too_large(KafkaConnectionError("connection closed by the peer")) is None
    assert find_frame_too_large(ProtocolError("frame size -3 is outside 0..1000 (corrupt stream)")) is None
    assert find_frame_too_large(None) is None


@pytest.mark.parametrize("record", [b"\x15\x03\x03\x00\x02\x02\x0a",       # a TLS 1.2 alert (Kafka's SSL listener)
                                    b"\x16\x03\x01\x00\x5c\x02\x00"])      # a handshake record
def test_a_tls_record_where_a_frame_belongs_is_named(record: bytes) -> None:
    with pytest.raises(ProtocolError, match="answered with a TLS record.*security_protocol='SSL'"):
        FrameDecoder().feed(record)


def test_a_frame_size_that_is_not_a_tls_record_is_still_too_large() -> None:
    with pytest.raises(FrameTooLargeError):
        FrameDecoder(max_frame_bytes=1000).feed(struct.pack(">i", 5000))
