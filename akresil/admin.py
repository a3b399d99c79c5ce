"""Admin client: topics, consumer groups and their offsets, configs, partitions (and their reassignments),
records, ACLs, SCRAM credentials, client quotas, producers and transactions, and the operations side: log
directories, feature levels and the KRaft metadata quorum.

Each request goes to the node that can answer it: a group's (or transactional id's) coordinator found with
FindCoordinator, a partition's leader from Metadata, the controller, a broker named by a config resource, or the
least loaded node. Calls over many items (groups, partitions, resources) are driven by ``core.admin_call``:
every item gets its own result (``ItemResults``: the value, or that item's error), transient errors (coordinator
or leader moved, connection lost, coordinator loading) are retried for the pending items only, rerouted when the
route went stale, with the KIP-580 backoff, and the whole call is bounded by ``default_api_timeout_ms`` (or the
call's ``timeout_ms``). CreateTopics/DeleteTopics keep their controller retry loop.
"""

from __future__ import annotations

import base64
import logging
import secrets
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, TypeVar

import anyio

from . import __version__, errors
from .admin_types import (ACL_OPERATIONS, ACL_PERMISSIONS, ACL_RESOURCE_TYPES, ALTER_CONFIG_OPS, CONFIG_RESOURCE_TYPES,
                          CONFIG_SOURCES, CONFIG_TYPES, ELECTION_TYPES, FEATURE_UPGRADE_TYPES, MEMBER_TYPES,
                          PATTERN_TYPES, SCRAM_MECHANISMS, AclBinding, AclBindingFilter, AlterConfigOp,
                          ClientQuotaEntity, ClientQuotaFilter, ClientQuotaOp, ConfigEntry, ConfigResource,
                          ConfigSynonym, FeatureMetadata, GroupDescription, GroupListing, GroupOffset,
                          LogDirDescription, MemberDescription, NewPartitions, PartitionReassignment, ProducerIdAndEpoch,
                          ProducerState,
                          QuorumEndpoint, QuorumInfo, QuorumReplica, ReplicaInfo, ReplicaLogDirInfo,
                          ScramCredentialInfo, ScramDeletion, ScramUpsertion, ShareGroupOffset, TopicPartitionReplica,
                          TransactionDescription, TransactionListing, VersionRange, code_of, name_of)
from .checks import EARLIEST as EARLIEST, LATEST as LATEST  # public here too (akresil.admin.EARLIEST)
from .checks import (INT16_MAX, INT32_MAX, as_list, check_group_id, check_new_topic, check_timeout, check_topic_name,
                     group_id_list, is_int, no_duplicate_topics, offset_requests, offset_values, partition_list,
                     str_list, topic_names)
from .client_runtime import ClientLifecycle, ClientRuntime
from .core.admin_call import AdminCall, ItemResults, error_from
from .core.metadata import pending_topic_backoff
from .net.coordinator import GROUP, TRANSACTION
from .net.router import Router
from .protocol.api import ApiKey, decode_versioned
from .types import NewTopic, TopicPartition, partitions_by_topic

if TYPE_CHECKING:
    from typing import Unpack

    from .config_keys import AdminConfig
    from .protocol.messages import (AlterUserScramCredentialsRequestScramCredentialDeletion as ScramDeletionBody,
                                    AlterUserScramCredentialsRequestScramCredentialUpsertion as ScramUpsertionBody,
                                    AlterClientQuotasRequestEntityData, CreateTopicsRequest, DeleteTopicsRequest,
                                    DescribeAclsRequest, DescribeShareGroupOffsetsRequestTopic, LeaveGroupRequest,
                                    LeaveGroupRequestMemberIdentity,
                                    ElectLeadersRequestTopicPartitions, OffsetCommitRequest, OffsetDeleteRequest,
                                    OffsetFetchRequest, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
                                    UpdateFeaturesRequest)

log = logging.getLogger(__name__)

K = TypeVar("K")


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: bytes
    is_internal: bool
    partitions: tuple[PartitionDescription, ...]


@dataclass(frozen=True)
class BrokerDescription:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerDescription, ...] = field(default_factory=tuple)


