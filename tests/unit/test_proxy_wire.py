"""The fault proxy's header-only framing and its recorder, without sockets."""

from __future__ import annotations

import struct

import pytest

from akresil.errors import ProtocolError
from akresil.protocol import api as codec
from akresil.testing.proxy import parse_request_header, produce_acks
from akresil.testing.recorder import Recorder, RecordedRequest, RecordedResponse


@pytest.mark.parametrize("api_key,version,body", [
    (18, 0, {}),                                                    # header v1
    (18, 3, {"client_software_name": "a", "client_software_version": "1"}),   # header v2 (flexible)
    (3, 12, {"topics": None, "allow_auto_topic_creation": False}),
])
def test_header_parse_matches_codec(api_key: int, version: int, body: dict) -> None:
    frame = codec.encode_request(api_key, version, 4711, "cid", body)[4:]
    h = parse_request_header(frame)
    decoded, _ = codec.decode_request(frame)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == \
        (decoded["api_key"], decoded["api_version"], decoded["correlation_id"], decoded["client_id"])
    assert h.body_offset > 0


def test_header_with_null_client_id_and_unknown_api_is_forwardable() -> None:
    frame = struct.pack(">hhih", 58, 1, 9, -1) + b"\x00" * 8   # Envelope: no schema in the codec
    h = parse_request_header(frame)
    assert (h.api_key, h.client_id, h.body_offset) == (58, None, -1)


@pytest.mark.parametrize("frame,problem", [
    (b"\x00\x01", "shorter than a request header"),
    (struct.pack(">hhih", 500, 0, 1, -1), "not a Kafka API"),
    (struct.pack(">hhih", 0, -3, 1, -1), "out of range"),
    (struct.pack(">hhih", 0, 9, 1, 40) + b"ab", "client_id runs past"),
    (struct.pack(">hhih", 0, 9, 1, -7), "bad client_id length"),
    (struct.pack(">hhih", 0, 9, 1, 2) + b"\xff\xfe", "not UTF-8"),
    (struct.pack(">hhih", 18, 3, 1, -1) + b"\x01\x00\x7f", "tagged fields run past"),
])
def test_garbage_headers_raise_protocol_error(frame: bytes, problem: str) -> None:
    with pytest.raises(ProtocolError, match=problem):
        parse_request_header(frame)


@pytest.mark.parametrize("version", [3, 8, 9, 11])
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_acks_read_from_bytes(version: int, acks: int) -> None:
    body = {"transactional_id": "tx" if version >= 3 else None, "acks": acks, "timeout_ms": 10,
            "topic_data": []}
    frame = codec.encode_request(0, version, 1, "c", body)[4:]
    assert produce_acks(frame, parse_request_header(frame)) == acks


def _req(node: int, api: int, t: float, **kw: object) -> RecordedRequest:
    return RecordedRequest(node_id=node, connection_id=1, client_id=kw.pop("client_id", "c"),  # type: ignore[arg-type]
                           api_key=api, api_version=9, correlation_id=1, time_ms=t, **kw)  # type: ignore[arg-type]


def test_recorder_filters() -> None:
    rec = Recorder()
    rec.add_request(_req(1, 0, 10.0, partitions=(("t", 0),)))
    rec.add_request(_req(2, 0, 20.0, partitions=(("t", 1),), in_throttle_window=True))
    rec.add_request(_req(2, 3, 30.0, client_id="other"))
    assert [r.node_id for r in rec.requests(0)] == [1, 2]
    assert [r.time_ms for r in rec.requests(node=2)] == [20.0, 30.0]
    assert [r.api_key for r in rec.requests(client_id="other")] == [3]
    assert [r.time_ms for r in rec.requests(since_ms=15)] == [20.0, 30.0]
    assert [r.node_id for r in rec.requests(partition=("t", 1))] == [2]
    assert [r.node_id for r in rec.requests(in_throttle_window=True)] == [2]
    rec.add_response(RecordedResponse(node_id=1, connection_id=1, client_id="c", api_key=0, api_version=9,
                                      correlation_id=1, time_ms=11.0, error_codes=(6,),
                                      partition_errors={("t", 0): 6, ("t", 2): 0}))
    assert len(rec.responses(error_code=6)) == 1
    assert rec.responses(error_code=6, partition=("t", 2)) == ()
    assert len(rec.responses(partition=("t", 2))) == 1
    rec.clear()
    assert rec.requests() == () and rec.responses() == ()
