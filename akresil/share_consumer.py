"""The share consumer (KIP-932, "queues for Kafka"): many consumers share partitions, record by record.

A share group hands each record to one member at a time, under an acquisition lock; the member settles it
with ``acknowledge(record, "accept" | "release" | "reject")``. A released record (or one whose lock runs
out, or whose holder leaves or dies) is delivered again with a higher ``delivery_count``; a rejected one is
never delivered again. There are no offsets to commit: ``commit()`` sends the acknowledgements.

Two acknowledgement modes, as in the Java client's ``share.acknowledgement.mode``:

* ``"implicit"`` (default): every record handed out by one ``getmany`` (or yielded by ``async for`` since
  its last refill) is accepted when the next one starts, on ``commit()`` and on ``close()``;
  ``acknowledge()`` may still settle a record differently before that.
* ``"explicit"``: only ``acknowledge()`` settles records. A record never acknowledged is redelivered
  when its lock expires (the broker's ``group.share.record.lock.duration.ms``, 30 s by default).

Acknowledgements ride on the next ShareFetch to the record's leader; ``commit()`` sends them at once and
returns the outcome per partition (None: all accepted by the broker; else the first error, e.g.
``AcquisitionLockExpiredError`` for a record whose lock ran out before it was acknowledged).

Membership (ShareGroupHeartbeat) is a ``net.group_session.GroupSession`` with a ``ShareGroupMember``, the same
session consumer groups run; fetching is ``net.share_fetcher``'s; the state (sessions, locks,
acknowledgements) lives in the sans-IO ``core.share_state`` and ``core.group_heartbeat``.
"""

from __future__ import annotations

import logging
from functools import partial
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterable, Literal

import anyio
import anyio.abc

from . import errors
from .checks import check_topic_name
from .client_runtime import ClientLifecycle, ClientRuntime
from .core.missing_topics import MissingTopicWarnings, missing_topics
from .core.share_state import ACK_TYPES, ShareFetchState
from .core.tracing import ProcessSpan, processing
from .net.coordinator import GROUP
from .net.group_heartbeat import ShareGroupMember
from .net.clock import clock_source
from .net.group_session import GroupSession
from .net.share_fetcher import ShareFetcher
from .types import ShareRecord, TopicPartition

if TYPE_CHECKING:
    from typing import Unpack

    from .config_keys import ShareConsumerConfig

log = logging.getLogger(__name__)

__all__ = ["ShareConsumer"]

_EXTRA_KEYS = ("hooks",)
#: consumer keys that mean nothing to a share group: the broker keeps the group's position (and its
#: auto-offset-reset), there are no offsets to commit and no client-side assignors
_NOT_FOR_SHARE = ("auto_offset_reset", "enable_auto_commit", "auto_commit_interval_ms", "group_instance_id",
                  "partition_assignment_strategy", "isolation_level", "session_timeout_ms",
                  "heartbeat_interval_ms", "rebalance_timeout_ms", "max_partition_fetch_bytes",
                  "group_protocol", "group_remote_assignor")
_MODES = ("implicit", "explicit")
_ACQUIRE_MODES = ("batch_optimized", "record_limit")
#: acknowledge()'s type names to their wire values (plain ints: the per-record path converts nothing)
_ACKS: dict[str, int] = {name: int(kind) for name, kind in ACK_TYPES.items()}
#: ``acknowledge``'s default type: the call that passes no type (or this interned literal) is recognised by
#: identity, without a lookup
_ACCEPT_NAME = "accept"
_ACCEPT = _ACKS[_ACCEPT_NAME]


def _ack_of(type: object) -> int | None:  # noqa: A002
    """``acknowledge``'s type when it is not exactly a ``str`` (a subclass; anything else is refused)."""
    return _ACKS.get(type) if isinstance(type, str) else None


