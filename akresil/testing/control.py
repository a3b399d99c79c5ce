"""``BrokerControl``: what a test does to a broker, whichever broker it is.

A test of a capability (share groups, transactions, KIP-951 leader moves, ...) is written once against this
interface and run on every broker that has the capability: Apache Kafka (``KafkaCluster``), librdkafka's mock
(``rdkafka_mock.MockControl``), the embedded broker (``EmbeddedBroker``) and the fault proxy in front of any of
them (``FaultProxyControl``).  ``capabilities`` says what a broker has, so a test (or a fault script) asks
instead of knowing brokers by name; an operation a broker cannot do raises ``Unsupported`` naming it.

The four implementations are held to the protocol by mypy (``tests/unit/test_typing.py`` assigns each to a
``BrokerControl``); ``ControlDefaults`` gives a broker that lacks an operation the one refusal for it.
"""

from __future__ import annotations

import enum
import uuid
from typing import Iterable, Mapping, Protocol, Sequence

__all__ = ["BrokerControl", "Capability", "ControlDefaults", "FEATURES", "KAFKA", "MOCK", "NOIDA", "PROXY", "TANSU",
           "Unsupported", "create_topic_through", "leaders_through", "next_node"]


class Capability(str, enum.Enum):
    """What a broker implements (``*_GROUPS``, ``TRANSACTIONS``, ...) or what its control can do to it."""

    # -- broker features
    #: JoinGroup / SyncGroup consumer groups
    CLASSIC_GROUPS = "classic_groups"
    #: KIP-848 consumer groups (``group_protocol="consumer"``)
    CONSUMER_GROUPS = "consumer_groups"
    #: KIP-932 share groups (``ShareConsumer``)
    SHARE_GROUPS = "share_groups"
    #: transactional producers: commit and abort markers, read_committed readers skip aborted records
    TRANSACTIONS = "transactions"
    #: offsets sent to a transaction are committed with it (TxnOffsetCommit stored at EndTxn)
    TRANSACTIONAL_OFFSETS = "transactional_offsets"
    #: KIP-447 on the group coordinator: TxnOffsetCommit with a stale generation or member epoch (a zombie's) is
    #: refused, and OffsetFetch with require_stable waits for offsets an open transaction holds
    ZOMBIE_FENCING = "zombie_fencing"
    #: a refusal for a moved partition names the new leader (KIP-951 CurrentLeader + NodeEndpoints)
    LEADER_HINTS = "leader_hints"
    #: client quotas that make the broker throttle (KIP-219 for real; ``KafkaCluster.set_client_quota``)
    QUOTAS = "quotas"
    # -- controls
    #: ``move_leader``: the leader epoch rises, the old leader refuses
    MOVE_LEADER = "move_leader"
    #: ``move_leader(..., stale_metadata_for_s=)``: Metadata keeps naming the old leader for a while
    STALE_METADATA = "stale_metadata"
    #: ``stop_node`` (a controlled shutdown where the broker has one) and ``start_node``
    STOP_NODE = "stop_node"
    #: ``kill_node`` (a crash: no controlled shutdown) and ``start_node``
    KILL_NODE = "kill_node"
    #: ``throttle``: the next responses of a node carry ``throttle_time_ms``
    THROTTLE = "throttle"
    #: responses of a node delayed (``FaultProxyControl.latency``; the mock per request)
    LATENCY = "latency"
    #: requests answered with a chosen error code instead of being served
    FAIL_REQUESTS = "fail_requests"
    #: a node's client connections reset
    DROP_CONNECTIONS = "drop_connections"


C = Capability

#: Apache Kafka 4.x (``KafkaCluster``; one broker has no other broker to move a leader to)
KAFKA: frozenset[Capability] = frozenset({
    C.CLASSIC_GROUPS, C.CONSUMER_GROUPS, C.SHARE_GROUPS, C.TRANSACTIONS, C.TRANSACTIONAL_OFFSETS,
    C.ZOMBIE_FENCING, C.LEADER_HINTS, C.QUOTAS, C.MOVE_LEADER, C.STOP_NODE, C.KILL_NODE})
#: librdkafka 2.16's mock: no quotas; transactional producers work, but read_committed does not (no
#: aborted-transaction index, marker batches that fail their CRC) and TxnOffsetCommit's offsets are not stored
#: (docs/brokers.md); requests fail, stall or are logged on demand
MOCK: frozenset[Capability] = frozenset({
    C.CLASSIC_GROUPS, C.CONSUMER_GROUPS, C.SHARE_GROUPS, C.LEADER_HINTS, C.MOVE_LEADER,
    C.STALE_METADATA, C.STOP_NODE, C.KILL_NODE, C.LATENCY, C.FAIL_REQUESTS})
