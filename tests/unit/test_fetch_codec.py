"""The consumer's Fetch request packer (``protocol.fetch_codec``) against the generic encoder, byte for byte, for
every version akresil sends: sessions and forgotten topics, topic names and ids, a rack, a long partition list."""

from __future__ import annotations

from typing import Any

import pytest

from akresil.protocol.api import ApiKey, decode_request, encode_request
from akresil.protocol.fetch_codec import PackedFetchBody, pack_partitions

TID_A, TID_B = bytes(range(16)), bytes(range(16, 32))
#: (topic, topic id, [(partition, current_leader_epoch, fetch_offset)])
TOPICS = [("orders", TID_A, [(p, 7, 1000 * p + 3) for p in range(200)]),   # 201 > 127: a two-byte varint count
          ("é-ü", TID_B, [(5, -1, 0)])]


def bodies(version: int, *, session: bool, rack: str) -> tuple[dict[str, Any], PackedFetchBody]:
    """The same Fetch as the generic encoder's dicts and as ``fetch_state`` packs it."""
    by_id = version >= 13
    key = "topic_id" if by_id else "topic"
    top = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 1,
           "session_id": 77 if session else 0, "session_epoch": 3 if session else 0,
           "rack_id": rack if version >= 11 else ""}
    forgotten = [{key: TID_B if by_id else "gone", "partitions": [4, 9]}] if session and version >= 7 else []
    generic = dict(top, forgotten_topics_data=forgotten, topics=[
        {key: tid if by_id else name, "partitions": [
            {"partition": p, "current_leader_epoch": e, "fetch_offset": o, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1048576} for p, e, o in parts]}
        for name, tid, parts in TOPICS])
    packed = PackedFetchBody(top, forgotten_topics_data=forgotten, topics=[
        {key: tid if by_id else name, "partitions": pack_partitions(version, parts, 1048576)}
        for name, tid, parts in TOPICS])
    return generic, packed


@pytest.mark.parametrize("version", range(4, 18))
@pytest.mark.parametrize("session", [False, True])
@pytest.mark.parametrize("rack", ["", "eu-west-1a"])
def test_the_packed_fetch_is_the_generic_encoders_bytes(version: int, session: bool, rack: str) -> None:
    generic, packed = bodies(version, session=session, rack=rack)
    if version < 9:     # no current_leader_epoch on the wire before v9: the generic dicts must not carry one
        for t in generic["topics"]:
            for p in t["partitions"]:
                del p["current_leader_epoch"]
    assert encode_request(ApiKey.FETCH, version, 5, "c", packed) == encode_request(ApiKey.FETCH, version, 5, "c",
                                                                                    generic)


def test_an_empty_fetch_and_the_close_body_match_too() -> None:
    for version in (7, 11, 12, 16, 17):
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 100, "isolation_level": 0,
                "session_id": 9, "session_epoch": -1, "topics": [], "forgotten_topics_data": [], "rack_id": ""}
        assert encode_request(ApiKey.FETCH, version, 1, None, PackedFetchBody(body)) == \
            encode_request(ApiKey.FETCH, version, 1, None, body)


def test_the_packed_fetch_decodes_to_the_planned_entries() -> None:
    _, packed = bodies(16, session=True, rack="r")
    _, decoded = decode_request(encode_request(ApiKey.FETCH, 16, 1, "c", packed)[4:])
    (first, second) = decoded["topics"]
    assert first["topic_id"] == TID_A and len(first["partitions"]) == 200
    assert (first["partitions"][3]["partition"], first["partitions"][3]["current_leader_epoch"],
            first["partitions"][3]["fetch_offset"]) == (3, 7, 3003)
    assert decoded["forgotten_topics_data"] == [{"topic_id": TID_B, "partitions": [4, 9]}]
    assert decoded["rack_id"] == "r"
