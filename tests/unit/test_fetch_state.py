"""The consumer's sans-IO fetch core driven by plain method calls and an explicit clock (no I/O, no sleeps)."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from akresil import errors
from akresil.core.fetch_state import FetchRequest, FetchState, NoOffsetForPartitionError
from akresil.core.metadata import MetadataCache
from akresil.types import ConsumerRecord, TopicPartition
from akresil.protocol.api import ApiKey, decode_answer, decode_request, encode_request, encode_response
from akresil.protocol.fetch_codec import PackedFetchBody

T = "t"
TP0, TP1, TP2 = TopicPartition(T, 0), TopicPartition(T, 1), TopicPartition(T, 2)
TID = b"\x01" * 16


def batch(base: int, values: list[bytes | None], *, key: bytes | None = b"k", epoch: int = 0,
          producer_id: int = -1, transactional: bool = False, headers: list[tuple[str, bytes]] | None = None,
          timestamp: int = 1_000) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, int(transactional), producer_id, 0 if producer_id >= 0 else -1,
                                  0 if producer_id >= 0 else -1, 1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp + i, key, v, headers or [])
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, base)                 # BaseOffset (outside the CRC)
    struct.pack_into(">i", raw, 12, epoch)               # PartitionLeaderEpoch (outside the CRC)
    return bytes(raw)


def control(base: int, producer_id: int, *, commit: bool) -> bytes:
    """A transaction marker batch: control + transactional attributes, key = (version 0, type)."""
    raw = bytearray(batch(base, [b""], key=struct.pack(">hh", 0, 1 if commit else 0), producer_id=producer_id,
                          transactional=True))
    attributes = struct.unpack_from(">h", raw, 21)[0] | 0x20
    struct.pack_into(">h", raw, 21, attributes)
    struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))
    return bytes(raw)


def metadata(leaders: dict[int, tuple[int, int]], topic_id: bytes = TID, nodes: tuple[int, ...] = (1, 2, 3)
             ) -> MetadataCache:
    cache = MetadataCache(rng=random.Random(0))
    cache.update_from_metadata({
        "brokers": [{"node_id": n, "host": "127.0.0.1", "port": 9000 + n} for n in nodes],
        "topics": [{"name": T, "topic_id": topic_id, "error_code": 0, "partitions": [
            {"partition_index": p, "leader_id": lead, "leader_epoch": ep} for p, (lead, ep) in leaders.items()]}],
    }, 0.0)
    return cache


def refresh(cache: MetadataCache, *, leader: int, epoch: int, now: float) -> None:
    """A Metadata answer naming ``leader`` at ``epoch`` for partition 0."""
    cache.update_from_metadata({
        "brokers": [{"node_id": n, "host": "127.0.0.1", "port": 9000 + n} for n in (1, 2, 3)],
        "topics": [{"name": T, "topic_id": TID, "error_code": 0, "partitions": [
            {"partition_index": 0, "leader_id": leader, "leader_epoch": epoch}]}]}, now)


def fetch_state(**kw: Any) -> FetchState:
    kw.setdefault("retry_backoff_ms", 100)
    kw.setdefault("retry_backoff_max_ms", 1000)
    kw.setdefault("rng", random.Random(0))
    return FetchState(**kw)


def response(parts: dict[TopicPartition, dict[str, Any]], *, by_id: bool = False, **top: Any) -> dict[str, Any]:
    """A Fetch answer as the consumer reads it: these fields (the generic encoder's keys) on the wire, read back by
    ``fetch_codec`` (v16, topics by id, with ``by_id`` or KIP-951 node endpoints; else v12, topics by name)."""
    version = 16 if by_id or top.get("node_endpoints") else 12
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, fields in parts.items():
        p = {"partition_index": tp.partition, "error_code": 0, "high_watermark": 100, "last_stable_offset": -1,
             "log_start_offset": 0, "aborted_transactions": None, "current_leader": None, "records": b""}
        p.update(fields)
        topics.setdefault(tp.topic, []).append(p)
    key = "topic_id" if version >= 13 else "topic"
    body = {"error_code": 0, "responses": [{key: TID if version >= 13 else t, "partitions": ps}
                                           for t, ps in topics.items()], **top}
    frame = encode_response(ApiKey.FETCH, version, 1, body)[4:]
    return decode_answer(ApiKey.FETCH, version, frame, PackedFetchBody())


def both_positioned(**kw: Any) -> tuple[FetchState, MetadataCache]:
    """TP0 and TP1, both led by node 1, assigned and positioned at offset 0."""
    cache = metadata({0: (1, 0), 1: (1, 0)})
    st = fetch_state(**kw)
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    return st, cache


def three_positioned_of_four(leaders: dict[int, tuple[int, int]]) -> tuple[FetchState, MetadataCache, TopicPartition]:
    """Partitions 0-3 assigned, 0-2 positioned at offset 0, partition 3 without a position (not fetchable)."""
    tp3 = TopicPartition(T, 3)
    cache = metadata(leaders)
    st = fetch_state()
    st.assign([TP0, TP1, TP2, tp3])
    for tp in (TP0, TP1, TP2):
        st.seek(tp, 0)
    return st, cache, tp3


def only_request(st: FetchState, now: float, cache: MetadataCache) -> FetchRequest:
    plan = st.plan_fetches(now, cache.snapshot)
    assert len(plan.requests) == 1, plan
    st.begin_fetch(plan.requests[0])
    return plan.requests[0]


# ------------------------------------------------------------------------------------------ planning
def test_plan_groups_partitions_by_leader_with_epochs_and_one_fetch_per_node() -> None:
    cache = metadata({0: (1, 5), 1: (2, 7), 2: (1, 5)})
    st = fetch_state()
    st.assign([TP0, TP1, TP2])
    for tp in (TP0, TP1, TP2):
        st.seek(tp, 10 + tp.partition)
    plan = st.plan_fetches(0, cache.snapshot)
    by_node = {r.node: r for r in plan.requests}
    assert set(by_node) == {1, 2}
    assert [(p.tp, p.fetch_offset, p.current_leader_epoch) for p in by_node[1].partitions] == [
        (TP0, 10, 5), (TP2, 12, 5)]
    assert by_node[2].partitions[0].current_leader_epoch == 7
    st.begin_fetch(by_node[1])
    # node 1 is busy: nothing more goes there, node 2 still may
    again = st.plan_fetches(0, cache.snapshot)
    assert [r.node for r in again.requests] == [2]


def test_partitions_without_position_or_leader_are_not_fetched() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state()
    st.assign([TP0, TP1])
    st.seek(TP1, 0)                      # TP1 has no leader in metadata
    plan = st.plan_fetches(0, cache.snapshot)
    assert plan.requests == [] and plan.needs_metadata      # TP0 has no position yet


def test_a_leaderless_partition_waits_for_new_metadata_without_being_planned_again_meanwhile() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state()
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)                      # TP1 has no leader in metadata
    assert [p.tp for p in only_request(st, 0, cache).partitions] == [TP0]
    looked_up: list[TopicPartition] = []

    class Watched(dict):  # type: ignore[type-arg]
        def get(self, key: Any, default: Any = None) -> Any:
            looked_up.append(key)
            return super().get(key, default)

    st.partitions = Watched(st.partitions)
    for now in (1, 2, 3):                # every poll's plan on the same metadata: asks for it, visits nothing
        plan = st.plan_fetches(now, cache.snapshot)
        assert plan.requests == [] and plan.needs_metadata
    assert TP1 not in looked_up
    cache.update_from_metadata({
        "brokers": [{"node_id": n, "host": "127.0.0.1", "port": 9000 + n} for n in (1, 2, 3)],
        "topics": [{"name": T, "topic_id": TID, "error_code": 0, "partitions": [
            {"partition_index": 0, "leader_id": 1, "leader_epoch": 0},
            {"partition_index": 1, "leader_id": 2, "leader_epoch": 0}]}]}, 4)
    plan = st.plan_fetches(4, cache.snapshot)
    assert [(r.node, [p.tp for p in r.partitions]) for r in plan.requests] == [(2, [TP1])]
    assert not plan.needs_metadata


def test_body_names_topics_by_id_from_v13_and_caps_version_without_ids() -> None:
    st = fetch_state(isolation_level="read_committed", max_partition_fetch_bytes=4096, fetch_max_bytes=8192)
    st.assign([TP0])
    st.seek(TP0, 3)
    req = only_request(st, 0, metadata({0: (1, 2)}))
    assert req.max_version == 17
    body = st.build_request_body(req, 16, max_wait_ms=250, min_bytes=1)
    _, wire = decode_request(encode_request(ApiKey.FETCH, 16, 1, "c", body)[4:])
    assert wire["topics"] == [{"topic_id": TID, "partitions": [{
        "partition": 0, "current_leader_epoch": 2, "fetch_offset": 3, "last_fetched_epoch": -1,
        "log_start_offset": -1, "partition_max_bytes": 4096}]}]
    assert (body["replica_id"], body["isolation_level"], body["session_id"], body["session_epoch"],
            body["max_bytes"], body["max_wait_ms"]) == (-1, 1, 0, 0, 8192, 250)     # epoch 0: make a session
    assert st.build_request_body(req, 12, max_wait_ms=250, min_bytes=1)["topics"][0]["topic"] == T

    st2 = fetch_state()
    st2.assign([TP0])
    st2.seek(TP0, 0)
    req2 = only_request(st2, 0, metadata({0: (1, 2)}, topic_id=bytes(16)))   # noida-db: all-zero id
    assert req2.max_version == 12
    with pytest.raises(errors.UnsupportedVersionError, match="topic ids"):
        st2.build_request_body(req2, 13, max_wait_ms=1, min_bytes=1)


# ------------------------------------------------------------------------------------------ records
def test_records_become_consumer_records_and_position_advances() -> None:
    cache = metadata({0: (1, 4)})
    st = fetch_state()
    st.assign([TP0])
    st.seek(TP0, 2)
    req = only_request(st, 0, cache)
    blob = batch(0, [b"a", b"b", b"c", b"d"], epoch=4, headers=[("h", b"v")]) + batch(4, [None], key=None)
    out = st.on_fetch_response(req, response({TP0: {"records": blob, "high_watermark": 9}}), 1, cache)
    assert out.data and out.refresh is None
    got = st.drain(100)[TP0]
    # offsets 0 and 1 are below the fetch position inside the first batch: skipped
    assert [r.offset for r in got] == [2, 3, 4]
    assert got[0] == ConsumerRecord(T, 0, 2, b"k", b"c", [("h", b"v")], 1_002, 0, 4)
    assert got[2].key is None and got[2].value is None and got[2].headers == ()
    assert st.position(TP0) == 5
    assert st.partitions[TP0].high_watermark == 9
    assert st.consumed_offsets() == {TP0: (5, 0)}


def test_a_partition_makes_its_buffer_and_retry_states_only_when_it_needs_them() -> None:
    """At 10,000 partitions those are 30,000 objects an assignment builds and each full collection walks."""
    st, cache = both_positioned()
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"records": batch(0, [b"a"]), "high_watermark": 1},
                                        TP1: {"high_watermark": 0}}), 1, cache)
    p0, p1 = st.partitions[TP0], st.partitions[TP1]
    assert len(p0.chunks) == 1 and len(p1.chunks) == 0 and p1.chunks is not p0.chunks
    chunk = p0.chunks[0]
    assert p0.retry_state is None and p1.retry_state is None and p1.behind_state is None
    req = only_request(st, 2, cache)
    st.on_fetch_response(req, response({TP1: {"error_code": errors.UnknownTopicOrPartitionError.errno}}), 3, cache)
    assert p1.retry_state is not None and p1.retry.failures == 1 and p0.retry_state is None
    assert [r.value for r in st.drain(10)[TP0]] == [b"a"]
    fresh = fetch_state()
    fresh.assign([TP0, TP1])
    fresh.partitions[TP0].add_chunk(chunk)
    assert len(fresh.partitions[TP0].chunks) == 1
    assert len(fresh.partitions[TP1].chunks) == 0        # the empty buffer they shared was not appended to


def test_max_records_splits_batches_and_keeps_the_rest() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state()
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"records": batch(0, [b"%d" % i for i in range(10)])}}), 0, cache)
    assert [r.offset for r in st.drain(4)[TP0]] == [0, 1, 2, 3]
    assert st.position(TP0) == 4
    assert [r.offset for r in st.drain(4)[TP0]] == [4, 5, 6, 7]
    assert [r.offset for r in st.drain(4)[TP0]] == [8, 9]
    assert st.drain(4) == {} and st.position(TP0) == 10 and st.buffered_bytes == 0


def test_control_batches_are_skipped_and_the_position_steps_over_them() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state()
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0, cache)
    blob = batch(0, [b"x"], producer_id=7, transactional=True) + control(1, 7, commit=True)
    st.on_fetch_response(req, response({TP0: {"records": blob}}), 0, cache)
    assert [r.value for r in st.drain(10)[TP0]] == [b"x"]
    assert st.drain(10) == {}
    assert st.position(TP0) == 2            # over the marker: a commit now does not leave a lag of 1
    plan = st.plan_fetches(0, cache.snapshot)
    assert plan.requests[0].partitions[0].fetch_offset == 2


def test_read_committed_skips_aborted_transactions() -> None:
    cache = metadata({0: (1, 0)})
    blob = (batch(0, [b"aborted-1", b"aborted-2"], producer_id=5, transactional=True)
            + batch(2, [b"committed"], producer_id=6, transactional=True)
            + control(3, 5, commit=False)
            + control(4, 6, commit=True)
            + batch(5, [b"later-5"], producer_id=5, transactional=True))      # a new txn of pid 5: kept
    aborted = [{"producer_id": 5, "first_offset": 0}]
    for level, expected in (("read_committed", [b"committed", b"later-5"]),
                            ("read_uncommitted", [b"aborted-1", b"aborted-2", b"committed", b"later-5"])):
        st = fetch_state(isolation_level=level)
        st.assign([TP0])
        st.seek(TP0, 0)
        req = only_request(st, 0, cache)
        st.on_fetch_response(req, response({TP0: {"records": blob, "aborted_transactions": aborted}}), 0, cache)
        assert [r.value for r in st.drain(100)[TP0]] == expected, level
        assert st.position(TP0) == 6


def test_deserializers_apply_to_non_null_keys_and_values() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state(key_deserializer=bytes.decode, value_deserializer=lambda b: int(b))
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"records": batch(0, [b"41", None])}}), 0, cache)
    got = st.drain(10)[TP0]
    assert [(r.key, r.value) for r in got] == [("k", 41), ("k", None)]


def test_corrupt_batch_is_reported_when_crcs_are_checked() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state(check_crcs=True)
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0, cache)
    raw = bytearray(batch(0, [b"payload"]))
    raw[-3] ^= 0xFF
    # the answer is taken (other partitions in it are unaffected); the poll that reaches TP0 raises
    out = st.on_fetch_response(req, response({TP0: {"records": bytes(raw)}}), 0, cache)
    assert out.data
    with pytest.raises(errors.CorruptRecordError, match="t-0: the record batch at offsets 0..0 fails its CRC"):
        st.drain(10)
    assert st.position(TP0) == 0


# ------------------------------------------------------------------------------------------ errors
def test_accepted_leader_hint_refetches_from_the_new_leader_at_once() -> None:
    cache = metadata({0: (1, 3)})
    st = fetch_state()
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0, cache)
    resp = response({TP0: {"error_code": errors.NotLeaderOrFollowerError.errno,
                           "current_leader": {"leader_id": 2, "leader_epoch": 4}}},
                    node_endpoints=[{"node_id": 2, "host": "127.0.0.1", "port": 9002, "rack": None}])
    out = st.on_fetch_response(req, resp, 50.0, cache)
    assert out.replan and out.refresh == "fetch-not-leader"
    assert cache.snapshot.leader_of(TP0) == (2, 4)
    plan = st.plan_fetches(50.0, cache.snapshot)             # same instant: no backoff
    assert [(r.node, r.partitions[0].current_leader_epoch) for r in plan.requests] == [(2, 4)]


@pytest.mark.parametrize("hint", [None, {"leader_id": 1, "leader_epoch": 3}])   # absent, or not advancing
def test_leader_error_without_usable_hint_backs_off(hint: dict[str, int] | None) -> None:
    cache = metadata({0: (1, 3)})
    st = fetch_state(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0, cache)
    out = st.on_fetch_response(req, response({TP0: {"error_code": errors.FencedLeaderEpochError.errno,
                                                    "current_leader": hint}}), 1000.0, cache)
    assert not out.replan and out.refresh == "fetch-not-leader"
    plan = st.plan_fetches(1000.0, cache.snapshot)
    assert plan.requests == [] and plan.wake_at is not None and 1080.0 <= plan.wake_at <= 1120.0
    assert [r.node for r in st.plan_fetches(plan.wake_at, cache.snapshot).requests] == [1]
    # a second failure doubles the backoff (KIP-580: 200 ms +-20%)
    req = only_request(st, plan.wake_at, cache)
    st.on_fetch_response(req, response({TP0: {"error_code": errors.NotLeaderOrFollowerError.errno}}), 2000.0, cache)
    assert 2160.0 <= st.plan_fetches(2000.0, cache.snapshot).wake_at <= 2240.0


# issue 28: the interleaving seen on librdkafka's mock. A Fetch goes to node 1 (epoch 1); while it is out a
# Metadata answer names node 2 at epoch 2; then the Fetch comes back NOT_LEADER_OR_FOLLOWER (or FENCED) with a
# hint repeating (2, 2), or none. The hint does not advance the cache, but the cache has moved past the leader
# the request was planned for: the error is stale and the partition is fetched from node 2 at once.
@pytest.mark.parametrize("hint", [{"leader_id": 2, "leader_epoch": 2}, None])
@pytest.mark.parametrize("code", [errors.NotLeaderOrFollowerError.errno, errors.FencedLeaderEpochError.errno])
def test_stale_leader_error_after_metadata_moved_the_leader_fetches_from_the_new_leader_at_once(
        hint: dict[str, int] | None, code: int) -> None:
    cache = metadata({0: (1, 1)})
    st = fetch_state(retry_backoff_ms=2000, retry_backoff_max_ms=4000)
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0.0, cache)
    assert (req.node, req.partitions[0].current_leader_epoch) == (1, 1)
    refresh(cache, leader=2, epoch=2, now=10.0)                      # a Metadata answer: moved
    assert st.plan_fetches(10.0, cache.snapshot).requests == []      # the Fetch to node 1 is still out
    out = st.on_fetch_response(req, response({TP0: {"error_code": code, "current_leader": hint}}), 20.0, cache)
    assert out.replan and out.refresh is None                        # nothing to learn: the cache knows more
    plan = st.plan_fetches(20.0, cache.snapshot)                     # same instant: no backoff
    assert [(r.node, r.partitions[0].current_leader_epoch) for r in plan.requests] == [(2, 2)]


def test_leader_error_from_the_leader_the_cache_still_names_backs_off_even_after_a_refresh() -> None:
    """A Metadata answer that only repeats the leader the request went to is no move: the error stands."""
    cache = metadata({0: (1, 3)})
    st = fetch_state(retry_backoff_ms=2000, retry_backoff_max_ms=4000)
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0.0, cache)
    refresh(cache, leader=1, epoch=3, now=10.0)
    out = st.on_fetch_response(req, response({TP0: {"error_code": errors.NotLeaderOrFollowerError.errno,
                                                    "current_leader": {"leader_id": 1, "leader_epoch": 3}}}),
                               20.0, cache)
    assert not out.replan and out.refresh == "fetch-not-leader"
    plan = st.plan_fetches(20.0, cache.snapshot)
    assert plan.requests == [] and plan.wake_at is not None and plan.wake_at >= 20.0 + 1600.0


def test_a_hint_whose_epoch_goes_backwards_is_refused_and_the_cached_leader_stays() -> None:
    cache = metadata({0: (2, 5)})
    st = fetch_state()
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0.0, cache)
    out = st.on_fetch_response(req, response({TP0: {"error_code": errors.NotLeaderOrFollowerError.errno,
                                                    "current_leader": {"leader_id": 1, "leader_epoch": 4}}}),
                               20.0, cache)
    assert cache.snapshot.leader_of(TP0) == (2, 5)
    assert not out.replan and st.plan_fetches(20.0, cache.snapshot).requests == []


def test_a_stale_error_without_leader_epochs_compares_nodes() -> None:
    """Brokers that report no leader epochs (-1): the error is stale when the cache names another node."""
    cache = metadata({0: (1, -1)})
    st = fetch_state(retry_backoff_ms=2000, retry_backoff_max_ms=4000)
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0.0, cache)
    refresh(cache, leader=3, epoch=-1, now=10.0)
    out = st.on_fetch_response(req, response({TP0: {"error_code": errors.NotLeaderOrFollowerError.errno}}),
                               20.0, cache)
    assert out.replan
    assert [r.node for r in st.plan_fetches(20.0, cache.snapshot).requests] == [3]


# Apache Kafka: the leader a hint named has not applied that epoch yet (brokers replay the metadata log at their
# own pace, and the hint came from one that was ahead) and answers UNKNOWN_LEADER_EPOCH. It catches up within
# milliseconds: the partition is fetched again on the short doubling schedule of a topic being created (about
# 1, 2, 4 ... ms, capped at retry_backoff_max_ms), not after retry_backoff_ms, and no Metadata is asked for
# (the cache is ahead of that broker, not behind). Java's consumer refetches on its next poll.
def test_unknown_leader_epoch_refetches_on_a_short_schedule_without_metadata() -> None:
    cache = metadata({0: (2, 4)})
    st = fetch_state(retry_backoff_ms=2000, retry_backoff_max_ms=4000)
    st.assign([TP0])
    st.seek(TP0, 0)
    now = 1000.0
    waits = []
    for _ in range(4):
        req = only_request(st, now, cache)
        assert (req.node, req.partitions[0].current_leader_epoch) == (2, 4)
        out = st.on_fetch_response(req, response({TP0: {"error_code": errors.UnknownLeaderEpochError.errno,
                                                        "high_watermark": -1}}), now, cache)
        assert out.refresh is None and not out.data
        plan = st.plan_fetches(now, cache.snapshot)
        assert plan.requests == [] and plan.wake_at is not None and not plan.needs_metadata
        waits.append(plan.wake_at - now)
        now = plan.wake_at
    assert 0.8 <= waits[0] <= 1.2 and 1.6 <= waits[1] <= 2.4 and 3.2 <= waits[2] <= 4.8 and 6.4 <= waits[3] <= 9.6
    # an answer resets the schedule, and did not touch the ordinary retry backoff either
    req = only_request(st, now, cache)
    st.on_fetch_response(req, response({TP0: {"records": batch(0, [b"a"])}}), now, cache)
    assert [r.value for r in st.drain(10).get(TP0, [])] == [b"a"]
    req = only_request(st, now, cache)
    st.on_fetch_response(req, response({TP0: {"error_code": errors.UnknownLeaderEpochError.errno}}), now, cache)
    assert 0.8 <= st.plan_fetches(now, cache.snapshot).wake_at - now <= 1.2
    # a broker that stays behind is asked at most every retry_backoff_max_ms
    for _ in range(20):
        now = st.plan_fetches(now, cache.snapshot).wake_at
        req = only_request(st, now, cache)
        st.on_fetch_response(req, response({TP0: {"error_code": errors.UnknownLeaderEpochError.errno}}), now,
                             cache)
    assert 3200.0 <= st.plan_fetches(now, cache.snapshot).wake_at - now <= 4800.0


def test_unknown_topic_backs_off_and_refreshes_and_success_resets_backoff() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state()
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0, cache)
    out = st.on_fetch_response(req, response({TP0: {"error_code": errors.UnknownTopicOrPartitionError.errno}}),
                               0, cache)
    assert out.refresh is not None
    assert st.partitions[TP0].retry.failures == 1
    req = only_request(st, 500, cache)
    st.on_fetch_response(req, response({TP0: {}}), 500, cache)
    assert st.partitions[TP0].retry.failures == 0


def test_offset_out_of_range_resets_by_policy() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state(auto_offset_reset="earliest")
    st.assign([TP0])
    st.seek(TP0, 500)
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"error_code": errors.OffsetOutOfRangeError.errno}}), 0, cache)
    assert st.resets_due(0) == [TP0] and st.partitions[TP0].reset == "earliest"
    assert st.plan_fetches(0, cache.snapshot).requests == []
    gens = st.begin_lookup([TP0])
    assert st.resets_due(0) == []                            # lookup outstanding
    st.on_reset_offset(TP0, gens[TP0], 17)
    assert st.position(TP0) == 17
    assert st.plan_fetches(0, cache.snapshot).requests[0].partitions[0].fetch_offset == 17


def test_offset_out_of_range_with_policy_none_is_raised_until_seek() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state(auto_offset_reset="none")
    st.assign([TP0])
    st.seek(TP0, 500)
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"error_code": errors.OffsetOutOfRangeError.errno}}), 0, cache)
    for _ in range(2):
        with pytest.raises(errors.OffsetOutOfRangeError, match="t-0: offset 500 is out of range"):
            st.drain(10)
    st.seek(TP0, 0)
    assert st.drain(10) == {}


@pytest.mark.parametrize("bounds, named", [((-1, -1), None), ((3, 40), "(log start 3, high watermark 40)")])
def test_offset_out_of_range_with_policy_none_names_the_bounds_only_when_the_answer_gives_them(
        bounds: tuple[int, int], named: str | None) -> None:
    """Apache Kafka answers an out-of-range fetch with -1 for both bounds: "log start -1, high watermark -1" read
    as if the partition were empty. The message names bounds only when given, and says what to do."""
    cache = metadata({0: (1, 0)})
    st = fetch_state(auto_offset_reset="none")
    st.assign([TP0])
    st.seek(TP0, 500)
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"error_code": errors.OffsetOutOfRangeError.errno,
                                              "log_start_offset": bounds[0], "high_watermark": bounds[1]}}), 0, cache)
    with pytest.raises(errors.OffsetOutOfRangeError) as info:
        st.drain(10)
    message = str(info.value)
    assert "-1" not in message and "seek()" in message and "end_offsets" in message
    assert (named is None and "log start" not in message) or (named is not None and named in message)


def test_no_committed_offset_falls_back_to_reset_policy_or_fails_with_none() -> None:
    st = fetch_state(auto_offset_reset="latest")
    st.assign([TP0, TP1], from_committed=True)
    gens = st.begin_lookup(st.committed_lookups_due(0))
    st.on_committed(TP0, gens[TP0], 42, 3)
    st.on_committed(TP1, gens[TP1], None)
    assert st.position(TP0) == 42 and st.partitions[TP0].position_epoch == 3
    assert st.position(TP1) is None and st.partitions[TP1].reset == "latest"

    strict = fetch_state(auto_offset_reset="none")
    strict.assign([TP0], from_committed=True)
    gens = strict.begin_lookup(strict.committed_lookups_due(0))
    strict.on_committed(TP0, gens[TP0], None)
    with pytest.raises(NoOffsetForPartitionError, match="auto_offset_reset='none'"):
        strict.drain(1)


def test_assign_from_committed_starts_only_the_added_partitions_from_the_committed_offsets() -> None:
    st = fetch_state()
    st.assign([TP0])
    st.seek(TP0, 7)
    st.assign([TP0, TP1], from_committed=True)
    assert st.position(TP0) == 7 and not st.partitions[TP0].awaiting_committed   # kept: keeps its position
    assert st.partitions[TP1].awaiting_committed
    gens = st.begin_lookup(st.committed_lookups_due(0))
    assert set(gens) == {TP1}
    st.on_committed(TP1, gens[TP1], 42, 3)
    assert st.position(TP1) == 42 and st.partitions[TP1].position_epoch == 3


def test_lookup_failure_backs_off_or_surfaces_fatal_errors() -> None:
    st = fetch_state()
    st.assign([TP0, TP1])
    st.request_reset(TP0, "earliest")
    st.request_reset(TP1, "latest")
    gens = st.begin_lookup([TP0, TP1])
    st.on_lookup_failed(TP0, gens[TP0], 0, None)
    st.on_lookup_failed(TP1, gens[TP1], 0, errors.TopicAuthorizationFailedError("denied"))
    assert st.resets_due(0) == [] and st.resets_due(200) == [TP0]
    with pytest.raises(errors.TopicAuthorizationFailedError):
        st.drain(5)


def test_seek_during_a_fetch_drops_the_stale_answer() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state()
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0, cache)
    st.seek(TP0, 100)
    out = st.on_fetch_response(req, response({TP0: {"records": batch(0, [b"old"])}}), 0, cache)
    assert not out.data and st.drain(10) == {} and st.position(TP0) == 100
    assert st.plan_fetches(0, cache.snapshot).requests[0].partitions[0].fetch_offset == 100


def test_an_answer_in_another_order_than_asked_is_applied_entry_by_entry() -> None:
    # entries are matched with the request in order first; one out of order, one never asked for and a repeat
    # fall back to a lookup by partition, and each still reaches its own partition only
    st, cache, tp3 = three_positioned_of_four({0: (1, 0), 1: (1, 0), 2: (1, 0), 3: (2, 0)})
    req = only_request(st, 0, cache)
    assert [p.tp for p in req.partitions] == [TP0, TP1, TP2]
    parts = {TP0: {"high_watermark": 7}, TP2: {"records": batch(0, [b"two"]), "high_watermark": 9},
             tp3: {"records": batch(0, [b"not asked"]), "high_watermark": 5}, TP1: {"high_watermark": 8}}
    out = st.on_fetch_response(req, response(parts), 1, cache)
    assert out.data
    assert [st.partitions[tp].high_watermark for tp in (TP0, TP1, TP2, tp3)] == [7, 8, 9, -1]
    assert {tp: [r.value for r in rs] for tp, rs in st.drain(10).items()} == {TP2: [b"two"]}


def _applied(as_list: bool) -> tuple[Any, ...]:
    """Forty partitions of node 1 answered with runs of entries with nothing new (some out of order, one never
    asked for), records, errors and a preferred read replica inside the runs; applied as decoded or as a list."""
    tps = [TopicPartition(T, p) for p in range(41)]
    cache = metadata({p: (1, 0) for p in range(41)})
    st = fetch_state()
    st.assign(tps[:40])
    for tp in tps[:40]:
        st.seek(tp, 0)
    st.state(tps[5]).retry.on_failure(0)           # backing off before: the answer's success resets it
    req = only_request(st, 200, cache)
    parts: dict[TopicPartition, dict[str, Any]] = {tp: {"high_watermark": 50 + tp.partition,
                                                        "last_stable_offset": 40, "log_start_offset": 3}
                                                   for tp in tps[:40]}
    parts[tps[3]] = {"records": batch(0, [b"three"]), "high_watermark": 9}
    parts[tps[11]] = {"error_code": errors.UnknownTopicOrPartitionError.errno}
    parts[tps[12]] = {"error_code": errors.OffsetOutOfRangeError.errno}
    parts[tps[20]] = {"preferred_read_replica": 2}
    parts[tps[40]] = {"high_watermark": 77}                          # never asked for
    order = tps[:25] + [tps[30], tps[25], tps[40]] + tps[26:30] + tps[31:40]
    answer = response({tp: parts[tp] for tp in order})
    if as_list:
        for topic in answer["responses"]:
            topic["partitions"] = list(topic["partitions"])
    out = st.on_fetch_response(req, answer, 200, cache)
    fields = ("high_watermark", "last_stable_offset", "log_start_offset", "read_replica", "fetch_offset", "reset")
    return (out, [tuple(getattr(st.partitions[tp], f) for f in fields) for tp in tps[:40]],
            [st.partitions[tp].next_try_at() for tp in tps[:40]],
            {tp: [r.value for r in rs] for tp, rs in st.drain(100).items()})


def test_runs_of_entries_with_nothing_new_are_applied_as_each_entry_alone_would_be() -> None:
    fast, general = _applied(False), _applied(True)
    assert fast == general
    out, states, retry_at, records = fast
    assert out.data and out.replan and out.refresh == "fetch-UnknownTopicOrPartitionError"
    assert states[0] == (50, 40, 3, None, 0, None) and states[20][3] == 2 and states[12][5] is not None
    assert retry_at[5] is None and retry_at[11] is not None and records == {TopicPartition(T, 3): [b"three"]}


def test_an_unchanged_partition_is_planned_with_the_same_entry_and_a_change_makes_a_new_one() -> None:
    st, cache = both_positioned()
    first = only_request(st, 0, cache)
    st.on_fetch_response(first, response({TP0: {"high_watermark": 5},
                                          TP1: {"records": batch(0, [b"a"]), "high_watermark": 1}}), 1, cache)
    st.drain(10)
    second = only_request(st, 1, cache)
    by_tp = {p.tp: p for p in second.partitions}
    assert by_tp[TP0] is first.partitions[0]                     # nothing changed: the same tuple
    assert (by_tp[TP1].fetch_offset, by_tp[TP1].generation) == (1, first.partitions[1].generation)
    st.on_fetch_response(second, response({}), 2, cache)
    st.seek(TP0, 0)                                              # same offset, new generation: a new entry
    third = only_request(st, 2, cache)
    assert third.partitions[0] is not first.partitions[0]
    assert third.partitions[0].generation == first.partitions[0].generation + 1
    st.on_fetch_response(third, response({}), 3, cache)
    refresh(cache, leader=1, epoch=4, now=3)                     # a new leader epoch: a new entry
    fourth = only_request(st, 3, cache)
    assert fourth.partitions[0] is not third.partitions[0] and fourth.partitions[0].current_leader_epoch == 4


def test_a_plan_on_the_same_snapshot_follows_every_change_of_a_partition_planned_after_another_of_its_leader(
        ) -> None:
    """A partition planned right after another of its leader, on the snapshot it was planned on last time, reuses its
    entry without looking its leader up: new records, a seek to the same offset, a preferred read replica and a
    leader move (a new snapshot) must each still change where and from what offset it is fetched."""
    tps = [TopicPartition(T, p) for p in range(5)]
    brokers = [{"node_id": n, "host": "127.0.0.1", "port": 9000 + n} for n in (1, 2, 3)]

    def layout(leaders: dict[int, int]) -> dict[str, Any]:
        return {"brokers": brokers, "topics": [{"name": T, "topic_id": TID, "error_code": 0, "partitions": [
            {"partition_index": p, "leader_id": lead, "leader_epoch": 5, "replica_nodes": [1, 2, 3],
             "isr_nodes": [1, 2, 3]} for p, lead in leaders.items()]}]}

    cache = MetadataCache(rng=random.Random(0))
    cache.update_from_metadata(layout({0: 1, 1: 1, 2: 1, 3: 1, 4: 1}), 0.0)
    st = fetch_state()
    st.assign(tps)
    for tp in tps:
        st.seek(tp, 0)
    first = only_request(st, 0, cache)
    st.on_fetch_response(first, response({tp: {"high_watermark": 0} for tp in tps}), 1, cache)
    second = only_request(st, 1, cache)                  # unchanged: the same entries, through the reuse
    assert [p is q for p, q in zip(second.partitions, first.partitions)] == [True] * 5
    st.on_fetch_response(second, response({tps[0]: {"high_watermark": 0},
                                           tps[1]: {"records": batch(0, [b"a", b"b"]), "high_watermark": 9},
                                           tps[2]: {"preferred_read_replica": 2},
                                           tps[3]: {"high_watermark": 0}, tps[4]: {"high_watermark": 0}}), 2, cache)
    st.seek(tps[4], 0)                                   # the same offset: only the generation changes
    plan = st.plan_fetches(2, cache.snapshot)
    got = {r.node: [(p.tp.partition, p.fetch_offset, p.current_leader_epoch, p.generation) for p in r.partitions]
           for r in plan.requests}
    gen = first.partitions[0].generation
    assert got == {1: [(0, 0, 5, gen), (1, 2, 5, gen), (3, 0, 5, gen), (4, 0, 5, gen + 1)], 2: [(2, 0, 5, gen)]}
    for request in plan.requests:
        st.begin_fetch(request)
        st.on_fetch_response(request, response({}), 3, cache)
    cache.update_from_metadata(layout({0: 1, 1: 1, 2: 1, 3: 1, 4: 3}), 3.0)   # partition 4 moves to node 3
    plan = st.plan_fetches(3, cache.snapshot)
    assert {r.node: [p.tp.partition for p in r.partitions] for r in plan.requests} == {1: [0, 1, 3], 2: [2], 3: [4]}


def test_a_partition_back_from_its_read_replica_goes_to_its_leader_even_after_a_partition_of_the_replica() -> None:
    """The entry planned for a read replica is not the leader's: once the replica is dropped, a plan on the same
    snapshot reaching the partition right after one led by the replica's node still sends it to its leader."""
    p0, p1, p2 = TP0, TP1, TP2
    cache = metadata({0: (1, 0), 1: (2, 0), 2: (1, 0)})
    st = fetch_state()
    st.assign([p0, p1, p2])
    for tp in (p0, p1, p2):
        st.seek(tp, 0)
    plan = st.plan_fetches(0, cache.snapshot)
    reqs = {r.node: r for r in plan.requests}
    for r in plan.requests:
        st.begin_fetch(r)
    st.on_fetch_response(reqs[2], response({p1: {}}), 1, cache)
    st.on_fetch_response(reqs[1], response({p0: {}, p2: {"preferred_read_replica": 2}}), 1, cache)
    plan = st.plan_fetches(1, cache.snapshot)
    assert {r.node: [p.tp for p in r.partitions] for r in plan.requests} == {2: [p1, p2], 1: [p0]}
    reqs = {r.node: r for r in plan.requests}
    for r in plan.requests:
        st.begin_fetch(r)
    # the replica cannot serve it: back to the leader (node 1, busy with p0's Fetch: p2 waits for it)
    st.on_fetch_response(reqs[2], response({p1: {}, p2: {"error_code": errors.OffsetOutOfRangeError.errno}}), 2,
                         cache)
    assert st.state(p2).read_replica is None
    plan = st.plan_fetches(2, cache.snapshot)
    assert {r.node: [p.tp for p in r.partitions] for r in plan.requests} == {2: [p1]}


def test_a_partition_unassigned_while_it_waits_for_its_node_is_not_planned_from_its_old_state() -> None:
    """Unassigning drops a partition from every set the plan draws on (here: waiting for its busy node); re-assigned
    without a position, it is not fetched when the node frees up, from the old state's offset or otherwise."""
    cache = metadata({0: (1, 0), 1: (2, 0), 2: (2, 0)})
    st = fetch_state()
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    plan = st.plan_fetches(0, cache.snapshot)
    reqs = {r.node: r for r in plan.requests}
    for r in plan.requests:
        st.begin_fetch(r)
    st.assign([TP0, TP1, TP2])
    st.seek(TP2, 7)
    assert st.plan_fetches(1, cache.snapshot).requests == []     # TP2 waits for node 2
    st.assign([TP0, TP1])
    st.assign([TP0, TP1, TP2])                                   # back, with no position yet
    st.on_fetch_response(reqs[2], response({TP1: {}}), 2, cache)
    plan = st.plan_fetches(2, cache.snapshot)
    assert {r.node: [p.tp for p in r.partitions] for r in plan.requests} == {2: [TP1]}


def test_seek_drops_buffered_data() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state()
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"records": batch(0, [b"a", b"b"])}}), 0, cache)
    assert st.buffered_bytes > 0
    st.seek(TP0, 1)
    assert st.buffered_bytes == 0 and st.drain(10) == {}
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"records": batch(0, [b"a", b"b"])}}), 0, cache)
    assert [r.value for r in st.drain(10)[TP0]] == [b"b"]


