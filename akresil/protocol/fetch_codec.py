"""The consumer's Fetch request, written out by hand for the versions akresil sends (4-17).

A consumer of 10,000 partitions lists thousands of partition entries in every Fetch (librdkafka's mock keeps no
fetch sessions, so each one is full). The generic encoder (``protocol.compiler``) takes a dict per entry and
checks its keys, looks up six fields and writes the tagged-field byte, one call per entry; here
``pack_partitions`` writes a topic's entries with one ``struct`` call each, straight from the planned
``(partition, current_leader_epoch, fetch_offset)``, and ``encode_fetch_body`` writes the body around them (and
the forgotten topics of a KIP-227 session). The bytes are the generic encoder's for the same body, version for
version (tests compare them).

Only the bodies ``core.fetch_state`` builds come here (``PackedFetchBody``); any other Fetch body, a test's or the
proxy's, takes the generic path.
"""

from __future__ import annotations

import struct
from typing import Any, Iterable, NamedTuple

from akresil.errors import ProtocolError, UnsupportedVersionError
from akresil.protocol.primitives import uvarint_bytes

#: the first flexible Fetch version (compact strings and arrays, tagged fields)
FLEXIBLE_VERSION = 12
#: the first version that names topics by id
TOPIC_ID_VERSION = 13
#: the first version without ``replica_id`` in the body (moved into the ``replica_state`` tagged field)
NO_REPLICA_ID_VERSION = 15
#: the oldest version akresil sends, and the first with fetch sessions and forgotten topics
MIN_VERSION, SESSION_VERSION = 4, 7

_I16 = struct.Struct(">h").pack
_I32 = struct.Struct(">i").pack
#: one partition entry per version range: v4 (partition, fetch_offset, partition_max_bytes), v5+ adds
#: log_start_offset, v9+ current_leader_epoch, v12+ last_fetched_epoch and an empty tagged-field section
_ENTRY_V4 = struct.Struct(">iqi").pack
_ENTRY_V5 = struct.Struct(">iqqi").pack
_ENTRY_V9 = struct.Struct(">iiqqi").pack
_ENTRY_V12 = struct.Struct(">iiqiqix").pack
_TOP_V4 = struct.Struct(">iiiib").pack
_TOP_V7 = struct.Struct(">iiiibii").pack
_TOP_V15 = struct.Struct(">iiibii").pack


class PackedPartitions(NamedTuple):
    """A FetchTopic's partition entries as they go on the wire at one version (``pack_partitions``)."""

    length: int
    data: bytes


class PackedFetchBody(dict):  # type: ignore[type-arg]
    """A Fetch request body whose topics carry ``PackedPartitions``: ``api.encode_request`` writes it with
    ``encode_fetch_body``. Otherwise the same keys as the generic ``FetchRequest`` body."""


def pack_partitions(version: int, entries: Iterable[tuple[int, int, int]], partition_max_bytes: int
                    ) -> PackedPartitions:
    """``entries`` (partition, current_leader_epoch, fetch_offset) of one topic as Fetch ``version`` writes them,
    with ``last_fetched_epoch`` and ``log_start_offset`` -1 (a consumer's)."""
    m = partition_max_bytes
    if version >= FLEXIBLE_VERSION:
        pack = _ENTRY_V12
        out = [pack(p, e, o, -1, -1, m) for p, e, o in entries]
    elif version >= 9:
        pack = _ENTRY_V9
        out = [pack(p, e, o, -1, m) for p, e, o in entries]
    elif version >= 5:
        pack = _ENTRY_V5
        out = [pack(p, o, -1, m) for p, _, o in entries]
    elif version >= MIN_VERSION:
        pack = _ENTRY_V4
        out = [pack(p, o, m) for p, _, o in entries]
    else:
        raise UnsupportedVersionError(f"Fetch v{version}: akresil sends v{MIN_VERSION} or later")
    return PackedPartitions(len(out), b"".join(out))


def _array_length(out: list[Any], n: int, flexible: bool) -> None:
    out.append(uvarint_bytes(n + 1) if flexible else _I32(n))


def _string(out: list[Any], s: str, flexible: bool) -> None:
    b = s.encode()
    if flexible:
        out.append(uvarint_bytes(len(b) + 1))
    else:
        if len(b) > 0x7FFF:
            raise ProtocolError(f"string of {len(b)} bytes exceeds the int16 length limit")
        out.append(_I16(len(b)))
    out.append(b)


def _topic_key(out: list[Any], topic: dict[str, Any], version: int, flexible: bool) -> None:
    if version >= TOPIC_ID_VERSION:
        tid = topic["topic_id"]
        if not isinstance(tid, bytes) or len(tid) != 16:
            raise ProtocolError(f"uuid must be 16 bytes, got {tid!r:.40}")
        out.append(tid)
    else:
        _string(out, topic["topic"], flexible)


def encode_fetch_body(body: PackedFetchBody, version: int, out: list[Any]) -> None:
    """Append the wire form of ``body`` at Fetch ``version`` to ``out`` (the generic encoder's bytes)."""
    if version < MIN_VERSION:
        raise UnsupportedVersionError(f"Fetch v{version}: akresil sends v{MIN_VERSION} or later")
    flexible = version >= FLEXIBLE_VERSION
    if version >= NO_REPLICA_ID_VERSION:
        out.append(_TOP_V15(body["max_wait_ms"], body["min_bytes"], body["max_bytes"], body["isolation_level"],
                            body["session_id"], body["session_epoch"]))
    elif version >= SESSION_VERSION:
        out.append(_TOP_V7(body["replica_id"], body["max_wait_ms"], body["min_bytes"], body["max_bytes"],
                           body["isolation_level"], body["session_id"], body["session_epoch"]))
    else:
        out.append(_TOP_V4(body["replica_id"], body["max_wait_ms"], body["min_bytes"], body["max_bytes"],
                           body["isolation_level"]))
    topics = body["topics"]
    _array_length(out, len(topics), flexible)
    for topic in topics:
        _topic_key(out, topic, version, flexible)
        packed: PackedPartitions = topic["partitions"]
        _array_length(out, packed.length, flexible)
        out.append(packed.data)
        if flexible:
            out.append(b"\x00")
    forgotten = body["forgotten_topics_data"]
    if version >= SESSION_VERSION:
        _array_length(out, len(forgotten), flexible)
        for topic in forgotten:
            _topic_key(out, topic, version, flexible)
            ps = topic["partitions"]
            _array_length(out, len(ps), flexible)
            out.append(struct.pack(f">{len(ps)}i", *ps))
            if flexible:
                out.append(b"\x00")
    elif forgotten:
        raise UnsupportedVersionError("FetchRequest.forgotten_topics_data: not in this version")
    if version >= 11:
        _string(out, body["rack_id"], flexible)
    if flexible:
        out.append(b"\x00")        # no tagged fields: no cluster id, no replica state (a consumer's)
