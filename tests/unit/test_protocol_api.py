"""Negotiation, header versions, the ApiVersions fallback and consumer-protocol payloads."""

from __future__ import annotations

import pytest

from akresil.errors import ProtocolError, UnsupportedVersionError
from akresil.protocol import (
    CLIENT_VERSIONS,
    SCHEMA_VERSIONS,
    ApiKey,
    api_versions_error_code,
    api_versions_retry_version,
    broker_versions,
    decode_api_versions_response,
    decode_message,
    decode_versioned,
    encode_message,
    encode_request,
    encode_response,
    encode_versioned,
    negotiate,
    request_header_version,
    response_header_version,
)
from tests.unit.test_protocol_golden import i16, i32


def test_required_versions_are_covered() -> None:
    required = {
        ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 12), ApiKey.PRODUCE: (3, 11), ApiKey.FETCH: (4, 17),
        ApiKey.LIST_OFFSETS: (1, 8), ApiKey.FIND_COORDINATOR: (0, 4), ApiKey.JOIN_GROUP: (0, 9),
        ApiKey.SYNC_GROUP: (0, 5), ApiKey.HEARTBEAT: (0, 4), ApiKey.LEAVE_GROUP: (0, 5),
        ApiKey.OFFSET_COMMIT: (2, 9), ApiKey.OFFSET_FETCH: (1, 9), ApiKey.INIT_PRODUCER_ID: (0, 5),
        ApiKey.CREATE_TOPICS: (0, 7), ApiKey.DELETE_TOPICS: (0, 6), ApiKey.SASL_HANDSHAKE: (0, 1),
        ApiKey.SASL_AUTHENTICATE: (0, 2), ApiKey.DESCRIBE_CLUSTER: (0, 1),
    }
    for key, (lo, hi) in required.items():
        clo, chi = CLIENT_VERSIONS[key]
        assert clo <= lo and chi >= hi, key
        slo, shi = SCHEMA_VERSIONS[key]
        assert slo <= clo and shi >= chi, key
    assert set(CLIENT_VERSIONS) == set(ApiKey)


def test_negotiate_picks_highest_common_and_omits_disjoint() -> None:
    broker = {0: (0, 10), 1: (0, 16), 3: (0, 13), 18: (0, 2), 19: (8, 9), 999: (0, 1)}
    chosen = negotiate(broker)
    assert chosen[ApiKey.PRODUCE] == 10
    assert chosen[ApiKey.FETCH] == 16
    assert chosen[ApiKey.METADATA] == 13
    assert chosen[ApiKey.API_VERSIONS] == 2
    assert ApiKey.CREATE_TOPICS not in chosen  # broker 8-9, akresil up to 7
    assert ApiKey.JOIN_GROUP not in chosen  # broker does not list it
    assert all(isinstance(k, ApiKey) for k in chosen)
    # a broker newer than akresil: capped at what akresil asks for
    assert negotiate({0: (3, 13)})[ApiKey.PRODUCE] == CLIENT_VERSIONS[ApiKey.PRODUCE][1]


def test_header_versions() -> None:
    assert request_header_version(ApiKey.PRODUCE, 8) == 1
    assert request_header_version(ApiKey.PRODUCE, 9) == 2
    assert response_header_version(ApiKey.PRODUCE, 8) == 0
    assert response_header_version(ApiKey.PRODUCE, 9) == 1
    assert request_header_version(ApiKey.API_VERSIONS, 3) == 2
    assert response_header_version(ApiKey.API_VERSIONS, 3) == 0  # always v0
    assert response_header_version(ApiKey.DESCRIBE_CLUSTER, 0) == 1  # flexible from v0
    with pytest.raises(UnsupportedVersionError):
        response_header_version(ApiKey.FETCH, 3)


# librdkafka 2.16's mock cluster, answering ApiVersions v3 (captured on the wire): UNSUPPORTED_VERSION,
# then a compact array count of 0 followed by one element {18, 0, 2}, a throttle time and no tag section.
MOCK_V3_ANSWER = bytes.fromhex("00000001" "0023" "01" "0012" "0000" "0002" "00000000")


