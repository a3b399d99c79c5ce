"""Every schema, every version: generated bodies survive encode -> decode, and bytes survive decode -> encode."""

from __future__ import annotations

import random
from typing import Any

import pytest

from akresil.errors import ProtocolError, UnsupportedVersionError
from akresil.protocol import api, specs
from akresil.protocol.compiler import decoder, encoder
from akresil.protocol.primitives import INT_RANGES
from akresil.protocol.schema import Field, Message

ALL_VERSIONS = [(m, v) for m in specs.ALL for v in range(m.valid.lo, m.valid.hi + 1)]


def _scalar(type_: str, rng: random.Random) -> Any:
    if type_ in INT_RANGES:
        lo, hi = INT_RANGES[type_]
        return rng.choice([lo, hi, 0, -1 if lo < 0 else 1, rng.randint(lo, hi)])
    if type_ == "bool":
        return rng.random() < 0.5
    if type_ == "float64":
        return rng.choice([0.0, -1.5, 1e300, rng.uniform(-1e6, 1e6)])
    if type_ == "string":
        n = rng.choice([0, 1, 5, 130])
        return "".join(rng.choice("abcxyz-._ é€😀") for _ in range(n))
    if type_ in ("bytes", "records"):
        return rng.randbytes(rng.choice([0, 1, 7, 200]))
    if type_ == "uuid":
        return rng.randbytes(16)
    raise AssertionError(type_)


def random_struct(fields: tuple[Field, ...], version: int, rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """A complete body: every field the version has, with values that exercise nulls, tags and varints."""
    d: dict[str, Any] = {}
    for f in fields:
        if version not in f.versions:
            continue
        if f.is_tagged(version) and rng.random() < 0.4:
            d[f.name] = None if (f.is_struct or f.is_array) else f.default_for(version)
            continue
        if f.is_nullable(version) and rng.random() < 0.2:
            d[f.name] = None
            continue
        if f.is_array:
            n = rng.choice([0, 1, 2, 3] if depth < 2 else [0, 1])
            if f.is_struct:
                d[f.name] = [random_struct(f.fields, version, rng, depth + 1) for _ in range(n)]
            else:
                d[f.name] = [_scalar(f.element, rng) for _ in range(n)]
        elif f.is_struct:
            d[f.name] = random_struct(f.fields, version, rng, depth + 1)
        else:
            d[f.name] = _scalar(f.type, rng)
    return d


def random_body(message: Message, version: int, rng: random.Random) -> dict[str, Any]:
    return random_struct(message.fields, version, rng)


def encode(message: Message, version: int, body: dict[str, Any]) -> bytes:
    parts: list[Any] = []
    encoder(message, version)(body, parts)
    return b"".join(parts)


@pytest.mark.parametrize(("message", "version"), ALL_VERSIONS, ids=[f"{m.name}-v{v}" for m, v in ALL_VERSIONS])
def test_round_trip(message: Message, version: int) -> None:
    rng = random.Random(f"{message.name}{version}")
    enc = encoder(message, version)
    dec = decoder(message, version)
    for _ in range(12):
        body = random_body(message, version, rng)
        parts: list[Any] = []
        enc(body, parts)
        out = b"".join(parts)
        decoded, pos = dec(out, 0)
        assert pos == len(out)
        assert decoded == body
        assert encode(message, version, decoded) == out
        # zero-copy input decodes the same (records fields come back as views of the input)
        assert dec(memoryview(out), 0)[0] == body


@pytest.mark.parametrize(("message", "version"), ALL_VERSIONS, ids=[f"{m.name}-v{v}" for m, v in ALL_VERSIONS])
def test_empty_body_takes_defaults(message: Message, version: int) -> None:
    out = encode(message, version, {})
    decoded, _ = decoder(message, version)(out, 0)
    for f in message.fields:
        if version not in f.versions:
            assert f.name not in decoded
        elif f.is_tagged(version) and (f.is_struct or f.is_array):
            assert decoded[f.name] is None
        elif f.is_struct and not f.is_array and f.is_nullable(version):
            assert decoded[f.name] is None    # a nullable struct (ConsumerGroupHeartbeat's Assignment) defaults to null
        elif f.is_struct and not f.is_array:
            assert isinstance(decoded[f.name], dict)
        else:
            assert decoded[f.name] == f.default_for(version), f.name


def _flexible_pairs() -> list[tuple[Message, int]]:
    return [(m, v) for m, v in ALL_VERSIONS if m.is_flexible(v)]


@pytest.mark.parametrize(("message", "version"), _flexible_pairs(), ids=[f"{m.name}-v{v}" for m, v in _flexible_pairs()])
def test_unknown_tags_are_preserved(message: Message, version: int) -> None:
    rng = random.Random(version)
    body = random_body(message, version, rng)
    body["_unknown_tags"] = {90: b"\x01\x02", 7000: b"", 200: b"z" * 130}
    out = encode(message, version, body)
    decoded, _ = decoder(message, version)(out, 0)
    assert decoded["_unknown_tags"] == {90: b"\x01\x02", 200: b"z" * 130, 7000: b""}
    assert encode(message, version, decoded) == out


def test_frames_round_trip_for_every_api() -> None:
    rng = random.Random(7)
    for key, (lo, hi) in api.SCHEMA_VERSIONS.items():
        for v in range(lo, hi + 1):
            req = random_body(api.REQUESTS[key], v, rng)
            frame = api.encode_request(key, v, 123456, "client-é", req)
            assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
            header, body = api.decode_request(frame[4:])
            assert header == {"api_key": key, "api_version": v, "correlation_id": 123456, "client_id": "client-é"}
            assert body == req
            resp = random_body(api.RESPONSES[key], v, rng)
            rframe = api.encode_response(key, v, -5, resp)
            assert api.response_correlation_id(rframe[4:]) == -5
            assert api.decode_response(key, v, memoryview(rframe)[4:]) == resp


# --------------------------------------------------------------------------- encoding rules
def test_non_default_value_for_absent_non_ignorable_field_is_rejected() -> None:
    # Metadata: IncludeClusterAuthorizedOperations exists only in 8-10 and is not ignorable
    body = {"topics": None, "include_cluster_authorized_operations": True}
    with pytest.raises(UnsupportedVersionError, match="include_cluster_authorized_operations"):
        api.encode_request(api.ApiKey.METADATA, 11, 1, None, body)
    api.encode_request(api.ApiKey.METADATA, 11, 1, None, {"topics": None, "include_cluster_authorized_operations": False})
    api.encode_request(api.ApiKey.METADATA, 10, 1, None, body)


def test_absent_ignorable_field_is_dropped() -> None:
    # Produce v11 has no topic_id (ignorable): it is silently left out
    body = {"acks": 1, "timeout_ms": 5, "topic_data": [{"name": "t", "topic_id": b"\x01" * 16, "partition_data": []}]}
    frame = api.encode_request(api.ApiKey.PRODUCE, 11, 1, None, body)
    _, decoded = api.decode_request(frame[4:])
    assert "topic_id" not in decoded["topic_data"][0]


def test_unknown_key_is_rejected_with_its_name() -> None:
    body = {"acks": 1, "timeout_ms": 5, "topic_data": [{"name": "t", "partitons": []}]}
    with pytest.raises(ProtocolError, match="partitons"):
        api.encode_request(api.ApiKey.PRODUCE, 11, 1, None, body)


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ({"index": "0", "records": b""}, r"partition_data\[0\]\.index: expected an int"),
        ({"index": 1 << 40, "records": b""}, r"partition_data\[0\]\.index: .*out of range for int32"),
        ({"index": 0, "records": "text"}, r"partition_data\[0\]\.records: expected bytes"),
    ],
)
def test_bad_values_name_the_field_path(bad: dict[str, Any], needle: str) -> None:
    body = {"acks": 1, "timeout_ms": 5, "topic_data": [{"name": "t", "partition_data": [bad]}]}
    with pytest.raises(ProtocolError, match=needle):
        api.encode_request(api.ApiKey.PRODUCE, 9, 1, None, body)


