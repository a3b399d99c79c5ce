"""Frames: headers + bodies for every API akresil speaks, and ApiVersions negotiation.

This is the surface the connection layer and the fault-injection proxy use.  Requests and responses
are plain dicts (see :mod:`akresil.protocol.compiler` for the encoding rules); frames written here carry
the 4-byte size prefix, frames read here do not (the connection layer strips it while framing).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from akresil.errors import ProtocolError, UnsupportedVersionError
from akresil.protocol import primitives as P
from akresil.protocol import specs
from akresil.protocol.compiler import decoder, diagnose, encoder
from akresil.protocol.fetch_codec import PackedFetchBody, decode_fetch_body, encode_fetch_body
from akresil.protocol.schema import Message, Versions

Buffer = bytes | bytearray | memoryview


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


class _Schemas(dict[Any, Message]):
    """Schemas by API key (or by name), each built by ``specs`` on its first lookup and kept as a plain entry.

    A process speaks a handful of APIs, so building all ~100 schemas at import would be wasted start-up time
    (Spark starts several Python processes per query). After the first lookup of a key, ``schemas[key]`` is a
    dict hit like any other, so a request costs nothing more; iterating or sizing it builds every schema.
    """

    def __init__(self, consts: dict[Any, str]) -> None:
        super().__init__()
        self._consts = consts

    def __missing__(self, key: Any) -> Message:
        const = self._consts.get(key)
        if const is None:
            raise KeyError(key)
        m = self[key] = specs.message(const)
        return m

    def get(self, key: Any, default: Message | None = None) -> Message | None:  # type: ignore[override]
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return key in self._consts

    def _all(self) -> _Schemas:
        for key in self._consts:
            self[key]     # noqa: B018 (builds it)
        return self

    def __iter__(self) -> Any:
        return dict.__iter__(self._all())

    def __len__(self) -> int:
        return len(self._consts)

    def keys(self) -> Any:
        return dict.keys(self._all())

    def values(self) -> Any:
        return dict.values(self._all())

    def items(self) -> Any:
        return dict.items(self._all())


def _index() -> tuple[_Schemas, _Schemas, _Schemas, dict[ApiKey, tuple[int, int]]]:
    requests: dict[int, str] = {}
    responses: dict[int, str] = {}
    by_name: dict[str, str] = {}
    versions: dict[ApiKey, tuple[int, int]] = {}
    for const, (_, name, api_key, kind, valid) in specs.TABLE.items():
        by_name[name] = const
        if kind == "request" and api_key is not None:
            requests[api_key] = const
            v = Versions.parse(valid)
            versions[ApiKey(api_key)] = (v.lo, v.hi)
        elif kind == "response" and api_key is not None:
            responses[api_key] = const
    return _Schemas(requests), _Schemas(responses), _Schemas(by_name), dict(sorted(versions.items()))


REQUESTS, RESPONSES, MESSAGES, _VERSIONS = _index()

#: every version the codec can encode and decode (from the specs)
SCHEMA_VERSIONS: dict[ApiKey, tuple[int, int]] = _VERSIONS

#: versions akresil's clients ask for.  Capped below SCHEMA_VERSIONS where a newer version changes what
#: the client must send or understand and no layer implements that yet:
#: Produce 13 (topic ids instead of names), Fetch 18 (KIP-1166
#: replica high-watermark), OffsetCommit/OffsetFetch 10 (topic ids only), InitProducerId 6 (unstable
#: in the spec).  Fetch 13-17 already name topics by id: the consumer must send topic ids there.
#: ShareFetch/ShareAcknowledge 2 add acquire modes and lock renewal (KIP-1206, KIP-1222), not implemented.
#: Transactions: AddPartitionsToTxn 4+ is the brokers' batched form; Produce 12, EndTxn 5 and TxnOffsetCommit 5 are
#: transactions v2 (KIP-890 part 2), which a transactional producer uses only when the cluster's finalized
#: transaction.version is 2 (it caps them at 11 / 4 / 4 on v1: ``net/transaction.py``, ``net/scheduler.py``);
#: TxnOffsetCommit 6 (Kafka 4.1+) is not implemented. AddOffsetsToTxn has no v5: v2 does without it.
CLIENT_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    **SCHEMA_VERSIONS,
    ApiKey.PRODUCE: (3, 12),
    ApiKey.FETCH: (4, 17),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.SHARE_FETCH: (1, 1),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 1),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
}

UNSUPPORTED_VERSION = 35

_REQUEST_HEADER = specs.REQUEST_HEADER
_RESPONSE_HEADER = specs.RESPONSE_HEADER
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HDR_FIXED = struct.Struct(">hhi")  # api key, api version, correlation id


def negotiate(broker: Mapping[int, tuple[int, int]]) -> dict[ApiKey, int]:
    """Highest version both sides support, per API; an API with no common version is left out."""
    chosen: dict[ApiKey, int] = {}
    for key, (lo, hi) in CLIENT_VERSIONS.items():
        theirs = broker.get(int(key))
        if theirs is None:
            continue
        best = min(hi, theirs[1])
        if best >= max(lo, theirs[0]):
            chosen[key] = best
    return chosen


def broker_versions(api_versions_response: Mapping[str, Any]) -> dict[int, tuple[int, int]]:
    """``{api_key: (min, max)}`` from a decoded ApiVersions response, the input :func:`negotiate` takes."""
    return {
        int(k["api_key"]): (int(k["min_version"]), int(k["max_version"]))
        for k in api_versions_response.get("api_keys") or ()
    }


def _request_schema(api_key: int, version: int) -> Message:
    try:
        m = REQUESTS[api_key]
    except KeyError:
        raise UnsupportedVersionError(f"akresil has no schema for API key {api_key}") from None
    m.check_version(version)
    return m


def _response_schema(api_key: int, version: int) -> Message:
    try:
        m = RESPONSES[api_key]
    except KeyError:
        raise UnsupportedVersionError(f"akresil has no schema for API key {api_key}") from None
    m.check_version(version)
    return m


def request_header_version(api_key: int, version: int) -> int:
    """v2 (with a tag section) for flexible request versions, v1 otherwise."""
    return 2 if _request_schema(api_key, version).is_flexible(version) else 1


def response_header_version(api_key: int, version: int) -> int:
    """v1 for flexible response versions, v0 otherwise; ApiVersions always answers with v0 (KIP-511),
    so a client can read it even when the broker does not know the version it asked for."""
    if api_key == ApiKey.API_VERSIONS:
        _response_schema(api_key, version)
        return 0
    return 1 if _response_schema(api_key, version).is_flexible(version) else 0


# --------------------------------------------------------------------------- requests
def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, body: Mapping[str, Any]
) -> bytes:
    """A whole request frame, size prefix included, ready for the socket."""
    schema = _request_schema(api_key, version)
    hv = request_header_version(api_key, version)
    if client_id is not None and not isinstance(client_id, str):
        raise ProtocolError(f"client_id must be a str or None, got {type(client_id).__name__}")
    parts: list[Any] = [b"", _HDR_FIXED.pack(api_key, version, _check_correlation_id(correlation_id))]
    P.write_nullable_string(parts, client_id)  # ClientId is never compact, even in header v2
    if hv >= 2:
        parts.append(b"\x00")
    if type(body) is PackedFetchBody:
        encode_fetch_body(body, version, parts)   # the consumer's Fetch: its partition entries already packed
    else:
        encoder(schema, version)(body, parts)  # type: ignore[arg-type]
    return _framed(parts, schema, version, body)


def _framed(parts: list[Any], schema: Message, version: int, body: Mapping[str, Any]) -> bytes:
    """Join the pieces once, behind the 4-byte size prefix."""
    parts[0] = _I32.pack(sum(map(len, parts)))  # parts[0] is still empty here
    return _join(parts, schema, version, body)


def _join(parts: list[Any], schema: Message, version: int, body: Mapping[str, Any]) -> bytes:
    try:
        return b"".join(parts)
    except TypeError as e:  # a str (or other sized non-buffer) where bytes belong
        where = diagnose(schema, version, body)
        raise ProtocolError(f"{schema.name} v{version}: {where or e}") from None


def decode_request(frame: Buffer, *, strict: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(header, body)`` of a request frame without its size prefix.

    The header dict has ``api_key``, ``api_version``, ``correlation_id``, ``client_id`` (and
    ``_unknown_tags`` when a v2 header carries some).  Bytes after the body are ignored, as Kafka does,
    unless ``strict``."""
    if len(frame) < 4:
        raise ProtocolError(f"request frame of {len(frame)} bytes is too short for a header")
    api_key, version = struct.unpack_from(">hh", frame, 0)
    schema = _request_schema(api_key, version)
    hv = request_header_version(api_key, version)
    raw, pos = decoder(_REQUEST_HEADER, hv)(frame, 0)
    header: dict[str, Any] = {
        "api_key": raw["request_api_key"],
        "api_version": raw["request_api_version"],
        "correlation_id": raw["correlation_id"],
        "client_id": raw.get("client_id"),
    }
    if "_unknown_tags" in raw:
        header["_unknown_tags"] = raw["_unknown_tags"]
    body, pos = decoder(schema, version)(frame, pos)
    if strict:
        _no_trailing(frame, pos, schema.name, version)
    return header, body


