"""The consumer: subscribe (topics or a regex) or assign partitions, then ``getmany`` / ``async for``.

Fetching is pipelined: the fetcher task keeps one Fetch per leader in flight and buffers the answers
(bounded by ``max_partition_fetch_bytes`` per partition and ``fetch_max_bytes`` overall) while the
application processes earlier records; positions, pauses, resets and buffered data live in the sans-IO
``core.fetch_state.FetchState``. With a ``group_id`` and a subscription, membership is the job of a
``net.group_session.GroupSession`` (the classic protocol, or KIP-848 with ``group_protocol="consumer"``): it
calls the listener, gives this module the assignment for the fetch state, and commits positions on revoke; this
module commits periodically (``enable_auto_commit``) and on close. With a ``group_id`` and manual assignment,
commits go straight through the group's offsets path (``net.group_offsets``) as no member. Without a
``group_id`` a subscription simply consumes every partition of the matching topics, and ``commit`` is not
available.

Positions follow Java's meaning: the offset of the next record the application will receive. ``async for``
takes records ``max_poll_records`` at a time; records taken but not yet yielded do not count as consumed
(commits and ``position`` report the first one not yet yielded).
"""

from __future__ import annotations

import logging
import re
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Generic, Iterable, Mapping, cast

import anyio
import anyio.abc
import anyio.lowlevel

from . import errors
from .checks import EARLIEST as EARLIEST_TIMESTAMP, LATEST as LATEST_TIMESTAMP
from .checks import check_timeout, check_topic_name, checked_partitions, offset_requests
from .client_runtime import ClientLifecycle, ClientRuntime
from .core.backoff import ExponentialBackoff
from .core.events import RECORDS_CONSUMED
from .core.fetch_state import EARLIEST, LATEST, FetchState, NoOffsetForPartitionError
from .core.missing_topics import MissingTopicWarnings, missing_topics
from .core.re2j import to_re2j
from .core.tracing import ProcessSpan, processing
from .net.coordinator import GROUP, CoordinatorTracker
from .net.fetcher import Fetcher
from .net.group_classic import ClassicMember
from .net.group_heartbeat import ConsumerGroupMember
from .net.group_offsets import GroupOffsets, check_offsets
from .net.group_session import GroupSession, MembershipFactory, RebalanceListener
from .net.router import Router
from .types import ConsumerGroupMetadata, ConsumerRecord, KeyT, OffsetAndTimestamp, TopicPartition, ValueT

if TYPE_CHECKING:
    from typing import Unpack

    from .config_keys import ConsumerConfig

log = logging.getLogger(__name__)

__all__ = ["Consumer", "RebalanceListener", "NoOffsetForPartitionError"]

#: ListOffsets timestamps for the log start and end
_EXTRA_KEYS = ("hooks", "max_buffered_bytes")
#: a commit value: offset, (offset, metadata) or (offset, leader_epoch, metadata)
CommitValue = int | tuple[int, str | None] | tuple[int, int | None, str | None]


