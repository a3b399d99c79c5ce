"""Value types of the admin API: what callers pass in (resources, ACL bindings, alterations) and get back.

Enumerations that Kafka encodes as small ints (resource types, ACL operations, config sources) are plain
lower-case strings here (``"topic"``, ``"read"``, ``"dynamic_topic_config"``); the code tables below translate
them, and an unknown name raises ``ValueError`` naming the argument and the accepted names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from .types import TopicPartition

if TYPE_CHECKING:     # the message TypedDicts are for type checkers only
    from .protocol.messages import DescribeClientQuotasRequestComponentData

# Kafka's enum codes (org.apache.kafka.common.*: ResourceType, PatternType, AclOperation, AclPermissionType,
# ConfigResource.Type, ConfigEntry.ConfigSource, AlterConfigOp.OpType, ScramMechanism, ElectionType)
ACL_RESOURCE_TYPES = {"unknown": 0, "any": 1, "topic": 2, "group": 3, "cluster": 4, "transactional_id": 5,
                      "delegation_token": 6, "user": 7}
PATTERN_TYPES = {"unknown": 0, "any": 1, "match": 2, "literal": 3, "prefixed": 4}
ACL_OPERATIONS = {"unknown": 0, "any": 1, "all": 2, "read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7,
                  "describe": 8, "cluster_action": 9, "describe_configs": 10, "alter_configs": 11,
                  "idempotent_write": 12, "create_tokens": 13, "describe_tokens": 14, "two_phase_commit": 15}
ACL_PERMISSIONS = {"unknown": 0, "any": 1, "deny": 2, "allow": 3}
CONFIG_RESOURCE_TYPES = {"unknown": 0, "topic": 2, "broker": 4, "broker_logger": 8, "client_metrics": 16,
                         "group": 32}
CONFIG_SOURCES = {0: "unknown", 1: "dynamic_topic_config", 2: "dynamic_broker_config",
                  3: "dynamic_default_broker_config", 4: "static_broker_config", 5: "default_config",
                  6: "dynamic_broker_logger_config", 7: "client_metrics_config", 8: "group_config"}
CONFIG_TYPES = {0: "unknown", 1: "boolean", 2: "string", 3: "int", 4: "short", 5: "long", 6: "double",
                7: "list", 8: "class", 9: "password"}
ALTER_CONFIG_OPS = {"set": 0, "delete": 1, "append": 2, "subtract": 3}
SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
ELECTION_TYPES = {"preferred": 0, "unclean": 1}


def code_of(table: Mapping[str, int], value: object, argument: str) -> int:
    """``table[value]`` or a ``ValueError`` naming ``argument`` and the accepted names."""
    if isinstance(value, str) and value.lower() in table:
        return table[value.lower()]
    if isinstance(value, str) and value in table:
        return table[value]
    raise ValueError(f"{argument}: {value!r} is not one of {', '.join(repr(k) for k in table)}")


def name_of(table: Mapping[str, int], code: int) -> str:
    for name, value in table.items():
        if value == code:
            return name
    return f"unknown({code})"


# ---------------------------------------------------------------------------------------------- groups
@dataclass(frozen=True)
class GroupListing:
    """A group as ListGroups reports it, with the node that coordinates it."""

    group_id: str
    protocol_type: str
    state: str | None
    group_type: str | None
    coordinator: int


#: GroupDescription.group_type: which group protocol the group runs (the broker's GroupType names)
GROUP_TYPES = ("classic", "consumer", "share")
#: ConsumerGroupDescribe v1's member type (KIP-1099): a consumer group may hold members still on the classic
#: protocol while it is upgraded
MEMBER_TYPES = {0: "classic", 1: "consumer"}


@dataclass(frozen=True)
class MemberDescription:
    """One member of a described group. The fields after ``assignment`` come from the KIP-848 / KIP-932
    describe APIs; a classic group (DescribeGroups) leaves them at their defaults."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    #: partitions assigned to the member (decoded for consumer groups; empty otherwise)
    assignment: frozenset[TopicPartition]
    #: the partitions the coordinator wants the member to own once it has released others' (KIP-848 only;
    #: None for classic and share groups, which have no target apart from the assignment)
    target_assignment: frozenset[TopicPartition] | None = None
    #: the member's epoch (None in a classic group, whose members share the generation)
    member_epoch: int | None = None
    rack: str | None = None
    #: topics the member subscribed to (names; KIP-848 and share groups)
    subscribed_topics: tuple[str, ...] = ()
    #: the regular expression the member subscribed with (KIP-848 regex subscriptions), else None
    subscribed_topic_regex: str | None = None
    #: "consumer" or "classic": the protocol this member of a consumer group speaks (None when the broker does
    #: not say, and in classic and share groups)
    member_type: str | None = None


