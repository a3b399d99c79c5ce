"""KIP-227 fetch sessions: per node, the partitions the broker's session holds, so a Fetch lists only changes.

A consumer of many partitions re-sent every partition in every Fetch, and the broker answered every one of them,
news or not. With a session the first Fetch to a node is *full* (epoch 0: "create a session"); the broker answers
with a session id, and later Fetches are *incremental* (epoch 1, 2, ...): they list only partitions added or
whose fetch parameters changed (fetch offset, leader epoch, topic id), name the ones to drop in
``forgotten_topics_data``, and the broker answers only partitions with news (records, a new high watermark, an
error). The Java client's ``FetchSessionHandler`` is the reference; these are its rules:

* An answer to a full Fetch with session id 0 (the broker keeps no session for us: its cache is full, or it is
  librdkafka's mock, which echoes the id it was sent) keeps every Fetch full.
* An answer with FETCH_SESSION_ID_NOT_FOUND starts over (id 0, epoch 0); any other top-level error, a failed
  request or a closed connection closes the session and asks for a new one on the next Fetch (the old id at
  epoch 0). No partition backs off for a session error: the next Fetch, a full one, goes out at once.
* An incremental answer with session id 0 says the broker closed the session: the next Fetch is full.
* The epoch after 2**31 - 1 is 1.
* A Fetch below v7 has no session fields (id 0, epoch -1 is what v7+ calls "no session"); v13+ keys
  sessions by topic id, earlier versions by name, so a session is started over when the version crosses 13.
* On close the consumer sends each node a last Fetch with the session id at epoch -1 and no partitions ("close
  it, start none"), as the Java consumer does.

Nothing here reads a clock or touches a socket; ``FetchState`` drives one ``FetchSession`` per node.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

from .. import errors
from ..types import TopicPartition

#: the session id of "no session"
INVALID_SESSION_ID = 0
#: sent to create (or re-create) a session: a full Fetch
INITIAL_EPOCH = 0
#: sent to close a session (and, with id 0, "no session": a full Fetch)
FINAL_EPOCH = -1
#: the first Fetch version with session fields
SESSION_VERSION = 7
#: the first Fetch version that names topics by id (sessions keyed by id)
TOPIC_ID_VERSION = 13
_MAX_EPOCH = 2**31 - 1

_SESSION_NOT_FOUND = errors.FetchSessionIdNotFoundError.errno


class SessionPartition(NamedTuple):
    """What a session holds for one partition: the parameters last sent for it."""

    fetch_offset: int
    current_leader_epoch: int
    topic_id: bytes | None


class SessionRequest(NamedTuple):
    """The session fields of one Fetch and the partitions it lists."""

    session_id: int
    epoch: int
    #: indexes into the wanted partitions of those to list (all of them for a full Fetch)
    send: Sequence[int]
    #: partitions the broker's session should drop: (topic, partition, topic id or None)
    forgotten: list[tuple[str, int, bytes | None]]
    full: bool


class FetchSession:
    """One node's fetch session, as the client sees it (see the module notes)."""

    __slots__ = ("node", "session_id", "epoch", "_partitions", "_pending", "by_id", "_legacy", "_closed",
                 "full_fetches", "incremental_fetches")

    def __init__(self, node: int) -> None:
        self.node = node
        self.session_id = INVALID_SESSION_ID
        #: the epoch of the next Fetch (0: full, creating a session; -1: full, closing it; else incremental)
        self.epoch = INITIAL_EPOCH
        #: what the broker's session holds once the last Fetch is answered
        self._partitions: dict[TopicPartition, SessionPartition] = {}
        #: the partitions of the last full Fetch, kept as sent: turned into ``_partitions`` only when its answer
        #: creates a session, so full Fetches to a broker that keeps no session cost nothing per partition
        self._pending: tuple[Sequence[Any], Mapping[str, bytes], bool] | None = None
        #: the session was built on topic ids (Fetch v13+)
        self.by_id = False
        #: the last Fetch was below v7 (no session fields: its answer carries none)
        self._legacy = False
        #: closed (``close``): an answer still on its way no longer opens a session
        self._closed = False
        self.full_fetches = 0
        self.incremental_fetches = 0

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    @property
    def partitions(self) -> dict[TopicPartition, SessionPartition]:
        """What the broker's session holds (after the last Fetch's answer)."""
        if self._pending is not None:
            wanted, topic_ids, by_id = self._pending
            self._pending = None
            self._partitions = _as_session(wanted, topic_ids, by_id)
        return self._partitions

    def build(self, wanted: Sequence[Any], topic_ids: Mapping[str, bytes], version: int) -> SessionRequest:
        """The session fields for a Fetch of ``wanted`` (``(tp, fetch_offset, current_leader_epoch, ...)``
        tuples: ``FetchPartition``) at ``version``, and which of them to list. The session then holds ``wanted``
        (the Java client's builder commits the same way: an answer that never comes makes the next Fetch full,
        see ``on_failure``)."""
        self._closed = False
        if version < SESSION_VERSION:
            self._legacy = True
            self._reset()
            self.full_fetches += 1
            return SessionRequest(INVALID_SESSION_ID, FINAL_EPOCH, range(len(wanted)), [], True)
        self._legacy = False
        by_id = version >= TOPIC_ID_VERSION
        if by_id != self.by_id:
            self.by_id = by_id
            if not self.is_full:
                self.epoch = INITIAL_EPOCH       # names and ids do not mix in one session: start a new one
        if self.is_full:
            self._pending = (wanted, topic_ids, by_id)
            self.full_fetches += 1
            return SessionRequest(self.session_id, self.epoch, range(len(wanted)), [], True)
        old = self.partitions
        nxt = _as_session(wanted, topic_ids, by_id)
        send: list[int] = []
        forgotten: list[tuple[str, int, bytes | None]] = []
        for i, p in enumerate(wanted):
            tp = p[0]
            now = nxt[tp]
            before = old.get(tp)
            if before != now:
                send.append(i)
                if before is not None and before.topic_id != now.topic_id:
                    forgotten.append((tp[0], tp[1], before.topic_id))    # the topic was re-created: drop the old
        for tp, before in old.items():
            if tp not in nxt:
                forgotten.append((tp[0], tp[1], before.topic_id))
        self._partitions = nxt
        self.incremental_fetches += 1
        return SessionRequest(self.session_id, self.epoch, send, forgotten, False)

    def on_response(self, error_code: int, session_id: int) -> bool:
        """The answer's top-level error and session id; False when the answer cannot be used (a session
        error: its partitions carry nothing, the next Fetch is full)."""
        if self._legacy or self._closed:
            return error_code == 0
        if error_code:
            if error_code == _SESSION_NOT_FOUND:
                self._reset()
            else:
                self._close_and_renew()
            return False
        if session_id == INVALID_SESSION_ID:
            self._reset()            # no session was made, or the broker closed ours: full Fetches
        elif self.is_full:
            self.session_id, self.epoch = session_id, 1
        else:
            self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1
        return True

    def on_failure(self) -> None:
        """The Fetch failed (connection lost, timeout): close the session on the next Fetch, asking for a new
        one (the broker may have applied the request we never heard back about)."""
        if not self._legacy:
            self._close_and_renew()

    def close(self) -> int:
        """Forget the session; its id (0: none) for the final Fetch that closes it on the broker (epoch -1, no
        partitions: ``FetchState.build_close_body``), which the Java consumer sends on close."""
        session_id = self.session_id
        self._reset()
        self._closed = True
        return session_id

    def _reset(self) -> None:
        self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        self._partitions, self._pending = {}, None

    def _close_and_renew(self) -> None:
        self.epoch = INITIAL_EPOCH
        self._partitions, self._pending = {}, None


def _as_session(wanted: Sequence[Any], topic_ids: Mapping[str, bytes], by_id: bool
                ) -> dict[TopicPartition, SessionPartition]:
    new = tuple.__new__
    if by_id:
        return {p[0]: new(SessionPartition, (p[1], p[2], topic_ids.get(p[0][0]))) for p in wanted}
    return {p[0]: new(SessionPartition, (p[1], p[2], None)) for p in wanted}
