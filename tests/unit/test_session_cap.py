"""The embedded broker's JoinGroup relay: it lowers the session timeout Tansu sees and nothing else."""

from __future__ import annotations

import pytest

from akresil.protocol.api import ApiKey, decode_request, encode_request
from akresil.testing.session_cap import cap_join_session


def join_frame(version: int, session_ms: int) -> bytes:
    body = {"group_id": "g", "session_timeout_ms": session_ms, "rebalance_timeout_ms": 300_000,
            "member_id": "m-1", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x03sub"}]}
    if version >= 5:
        body["group_instance_id"] = None
    if version >= 8:
        body["reason"] = "first join"
    return encode_request(ApiKey.JOIN_GROUP, version, 7, "client-a", body)[4:]


@pytest.mark.parametrize("version", [0, 1, 4, 5, 6, 8, 9])
def test_a_join_above_the_cap_is_lowered_and_keeps_everything_else(version: int) -> None:
    capped = cap_join_session(join_frame(version, 45_000), 6_000)
    header, body = decode_request(capped)
    _, original = decode_request(join_frame(version, 45_000))
    assert body["session_timeout_ms"] == 6_000
    assert {k: v for k, v in body.items() if k != "session_timeout_ms"} == \
        {k: v for k, v in original.items() if k != "session_timeout_ms"}
    assert (header["api_version"], header["correlation_id"], header["client_id"]) == (version, 7, "client-a")


def test_a_join_within_the_cap_and_other_requests_pass_unchanged() -> None:
    within = join_frame(9, 5_000)
    assert cap_join_session(within, 6_000) is within
    metadata = encode_request(ApiKey.METADATA, 12, 1, "c", {"topics": None, "allow_auto_topic_creation": False,
                                                           "include_topic_authorized_operations": False})[4:]
    assert cap_join_session(metadata, 6_000) is metadata


def test_an_undecodable_join_is_left_for_the_broker_to_answer() -> None:
    broken = join_frame(9, 45_000)[:12]
    assert cap_join_session(broken, 6_000) is broken