# --------------------------------------------------------------------------- responses
def response_correlation_id(frame: Buffer) -> int:
    """The correlation id of a response frame (without size prefix): every header version starts with it."""
    if len(frame) < 4:
        raise ProtocolError(f"response frame of {len(frame)} bytes is too short for a correlation id")
    return int(_I32.unpack_from(frame, 0)[0])


def _body_offset(frame: Buffer, header_version: int) -> int:
    if len(frame) < 4:
        raise ProtocolError(f"response frame of {len(frame)} bytes is too short for a header")
    if header_version == 0:
        return 4
    _, pos = P.read_unknown_tags(frame, 4)
    return pos


def decode_response(api_key: int, version: int, frame: Buffer, *, strict: bool = False) -> dict[str, Any]:
    """The body of a response frame (header included, size prefix not).

    Bytes after the body are ignored unless ``strict``: the Java client ignores them too, and real
    brokers send them (librdkafka 2.16's mock adds one to every Metadata v12/v13 response).

    ``records`` fields are slices of ``frame``: ``bytes`` for a bytes frame, zero-copy ``memoryview``s
    for a memoryview frame (they then keep the frame's buffer alive)."""
    schema = _response_schema(api_key, version)
    pos = _body_offset(frame, response_header_version(api_key, version))
    body, pos = decoder(schema, version)(frame, pos)
    if strict:
        _no_trailing(frame, pos, schema.name, version)
    return body


