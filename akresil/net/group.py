"""Consumer-group membership over the classic protocol: the I/O shell around ``core.group_state``.

``GroupCoordinator.run()`` is one background task with two loops in its own task group:

- the *membership* loop finds the coordinator (FindCoordinator, KIP-580 backoff between failed lookups),
  and whenever the core says a (re)join is due runs one rebalance: revoke or lose partitions as
  ``core.group_rebalance`` plans, JoinGroup (MEMBER_ID_REQUIRED answered by rejoining with the given id),
  the leader's assignment, SyncGroup, then the listener callbacks. Every listener callback runs here, one
  at a time, so a user never sees two callbacks overlap;
- the *heartbeat* loop sleeps until the core's next timer (heartbeat due, session expiry, poll expiry) and
  sends Heartbeat or leaves the group after a poll timeout.

All requests go through ``Cluster.request``, so KIP-219 mutes and reconnect backoff apply to the coordinator
too, on the coordinator's own connection (``coordinator_lane``): a broker answers one connection's requests in
order, so on the connection that carries a long-poll Fetch each heartbeat and rejoin would wait behind it.
``commit`` and ``fetch_committed`` run in the caller's task and retry retriable errors within
``request_timeout_ms``. A fatal error (fenced static member, authorization, misconfiguration) stops the
loops; ``fatal_error`` holds it and ``wait_assignment``/``commit``/``fetch_committed`` raise it.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

import anyio
import anyio.abc

from .. import errors
from ..config import Config
from ..core.assignors import ASSIGNORS, Assignment, Assignor, Subscription, choose_protocol
from ..core.backoff import ExponentialBackoff, RetryState
from ..core.group_rebalance import (ASSIGNMENT_VERSION, SUBSCRIPTION_VERSION, assignment_body, leader_assign,
                                    parse_assignment, parse_subscription, partition_counts, plan_assignment,
                                    plan_join_prepare, subscription_body)
from ..core.group_state import (NO_GENERATION, Action, Expiry, Generation, GroupMembership, MemberState,
                                classify_commit_error, classify_find_coordinator_error, classify_join_error,
                                classify_sync_error, error_for)
from ..protocol.api import ApiKey, decode_versioned, encode_versioned
from ..types import TopicPartition
from .cluster import Cluster, coordinator_lane
from .group_member import CommitOffsets, GroupOffsets, RebalanceListener

log = logging.getLogger(__name__)

__all__ = ["GroupCoordinator", "RebalanceListener"]

PROTOCOL_TYPE = "consumer"
_MEMBER_ID_REQUIRED = errors.MemberIdRequiredError.errno
_TRANSPORT_ERRORS = (errors.KafkaConnectionError, errors.RequestTimeoutError)


class GroupCoordinator:
    """One consumer's membership in ``config.group_id``: joins, heartbeats, assignment, offset commits."""

    def __init__(self, cluster: Cluster, config: Config, *, subscription: Callable[[], set[str]],
                 listener: RebalanceListener | None, on_assignment_changed: Callable[[], None],
                 committed_offsets_for_revoke: Callable[[], dict[TopicPartition, int]] | None = None) -> None:
        if not config.group_id:
            raise errors.ConfigError("group_id: a GroupCoordinator needs a non-empty group_id")
        if not callable(subscription):
            raise TypeError("subscription must be a callable returning the set of subscribed topics")
        if not callable(on_assignment_changed):
            raise TypeError("on_assignment_changed must be callable")
        self._cluster = cluster
        self._config = config
        self.group_id: str = config.group_id
        self._subscription = subscription
        self._listener = listener
        self._on_assignment_changed = on_assignment_changed
        self._commit_for_revoke = committed_offsets_for_revoke
        self._protocol = choose_protocol(config.partition_assignment_strategy)
        self._assignors: dict[str, Assignor] = {
            name: ASSIGNORS[name]() for name in config.partition_assignment_strategy}
        self._backoff = ExponentialBackoff(config.retry_backoff_ms, config.retry_backoff_max_ms, rng=cluster.rng)
        self._core = GroupMembership(
            session_timeout_ms=config.session_timeout_ms, heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms, retry_backoff=self._backoff,
            group_instance_id=config.group_instance_id, now=cluster.clock())
        self._rebalance_timeout_ms: int = config.rebalance_timeout_ms
        #: JoinGroup/SyncGroup wait on other members for up to the rebalance timeout (Java adds 5 s)
        self._join_timeout_ms = max(config.request_timeout_ms, self._rebalance_timeout_ms + 5_000)
        self.assignment: frozenset[TopicPartition] = frozenset()
        self._joined_topics: frozenset[str] = frozenset()
        #: leader only: the partition counts its last assignment used (a change triggers a rebalance)
        self._leader_counts: dict[str, int] | None = None
        self._leader_topics: frozenset[str] = frozenset()
        self._changed = anyio.Event()
        self._lookup_lock = anyio.Lock()
        self._running = False
        self._closing = False
        self._run_scope: anyio.CancelScope | None = None
        self._run_done: anyio.Event | None = None
        self._metadata_hooked = False
        #: the coordinator last found: the next lookup (made only after it failed) must not get it from the cache
        self._last_coordinator: int | None = None
        self._offsets = GroupOffsets(cluster, self.group_id, request_timeout_ms=config.request_timeout_ms,
                                     backoff=self._backoff, coordinator=self._ensure_coordinator,
                                     coordinator_lost=self._coordinator_dead)

    # ------------------------------------------------------------------ public state
    @property
    def generation_id(self) -> int:
        return self._core.generation.generation_id

    @property
    def member_id(self) -> str:
        return self._core.generation.member_id

    @property
    def state(self) -> MemberState:
        return self._core.state

    @property
    def coordinator_id(self) -> int | None:
        return self._core.coordinator

    @property
    def fatal_error(self) -> errors.KafkaError | None:
        return self._core.fatal

    @property
    def rebalance_protocol(self) -> str:
        return self._protocol

    def _notify(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def request_rejoin(self, reason: str) -> None:
        """The subscription changed (regex match, subscribe()): rejoin with the new topic set."""
        self._core.request_rejoin(reason)
        self._notify()

    def poll_happened(self, now_ms: float) -> None:
        """The application polled (max_poll_interval_ms bookkeeping); after a poll timeout this rejoins."""
        if self._core.poll(now_ms):
            self._notify()

    async def wait_assignment(self) -> None:
        """Wait until the member is STABLE with no rebalance pending (raises the fatal error, if any)."""
        while True:
            changed = self._changed
            self._raise_if_unusable()
            if self._core.stable and not self._core.rejoin_needed:
                return
            await changed.wait()

    def _raise_if_unusable(self) -> None:
        if self._core.fatal is not None:
            raise self._core.fatal
        if self._closing:
            raise errors.ClientClosedError("group membership is closed")

    # ------------------------------------------------------------------ the background task
    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Membership and heartbeats until ``leave()`` or a fatal error (then ``fatal_error`` is set)."""
        if self._running:
            raise errors.IllegalStateError("GroupCoordinator.run() is already running")
        self._running = True
        self._run_done = anyio.Event()
        self._core.poll(self._cluster.clock())  # the poll timer starts with the membership
        if not self._metadata_hooked:
            self._cluster.on_metadata_change(self._on_metadata_change)
            self._metadata_hooked = True
        try:
            with anyio.CancelScope() as scope:
                self._run_scope = scope
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._heartbeat_loop, name="akresil-group-heartbeat")
                    task_status.started()
                    await self._membership_loop()
                    tg.cancel_scope.cancel()
        finally:
            self._run_scope = None
            self._running = False
            self._run_done.set()

    async def _wait_change(self, changed: anyio.Event, until_ms: float | None) -> None:
        if until_ms is None:
            await changed.wait()
            return
        delay = until_ms - self._cluster.clock()
        if delay > 0:
            with anyio.move_on_after(delay / 1000.0):
                await changed.wait()

    async def _membership_loop(self) -> None:
        core = self._core
        while not self._closing:
            changed = self._changed
            if core.fatal is not None:
                log.error("group %s: member stopped: %r", self.group_id, core.fatal)
                if self.assignment:
                    await self._lose(self.assignment)
                self._notify()
                return
            if core.generation.generation_id < 0 and core.state is MemberState.UNJOINED and self.assignment:
                # the generation ended under us (session expiry, reset, poll timeout): drop what we held now,
                # not at the next join, so the consumer stops fetching partitions others may own
                await self._lose(self.assignment)
                continue
            topics = frozenset(self._subscribed())
            if core.stable and topics != self._joined_topics:
                core.request_rejoin("subscription changed")
            now = self._cluster.clock()
            due = core.join_due_at(now) if topics else None
            if due is None or due > now:
                await self._wait_change(changed, due)
                continue
            try:
                await self._ensure_coordinator(None)
                await self._rebalance(topics)
            except _TRANSPORT_ERRORS as exc:
                log.info("group %s: rebalance interrupted (%s); rediscovering the coordinator", self.group_id, exc)
                core.rebalance_failed(Action.COORDINATOR, self._cluster.clock())
            except errors.ClientClosedError:
                return
            except errors.KafkaError as exc:
                if core.fatal is None:
                    core.fail(exc)
            self._notify()

    def _subscribed(self) -> set[str]:
        topics = self._subscription()
        return set(topics) if topics else set()

    # ------------------------------------------------------------------ coordinator discovery
    async def _ensure_coordinator(self, deadline_ms: float | None) -> int:
        """The coordinator's node id, looking it up (one lookup at a time, KIP-580 backoff after failures)."""
        core = self._core
        async with self._lookup_lock:
            while core.coordinator is None:
                self._raise_if_unusable()
                now = self._cluster.clock()
                at = core.next_lookup_at(now)
                if deadline_ms is not None and at > deadline_ms:
                    raise errors.KafkaTimeoutError(
                        f"group {self.group_id}: coordinator not found within request_timeout_ms")
                if at > now:
                    await anyio.sleep((at - now) / 1000.0)
                await self._find_coordinator()
            return core.coordinator

    async def _find_coordinator(self) -> None:
        core = self._core
        group = self.group_id
        try:
            node_id = await self._cluster.coordinators.find(group, stale=self._last_coordinator)
        except (*_TRANSPORT_ERRORS, errors.ProtocolError) as exc:
            backoff = core.coordinator_lookup_failed(self._cluster.clock())
            log.debug("group %s: FindCoordinator failed (%s); next try in %.0f ms", group, exc, backoff)
            return
        except errors.KafkaError as exc:
            if classify_find_coordinator_error(exc.errno) is Action.FATAL:
                core.fail(exc)
                self._notify()
                raise
            backoff = core.coordinator_lookup_failed(self._cluster.clock())
            log.debug("group %s: FindCoordinator: %s; next try in %.0f ms", group, exc, backoff)
            return
        log.debug("group %s: coordinator is node %d", group, node_id)
        self._last_coordinator = node_id
        core.coordinator_found(node_id)
        self._notify()

    def _coordinator_dead(self, why: object) -> None:
        if self._core.coordinator is not None:
            log.info("group %s: coordinator %s unusable (%s); rediscovering", self.group_id, self._core.coordinator,
                     why)
        self._core.coordinator_dead(self._cluster.clock())
        self._notify()

    # ------------------------------------------------------------------ one rebalance
    async def _rebalance(self, topics: frozenset[str]) -> None:
        core = self._core
        plan = plan_join_prepare(self._protocol, self.assignment, topics,
                                 generation_reset=core.generation.generation_id < 0)
        if plan.lost:
            await self._lose(plan.lost)
        if plan.revoke:
            await self._revoke(plan.revoke)
        coordinator = core.coordinator
        if coordinator is None:
            return  # a commit on revoke found the coordinator gone: the loop rediscovers it
        reason = core.join_sent(self._cluster.clock())
        self._notify()
        owned = self.assignment
        protocols = [{"name": name, "metadata": self._subscription_bytes(assignor, topics, owned)}
                     for name, assignor in self._assignors.items()]
        sent = core.generation
        instance_id = core.group_instance_id

        def join_body(version: int) -> dict[str, Any]:
            body: dict[str, Any] = {
                "group_id": self.group_id, "session_timeout_ms": self._config.session_timeout_ms,
                "rebalance_timeout_ms": self._rebalance_timeout_ms, "member_id": sent.member_id,
                "protocol_type": PROTOCOL_TYPE, "protocols": protocols}
            if version >= 5:
                body["group_instance_id"] = instance_id
            if version >= 8:
                body["reason"] = reason[:255]
            return body

        _, response = await self._cluster.request(coordinator_lane(coordinator), ApiKey.JOIN_GROUP, join_body,
                                                  min_version=5 if instance_id else 0,
                                                  timeout_ms=self._join_timeout_ms)
        code = int(response["error_code"])
        action = classify_join_error(code)
        if action is not Action.OK:
            if code == _MEMBER_ID_REQUIRED:
                core.member_id_required(response.get("member_id") or "")
            log.debug("group %s: JoinGroup error %d -> %s", self.group_id, code, action.value)
            self._rebalance_failed(action, code, "JoinGroup")
            return
        generation = int(response["generation_id"])
        member_id = str(response["member_id"])
        protocol: str | None = response.get("protocol_name")
        core.join_succeeded(generation, member_id, protocol, self._cluster.clock())
        self._notify()
        assignor = self._assignors.get(protocol) if protocol is not None else None
        if assignor is None or protocol is None:
            core.fail(errors.InconsistentGroupProtocolError(
                f"group {self.group_id}: coordinator chose protocol {protocol!r}, not one of "
                f"{', '.join(self._assignors)}"))
            return
        assignments: list[dict[str, Any]] = []
        if response.get("leader") == member_id:
            assignments = await self._lead(assignor, response, skip=bool(response.get("skip_assignment")))
        log.info("group %s: joined generation %d as %s%s (protocol %s)", self.group_id, generation, member_id,
                 " (leader)" if response.get("leader") == member_id else "", protocol)
        await self._sync(coordinator, core.generation, protocol, assignor, assignments, topics)

    def _subscription_bytes(self, assignor: Assignor, topics: frozenset[str],
                            owned: frozenset[TopicPartition]) -> bytes:
        body = subscription_body(topics, owned=owned, generation_id=self._core.generation.generation_id,
                                 user_data=assignor.subscription_user_data(sorted(topics), owned))
        return encode_versioned("ConsumerProtocolSubscription", SUBSCRIPTION_VERSION, body)

    async def _lead(self, assignor: Assignor, response: dict[str, Any], *, skip: bool) -> list[dict[str, Any]]:
        """The leader's part (Java's onLeaderElected): decode every member's subscription, make sure the
        metadata covers all their topics, run the assignor, encode each member's assignment."""
        subscriptions: dict[str, Subscription] = {}
        for member in response.get("members") or ():
            try:
                _, body = decode_versioned("ConsumerProtocolSubscription", member["metadata"])
                subscriptions[member["member_id"]] = parse_subscription(body, member.get("group_instance_id"))
            except (ValueError, TypeError) as exc:
                raise errors.ProtocolError(f"group {self.group_id}: member {member.get('member_id')!r} sent a "
                                           f"malformed subscription: {exc}") from exc
        all_topics = frozenset(t for sub in subscriptions.values() for t in sub.topics)
        self._cluster.add_topics(all_topics)

        def covered() -> bool:
            snap = self._cluster.metadata.snapshot
            return all(t in snap.topics or t in snap.topic_errors for t in all_topics)

        if not covered():
            try:
                await self._cluster.wait_for_metadata(timeout_ms=self._config.request_timeout_ms, until=covered)
            except TimeoutError:
                log.warning("group %s: metadata for %s incomplete; assigning what is known", self.group_id,
                            sorted(all_topics))
        counts = partition_counts(all_topics, self._cluster.metadata.snapshot.topics)
        self._leader_counts, self._leader_topics = counts, all_topics
        if skip:
            return []  # KIP-814: a static leader rejoining; the coordinator keeps the current assignment
        try:
            result = leader_assign(assignor, counts, subscriptions)
        except (ValueError, TypeError) as exc:
            raise errors.IllegalStateError(f"group {self.group_id}: assignor {assignor.name!r} failed: {exc}") from exc
        return [{"member_id": m, "assignment": encode_versioned("ConsumerProtocolAssignment", ASSIGNMENT_VERSION,
                                                                 assignment_body(a))}
                for m, a in sorted(result.items())]

    async def _sync(self, coordinator: int, sent: Generation, protocol: str, assignor: Assignor,
                    assignments: list[dict[str, Any]], topics: frozenset[str]) -> None:
        core = self._core
        instance_id = core.group_instance_id

        def sync_body(version: int) -> dict[str, Any]:
            body: dict[str, Any] = {"group_id": self.group_id, "generation_id": sent.generation_id,
                                    "member_id": sent.member_id, "assignments": assignments}
            if version >= 3:
                body["group_instance_id"] = instance_id
            if version >= 5:
                body["protocol_type"] = PROTOCOL_TYPE
                body["protocol_name"] = protocol
            return body

        _, response = await self._cluster.request(coordinator_lane(coordinator), ApiKey.SYNC_GROUP, sync_body,
                                                  timeout_ms=self._join_timeout_ms)
        code = int(response["error_code"])
        action = classify_sync_error(code)
        if action is not Action.OK:
            log.debug("group %s: SyncGroup error %d -> %s", self.group_id, code, action.value)
            self._rebalance_failed(action, code, "SyncGroup")
            return
        if core.generation != sent:
            return  # a heartbeat reset the member meanwhile: the membership loop starts over
        raw = response.get("assignment") or b""
        assignment = parse_assignment(decode_versioned("ConsumerProtocolAssignment", raw)[1]) if raw \
            else Assignment([])
        core.sync_succeeded(self._cluster.clock())
        assignor.on_assignment(assignment, sent.generation_id)
        plan = plan_assignment(self._protocol, self.assignment, assignment.partitions, topics)
        self._joined_topics = topics
        if plan.revoke:
            await self._revoke(plan.revoke)
        self._set_assignment(plan.assigned)
        if plan.rejoin:
            core.request_rejoin(plan.rejoin)
        log.info("group %s: generation %d assignment: %d partition(s) (+%d -%d)%s", self.group_id,
                 sent.generation_id, len(plan.assigned), len(plan.added), len(plan.revoke),
                 f"; rejoining: {plan.rejoin}" if plan.rejoin else "")
        self._notify()
        await self._call_listener("on_partitions_assigned", plan.added, always=True)

    def _rebalance_failed(self, action: Action, code: int, api: str) -> None:
        error = error_for(code, f"{api} for group {self.group_id}") if action is Action.FATAL else None
        if action is Action.COORDINATOR:
            self._coordinator_dead(f"{api} error {code}")
        self._core.rebalance_failed(action, self._cluster.clock(), error, code=code)
        self._notify()

    # ------------------------------------------------------------------ assignment changes and callbacks
    def _set_assignment(self, partitions: frozenset[TopicPartition]) -> None:
        if partitions != self.assignment:
            self.assignment = partitions
            try:
                self._on_assignment_changed()
            except Exception:  # noqa: BLE001 - the consumer's bookkeeping must not stop the membership
                log.exception("group %s: on_assignment_changed failed", self.group_id)

    async def _revoke(self, partitions: frozenset[TopicPartition]) -> None:
        """Commit the positions of ``partitions`` (commit on revoke), tell the listener, then drop them."""
        if self._commit_for_revoke is not None:
            try:
                positions = self._commit_for_revoke()
                offsets = {tp: (off, None, None) for tp, off in positions.items() if tp in partitions}
                if offsets:
                    await self._commit_on_revoke(offsets)
            except errors.KafkaError as exc:
                log.warning("group %s: commit before revoking %d partition(s) failed: %r", self.group_id,
                            len(partitions), exc)
        await self._call_listener("on_partitions_revoked", partitions)
        self._set_assignment(self.assignment - partitions)

    async def _lose(self, partitions: frozenset[TopicPartition]) -> None:
        log.warning("group %s: lost %d partition(s) (generation ended)", self.group_id, len(partitions))
        await self._call_listener("on_partitions_lost", partitions)
        self._set_assignment(self.assignment - partitions)
        self._notify()

    async def _call_listener(self, name: str, partitions: frozenset[TopicPartition], *, always: bool = False) -> None:
        if self._listener is None or (not partitions and not always):
            return
        method = getattr(self._listener, name, None)
        if method is None and name == "on_partitions_lost":
            method = getattr(self._listener, "on_partitions_revoked", None)
        if method is None:
            return
        try:
            await method(set(partitions))
        except Exception:  # noqa: BLE001 - a failing listener must not wedge the group (Java logs it too)
            log.exception("group %s: rebalance listener %s failed", self.group_id, name)

    def _on_metadata_change(self) -> None:
        """Leader only: a partition count change in any member's topics needs a new assignment."""
        if self._closing or self._leader_counts is None or not self._core.stable:
            return
        counts = partition_counts(self._leader_topics, self._cluster.metadata.snapshot.topics)
        if counts != self._leader_counts and all(t in counts for t in self._leader_counts):
            self._leader_counts = counts
            self.request_rejoin("partition counts of the group's topics changed")

    # ------------------------------------------------------------------ heartbeats and timers
    async def _heartbeat_loop(self) -> None:
        core = self._core
        while not self._closing and core.fatal is None:
            changed = self._changed
            now = self._cluster.clock()
            expired = core.expire(now)
            if Expiry.SESSION in expired:
                log.warning("group %s: no successful heartbeat for session_timeout_ms=%d; partitions lost",
                            self.group_id, core.session_timeout_ms)
                self._notify()
            if Expiry.POLL in expired:
                await self._leave_group("max_poll_interval_ms passed without a poll")
                self._notify()
            if expired:
                continue
            if core.in_generation and core.coordinator is None:
                try:
                    await self._ensure_coordinator(core.session_expires_at())
                except errors.KafkaTimeoutError:
                    # the next lookup would come after the session ends: wait for the session timer
                    await self._wait_change(changed, core.session_expires_at())
                except errors.ClientClosedError:
                    return
                except errors.KafkaError:
                    self._notify()
                continue
            due = core.heartbeat_due_at(now)
            if due is not None and due <= now:
                await self._heartbeat()
                continue
            await self._wait_change(changed, core.next_timer_at(now))

    async def _heartbeat(self) -> None:
        core = self._core
        coordinator = core.coordinator
        assert coordinator is not None
        sent = core.heartbeat_sent(self._cluster.clock())
        instance_id = core.group_instance_id

        def body(version: int) -> dict[str, Any]:
            b: dict[str, Any] = {"group_id": self.group_id, "generation_id": sent.generation_id,
                                 "member_id": sent.member_id}
            if version >= 3:
                b["group_instance_id"] = instance_id
            return b

        try:
            _, response = await self._cluster.request(coordinator_lane(coordinator), ApiKey.HEARTBEAT, body)
        except _TRANSPORT_ERRORS as exc:
            core.heartbeat_failed(self._cluster.clock())
            self._coordinator_dead(exc)
            return
        except errors.AuthenticationError as exc:
            # a reconnect to the coordinator was refused: fatal for the member (as for every other request
            # path), surfaced from the consumer's next call; never a crash of the heartbeat task
            core.fail(exc)
            self._notify()
            return
        code = int(response["error_code"])
        action = core.heartbeat_answered(code, sent, self._cluster.clock())
        if action not in (Action.OK, Action.IGNORE):
            log.info("group %s: heartbeat error %d -> %s", self.group_id, code, action.value)
            self._notify()

    async def _leave_group(self, reason: str) -> None:
        """LeaveGroup for a dynamic member (a static one just stops: the coordinator keeps its slot until
        the session times out), then forget the generation."""
        core = self._core
        gen, coordinator = core.generation, core.coordinator
        if not core.is_static and gen.member_id and coordinator is not None:
            def body(version: int) -> dict[str, Any]:
                if version >= 3:
                    member: dict[str, Any] = {"member_id": gen.member_id, "group_instance_id": None}
                    if version >= 5:
                        member["reason"] = reason[:255]
                    return {"group_id": self.group_id, "members": [member]}
                return {"group_id": self.group_id, "member_id": gen.member_id}

            try:
                with anyio.fail_after(self._config.request_timeout_ms / 1000.0):
                    _, response = await self._cluster.request(coordinator_lane(coordinator), ApiKey.LEAVE_GROUP, body)
                code = int(response.get("error_code", 0))
                if code:
                    log.debug("group %s: LeaveGroup error %d (ignored)", self.group_id, code)
            except (errors.KafkaError, TimeoutError) as exc:
                log.debug("group %s: LeaveGroup failed (%r); the session timeout will evict us", self.group_id,
                          exc)
        log.info("group %s: member %s left the group: %s", self.group_id, gen.member_id or "-", reason)
        core.left_group(reason)

    async def leave(self) -> None:
        """Close the membership: stop the background loops, revoke (committing positions) or lose what we
        own, and send LeaveGroup unless the member is static (static members keep their slot, KIP-345)."""
        if self._closing:
            return
        if self._run_scope is not None:
            self._run_scope.cancel()
            if self._run_done is not None:
                with anyio.move_on_after(self._config.request_timeout_ms / 1000.0):
                    await self._run_done.wait()
        try:
            if self.assignment and self._core.fatal is None:
                if self._core.stable:
                    await self._revoke(self.assignment)
                else:
                    await self._lose(self.assignment)
            if self._core.fatal is None:
                await self._leave_group("consumer closing")
        finally:
            self._closing = True
            self._notify()

    # ------------------------------------------------------------------ offsets
    def _commit_generation(self) -> Generation:
        """The generation a commit speaks for: none for a consumer that never joined (manual assignment);
        a joined member may only commit while STABLE (Java: CommitFailed / RebalanceInProgress otherwise)."""
        core = self._core
        if not self._running and core.generation is NO_GENERATION:
            return NO_GENERATION
        if not core.stable:
            raise errors.CommitFailedError(
                f"group {self.group_id}: cannot commit while the member is {core.state.value}; the group "
                "is rebalancing and the partitions may move (their records will be redelivered)")
        return core.generation

    async def commit(self, offsets: CommitOffsets) -> None:
        """OffsetCommit ``{tp: (offset, leader_epoch, metadata)}``; retriable errors are retried with
        backoff within ``request_timeout_ms``. Raises ``CommitFailedError`` when the group rebalanced."""
        pending = _check_offsets(offsets)
        if not pending:
            return
        self._raise_if_unusable_for_offsets()
        generation = self._commit_generation()
        try:
            await self._commit_at(pending, generation)
        except _GenerationMoved as moved:
            self._settle_commit_failure(moved, generation)

    async def _commit_at(self, pending: dict[TopicPartition, tuple[int, int, str]], generation: Generation) -> None:
        """OffsetCommit of ``pending`` for ``generation`` until done; raises ``_GenerationMoved`` (the caller
        decides what it means for the member) or what must not be retried."""
        await self._offsets.commit(pending, identity=lambda: (generation.generation_id, generation.member_id),
                                   instance_id=self._core.group_instance_id, judge=self._judge_commit_error)

    def _settle_commit_failure(self, moved: _GenerationMoved, generation: Generation) -> None:
        """A commit learnt that the group moved on: reset (ILLEGAL_GENERATION keeps the member id) or rejoin,
        then raise ``CommitFailedError`` (Java's OffsetCommitResponseHandler)."""
        core, error = self._core, moved.error
        if moved.action is Action.RESET and core.generation == generation and generation is not NO_GENERATION:
            core.reset_generation(f"commit: {type(error).__name__}",
                                  keep_member_id=isinstance(error, errors.IllegalGenerationError))
        else:
            core.request_rejoin(f"commit: {type(error).__name__}")
        self._notify()
        raise errors.CommitFailedError(
            f"group {self.group_id}: commit failed, the group rebalanced ({type(error).__name__}); "
            "the partitions may have moved and their records will be redelivered") from error

    async def _commit_on_revoke(self, offsets: CommitOffsets) -> None:
        """Commit positions of partitions about to be revoked, while the member still owns them.

        Kafka keeps the generation unchanged while a rebalance is being prepared (it only moves on when
        every member has rejoined), so the current generation is accepted here. A broker that starts the
        next generation as soon as a rebalance begins (noida-db) answers ILLEGAL_GENERATION for it; our
        JoinGroup has not gone out, so that generation cannot be complete and no one else owns these
        partitions yet: the commit is retried once for the next generation id. Kafka rejects that retry
        (ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID), and the original failure applies as before."""
        pending = _check_offsets(offsets)
        if not pending:
            return
        self._raise_if_unusable_for_offsets()
        generation = self._commit_generation()
        try:
            await self._commit_at(pending, generation)
            return
        except _GenerationMoved as moved:
            if not (isinstance(moved.error, errors.IllegalGenerationError) and self._core.generation == generation
                    and generation.generation_id >= 0 and self._core.rejoin_needed):
                self._settle_commit_failure(moved, generation)
            first = moved
        following = Generation(generation.generation_id + 1, generation.member_id, generation.protocol)
        try:
            await self._commit_at(pending, following)
        except _GenerationMoved:
            self._settle_commit_failure(first, generation)
        log.debug("group %s: revoke commit accepted for generation %d (broker started it before our rejoin)",
                  self.group_id, following.generation_id)

    def _judge_commit_error(self, code: int, error: errors.KafkaError) -> None:
        """What an OffsetCommit error means for a classic member (Java's OffsetCommitResponseHandler): the group
        moved on (``_GenerationMoved``), the member is done (fatal), this commit fails, or retry."""
        action = classify_commit_error(code)
        if action is Action.RESET or action is Action.REJOIN:
            raise _GenerationMoved(action, error)
        if action is Action.FATAL:
            self._core.fail(error)
            self._notify()
            raise error
        if action is Action.FAIL:
            raise error

    def _raise_if_unusable_for_offsets(self) -> None:
        if self._core.fatal is not None:
            raise self._core.fatal
        if self._closing:
            raise errors.ClientClosedError("group membership is closed")

    async def fetch_committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: nothing committed); OffsetFetch v1-v9, retried within
        ``request_timeout_ms``. Asks for stable offsets (KIP-447): pending transactional commits are waited out."""
        wanted = [_check_tp(tp) for tp in tps]
        if not wanted:
            return {}
        self._raise_if_unusable_for_offsets()
        return await self._offsets.fetch(wanted)


class _GenerationMoved(Exception):
    """An OffsetCommit answer saying the group moved on (RESET or REJOIN ``action``, with the broker's error)."""

    def __init__(self, action: Action, error: errors.KafkaError) -> None:
        super().__init__(repr(error))
        self.action = action
        self.error = error


# ---------------------------------------------------------------------------- request bodies
def _check_tp(tp: object) -> TopicPartition:
    if not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str) or not tp[0] \
            or isinstance(tp[1], bool) or not isinstance(tp[1], int) or tp[1] < 0:
        raise ValueError(f"expected TopicPartition(topic, partition >= 0), got {tp!r}")
    return TopicPartition(tp[0], tp[1])


def _check_offsets(offsets: CommitOffsets) -> dict[TopicPartition, tuple[int, int, str]]:
    out: dict[TopicPartition, tuple[int, int, str]] = {}
    for tp, value in offsets.items():
        tp = _check_tp(tp)
        if not isinstance(value, tuple) or len(value) != 3:
            raise ValueError(f"commit {tp}: expected (offset, leader_epoch, metadata), got {value!r}")
        offset, epoch, metadata = value
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"commit {tp}: offset must be an int >= 0, got {offset!r}")
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int)):
            raise ValueError(f"commit {tp}: leader_epoch must be an int or None, got {epoch!r}")
        if metadata is not None and not isinstance(metadata, str):
            raise ValueError(f"commit {tp}: metadata must be a str or None, got {metadata!r}")
        out[tp] = (offset, -1 if epoch is None else epoch, metadata or "")
    return out
