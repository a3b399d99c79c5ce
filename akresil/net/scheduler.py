"""The producer's scheduler: one task that turns ready batches into Produce requests.

Each turn it asks the core what to do and then sleeps until the earliest timer the core names:

1. ``accumulator.expire(now)`` fails batches past their delivery deadline (KIP-91);
2. partitions without a known leader request an asynchronous metadata refresh;
3. leaders with ready data but no connection get a connection task (reconnect backoff in ``NodeState``);
4. ``accumulator.drain`` takes batches for *sendable* nodes only (connected, not muted by KIP-219, below
   the in-flight limit), each node's batches become one Produce request, sent in its own task;
5. it sleeps until the earliest of: linger end, retry backoff end (KIP-580), delivery deadline, mute end,
   reconnect backoff end, or a wake-up (new batch, response, connection, metadata change).  No polling.
   A turn a linger end wakes waits for the rest of that event-loop pass first (``TurnLoop.settle_after_timer``):
   application tasks made runnable in the same pass (records due at that instant) append before the drain, so
   they ride in that batch instead of waiting a whole linger for the next one. Other timers (delivery deadline,
   backoff end) take their turn at once.

Responses are handled by ``_handle_response``: successes complete batches, KIP-951 leader hints update the
metadata cache before the retry decision (so an advanced epoch sends the retry at once), and every
leader-related error still requests a metadata refresh. A successful answer's records complete only after the
turn it allows has run inside the handler (``TurnLoop.turn_now``), so the next request's task is scheduled ahead
of the application continuations the completions schedule.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any, Awaitable

import anyio

from .. import errors
from ..config import Config
from ..core import events
from ..core.accumulator import DeferredSuccess, RecordAccumulator
from ..core.backoff import ExponentialBackoff
from ..core.batch import ProducerBatch
from ..core.metadata import BrokerInfo, LeaderHint
from ..core.transaction import FENCED_CODES
from ..protocol.api import ApiKey
from ..types import TopicPartition
from .backend import loop_primitives
from .cluster import Cluster
from .signals import Broadcast, TurnLoop
from .transaction import V2_PRODUCE, TransactionIO

log = logging.getLogger(__name__)

_LEADER_ERRORS = (errors.NotLeaderOrFollowerError.errno, errors.FencedLeaderEpochError.errno)
_DUPLICATE_SEQUENCE = errors.DuplicateSequenceNumberError.errno
_OUT_OF_ORDER_SEQUENCE = errors.OutOfOrderSequenceNumberError.errno
_UNKNOWN_PRODUCER_ID = errors.UnknownProducerIdError.errno
#: a batch larger than the topic's max.message.bytes: split and re-sent (RECORD_LIST_TOO_LARGE, a batch larger than
#: the log segment, is not split: Java's Sender splits only on this one)
_MESSAGE_TOO_LARGE = errors.MessageSizeTooLargeError.errno
#: how a broker may refuse a client-side epoch bump (Apache accepts it; Tansu 0.6 answers PRODUCER_FENCED, and the
#: producer takes a new producer id instead).  Kept: Tansu stays a supported embedded broker
_BUMP_REFUSED = (errors.InvalidProducerEpochError.errno, errors.ProducerFencedError.errno, _OUT_OF_ORDER_SEQUENCE,
                 _UNKNOWN_PRODUCER_ID)


#: the producer epoch is a signed 16-bit field; at its maximum a new producer id is needed instead of a bump
_MAX_PRODUCER_EPOCH = 32767


class OutOfOrderBehindRetryError(errors.OutOfOrderSequenceNumberError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER for a batch pipelined behind an older batch of its partition that failed and
    will be resent first: the broker saw a gap that the older batch's retry closes, so this batch is retried
    (keeping its sequence) instead of failing its records, as the Java producer does."""

    retriable = True