def decode_answer(api_key: int, version: int, frame: Buffer, request: Mapping[str, Any]) -> dict[str, Any]:
    """The answer to ``request``: ``decode_response``, except for the consumer's Fetch (a ``PackedFetchBody``),
    whose partition entries ``fetch_codec`` reads as ``FetchedPartition`` tuples rather than dicts."""
    if type(request) is PackedFetchBody:
        return decode_fetch_body(frame, _body_offset(frame, response_header_version(api_key, version)), version)
    return decode_response(api_key, version, frame)


def encode_response(api_key: int, version: int, correlation_id: int, body: Mapping[str, Any]) -> bytes:
    """A whole response frame, size prefix included (for the fault-injection proxy and tests)."""
    schema = _response_schema(api_key, version)
    parts: list[Any] = [b"", _I32.pack(_check_correlation_id(correlation_id))]
    if response_header_version(api_key, version) >= 1:
        parts.append(b"\x00")
    encoder(schema, version)(body, parts)  # type: ignore[arg-type]
    return _framed(parts, schema, version, body)


def _check_correlation_id(correlation_id: int) -> int:
    if not isinstance(correlation_id, int) or not -(1 << 31) <= correlation_id < (1 << 31):
        raise ProtocolError(f"correlation id {correlation_id!r} is not an int32")
    return correlation_id


def _no_trailing(frame: Buffer, pos: int, name: str, version: int) -> None:
    if pos != len(frame):
        raise ProtocolError(
            f"{name} v{version}: {len(frame) - pos} unexpected bytes after the body "
            f"(wrong version negotiated or a malformed frame)"
        )