class Consumer(ClientLifecycle, Generic[KeyT, ValueT]):
    """Async Kafka consumer. ``async with Consumer("topic", bootstrap_servers=..., group_id=...) as c``.

    ``*topics``: subscribe to these topics; or ``pattern=`` (a regex matched against every topic name in the
    cluster, internal ``__`` topics excluded; with ``group_protocol="consumer"`` the broker matches it, in RE2J
    syntax, and assigns topics created later); or neither, then ``assign()`` partitions. ``listener``: a
    ``RebalanceListener`` for group subscriptions. Other keyword arguments are Kafka consumer configs in
    snake_case (``akresil.config``) plus ``key_deserializer`` / ``value_deserializer`` (callables on bytes),
    ``hooks`` and ``max_buffered_bytes`` (prefetch bound, default ``fetch_max_bytes``).
    Generic in the record types: with ``value_deserializer=json.loads`` the records are
    ``ConsumerRecord[bytes, Any]``; without deserializers ``ConsumerRecord[bytes, bytes]`` (the TypeVars' defaults).
    """

    def __init__(self, *topics: str, pattern: str | re.Pattern[str] | None = None,
                 listener: RebalanceListener | None = None,
                 key_deserializer: Callable[[bytes], KeyT] | None = None,
                 value_deserializer: Callable[[bytes], ValueT] | None = None,
                 **config: Unpack[ConsumerConfig]) -> None:
        # one signature, not overloads per deserializer: a checker's error then names the wrong keyword
        self._runtime = rt = ClientRuntime("consumer", "consumer", "Consumer", config, extra=_EXTRA_KEYS)
        self.config = cfg = rt.config
        for name, deserializer in (("key_deserializer", key_deserializer),
                                   ("value_deserializer", value_deserializer)):
            if deserializer is not None and not callable(deserializer):
                raise errors.ConfigError(f"{name}: must be callable, got {type(deserializer).__name__}")
        max_buffered = config.get("max_buffered_bytes")
        if max_buffered is not None and (not isinstance(max_buffered, int) or isinstance(max_buffered, bool)
                                         or max_buffered < 1):
            raise errors.ConfigError(f"max_buffered_bytes: must be an int >= 1, got {max_buffered!r}")
        for t in topics:
            check_topic_name(t)
        if topics and pattern is not None:
            raise errors.ConfigError("pattern: give topics or a pattern, not both")
        self._topics = frozenset(topics)
        self._pattern: re.Pattern[str] | None = None
        if pattern is not None:
            try:
                self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            except re.error as exc:
                raise errors.ConfigError(f"pattern: {pattern!r} is not a valid regex: {exc}") from None
            if not isinstance(self._pattern, re.Pattern):
                raise errors.ConfigError(f"pattern: expected a str or compiled regex, got {pattern!r}")
        #: KIP-848 with a group: the broker resolves the regex (SubscribedTopicRegex), in RE2J syntax
        self._broker_pattern: str | None = None
        if self._pattern is not None and cfg.group_id is not None and cfg.group_protocol == "consumer":
            self._broker_pattern = to_re2j(self._pattern)
        if listener is not None and not (topics or pattern is not None):
            raise errors.ConfigError("listener: only meaningful with a subscription (topics or pattern)")
        self._listener = listener
        self.hooks, self._cluster = rt.hooks, rt.cluster
        self._router = Router(self._cluster, default_timeout_ms=cfg.default_api_timeout_ms)
        #: what a tracer (``hooks.tracer``) is told about this consumer, and the processing it opened for the
        #: record handed out last (ended by the consumer's next call)
        self._trace_site = rt.trace_site("consumer")
        self._processing: ProcessSpan | None = None
        self._state = FetchState(
            max_partition_fetch_bytes=cfg.max_partition_fetch_bytes, fetch_max_bytes=cfg.fetch_max_bytes,
            max_buffered_bytes=max_buffered, auto_offset_reset=cfg.auto_offset_reset,
            isolation_level=cfg.isolation_level, retry_backoff_ms=cfg.retry_backoff_ms,
            retry_backoff_max_ms=cfg.retry_backoff_max_ms, check_crcs=cfg.check_crcs,
            key_deserializer=key_deserializer, value_deserializer=value_deserializer,
            client_rack=cfg.client_rack, read_replica_ttl_ms=cfg.metadata_max_age_ms, rng=self._cluster.rng)
        #: the group session (classic or KIP-848) when subscribed with a group_id
        self._group: GroupSession | None = None
        #: the group's offsets path (the session's, or with manual assignment one of its own that commits as no
        #: member, generation -1)
        self._offsets: GroupOffsets | None = None
        self._fetcher = Fetcher(self._cluster, self._state, cfg, committed_lookup=self._lookup_committed
                                if cfg.group_id is not None else None)
        self._manual = False
        self._matched: frozenset[str] = frozenset()
        # async-for buffer: records taken from the fetch state but not yet yielded
        self._pending: list[ConsumerRecord[KeyT, ValueT]] = []
        self._pending_index = 0
        self._last_committed: dict[TopicPartition, int] = {}
        self._max_poll_records = cfg.max_poll_records
        self._missing_topics: MissingTopicWarnings[str] = MissingTopicWarnings()
        self._missing_partitions: MissingTopicWarnings[TopicPartition] = MissingTopicWarnings()
        self._missing_topics_seen = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Bootstrap, then fetch (and join the group); ``close()`` may then run in any task (``async with``).

        With a ``group_id`` the group's coordinator is looked up alongside the bootstrap Metadata: the join (or the
        first OffsetFetch of an assigned consumer) needs it, and would otherwise ask one round trip later."""
        group_id = self.config.group_id
        await self._runtime.start(self._start_tasks, before_bootstrap=self._want_topics,
                                  on_failure=self._fetcher._fail, on_abort=self._fetcher.stop,
                                  coordinators=() if group_id is None else ((group_id, GROUP),))

    def _want_topics(self) -> None:
        """The topics the bootstrap Metadata asks for."""
        if self._pattern is not None:
            self._cluster.set_topics((), all_topics=True)
        elif self._topics:
            self._cluster.set_topics(self._topics)
        elif self._state.partitions:
            self._cluster.set_topics({tp.topic for tp in self._state.partitions})

    async def _start_tasks(self, tg: anyio.abc.TaskGroup) -> None:
        cluster = self._cluster
        group_id = self.config.group_id
        if group_id is not None:
            if self._subscribed:
                # KIP-848 (group_protocol="consumer") is broker-assigned, heartbeat only
                membership: MembershipFactory = (ConsumerGroupMember if self.config.group_protocol == "consumer"
                                                 else ClassicMember)
                self._group = GroupSession(
                    cluster, self.config, membership, subscription=self._subscription, listener=self._listener,
                    on_assignment_changed=self._sync_group_assignment,
                    positions_for_revoke=self._positions_for_revoke, pattern=self._broker_pattern)
                self._offsets = self._group.offsets
            else:
                backoff = ExponentialBackoff(self.config.retry_backoff_ms, self.config.retry_backoff_max_ms,
                                             rng=cluster.rng)
                self._offsets = GroupOffsets(cluster, CoordinatorTracker(cluster, group_id, backoff=backoff),
                                             request_timeout_ms=self.config.request_timeout_ms, backoff=backoff)
        await tg.start(self._fetcher.run)
        cluster.on_metadata_change(self._warn_missing_topics)
        self._warn_missing_topics()      # the bootstrap Metadata already answered for the subscription
        if self._subscribed:
            cluster.on_metadata_change(self._on_metadata)
            if self._group is not None:
                tg.start_soon(self._group.run, name="akresil-group")
            else:
                self._on_metadata()
        if self.config.group_id is not None and self.config.enable_auto_commit:
            tg.start_soon(self._auto_commit_loop, name="akresil-auto-commit")

    async def close(self) -> None:
        """Commit (with auto-commit), leave the group, stop fetching and release every task and connection."""
        if self._processing is not None:
            self._end_processing()
        await self._runtime.close(self._close_gracefully, self._fetcher.stop)

    async def _close_gracefully(self) -> None:
        await self._commit_and_leave()
        await self._fetcher.close_sessions()     # KIP-227: the brokers free our fetch sessions now, as with Java

    async def _commit_and_leave(self) -> None:
        # records ``async for`` took but did not yield are not handed out any more (the iteration ends): their
        # partitions go back to the first of them, which is what the commits below store
        self._rewind_pending(None)
        if self.config.group_id is not None and self.config.enable_auto_commit and self._state.partitions:
            with anyio.move_on_after(self.config.request_timeout_ms / 1000.0):
                try:
                    await self._commit_offsets(self._current_offsets(), only_changed=True)
                except (errors.KafkaError, OSError) as exc:
                    log.warning("auto-commit on close failed: %s", exc)
        if self._group is not None:
            with anyio.move_on_after(self.config.request_timeout_ms / 1000.0):
                try:
                    await self._group.leave()
                except (errors.KafkaError, OSError) as exc:
                    log.debug("leaving the group failed: %s", exc)

    def _check_closed(self) -> None:
        """Every call after ``close()`` raises ``ClientClosedError`` (``async for`` ends instead)."""
        self._runtime.check_not_closed()

    def _check_open(self) -> None:
        self._runtime.check_open()
        if self._fetcher.fatal_error is not None:
            raise self._fetcher.fatal_error
        if self._group is not None and self._group.fatal_error is not None:
            raise self._group.fatal_error

    # ------------------------------------------------------------------ subscription and assignment
    @property
    def _subscribed(self) -> bool:
        return bool(self._topics) or self._pattern is not None

    def _subscription(self) -> set[str]:
        """Topics the member subscribes to (for a pattern: the matching topics in the latest metadata)."""
        if self._pattern is None:
            return set(self._topics)
        return set(self._matched_topics())

    def _warn_missing_topics(self) -> None:
        """One WARNING per topic this consumer names (subscribed by name or assigned) that the cluster says
        does not exist, then one a minute while it still does not: it gets no records from it, no error. The
        same for an assigned partition beyond its topic's partitions (``assign`` of a partition not created)."""
        if self._runtime.closed:
            return
        snapshot = self._cluster.metadata.snapshot
        errors_by_topic = snapshot.topic_errors
        named = self._topics if self._subscribed else {tp.topic for tp in self._state.partitions}
        missing = missing_topics(errors_by_topic, named)
        topics = snapshot.topics
        beyond = [] if self._subscribed else [
            tp for tp in self._state.partitions if topics.get(tp.topic) and tp.partition not in topics[tp.topic]]
        if not missing and not beyond and not self._missing_topics_seen:
            return
        self._missing_topics_seen = bool(missing or beyond)
        now = self._cluster.clock()
        for topic, first in self._missing_topics.due(missing, now):
            log.warning("topic %r does not exist%s: this consumer gets no records from it until it is created "
                        "(%s)", topic, "" if first else " (still)",
                        "subscribed" if self._subscribed else "assigned")
        for tp, first in self._missing_partitions.due(beyond, now):
            log.warning("partition %d of topic %r does not exist%s (the topic has %d): this consumer gets no "
                        "records from it until it is created (assigned)", tp.partition, tp.topic,
                        "" if first else " (still)", len(topics.get(tp.topic) or ()))

    def _matched_topics(self) -> frozenset[str]:
        match = self._pattern.search if self._pattern is not None else None
        assert match is not None
        return frozenset(t for t in self._cluster.metadata.snapshot.topics
                         if not t.startswith("__") and match(t))

    def _on_metadata(self) -> None:
        if self._runtime.closed:
            return
        if self._pattern is not None:
            matched = self._matched_topics()
            if matched != self._matched:
                self._matched = matched
                if self._group is not None:
                    self._group.request_rejoin("pattern subscription matched different topics")
        if self._group is None:
            snapshot = self._cluster.metadata.snapshot
            topics = self._subscription()
            wanted = {TopicPartition(t, p) for t in topics for p in snapshot.partitions_for(t)}
            if wanted != set(self._state.partitions):
                self._apply_assignment(wanted)

    def _sync_group_assignment(self) -> None:
        if self._group is not None and not self._runtime.closed:
            self._apply_assignment(set(self._group.assignment))

    def _apply_assignment(self, tps: set[TopicPartition]) -> None:
        current = set(self._state.partitions)
        removed = current - tps
        if removed:
            self._rewind_pending(removed)
        self._state.assign(tps, from_committed=True)
        for tp in removed:
            self._last_committed.pop(tp, None)
        self._fetcher.wake()
        self._fetcher.signal_data()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (no group membership). New ones start from the committed offset
        (with a ``group_id``) or ``auto_offset_reset``; partitions kept keep their position."""
        if self._subscribed:
            raise errors.IllegalStateError("assign() is for consumers created without topics or a pattern")
        if self._runtime.closed:
            raise errors.ClientClosedError("consumer is closed")
        tps = checked_partitions(partitions, "assign")  # before any state changes: a bad call changes nothing
        self._manual = True
        current = set(self._state.partitions)
        self._rewind_pending(current)
        _, removed = self._state.assign(tps, from_committed=True)
        for tp in removed:
            self._last_committed.pop(tp, None)
        if self._runtime.started:
            self._cluster.set_topics({tp.topic for tp in self._state.partitions})
            self._fetcher.wake()
            self._warn_missing_topics()     # the cached metadata may already say (no refresh would announce it)

    def assignment(self) -> frozenset[TopicPartition]:
        self._check_closed()
        return self._state.assignment()

    def subscription(self) -> frozenset[str]:
        self._check_closed()
        return frozenset(self._subscription()) if self._subscribed else frozenset()

    # ------------------------------------------------------------------ positions
    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Consume ``partition`` from ``offset`` on (buffered data for it is dropped)."""
        self._check_closed()
        self._rewind_pending([partition])
        self._state.seek(partition, offset)
        self._fetcher.wake()

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Move to the log start (all assigned partitions if none given); returns once resolved."""
        await self._reset_to(EARLIEST, partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Move to the high watermark (all assigned partitions if none given); returns once resolved."""
        await self._reset_to(LATEST, partitions)

    async def _reset_to(self, strategy: str, partitions: tuple[TopicPartition, ...]) -> None:
        self._check_open()
        tps = list(partitions) if partitions else list(self._state.partitions)
        self._rewind_pending(tps)
        for tp in tps:
            self._state.request_reset(tp, strategy)
        self._fetcher.wake()
        await self._wait_positions(tps)

    async def _wait_positions(self, tps: list[TopicPartition]) -> None:
        with anyio.fail_after(self.config.request_timeout_ms / 1000.0):
            while True:
                event = self._fetcher.data_event()
                self._check_open()
                pending = []
                for tp in tps:
                    st = self._state.state(tp)
                    if st.error is not None:
                        raise st.error
                    if not st.has_position:
                        pending.append(tp)
                if not pending:
                    return
                await event.wait()

    async def position(self, partition: TopicPartition) -> int:
        """Offset of the next record the application will receive from ``partition`` (waits until known)."""
        self._check_open()
        first = self._pending_first().get(partition)
        if first is not None:
            return first[0]
        try:
            await self._wait_positions([partition])
        except TimeoutError:
            raise errors.KafkaTimeoutError(
                f"position of {partition.topic}-{partition.partition} not known within request_timeout_ms") from None
        pos = self._state.position(partition)
        assert pos is not None
        return pos

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark from the last Fetch answer (None before one)."""
        self._check_closed()
        hw = self._state.state(partition).high_watermark
        return None if hw < 0 else hw

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        self._check_closed()
        lso = self._state.state(partition).last_stable_offset
        return None if lso < 0 else lso

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching and returning records of these partitions until ``resume``."""
        self._check_closed()
        self._rewind_pending(partitions)
        self._state.pause(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._check_closed()
        self._state.resume(partitions)
        self._fetcher.wake()
        self._fetcher.signal_data()

    def paused(self) -> frozenset[TopicPartition]:
        self._check_closed()
        return self._state.paused()

    # ------------------------------------------------------------------ consuming
    async def getmany(self, *partitions: TopicPartition, timeout_ms: float = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord[KeyT, ValueT]]]:
        """Buffered records, waiting up to ``timeout_ms`` for some: ``{TopicPartition: [ConsumerRecord]}``.

        At most ``max_records`` (default ``max_poll_records``) in all; only from ``partitions`` if given.
        Raises a partition's pending error (e.g. ``OffsetOutOfRangeError`` with ``auto_offset_reset='none'``)
        once no records are ready, and ``IllegalStateError`` at once when the consumer has neither a subscription
        nor assigned partitions (it would wait forever; Java's poll() throws IllegalStateException).
        """
        if self._processing is not None:
            self._end_processing()
        got = await self._getmany(*partitions, timeout_ms=timeout_ms, max_records=max_records)
        tracer = self.hooks.tracer
        if tracer is not None and got:
            tracer.received(self._trace_site, [r for records in got.values() for r in records])
        return got

    async def _getmany(self, *partitions: TopicPartition, timeout_ms: float = 0, max_records: int | None = None
                       ) -> dict[TopicPartition, list[ConsumerRecord[KeyT, ValueT]]]:
        self._check_open()
        if not self._subscribed and not self._state.partitions:
            raise errors.IllegalStateError(
                "consumer has no subscription and no assigned partitions, so there is nothing to wait for: pass "
                "topics or pattern= to Consumer(...), or call assign([...]) before getmany() / getone() / async for")
        if max_records is None:
            max_records = self._max_poll_records
        elif not isinstance(max_records, int) or isinstance(max_records, bool) or max_records < 1:
            raise ValueError(f"max_records must be an int >= 1, got {max_records!r}")
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms!r}")
        if self._pending_index < len(self._pending):
            self._rewind_pending(None)
        if self._group is not None:
            self._group.poll_happened(self._cluster.clock())
        parts = list(partitions) if partitions else None
        if parts:
            for tp in parts:
                self._state.state(tp)
        state, fetcher = self._state, self._fetcher
        deadline: float | None = None
        # one event-loop turn before handing anything out (nothing is drained yet, so a cancellation here loses no
        # record): a loop that polls whenever records are buffered never waits otherwise, and the fetch answers
        # and the next Fetch requests would queue behind it until the buffer ran dry (at 10,000 partitions on the
        # mock, reading and fetching took turns instead of overlapping: 7.8 s instead of ~2.5 s)
        await anyio.lowlevel.checkpoint()
        while True:
            event = fetcher.data_event()
            buffered = state.buffered_by_partition() if self.hooks else None
            # the fetch state is not generic: its records carry what this consumer's deserializers made
            result = cast("dict[TopicPartition, list[ConsumerRecord[KeyT, ValueT]]]", state.drain(max_records, parts))
            if result:
                if buffered is not None:
                    self._emit_consumed(result, buffered)
                fetcher.wake()
                return result
            self._check_open()
            now = self._cluster.clock()
            if deadline is None:
                deadline = now + timeout_ms
            remaining = deadline - now
            if remaining <= 0:
                return {}
            fetcher.wake()
            with anyio.move_on_after(remaining / 1000.0):
                await event.wait()

    def _emit_consumed(self, result: Mapping[TopicPartition, list[ConsumerRecord[KeyT, ValueT]]],
                       buffered_before: Mapping[TopicPartition, int]) -> None:
        """``records_consumed`` per partition handed out (only with hooks attached: metrics, tracing).

        ``bytes`` counts the fetched batches the drain decoded (as fetched: compressed, with batch headers, as
        Java's ``bytes-consumed`` does), read off the fetch state's buffer accounting: O(partitions), where
        summing the records' key and value sizes would cost a few hundred ns per record.
        """
        read_committed = self.config.isolation_level == "read_committed"
        for tp, records in result.items():
            st = self._state.state(tp)
            end = st.last_stable_offset if read_committed else st.high_watermark
            lag = end - st.position if end >= 0 and st.position is not None else None
            size = max(0, buffered_before.get(tp, 0) - st.buffered_bytes)
            self.hooks.emit(RECORDS_CONSUMED, topic=tp.topic, partition=tp.partition, records=len(records),
                            bytes=size, lag=lag)

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord[KeyT, ValueT]:
        """The next record (from ``partitions`` if given), waiting as long as it takes. Raises
        ``ClientClosedError`` once the consumer is closed, also when ``close()`` ends the wait."""
        return await self._one(partitions, ends_on_close=False)

    async def _one(self, partitions: tuple[TopicPartition, ...], *, ends_on_close: bool
                   ) -> ConsumerRecord[KeyT, ValueT]:
        """``getone`` (``ends_on_close``: ``async for`` under a tracer), a ``process`` span open for the record."""
        if self._processing is not None:
            self._end_processing()
        if partitions:
            record = None
            while record is None:
                got = await self._getmany(*partitions, timeout_ms=3_600_000, max_records=1)
                for records in got.values():
                    record = records[0]
        elif ends_on_close:
            record = await self._next()
        else:
            self._check_open()
            try:
                record = await self._next()
            except StopAsyncIteration:      # close() ended the wait: getone() is a call on a closed consumer
                raise errors.ClientClosedError("consumer is closed") from None
        tracer = self.hooks.tracer
        if tracer is not None:
            self._processing = tracer.start_process(self._trace_site, (record,))
        return record

    def __aiter__(self) -> AsyncIterator[ConsumerRecord[KeyT, ValueT]]:
        return self

    async def __anext__(self) -> ConsumerRecord[KeyT, ValueT]:
        """``async for`` ends (no error) when the consumer is closed, before or while it waits: that is how a
        service loop stops when a signal handler or another task closes its consumer. Everything else a closed
        consumer is asked raises ``ClientClosedError``, and so does a consumer a background failure closed."""
        if self.hooks.tracer is not None:
            return await self._one((), ends_on_close=True)
        i = self._pending_index
        pending = self._pending
        if i < len(pending):
            self._pending_index = i + 1
            return pending[i]
        return await self._refill()

    async def _next(self) -> ConsumerRecord[KeyT, ValueT]:
        """``__anext__`` without tracing."""
        i = self._pending_index
        if i < len(self._pending):
            self._pending_index = i + 1
            return self._pending[i]
        return await self._refill()

    def process(self, record: ConsumerRecord[KeyT, ValueT], *batch: ConsumerRecord[KeyT, ValueT]
                ) -> AbstractContextManager[Any]:
        """``with consumer.process(record): handle(record)``: the record's processing, traced when the consumer
        has a tracer (its ``process {topic}`` span is current inside the block and given to ``as``; an exception
        from the block is recorded on it and propagates); a batch handled as a unit is ``process(*records)``.
        For the record ``async for`` / ``getone`` just returned, the span already open for it.  Without a
        tracer it does nothing (``as`` gets None)."""
        return processing(self.hooks.tracer, self._trace_site, (record, *batch), self._processing)

    def _end_processing(self) -> None:
        """End the processing span of the record handed out last (the application came back for more)."""
        processing, self._processing = self._processing, None
        if processing is not None:
            processing.end()

    async def _refill(self) -> ConsumerRecord[KeyT, ValueT]:
        if self._processing is not None:
            self._end_processing()      # opened while a tracer was attached, which is gone now
        if self._runtime.closed:
            raise StopAsyncIteration
        while True:
            try:
                got = await self._getmany(timeout_ms=3_600_000, max_records=self._max_poll_records)
            except errors.ClientClosedError:
                if self._runtime.closed:        # the application closed the consumer: the iteration is over
                    raise StopAsyncIteration from None
                raise                   # a background failure closed it: that is an error
            if got:
                break
        if len(got) == 1:
            pending = next(iter(got.values()))
        else:
            pending = [r for records in got.values() for r in records]
        self._pending = pending
        self._pending_index = 1
        return pending[0]

    def _pending_first(self) -> dict[TopicPartition, tuple[int, int]]:
        """Offset and leader epoch of the first not-yet-yielded record per partition."""
        first: dict[TopicPartition, tuple[int, int]] = {}
        for r in self._pending[self._pending_index:]:
            tp = TopicPartition(r.topic, r.partition)
            if tp not in first:
                first[tp] = (r.offset, r.leader_epoch)
        return first

    def _rewind_pending(self, partitions: Iterable[TopicPartition] | None) -> None:
        """Give records taken for ``async for`` but not yielded back: the partitions seek to the first one."""
        if self._pending_index >= len(self._pending):
            return
        first = self._pending_first()
        wanted = set(first) if partitions is None else set(partitions) & set(first)
        if not wanted:
            return
        rest = self._pending[self._pending_index:]
        self._pending = [r for r in rest if (r.topic, r.partition) not in wanted]
        self._pending_index = 0
        for tp in wanted:
            if tp in self._state.partitions:
                offset, epoch = first[tp]
                paused = self._state.partitions[tp].paused
                self._state.seek(tp, offset, epoch)
                self._state.partitions[tp].paused = paused
        self._fetcher.wake()

    # ------------------------------------------------------------------ commits
    def _current_offsets(self) -> dict[TopicPartition, tuple[int, int | None, str | None]]:
        offsets: dict[TopicPartition, tuple[int, int | None, str | None]] = {
            tp: (pos, epoch if epoch >= 0 else None, None)
            for tp, (pos, epoch) in self._state.consumed_offsets().items()}
        for tp, (offset, epoch) in self._pending_first().items():
            if tp in offsets:
                offsets[tp] = (offset, epoch if epoch >= 0 else None, None)
        return offsets

    def _positions_for_revoke(self) -> dict[TopicPartition, int]:
        """What the group commits before revoking partitions (with auto-commit, as Java does): every
        position; the session keeps the revoked ones and commits them before on_partitions_revoked."""
        if not self.config.enable_auto_commit:
            return {}
        return {tp: offset for tp, (offset, _, _) in self._current_offsets().items()}

    async def commit(self, offsets: Mapping[TopicPartition, CommitValue] | None = None) -> None:
        """Commit offsets to the group and wait for the answer (default: every assigned partition's position).

        ``offsets`` values: the offset of the next record to consume, or ``(offset, metadata)``. Raises
        ``CommitFailedError`` when the group rebalanced meanwhile.
        """
        self._check_open()
        if self.config.group_id is None:
            raise errors.IllegalStateError("commit() needs a group_id: offsets are stored by the group coordinator")
        lost = self._group.lost_since_poll if self._group is not None else frozenset()
        if lost and (offsets is None or not lost.isdisjoint(offsets)):
            # the member's assignment is gone with the membership: committing what is left would succeed on
            # nothing and hide that these records will be delivered again (Java: CommitFailedException)
            names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(lost)[:10])
            raise errors.CommitFailedError(
                f"group {self.config.group_id}: {len(lost)} partition(s) ({names}{', ...' if len(lost) > 10 else ''}) "
                f"were lost since the last poll (the membership ended: max_poll_interval_ms or session_timeout_ms "
                f"passed, or the member was fenced); their positions were not committed and their records will be "
                f"delivered again. The next poll joins the group again")
        if offsets is None:
            normalized = self._current_offsets()
        else:
            normalized = {tp: _commit_value(tp, v) for tp, v in offsets.items()}
        await self._commit_offsets(normalized, only_changed=False)

    async def _commit_offsets(self, offsets: dict[TopicPartition, tuple[int, int | None, str | None]], *,
                              only_changed: bool) -> None:
        if only_changed:
            offsets = {tp: v for tp, v in offsets.items() if self._last_committed.get(tp) != v[0]}
        if not offsets:
            return
        if self._group is not None:
            await self._group.commit(offsets)
        elif self._offsets is not None:
            await self._offsets.commit(check_offsets(offsets))
        else:
            raise errors.IllegalStateError("consumer not started: no group coordinator to commit to")
        for tp, (offset, _, _) in offsets.items():
            self._last_committed[tp] = offset

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset for ``partition`` (None when nothing is committed)."""
        self._check_open()
        if self.config.group_id is None:
            raise errors.IllegalStateError("committed() needs a group_id")
        found = await self._lookup_committed([partition])
        value = found.get(partition)
        return None if value is None else value[0]

    async def _lookup_committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int] | None]:
        if self._offsets is None:
            raise errors.IllegalStateError("consumer not started: no group coordinator to ask")
        raw = await self._offsets.fetch(tps)
        return {tp: (None if off is None or off < 0 else (off, -1)) for tp, off in raw.items()}

    async def _auto_commit_loop(self) -> None:
        interval = self.config.auto_commit_interval_ms / 1000.0
        while not self._runtime.closed:
            await anyio.sleep(interval)
            if self._runtime.closed or not self._state.partitions:
                continue
            try:
                await self._commit_offsets(self._current_offsets(), only_changed=True)
            except errors.CommitFailedError as exc:
                log.info("auto-commit skipped: %s", exc)
            except (errors.KafkaError, OSError) as exc:
                log.warning("auto-commit failed: %s", exc)

    # ------------------------------------------------------------------ introspection
    def partitions_for(self, topic: str) -> tuple[int, ...]:
        self._check_closed()
        return self._cluster.metadata.snapshot.partitions_for(topic)

    # ------------------------------------------------------------------ offset lookups and lag
    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset whose timestamp is at or after each given timestamp (ms); None where no record is
        that recent. Any partition may be asked, assigned or not; bounded by ``default_api_timeout_ms``."""
        self._check_open()
        if not isinstance(timestamps, Mapping):
            raise TypeError(f"timestamps: expected a mapping {{TopicPartition: timestamp_ms}}, got "
                            f"{type(timestamps).__name__}")
        for tp, ts in timestamps.items():
            if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
                raise ValueError(f"timestamps: timestamp for {tp!r} must be an int >= 0 (ms), got {ts!r}")
        found = await self._list_offsets(offset_requests(timestamps, "offsets_for_times"), timeout_ms)
        return {tp: None if off < 0 else OffsetAndTimestamp(off, ts) for tp, (off, ts) in found.items()}

    async def beginning_offsets(self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None
                                ) -> dict[TopicPartition, int]:
        """Each partition's log start offset (bounded by ``default_api_timeout_ms``)."""
        return await self._edge_offsets(partitions, EARLIEST_TIMESTAMP, "beginning_offsets", timeout_ms)

    async def end_offsets(self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None
                          ) -> dict[TopicPartition, int]:
        """Each partition's end: the high watermark, or the last stable offset with ``read_committed``."""
        return await self._edge_offsets(partitions, LATEST_TIMESTAMP, "end_offsets", timeout_ms)

    async def _edge_offsets(self, partitions: Iterable[TopicPartition], timestamp: int, call: str,
                            timeout_ms: int | None) -> dict[TopicPartition, int]:
        self._check_open()
        tps = checked_partitions(partitions, call)
        found = await self._list_offsets({tp: timestamp for tp in tps}, timeout_ms)
        return {tp: found[tp][0] for tp in tps}

    async def _list_offsets(self, wanted: dict[TopicPartition, int], timeout_ms: int | None
                            ) -> dict[TopicPartition, tuple[int, int]]:
        """Each partition's ``(offset, timestamp)`` from its leader (the router's ListOffsets rounds), or the
        first partition's error."""
        if timeout_ms is not None:
            check_timeout(timeout_ms)
        results = await self._router.list_offsets(
            wanted, read_committed=self.config.isolation_level == "read_committed", timeout_ms=timeout_ms)
        return dict(results.raise_on_error().ok)

    def lag(self, partition: TopicPartition) -> int | None:
        """Records between the position and the end of ``partition`` as of the last Fetch answer (the high
        watermark, or the last stable offset with ``read_committed``); None until both are known. No I/O."""
        self._check_closed()
        st = self._state.state(partition)
        end = st.last_stable_offset if self.config.isolation_level == "read_committed" else st.high_watermark
        first = self._pending_first().get(partition)
        position = first[0] if first is not None else self._state.position(partition)
        if end is None or end < 0 or position is None:
            return None
        return max(0, end - position)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group id, generation and member id of this consumer (a transactional producer's
        ``send_offsets_to_transaction`` needs them, KIP-447); generation -1 while not a member."""
        self._check_open()
        if self.config.group_id is None:
            raise errors.IllegalStateError("group_metadata() needs a group_id")
        group = self._group
        if group is None:
            return ConsumerGroupMetadata(self.config.group_id, -1, "", self.config.group_instance_id)
        return ConsumerGroupMetadata(self.config.group_id, group.generation_id, group.member_id,
                                     self.config.group_instance_id)


def _commit_value(tp: TopicPartition, value: CommitValue) -> tuple[int, int | None, str | None]:
    if isinstance(value, int) and not isinstance(value, bool):
        offset, epoch, meta = value, None, None
    elif isinstance(value, tuple) and len(value) == 2:
        offset, meta = value
        epoch = None
    elif isinstance(value, tuple) and len(value) == 3:
        offset, epoch, meta = value
    else:
        raise TypeError(f"commit offset for {tp.topic}-{tp.partition}: expected offset or (offset, metadata), "
                        f"got {value!r}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"commit offset for {tp.topic}-{tp.partition}: must be an int >= 0, got {offset!r}")
    if meta is not None and not isinstance(meta, str):
        raise TypeError(f"commit metadata for {tp.topic}-{tp.partition}: must be str or None, got {meta!r}")
    return offset, epoch, meta

