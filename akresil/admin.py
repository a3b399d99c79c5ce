"""Admin client: create/delete/describe topics, list offsets, describe the cluster.

Requests that must reach the controller (CreateTopics, DeleteTopics) go to the controller id from the latest
Metadata; retriable errors (NOT_CONTROLLER, connection loss) are retried with the KIP-580 backoff inside
``request_timeout_ms``-bounded attempts, so a controller move is invisible to the caller.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import anyio

from . import errors
from .config import resolve
from .core.backoff import ExponentialBackoff
from .core.metadata import pending_topic_backoff
from .net.cluster import Cluster, metadata_request_body
from .protocol.api import ApiKey
from .types import NewTopic, TopicPartition

if TYPE_CHECKING:
    from typing import Unpack

    from .config_keys import AdminConfig

log = logging.getLogger(__name__)

#: ListOffsets timestamp sentinels
LATEST, EARLIEST = -1, -2


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


class Admin:
    """Cluster administration. Use as ``async with Admin(bootstrap_servers=...) as admin``."""

    def __init__(self, **config: Unpack[AdminConfig]) -> None:
        self.config = resolve("admin", config)
        self._cluster = Cluster(self.config, allow_auto_topic_creation=False)
        self._backoff = ExponentialBackoff(self.config.retry_backoff_ms, self.config.retry_backoff_max_ms)
        #: a created topic that Metadata does not show with leaders yet is not a failure: re-ask soon
        self._pending_backoff = pending_topic_backoff(self.config.retry_backoff_max_ms)
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> "Admin":
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            await self._cluster.start(self._tg)
        except BaseException:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._tg is None:
            return
        tg, self._tg = self._tg, None
        await self._cluster.close()
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)

    # ------------------------------------------------------------------ helpers
    async def _metadata(self, topics: list[str] | None) -> dict[str, Any]:
        body = metadata_request_body(topics, allow_auto_topic_creation=False)
        _, _, response = await self._cluster.request_any(ApiKey.METADATA, body, min_version=1)
        self._cluster.metadata.update_from_metadata(response, self._cluster.clock())
        return response

    async def _controller_request(self, api_key: ApiKey, body: Any, timeout_ms: int) -> dict[str, Any]:
        """Send to the controller, retrying NOT_CONTROLLER / connection errors with backoff until timeout."""
        failures = 0
        with anyio.fail_after(timeout_ms / 1000.0 + 5.0):
            while True:
                md = await self._metadata([])
                controller = md.get("controller_id", -1)
                node = controller if controller >= 0 else self._cluster.least_loaded_node()
                try:
                    _, response = await self._cluster.request(node, api_key, body)
                except (errors.KafkaConnectionError, errors.RequestTimeoutError) as exc:
                    last: BaseException = exc
                else:
                    codes = [t.get("error_code", 0) for t in response.get("topics", response.get("responses", []))]
                    if errors.NotControllerError.errno not in codes:
                        return response
                    last = errors.NotControllerError()
                failures += 1
                log.debug("%s to controller %s failed (%s); retrying", api_key.name, node, last)
                await anyio.sleep(self._backoff.backoff_ms(failures) / 1000.0)

    # ------------------------------------------------------------------ topics
    async def create_topics(self, topics: Iterable[NewTopic], *, timeout_ms: int = 30_000,
                            validate_only: bool = False, ignore_existing: bool = False) -> None:
        """Create topics; raises the first per-topic error (e.g. ``TopicAlreadyExistsError``)."""
        new = _items(topics, "create_topics", "NewTopic objects")
        for t in new:
            check_new_topic(t)
        _no_duplicates([t.name for t in new], "create_topics")
        _check_timeout(timeout_ms)

        def body(version: int) -> dict[str, Any]:
            return {"topics": [{
                "name": t.name,
                "num_partitions": -1 if t.replica_assignment else t.num_partitions,
                "replication_factor": -1 if t.replica_assignment else t.replication_factor,
                "assignments": [{"partition_index": p, "broker_ids": list(b)}
                                for p, b in sorted((t.replica_assignment or {}).items())],
                "configs": [{"name": k, "value": v} for k, v in (t.configs or {}).items()],
            } for t in new], "timeout_ms": timeout_ms, "validate_only": validate_only}

        response = await self._controller_request(ApiKey.CREATE_TOPICS, body, timeout_ms)
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
                md = await self._metadata(names)
                ok = all(t.get("error_code", 0) == 0 and t["partitions"]
                         and all(p["leader_id"] >= 0 for p in t["partitions"]) for t in md["topics"])
                if ok:
                    return
                await anyio.sleep(self._pending_backoff.backoff_ms(failures) / 1000.0)
                failures += 1

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int = 30_000) -> None:
        names = _topic_names(names, "delete_topics")
        _check_timeout(timeout_ms)

        def body(version: int) -> dict[str, Any]:
            return {"topic_names": names, "topics": [{"name": n, "topic_id": bytes(16)} for n in names],
                    "timeout_ms": timeout_ms}

        response = await self._controller_request(ApiKey.DELETE_TOPICS, body, timeout_ms)
        for result in response["responses"]:
            errors.raise_for_code(result.get("error_code", 0), f"{result.get('name')}: {result.get('error_message') or ''}")

    async def list_topics(self) -> list[str]:
        md = await self._metadata(None)
        return sorted(t["name"] for t in md["topics"] if not t.get("is_internal"))

    async def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        names = _topic_names(names, "describe_topics")
        md = await self._metadata(names)
        out: dict[str, TopicDescription] = {}
        for t in md["topics"]:
            errors.raise_for_code(t.get("error_code", 0), str(t["name"]))
            out[t["name"]] = TopicDescription(
                name=t["name"], topic_id=t.get("topic_id") or bytes(16), is_internal=bool(t.get("is_internal")),
                partitions=tuple(sorted((PartitionDescription(
                    p["partition_index"], p["leader_id"], p.get("leader_epoch", -1),
                    tuple(p.get("replica_nodes", ())), tuple(p.get("isr_nodes", ())))
                    for p in t["partitions"]), key=lambda d: d.partition)))
        return out

    async def describe_cluster(self) -> ClusterDescription:
        md = await self._metadata([])
        return ClusterDescription(
            cluster_id=md.get("cluster_id"), controller_id=md.get("controller_id", -1),
            brokers=tuple(BrokerDescription(b["node_id"], b["host"], b["port"], b.get("rack"))
                          for b in md["brokers"]))

    async def list_offsets(self, requests: Mapping[TopicPartition, int], *,
                           isolation_level: str = "read_uncommitted") -> dict[TopicPartition, tuple[int, int]]:
        """``{tp: timestamp or EARLIEST/LATEST}`` -> ``{tp: (offset, timestamp)}`` via each partition's leader."""
        if not isinstance(requests, Mapping):
            raise TypeError(f"list_offsets: expected a mapping {{TopicPartition: timestamp}}, got "
                            f"{type(requests).__name__}")
        for tp, ts in requests.items():
            if not (isinstance(tp, tuple) and len(tp) == 2 and _is_int(tp[1]) and tp[1] >= 0):
                raise TypeError(f"list_offsets: expected TopicPartition(topic, partition >= 0) keys, got {tp!r}")
            check_topic_name(tp[0])
            if not _is_int(ts) or ts < -2:
                raise ValueError(f"list_offsets: timestamp for {tp[0]}-{tp[1]} must be an int >= 0, "
                                 f"EARLIEST (-2) or LATEST (-1), got {ts!r}")
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolation_level: {isolation_level!r} is not 'read_uncommitted' or 'read_committed'")
        topics = sorted({tp.topic for tp in requests})
        md = await self._metadata(topics)
        leaders: dict[TopicPartition, int] = {}
        for t in md["topics"]:
            errors.raise_for_code(t.get("error_code", 0), str(t["name"]))
            for p in t["partitions"]:
                leaders[TopicPartition(t["name"], p["partition_index"])] = p["leader_id"]
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in requests:
            if tp not in leaders:
                raise errors.UnknownTopicOrPartitionError(f"{tp.topic}-{tp.partition}")
            by_node.setdefault(leaders[tp], []).append(tp)
        result: dict[TopicPartition, tuple[int, int]] = {}
        level = 1 if isolation_level == "read_committed" else 0
        for node, tps in by_node.items():
            grouped: dict[str, list[TopicPartition]] = {}
            for tp in tps:
                grouped.setdefault(tp.topic, []).append(tp)
            body = {"replica_id": -1, "isolation_level": level, "topics": [
                {"name": topic, "partitions": [{"partition_index": tp.partition, "current_leader_epoch": -1,
                                                "timestamp": requests[tp], "max_num_offsets": 1}
                                               for tp in group]} for topic, group in grouped.items()]}
            _, response = await self._cluster.request(node, ApiKey.LIST_OFFSETS, body, min_version=1)
            for t in response["topics"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    errors.raise_for_code(p.get("error_code", 0), f"{tp.topic}-{tp.partition}")
                    result[tp] = (p["offset"], p.get("timestamp", -1))
        return result


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


_INT16_MAX = 2**15 - 1
_INT32_MAX = 2**31 - 1


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _items(values: object, call: str, what: str) -> list[Any]:
    """A list from an iterable argument; a lone str/NewTopic is refused (iterating it would split it up)."""
    if isinstance(values, (str, bytes, NewTopic)):
        raise TypeError(f"{call}: expected an iterable of {what}, got a single {type(values).__name__} "
                        f"{values!r}; wrap it in a list")
    try:
        return list(values)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{call}: expected an iterable of {what}, got {type(values).__name__}") from None


def _topic_names(names: object, call: str) -> list[str]:
    out = _items(names, call, "topic names")
    for name in out:
        check_topic_name(name)
    _no_duplicates(out, call)
    return out


def _no_duplicates(names: list[str], call: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise errors.InvalidRequestError(f"{call}: topic {name!r} is listed twice")
        seen.add(name)


def _check_timeout(timeout_ms: object) -> None:
    if not _is_int(timeout_ms) or not 0 <= timeout_ms <= _INT32_MAX:  # type: ignore[operator]
        raise ValueError(f"timeout_ms: must be an int in 0..{_INT32_MAX}, got {timeout_ms!r}")


def check_new_topic(t: object) -> None:
    """Everything about a ``NewTopic`` that can be judged without the broker, each error naming the field."""
    if not isinstance(t, NewTopic):
        raise TypeError(f"expected a NewTopic, got {type(t).__name__} {t!r}")
    check_topic_name(t.name)
    where = f"NewTopic({t.name!r})"
    for field_name, value in (("num_partitions", t.num_partitions), ("replication_factor", t.replication_factor)):
        if not _is_int(value):
            raise TypeError(f"{where}.{field_name}: expected an int, got {type(value).__name__} {value!r}")
    if t.replica_assignment is None:
        if not (t.num_partitions == -1 or 1 <= t.num_partitions <= _INT32_MAX):
            raise errors.InvalidPartitionsError(
                f"{where}.num_partitions: must be >= 1 (or -1 for the broker default), got {t.num_partitions}")
        if not (t.replication_factor == -1 or 1 <= t.replication_factor <= _INT16_MAX):
            raise errors.InvalidReplicationFactorError(
                f"{where}.replication_factor: must be in 1..{_INT16_MAX} (or -1 for the broker default), "
                f"got {t.replication_factor}")
    else:
        _check_assignment(where, t.replica_assignment)
    if t.configs is not None:
        if not isinstance(t.configs, Mapping):
            raise TypeError(f"{where}.configs: expected a dict of str -> str, got {type(t.configs).__name__}")
        for key, value in t.configs.items():
            if not isinstance(key, str) or not key or not (value is None or isinstance(value, str)):
                raise TypeError(f"{where}.configs: {key!r}: {value!r} is not a str -> str (or None) entry")


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
        if not ids or not all(_is_int(b) and b >= 0 for b in ids) or len(set(ids)) != len(ids):
            raise errors.InvalidReplicaAssignmentError(
                f"{where}.replica_assignment[{p}]: expected distinct broker ids >= 0, got {brokers!r}")
        sizes.add(len(ids))
    if len(sizes) > 1:
        raise errors.InvalidReplicaAssignmentError(
            f"{where}.replica_assignment: every partition needs the same number of replicas, got {sorted(sizes)}")
