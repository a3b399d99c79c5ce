"""Wire primitives: varints, strings, bytes, arrays and tag sections, with their bounds checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from akresil.errors import ProtocolError
from akresil.protocol import primitives as P
from akresil.protocol.schema import Versions, snake_case


@pytest.mark.parametrize(
    ("value", "wire"),
    [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"), (0xFFFFFFFF, b"\xff\xff\xff\xff\x0f")],
)
def test_uvarint_vectors(value: int, wire: bytes) -> None:
    assert P.uvarint_bytes(value) == wire
    assert P.read_uvarint(wire, 0) == (value, len(wire))


@pytest.mark.parametrize(("value", "wire"), [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01")])
def test_zigzag_varint_vectors(value: int, wire: bytes) -> None:
    assert P.varint_bytes(value) == wire
    assert P.read_varint(wire, 0) == (value, len(wire))
    assert P.varlong_bytes(value) == wire
    assert P.read_varlong(wire, 0) == (value, len(wire))


@given(st.integers(-(1 << 31), (1 << 31) - 1))
def test_varint_round_trip(n: int) -> None:
    assert P.read_varint(P.varint_bytes(n) + b"tail", 0) == (n, len(P.varint_bytes(n)))


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_varlong_round_trip(n: int) -> None:
    wire = P.varlong_bytes(n)
    assert len(wire) <= 10
    assert P.read_varlong(wire, 0) == (n, len(wire))


def test_varint_errors() -> None:
    with pytest.raises(ProtocolError, match="truncated varint"):
        P.read_uvarint(b"\x80\x80", 0)
    with pytest.raises(ProtocolError, match="longer than 5 bytes"):
        P.read_uvarint(b"\xff\xff\xff\xff\xff\x01", 0)
    with pytest.raises(ProtocolError, match="exceeds 32 bits"):
        P.read_uvarint(b"\xff\xff\xff\xff\x7f", 0)
    with pytest.raises(ProtocolError, match="longer than 10 bytes"):
        P.read_uvarlong(b"\xff" * 10 + b"\x01", 0)
    with pytest.raises(ProtocolError, match="out of range"):
        P.uvarint_bytes(-1)
    with pytest.raises(ProtocolError, match="out of int32 range"):
        P.varint_bytes(1 << 31)


@given(st.text(max_size=300), st.booleans())
def test_string_round_trip(s: str, compact: bool) -> None:
    parts: list[bytes] = []
    (P.write_compact_string if compact else P.write_string)(parts, s)
    out = b"".join(parts)
    read = P.read_compact_string if compact else P.read_string
    assert read(out, 0) == (s, len(out))
    assert read(memoryview(out), 0) == (s, len(out))


def test_nullable_string_and_bytes() -> None:
    parts: list[bytes] = []
    P.write_nullable_string(parts, None)
    P.write_compact_nullable_string(parts, None)
    P.write_nullable_bytes(parts, None)
    P.write_compact_nullable_bytes(parts, None)
    out = b"".join(parts)
    assert out == b"\xff\xff\x00\xff\xff\xff\xff\x00"
    pos = 0
    for read in (P.read_nullable_string, P.read_compact_nullable_string, P.read_nullable_bytes, P.read_compact_nullable_bytes):
        value, pos = read(bytes(out), pos)
        assert value is None
    assert pos == len(out)


@given(st.binary(max_size=300))
def test_bytes_round_trip(b: bytes) -> None:
    for write, read in [(P.write_bytes, P.read_bytes), (P.write_compact_bytes, P.read_compact_bytes)]:
        parts: list[bytes] = []
        write(parts, b)
        out = b"".join(parts)
        assert read(out, 0) == (b, len(out))


def test_non_nullable_null_is_rejected() -> None:
    with pytest.raises(ProtocolError, match="non-nullable string"):
        P.read_string(b"\xff\xff", 0)
    with pytest.raises(ProtocolError, match="non-nullable compact string"):
        P.read_compact_string(b"\x00", 0)
    with pytest.raises(ProtocolError, match="non-nullable bytes"):
        P.read_bytes(b"\xff\xff\xff\xff", 0)
    with pytest.raises(ProtocolError, match="negative length -3"):
        P.read_nullable_bytes(b"\xff\xff\xff\xfd", 0)


def test_reads_past_the_end_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError, match="string length needs 2 bytes"):
        P.read_string(b"\x00", 0)
    with pytest.raises(ProtocolError, match="string needs 5 bytes"):
        P.read_nullable_string(b"\x00\x05abc", 0)
    with pytest.raises(ProtocolError, match="compact bytes needs 9 bytes"):
        P.read_compact_bytes(b"\x0aabc", 0)
    with pytest.raises(ProtocolError, match="uuid needs 16 bytes"):
        P.read_uuid(bytes(15), 0)
    with pytest.raises(ProtocolError, match="array length needs 4 bytes"):
        P.read_array_length(b"\x00\x00", 0, 4, False)


def test_array_counts_are_capped_by_remaining_bytes() -> None:
    assert P.read_array_length(b"\x00\x00\x00\x02" + bytes(8), 0, 4, False) == (2, 4)
    with pytest.raises(ProtocolError, match="claims 3 elements"):
        P.read_array_length(b"\x00\x00\x00\x03" + bytes(8), 0, 4, False)
    assert P.read_array_length(b"\xff\xff\xff\xff", 0, 4, True) == (-1, 4)
    with pytest.raises(ProtocolError, match="invalid length -1"):
        P.read_array_length(b"\xff\xff\xff\xff", 0, 4, False)
    assert P.read_compact_array_length(b"\x00", 0, 1, True) == (-1, 1)
    # zero-width elements still cost at least a byte each: no unbounded loops
    with pytest.raises(ProtocolError):
        P.read_compact_array_length(b"\xff\xff\xff\xff\x0f", 0, 0, False)


def test_tag_section_orders_known_and_unknown_tags() -> None:
    parts: list[bytes] = []
    P.write_tags(parts, [(1, b"\xaa"), (5, b"")], {3: b"\x01\x02", 200: b"z"})
    out = b"".join(parts)
    assert out == b"\x04" + b"\x01\x01\xaa" + b"\x03\x02\x01\x02" + b"\x05\x00" + b"\xc8\x01\x01z"
    tags, pos = P.read_unknown_tags(bytes(out), 0)
    assert tags == {1: b"\xaa", 3: b"\x01\x02", 5: b"", 200: b"z"}
    assert pos == len(out)


def test_tag_section_rejects_collisions_and_bad_keys() -> None:
    with pytest.raises(ProtocolError, match="defines as a known field"):
        P.write_tags([], [(0, b"")], {0: b""})
    with pytest.raises(ProtocolError, match="not a non-negative int"):
        P.write_tags([], [], {-1: b""})
    with pytest.raises(ProtocolError, match="past the end|needs"):
        P.read_unknown_tags(b"\x01\x00\x05ab", 0)


def test_uuid_write_checks_length() -> None:
    with pytest.raises(ProtocolError, match="16 bytes"):
        P.write_uuid([], b"abc")


def test_version_ranges_and_names() -> None:
    assert Versions.parse("3+") == Versions(3, 0x7FFF)
    assert 5 in Versions.parse("0-5") and 6 not in Versions.parse("0-5")
    assert Versions.parse("none").empty and 0 not in Versions.parse("none")
    assert Versions.parse("7") == Versions(7, 7)
    with pytest.raises(ValueError, match="bad version range"):
        Versions.parse("3-1")
    assert snake_case("ThrottleTimeMs") == "throttle_time_ms"
    assert snake_case("TopicId") == "topic_id"
    assert snake_case("timeoutMs") == "timeout_ms"