class ShareConsumer(ClientLifecycle):
    """Async share-group consumer. ``async with ShareConsumer("jobs", bootstrap_servers=..., group_id="g")``.

    ``acknowledgement_mode``: ``"implicit"`` (default) or ``"explicit"``. ``share_acquire_mode`` (the Java client's
    ``share.acquire.mode``): ``"batch_optimized"`` (default) lets a ``getmany`` go past ``max_poll_records`` to
    the end of the record batches the broker acquired (Apache Kafka acquires whole batches), so each answer is one
    poll and one commit; ``"record_limit"`` makes ``max_poll_records`` a hard limit (fetches are sized to fit it).
    A ``max_records`` passed to ``getmany`` is always a hard limit. Other keyword arguments are
    consumer configs in snake_case (``bootstrap_servers``, ``group_id`` (required), ``client_id``,
    ``fetch_max_wait_ms``, ``fetch_min_bytes``, ``fetch_max_bytes``, ``max_poll_records``,
    ``request_timeout_ms``, ``retry_backoff_ms``, ...), plus ``key_deserializer`` / ``value_deserializer``.
    """

    def __init__(self, *topics: str, acknowledgement_mode: Literal["implicit", "explicit"] = "implicit",
                 share_acquire_mode: Literal["batch_optimized", "record_limit"] = "batch_optimized",
                 key_deserializer: Callable[[bytes], Any] | None = None,
                 value_deserializer: Callable[[bytes], Any] | None = None,
                 **config: Unpack[ShareConsumerConfig]) -> None:
        for key in _NOT_FOR_SHARE:
            if key in config:
                raise errors.ConfigError(f"{key}: not a share consumer setting (share groups keep delivery "
                                         f"state on the broker)")
        if acknowledgement_mode not in _MODES:
            raise errors.ConfigError(f"acknowledgement_mode: {acknowledgement_mode!r} is not one of "
                                     f"{', '.join(map(repr, _MODES))}")
        if share_acquire_mode not in _ACQUIRE_MODES:
            raise errors.ConfigError(f"share_acquire_mode: {share_acquire_mode!r} is not one of "
                                     f"{', '.join(map(repr, _ACQUIRE_MODES))}")
        self._runtime = rt = ClientRuntime("consumer", "share consumer", "ShareConsumer", config, extra=_EXTRA_KEYS)
        self.config = cfg = rt.config
        if cfg.group_id is None:
            raise errors.ConfigError("group_id: a share consumer needs the share group's id")
        for name, deserializer in (("key_deserializer", key_deserializer),
                                   ("value_deserializer", value_deserializer)):
            if deserializer is not None and not callable(deserializer):
                raise errors.ConfigError(f"{name}: must be callable, got {type(deserializer).__name__}")
        for t in topics:
            check_topic_name(t)
        self.acknowledgement_mode = acknowledgement_mode
        self.share_acquire_mode = share_acquire_mode
        self.hooks, self._cluster = rt.hooks, rt.cluster
        self._topics = frozenset(topics)
        self._group = GroupSession(self._cluster, cfg, ShareGroupMember, subscription=self.subscription,
                                   on_assignment_changed=self._assignment_changed)
        #: the session's membership core, read directly by ``acknowledge`` (once per record) for its fatal error
        member = self._group.member
        assert isinstance(member, ShareGroupMember)
        self._membership = member.core
        #: what a tracer (``hooks.tracer``) is told about this consumer, and the processing it opened for the
        #: record handed out last (ended by the consumer's next call)
        self._trace_site = rt.trace_site("share_consumer")
        self._processing: ProcessSpan | None = None
        self._state = ShareFetchState(
            cfg.group_id, backoff=self._group.backoff, max_wait_ms=cfg.fetch_max_wait_ms,
            min_bytes=max(1, cfg.fetch_min_bytes), max_bytes=cfg.fetch_max_bytes,
            max_records=cfg.max_poll_records, key_deserializer=key_deserializer,
            value_deserializer=value_deserializer, whole_batches=share_acquire_mode == "batch_optimized")
        self._state.member_id = self._group.member_id
        #: the state's per-record settle, bound once (``acknowledge`` runs once per record)
        self._settle_record = self._state.acknowledge_record
        self._fetcher = ShareFetcher(self._cluster, self._state, request_timeout_ms=cfg.request_timeout_ms)
        self._clock = self._cluster.clock
        #: ``acknowledge`` reads the clock once per record as ``source() * scale`` (no Python frame for the default)
        self._clock_source, self._clock_scale = clock_source(self._clock)
        #: records handed out by the latest poll (implicit mode accepts them when the next poll starts)
        self._last_poll: list[ShareRecord] = []
        self._pending: list[ShareRecord] = []
        self._pending_index = 0
        self._missing_topics: MissingTopicWarnings[str] = MissingTopicWarnings()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Bootstrap (the group's FindCoordinator goes alongside its Metadata), then join the share group and fetch;
        ``close()`` may then run in any task (``async with``)."""
        assert self.config.group_id is not None       # checked in __init__
        await self._runtime.start(self._start_tasks, before_bootstrap=partial(self._cluster.set_topics, self._topics),
                                  on_failure=self._fetcher._fail, coordinators=((self.config.group_id, GROUP),))

    async def _start_tasks(self, tg: anyio.abc.TaskGroup) -> None:
        """The membership first: its first heartbeat (and the coordinator's connection it opens) is what the first
        fetch waits for, so it goes out ahead of the leaders' connections (their set-up round trips would queue
        in front of it on a broker with one thread for all, as librdkafka's mock has)."""
        await tg.start(self._group.run)
        await tg.start(self._fetcher.run)
        self._fetcher.connect_leaders(self._topics)
        self._cluster.on_metadata_change(self._warn_missing_topics)
        self._warn_missing_topics()      # the bootstrap Metadata already answered for the subscription

    def _warn_missing_topics(self) -> None:
        """One WARNING per subscribed topic the cluster says does not exist, then one a minute while it still does
        not (as the consumer does): the share group gets no records from it, and no error says so."""
        if self._runtime.closed:
            return
        missing = missing_topics(self._cluster.metadata.snapshot.topic_errors, self._topics)
        for topic, first in self._missing_topics.due(missing, self._cluster.clock()):
            log.warning("topic %r does not exist%s: this share consumer gets no records from it until it is "
                        "created (subscribed)", topic, "" if first else " (still)")

    async def close(self) -> None:
        """Settle (implicit mode: accept the last poll), send the final acknowledgements, close the share
        sessions (the broker releases records still held), leave the group, release every task."""
        if self._processing is not None:
            self._end_processing()
        await self._runtime.close(self._settle_and_leave)

    async def _settle_and_leave(self) -> None:
        timeout = self.config.request_timeout_ms
        if self.acknowledgement_mode == "implicit":
            self._accept_last_poll()
        await self._fetcher.stop(timeout + self._state.max_wait_ms)
        await self._fetcher.close_sessions(timeout)      # the member heartbeats meanwhile
        await self._group.leave()

    def _check_open(self) -> None:
        self._runtime.check_open()
        if self._fetcher.fatal_error is not None:
            raise self._fetcher.fatal_error
        if self._group.fatal_error is not None:
            raise self._group.fatal_error

    # ------------------------------------------------------------------ membership
    def subscribe(self, topics: Iterable[str]) -> None:
        """Replace the subscription; the next heartbeat carries it (at once)."""
        new = frozenset(topics)
        for t in new:
            check_topic_name(t)
        self._topics = new
        self._cluster.set_topics(new)
        self._group.request_rejoin("subscription changed")

    def subscription(self) -> frozenset[str]:
        return self._topics

    def assignment(self) -> frozenset[TopicPartition]:
        """Partitions the coordinator asked this member to fetch from (shared with other members)."""
        return self._state.assignment

    @property
    def member_id(self) -> str:
        return self._group.member_id

    @property
    def acquisition_lock_timeout_ms(self) -> int | None:
        """The broker's record lock duration, known after the first ShareFetch answer."""
        return self._state.lock_timeout_ms

    def _assignment_changed(self) -> None:
        """The session took a new assignment (partitions by name), or stopped on a fatal error: fetch from those
        leaders, and wake a waiting poll so it raises the error (``UnsupportedVersionError`` on a broker without
        share groups) instead of waiting for records that cannot come."""
        self._state.set_assignment(set(self._group.assignment))
        self._fetcher.notify()

    # ------------------------------------------------------------------ records
    def _accept_last_poll(self) -> None:
        if self._last_poll:
            self._state.accept_delivered(self._last_poll, self._cluster.clock())
            self._last_poll = []

    async def getmany(self, *, timeout_ms: float = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ShareRecord]]:
        """Records acquired for this consumer, by partition; waits up to ``timeout_ms`` for the first."""
        if self._processing is not None:
            self._end_processing()
        got = await self._getmany(timeout_ms=timeout_ms, max_records=max_records)
        tracer = self.hooks.tracer
        if tracer is not None and got:
            tracer.received(self._trace_site, [r for records in got.values() for r in records])
        return got

    async def _getmany(self, *, timeout_ms: float, max_records: int | None
                       ) -> dict[TopicPartition, list[ShareRecord]]:
        self._check_open()
        limit = self.config.max_poll_records if max_records is None else max_records
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"max_records must be an int >= 1, got {max_records!r}")
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms!r}")
        if self._pending_index < len(self._pending):
            # records an ``async for`` took but did not yield yet come first (they are held already)
            if self.acknowledgement_mode == "implicit":
                self._accept_last_poll()
            records = self._pending[self._pending_index:self._pending_index + limit]
            self._pending_index += len(records)
            self._last_poll = list(records)
            out: dict[TopicPartition, list[ShareRecord]] = {}
            for rec in records:
                out.setdefault(TopicPartition(rec.topic, rec.partition), []).append(rec)
            return out
        out = await self._poll(timeout_ms, limit, whole=max_records is None)
        last: list[ShareRecord] = []
        for recs in out.values():
            last += recs
        self._last_poll = last
        return out

    async def _poll(self, timeout_ms: float | None, limit: int, *,
                    whole: bool = True) -> dict[TopicPartition, list[ShareRecord]]:
        """Records from the fetch state; implicit mode first accepts what the application was handed last.
        ``whole``: ``limit`` is ``max_poll_records``, which the batch-optimized mode may finish a batch past."""
        whole = whole and self._state.whole_batches
        if self.acknowledgement_mode == "implicit":
            self._accept_last_poll()
        self._fetcher.poke()
        deadline = None if timeout_ms is None else self._cluster.clock() + timeout_ms
        while True:
            changed = self._fetcher.changed()
            unreadable = self._state.take_unreadable()
            if unreadable is not None:
                raise unreadable      # already settled (released or rejected): the next poll goes on
            records = self._state.poll_by_partition(limit, self._cluster.clock(), whole=whole)
            if records:
                self._fetcher.poke()     # a leader whose records were all handed out may be fetched again
                return records
            self._check_open()
            self._fetcher.poke()
            if deadline is None:
                await changed.wait()
                continue
            left = deadline - self._cluster.clock()
            if left <= 0:
                return {}
            rt = self._fetcher.rt
            with rt.scope(deadline=rt.now() + left / 1000.0):
                await changed.wait()

    def __aiter__(self) -> AsyncIterator[ShareRecord]:
        return self

    async def __anext__(self) -> ShareRecord:
        """One record at a time from refills of ``max_poll_records``; in implicit mode a record counts as
        handed out (and is accepted at the next refill, ``commit()`` or ``close()``) once it is yielded:
        records of a refill never yielded are not accepted, the broker releases them."""
        if self._processing is not None:
            self._end_processing()
        if self._pending_index >= len(self._pending):
            pending: list[ShareRecord] = []
            for recs in (await self._poll(None, self.config.max_poll_records)).values():
                pending += recs
            self._pending = pending
            self._pending_index = 0
        rec = self._pending[self._pending_index]
        self._pending_index += 1
        self._last_poll.append(rec)
        tracer = self.hooks.tracer
        if tracer is not None:
            self._processing = tracer.start_process(self._trace_site, (rec,))
        return rec

    def process(self, record: ShareRecord, *batch: ShareRecord) -> AbstractContextManager[Any]:
        """As ``Consumer.process``: the record's processing, traced when the consumer has a tracer."""
        return processing(self.hooks.tracer, self._trace_site, (record, *batch), self._processing)

    def _end_processing(self) -> None:
        processing, self._processing = self._processing, None
        if processing is not None:
            processing.end()

    # ------------------------------------------------------------------ acknowledgements
    def acknowledge(self, record: ShareRecord, type: str = _ACCEPT_NAME) -> None:  # noqa: A002 (Java's name)
        """Settle one delivered record: ``"accept"`` (processed), ``"release"`` (deliver again, perhaps to
        another member) or ``"reject"`` (unprocessable: never deliver again). Local until the next fetch
        to its leader or ``commit()``. Raises ``IllegalStateError`` for a record this consumer does not
        hold (not delivered to it, or already settled)."""
        if (not self._runtime.running or self._fetcher.fatal_error is not None
                or self._membership.fatal_error is not None):
            self._check_open()     # raises the reason (the usual case costs these attribute reads only)
        if type is _ACCEPT_NAME:
            ack = _ACCEPT
        else:
            kind = _ACKS.get(type) if type.__class__ is str else _ack_of(type)
            if kind is None:
                raise errors.ConfigError(f"type: {type!r} is not one of 'accept', 'release', 'reject'")
            ack = kind
        if record.__class__ is not ShareRecord and not isinstance(record, ShareRecord):
            raise TypeError(f"record: expected a ShareRecord from this consumer, got {record.__class__.__name__}")
        self._settle_record(record, ack, self._clock_source() * self._clock_scale)

    async def commit(self, *, timeout_ms: float | None = None) -> dict[TopicPartition, errors.KafkaError | None]:
        """Send the pending acknowledgements now and wait for the brokers' answers.

        Implicit mode accepts the last poll's records first. Returns, per partition with acknowledgements
        settled since the last ``commit()``, None (all applied) or the first error.
        """
        self._check_open()
        if self.acknowledgement_mode == "implicit":
            self._accept_last_poll()
        nodes = self._state.request_commit()
        self._fetcher.poke()
        wait_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        rt = self._fetcher.rt
        with rt.scope(deadline=rt.now() + wait_ms / 1000.0):
            while True:
                changed = self._fetcher.changed()
                if self._state.settled(nodes):
                    break
                self._check_open()
                await changed.wait()
        return self._state.take_results()

    @property
    def closed(self) -> bool:
        return self._runtime.closed