def test_pause_stops_fetching_and_returning_until_resume() -> None:
    st, cache = both_positioned()
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"records": batch(0, [b"a"])},
                                        TP1: {"records": batch(0, [b"b"])}}), 0, cache)
    st.pause([TP0])
    assert st.paused() == {TP0}
    assert set(st.drain(10)) == {TP1}
    plan = st.plan_fetches(0, cache.snapshot)
    assert [p.tp for p in plan.requests[0].partitions] == [TP1]
    st.resume([TP0])
    assert [r.value for r in st.drain(10)[TP0]] == [b"a"]


def test_prefetch_is_bounded_per_partition_and_overall() -> None:
    cache = metadata({0: (1, 0), 1: (1, 0)})
    blob = batch(0, [b"x" * 1000] * 8)
    st = fetch_state(max_partition_fetch_bytes=len(blob) - 1, max_buffered_bytes=10 * len(blob))
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"records": blob}}), 0, cache)
    plan = st.plan_fetches(0, cache.snapshot)
    assert [p.tp for p in plan.requests[0].partitions] == [TP1]     # TP0 holds a full fetch's worth
    st.drain(1, [TP0])                                                # decoding its batch frees the bytes
    assert {p.tp for p in st.plan_fetches(0, cache.snapshot).requests[0].partitions} == {TP0, TP1}

    tight = fetch_state(max_partition_fetch_bytes=10 * len(blob), max_buffered_bytes=len(blob))
    tight.assign([TP0, TP1])
    tight.seek(TP0, 0)
    tight.seek(TP1, 0)
    req = only_request(tight, 0, cache)
    tight.on_fetch_response(req, response({TP0: {"records": blob}}), 0, cache)
    # the overall cap is reached: TP0 waits, TP1 (nothing buffered) may still fetch
    assert [p.tp for p in tight.plan_fetches(0, cache.snapshot).requests[0].partitions] == [TP1]


