"""Cluster metadata cache: copy-on-write snapshots, leader epochs that never roll back, KIP-951 hints.

Readers on the hot path (partitioner, accumulator drain) read ``cache.snapshot``, an immutable value that is
swapped whole on every change; nothing locks and nothing is copied per read (Java's 3.7 hint code lost
throughput to lock contention until it moved to this shape, KAFKA-16226). Updates copy only the topics they
touch.

Leader epochs only move forward: a Metadata response that reports an older epoch for a partition than the
cache knows (a stale broker, or a refresh racing a KIP-951 hint) keeps the cached partition. An epoch of -1
(unknown: old Metadata versions) counts as older than any known epoch. A topic whose id changed was deleted
and recreated, so its partitions are replaced whatever their epochs.

Refresh scheduling is KIP-580 backoff plus ``metadata_max_age_ms``: a requested refresh is due once the
backoff since the previous attempt has passed, an unrequested one when the data is older than the max age.
The cache also holds the topics the client wants metadata for (``want_topics`` / ``set_topics``), because two
answers are not failures and must not wait ``retry_backoff_ms`` (issue 18: the first record to a new topic
waited ~100 ms behind the bootstrap answer's backoff):

* A topic no request has asked about yet is due at once: the backoff after a successful answer exists to
  coalesce repeated refresh requests, and no earlier answer can hold a topic nobody asked for (Java's
  ``requestUpdateForNewTopics`` does the same). Only a failure backoff (the last request failed) still holds.
* An answer in which a wanted topic is not ready (LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION when the
  request allowed auto-creation, or partitions without a leader) is a topic being created or electing: the
  next refresh is due at once, then after 1, 2, 4 ... ms (doubling, jittered) up to ``retry_backoff_max_ms``.
  The fast part is short and bounded: about seven answers in, the wait is ``retry_backoff_ms`` again.

A refresh asked for while a request is out normally stays pending when its answer lands: a broker's error
(NOT_LEADER_OR_FOLLOWER, a lost connection) may postdate the answer being written. A refresh asked for because
the cache *lacks* something (``missing=True``: a partition with no leader or no leader endpoint yet) joins the
request in flight instead, as every refresh does in Java's client (one Metadata request at a time, answered for
all who asked): that answer is the one it waits for, and a second one right after it carries the same. At
10,000 partitions the consumer's first plans, made while the first answer was on its way, fetched all of it
twice (issue 35). A topic wanted since the request went out is not in it and still gets its own request.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple

from ..errors import ProtocolError
from ..types import TopicPartition
from . import events
from .backoff import ExponentialBackoff, RandomSource
from .events import Hooks

UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
INVALID_TOPIC = 17
#: first wait (ms) of the schedule for a topic that is not ready yet; doubles per answer (after one re-ask at once)
PENDING_TOPIC_BACKOFF_MS = 1.0
ZERO_UUID = bytes(16)


def pending_topic_backoff(retry_backoff_max_ms: float, rng: RandomSource | None = None) -> ExponentialBackoff:
    """The schedule for re-asking about a topic that is not ready yet: ``backoff_ms(n)`` after the n+1-th
    such answer is 0 (at once), then 1, 2, 4 ... ms, capped at ``retry_backoff_max_ms``."""
    return ExponentialBackoff(min(PENDING_TOPIC_BACKOFF_MS, retry_backoff_max_ms), retry_backoff_max_ms, rng=rng)


class BrokerInfo(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class PartitionInfo(NamedTuple):
    topic: str
    partition: int
    leader: int              # -1: no leader right now
    leader_epoch: int        # -1: unknown (Metadata < v7)
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline: tuple[int, ...] = ()
    error_code: int = 0


class LeaderHint(NamedTuple):
    """A KIP-951 ``CurrentLeader`` from a Produce/Fetch error, with the matching ``NodeEndpoints`` entry."""

    tp: TopicPartition
    leader_id: int
    leader_epoch: int
    endpoint: BrokerInfo | None = None


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    """One immutable view of the cluster. Never mutate the mappings: the cache shares them between views."""

    brokers: Mapping[int, BrokerInfo] = field(default_factory=dict)
    topics: Mapping[str, Mapping[int, PartitionInfo]] = field(default_factory=dict)
    topic_ids: Mapping[str, bytes] = field(default_factory=dict)
    #: topic -> error code of the last response that named it with an error (e.g. 3 unknown, 5 no leader)
    topic_errors: Mapping[str, int] = field(default_factory=dict)
    cluster_id: str | None = None
    controller_id: int = -1
    #: bumped on every change; lets callers notice a new view cheaply
    generation: int = 0

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        parts = self.topics.get(tp.topic)
        return None if parts is None else parts.get(tp.partition)

    def leader_of(self, tp: TopicPartition) -> tuple[int, int] | None:
        """``(leader id, leader epoch)`` or None when the partition or its leader is unknown.

        A leader missing from ``brokers`` counts as unknown: a broker that is down is left out of the brokers
        list while the partitions it led may still name it, and there is no address to connect to. Treating it
        as a leader made the producer try to connect to it in a loop, every try failing at once.
        """
        parts = self.topics.get(tp.topic)
        if parts is None:
            return None
        info = parts.get(tp.partition)
        if info is None or info.leader < 0 or info.leader not in self.brokers:
            return None
        return info.leader, info.leader_epoch

    def partitions_for(self, topic: str) -> tuple[int, ...]:
        parts = self.topics.get(topic)
        return tuple(sorted(parts)) if parts else ()

    def available_partitions(self, topic: str) -> tuple[int, ...]:
        parts = self.topics.get(topic)
        brokers = self.brokers
        return tuple(sorted(p for p, info in parts.items() if info.leader in brokers)) if parts else ()

    def topic_name(self, topic_id: bytes) -> str | None:
        for name, tid in self.topic_ids.items():
            if tid == topic_id:
                return name
        return None


class MetadataUpdate(NamedTuple):
    """What one Metadata response changed."""

    changed_leaders: list[TopicPartition]
    #: partitions kept because the response carried an older leader epoch than the cache
    stale: list[TopicPartition]
    removed_topics: list[str]


def _endpoint(value: Any, node_id: int) -> BrokerInfo:
    if isinstance(value, BrokerInfo):
        return value
    if isinstance(value, Mapping):
        try:
            return BrokerInfo(int(value.get("node_id", node_id)), str(value["host"]), int(value["port"]),
                              value.get("rack"))
        except KeyError as exc:
            raise ValueError(f"leader hint endpoint lacks {exc.args[0]!r}: {value!r}") from None
    if isinstance(value, tuple) and len(value) in (2, 3):
        return BrokerInfo(node_id, str(value[0]), int(value[1]), value[2] if len(value) == 3 else None)
    raise TypeError(f"leader hint endpoint must be BrokerInfo, a mapping or (host, port[, rack]), got {value!r}")


def _field(obj: Mapping[str, Any], key: str, where: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        raise ProtocolError(f"Metadata response: {where} lacks field {key!r}") from None
    except TypeError:
        raise ProtocolError(f"Metadata response: {where} is not a mapping: {obj!r}") from None


class MetadataCache:
    """The client's metadata: ``snapshot`` for readers, update/hint/refresh-scheduling methods for the shell."""

    def __init__(self, *, retry_backoff_ms: float = 100, retry_backoff_max_ms: float = 1000,
                 metadata_max_age_ms: float = 300_000, rng: RandomSource | None = None,
                 hooks: Hooks | None = None, auto_create_topics: bool = False) -> None:
        if metadata_max_age_ms < 0:
            raise ValueError(f"metadata_max_age_ms: must be >= 0, got {metadata_max_age_ms!r}")
        self.snapshot = MetadataSnapshot()
        self.metadata_max_age_ms = float(metadata_max_age_ms)
        rng = rng if rng is not None else random.Random()
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms, rng=rng)
        self._pending_backoff = pending_topic_backoff(retry_backoff_max_ms, rng)
        self._hooks = hooks if hooks is not None else Hooks()
        #: the Metadata requests ask brokers to create unknown topics (UNKNOWN_TOPIC_OR_PARTITION: not ready yet)
        self.auto_create_topics = auto_create_topics
        self._failures = 0
        self._allowed_at = 0.0            # no attempt before this (KIP-580 backoff since the last attempt)
        self._failed_until = 0.0          # the part of it a failed request set: holds even new topics
        self._last_success_at: float | None = None
        self._need_update = True          # nothing known yet
        self._request_version = 0
        #: the request version the newest merged answer covers (``answered``)
        self._answered_version = -1
        self._causes: list[str] = ["bootstrap"]
        self._wanted: set[str] = set()
        self._all_topics = False
        #: wanted topics no request has carried yet
        self._unasked: set[str] = set()
        #: consecutive answers in which some wanted topic was not ready
        self._pending_answers = 0

    # ------------------------------------------------------------------ wanted topics
    @property
    def wanted_topics(self) -> tuple[str, ...]:
        return tuple(sorted(self._wanted))

    @property
    def all_topics(self) -> bool:
        """Requests ask for every topic (a pattern subscription)."""
        return self._all_topics

    def want_topics(self, topics: Iterable[str], now: float, *, reason: str = "new-topic") -> float | None:
        """Add topics to the requests; if any is new, a refresh is due at once (see the module notes).

        Returns when the refresh is due, or None when every topic was wanted already.
        """
        new = set(topics) - self._wanted
        if not new:
            return None
        self._wanted |= new
        self._unasked |= new
        return self.request_refresh(reason, now)

    def set_topics(self, topics: Iterable[str], now: float, *, all_topics: bool = False,
                   reason: str = "subscription") -> float:
        """Replace the wanted topics; asks for a refresh (at once when a topic is new)."""
        wanted = set(topics)
        self._unasked = (self._unasked & wanted) | (wanted - self._wanted)
        if all_topics and not self._all_topics:
            self._unasked.add("*")
        self._wanted, self._all_topics = wanted, all_topics
        return self.request_refresh(reason, now)

    # ------------------------------------------------------------------ refresh scheduling
    @property
    def refresh_causes(self) -> tuple[str, ...]:
        return tuple(self._causes)

    @property
    def failures(self) -> int:
        return self._failures

    def request_refresh(self, reason: str, now: float, *, missing: bool = False) -> float:
        """Ask for a refresh as soon as the backoff allows; returns when it is due.

        ``missing``: the cache lacks something (no leader, no endpoint) rather than holding something a broker
        said is stale: a request already in flight answers it (module notes)."""
        self._need_update = True
        if not missing:
            self._request_version += 1
        if reason not in self._causes:
            self._causes.append(reason)
        due = self.next_refresh_at(now)
        self._hooks.emit(events.METADATA_REFRESH_REQUESTED, cause=reason, due_at=due)
        return due

    @property
    def request_version(self) -> int:
        """Bumped by every refresh asked for because something may be stale (``request_refresh`` without
        ``missing``); ``answered(v)`` tells when an answer to a request sent at or after version ``v`` merged."""
        return self._request_version

    def answered(self, version: int) -> bool:
        """Whether an answer to a Metadata request that went out at or after ``request_version == version`` was
        merged: what the cluster said after the caller asked, not before."""
        return self._answered_version >= version

    def begin_refresh(self, now: float) -> int:
        """Note that a Metadata request is going out; pass the token to ``update_from_metadata``.

        A refresh requested after this point (say a NOT_LEADER_OR_FOLLOWER arriving while the request is in
        flight) stays pending when the response lands, since the response may predate what caused it. The
        wanted topics go out with this request: none is new any more.
        """
        self._unasked.clear()
        return self._request_version

    def next_refresh_at(self, now: float) -> float:
        """Absolute time the next refresh is due (may be <= now: due already)."""
        if self._need_update or self._last_success_at is None:
            expire_at = now
        else:
            expire_at = self._last_success_at + self.metadata_max_age_ms
        if self._unasked:        # a topic nobody asked for yet: only a failure backoff holds it
            return max(expire_at, self._failed_until)
        return max(expire_at, self._allowed_at)

    def on_refresh_failed(self, now: float) -> float:
        """A Metadata request failed at ``now``; back off exponentially. Returns the backoff in ms."""
        self._failures += 1
        delay = self._backoff.backoff_ms(self._failures + 1)
        self._allowed_at = self._failed_until = now + delay
        self._hooks.emit(events.METADATA_REFRESH_FAILED, failures=self._failures, backoff_ms=delay)
        return delay

    def forget_brokers(self, now: float) -> None:
        """Rebootstrap (KIP-899, ``core.rebootstrap``): drop every broker's address and ask for a refresh at
        once, which then goes to the bootstrap servers. Topics and leader epochs stay: the brokers keep their
        ids, and the next answer names their new addresses."""
        old = self.snapshot
        self.snapshot = MetadataSnapshot(
            brokers={}, topics=old.topics, topic_ids=old.topic_ids, topic_errors=old.topic_errors,
            cluster_id=old.cluster_id, controller_id=-1, generation=old.generation + 1)
        self._failures = 0
        self._allowed_at = self._failed_until = now
        self.request_refresh("rebootstrap", now)

    # ------------------------------------------------------------------ updates
    def update_from_metadata(self, response: Mapping[str, Any], now: float, *,
                             token: int | None = None) -> MetadataUpdate:
        """Merge a decoded Metadata response (snake_case dict, any version) into a new snapshot."""
        old = self.snapshot
        brokers_field = _field(response, "brokers", "response")
        topics_field = _field(response, "topics", "response")
        brokers: dict[int, BrokerInfo] = {}
        for b in brokers_field or ():
            node_id = int(_field(b, "node_id", "broker"))
            brokers[node_id] = BrokerInfo(node_id, str(_field(b, "host", "broker")), int(_field(b, "port", "broker")),
                                          b.get("rack"))
        topics = dict(old.topics)
        topic_ids = dict(old.topic_ids)
        topic_errors = dict(old.topic_errors)
        changed: list[TopicPartition] = []
        stale: list[TopicPartition] = []
        removed: list[str] = []
        # wanted topics this answer shows as being created or without a leader (not failures: re-ask soon),
        # found in the same pass (a second walk over 10,000 topics cost a quarter of the merge)
        wanted = self._wanted
        not_ready: list[str] = []
        for t in topics_field or ():
            name = _field(t, "name", "topic")
            if name is None:
                continue  # v10+ may name topics by id only in requests; responses always carry the name
            error = int(t.get("error_code", 0) or 0)
            if error and name in wanted and (error == LEADER_NOT_AVAILABLE or (
                    error == UNKNOWN_TOPIC_OR_PARTITION and self.auto_create_topics)):
                not_ready.append(name)
            tid = t.get("topic_id")
            if error in (UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC):
                if topics.pop(name, None) is not None:
                    removed.append(name)
                topic_ids.pop(name, None)
                topic_errors[name] = error
                continue
            if error:
                topic_errors[name] = error
            else:
                topic_errors.pop(name, None)
            previous = topics.get(name, {})
            old_id = topic_ids.get(name)
            recreated = bool(tid) and tid != ZERO_UUID and old_id is not None and old_id != tid
            if tid and tid != ZERO_UUID:
                topic_ids[name] = bytes(tid)
            partitions_field = t.get("partitions")
            if error and not partitions_field:
                continue  # e.g. LEADER_NOT_AVAILABLE while the topic is created: keep what we had
            parts: dict[int, PartitionInfo] = {}
            # once per partition of every answer (10,000 at 10,000 partitions): the NamedTuples are built with
            # ``tuple.__new__`` (their Python-level ``__new__`` costs more than the rest of the loop)
            new = tuple.__new__
            # a refresh mostly repeats what the cache holds: an equal partition keeps its cached object, and a
            # topic none of whose partitions changed keeps its mapping, so the new snapshot shares them and the
            # answer's copies die young (fewer objects for the collector to walk and promote; issue 35)
            fresh = 0
            leaderless = False
            for p in partitions_field or ():
                try:
                    index, leader = int(p["partition_index"]), int(p["leader_id"])
                except (KeyError, TypeError):
                    # a missing field or a partition that is no mapping: the error names which
                    index = int(_field(p, "partition_index", f"topic {name!r} partition"))
                    leader = int(_field(p, "leader_id", f"topic {name!r} partition {index}"))
                if leader < 0:
                    leaderless = True
                epoch = p.get("leader_epoch")
                replicas, isr, offline = p.get("replica_nodes"), p.get("isr_nodes"), p.get("offline_replicas")
                info = new(PartitionInfo, (
                    name, index, leader, -1 if epoch is None else int(epoch),
                    tuple(replicas) if replicas else (), tuple(isr) if isr else (),
                    tuple(offline) if offline else (), int(p.get("error_code", 0) or 0)))
                known = None if recreated else previous.get(index)
                if known is not None and known.leader_epoch > info.leader_epoch:
                    parts[index] = known     # never roll a leader epoch back
                    tp = TopicPartition(name, index)
                    stale.append(tp)
                    self._hooks.emit(events.STALE_METADATA_IGNORED, topic=name, partition=index,
                                     known_epoch=known.leader_epoch, received_epoch=info.leader_epoch)
                    continue
                if known is None or known.leader != leader or known.leader_epoch != info.leader_epoch:
                    changed.append(new(TopicPartition, (name, index)))
                elif info == known:
                    parts[index] = known
                    continue
                fresh += 1
                parts[index] = info
            topics[name] = previous if not fresh and not recreated and len(parts) == len(previous) else parts
            if leaderless and not error and name in wanted:
                not_ready.append(name)
        # a partition kept for its newer epoch may lead on a node this (stale) response does not list
        for tp in stale:
            leader = topics[tp.topic][tp.partition].leader
            if leader >= 0 and leader not in brokers and leader in old.brokers:
                brokers[leader] = old.brokers[leader]
        if not brokers_field:
            brokers = dict(old.brokers)
        cluster_id = response.get("cluster_id", old.cluster_id)
        controller_id = response.get("controller_id")
        self.snapshot = MetadataSnapshot(
            brokers=brokers, topics=topics, topic_ids=topic_ids, topic_errors=topic_errors, cluster_id=cluster_id,
            controller_id=old.controller_id if controller_id is None else int(controller_id),
            generation=old.generation + 1)
        # refresh bookkeeping
        causes = tuple(self._causes)
        self._failures = 0
        self._failed_until = 0.0
        self._last_success_at = now
        covered = self._request_version if token is None else token
        if covered > self._answered_version:
            self._answered_version = covered
        if token is None or token >= self._request_version:
            self._need_update = False
            self._causes = []
        if not_ready:
            # a topic being created or electing: re-ask at once, then on the short doubling schedule
            self._pending_answers += 1
            self._allowed_at = now + self._pending_backoff.backoff_ms(self._pending_answers - 1)
            self.request_refresh("topic-not-ready", now)
        else:
            self._pending_answers = 0
            self._allowed_at = now + self._backoff.backoff_ms(1)
        self._hooks.emit(events.METADATA_REFRESH, causes=causes, brokers=len(brokers), topics=len(topics),
                         stale_partitions=len(stale), not_ready=not_ready)
        return MetadataUpdate(changed, stale, removed)

    def apply_leader_hint(self, tp: TopicPartition, leader_id: int, leader_epoch: int,
                          endpoint: BrokerInfo | Mapping[str, Any] | tuple[Any, ...] | None = None) -> bool:
        """Adopt a KIP-951 leader hint if it advances the partition's leader epoch; returns whether it did.

        Skipped when incomplete (id or epoch < 0), for a partition the cache does not know, when the epoch
        does not advance, or when it names a node the cache does not know and brings no endpoint.
        """
        old = self.snapshot
        reason = self._hint_rejection(old, tp, leader_id, leader_epoch, endpoint)
        if reason is not None:
            self._hooks.emit(events.LEADER_HINT, topic=tp.topic, partition=tp.partition, leader_id=leader_id,
                             leader_epoch=leader_epoch, accepted=False, reason=reason)
            return False
        parts = dict(old.topics[tp.topic])
        parts[tp.partition] = parts[tp.partition]._replace(leader=leader_id, leader_epoch=leader_epoch)
        topics = dict(old.topics)
        topics[tp.topic] = parts
        brokers = old.brokers
        if endpoint is not None:
            info = _endpoint(endpoint, leader_id)
            if info.node_id != leader_id:
                raise ValueError(f"leader hint for {tp}: endpoint is for node {info.node_id}, leader is {leader_id}")
            if old.brokers.get(leader_id) != info:
                brokers = dict(old.brokers)
                brokers[leader_id] = info
        self.snapshot = MetadataSnapshot(
            brokers=brokers, topics=topics, topic_ids=old.topic_ids, topic_errors=old.topic_errors,
            cluster_id=old.cluster_id, controller_id=old.controller_id, generation=old.generation + 1)
        self._hooks.emit(events.LEADER_HINT, topic=tp.topic, partition=tp.partition, leader_id=leader_id,
                         leader_epoch=leader_epoch, accepted=True, reason="advanced")
        return True

    def apply_leader_hints(self, hints: Iterable[LeaderHint]) -> list[bool]:
        return [self.apply_leader_hint(h.tp, h.leader_id, h.leader_epoch, h.endpoint) for h in hints]

    @staticmethod
    def _hint_rejection(snapshot: MetadataSnapshot, tp: TopicPartition, leader_id: int, leader_epoch: int,
                        endpoint: object) -> str | None:
        if leader_id is None or leader_epoch is None or leader_id < 0 or leader_epoch < 0:
            return "incomplete"
        known = snapshot.partition(tp)
        if known is None:
            return "unknown-partition"
        if leader_epoch <= known.leader_epoch:
            return "not-advancing"
        if endpoint is None and leader_id not in snapshot.brokers:
            return "unknown-node"
        return None
