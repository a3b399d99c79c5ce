"""Request routing: which broker answers a request, and the rounds that get every item of a call answered.

A request goes to one of four places: a partition's leader (from Metadata), the coordinator of a group or a
transactional id (the cluster's ``CoordinatorLocator``: FindCoordinator, cached), the controller (Metadata's
``controller_id``), or any broker (the least loaded one). ``Router`` knows all four. Which of that broker's
connections carries the request is not the caller's business: ``Cluster.request`` picks it from the API key
(``net.cluster.lane_of``).

A call over many items (partitions, groups, config resources) runs in rounds, as franz-go's kgo shards a
request (``RequestSharded``) and as the Java admin client retries per item: ``Router.run`` routes the pending
items, sends one request per broker concurrently and reports each item's error code to
``core.admin_call.AdminCall``, which decides whether it is settled, retried or rerouted; the next round starts
after the KIP-580 backoff, and the call ends when nothing is pending or its deadline passed. The admin client
runs every call this way and the consumer its offset lookups (``offsets_for_times``, ``beginning_offsets``,
``end_offsets``).

ListOffsets has one path: ``list_offsets_at`` builds the request for a broker and reads its answer, used by
``Router.list_offsets`` (the admin's and the consumer's lookups) and by the fetcher's offset resets, which keep
their own retry state in ``core.fetch_state``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, NamedTuple, TypeVar

import anyio

from .. import errors
from ..core.admin_call import AdminCall, ItemResults
from ..core.backoff import ExponentialBackoff
from ..protocol.api import ApiKey
from ..types import TopicPartition, partitions_by_topic
from .cluster import Body, BodyBuilder, Cluster, unchecked

if TYPE_CHECKING:
    from .request_types import ControllerRequest
    from ..protocol.messages import ListOffsetsRequest, MetadataResponse

log = logging.getLogger(__name__)

__all__ = ["ListedOffset", "Route", "Router", "Send", "list_offsets_at"]

K = TypeVar("K")
#: maps a call's pending items to the brokers that should answer them (it may settle or defer items)
Route = Callable[[AdminCall[K]], Awaitable[dict[int, list[K]]]]
#: sends one broker's items and reports each item's outcome to the call
Send = Callable[[int, list[K]], Awaitable[None]]


class ListedOffset(NamedTuple):
    """One partition of a ListOffsets answer."""

    error_code: int
    offset: int
    timestamp: int
    leader_epoch: int


async def list_offsets_at(cluster: Cluster, node: int, wanted: Mapping[TopicPartition, tuple[int, int]], *,
                          read_committed: bool, timeout_ms: int) -> dict[TopicPartition, ListedOffset]:
    """ListOffsets to ``node`` for ``{tp: (timestamp, current leader epoch or -1)}``; the timestamp may be
    ``checks.EARLIEST`` / ``checks.LATEST``; ``timeout_ms``: how long the broker may take (v10+: reading tiered
    storage). Returns what the answer says of each asked partition (a partition it leaves out is missing: the
    caller decides what that means). Transport errors raise."""
    body: ListOffsetsRequest = {
        "replica_id": -1, "isolation_level": 1 if read_committed else 0, "timeout_ms": timeout_ms,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "current_leader_epoch": wanted[TopicPartition(topic, p)][1],
             "timestamp": wanted[TopicPartition(topic, p)][0], "max_num_offsets": 1} for p in ps]}
            for topic, ps in partitions_by_topic(wanted).items()]}
    _, response = await cluster.request(node, ApiKey.LIST_OFFSETS, body, min_version=1)
    out: dict[TopicPartition, ListedOffset] = {}
    for t in response.get("topics") or ():
        for p in t["partitions"]:
            tp = TopicPartition(t["name"], p["partition_index"])
            if tp in wanted:
                out[tp] = ListedOffset(p.get("error_code", 0), p.get("offset", -1), p.get("timestamp", -1),
                                       p.get("leader_epoch", -1))
    return out


class Router:
    """Sends requests where they belong over one client's ``Cluster``; ``default_timeout_ms`` bounds a call
    that names no timeout (``default_api_timeout_ms``)."""

    def __init__(self, cluster: Cluster, *, default_timeout_ms: int) -> None:
        self.cluster = cluster
        self.default_timeout_ms = default_timeout_ms
        config = cluster.config
        self._backoff = ExponentialBackoff(config.retry_backoff_ms, config.retry_backoff_max_ms, rng=cluster.rng)

    # ------------------------------------------------------------------ single requests
    async def metadata(self, topics: list[str] | None) -> MetadataResponse:
        """A fresh Metadata answer from any broker (``None``: every topic, ``[]``: none), also cached."""
        return await self.cluster.request_metadata(topics)

    async def all_nodes(self) -> list[int]:
        """Every broker's id, from a fresh Metadata answer."""
        md = await self.metadata([])
        return sorted(b["node_id"] for b in md["brokers"])

    async def _controller(self) -> int:
        md = await self.metadata([])
        controller = md.get("controller_id", -1)
        return int(controller) if controller >= 0 else self.cluster.least_loaded_node()

    async def _to_controller(self, api_key: ApiKey, body: Body | BodyBuilder, *, timeout_ms: int) -> dict[str, Any]:
        """Send to the controller, retrying NOT_CONTROLLER and connection errors with backoff until
        ``timeout_ms`` (CreateTopics / DeleteTopics, whose per-topic results are the caller's)."""
        failures = 0
        with anyio.fail_after(timeout_ms / 1000.0 + 5.0):
            while True:
                node = await self._controller()
                try:
                    _, response = await unchecked(self.cluster)(node, api_key, body)
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

    if TYPE_CHECKING:
        #: ``_to_controller`` as the type checker sees it: the response type follows the API key
        to_controller: ControllerRequest
    else:
        to_controller = _to_controller

    # ------------------------------------------------------------------ calls over many items
    def call(self, items: Iterable[K], timeout_ms: int | None, what: str) -> AdminCall[K]:
        """The bookkeeping of one call over ``items``, bounded by ``timeout_ms`` (None: the default)."""
        return AdminCall(items, now=self.cluster.clock(),
                         timeout_ms=self.default_timeout_ms if timeout_ms is None else timeout_ms,
                         backoff=self._backoff, what=what)

    async def run(self, call: AdminCall[K], route: Route[K], send: Send[K]) -> ItemResults[K, Any]:
        """Rounds of route-then-send for the pending items until every item is settled or the deadline passes.

        ``route`` maps pending items to nodes (and may settle or defer items it cannot route); ``send`` sends
        one node's items and reports each item's outcome to ``call``. Transport failures defer that node's
        items and mark their route stale; an authentication failure or a closed client ends the call."""
        clock = self.cluster.clock
        fatal: list[BaseException] = []
        while call.pending:
            remaining = call.deadline - clock()
            if remaining <= 0:
                call.expire()
                break
            with anyio.move_on_after(remaining / 1000.0):
                try:
                    plan = await route(call)
                except (errors.KafkaConnectionError, errors.RequestTimeoutError, errors.NoBrokersAvailableError) as exc:
                    call.transient_all(list(call.pending), exc, reroute=True)
                    plan = {}
                async with anyio.create_task_group() as tg:
                    for node, keys in plan.items():
                        if keys:
                            tg.start_soon(_send_guarded, call, node, keys, send, fatal)
            if fatal:
                raise fatal[0]
            at = call.end_round(clock())
            if at is None:
                break
            delay = at - clock()
            if delay > 0:
                await anyio.sleep(delay / 1000.0)
        return call.results()

    # ------------------------------------------------------------------ routes
    async def any_broker(self, call: AdminCall[K]) -> dict[int, list[K]]:
        """Every pending item to the least loaded broker."""
        return {self.cluster.least_loaded_node(): list(call.pending)}

    async def controller(self, call: AdminCall[K]) -> dict[int, list[K]]:
        """Every pending item to the controller (from fresh Metadata; any broker if it names none)."""
        node = await self._controller()
        call.stale_routes.clear()
        return {node: list(call.pending)}

    async def leaders(self, call: AdminCall[TopicPartition]) -> dict[int, list[TopicPartition]]:
        """Each partition's leader from fresh Metadata; an unknown topic or partition is a final error."""
        pending = list(call.pending)
        md = await self.metadata(sorted({tp.topic for tp in pending}))
        call.stale_routes.clear()
        topics = {t["name"]: t for t in md["topics"]}
        plan: dict[int, list[TopicPartition]] = {}
        for tp in pending:
            t = topics.get(tp.topic)
            code = t.get("error_code", 0) if t is not None else errors.UnknownTopicOrPartitionError.errno
            if code or t is None:
                call.answer(tp, code, f"{tp.topic}-{tp.partition}")
                continue
            leader = next((p["leader_id"] for p in t["partitions"] if p["partition_index"] == tp.partition), None)
            if leader is None:
                call.fail(tp, errors.UnknownTopicOrPartitionError(
                    f"{tp.topic}-{tp.partition}: topic {tp.topic!r} has no partition {tp.partition}"))
            elif leader < 0:
                call.transient(tp, errors.LeaderNotAvailableError(f"{tp.topic}-{tp.partition}: no leader"),
                               reroute=True)
            else:
                plan.setdefault(leader, []).append(tp)
        return plan

    def coordinators(self, keys: Mapping[K, str], key_type: int) -> Route[K]:
        """A route sending each item to the coordinator of its key (``keys[item]``: a group or transactional
        id): the cluster's ``CoordinatorLocator`` (batched FindCoordinator v4+, cached until an answer says the
        coordinator moved)."""
        async def route(call: AdminCall[K]) -> dict[int, list[K]]:
            locator = self.cluster.coordinators
            for item in call.stale_routes:
                locator.forget(keys[item], key_type)
            call.stale_routes.clear()
            unknown = sorted({keys[item] for item in call.pending if locator.cached(keys[item], key_type) is None})
            if unknown:
                found = await locator.find_many(unknown, key_type)
                brokers = self.cluster.metadata.snapshot.brokers
                if any(isinstance(o, int) and o not in brokers for o in found.values()):
                    await self.metadata([])   # a coordinator our metadata has not seen: learn its address
                for key, outcome in found.items():
                    if not isinstance(outcome, int):
                        for item in list(call.pending):
                            if keys[item] == key:
                                call.answer(item, outcome[0], f"FindCoordinator for {key!r}", message=outcome[1])
            plan: dict[int, list[K]] = {}
            for item in list(call.pending):
                node = locator.cached(keys[item], key_type)
                if node is not None:
                    plan.setdefault(node, []).append(item)
            return plan

        return route

    # ------------------------------------------------------------------ ListOffsets
    async def list_offsets(self, wanted: Mapping[TopicPartition, int], *, read_committed: bool,
                           timeout_ms: int | None = None) -> ItemResults[TopicPartition, tuple[int, int]]:
        """``{tp: timestamp or EARLIEST/LATEST}`` -> each partition's ``(offset, timestamp)`` or error, asked
        from its leader; leader moves and lost connections are retried within the call's timeout."""
        call: AdminCall[TopicPartition] = self.call(list(wanted), timeout_ms, "ListOffsets for")

        async def send(node: int, tps: list[TopicPartition]) -> None:
            found = await list_offsets_at(self.cluster, node, {tp: (wanted[tp], -1) for tp in tps},
                                          read_committed=read_committed,
                                          timeout_ms=self.cluster.config.request_timeout_ms)
            for tp, listed in found.items():
                call.answer(tp, listed.error_code, f"{tp.topic}-{tp.partition}", (listed.offset, listed.timestamp))

        return await self.run(call, self.leaders, send)


async def _send_guarded(call: AdminCall[K], node: int, keys: list[K], send: Send[K],
                        fatal: list[BaseException]) -> None:
    """``send`` with its failures turned into item outcomes (no exception escapes into the task group)."""
    try:
        await send(node, keys)
    except (errors.AuthenticationError, errors.ClientClosedError) as exc:
        fatal.append(exc)
    except (errors.KafkaConnectionError, errors.RequestTimeoutError) as exc:
        if isinstance(exc.__cause__, errors.ProtocolError):
            # a broker that answers with malformed bytes will do so again: report it, do not retry
            for key in keys:
                call.fail(key, errors.ProtocolError(f"node {node} sent a malformed answer: {exc.__cause__}"))
            return
        call.transient_all(keys, exc, reroute=True)
    except errors.UnsupportedVersionError as exc:
        for key in keys:
            call.fail(key, errors.UnsupportedVersionError(f"node {node}: {exc}"))
    except errors.KafkaError as exc:      # e.g. an answer missing what was asked: final for these items
        for key in keys:
            call.fail(key, exc)