def test_none_for_non_nullable_string_is_named() -> None:
    with pytest.raises(ProtocolError, match=r"topic_data\[0\]\.name: None given but the field is not nullable"):
        api.encode_request(api.ApiKey.PRODUCE, 8, 1, None, {"topic_data": [{"name": None}]})


def test_bad_uuid_is_rejected() -> None:
    with pytest.raises(ProtocolError, match="uuid must be 16 bytes"):
        api.encode_request(api.ApiKey.FETCH, 13, 1, None, {"topics": [{"topic_id": b"short"}]})


def test_tagged_scalar_at_default_is_not_written() -> None:
    msg = specs.API_VERSIONS_RESPONSE
    a = encode(msg, 3, {"finalized_features_epoch": -1})
    assert a == encode(msg, 3, {})
    assert len(encode(msg, 3, {"finalized_features_epoch": 5})) == len(a) + 10  # tag, size, int64


def test_version_outside_schema_is_unsupported() -> None:
    with pytest.raises(UnsupportedVersionError, match="ProduceRequest has no version 2"):
        api.encode_request(api.ApiKey.PRODUCE, 2, 1, None, {})
    with pytest.raises(UnsupportedVersionError, match="API key 99"):
        api.request_header_version(99, 0)


@pytest.mark.parametrize("version", [8, 13])          # classic and flexible arrays
@pytest.mark.parametrize("count", [0, 1, 15, 16, 17, 40])   # a prepared Struct below 16 elements, a format above
def test_arrays_of_fixed_width_elements_read_back_at_every_length(version: int, count: int) -> None:
    message = specs.message("METADATA_RESPONSE")
    replicas = list(range(-1, count - 1))
    body = {"throttle_time_ms": 0, "brokers": [], "cluster_id": "c", "controller_id": 1,
            "cluster_authorized_operations": -2147483648, "topics": [
                {"error_code": 0, "name": "t", "topic_id": bytes(16), "is_internal": False,
                 "topic_authorized_operations": -2147483648, "partitions": [
                     {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 3,
                      "replica_nodes": replicas, "isr_nodes": replicas[:1], "offline_replicas": replicas[::-1]}]}]}
    out: list[bytes] = []
    encoder(message, version)(body, out)
    got, _ = decoder(message, version)(b"".join(out), 0)
    part = got["topics"][0]["partitions"][0]
    assert (part["replica_nodes"], part["isr_nodes"], part["offline_replicas"]) == (replicas, replicas[:1],
                                                                                 replicas[::-1])
    assert type(part["replica_nodes"]) is list


@pytest.mark.parametrize("element", ["bool", "int8", "int16", "int32", "int64", "uint16", "float64"])
@pytest.mark.parametrize("count", [0, 2, 20])
def test_an_array_of_any_fixed_width_type_reads_back(element: str, count: int) -> None:
    """Every fixed-width element type, ``bool`` (format ``?``) included, makes valid generated code."""
    from akresil.protocol.schema import F, M

    message = M(f"Arrays{element.title()}", None, "data", "0-1", "1+", (F("values", f"[]{element}", "0+"),))
    values = [bool(i % 2) if element == "bool" else (i * 0.5 if element == "float64" else i) for i in range(count)]
    for version in (0, 1):
        out: list[bytes] = []
        encoder(message, version)({"values": values}, out)
        got, _ = decoder(message, version)(b"".join(out), 0)
        assert got["values"] == values
