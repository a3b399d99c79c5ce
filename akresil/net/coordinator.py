"""Coordinators of one client: the single FindCoordinator path and its cache.

A client talks to the coordinator of its group (classic, KIP-848 or share group), of its transactional id and,
for a transaction's offsets, of the consumer's group; the admin client to the coordinators of whatever groups
and transactions it is asked about. ``CoordinatorLocator`` (one per ``Cluster``: ``cluster.coordinators``)
answers all of them: one FindCoordinator request shape (v4+ batched), one cache by (key type, key), one
lookup in flight per key, and the one rule for invalidation: whoever learns that a coordinator moved
(NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost connection) passes it as ``stale`` to its next ``find``
(or calls ``forget``), so a node is dropped only by someone who saw it fail, and a newer answer another
component already cached is kept.

What a failed lookup means (retry after a backoff, or fatal such as an authorization error) is the caller's:
``find`` raises the broker's error and each caller classifies it as its protocol says. ``CoordinatorTracker``
is that caller for a group member (of any protocol) and for a consumer's offsets: the node it uses now, one
lookup at a time with KIP-580 backoff between failed ones, and the failed node handed back as ``stale``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterable

import anyio

from .. import errors
from ..core.backoff import ExponentialBackoff, RetryState
from ..core.group_state import (Action, classify_find_coordinator_error, error_for, find_coordinator_body,
                                find_coordinator_result)
from ..protocol.api import ApiKey

if TYPE_CHECKING:
    from .cluster import Cluster
    from ..protocol.messages import FindCoordinatorRequest

log = logging.getLogger(__name__)

__all__ = ["CoordinatorLocator", "CoordinatorTracker", "GROUP", "TRANSACTION"]

#: FindCoordinator key types
GROUP, TRANSACTION = 0, 1


class CoordinatorLocator:
    """FindCoordinator with a cache; see the module docstring for who invalidates what."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._cache: dict[tuple[int, str], int] = {}
        self._locks: dict[tuple[int, str], anyio.Lock] = {}

    def cached(self, key: str, key_type: int = GROUP) -> int | None:
        return self._cache.get((key_type, key))

    def forget(self, key: str, key_type: int = GROUP, *, node: int | None = None) -> None:
        """Drop the cached coordinator of ``key``; with ``node``, only if it is still that node."""
        entry = (key_type, key)
        if node is None or self._cache.get(entry) == node:
            self._cache.pop(entry, None)

    def clear(self) -> None:
        self._cache.clear()

    async def find(self, key: str, key_type: int = GROUP, *, stale: int | None = None, via: int | None = None) -> int:
        """The coordinator's node id: cached, or asked with FindCoordinator (one lookup per key at a time).

        ``stale``: the node the caller last used and saw fail; it is never returned from the cache. ``via``: the
        node to ask (default: the least loaded, others on failure). Raises the
        transport error, ``ProtocolError``, the broker's error for the FindCoordinator answer, or
        ``CoordinatorNotAvailableError`` when the named node does not appear in the metadata in time."""
        entry = (key_type, key)
        if stale is not None:
            self.forget(key, key_type, node=stale)
        node = self._cache.get(entry)
        if node is not None:
            return node
        lock = self._locks.setdefault(entry, anyio.Lock())
        async with lock:
            node = self._cache.get(entry)     # another task's lookup may have answered meanwhile
            if node is not None:
                return node
            node = await self._lookup(key, key_type, via)
            self._cache[entry] = node
            return node

    async def prefetch(self, key: str, node_id: int, key_type: int = GROUP) -> None:
        """Look ``key``'s coordinator up on ``node_id`` now and cache it (a client's start: on the bootstrap
        connection, alongside the first Metadata, rather than one round trip after it). A ``find`` meanwhile waits
        for this lookup; a failure is only logged, and the next ``find`` asks again as it would have."""
        try:
            await self.find(key, key_type, via=node_id)
        except Exception as exc:   # noqa: BLE001 (find() asks again and reports)
            log.debug("early FindCoordinator for %r on node %s failed: %s", key, node_id, exc)

    async def _lookup(self, key: str, key_type: int, via: int | None = None) -> int:
        """FindCoordinator for ``key`` on node ``via`` (default: the least loaded node, others on failure)."""
        cluster = self._cluster
        body = find_coordinator_body(key, key_type)
        min_version = 1 if key_type else 0
        if via is None:
            _, version, response = await cluster.request_any(ApiKey.FIND_COORDINATOR, body, min_version=min_version)
        else:
            version, response = await cluster.request(via, ApiKey.FIND_COORDINATOR, body, min_version=min_version)
        code, node_id, host, port = find_coordinator_result(response, version, key)
        if code:
            raise error_for(code, f"FindCoordinator for {key!r}")
        if node_id not in cluster.metadata.snapshot.brokers:
            # a broker our metadata has not seen yet: refresh before anyone connects to it
            try:
                await cluster.wait_for_metadata(timeout_ms=cluster.config.request_timeout_ms,
                                                until=lambda: node_id in cluster.metadata.snapshot.brokers)
            except TimeoutError:
                raise errors.CoordinatorNotAvailableError(
                    f"FindCoordinator for {key!r}: coordinator {node_id} ({host}:{port}) is not in the cluster "
                    "metadata") from None
        log.debug("coordinator of %r (key type %d) is node %d (%s:%d)", key, key_type, node_id, host, port)
        return node_id

    async def find_many(self, keys: Iterable[str], key_type: int = GROUP
                        ) -> dict[str, int | tuple[int, str | None]]:
        """``{key: node id}`` or ``{key: (error code, message)}`` for each key not cached: one batched
        FindCoordinator (v4+), else one request per key; what is found is cached. The admin client's routing:
        it refreshes the metadata itself for nodes it has not seen."""
        out: dict[str, int | tuple[int, str | None]] = {}
        todo = []
        for key in dict.fromkeys(keys):
            node = self._cache.get((key_type, key))
            if node is None:
                todo.append(key)
            else:
                out[key] = node
        while todo:
            asked: list[str] = []

            def body(version: int) -> FindCoordinatorRequest:
                if version >= 4:
                    asked[:] = todo
                    return {"key_type": key_type, "coordinator_keys": asked}
                asked[:] = todo[:1]
                return {"key": asked[0], "key_type": key_type}

            _, version, response = await self._cluster.request_any(
                ApiKey.FIND_COORDINATOR, body, min_version=1 if key_type else 0)
            if version >= 4:
                entries = {e["key"]: e for e in response.get("coordinators") or ()}
                for key in asked:
                    e = entries.get(key)
                    if e is None:
                        out[key] = (errors.CoordinatorNotAvailableError.errno, "no answer for this key")
                    else:
                        out[key] = e["node_id"] if not e["error_code"] else (e["error_code"], e.get("error_message"))
            else:
                code = response.get("error_code", 0)
                out[asked[0]] = response["node_id"] if not code else (code, response.get("error_message"))
            todo = [k for k in todo if k not in asked]
        for key, outcome in out.items():
            if isinstance(outcome, int):
                self._cache[(key_type, key)] = outcome
        return out


