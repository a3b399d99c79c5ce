"""Metadata cache: epochs never roll back, KIP-951 hint acceptance rules, copy-on-write, refresh timing."""

from __future__ import annotations

import random

import pytest

from akresil.core.events import LEADER_HINT, Hooks, RecordingHook
from akresil.core.metadata import BrokerInfo, MetadataCache
from akresil.errors import ProtocolError
from akresil.types import TopicPartition

TP = TopicPartition("t", 0)
TID = bytes(range(16))


def response(leader: int = 1, epoch: int = 5, brokers: tuple[int, ...] = (1, 2), topic_id: bytes = TID,
             error: int = 0, partitions: int = 2) -> dict:
    return {
        "brokers": [{"node_id": b, "host": f"h{b}", "port": 9000 + b, "rack": None} for b in brokers],
        "cluster_id": "c", "controller_id": brokers[0],
        "topics": [{"error_code": error, "name": "t", "topic_id": topic_id, "is_internal": False,
                    "partitions": [{"error_code": 0, "partition_index": p, "leader_id": leader, "leader_epoch": epoch,
                                    "replica_nodes": list(brokers), "isr_nodes": list(brokers),
                                    "offline_replicas": []} for p in range(partitions)]}],
    }


def cache(**kw) -> MetadataCache:
    kw.setdefault("rng", random.Random(0))
    return MetadataCache(**kw)


def test_update_builds_snapshot() -> None:
    c = cache()
    c.update_from_metadata(response(), now=0)
    s = c.snapshot
    assert s.brokers[1] == BrokerInfo(1, "h1", 9001, None)
    assert s.leader_of(TP) == (1, 5) and s.partitions_for("t") == (0, 1)
    assert s.topic_ids["t"] == TID and s.topic_name(TID) == "t" and s.controller_id == 1


def test_snapshot_is_copy_on_write() -> None:
    c = cache()
    c.update_from_metadata(response(), now=0)
    before = c.snapshot
    assert c.apply_leader_hint(TP, 2, 6)
    assert before.leader_of(TP) == (1, 5)          # readers holding the old view see no change
    assert c.snapshot.leader_of(TP) == (2, 6)
    assert c.snapshot.topics["t"][1] is before.topics["t"][1]   # untouched partitions are shared
    assert c.snapshot.generation == before.generation + 1


def test_stale_metadata_after_hint_does_not_roll_epoch_back() -> None:
    c = cache()
    c.update_from_metadata(response(leader=1, epoch=5), now=0)
    assert c.apply_leader_hint(TP, 2, 6, endpoint={"node_id": 2, "host": "new2", "port": 19092, "rack": "r"})
    update = c.update_from_metadata(response(leader=1, epoch=5, brokers=(1,)), now=10)   # a stale broker
    assert c.snapshot.leader_of(TP) == (2, 6)
    assert TP in update.stale
    # the kept leader's endpoint survives although the stale response did not list node 2
    assert c.snapshot.brokers[2] == BrokerInfo(2, "new2", 19092, "r")
    # a fresher response moves on normally
    c.update_from_metadata(response(leader=2, epoch=7), now=20)
    assert c.snapshot.leader_of(TP) == (2, 7)


def test_unknown_epoch_in_response_counts_as_oldest() -> None:
    c = cache()
    c.update_from_metadata(response(epoch=3), now=0)
    c.update_from_metadata(response(leader=2, epoch=-1), now=1)
    assert c.snapshot.leader_of(TP) == (1, 3)


def test_same_epoch_refresh_replaces_replicas() -> None:
    c = cache()
    c.update_from_metadata(response(epoch=3), now=0)
    c.update_from_metadata(response(epoch=3, brokers=(1, 2, 3)), now=1)
    assert c.snapshot.partition(TP).replicas == (1, 2, 3)


def test_recreated_topic_replaces_partitions_whatever_the_epoch() -> None:
    c = cache()
    c.update_from_metadata(response(epoch=9), now=0)
    c.update_from_metadata(response(epoch=0, topic_id=bytes(15) + b"\x01"), now=1)
    assert c.snapshot.leader_of(TP) == (1, 0)


