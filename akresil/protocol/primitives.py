"""Kafka wire primitives: fixed-width ints, varints, (compact)(nullable) strings/bytes, uuids, tags.

Readers take ``(buf, pos)`` (``buf`` is ``bytes`` or a ``memoryview``) and return ``(value, new_pos)``;
writers append pieces to a list (``Parts``) that is joined once, so a 16 KiB record batch is copied exactly
once into the frame.  Every length read from the wire is checked against the bytes that
remain before it is used, so malformed input raises :class:`ProtocolError` instead of reading past the
end, allocating a huge list, or looping.  The compiled codecs call these for variable-length values and
inline only the fixed-width ones.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from akresil.errors import ProtocolError

Buffer = bytes | bytearray | memoryview
#: encoders append pieces to a list and join once at the end: a single copy of large record batches
Parts = list[Buffer]

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")

#: struct format letter per fixed-width Kafka type (uuid is handled apart: it is raw bytes)
FIXED_FORMATS = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "float64": "d", "bool": "?"}
FIXED_SIZES = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "float64": 8, "bool": 1, "uuid": 16}
#: (min, max) accepted when encoding integer types
INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1),
}

_unpack_i16 = INT16.unpack_from
_unpack_i32 = INT32.unpack_from
_pack_i16 = INT16.pack
_pack_i32 = INT32.pack


def short_read(what: str, need: int, pos: int, end: int) -> ProtocolError:
    return ProtocolError(f"{what} needs {need} bytes at offset {pos} but only {max(end - pos, 0)} remain")


# --------------------------------------------------------------------------- varints
def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Unsigned LEB128, at most 5 bytes (a 32-bit value), as Kafka uses for compact lengths and tags."""
    end = len(buf)
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ProtocolError(f"truncated varint at offset {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result > 0xFFFFFFFF:
                raise ProtocolError(f"unsigned varint ending at offset {pos} exceeds 32 bits")
            return result, pos
        shift += 7
        if shift >= 35:
            raise ProtocolError(f"unsigned varint at offset {pos - 5} is longer than 5 bytes")


def read_uvarlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 of at most 10 bytes (a 64-bit value)."""
    end = len(buf)
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ProtocolError(f"truncated varlong at offset {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result >> 64:
                raise ProtocolError(f"unsigned varlong ending at offset {pos} exceeds 64 bits")
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtocolError(f"unsigned varlong at offset {pos - 10} is longer than 10 bytes")


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Zigzag-encoded signed 32-bit varint."""
    u, pos = read_uvarint(buf, pos)
    return (u >> 1) ^ -(u & 1), pos


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """Zigzag-encoded signed 64-bit varlong."""
    u, pos = read_uvarlong(buf, pos)
    return (u >> 1) ^ -(u & 1), pos


_SMALL_UVARINTS = [bytes((i,)) for i in range(128)]


def uvarint_bytes(n: int) -> bytes:
    """Encode an unsigned 32-bit value as LEB128."""
    if 0 <= n < 128:
        return _SMALL_UVARINTS[n]
    if n < 0 or n > 0xFFFFFFFF:
        raise ProtocolError(f"unsigned varint {n} out of range 0..2^32-1")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def uvarlong_bytes(n: int) -> bytes:
    if n < 0 or n >> 64:
        raise ProtocolError(f"unsigned varlong {n} out of range 0..2^64-1")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint_bytes(n: int) -> bytes:
    """Zigzag signed 32-bit varint."""
    if not -(1 << 31) <= n < (1 << 31):
        raise ProtocolError(f"varint {n} out of int32 range")
    return uvarint_bytes(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def varlong_bytes(n: int) -> bytes:
    """Zigzag signed 64-bit varlong."""
    if not -(1 << 63) <= n < (1 << 63):
        raise ProtocolError(f"varlong {n} out of int64 range")
    return uvarlong_bytes(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


# --------------------------------------------------------------------------- strings and bytes
def _take(buf: Buffer, pos: int, n: int, what: str) -> int:
    end = pos + n
    if end > len(buf):
        raise short_read(what, n, pos, len(buf))
    return end


def read_string(buf: Buffer, pos: int) -> tuple[str, int]:
    if pos + 2 > len(buf):
        raise short_read("string length", 2, pos, len(buf))
    n = _unpack_i16(buf, pos)[0]
    pos += 2
    if n < 0:
        raise ProtocolError(f"non-nullable string at offset {pos - 2} has length {n}")
    end = _take(buf, pos, n, "string")
    return str(buf[pos:end], "utf-8"), end


def read_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    if pos + 2 > len(buf):
        raise short_read("string length", 2, pos, len(buf))
    n = _unpack_i16(buf, pos)[0]
    pos += 2
    if n < 0:
        if n != -1:
            raise ProtocolError(f"string at offset {pos - 2} has negative length {n}")
        return None, pos
    end = _take(buf, pos, n, "string")
    return str(buf[pos:end], "utf-8"), end


def read_compact_string(buf: Buffer, pos: int) -> tuple[str, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise ProtocolError(f"non-nullable compact string before offset {pos} is null")
    end = _take(buf, pos, n - 1, "compact string")
    return str(buf[pos:end], "utf-8"), end


def read_compact_nullable_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _take(buf, pos, n - 1, "compact string")
    return str(buf[pos:end], "utf-8"), end


def read_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    if pos + 4 > len(buf):
        raise short_read("bytes length", 4, pos, len(buf))
    n = _unpack_i32(buf, pos)[0]
    pos += 4
    if n < 0:
        raise ProtocolError(f"non-nullable bytes at offset {pos - 4} has length {n}")
    end = _take(buf, pos, n, "bytes")
    return bytes(buf[pos:end]), end


def read_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    if pos + 4 > len(buf):
        raise short_read("bytes length", 4, pos, len(buf))
    n = _unpack_i32(buf, pos)[0]
    pos += 4
    if n < 0:
        if n != -1:
            raise ProtocolError(f"bytes at offset {pos - 4} have negative length {n}")
        return None, pos
    end = _take(buf, pos, n, "bytes")
    return bytes(buf[pos:end]), end


def read_compact_bytes(buf: Buffer, pos: int) -> tuple[bytes, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise ProtocolError(f"non-nullable compact bytes before offset {pos} are null")
    end = _take(buf, pos, n - 1, "compact bytes")
    return bytes(buf[pos:end]), end


def read_compact_nullable_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _take(buf, pos, n - 1, "compact bytes")
    return bytes(buf[pos:end]), end


def read_uuid(buf: Buffer, pos: int) -> tuple[bytes, int]:
    end = _take(buf, pos, 16, "uuid")
    return bytes(buf[pos:end]), end


def read_array_length(buf: Buffer, pos: int, min_size: int, nullable: bool) -> tuple[int, int]:
    """An int32 element count, checked against what the remaining bytes could hold; -1 means null."""
    if pos + 4 > len(buf):
        raise short_read("array length", 4, pos, len(buf))
    n = _unpack_i32(buf, pos)[0]
    pos += 4
    return _check_count(n, buf, pos, min_size, nullable), pos


def read_compact_array_length(buf: Buffer, pos: int, min_size: int, nullable: bool) -> tuple[int, int]:
    """A compact (count + 1) element count; -1 means null."""
    n, pos = read_uvarint(buf, pos)
    return _check_count(n - 1, buf, pos, min_size, nullable), pos


def _check_count(n: int, buf: Buffer, pos: int, min_size: int, nullable: bool) -> int:
    if n < 0:
        if n == -1 and nullable:
            return -1
        raise ProtocolError(f"array at offset {pos} has invalid length {n}")
    # every element takes at least one byte on the wire (zero-width elements are capped the same way)
    if n * max(min_size, 1) > len(buf) - pos:
        raise ProtocolError(
            f"array at offset {pos} claims {n} elements of >= {max(min_size, 1)} bytes "
            f"but only {len(buf) - pos} bytes remain"
        )
    return n


def write_string(out: Parts, s: str) -> None:
    b = s.encode()
    if len(b) > 0x7FFF:
        raise ProtocolError(f"string of {len(b)} bytes exceeds the int16 length limit")
    out.append(_pack_i16(len(b)))
    out.append(b)


def write_nullable_string(out: Parts, s: str | None) -> None:
    if s is None:
        out.append(b"\xff\xff")
    else:
        write_string(out, s)


def write_compact_string(out: Parts, s: str) -> None:
    b = s.encode()
    n = len(b) + 1
    out.append(_SMALL_UVARINTS[n] if n < 128 else uvarint_bytes(n))
    out.append(b)


def write_compact_nullable_string(out: Parts, s: str | None) -> None:
    if s is None:
        out.append(b"\x00")
    else:
        write_compact_string(out, s)


def write_bytes(out: Parts, b: Buffer) -> None:
    out.append(_pack_i32(len(b)))
    out.append(b)


def write_nullable_bytes(out: Parts, b: Buffer | None) -> None:
    if b is None:
        out.append(b"\xff\xff\xff\xff")
    else:
        out.append(_pack_i32(len(b)))
        out.append(b)


def write_compact_bytes(out: Parts, b: Buffer) -> None:
    n = len(b) + 1
    out.append(_SMALL_UVARINTS[n] if n < 128 else uvarint_bytes(n))
    out.append(b)


def write_compact_nullable_bytes(out: Parts, b: Buffer | None) -> None:
    if b is None:
        out.append(b"\x00")
    else:
        write_compact_bytes(out, b)


def write_uuid(out: Parts, u: bytes) -> None:
    if not isinstance(u, bytes) or len(u) != 16:
        raise ProtocolError(f"uuid must be 16 bytes, got {u!r:.40}")
    out.append(u)


def write_array_length(out: Parts, seq: Sequence[object] | None, nullable: bool) -> None:
    if seq is None:
        if not nullable:
            raise ProtocolError("null given for a non-nullable array")
        out.append(b"\xff\xff\xff\xff")
    else:
        out.append(_pack_i32(len(seq)))


def write_compact_array_length(out: Parts, seq: Sequence[object] | None, nullable: bool) -> None:
    if seq is None:
        if not nullable:
            raise ProtocolError("null given for a non-nullable array")
        out.append(b"\x00")
    else:
        n = len(seq) + 1
        out.append(_SMALL_UVARINTS[n] if n < 128 else uvarint_bytes(n))


# --------------------------------------------------------------------------- tagged fields
def read_unknown_tags(buf: Buffer, pos: int) -> tuple[dict[int, bytes], int]:
    """A whole tag section kept raw: ``{tag: payload}``.  Used where no tag is known (headers)."""
    count, pos = read_uvarint(buf, pos)
    if count > len(buf) - pos:
        raise ProtocolError(f"tag section at offset {pos} claims {count} tags, more than the bytes left")
    tags: dict[int, bytes] = {}
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = _take(buf, pos, size, f"tagged field {tag}")
        tags[tag] = bytes(buf[pos:end])
        pos = end
    return tags, pos


def write_tags(out: Parts, known: Sequence[tuple[int, Buffer]], unknown: Mapping[int, Buffer] | None) -> None:
    """Write a tag section: known tags plus preserved unknown ones, in ascending tag order."""
    items = list(known)
    if unknown:
        taken = {t for t, _ in items}
        for t, payload in unknown.items():
            if not isinstance(t, int) or t < 0:
                raise ProtocolError(f"_unknown_tags key {t!r} is not a non-negative int tag")
            if t in taken:
                raise ProtocolError(f"_unknown_tags has tag {t}, which this version defines as a known field")
            items.append((t, payload))
        items.sort(key=lambda item: item[0])
    out.append(uvarint_bytes(len(items)))
    for t, payload in items:
        out.append(uvarint_bytes(t))
        out.append(uvarint_bytes(len(payload)))
        out.append(payload)