def _held_and_caught_up(hw0: int = 100) -> tuple[FetchState, MetadataCache]:
    """TP0 holds two batches (the prefetch bound) of the ``hw0`` records on the broker; TP1 is empty, caught up."""
    cache = metadata({0: (1, 0), 1: (1, 0)})
    first, second = batch(0, [b"x" * 1000] * 8), batch(8, [b"y" * 1000] * 8)
    st = fetch_state(max_partition_fetch_bytes=len(second))
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"records": first + second, "high_watermark": hw0},
                                        TP1: {"high_watermark": 0}}), 0, cache)
    assert [r.offset for r in st.drain(4)[TP0]] == [0, 1, 2, 3]     # the application is reading TP0
    return st, cache


def test_no_long_poll_for_caught_up_partitions_while_a_held_partition_has_records() -> None:
    # issue 18: a Fetch of TP1 alone would wait max_wait_ms on the broker, and TP0's next Fetch (records
    # waiting) behind it once the application drained TP0
    st, cache = _held_and_caught_up()
    assert st.partitions[TP0].buffered_bytes >= st.max_partition_fetch_bytes
    assert st.plan_fetches(0, cache.snapshot).requests == []
    st.drain(4)                                  # rest of the first batch: still held
    assert st.plan_fetches(0, cache.snapshot).requests == []
    st.drain(1)                                  # decodes the second batch: room again, one Fetch carries both
    req = only_request(st, 0, cache)
    assert {(p.tp, p.fetch_offset) for p in req.partitions} == {(TP0, 16), (TP1, 0)}


