"""Rebalance planning for the classic consumer protocol, sans-IO: what to revoke, what is lost, what the
leader hands out, and whether the member must rejoin.

These are the decisions of the Java client's ``ConsumerCoordinator`` (``onJoinPrepare``,
``onLeaderElected``, ``onJoinComplete``) as pure functions over sets of partitions and the decoded
ConsumerProtocolSubscription / ConsumerProtocolAssignment payloads (dicts named as Kafka's JSON specs;
``akresil.net.group_classic`` turns them into bytes). The rebalance protocol rules (KIP-429):

- eager: before joining, the member revokes *everything* it owns; after the rebalance it is assigned its
  new set from scratch;
- cooperative: before joining it revokes only partitions of topics it no longer subscribes to; after the
  rebalance it revokes what it owned but was not given back, and if it revoked anything it rejoins at once
  so the follow-up rebalance can hand those partitions to their new owner.

A member whose generation was reset (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, session expiry) no longer owns
anything: its partitions are *lost* (another member may already consume them), never committed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..errors import ProtocolError
from ..types import TopicPartition
from .assignors import Assignment, Assignor, RebalanceProtocol, Subscription

#: versions akresil writes (the newest of each payload; readers tolerate newer, Java does the same)
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3


@dataclass(frozen=True, slots=True)
class PreparePlan:
    """What to do before sending JoinGroup: ``revoke`` (commit first, then on_partitions_revoked) or
    ``lost`` (on_partitions_lost, no commit); ``keep`` is what the member still owns while joining."""

    revoke: frozenset[TopicPartition]
    lost: frozenset[TopicPartition]
    keep: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class AssignPlan:
    """What to do with a SyncGroup assignment: revoke first, then take ``assigned`` and report ``added``."""

    assigned: frozenset[TopicPartition]
    revoke: frozenset[TopicPartition]
    added: frozenset[TopicPartition]
    #: why the member must rejoin right away (cooperative revocation, or an assignment outside the
    #: subscription); None when the rebalance is complete
    rejoin: str | None


def plan_join_prepare(protocol: RebalanceProtocol, owned: Iterable[TopicPartition], subscribed: Iterable[str],
                      *, generation_reset: bool) -> PreparePlan:
    """Java's ``onJoinPrepare``."""
    owned_set = frozenset(owned)
    if generation_reset:
        return PreparePlan(revoke=frozenset(), lost=owned_set, keep=frozenset())
    if protocol == "eager":
        return PreparePlan(revoke=owned_set, lost=frozenset(), keep=frozenset())
    if protocol != "cooperative":
        raise ValueError(f"rebalance protocol must be 'eager' or 'cooperative', got {protocol!r}")
    topics = set(subscribed)
    revoke = frozenset(tp for tp in owned_set if tp.topic not in topics)
    return PreparePlan(revoke=revoke, lost=frozenset(), keep=owned_set - revoke)


def plan_assignment(protocol: RebalanceProtocol, owned: Iterable[TopicPartition],
                    assigned: Iterable[TopicPartition], subscribed: Iterable[str]) -> AssignPlan:
    """Java's ``onJoinComplete``: an eager member owns nothing here (it revoked all before joining)."""
    owned_set, assigned_set = frozenset(owned), frozenset(assigned)
    topics = set(subscribed)
    rejoin: str | None = None
    outside = sorted({tp.topic for tp in assigned_set if tp.topic not in topics})
    if outside:
        # the leader used an older view of our subscription: take what matches, ask for a fresh assignment
        assigned_set = frozenset(tp for tp in assigned_set if tp.topic in topics)
        rejoin = f"assignment names topics outside the subscription: {', '.join(outside)}"
    if protocol == "eager":
        revoke = owned_set - assigned_set  # normally empty: revoked before joining
    elif protocol == "cooperative":
        revoke = owned_set - assigned_set
        if revoke and rejoin is None:
            rejoin = f"revoked {len(revoke)} partition(s) in a cooperative rebalance"
    else:
        raise ValueError(f"rebalance protocol must be 'eager' or 'cooperative', got {protocol!r}")
    return AssignPlan(assigned=assigned_set, revoke=revoke, added=assigned_set - owned_set, rejoin=rejoin)