class SequenceGapRetryError(errors.OutOfOrderSequenceNumberError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER with no older batch to blame: a real gap (an earlier batch failed for good).
    KIP-360: the idempotent producer bumps its epoch, restarts sequences at 0 and retries this batch, instead of
    failing its records."""

    retriable = True
    identity_retry = True


class BumpRefusedRetryError(errors.InvalidProducerEpochError):
    """The broker refused the epoch this producer raised itself (KIP-360 client-side bump): the batch is retried
    under a new producer id from InitProducerId."""

    retriable = True
    identity_retry = True


class StaleEpochRetryError(errors.InvalidProducerEpochError):
    """A batch sent under an epoch this producer has since left behind was refused: it is resent, re-sequenced,
    under the current identity."""

    retriable = True
    identity_retry = True


class UnknownProducerIdRetryError(errors.UnknownProducerIdError):
    """UNKNOWN_PRODUCER_ID: the broker lost this producer's state (e.g. retention removed its last batch).
    KIP-360: bump the epoch, restart sequences at 0 and retry, as Java's idempotent producer does."""

    retriable = True
    identity_retry = True


#: how a refusal of a batch sent under an identity already left behind is retried
_STALE_RETRY: dict[int, type[errors.KafkaError]] = {
    _OUT_OF_ORDER_SEQUENCE: OutOfOrderBehindRetryError,
    _UNKNOWN_PRODUCER_ID: UnknownProducerIdRetryError,
    errors.InvalidProducerEpochError.errno: StaleEpochRetryError,
    errors.ProducerFencedError.errno: StaleEpochRetryError,
}


class Sender:
    """Drives a ``RecordAccumulator`` over a ``Cluster``. ``run()`` is the one task; ``wake()`` nudges it."""

    def __init__(self, cluster: Cluster, accumulator: RecordAccumulator, config: Config) -> None:
        self.cluster = cluster
        self.acc = accumulator
        self.config = config
        self.acks: int = config.acks
        self._loop = TurnLoop()
        self._progress = Broadcast()
        self._tg: anyio.abc.TaskGroup | None = None
        self._connecting: set[int] = set()
        self._init_pid_running = False
        self._init_pid_failures = 0
        self._init_pid_backoff = ExponentialBackoff(config.retry_backoff_ms, config.retry_backoff_max_ms,
                                                    rng=cluster.rng)
        self._init_pid_at = 0.0
        #: a partition's sequence has a gap the broker will never see closed (a sequenced batch failed or expired,
        #: or the broker reported a gap or lost producer state): bump the epoch (KIP-360, sequences from 0) once
        #: nothing is in flight, before sending more
        self._identity_reset_wanted = False
        #: partitions with an expired sequenced batch whose fate is unknown until their in-flight batches resolve
        self._unresolved: set[TopicPartition] = set()
        #: the epoch was bumped locally and no batch under it was accepted yet; a sequence error now means the
        #: broker does not take the bump, so the next reset asks InitProducerId for a new producer id instead
        self._bump_unconfirmed = False
        #: False once a broker refused a client-side bump: later resets go straight to InitProducerId
        self._local_bump_works = True
        self.fatal_error: BaseException | None = None
        #: the transactional producer's coordinator I/O (None: not transactional); set by the producer
        self.txn: TransactionIO | None = None
        self._stopping = False
        #: topics whose batches were split already (the first split of a topic is logged as a warning)
        self._split_topics: set[str] = set()
        #: Produce requests waiting for a worker (``_work``), in the order they were formed: one long-lived task
        #: per request in flight instead of a task spawned per request (anyio's ``start_soon`` was ~12 % of the CPU
        #: of a record sent alone); the pool grows to the most requests ever in flight at once
        self._jobs: deque[tuple[int, Any, int, dict[str, Any], list[ProducerBatch]]] = deque()
        #: the wake-up events of idle workers, oldest first
        self._idle: deque[anyio.Event] = deque()
        cluster.on_metadata_change(self.wake)

    # ------------------------------------------------------------------ signals
    def wake(self) -> None:
        self._loop.wake()

    def _signal_progress(self) -> None:
        self._progress.fire()

    def wait_progress(self) -> Awaitable[None]:
        """Wait until some batch completes or the sender stops (used by flush/close); the event is taken now."""
        return self._progress.current().wait()

    def stop(self) -> None:
        self._stopping = True
        self.wake()

    # ------------------------------------------------------------------ the loop
    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                await self._loop.run(self._turn,
                                     done=lambda: self._stopping and self.acc.incomplete_batches == 0)
            finally:
                self._signal_progress()
                tg.cancel_scope.cancel()

    def _turn(self) -> float | None:
        """One scheduling pass; returns ms to sleep (None: until woken)."""
        cluster, acc = self.cluster, self.acc
        now = cluster.clock()
        expired = acc.expire(now)
        if expired:
            self._signal_progress()
            for e in expired:
                if self.txn is not None:
                    # a record of the transaction is lost: it can only be aborted (and the epoch bumped after)
                    self.txn.core.abortable(errors.DeliveryTimeoutError(
                        f"a batch of {e.batch.tp.topic}-{e.batch.tp.partition} expired in the transaction"))
                elif e.batch.base_sequence >= 0 and acc.idempotent:
                    # written or not is unknown: hold the partition until its batches in flight are resolved
                    self._unresolved.add(e.batch.tp)
                    acc.hold(e.batch.tp)
        if self._unresolved:
            self._resolve_sequences()
        wake_at: float | None = None
        if self._identity_reset_wanted and not acc.held_in_flight():
            # like Java, wait for the gapped partitions' in-flight batches first: they keep their order when
            # re-sequenced; other partitions were never held, and wait only for their own old-identity batches
            self._identity_reset_wanted = False
            self._reset_identity()
        if self.txn is not None:
            assert self._tg is not None
            wake_at = self.txn.turn(now, self._tg)
        elif acc.idempotent and acc.producer_id < 0:
            if not self._init_pid_running and acc.incomplete_batches and not self._identity_reset_wanted:
                if now >= self._init_pid_at:
                    self._init_pid_running = True
                    assert self._tg is not None
                    self._tg.start_soon(self._init_producer_id)
                else:
                    wake_at = self._init_pid_at
        snapshot = cluster.metadata.snapshot
        leader_of = snapshot.leader_of
        sendable: set[int] = set()
        for node_id in acc.ready_nodes(now, leader_of):
            state = cluster.node(node_id)
            if cluster.connected(node_id):
                if state.can_send(now):
                    sendable.add(node_id)
                else:
                    at = state.next_send_at(now)
                    if at is not None and (wake_at is None or at < wake_at):
                        wake_at = at
            elif node_id not in self._connecting:
                at = state.next_connect_at(now)
                if at is not None and at > now:
                    if wake_at is None or at < wake_at:
                        wake_at = at
                else:
                    self._connecting.add(node_id)
                    assert self._tg is not None
                    self._tg.start_soon(self._connect, node_id)
        drained = acc.drain(now, sendable=sendable, leader_of=leader_of)
        if drained.unknown_leaders:
            cluster.request_metadata_refresh("unknown-leader", missing=True)
        for node_id, batches in drained.batches.items():
            self._send(node_id, batches, now)
        # Pipelining: a drain takes one batch per partition, so a node below its in-flight limit with more
        # ready batches gets further requests now, not after the next response wakes the loop.
        while drained.batches:
            more = {node_id for node_id in drained.batches if cluster.node(node_id).can_send(now)}
            if not more:
                break
            drained = acc.drain(now, sendable=more, leader_of=leader_of)
            for node_id, batches in drained.batches.items():
                self._send(node_id, batches, now)
        timer = acc.next_wakeup(now)
        if timer is not None and (wake_at is None or timer < wake_at):
            wake_at = timer
        # a linger end: the records of tasks the same event-loop pass makes runnable join the batch (``TurnLoop``)
        self._loop.settle_after_timer = wake_at is not None and wake_at == timer and acc.wakeup_is_linger_end
        if wake_at is None:
            return None
        return max(0.0, wake_at - now)

    def _resolve_sequences(self) -> None:
        """Java's ``maybeResolveSequences``: once a partition with an expired sequenced batch has nothing in flight,
        either the broker acknowledged everything sequenced after it (so it was written: release the partition)
        or the sequence has a gap (reset the identity)."""
        acc = self.acc
        for tp in list(self._unresolved):
            if not acc.is_held(tp):
                self._unresolved.discard(tp)        # a new identity restarted its sequences meanwhile
            elif not acc.in_flight_for(tp):
                self._unresolved.discard(tp)
                if not acc.sequence_resolved(tp):
                    self._sequence_gap("expired batch", tp)
                elif not self._identity_reset_wanted:
                    acc.release(tp)                 # (with a reset under way it is released by the reset)

    def _sequence_gap(self, cause: str, tp: TopicPartition | None) -> None:
        """``tp``'s sequence has a gap (None: the identity itself was refused): hold that partition and reset the
        producer identity once its batches in flight are resolved (KIP-360). Other partitions keep sending."""
        if not self.acc.idempotent:
            return
        if self.txn is not None:
            # inside a transaction a gap spoils the transaction: abort, then a new epoch restarts sequences
            self.txn.core.abortable(errors.OutOfOrderSequenceNumberError(f"{cause} in the transaction"))
            return
        self.acc.hold(tp)
        if not self._identity_reset_wanted:
            log.info("idempotent producer: %s left a sequence gap; resetting the producer identity (KIP-360)", cause)
            self._identity_reset_wanted = True
            self.wake()

    def _reset_identity(self) -> None:
        """KIP-360 for the idempotent (non-transactional) producer, as Java's ``bumpIdempotentProducerEpoch``:
        the client raises its own epoch (same producer id) and every partition restarts at sequence 0, which
        brokers accept for a higher epoch. A new producer id (InitProducerId) is taken instead when the epoch
        is exhausted, when there is no id yet, or when the broker refused the previous bump. Not
        InitProducerId(producer_id, epoch): for a null transactional id Apache brokers ignore those fields
        and hand out a new id anyway."""
        acc = self.acc
        if (acc.producer_id >= 0 and acc.producer_epoch < _MAX_PRODUCER_EPOCH and not self._bump_unconfirmed
                and self._local_bump_works):
            acc.set_producer_identity(acc.producer_id, acc.producer_epoch + 1)
            self._bump_unconfirmed = True
            self.cluster.hooks.emit(events.PRODUCER_ID, producer_id=acc.producer_id,
                                    producer_epoch=acc.producer_epoch)
        else:
            log.info("idempotent producer: requesting a new producer id (epoch %s, bump %s)", acc.producer_epoch,
                     "refused" if self._bump_unconfirmed or not self._local_bump_works else "not possible")
            self._bump_unconfirmed = False
            acc.set_producer_identity(-1, -1)

    async def _connect(self, node_id: int) -> None:
        try:
            await self.cluster.connection(node_id)
        except errors.AuthenticationError as exc:
            self._fail_all(exc)
        except (errors.KafkaError, OSError) as exc:
            log.debug("connect to node %s failed: %s", node_id, exc)
            self.cluster.request_metadata_refresh("connection-failed")
        finally:
            self._connecting.discard(node_id)
            self.wake()

    def _fail_all(self, exc: BaseException) -> None:
        self.fatal_error = exc
        self.acc.abort(exc)
        self._signal_progress()

    # ------------------------------------------------------------------ producer id (idempotence)
    async def _init_producer_id(self) -> None:
        cluster = self.cluster
        try:
            _, _, response = await cluster.request_any(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": None, "transaction_timeout_ms": 2**31 - 1,
                "producer_id": -1, "producer_epoch": -1})
            code = response.get("error_code", 0)
            if code:
                raise errors.error_for_code(code)(f"InitProducerId failed: error {code}")
        except (errors.KafkaError, OSError) as exc:
            retriable = getattr(exc, "retriable", False) or isinstance(exc, (errors.KafkaConnectionError, OSError))
            if not retriable:
                log.error("InitProducerId failed: %r; failing queued records", exc)
                self._fail_all(exc)
            else:
                self._init_pid_failures += 1
                self._init_pid_at = cluster.clock() + self._init_pid_backoff.backoff_ms(self._init_pid_failures)
        else:
            self._init_pid_failures = 0
            self.acc.set_producer_identity(response["producer_id"], response["producer_epoch"])
            cluster.hooks.emit(events.PRODUCER_ID, producer_id=response["producer_id"],
                               producer_epoch=response["producer_epoch"])
        finally:
            self._init_pid_running = False
            self.wake()

    # ------------------------------------------------------------------ produce
    def _send(self, node_id: int, batches: list[ProducerBatch], now: float) -> None:
        conn = self.cluster.connected(node_id)
        if conn is None:       # closed between the readiness check and now: retry the batches
            error = errors.KafkaConnectionError(f"connection to node {node_id} lost before sending")
            self._fail_attempt(batches, error, now)
            return
        version = conn.versions.get(ApiKey.PRODUCE)
        if version is None:
            self._fail_all(errors.UnsupportedVersionError(f"node {node_id} does not support Produce"))
            return
        if version >= V2_PRODUCE and self.txn is not None and not self.txn.core.v2:
            version = V2_PRODUCE - 1    # a v1 transaction: v12 would make the broker add the partition itself
        topics: dict[str, list[dict[str, Any]]] = {}
        hooks = self.cluster.hooks
        for batch in batches:
            records = batch.payload.build()
            topics.setdefault(batch.tp.topic, []).append({"index": batch.tp.partition, "records": records})
            if hooks:
                hooks.emit(events.BATCH_SENT, node_id=node_id, topic=batch.tp.topic, partition=batch.tp.partition,
                           records=batch.record_count, size_bytes=len(records), attempt=batch.attempts,
                           queue_ms=now - batch.created_at)
        txn_id = self.txn.core.transactional_id if self.txn is not None else None
        body = {"transactional_id": txn_id, "acks": self.acks, "timeout_ms": self.config.request_timeout_ms,
                "topic_data": [{"name": t, "partition_data": parts} for t, parts in topics.items()]}
        state = self.cluster.node(node_id)
        state.on_request_sent(now)
        self._jobs.append((node_id, conn, version, body, batches))
        if self._idle:
            self._idle.popleft().set()
        else:
            assert self._tg is not None
            self._tg.start_soon(self._work)

    async def _work(self) -> None:
        """A worker of the request pool: sends the oldest Produce request waiting, awaits its answer, and so on;
        idle, it waits to be handed the next one. Requests start in the order they were formed (the woken or
        spawned worker, or any worker that frees up first, takes the oldest), so a partition's batches are
        written in sequence order as with a task per request."""
        jobs, idle = self._jobs, self._idle
        new_event = loop_primitives().event
        wakeup: anyio.Event | None = None
        try:
            while True:
                if jobs:
                    await self._produce(*jobs.popleft())
                    continue
                wakeup = new_event()
                idle.append(wakeup)
                await wakeup.wait()
                wakeup = None
        finally:
            if wakeup is not None and wakeup in idle:
                idle.remove(wakeup)      # cancelled while idle: never handed a request

    async def _produce(self, node_id: int, conn: Any, version: int, body: dict[str, Any],
                       batches: list[ProducerBatch]) -> None:
        cluster = self.cluster
        state = cluster.node(node_id)
        turned = False
        try:
            if self.acks == 0:
                await conn.send_no_response(ApiKey.PRODUCE, body, version=version)
                response = None
            else:
                response = await conn.request(ApiKey.PRODUCE, body, version=version)
        except (errors.KafkaConnectionError, errors.RequestTimeoutError, errors.ProtocolError) as exc:
            state.on_request_done(cluster.clock())
            cluster.disconnect(node_id, exc)
            self._fail_attempt(batches, exc if exc.retriable else errors.KafkaConnectionError(str(exc)),
                               cluster.clock())
            cluster.request_metadata_refresh("produce-connection-error")
        except errors.KafkaError as exc:
            state.on_request_done(cluster.clock())
            self._fail_attempt(batches, exc, cluster.clock())
        else:
            now = cluster.clock()
            state.on_request_done(now)
            deferred: list[DeferredSuccess] = []
            try:
                if response is None:
                    for batch in batches:
                        self.acc.on_batch_success(batch, -1, now, defer=deferred)
                else:
                    state.on_response(int(ApiKey.PRODUCE), version, response.get("throttle_time_ms") or 0, now)
                    self._handle_response(node_id, response, batches, now, deferred)
                # the next request first: its task is scheduled before the continuations the completions
                # schedule (a task per record, or gather's callbacks), so it is written before they run
                self._loop.turn_now()
                turned = not self._stopping     # stopping: the loop must see the last completion
            finally:
                self.acc.complete_deferred(deferred)
        finally:
            self._signal_progress()
            if not turned:
                self.wake()

    def _fail_attempt(self, batches: list[ProducerBatch], error: BaseException, now: float) -> None:
        leader_of = self.cluster.metadata.snapshot.leader_of
        refresh = False
        for batch in batches:
            lead = leader_of(batch.tp)
            decision = self.acc.on_batch_error(batch, error, now, leader_epoch=None if lead is None else lead[1])
            refresh = refresh or bool(decision and decision.refresh_metadata)
            if decision is not None and not decision.retry and batch.base_sequence >= 0:
                self._sequence_gap(f"failed batch ({type(error).__name__})", batch.tp)
        if refresh:
            self.cluster.request_metadata_refresh("produce-error")

    def _sequence_error(self, batch: ProducerBatch, code: int) -> type[errors.KafkaError]:
        """How an idempotent batch's OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID is handled (Java's
        ``TransactionManager.canRetry``): always retried; a real gap or lost producer state also bumps the epoch.
        """
        acc = self.acc
        behind = code == _OUT_OF_ORDER_SEQUENCE and self._older_batch_pending(batch)
        if self.txn is not None:
            if behind:
                # pipelined behind an older batch of its partition that failed and goes again first: the gap
                # closes with that retry (Java's canRetry, transactional or not); no reason to abort
                return OutOfOrderBehindRetryError
            # no retry or epoch bump of its own: the batch fails and the transaction becomes abortable
            cls = errors.error_for_code(code)
            self.txn.core.abortable(cls(f"{batch.tp.topic}-{batch.tp.partition}: error {code} in the transaction"))
            return cls
        current = (batch.producer_id, batch.producer_epoch) == (acc.producer_id, acc.producer_epoch)
        if current and self._bump_unconfirmed and (
                code not in (_OUT_OF_ORDER_SEQUENCE, _UNKNOWN_PRODUCER_ID)
                or (batch.base_sequence == 0 and not behind)):
            # the first batch of the bumped epoch was refused (or the epoch itself was): no bump on this broker
            log.info("broker refused the bumped producer epoch %s (error %s): taking a new producer id",
                     acc.producer_epoch, code)
            self._local_bump_works = False
            self._sequence_gap("refused epoch bump", None)
            return BumpRefusedRetryError
        if not current:
            return _STALE_RETRY[code]      # sent under an identity already replaced: the retry is re-sequenced
        if behind:
            return OutOfOrderBehindRetryError      # the older batch's retry closes the gap
        if self._identity_reset_wanted:
            # a reset is under way: hold this partition too, its retry is re-sequenced under the new identity
            self._sequence_gap(f"error {code} for {batch.tp.topic}-{batch.tp.partition}", batch.tp)
            return _STALE_RETRY[code]
        self._sequence_gap(f"error {code} for {batch.tp.topic}-{batch.tp.partition} seq {batch.base_sequence}",
                           batch.tp)
        return SequenceGapRetryError if code == _OUT_OF_ORDER_SEQUENCE else UnknownProducerIdRetryError

    def _split(self, batch: ProducerBatch, node_id: int, now: float) -> bool:
        """MESSAGE_TOO_LARGE for a batch of several records: split it and send the pieces (Java's Sender does, without
        counting an attempt); False for a lone record, which then fails with the error."""
        size = len(batch.payload.build())
        pieces = self.acc.split(batch, now)
        if not pieces:
            return False
        topic = batch.tp.topic
        level = logging.DEBUG if topic in self._split_topics else logging.WARNING
        self._split_topics.add(topic)
        log.log(level, "%s-%s: node %s refused a batch of %d records (%d bytes) as too large; sending it again as %d "
                "batches (the topic's max.message.bytes is below batch_size: lower batch_size to avoid the extra "
                "round trip)", topic, batch.tp.partition, node_id, batch.record_count, size, len(pieces))
        self.wake()
        return True

    def _older_batch_pending(self, batch: ProducerBatch) -> bool:
        """An older batch of the same partition is still queued for retry or in flight (error path only)."""
        return any(other.tp == batch.tp and other.index < batch.index and not other.done
                   for other in self.acc.batches())

    def _handle_response(self, node_id: int, response: dict[str, Any], batches: list[ProducerBatch],
                         now: float, deferred: list[DeferredSuccess] | None = None) -> None:
        cluster, acc = self.cluster, self.acc
        by_tp = {batch.tp: batch for batch in batches}
        endpoints = {e["node_id"]: BrokerInfo(e["node_id"], e["host"], e["port"], e.get("rack"))
                     for e in (response.get("node_endpoints") or ())}
        refresh_cause: str | None = None
        answered: set[TopicPartition] = set()
        for topic in response.get("responses", ()):
            name = topic["name"]
            for part in topic["partition_responses"]:
                tp = TopicPartition(name, part["index"])
                batch = by_tp.get(tp)
                if batch is None or tp in answered:
                    continue
                answered.add(tp)
                code = part["error_code"]
                if code == 0 or code == _DUPLICATE_SEQUENCE:
                    if self._bump_unconfirmed and batch.producer_epoch == acc.producer_epoch:
                        self._bump_unconfirmed = False       # the broker took the bumped epoch
                    acc.on_batch_success(batch, part["base_offset"] if code == 0 else -1, now,
                                         log_append_time_ms=part.get("log_append_time_ms", -1), defer=deferred)
                    continue
                if code == _MESSAGE_TOO_LARGE and self._split(batch, node_id, now):
                    continue
                error_class = errors.error_for_code(code)
                if acc.idempotent and (code == _OUT_OF_ORDER_SEQUENCE or code == _UNKNOWN_PRODUCER_ID
                                       or (code in _BUMP_REFUSED and self._bump_unconfirmed)):
                    error_class = self._sequence_error(batch, code)
                error = error_class(
                    f"{name}-{tp.partition} on node {node_id}: {part.get('error_message') or error_class.description}")
                if self.txn is not None and code in FENCED_CODES:
                    self.txn.core.fatal(errors.ProducerFencedError(str(error)))   # a newer producer owns the id
                if code in _LEADER_ERRORS:
                    hint = part.get("current_leader")
                    if hint is not None and hint.get("leader_id", -1) >= 0:
                        leader_id = hint["leader_id"]
                        accepted = cluster.metadata.apply_leader_hint(
                            tp, leader_id, hint["leader_epoch"], endpoints.get(leader_id))
                        if accepted:
                            self.wake()
                lead = cluster.metadata.snapshot.leader_of(tp)
                decision = acc.on_batch_error(batch, error, now, leader_epoch=None if lead is None else lead[1])
                if decision is not None and not decision.retry and batch.base_sequence >= 0:
                    self._sequence_gap(f"failed batch ({error_class.__name__})", batch.tp)
                if decision is not None and decision.refresh_metadata:
                    refresh_cause = "not-leader" if code in _LEADER_ERRORS else "produce-error"
        missing = [b for tp, b in by_tp.items() if tp not in answered]
        if missing:
            self._fail_attempt(missing, errors.ProtocolError(
                f"Produce response from node {node_id} did not answer {len(missing)} partition(s)"), now)
        if refresh_cause is not None:
            cluster.request_metadata_refresh(refresh_cause)