@dataclass(frozen=True)
class GroupDescription:
    """A described group. ``group_type`` says which protocol it runs: "classic" (DescribeGroups),
    "consumer" (KIP-848, ConsumerGroupDescribe) or "share" (KIP-932, ShareGroupDescribe)."""

    group_id: str
    state: str
    protocol_type: str
    #: the assignor the group chose (e.g. "range"; "uniform" or "range" server side in KIP-848 groups)
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: int
    group_type: str = "classic"
    #: the group's epoch, bumped by every membership or subscription change (None in a classic group)
    group_epoch: int | None = None
    #: the group epoch the current target assignment was computed for (None in a classic group)
    assignment_epoch: int | None = None

    @property
    def assignor(self) -> str:
        """The assignor's name (``protocol`` under its KIP-848 name)."""
        return self.protocol


@dataclass(frozen=True)
class GroupOffset:
    """A group's committed offset for one partition, with the log end and the lag behind it."""

    committed: int | None
    metadata: str
    leader_epoch: int | None
    #: the partition's log end offset (high watermark); None when it could not be read
    log_end: int | None
    #: ``log_end - committed``; None without a committed offset or a log end
    lag: int | None


@dataclass(frozen=True)
class ShareGroupOffset:
    """Where a share group stands on one partition (KIP-932): records before ``start_offset`` are done with
    (acknowledged, or archived after too many deliveries); from there on some may be in flight or acquired."""

    #: the share-partition start offset; None when the group has no state for the partition yet
    start_offset: int | None
    #: the partition's leader epoch the broker recorded with it; None when unknown
    leader_epoch: int | None
    #: records from ``start_offset`` to the log end not yet acknowledged (DescribeShareGroupOffsets v1, which
    #: Kafka 4.4 answers); None when the broker does not say
    lag: int | None


# ---------------------------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class ConfigResource:
    """A resource that has configs: ``ConfigResource("topic", "orders")``, ``ConfigResource("broker", "1")``."""

    type: str
    name: str

    def __post_init__(self) -> None:
        code_of(CONFIG_RESOURCE_TYPES, self.type, "ConfigResource.type")
        if not isinstance(self.name, str):
            raise TypeError(f"ConfigResource.name: expected a str, got {type(self.name).__name__} {self.name!r}")
        object.__setattr__(self, "type", self.type.lower())


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: str


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    read_only: bool
    is_sensitive: bool
    is_default: bool
    type: str = "unknown"
    documentation: str | None = None
    synonyms: tuple[ConfigSynonym, ...] = ()


@dataclass(frozen=True)
class AlterConfigOp:
    """One incremental config change: ``op`` is "set", "delete", "append" or "subtract" (list configs)."""

    name: str
    value: str | None = None
    op: str = "set"

    def __post_init__(self) -> None:
        code_of(ALTER_CONFIG_OPS, self.op, "AlterConfigOp.op")
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"AlterConfigOp.name: expected a non-empty str, got {self.name!r}")
        if self.op != "delete" and not isinstance(self.value, str):
            raise ValueError(f"AlterConfigOp.value: {self.op!r} of {self.name!r} needs a str value, got {self.value!r}")


# ---------------------------------------------------------------------------------------------- partitions
@dataclass(frozen=True)
class NewPartitions:
    """Raise a topic to ``total_count`` partitions; ``assignments``: replicas of each new partition, in order."""

    total_count: int
    assignments: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator: int


@dataclass(frozen=True)
class ProducerIdAndEpoch:
    """The producer id and epoch a transactional id has after ``fence_producers`` bumped it."""

    producer_id: int
    producer_epoch: int


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_timestamp_ms: int
    partitions: frozenset[TopicPartition]
    coordinator: int


