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

