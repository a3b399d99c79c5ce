"""OffsetCommit / OffsetFetch shapes shared by the classic group and the KIP-848 member (``core.group_state``)."""

from __future__ import annotations

from typing import Any

import pytest

from akresil import errors
from akresil.core.group_state import (offset_commit_body, offset_fetch_body, read_offset_fetch,
                                      settle_offset_fetch_errors)
from akresil.net.group_consumer_protocol import ConsumerGroupMember
from akresil.types import TopicPartition as TP

NOT_COORDINATOR = errors.NotCoordinatorError.errno
LOADING = errors.CoordinatorLoadInProgressError.errno


def partitions(*rows: tuple[str, int, int, int]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, p, offset, code in rows:
        topics.setdefault(topic, []).append({"partition_index": p, "committed_offset": offset,
                                             "committed_leader_epoch": -1, "metadata": "", "error_code": code})
    return [{"name": t, "partitions": ps} for t, ps in topics.items()]


def test_bodies_per_version() -> None:
    offsets = {TP("b", 1): (7, 3, "m"), TP("a", 0): (5, -1, "")}
    v6 = offset_commit_body(6, "g", 4, "member", "static-1", offsets)
    assert v6 == {"group_id": "g", "generation_id_or_member_epoch": 4, "member_id": "member", "topics": [
        {"name": "a", "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                                      "committed_metadata": ""}]},
        {"name": "b", "partitions": [{"partition_index": 1, "committed_offset": 7, "committed_leader_epoch": 3,
                                      "committed_metadata": "m"}]}]}
    assert offset_commit_body(7, "g", 4, "member", "static-1", offsets)["group_instance_id"] == "static-1"
    assert offset_fetch_body(6, "g", [TP("a", 1), TP("a", 0)]) == {
        "group_id": "g", "topics": [{"name": "a", "partition_indexes": [0, 1]}]}
    assert offset_fetch_body(8, "g", [TP("a", 0)]) == {
        "groups": [{"group_id": "g", "topics": [{"name": "a", "partition_indexes": [0]}]}], "require_stable": True}


@pytest.mark.parametrize("version", [7, 8])
def test_read_offsets_and_partition_errors(version: int) -> None:
    topics = partitions(("t", 0, 42, 0), ("t", 1, -1, 0), ("t", 2, -1, errors.UnknownTopicOrPartitionError.errno),
                        ("t", 3, -1, LOADING), ("other", 0, 9, 0))
    response = ({"groups": [{"group_id": "g", "error_code": 0, "topics": topics}]} if version >= 8
                else {"error_code": 0, "topics": topics})
    found, failed = read_offset_fetch(version, response, "g", {TP("t", p) for p in range(4)})
    assert found == {TP("t", 0): 42, TP("t", 1): None, TP("t", 2): None}    # not asked for: "other" left out
    assert [(code, type(e)) for code, e in failed] == [(LOADING, errors.CoordinatorLoadInProgressError)]


def test_a_group_error_stands_alone_and_a_missing_group_is_a_protocol_error() -> None:
    response = {"groups": [{"group_id": "g", "error_code": NOT_COORDINATOR, "topics": partitions(("t", 0, 1, 0))}]}
    found, failed = read_offset_fetch(8, response, "g", {TP("t", 0)})
    assert found == {} and [code for code, _ in failed] == [NOT_COORDINATOR]
    with pytest.raises(errors.ProtocolError, match="lacks group 'g'"):
        read_offset_fetch(8, {"groups": [{"group_id": "h", "error_code": 0, "topics": []}]}, "g", {TP("t", 0)})


def test_settle_raises_what_retrying_cannot_mend() -> None:
    lost: list[object] = []
    coord = errors.NotCoordinatorError("x")
    loading = errors.CoordinatorLoadInProgressError("y")
    assert settle_offset_fetch_errors([(NOT_COORDINATOR, coord), (LOADING, loading)], lost.append) is loading
    assert lost == [coord]
    auth = errors.GroupAuthorizationFailedError("z")
    with pytest.raises(errors.GroupAuthorizationFailedError):
        settle_offset_fetch_errors([(errors.GroupAuthorizationFailedError.errno, auth)], lost.append)


def test_the_kip848_member_looks_the_coordinator_up_again_after_an_offset_fetch_says_not_coordinator() -> None:
    """It retried the same node until its deadline before (only its commit path dropped the coordinator)."""

    class Loop:
        coordinator: int | None = 3
        woken = 0

        def wake(self) -> None:
            self.woken += 1

    class Core:
        needs_coordinator = False

    member = ConsumerGroupMember.__new__(ConsumerGroupMember)
    member.group_id, member._loop, member.core = "g", Loop(), Core()     # type: ignore[assignment]
    result: dict[TP, int | None] = {}
    response = {"groups": [{"group_id": "g", "error_code": NOT_COORDINATOR, "topics": []}]}
    last = member._offset_fetch_response(8, response, {TP("t", 0)}, result)
    assert isinstance(last, errors.NotCoordinatorError) and result == {}
    assert member.core.needs_coordinator and member._loop.coordinator is None and member._loop.woken == 1
