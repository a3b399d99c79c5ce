"""The I/O shell of broker-assigned group membership (KIP-848 / KIP-932): one task that heartbeats.

``HeartbeatLoop`` asks its ``HeartbeatMembership`` (core) when the next heartbeat is due, finds the group
coordinator when the core says it must, sends the heartbeat through the ``Cluster`` (so KIP-219 mutes and
reconnect backoff apply) on the coordinator's own connection (``coordinator_lane``: never queued behind a
long-poll fetch) and hands the answer back. Every decision (epochs, intervals, what an error means, KIP-580
backoff) is the core's; this loop only sleeps and sends. ``on_change`` is called after
every answer that changed the member's target assignment or epoch, so the client can reconcile.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

import anyio

from .. import errors
from ..core.group_heartbeat import HeartbeatAction, HeartbeatMembership, MemberPhase
from ..core.group_state import Action, classify_find_coordinator_error
from ..protocol.api import ApiKey
from .cluster import Cluster, coordinator_lane

log = logging.getLogger(__name__)

_TRANSPORT_ERRORS = (errors.KafkaConnectionError, errors.RequestTimeoutError)


class HeartbeatLoop:
    """Heartbeats for one member; ``run`` until the member leaves or fails."""

    def __init__(self, cluster: Cluster, membership: HeartbeatMembership, api: ApiKey, *,
                 on_change: Callable[[], Awaitable[None]], protocol_name: str) -> None:
        self._cluster = cluster
        self.membership = membership
        self._api = api
        self._on_change = on_change
        self._protocol = protocol_name
        self.coordinator: int | None = None
        #: the node last found: passed as ``stale`` to the next lookup (it is only made after a failure)
        self._last_coordinator: int | None = None
        self._wake = anyio.Event()
        self._stopped = False
        self._change_wanted = False

    def wake(self) -> None:
        self._wake.set()

    def request_change_callback(self) -> None:
        """Run ``on_change`` from the loop's task soon (e.g. metadata can now name an assigned topic id):
        the callback may await (user callbacks, commits), so it never runs in the caller's context."""
        self._change_wanted = True
        self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    async def run(self) -> None:
        try:
            await self._run()
        except errors.ClientClosedError:
            # the client closed its connections (close() does that before it cancels its tasks) under a
            # request of ours: the loop ends with the client, it did not fail
            log.debug("group %s: client closed; heartbeats end", self.membership.group_id)

    async def _run(self) -> None:
        m = self.membership
        clock = self._cluster.clock
        while not self._stopped and m.phase not in (MemberPhase.FATAL, MemberPhase.LEFT, MemberPhase.LEAVING):
            if self._change_wanted:
                self._change_wanted = False
                await self._on_change()
                continue
            now = clock()
            poll_expiry = m.poll_expires_at()
            if poll_expiry is not None and now >= poll_expiry:
                await self._leave_stale()
                continue
            if m.needs_coordinator:
                if not m.retry.ready(now):
                    await self._sleep(m.retry.remaining_ms(now))
                    continue
                await self._find_coordinator()
                continue
            due = m.heartbeat_due_at(now)
            if due is None or due > now:
                wake_at = min((t for t in (due, poll_expiry) if t is not None), default=None)
                await self._sleep(None if wake_at is None else wake_at - now)
                continue
            await self._heartbeat()

    async def _sleep(self, delay_ms: float | None) -> None:
        self._wake = anyio.Event()
        with anyio.move_on_after(3600.0 if delay_ms is None else max(0.0, delay_ms) / 1000.0):
            await self._wake.wait()

    async def _find_coordinator(self) -> None:
        m = self.membership
        try:
            node_id = await self._cluster.coordinators.find(m.group_id, stale=self._last_coordinator)
        except (*_TRANSPORT_ERRORS, errors.ProtocolError) as exc:
            log.debug("group %s: FindCoordinator failed: %s", m.group_id, exc)
            m.on_coordinator_failed(self._cluster.clock())
            return
        except errors.ClientClosedError:
            raise
        except errors.KafkaError as exc:
            if classify_find_coordinator_error(exc.errno) is Action.FATAL:
                self._fail(exc)
            else:
                m.on_coordinator_failed(self._cluster.clock())
            return
        self.coordinator = self._last_coordinator = node_id
        m.on_coordinator_found()

    def coordinator_lost(self) -> None:
        """The coordinator answered that it is not (or not yet) the group's, or its connection failed: look it
        up again (the locator will not hand the same node back from its cache)."""
        self.coordinator = None
        self.membership.needs_coordinator = True
        self._wake.set()

    async def _leave_stale(self) -> None:
        """``max_poll_interval_ms`` passed without a poll: leave (best effort, as Java does) so the coordinator
        gives the partitions to live members; ``on_change`` then drops them. The next poll joins again."""
        m = self.membership
        log.warning("group %s: no poll within max_poll_interval_ms=%s; leaving the group until the application "
                    "polls again (handle records faster, or raise max_poll_interval_ms)", m.group_id,
                    m.max_poll_interval_ms)
        body = m.leave_stale()
        if self.coordinator is not None:
            with anyio.move_on_after(self._cluster.config.request_timeout_ms / 1000.0):
                try:
                    await self._cluster.request(coordinator_lane(self.coordinator), self._api, body)
                except errors.KafkaError as exc:
                    log.debug("group %s: leave heartbeat failed: %s", m.group_id, exc)
        await self._on_change()

    def _fail(self, error: errors.KafkaError) -> None:
        m = self.membership
        m.fatal_error = error
        m.phase = MemberPhase.FATAL

    async def _heartbeat(self) -> None:
        m = self.membership
        assert self.coordinator is not None
        before = (m.target_version, m.member_epoch)
        body = m.build_heartbeat(self._cluster.clock())
        try:
            _, response = await self._cluster.request(coordinator_lane(self.coordinator), self._api, body)
        except errors.UnsupportedVersionError as exc:
            m.on_failure(self._cluster.clock())
            self._fail(errors.UnsupportedVersionError(
                f"group {m.group_id}: the broker does not support the {self._protocol} group protocol "
                f"({self._api.name}): {exc}. It needs Apache Kafka 4.0+ for group_protocol='consumer' and "
                f"4.1+ for share groups (or librdkafka's mock cluster)"))
            return
        except _TRANSPORT_ERRORS as exc:
            log.debug("group %s: %s failed: %s", m.group_id, self._api.name, exc)
            m.on_failure(self._cluster.clock())
            return
        action = m.on_response(response, self._cluster.clock())
        if action is not HeartbeatAction.OK:
            log.debug("group %s: %s error %s -> %s", m.group_id, self._api.name, response.get("error_code"),
                      action.value)
        if action is HeartbeatAction.COORDINATOR:
            self.coordinator = None
        if (m.target_version, m.member_epoch) != before or action is HeartbeatAction.REJOIN:
            await self._on_change()

    async def leave(self, timeout_ms: float) -> None:
        """Send the leave heartbeat (epoch -1) once, best effort: the broker would expire the member anyway."""
        m = self.membership
        if m.phase in (MemberPhase.FATAL, MemberPhase.LEFT, MemberPhase.STALE) or self.coordinator is None:
            m.on_left()
            return
        body = m.leave_body()
        with anyio.move_on_after(timeout_ms / 1000.0):
            try:
                await self._cluster.request(coordinator_lane(self.coordinator), self._api, body)
            except errors.KafkaError as exc:
                log.debug("group %s: leave heartbeat failed: %s", m.group_id, exc)
        m.on_left()
