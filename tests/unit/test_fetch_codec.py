"""The consumer's Fetch codec (``protocol.fetch_codec``) against the generic one for every version akresil speaks:
the packed request byte for byte (sessions and forgotten topics, topic names and ids, a rack, a long partition
list), and the lean answer field for field on the same bytes (records, aborted transactions, preferred read
replica, KIP-951 current leader and endpoints, diverging epoch, unknown tags, truncation)."""

from __future__ import annotations

from typing import Any

import pytest

from akresil.errors import ProtocolError
from akresil.protocol.api import ApiKey, decode_answer, decode_request, decode_response, encode_request, encode_response
from akresil.protocol.fetch_codec import FetchedPartition, PackedFetchBody, pack_partitions

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
        {key: tid if by_id else name, "partitions": pack_partitions(
            version, [((name, p), o, e, 0) for p, e, o in parts], 1048576)}    # as fetch_state plans them
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


# ------------------------------------------------------------------------------------------ the answer
RECORDS = bytes(range(256)) * 3


def answer(version: int) -> dict[str, Any]:
    """A Fetch answer using every field the version has: records, empty and null record sets, aborted
    transactions, a preferred read replica, KIP-951 current leader and node endpoints, a diverging epoch, a
    snapshot id (read by neither consumer), an error."""
    flexible, by_id = version >= 12, version >= 13

    def part(index: int, **fields: Any) -> dict[str, Any]:
        p = {"partition_index": index, "error_code": 0, "high_watermark": 1000 + index, "last_stable_offset": 900,
             "log_start_offset": 5, "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}
        if version < 5:
            del p["log_start_offset"]
        if version < 11:
            del p["preferred_read_replica"]
        p.update(fields)
        return p

    parts = [part(0, records=RECORDS),
             part(1, records=None),
             part(2, aborted_transactions=[{"producer_id": 7, "first_offset": 40},
                                           {"producer_id": 1 << 40, "first_offset": 3}], records=RECORDS[:61]),
             part(3, aborted_transactions=[]),
             part(4, error_code=6)]
    parts += [part(i, high_watermark=i) for i in range(5, 140)]       # 141 entries: a two-byte varint count
    parts[70]["records"] = RECORDS[:30]                               # ends a run of entries with nothing new
    parts[71]["error_code"] = 1                                       # an error alone: read with the run after
    parts.append(part(140, aborted_transactions=[]))                  # as librdkafka's mock answers: [] not null
    if version >= 11:
        parts[1]["preferred_read_replica"] = 3
    if flexible:
        parts[4]["current_leader"] = {"leader_id": 2, "leader_epoch": 9}
        parts[0]["diverging_epoch"] = {"epoch": 4, "end_offset": 77}
        parts[3]["snapshot_id"] = {"end_offset": 10, "epoch": 1}
        parts[5]["_unknown_tags"] = {9: b"\x01\x02"}
    key = "topic_id" if by_id else "topic"
    body: dict[str, Any] = {"throttle_time_ms": 12, "responses": [
        {key: TID_A if by_id else "orders", "partitions": parts},
        {key: TID_B if by_id else "é-ü", "partitions": [part(0, records=RECORDS[:10])]},
        {key: bytes(16) if by_id else "empty", "partitions": []}]}
    if version >= 7:
        body.update(error_code=0, session_id=123)
    if version >= 16:
        body["node_endpoints"] = [{"node_id": 2, "host": "b2.example", "port": 9094, "rack": "r1"},
                                  {"node_id": 3, "host": "b3", "port": 9095, "rack": None}]
    return body


def as_read(p: dict[str, Any]) -> tuple[Any, ...]:
    """The generic decoder's partition entry in ``FetchedPartition`` form."""
    aborted = p.get("aborted_transactions")
    leader, diverging = p.get("current_leader"), p.get("diverging_epoch")
    return (p["partition_index"], p["error_code"], p["high_watermark"], p["last_stable_offset"],
            p.get("log_start_offset", -1),
            None if aborted is None else [(a["producer_id"], a["first_offset"]) for a in aborted],
            p.get("preferred_read_replica", -1), bytes(p["records"] or b""),
            None if leader is None else (leader["leader_id"], leader["leader_epoch"]),
            None if diverging is None else (diverging["epoch"], diverging["end_offset"]))


@pytest.mark.parametrize("version", range(4, 18))
@pytest.mark.parametrize("view", [False, True])
def test_the_lean_answer_reads_what_the_generic_decoder_reads(version: int, view: bool) -> None:
    frame = encode_response(ApiKey.FETCH, version, 9, answer(version))[4:]
    buf = memoryview(frame) if view else frame
    generic = decode_response(ApiKey.FETCH, version, buf)
    lean = decode_answer(ApiKey.FETCH, version, buf, PackedFetchBody())
    assert (lean["throttle_time_ms"], lean["error_code"], lean["session_id"]) == (
        generic["throttle_time_ms"], generic.get("error_code", 0), generic.get("session_id", 0))
    assert lean["node_endpoints"] == generic.get("node_endpoints")
    key = "topic_id" if version >= 13 else "topic"
    assert [t[key] for t in lean["responses"]] == [t[key] for t in generic["responses"]]
    for mine, theirs in zip(lean["responses"], generic["responses"]):
        assert all(type(p) is FetchedPartition for p in mine["partitions"])
        assert [(*p[:5], None if p[5] is None else list(p[5]), p[6], bytes(p.records), *p[8:])
                for p in mine["partitions"]] == \
            [as_read(p) for p in theirs["partitions"]]
    entries = lean["responses"][0]["partitions"]
    assert entries[1].records is entries[3].records is entries[9].records     # one shared b"", empty or null
    if version >= 12:
        assert entries[140].aborted_transactions == () and entries[9].aborted_transactions is None


@pytest.mark.parametrize("odd", [0, 1, 15, 16, 17, 48, 49, 112, 113, 298, 299])
def test_a_run_of_nothing_new_entries_ends_at_the_first_other_entry_wherever_it_is(odd: int) -> None:
    parts = [{"partition_index": i, "error_code": 0, "high_watermark": i, "last_stable_offset": i,
              "log_start_offset": 0, "aborted_transactions": [], "preferred_read_replica": -1, "records": b""}
             for i in range(300)]
    parts[odd]["records"] = RECORDS[:10]
    if odd + 2 < 300:
        parts[odd + 2]["current_leader"] = {"leader_id": 1, "leader_epoch": 2}   # a tagged field: not "nothing new"
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "node_endpoints": [],
            "responses": [{"topic_id": TID_A, "partitions": parts}]}
    frame = encode_response(ApiKey.FETCH, 16, 9, body)[4:]
    generic = decode_response(ApiKey.FETCH, 16, frame)
    lean = decode_answer(ApiKey.FETCH, 16, frame, PackedFetchBody())
    assert [(*p[:5], None if p[5] is None else list(p[5]), p[6], bytes(p.records), *p[8:])
            for p in lean["responses"][0]["partitions"]] == \
        [as_read(p) for p in generic["responses"][0]["partitions"]]


def test_nothing_new_entries_are_made_only_as_they_are_read_one_at_a_time() -> None:
    """Thousands of entries alive at once count towards Python's young-generation threshold together."""
    import gc

    frame = encode_response(ApiKey.FETCH, 16, 9, answer(16))[4:]
    lean = decode_answer(ApiKey.FETCH, 16, frame, PackedFetchBody())
    entries = lean["responses"][0]["partitions"]

    def alive() -> int:
        return sum(1 for o in gc.get_objects() if type(o) is FetchedPartition)

    made = alive()
    assert len(entries) == 141 and made < 10        # the few with records, aborted transactions or tags
    most = made
    for _ in entries:
        most = max(most, alive())
    assert most <= made + 1
    assert list(entries) == entries and entries == list(entries) and entries[-1] == list(entries)[-1]


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_a_truncated_or_lying_answer_is_a_protocol_error(version: int) -> None:
    frame = encode_response(ApiKey.FETCH, version, 9, answer(version))[4:]
    for cut in (6, 40, 200, len(frame) - 300, len(frame) - 1):
        with pytest.raises(ProtocolError, match=f"FetchResponse v{version}"):
            decode_answer(ApiKey.FETCH, version, frame[:cut], PackedFetchBody())
