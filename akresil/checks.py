"""What the clients accept: the argument checks and named argument values shared by every client.

Each check runs before any round trip, so a mistake raises at the call that made it, with an error naming the
argument (Kafka's own error class where Kafka has one, e.g. ``InvalidTopicError``). The producer, consumers,
admin client, CLI and Spark source all check the same way because they all import from here; nothing here
does I/O.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from . import errors
from .types import NewTopic, TopicPartition

#: ListOffsets timestamp sentinels: the log start and the log end (``Admin.list_offsets``, ``Consumer``'s
#: ``beginning_offsets`` / ``end_offsets``, the fetcher's offset reset)
LATEST, EARLIEST = -1, -2

_LEGAL = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def check_topic_name(name: str) -> None:
    """Kafka's topic name rules, checked before a round trip so the error names the problem."""
    if not isinstance(name, str) or not name:
        raise errors.InvalidTopicError(f"topic name must be a non-empty string, got {name!r}")
    if name in (".", ".."):
        raise errors.InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > 249:
        raise errors.InvalidTopicError(f"topic name {name[:20]!r}... is {len(name)} characters; the maximum is 249")
    bad = sorted(set(name) - _LEGAL)
    if bad:
        raise errors.InvalidTopicError(
            f"topic name {name!r} has illegal characters {''.join(bad)!r}; use ASCII letters, digits, '.', '_', '-'")


INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def as_list(values: object, call: str, what: str) -> list[Any]:
    """A list from an iterable argument; a lone str/NewTopic is refused (iterating it would split it up)."""
    if isinstance(values, (str, bytes, NewTopic)):
        raise TypeError(f"{call}: expected an iterable of {what}, got a single {type(values).__name__} "
                        f"{values!r}; wrap it in a list")
    try:
        return list(values)  # type: ignore[call-overload,no-any-return]
    except TypeError:
        raise TypeError(f"{call}: expected an iterable of {what}, got {type(values).__name__}") from None


def topic_names(names: object, call: str) -> list[str]:
    out = as_list(names, call, "topic names")
    for name in out:
        check_topic_name(name)
    no_duplicate_topics(out, call)
    return out


