"""The consumer's sans-IO core: per-partition positions, fetch planning and Fetch response interpretation.

``FetchState`` owns, for every assigned partition, the position the application has reached, the offset the
next Fetch asks for (ahead of the position while fetched data waits in the buffer: that is the prefetch that
keeps one Fetch per leader in flight while the application works), pause/reset/error state and a KIP-580
``RetryState``. The I/O shell (``net.fetcher``) asks ``plan_fetches(now, snapshot)`` what to send, sends it,
and hands the decoded response back to ``on_fetch_response``; the application drains buffered records with
``drain``. Nothing here reads a clock, sleeps or touches a socket.

Rules worth knowing:

* A seek, reset or reassignment bumps the partition's ``generation``; a response for an older generation is
  dropped, so a seek racing an in-flight Fetch never delivers records from the old position.
* A leader the metadata has no endpoint for, or a node that may not be sent to yet (``node_ready_at``:
  reconnect backoff, KIP-219 mute), gets no Fetch: its partitions wait for the metadata or the node, not on
  backoffs of their own, so they resume together when it is back (and follow a leader move at once).
* NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH with a KIP-951 ``CurrentLeader`` that the metadata cache
  accepts re-plans the partition at once on the new leader (no backoff); without an accepted hint the
  partition backs off (KIP-580). Both ask for a metadata refresh. A leader error (or any error that says the
  leader view is stale) for a request planned on a leader the cache has since moved past (``moved_past``: a
  Metadata answer or another hint named a newer epoch while the request was out) is stale: the partition is
  re-planned at once on the cached leader, without backoff or refresh. A hint that only repeats what the cache
  knows is not accepted (it does not advance), so without this the partition waited a full backoff for a leader
  it already knew (issue 28).
* UNKNOWN_LEADER_EPOCH says the leader has not applied the epoch we know yet: brokers replay the metadata log
  at their own pace, and a hint (or a Metadata answer) from one that was ahead reaches us before the new leader
  has caught up. It does within milliseconds, so the partition is fetched again on the short doubling schedule
  of a topic being created (``pending_topic_backoff``: ~1, 2, 4 ... ms, capped at ``retry_backoff_max_ms``),
  with no metadata refresh; an answer resets it. With ``retry_backoff_ms`` it waited a whole backoff after
  every leader move on Apache Kafka. Java's consumer refetches on its next poll.
* Records are decoded lazily, one batch at a time, only when ``drain`` hands them out: data that is
  buffered but never returned (a seek, a revoke) costs no per-record work.
* Control batches are always skipped; with ``read_committed`` the records of aborted transactions are skipped
  using the response's ``aborted_transactions`` and the ABORT markers, as the Java client does.
* A batch that cannot be read (CRC mismatch, or a valid CRC over records that do not decode: garbage
  varints, bad UTF-8 header keys, a broken compressed payload) is a ``CorruptBatchError`` (an
  ``errors.CorruptRecordError``) naming the topic-partition, the first offset that cannot be handed out and
  the offset after the batch. As in the Java consumer, the partition's records before it are handed out
  first; then every poll that reaches the partition raises it (other partitions go on) and the partition
  stops fetching, until the application seeks (past it: ``seek(tp, exc.next_offset)``).
* Fetch from the closest replica (KIP-392): every Fetch carries ``client_rack``; a leader whose broker has a
  ``replica.selector.class`` may answer with ``preferred_read_replica`` (and no records), and the partition is
  then fetched from that replica, as the Java consumer does, until the lease (``metadata_max_age_ms``) runs out
  and the leader is asked again. It is fetched from the leader at once, with no backoff, when the replica
  answers with an error (UNKNOWN_LEADER_EPOCH aside: that one only says the replica is a moment behind our
  metadata), when a Fetch to it fails, or when the metadata shows it gone, offline or out of the ISR; errors
  that name a stale view also refresh the metadata. OFFSET_OUT_OF_RANGE from the replica is not a reset: the
  leader is asked (a replica's log may start later or end earlier than the leader's).
* Fetch sessions (KIP-227, ``core.fetch_session``): after a node's first (full) Fetch, its Fetches list only
  partitions whose fetch offset or leader epoch changed or that joined, and name those that left; the broker
  answers only partitions with news. A partition the answer leaves out simply has nothing new.
* Planning visits a ready set, not the assignment: a partition joins it when something may have made it
  fetchable (its node's answer or failure, a drain of its buffer, a seek, a resume, room in the prefetch
  buffer, a metadata change for those waiting on a busy node) and leaves it when a plan finds it blocked. At
  10,000 partitions the consumer polls hundreds of times a second; a scan of every partition per plan was a
  fifth of its CPU on librdkafka's mock.
* One Fetch per node is outstanding, and the broker holds a Fetch up to ``max_wait_ms`` when none of its
  partitions has records. So a Fetch carrying only caught-up partitions is not sent while a partition of the
  same node is held back by the prefetch bound and the broker has more records for it: that long poll would
  keep the node busy after the application drains the held partition, and its next Fetch (which the broker
  would answer at once) would wait behind it (the consumer's ~500 ms stall of issue 18). The held partition
  frees room as it is drained and the next plan carries both. When the application's last poll found nothing
  to hand out and no records arrived since (it waits for other partitions) nothing is deferred, so the
  caught-up partitions it waits for are always fetched.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from .. import errors
from ..checks import EARLIEST as EARLIEST_TIMESTAMP, LATEST as LATEST_TIMESTAMP
from ..protocol.fetch_codec import (FetchedPartition, FetchedPartitions, PackedFetchBody, nothing_new,
                                    pack_partitions)
from ..protocol.records import RecordBatchView, read_batches
from ..types import ConsumerRecord, TopicPartition
from .backoff import ExponentialBackoff, RetryState
from .fetch_session import FetchSession
from .metadata import ZERO_UUID, BrokerInfo, MetadataCache, MetadataSnapshot, pending_topic_backoff

EARLIEST, LATEST = "earliest", "latest"
#: ListOffsets timestamp sentinels
TIMESTAMP_FOR = {EARLIEST: EARLIEST_TIMESTAMP, LATEST: LATEST_TIMESTAMP}
#: the first Fetch version that names topics by id
TOPIC_ID_VERSION = 13

_LEADER_ERRORS = frozenset({errors.NotLeaderOrFollowerError.errno, errors.FencedLeaderEpochError.errno})
_OFFSET_OUT_OF_RANGE = errors.OffsetOutOfRangeError.errno
_UNKNOWN_LEADER_EPOCH = errors.UnknownLeaderEpochError.errno
_SESSION_TOPIC_ID_ERROR = errors.FetchSessionTopicIdError.errno
_SESSION_ERRORS = frozenset({errors.FetchSessionIdNotFoundError.errno, errors.InvalidFetchSessionEpochError.errno,
                             _SESSION_TOPIC_ID_ERROR})
_ABORT_MARKER = 0
_CONTROL_KEY = struct.Struct(">hh")

Deserializer = Callable[[bytes], Any]
#: shared by every record without headers: an empty tuple is a singleton the GC never tracks, where the C
#: reader's fresh empty list per record keeps each record tuple tracked (measured ~10% of decode time)
_NO_HEADERS: tuple[()] = ()


NoOffsetForPartitionError = errors.NoOffsetForPartitionError


class FetchPartition(NamedTuple):
    """One partition inside a planned Fetch request."""

    tp: TopicPartition
    fetch_offset: int
    #: the leader epoch the client believes in (Fetch v9+ fencing); -1 when unknown
    current_leader_epoch: int
    #: the partition's generation when planned; a response for an older one is dropped
    generation: int


class FetchRequest(NamedTuple):
    """A Fetch to send to ``node``: partitions grouped by topic, and the highest usable version."""

    node: int
    partitions: tuple[FetchPartition, ...]
    #: 12 when some topic has no id (Fetch 13+ names topics by id only); else 17
    max_version: int
    topic_ids: Mapping[str, bytes]


class FetchPlan(NamedTuple):
    requests: list[FetchRequest]
    #: some partition has no known leader: ask for a metadata refresh
    needs_metadata: bool
    #: earliest time (ms) a backed-off partition becomes fetchable again, None if nothing is waiting
    wake_at: float | None


class ResponseOutcome(NamedTuple):
    #: cause for a metadata refresh, or None
    refresh: str | None
    #: partitions that got new buffered data or a new error (wake waiting consumers)
    data: bool
    #: a leader hint was accepted: plan again now
    replan: bool


class CorruptBatchError(errors.CorruptRecordError):
    """A fetched record batch that cannot be decoded, from ``offset`` on; ``next_offset`` skips the batch.

    Raised from the consumer's poll for ``topic_partition`` (after the records before it), again on every poll
    until the application seeks: akresil cannot know what the unreadable records held, so skipping them is
    the application's decision, as in the Java consumer.
    """

    def __init__(self, message: str, *, topic_partition: TopicPartition | None = None, offset: int = -1,
                 next_offset: int = -1, records: list[ConsumerRecord] | None = None) -> None:
        super().__init__(message)
        self.topic_partition = topic_partition
        #: first offset that could not be handed out
        self.offset = offset
        #: the offset after the unreadable batch: where to seek to skip it
        self.next_offset = next_offset
        #: records of the batch before the unreadable one (handed out first; emptied once taken)
        self.records: list[ConsumerRecord] = records or []


class Chunk:
    """Data batches of one partition's Fetch answer, decoded into ``ConsumerRecord``s batch by batch.

    ``error`` (a corrupt batch after ``batches``) is raised once the records before it are handed out; a
    chunk with an error is never exhausted, so the position stops at the first record not handed out.
    """

    __slots__ = ("batches", "index", "records", "pos", "end_offset", "nbytes", "min_offset", "error")

    def __init__(self, batches: list[RecordBatchView], end_offset: int, nbytes: int, min_offset: int,
                 error: BaseException | None = None) -> None:
        self.batches = batches
        self.index = 0
        self.records: list[ConsumerRecord] = []
        self.pos = 0
        #: offset after everything this chunk covered (control batches and compaction gaps included)
        self.end_offset = end_offset
        #: bytes of batches not decoded yet
        self.nbytes = nbytes
        self.min_offset = min_offset
        self.error = error

    def exhausted(self) -> bool:
        return self.pos >= len(self.records) and self.index >= len(self.batches) and self.error is None


def decode_batch(batch: RecordBatchView, topic: str, partition: int, min_offset: int,
                 key_deserializer: Deserializer | None = None,
                 value_deserializer: Deserializer | None = None) -> list[ConsumerRecord]:
    """The records of one data batch as ``ConsumerRecord``s, skipping offsets below ``min_offset``.

    This is the consumer's hot loop: ``tuple.__new__`` with the fields in place skips the NamedTuple's
    Python-level ``__new__`` (measured ~35% faster per record), and the per-batch constants are locals.
    Records that do not decode raise ``CorruptBatchError``, a record a deserializer refuses
    ``RecordDeserializationError`` (each carrying the records before it); the loop is only wrapped in ``try``
    (free until something raises), the slow diagnosis runs after a failure.
    """
    new = tuple.__new__
    cls = ConsumerRecord
    epoch = batch.partition_leader_epoch
    try:
        recs = batch.records()
        if key_deserializer is None and value_deserializer is None:
            out = [new(cls, (topic, partition, r.offset, r.key, r.value, r.headers or _NO_HEADERS, r.timestamp,
                             r.timestamp_type, epoch)) for r in recs]
        else:
            kd = key_deserializer or _identity
            vd = value_deserializer or _identity
            out = []
            append = out.append
            for r in recs:
                if r.offset < min_offset:
                    continue       # never deserialized: a record before the position may be one refused before
                k, v = r.key, r.value
                append(new(cls, (topic, partition, r.offset, None if k is None else kd(k),
                                 None if v is None else vd(v), r.headers or _NO_HEADERS, r.timestamp,
                                 r.timestamp_type, epoch)))
    except Exception as exc:   # the C reader and the codecs raise assorted types (CorruptRecordException,
        # UnicodeDecodeError, zlib.error, EOFError, cramjam.DecompressionError, ...)
        unreadable = _diagnose(batch, topic, partition, min_offset, key_deserializer, value_deserializer, exc)
        if unreadable is None:
            raise                  # everything decodes on a second look: nothing better to say than the error
        raise unreadable from unreadable.__cause__ or exc
    if min_offset > batch.base_offset:
        out = [r for r in out if r[2] >= min_offset]
    return out


def _identity(value: bytes) -> Any:
    return value


def _diagnose(batch: RecordBatchView, topic: str, partition: int, min_offset: int, kd: Deserializer | None,
              vd: Deserializer | None, exc: BaseException
              ) -> CorruptBatchError | errors.RecordDeserializationError | None:
    """After ``decode_batch`` failed, the first record that cannot be handed out, carrying the records before it:
    ``RecordDeserializationError`` for one a deserializer refuses (its exception as ``__cause__``),
    ``CorruptBatchError`` for the first one that does not decode; None when everything goes through this time."""
    raw: list[Any] = []
    broken: BaseException | None = None
    try:
        for r in batch.records():
            raw.append((r.offset, r.key, r.value, r.headers or _NO_HEADERS, r.timestamp, r.timestamp_type))
    except Exception as err:
        broken = err
    epoch = batch.partition_leader_epoch
    good: list[ConsumerRecord] = []
    for offset, key, value, headers, ts, ts_type in raw:
        if offset < min_offset:
            continue
        origin = "key"
        try:
            k = kd(key) if kd is not None and key is not None else key
            origin = "value"
            v = vd(value) if vd is not None and value is not None else value
        except Exception as err:   # reported before a corruption further on: it comes first
            error = errors.RecordDeserializationError(
                f"{topic}-{partition}: the {origin} of the record at offset {offset} could not be deserialized "
                f"({type(err).__name__}: {err}); seek to {offset + 1} to skip it",
                topic_partition=TopicPartition(topic, partition), offset=offset, origin=origin, records=good,
                raw=ConsumerRecord(topic, partition, offset, key, value, headers, ts, ts_type, epoch))
            error.__cause__ = err
            return error
        good.append(ConsumerRecord(topic, partition, offset, k, v, headers, ts, ts_type, epoch))
    if broken is None:
        return None
    first_bad = max(raw[-1][0] + 1 if raw else batch.base_offset, min_offset)
    return CorruptBatchError(
        f"{topic}-{partition}: the record batch at offsets {batch.base_offset}..{batch.last_offset} cannot be "
        f"decoded from offset {first_bad} on ({type(broken).__name__}: {broken}); seek to {batch.next_offset} "
        f"to skip the rest of the batch",
        topic_partition=TopicPartition(topic, partition), offset=first_bad, next_offset=batch.next_offset,
        records=good)


#: every partition's ``chunks`` until it buffers an answer: never appended to (``add_chunk`` replaces it)
_NO_CHUNKS: deque[Chunk] = deque()


class PartitionFetchState:
    """Everything the consumer knows about one assigned partition."""

    __slots__ = ("tp", "position", "position_epoch", "fetch_offset", "paused", "reset", "awaiting_committed",
                 "lookup_in_flight", "in_flight", "generation", "chunks", "buffered_bytes", "error", "_backoff",
                 "_behind_backoff", "retry_state", "behind_state", "high_watermark", "last_stable_offset", "log_start_offset", "read_replica",
                 "read_replica_until", "planned", "planned_on", "planned_node")

    def __init__(self, tp: TopicPartition, backoff: ExponentialBackoff, behind_backoff: ExponentialBackoff) -> None:
        self.tp = tp
        #: next offset handed to the application; None until known (committed offset or reset)
        self.position: int | None = None
        #: leader epoch of the last record handed out (committed with the offset); -1 unknown
        self.position_epoch = -1
        #: next offset to ask the broker for (>= position while data is buffered)
        self.fetch_offset: int | None = None
        self.paused = False
        #: pending offset reset: "earliest" / "latest" (resolved with ListOffsets by the shell)
        self.reset: str | None = None
        #: waiting for the group's committed offset
        self.awaiting_committed = False
        #: a ListOffsets / OffsetFetch for this partition is outstanding
        self.lookup_in_flight = False
        self.in_flight = False
        self.generation = 0
        #: buffered answers; the shared empty ``_NO_CHUNKS`` until the first (``add_chunk``)
        self.chunks: deque[Chunk] = _NO_CHUNKS
        self.buffered_bytes = 0
        #: raised to the application on the next poll that reaches this partition
        self.error: BaseException | None = None
        self._backoff, self._behind_backoff = backoff, behind_backoff
        #: the retry states, made on the first failure (``retry`` / ``behind``): at 10,000 partitions that is
        #: 20,000 objects fewer for an assignment to build and for every full garbage collection to walk
        self.retry_state: RetryState | None = None
        self.behind_state: RetryState | None = None
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        #: KIP-392: the replica the leader pointed us to (None: fetch from the leader), usable until the time
        #: ``read_replica_until``
        self.read_replica: int | None = None
        self.read_replica_until = 0.0
        #: the ``FetchPartition`` of the last plan that listed this partition: planned again as is while its
        #: fetch offset, leader epoch and generation are unchanged (most partitions of a 10,000-partition Fetch
        #: get nothing in an answer), so a plan allocates nothing for them and the garbage collector sees one
        #: long-lived tuple instead of a new one per Fetch
        self.planned: FetchPartition | None = None
        #: the snapshot ``planned`` was last planned on from the partition's leader ``planned_node`` (None: not
        #: on a leader): on the same snapshot the leader and its epoch are the same, so a plan that reaches
        #: the partition right after another of that leader takes ``planned`` with no look-up (``_plan``)
        self.planned_on: MetadataSnapshot | None = None
        self.planned_node = -1

    @property
    def retry(self) -> RetryState:
        """Failures of fetching this partition and the next try (KIP-580 backoff)."""
        state = self.retry_state
        if state is None:
            state = self.retry_state = RetryState(self._backoff)
        return state

    @property
    def behind(self) -> RetryState:
        """The leader answered UNKNOWN_LEADER_EPOCH: it is behind our metadata (short schedule, module notes)."""
        state = self.behind_state
        if state is None:
            state = self.behind_state = RetryState(self._behind_backoff)
        return state

    def add_chunk(self, chunk: Chunk) -> None:
        if self.chunks is _NO_CHUNKS:
            self.chunks = deque()
        self.chunks.append(chunk)

    def retry_ready(self, now: float) -> bool:
        return self.retry_state is None or self.retry_state.ready(now)

    def next_try_at(self) -> float | None:
        """When the partition may be fetched again after errors (None: now)."""
        retry, behind = self.retry_state, self.behind_state
        at = None if retry is None else retry.next_allowed_at
        behind_at = None if behind is None else behind.next_allowed_at
        if behind_at is None:
            return at
        return behind_at if at is None or behind_at > at else at

    def caught_up(self, read_committed: bool) -> bool:
        """The last answer said the broker has nothing past ``fetch_offset`` (False while unknown)."""
        end = self.last_stable_offset if read_committed and self.last_stable_offset >= 0 else self.high_watermark
        return end >= 0 and self.fetch_offset is not None and self.fetch_offset >= end

    @property
    def has_position(self) -> bool:
        return self.position is not None and self.reset is None and not self.awaiting_committed

    def __repr__(self) -> str:
        return (f"PartitionFetchState({self.tp.topic}-{self.tp.partition}, position={self.position}, "
                f"fetch_offset={self.fetch_offset}, paused={self.paused}, reset={self.reset}, "
                f"buffered={self.buffered_bytes}, in_flight={self.in_flight}, error={self.error!r})")


def _by_topic(entries: Sequence[FetchPartition]) -> dict[str, list[FetchPartition]]:
    """``entries`` grouped by topic, in order (a run of one topic's entries costs one lookup)."""
    topics: dict[str, list[FetchPartition]] = {}
    last: str | None = None
    parts: list[FetchPartition] = []
    for p in entries:
        name = p[0][0]
        if name is not last and name != last:
            last = name
            got = topics.get(name)
            if got is None:
                got = topics[name] = []
            parts = got
        parts.append(p)
    return topics


class FetchState:
    """Assignment, positions and buffered data of one consumer; plans Fetches and reads their answers."""

    def __init__(self, *, max_partition_fetch_bytes: int = 1_048_576, fetch_max_bytes: int = 52_428_800,
                 max_buffered_bytes: int | None = None, auto_offset_reset: str = LATEST,
                 isolation_level: str = "read_uncommitted", retry_backoff_ms: float = 100,
                 retry_backoff_max_ms: float = 1000, check_crcs: bool = True,
                 key_deserializer: Deserializer | None = None, value_deserializer: Deserializer | None = None,
                 client_rack: str = "", read_replica_ttl_ms: float = 300_000, rng: Any = None) -> None:
        if auto_offset_reset not in (EARLIEST, LATEST, "none"):
            raise errors.ConfigError(f"auto_offset_reset: {auto_offset_reset!r} is not 'earliest', 'latest' or 'none'")
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise errors.ConfigError(
                f"isolation_level: {isolation_level!r} is not 'read_uncommitted' or 'read_committed'")
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.fetch_max_bytes = fetch_max_bytes
        #: prefetch bound across partitions (defaults to fetch_max_bytes: about one full response)
        self.max_buffered_bytes = max_buffered_bytes if max_buffered_bytes is not None else max(fetch_max_bytes, 1)
        self.auto_offset_reset = auto_offset_reset
        self.read_committed = isolation_level == "read_committed"
        self.check_crcs = check_crcs
        #: KIP-392: sent with every Fetch; how long a replica the leader preferred is fetched from
        self.client_rack = client_rack
        self.read_replica_ttl_ms = read_replica_ttl_ms
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms, rng=rng)
        self._behind_backoff = pending_topic_backoff(retry_backoff_max_ms, rng)
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        #: partitions that may have something to hand out (buffered records or an error), in the order they take
        #: turns: ``drain`` visits these, not every assigned partition (a consumer of 10,000 partitions polls
        #: hundreds of times a second); kept up by ``_buffer`` and ``fail``, pruned by ``drain``
        self._ready: dict[TopicPartition, PartitionFetchState] = {}
        #: partitions waiting for an offset (a reset or the group's committed offset): the lookups scan these
        self._lookups: dict[TopicPartition, PartitionFetchState] = {}
        #: the metadata snapshot the last plan was made on, if it found every partition's leader (None: plan in
        #: full next time): on it, while every broker has a Fetch out, ``plan_fetches`` has nothing to plan
        self._planned_on: MetadataSnapshot | None = None
        #: the ready set: partitions that may be fetchable now. ``plan_fetches`` visits these, not every assigned
        #: partition, so a plan costs what changed since the last one (an answer, a drain, a seek, a resume) and
        #: not the assignment's size. A partition leaves it when a plan finds it blocked for a reason that only
        #: an event ends (paused, failed, no offset, in a Fetch, caught up with records buffered, at its
        #: prefetch bound); that event (``resume``, ``seek``, the answer, ``drain``) puts it back
        self._fetchable: dict[TopicPartition, PartitionFetchState] = {}
        #: fetchable partitions whose node has a Fetch out: back into the ready set when that Fetch ends, or all
        #: of them when the metadata changes (a leader may have moved); key -1 (no known leader): on every plan
        self._node_waiting: dict[int, dict[TopicPartition, PartitionFetchState]] = {}
        #: partitions held by the prefetch bound across partitions: back when the buffer has room
        self._room_waiting: dict[TopicPartition, PartitionFetchState] = {}
        #: partitions held by their own prefetch bound (``max_partition_fetch_bytes`` buffered): back on a drain
        self._capped: dict[TopicPartition, PartitionFetchState] = {}
        #: per node, the caught-up partitions of a Fetch deferred while the node has a held partition (module
        #: notes): set aside so that the application's polls, each a plan, do not look at them again; back into
        #: the ready set when the node is no longer held, the metadata changes, or another partition of the node
        #: makes its Fetch go out
        self._deferred: dict[int, dict[TopicPartition, PartitionFetchState]] = {}
        #: the snapshot the ready set was sorted against (a new one releases ``_node_waiting`` and ``_deferred``)
        self._waiting_on: MetadataSnapshot | None = None
        self.buffered_bytes = 0
        #: nodes with a Fetch outstanding (one per node)
        self.busy_nodes: set[int] = set()
        #: KIP-227: one fetch session per node (``core.fetch_session``)
        self.sessions: dict[int, FetchSession] = {}
        self._rotation = 0
        #: the application's last ``drain`` found nothing to hand out and no records arrived since (it waits
        #: for partitions that have none buffered)
        self.starved = True

    # ------------------------------------------------------------------ assignment
    def assign(self, tps: Iterable[TopicPartition], *, from_committed: bool = False
               ) -> tuple[set[TopicPartition], set[TopicPartition]]:
        """Make ``tps`` the assignment; kept partitions keep their state. Returns ``(added, removed)``.
        ``from_committed``: the added ones start from the group's committed offsets (the shell looks them up)."""
        wanted = set()
        for tp in tps:
            if type(tp) is TopicPartition:
                pass        # the common case: the checks below, once per partition, are for other tuples
            elif not isinstance(tp, TopicPartition):
                if isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and isinstance(tp[1], int):
                    tp = TopicPartition(*tp)
                else:
                    raise TypeError(f"expected TopicPartition(topic, partition), got {tp!r}")
            if tp.partition < 0:
                raise ValueError(f"{tp}: partition must be >= 0")
            wanted.add(tp)
        removed = set(self.partitions) - wanted
        added = wanted - set(self.partitions)
        for tp in removed:
            self._drop_buffer(self.partitions.pop(tp))
            self._ready.pop(tp, None)
            self._lookups.pop(tp, None)
            self._fetchable.pop(tp, None)
            self._room_waiting.pop(tp, None)
            self._capped.pop(tp, None)
            for waiting in self._node_waiting.values():
                waiting.pop(tp, None)
            for waiting in self._deferred.values():
                waiting.pop(tp, None)
        self._planned_on = None
        partitions, lookups = self.partitions, self._lookups
        backoff, behind = self._backoff, self._behind_backoff
        for tp in sorted(added):
            st = partitions[tp] = PartitionFetchState(tp, backoff, behind)
            if from_committed:
                st.awaiting_committed = True
                lookups[tp] = st
        return added, removed

    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset(self.partitions)

    def state(self, tp: TopicPartition) -> PartitionFetchState:
        st = self.partitions.get(tp)
        if st is None:
            raise errors.IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return st

    # ------------------------------------------------------------------ positions
    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int = -1) -> None:
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"seek({tp.topic}-{tp.partition}): offset must be an int >= 0, got {offset!r}")
        st = self.state(tp)
        self._invalidate(st)
        st.position = st.fetch_offset = offset
        st.position_epoch = leader_epoch
        self._touch(st)

    def _touch(self, st: PartitionFetchState) -> None:
        """Something that may make ``st`` fetchable happened: the next plan looks at it (see ``_fetchable``)."""
        if not st.in_flight:
            self._fetchable[st.tp] = st

    def request_reset(self, tp: TopicPartition, strategy: str | None = None) -> None:
        """Reset to ``strategy`` (default: ``auto_offset_reset``) through ListOffsets; 'none' makes it an error."""
        st = self.state(tp)
        strategy = strategy or self.auto_offset_reset
        self._invalidate(st)
        if strategy == "none":
            st.position = st.fetch_offset = None
            self.fail(st, NoOffsetForPartitionError(
                f"{tp.topic}-{tp.partition}: no valid offset to start from and auto_offset_reset='none'; "
                f"seek() to an offset or set auto_offset_reset to 'earliest' or 'latest'"))
            return
        if strategy not in TIMESTAMP_FOR:
            raise ValueError(f"reset strategy must be 'earliest' or 'latest', got {strategy!r}")
        st.reset = strategy
        self._lookups[tp] = st

    def _invalidate(self, st: PartitionFetchState) -> None:
        self._drop_buffer(st)
        st.generation += 1
        if st.reset is not None or st.awaiting_committed:
            st.reset = None
            st.awaiting_committed = False
            del self._lookups[st.tp]
        st.error = None
        if st.retry_state is not None:
            st.retry_state.on_success()
        if st.behind_state is not None:
            st.behind_state.on_success()

    def fail(self, st: PartitionFetchState, error: BaseException) -> None:
        """Keep ``error`` for the application: the next poll that reaches the partition raises it."""
        st.error = error
        self._ready[st.tp] = st

    def _drop_buffer(self, st: PartitionFetchState) -> None:
        self.buffered_bytes -= st.buffered_bytes
        st.buffered_bytes = 0
        st.chunks.clear()

    def position(self, tp: TopicPartition) -> int | None:
        st = self.state(tp)
        return st.position if st.has_position else None

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.state(tp).paused = True

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            st = self.state(tp)
            st.paused = False
            self._touch(st)

    def paused(self) -> frozenset[TopicPartition]:
        return frozenset(tp for tp, st in self.partitions.items() if st.paused)

    def consumed_offsets(self) -> dict[TopicPartition, tuple[int, int]]:
        """``{tp: (position, leader epoch)}`` of partitions with a known position (what a commit stores)."""
        return {tp: (st.position, st.position_epoch) for tp, st in self.partitions.items()
                if st.position is not None and st.has_position}

    # ------------------------------------------------------------------ offset lookups
    def committed_lookups_due(self, now: float) -> list[TopicPartition]:
        return [tp for tp, st in self._lookups.items()
                if st.awaiting_committed and not st.lookup_in_flight and st.error is None and st.retry_ready(now)]

    def resets_due(self, now: float) -> list[TopicPartition]:
        return [tp for tp, st in self._lookups.items()
                if st.reset is not None and not st.lookup_in_flight and st.error is None and st.retry_ready(now)]

    def lookups_retry_at(self, now: float) -> float | None:
        """The earliest time a lookup backing off after a failure may go again (None: none is waiting)."""
        best: float | None = None
        for st in self._lookups.values():
            if not st.lookup_in_flight and st.retry_state is not None:
                at = st.retry_state.next_allowed_at
                if at is not None and at > now and (best is None or at < best):
                    best = at
        return best

    def begin_lookup(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Mark lookups outstanding; returns each partition's generation to pass back with the answer."""
        out = {}
        for tp in tps:
            st = self.partitions[tp]
            st.lookup_in_flight = True
            out[tp] = st.generation
        return out

    def on_committed(self, tp: TopicPartition, generation: int, offset: int | None, leader_epoch: int = -1) -> None:
        """The group's committed offset for ``tp`` (None: nothing committed, apply ``auto_offset_reset``)."""
        st = self.partitions.get(tp)
        if st is None:
            return
        st.lookup_in_flight = False
        if st.generation != generation or not st.awaiting_committed:
            return
        if offset is None or offset < 0:
            self.request_reset(tp)
        else:
            self.seek(tp, offset, leader_epoch)

    def on_reset_offset(self, tp: TopicPartition, generation: int, offset: int, leader_epoch: int = -1) -> None:
        """ListOffsets answered ``offset`` for a pending reset."""
        st = self.partitions.get(tp)
        if st is None:
            return
        st.lookup_in_flight = False
        if st.generation != generation or st.reset is None:
            return
        self.seek(tp, offset, leader_epoch)

    def on_lookup_failed(self, tp: TopicPartition, generation: int, now: float,
                         error: BaseException | None = None) -> float:
        """A lookup failed: back off (retriable) or surface ``error`` to the application. Returns backoff ms."""
        st = self.partitions.get(tp)
        if st is None:
            return 0.0
        st.lookup_in_flight = False
        if st.generation != generation:
            return 0.0
        if error is not None and not getattr(error, "retriable", False):
            self.fail(st, error)
            return 0.0
        return st.retry.on_failure(now)

    # ------------------------------------------------------------------ planning
    def plan_fetches(self, now: float, snapshot: MetadataSnapshot,
                     node_ready_at: Callable[[int], float | None] | None = None) -> FetchPlan:
        """Fetch requests to send now: one per leader without a Fetch outstanding.

        ``node_ready_at(node)`` (the shell's node state: reconnect backoff, KIP-219 mute) names when a node may
        be sent to, or None for now. A leader that may not be sent to yet is skipped and its time becomes a
        wake-up: its partitions stay free (not held by a Fetch waiting for the node), so a leader move sends
        them to the new leader at once, and they all go out together when the node is ready again.

        A request whose partitions are all caught up (the broker would hold it ``max_wait_ms``) is deferred
        while the node has a partition held back by the prefetch bound with records left on the broker and
        the application is draining (not ``starved``): see the module's notes.
        """
        while True:
            plan = self._plan(now, snapshot, node_ready_at)
            if plan is not None:
                return plan
            # a node whose caught-up partitions were set aside makes its Fetch go out: planned again with them.
            # Each pass takes at least one node out of ``_deferred`` and sets aside only partitions whose node's
            # Fetch stays back, so it ends (a later pass finds a set-aside node again only for a partition that
            # moved to it, which a read replica's lease ending does once)

    def _plan(self, now: float, snapshot: MetadataSnapshot,
              node_ready_at: Callable[[int], float | None] | None) -> FetchPlan | None:
        """One planning pass (``plan_fetches``); None when a node's set-aside partitions went back to the ready
        set because the node's Fetch goes out, so the pass must be made again with them."""
        busy = self.busy_nodes
        if busy and self._planned_on is snapshot and all(node in busy for node in snapshot.brokers):
            # one Fetch per node: nothing can be sent before an answer comes (and wakes the shell), and no
            # partition's leader can have changed on the same snapshot. The consumer polls hundreds of times a
            # second, each poll waking the shell: this keeps those turns O(1)
            return FetchPlan([], False, None)
        fetchable = self._fetchable
        node_waiting = self._node_waiting
        if snapshot is not self._waiting_on:
            # leaders may have moved: every partition waiting for a node is looked at again
            self._waiting_on = snapshot
            for waiting in node_waiting.values():
                fetchable.update(waiting)
            node_waiting.clear()
            for waiting in self._deferred.values():
                fetchable.update(waiting)
            self._deferred.clear()
        # partitions without a leader on this snapshot stay without one until it changes (the branch above puts
        # them back then): not looked at again by every poll's plan, which asks for metadata while they wait
        leaderless = bool(node_waiting.get(-1))
        total_room = self.buffered_bytes < self.max_buffered_bytes
        if total_room and self._room_waiting:
            fetchable.update(self._room_waiting)
            self._room_waiting.clear()
        deferred = self._deferred
        if deferred:
            # a deferral lasts while its node is held and the application drains (as decided below)
            held_now = () if self.starved else self._held_nodes(snapshot, total_room)
            for node in [n for n in deferred if n not in held_now]:
                fetchable.update(deferred.pop(node))
        by_node: dict[int, list[FetchPartition]] = {}
        needs_metadata = leaderless
        wake_at: float | None = None
        per_partition_cap = max(self.max_partition_fetch_bytes, 1)
        read_committed = self.read_committed
        partitions = self.partitions
        #: partitions that stay in the ready set (backing off, node not ready yet, request deferred)
        still: dict[TopicPartition, PartitionFetchState] = {}
        #: per node, when it may be sent to (asked once per plan, not once per partition)
        ready_at_of: dict[int, float | None] = {}
        # ``snapshot.leader_of`` and ``st.next_try_at`` inlined: this loop runs once per partition per answer
        topics, brokers = snapshot.topics, snapshot.brokers
        new = tuple.__new__
        # the last topic's partitions and the last node's list: consecutive partitions mostly share both
        last_topic: str | None = None
        in_topic: Mapping[int, Any] | None = None
        last_node = -1
        open_node: int | None = None
        parts: list[FetchPartition] = []
        for tp, st in fetchable.items():
            # (every state here is assigned: ``assign`` drops an unassigned partition from each set that feeds this
            # one, so there is no look-up in ``partitions`` per partition)
            if (st.in_flight or st.paused or st.error is not None or st.fetch_offset is None
                    or st.reset is not None or st.awaiting_committed):
                continue   # the answer, resume() or seek() puts it back
            if st.chunks:
                # a partition with nothing buffered may always fetch; one with records buffered prefetches only
                # while the broker has more for it (a caught-up one would only add a long poll) and within bounds
                if st.caught_up(read_committed):
                    continue                        # drain() puts it back
                if st.buffered_bytes >= per_partition_cap:
                    self._capped[tp] = st           # drain() puts it back
                    continue
                if not total_room:
                    self._room_waiting[tp] = st     # back when the buffer has room
                    continue
            if st.retry_state is not None or st.behind_state is not None:     # it has failed: backing off?
                retry_at = st.next_try_at()
                if retry_at is not None and now < retry_at:
                    if wake_at is None or retry_at < wake_at:
                        wake_at = retry_at
                    still[tp] = st
                    continue
            fp = st.planned
            if (st.planned_on is snapshot and st.planned_node == open_node and st.read_replica is None
                    and fp[1] == st.fetch_offset and fp[3] == st.generation):   # type: ignore[index]
                # planned last time from this same snapshot on the leader of the partition before (which passed
                # the node's checks below), with the same fetch offset and generation: the same entry again,
                # with no look-up of the partition's leader (the snapshot, so the leader and epoch, are the same)
                parts.append(fp)    # type: ignore[arg-type]
                still[tp] = st
                continue
            name = tp[0]
            if name is not last_topic and name != last_topic:
                last_topic, in_topic = name, topics.get(name)
            info = None if in_topic is None else in_topic.get(tp[1])
            if info is not None and info.leader == open_node and st.read_replica is None:
                # the leader of the partition before, which passed the checks below: straight into its request
                epoch = info.leader_epoch
                if fp is None or fp[1] != st.fetch_offset or fp[2] != epoch or fp[3] != st.generation:
                    fp = st.planned = new(FetchPartition, (tp, st.fetch_offset, epoch, st.generation))
                st.planned_on, st.planned_node = snapshot, info.leader
                parts.append(fp)
                still[tp] = st
                continue
            if info is None or info.leader < 0 or info.leader not in brokers:
                # no leader, or one the metadata has no endpoint for (a broker that is down drops out of the
                # broker list while still named leader): wait for metadata, woken by its change
                needs_metadata = True
                node_waiting.setdefault(-1, {})[tp] = st
                continue
            node = info.leader
            epoch = info.leader_epoch
            if st.read_replica is not None:
                node, gone = self._read_source(st, tp, node, snapshot, now)
                needs_metadata = needs_metadata or gone
            if node in busy:
                node_waiting.setdefault(node, {})[tp] = st    # back when that node's Fetch ends
                continue
            if node in ready_at_of:
                ready_at = ready_at_of[node]
            else:
                ready_at = ready_at_of[node] = node_ready_at(node) if node_ready_at is not None else None
            if ready_at is not None and ready_at > now:
                if wake_at is None or ready_at < wake_at:
                    wake_at = ready_at
                still[tp] = st
                continue
            if node != last_node:
                last_node = node
                parts = by_node.get(node)       # type: ignore[assignment]
                if parts is None:
                    parts = by_node[node] = []
            # a leader fetched from, known and ready: the next partitions it leads skip the node's checks
            open_node = node if st.read_replica is None else None
            if fp is None or fp[1] != st.fetch_offset or fp[2] != epoch or fp[3] != st.generation:
                fp = st.planned = new(FetchPartition, (tp, st.fetch_offset, epoch, st.generation))
            # a read replica's entry is not the leader's: the fast path above is for leaders only
            st.planned_on, st.planned_node = (snapshot, node) if open_node is not None else (None, -1)
            parts.append(fp)
            still[tp] = st      # until ``begin_fetch`` takes it: a plan is only a proposal
        self._fetchable = still
        held_nodes = self._held_nodes(snapshot, total_room) if by_node and not self.starved else ()
        requests = []
        replan = False
        topic_ids = snapshot.topic_ids
        for node, parts in by_node.items():
            if node in held_nodes and all(partitions[p.tp].caught_up(read_committed) for p in parts):
                # it would long-poll while a held partition has records: wait for the drain, the partitions
                # set aside (not visited by every poll's plan until then)
                aside = deferred.setdefault(node, {})
                for p in parts:
                    aside[p.tp] = still.pop(p.tp)
                continue
            if node in deferred:
                # a partition of a deferred node has more to fetch: its Fetch goes out, with the partitions
                # set aside for it (the caller plans again)
                still.update(deferred.pop(node))
                replan = True
                continue
            ids = {}
            max_version = 17
            last_name: str | None = None
            for p in parts:
                name = p[0][0]
                if name is last_name or name == last_name:
                    continue        # a run of one topic (the usual order): its id is looked up once
                last_name = name
                tid = topic_ids.get(name)
                if not tid or tid == ZERO_UUID:
                    max_version = TOPIC_ID_VERSION - 1
                else:
                    ids[name] = tid
            requests.append(FetchRequest(node, tuple(parts), max_version, ids))
        if replan:
            return None
        self._planned_on = None if needs_metadata else snapshot
        return FetchPlan(requests, needs_metadata, wake_at)

    def _held_nodes(self, snapshot: MetadataSnapshot, total_room: bool) -> set[int]:
        """Nodes with a partition held back by the prefetch bound while the broker has more records for it
        (module notes: a long poll of that node's caught-up partitions is deferred). Prunes partitions that are
        no longer held from ``_capped`` (their drain already put them back in the ready set)."""
        held: set[int] = set()
        cap = max(self.max_partition_fetch_bytes, 1)
        read_committed = self.read_committed
        for waiting, is_capped in ((self._capped, True), (self._room_waiting, False)):
            gone = []
            for tp, st in waiting.items():
                if (self.partitions.get(tp) is not st or not st.chunks or st.caught_up(read_committed)
                        or st.in_flight or st.paused or st.error is not None or st.fetch_offset is None
                        or (is_capped and st.buffered_bytes < cap and total_room)):
                    gone.append(tp)
                    continue
                lead = snapshot.leader_of(tp)
                if lead is not None:
                    held.add(lead[0] if st.read_replica is None else st.read_replica)
            if is_capped:
                for tp in gone:
                    del waiting[tp]
        return held

    def _read_source(self, st: PartitionFetchState, tp: TopicPartition, leader: int, snapshot: MetadataSnapshot,
                     now: float) -> tuple[int, bool]:
        """Where to fetch ``tp`` from: its preferred read replica while the lease runs and the metadata shows it
        alive and in the ISR, else the leader. True when the replica became unusable before its lease ran out
        (the metadata may be stale: refresh it, as Java's consumer does)."""
        replica = st.read_replica
        assert replica is not None
        if now >= st.read_replica_until:
            st.read_replica = None        # the lease ran out: ask the leader, which may name another replica
            return leader, False
        info = snapshot.partition(tp)
        if (replica in snapshot.brokers and info is not None and replica not in info.offline
                and (not info.isr or replica in info.isr)):
            return replica, False
        st.read_replica = None
        return leader, True

    def begin_fetch(self, request: FetchRequest) -> None:
        self.busy_nodes.add(request.node)
        fetchable = self._fetchable
        partitions = self.partitions
        for p in request.partitions:
            tp = p[0]
            st = partitions.get(tp)
            if st is not None:
                st.in_flight = True
                fetchable.pop(tp, None)

    def _end_fetch(self, request: FetchRequest) -> list[PartitionFetchState | None]:
        """The node is free again: its request's partitions and those that waited for it rejoin the ready set.
        Returns the request's partitions' states, in its order (None: unassigned since), for the answer to use."""
        self.busy_nodes.discard(request.node)
        fetchable = self._fetchable
        partitions = self.partitions
        states: list[PartitionFetchState | None] = []
        append = states.append
        for p in request.partitions:
            tp = p[0]
            st = partitions.get(tp)
            append(st)
            if st is not None:
                st.in_flight = False
                fetchable[tp] = st
        waiting = self._node_waiting.pop(request.node, None)
        if waiting:
            fetchable.update(waiting)
        return states

    def build_request_body(self, request: FetchRequest, version: int, *, max_wait_ms: int, min_bytes: int
                           ) -> PackedFetchBody:
        """The Fetch body for ``request`` at ``version`` (v13+ names topics by id). Within a KIP-227 session
        (``core.fetch_session``) it lists only the partitions the node's session does not hold as they are now,
        and names those to drop; the session then holds ``request``'s partitions."""
        wanted = request.partitions
        by_id = version >= TOPIC_ID_VERSION
        ids = request.topic_ids
        # the planned entries per topic, packed per topic by ``fetch_codec`` (no dict or tuple per partition
        # entry: thousands per Fetch at 10,000 partitions)
        topics = _by_topic(wanted)
        if by_id and any(name not in ids for name in topics):
            raise errors.UnsupportedVersionError(
                f"Fetch v{version} needs topic ids and some topic in the request has none")
        session = self.sessions.get(request.node)
        if session is None:
            session = self.sessions[request.node] = FetchSession(request.node)
        sreq = session.build(wanted, ids, version)
        if not sreq.full:
            topics = _by_topic([wanted[i] for i in sreq.send])
        pmax = self.max_partition_fetch_bytes
        key = "topic_id" if by_id else "topic"
        topic_list = [{key: ids[t] if by_id else t, "partitions": pack_partitions(version, ps, pmax)}
                      for t, ps in topics.items()]
        forgotten: dict[Any, list[int]] = {}
        for topic, partition, topic_id in sreq.forgotten:
            forgotten.setdefault(topic_id if by_id else topic, []).append(partition)
        forgotten_list = [{key: t, "partitions": ps} for t, ps in forgotten.items()]
        return self._body(sreq.session_id, sreq.epoch, topic_list, forgotten_list, max_wait_ms=max_wait_ms,
                          min_bytes=min_bytes)

    def _body(self, session_id: int, epoch: int, topics: list[dict[str, Any]], forgotten: list[dict[str, Any]], *,
              max_wait_ms: int, min_bytes: int) -> PackedFetchBody:
        """A Fetch body with this consumer's limits, isolation level and rack around the session's fields
        (``fetch_codec`` writes it: its topics' partition entries are packed)."""
        return PackedFetchBody(
            replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=self.fetch_max_bytes,
            isolation_level=1 if self.read_committed else 0, session_id=session_id, session_epoch=epoch,
            topics=topics, forgotten_topics_data=forgotten, rack_id=self.client_rack)

    def session_counts(self) -> dict[str, int]:
        """Fetches sent so far: ``full`` (every partition listed) and ``incremental`` (KIP-227: changes only)."""
        return {"full": sum(s.full_fetches for s in self.sessions.values()),
                "incremental": sum(s.incremental_fetches for s in self.sessions.values())}

    def close_sessions(self) -> dict[int, int]:
        """``{node: session id}`` of every open fetch session, each forgotten here: the shell closes them on the
        brokers with a final Fetch (``build_close_body``; ``Fetcher.close_sessions`` says which nodes it asks)."""
        closing = {node: session.close() for node, session in self.sessions.items()}
        return {node: sid for node, sid in closing.items() if sid}

    def build_close_body(self, session_id: int, *, min_bytes: int) -> PackedFetchBody:
        """A Fetch that closes session ``session_id`` and starts none (epoch -1, no partitions: answered at once)."""
        return self._body(session_id, -1, [], [], max_wait_ms=0, min_bytes=min_bytes)

    # ------------------------------------------------------------------ responses
    def on_fetch_failed(self, request: FetchRequest, now: float, *, node_backing_off: bool = False) -> None:
        """The request itself failed (connection lost, timeout): every partition in it backs off, unless
        ``node_backing_off``: the node's own reconnect backoff, which ``plan_fetches`` consults, then paces the
        retry, so the partitions wait for the node, not each for a backoff of its own (with its own jitter) that
        would keep some of them idle after the node is back."""
        self._end_fetch(request)
        session = self.sessions.get(request.node)
        if session is not None:
            session.on_failure()
        for p in request.partitions:
            st = self.partitions.get(p.tp)
            if st is None or st.generation != p.generation:
                continue
            if st.read_replica == request.node:
                st.read_replica = None      # KIP-392: back to the leader, another node, at once
            elif not node_backing_off:
                st.retry.on_failure(now)

    def on_fetch_response(self, request: FetchRequest, response: Mapping[str, Any], now: float,
                          metadata: MetadataCache) -> ResponseOutcome:
        """Buffer the data and act on the errors of one Fetch response (any version 4-17), as
        ``fetch_codec.decode_fetch_body`` reads it (partition entries are ``FetchedPartition`` tuples)."""
        #: the states of ``asked``, in its order: an entry matched with ``asked[at]`` takes ``states[at]`` (nothing
        #: assigns or unassigns while the answer is applied)
        states = self._end_fetch(request)
        asked = request.partitions
        n_asked = len(asked)
        #: the answer's entries usually come in the order they were asked for (a full Fetch of one topic: the
        #: broker answers every partition in request order), so each is matched with ``asked[at]`` first;
        #: ``planned`` (built on the first entry that does not match) finds the others
        at = 0
        planned: dict[TopicPartition, FetchPartition] | None = None
        refresh: str | None = None
        data = replan = False
        top_code = response.get("error_code", 0) or 0
        session = self.sessions.get(request.node)
        if session is not None and not session.on_response(top_code, response.get("session_id", 0) or 0) \
                and top_code in _SESSION_ERRORS:
            # the session is gone or out of step: the next Fetch, a full one, goes out at once (no backoff);
            # FETCH_SESSION_TOPIC_ID_ERROR says a topic id we sent is stale
            return ResponseOutcome("fetch-session-topic-id" if top_code == _SESSION_TOPIC_ID_ERROR else None,
                                   False, True)
        if top_code:
            err = errors.error_for_code(top_code)
            for p in request.partitions:
                st = self.partitions.get(p.tp)
                if st is not None and st.generation == p.generation:
                    st.retry.on_failure(now)
            return ResponseOutcome(f"fetch-error-{err.__name__}" if err.invalid_metadata else None, False, False)
        names_by_id = {tid: name for name, tid in request.topic_ids.items()}
        endpoints: dict[int, BrokerInfo] = {}
        partitions = self.partitions
        new_tp = new_part = tuple.__new__
        for topic in response.get("responses") or ():
            name = topic.get("topic")
            if name is None:
                name = names_by_id.get(topic.get("topic_id"))
                if name is None:
                    continue
            entries = topic["partitions"]
            for piece in entries.pieces if type(entries) is FetchedPartitions else entries:
                if type(piece) is memoryview:
                    # a run of entries with nothing new (no records, no aborted transactions, no tagged fields),
                    # read straight from the answer's bytes: most of an answer at 10,000 partitions, so no tuple
                    # is built per entry; an error or a preferred read replica goes the general way
                    for index, code, hwm, lso, log_start, n_aborted, replica, _, _ in nothing_new(piece):
                        plan = asked[at] if at < n_asked else None
                        if plan is not None and planned is None and plan[0][1] == index and plan[0][0] == name:
                            st = states[at]
                            at += 1
                        else:
                            if planned is None:
                                planned = {p.tp: p for p in asked}
                            key = new_tp(TopicPartition, (name, index))
                            plan = planned.get(key)
                            st = partitions.get(key)
                        if plan is None or st is None or st.generation != plan.generation:
                            continue  # not asked for, unassigned meanwhile, or seeked meanwhile
                        if code or replica >= 0:
                            refresh, got, again = self._apply_entry(
                                st, plan, new_part(FetchedPartition, (
                                    index, code, hwm, lso, log_start, () if n_aborted else None, replica, b"",
                                    None, None)), request, response, now, metadata, refresh, endpoints)
                            data = data or got
                            replan = replan or again
                            continue
                        st.high_watermark = hwm
                        if lso >= 0:
                            st.last_stable_offset = lso
                        if log_start >= 0:
                            st.log_start_offset = log_start
                        if st.retry_state is not None and st.retry_state.failures:
                            st.retry_state.on_success()
                        if st.behind_state is not None and st.behind_state.failures:
                            st.behind_state.on_success()
                    continue
                part = piece
                index = part.partition_index
                plan = asked[at] if at < n_asked else None
                if plan is not None and planned is None and plan[0][1] == index and plan[0][0] == name:
                    st = states[at]
                    at += 1
                else:
                    if planned is None:
                        planned = {p.tp: p for p in asked}
                    # ``tuple.__new__`` skips the NamedTuple's Python-level ``__new__``
                    key = new_tp(TopicPartition, (name, index))
                    plan = planned.get(key)
                    st = partitions.get(key)
                if plan is None or st is None or st.generation != plan.generation:
                    continue  # not asked for, unassigned meanwhile, or seeked meanwhile
                refresh, got, again = self._apply_entry(st, plan, part, request, response, now, metadata, refresh,
                                                        endpoints)
                data = data or got
                replan = replan or again
        return ResponseOutcome(refresh, data, replan)

    def _apply_entry(self, st: PartitionFetchState, plan: FetchPartition, part: FetchedPartition,
                     request: FetchRequest, response: Mapping[str, Any], now: float, metadata: MetadataCache,
                     refresh: str | None, endpoints: dict[int, BrokerInfo]) -> tuple[str | None, bool, bool]:
        """Act on one partition entry of a Fetch answer, matched with its plan: ``(refresh, data, replan)``, the
        answer's refresh cause so far (``refresh``) updated, and whether it gave the application something and
        asks for a new plan. ``endpoints`` caches the answer's KIP-951 node endpoints."""
        data = replan = False
        code = part.error_code
        if code == 0:
            # the common case, once per partition per answer (most carry no records at 10,000
            # partitions): what every answer says is kept here, the records go to ``_buffer``
            st.high_watermark = part.high_watermark
            lso = part.last_stable_offset
            if lso >= 0:
                st.last_stable_offset = lso
            lso = part.log_start_offset
            if lso >= 0:
                st.log_start_offset = lso
            if part.records and self._buffer(st, plan, part):
                data = True
                self.starved = False    # records for the application: it is about to drain
            if st.retry_state is not None and st.retry_state.failures:
                st.retry_state.on_success()
            if st.behind_state is not None and st.behind_state.failures:
                st.behind_state.on_success()
            preferred = part.preferred_read_replica
            if preferred < 0:
                return refresh, data, replan
            if preferred != st.read_replica:
                st.read_replica = preferred       # KIP-392: the leader points to a closer replica
                st.read_replica_until = now + self.read_replica_ttl_ms
                replan = True
            return refresh, data, replan
        tp = st.tp
        if code == _UNKNOWN_LEADER_EPOCH:
            st.behind.on_failure(now)   # the leader is behind our metadata: again in ~1, 2, 4 ... ms
            return refresh, data, replan
        if st.read_replica == request.node:
            # KIP-392: the replica cannot serve this (it left the ISR, lags behind the fetch offset, was
            # removed): back to the leader at once; only an answer naming a stale view refreshes
            st.read_replica = None
            replan = True
            if code != _OFFSET_OUT_OF_RANGE:
                refresh = refresh or "fetch-read-replica-error"
            return refresh, data, replan
        if code in _LEADER_ERRORS:
            hint = part.current_leader
            accepted = False
            if hint is not None and hint[0] >= 0:
                if not endpoints:
                    endpoints.update((e["node_id"], BrokerInfo(e["node_id"], e["host"], e["port"], e.get("rack")))
                                     for e in (response.get("node_endpoints") or ()))
                leader_id = hint[0]
                accepted = metadata.apply_leader_hint(tp, leader_id, hint[1], endpoints.get(leader_id))
            if accepted:
                refresh = "fetch-not-leader"
                replan = True     # KIP-951: straight to the new leader, no backoff
            elif moved_past(metadata.snapshot, tp, request.node, plan.current_leader_epoch):
                replan = True     # stale: the cache already names a newer leader, fetch there now
            else:
                refresh = "fetch-not-leader"
                st.retry.on_failure(now)
            return refresh, data, replan
        if code == _OFFSET_OUT_OF_RANGE:
            if self.auto_offset_reset == "none":
                # Apache Kafka's answer to an out-of-range fetch carries no bounds (-1): name them only if given
                bounds = (f" (log start {part.log_start_offset}, high watermark {part.high_watermark})"
                          if part.log_start_offset >= 0 and part.high_watermark >= 0 else "")
                self.fail(st, errors.OffsetOutOfRangeError(
                    f"{tp.topic}-{tp.partition}: offset {plan.fetch_offset} is out of range{bounds} and "
                    "auto_offset_reset='none'; seek() to an offset within the partition (Consumer.beginning_offsets "
                    "and end_offsets give its bounds) or set auto_offset_reset to 'earliest' or 'latest'"))
                data = True
            else:
                self.request_reset(tp)
            return refresh, data, replan
        err_cls = errors.error_for_code(code)
        if err_cls.invalid_metadata and moved_past(metadata.snapshot, tp, request.node,
                                                   plan.current_leader_epoch):
            replan = True
            return refresh, data, replan
        if err_cls.retriable or err_cls.invalid_metadata:
            st.retry.on_failure(now)
            if err_cls.invalid_metadata or code in (errors.UnknownTopicOrPartitionError.errno,):
                refresh = refresh or f"fetch-{err_cls.__name__}"
            return refresh, data, replan
        self.fail(st, err_cls(f"{tp.topic}-{tp.partition} (Fetch from node {request.node}): "
                              f"{err_cls.description or err_cls.__name__}"))
        data = True
        return refresh, data, replan

    def _buffer(self, st: PartitionFetchState, plan: FetchPartition, part: FetchedPartition) -> bool:
        """Keep the records of one partition's answer (``part.records``, not empty); True when any can be
        handed out."""
        blob = part.records
        fetch_offset = plan.fetch_offset
        end = fetch_offset
        data_batches: list[RecordBatchView] = []
        aborted = None
        aborted_pids: set[int] = set()
        if self.read_committed and part.aborted_transactions:
            aborted = sorted(((first, pid) for pid, first in part.aborted_transactions), reverse=True)
        nbytes = 0
        check_crcs = self.check_crcs
        error: BaseException | None = None
        batches = read_batches(blob)
        while True:
            try:
                batch = next(batches, None)
                if batch is None:
                    break
                next_offset = batch.base_offset + batch.last_offset_delta + 1
                if next_offset <= fetch_offset:
                    continue
                if check_crcs and not batch.validate_crc():
                    raise CorruptBatchError(
                        f"{st.tp.topic}-{st.tp.partition}: the record batch at offsets {batch.base_offset}.."
                        f"{batch.last_offset} fails its CRC check; seek to {next_offset} to skip it",
                        topic_partition=st.tp, offset=max(batch.base_offset, fetch_offset), next_offset=next_offset)
            except CorruptBatchError as exc:
                error = exc
                break
            except errors.ProtocolError as exc:        # impossible length, magic other than 2
                error = type(exc)(f"{st.tp.topic}-{st.tp.partition}: records after offset {end} in the Fetch "
                                  f"answer are not readable: {exc}")
                break
            end = next_offset
            nbytes += batch.length + 12    # + BaseOffset and Length
            if aborted is not None:
                last = next_offset - 1
                while aborted and aborted[-1][0] <= last:
                    aborted_pids.add(aborted.pop()[1])
            attributes = batch.attributes
            if attributes & 0x20:                      # control batch: never handed out
                if aborted_pids and batch.producer_id in aborted_pids and _is_abort_marker(batch):
                    aborted_pids.discard(batch.producer_id)
                continue
            if aborted_pids and attributes & 0x10 and batch.producer_id in aborted_pids:
                continue                               # a batch of an aborted transaction
            data_batches.append(batch)
        if error is not None:
            # hand out what came before it, then raise it; fetch nothing more until the application seeks
            st.fetch_offset = None
            st.add_chunk(Chunk(data_batches, end, nbytes, fetch_offset, error))
            st.buffered_bytes += nbytes
            self.buffered_bytes += nbytes
            self._ready[st.tp] = st
            return True
        if end == fetch_offset:
            return False   # only a partial batch (bigger than max bytes, KIP-74 says it will come) or old data
        st.fetch_offset = end
        if not data_batches:
            # nothing to hand out (control markers, aborted data, compacted gap): step the position over it,
            # now when caught up, else through an empty chunk once the data before it has been drained
            if not st.chunks:
                if st.position is not None and st.position < end:
                    st.position = end
                return False
        st.add_chunk(Chunk(data_batches, end, nbytes, fetch_offset))
        st.buffered_bytes += nbytes
        self.buffered_bytes += nbytes
        self._ready[st.tp] = st
        return True

    # ------------------------------------------------------------------ draining
    def has_data(self, partitions: Sequence[TopicPartition] | None = None) -> bool:
        states = self._ready.values() if partitions is None else (
            self.partitions[tp] for tp in partitions if tp in self.partitions)
        return any((st.chunks or st.error is not None) and not st.paused for st in states)

    def buffered_by_partition(self) -> dict[TopicPartition, int]:
        """Buffered bytes of every partition holding some (the ones ``drain`` can hand out from)."""
        return {tp: st.buffered_bytes for tp, st in self._ready.items()}

    def drain(self, max_records: int, partitions: Sequence[TopicPartition] | None = None
              ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Hand out up to ``max_records`` buffered records, advancing positions.

        Partitions take turns across calls so one busy partition cannot starve others: without ``partitions``
        the ones with something to hand out queue in arrival order and a partition served goes to the back of
        the line (the work is proportional to those, not to the assignment); with ``partitions`` the start
        rotates. A partition's stored error is raised when nothing has been collected yet in this call.
        """
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records!r}")
        ready: dict[TopicPartition, PartitionFetchState] | None = None
        if partitions is None:
            ready = self._ready
            states = list(ready.values())
        else:
            states = [self.state(tp) for tp in partitions]
            if states:
                start = self._rotation % len(states)
                self._rotation += 1
                states = states[start:] + states[:start]
        if not states:
            self.starved = True
            return {}
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        remaining = max_records
        pending_error: BaseException | None = None
        kd, vd = self.key_deserializer, self.value_deserializer
        for st in states:
            if st.paused:
                continue
            if st.error is not None:
                if pending_error is None:
                    pending_error = st.error
                continue
            if not st.chunks:
                if ready is not None:
                    del ready[st.tp]        # drained, seeked or unassigned since it queued
                continue
            taken = self._take(st, remaining, kd, vd)
            if not st.in_flight:
                self._fetchable[st.tp] = st     # it may fetch again (room freed, or drained a caught-up chunk)
            if ready is not None:
                del ready[st.tp]
                if st.chunks or st.error is not None:
                    ready[st.tp] = st       # more to hand out: to the back of the line
            if taken:
                out[st.tp] = taken
                remaining -= len(taken)
                if remaining <= 0:
                    break
            elif st.error is not None and pending_error is None:    # reached a corrupt batch
                pending_error = st.error
        self.starved = not out
        if not out and pending_error is not None:
            raise pending_error
        return out

    def _take(self, st: PartitionFetchState, limit: int, kd: Deserializer | None,
              vd: Deserializer | None) -> list[ConsumerRecord]:
        taken: list[ConsumerRecord] | None = None
        topic, partition = st.tp
        chunks = st.chunks
        while chunks and limit > 0:
            chunk = chunks[0]
            if chunk.pos >= len(chunk.records):
                if chunk.index < len(chunk.batches):
                    batch = chunk.batches[chunk.index]
                    floor = chunk.min_offset
                    if st.position is not None and st.position > floor:
                        floor = st.position
                    try:
                        records = decode_batch(batch, topic, partition, floor, kd, vd)
                    except (CorruptBatchError, errors.RecordDeserializationError) as exc:
                        records, exc.records = exc.records, []
                        chunk.batches = chunk.batches[:chunk.index + 1]    # nothing after it is handed out
                        chunk.error = exc
                        st.fetch_offset = None                             # and nothing more is fetched
                    chunk.index += 1
                    # account bytes as batches are decoded, so the next Fetch for this partition goes out
                    # while the rest of the chunk is still being handed out (the pipelining)
                    size = batch.length + 12
                    chunk.nbytes -= size
                    st.buffered_bytes -= size
                    self.buffered_bytes -= size
                    chunk.records = records
                    chunk.pos = 0
                    continue
                if chunk.error is not None:
                    st.error = chunk.error     # the records before it are out: now the poll raises it
                    break
                chunks.popleft()
                st.buffered_bytes -= chunk.nbytes
                self.buffered_bytes -= chunk.nbytes
                if st.position is None or st.position < chunk.end_offset:
                    st.position = chunk.end_offset
                continue
            records = chunk.records
            pos = chunk.pos
            end = pos + limit
            if pos == 0 and end >= len(records):
                part = records
            else:
                part = records[pos:end]
            chunk.pos = pos + len(part)
            limit -= len(part)
            last = part[-1]
            st.position = last[2] + 1
            st.position_epoch = last[8]
            if taken is None:
                taken = part      # a fresh list or a fully consumed batch list: safe to hand out as is
            else:
                taken.extend(part)
        if chunks and chunks[0].exhausted():
            chunk = chunks.popleft()
            st.buffered_bytes -= chunk.nbytes
            self.buffered_bytes -= chunk.nbytes
            if st.position is None or st.position < chunk.end_offset:
                st.position = chunk.end_offset
        return taken or []


def moved_past(snapshot: MetadataSnapshot, tp: TopicPartition, node: int, planned_epoch: int) -> bool:
    """The cache names a newer leader for ``tp`` than the one a request to ``node`` at ``planned_epoch`` was
    planned for: an error about the leader in that request's answer is stale, and retrying on the cached leader
    costs nothing.

    Newer means a higher leader epoch (or, when an epoch is unknown, another node). The cache changes only
    forward (metadata never rolls an epoch back, hints must advance it), so a repeated error from the leader
    the cache still names is not stale: that one backs off.
    """
    lead = snapshot.leader_of(tp)
    if lead is None:
        return False
    leader, epoch = lead
    if epoch >= 0 and planned_epoch >= 0:
        return epoch > planned_epoch
    return leader != node


def _is_abort_marker(batch: RecordBatchView) -> bool:
    try:
        return batch.control_type() == _ABORT_MARKER
    except errors.CorruptRecordError:
        return False