def test_a_plan_between_an_answer_and_the_next_poll_does_not_long_poll_either() -> None:
    # the shell may plan (woken by a metadata refresh) after an answer is buffered and before the application,
    # which was waiting with nothing buffered, drains it: the records that just arrived count as being read
    cache = metadata({0: (1, 0), 1: (1, 0), 2: (1, 0)})
    first, second = batch(0, [b"x" * 1000] * 8), batch(8, [b"y" * 1000] * 8)
    st = fetch_state(max_partition_fetch_bytes=len(second))
    st.assign([TP0, TP1, TP2])
    for tp in (TP0, TP1, TP2):
        st.seek(tp, 0)
    assert st.drain(10) == {} and st.starved
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"high_watermark": 0}, TP1: {"records": first + second},
                                        TP2: {"records": first + second}}), 0, cache)
    assert not st.starved
    assert st.plan_fetches(0, cache.snapshot).requests == []      # not TP0 alone
    st.drain(20)
    st.drain(20)
    assert {p.tp for p in only_request(st, 0, cache).partitions} == {TP0, TP1, TP2}


def test_caught_up_partitions_are_fetched_when_the_application_waits_or_nothing_more_is_there() -> None:
    # the application reads only TP1 and finds nothing: its long poll goes, TP0's records stay buffered
    st, cache = _held_and_caught_up()
    assert st.drain(10, [TP1]) == {} and st.starved
    assert [p.tp for p in only_request(st, 0, cache).partitions] == [TP1]
    # TP0 holds everything the broker has: nothing to wait for, TP1's long poll goes
    st, cache = _held_and_caught_up(hw0=16)
    assert [p.tp for p in only_request(st, 0, cache).partitions] == [TP1]
    # a paused partition's records do not count
    st, cache = _held_and_caught_up()
    st.pause([TP0])
    assert [p.tp for p in only_request(st, 0, cache).partitions] == [TP1]


