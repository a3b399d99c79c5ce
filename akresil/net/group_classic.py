"""The classic consumer-group protocol's steps for a ``GroupSession``: the I/O shell around ``core.group_state``.

``ClassicMember`` joins with JoinGroup (MEMBER_ID_REQUIRED answered by joining again with the given id),
runs the leader's assignment (``core.group_rebalance``), completes with SyncGroup, heartbeats with Heartbeat
and leaves with LeaveGroup. Its ``next_step`` tells the session what the rebalance rules (eager or cooperative,
KIP-429) ask before a join (revoke or lose) and after a SyncGroup (revoke what moved, then take the new
assignment); the session carries the steps out the way every protocol shares. JoinGroup and SyncGroup wait
on the other members for up to the rebalance timeout; heartbeats go on meanwhile from the session's
heartbeat loop (they keep the member alive while the leader assigns).

What an OffsetCommit error means here: the group moved on (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
REBALANCE_IN_PROGRESS) fails the commit with ``CommitFailedError`` and resets or rejoins, as Java's
OffsetCommitResponseHandler does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio

from .. import errors
from ..core.assignors import ASSIGNORS, Assignment, Assignor, RebalanceProtocol, Subscription, choose_protocol
from ..core.group_rebalance import (ASSIGNMENT_VERSION, SUBSCRIPTION_VERSION, AssignPlan, assignment_body,
                                    leader_assign, parse_assignment, parse_subscription, partition_counts,
                                    plan_assignment, plan_join_prepare, subscription_body)
from ..core.group_session import WAIT, Step
from ..core.group_state import (Action, Expiry, Generation, GroupMembership, MemberState, classify_commit_error,
                                classify_join_error, classify_sync_error, error_for)
from ..protocol.api import ApiKey, decode_versioned, encode_versioned
from ..types import TopicPartition
from .cluster import BodyBuilder, lane_of, unchecked
from .group_offsets import PendingOffsets
from .group_session import warn_poll_expired

if TYPE_CHECKING:
    from .group_session import GroupSession
    from ..protocol.messages import HeartbeatRequest, LeaveGroupRequest, LeaveGroupRequestMemberIdentity

log = logging.getLogger(__name__)

__all__ = ["ClassicMember"]

PROTOCOL_TYPE = "consumer"
_MEMBER_ID_REQUIRED = errors.MemberIdRequiredError.errno
_TRANSPORT_ERRORS = (errors.KafkaConnectionError, errors.RequestTimeoutError)


class ClassicMember:
    """JoinGroup / SyncGroup / Heartbeat / LeaveGroup for one ``GroupSession`` (a ``Membership``)."""

    def __init__(self, session: GroupSession) -> None:
        config = session.config
        self._session = session
        self._cluster = session.cluster
        self._config = config
        self.group_id = session.group_id
        self._protocol: RebalanceProtocol = choose_protocol(config.partition_assignment_strategy)
        self._assignors: dict[str, Assignor] = {
            name: ASSIGNORS[name]() for name in config.partition_assignment_strategy}
        self.core = GroupMembership(
            session_timeout_ms=config.session_timeout_ms, heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms, retry_backoff=session.backoff,
            group_instance_id=config.group_instance_id, now=session.clock())
        self._rebalance_timeout_ms: int = config.rebalance_timeout_ms
        #: JoinGroup/SyncGroup wait on other members for up to the rebalance timeout (Java adds 5 s)
        self._join_timeout_ms = max(config.request_timeout_ms, self._rebalance_timeout_ms + 5_000)
        self._joined_topics: frozenset[str] = frozenset()
        #: the last SyncGroup's plan, for the generation it came with, until the session has applied it
        self._pending: tuple[Generation, AssignPlan] | None = None
        #: the coordinator a JoinGroup or SyncGroup went to and has not answered (None: none outstanding)
        self._held_on: int | None = None
        #: leader only: the partition counts its last assignment used (a change triggers a rebalance)
        self._leader_counts: dict[str, int] | None = None
        self._leader_topics: frozenset[str] = frozenset()
        self._cluster.on_metadata_change(self._on_metadata_change)

    # ------------------------------------------------------------------ state
    @property
    def rebalance_protocol(self) -> str:
        return self._protocol

    @property
    def generation_id(self) -> int:
        return self.core.generation.generation_id

    @property
    def member_id(self) -> str:
        return self.core.generation.member_id

    @property
    def state(self) -> MemberState:
        return self.core.state

    @property
    def fatal_error(self) -> errors.KafkaError | None:
        return self.core.fatal

    @property
    def stable(self) -> bool:
        return self.core.stable and not self.core.rejoin_needed and self._pending is None

    def start(self, now: float) -> None:
        self.core.poll(now)   # the poll timer starts with the membership

    def fail(self, error: errors.KafkaError) -> None:
        self.core.fail(error)

    def poll(self, now: float) -> bool:
        return self.core.poll(now)

    def request_rejoin(self, reason: str) -> None:
        self.core.request_rejoin(reason)

    def may_revoke(self) -> bool:
        return self.core.stable

    # ------------------------------------------------------------------ the membership loop's steps
    def next_step(self, owned: frozenset[TopicPartition], now: float) -> Step:
        """Apply a SyncGroup's plan (revoke what moved, then take the assignment); lose what a reset generation
        held; before a due join, revoke (eager: everything; cooperative: unsubscribed topics) or lose."""
        core = self.core
        if self._pending is not None:
            generation, plan = self._pending
            if core.generation == generation:
                revoke = plan.revoke & owned
                return Step(revoke=revoke) if revoke else Step(assign=plan.assigned)
            self._pending = None          # a heartbeat reset the member meanwhile: start over
        reset = core.generation.generation_id < 0
        if reset and core.state is MemberState.UNJOINED and owned:
            # the generation ended under us (session expiry, reset, poll timeout): drop what we held now,
            # not at the next join, so the consumer stops fetching partitions others may own
            return Step(lose=owned)
        topics = self._session.subscription()
        if core.stable and topics != self._joined_topics:
            core.request_rejoin("subscription changed")
        due = core.join_due_at(now) if topics else None
        if due is None or due > now:
            return Step(wait_until=due)
        prepare = plan_join_prepare(self._protocol, owned, topics, generation_reset=reset)
        if prepare.lost:
            return Step(lose=prepare.lost)
        if prepare.revoke:
            return Step(revoke=prepare.revoke)
        return Step(join=True)

    def applied(self, step: Step, owned: frozenset[TopicPartition]) -> None:
        if step.assign is None or self._pending is None:
            return
        generation, plan = self._pending
        self._pending = None
        if plan.rejoin:
            self.core.request_rejoin(plan.rejoin)
        log.info("group %s: generation %d assignment: %d partition(s) (+%d -%d)%s", self.group_id,
                 generation.generation_id, len(plan.assigned), len(plan.added), len(plan.revoke),
                 f"; rejoining: {plan.rejoin}" if plan.rejoin else "")

    async def join(self, coordinator: int, owned: frozenset[TopicPartition]) -> None:
        """JoinGroup, the leader's assignment, SyncGroup; the plan waits in ``_pending`` for the session."""
        core = self.core
        topics = self._session.subscription()
        reason = core.join_sent(self._session.clock())
        self._session.notify()
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

        try:
            _, response = await self._held_request(coordinator, ApiKey.JOIN_GROUP, join_body,
                                                   min_version=5 if instance_id else 0)
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
            core.join_succeeded(generation, member_id, protocol, self._session.clock())
            self._session.notify()
            assignor = self._assignors.get(protocol) if protocol is not None else None
            if assignor is None or protocol is None:
                core.fail(errors.InconsistentGroupProtocolError(
                    f"group {self.group_id}: coordinator chose protocol {protocol!r}, not one of "
                    f"{', '.join(self._assignors)}"))
                return
            assignments: list[dict[str, Any]] = []
            leader = response.get("leader") == member_id
            if leader:
                assignments = await self._lead(assignor, response, skip=bool(response.get("skip_assignment")))
            log.info("group %s: joined generation %d as %s%s (protocol %s)", self.group_id, generation, member_id,
                     " (leader)" if leader else "", protocol)
            await self._sync(coordinator, core.generation, protocol, assignor, assignments, topics, owned)
        except _TRANSPORT_ERRORS as exc:
            log.info("group %s: rebalance interrupted (%s); rediscovering the coordinator", self.group_id, exc)
            self._session.coordinator.lost(exc)
            core.rebalance_failed(Action.COORDINATOR, self._session.clock())
            self._session.rebalance_failed(exc)

    async def _held_request(self, coordinator: int, api: ApiKey, body: BodyBuilder, *,
                            min_version: int = 0) -> tuple[int, dict[str, Any]]:
        """JoinGroup or SyncGroup: the broker holds it until the other members joined (up to the rebalance
        timeout). ``_held_on`` stays set if the wait is cancelled (``close()``): ``leave`` then knows that the
        coordinator connection has a request the broker still holds."""
        self._held_on = coordinator
        try:
            answer = await unchecked(self._cluster)(coordinator, api, body, min_version=min_version,
                                                 timeout_ms=self._join_timeout_ms)
        except Exception:
            self._held_on = None
            raise
        self._held_on = None
        return answer

    def _subscription_bytes(self, assignor: Assignor, topics: frozenset[str],
                            owned: frozenset[TopicPartition]) -> bytes:
        body = subscription_body(topics, owned=owned, generation_id=self.core.generation.generation_id,
                                 user_data=assignor.subscription_user_data(sorted(topics), owned),
                                 rack_id=self._session.config.client_rack or None)   # KIP-881, as Java sends it
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
                    assignments: list[dict[str, Any]], topics: frozenset[str],
                    owned: frozenset[TopicPartition]) -> None:
        core = self.core
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

        _, response = await self._held_request(coordinator, ApiKey.SYNC_GROUP, sync_body)
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
        core.sync_succeeded(self._session.clock())
        assignor.on_assignment(assignment, sent.generation_id)
        self._joined_topics = topics
        self._pending = (sent, plan_assignment(self._protocol, owned, assignment.partitions, topics))

    def _rebalance_failed(self, action: Action, code: int, api: str) -> None:
        error = error_for(code, f"{api} for group {self.group_id}")
        if action is Action.COORDINATOR:
            self._session.coordinator.lost(f"{api} error {code}")
        self.core.rebalance_failed(action, self._session.clock(), error if action is Action.FATAL else None,
                                   code=code)
        if code != _MEMBER_ID_REQUIRED and action is not Action.FATAL:   # KIP-394's extra round is no failure
            self._session.rebalance_failed(error)

    def _on_metadata_change(self) -> None:
        """Leader only: a partition count change in any member's topics needs a new assignment."""
        if self._leader_counts is None or not self.core.stable:
            return
        counts = partition_counts(self._leader_topics, self._cluster.metadata.snapshot.topics)
        if counts != self._leader_counts and all(t in counts for t in self._leader_counts):
            self._leader_counts = counts
            self._session.request_rejoin("partition counts of the group's topics changed")

    # ------------------------------------------------------------------ the heartbeat loop's steps
    async def expire(self, now: float) -> bool:
        expired = self.core.expire(now)
        if Expiry.SESSION in expired:
            log.warning("group %s: no successful heartbeat for session_timeout_ms=%d; partitions lost",
                        self.group_id, self.core.session_timeout_ms)
            self._session.coordinator.lost("session expired")
        if Expiry.POLL in expired:
            warn_poll_expired(self.group_id, self._config.max_poll_interval_ms)
            await self.leave("max_poll_interval_ms passed without a poll")
        return bool(expired)

    def heartbeat_due_at(self, now: float) -> float | None:
        return self.core.heartbeat_due_at(now)

    def heartbeat_deadline(self) -> float | None:
        return self.core.session_expires_at()

    def next_timer_at(self, now: float) -> float | None:
        return self.core.next_timer_at(now)

    async def heartbeat(self, coordinator: int) -> None:
        core = self.core
        sent = core.heartbeat_sent(self._session.clock())
        instance_id = core.group_instance_id

        def body(version: int) -> HeartbeatRequest:
            b: HeartbeatRequest = {"group_id": self.group_id, "generation_id": sent.generation_id,
                                   "member_id": sent.member_id}
            if version >= 3:
                b["group_instance_id"] = instance_id
            return b

        try:
            _, response = await self._cluster.request(coordinator, ApiKey.HEARTBEAT, body)
        except _TRANSPORT_ERRORS as exc:
            core.heartbeat_failed(self._session.clock())
            self._session.coordinator.lost(exc)
            return
        code = int(response["error_code"])
        action = core.heartbeat_answered(code, sent, self._session.clock())
        if action is Action.COORDINATOR:
            self._session.coordinator.lost(f"heartbeat error {code}")
        if action not in (Action.OK, Action.IGNORE):
            log.info("group %s: heartbeat error %d -> %s", self.group_id, code, action.value)
            self._session.notify()

    # ------------------------------------------------------------------ leaving
    async def leave(self, reason: str) -> None:
        """LeaveGroup for a dynamic member (a static one just stops: the coordinator keeps its slot until
        the session times out), then forget the generation."""
        core = self.core
        gen, coordinator = core.generation, self._session.coordinator.node
        if self._held_on is not None:
            # a JoinGroup or SyncGroup the broker still holds (close() cancelled our wait for it): a broker answers
            # one connection's requests in order, so a LeaveGroup behind it would wait up to the rebalance timeout
            # (the member's close() with it). A new connection carries the LeaveGroup; the broker drops the member
            # and completes the rebalance without it.
            self._cluster.disconnect(self._held_on, lane=lane_of(ApiKey.JOIN_GROUP))
            self._held_on = None
        if not core.is_static and gen.member_id and coordinator is not None:
            def body(version: int) -> LeaveGroupRequest:
                if version >= 3:
                    member: LeaveGroupRequestMemberIdentity = {"member_id": gen.member_id, "group_instance_id": None}
                    if version >= 5:
                        member["reason"] = reason[:255]
                    return {"group_id": self.group_id, "members": [member]}
                return {"group_id": self.group_id, "member_id": gen.member_id}

            try:
                with anyio.fail_after(self._config.request_timeout_ms / 1000.0):
                    _, response = await self._cluster.request(coordinator, ApiKey.LEAVE_GROUP, body)
                code = int(response.get("error_code", 0))
                if code:
                    log.debug("group %s: LeaveGroup error %d (ignored)", self.group_id, code)
            except (errors.KafkaError, TimeoutError) as exc:
                log.debug("group %s: LeaveGroup failed (%r); the session timeout will evict us", self.group_id,
                          exc)
        log.info("group %s: member %s left the group: %s", self.group_id, gen.member_id or "-", reason)
        core.left_group(reason)

    # ------------------------------------------------------------------ offsets
    def _commit_generation(self) -> Generation:
        """A member may only commit while STABLE (Java: CommitFailed / RebalanceInProgress otherwise)."""
        core = self.core
        if not core.stable:
            raise errors.CommitFailedError(
                f"group {self.group_id}: cannot commit while the member is {core.state.value}; the group "
                "is rebalancing and the partitions may move (their records will be redelivered)")
        return core.generation

    async def commit(self, pending: PendingOffsets, *, revoking: bool) -> None:
        """OffsetCommit for the current generation. On revoke, a broker that started the next generation as
        soon as the rebalance began (noida-db) answers ILLEGAL_GENERATION for it; our JoinGroup has not gone
        out, so that generation cannot be complete and no one else owns these partitions yet: the commit is
        retried once for the next generation id. Kafka rejects that retry (ILLEGAL_GENERATION or
        UNKNOWN_MEMBER_ID), and the original failure applies as before: on Apache Kafka the step costs one request
        and changes nothing; it stays while noida-db is a supported test broker for classic groups."""
        generation = self._commit_generation()
        try:
            await self._commit_at(pending, generation)
            return
        except _GenerationMoved as moved:
            if not (revoking and isinstance(moved.error, errors.IllegalGenerationError)
                    and self.core.generation == generation and generation.generation_id >= 0
                    and self.core.rejoin_needed):
                self._settle_commit_failure(moved, generation)
            first = moved
        following = Generation(generation.generation_id + 1, generation.member_id, generation.protocol)
        try:
            await self._commit_at(pending, following)
        except _GenerationMoved:
            self._settle_commit_failure(first, generation)
        log.debug("group %s: revoke commit accepted for generation %d (broker started it before our rejoin)",
                  self.group_id, following.generation_id)

    async def _commit_at(self, pending: PendingOffsets, generation: Generation) -> None:
        await self._session.offsets.commit(pending, identity=lambda: (generation.generation_id, generation.member_id),
                                           instance_id=self.core.group_instance_id, judge=self._judge_commit_error)

    def _settle_commit_failure(self, moved: _GenerationMoved, generation: Generation) -> None:
        """A commit learnt that the group moved on: reset (ILLEGAL_GENERATION keeps the member id) or rejoin,
        then raise ``CommitFailedError`` (Java's OffsetCommitResponseHandler)."""
        core, error = self.core, moved.error
        if moved.action is Action.RESET and core.generation == generation:
            core.reset_generation(f"commit: {type(error).__name__}",
                                  keep_member_id=isinstance(error, errors.IllegalGenerationError))
        else:
            core.request_rejoin(f"commit: {type(error).__name__}")
        self._session.notify()
        raise errors.CommitFailedError(
            f"group {self.group_id}: commit failed, the group rebalanced ({type(error).__name__}); "
            "the partitions may have moved and their records will be redelivered") from error

    def _judge_commit_error(self, code: int, error: errors.KafkaError) -> None:
        """What an OffsetCommit error means for a classic member: the group moved on (``_GenerationMoved``),
        the member is done (fatal), this commit fails, or retry."""
        action = classify_commit_error(code)
        if action is Action.RESET or action is Action.REJOIN:
            raise _GenerationMoved(action, error)
        if action is Action.FATAL:
            self.core.fail(error)
            self._session.notify()
            raise error
        if action is Action.FAIL:
            raise error


class _GenerationMoved(Exception):
    """An OffsetCommit answer saying the group moved on (RESET or REJOIN ``action``, with the broker's error)."""

    def __init__(self, action: Action, error: errors.KafkaError) -> None:
        super().__init__(repr(error))
        self.action = action
        self.error = error
