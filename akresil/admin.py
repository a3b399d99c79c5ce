"""Admin client: create/delete/describe topics, list offsets, describe the cluster.

Requests that must reach the controller (CreateTopics, DeleteTopics) go to the controller id from the latest
Metadata; retriable errors (NOT_CONTROLLER, connection loss) are retried with the KIP-580 backoff inside
``request_timeout_ms``-bounded attempts, so a controller move is invisible to the caller.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import anyio

from . import errors
from .config import resolve
from .core.backoff import ExponentialBackoff
from .net.cluster import Cluster, metadata_request_body
from .protocol.api import ApiKey
from .types import NewTopic, TopicPartition

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

    def __init__(self, **config: Any) -> None:
        self.config = resolve("admin", config)
        self._cluster = Cluster(self.config, allow_auto_topic_creation=False)
        self._backoff = ExponentialBackoff(self.config.retry_backoff_ms, self.config.retry_backoff_max_ms)
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
        new = list(topics)
        for t in new:
            check_topic_name(t.name)
            if t.replica_assignment is None and (t.num_partitions < 1 and t.num_partitions != -1):
                raise errors.ConfigError(f"NewTopic({t.name!r}).num_partitions: must be >= 1 (or -1 for default)")

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
        """CreateTopics returns before every broker knows the topic; wait until Metadata shows leaders."""
        failures = 0
        with anyio.fail_after(timeout_ms / 1000.0):
            while True:
                md = await self._metadata(names)
                ok = all(t.get("error_code", 0) == 0 and t["partitions"]
                         and all(p["leader_id"] >= 0 for p in t["partitions"]) for t in md["topics"])
                if ok:
                    return
                failures += 1
                await anyio.sleep(self._backoff.backoff_ms(failures) / 1000.0)

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int = 30_000) -> None:
        names = list(names)

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
        names = list(names)
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
        raise errors.InvalidTopicError(f"topic name is {len(name)} characters; the maximum is 249")
    bad = sorted(set(name) - _LEGAL)
    if bad:
        raise errors.InvalidTopicError(
            f"topic name {name!r} has illegal characters {''.join(bad)!r}; use ASCII letters, digits, '.', '_', '-'")