def test_read_committed_measures_caught_up_against_the_last_stable_offset() -> None:
    cache = metadata({0: (1, 0), 1: (1, 0)})
    first, second = batch(0, [b"x" * 1000] * 8), batch(8, [b"y" * 1000] * 8)
    st = fetch_state(max_partition_fetch_bytes=len(second), isolation_level="read_committed")
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    req = only_request(st, 0, cache)
    # TP1: the high watermark is ahead but an open transaction holds the LSO at 0: nothing to return
    st.on_fetch_response(req, response({TP0: {"records": first + second, "high_watermark": 50,
                                              "last_stable_offset": 50},
                                        TP1: {"high_watermark": 5, "last_stable_offset": 0}}), 0, cache)
    st.drain(1)
    assert st.plan_fetches(0, cache.snapshot).requests == []
    # the transaction committed: TP1 has records to return (only an answer moves the LSO, and an answer puts the
    # partition back in the ready set)
    st.partitions[TP1].last_stable_offset = 5
    st._touch(st.partitions[TP1])
    assert [p.tp for p in only_request(st, 0, cache).partitions] == [TP1]


def test_drain_rotates_partitions_so_none_starves() -> None:
    st, cache = both_positioned()
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"records": batch(0, [b"a"] * 5)},
                                        TP1: {"records": batch(0, [b"b"] * 5)}}), 0, cache)
    firsts = [next(iter(st.drain(2))) for _ in range(4)]
    assert set(firsts) == {TP0, TP1}


