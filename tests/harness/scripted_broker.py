"""A fake Kafka cluster of N nodes on loopback whose answers a test scripts per API, for admin tests.

Every node listens on its own 127.0.0.1 port, answers ApiVersions with akresil's schema ranges (so any API,
including ones no test broker implements, e.g. ElectLeaders, negotiates) and Metadata with the whole cluster
(node ids 1..N, controller ``controller``, the topics in ``topics``: {name: [leader of each partition]});
``versions`` overrides ApiVersions ranges to script an older broker (a None range: it lacks the API); the KIP-714
telemetry APIs are left out unless ``versions`` names them, as Apache Kafka offers them only with a telemetry
plugin (otherwise every client's GetTelemetrySubscriptions would reach the handlers). Every
other request goes to ``handler(node, api_key, version, body) -> response body`` (or None to close the
connection). Each request is recorded with the node and the event loop's time, so a test can assert where
retries went and how they were spaced.
"""

from __future__ import annotations

import asyncio
import inspect
import contextlib
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

from akresil.protocol import api
from akresil.protocol.api import ApiKey

#: a broker without a client-telemetry plugin does not offer the KIP-714 APIs
_NO_TELEMETRY: dict[int, tuple[int, int] | None] = {ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: None,
                                                     ApiKey.PUSH_TELEMETRY: None}

Handler = Callable[[int, int, int, dict[str, Any]], "dict[str, Any] | None"]


@dataclass
class Request:
    node: int
    api_key: int
    version: int
    body: dict[str, Any]
    at: float


@dataclass
class ScriptedCluster:
    handler: Handler
    nodes: int = 1
    controller: int = 1
    topics: dict[str, list[int]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    #: ApiVersions ranges that differ from akresil's schema ranges (an older broker): {api key: (min, max)},
    #: or {api key: None} for an API the broker does not have
    versions: dict[int, tuple[int, int] | None] = field(default_factory=dict)
    #: topic ids Metadata gives ({name: 16 bytes}); a topic not named here gets the all-zero id ("none")
    topic_ids: dict[str, bytes] = field(default_factory=dict)
    #: more of the ApiVersions answer (v3+), e.g. ``{"finalized_features": [...], "supported_features": [...]}``
    api_versions_extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._servers: dict[int, asyncio.AbstractServer] = {}
        self.ports: dict[int, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.ports[1]}"

    def calls(self, api_key: int) -> list[Request]:
        return [r for r in self.requests if r.api_key == api_key]

    async def __aenter__(self) -> "ScriptedCluster":
        for node in range(1, self.nodes + 1):
            server = await asyncio.start_server(lambda r, w, n=node: self._serve(n, r, w), "127.0.0.1", 0)
            self._servers[node] = server
            self.ports[node] = server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for server in self._servers.values():
            server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    def _metadata(self) -> dict[str, Any]:
        return {"brokers": [{"node_id": n, "host": "127.0.0.1", "port": p} for n, p in self.ports.items()],
                "cluster_id": "scripted", "controller_id": self.controller,
                "topics": [{"error_code": 0, "name": name, "topic_id": self.topic_ids.get(name, bytes(16)),
                            "partitions": [
                    {"error_code": 0, "partition_index": i, "leader_id": leader, "leader_epoch": 0,
                     "replica_nodes": [max(leader, 1)], "isr_nodes": [max(leader, 1)]}
                    for i, leader in enumerate(leaders)]} for name, leaders in self.topics.items()]}

    async def _serve(self, node: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                try:
                    size = struct.unpack(">i", await reader.readexactly(4))[0]
                    frame = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                header, body = api.decode_request(frame)
                key, version, cid = header["api_key"], header["api_version"], header["correlation_id"]
                if key == ApiKey.API_VERSIONS:
                    offered: dict[int, tuple[int, int] | None] = {**api.SCHEMA_VERSIONS, **_NO_TELEMETRY,
                                                                   **self.versions}
                    keys = [{"api_key": int(k), "min_version": r[0], "max_version": r[1]}
                            for k, r in offered.items() if r is not None]
                    offer = {"error_code": 0, "api_keys": keys, **self.api_versions_extra}
                    writer.write(api.encode_response(key, min(version, 3), cid, offer))
                    await writer.drain()
                    continue
                self.requests.append(Request(node, key, version, body, asyncio.get_running_loop().time()))
                answer = self._metadata() if key == ApiKey.METADATA else self.handler(node, key, version, body)
                if inspect.isawaitable(answer):      # a handler may hold its answer (an ``async def`` handler)
                    answer = await answer
                if answer is None:
                    return
                writer.write(api.encode_response(key, version, cid, answer))
                await writer.drain()
        except asyncio.CancelledError:
            pass
        finally:
            writer.transport.abort()
            self._tasks.discard(task)
