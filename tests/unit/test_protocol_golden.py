"""Byte vectors written out by hand, field by field, from Kafka's message specs.

Each vector is decoded and compared to the expected dict, and the dict is encoded and compared to the
bytes.  Helpers below only turn numbers into big-endian bytes; none of akresil's code builds a vector.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from akresil.protocol import ApiKey, decode_request, decode_response, encode_request, encode_response


def i8(n: int) -> bytes:
    return n.to_bytes(1, "big", signed=True)


def i16(n: int) -> bytes:
    return n.to_bytes(2, "big", signed=True)


def i32(n: int) -> bytes:
    return n.to_bytes(4, "big", signed=True)


def i64(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def s16(text: str) -> bytes:
    """Classic string: int16 length + UTF-8."""
    return i16(len(text.encode())) + text.encode()


def cstr(text: str | None) -> bytes:
    """Compact (nullable) string: unsigned varint length+1 (all lengths here are < 127)."""
    if text is None:
        return b"\x00"
    return bytes([len(text.encode()) + 1]) + text.encode()


def carr(n: int | None) -> bytes:
    """Compact array length: count+1 (0 = null)."""
    return b"\x00" if n is None else bytes([n + 1])


NO_TAGS = b"\x00"
TOPIC_ID = bytes(range(16))


def frame_of(full: bytes) -> bytes:
    """Checks the size prefix written by the encoder and strips it."""
    assert int.from_bytes(full[:4], "big") == len(full) - 4
    return full[4:]


# --------------------------------------------------------------------------- Produce v11 response
def produce_v11_response(with_hints: bool) -> tuple[bytes, dict[str, Any]]:
    partition_tags = (
        b"\x01" + b"\x00" + b"\x09" + i32(2) + i32(5) + NO_TAGS  # 1 tag: CurrentLeader (tag 0), 9 bytes
        if with_hints
        else NO_TAGS
    )
    endpoint = i32(2) + cstr("h2") + i32(9092) + cstr(None) + NO_TAGS
    top_tags = (
        b"\x01" + b"\x00" + bytes([len(carr(1) + endpoint)]) + carr(1) + endpoint  # NodeEndpoints (tag 0)
        if with_hints
        else NO_TAGS
    )
    wire = (
        i32(7)  # correlation id
        + NO_TAGS  # response header v1
        + carr(1)  # responses
        + cstr("t")
        + carr(1)  # partition_responses
        + i32(0)  # index
        + i16(6)  # NOT_LEADER_OR_FOLLOWER
        + i64(-1)  # base_offset
        + i64(-1)  # log_append_time_ms
        + i64(-1)  # log_start_offset
        + carr(0)  # record_errors
        + cstr(None)  # error_message
        + partition_tags
        + NO_TAGS  # topic tags
        + i32(0)  # throttle_time_ms
        + top_tags
    )
    body = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {
                        "index": 0,
                        "error_code": 6,
                        "base_offset": -1,
                        "log_append_time_ms": -1,
                        "log_start_offset": -1,
                        "record_errors": [],
                        "error_message": None,
                        "current_leader": {"leader_id": 2, "leader_epoch": 5} if with_hints else None,
                    }
                ],
            }
        ],
        "throttle_time_ms": 0,
        "node_endpoints": [{"node_id": 2, "host": "h2", "port": 9092, "rack": None}] if with_hints else None,
    }
    return wire, body


@pytest.mark.parametrize("with_hints", [True, False])
def test_produce_v11_response(with_hints: bool) -> None:
    wire, body = produce_v11_response(with_hints)
    assert decode_response(ApiKey.PRODUCE, 11, wire) == body
    assert frame_of(encode_response(ApiKey.PRODUCE, 11, 7, body)) == wire


# --------------------------------------------------------------------------- Fetch v16 response
def fetch_v16_response(with_hints: bool) -> tuple[bytes, dict[str, Any]]:
    records = b"RECORDBATCH-BYTES"
    partition_tags = (
        b"\x01" + b"\x01" + b"\x09" + i32(3) + i32(12) + NO_TAGS  # CurrentLeader is tag 1 in Fetch
        if with_hints
        else NO_TAGS
    )
    endpoint = i32(3) + cstr("broker3") + i32(19092) + cstr("rack-a") + NO_TAGS
    top_tags = (
        b"\x01" + b"\x00" + bytes([len(carr(1) + endpoint)]) + carr(1) + endpoint  # NodeEndpoints tag 0
        if with_hints
        else NO_TAGS
    )
    wire = (
        i32(99)
        + NO_TAGS
        + i32(0)  # throttle_time_ms
        + i16(0)  # error_code
        + i32(1234)  # session_id
        + carr(1)  # responses
        + TOPIC_ID
        + carr(1)  # partitions
        + i32(4)  # partition_index
        + i16(74 if with_hints else 0)  # FENCED_LEADER_EPOCH
        + i64(100)  # high_watermark
        + i64(90)  # last_stable_offset
        + i64(0)  # log_start_offset
        + carr(None)  # aborted_transactions: null
        + i32(-1)  # preferred_read_replica
        + bytes([len(records) + 1])
        + records
        + partition_tags
        + NO_TAGS  # topic tags
        + top_tags
    )
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 1234,
        "responses": [
            {
                "topic_id": TOPIC_ID,
                "partitions": [
                    {
                        "partition_index": 4,
                        "error_code": 74 if with_hints else 0,
                        "high_watermark": 100,
                        "last_stable_offset": 90,
                        "log_start_offset": 0,
                        "diverging_epoch": None,
                        "current_leader": {"leader_id": 3, "leader_epoch": 12} if with_hints else None,
                        "snapshot_id": None,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": records,
                    }
                ],
            }
        ],
        "node_endpoints": [{"node_id": 3, "host": "broker3", "port": 19092, "rack": "rack-a"}] if with_hints else None,
    }
    return wire, body


@pytest.mark.parametrize("with_hints", [True, False])
def test_fetch_v16_response(with_hints: bool) -> None:
    wire, body = fetch_v16_response(with_hints)
    assert decode_response(ApiKey.FETCH, 16, wire) == body
    assert decode_response(ApiKey.FETCH, 16, memoryview(wire)) == body
    assert frame_of(encode_response(ApiKey.FETCH, 16, 99, body)) == wire


# --------------------------------------------------------------------------- Metadata v12 response
def metadata_v12_response() -> tuple[bytes, dict[str, Any]]:
    def partition(index: int, leader: int, epoch: int) -> bytes:
        return (
            i16(0)
            + i32(index)
            + i32(leader)
            + i32(epoch)  # leader_epoch (v7+)
            + carr(2) + i32(1) + i32(2)  # replica_nodes
            + carr(1) + i32(leader)  # isr_nodes
            + carr(0)  # offline_replicas
            + NO_TAGS
        )

    wire = (
        i32(5)
        + NO_TAGS
        + i32(0)  # throttle_time_ms
        + carr(2)
        + i32(1) + cstr("b1") + i32(9092) + cstr(None) + NO_TAGS
        + i32(2) + cstr("b2") + i32(9093) + cstr("r2") + NO_TAGS
        + cstr("cluster-x")  # cluster_id
        + i32(1)  # controller_id
        + carr(1)  # topics
        + i16(0)
        + cstr("orders")
        + TOPIC_ID
        + i8(0)  # is_internal
        + carr(2)
        + partition(0, 1, 7)
        + partition(1, 2, 42)
        + i32(-2147483648)  # topic_authorized_operations
        + NO_TAGS
        + NO_TAGS
    )

    def pdict(index: int, leader: int, epoch: int) -> dict[str, Any]:
        return {
            "error_code": 0,
            "partition_index": index,
            "leader_id": leader,
            "leader_epoch": epoch,
            "replica_nodes": [1, 2],
            "isr_nodes": [leader],
            "offline_replicas": [],
        }

    body = {
        "throttle_time_ms": 0,
        "brokers": [
            {"node_id": 1, "host": "b1", "port": 9092, "rack": None},
            {"node_id": 2, "host": "b2", "port": 9093, "rack": "r2"},
        ],
        "cluster_id": "cluster-x",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": "orders",
                "topic_id": TOPIC_ID,
                "is_internal": False,
                "partitions": [pdict(0, 1, 7), pdict(1, 2, 42)],
                "topic_authorized_operations": -2147483648,
            }
        ],
    }
    return wire, body


def test_metadata_v12_response_with_leader_epochs() -> None:
    wire, body = metadata_v12_response()
    decoded = decode_response(ApiKey.METADATA, 12, wire)
    assert decoded == body
    assert [p["leader_epoch"] for p in decoded["topics"][0]["partitions"]] == [7, 42]
    assert frame_of(encode_response(ApiKey.METADATA, 12, 5, body)) == wire


# --------------------------------------------------------------------------- ApiVersions v3
def test_api_versions_v3_request() -> None:
    wire = (
        i16(18)  # api key
        + i16(3)  # api version
        + i32(1)  # correlation id
        + s16("akresil")  # client id: a classic int16 string even in header v2
        + NO_TAGS  # header v2 tags
        + cstr("akresil-python")
        + cstr("0.1.0")
        + NO_TAGS
    )
    body = {"client_software_name": "akresil-python", "client_software_version": "0.1.0"}
    assert frame_of(encode_request(ApiKey.API_VERSIONS, 3, 1, "akresil", body)) == wire
    header, decoded = decode_request(wire)
    assert header == {"api_key": 18, "api_version": 3, "correlation_id": 1, "client_id": "akresil"}
    assert decoded == body


def test_api_versions_v3_response_with_tagged_features() -> None:
    feature = cstr("metadata.version") + i16(1) + i16(20) + NO_TAGS
    tags_payload_0 = carr(1) + feature
    wire = (
        i32(1)  # header v0: ApiVersions responses never carry header tags
        + i16(0)
        + carr(2)
        + i16(0) + i16(3) + i16(11) + NO_TAGS
        + i16(18) + i16(0) + i16(4) + NO_TAGS
        + i32(0)  # throttle_time_ms
        + b"\x02"  # two tags
        + b"\x00" + bytes([len(tags_payload_0)]) + tags_payload_0  # SupportedFeatures
        + b"\x01" + b"\x08" + i64(77)  # FinalizedFeaturesEpoch
    )
    body = {
        "error_code": 0,
        "api_keys": [
            {"api_key": 0, "min_version": 3, "max_version": 11},
            {"api_key": 18, "min_version": 0, "max_version": 4},
        ],
        "throttle_time_ms": 0,
        "supported_features": [{"name": "metadata.version", "min_version": 1, "max_version": 20}],
        "finalized_features_epoch": 77,
        "finalized_features": None,
        "zk_migration_ready": False,
    }
    assert decode_response(ApiKey.API_VERSIONS, 3, wire) == body
    assert frame_of(encode_response(ApiKey.API_VERSIONS, 3, 1, body)) == wire


# --------------------------------------------------------------------------- Produce v11 request
def test_produce_v11_request() -> None:
    records = bytes(range(40))
    wire = (
        i16(0) + i16(11) + i32(3) + s16("p") + NO_TAGS
        + cstr(None)  # transactional_id
        + i16(-1)  # acks
        + i32(30000)
        + carr(1) + cstr("t")
        + carr(1) + i32(2) + bytes([len(records) + 1]) + records + NO_TAGS
        + NO_TAGS
        + NO_TAGS
    )
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": records}]}],
    }
    assert frame_of(encode_request(ApiKey.PRODUCE, 11, 3, "p", body)) == wire
    assert decode_request(wire) == ({"api_key": 0, "api_version": 11, "correlation_id": 3, "client_id": "p"}, body)


# --------------------------------------------------------------------------- versions below the JSON's range
def test_create_topics_v0_uses_the_old_layout() -> None:
    # v0 request: [name, num_partitions, replication_factor, [assignments], [configs]], timeout; no validate_only
    wire = (
        i16(19) + i16(0) + i32(9) + i16(-1)  # null client id
        + i32(1)
        + s16("new") + i32(3) + i16(1)
        + i32(1) + i32(0) + i32(1) + i32(1)  # assignments: partition 0 -> [1]
        + i32(1) + s16("cleanup.policy") + s16("compact")
        + i32(5000)
    )
    body = {
        "topics": [
            {
                "name": "new",
                "num_partitions": 3,
                "replication_factor": 1,
                "assignments": [{"partition_index": 0, "broker_ids": [1]}],
                "configs": [{"name": "cleanup.policy", "value": "compact"}],
            }
        ],
        "timeout_ms": 5000,
    }
    assert frame_of(encode_request(ApiKey.CREATE_TOPICS, 0, 9, None, body)) == wire
    assert decode_request(wire)[1] == body
    # v0 response: [name, error_code] only (error_message from v1, throttle from v2)
    rwire = i32(9) + i32(1) + s16("new") + i16(36)
    assert decode_response(ApiKey.CREATE_TOPICS, 0, rwire) == {"topics": [{"name": "new", "error_code": 36}]}


def test_delete_topics_v0_uses_the_old_layout() -> None:
    wire = i16(20) + i16(0) + i32(4) + s16("c") + i32(2) + s16("a") + s16("b") + i32(1000)
    body = {"topic_names": ["a", "b"], "timeout_ms": 1000}
    assert frame_of(encode_request(ApiKey.DELETE_TOPICS, 0, 4, "c", body)) == wire
    rwire = i32(4) + i32(1) + s16("a") + i16(3)
    assert decode_response(ApiKey.DELETE_TOPICS, 0, rwire) == {"responses": [{"name": "a", "error_code": 3}]}


# --------------------------------------------------------------------------- reassignments and client quotas
def f64(x: float) -> bytes:
    return struct.pack(">d", x)


@pytest.mark.parametrize("version", [0, 1])
def test_alter_partition_reassignments_request_with_a_cancel(version: int) -> None:
    wire = (
        i16(45) + i16(version) + i32(6) + s16("a") + NO_TAGS  # header v2 (flexible from v0)
        + i32(30000)
        + (b"\x00" if version >= 1 else b"")  # allow_replication_factor_change = false (v1+)
        + carr(1) + cstr("t")
        + carr(2)
        + i32(0) + carr(2) + i32(3) + i32(1) + NO_TAGS  # partition 0 -> [3, 1]
        + i32(1) + carr(None) + NO_TAGS  # partition 1: null replicas = cancel
        + NO_TAGS  # topic
        + NO_TAGS
    )
    body: dict[str, Any] = {"timeout_ms": 30000, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "replicas": [3, 1]}, {"partition_index": 1, "replicas": None}]}]}
    if version >= 1:
        body["allow_replication_factor_change"] = False
    assert frame_of(encode_request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, 6, "a", body)) == wire
    assert decode_request(wire)[1] == body


def test_list_partition_reassignments_v0_response() -> None:
    wire = (
        i32(2) + NO_TAGS  # response header v1
        + i32(0) + i16(0) + cstr(None)
        + carr(1) + cstr("t") + carr(1)
        + i32(4) + carr(2) + i32(2) + i32(3) + carr(1) + i32(3) + carr(0) + NO_TAGS
        + NO_TAGS + NO_TAGS
    )
    body = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": [{"name": "t", "partitions": [
        {"partition_index": 4, "replicas": [2, 3], "adding_replicas": [3], "removing_replicas": []}]}]}
    assert decode_response(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, wire) == body
    assert frame_of(encode_response(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 2, body)) == wire


def test_alter_client_quotas_v0_request_default_entity_and_remove() -> None:
    # v0 is not flexible: int32 array counts, int16 string lengths, -1 for the null (default) entity name
    wire = (
        i16(49) + i16(0) + i32(8) + s16("q")  # header v1
        + i32(1)
        + i32(2) + s16("user") + s16("alice") + s16("client-id") + i16(-1)
        + i32(2) + s16("producer_byte_rate") + f64(1024.0) + b"\x00"
        + s16("request_percentage") + f64(0.0) + b"\x01"
        + b"\x01"  # validate_only
    )
    body = {"entries": [{"entity": [{"entity_type": "user", "entity_name": "alice"},
                                    {"entity_type": "client-id", "entity_name": None}],
                         "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False},
                                 {"key": "request_percentage", "value": 0.0, "remove": True}]}],
            "validate_only": True}
    assert frame_of(encode_request(ApiKey.ALTER_CLIENT_QUOTAS, 0, 8, "q", body)) == wire
    assert decode_request(wire)[1] == body


def test_describe_client_quotas_v1_response() -> None:
    wire = (
        i32(3) + NO_TAGS  # response header v1 (flexible from v1)
        + i32(0) + i16(0) + cstr(None)
        + carr(1)
        + carr(1) + cstr("user") + cstr(None) + NO_TAGS  # the default user
        + carr(1) + cstr("consumer_byte_rate") + f64(1e6) + NO_TAGS
        + NO_TAGS
        + NO_TAGS
    )
    body = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": [
        {"entity": [{"entity_type": "user", "entity_name": None}],
         "values": [{"key": "consumer_byte_rate", "value": 1e6}]}]}
    assert decode_response(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, wire) == body
    assert frame_of(encode_response(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, 3, body)) == wire