def test_drain_visits_only_partitions_with_something_to_hand_out_and_serves_them_in_turn() -> None:
    cache = metadata({p: (1, 0) for p in range(1000)})
    st = fetch_state()
    tps = [TopicPartition(T, p) for p in range(1000)]
    st.assign(tps)
    for tp in tps:
        st.seek(tp, 0)
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({tps[7]: {"records": batch(0, [b"a"] * 5)},
                                        tps[900]: {"records": batch(0, [b"b"] * 5)}}), 0, cache)
    assert list(st.buffered_by_partition()) == [tps[7], tps[900]]       # the 998 others are not looked at
    # a partition served goes to the back of the line, one fully drained leaves it
    assert list(st.drain(2)) == [tps[7]]
    assert list(st.drain(2)) == [tps[900]]
    assert list(st.drain(10)) == [tps[7], tps[900]]
    assert st.buffered_by_partition() == {} and st.drain(10) == {} and st.starved
    # an error queues its partition too
    st.fail(st.partitions[tps[3]], errors.CorruptRecordError("bad"))
    with pytest.raises(errors.CorruptRecordError):
        st.drain(10)


def test_a_caught_up_partition_with_records_buffered_is_not_fetched_again_until_drained() -> None:
    # the broker has nothing past what is buffered: asking again would only add a long poll (and at 10,000
    # partitions re-list thousands of partitions per Fetch); a partition with more on the broker still prefetches
    st, cache = both_positioned()
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"records": batch(0, [b"a"] * 5), "high_watermark": 5},
                                        TP1: {"records": batch(0, [b"b"] * 5), "high_watermark": 50}}), 0, cache)
    assert [(p.tp, p.fetch_offset) for p in only_request(st, 0, cache).partitions] == [(TP1, 5)]
    st.on_fetch_response(req, response({}), 0, cache)
    st.drain(10, [TP0])
    assert [p.tp for p in st.plan_fetches(0, cache.snapshot).requests[0].partitions] == [TP0, TP1]