# --------------------------------------------------------------------------- ApiVersions fallback
def api_versions_error_code(frame: Buffer) -> int:
    """The error code of an ApiVersions response frame, read from its first bytes only.

    ApiVersions responses always use header v0 and start their body with ErrorCode, so this works even
    when the rest does not parse at the version asked for (a broker that does not know that version
    answers UNSUPPORTED_VERSION in the v0 layout, KIP-511; librdkafka's mock does so for v3/v4)."""
    if len(frame) < 6:
        raise ProtocolError(f"ApiVersions response of {len(frame)} bytes is too short for an error code")
    return int(_I16.unpack_from(frame, 4)[0])


def decode_api_versions_response(version: int, frame: Buffer) -> dict[str, Any]:
    """Decode an ApiVersions response, tolerating the UNSUPPORTED_VERSION fallback layout.

    With UNSUPPORTED_VERSION the body is read strictly as v0 (what KIP-511 brokers send), then strictly
    at ``version``; if neither parses (librdkafka's mock), ``api_keys`` is empty.  Java then retries with
    the highest ApiVersions version the broker lists, else v0: :func:`api_versions_retry_version`.
    """
    if api_versions_error_code(frame) == UNSUPPORTED_VERSION:
        for v in dict.fromkeys((0, version)):
            try:
                return decode_response(ApiKey.API_VERSIONS, v, frame, strict=True)
            except ProtocolError:
                pass
        return {"error_code": UNSUPPORTED_VERSION, "api_keys": []}
    return decode_response(ApiKey.API_VERSIONS, version, frame)


def api_versions_retry_version(response: Mapping[str, Any], tried: int) -> int:
    """After UNSUPPORTED_VERSION: the broker's highest ApiVersions version below ``tried``, else 0."""
    theirs = broker_versions(response).get(ApiKey.API_VERSIONS)
    ours = SCHEMA_VERSIONS[ApiKey.API_VERSIONS]
    if theirs is not None:
        best = min(theirs[1], ours[1], tried - 1)
        if best >= max(theirs[0], ours[0]):
            return best
    return 0


# --------------------------------------------------------------------------- non-API payloads
def _data_schema(name: str) -> Message:
    m = MESSAGES.get(name)
    if m is None or m.kind != "data":
        known = sorted(n for n, s in MESSAGES.items() if s.kind == "data")
        raise ProtocolError(f"no payload schema named {name!r}; known: {', '.join(known)}")
    return m


def encode_message(name: str, version: int, body: Mapping[str, Any]) -> bytes:
    """A payload struct (ConsumerProtocolSubscription/Assignment) at ``version``, without version prefix."""
    m = _data_schema(name)
    parts: list[Any] = []
    encoder(m, version)(body, parts)  # type: ignore[arg-type]
    return _join(parts, m, version, body)


def decode_message(name: str, version: int, data: Buffer) -> dict[str, Any]:
    """Inverse of :func:`encode_message`; trailing bytes are an error."""
    m = _data_schema(name)
    body, pos = decoder(m, version)(data, 0)
    _no_trailing(data, pos, name, version)
    return body


def encode_versioned(name: str, version: int, body: Mapping[str, Any]) -> bytes:
    """The consumer-protocol wire form: int16 version, then the struct (JoinGroup metadata, SyncGroup
    assignment bytes)."""
    return _I16.pack(version) + encode_message(name, version, body)


def decode_versioned(name: str, data: Buffer) -> tuple[int, dict[str, Any]]:
    """``(version, body)`` from the consumer-protocol wire form.

    A version newer than akresil knows is read with the newest known layout; bytes after the struct are
    ignored (newer versions only append fields, and a group must tolerate newer members, as Java does)."""
    m = _data_schema(name)
    if len(data) < 2:
        raise ProtocolError(f"{name}: {len(data)} bytes is too short for a version prefix")
    version = int(_I16.unpack_from(data, 0)[0])
    if version < m.valid.lo:
        raise ProtocolError(f"{name}: version {version} is below the lowest known ({m.valid.lo})")
    body, _ = decoder(m, min(version, m.valid.hi))(data, 2)
    return version, body
