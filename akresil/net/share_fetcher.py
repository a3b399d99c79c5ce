"""The share consumer's I/O shell: one task that turns ``ShareFetchState`` plans into ShareFetch and
ShareAcknowledge requests (KIP-932).

Each turn asks the core which leaders get a request now (one per leader at a time, none while a leader
backs off), hands each to its leader's long-lived sender task and sleeps until the core's earliest timer or a
wake-up (records drained, an acknowledgement to commit, an answer, a metadata change). Requests go through
``Cluster.request``: a KIP-219 mute and the reconnect backoff are waited out before sending, and every
answer's throttle time is fed back to the node state. Leader hints from answers (KIP-951 style
``CurrentLeader`` + ``NodeEndpoints``) go to the metadata cache before the refresh they also request.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Iterable

import anyio
import anyio.abc

from .. import errors
from ..core.share_state import FetchOutcome, PlanKind, ShareFetchState, SharePlan
from ..protocol.api import ApiKey
from ..types import TopicPartition
from .backend import GENERIC, LoopPrimitives, loop_primitives
from .cluster import Cluster, unchecked
from .signals import Broadcast, TurnLoop

log = logging.getLogger(__name__)

_TRANSPORT_ERRORS = (errors.KafkaConnectionError, errors.RequestTimeoutError, errors.ProtocolError)


class ShareFetcher:
    """Drives a ``ShareFetchState`` over a ``Cluster``; ``run()`` is the task, ``wake()`` nudges it."""

    def __init__(self, cluster: Cluster, state: ShareFetchState, *, request_timeout_ms: int) -> None:
        self.cluster = cluster
        self.state = state
        self._loop = TurnLoop()
        self._changed = Broadcast()
        self._tg: anyio.abc.TaskGroup | None = None
        self._stopping = False
        self._in_flight = 0
        self._idle = Broadcast()
        #: per node, the plans its sender task has yet to send, and the event that wakes that task when idle
        self._queues: dict[int, deque[SharePlan]] = {}
        self._ready: dict[int, anyio.Event] = {}
        self._rt: LoopPrimitives = GENERIC
        self.fatal_error: BaseException | None = None
        self._timeout_ms = request_timeout_ms + state.max_wait_ms
        cluster.on_metadata_change(self.wake)

    def wake(self) -> None:
        self._loop.wake()

    @property
    def rt(self) -> LoopPrimitives:
        """The running back-end's event, scope and clock, resolved on first use on the loop (``net.backend``): each
        sender makes an event per idle wait, the consumer a cancel scope per waiting poll and per commit, and
        anyio's generic ``Event()`` / ``move_on_after`` looked the back-end up every time."""
        rt = self._rt
        if rt is GENERIC:       # not resolved yet (or trio, which keeps anyio's look-ups)
            rt = self._rt = loop_primitives()
        return rt

    def poke(self) -> None:
        """``wake`` for the application's side (a poll, a commit): a turn only when the state could plan a
        request now, and taken at once in the caller, as an answer's is (``TurnLoop.turn_now``). Most pokes come
        after an answer's turn already planned what followed it; a woken loop would run after the answers
        read meanwhile had planned, costing a task switch, its sleep set up again and a turn that plans
        nothing."""
        if self.state.needs_plan(self.cluster.clock()) or self.cluster.fatal_error is not None:
            self._loop.turn_now()

    def connect_leaders(self, topics: Iterable[str]) -> None:
        """Open the connections to the leaders of ``topics``' partitions now, while the member joins, rather than
        when the assignment names them: a connection's set-up is round trips to a broker that, once the first
        fetch is out, serves them behind it (librdkafka's mock has one thread for every broker), and the
        leaders connected last would start fetching tens of milliseconds after the first. A failure here is
        only logged: the first fetch to that node connects (and reports) again."""
        assert self._tg is not None, "run() first"
        snapshot = self.cluster.metadata.snapshot
        nodes = {lead[0] for topic in topics for p in snapshot.partitions_for(topic)
                 if (lead := snapshot.leader_of(TopicPartition(topic, p))) is not None}
        for node in sorted(nodes):
            if self.cluster.connected(node) is None:
                self._tg.start_soon(self._connect, node)

    async def _connect(self, node: int) -> None:
        try:
            await self.cluster.connection(node)
        except Exception as exc:   # noqa: BLE001 (the fetch to this node connects and reports again)
            log.debug("early connection to node %s failed: %s", node, exc)

    def changed(self) -> anyio.Event:
        """The event the next answer (records, acknowledgement outcomes, an error) sets."""
        return self._changed.current()

    def notify(self) -> None:
        """Wake whoever waits on ``changed()`` without an answer: the group took a new assignment or stopped
        on a fatal error (a broker without share groups), which the consumer's next look raises."""
        self._changed.fire()
        self.wake()

    def _leader_of(self, tp: TopicPartition) -> int | None:
        lead = self.cluster.metadata.snapshot.leader_of(tp)
        return None if lead is None else lead[0]

    def _topic_id_of(self, topic: str) -> bytes | None:
        return self.cluster.metadata.snapshot.topic_ids.get(topic)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            await self._loop.run(self._turn, done=lambda: self._stopping)
            # in-flight requests finish on their own (a cancelled one would leave its answer unread)

    def _turn(self) -> float | None:
        if self.fatal_error is not None:
            return None
        if self.cluster.fatal_error is not None:
            self._fail(self.cluster.fatal_error)
            return None
        state = self.state
        now = self.cluster.clock()
        plans = state.plan(now, leader_of=self._leader_of, topic_id_of=self._topic_id_of,
                           layout=self.cluster.metadata.snapshot)
        if state.unknown_leaders:
            self.cluster.request_metadata_refresh("share-fetch-unknown-leader", missing=True)
        for plan in plans:
            self._in_flight += 1
            self._dispatch(plan)
        at = state.next_timer_at(now)
        return None if at is None else max(0.0, at - now)

    def _dispatch(self, plan: SharePlan) -> None:
        """Queue ``plan`` for its node's sender task, started on the node's first request. A task per request
        (anyio's spawn, its cancel scope, its teardown) cost about half of each fetcher turn; a node has one
        request in flight at a time anyway, so one task per node sends them one after the other."""
        node = plan.node_id
        queue = self._queues.get(node)
        if queue is None:
            queue = self._queues[node] = deque()
            assert self._tg is not None
            self._tg.start_soon(self._sender, node, queue)
        queue.append(plan)
        ready = self._ready.get(node)
        if ready is not None:
            ready.set()

    async def _sender(self, node: int, queue: deque[SharePlan]) -> None:
        """Node ``node``'s sender: sends its queued plans in order, handling each answer before the next; ends
        once the fetcher stops and nothing is queued (in-flight requests finish: a cancelled one would leave
        its answer unread)."""
        ready, new_event = self._ready, self.rt.event
        while True:
            while queue:
                await self._send(queue.popleft())
            if self._stopping:
                return
            event = ready[node] = new_event()
            await event.wait()

    async def _send(self, plan: SharePlan) -> None:
        state, cluster = self.state, self.cluster
        api = ApiKey.SHARE_FETCH if plan.kind is PlanKind.FETCH else ApiKey.SHARE_ACKNOWLEDGE
        try:
            try:
                _, response = await unchecked(cluster)(plan.node_id, api, plan.body, timeout_ms=self._timeout_ms)
            except errors.UnsupportedVersionError as exc:
                state.on_request_failed(plan, exc, cluster.clock())
                self._fail(errors.UnsupportedVersionError(
                    f"node {plan.node_id} does not support share groups ({api.name} v1): {exc}. Share groups "
                    f"need Apache Kafka 4.1+ (4.0's early-access version is not spoken)"))
                return
            except errors.AuthenticationError as exc:
                state.on_request_failed(plan, exc, cluster.clock())
                self._fail(exc)
                return
            except (*_TRANSPORT_ERRORS, errors.KafkaError) as exc:
                log.debug("%s to node %s failed: %s", api.name, plan.node_id, exc)
                state.on_request_failed(plan, exc, cluster.clock())
                cluster.request_metadata_refresh("share-connection-error")
                return
            now = cluster.clock()
            if plan.kind is PlanKind.FETCH:
                outcome = state.on_fetch_response(plan, response, now)
            else:
                outcome = state.on_ack_response(plan, response, now)
            self._apply(outcome)
        finally:
            self._in_flight -= 1
            # plan before waking the application: a request this answer unblocks (the fetch after a leader's
            # acknowledgements settled) is written before the application works through the records it holds,
            # so the broker serves it meanwhile; the loop wakes only for a sooner timer (or to see it is done)
            self._loop.turn_now()
            self._changed.fire()
            if self._in_flight == 0:
                self._idle.fire()

    def _apply(self, outcome: FetchOutcome) -> None:
        metadata = self.cluster.metadata
        for hint in outcome.hints:
            metadata.apply_leader_hint(hint.tp, hint.leader_id, hint.leader_epoch,
                                       dict(hint.endpoint) if hint.endpoint else None)
        if outcome.refresh_metadata:
            self.cluster.request_metadata_refresh("share-fetch-leader-error")

    def _fail(self, exc: BaseException) -> None:
        if self.fatal_error is None:
            self.fatal_error = exc
        self._changed.fire()

    async def stop(self, timeout_ms: float) -> None:
        """Stop planning; wait (bounded) for requests in flight so their answers are read, not dropped."""
        self._stopping = True
        self.wake()
        for event in self._ready.values():      # idle senders end
            event.set()
        with anyio.move_on_after(timeout_ms / 1000.0):
            while self._in_flight:
                await self._idle.current().wait()

    async def close_sessions(self, timeout_ms: float) -> None:
        """Send the final acknowledgements and close every share session (epoch -1), concurrently."""
        plans = self.state.close_plans(self.cluster.clock(), topic_id_of=self._topic_id_of)
        if not plans:
            return
        with anyio.move_on_after(timeout_ms / 1000.0):
            async with anyio.create_task_group() as tg:
                for plan in plans:
                    self._in_flight += 1
                    tg.start_soon(self._send, plan)