def test_while_every_broker_has_a_fetch_out_planning_is_skipped_until_an_answer_or_new_metadata() -> None:
    st, cache, tp3 = three_positioned_of_four({0: (1, 0), 1: (2, 0), 2: (3, 0), 3: (1, 0)})
    plan = st.plan_fetches(0, cache.snapshot)
    for r in plan.requests:
        st.begin_fetch(r)
    assert len(plan.requests) == 3
    st.seek(tp3, 0)
    st.partitions[tp3].retry.on_failure(0)      # backing off: a full plan names its retry time
    # every broker has a Fetch out on the snapshot the last plan was made on: nothing to plan, no timer
    assert st.plan_fetches(0, cache.snapshot) == ([], False, None)
    moved = metadata({0: (2, 1), 1: (2, 0), 2: (3, 0), 3: (1, 0)})    # new metadata: planned in full
    assert st.plan_fetches(1, moved.snapshot).wake_at is not None
    st.on_fetch_response(plan.requests[1], response({}), 5000, moved)      # node 2 answers: planned again
    assert [(r.node, [p.tp for p in r.partitions]) for r in st.plan_fetches(5000, moved.snapshot).requests] == [
        (2, [TP1])]


def test_failed_request_backs_off_every_partition_in_it() -> None:
    st, cache = both_positioned()
    req = only_request(st, 0, cache)
    st.on_fetch_failed(req, 0)
    assert st.busy_nodes == set()
    plan = st.plan_fetches(0, cache.snapshot)
    assert plan.requests == [] and plan.wake_at is not None


