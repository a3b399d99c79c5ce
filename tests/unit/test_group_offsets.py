"""OffsetCommit / OffsetFetch shared by the classic group, the KIP-848 member and manual assignment: the shapes
(``core.group_state``) and the one retrying path (``net.group_offsets.GroupOffsets``)."""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest

from akresil import errors
from akresil.core.backoff import ExponentialBackoff
from akresil.core.group_state import (offset_commit_body, offset_fetch_body, read_offset_fetch,
                                      settle_offset_fetch_errors)
from akresil.net.cluster import Lane, lane_of
from akresil.net.group_offsets import GroupOffsets, check_offsets
from akresil.protocol.api import ApiKey
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


class ScriptedCluster:
    """Answers OffsetCommit / OffsetFetch from a script, records (node, api) of each request; the clock moves
    only when the test says so (no real sleeps matter: backoff here is 1 ms)."""

    def __init__(self, answers: list[dict[str, Any] | BaseException]) -> None:
        self.answers = answers
        self.sent: list[tuple[int, ApiKey, dict[str, Any]]] = []

    def clock(self) -> float:
        return 0.0

    async def request(self, node: int, api: ApiKey, body: Any, **kw: Any) -> tuple[int, dict[str, Any]]:
        self.sent.append((node, api, body(8) if callable(body) else body))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return 8, answer


class Coordinators:
    """Stands in for the ``CoordinatorTracker``: the coordinator is ``nodes[0]`` until told it moved (then the
    next one); records why."""

    key = "g"

    def __init__(self, nodes: list[int], lost: list[BaseException]) -> None:
        self.nodes, self.lost_why = nodes, lost

    async def get(self, deadline_ms: float | None = None) -> int:
        return self.nodes[0]

    def lost(self, why: BaseException) -> None:
        self.lost_why.append(why)
        self.nodes.pop(0)


def offsets_client(cluster: ScriptedCluster, nodes: list[int], lost: list[BaseException]) -> GroupOffsets:
    return GroupOffsets(cluster, Coordinators(nodes, lost), request_timeout_ms=60_000,  # type: ignore[arg-type]
                        backoff=ExponentialBackoff(1, 1, rng=random.Random(0), jitter=0.0))


def test_offset_fetch_asks_the_next_coordinator_after_not_coordinator() -> None:
    """The KIP-848 member retried the same node until its deadline once (only its commit path dropped the
    coordinator); both protocols now share this path."""
    cluster = ScriptedCluster([
        {"groups": [{"group_id": "g", "error_code": NOT_COORDINATOR, "topics": []}]},
        {"groups": [{"group_id": "g", "error_code": 0, "topics": partitions(("t", 0, 42, 0))}]}])
    lost: list[BaseException] = []
    got = anyio.run(offsets_client(cluster, [3, 4], lost).fetch, [TP("t", 0), TP("t", 0)])
    assert got == {TP("t", 0): 42}
    # to the coordinators' broker ids; the cluster puts OffsetFetch on their group connections
    assert [node for node, _, _ in cluster.sent] == [3, 4]
    assert lane_of(ApiKey.OFFSET_FETCH) is Lane.GROUP and lane_of(ApiKey.OFFSET_COMMIT) is Lane.GROUP
    assert len(lost) == 1 and isinstance(lost[0], errors.NotCoordinatorError)


def commit_answer(code: int) -> dict[str, Any]:
    return {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": code}]}]}


def test_commit_retries_what_the_member_lets_it_and_carries_each_attempts_identity() -> None:
    cluster = ScriptedCluster([commit_answer(NOT_COORDINATOR), errors.KafkaConnectionError("reset"),
                               commit_answer(errors.StaleMemberEpochError.errno), commit_answer(0)])
    lost: list[BaseException] = []
    epochs = iter([5, 5, 6, 7])
    judged: list[int] = []

    def judge(code: int, error: errors.KafkaError) -> None:
        judged.append(code)

    async def main() -> None:
        pending = {TP("t", 0): (10, -1, "")}
        await offsets_client(cluster, [1, 2, 3], lost).commit(
            pending, identity=lambda: (next(epochs), "m"), instance_id=None, judge=judge)
        assert pending == {}

    anyio.run(main)
    assert [(node, body["generation_id_or_member_epoch"]) for node, _, body in cluster.sent] == [
        (1, 5), (2, 5), (3, 6), (3, 7)]
    assert judged == [NOT_COORDINATOR, errors.StaleMemberEpochError.errno]
    assert [type(e) for e in lost] == [errors.NotCoordinatorError, errors.KafkaConnectionError]


def test_commit_stops_where_the_member_judges_it_must() -> None:
    cluster = ScriptedCluster([commit_answer(errors.FencedMemberEpochError.errno)])

    def judge(code: int, error: errors.KafkaError) -> None:
        raise errors.CommitFailedError("fenced") from error

    async def main() -> None:
        with pytest.raises(errors.CommitFailedError):
            await offsets_client(cluster, [1], []).commit(
                {TP("t", 0): (10, -1, "")}, identity=lambda: (5, "m"), instance_id=None, judge=judge)

    anyio.run(main)
    assert len(cluster.sent) == 1


@pytest.mark.parametrize(("code", "raised"), [(errors.UnknownMemberIdError.errno, errors.CommitFailedError),
                                              (errors.RebalanceInProgressError.errno, errors.CommitFailedError),
                                              (errors.OffsetMetadataTooLargeError.errno,
                                               errors.OffsetMetadataTooLargeError)])
def test_manual_assignment_commits_as_no_member(code: int, raised: type[Exception]) -> None:
    """A consumer without a subscription commits through the same path with generation -1 and no member id: no
    group member stands behind it. Transient errors retry; the group's rebalance errors fail the commit."""
    cluster = ScriptedCluster([commit_answer(LOADING), commit_answer(0), commit_answer(code)])

    async def main() -> None:
        client = offsets_client(cluster, [1], [])
        await client.commit(check_offsets({TP("t", 0): (10, None, None)}))
        with pytest.raises(raised):
            await client.commit(check_offsets({TP("t", 0): (11, 2, "m")}))

    anyio.run(main)
    bodies = [body for _, _, body in cluster.sent]
    assert [(b["generation_id_or_member_epoch"], b["member_id"]) for b in bodies] == [(-1, "")] * 3
    assert bodies[2]["topics"][0]["partitions"][0] == {"partition_index": 0, "committed_offset": 11,
                                                       "committed_leader_epoch": 2, "committed_metadata": "m"}
