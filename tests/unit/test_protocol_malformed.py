"""Malformed input raises ProtocolError, and only ProtocolError: truncation, bad lengths, fuzzed bytes."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from akresil.errors import ProtocolError, UnsupportedVersionError
from akresil.protocol import ApiKey, api, decode_request, decode_response, decode_versioned, specs
from akresil.protocol import primitives as P
from akresil.protocol.compiler import decoder
from akresil.protocol.schema import F, M
from tests.unit.test_protocol_golden import (
    fetch_v16_response,
    i16,
    i32,
    metadata_v12_response,
    produce_v11_response,
)
from tests.unit.test_protocol_roundtrip import random_body


def _request_frame(key: ApiKey, version: int, seed: int) -> bytes:
    body = random_body(api.REQUESTS[key], version, random.Random(seed))
    return api.encode_request(key, version, 17, "fuzz", body)[4:]


def _cases() -> list[tuple[str, bytes, Callable[[bytes], Any]]]:
    cases: list[tuple[str, bytes, Callable[[bytes], Any]]] = []
    for hints in (True, False):
        wire, _ = fetch_v16_response(hints)
        cases.append((f"fetch16-{hints}", wire, lambda b: decode_response(ApiKey.FETCH, 16, b)))
        wire, _ = produce_v11_response(hints)
        cases.append((f"produce11-resp-{hints}", wire, lambda b: decode_response(ApiKey.PRODUCE, 11, b)))
    wire, _ = metadata_v12_response()
    cases.append(("metadata12", wire, lambda b: decode_response(ApiKey.METADATA, 12, b)))
    for key, version in [(ApiKey.PRODUCE, 11), (ApiKey.PRODUCE, 7), (ApiKey.FETCH, 16), (ApiKey.API_VERSIONS, 3),
                         (ApiKey.JOIN_GROUP, 9), (ApiKey.CREATE_TOPICS, 0)]:
        cases.append((f"req-{key.name}-{version}", _request_frame(key, version, 3), decode_request))
    sub = api.encode_versioned(
        "ConsumerProtocolSubscription", 3,
        {"topics": ["a", "b"], "user_data": b"x", "owned_partitions": [{"topic": "a", "partitions": [1, 2]}],
         "generation_id": 4, "rack_id": "r"},
    )
    cases.append(("subscription", sub, lambda b: decode_versioned("ConsumerProtocolSubscription", b)))
    return cases


CASES = _cases()


@pytest.mark.parametrize(("name", "wire", "decode"), CASES, ids=[c[0] for c in CASES])
def test_truncation_at_every_offset_raises_protocol_error(name: str, wire: bytes, decode: Callable[[bytes], Any]) -> None:
    decode(wire)  # the whole frame is valid
    for cut in range(len(wire)):
        with pytest.raises(ProtocolError):
            decode(wire[:cut])
        with pytest.raises(ProtocolError):
            decode(memoryview(wire)[:cut])


def test_trailing_bytes_are_ignored_unless_strict() -> None:
    wire, body = metadata_v12_response()
    assert decode_response(ApiKey.METADATA, 12, wire + b"\x00") == body  # as the Java client does
    with pytest.raises(ProtocolError, match="1 unexpected bytes after the body"):
        decode_response(ApiKey.METADATA, 12, wire + b"\x00", strict=True)
    req = _request_frame(ApiKey.PRODUCE, 11, 3)
    assert decode_request(req + b"xx") == decode_request(req)
    with pytest.raises(ProtocolError, match="2 unexpected bytes"):
        decode_request(req + b"xx", strict=True)


# librdkafka 2.16's mock, Metadata v12 for one topic (captured): one byte more than the schema has
MOCK_METADATA_V12 = bytes.fromhex(
    "00000001000000000002000000010a3132372e302e302e310000ae5f0000186d6f636b436c7573746572313538313935353862"
    "653734000000000200000274771ddcb0f9de493988a3368e5e9355c100020000000000000000000100000000020000000102"
    "00000001010080000000000000"
)


def test_librdkafka_mock_metadata_with_a_trailing_byte_decodes() -> None:
    md = decode_response(ApiKey.METADATA, 12, MOCK_METADATA_V12)
    assert md["cluster_id"].startswith("mockCluster")
    p = md["topics"][0]["partitions"][0]
    assert (p["leader_id"], p["leader_epoch"], p["replica_nodes"]) == (1, 0, [1])
    with pytest.raises(ProtocolError):
        decode_response(ApiKey.METADATA, 12, MOCK_METADATA_V12, strict=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_frames_raise_only_protocol_errors(data: st.DataObject) -> None:
    name, wire, decode = data.draw(st.sampled_from(CASES))
    buf = bytearray(wire)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    try:
        decode(bytes(buf))
    except ProtocolError:
        pass
    except UnsupportedVersionError:
        assert name.startswith("req-")  # a mutated api key/version names an API akresil has no schema for


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=64))
def test_random_bytes_raise_only_protocol_errors(raw: bytes) -> None:
    for message, version in [(specs.FETCH_RESPONSE, 16), (specs.METADATA_RESPONSE, 12), (specs.PRODUCE_REQUEST, 3)]:
        try:
            decoder(message, version)(raw, 0)
        except ProtocolError:
            pass


def test_huge_array_count_is_rejected_before_allocating() -> None:
    # Metadata v0 response: brokers array claims 2^31-1 elements in a 10-byte frame
    wire = i32(1) + i32(0x7FFFFFFF) + b"\x00\x00"
    with pytest.raises(ProtocolError, match="claims 2147483647 elements"):
        decode_response(ApiKey.METADATA, 0, wire)


def test_huge_compact_array_count_is_rejected() -> None:
    # Fetch v16: responses compact count encoded as a 5-byte varint (2^32-1) with nothing after it
    wire = i32(1) + b"\x00" + i32(0) + i16(0) + i32(0) + b"\xff\xff\xff\xff\x0f"
    with pytest.raises(ProtocolError, match="elements"):
        decode_response(ApiKey.FETCH, 16, wire)


def test_negative_lengths_are_rejected() -> None:
    # Metadata v0 response: broker host string with length -2
    wire = i32(1) + i32(1) + i32(1) + i16(-2) + bytes(12)
    with pytest.raises(ProtocolError, match="non-nullable string .* length -2"):
        decode_response(ApiKey.METADATA, 0, wire)
    # array length -2 (only -1 means null, and only where nullable)
    with pytest.raises(ProtocolError, match="invalid length -2"):
        decode_response(ApiKey.METADATA, 0, i32(1) + i32(-2))
    with pytest.raises(ProtocolError, match="invalid length -1"):
        decode_response(ApiKey.METADATA, 0, i32(1) + i32(-1))


def test_string_longer_than_frame_is_rejected() -> None:
    wire = i32(1) + i32(1) + i32(1) + i16(300) + b"abc" + bytes(12)
    with pytest.raises(ProtocolError, match="string needs 300 bytes"):
        decode_response(ApiKey.METADATA, 0, wire)


def test_overlong_varint_is_rejected() -> None:
    wire = i32(1) + b"\x00" + i32(0) + i16(0) + i32(0) + b"\x80\x80\x80\x80\x80\x01"
    with pytest.raises(ProtocolError, match="longer than 5 bytes"):
        decode_response(ApiKey.FETCH, 16, wire)


def test_invalid_utf8_is_a_protocol_error() -> None:
    wire = i32(1) + i32(1) + i32(1) + i16(2) + b"\xff\xfe" + i32(9092) + i32(0)
    with pytest.raises(ProtocolError, match="malformed"):
        decode_response(ApiKey.METADATA, 0, wire)


def test_tagged_field_size_must_match_its_value() -> None:
    good, _ = produce_v11_response(True)
    # the CurrentLeader tag declares 9 bytes; claim 10 and append a byte inside the section
    idx = good.index(b"\x01\x00\x09" + i32(2))
    bad = good[:idx] + b"\x01\x00\x0a" + good[idx + 3 : idx + 3 + 9] + b"\x00" + good[idx + 3 + 9 :]
    with pytest.raises(ProtocolError, match="current_leader .* declared 10 bytes but its value took 9"):
        decode_response(ApiKey.PRODUCE, 11, bad)


def test_short_frames() -> None:
    with pytest.raises(ProtocolError):
        api.response_correlation_id(b"\x00\x01")
    with pytest.raises(ProtocolError):
        decode_request(b"\x00")
    with pytest.raises(ProtocolError):
        decode_response(ApiKey.FETCH, 16, b"")


# The generated decoders read compact strings and uuids inline (no call to the primitives): they must give the
# primitives' values, end offsets and errors for every length, including multi-byte lengths and truncations.
_INLINE = M("InlineReads", None, "data", "0", "0+", (
    F("s", "string", "0+"), F("ns", "string", "0+", nullable="0+"), F("id", "uuid", "0+")))


@pytest.mark.parametrize("text", ["", "a", "é" * 40, "x" * 126, "x" * 127, "x" * 128, "ü" * 200, "y" * 20_000])
def test_inline_compact_string_and_uuid_reads_match_the_primitives(text: str) -> None:
    ident = bytes(range(16))
    first = b"".join(_parts(P.write_compact_string, text))
    for value in (text, None):
        body = first + b"".join(_parts(P.write_compact_nullable_string, value)) + ident + b"\x00"
        for buf in (body, memoryview(body)):
            assert decoder(_INLINE, 0)(buf, 0) == ({"s": text, "ns": value, "id": ident}, len(body))
    # every truncation fails as the primitives do, with their message
    for cut in range(len(first)):
        with pytest.raises(ProtocolError) as caught:
            decoder(_INLINE, 0)(first[:cut], 0)
        with pytest.raises(ProtocolError) as expected:
            P.read_compact_string(first[:cut], 0)
        assert str(caught.value) == f"InlineReads v0: {expected.value}"
    with pytest.raises(ProtocolError, match=r"^InlineReads v0: uuid needs 16 bytes at offset 2 but only 15 remain$"):
        decoder(_INLINE, 0)(b"\x01\x00" + ident[:15], 0)


def test_inline_compact_string_null_where_not_nullable_names_the_problem() -> None:
    with pytest.raises(ProtocolError, match=r"^InlineReads v0: non-nullable compact string before offset 1 is null$"):
        decoder(_INLINE, 0)(b"\x00\x00" + bytes(17), 0)


def _parts(write: Callable[..., None], value: Any) -> list[Any]:
    parts: list[Any] = []
    write(parts, value)
    return parts


def test_empty_int_arrays_decode_to_fresh_lists() -> None:
    # the decoders build empty fixed-width arrays without a struct call; each must still be its own list
    message = M("EmptyArrays", None, "data", "0", "0+", (F("a", "[]int32", "0+"), F("b", "[]int32", "0+")))
    got, end = decoder(message, 0)(b"\x01\x01\x00", 0)
    assert got == {"a": [], "b": []} and end == 3 and type(got["a"]) is list and got["a"] is not got["b"]
    got["a"].append(1)
    assert decoder(message, 0)(b"\x01\x01\x00", 0)[0] == {"a": [], "b": []}