def test_a_node_that_may_not_be_sent_to_is_skipped_and_its_ready_time_is_a_wakeup() -> None:
    cache = metadata({0: (1, 0), 1: (2, 0)})
    st = fetch_state()
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    ready = {1: 700.0}
    plan = st.plan_fetches(100.0, cache.snapshot, ready.get)
    assert [r.node for r in plan.requests] == [2] and plan.wake_at == 700.0
    assert not st.partitions[TP0].in_flight          # not held by a Fetch waiting for node 1
    assert [r.node for r in st.plan_fetches(700.0, cache.snapshot, ready.get).requests] == [1, 2]


def test_a_leader_missing_from_the_broker_list_waits_for_metadata_without_a_request() -> None:
    """A broker that is down drops out of Metadata's broker list while partitions still name it leader (seen on
    librdkafka's mock); a Fetch to it could not even connect, so none is planned: the partition waits for the
    metadata refresh it asks for, and goes out as soon as the broker is listed again."""
    st = fetch_state()
    st.assign([TP0, TP1])
    st.seek(TP0, 0)
    st.seek(TP1, 0)
    without_1 = metadata({0: (1, 0), 1: (2, 0)}, nodes=(2, 3))
    plan = st.plan_fetches(0.0, without_1.snapshot)
    assert [r.node for r in plan.requests] == [2] and plan.needs_metadata
    assert st.partitions[TP0].retry.next_allowed_at is None
    listed = metadata({0: (1, 0), 1: (2, 0)})
    st.begin_fetch(plan.requests[0])
    assert [r.node for r in st.plan_fetches(0.0, listed.snapshot).requests] == [1]


def test_a_failure_the_node_backs_off_for_paces_its_partitions_together() -> None:
    """Issue 21: partitions each backing off (each with its own jitter) after their broker's connection failed
    came back one by one, up to retry_backoff_max_ms after the broker did; the node's backoff paces them now."""
    cache = metadata({0: (1, 0), 2: (1, 0)})
    st = fetch_state()
    st.assign([TP0, TP2])
    st.seek(TP0, 0)
    st.seek(TP2, 0)
    for _ in range(6):                                  # a broker down for a while: many failed attempts
        req = only_request(st, 0.0, cache)
        st.on_fetch_failed(req, 0.0, node_backing_off=True)
    assert all(st.partitions[tp].retry.next_allowed_at is None for tp in (TP0, TP2))
    plan = st.plan_fetches(0.0, cache.snapshot, {1: 1000.0}.get)
    assert plan.requests == [] and plan.wake_at == 1000.0
    (back,) = st.plan_fetches(1000.0, cache.snapshot, {1: 1000.0}.get).requests
    assert {p.tp for p in back.partitions} == {TP0, TP2}


def test_partitions_of_a_backing_off_node_follow_a_leader_move_at_once() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state()
    st.assign([TP0])
    st.seek(TP0, 0)
    st.on_fetch_failed(only_request(st, 0.0, cache), 0.0, node_backing_off=True)
    ready = {1: 5000.0}
    assert st.plan_fetches(10.0, cache.snapshot, ready.get).requests == []
    moved = metadata({0: (2, 1)})
    assert [r.node for r in st.plan_fetches(10.0, moved.snapshot, ready.get).requests] == [2]


def test_topic_id_responses_map_back_to_names_and_top_level_errors_back_off() -> None:
    cache = metadata({0: (1, 0)})
    st = fetch_state()
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, response({TP0: {"records": batch(0, [b"id"])}}, by_id=True), 0, cache)
    assert [r.value for r in st.drain(5)[TP0]] == [b"id"]
    req = only_request(st, 0, cache)
    st.on_fetch_response(req, {"error_code": errors.UnknownServerError.errno, "responses": []}, 0, cache)
    assert st.partitions[TP0].retry.failures == 1


def test_bad_input_is_named() -> None:
    st = fetch_state()
    with pytest.raises(TypeError, match="TopicPartition"):
        st.assign(["t-0"])  # type: ignore[list-item]
    st.assign([TP0])
    with pytest.raises(ValueError, match="offset must be an int >= 0"):
        st.seek(TP0, -1)
    with pytest.raises(errors.IllegalStateError, match="not assigned"):
        st.seek(TP1, 0)
    with pytest.raises(ValueError, match="max_records"):
        st.drain(0)
    with pytest.raises(errors.ConfigError, match="auto_offset_reset"):
        FetchState(auto_offset_reset="smallest")