# ---------------------------------------------------------------------------------------------- ACLs
@dataclass(frozen=True)
class AclBinding:
    """One ACL: ``principal`` ("User:alice") may (``permission`` "allow"/"deny") do ``operation`` on a resource."""

    resource_type: str
    resource_name: str
    principal: str
    operation: str
    permission: str = "allow"
    host: str = "*"
    pattern_type: str = "literal"

    def __post_init__(self) -> None:
        for arg, table, value in (("resource_type", ACL_RESOURCE_TYPES, self.resource_type),
                                  ("operation", ACL_OPERATIONS, self.operation),
                                  ("permission", ACL_PERMISSIONS, self.permission),
                                  ("pattern_type", PATTERN_TYPES, self.pattern_type)):
            code_of(table, value, f"AclBinding.{arg}")
            if value in ("any", "unknown") or (arg == "pattern_type" and value == "match"):
                raise ValueError(f"AclBinding.{arg}: {value!r} is only meaningful in an AclBindingFilter")
        for arg in ("resource_name", "principal", "host"):
            if not isinstance(getattr(self, arg), str) or not getattr(self, arg):
                raise ValueError(f"AclBinding.{arg}: expected a non-empty str, got {getattr(self, arg)!r}")


@dataclass(frozen=True)
class AclBindingFilter:
    """Matches ACLs: ``None`` fields (and "any") match everything; ``pattern_type="match"`` also matches
    wildcard and prefixed ACLs that apply to ``resource_name``."""

    resource_type: str = "any"
    resource_name: str | None = None
    principal: str | None = None
    operation: str = "any"
    permission: str = "any"
    host: str | None = None
    pattern_type: str = "any"

    def __post_init__(self) -> None:
        for arg, table in (("resource_type", ACL_RESOURCE_TYPES), ("operation", ACL_OPERATIONS),
                           ("permission", ACL_PERMISSIONS), ("pattern_type", PATTERN_TYPES)):
            code_of(table, getattr(self, arg), f"AclBindingFilter.{arg}")


# ---------------------------------------------------------------------------------------------- SCRAM
@dataclass(frozen=True)
class ScramCredentialInfo:
    mechanism: str
    iterations: int


@dataclass(frozen=True)
class ScramUpsertion:
    """Create or replace ``user``'s SCRAM credential; the password is salted and hashed before sending."""

    user: str
    mechanism: str
    password: str = field(repr=False)
    iterations: int = 4096
    salt: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ScramDeletion:
    user: str
    mechanism: str


