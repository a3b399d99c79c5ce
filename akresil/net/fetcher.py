"""The consumer's I/O shell: one task that turns ``FetchState`` plans into Fetch and ListOffsets requests.

Each turn it asks the core (``core.fetch_state.FetchState``) for the Fetches to send (one per leader without
one outstanding), the offset lookups due (committed offsets from the group, resets through ListOffsets),
starts a task for each, then sleeps until the earliest backoff the core names or a wake-up (records drained,
seek/pause/resume, a response, a metadata change). No polling.

The plan skips a node that may not be sent to yet (KIP-219 mute, reconnect backoff: its node state's
``next_send_at``) and wakes at that time; requests go out through ``Cluster.request``, which waits out the same
gates should one start meanwhile, and the throttle time of every answer is fed back to the node state. The Fetch
version is the highest both sides support, capped at 12 when a topic's id is unknown (Fetch 13+ names topics
by id only; noida-db advertises Fetch 13 yet hands out all-zero topic ids).

An ``AuthenticationError`` (SASL refused or TLS not verified, on any connection of the client, including one
opened long after the bootstrap) is fatal, as in the producer's Sender: it is kept in ``fatal_error``, raised
from the consumer's next call, and nothing is sent after it. Retrying would only be refused again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, cast

import anyio

from .. import errors
from ..checks import LATEST
from ..config import Config
from ..core.fetch_state import TIMESTAMP_FOR, FetchRequest, FetchState
from ..protocol.api import ApiKey
from ..types import TopicPartition
from .cluster import Cluster
from .framing import find_frame_too_large
from .router import list_offsets_at
from .signals import Broadcast, TurnLoop

if TYPE_CHECKING:     # the message TypedDicts are for type checkers only
    from ..protocol.messages import FetchRequest as FetchBody

log = logging.getLogger(__name__)
#: partitions a log line names before it only counts the rest
_NAMED = 10

#: ``await lookup(tps)`` -> ``{tp: (offset, leader_epoch) or None}``: the group's committed offsets
CommittedLookup = Callable[[list[TopicPartition]], Awaitable[Mapping[TopicPartition, "tuple[int, int] | None"]]]

_TRANSPORT_ERRORS = (errors.KafkaConnectionError, errors.RequestTimeoutError, errors.ProtocolError)
#: room left in a response frame for everything but record data (headers, per-partition fields), as librdkafka
#: keeps between fetch.max.bytes and receive.message.max.bytes
_FRAME_OVERHEAD = 512
_LEADER_ERRORS = frozenset({errors.NotLeaderOrFollowerError.errno, errors.FencedLeaderEpochError.errno,
                            errors.UnknownLeaderEpochError.errno, errors.LeaderNotAvailableError.errno,
                            errors.UnknownTopicOrPartitionError.errno})


class Fetcher:
    """Drives a ``FetchState`` over a ``Cluster``. ``run()`` is the one task; ``wake()`` nudges it."""

    def __init__(self, cluster: Cluster, state: FetchState, config: Config, *,
                 committed_lookup: CommittedLookup | None = None) -> None:
        self.cluster = cluster
        self.state = state
        self.config = config
        self.committed_lookup = committed_lookup
        self._loop = TurnLoop()
        self._data = Broadcast()
        self._tg: anyio.abc.TaskGroup | None = None
        self._stopping = False
        self.fatal_error: BaseException | None = None
        self._timeout_ms = config.request_timeout_ms + config.fetch_max_wait_ms
        # Tansu 0.6 answers min_bytes=0 with no partitions at all, so 0 goes out as 1 to every broker. Kept while
        # Tansu is a supported embedded broker (Apache Kafka reads 0 as "answer at once": a test of that needs Kafka)
        self._min_bytes = max(1, config.fetch_min_bytes)
        # ask for no more than one frame can carry (a broker still sends a first batch bigger than this, KIP-74)
        self._max_bytes = max(1, min(config.fetch_max_bytes, config.receive_message_max_bytes - _FRAME_OVERHEAD))
        cluster.on_metadata_change(self.wake)

    # ------------------------------------------------------------------ signals
    def wake(self) -> None:
        self._loop.wake()

    def signal_data(self) -> None:
        """Wake everybody waiting for records (new data, a new error, a reset resolved, close)."""
        self._data.fire()

    def data_event(self) -> anyio.Event:
        """The event the next ``signal_data`` sets; take it *before* checking the buffer, then wait on it."""
        return self._data.current()

    def stop(self) -> None:
        self._stopping = True
        self.wake()
        self.signal_data()

    async def close_sessions(self) -> None:
        """Close the KIP-227 fetch sessions of the brokers that owe us no Fetch answer (a Fetch at epoch -1 with
        no partitions, answered at once), so those brokers free them now instead of when they are evicted. Nothing
        is planned after it; best effort, bounded by ``request_timeout_ms``.

        A broker holding one of our Fetches as a long poll reads the next request on that connection only after
        answering it, up to ``fetch_max_wait_ms`` later: the Java consumer waits that out on close; akresil does
        not make ``close()`` wait for it and leaves that session to the broker's eviction (its cache frees idle
        sessions after ``min.incremental.fetch.session.eviction.ms``, two minutes by default)."""
        self._stopping = True
        busy = set(self.state.busy_nodes)
        sessions = {node: sid for node, sid in self.state.close_sessions().items() if node not in busy}
        if not sessions or self.fatal_error is not None:
            return
        cluster = self.cluster

        async def close(node: int, session_id: int) -> None:
            try:
                await cluster.request(node, ApiKey.FETCH,
                                      lambda v: cast("FetchBody", self.state.build_close_body(
                                          session_id, min_bytes=self._min_bytes)),
                                      min_version=7, timeout_ms=self.config.request_timeout_ms)
            except (errors.KafkaError, OSError) as exc:
                log.debug("closing fetch session %s on node %s failed: %s", session_id, node, exc)

        with anyio.move_on_after(self.config.request_timeout_ms / 1000.0):
            async with anyio.create_task_group() as tg:
                for node, session_id in sessions.items():
                    tg.start_soon(close, node, session_id)

    # ------------------------------------------------------------------ the loop
    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                await self._loop.run(self._turn, done=lambda: self._stopping)
            finally:
                tg.cancel_scope.cancel()

    def _turn(self) -> float | None:
        """One scheduling pass; returns ms to sleep (None: until woken)."""
        cluster, state = self.cluster, self.state
        if self.fatal_error is not None or self._stopping:
            return None
        if cluster.fatal_error is not None:      # e.g. the metadata refresher was refused
            self._fail(cluster.fatal_error)
            return None
        now = cluster.clock()
        assert self._tg is not None
        wake_at: float | None = None
        committed = state.committed_lookups_due(now)
        if committed:
            if self.committed_lookup is None:
                for tp in committed:       # no group to ask: behave as "nothing committed"
                    state.on_committed(tp, state.partitions[tp].generation, None)
            else:
                self._tg.start_soon(self._lookup_committed, state.begin_lookup(committed))
        resets = state.resets_due(now)
        if resets:
            snapshot = cluster.metadata.snapshot
            by_node: dict[int, list[TopicPartition]] = {}
            for tp in resets:
                lead = snapshot.leader_of(tp)
                if lead is None or lead[0] not in snapshot.brokers:   # as in plan_fetches: wait for metadata
                    cluster.request_metadata_refresh("reset-unknown-leader", missing=True)
                    continue
                by_node.setdefault(lead[0], []).append(tp)
            for node, tps in by_node.items():
                self._tg.start_soon(self._list_offsets, node, state.begin_lookup(tps))
        plan = state.plan_fetches(now, cluster.metadata.snapshot,
                                  lambda node: cluster.node(node).next_send_at(now))
        if plan.needs_metadata:
            cluster.request_metadata_refresh("fetch-unknown-leader", missing=True)
        for request in plan.requests:
            state.begin_fetch(request)
            self._tg.start_soon(self._fetch, request)
        if plan.wake_at is not None:
            wake_at = plan.wake_at
        at = state.lookups_retry_at(now)        # lookups backing off
        if at is not None and (wake_at is None or at < wake_at):
            wake_at = at
        if wake_at is None:
            return None
        return max(0.0, wake_at - now)

    # ------------------------------------------------------------------ fetch
    async def _fetch(self, request: FetchRequest) -> None:
        cluster, state = self.cluster, self.state
        node = request.node
        turned = False
        try:
            try:
                # waits out a KIP-219 mute and reconnect backoff, applies the response's throttle, and
                # closes the connection on transport errors
                version, response = await cluster.request(
                    node, ApiKey.FETCH, lambda v: self._body(request, v),
                    max_version=request.max_version, timeout_ms=self._timeout_ms)
            except errors.AuthenticationError as exc:
                state.on_fetch_failed(request, cluster.clock())
                self._fail(exc)
                return
            except _TRANSPORT_ERRORS as exc:
                log.debug("Fetch to node %s failed: %s", node, exc)
                now = cluster.clock()
                # the connection closed with a failure: the node's reconnect backoff paces the next Fetch
                state.on_fetch_failed(request, now, node_backing_off=cluster.node(node).next_send_at(now) is not None)
                too_large = find_frame_too_large(exc)
                if too_large is not None:
                    # the same Fetch would get the same answer: tell the application which setting to raise
                    self._fail_partitions(request, type(too_large)(
                        f"Fetch from node {node} for {_names(request)}: {too_large}",
                        size=too_large.size, limit=too_large.limit))
                    return
                cluster.request_metadata_refresh("fetch-connection-error")
                return
            except errors.ClientClosedError:
                state.on_fetch_failed(request, cluster.clock())
                return
            except errors.UnsupportedVersionError as exc:
                state.on_fetch_failed(request, cluster.clock())
                self._fail(exc)
                return
            except errors.KafkaError as exc:              # connect failures and the like: back off, refresh
                log.debug("Fetch to node %s failed: %s", node, exc)
                state.on_fetch_failed(request, cluster.clock())
                cluster.request_metadata_refresh("fetch-error")
                return
            now = cluster.clock()
            try:
                outcome = state.on_fetch_response(request, response, now, cluster.metadata)
            except errors.KafkaError as exc:             # corrupt batch (CRC), malformed records
                self._fail_partitions(request, exc)
                return
            if outcome.refresh is not None:
                cluster.request_metadata_refresh(outcome.refresh)
            # plan before waking the application: the Fetch this answer allows is written before the
            # application works through the records it is handed, so the broker serves it meanwhile
            self._loop.turn_now()
            turned = True
            if outcome.data:
                self.signal_data()
        finally:
            if not turned:
                self.wake()

    def _body(self, request: FetchRequest, version: int) -> FetchBody:
        body = self.state.build_request_body(request, version, max_wait_ms=self.config.fetch_max_wait_ms,
                                             min_bytes=self._min_bytes)
        if body["max_bytes"] > self._max_bytes:
            body["max_bytes"] = self._max_bytes
        return cast("FetchBody", body)    # a FetchRequest body whose partition entries are packed (fetch_codec)

    def _fail_partitions(self, request: FetchRequest, exc: BaseException) -> None:
        for p in request.partitions:
            st = self.state.partitions.get(p.tp)
            if st is not None and st.generation == p.generation:
                self.state.fail(st, exc)
        self.signal_data()

    def _fail(self, exc: BaseException) -> None:
        """Stop the consumer with ``exc`` (the first fatal error wins); its next call raises it."""
        if self.fatal_error is None:
            self.fatal_error = exc
        self.signal_data()

    # ------------------------------------------------------------------ offset lookups
    async def _lookup_committed(self, generations: dict[TopicPartition, int]) -> None:
        state, cluster = self.state, self.cluster
        assert self.committed_lookup is not None
        try:
            found = await self.committed_lookup(list(generations))
        except errors.AuthenticationError as exc:
            now = cluster.clock()
            for tp, gen in generations.items():
                state.on_lookup_failed(tp, gen, now)
            self._fail(exc)
        except (errors.KafkaError, OSError) as exc:
            log.debug("committed offset lookup failed: %s", exc)
            now = cluster.clock()
            for tp, gen in generations.items():
                state.on_lookup_failed(tp, gen, now, exc if not _retriable(exc) else None)
        else:
            for tp, gen in generations.items():
                value = found.get(tp)
                if value is None:
                    state.on_committed(tp, gen, None)
                else:
                    offset, epoch = value
                    state.on_committed(tp, gen, offset, epoch)
        finally:
            self.signal_data()
            self.wake()

    async def _list_offsets(self, node: int, generations: dict[TopicPartition, int]) -> None:
        """Offset resets: ListOffsets (``net.router.list_offsets_at``, the one ListOffsets path) to ``node``,
        the leader of every partition in ``generations``; each answer or failure goes to the fetch state."""
        state, cluster = self.state, self.cluster
        snapshot = cluster.metadata.snapshot
        wanted: dict[TopicPartition, tuple[int, int]] = {}
        for tp in generations:
            st = state.partitions.get(tp)
            lead = snapshot.leader_of(tp)
            wanted[tp] = (TIMESTAMP_FOR[st.reset] if st is not None and st.reset else LATEST,
                          -1 if lead is None else lead[1])
        refresh = False
        try:
            found = await list_offsets_at(cluster, node, wanted, read_committed=state.read_committed,
                                          timeout_ms=self.config.request_timeout_ms)
        except errors.AuthenticationError as exc:
            now = cluster.clock()
            for tp, gen in generations.items():
                state.on_lookup_failed(tp, gen, now)
            self._fail(exc)
            return
        except (errors.KafkaError, OSError) as exc:
            log.debug("ListOffsets to node %s failed: %s", node, exc)
            now = cluster.clock()
            for tp, gen in generations.items():
                state.on_lookup_failed(tp, gen, now, None if _retriable(exc) or isinstance(exc, OSError) else exc)
            cluster.request_metadata_refresh("list-offsets-error")
            return
        else:
            now = cluster.clock()
            started: dict[int, list[str]] = {}      # the reset's timestamp (earliest / latest) -> "topic-p@offset"
            for tp, gen in generations.items():
                listed = found.get(tp)
                if listed is None:                   # left out of the answer: ask again after the backoff
                    state.on_lookup_failed(tp, gen, now)
                    continue
                code = listed.error_code
                if code == 0:
                    state.on_reset_offset(tp, gen, listed.offset, listed.leader_epoch)
                    started.setdefault(wanted[tp][0], []).append(f"{tp.topic}-{tp.partition}@{listed.offset}")
                    continue
                err = errors.error_for_code(code)
                if code in _LEADER_ERRORS or err.invalid_metadata:
                    refresh = True
                retriable = err.retriable or err.invalid_metadata
                state.on_lookup_failed(tp, gen, now, None if retriable else err(
                    f"ListOffsets for {tp.topic}-{tp.partition} on node {node}: {err.description}"))
            if refresh:
                cluster.request_metadata_refresh("list-offsets-not-leader")
            for timestamp, where in started.items():
                # why a consumer sees nothing of what a topic already holds (auto_offset_reset="latest", the
                # default), or all of it: said once per answer, as the Java consumer says it per partition
                log.info("reset %d partition(s) to the log %s: %s%s", len(where),
                         "end" if timestamp == LATEST else "start", ", ".join(where[:_NAMED]),
                         f" and {len(where) - _NAMED} more" if len(where) > _NAMED else "")
        finally:
            self.signal_data()
            self.wake()


def _names(request: FetchRequest) -> str:
    return ", ".join(f"{p.tp.topic}-{p.tp.partition}" for p in request.partitions)


def _retriable(exc: BaseException) -> bool:
    return bool(getattr(exc, "retriable", False) or getattr(exc, "invalid_metadata", False))

