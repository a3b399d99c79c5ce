"""Metadata cache: epochs never roll back, KIP-951 hint acceptance rules, copy-on-write, refresh timing."""

from __future__ import annotations

import random

import pytest

from akresil.core.events import LEADER_HINT, Hooks, RecordingHook
from akresil.core.metadata import BrokerInfo, MetadataCache, pending_topic_backoff
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
    with pytest.raises(ProtocolError, match="topic 't' partition 0 lacks field 'leader_id'"):
        cache().update_from_metadata(bad, now=0)
    bad = response()
    del bad["topics"][0]["partitions"][1]["partition_index"]
    with pytest.raises(ProtocolError, match="topic 't' partition lacks field 'partition_index'"):
        cache().update_from_metadata(bad, now=0)
    bad = response()
    bad["topics"][0]["partitions"][0] = [0, 1]
    with pytest.raises(ProtocolError, match="topic 't' partition is not a mapping"):
        cache().update_from_metadata(bad, now=0)


def test_partition_infos_are_built_whole() -> None:
    c = cache()
    c.update_from_metadata(response(brokers=(1, 2, 3)), now=0)
    info = c.snapshot.partition(TP)
    assert type(info).__name__ == "PartitionInfo" and info.leader == 1 and info.leader_epoch == 5
    assert info.replicas == (1, 2, 3) and info.isr == (1, 2, 3) and info.offline == () and info.error_code == 0


def test_a_refresh_that_changes_nothing_keeps_the_cached_objects() -> None:
    c = cache()
    c.update_from_metadata(response(brokers=(1, 2, 3)), now=0)
    before = c.snapshot
    update = c.update_from_metadata(response(brokers=(1, 2, 3)), now=10)
    assert update.changed_leaders == [] and c.snapshot.generation == before.generation + 1
    assert c.snapshot.topics["t"] is before.topics["t"]
    assert c.snapshot.topics["t"][0] is before.topics["t"][0]


@pytest.mark.parametrize("change", [
    {"isr_nodes": [1, 2]}, {"replica_nodes": [1, 2, 4]}, {"offline_replicas": [3]}, {"error_code": 9},
    {"leader_id": 2}, {"leader_epoch": 6},
])
def test_a_refresh_replaces_exactly_the_partitions_that_changed(change: dict) -> None:
    # what keeping cached objects must not hide: any field of a partition, not only its leader and epoch
    c = cache()
    c.update_from_metadata(response(brokers=(1, 2, 3)), now=0)
    before = c.snapshot
    answer = response(brokers=(1, 2, 3))
    answer["topics"][0]["partitions"][1].update(change)
    c.update_from_metadata(answer, now=10)
    after = c.snapshot.topics["t"]
    assert after is not before.topics["t"] and before.topics["t"][1].isr == (1, 2, 3)   # the old view is intact
    assert after[0] is before.topics["t"][0]
    expected = {"isr_nodes": "isr", "replica_nodes": "replicas", "offline_replicas": "offline",
                "error_code": "error_code", "leader_id": "leader", "leader_epoch": "leader_epoch"}
    (key, value), = change.items()
    got = getattr(after[1], expected[key])
    assert got == (tuple(value) if isinstance(value, list) else value)


def test_a_refresh_with_fewer_or_more_partitions_replaces_the_topic() -> None:
    c = cache()
    c.update_from_metadata(response(partitions=2), now=0)
    c.update_from_metadata(response(partitions=1), now=10)
    assert c.snapshot.partitions_for("t") == (0,)
    c.update_from_metadata(response(partitions=3), now=20)
    assert c.snapshot.partitions_for("t") == (0, 1, 2)


def test_a_recreated_topic_with_equal_partitions_gets_new_ones() -> None:
    c = cache()
    c.update_from_metadata(response(), now=0)
    before = c.snapshot
    c.update_from_metadata(response(topic_id=bytes(range(1, 17))), now=10)
    assert c.snapshot.topics["t"] is not before.topics["t"] and c.snapshot.topic_ids["t"] == bytes(range(1, 17))


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


def test_a_refresh_for_missing_leaders_joins_the_request_in_flight() -> None:
    # issue 35: the consumer's plans, made while the first answer for 10,000 partitions was on its way, asked
    # for their leaders again, and all of it was fetched twice
    c = cache(metadata_max_age_ms=60_000)
    c.update_from_metadata(response(), now=0)
    c.request_refresh("startup", now=400)
    token = c.begin_refresh(now=500)
    c.request_refresh("fetch-unknown-leader", now=510, missing=True)
    c.update_from_metadata(response(), now=520, token=token)
    assert c.next_refresh_at(520) == 60_520                     # answered by the request that was out
    # with no request out it is a refresh as any other, and a broker's error during one stays pending
    c.request_refresh("fetch-unknown-leader", now=600, missing=True)
    assert c.next_refresh_at(600) < 1000                        # after the backoff since the answer
    token = c.begin_refresh(now=620)
    c.request_refresh("fetch-unknown-leader", now=625, missing=True)
    c.request_refresh("NotLeaderOrFollowerError", now=630)
    c.update_from_metadata(response(), now=640, token=token)
    assert c.next_refresh_at(5000) == 5000


def test_a_refresh_for_missing_leaders_of_a_topic_wanted_after_the_request_went_out_stays_pending() -> None:
    c = cache(metadata_max_age_ms=60_000)
    c.update_from_metadata(response(), now=0)
    token = c.begin_refresh(now=500)
    c.want_topics(["new"], now=505)                             # not in the request that is out
    c.request_refresh("fetch-unknown-leader", now=510, missing=True)
    c.update_from_metadata(response(), now=520, token=token)
    assert c.next_refresh_at(520) == 520


