"""Small immutable value types of the public API."""

from __future__ import annotations

from typing import NamedTuple, Sequence


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


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
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