def test_api_versions_unsupported_version_fallback_on_librdkafka_mock_bytes() -> None:
    assert api_versions_error_code(MOCK_V3_ANSWER) == 35
    resp = decode_api_versions_response(3, MOCK_V3_ANSWER)
    assert resp["error_code"] == 35
    assert api_versions_retry_version(resp, tried=3) == 0  # nothing usable listed: retry with v0


def test_api_versions_kip511_v0_layout_gives_the_retry_version() -> None:
    # what a Java broker sends when it does not know the requested version: v0 layout listing ApiVersions
    wire = i32(1) + i16(35) + i32(1) + i16(18) + i16(0) + i16(2)
    resp = decode_api_versions_response(4, wire)
    assert resp == {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]}
    assert api_versions_retry_version(resp, tried=4) == 2
    assert broker_versions(resp) == {18: (0, 2)}


def test_api_versions_other_errors_are_not_masked() -> None:
    with pytest.raises(ProtocolError):
        decode_api_versions_response(3, i32(1) + i16(0) + b"\x05")
    with pytest.raises(ProtocolError):
        api_versions_error_code(b"\x00\x00\x00\x01\x00")


def test_api_versions_normal_response_round_trip() -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 11}], "throttle_time_ms": 0}
    frame = encode_response(ApiKey.API_VERSIONS, 3, 1, body)[4:]
    resp = decode_api_versions_response(3, frame)
    assert broker_versions(resp) == {0: (3, 11)}


def test_consumer_protocol_payloads() -> None:
    sub = {"topics": ["a"], "user_data": None, "owned_partitions": [{"topic": "a", "partitions": [0, 1]}]}
    raw = encode_message("ConsumerProtocolSubscription", 1, sub)
    assert decode_message("ConsumerProtocolSubscription", 1, raw) == sub
    wire = encode_versioned("ConsumerProtocolSubscription", 1, sub)
    assert wire == i16(1) + raw
    assert decode_versioned("ConsumerProtocolSubscription", wire) == (1, sub)


def test_newer_consumer_protocol_version_is_read_with_the_newest_layout() -> None:
    asg = {"assigned_partitions": [{"topic": "t", "partitions": [3]}], "user_data": b"u"}
    v3 = encode_message("ConsumerProtocolAssignment", 3, asg)
    future = i16(9) + v3 + b"fields-from-v9"
    assert decode_versioned("ConsumerProtocolAssignment", future) == (9, asg)
    assert decode_versioned("ConsumerProtocolAssignment", i16(3) + v3 + b"x") == (3, asg)
    with pytest.raises(ProtocolError, match="unexpected bytes"):
        decode_message("ConsumerProtocolAssignment", 3, v3 + b"x")
    with pytest.raises(ProtocolError, match="no payload schema named 'Nope'"):
        encode_message("Nope", 0, {})


def test_bad_correlation_id_and_client_id() -> None:
    with pytest.raises(ProtocolError, match="correlation id"):
        encode_request(ApiKey.METADATA, 1, 1 << 31, None, {})
    with pytest.raises(ProtocolError, match="correlation id"):
        encode_response(ApiKey.METADATA, 1, "1", {})  # type: ignore[arg-type]


def test_schemas_are_built_on_first_use_and_kept() -> None:
    """Importing the codec builds only the two headers; a request builds its own schema once (fresh interpreter:
    this one has built them all)."""
    import subprocess
    import sys

    code = """if True:
        from akresil.protocol import api, specs
        def built():
            return sorted(c for c in specs.TABLE if c in vars(specs))
        print(built())
        api.encode_request(3, 12, 1, "c", {"topics": None})
        first = api.REQUESTS[3]
        print(built(), first is specs.METADATA_REQUEST is api.MESSAGES["MetadataRequest"])
        print(len(api.RESPONSES) == len(list(api.RESPONSES)), 1 in api.REQUESTS, 7 in api.REQUESTS)
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['REQUEST_HEADER', 'RESPONSE_HEADER']",
                                        "['METADATA_REQUEST', 'REQUEST_HEADER', 'RESPONSE_HEADER'] True",
                                        "True True False"]