# ------------------------------------------------------------------ new and not-ready topics (issue 18)
def topic_answer(name: str, error: int = 0, leaders: tuple[int, ...] = (1,)) -> dict:
    return {"brokers": [{"node_id": 1, "host": "h1", "port": 9001, "rack": None}],
            "topics": [{"error_code": error, "name": name, "topic_id": TID, "is_internal": False,
                        "partitions": [{"error_code": 0, "partition_index": p, "leader_id": lead, "leader_epoch": 0}
                                       for p, lead in enumerate(leaders)] if not error else []}]}


def test_a_new_topic_is_asked_for_at_once_not_after_the_backoff_of_the_previous_answer() -> None:
    hook = RecordingHook()
    c = cache(retry_backoff_ms=100, hooks=Hooks([hook]))
    c.update_from_metadata(response(), now=1000)                 # bootstrap: next refresh coalesced ~100 ms out
    assert c.request_refresh("NotLeaderOrFollowerError", now=1001) >= 1080
    assert c.want_topics(["new"], now=1002) == 1002              # nothing failed, no answer can hold "new"
    assert c.next_refresh_at(1002) == 1002 and c.wanted_topics == ("new",)
    assert c.want_topics(["new"], now=1003) is None              # already wanted: nothing new to ask
    c.begin_refresh(now=1003)                                   # the request carries it
    assert c.want_topics(["new"], now=1004) is None
    c.update_from_metadata(topic_answer("new"), now=1010)
    assert c.snapshot.leader_of(TopicPartition("new", 0)) == (1, 0)
    assert c.next_refresh_at(1010) == 1010 + 300_000               # ready: nothing more to ask
    assert hook.named("metadata_refresh")[-1]["not_ready"] == []


def test_a_failure_backoff_still_holds_a_new_topic() -> None:
    c = cache(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    c._backoff.jitter = 0.0
    c.update_from_metadata(response(), now=0)
    c.request_refresh("x", now=0)
    assert c.on_refresh_failed(100) == 200                     # the request failed: a real failure
    assert c.want_topics(["new"], now=110) == 300
    c.update_from_metadata(response(), now=300)
    assert c.want_topics(["newer"], now=301) == 301             # the failure is over: new topics go at once


@pytest.mark.parametrize("answer", [
    topic_answer("new", error=5),                               # LEADER_NOT_AVAILABLE: being created
    topic_answer("new", error=3),                               # UNKNOWN_TOPIC_OR_PARTITION, auto-create asked
    topic_answer("new", leaders=(1, -1)),                       # partitions, one without a leader
], ids=["leader-not-available", "unknown-auto-create", "leaderless-partition"])
def test_a_topic_not_ready_is_re_asked_at_once_then_on_a_short_doubling_schedule(answer: dict) -> None:
    c = cache(retry_backoff_ms=100, retry_backoff_max_ms=1000, auto_create_topics=True)
    c._backoff.jitter = c._pending_backoff.jitter = 0.0
    c.update_from_metadata(response(), now=0)
    c.want_topics(["new"], now=10)
    waits = []
    t = 10.0
    for _ in range(12):
        c.begin_refresh(now=t)
        c.update_from_metadata(answer, now=t)
        due = c.next_refresh_at(t)
        waits.append(due - t)
        t = due
    assert waits == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]   # bounded by retry_backoff_max_ms
    assert "topic-not-ready" in c.refresh_causes
    c.begin_refresh(now=t)
    c.update_from_metadata(topic_answer("new"), now=t)          # ready: back to the normal rules
    assert c.next_refresh_at(t) == t + 300_000
    c.request_refresh("NotLeaderOrFollowerError", now=t)
    assert c.next_refresh_at(t) == t + 100


def test_unknown_topic_without_auto_creation_is_an_answer_not_a_topic_being_created() -> None:
    c = cache(retry_backoff_ms=100, auto_create_topics=False)
    c._backoff.jitter = 0.0
    c.want_topics(["gone"], now=0)
    c.begin_refresh(now=0)
    c.update_from_metadata(topic_answer("gone", error=3), now=5)
    assert c.snapshot.topic_errors["gone"] == 3
    assert c.next_refresh_at(5) == 5 + 300_000                 # nobody needs more: no refresh loop
    assert c.request_refresh("wait", now=6) == 105              # a waiting producer asks: the usual backoff


def test_topics_not_wanted_do_not_make_an_answer_not_ready() -> None:
    c = cache(retry_backoff_ms=100, auto_create_topics=True)
    c._backoff.jitter = 0.0
    c.want_topics(["mine"], now=0)
    c.begin_refresh(now=0)
    answer = topic_answer("mine")
    answer["topics"] += topic_answer("other", error=5)["topics"]   # e.g. an all-topics answer
    answer["topics"] += topic_answer("leaderless", leaders=(1, -1))["topics"]
    c.update_from_metadata(answer, now=5)
    c.request_refresh("x", now=5)
    assert c.next_refresh_at(5) == 105


def test_set_topics_asks_at_once_only_for_topics_that_are_new() -> None:
    c = cache(retry_backoff_ms=100)
    c._backoff.jitter = 0.0
    c.update_from_metadata(response(), now=0)
    assert c.set_topics(["a", "b"], now=1) == 1
    c.begin_refresh(now=1)
    c.update_from_metadata(response(), now=2)
    assert c.set_topics(["a"], now=3) == 102                    # fewer topics: the usual coalescing
    assert c.set_topics(["a", "c"], now=4) == 4
    assert c.wanted_topics == ("a", "c") and not c.all_topics


def test_pending_topic_schedule_starts_at_once_and_is_capped() -> None:
    b = pending_topic_backoff(500, random.Random(0))
    b.jitter = 0.0
    assert [b.backoff_ms(n) for n in range(12)] == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 500, 500]
