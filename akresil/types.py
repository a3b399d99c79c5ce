"""Small immutable value types of the public API, and the type variables that make the clients generic.

A consumer with deserializers yields ``ConsumerRecord[K, V]`` (K, V: what the deserializers return); a producer
with serializers takes ``K`` / ``V`` (what the serializers accept).  Without them the defaults apply: bytes.
"""

from __future__ import annotations

import sys
from typing import Generic, Iterable, NamedTuple, Sequence

if sys.version_info >= (3, 13):
    from typing import TypeVar
else:   # TypeVar defaults (PEP 696) arrived in 3.13
    from typing_extensions import TypeVar

#: what a producer takes as a key / value without a serializer
RawBytes = bytes | bytearray | memoryview

#: a consumer's key / value type: what its deserializer returns (bytes without one)
KeyT = TypeVar("KeyT", default=bytes)
ValueT = TypeVar("ValueT", default=bytes)
#: a producer's key / value type: what its serializer accepts (bytes-like without one).  Contravariant: a
#: producer that takes any bytes-like value is a fine ``Producer[bytes, bytes]``.  A checker cannot read what an
#: unannotated lambda serializer accepts: it falls back to the default (annotate the variable to widen it).
KeyT_contra = TypeVar("KeyT_contra", contravariant=True, default=RawBytes)
ValueT_contra = TypeVar("ValueT_contra", contravariant=True, default=RawBytes)


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where a produced record landed."""

    topic: str
    partition: int
    offset: int
    #: CreateTime the producer set, or the broker's LogAppendTime when the topic uses it
    timestamp_ms: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1


class ConsumerRecord(NamedTuple, Generic[KeyT, ValueT]):
    topic: str
    partition: int
    offset: int
    #: deserialized when the consumer has a key_deserializer (None stays None)
    key: KeyT | None
    value: ValueT | None
    headers: Sequence[tuple[str, bytes | None]]
    timestamp_ms: int
    #: 0 = CreateTime, 1 = LogAppendTime
    timestamp_type: int = 0
    leader_epoch: int = -1


class ShareRecord(NamedTuple):
    """A record delivered by a share group (KIP-932): a ``ConsumerRecord`` plus its delivery count.

    ``delivery_count`` is 1 on first delivery and grows each time the broker hands the record out again
    (after a release, a lock expiry or a consumer's departure).
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]
    timestamp_ms: int
    timestamp_type: int = 0
    leader_epoch: int = -1
    delivery_count: int = 1


class NewTopic(NamedTuple):
    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    configs: dict[str, str] | None = None
    #: explicit replica assignment {partition: [broker ids]}; excludes num_partitions/replication_factor
    replica_assignment: dict[int, list[int]] | None = None


Header = tuple[str, bytes | None]


class OffsetAndTimestamp(NamedTuple):
    """The first record at or after a looked-up timestamp: its offset and its own timestamp."""

    offset: int
    timestamp_ms: int


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's identity in its group, as a transactional producer needs it (KIP-447)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None



def partitions_by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions grouped per topic, both sorted: the shape of every request that names partitions by topic."""
    grouped: dict[str, list[int]] = {}
    for tp in tps:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return {t: sorted(ps) for t, ps in sorted(grouped.items())}
