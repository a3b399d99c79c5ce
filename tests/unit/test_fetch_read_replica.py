"""KIP-392 in the consumer's fetch core: the preferred read replica, its lease and every way back to the leader.

The rules are the Java consumer's (``AbstractFetch.selectReadReplica``, ``FetchCollector``, ``SubscriptionState``
preferred-replica lease), plus the issue's: a replica the metadata shows out of the ISR is left at once."""

from __future__ import annotations

import random
from typing import Any

from akresil import errors
from akresil.core.fetch_state import FetchState
from akresil.core.metadata import MetadataCache
from akresil.types import TopicPartition

from .test_fetch_state import TID, batch, fetch_state, only_request, response

T = "t"
TP0 = TopicPartition(T, 0)
LEADER, FOLLOWER, OTHER = 1, 2, 3
TTL = 300_000


def metadata(*, isr: tuple[int, ...] = (1, 2, 3), offline: tuple[int, ...] = (), nodes: tuple[int, ...] = (1, 2, 3),
             cache: MetadataCache | None = None, now: float = 0.0) -> MetadataCache:
    cache = cache or MetadataCache(rng=random.Random(0))
    cache.update_from_metadata({
        "brokers": [{"node_id": n, "host": "127.0.0.1", "port": 9000 + n, "rack": f"r{n}"} for n in nodes],
        "topics": [{"name": T, "topic_id": TID, "error_code": 0, "partitions": [
            {"partition_index": 0, "leader_id": LEADER, "leader_epoch": 4, "replica_nodes": [1, 2, 3],
             "isr_nodes": list(isr), "offline_replicas": list(offline)}]}]}, now)
    return cache


def following(**kw: Any) -> tuple[FetchState, MetadataCache]:
    """A consumer in rack r2 that the leader pointed to its follower (node 2)."""
    st = fetch_state(client_rack="r2", read_replica_ttl_ms=TTL, **kw)
    st.assign([TP0])
    st.seek(TP0, 10)
    cache = metadata()
    req = only_request(st, 0, cache)
    assert req.node == LEADER
    out = st.on_fetch_response(req, response({TP0: {"preferred_read_replica": FOLLOWER}}), 5, cache)
    assert out.replan and not out.data
    return st, cache


def test_fetch_carries_the_rack() -> None:
    st = fetch_state(client_rack="eu-west-1a")
    st.assign([TP0])
    st.seek(TP0, 0)
    req = only_request(st, 0, metadata())
    assert st.build_request_body(req, 12, max_wait_ms=500, min_bytes=1)["rack_id"] == "eu-west-1a"
    assert fetch_state().build_request_body(req, 12, max_wait_ms=500, min_bytes=1)["rack_id"] == ""


def test_the_leader_points_to_a_follower_which_serves_the_partition_with_the_leaders_epoch() -> None:
    st, cache = following()
    req = only_request(st, 6, cache)
    assert req.node == FOLLOWER
    assert [(p.fetch_offset, p.current_leader_epoch) for p in req.partitions] == [(10, 4)]
    out = st.on_fetch_response(req, response({TP0: {"records": batch(10, [b"a", b"b"])}}), 7, cache)
    assert out.data
    assert [r.offset for r in st.drain(10)[TP0]] == [10, 11]
    assert only_request(st, 8, cache).node == FOLLOWER      # it stays there


def test_the_leader_is_asked_again_when_the_lease_runs_out() -> None:
    st, cache = following()
    req = only_request(st, 5 + TTL - 1, cache)
    assert req.node == FOLLOWER
    st.on_fetch_response(req, response({}), 5 + TTL - 1, cache)
    assert only_request(st, 5 + TTL, cache).node == LEADER


def test_a_follower_error_falls_back_to_the_leader_at_once_and_refreshes_metadata() -> None:
    for code in (errors.NotLeaderOrFollowerError.errno, errors.ReplicaNotAvailableError.errno,
                 errors.OffsetNotAvailableError.errno, errors.KafkaStorageError.errno,
                 errors.FencedLeaderEpochError.errno):
        st, cache = following()
        req = only_request(st, 6, cache)
        out = st.on_fetch_response(req, response({TP0: {"error_code": code}}), 7, cache)
        assert out.replan and out.refresh == "fetch-read-replica-error", code
        assert st.state(TP0).next_try_at() is None                      # no backoff
        assert only_request(st, 7, cache).node == LEADER, code


def test_offset_out_of_range_from_the_follower_asks_the_leader_instead_of_resetting() -> None:
    st, cache = following(auto_offset_reset="earliest")
    req = only_request(st, 6, cache)
    out = st.on_fetch_response(req, response({TP0: {"error_code": errors.OffsetOutOfRangeError.errno}}), 7, cache)
    assert out.replan and out.refresh is None
    assert st.state(TP0).reset is None and st.position(TP0) == 10
    assert only_request(st, 7, cache).node == LEADER


def test_unknown_leader_epoch_from_the_follower_retries_the_follower_shortly() -> None:
    st, cache = following()
    req = only_request(st, 6, cache)
    st.on_fetch_response(req, response({TP0: {"error_code": errors.UnknownLeaderEpochError.errno}}), 7, cache)
    at = st.state(TP0).next_try_at()
    assert at is not None and at - 7 <= 2
    assert only_request(st, at, cache).node == FOLLOWER


def test_a_failed_fetch_to_the_follower_goes_to_the_leader_without_a_backoff() -> None:
    for backing_off in (False, True):
        st, cache = following()
        req = only_request(st, 6, cache)
        st.on_fetch_failed(req, 7, node_backing_off=backing_off)
        assert st.state(TP0).next_try_at() is None
        assert only_request(st, 7, cache).node == LEADER


def test_a_follower_out_of_the_isr_offline_or_gone_is_left_for_the_leader() -> None:
    for change in ({"isr": (1, 3)}, {"offline": (2,)}, {"nodes": (1, 3)}):
        st, cache = following()
        metadata(cache=cache, now=6, **change)                          # a refresh shows it
        plan = st.plan_fetches(7, cache.snapshot)
        assert [r.node for r in plan.requests] == [LEADER], change
        assert plan.needs_metadata, change
        assert st.state(TP0).read_replica is None


def test_a_seek_keeps_fetching_from_the_follower() -> None:
    st, cache = following()
    st.seek(TP0, 3)
    req = only_request(st, 6, cache)
    assert (req.node, req.partitions[0].fetch_offset) == (FOLLOWER, 3)