# ---------------------------------------------------------------------------- payload dicts
def _grouped(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]


def _ungrouped(entries: Any, what: str) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    for entry in entries or ():
        try:
            topic, parts = entry["topic"], entry["partitions"]
        except (KeyError, TypeError) as exc:
            raise ProtocolError(f"{what}: malformed topic entry {entry!r}") from exc
        out.extend(TopicPartition(topic, int(p)) for p in parts or ())
    return out


def subscription_body(topics: Iterable[str], *, owned: Iterable[TopicPartition], generation_id: int,
                      user_data: bytes | None, rack_id: str | None = None) -> dict[str, Any]:
    """ConsumerProtocolSubscription (v3 fields) for one JoinGroup protocol entry."""
    return {"topics": sorted(set(topics)), "user_data": user_data, "owned_partitions": _grouped(owned),
            "generation_id": generation_id, "rack_id": rack_id}


def parse_subscription(body: Mapping[str, Any], group_instance_id: str | None = None) -> Subscription:
    """A member's decoded ConsumerProtocolSubscription as the leader's assignor wants it."""
    try:
        topics = list(body["topics"] or ())
    except (KeyError, TypeError) as exc:
        raise ProtocolError(f"ConsumerProtocolSubscription without topics: {body!r}") from exc
    try:
        return Subscription(topics=topics, user_data=body.get("user_data"),
                            owned_partitions=_ungrouped(body.get("owned_partitions"), "ConsumerProtocolSubscription"),
                            generation_id=int(body.get("generation_id", -1)), rack_id=body.get("rack_id"),
                            group_instance_id=group_instance_id)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed ConsumerProtocolSubscription: {exc}") from exc


def assignment_body(assignment: Assignment) -> dict[str, Any]:
    return {"assigned_partitions": _grouped(assignment.partitions), "user_data": assignment.user_data}


def parse_assignment(body: Mapping[str, Any]) -> Assignment:
    try:
        return Assignment(_ungrouped(body.get("assigned_partitions"), "ConsumerProtocolAssignment"),
                          body.get("user_data"))
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed ConsumerProtocolAssignment: {exc}") from exc


# ---------------------------------------------------------------------------- the leader
def leader_assign(assignor: Assignor, partition_counts: Mapping[str, int],
                  subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
    """Run the group's assignor and check its answer: every member gets an entry (an empty one at least),
    no partition goes to two members, none outside the topics' partition counts."""
    result = dict(assignor.assign(partition_counts, subscriptions))
    unknown = set(result) - set(subscriptions)
    if unknown:
        raise ValueError(f"assignor {assignor.name!r} assigned to non-members: {sorted(unknown)}")
    seen: dict[TopicPartition, str] = {}
    for member, assignment in result.items():
        for tp in assignment.partitions:
            if tp.partition >= partition_counts.get(tp.topic, 0):
                raise ValueError(f"assignor {assignor.name!r} assigned {tp} which does not exist")
            if tp in seen:
                raise ValueError(f"assignor {assignor.name!r} assigned {tp} to both {seen[tp]!r} and {member!r}")
            seen[tp] = member
    for member in subscriptions:
        result.setdefault(member, Assignment([]))
    return result


def partition_counts(topics: Iterable[str], counts_of: Mapping[str, Mapping[int, Any]]) -> dict[str, int]:
    """Partition count per topic from a metadata snapshot's ``topics`` (topics it does not know are left
    out: the assignors skip them, as Java's do)."""
    out: dict[str, int] = {}
    for t in topics:
        parts = counts_of.get(t)
        if parts:
            out[t] = len(parts)
    return out