def test_unknown_topic_error_removes_topic() -> None:
    c = cache()
    c.update_from_metadata(response(), now=0)
    update = c.update_from_metadata(response(error=3, partitions=0), now=1)
    assert update.removed_topics == ["t"] and c.snapshot.partition(TP) is None
    assert c.snapshot.topic_errors["t"] == 3


@pytest.mark.parametrize("leader, epoch, endpoint, tp, reason", [
    (2, 4, None, TP, "not-advancing"),                   # older epoch
    (2, 5, None, TP, "not-advancing"),                   # same epoch
    (-1, 6, None, TP, "incomplete"),
    (2, -1, None, TP, "incomplete"),
    (2, 6, None, TopicPartition("t", 9), "unknown-partition"),
    (7, 6, None, TP, "unknown-node"),                    # node 7 unknown and no endpoint
])
def test_hint_rejections(leader: int, epoch: int, endpoint, tp: TopicPartition, reason: str) -> None:
    rec = RecordingHook()
    c = cache(hooks=Hooks([rec]))
    c.update_from_metadata(response(epoch=5), now=0)
    before = c.snapshot
    assert not c.apply_leader_hint(tp, leader, epoch, endpoint)
    assert c.snapshot is before
    assert rec.named(LEADER_HINT)[-1]["reason"] == reason


def test_hint_with_endpoint_adds_unknown_node_and_overrides_known() -> None:
    c = cache()
    c.update_from_metadata(response(epoch=5), now=0)
    assert c.apply_leader_hint(TP, 7, 6, ("h7", 9007))
    assert c.snapshot.brokers[7] == BrokerInfo(7, "h7", 9007, None) and c.snapshot.leader_of(TP) == (7, 6)
    assert c.apply_leader_hint(TP, 1, 7, BrokerInfo(1, "moved", 1234, "r1"))
    assert c.snapshot.brokers[1].host == "moved"
    with pytest.raises(ValueError, match="endpoint is for node 3"):
        c.apply_leader_hint(TP, 2, 8, BrokerInfo(3, "x", 1))


def test_malformed_response_names_the_field() -> None:
    with pytest.raises(ProtocolError, match="brokers"):
        cache().update_from_metadata({"topics": []}, now=0)
    bad = response()
    del bad["topics"][0]["partitions"][0]["leader_id"]
    with pytest.raises(ProtocolError, match="leader_id"):
        cache().update_from_metadata(bad, now=0)


def test_refresh_due_now_at_start_then_max_age() -> None:
    c = cache(retry_backoff_ms=100, retry_backoff_max_ms=1000, metadata_max_age_ms=60_000)
    assert c.next_refresh_at(0) <= 0
    c.update_from_metadata(response(), now=1000)
    assert c.next_refresh_at(1000) == 61_000


def test_requested_refresh_waits_for_backoff_since_last_attempt() -> None:
    c = cache(retry_backoff_ms=100, retry_backoff_max_ms=1000, rng=random.Random(3))
    c.update_from_metadata(response(), now=1000)
    due = c.request_refresh("NotLeaderOrFollowerError", now=1010)
    assert 1080 <= due <= 1120 and c.next_refresh_at(1010) == due
    assert c.next_refresh_at(2000) == 2000          # overdue: due now


def test_failed_refreshes_back_off_exponentially() -> None:
    c = cache(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    c._backoff.jitter = 0.0  # exact numbers for the schedule
    c.update_from_metadata(response(), now=0)
    c.request_refresh("x", now=0)
    delays = []
    t = 100.0
    for _ in range(5):
        delays.append(c.on_refresh_failed(t))
        t = c.next_refresh_at(t)
    assert delays == [200, 400, 800, 1000, 1000]
    c.update_from_metadata(response(), now=t)
    assert c.failures == 0


def test_refresh_requested_during_flight_stays_pending() -> None:
    c = cache(metadata_max_age_ms=60_000)
    c.update_from_metadata(response(), now=0)
    token = c.begin_refresh(now=500)
    c.request_refresh("NotLeaderOrFollowerError", now=510)     # arrives while the request is out
    c.update_from_metadata(response(), now=520, token=token)
    assert c.next_refresh_at(5000) == 5000                      # still due, not 60 s later
    token = c.begin_refresh(now=5000)
    c.update_from_metadata(response(), now=5010, token=token)
    assert c.next_refresh_at(5010) == 65_010
