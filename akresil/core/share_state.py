"""Share-group (KIP-932) fetch state, sans-IO: share sessions, acquired records, acknowledgements.

A share consumer does not own partitions or offsets. The partition leader *acquires* records for it, each
for a limited time (the acquisition lock, ``AcquisitionLockTimeoutMs`` in ShareFetch answers), and the
consumer settles each one: accept (done), release (deliver again, with a higher delivery count) or reject
(never again). Acknowledgements ride on the next ShareFetch to the same leader or go alone in a
ShareAcknowledge (``commit()``). Requests to one leader form a *share session*: epoch 0 opens it with the
full partition list, later requests carry the next epoch and only what changed, -1 closes it (and the
broker releases whatever the member still holds there).

``ShareFetchState`` decides, per leader, what to send next (``plan``), applies answers and failures, hands
records out (``poll``) and keeps the acknowledgements. The rules it enforces:

* a record is acknowledged only while this consumer holds it: once its lock deadline (measured from when
  the fetch was *sent*, so it is never later than the broker's) has passed, or its session was lost, the
  acknowledgement is not sent but reported as failed (``AcquisitionLockExpiredError``);
* records whose lock ran out while still buffered are never handed out;
* one request per leader at a time (the session epoch orders them);
* a session error (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH) or a broken connection resets
  the session: the next fetch opens a new one; records held under the old one are void;
* failures back off per leader (KIP-580), except a session error for a request inside a session: the new
  session is opened at once; leader errors request a metadata refresh and carry the KIP-951 hint when the
  answer has one.

Times are monotonic milliseconds passed in as ``now``. Reference for behaviour: the Java client's
``ShareConsumeRequestManager`` / ``ShareSessionHandler`` (no code taken from it).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from .. import errors
from ..errors import KafkaError
from ..protocol.records import RecordBatchView, read_batches
from ..types import ConsumerRecord, ShareRecord, TopicPartition
from .backoff import ExponentialBackoff, RetryState
from .fetch_state import CorruptBatchError, decode_batch

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1
_NO_TOPIC_ID = bytes(16)


class AckType(enum.IntEnum):
    """Acknowledge types on the wire (ShareFetch/ShareAcknowledge ``AcknowledgeTypes``)."""

    GAP = 0       # an acquired offset with no record (control record, compacted away)
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


ACK_TYPES: dict[str, AckType] = {"accept": AckType.ACCEPT, "release": AckType.RELEASE, "reject": AckType.REJECT}

_SESSION_CODES = frozenset({errors.ShareSessionNotFoundError.errno, errors.InvalidShareSessionEpochError.errno})

TpKey = tuple[bytes, int]   # (topic id, partition): how share requests name partitions


class PlanKind(enum.Enum):
    FETCH = "fetch"
    ACKNOWLEDGE = "acknowledge"
    CLOSE = "close"          # ShareAcknowledge at epoch -1: final acknowledgements, then the session ends


class SharePlan(NamedTuple):
    """One request the shell should send to ``node_id`` (``api`` body in ``body``)."""

    kind: PlanKind
    node_id: int
    body: dict[str, Any]
    #: partitions the request names, to map answers (topic id, partition) back to names
    names: dict[TpKey, TopicPartition]
    #: acknowledgements it carries: {partition: {offset: type}}
    acks: dict[TopicPartition, dict[int, int]]
    #: the session's partitions once this fetch succeeds
    session_after: frozenset[TpKey]
    sent_at: float


class LeaderHint(NamedTuple):
    tp: TopicPartition
    leader_id: int
    leader_epoch: int
    endpoint: Mapping[str, Any] | None


class _Lock:
    """The records one ShareFetch answer acquired for this consumer in one partition under one delivery count.

    They share the lock deadline, the session and the delivery count, so what a record needs of its own is a
    dict entry (offset -> its ``_Lock``) while it is held: no object per record. Records are handed out in
    offset order, so "delivered" is ``offset <= through``."""

    __slots__ = ("session", "tp", "deadline", "delivery_count", "lost", "through", "unsettled", "superseded")

    def __init__(self, session: _Session, tp: TopicPartition, deadline: float, delivery_count: int) -> None:
        self.session = session
        self.tp = tp
        self.deadline = deadline
        self.delivery_count = delivery_count
        #: the session it was acquired in is gone: the broker no longer counts these records as ours
        self.lost = False
        #: the highest offset handed out to the application
        self.through = -1
        #: records handed out and not settled yet
        self.unsettled = 0
        #: an offset of it was acquired again (a newer delivery): hand out only what still points here
        self.superseded = False


class _Chunk:
    """Buffered records of one ``_Lock`` not handed out yet: ``records[pos:]``."""

    __slots__ = ("lock", "records", "pos")

    def __init__(self, lock: _Lock, records: list[ShareRecord]) -> None:
        self.lock = lock
        self.records = records
        self.pos = 0


@dataclass
class _Session:
    epoch: int = INITIAL_EPOCH
    partitions: frozenset[TpKey] = frozenset()
    in_flight: bool = False
    retry: RetryState | None = None
    buffered: int = 0          # records from this leader not yet handed out
    #: locks with records handed out and not settled yet: the next fetch waits for them (see ``plan``)
    awaiting: set[_Lock] = field(default_factory=set)
    pending: dict[TopicPartition, dict[int, int]] = field(default_factory=dict)   # acks not sent yet


class FetchOutcome(NamedTuple):
    records: int
    hints: list[LeaderHint]
    refresh_metadata: bool


def _decode_acquired(batch: RecordBatchView, topic: str, partition: int, delivery_count: int, lo: int,
                     hi: int) -> list[ShareRecord] | None:
    """The batch's records from offset ``lo`` to ``hi`` as ``ShareRecord``s (no deserializers), built in place like
    ``decode_batch`` builds ``ConsumerRecord``s; None if the batch does not decode (``decode_batch`` then says
    why). A batch with no offset missing (not compacted) has its records at their offsets' positions: only the
    acquired slice is built (the C reader still walks past the rest), so a batch that two fetches' ranges cut
    is not built twice whole."""
    new = tuple.__new__
    cls = ShareRecord
    epoch = batch.partition_leader_epoch
    base = batch.base_offset
    try:
        records: Any = batch.records()     # the C extension's iterable of records
        if batch.record_count == batch.last_offset_delta + 1:
            if lo != base or hi != batch.last_offset:
                records = islice(records, lo - base, hi - base + 1)
            return [new(cls, (topic, partition, r.offset, r.key, r.value, r.headers or (), r.timestamp,
                              r.timestamp_type, epoch, delivery_count)) for r in records]
        return [new(cls, (topic, partition, r.offset, r.key, r.value, r.headers or (), r.timestamp,
                          r.timestamp_type, epoch, delivery_count)) for r in records if lo <= r.offset <= hi]
    except Exception:   # the C reader and the codecs raise assorted types
        return None


class ShareFetchState:
    """Sessions, acquired records and acknowledgements of one share consumer."""

    def __init__(self, group_id: str, *, backoff: ExponentialBackoff, max_wait_ms: int = 500,
                 min_bytes: int = 1, max_bytes: int = 52_428_800, max_records: int = 500,
                 key_deserializer: Callable[[bytes], Any] | None = None,
                 value_deserializer: Callable[[bytes], Any] | None = None, whole_batches: bool = False) -> None:
        self.group_id = group_id
        #: ``share_acquire_mode="batch_optimized"``: ``max_records`` is what a fetch asks for and a poll stops at
        #: the end of the acquired range that reaches it (whole batches, as the broker acquired them); else a hard
        #: limit, the fetch sized to fit it (``fetch_records``)
        self.whole_batches = whole_batches
        self.member_id = ""
        self._backoff = backoff
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.max_records = max_records
        self._kd = key_deserializer
        self._vd = value_deserializer
        self.assignment: frozenset[TopicPartition] = frozenset()
        #: the broker's acquisition lock duration, from the latest ShareFetch answer
        self.lock_timeout_ms: int | None = None
        self._sessions: dict[int, _Session] = {}
        #: offsets this consumer holds (buffered or handed out, not settled), by partition, to their lock
        self._held: dict[TopicPartition, dict[int, _Lock]] = {}
        #: (topic, partition, held dict) of the last ``acknowledge_record`` (a partition's held dict, once made,
        #: is never replaced)
        self._last_held: tuple[str, int, dict[int, _Lock]] | None = None
        #: records fetched and not handed out yet, a chunk per lock, in fetch order
        self._buffer: deque[_Chunk] = deque()
        self._commit_nodes: set[int] = set()
        #: outcome of acknowledgements since the last ``take_results``: None = all fine, else the first error
        self._results: dict[TopicPartition, KafkaError | None] = {}
        #: acquired records the consumer could not hand out (``take_unreadable``), already settled: refused by a
        #: deserializer (released) or in a batch that does not decode (rejected)
        self._unreadable: deque[errors.RecordDeserializationError | CorruptBatchError] = deque()
        self._unsettled: dict[int, int] = {}   # node -> acks sent and not answered (count of requests)
        #: the latest ``plan`` met an assigned partition whose leader or topic id the metadata does not know (the
        #: shell then asks for a refresh)
        self.unknown_leaders = False
        #: the latest plan's partitions by leader (never changed once made: plans copy what they keep), and the
        #: ``layout`` and assignment they were looked up under
        self._wanted: dict[int, dict[TpKey, TopicPartition]] = {}
        self._layout: object = None
        self._layout_assignment: frozenset[TopicPartition] | None = None
        #: offsets spanned by the largest record batch of the latest answer that brought more records than it
        #: asked for (0: none did): sizes the next fetch so that its whole batches fit one poll (``fetch_records``)
        self._batch_span = 0
        #: bumped by every event that can make ``plan`` return something it did not (answers, failures, records
        #: settled or dropped, commits asked, the assignment); ``_planned`` is its value at the latest full plan,
        #: which holds until ``_quiet_until`` (the earliest backoff end or lock deadline it depended on)
        self._changes = 0
        self._planned = -1
        self._quiet_until = 0.0

    def needs_plan(self, now: float) -> bool:
        """Whether ``plan`` could return a request now: something changed since the latest plan, or a time it
        depended on has come. The shell takes no turn for a poll or commit when not (a poll that only hands out
        buffered records, a commit whose acknowledgements an answer's turn already sent)."""
        return self._changes != self._planned or now >= self._quiet_until or self.unknown_leaders

    # ------------------------------------------------------------------ sessions
    def _session(self, node_id: int) -> _Session:
        s = self._sessions.get(node_id)
        if s is None:
            s = self._sessions[node_id] = _Session(retry=RetryState(self._backoff))
        return s

    def session_epoch(self, node_id: int) -> int:
        s = self._sessions.get(node_id)
        return INITIAL_EPOCH if s is None else s.epoch

    def set_assignment(self, tps: Iterable[TopicPartition]) -> None:
        self.assignment = frozenset(tps)
        self._changes += 1

    # ------------------------------------------------------------------ planning
    def plan(self, now: float, *, leader_of: Callable[[TopicPartition], int | None],
             topic_id_of: Callable[[str], bytes | None], layout: object = None) -> list[SharePlan]:
        """Requests to send now: at most one per leader, none to a leader backing off or busy.

        ``layout``: an immutable object that stands for what ``leader_of`` and ``topic_id_of`` answer (the shell's
        metadata snapshot): while it and the assignment are the ones of the previous plan, the partitions are not
        looked up again (a turn per answer and per wake-up would otherwise cost a look-up per assigned partition).
        Under an unchanged ``layout``, with nothing changed since the latest plan (``needs_plan``), it returns at
        once: that plan made every request that could be made."""
        same_layout = layout is not None and layout is self._layout and self.assignment is self._layout_assignment
        if same_layout and not self.needs_plan(now):
            return []
        self.expire(now)
        quiet = float("inf")
        if same_layout:
            wanted = self._wanted
        else:
            wanted = {}
            unknown = False
            for tp in self.assignment:
                node = leader_of(tp)
                tid = topic_id_of(tp.topic)
                if node is None or node < 0 or not tid or tid == _NO_TOPIC_ID:
                    unknown = unknown or node is None or tid is None
                    continue
                wanted.setdefault(node, {})[(tid, tp.partition)] = tp
            self.unknown_leaders = unknown
            self._wanted, self._layout, self._layout_assignment = wanted, layout, self.assignment
        plans: list[SharePlan] = []
        for node in set(wanted) | {n for n, s in self._sessions.items() if s.pending}:
            s = self._session(node)
            assert s.retry is not None
            if s.in_flight:
                continue
            if not s.retry.ready(now):
                at = s.retry.next_allowed_at
                quiet = min(quiet, now if at is None else at)
                continue
            for lock in s.awaiting:     # one running out lets the next fetch go (see ``_awaiting``)
                if now < lock.deadline < quiet:
                    quiet = lock.deadline
            names = wanted.get(node, {})
            if s.pending and (node in self._commit_nodes or not names):
                if names and self._fetch_may_carry_commit(s, names, now, topic_id_of):
                    # the fetch these acknowledgements unblock goes now and carries them, asking for an answer
                    # at once (max_wait 0): commit() waits one round trip, not a ShareAcknowledge and then a
                    # ShareFetch (the records it brings are the next poll's)
                    plans.append(self._fetch_plan(node, s, names, now, topic_id_of))
                    continue
                # commit() waits for these: a ShareAcknowledge answers at once, a fetch may wait max_wait_ms
                plan = self._ack_plan(node, s, PlanKind.ACKNOWLEDGE, now, topic_id_of)
                if plan is not None:
                    plans.append(plan)
            elif names and s.buffered == 0 and not self._awaiting(s, now):
                plans.append(self._fetch_plan(node, s, names, now, topic_id_of))
        for plan in plans:
            self._sessions[plan.node_id].in_flight = True
        if self._buffer and self._buffer[0].lock.deadline < quiet:
            quiet = self._buffer[0].lock.deadline
        self._planned, self._quiet_until = self._changes, quiet
        return plans

    def _fetch_may_carry_commit(self, s: _Session, names: Mapping[TpKey, TopicPartition], now: float,
                                topic_id_of: Callable[[str], bytes | None]) -> bool:
        """A commit's acknowledgements may ride a fetch when the application has nothing else to take until
        records come (no record buffered from any leader), that fetch is due anyway once they are settled
        (nothing from this leader handed out unsettled) and it can carry every one of them (an open session;
        each partition still fetched from this leader). With records of other leaders buffered, a
        ShareAcknowledge answers sooner (the broker reads and acquires nothing for it) and the fetch follows
        while the application works through those records."""
        if s.epoch == INITIAL_EPOCH or self._buffer or self._awaiting(s, now):
            return False
        return all((topic_id_of(tp.topic), tp.partition) in names for tp in s.pending)

    @staticmethod
    def _awaiting(s: _Session, now: float) -> bool:
        """Records from this leader handed out and not settled: fetch again only once they are (their
        acknowledgements then ride on that fetch or went before it). Fetching earlier would ask the broker
        for more while it still counts those locks, and the answer would wait ``max_wait_ms`` whenever the
        partition's lock limit is reached, holding up the acknowledgements behind it. A lock that ran out
        no longer counts."""
        if s.awaiting:
            for lock in [lock for lock in s.awaiting if lock.lost or now >= lock.deadline]:
                s.awaiting.discard(lock)
        return bool(s.awaiting)

    def _ack_batches(self, acks: Mapping[int, int]) -> list[dict[str, Any]]:
        """Runs of consecutive offsets; one type for a run that shares it, else one type per offset."""
        out: list[dict[str, Any]] = []
        offsets = sorted(acks)
        if offsets and offsets[-1] - offsets[0] == len(offsets) - 1:
            kinds = set(acks.values())
            if len(kinds) == 1:     # the usual case: one run, one type (every record of a poll accepted)
                return [{"first_offset": offsets[0], "last_offset": offsets[-1], "acknowledge_types": [*kinds]}]
        start = 0
        for i in range(1, len(offsets) + 1):
            if i == len(offsets) or offsets[i] != offsets[i - 1] + 1:
                run = offsets[start:i]
                types = [acks[o] for o in run]
                out.append({"first_offset": run[0], "last_offset": run[-1],
                            "acknowledge_types": [types[0]] if len(set(types)) == 1 else types})
                start = i
        return out

    def _fetch_plan(self, node: int, s: _Session, names: dict[TpKey, TopicPartition], now: float,
                    topic_id_of: Callable[[str], bytes | None]) -> SharePlan:
        """A ShareFetch. One that carries acknowledgements asks for an answer at once (``MaxWaitMs`` 0): a
        session has one request at a time, so a ``commit()`` coming while they ride a long poll would wait for
        it, up to ``max_wait_ms`` when no record is there (the end of a queue, or other members holding the
        rest). With nothing to fetch, the next fetch, without them, is the long poll."""
        full = s.epoch == INITIAL_EPOCH
        carried = {tp: a for tp, a in s.pending.items() if (topic_id_of(tp.topic), tp.partition) in names}
        if not full:
            for tp in carried:
                del s.pending[tp]
        else:
            carried = {}    # a new session cannot acknowledge what an old one acquired (those are void)
        listed = dict(names) if full else {k: tp for k, tp in names.items()
                                           if k not in s.partitions or tp in carried}
        topics: dict[bytes, list[dict[str, Any]]] = {}
        for (tid, p), tp in sorted(listed.items(), key=lambda kv: (kv[1].topic, kv[1].partition)):
            topics.setdefault(tid, []).append(
                {"partition_index": p, "acknowledgement_batches": self._ack_batches(carried.get(tp, {}))})
        forgotten: dict[bytes, list[int]] = {}
        if not full:
            for tid, p in s.partitions - set(names):
                forgotten.setdefault(tid, []).append(p)
        body = {"group_id": self.group_id, "member_id": self.member_id, "share_session_epoch": s.epoch,
                "max_wait_ms": 0 if carried else self.max_wait_ms,
                "min_bytes": self.min_bytes, "max_bytes": self.max_bytes, "max_records": self.fetch_records,
                "batch_size": self.max_records,
                "topics": [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()],
                "forgotten_topics_data": [{"topic_id": tid, "partitions": sorted(ps)}
                                          for tid, ps in forgotten.items()]}
        if carried:
            self._unsettled[node] = self._unsettled.get(node, 0) + 1
        return SharePlan(PlanKind.FETCH, node, body, dict(names), carried, frozenset(names), now)

    @property
    def fetch_records(self) -> int:
        """``MaxRecords`` of the next ShareFetch. Apache Kafka acquires whole batches (its default
        batch-optimized mode) until it holds at least that many records, so with batches of B records and
        ``max_poll_records`` P an answer asked for P records brings up to P + B - 1: more than one poll, hence
        two commits (a ShareAcknowledge, then a fetch) per answer, and acknowledgements that split a batch,
        which the broker then tracks offset by offset. Once a broker has brought more than it was asked for,
        asking for P - B + 1 (B from that answer) keeps an answer within one poll, in whole batches, so the
        commit after that poll rides the next fetch. A broker that stops at the limit (librdkafka's mock) keeps
        getting P. With ``whole_batches`` a poll takes whatever an answer brought, so the fetch asks for P."""
        if self.whole_batches:
            return self.max_records
        span = self._batch_span
        return self.max_records if span <= 1 else max(1, self.max_records - span + 1)

    def _ack_plan(self, node: int, s: _Session, kind: PlanKind, now: float,
                  topic_id_of: Callable[[str], bytes | None]) -> SharePlan | None:
        if s.epoch == INITIAL_EPOCH:
            # nothing to acknowledge in: records from an earlier session were void when it was lost
            self._fail(s.pending, errors.ShareSessionNotFoundError("share session lost before acknowledging"))
            s.pending = {}
            return None
        carried, s.pending = s.pending, {}
        names: dict[TpKey, TopicPartition] = {}
        topics: dict[bytes, list[dict[str, Any]]] = {}
        for tp in sorted(carried):
            tid = topic_id_of(tp.topic)
            if not tid:
                self._fail({tp: carried[tp]}, errors.UnknownTopicIdError(f"no topic id for {tp.topic}"))
                continue
            names[(tid, tp.partition)] = tp
            topics.setdefault(tid, []).append({"partition_index": tp.partition,
                                               "acknowledgement_batches": self._ack_batches(carried[tp])})
        body = {"group_id": self.group_id, "member_id": self.member_id,
                "share_session_epoch": FINAL_EPOCH if kind is PlanKind.CLOSE else s.epoch,
                "topics": [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()]}
        self._unsettled[node] = self._unsettled.get(node, 0) + 1
        return SharePlan(kind, node, body, names, carried, s.partitions, now)

    def close_plans(self, now: float, *, topic_id_of: Callable[[str], bytes | None]) -> list[SharePlan]:
        """One ShareAcknowledge at epoch -1 per open session: the last acknowledgements, then the broker
        releases whatever this member still holds there. Sessions never opened need nothing."""
        plans = []
        for node, s in self._sessions.items():
            if s.epoch == INITIAL_EPOCH or s.in_flight:
                continue
            plan = self._ack_plan(node, s, PlanKind.CLOSE, now, topic_id_of)
            if plan is not None:
                s.in_flight = True
                plans.append(plan)
        self._changes += 1
        return plans

    # ------------------------------------------------------------------ answers
    def on_fetch_response(self, plan: SharePlan, response: Mapping[str, Any], now: float) -> FetchOutcome:
        self._changes += 1
        s = self._session(plan.node_id)
        s.in_flight = False
        code = int(response.get("error_code") or 0)
        if code:
            self._request_failed(plan, errors.error_for_code(code)(response.get("error_message") or ""), now)
            return FetchOutcome(0, [], bool(errors.error_for_code(code).invalid_metadata))
        assert s.retry is not None
        s.retry.on_success()
        s.epoch = 1 if s.epoch >= _MAX_EPOCH else s.epoch + 1
        s.partitions = plan.session_after
        lock_ms = int(response.get("acquisition_lock_timeout_ms") or 0)
        if lock_ms > 0:
            self.lock_timeout_ms = lock_ms
        deadline = plan.sent_at + (self.lock_timeout_ms or 0)
        endpoints = {int(e["node_id"]): e for e in response.get("node_endpoints") or ()}
        hints: list[LeaderHint] = []
        refresh = False
        count = 0
        span = 0      # offsets spanned by the answer's largest batch
        answered: set[TopicPartition] = set()
        for topic in response.get("responses") or ():
            tid = bytes(topic["topic_id"])
            for part in topic.get("partitions") or ():
                tp = plan.names.get((tid, int(part["partition_index"])))
                if tp is None:
                    continue
                answered.add(tp)
                if tp in plan.acks:
                    ack_code = int(part.get("acknowledge_error_code") or 0)
                    self._settle(tp, ack_code, part.get("acknowledge_error_message"))
                pcode = int(part.get("error_code") or 0)
                if pcode:
                    err = errors.error_for_code(pcode)
                    if err.invalid_metadata:
                        refresh = True
                        leader = part.get("current_leader") or {}
                        lid = int(leader.get("leader_id", -1))
                        if lid >= 0:
                            hints.append(LeaderHint(tp, lid, int(leader.get("leader_epoch", -1)),
                                                    endpoints.get(lid)))
                    continue
                taken, batch_span = self._take_records(plan.node_id, tp, part, deadline)
                count += taken
                span = max(span, batch_span)
        if count > plan.body["max_records"]:
            self._batch_span = span
        for tp in plan.acks.keys() - answered:
            self._settle(tp, 0, None)
        self._request_done(plan)
        return FetchOutcome(count, hints, refresh)

    def _take_records(self, node: int, tp: TopicPartition, part: Mapping[str, Any],
                      deadline: float) -> tuple[int, int]:
        """Buffer the records the answer acquired for us: one ``_Lock`` per acquired range, one dict entry per
        record. Offsets acquired with no record (control records, compaction) are settled as gaps. Returns how
        many records were taken and the offsets its largest batch spans (0 when none was taken)."""
        ranges = sorted((int(a["first_offset"]), int(a["last_offset"]), int(a["delivery_count"]))
                        for a in part.get("acquired_records") or ())
        if not ranges:
            return 0, 0
        s = self._session(node)
        held = self._held.get(tp)
        if held is None:
            held = self._held[tp] = {}
        check = bool(held)          # offsets already ours (an older delivery, or announced again)
        locks = [_Lock(s, tp, deadline, dc) for _, _, dc in ranges]
        taken: list[list[ShareRecord]] = [[] for _ in ranges]
        seen = [0] * len(ranges)
        again: set[int] = set()     # offsets announced again under the same delivery (seen, not gaps)
        last_range = len(ranges) - 1
        lowest = ranges[0][0]
        highest = ranges[-1][1]
        i = 0
        first, last, dc = ranges[0]
        lock, out = locks[0], taken[0]
        new = tuple.__new__
        span = 0
        plain = self._kd is None and self._vd is None
        unreadable: set[int] = set()        # acquired offsets settled as unreadable (not gaps)
        for batch in read_batches(part.get("records")):
            if batch.is_control or batch.last_offset < lowest or batch.base_offset > highest:
                continue
            base, end = batch.base_offset, batch.last_offset
            if end - base >= span:
                span = end - base + 1
            if plain:
                if base > last:
                    while i < last_range and base > ranges[i][1]:
                        i += 1
                    first, last, dc = ranges[i]
                    lock, out = locks[i], taken[i]
                # the usual case: the batch meets one acquired range only (whole, or cut by the range's ends: the
                # broker acquires record counts, not batches), none of those offsets held yet (no older delivery
                # to supersede): its records straight into ShareRecords, the acquired slice held in one C call
                lo = first if first > base else base
                hi = last if last < end else end
                if (lo <= hi and (end <= last or i == last_range)
                        and (not check or held.keys().isdisjoint(range(lo, hi + 1)))):
                    whole = _decode_acquired(batch, tp.topic, tp.partition, dc, lo, hi)
                    if whole is not None:
                        seen[i] += len(whole)
                        out += whole
                        if len(whole) == hi - lo + 1:
                            held.update(dict.fromkeys(range(lo, hi + 1), lock))
                        else:                   # compacted: offsets missing from the batch
                            for srec in whole:
                                held[srec[2]] = lock
                        continue
            for rec in _decoded(batch, tp, self._kd, self._vd):
                if rec.__class__ is not ConsumerRecord:
                    assert isinstance(rec, (errors.RecordDeserializationError, CorruptBatchError))
                    unreadable.update(self._settle_unreadable(s, tp, rec, batch, ranges, held))
                    continue
                off = rec[2]
                if off > last:
                    while i < last_range and off > ranges[i][1]:
                        i += 1
                    first, last, dc = ranges[i]
                    lock, out = locks[i], taken[i]
                    if off > last:
                        break       # past every range
                if off < first:
                    continue        # in the batch but not acquired for us (another member has it)
                seen[i] += 1
                if check:
                    old = held.get(off)
                    if old is not None:
                        if old.delivery_count == dc and not old.lost:
                            again.add(off)
                            # already ours under this delivery: librdkafka's mock (a supported test broker for
                            # share groups) announces it again; a record is handed out once per delivery
                            continue
                        old.superseded = True   # the older acquisition must not be handed out or acknowledged
                held[off] = lock
                out.append(new(ShareRecord, rec + (dc,)))
        count = 0
        for lock, out in zip(locks, taken):
            if out:
                self._buffer.append(_Chunk(lock, out))
                count += len(out)
        s.buffered += count
        for (first, last, _), n, out in zip(ranges, seen, taken):
            if n < last - first + 1:
                # acquired offsets with no record: settle them as gaps so they are not delivered again
                present = {r[2] for r in out} | again | unreadable
                gaps = s.pending.setdefault(tp, {})
                for off in range(first, last + 1):
                    if off not in present:
                        gaps[off] = AckType.GAP
        return count, span if count else 0

    def _settle_unreadable(self, s: _Session, tp: TopicPartition,
                           error: errors.RecordDeserializationError | CorruptBatchError, batch: RecordBatchView,
                           ranges: list[tuple[int, int, int]], held: dict[int, _Lock]) -> set[int]:
        """Acquired offsets a poll cannot hand out, settled at once and reported (``take_unreadable``), as the Java
        share consumer does: a record a deserializer refused is released (delivered again, its delivery count
        rising until the broker archives it), the undecodable rest of a corrupt batch rejected. An offset not
        acquired for this consumer, or held under an older delivery, is none of its business."""
        refused = isinstance(error, errors.RecordDeserializationError)
        last = error.offset if refused else batch.last_offset
        settled = {off for first, end, _ in ranges for off in range(max(first, error.offset), min(end, last) + 1)
                   if off not in held}
        if not settled:
            return settled
        self._changes += 1
        s.pending.setdefault(tp, {}).update(dict.fromkeys(settled, int(AckType.RELEASE if refused else AckType.REJECT)))
        cause = error.__cause__
        why = f"{type(cause).__name__}: {cause}" if cause is not None else "no cause given"
        if isinstance(error, errors.RecordDeserializationError):
            delivery = next(dc for first, end, dc in ranges if first <= error.offset <= end)
            error.args = (f"{tp.topic}-{tp.partition}: the {error.origin} of the record at offset {error.offset} "
                          f"(delivery {delivery}) could not be deserialized ({why}); released: the broker delivers "
                          f"it again until its delivery limit archives it",)
        else:
            error.args = (f"{tp.topic}-{tp.partition}: the record batch at offsets {batch.base_offset}.."
                          f"{batch.last_offset} cannot be decoded from offset {error.offset} on ({why}); its "
                          f"{len(settled)} record(s) acquired for this consumer from there were rejected",)
        self._unreadable.append(error)
        return settled

    def take_unreadable(self) -> errors.RecordDeserializationError | CorruptBatchError | None:
        """The oldest acquired record (or batch) the consumer could not hand out, already settled; None if none."""
        return self._unreadable.popleft() if self._unreadable else None

    def on_ack_response(self, plan: SharePlan, response: Mapping[str, Any], now: float) -> FetchOutcome:
        self._changes += 1
        s = self._session(plan.node_id)
        s.in_flight = False
        code = int(response.get("error_code") or 0)
        if code:
            self._request_failed(plan, errors.error_for_code(code)(response.get("error_message") or ""), now)
            return FetchOutcome(0, [], False)
        assert s.retry is not None
        s.retry.on_success()
        if plan.kind is PlanKind.CLOSE:
            self._void_session(plan.node_id)
        else:
            s.epoch = 1 if s.epoch >= _MAX_EPOCH else s.epoch + 1
        answered: set[TopicPartition] = set()
        hints: list[LeaderHint] = []
        endpoints = {int(e["node_id"]): e for e in response.get("node_endpoints") or ()}
        refresh = False
        for topic in response.get("responses") or ():
            tid = bytes(topic["topic_id"])
            for part in topic.get("partitions") or ():
                tp = plan.names.get((tid, int(part["partition_index"])))
                if tp is None:
                    continue
                answered.add(tp)
                pcode = int(part.get("error_code") or 0)
                self._settle(tp, pcode, part.get("error_message"))
                if pcode and errors.error_for_code(pcode).invalid_metadata:
                    refresh = True
                    leader = part.get("current_leader") or {}
                    lid = int(leader.get("leader_id", -1))
                    if lid >= 0:
                        hints.append(LeaderHint(tp, lid, int(leader.get("leader_epoch", -1)), endpoints.get(lid)))
        for tp in plan.acks.keys() - answered:
            self._settle(tp, 0, None)
        self._request_done(plan)
        return FetchOutcome(0, hints, refresh)

    def on_request_failed(self, plan: SharePlan, exc: BaseException, now: float) -> None:
        """The request was not answered (connection lost, timeout): the session is gone with it."""
        self._changes += 1
        self._session(plan.node_id).in_flight = False
        err = exc if isinstance(exc, KafkaError) else errors.KafkaConnectionError(str(exc))
        self._request_failed(plan, err, now)

    def _request_failed(self, plan: SharePlan, err: KafkaError, now: float) -> None:
        s = self._session(plan.node_id)
        assert s.retry is not None
        if getattr(err, "errno", None) in _SESSION_CODES and plan.body.get("share_session_epoch", 0) > 0:
            # the broker forgot the session (evicted, restarted, or librdkafka's mock dropping every session of a
            # node whenever any connection to it closes): the next request opens a new one (epoch 0), which
            # cannot meet this error, so it goes at once, as in the Java client; waiting only lets other members
            # take the records this one would have fetched
            s.retry.on_success()
        else:
            s.retry.on_failure(now)
        self._fail(plan.acks, err)
        self._request_done(plan)
        if plan.kind is PlanKind.CLOSE:
            self._void_session(plan.node_id)
            return
        # Session errors say so; any other failure leaves the epoch in doubt: start a new session either way.
        self._void_session(plan.node_id)

    def _request_done(self, plan: SharePlan) -> None:
        if plan.acks or plan.kind is not PlanKind.FETCH:
            left = self._unsettled.get(plan.node_id, 0) - 1
            if left > 0:
                self._unsettled[plan.node_id] = left
            else:
                self._unsettled.pop(plan.node_id, None)

    def _void_session(self, node: int) -> None:
        """The broker forgot this session: what it acquired for us is no longer ours to acknowledge."""
        s = self._session(node)
        s.epoch = INITIAL_EPOCH
        s.partitions = frozenset()
        s.awaiting.clear()
        if s.pending:
            self._fail(s.pending, errors.ShareSessionNotFoundError("share session lost before acknowledging"))
            s.pending = {}
        for held in self._held.values():
            for lock in set(held.values()):
                if lock.session is s:
                    lock.lost = True
        if s.buffered:
            for chunk in self._buffer:
                if chunk.lock.session is s:
                    self._drop(chunk)
            self._buffer = deque(chunk for chunk in self._buffer if chunk.lock.session is not s)

    # ------------------------------------------------------------------ results
    def _settle(self, tp: TopicPartition, code: int, message: str | None) -> None:
        if code:
            self._record(tp, errors.error_for_code(code)(message) if message else errors.error_for_code(code)())
        else:
            self._results.setdefault(tp, None)

    def _record(self, tp: TopicPartition, err: KafkaError) -> None:
        if self._results.get(tp) is None:
            self._results[tp] = err

    def _fail(self, acks: Mapping[TopicPartition, Mapping[int, int]], err: KafkaError) -> None:
        for tp, offsets in acks.items():
            if any(t != AckType.GAP for t in offsets.values()):
                self._record(tp, err)

    def take_results(self) -> dict[TopicPartition, KafkaError | None]:
        """Outcome per partition of the acknowledgements settled since the last call."""
        out, self._results = self._results, {}
        return out

    # ------------------------------------------------------------------ records
    def expire(self, now: float) -> int:
        """Drop buffered records whose lock has run out (the broker hands them out again); returns how many.
        Locks run out in fetch order, so only the head of the buffer needs looking at."""
        buf = self._buffer
        dropped = 0
        while buf:
            lock = buf[0].lock
            if not (lock.lost or now >= lock.deadline):
                break
            dropped += self._drop(buf.popleft())
        return dropped

    def _drop(self, chunk: _Chunk) -> int:
        """Forget a chunk's records not handed out (the caller takes the chunk off the buffer)."""
        self._changes += 1      # the leader's buffer may be empty now: its next fetch may go
        lock = chunk.lock
        rest = chunk.records[chunk.pos:]
        chunk.pos = len(chunk.records)
        lock.session.buffered -= len(rest)
        held = self._held.get(lock.tp)
        if held is not None:
            for rec in rest:
                if held.get(rec[2]) is lock:
                    del held[rec[2]]
        return len(rest)

    @property
    def buffered(self) -> int:
        return sum(len(c.records) - c.pos for c in self._buffer)

    def poll(self, max_records: int, now: float) -> list[ShareRecord]:
        """Hand out up to ``max_records`` buffered records whose locks still hold."""
        out: list[ShareRecord] = []
        for recs in self.poll_by_partition(max_records, now).values():
            out += recs
        return out

    def poll_by_partition(self, max_records: int, now: float, *,
                          whole: bool = False) -> dict[TopicPartition, list[ShareRecord]]:
        """``poll`` grouped by partition: records are buffered a lock (one partition) at a time, so this costs
        nothing per record beyond a slice. ``whole``: ``max_records`` is reached by whole acquired ranges (the
        last one taken may go past it), as the Java client's batch-optimized share consumer returns them."""
        out: dict[TopicPartition, list[ShareRecord]] = {}
        buf = self._buffer
        left = max_records
        while buf and left > 0:
            chunk = buf[0]
            lock = chunk.lock
            if lock.lost or now >= lock.deadline:
                self._drop(buf.popleft())
                continue
            recs = chunk.records
            start = chunk.pos
            end = len(recs) if whole else min(len(recs), start + left)
            part = recs[start:end]
            chunk.pos = end
            if end == len(recs):
                buf.popleft()
            lock.session.buffered -= end - start
            if lock.superseded:   # offsets acquired again meanwhile belong to the newer delivery
                held = self._held.get(lock.tp) or {}
                part = [r for r in part if held.get(r[2]) is lock]
                if not part:
                    self._changes += 1      # taken off the buffer and not awaited: the next fetch may go
                    continue
            lock.through = part[-1][2]
            lock.unsettled += len(part)
            lock.session.awaiting.add(lock)
            have = out.get(lock.tp)
            if have is None:
                out[lock.tp] = part
            else:
                have += part
            left -= len(part)
        return out

    def acknowledge(self, tp: tuple[str, int], offset: int, ack: AckType, now: float, *,
                    delivery_count: int | None = None, implicit: bool = False) -> None:
        """Settle a delivered record. Raises ``IllegalStateError`` for a record this consumer was not given
        (or already settled) unless ``implicit``; a record whose lock ran out or whose session was lost is
        not sent and is reported as failed by ``take_results``. ``delivery_count`` (the record's) tells an
        old delivery from a newer acquisition of the same offset: acknowledging the old one is refused.
        ``tp`` may be a plain ``(topic, partition)`` tuple (it hashes as the ``TopicPartition``): this runs once
        per record, so nothing is built here that the first acknowledgement of a partition does not need."""
        self._changes += 1
        held = self._held.get(tp)   # type: ignore[call-overload]
        lock = None if held is None else held.get(offset)
        if lock is not None and delivery_count is not None and lock.delivery_count != delivery_count:
            if not implicit:
                self._record(TopicPartition(*tp), errors.AcquisitionLockExpiredError(
                    f"record {tp[0]}[{tp[1]}]@{offset} (delivery {delivery_count}) not acknowledged: "
                    f"its lock expired and the offset was acquired again (delivery {lock.delivery_count})"))
            return
        if lock is None or offset > lock.through:
            if implicit:
                return
            raise errors.IllegalStateError(
                f"record {tp[0]}[{tp[1]}]@{offset} is not held by this share consumer "
                f"(never delivered to it, or already acknowledged)")
        if lock.lost or now >= lock.deadline:
            self._settle_held(held, offset, lock, None)
            why = "its share session was lost" if lock.lost else "its acquisition lock expired"
            self._record(TopicPartition(*tp), errors.AcquisitionLockExpiredError(
                f"record {tp[0]}[{tp[1]}]@{offset} not acknowledged: {why}; the broker delivers "
                f"it again"))
            return
        self._settle_held(held, offset, lock, int(ack))

    def acknowledge_record(self, record: ShareRecord, ack: int, now: float) -> None:
        """``acknowledge`` for a record as this consumer handed it out, ``ack`` an ``AckType`` value: the one
        call per record of explicit mode, so the usual case (held under that delivery, lock still valid) is
        settled here in a few dict operations; anything else goes through ``acknowledge`` (errors, reports)."""
        topic, partition, offset = record[0], record[1], record[2]
        last = self._last_held
        # a poll hands a partition's records out together, so they are usually acknowledged together: the
        # partition's held dict of the previous call is reused without building and hashing its key again
        if last is not None and last[1] == partition and last[0] == topic:
            held = last[2]
        else:
            held = self._held.get((topic, partition))     # type: ignore[call-overload]
            self._last_held = None if held is None else (topic, partition, held)
        if held is not None:
            lock = held.get(offset)
            if (lock is not None and lock.delivery_count == record[9] and offset <= lock.through
                    and not lock.lost and now < lock.deadline):
                # ``_settle_held`` inlined: this is the per-record call of explicit mode
                del held[offset]
                lock.unsettled -= 1
                s = lock.session
                if not lock.unsettled:
                    s.awaiting.discard(lock)
                    self._changes += 1      # the leader's next fetch may go
                pending = s.pending.get(lock.tp)
                if pending is None:
                    pending = s.pending[lock.tp] = {}
                    self._changes += 1      # acknowledgements to send (alone, if the leader lost the partition)
                pending[offset] = ack
                return
        self.acknowledge((topic, partition), offset, AckType(ack), now, delivery_count=record[9])

    def accept_delivered(self, records: Iterable[ShareRecord], now: float) -> None:
        """Implicit acknowledgement: accept each of ``records`` this consumer still holds under that delivery;
        the ones settled otherwise meanwhile (or whose lock is gone) are skipped, as ``implicit=True`` does.

        ``_settle_held`` inlined, its per-lock counts and its pending dict looked up once per run of records of
        one lock (a poll hands a lock's records out together): this is the per-record loop of implicit mode."""
        held_of = self._held.get
        accept = int(AckType.ACCEPT)
        topic: str | None = None
        partition = -1
        held: dict[int, _Lock] = {}
        run_lock: _Lock | None = None        # the lock of the current run and how many of its records it settled
        run = 0
        # the run's lock's delivery count and highest offset handed out: neither changes during this call, nor
        # does its lost flag or deadline against ``now``, so a record of the same lock as the one before it is
        # checked against locals (the usual case: a poll hands a lock's records out together)
        run_dc = run_through = 0
        pending: dict[int, int] = {}
        for rec in records:
            if rec[1] != partition or rec[0] != topic:
                topic, partition = rec[0], rec[1]
                held = held_of((topic, partition)) or {}     # type: ignore[call-overload]
            offset = rec[2]
            lock = held.get(offset)
            if lock is None:
                continue
            if lock is run_lock:
                if rec[9] != run_dc or offset > run_through:
                    continue
            else:
                if lock.delivery_count != rec[9] or offset > lock.through:
                    continue
                if lock.lost or now >= lock.deadline:
                    self.acknowledge((topic, partition), offset, AckType.ACCEPT, now, delivery_count=rec[9],
                                     implicit=True)
                    continue
                if run_lock is not None:
                    self._settled_run(run_lock, run)
                run_lock, run, run_dc, run_through = lock, 0, lock.delivery_count, lock.through
                pending = lock.session.pending.get(lock.tp)   # type: ignore[assignment]
                if pending is None:
                    pending = lock.session.pending[lock.tp] = {}
            del held[offset]
            pending[offset] = accept
            run += 1
        if run_lock is not None:
            self._settled_run(run_lock, run)
        self._changes += 1

    @staticmethod
    def _settled_run(lock: _Lock, count: int) -> None:
        """``count`` of ``lock``'s delivered records were settled (``_settle_held``'s count, for a run)."""
        lock.unsettled -= count
        if not lock.unsettled:
            lock.session.awaiting.discard(lock)

    @staticmethod
    def _settle_held(held: dict[int, _Lock], offset: int, lock: _Lock, ack: int | None) -> None:
        """A held, delivered record is settled: it leaves ``held`` and joins its session's pending
        acknowledgements as ``ack``; None: it leaves unacknowledged (its lock or session is gone)."""
        del held[offset]
        lock.unsettled -= 1
        s = lock.session
        if not lock.unsettled:
            s.awaiting.discard(lock)
        if ack is None:
            return
        pending = s.pending.get(lock.tp)
        if pending is None:
            pending = s.pending[lock.tp] = {}
        pending[offset] = ack

    def held_count(self) -> int:
        return sum(1 for held in self._held.values() for off, lock in held.items() if off <= lock.through)

    # ------------------------------------------------------------------ commit
    def request_commit(self) -> set[int]:
        """Send pending acknowledgements now (ShareAcknowledge where no fetch is due); returns the leaders
        whose acknowledgements the caller should wait for."""
        nodes = {n for n, s in self._sessions.items() if s.pending} | set(self._unsettled)
        new = nodes - self._commit_nodes
        if new:
            self._commit_nodes |= new
            # a plan can change only for a leader with acknowledgements pending and no request in flight (whose
            # answer is a change of its own): a leader already asked to commit, or one whose acknowledgements an
            # answer's turn already sent on a fetch, gets nothing new
            sessions = self._sessions
            if any(not s.in_flight and s.pending for n in new if (s := sessions.get(n)) is not None):
                self._changes += 1
        return nodes

    def settled(self, nodes: Iterable[int]) -> bool:
        """True once none of ``nodes`` has acknowledgements waiting or in flight."""
        done = True
        for n in nodes:
            s = self._sessions.get(n)
            if (s is not None and s.pending) or self._unsettled.get(n):
                done = False
            else:
                # no plan changes: a leader asked to commit gets a request whenever it has acknowledgements
                # pending (``plan``), and this one has none
                self._commit_nodes.discard(n)
        return done

    def next_timer_at(self, now: float) -> float | None:
        """Earliest backoff end or buffered-lock deadline still ahead of ``now`` (when the shell must take
        another turn); None: nothing is due until something happens (a wake-up). Times already past are not
        returned: the turn that just ran has acted on them, and returning them would spin the loop."""
        times = [s.retry.next_allowed_at for s in self._sessions.values()
                 if s.retry is not None and s.retry.next_allowed_at is not None and s.retry.next_allowed_at > now]
        if self._buffer and self._buffer[0].lock.deadline > now:
            times.append(self._buffer[0].lock.deadline)
        return min(times) if times else None


def _decoded(batch: RecordBatchView, tp: TopicPartition, kd: Callable[[bytes], Any] | None,
             vd: Callable[[bytes], Any] | None
             ) -> Iterable[ConsumerRecord | errors.RecordDeserializationError | CorruptBatchError]:
    """The batch's records, each one that cannot be handed out in its place as the error saying why: decoding
    goes on after a record a deserializer refused, and stops at a corruption (nothing after it decodes)."""
    floor = 0
    while True:
        try:
            yield from decode_batch(batch, tp.topic, tp.partition, floor, kd, vd)
            return
        except (errors.RecordDeserializationError, CorruptBatchError) as exc:
            yield from exc.records
            exc.records = []
            yield exc
            if isinstance(exc, CorruptBatchError):
                return
            floor = exc.offset + 1
