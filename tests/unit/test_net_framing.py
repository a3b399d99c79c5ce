"""FrameDecoder and InFlight: sans-IO, driven by plain calls."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from akresil.errors import ProtocolError
from akresil.net.framing import FrameDecoder, InFlight, frame_correlation_id


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
