"""Cross-check against an independent implementation: kafka-python 3.x's protocol layer.

For every API and version both know, on generated bodies: kafka-python encodes the same bytes as akresil,
akresil decodes kafka-python's bytes to the body, and kafka-python decodes akresil's bytes to values it
re-encodes identically.  (Dicts are not compared directly: kafka-python represents some fields differently,
e.g. authorized-operations bit fields as sets and a zero uuid as None.)
"""

from __future__ import annotations

import importlib
import pkgutil
import random
import uuid
from typing import Any

import pytest

from akresil.protocol import api, specs
from akresil.protocol.compiler import decoder
from akresil.protocol.schema import Field, Message
from tests.unit.test_protocol_roundtrip import encode, random_body

kp_protocol = pytest.importorskip("kafka.protocol")
from kafka.protocol.api_message import ApiMessage  # noqa: E402
from kafka.protocol.consumer.metadata import (  # noqa: E402
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)


def _kp_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for mod in pkgutil.walk_packages(kp_protocol.__path__, "kafka.protocol."):
        if ".schemas" in mod.name or mod.name.endswith(("generate_stubs", ".old")) or ".old." in mod.name:
            continue
        module = importlib.import_module(mod.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage:
                found.setdefault(obj.__name__, obj)
    return found


KP = _kp_classes()


#: kafka-python renames the authorized-operations bit fields and gives them as sets of bit numbers
_KP_ALIASES = {"cluster_authorized_operations": "authorized_operations", "topic_authorized_operations": "authorized_operations"}


def to_kp(cls: Any, value: dict[str, Any], version: int, fields: tuple[Field, ...]) -> Any:
    """Build kafka-python's DataContainer tree from an akresil body dict.

    Tagged fields at their default are left out: kafka-python writes every tag it was given, Kafka (and
    akresil) only non-default ones."""
    ours = {f.name: f for f in fields}
    kwargs: dict[str, Any] = {}
    for name, v in value.items():
        mine = ours[name]
        if mine.is_tagged(version) and (v is None or (not mine.is_struct and v == mine.default_for(version))):
            continue
        if name in _KP_ALIASES and name not in cls._struct.fields:
            kwargs[_KP_ALIASES[name]] = {i for i in range(32) if (v & 0xFFFFFFFF) >> i & 1}
            continue
        field = cls._struct.fields[name]
        sub = mine.fields
        if field.type_str == "bitfield" and isinstance(v, int):   # e.g. DescribeGroups' authorized_operations
            kwargs[name] = {i for i in range(32) if (v & 0xFFFFFFFF) >> i & 1}
            continue
        if v is None:
            kwargs[name] = None
        elif field.is_struct_array():
            kwargs[name] = [to_kp(field.data_class, x, version, sub) for x in v]
        elif field.is_struct():
            kwargs[name] = to_kp(field.data_class, v, version, sub)
        elif field.type_str == "uuid":
            kwargs[name] = uuid.UUID(bytes=v)
        elif field.type_str == "[]uuid":
            kwargs[name] = [uuid.UUID(bytes=x) for x in v]
        else:
            kwargs[name] = v
    return cls(version=version, **kwargs)


def from_kp(value: Any) -> Any:
    """kafka-python's to_dict(json=False) with uuids turned into akresil's 16-byte form."""
    if isinstance(value, dict):
        return {k: from_kp(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_kp(v) for v in value]
    if isinstance(value, uuid.UUID):
        return value.bytes
    return value


def canonical(fields: tuple[Field, ...], version: int, body: dict[str, Any]) -> dict[str, Any]:
    """Present-but-empty tagged arrays become absent.  akresil writes a tagged array whenever it is not
    None (so a proxy re-encodes what it read byte for byte); Kafka and kafka-python skip empty ones."""
    out: dict[str, Any] = {}
    for f in fields:
        if f.name not in body:
            continue
        v = body[f.name]
        if f.is_tagged(version) and f.is_array and v == []:
            v = None
        elif f.is_struct and f.is_array and v is not None:
            v = [canonical(f.fields, version, x) for x in v]
        elif f.is_struct and v is not None:
            v = canonical(f.fields, version, v)
        out[f.name] = v
    return out


PAIRS = [
    (m, v)
    for m in specs.ALL
    if m.kind in ("request", "response") and m.name in KP
    for v in range(m.valid.lo, min(m.valid.hi, KP[m.name].max_version) + 1)
]


@pytest.mark.parametrize(("message", "version"), PAIRS, ids=[f"{m.name}-v{v}" for m, v in PAIRS])
def test_akresil_and_kafka_python_agree(message: Message, version: int) -> None:
    cls = KP[message.name]
    rng = random.Random(f"kp{message.name}{version}")
    for _ in range(4):
        body = canonical(message.fields, version, random_body(message, version, rng))
        if message.name == "ApiVersionsResponse":
            body["error_code"] = 0  # kafka-python reads any error response as v0 (akresil: only on code 35)
        ours = encode(message, version, body)
        # kafka-python parses our bytes into values that it writes back byte for byte
        theirs_obj = cls.decode(bytes(ours), version=version)
        theirs_obj._header = None  # decode() bypasses __init__, encode() reads it
        assert bytes(theirs_obj.encode(version=version)) == bytes(ours)
        theirs = to_kp(cls, body, version, message.fields).encode(version=version)
        assert bytes(theirs) == bytes(ours)
        assert decoder(message, version)(bytes(theirs), 0)[0] == body


@pytest.mark.parametrize("version", range(0, 4))
@pytest.mark.parametrize(
    ("name", "kp_cls"),
    [("ConsumerProtocolSubscription", ConsumerProtocolSubscription), ("ConsumerProtocolAssignment", ConsumerProtocolAssignment)],
)
def test_consumer_protocol_payloads_agree(name: str, kp_cls: Any, version: int) -> None:
    rng = random.Random(version)
    body = random_body(api.MESSAGES[name], version, rng)
    ours = api.encode_versioned(name, version, body)
    theirs = to_kp(kp_cls, body, version, api.MESSAGES[name].fields).encode(version=version)
    # both write the consumer-protocol form: int16 version, then the struct
    assert ours == bytes(theirs)
    assert ours[:2] == version.to_bytes(2, "big")
    assert api.decode_versioned(name, ours) == (version, body)


def test_request_frames_agree_with_kafka_python_headers() -> None:
    req = {"acks": -1, "timeout_ms": 1000, "topic_data": [{"name": "t", "partition_data": [{"index": 3, "records": b"abc"}]}]}
    for version in (8, 9, 11):
        frame = api.encode_request(api.ApiKey.PRODUCE, version, 42, "akresil", req)
        kp = to_kp(KP["ProduceRequest"], req, version, api.MESSAGES["ProduceRequest"].fields)
        kp.with_header(correlation_id=42, client_id="akresil")
        assert frame == bytes(kp.encode(version=version, header=True, framed=True))
