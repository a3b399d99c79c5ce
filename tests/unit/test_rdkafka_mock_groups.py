"""Whose bytes are wrong when akresil joins a group on librdkafka's mock: the mock's (docs/brokers.md).

akresil's flexible group requests are byte-identical to kafka-python's (an independent encoder generated from
Kafka's JSON specs), the uncapped mock drops the connection on them or answers without fields the version
requires, and the same requests at the versions ``GROUP_VERSION_CAP`` keeps are answered. If a librdkafka
upgrade fixes its handlers, ``test_uncapped_mock_mishandles_flexible_group_requests`` fails: drop the cap.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from akresil.errors import ProtocolError
from akresil.protocol.api import decode_response, encode_request
from akresil.testing.rdkafka_mock import GROUP_VERSION_CAP, ApiKey, MockCluster

pytestmark = pytest.mark.broker

CLIENT_ID = "akresil"
#: ConsumerProtocolSubscription v0 for topic "t": what a consumer puts in JoinGroup's protocol metadata
SUBSCRIPTION = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"


def join_body(member_id: str = "") -> dict[str, Any]:
    return {"group_id": "g", "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000, "member_id": member_id,
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": SUBSCRIPTION}]}


def sync_body() -> dict[str, Any]:
    return {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None, "assignments": []}


def leave_body(version: int) -> dict[str, Any]:
    if version >= 3:
        return {"group_id": "g", "members": [{"member_id": "m", "group_instance_id": None}]}
    return {"group_id": "g", "member_id": "m"}


def exchange(address: tuple[str, int], frame: bytes) -> bytes | None:
    """Send one framed request on a fresh connection; the response body, or None if the mock hung up."""
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(frame)
        head = sock.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return None
        (size,) = struct.unpack(">i", head)
        return sock.recv(size, socket.MSG_WAITALL)


def kafka_python_frame(name: str, version: int, body: dict[str, Any]) -> bytes:
    from kafka.protocol.consumer import group

    cls = getattr(group, name)
    if "protocols" in body:
        body = {**body, "protocols": [cls.JoinGroupRequestProtocol(**p) for p in body["protocols"]]}
    if "members" in body:
        body = {**body, "members": [cls.MemberIdentity(**m) for m in body["members"]]}
    request = cls(version=version, **body)
    request.with_header(correlation_id=7, client_id=CLIENT_ID)
    return request.encode(version=version, header=True, framed=True)


@pytest.fixture
def uncapped() -> Iterator[MockCluster]:
    with MockCluster(1, cap_group_versions=False) as mock:
        mock.create_topic("t", 2, 1)
        yield mock


@pytest.mark.parametrize(("api", "name", "version", "body"), [
    (ApiKey.JOIN_GROUP, "JoinGroupRequest", 6, join_body()),
    (ApiKey.SYNC_GROUP, "SyncGroupRequest", 4, sync_body()),
    (ApiKey.HEARTBEAT, "HeartbeatRequest", 4, {k: v for k, v in sync_body().items() if k != "assignments"}),
    (ApiKey.LEAVE_GROUP, "LeaveGroupRequest", 4, leave_body(4)),
])
def test_akresil_flexible_group_requests_match_an_independent_encoder(api: ApiKey, name: str, version: int,
                                                                     body: dict[str, Any]) -> None:
    pytest.importorskip("kafka.protocol")
    assert encode_request(api, version, 7, CLIENT_ID, body) == kafka_python_frame(name, version, body)


def test_uncapped_mock_mishandles_flexible_group_requests(uncapped: MockCluster) -> None:
    address = uncapped.broker_address(1)
    # JoinGroup v6 / SyncGroup v4: the mock reads the compact array count as an int32 and hangs up
    assert exchange(address, encode_request(ApiKey.JOIN_GROUP, 6, 7, CLIENT_ID, join_body())) is None
    assert exchange(address, encode_request(ApiKey.SYNC_GROUP, 4, 7, CLIENT_ID, sync_body())) is None
    # LeaveGroup v3/v4: parsed as v0-v2 and answered without the members array the version requires
    for version in (3, 4):
        answer = exchange(address, encode_request(ApiKey.LEAVE_GROUP, version, 7, CLIENT_ID, leave_body(version)))
        assert answer is not None
        with pytest.raises(ProtocolError, match="LeaveGroupResponse v%d" % version):
            decode_response(ApiKey.LEAVE_GROUP, version, answer)


def test_the_same_requests_at_the_capped_versions_are_answered(uncapped: MockCluster) -> None:
    join_v, sync_v, leave_v = (GROUP_VERSION_CAP[k] for k in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP,
                                                              ApiKey.LEAVE_GROUP))
    with socket.create_connection(uncapped.broker_address(1), timeout=5) as sock:
        def call(api: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
            sock.sendall(encode_request(api, version, 7, CLIENT_ID, body))
            (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
            return decode_response(api, version, sock.recv(size, socket.MSG_WAITALL), strict=True)

        joined = call(ApiKey.JOIN_GROUP, join_v, join_body())
        assert joined["error_code"] == 0 and joined["leader"] == joined["member_id"]
        member, generation = joined["member_id"], joined["generation_id"]
        synced = call(ApiKey.SYNC_GROUP, sync_v, {**sync_body(), "generation_id": generation, "member_id": member,
                                                  "assignments": [{"member_id": member, "assignment": b"a"}]})
        assert synced["error_code"] == 0 and synced["assignment"] == b"a"
        beat = call(ApiKey.HEARTBEAT, 4, {"group_id": "g", "generation_id": generation, "member_id": member,
                                          "group_instance_id": None})  # Heartbeat v4 needs no cap
        assert beat["error_code"] == 0
        left = call(ApiKey.LEAVE_GROUP, leave_v, {"group_id": "g", "member_id": member})
        assert left["error_code"] == 0


def test_mock_cluster_advertises_the_capped_group_versions_by_default() -> None:
    with MockCluster(1) as mock:
        answer = exchange(mock.broker_address(1), encode_request(ApiKey.API_VERSIONS, 0, 7, CLIENT_ID, {}))
    assert answer is not None
    advertised = {k["api_key"]: k["max_version"]
                  for k in decode_response(ApiKey.API_VERSIONS, 0, answer)["api_keys"]}
    assert {api: advertised[api] for api in GROUP_VERSION_CAP} == GROUP_VERSION_CAP
    assert advertised[ApiKey.HEARTBEAT] >= 4