def no_duplicate_topics(names: list[str], call: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise errors.InvalidRequestError(f"{call}: topic {name!r} is listed twice")
        seen.add(name)


def check_timeout(timeout_ms: object) -> None:
    if not is_int(timeout_ms) or not 0 <= timeout_ms <= INT32_MAX:  # type: ignore[operator]
        raise ValueError(f"timeout_ms: must be an int in 0..{INT32_MAX}, got {timeout_ms!r}")


def str_list(values: Iterable[str] | None, argument: str) -> list[str]:
    if values is None:
        return []
    out = as_list(values, argument, "strings")
    if not all(isinstance(v, str) and v for v in out):
        raise ValueError(f"{argument}: expected non-empty strings, got {out!r}")
    return out


def check_group_id(group_id: object, argument: str) -> None:
    if not isinstance(group_id, str) or not group_id:
        raise ValueError(f"{argument}: expected a non-empty str, got {group_id!r}")


def group_id_list(values: object, call: str, *, what: str = "group ids") -> list[str]:
    out = as_list(values, call, what)
    if not out:
        raise ValueError(f"{call}: no {what} given")
    for value in out:
        check_group_id(value, f"{call}: {what}")
    if len(set(out)) != len(out):
        raise ValueError(f"{call}: {what} listed twice in {out!r}")
    return out


def partition_list(values: object, argument: str) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    for tp in as_list(values, argument, "TopicPartition objects"):
        if not (isinstance(tp, tuple) and len(tp) == 2 and is_int(tp[1]) and tp[1] >= 0):
            raise TypeError(f"{argument}: expected TopicPartition(topic, partition >= 0), got {tp!r}")
        check_topic_name(tp[0])
        out.append(TopicPartition(tp[0], tp[1]))
    if len(set(out)) != len(out):
        raise ValueError(f"{argument}: a partition is listed twice in {out!r}")
    return out


def offset_values(offsets: object, argument: str) -> dict[TopicPartition, tuple[int, str]]:
    if not isinstance(offsets, Mapping):
        raise TypeError(f"{argument}: expected a mapping {{TopicPartition: offset}}, got {type(offsets).__name__}")
    out: dict[TopicPartition, tuple[int, str]] = {}
    for tp, value in offsets.items():
        tp = partition_list([tp], argument)[0]
        offset, metadata = (value if isinstance(value, tuple) and len(value) == 2 else (value, ""))
        if not is_int(offset) or offset < 0:
            raise ValueError(f"{argument}: offset for {tp.topic}-{tp.partition} must be an int >= 0, got {offset!r}")
        if not isinstance(metadata, str):
            raise TypeError(f"{argument}: metadata for {tp.topic}-{tp.partition} must be a str, got {metadata!r}")
        out[tp] = (offset, metadata)
    return out


def check_new_topic(t: object) -> None:
    """Everything about a ``NewTopic`` that can be judged without the broker, each error naming the field."""
    if not isinstance(t, NewTopic):
        raise TypeError(f"expected a NewTopic, got {type(t).__name__} {t!r}")
    check_topic_name(t.name)
    where = f"NewTopic({t.name!r})"
    for field_name, value in (("num_partitions", t.num_partitions), ("replication_factor", t.replication_factor)):
        if not is_int(value):
            raise TypeError(f"{where}.{field_name}: expected an int, got {type(value).__name__} {value!r}")
    if t.replica_assignment is None:
        if not (t.num_partitions == -1 or 1 <= t.num_partitions <= INT32_MAX):
            raise errors.InvalidPartitionsError(
                f"{where}.num_partitions: must be >= 1 (or -1 for the broker default), got {t.num_partitions}")
        if not (t.replication_factor == -1 or 1 <= t.replication_factor <= INT16_MAX):
            raise errors.InvalidReplicationFactorError(
                f"{where}.replication_factor: must be in 1..{INT16_MAX} (or -1 for the broker default), "
                f"got {t.replication_factor}")
    else:
        _check_assignment(where, t.replica_assignment)
    if t.configs is not None:
        if not isinstance(t.configs, Mapping):
            raise TypeError(f"{where}.configs: expected a dict of str -> str, got {type(t.configs).__name__}")
        for name, setting in t.configs.items():
            if not isinstance(name, str) or not name or not (setting is None or isinstance(setting, str)):
                raise TypeError(f"{where}.configs: {name!r}: {setting!r} is not a str -> str (or None) entry")


def _check_assignment(where: str, assignment: object) -> None:
    if not isinstance(assignment, Mapping) or not assignment:
        raise errors.InvalidReplicaAssignmentError(
            f"{where}.replica_assignment: expected a non-empty dict {{partition: [broker ids]}}, got {assignment!r}")
    if sorted(assignment) != list(range(len(assignment))):
        raise errors.InvalidReplicaAssignmentError(
            f"{where}.replica_assignment: partitions must be 0..{len(assignment) - 1}, got {sorted(assignment)!r}")
    sizes = set()
    for p, brokers in assignment.items():
        ids = list(brokers) if isinstance(brokers, (list, tuple)) else None
        if not ids or not all(is_int(b) and b >= 0 for b in ids) or len(set(ids)) != len(ids):
            raise errors.InvalidReplicaAssignmentError(
                f"{where}.replica_assignment[{p}]: expected distinct broker ids >= 0, got {brokers!r}")
        sizes.add(len(ids))
    if len(sizes) > 1:
        raise errors.InvalidReplicaAssignmentError(
            f"{where}.replica_assignment: every partition needs the same number of replicas, got {sorted(sizes)}")

def checked_partitions(partitions: Iterable[TopicPartition], call: str) -> list[TopicPartition]:
    """``partitions`` as TopicPartitions, each with a legal topic name and an int partition >= 0."""
    if isinstance(partitions, (str, bytes, TopicPartition)):
        raise TypeError(f"{call}: expected an iterable of TopicPartition, got a single {partitions!r}; "
                        "wrap it in a list")
    out = []
    #: names already checked: an assignment of 10,000 partitions names a few topics
    names: set[str] = set()
    for tp in partitions:
        if not (isinstance(tp, tuple) and len(tp) == 2 and is_int(tp[1])):
            raise TypeError(f"{call}: expected TopicPartition(topic, partition), got {tp!r}")
        if type(tp[0]) is not str or tp[0] not in names:
            check_topic_name(tp[0])       # raises for anything but a legal str name
            names.add(tp[0])
        if tp[1] < 0:
            raise ValueError(f"{call}: {tp[0]}-{tp[1]}: partition must be >= 0")
        # a TopicPartition of a str and an int is kept as it is (a plain tuple, or an int subclass, is rebuilt)
        out.append(tp if type(tp) is TopicPartition and type(tp[1]) is int else TopicPartition(tp[0], int(tp[1])))
    return out


def offset_requests(requests: object, call: str) -> dict[TopicPartition, int]:
    """``{TopicPartition: timestamp}`` for a ListOffsets lookup: a timestamp (ms) >= 0, EARLIEST or LATEST."""
    if not isinstance(requests, Mapping):
        raise TypeError(f"{call}: expected a mapping {{TopicPartition: timestamp}}, got {type(requests).__name__}")
    for tp, ts in requests.items():
        if not (isinstance(tp, tuple) and len(tp) == 2 and is_int(tp[1]) and tp[1] >= 0):
            raise TypeError(f"{call}: expected TopicPartition(topic, partition >= 0) keys, got {tp!r}")
        check_topic_name(tp[0])
        if not is_int(ts) or ts < EARLIEST:
            raise ValueError(f"{call}: timestamp for {tp[0]}-{tp[1]} must be an int >= 0, "
                             f"EARLIEST ({EARLIEST}) or LATEST ({LATEST}), got {ts!r}")
    return {TopicPartition(*tp): ts for tp, ts in requests.items()}