#: Tansu (one node): no read_committed filtering, no KIP-848 or share groups (``broker.TANSU_LACKS``)
TANSU: frozenset[Capability] = frozenset({C.CLASSIC_GROUPS})
#: noida-db (one node): transactions, but no KIP-447 checks on offsets in a transaction (docs/brokers.md)
NOIDA: frozenset[Capability] = frozenset({C.CLASSIC_GROUPS, C.TRANSACTIONS, C.TRANSACTIONAL_OFFSETS})
#: what the fault proxy adds in front of any broker (its virtual nodes answer with KIP-951 hints)
PROXY: frozenset[Capability] = frozenset({
    C.LEADER_HINTS, C.MOVE_LEADER, C.STALE_METADATA, C.STOP_NODE, C.KILL_NODE, C.THROTTLE, C.LATENCY,
    C.FAIL_REQUESTS, C.DROP_CONNECTIONS})
#: what a broker implements, as opposed to what its control can do to it: what a proxy passes through
FEATURES: frozenset[Capability] = frozenset({
    C.CLASSIC_GROUPS, C.CONSUMER_GROUPS, C.SHARE_GROUPS, C.TRANSACTIONS, C.TRANSACTIONAL_OFFSETS,
    C.ZOMBIE_FENCING, C.LEADER_HINTS, C.QUOTAS})


class Unsupported(NotImplementedError):
    """The broker behind a control cannot do this (its ``capabilities`` lack ``capability``)."""

    def __init__(self, broker: str, capability: Capability, hint: str = "") -> None:
        self.broker = broker
        self.capability = capability
        super().__init__(f"{broker} cannot {capability.value.replace('_', ' ')}"
                         f" (its capabilities lack {capability.name}){': ' + hint if hint else ''}")


class BrokerControl(Protocol):
    """What a test does to a broker: where it is, what it has, topics, leaders, nodes, throttles."""

    @property
    def bootstrap_servers(self) -> str:
        """What a client's ``bootstrap_servers`` takes."""
        ...

    @property
    def node_ids(self) -> Sequence[int]:
        """The broker ids clients see (Metadata's)."""
        ...

    @property
    def capabilities(self) -> frozenset[Capability]:
        ...

    async def create_topic(self, name: str | None = None, *, partitions: int = 1, replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None) -> str:
        """Create a topic (a unique name when ``name`` is None); returns its name once clients can use it."""
        ...

    async def leader(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader id, leader epoch) of a partition as Metadata now reports it."""
        ...

    async def move_leader(self, topic: str, partition: int, to_node: int) -> int:
        """Make ``to_node`` the partition's leader (the epoch rises); returns the new leader epoch."""
        ...

    async def stop_node(self, node: int) -> None:
        """Stop a broker (a controlled shutdown where the broker has one); ``start_node`` brings it back."""
        ...

    async def kill_node(self, node: int) -> None:
        """Crash a broker (no controlled shutdown); ``start_node`` brings it back with its data."""
        ...

    async def start_node(self, node: int) -> None:
        """Start a stopped or killed broker; returns once it serves."""
        ...

    async def throttle(self, node: int, ms: int, *, count: int = 1, client_id: str | None = None) -> None:
        """The next ``count`` responses of ``node`` (to ``client_id``, or anyone) carry ``throttle_time_ms=ms``."""
        ...


class ControlDefaults:
    """The refusals of a broker that lacks an operation: mixed into an implementation, each raises
    ``Unsupported`` naming the capability, so the protocol is whole and a test learns why."""

    def _unsupported(self, capability: Capability, hint: str = "") -> Unsupported:
        return Unsupported(repr(self), capability, hint)

    async def move_leader(self, topic: str, partition: int, to_node: int) -> int:
        raise self._unsupported(Capability.MOVE_LEADER)

    async def stop_node(self, node: int) -> None:
        raise self._unsupported(Capability.STOP_NODE)

    async def kill_node(self, node: int) -> None:
        raise self._unsupported(Capability.KILL_NODE)

    async def start_node(self, node: int) -> None:
        raise self._unsupported(Capability.STOP_NODE)

    async def throttle(self, node: int, ms: int, *, count: int = 1, client_id: str | None = None) -> None:
        raise self._unsupported(Capability.THROTTLE, "a real broker throttles under a client quota "
                                "(Capability.QUOTAS: KafkaCluster.set_client_quota)")


async def create_topic_through(bootstrap_servers: str, name: str | None, *, partitions: int,
                               replication_factor: int, configs: Mapping[str, str] | None) -> str:
    """CreateTopics through any client-facing address (a broker, or a proxy that forwards it)."""
    from ..admin import Admin
    from ..types import NewTopic
    topic = name or f"t-{uuid.uuid4().hex[:12]}"
    async with Admin(bootstrap_servers=bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor,
                                            configs=dict(configs or {}))])
    return topic


async def leaders_through(bootstrap_servers: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader id, leader epoch) of a topic, from a fresh Metadata answer."""
    from ..admin import Admin
    async with Admin(bootstrap_servers=bootstrap_servers) as admin:
        desc = (await admin.describe_topics([topic]))[topic]
    return {p.partition: (p.leader, p.leader_epoch) for p in desc.partitions}


def next_node(node_ids: Iterable[int], node: int) -> int:
    """The broker after ``node`` in id order (wrapping): where "move the leader elsewhere" goes."""
    ids = sorted(node_ids)
    if node not in ids:
        raise ValueError(f"node: {node!r} is not one of the broker ids {ids}")
    return ids[(ids.index(node) + 1) % len(ids)]