_TRANSPORT_ERRORS = (errors.KafkaConnectionError, errors.RequestTimeoutError, errors.ProtocolError)


class CoordinatorTracker:
    """The coordinator of one key (a group) as one member sees it: ``node`` while known, ``get`` to find it.

    Lookups go through the cluster's ``CoordinatorLocator`` one at a time, with the KIP-580 backoff after each
    failed one; ``lost(why)`` forgets the node, and the next lookup passes it as ``stale`` so the locator's
    cache does not hand it back. Every requester of the member (heartbeats, joins, commits, offset fetches)
    uses this one object, so they agree on the node and never look it up twice at once."""

    def __init__(self, cluster: Cluster, key: str, *, backoff: ExponentialBackoff, key_type: int = GROUP) -> None:
        self._cluster = cluster
        self.key = key
        self._key_type = key_type
        #: the coordinator's node id, None until found and after ``lost``
        self.node: int | None = None
        self._last: int | None = None
        self._retry = RetryState(backoff)
        self._lock = anyio.Lock()

    async def get(self, deadline_ms: float | None = None) -> int:
        """The coordinator's node id, looked up if unknown. Raises ``KafkaTimeoutError`` when the next lookup
        would come after ``deadline_ms`` (a clock reading), and the FindCoordinator errors that retrying cannot
        mend (authorization); transient failures are retried after the backoff."""
        async with self._lock:
            while self.node is None:
                now = self._cluster.clock()
                at = self._retry.next_allowed_at if self._retry.next_allowed_at is not None else now
                if deadline_ms is not None and at > deadline_ms:
                    raise errors.KafkaTimeoutError(
                        f"coordinator of {self.key!r} not found in time (last lookup failed; next in "
                        f"{at - now:.0f} ms)")
                if at > now:
                    await anyio.sleep((at - now) / 1000.0)
                await self._lookup()
            return self.node

    async def _lookup(self) -> None:
        try:
            node = await self._cluster.coordinators.find(self.key, self._key_type, stale=self._last)
        except _TRANSPORT_ERRORS as exc:
            backoff = self._retry.on_failure(self._cluster.clock())
            log.debug("coordinator of %r: FindCoordinator failed (%s); next try in %.0f ms", self.key, exc, backoff)
            return
        except errors.ClientClosedError:
            raise
        except errors.KafkaError as exc:
            if classify_find_coordinator_error(exc.errno) is Action.FATAL:
                raise
            backoff = self._retry.on_failure(self._cluster.clock())
            log.debug("coordinator of %r: FindCoordinator: %s; next try in %.0f ms", self.key, exc, backoff)
            return
        log.debug("coordinator of %r is node %d", self.key, node)
        self.node = self._last = node
        self._retry.on_success()

    def lost(self, why: object) -> None:
        """The node answered that it is not (or not yet) the coordinator, or its connection failed: the next
        ``get`` looks it up again."""
        if self.node is not None:
            log.info("coordinator of %r: node %s unusable (%s); looking it up again", self.key, self.node, why)
        self.node = None