# ---------------------------------------------------------------------------------------------- reassignments
@dataclass(frozen=True)
class PartitionReassignment:
    """A reassignment in progress: the partition's current replica set (old and new replicas together while it
    runs), the replicas being added (catching up) and those to drop once they have."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


# ---------------------------------------------------------------------------------------------- client quotas
class DefaultEntity:
    """The type of ``DEFAULT``: one object, so ``is`` and ``==`` both work and it never equals a real name."""

    _instance: "DefaultEntity | None" = None

    def __new__(cls) -> "DefaultEntity":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DEFAULT"

    def __reduce__(self) -> str:
        return "DEFAULT"


#: the default entity of a type (Kafka's null entity name, kafka-configs.sh's ``--entity-default``): the quota of
#: every user / client id / IP that has none of its own
DEFAULT = DefaultEntity()

#: quota entity types on the wire (ClientQuotaEntity.USER, CLIENT_ID, IP)
QUOTA_ENTITY_TYPES = {"user": "user", "client_id": "client-id", "ip": "ip"}
#: DescribeClientQuotas match types (ClientQuotaFilterComponent): exact name, the default entity, any named one
_MATCH_EXACT, _MATCH_DEFAULT, _MATCH_SPECIFIED = 0, 1, 2


def _entity_type(value: object, argument: str) -> str:
    """A wire entity type ("user", "client-id", "ip") from either spelling, or a ValueError naming the choices."""
    if isinstance(value, str):
        wire = QUOTA_ENTITY_TYPES.get(value.replace("-", "_").lower())
        if wire is not None:
            return wire
    raise ValueError(f"{argument}: {value!r} is not one of 'user', 'client-id', 'ip'")


def _entity_name(value: object, argument: str) -> None:
    if value is not DEFAULT and (not isinstance(value, str) or not value):
        raise ValueError(f"{argument}: expected a non-empty str or DEFAULT, got {value!r}")


@dataclass(frozen=True)
class ClientQuotaEntity:
    """Who a client quota applies to: a user, a client id, both (that client id of that user), or an IP.

    Each field is a name, ``DEFAULT`` (the default entity of that type) or None (not part of the entity):
    ``ClientQuotaEntity(user="alice")``, ``ClientQuotaEntity(user="alice", client_id=DEFAULT)``,
    ``ClientQuotaEntity(ip=DEFAULT)``. Which combinations are valid is the broker's rule (an IP stands alone);
    it answers ``InvalidRequestError`` for the others."""

    user: str | DefaultEntity | None = None
    client_id: str | DefaultEntity | None = None
    ip: str | DefaultEntity | None = None

    def __post_init__(self) -> None:
        parts = self.components()
        if not parts:
            raise ValueError("ClientQuotaEntity: name at least one of user, client_id, ip (a name or DEFAULT)")
        for attr in QUOTA_ENTITY_TYPES:
            value = getattr(self, attr)
            if value is not None:
                _entity_name(value, f"ClientQuotaEntity.{attr}")

    def __str__(self) -> str:
        return ", ".join(f"{wire}={'DEFAULT' if name is None else repr(name)}"
                         for wire, name in self.components().items())

    def components(self) -> dict[str, str | None]:
        """``{wire entity type: name, None for the default}`` as the Kafka protocol carries the entity."""
        out: dict[str, str | None] = {}
        for attr, wire in QUOTA_ENTITY_TYPES.items():
            value = getattr(self, attr)
            if value is not None:
                out[wire] = None if value is DEFAULT else value
        return out

    @classmethod
    def from_components(cls, components: Mapping[str, str | None]) -> "ClientQuotaEntity":
        """The entity of a protocol answer (``{"user": "alice", "client-id": None}``; None is the default)."""
        kwargs: dict[str, str | DefaultEntity] = {}
        attrs = {wire: attr for attr, wire in QUOTA_ENTITY_TYPES.items()}
        for wire, name in components.items():
            if wire not in attrs:
                raise ValueError(f"quota entity type {wire!r} is not one of 'user', 'client-id', 'ip'")
            kwargs[attrs[wire]] = DEFAULT if name is None else name
        return cls(**kwargs)


@dataclass(frozen=True)
class ClientQuotaFilterComponent:
    """Matches one entity type of a quota entity: ``name`` is that name, ``DEFAULT`` the default entity, or
    None any entity of the type (Kafka's "any specified name"; Kafka 4.4 includes the default entity in it).
    ``entity_type``: "user", "client-id" (or "client_id"), "ip"."""

    entity_type: str
    name: str | DefaultEntity | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "entity_type",
                           _entity_type(self.entity_type, "ClientQuotaFilterComponent.entity_type"))
        if self.name is not None:
            _entity_name(self.name, "ClientQuotaFilterComponent.name")

    def to_wire(self) -> DescribeClientQuotasRequestComponentData:
        if self.name is None:
            return {"entity_type": self.entity_type, "match_type": _MATCH_SPECIFIED, "match": None}
        if isinstance(self.name, str):
            return {"entity_type": self.entity_type, "match_type": _MATCH_EXACT, "match": self.name}
        return {"entity_type": self.entity_type, "match_type": _MATCH_DEFAULT, "match": None}


@dataclass(frozen=True)
class ClientQuotaFilter:
    """Which quota entities DescribeClientQuotas returns: those matching every component. ``strict`` also
    excludes entities with entity types the components do not name (``ClientQuotaFilter()`` matches all)."""

    components: tuple[ClientQuotaFilterComponent, ...] = ()
    strict: bool = False

    def __post_init__(self) -> None:
        comps = tuple(self.components) if not isinstance(self.components, (str, ClientQuotaFilterComponent)) \
            else None
        if comps is None or not all(isinstance(c, ClientQuotaFilterComponent) for c in comps):
            raise TypeError(f"ClientQuotaFilter.components: expected ClientQuotaFilterComponent objects, "
                            f"got {self.components!r}")
        types = [c.entity_type for c in comps]
        if len(set(types)) != len(types):
            raise ValueError(f"ClientQuotaFilter.components: an entity type is named twice in {types!r}")
        if not isinstance(self.strict, bool):
            raise TypeError(f"ClientQuotaFilter.strict: expected a bool, got {self.strict!r}")
        object.__setattr__(self, "components", comps)


@dataclass(frozen=True)
class ClientQuotaOp:
    """Set quota ``key`` (e.g. "producer_byte_rate", "request_percentage") to ``value``, or remove the key
    when ``value`` is None (the entity then falls back to the default entity's quota, if any)."""

    key: str
    value: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"ClientQuotaOp.key: expected a non-empty str, got {self.key!r}")
        if self.value is not None:
            if isinstance(self.value, bool) or not isinstance(self.value, (int, float)) \
                    or self.value != self.value or self.value in (float("inf"), float("-inf")):
                raise ValueError(f"ClientQuotaOp.value: {self.key!r} needs a finite number (or None to remove it), "
                                 f"got {self.value!r}")
            object.__setattr__(self, "value", float(self.value))


# ---------------------------------------------------------------------------------------------- log dirs
@dataclass(frozen=True)
class ReplicaInfo:
    """One partition's replica in a log directory (DescribeLogDirs)."""

    #: bytes of its log segments
    size: int
    #: how far its log end is behind the partition's high watermark (a future replica: behind the current one)
    offset_lag: int
    #: a copy being moved into this directory (``AlterReplicaLogDirs``) that will replace the current one
    is_future: bool


@dataclass(frozen=True)
class LogDirDescription:
    """One log directory of a broker. ``error`` is set (and ``replicas`` empty) for a directory the broker cannot
    read (``KafkaStorageError``: offline). ``total_bytes``/``usable_bytes`` are None when the broker does not
    report them (before DescribeLogDirs v4, Kafka 3.3)."""

    path: str
    error: Exception | None
    replicas: Mapping[TopicPartition, ReplicaInfo]
    total_bytes: int | None = None
    usable_bytes: int | None = None
    #: the directory takes no new partitions (DescribeLogDirs v5)
    is_cordoned: bool = False


@dataclass(frozen=True)
class TopicPartitionReplica:
    """One partition's replica on one broker: what ``describe_replica_log_dirs`` asks about."""

    topic: str
    partition: int
    broker_id: int


@dataclass(frozen=True)
class ReplicaLogDirInfo:
    """Where a replica lives on its broker (Java's ``ReplicaLogDirInfo``): its log dir and offset lag, and while
    ``alter_replica_log_dirs`` moves it, the future copy's. A replica the broker does not hold has no dir (None)
    and lag -1."""

    current_log_dir: str | None = None
    current_offset_lag: int = -1
    future_log_dir: str | None = None
    future_offset_lag: int = -1


# ---------------------------------------------------------------------------------------------- features
#: Java's FeatureUpdate.UpgradeType codes (UpdateFeatures v1+); v0 only knows "downgrade allowed" (safe)
FEATURE_UPGRADE_TYPES = {"upgrade": 1, "safe_downgrade": 2, "unsafe_downgrade": 3}


@dataclass(frozen=True)
class VersionRange:
    """The levels of a feature: those a broker supports, or the cluster's finalized ones."""

    min_version: int
    max_version: int


@dataclass(frozen=True)
class FeatureMetadata:
    """Feature levels as one broker's ApiVersions answer gives them (Java's ``FeatureMetadata``).

    ``finalized``: the levels the cluster runs at (``metadata.version`` ...); ``supported``: the levels this
    broker's software could run at; ``finalized_epoch``: the metadata offset of the finalized levels (None
    when the broker does not send it)."""

    finalized: Mapping[str, VersionRange]
    supported: Mapping[str, VersionRange]
    finalized_epoch: int | None


# ---------------------------------------------------------------------------------------------- metadata quorum
@dataclass(frozen=True)
class QuorumReplica:
    """A voter or observer of the KRaft metadata log as its leader sees it (Java's ``QuorumInfo.ReplicaState``).

    Timestamps are the leader's wall clock in ms, None when unknown (``last_fetch_timestamp`` of the leader
    itself, or a broker before DescribeQuorum v1)."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int | None = None
    last_caught_up_timestamp: int | None = None
    #: the replica's metadata log directory id (KIP-853, DescribeQuorum v2; all zeros when unknown)
    directory_id: bytes = bytes(16)


@dataclass(frozen=True)
class QuorumEndpoint:
    listener: str
    host: str
    port: int


@dataclass(frozen=True)
class QuorumInfo:
    """The KRaft metadata quorum (partition 0 of ``__cluster_metadata``): its leader, epoch, high watermark,
    voters and observers; ``nodes``: the voters' controller endpoints (DescribeQuorum v2, else empty)."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[QuorumReplica, ...]
    observers: tuple[QuorumReplica, ...]
    nodes: Mapping[int, tuple[QuorumEndpoint, ...]] = field(default_factory=dict)