class Admin(ClientLifecycle):
    """Cluster administration. Use as ``async with Admin(bootstrap_servers=...) as admin``.

    Keyword arguments are the admin configuration keys (docs/configuration.md); ``default_api_timeout_ms``
    (60 s) bounds each call with all its retries, and every call also takes ``timeout_ms=`` to override it."""

    def __init__(self, **config: Unpack[AdminConfig]) -> None:
        self._runtime = rt = ClientRuntime("admin", "admin", "Admin", config)
        self.config, self.hooks, self._cluster = rt.config, rt.hooks, rt.cluster
        self._router = Router(self._cluster, default_timeout_ms=self.config.default_api_timeout_ms)
        #: a created topic that Metadata does not show with leaders yet is not a failure: re-ask soon
        self._pending_backoff = pending_topic_backoff(self.config.retry_backoff_max_ms)

    async def start(self) -> None:
        """Bootstrap; the background tasks live until ``close()``, which any task may call (``async with``)."""
        await self._runtime.start()

    async def close(self) -> None:
        """Close every connection and stop the metadata refresher (``async with`` calls it)."""
        await self._runtime.close()

    # ------------------------------------------------------------------ topics
    async def create_topics(self, topics: Iterable[NewTopic], *, timeout_ms: int = 30_000,
                            validate_only: bool = False, ignore_existing: bool = False) -> None:
        """Create topics; raises the first per-topic error (e.g. ``TopicAlreadyExistsError``)."""
        new = as_list(topics, "create_topics", "NewTopic objects")
        for t in new:
            check_new_topic(t)
        no_duplicate_topics([t.name for t in new], "create_topics")
        check_timeout(timeout_ms)

        def body(version: int) -> CreateTopicsRequest:
            return {"topics": [{
                "name": t.name,
                "num_partitions": -1 if t.replica_assignment else t.num_partitions,
                "replication_factor": -1 if t.replica_assignment else t.replication_factor,
                "assignments": [{"partition_index": p, "broker_ids": list(b)}
                                for p, b in sorted((t.replica_assignment or {}).items())],
                "configs": [{"name": k, "value": v} for k, v in (t.configs or {}).items()],
            } for t in new], "timeout_ms": timeout_ms, "validate_only": validate_only}

        response = await self._router.to_controller(ApiKey.CREATE_TOPICS, body, timeout_ms=timeout_ms)
        for result in response["topics"]:
            code = result.get("error_code", 0)
            if code == errors.TopicAlreadyExistsError.errno and ignore_existing:
                continue
            errors.raise_for_code(code, f"{result['name']}: {result.get('error_message') or ''}".rstrip(": "))
        if not validate_only:
            names = [t.name for t in new]
            await self._wait_topics_visible(names, timeout_ms)

    async def _wait_topics_visible(self, names: list[str], timeout_ms: int) -> None:
        """CreateTopics returns before every broker knows the topic; wait until Metadata shows leaders.

        The topic is being created, nothing failed: re-asked at once, then after 1, 2, 4 ... ms."""
        failures = 0
        with anyio.fail_after(timeout_ms / 1000.0):
            while True:
                md = await self._router.metadata(names)
                ok = all(t.get("error_code", 0) == 0 and t["partitions"]
                         and all(p["leader_id"] >= 0 for p in t["partitions"]) for t in md["topics"])
                if ok:
                    return
                await anyio.sleep(self._pending_backoff.backoff_ms(failures) / 1000.0)
                failures += 1

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int = 30_000) -> None:
        """Delete topics (sent to the controller); raises the first per-topic error."""
        names = topic_names(names, "delete_topics")
        check_timeout(timeout_ms)

        def body(version: int) -> DeleteTopicsRequest:
            return {"topic_names": names, "topics": [{"name": n, "topic_id": bytes(16)} for n in names],
                    "timeout_ms": timeout_ms}

        response = await self._router.to_controller(ApiKey.DELETE_TOPICS, body, timeout_ms=timeout_ms)
        for result in response["responses"]:
            errors.raise_for_code(result.get("error_code", 0), f"{result.get('name')}: {result.get('error_message') or ''}")

    async def list_topics(self) -> list[str]:
        """Names of every non-internal topic, sorted."""
        md = await self._router.metadata(None)
        return sorted(t["name"] for t in md["topics"] if t["name"] is not None and not t.get("is_internal"))

    async def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        """Topic id and each partition's leader, leader epoch, replicas and ISR; raises for an unknown topic."""
        names = topic_names(names, "describe_topics")
        md = await self._router.metadata(names)
        out: dict[str, TopicDescription] = {}
        for t in md["topics"]:
            name = t["name"]
            errors.raise_for_code(t.get("error_code", 0), str(name))
            if name is None:        # asked by name, so every topic in the answer carries one
                raise errors.ProtocolError("Metadata answered a topic without its name")
            out[name] = TopicDescription(
                name=name, topic_id=t.get("topic_id") or bytes(16), is_internal=bool(t.get("is_internal")),
                partitions=tuple(sorted((PartitionDescription(
                    p["partition_index"], p["leader_id"], p.get("leader_epoch", -1),
                    tuple(p.get("replica_nodes", ())), tuple(p.get("isr_nodes", ())))
                    for p in t["partitions"]), key=lambda d: d.partition)))
        return out

    async def describe_cluster(self) -> ClusterDescription:
        """Cluster id, controller and brokers, from a fresh Metadata answer."""
        md = await self._router.metadata([])
        return ClusterDescription(
            cluster_id=md.get("cluster_id"), controller_id=md.get("controller_id", -1),
            brokers=tuple(BrokerDescription(b["node_id"], b["host"], b["port"], b.get("rack"))
                          for b in md["brokers"]))

    async def list_offsets(self, requests: Mapping[TopicPartition, int], *,
                           isolation_level: str = "read_uncommitted", timeout_ms: int | None = None,
                           per_partition: bool = False) -> Any:
        """``{tp: timestamp or EARLIEST/LATEST}`` -> ``{tp: (offset, timestamp)}`` via each partition's leader.

        The offset for a timestamp is the first record at or after it (``-1`` when there is none). Raises the
        first partition's error, or with ``per_partition=True`` returns ``ItemResults`` (each partition's value
        or error). Leader moves and connection losses are retried within ``timeout_ms``
        (default ``default_api_timeout_ms``)."""
        wanted = offset_requests(requests, "list_offsets")
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolation_level: {isolation_level!r} is not 'read_uncommitted' or 'read_committed'")
        results = await self._router.list_offsets(wanted, read_committed=isolation_level == "read_committed",
                                                  timeout_ms=self._timeout(timeout_ms))
        if per_partition:
            return results
        return dict(results.raise_on_error().ok)

    # ------------------------------------------------------------------ per-item calls: routing and retries
    def _timeout(self, timeout_ms: int | None) -> int:
        if timeout_ms is None:
            return int(self.config.default_api_timeout_ms)
        check_timeout(timeout_ms)
        return timeout_ms

    def _call(self, items: Iterable[K], timeout_ms: int | None, what: str) -> AdminCall[K]:
        return self._router.call(items, self._timeout(timeout_ms), what)

    # ------------------------------------------------------------------ consumer groups
    async def list_consumer_groups(self, *, states: Iterable[str] | None = None, types: Iterable[str] | None = None,
                                   timeout_ms: int | None = None) -> list[GroupListing]:
        """Every group on every broker (ListGroups to each node), sorted by id.

        ``states`` ("Stable", "Empty", ...) and ``types`` ("classic", "consumer") filter on the broker where it
        supports the filter (ListGroups v4 / v5) and here otherwise. Raises the first node's error if a node
        cannot answer within the timeout: a partial list would look like missing groups."""
        state_filter = str_list(states, "states")
        type_filter = str_list(types, "types")
        call: AdminCall[int] = self._call(await self._router.all_nodes(), timeout_ms, "ListGroups on node")

        async def route(c: AdminCall[int]) -> dict[int, list[int]]:
            return {node: [node] for node in c.pending}

        wanted_states = {x.lower() for x in state_filter}
        wanted_types = {x.lower() for x in type_filter}

        async def send(node: int, __: list[int]) -> None:
            _, response = await self._cluster.request(node, ApiKey.LIST_GROUPS, lambda v: {
                "states_filter": state_filter if v >= 4 else [], "types_filter": type_filter if v >= 5 else []})
            listed = []
            for g in response["groups"]:
                state, gtype = g.get("group_state") or None, g.get("group_type") or None
                if wanted_states and state is not None and state.lower() not in wanted_states:
                    continue
                if wanted_types and gtype is not None and gtype.lower() not in wanted_types:
                    continue
                listed.append(GroupListing(g["group_id"], g["protocol_type"], state, gtype, node))
            call.answer(node, response.get("error_code", 0), f"ListGroups on node {node}", listed)

        results = await self._router.run(call, route, send)
        results.raise_on_error()
        return sorted((g for node in results for g in results[node]), key=lambda g: g.group_id)

    async def describe_consumer_groups(self, group_ids: Iterable[str], *, timeout_ms: int | None = None
                                       ) -> ItemResults[str, GroupDescription]:
        """State, assignor, members and their assignments of each group, asked from its coordinator.

        Both kinds of consumer group are described: each group is asked with ConsumerGroupDescribe first
        (KIP-848 groups: epochs, target assignments, subscriptions) and, when the coordinator says it is not such
        a group (GROUP_ID_NOT_FOUND) or does not know the API, with DescribeGroups in the same round (classic
        groups), as Java's admin does. ``group_type`` of each description says which protocol the group runs.

        A group neither API describes (one that does not exist, or a share or streams group) is a
        ``GroupIdNotFoundError`` for that item, with the brokers' reasons; share groups are described by
        ``describe_share_groups``."""
        groups = group_id_list(group_ids, "describe_consumer_groups")
        call: AdminCall[str] = self._call(groups, timeout_ms, "describe of group")
        #: groups ConsumerGroupDescribe could not describe, with the broker's reason: asked with DescribeGroups
        classic: dict[str, str] = {}

        async def send(node: int, keys: list[str]) -> None:
            modern = [k for k in keys if k not in classic]
            if modern:
                try:
                    _, response = await self._cluster.request(
                        node, ApiKey.CONSUMER_GROUP_DESCRIBE, {"group_ids": modern,
                                                               "include_authorized_operations": False})
                except errors.UnsupportedVersionError as exc:      # a broker before KIP-848 (Kafka < 3.7/4.0)
                    classic.update(dict.fromkeys(modern, str(exc)))
                else:
                    names = await self._topic_names_of(response["groups"])
                    for g in response["groups"]:
                        gid, code = g["group_id"], g["error_code"]
                        if gid not in call.pending:
                            continue
                        if code in _NOT_A_CONSUMER_GROUP:
                            classic[gid] = g.get("error_message") or errors.error_for_code(code).__name__
                            continue
                        if code == 0 and g["group_epoch"] < 0:
                            # no KIP-848 group has a negative epoch: Tansu 0.6 (a supported embedded broker)
                            # answers every group so, with no members; DescribeGroups knows the group
                            classic[gid] = f"described with group epoch {g['group_epoch']}"
                            continue
                        call.answer(gid, code, f"group {gid!r}",
                                    _kip848_group_description(g, node, "consumer", names) if code == 0 else None,
                                    g.get("error_message"))
            old = [k for k in keys if k in classic and k in call.pending]
            if old:
                await self._describe_classic_groups(call, node, old, classic)

        return await self._router.run(call, self._router.coordinators({g: g for g in groups}, GROUP), send)

    async def _describe_classic_groups(self, call: AdminCall[str], node: int, keys: list[str],
                                       why_not_consumer: Mapping[str, str]) -> None:
        """DescribeGroups for groups ConsumerGroupDescribe did not describe (``why_not_consumer``: its reason)."""
        _, response = await self._cluster.request(
            node, ApiKey.DESCRIBE_GROUPS, {"groups": keys, "include_authorized_operations": False})
        for g in response["groups"]:
            gid, code = g["group_id"], g["error_code"]
            if gid not in call.pending:
                continue
            if code == 0 and g["group_state"] == "Dead":
                call.fail(gid, errors.GroupIdNotFoundError(f"group {gid!r} does not exist"))
            elif code == errors.GroupIdNotFoundError.errno:
                # Kafka 4 answers so for a group it does not know and for one of another kind (share, streams):
                # the brokers' own words tell which
                reasons = dict.fromkeys(r for r in (why_not_consumer.get(gid), g.get("error_message")) if r)
                call.fail(gid, errors.GroupIdNotFoundError(
                    f"group {gid!r} does not exist or is not a consumer group"
                    + (f" ({' '.join(reasons)})" if reasons else "")))
            else:
                call.answer(gid, code, f"group {gid!r}", _group_description(g, node) if code == 0 else None,
                            g.get("error_message"))

    async def describe_share_groups(self, group_ids: Iterable[str], *, timeout_ms: int | None = None
                                    ) -> ItemResults[str, GroupDescription]:
        """State, epochs, assignor, members and their assignments of each KIP-932 share group (ShareGroupDescribe
        to its coordinator); ``group_type`` is "share". A group that does not exist, or is not a share group, is
        a ``GroupIdNotFoundError`` for that item, with the broker's reason."""
        groups = group_id_list(group_ids, "describe_share_groups")
        call: AdminCall[str] = self._call(groups, timeout_ms, "ShareGroupDescribe for group")

        async def send(node: int, keys: list[str]) -> None:
            _, response = await self._cluster.request(
                node, ApiKey.SHARE_GROUP_DESCRIBE, {"group_ids": keys, "include_authorized_operations": False})
            names = await self._topic_names_of(response["groups"])
            for g in response["groups"]:
                gid, code = g["group_id"], g["error_code"]
                if gid in call.pending:
                    call.answer(gid, code, f"share group {gid!r}",
                                _kip848_group_description(g, node, "share", names) if code == 0 else None,
                                g.get("error_message"))

        return await self._router.run(call, self._router.coordinators({g: g for g in groups}, GROUP), send)

    async def _topic_names_of(self, groups: Iterable[Mapping[str, Any]]) -> dict[bytes, str]:
        """``{topic id: name}`` for the assignments of describe answers that name a topic by id only."""
        return await self._names_of_ids(_unnamed_topic_ids(groups))

    async def _names_of_ids(self, unnamed: set[bytes]) -> dict[bytes, str]:
        """``{topic id: name}`` covering ``unnamed``, the ids of topics an answer gave without their name.

        Brokers send the name beside the id; where one is empty the name comes from metadata, refreshed once
        when the id is not known yet. Empty when every topic is named (no metadata request then)."""
        if not unnamed:
            return {}
        known = {tid: name for name, tid in self._cluster.metadata.snapshot.topic_ids.items()}
        if not unnamed <= known.keys():
            await self._router.metadata(None)
            known = {tid: name for name, tid in self._cluster.metadata.snapshot.topic_ids.items()}
        return known

    # ------------------------------------------------------------------ share groups (KIP-932)
    async def list_share_group_offsets(
            self, groups: Iterable[str] | Mapping[str, Iterable[TopicPartition] | None], *,
            timeout_ms: int | None = None) -> ItemResults[str, dict[TopicPartition, ShareGroupOffset]]:
        """Each share group's start offset, leader epoch and lag on every partition it has state for
        (DescribeShareGroupOffsets to its coordinator), as Java's ``listShareGroupOffsets``.

        ``groups``: group ids (every partition of each), or ``{group_id: partitions or None}``. A partition the
        group has no state for (never read, or not there) has a ``start_offset`` of None. Kafka 4.4 answers a
        group that does not exist, or is not a share group, with no partitions rather than an error
        (``describe_share_groups`` tells which); a partition's error fails its group."""
        where = "list_share_group_offsets"
        if isinstance(groups, Mapping):
            ids = group_id_list(list(groups), where)
            wanted = {g: None if groups[g] is None else partition_list(groups[g], f"{where}: partitions of {g!r}")
                      for g in ids}
        else:
            wanted = dict.fromkeys(group_id_list(groups, where))
        call: AdminCall[str] = self._call(list(wanted), timeout_ms, "DescribeShareGroupOffsets for group")

        def topics(g: str) -> list[DescribeShareGroupOffsetsRequestTopic] | None:
            tps = wanted[g]
            return None if tps is None else [{"topic_name": t, "partitions": ps}
                                             for t, ps in partitions_by_topic(tps).items()]

        async def send(node: int, keys: list[str]) -> None:
            version, response = await self._cluster.request(node, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, {
                "groups": [{"group_id": g, "topics": topics(g)} for g in keys]})
            answered = [g for g in response["groups"] if g["group_id"] in call.pending]
            names = await self._names_of_ids({bytes(t["topic_id"]) for g in answered for t in g["topics"]
                                              if not t["topic_name"]})
            for g in answered:
                gid, code, message = g["group_id"], g["error_code"], g.get("error_message")
                offsets: dict[TopicPartition, ShareGroupOffset] = {}
                for t in g["topics"]:
                    tid = bytes(t["topic_id"])
                    topic = t["topic_name"] or names.get(tid) or topic_id_text(tid)
                    for p in t["partitions"]:
                        tp = TopicPartition(topic, p["partition_index"])
                        if p["error_code"] and not code:    # e.g. COORDINATOR_LOAD_IN_PROGRESS: retried for the group
                            code = p["error_code"]
                            message = f"{tp.topic}-{tp.partition}: {p.get('error_message') or ''}"
                        start, epoch, lag = p["start_offset"], p["leader_epoch"], p.get("lag", -1)
                        offsets[tp] = ShareGroupOffset(start if start >= 0 else None, epoch if epoch >= 0 else None,
                                                       lag if lag >= 0 else None)
                call.answer(gid, code, f"share group {gid!r}", dict(sorted(offsets.items())), message)
            _fail_unanswered(call, keys, {g["group_id"] for g in answered},
                             f"DescribeShareGroupOffsets v{version} (node {node})")

        return await self._router.run(call, self._router.coordinators({g: g for g in wanted}, GROUP), send)

    async def alter_share_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int], *,
                                        timeout_ms: int | None = None) -> ItemResults[TopicPartition, None]:
        """Set a share group's start offset on each partition (``{tp: offset}``): the group's members get
        records from there on, as Java's ``alterShareGroupOffsets`` (``kafka-share-groups.sh --reset-offsets``).

        The group must have no members: Kafka refuses otherwise (``NonEmptyGroupError`` naming the group, for
        every partition); stop the share consumers first. A consumer group's id fails with
        ``GroupIdNotFoundError``; an id no group has yet makes Kafka 4.4 create the share group with these
        offsets."""
        check_group_id(group_id, "group_id")
        if not isinstance(offsets, Mapping):
            raise TypeError(f"offsets: expected a mapping {{TopicPartition: offset}}, got {type(offsets).__name__}")
        starts: dict[TopicPartition, int] = {}
        for tp, offset in zip(partition_list(list(offsets), "offsets"), offsets.values()):
            if not is_int(offset) or offset < 0:
                raise ValueError(f"offsets: offset for {tp.topic}-{tp.partition} must be an int >= 0, got {offset!r}")
            starts[tp] = offset
        if not starts:
            raise ValueError("alter_share_group_offsets: no partitions given")
        call: AdminCall[TopicPartition] = self._call(list(starts), timeout_ms,
                                                     f"AlterShareGroupOffsets (share group {group_id!r})")

        async def send(node: int, tps: list[TopicPartition]) -> None:
            _, response = await self._cluster.request(node, ApiKey.ALTER_SHARE_GROUP_OFFSETS, {
                "group_id": group_id, "topics": [{"topic_name": t, "partitions": [
                    {"partition_index": p, "start_offset": starts[TopicPartition(t, p)]} for p in ps]}
                    for t, ps in partitions_by_topic(tps).items()]})
            if response["error_code"]:
                for tp in tps:
                    call.answer(tp, response["error_code"], f"share group {group_id!r}", None,
                                response.get("error_message"))
                return
            answered: set[TopicPartition] = set()
            for t in response["responses"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["topic_name"], p["partition_index"])
                    answered.add(tp)
                    call.answer(tp, p["error_code"], f"{tp.topic}-{tp.partition} of share group {group_id!r}", None,
                                p.get("error_message"))
            _fail_unanswered(call, tps, answered, f"AlterShareGroupOffsets (node {node})")

        return await self._router.run(call, self._router.coordinators({tp: group_id for tp in starts}, GROUP), send)

    async def delete_share_group_offsets(self, group_id: str, topics: Iterable[str], *,
                                         timeout_ms: int | None = None) -> ItemResults[str, None]:
        """Forget a share group's state on every partition of ``topics`` (per-topic results), as Java's
        ``deleteShareGroupOffsets``: the group no longer reads them, and starts afresh
        (``share.auto.offset.reset``) if it subscribes again. The group must have no members
        (``NonEmptyGroupError`` naming the group otherwise)."""
        check_group_id(group_id, "group_id")
        names = topic_names(topics, "delete_share_group_offsets")
        if not names:
            raise ValueError("delete_share_group_offsets: no topics given")
        call: AdminCall[str] = self._call(names, timeout_ms, f"DeleteShareGroupOffsets (share group {group_id!r})")

        async def send(node: int, keys: list[str]) -> None:
            _, response = await self._cluster.request(node, ApiKey.DELETE_SHARE_GROUP_OFFSETS, {
                "group_id": group_id, "topics": [{"topic_name": t} for t in keys]})
            if response["error_code"]:
                for t in keys:
                    call.answer(t, response["error_code"], f"share group {group_id!r}", None,
                                response.get("error_message"))
                return
            for r in response["responses"]:
                call.answer(r["topic_name"], r["error_code"], f"topic {r['topic_name']!r} of share group {group_id!r}",
                            None, r.get("error_message"))
            _fail_unanswered(call, keys, {r["topic_name"] for r in response["responses"]},
                             f"DeleteShareGroupOffsets (node {node})")

        return await self._router.run(call, self._router.coordinators({t: group_id for t in names}, GROUP), send)

    async def delete_share_groups(self, group_ids: Iterable[str], *, timeout_ms: int | None = None
                                  ) -> ItemResults[str, None]:
        """Delete share groups and their state (DeleteGroups); a group with members fails with
        ``NonEmptyGroupError``.

        Kafka's DeleteGroups deletes a group of any type, so each group is first asked with ShareGroupDescribe in
        the same round: one that is not a share group (a consumer group named by mistake) is not deleted and fails
        with ``GroupIdNotFoundError`` carrying the broker's reason, as a group that does not exist."""
        return await self._delete_groups(group_ids, timeout_ms, share=True)

    async def delete_consumer_groups(self, group_ids: Iterable[str], *, timeout_ms: int | None = None
                                     ) -> ItemResults[str, None]:
        """Delete groups (and their committed offsets); a group with members fails with ``NonEmptyGroupError``.

        Kafka's DeleteGroups deletes a group of any type, so where the coordinator knows share groups each group
        is first asked with ShareGroupDescribe in the same round: a share group named here by mistake is not
        deleted and fails with ``GroupIdNotFoundError`` saying so (``delete_share_groups`` deletes it)."""
        return await self._delete_groups(group_ids, timeout_ms, share=False)

    async def _delete_groups(self, group_ids: Iterable[str], timeout_ms: int | None, *, share: bool
                             ) -> ItemResults[str, None]:
        """DeleteGroups for the groups of one kind (``share``: share groups, else consumer groups) after one
        ShareGroupDescribe in the same round tells which each is; a group of the other kind fails unharmed. Share
        groups: the broker must know the API, and a group its answer leaves out fails at once. Consumer groups: a
        broker without the API has no share groups, so all are deleted."""
        where, what = ("delete_share_groups", "share group") if share else ("delete_consumer_groups", "group")
        groups = group_id_list(group_ids, where)
        call: AdminCall[str] = self._call(groups, timeout_ms, f"DeleteGroups for {what}")

        async def send(node: int, keys: list[str]) -> None:
            try:
                _, described = await self._cluster.request(
                    node, ApiKey.SHARE_GROUP_DESCRIBE, {"group_ids": keys, "include_authorized_operations": False})
                kinds = described["groups"]
            except errors.UnsupportedVersionError:
                if share:
                    raise
                kinds = []                           # a broker without share groups has none to delete by mistake
            held: set[str] = set()                   # answered here (the other kind, or a share group's error)
            for g in kinds:
                gid, code = g["group_id"], g["error_code"]
                if gid not in call.pending or (code == 0) == share:
                    continue                         # the kind asked for (a consumer group may carry an error)
                held.add(gid)
                if share:
                    call.answer(gid, code, f"share group {gid!r}", None, g.get("error_message"))
                else:
                    call.answer(gid, errors.GroupIdNotFoundError.errno, f"group {gid!r}", None,
                                "it is a share group, not a consumer group: delete_share_groups deletes it")
            if share:
                _fail_unanswered(call, keys, {g["group_id"] for g in kinds}, f"ShareGroupDescribe (node {node})")
            keys = [k for k in keys if k in call.pending and k not in held]
            if not keys:
                return
            _, response = await self._cluster.request(node, ApiKey.DELETE_GROUPS, {"groups_names": keys})
            for r in response["results"]:
                call.answer(r["group_id"], r["error_code"], f"{what} {r['group_id']!r}")
            if share:
                _fail_unanswered(call, keys, {r["group_id"] for r in response["results"]},
                                 f"DeleteGroups (node {node})")

        return await self._router.run(call, self._router.coordinators({g: g for g in groups}, GROUP), send)

    async def list_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None,
                                          *, with_lag: bool = True, require_stable: bool = False,
                                          timeout_ms: int | None = None) -> dict[TopicPartition, GroupOffset]:
        """The group's committed offsets (every partition it committed, or ``partitions``) with the log end
        offset and the lag (``log_end - committed``) of each partition, as kafka-consumer-groups.sh shows them.

        ``require_stable`` (Java's ``requireStable``, off by default as there): while a transaction that sent
        offsets for the group is open, wait for it to end (the broker answers UNSTABLE_OFFSET_COMMIT until then,
        for up to the transaction's timeout when its producer died) instead of returning the last committed ones.

        Group-level errors (unknown coordinator after the timeout, authorization) raise; a partition whose log
        end cannot be read keeps ``log_end``/``lag`` None rather than hiding the other partitions."""
        check_group_id(group_id, "group_id")
        wanted = None if partitions is None else partition_list(partitions, "partitions")
        call: AdminCall[str] = self._call([group_id], timeout_ms, "OffsetFetch for group")

        by_topic = None if wanted is None else partitions_by_topic(wanted)

        def body(version: int) -> OffsetFetchRequest:
            if version >= 8:
                return {"groups": [{"group_id": group_id, "topics": None if by_topic is None else [
                    {"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}],
                    "require_stable": require_stable}
            return {"group_id": group_id, "topics": None if by_topic is None else [
                {"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
                "require_stable": require_stable and version >= 7}

        async def send(node: int, __: list[str]) -> None:
            version, response = await self._cluster.request(node, ApiKey.OFFSET_FETCH, body, min_version=2,
                                                            max_version=9)
            if version >= 8:
                g = next((g for g in response["groups"] if g["group_id"] == group_id), None)
                if g is None:
                    raise errors.ProtocolError(f"OffsetFetch v{version} answer lacks group {group_id!r}")
                code = g.get("error_code", 0)
                # v8-v9 name each topic (only v10+ may answer by topic id, and max_version is 9)
                answered: list[tuple[str, OffsetFetchResponsePartition | OffsetFetchResponsePartitions]] = [
                    (t.get("name", ""), p) for t in g["topics"] for p in t["partitions"]]
            else:
                code = response.get("error_code", 0)
                answered = [(t["name"], p) for t in response["topics"] for p in t["partitions"]]
            offsets: dict[TopicPartition, tuple[int | None, str, int | None]] = {}
            for topic, p in answered:
                tp = TopicPartition(topic, p["partition_index"])
                if p["error_code"] == errors.UnknownTopicOrPartitionError.errno:
                    continue                  # as Java: no committed offset for a partition it does not know
                if p["error_code"] and not code:
                    code = p["error_code"]    # e.g. UNSTABLE_OFFSET_COMMIT: retried for the whole group
                committed = p["committed_offset"]
                epoch = p.get("committed_leader_epoch", -1)
                offsets[tp] = (committed if committed >= 0 else None, p.get("metadata") or "",
                               epoch if epoch >= 0 else None)
            call.answer(group_id, code, f"offsets of group {group_id!r}", offsets)

        results = await self._router.run(call, self._router.coordinators({group_id: group_id}, GROUP), send)
        committed: dict[TopicPartition, tuple[int | None, str, int | None]] = results[group_id]
        if wanted is not None:
            committed = {tp: committed.get(tp, (None, "", None)) for tp in wanted}
        ends: dict[TopicPartition, int] = {}
        if with_lag and committed:
            found = await self.list_offsets({tp: LATEST for tp in committed}, per_partition=True)
            ends = {tp: found.ok[tp][0] for tp in committed if tp in found.ok}
        out: dict[TopicPartition, GroupOffset] = {}
        for tp in sorted(committed):
            offset, metadata, epoch = committed[tp]
            end = ends.get(tp)
            lag = max(0, end - offset) if end is not None and offset is not None else None
            out[tp] = GroupOffset(offset, metadata, epoch, end, lag)
        return out

    async def alter_consumer_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, Any], *,
                                           timeout_ms: int | None = None) -> ItemResults[TopicPartition, None]:
        """Set a group's committed offsets: ``{tp: offset}`` or ``{tp: (offset, metadata)}``.

        The group must have no active members (the coordinator answers ``UnknownMemberIdError`` otherwise, as
        for kafka-consumer-groups.sh --reset-offsets): stop the consumers first."""
        check_group_id(group_id, "group_id")
        values = offset_values(offsets, "offsets")
        call: AdminCall[TopicPartition] = self._call(list(values), timeout_ms, f"OffsetCommit (group {group_id!r})")

        async def send(node: int, tps: list[TopicPartition]) -> None:
            body: OffsetCommitRequest = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                    "group_instance_id": None, "retention_time_ms": -1, "topics": [
                        {"name": t, "partitions": [{"partition_index": p, "committed_offset": values[TopicPartition(t, p)][0],
                                                    "committed_leader_epoch": -1,
                                                    "committed_metadata": values[TopicPartition(t, p)][1]}
                                                   for p in ps]} for t, ps in partitions_by_topic(tps).items()]}
            _, response = await self._cluster.request(node, ApiKey.OFFSET_COMMIT, body, max_version=9)
            for t in response["topics"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    call.answer(tp, p["error_code"], f"{tp.topic}-{tp.partition} of group {group_id!r}")

        return await self._router.run(call, self._router.coordinators({tp: group_id for tp in values}, GROUP), send)

    async def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition], *,
                                            timeout_ms: int | None = None) -> ItemResults[TopicPartition, None]:
        """Forget a group's committed offsets for ``partitions`` (OffsetDelete). A partition the group is
        still subscribed to fails with ``GroupSubscribedToTopicError``."""
        check_group_id(group_id, "group_id")
        tps = partition_list(partitions, "partitions")
        call: AdminCall[TopicPartition] = self._call(tps, timeout_ms, f"OffsetDelete (group {group_id!r})")

        async def send(node: int, keys: list[TopicPartition]) -> None:
            body: OffsetDeleteRequest = {"group_id": group_id, "topics": [
                {"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in partitions_by_topic(keys).items()]}
            _, response = await self._cluster.request(node, ApiKey.OFFSET_DELETE, body)
            if response["error_code"]:
                for tp in keys:
                    call.answer(tp, response["error_code"], f"group {group_id!r}")
                return
            for t in response["topics"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    call.answer(tp, p["error_code"], f"{tp.topic}-{tp.partition} of group {group_id!r}")

        return await self._router.run(call, self._router.coordinators({tp: group_id for tp in tps}, GROUP), send)

    async def remove_members_from_consumer_group(
            self, group_id: str, members: Iterable[str | MemberDescription] | None = None, *,
            reason: str | None = None, timeout_ms: int | None = None) -> ItemResults[str, None]:
        """Remove members from a consumer group (Java's removeMembersFromConsumerGroup) with one LeaveGroup (v3+)
        on their behalf, so the group rebalances without them now instead of after their session timeout: e.g.
        the static members of consumers that are gone for good.

        ``members``: group instance ids of static members (or their ``MemberDescription`` from
        ``describe_consumer_groups``); a dynamic member cannot be named, its member id changes as it rejoins.
        ``None`` removes every member: the group is described first and each member is removed by its group
        instance id, or a dynamic one by its member id (as Java does). A consumer still running joins again.

        Each item is keyed by the group instance id (the member id for a dynamic member); one the group does not
        know fails with ``UnknownMemberIdError``. ``reason`` reaches the broker's log (LeaveGroup v5+)."""
        check_group_id(group_id, "group_id")
        call_name = "remove_members_from_consumer_group"
        #: item key -> (member id, group instance id) as LeaveGroup names the member
        targets: dict[str, tuple[str, str | None]] = {}
        if members is None:
            described = (await self.describe_consumer_groups([group_id], timeout_ms=timeout_ms))[group_id]
            for d in described.members:
                targets[d.group_instance_id or d.member_id] = (
                    ("", d.group_instance_id) if d.group_instance_id else (d.member_id, None))
        else:
            for given in as_list(members, call_name, "group instance ids"):
                m = given.group_instance_id if isinstance(given, MemberDescription) else given
                if isinstance(given, MemberDescription) and not m:
                    raise ValueError(f"{call_name}: member {given.member_id!r} of group {group_id!r} has no "
                                     "group_instance_id: only static members can be named (members=None "
                                     "removes every member)")
                if not isinstance(m, str) or not m:
                    raise ValueError(f"{call_name}: expected group instance ids (non-empty str) or "
                                     f"MemberDescription objects, got {m!r}")
                if m in targets:
                    raise ValueError(f"{call_name}: member {m!r} listed twice")
                targets[m] = ("", m)
            if not targets:
                raise ValueError(f"{call_name}: no members given (members=None removes every member)")
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"reason: expected a str, got {type(reason).__name__}")
        why = (reason or "removed by an admin (akresil)")[:255]
        call: AdminCall[str] = self._call(list(targets), timeout_ms, f"LeaveGroup (group {group_id!r}) for member")

        def body_for(keys: list[str]) -> Callable[[int], LeaveGroupRequest]:
            def body(version: int) -> LeaveGroupRequest:
                out: list[LeaveGroupRequestMemberIdentity] = []
                for k in keys:
                    member: LeaveGroupRequestMemberIdentity = {"member_id": targets[k][0],
                                                               "group_instance_id": targets[k][1]}
                    if version >= 5:
                        member["reason"] = why
                    out.append(member)
                return {"group_id": group_id, "members": out}
            return body

        async def send(node: int, keys: list[str]) -> None:
            _, response = await self._cluster.request(node, ApiKey.LEAVE_GROUP, body_for(keys), min_version=3)
            if response["error_code"]:
                for k in keys:
                    call.answer(k, response["error_code"], f"group {group_id!r}")
                return
            answered = set()
            for r in response.get("members", ()):
                k = r["group_instance_id"] or r["member_id"]
                answered.add(k)
                call.answer(k, r["error_code"], f"member {k!r} of group {group_id!r}")
            _fail_unanswered(call, keys, answered, f"LeaveGroup (node {node})")

        return await self._router.run(call, self._router.coordinators({k: group_id for k in targets}, GROUP), send)

    # ------------------------------------------------------------------ configs
    def _route_configs(self, call: AdminCall[ConfigResource]) -> dict[int, list[ConfigResource]]:
        """Broker (and broker logger) resources go to that broker; the rest to the least loaded node."""
        plan: dict[int, list[ConfigResource]] = {}
        brokers = self._cluster.metadata.snapshot.brokers
        for res in list(call.pending):
            if res.type in ("broker", "broker_logger") and res.name:
                if int(res.name) not in brokers:
                    call.fail(res, errors.BrokerNotAvailableError(
                        f"{res.type} {res.name!r}: no broker with node id {res.name} in the cluster metadata "
                        f"(brokers: {sorted(brokers)})"))
                    continue
                plan.setdefault(int(res.name), []).append(res)
            else:
                plan.setdefault(self._cluster.least_loaded_node(), []).append(res)
        return plan

    async def describe_configs(self, resources: Iterable[ConfigResource], *, include_synonyms: bool = False,
                               include_documentation: bool = False, timeout_ms: int | None = None
                               ) -> ItemResults[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource (topic, broker, ...) with its value, source and flags."""
        res = _config_resources(resources, "describe_configs")
        call: AdminCall[ConfigResource] = self._call(res, timeout_ms, "DescribeConfigs for")

        async def send(node: int, keys: list[ConfigResource]) -> None:
            _, response = await self._cluster.request(node, ApiKey.DESCRIBE_CONFIGS, {
                "resources": [{"resource_type": CONFIG_RESOURCE_TYPES[r.type], "resource_name": r.name,
                               "configuration_keys": None} for r in keys],
                "include_synonyms": include_synonyms, "include_documentation": include_documentation})
            for r in response["results"]:
                key = ConfigResource(name_of(CONFIG_RESOURCE_TYPES, r["resource_type"]), r["resource_name"])
                call.answer(key, r["error_code"], f"{key.type} {key.name!r}", _config_entries(r["configs"]),
                            r.get("error_message"))

        async def route(c: AdminCall[ConfigResource]) -> dict[int, list[ConfigResource]]:
            return self._route_configs(c)

        return await self._router.run(call, route, send)

    async def incremental_alter_configs(self, changes: Mapping[ConfigResource, Any], *, validate_only: bool = False,
                                        timeout_ms: int | None = None) -> ItemResults[ConfigResource, None]:
        """Change configs of each resource; other configs keep their values.

        ``changes``: ``{ConfigResource: {"name": "value" or None (delete)}}`` or
        ``{ConfigResource: [AlterConfigOp(...), ...]}`` for append/subtract on list configs."""
        if not isinstance(changes, Mapping):
            raise TypeError(f"changes: expected a mapping {{ConfigResource: changes}}, got {type(changes).__name__}")
        ops = {r: _alter_ops(r, c) for r, c in changes.items()}
        _config_resources(ops, "incremental_alter_configs")
        call: AdminCall[ConfigResource] = self._call(list(ops), timeout_ms, "IncrementalAlterConfigs for")

        async def send(node: int, keys: list[ConfigResource]) -> None:
            _, response = await self._cluster.request(node, ApiKey.INCREMENTAL_ALTER_CONFIGS, {
                "resources": [{"resource_type": CONFIG_RESOURCE_TYPES[r.type], "resource_name": r.name, "configs": [
                    {"name": o.name, "config_operation": ALTER_CONFIG_OPS[o.op], "value": o.value} for o in ops[r]]}
                    for r in keys], "validate_only": validate_only})
            for r in response["responses"]:
                key = ConfigResource(name_of(CONFIG_RESOURCE_TYPES, r["resource_type"]), r["resource_name"])
                call.answer(key, r["error_code"], f"{key.type} {key.name!r}", None, r.get("error_message"))

        async def route(c: AdminCall[ConfigResource]) -> dict[int, list[ConfigResource]]:
            return self._route_configs(c)

        return await self._router.run(call, route, send)

    # ------------------------------------------------------------------ partitions and records
    async def create_partitions(self, new_partitions: Mapping[str, int | NewPartitions], *,
                                validate_only: bool = False, timeout_ms: int | None = None) -> ItemResults[str, None]:
        """Raise topics' partition counts: ``{"orders": 12}`` (the new total) or ``{"orders": NewPartitions(12,
        assignments)}``. Sent to the controller; a count not above the current one fails that topic with
        ``InvalidPartitionsError``."""
        if not isinstance(new_partitions, Mapping):
            raise TypeError(f"new_partitions: expected a mapping {{topic: total count}}, got "
                            f"{type(new_partitions).__name__}")
        wanted = {t: _new_partitions(t, v) for t, v in new_partitions.items()}
        timeout = self._timeout(timeout_ms)
        call: AdminCall[str] = self._call(list(wanted), timeout, "CreatePartitions for topic")

        async def send(node: int, topics: list[str]) -> None:
            _, response = await self._cluster.request(node, ApiKey.CREATE_PARTITIONS, {
                "topics": [{"name": t, "count": wanted[t].total_count,
                            "assignments": None if wanted[t].assignments is None else
                            [{"broker_ids": list(a)} for a in wanted[t].assignments or ()]} for t in topics],
                "timeout_ms": timeout, "validate_only": validate_only})
            for r in response["results"]:
                call.answer(r["name"], r["error_code"], f"topic {r['name']!r}", None, r.get("error_message"))

        return await self._router.run(call, self._router.controller, send)

    async def delete_records(self, before: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
                             ) -> ItemResults[TopicPartition, int]:
        """Delete records before the given offset of each partition (``-1``: up to the high watermark);
        each item's value is the partition's new low watermark. Sent to each partition's leader."""
        if not isinstance(before, Mapping):
            raise TypeError(f"before: expected a mapping {{TopicPartition: offset}}, got {type(before).__name__}")
        offsets = {}
        for tp, offset in before.items():
            tp = partition_list([tp], "before")[0]
            if not is_int(offset) or offset < -1:
                raise ValueError(f"before: offset for {tp.topic}-{tp.partition} must be an int >= 0 or -1 "
                                 f"(the high watermark), got {offset!r}")
            offsets[tp] = offset
        timeout = self._timeout(timeout_ms)
        call: AdminCall[TopicPartition] = self._call(list(offsets), timeout, "DeleteRecords for")

        async def send(node: int, tps: list[TopicPartition]) -> None:
            _, response = await self._cluster.request(node, ApiKey.DELETE_RECORDS, {
                "topics": [{"name": t, "partitions": [{"partition_index": p, "offset": offsets[TopicPartition(t, p)]}
                                                      for p in ps]} for t, ps in partitions_by_topic(tps).items()],
                "timeout_ms": timeout})
            for t in response["topics"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    call.answer(tp, p["error_code"], f"{tp.topic}-{tp.partition}", p["low_watermark"])

        return await self._router.run(call, self._router.leaders, send)

    async def describe_producers(self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None
                                 ) -> ItemResults[TopicPartition, tuple[ProducerState, ...]]:
        """Active idempotent/transactional producers of each partition, from its leader."""
        tps = partition_list(partitions, "partitions")
        call: AdminCall[TopicPartition] = self._call(tps, timeout_ms, "DescribeProducers for")

        async def send(node: int, keys: list[TopicPartition]) -> None:
            _, response = await self._cluster.request(node, ApiKey.DESCRIBE_PRODUCERS, {
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in partitions_by_topic(keys).items()]})
            for t in response["topics"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    call.answer(tp, p["error_code"], f"{tp.topic}-{tp.partition}", tuple(
                        ProducerState(s["producer_id"], s["producer_epoch"], s["last_sequence"], s["last_timestamp"],
                                      s["coordinator_epoch"], s["current_txn_start_offset"])
                        for s in p["active_producers"]), p.get("error_message"))

        return await self._router.run(call, self._router.leaders, send)

    # ------------------------------------------------------------------ transactions
    async def list_transactions(self, *, states: Iterable[str] | None = None,
                                producer_ids: Iterable[int] | None = None, timeout_ms: int | None = None
                                ) -> list[TransactionListing]:
        """Transactions known to every broker's transaction coordinator (ListTransactions to each node)."""
        state_filter = str_list(states, "states")
        pids = [] if producer_ids is None else list(producer_ids)
        if not all(is_int(p) and p >= 0 for p in pids):
            raise ValueError(f"producer_ids: expected ints >= 0, got {pids!r}")
        call: AdminCall[int] = self._call(await self._router.all_nodes(), timeout_ms, "ListTransactions on node")

        async def route(c: AdminCall[int]) -> dict[int, list[int]]:
            return {node: [node] for node in c.pending}

        async def send(node: int, __: list[int]) -> None:
            _, response = await self._cluster.request(node, ApiKey.LIST_TRANSACTIONS, {
                "state_filters": state_filter, "producer_id_filters": pids})
            call.answer(node, response["error_code"], f"ListTransactions on node {node}", [
                TransactionListing(t["transactional_id"], t["producer_id"], t["transaction_state"], node)
                for t in response["transaction_states"]])

        results = await self._router.run(call, route, send)
        results.raise_on_error()
        return sorted((t for node in results for t in results[node]), key=lambda t: t.transactional_id)

    async def describe_transactions(self, transactional_ids: Iterable[str], *, timeout_ms: int | None = None
                                    ) -> ItemResults[str, TransactionDescription]:
        """State, producer id/epoch and partitions of each transaction, from its transaction coordinator."""
        ids = group_id_list(transactional_ids, "describe_transactions", what="transactional ids")
        call: AdminCall[str] = self._call(ids, timeout_ms, "DescribeTransactions for")

        async def send(node: int, keys: list[str]) -> None:
            _, response = await self._cluster.request(node, ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": keys})
            for t in response["transaction_states"]:
                tid = t["transactional_id"]
                call.answer(tid, t["error_code"], f"transactional id {tid!r}", TransactionDescription(
                    tid, t["transaction_state"], t["producer_id"], t["producer_epoch"], t["transaction_timeout_ms"],
                    t["transaction_start_time_ms"],
                    frozenset(TopicPartition(x["topic"], p) for x in t["topics"] for p in x["partitions"]), node))

        return await self._router.run(call, self._router.coordinators({t: t for t in ids}, TRANSACTION), send)

    async def fence_producers(self, transactional_ids: Iterable[str], *, transaction_timeout_ms: int | None = None,
                              timeout_ms: int | None = None) -> ItemResults[str, ProducerIdAndEpoch]:
        """Fence the live producer of each transactional id (Java's fenceProducers, KIP-664): a zombie that
        still holds the id cannot write or commit again, and its open transaction is aborted.

        Each id's transaction coordinator gets InitProducerId for the id with no producer id or epoch, as a new
        producer instance would send: the coordinator bumps the epoch (aborting an open transaction), so the old
        producer's next request fails with ``ProducerFencedError``. Each item's value is the id's new
        ``ProducerIdAndEpoch``. ``transaction_timeout_ms`` is recorded with the id until a producer takes it over
        (default ``request_timeout_ms``, as Java's default). While the abort is still being written the
        coordinator answers CONCURRENT_TRANSACTIONS, which is retried, as are a loading or moved coordinator."""
        ids = group_id_list(transactional_ids, "fence_producers", what="transactional ids")
        txn_timeout = int(self.config.request_timeout_ms) if transaction_timeout_ms is None else transaction_timeout_ms
        if not is_int(txn_timeout) or not 0 < txn_timeout <= INT32_MAX:
            raise ValueError(f"transaction_timeout_ms: expected an int in 1..{INT32_MAX}, got {txn_timeout!r}")
        call: AdminCall[str] = self._call(ids, timeout_ms, "InitProducerId (fence) for")

        async def send(node: int, keys: list[str]) -> None:
            for tid in keys:                          # InitProducerId names one transactional id
                _, response = await self._cluster.request(node, ApiKey.INIT_PRODUCER_ID, {
                    "transactional_id": tid, "transaction_timeout_ms": txn_timeout, "producer_id": -1,
                    "producer_epoch": -1})
                call.answer(tid, response["error_code"], f"fencing transactional id {tid!r}",
                            ProducerIdAndEpoch(response["producer_id"], response["producer_epoch"]))

        return await self._router.run(call, self._router.coordinators({t: t for t in ids}, TRANSACTION), send)

    async def abort_transaction(self, topic_partition: TopicPartition, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int, *, timeout_ms: int | None = None) -> None:
        """Abort a hanging transaction on one partition (Java's abortTransaction, KIP-664): a transaction left
        open there that its coordinator no longer knows of (a partition it never learnt of, a lost marker) holds
        back the last stable offset, so read_committed consumers stop at it.

        Sends WriteTxnMarkers with an abort marker for the producer to the partition's leader, as a transaction
        coordinator would; take ``producer_id``, ``producer_epoch`` and ``coordinator_epoch`` from the
        partition's ``describe_producers`` entry whose ``current_txn_start_offset`` is set (a coordinator epoch of
        -1, none recorded yet, is sent as 0, as kafka-transactions.sh does). The broker requires CLUSTER_ACTION
        on the cluster where an authorizer is set. Raises the partition's error (e.g.
        ``TransactionCoordinatorFencedError`` for a coordinator epoch older than the partition's,
        ``InvalidProducerEpochError`` for an epoch older than the producer's)."""
        tp = partition_list([topic_partition], "topic_partition")[0]
        for name, value, lo, hi in (("producer_id", producer_id, 0, 2**63 - 1),
                                    ("producer_epoch", producer_epoch, 0, INT16_MAX),
                                    ("coordinator_epoch", coordinator_epoch, -1, INT32_MAX)):
            if not is_int(value) or not lo <= value <= hi:
                raise ValueError(f"abort_transaction: {name} must be an int in {lo}..{hi}, got {value!r}")
        what = f"abort of producer {producer_id} (epoch {producer_epoch}) on"
        call: AdminCall[TopicPartition] = self._call([tp], timeout_ms, what)

        async def send(node: int, keys: list[TopicPartition]) -> None:
            _, response = await self._cluster.request(node, ApiKey.WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
                "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}],
                "coordinator_epoch": max(0, coordinator_epoch)}]})
            answered: set[TopicPartition] = set()
            for m in response["markers"]:
                if m["producer_id"] != producer_id:
                    continue
                for t in m["topics"]:
                    for p in t["partitions"]:
                        got = TopicPartition(t["name"], p["partition_index"])
                        answered.add(got)
                        call.answer(got, p["error_code"], f"{what} {got.topic}-{got.partition}")
            _fail_unanswered(call, keys, answered, f"WriteTxnMarkers (node {node})")

        (await self._router.run(call, self._router.leaders, send)).raise_on_error()

    # ------------------------------------------------------------------ ACLs
    async def describe_acls(self, acl_filter: AclBindingFilter | None = None, *, timeout_ms: int | None = None
                            ) -> list[AclBinding]:
        """ACLs matching ``acl_filter`` (default: every ACL)."""
        flt = AclBindingFilter() if acl_filter is None else acl_filter
        if not isinstance(flt, AclBindingFilter):
            raise TypeError(f"acl_filter: expected an AclBindingFilter, got {type(flt).__name__}")
        call: AdminCall[int] = self._call([0], timeout_ms, "DescribeAcls")

        async def send(node: int, __: list[int]) -> None:
            _, response = await self._cluster.request(node, ApiKey.DESCRIBE_ACLS, _acl_filter_body(flt))
            call.answer(0, response["error_code"], "DescribeAcls", [
                _acl_binding(r, a) for r in response["resources"] for a in r["acls"]], response.get("error_message"))

        return list((await self._router.run(call, self._router.any_broker, send))[0])

    async def create_acls(self, bindings: Iterable[AclBinding], *, timeout_ms: int | None = None
                          ) -> ItemResults[AclBinding, None]:
        """Create ACLs; each binding gets its own result."""
        acls = as_list(bindings, "create_acls", "AclBinding objects")
        for b in acls:
            if not isinstance(b, AclBinding):
                raise TypeError(f"bindings: expected AclBinding objects, got {type(b).__name__} {b!r}")
        call: AdminCall[AclBinding] = self._call(acls, timeout_ms, "CreateAcls for")

        async def send(node: int, keys: list[AclBinding]) -> None:
            _, response = await self._cluster.request(node, ApiKey.CREATE_ACLS, {"creations": [{
                "resource_type": ACL_RESOURCE_TYPES[b.resource_type], "resource_name": b.resource_name,
                "resource_pattern_type": PATTERN_TYPES[b.pattern_type], "principal": b.principal, "host": b.host,
                "operation": ACL_OPERATIONS[b.operation], "permission_type": ACL_PERMISSIONS[b.permission]}
                for b in keys]})
            if len(response["results"]) != len(keys):
                raise errors.ProtocolError(f"CreateAcls: {len(keys)} creations, {len(response['results'])} results")
            for b, r in zip(keys, response["results"]):
                call.answer(b, r["error_code"], f"ACL {b}", None, r.get("error_message"))

        return await self._router.run(call, self._router.any_broker, send)

    async def delete_acls(self, filters: Iterable[AclBindingFilter], *, timeout_ms: int | None = None
                          ) -> ItemResults[AclBindingFilter, list[AclBinding]]:
        """Delete the ACLs matching each filter; each filter's value lists the ACLs it deleted."""
        flts = as_list(filters, "delete_acls", "AclBindingFilter objects")
        for f in flts:
            if not isinstance(f, AclBindingFilter):
                raise TypeError(f"filters: expected AclBindingFilter objects, got {type(f).__name__} {f!r}")
        call: AdminCall[AclBindingFilter] = self._call(flts, timeout_ms, "DeleteAcls for")

        async def send(node: int, keys: list[AclBindingFilter]) -> None:
            _, response = await self._cluster.request(node, ApiKey.DELETE_ACLS, {
                "filters": [_acl_filter_body(f) for f in keys]})
            if len(response["filter_results"]) != len(keys):
                raise errors.ProtocolError(
                    f"DeleteAcls: {len(keys)} filters, {len(response['filter_results'])} results")
            for f, r in zip(keys, response["filter_results"]):
                call.answer(f, r["error_code"], f"ACL filter {f}", [_acl_binding(m, m) for m in r["matching_acls"]],
                            r.get("error_message"))

        return await self._router.run(call, self._router.any_broker, send)

    # ------------------------------------------------------------------ leaders
    async def elect_leaders(self, partitions: Iterable[TopicPartition] | None = None, *,
                            election_type: str = "preferred", timeout_ms: int | None = None
                            ) -> ItemResults[TopicPartition, None]:
        """Elect the preferred (or, ``election_type="unclean"``, any) replica as leader of each partition
        (every partition when ``partitions`` is None). Sent to the controller."""
        kind = code_of(ELECTION_TYPES, election_type, "election_type")
        tps = None if partitions is None else partition_list(partitions, "partitions")
        timeout = self._timeout(timeout_ms)
        call: AdminCall[Any] = self._call(tps if tps is not None else ["*"], timeout, "ElectLeaders for")

        async def send(node: int, keys: list[Any]) -> None:
            topics: list[ElectLeadersRequestTopicPartitions] | None = None if keys == ["*"] else [
                {"topic": t, "partitions": ps} for t, ps in partitions_by_topic(keys).items()]
            version, response = await self._cluster.request(node, ApiKey.ELECT_LEADERS, {
                "election_type": kind, "topic_partitions": topics, "timeout_ms": timeout},
                min_version=1 if kind else 0)
            if response.get("error_code"):
                for key in keys:
                    call.answer(key, response["error_code"], "ElectLeaders")
                return
            answered = [(TopicPartition(r["topic"], p["partition_id"]), p) for r in response["replica_election_results"]
                        for p in r["partition_result"]]
            if keys == ["*"]:
                call.expand("*", [tp for tp, _ in answered])
            for tp, p in answered:
                call.answer(tp, p["error_code"], f"{tp.topic}-{tp.partition}", None, p.get("error_message"))

        return _without_placeholder(await self._router.run(call, self._router.controller, send))

    # ------------------------------------------------------------------ partition reassignments
    async def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, Sequence[int] | None], *,
                                            allow_replication_factor_change: bool = True,
                                            timeout_ms: int | None = None) -> ItemResults[TopicPartition, None]:
        """Move partitions to new replicas: ``{tp: [broker ids]}`` (the first is the preferred leader) or
        ``{tp: None}`` to cancel the partition's reassignment in progress. Sent to the controller.

        A partition's result arrives when the controller has accepted the move, not when the data has moved
        (``list_partition_reassignments`` shows what is still running). The leader does not move by itself:
        reordering the same replicas only changes the preferred leader, so follow with ``elect_leaders``.
        ``allow_replication_factor_change=False`` makes the controller refuse a move that changes a
        partition's replica count (needs Kafka 4.1+, AlterPartitionReassignments v1)."""
        if not isinstance(reassignments, Mapping):
            raise TypeError(f"reassignments: expected a mapping {{TopicPartition: [broker ids] or None}}, got "
                            f"{type(reassignments).__name__}")
        wanted: dict[TopicPartition, list[int] | None] = {}
        for tp, replicas in reassignments.items():
            tp = partition_list([tp], "reassignments")[0]
            where = f"reassignments[{tp.topic}-{tp.partition}]"
            if replicas is not None:
                ids = list(replicas) if isinstance(replicas, (list, tuple)) else None
                if not ids or not all(is_int(b) and 0 <= b <= INT32_MAX for b in ids) or len(set(ids)) != len(ids):
                    raise errors.InvalidReplicaAssignmentError(
                        f"{where}: expected a non-empty list of distinct broker ids >= 0 (or None to cancel), "
                        f"got {replicas!r}")
                replicas = ids
            wanted[tp] = replicas
        if not isinstance(allow_replication_factor_change, bool):
            raise TypeError(
                f"allow_replication_factor_change: expected a bool, got {allow_replication_factor_change!r}")
        timeout = self._timeout(timeout_ms)
        call: AdminCall[TopicPartition] = self._call(list(wanted), timeout, "AlterPartitionReassignments for")

        async def send(node: int, tps: list[TopicPartition]) -> None:
            _, response = await self._cluster.request(node, ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
                "timeout_ms": timeout, "allow_replication_factor_change": allow_replication_factor_change,
                "topics": [{"name": t, "partitions": [
                    {"partition_index": p, "replicas": wanted[TopicPartition(t, p)]} for p in ps]}
                    for t, ps in partitions_by_topic(tps).items()]},
                min_version=0 if allow_replication_factor_change else 1)
            if response["error_code"]:
                for tp in tps:
                    call.answer(tp, response["error_code"], f"{tp.topic}-{tp.partition}", None,
                                response.get("error_message"))
                return
            answered = set()
            for t in response["responses"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    answered.add(tp)
                    call.answer(tp, p["error_code"], f"{tp.topic}-{tp.partition}", None, p.get("error_message"))
            _fail_unanswered(call, tps, answered, f"AlterPartitionReassignments (node {node})")

        return await self._router.run(call, self._router.controller, send)

    async def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None, *,
                                           timeout_ms: int | None = None
                                           ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (of ``partitions``, or of every partition when None), asked from the
        controller. A partition that is not being reassigned (or does not exist) is absent from the answer."""
        tps = None if partitions is None else partition_list(partitions, "partitions")
        timeout = self._timeout(timeout_ms)
        call: AdminCall[int] = self._call([0], timeout, "ListPartitionReassignments")

        async def send(node: int, __: list[int]) -> None:
            _, response = await self._cluster.request(node, ApiKey.LIST_PARTITION_REASSIGNMENTS, {
                "timeout_ms": timeout, "topics": None if tps is None else [
                    {"name": t, "partition_indexes": ps} for t, ps in partitions_by_topic(tps).items()]})
            call.answer(0, response["error_code"], "ListPartitionReassignments", {
                TopicPartition(t["name"], p["partition_index"]): PartitionReassignment(
                    tuple(p["replicas"]), tuple(p["adding_replicas"]), tuple(p["removing_replicas"]))
                for t in response["topics"] for p in t["partitions"]}, response.get("error_message"))

        found: dict[TopicPartition, PartitionReassignment] = (await self._router.run(call, self._router.controller, send))[0]
        return dict(sorted(found.items()))

    # ------------------------------------------------------------------ SCRAM credentials
    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None, *,
                                              timeout_ms: int | None = None
                                              ) -> ItemResults[str, tuple[ScramCredentialInfo, ...]]:
        """Mechanisms and iteration counts of each user's SCRAM credentials (every user when ``users`` is None)."""
        names = None if users is None else group_id_list(users, "describe_user_scram_credentials", what="user names")
        call: AdminCall[str] = self._call(names if names is not None else ["*"], timeout_ms,
                                          "DescribeUserScramCredentials for")

        async def send(node: int, keys: list[str]) -> None:
            _, response = await self._cluster.request(node, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {
                "users": None if keys == ["*"] else [{"name": u} for u in keys]})
            if response["error_code"]:
                for key in keys:
                    call.answer(key, response["error_code"], "DescribeUserScramCredentials", None,
                                response.get("error_message"))
                return
            if keys == ["*"]:
                call.expand("*", [r["user"] for r in response["results"]])
            for r in response["results"]:
                call.answer(r["user"], r["error_code"], f"user {r['user']!r}", tuple(
                    ScramCredentialInfo(name_of(SCRAM_MECHANISMS, c["mechanism"]), c["iterations"])
                    for c in r["credential_infos"]), r.get("error_message"))

        return _without_placeholder(await self._router.run(call, self._router.any_broker, send))

    async def alter_user_scram_credentials(self, alterations: Iterable[ScramUpsertion | ScramDeletion], *,
                                           timeout_ms: int | None = None) -> ItemResults[str, None]:
        """Create, replace or delete users' SCRAM credentials; results per user. Passwords are salted and
        hashed here (the broker never receives them)."""
        from .net.sasl import SCRAM_MAX_ITERATIONS, SCRAM_MIN_ITERATIONS, salted_password

        items = as_list(alterations, "alter_user_scram_credentials", "ScramUpsertion / ScramDeletion objects")
        upserts: list[ScramUpsertionBody] = []
        deletes: list[ScramDeletionBody] = []
        for a in items:
            if not isinstance(a, (ScramUpsertion, ScramDeletion)):
                raise TypeError(f"alterations: expected ScramUpsertion or ScramDeletion, got {type(a).__name__}")
            check_group_id(a.user, "alterations: user")
            mech = code_of(SCRAM_MECHANISMS, a.mechanism, "alterations: mechanism")
            if isinstance(a, ScramDeletion):
                deletes.append({"name": a.user, "mechanism": mech})
                continue
            if not is_int(a.iterations) or not SCRAM_MIN_ITERATIONS <= a.iterations <= SCRAM_MAX_ITERATIONS:
                raise ValueError(f"alterations: iterations for {a.user!r} must be in "
                                 f"{SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS}, got {a.iterations!r}")
            if not isinstance(a.password, str) or not a.password:
                raise ValueError(f"alterations: password for {a.user!r} must be a non-empty str")
            salt = a.salt if a.salt is not None else secrets.token_bytes(32)
            upserts.append({"name": a.user, "mechanism": mech, "iterations": a.iterations, "salt": salt,
                            "salted_password": salted_password(a.mechanism, a.password, salt, a.iterations)})
        users: list[str] = list(dict.fromkeys(str(x["name"]) for x in deletes + upserts))
        call: AdminCall[str] = self._call(users, timeout_ms, "AlterUserScramCredentials for")

        async def send(node: int, keys: list[str]) -> None:
            _, response = await self._cluster.request(node, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {
                "deletions": [d for d in deletes if d["name"] in keys],
                "upsertions": [u for u in upserts if u["name"] in keys]})
            for r in response["results"]:
                call.answer(r["user"], r["error_code"], f"user {r['user']!r}", None, r.get("error_message"))

        return await self._router.run(call, self._router.any_broker, send)

    # ------------------------------------------------------------------ client quotas
    async def describe_client_quotas(self, quota_filter: ClientQuotaFilter | None = None, *,
                                     timeout_ms: int | None = None) -> dict[ClientQuotaEntity, dict[str, float]]:
        """The quotas (``{"producer_byte_rate": 1048576.0, ...}``) of each entity matching ``quota_filter``
        (every entity with a quota when None), from any broker."""
        flt = ClientQuotaFilter() if quota_filter is None else quota_filter
        if not isinstance(flt, ClientQuotaFilter):
            raise TypeError(f"quota_filter: expected a ClientQuotaFilter, got {type(flt).__name__}")
        call: AdminCall[int] = self._call([0], timeout_ms, "DescribeClientQuotas")

        async def send(node: int, __: list[int]) -> None:
            _, response = await self._cluster.request(node, ApiKey.DESCRIBE_CLIENT_QUOTAS, {
                "components": [c.to_wire() for c in flt.components], "strict": flt.strict})
            quotas = {} if response["error_code"] else {
                _quota_entity(e["entity"]): {v["key"]: v["value"] for v in e["values"]}
                for e in response["entries"] or ()}
            call.answer(0, response["error_code"], "DescribeClientQuotas", quotas, response.get("error_message"))

        return (await self._router.run(call, self._router.any_broker, send))[0]  # type: ignore[no-any-return]

    async def alter_client_quotas(self, entries: Mapping[ClientQuotaEntity, Any], *, validate_only: bool = False,
                                  timeout_ms: int | None = None) -> ItemResults[ClientQuotaEntity, None]:
        """Set or remove quotas of each entity; keys not named keep their values. Sent to any broker.

        ``entries``: ``{ClientQuotaEntity: {"producer_byte_rate": 1024.0, "request_percentage": None (remove)}}``
        or ``{ClientQuotaEntity: [ClientQuotaOp(...), ...]}``. An unknown key, a value the key does not accept
        or an invalid combination of entity types fails that entity (``InvalidRequestError``)."""
        if not isinstance(entries, Mapping):
            raise TypeError(f"entries: expected a mapping {{ClientQuotaEntity: {{key: value or None}}}}, got "
                            f"{type(entries).__name__}")
        ops = {e: _quota_ops(e, o) for e, o in entries.items()}
        call: AdminCall[ClientQuotaEntity] = self._call(list(ops), timeout_ms, "AlterClientQuotas for")

        async def send(node: int, keys: list[ClientQuotaEntity]) -> None:
            _, response = await self._cluster.request(node, ApiKey.ALTER_CLIENT_QUOTAS, {
                "entries": [{"entity": _quota_entity_body(e), "ops": [
                    {"key": o.key, "value": 0.0 if o.value is None else o.value, "remove": o.value is None}
                    for o in ops[e]]} for e in keys], "validate_only": validate_only})
            answered = set()
            for r in response["entries"]:
                entity = _quota_entity(r["entity"])
                answered.add(entity)
                call.answer(entity, r["error_code"], f"quota entity {entity}", None, r.get("error_message"))
            _fail_unanswered(call, keys, answered, f"AlterClientQuotas (node {node})")

        return await self._router.run(call, self._router.any_broker, send)

    # ------------------------------------------------------------------ operations: log dirs, features, quorum
    async def describe_log_dirs(self, brokers: Iterable[int] | None = None, *, timeout_ms: int | None = None
                                ) -> ItemResults[int, dict[str, LogDirDescription]]:
        """Each broker's log directories (``{path: LogDirDescription}`` per broker id): a directory's error
        (offline), total and usable bytes, and the size, offset lag and future flag of each replica in it.

        ``brokers``: node ids (default: every broker in a fresh Metadata answer); each is asked with its own
        DescribeLogDirs, so one unreachable broker fails alone::

            for path, d in (await admin.describe_log_dirs([1]))[1].items():
                print(path, d.usable_bytes, sum(r.size for r in d.replicas.values()))"""
        if brokers is None:
            nodes = await self._router.all_nodes()
        else:
            nodes = as_list(brokers, "describe_log_dirs", "broker ids")
            if not all(is_int(b) and 0 <= b <= INT32_MAX for b in nodes):
                raise ValueError(f"brokers: expected broker ids (ints >= 0), got {nodes!r}")
        call: AdminCall[int] = self._call(nodes, timeout_ms, "DescribeLogDirs on node")

        async def route(c: AdminCall[int]) -> dict[int, list[int]]:
            return await self._route_to_brokers(c, lambda node: node, lambda node: f"DescribeLogDirs on node {node}")

        async def send(node: int, __: list[int]) -> None:
            _, response = await self._cluster.request(node, ApiKey.DESCRIBE_LOG_DIRS, {"topics": None})
            call.answer(node, response.get("error_code", 0), f"DescribeLogDirs on node {node}",
                        {d["log_dir"]: _log_dir(d, node) for d in response["results"]})

        return await self._router.run(call, route, send)

    async def describe_replica_log_dirs(self, replicas: Iterable[TopicPartitionReplica], *,
                                        timeout_ms: int | None = None
                                        ) -> ItemResults[TopicPartitionReplica, ReplicaLogDirInfo]:
        """The log dir (and offset lag) of each replica on its broker, and of its future copy while one is being
        moved (``ReplicaLogDirInfo``). One DescribeLogDirs per broker, naming only the partitions asked; a replica
        the broker does not hold gets an empty ``ReplicaLogDirInfo`` (no dir), as in Java's admin."""
        wanted = as_list(replicas, "describe_replica_log_dirs", "TopicPartitionReplica objects")
        for r in wanted:
            _check_replica(r, "replicas")
        call: AdminCall[TopicPartitionReplica] = self._call(wanted, timeout_ms, "DescribeLogDirs for")

        async def send(node: int, keys: list[TopicPartitionReplica]) -> None:
            tps = [TopicPartition(r.topic, r.partition) for r in keys]
            _, response = await self._cluster.request(node, ApiKey.DESCRIBE_LOG_DIRS, {"topics": [
                {"topic": t, "partitions": ps} for t, ps in partitions_by_topic(tps).items()]})
            found: dict[TopicPartition, dict[str, Any]] = {}
            for d in response["results"]:
                if d["error_code"]:
                    continue        # an offline dir: its replicas are not described (as Java's admin)
                for t in d["topics"]:
                    for p in t["partitions"]:
                        where = "future" if p["is_future_key"] else "current"
                        found.setdefault(TopicPartition(t["name"], p["partition_index"]), {}).update(
                            {f"{where}_log_dir": d["log_dir"], f"{where}_offset_lag": p["offset_lag"]})
            for r, tp in zip(keys, tps):
                call.answer(r, response.get("error_code", 0), _replica_text(r), ReplicaLogDirInfo(**found.get(tp, {})))

        return await self._router.run(call, self._route_replicas, send)

    async def alter_replica_log_dirs(self, moves: Mapping[TopicPartitionReplica, str], *,
                                     timeout_ms: int | None = None) -> ItemResults[TopicPartitionReplica, None]:
        """Move replicas between the log dirs of their broker: ``{TopicPartitionReplica("orders", 0, 1):
        "/data2/kafka"}`` (an absolute path among the broker's ``log.dirs``). Sent to each replica's broker.

        A replica's result arrives when the broker has started the move: a future copy catches up in the new
        dir (``describe_replica_log_dirs`` shows it) and then replaces the current one. A dir the broker does
        not have fails that replica with ``LogDirNotFoundError``."""
        if not isinstance(moves, Mapping):
            raise TypeError(f"moves: expected a mapping {{TopicPartitionReplica: log dir}}, got {type(moves).__name__}")
        for r, path in moves.items():
            _check_replica(r, "moves")
            if not isinstance(path, str) or not path:
                raise ValueError(f"moves[{_replica_text(r)}]: expected a log dir path (a non-empty str), got {path!r}")
        call: AdminCall[TopicPartitionReplica] = self._call(list(moves), timeout_ms, "AlterReplicaLogDirs for")

        async def send(node: int, keys: list[TopicPartitionReplica]) -> None:
            by_dir: dict[str, list[TopicPartition]] = {}
            for r in keys:
                by_dir.setdefault(moves[r], []).append(TopicPartition(r.topic, r.partition))
            _, response = await self._cluster.request(node, ApiKey.ALTER_REPLICA_LOG_DIRS, {"dirs": [
                {"path": path, "topics": [{"name": t, "partitions": ps} for t, ps in partitions_by_topic(tps).items()]}
                for path, tps in by_dir.items()]})
            answered = set()
            for t in response["results"]:
                for p in t["partitions"]:
                    r = TopicPartitionReplica(t["topic_name"], p["partition_index"], node)
                    answered.add(r)
                    call.answer(r, p["error_code"], f"{_replica_text(r)} to {moves.get(r)!r}")
            _fail_unanswered(call, keys, answered, f"AlterReplicaLogDirs (node {node})")

        return await self._router.run(call, self._route_replicas, send)

    async def _route_replicas(self, call: AdminCall[TopicPartitionReplica]
                              ) -> dict[int, list[TopicPartitionReplica]]:
        return await self._route_to_brokers(call, attrgetter("broker_id"), _replica_text)

    async def _route_to_brokers(self, call: AdminCall[K], broker_of: Callable[[K], int],
                                text: Callable[[K], str]) -> dict[int, list[K]]:
        """Each item to the broker it names; a broker id the metadata does not know (after one refresh: it may
        be new) fails that item alone, naming the brokers there are."""
        if any(broker_of(item) not in self._cluster.metadata.snapshot.brokers for item in call.pending):
            await self._router.metadata([])
        known = self._cluster.metadata.snapshot.brokers
        plan: dict[int, list[K]] = {}
        for item in list(call.pending):
            node = broker_of(item)
            if node in known:
                plan.setdefault(node, []).append(item)
            else:
                call.fail(item, errors.BrokerNotAvailableError(
                    f"{text(item)}: no broker with node id {node} in the cluster metadata (brokers: {sorted(known)})"))
        return plan

    async def describe_features(self, *, timeout_ms: int | None = None) -> FeatureMetadata:
        """The cluster's finalized feature levels (``metadata.version``, ``transaction.version`` ...) and the
        levels the answering broker supports, from a fresh ApiVersions (v3+) to any broker. A broker that answers
        only v3 leaves out the supported features whose lowest level is 0 (v4 lists them: KAFKA-17011)::

            (await admin.describe_features()).finalized["metadata.version"].max_version"""
        call: AdminCall[int] = self._call([0], timeout_ms, "ApiVersions for the features")

        async def send(node: int, __: list[int]) -> None:
            _, response = await self._cluster.request(node, ApiKey.API_VERSIONS, {
                "client_software_name": "akresil", "client_software_version": __version__}, min_version=3)
            call.answer(0, response["error_code"], f"ApiVersions to {_node_text(node)}", _feature_metadata(response))

        features: FeatureMetadata = (await self._router.run(call, self._router.any_broker, send))[0]
        return features

    async def update_features(self, updates: Mapping[str, tuple[int, str]], *, validate_only: bool = False,
                              timeout_ms: int | None = None) -> ItemResults[str, None]:
        """Change the cluster's finalized feature levels: ``{"transaction.version": (2, "upgrade")}``.

        The type is ``"upgrade"``, ``"safe_downgrade"`` or ``"unsafe_downgrade"`` (Java's
        ``FeatureUpdate.UpgradeType``; an unsafe downgrade may lose metadata); level 0 with a downgrade removes
        the feature. Sent to the controller (a KRaft broker forwards it); ``validate_only``: the controller checks
        the change and makes none. The updates of one call are applied together: from UpdateFeatures v2
        (Kafka 3.9+) the broker answers one error for all of them, and each feature gets it. Bad input (an unknown
        type, a negative level) raises ``ValueError`` naming the feature::

            (await admin.update_features({"transaction.version": (2, "upgrade")})).raise_on_error()"""
        if not isinstance(updates, Mapping):
            raise TypeError(f"updates: expected a mapping {{feature: (max_version_level, upgrade_type)}}, got "
                            f"{type(updates).__name__}")
        if not updates:
            raise ValueError("updates: no feature to update")
        wanted = {name: _feature_update(name, value) for name, value in updates.items()}
        if not isinstance(validate_only, bool):
            raise TypeError(f"validate_only: expected a bool, got {validate_only!r}")
        timeout = self._timeout(timeout_ms)
        call: AdminCall[str] = self._call(list(wanted), timeout, "UpdateFeatures for")
        unsafe = FEATURE_UPGRADE_TYPES["unsafe_downgrade"]

        async def send(node: int, names: list[str]) -> None:
            def body(version: int) -> UpdateFeaturesRequest:
                # v0 has a "downgrade allowed" flag (safe downgrades only) where v1+ has the upgrade type
                return {"timeout_ms": timeout, "validate_only": validate_only, "feature_updates": [
                    {"feature": n, "max_version_level": wanted[n][0], **(
                        {"upgrade_type": wanted[n][1]} if version >= 1 else
                        {"allow_downgrade": wanted[n][1] != FEATURE_UPGRADE_TYPES["upgrade"]})} for n in names]}

            version, response = await self._cluster.request(
                node, ApiKey.UPDATE_FEATURES, body,
                min_version=1 if validate_only or any(wanted[n][1] == unsafe for n in names) else 0)
            if response["error_code"] or version >= 2:
                for n in names:
                    call.answer(n, response["error_code"], f"feature {n!r}", None, response.get("error_message"))
                return
            answered = set()
            for r in response.get("results") or ():
                answered.add(r["feature"])
                call.answer(r["feature"], r["error_code"], f"feature {r['feature']!r}", None, r.get("error_message"))
            _fail_unanswered(call, names, answered, f"UpdateFeatures (node {node})")

        return await self._router.run(call, self._router.controller, send)

    async def describe_metadata_quorum(self, *, timeout_ms: int | None = None) -> QuorumInfo:
        """The KRaft metadata quorum: leader, epoch, high watermark, and each voter's and observer's log end
        offset and last fetch / caught-up times (DescribeQuorum to any broker, which asks the controllers)::

            quorum = await admin.describe_metadata_quorum()
            behind = {v.replica_id: quorum.high_watermark - v.log_end_offset for v in quorum.voters}"""
        call: AdminCall[int] = self._call([0], timeout_ms, "DescribeQuorum")
        where = f"{METADATA_TOPIC}-0"

        async def send(node: int, __: list[int]) -> None:
            _, response = await self._cluster.request(node, ApiKey.DESCRIBE_QUORUM, {
                "topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
            if response["error_code"]:
                call.answer(0, response["error_code"], f"DescribeQuorum to {_node_text(node)}", None,
                            response.get("error_message"))
                return
            part = next((p for t in response["topics"] if t["topic_name"] == METADATA_TOPIC
                         for p in t["partitions"] if p["partition_index"] == 0), None)
            if part is None:
                call.fail(0, errors.ProtocolError(
                    f"DescribeQuorum to {_node_text(node)}: the answer has no result for {where}"))
                return
            call.answer(0, part["error_code"], f"DescribeQuorum for {where} ({_node_text(node)})",
                        _quorum_info(part, response.get("nodes") or ()), part.get("error_message"))

        info: QuorumInfo = (await self._router.run(call, self._router.any_broker, send))[0]
        return info


def _without_placeholder(results: ItemResults[Any, Any]) -> ItemResults[Any, Any]:
    """A call over "everything" ("*") that failed before any answer named its items raises that error."""
    if "*" in results.errors:
        raise results.errors["*"]
    return results


def _fail_unanswered(call: AdminCall[K], asked: list[K], answered: set[K], what: str) -> None:
    """An item the answer leaves out would otherwise wait for the deadline: fail it now (as Java's admin does)."""
    for key in asked:
        if key not in answered:
            name = (f"{key.topic}-{key.partition}" if isinstance(key, TopicPartition) else
                    _replica_text(key) if isinstance(key, TopicPartitionReplica) else str(key))
            call.fail(key, errors.ProtocolError(f"{what}: the answer has no result for {name}"))


def _quota_entity(components: Iterable[Mapping[str, Any]]) -> ClientQuotaEntity:
    """The entity of a quota answer; an entity type akresil does not know makes the answer unusable."""
    parts: dict[str, str | None] = {}
    for c in components:
        parts[c["entity_type"]] = c["entity_name"]
    try:
        return ClientQuotaEntity.from_components(parts)
    except ValueError as exc:
        raise errors.ProtocolError(f"quota answer names an entity akresil cannot represent: {exc}") from None


def _quota_entity_body(entity: ClientQuotaEntity) -> list[AlterClientQuotasRequestEntityData]:
    return [{"entity_type": t, "entity_name": n} for t, n in entity.components().items()]


def _quota_ops(entity: object, ops: object) -> list[ClientQuotaOp]:
    if not isinstance(entity, ClientQuotaEntity):
        raise TypeError(f"entries: keys must be ClientQuotaEntity objects, got {type(entity).__name__} {entity!r}")
    where = f"entries[{entity}]"
    if isinstance(ops, Mapping):
        out = []
        for key, value in ops.items():
            try:
                out.append(ClientQuotaOp(key, value))
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
    else:
        out = as_list(ops, where, "ClientQuotaOp objects")
        for op in out:
            if not isinstance(op, ClientQuotaOp):
                raise TypeError(f"{where}: expected ClientQuotaOp objects or a {{key: value or None}} dict, got {op!r}")
    if not out:
        raise ValueError(f"{where}: no quota to set or remove")
    keys = [op.key for op in out]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{where}: a quota key is named twice in {keys!r}")
    return out


def _group_description(g: Mapping[str, Any], coordinator: int) -> GroupDescription:
    members = []
    for m in g["members"]:
        assignment: frozenset[TopicPartition] = frozenset()
        if g["protocol_type"] == "consumer" and m["member_assignment"]:
            try:
                _, decoded = decode_versioned("ConsumerProtocolAssignment", m["member_assignment"])
                assignment = frozenset(TopicPartition(t["topic"], p) for t in decoded["assigned_partitions"]
                                       for p in t["partitions"])
            except errors.KafkaError as exc:
                log.debug("group %s member %s: undecodable assignment: %s", g["group_id"], m["member_id"], exc)
        members.append(MemberDescription(m["member_id"], m.get("group_instance_id"), m["client_id"],
                                         m["client_host"], assignment))
    return GroupDescription(g["group_id"], g["group_state"], g["protocol_type"], g["protocol_data"],
                            tuple(members), coordinator)


#: ConsumerGroupDescribe's answers for a group that is not a KIP-848 group (or a broker without the API for
#: it): describe it with DescribeGroups instead
_NOT_A_CONSUMER_GROUP = frozenset({errors.GroupIdNotFoundError.errno, errors.UnsupportedVersionError.errno})


def _assignment_structs(g: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    for m in g.get("members", ()):
        for key in ("assignment", "target_assignment"):
            if m.get(key) is not None:
                yield m[key]


def _unnamed_topic_ids(groups: Iterable[Mapping[str, Any]]) -> set[bytes]:
    return {bytes(t["topic_id"]) for g in groups for a in _assignment_structs(g) for t in a["topic_partitions"]
            if not t.get("topic_name")}


def topic_id_text(topic_id: bytes) -> str:
    """A topic id as Kafka prints it (URL-safe base64 without padding, as ``Uuid.toString``)."""
    return base64.urlsafe_b64encode(bytes(topic_id)).decode().rstrip("=")


def _assigned(assignment: Mapping[str, Any], names: Mapping[bytes, str]) -> frozenset[TopicPartition]:
    """An assignment of ConsumerGroupDescribe / ShareGroupDescribe as TopicPartitions by topic name: the name the
    answer carries, else ``names`` (from metadata), else the id's text so the partition is not hidden."""
    out = []
    for t in assignment["topic_partitions"]:
        tid = bytes(t["topic_id"])
        name = t.get("topic_name") or names.get(tid) or topic_id_text(tid)
        out += [TopicPartition(name, p) for p in t["partitions"]]
    return frozenset(out)


def _kip848_group_description(g: Mapping[str, Any], coordinator: int, group_type: str,
                              names: Mapping[bytes, str]) -> GroupDescription:
    """A group of a ConsumerGroupDescribe (``group_type`` "consumer") or ShareGroupDescribe ("share") answer."""
    members = tuple(
        MemberDescription(
            m["member_id"], m.get("instance_id"), m["client_id"], m["client_host"], _assigned(m["assignment"], names),
            target_assignment=(_assigned(m["target_assignment"], names) if m.get("target_assignment") is not None
                               else None),
            member_epoch=m["member_epoch"], rack=m.get("rack_id"),
            subscribed_topics=tuple(m["subscribed_topic_names"]),
            subscribed_topic_regex=m.get("subscribed_topic_regex"),
            member_type=MEMBER_TYPES.get(m.get("member_type", -1)))
        for m in g["members"])
    return GroupDescription(g["group_id"], g["group_state"], group_type, g["assignor_name"], members, coordinator,
                            group_type=group_type, group_epoch=g["group_epoch"],
                            assignment_epoch=g["assignment_epoch"])


def _config_resources(resources: object, call: str) -> list[ConfigResource]:
    out = as_list(resources, call, "ConfigResource objects")
    for r in out:
        if not isinstance(r, ConfigResource):
            raise TypeError(f"{call}: expected ConfigResource objects, got {type(r).__name__} {r!r}")
        if r.type == "topic":
            check_topic_name(r.name)
        if r.type in ("broker", "broker_logger") and r.name and not r.name.isdigit():
            raise ValueError(f"{call}: a {r.type} resource is named by its node id, got {r.name!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"{call}: a resource is listed twice in {out!r}")
    return out


def _config_entries(configs: Iterable[Mapping[str, Any]]) -> dict[str, ConfigEntry]:
    out: dict[str, ConfigEntry] = {}
    for c in configs:
        source = c.get("config_source", -1)
        source_name = CONFIG_SOURCES.get(source, "unknown") if source >= 0 else (
            "default_config" if c.get("is_default") else "unknown")
        out[c["name"]] = ConfigEntry(
            name=c["name"], value=c["value"], source=source_name, read_only=bool(c["read_only"]),
            is_sensitive=bool(c["is_sensitive"]), is_default=source_name == "default_config" or bool(c.get("is_default")),
            type=CONFIG_TYPES.get(c.get("config_type", 0), "unknown"), documentation=c.get("documentation"),
            synonyms=tuple(ConfigSynonym(x["name"], x["value"], CONFIG_SOURCES.get(x["source"], "unknown"))
                           for x in c.get("synonyms") or ()))
    return out


def _alter_ops(resource: object, changes: object) -> list[AlterConfigOp]:
    where = f"changes[{resource!r}]"
    if isinstance(changes, Mapping):
        ops = []
        for name, value in changes.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"{where}: config names must be non-empty strs, got {name!r}")
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{where}: value of {name!r} must be a str (or None to delete), got {value!r}")
            ops.append(AlterConfigOp(name, value, "delete" if value is None else "set"))
        return ops
    ops = as_list(changes, where, "AlterConfigOp objects")
    for op in ops:
        if not isinstance(op, AlterConfigOp):
            raise TypeError(f"{where}: expected AlterConfigOp objects or a {{name: value}} dict, got {op!r}")
    return ops


def _new_partitions(topic: object, value: object) -> NewPartitions:
    if not isinstance(topic, str):
        raise TypeError(f"new_partitions: keys must be topic names, got {topic!r}")
    check_topic_name(topic)
    spec = NewPartitions(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(spec, NewPartitions):
        raise TypeError(f"new_partitions[{topic!r}]: expected an int (the new total) or NewPartitions, got {value!r}")
    if not is_int(spec.total_count) or not 1 <= spec.total_count <= INT32_MAX:
        raise errors.InvalidPartitionsError(
            f"new_partitions[{topic!r}]: total_count must be an int >= 1, got {spec.total_count!r}")
    if spec.assignments is not None:
        if not all(isinstance(a, (list, tuple)) and a and all(is_int(b) and b >= 0 for b in a)
                   for a in spec.assignments):
            raise errors.InvalidReplicaAssignmentError(
                f"new_partitions[{topic!r}]: assignments must be lists of broker ids >= 0, got {spec.assignments!r}")
    return spec


def _acl_filter_body(f: AclBindingFilter) -> DescribeAclsRequest:
    """A filter as DescribeAcls sends it, which is also DeleteAcls' filter entry (same fields)."""
    return {"resource_type_filter": ACL_RESOURCE_TYPES[f.resource_type.lower()],
            "resource_name_filter": f.resource_name, "pattern_type_filter": PATTERN_TYPES[f.pattern_type.lower()],
            "principal_filter": f.principal, "host_filter": f.host,
            "operation": ACL_OPERATIONS[f.operation.lower()], "permission_type": ACL_PERMISSIONS[f.permission.lower()]}


def _acl_binding(resource: Mapping[str, Any], acl: Mapping[str, Any]) -> AclBinding:
    return AclBinding(
        resource_type=name_of(ACL_RESOURCE_TYPES, resource["resource_type"]), resource_name=resource["resource_name"],
        principal=acl["principal"], operation=name_of(ACL_OPERATIONS, acl["operation"]),
        permission=name_of(ACL_PERMISSIONS, acl["permission_type"]), host=acl["host"],
        pattern_type=name_of(PATTERN_TYPES, resource.get("pattern_type", 3)))


#: the KRaft metadata log's topic (its partition 0 is the quorum DescribeQuorum describes)
METADATA_TOPIC = "__cluster_metadata"


def _log_dir(d: Mapping[str, Any], node: int) -> LogDirDescription:
    path = d["log_dir"]
    code = d["error_code"]
    return LogDirDescription(
        path=path, error=error_from(code, f"log dir {path!r} on node {node}") if code else None,
        replicas={TopicPartition(t["name"], p["partition_index"]): ReplicaInfo(
            p["partition_size"], p["offset_lag"], bool(p["is_future_key"]))
            for t in d["topics"] for p in t["partitions"]},
        total_bytes=_known(d.get("total_bytes", -1)), usable_bytes=_known(d.get("usable_bytes", -1)),
        is_cordoned=bool(d.get("is_cordoned", False)))


def _check_replica(r: object, argument: str) -> None:
    if not isinstance(r, TopicPartitionReplica):
        raise TypeError(f"{argument}: expected TopicPartitionReplica objects, got {type(r).__name__} {r!r}")
    check_topic_name(r.topic)
    if not all(is_int(x) and 0 <= x <= INT32_MAX for x in (r.partition, r.broker_id)):
        raise ValueError(f"{argument}: {r!r}: partition and broker_id must be ints >= 0")


def _replica_text(r: TopicPartitionReplica) -> str:
    return f"{r.topic}-{r.partition} on broker {r.broker_id}"


def _node_text(node: int) -> str:
    """A node id for an error message; a bootstrap server's connection (negative id) is not a broker id."""
    return f"node {node}" if node >= 0 else "a bootstrap server"


def _known(value: int) -> int | None:
    """-1 (the protocol's "unknown") as None."""
    return None if value < 0 else value


def _feature_metadata(response: Mapping[str, Any]) -> FeatureMetadata:
    return FeatureMetadata(
        finalized={f["name"]: VersionRange(f["min_version_level"], f["max_version_level"])
                   for f in response.get("finalized_features") or ()},
        supported={f["name"]: VersionRange(f["min_version"], f["max_version"])
                   for f in response.get("supported_features") or ()},
        finalized_epoch=_known(response.get("finalized_features_epoch", -1)))


def _feature_update(name: object, value: object) -> tuple[int, int]:
    """``(max_version_level, upgrade type code)`` of one ``update_features`` entry, or a ValueError naming it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"updates: feature names must be non-empty strs, got {name!r}")
    if not isinstance(value, tuple) or len(value) != 2:
        raise ValueError(f"updates[{name!r}]: expected (max_version_level, upgrade_type), got {value!r}")
    level, kind = value
    if not is_int(level) or not 0 <= level <= INT16_MAX:
        raise ValueError(f"updates[{name!r}]: max_version_level must be an int in 0..{INT16_MAX}, got {level!r}")
    code = code_of(FEATURE_UPGRADE_TYPES, kind, f"updates[{name!r}]: upgrade_type")
    if level == 0 and code == FEATURE_UPGRADE_TYPES["upgrade"]:
        raise ValueError(f"updates[{name!r}]: level 0 removes the feature, which needs 'safe_downgrade' or "
                         f"'unsafe_downgrade', not 'upgrade'")
    return level, code


def _quorum_replicas(states: Iterable[Mapping[str, Any]]) -> tuple[QuorumReplica, ...]:
    return tuple(QuorumReplica(
        s["replica_id"], s["log_end_offset"], _known(s.get("last_fetch_timestamp", -1)),
        _known(s.get("last_caught_up_timestamp", -1)), s.get("replica_directory_id") or bytes(16)) for s in states)


def _quorum_info(part: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]) -> QuorumInfo:
    return QuorumInfo(
        leader_id=part["leader_id"], leader_epoch=part["leader_epoch"], high_watermark=part["high_watermark"],
        voters=_quorum_replicas(part["current_voters"]), observers=_quorum_replicas(part["observers"]),
        nodes={n["node_id"]: tuple(QuorumEndpoint(x["name"], x["host"], x["port"]) for x in n["listeners"])
               for n in nodes})
