"""The consumer's Fetch request and response, written out by hand for the versions akresil speaks (4-17).

A consumer of 10,000 partitions lists thousands of partition entries in every Fetch (librdkafka's mock keeps no
fetch sessions, so each one is full). The generic encoder (``protocol.compiler``) takes a dict per entry and
checks its keys, looks up six fields and writes the tagged-field byte, one call per entry; here
``pack_partitions`` writes a topic's entries with one ``struct`` call each, straight from the planned
``FetchPartition`` tuples, and ``encode_fetch_body`` writes the body around them (and
the forgotten topics of a KIP-227 session). The bytes are the generic encoder's for the same body, version for
version (tests compare them).

The answer to such a request is read by ``decode_fetch_body``: the generic decoder builds an 11-key dict per
partition entry (thousands per answer, most with nothing new); here an entry is a ``FetchedPartition`` tuple, an
empty or null record set the one shared ``b""``, and the rare nested fields (aborted transactions, KIP-951
current leader, diverging epoch) small tuples. The topic and top-level parts stay dicts with the generic keys.
Tests check it against the generic decoder on the same bytes, version for version.

Only the bodies ``core.fetch_state`` builds come here (``PackedFetchBody``), and their answers (``api.decode_answer``);
any other Fetch, a test's or the proxy's, takes the generic path.
"""

from __future__ import annotations

import struct
from typing import Any, Iterable, Iterator, NamedTuple, Sequence, Union, overload

from akresil.errors import ProtocolError, UnsupportedVersionError
from akresil.protocol.primitives import read_uvarint, uvarint_bytes

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
    ``encode_fetch_body``, and the connection reads its answer with ``decode_fetch_body`` (``api.decode_answer``).
    Otherwise the same keys as the generic ``FetchRequest`` body."""


def pack_partitions(version: int, entries: Iterable[Sequence[Any]], partition_max_bytes: int) -> PackedPartitions:
    """``entries`` of one topic as Fetch ``version`` writes them, with ``last_fetched_epoch`` and
    ``log_start_offset`` -1 (a consumer's). An entry is ``((topic, partition), fetch_offset,
    current_leader_epoch, ...)``: the planned ``core.fetch_state.FetchPartition`` itself, read in place (no tuple
    rebuilt per entry, thousands per Fetch at 10,000 partitions)."""
    m = partition_max_bytes
    if version >= FLEXIBLE_VERSION:
        pack = _ENTRY_V12
        out = [pack(p[0][1], p[2], p[1], -1, -1, m) for p in entries]
    elif version >= 9:
        pack = _ENTRY_V9
        out = [pack(p[0][1], p[2], p[1], -1, m) for p in entries]
    elif version >= 5:
        pack = _ENTRY_V5
        out = [pack(p[0][1], p[1], -1, m) for p in entries]
    elif version >= MIN_VERSION:
        pack = _ENTRY_V4
        out = [pack(p[0][1], p[1], m) for p in entries]
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


# --------------------------------------------------------------------------------------------- the answer
Buffer = Union[bytes, bytearray, memoryview]


class FetchedPartition(NamedTuple):
    """One partition entry of a Fetch answer (the generic decoder's ``PartitionData`` without the dict)."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    #: -1 before v5
    log_start_offset: int
    #: ``(producer_id, first_offset)`` per aborted transaction (an empty list: the one shared ``()``), or None
    aborted_transactions: Sequence[tuple[int, int]] | None
    #: KIP-392, -1 before v11
    preferred_read_replica: int
    #: the record batches; ``b""`` when the answer has none (empty or null)
    records: Buffer
    #: KIP-951 ``(leader_id, leader_epoch)`` (v12+ tagged field), or None
    current_leader: tuple[int, int] | None
    #: ``(epoch, end_offset)`` (v12+ tagged field), or None
    diverging_epoch: tuple[int, int] | None


_I32_AT = struct.Struct(">i").unpack_from
_TOP7_AT = struct.Struct(">ihi").unpack_from
_PART4_AT = struct.Struct(">ihqq").unpack_from
_PART5_AT = struct.Struct(">ihqqq").unpack_from
#: flexible entries with nothing new, one after another: the fixed fields, the aborted transactions' length (one
#: byte when null or short), preferred_read_replica, the records' length (one byte when null, empty or short) and
#: the tagged-field count
_EMPTY_ENTRIES = struct.Struct(">ihqqqBiBB").iter_unpack
#: a run of such entries (a piece of ``FetchedPartitions.pieces``) read as ``(partition_index, error_code,
#: high_watermark, last_stable_offset, log_start_offset, aborted transactions (0: null, 1: empty),
#: preferred_read_replica, records (0: null, 1: empty), tagged fields (0))`` rows
nothing_new = _EMPTY_ENTRIES
_EMPTY_SIZE = 37
_PAIR_QQ_AT = struct.Struct(">qq").unpack_from
_PAIR_II_AT = struct.Struct(">ii").unpack_from
_PAIR_IQ_AT = struct.Struct(">iq").unpack_from
_NO_RECORDS = b""
_NO_ABORTED: tuple[tuple[int, int], ...] = ()
_new = tuple.__new__
_DECODE_ERRORS = (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError)


class FetchedPartitions(Sequence[FetchedPartition]):
    """One topic's partition entries of a Fetch answer, read one at a time.

    Most entries at 10,000 partitions say only "nothing new" (37 bytes each: no records, no aborted
    transactions, no tagged fields). They are kept as runs of the answer's bytes and become ``FetchedPartition``
    tuples only as they are iterated, each dropped before the next is made. Built all at once (an answer names
    thousands), they counted towards Python's young-generation threshold together: a few collections per answer
    that promoted them to older generations, three full collections per 200,000 records read at 10,000
    partitions instead of one. The other entries are read when the answer is decoded.
    """

    __slots__ = ("_items", "_len")

    def __init__(self, items: list[FetchedPartition | memoryview], count: int) -> None:
        #: ``FetchedPartition``s and runs of "nothing new" entries (a memoryview of whole 37-byte entries)
        self._items = items
        self._len = count

    def __iter__(self) -> Iterator[FetchedPartition]:
        new, cls, no_records, no_aborted = _new, FetchedPartition, _NO_RECORDS, _NO_ABORTED
        for item in self._items:
            if type(item) is memoryview:
                for index, code, hwm, lso, log_start, n_aborted, replica, _, _ in _EMPTY_ENTRIES(item):
                    yield new(cls, (index, code, hwm, lso, log_start, no_aborted if n_aborted else None, replica,
                                    no_records, None, None))
            else:
                yield item

    def __len__(self) -> int:
        return self._len

    @property
    def pieces(self) -> list[FetchedPartition | memoryview]:
        """The entries as kept: ``FetchedPartition``s and runs of "nothing new" entries, each a memoryview of
        whole 37-byte entries that ``nothing_new`` reads (``FetchState.on_fetch_response`` applies them without
        a tuple per entry)."""
        return self._items

    @overload
    def __getitem__(self, index: int) -> FetchedPartition: ...

    @overload
    def __getitem__(self, index: slice) -> list[FetchedPartition]: ...

    def __getitem__(self, index: int | slice) -> FetchedPartition | list[FetchedPartition]:
        return list(self)[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (FetchedPartitions, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None     # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FetchedPartitions({list(self)!r})"


#: ``bytes.translate`` tables: a byte above 1 (a non-empty array or bytes length) / any non-zero byte becomes 1
_ABOVE_ONE = bytes([0, 0] + [1] * 254)
_NON_ZERO = bytes([0] + [1] * 255)


def _nothing_new_run(view: memoryview, pos: int, most: int) -> int:
    """How many of the ``most`` whole 37-byte slots from ``pos`` are, one after another, entries with nothing
    new: the aborted transactions' length byte (30) and the records' (35) at most 1 (null or empty), no tagged
    fields (36). Those bytes are read as strided columns (``view[pos + 30::37]``) in C, over windows that
    double while every entry in them qualifies, so a run costs in proportion to its length."""
    if most <= 0 or view[pos + 30] > 1 or view[pos + 35] > 1 or view[pos + 36]:
        return 0
    run, window = 1, 16
    while run < most:
        start = pos + run * _EMPTY_SIZE
        count = min(window, most - run)
        end = start + count * _EMPTY_SIZE
        good = count
        for offset, table in ((30, _ABOVE_ONE), (35, _ABOVE_ONE), (36, _NON_ZERO)):
            first = view[start + offset:end:_EMPTY_SIZE].tobytes().translate(table).find(1)
            if 0 <= first < good:
                good = first
        run += good
        if good < count:
            break
        window *= 2
    return run


def _length(buf: Buffer, pos: int, flexible: bool) -> tuple[int, int]:
    """An array or bytes length (-1: null)."""
    if flexible:
        n = buf[pos]
        if n > 127:
            n, pos = read_uvarint(buf, pos)
        else:
            pos += 1
        return n - 1, pos
    return _I32_AT(buf, pos)[0], pos + 4


def _count(buf: Buffer, pos: int, flexible: bool) -> tuple[int, int]:
    n, pos = _length(buf, pos, flexible)
    if n < 0:
        raise ProtocolError(f"array before offset {pos} has invalid length {n}")
    return n, pos


def _read_string(buf: Buffer, pos: int, flexible: bool) -> tuple[str, int]:
    if flexible:
        n, pos = _length(buf, pos, True)
    else:
        n = struct.unpack_from(">h", buf, pos)[0]
        pos += 2
    if n < 0 or pos + n > len(buf):
        raise ProtocolError(f"string before offset {pos} has invalid length {n}")
    return bytes(buf[pos:pos + n]).decode(), pos + n


def _read_nullable_compact_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    n, pos = _length(buf, pos, True)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise ProtocolError(f"string before offset {pos} has invalid length {n}")
    return bytes(buf[pos:pos + n]).decode(), pos + n


def _tagged(buf: Buffer, pos: int) -> tuple[list[tuple[int, int, int]], int]:
    """The tagged-field section at ``pos``: ``(tag, start, end)`` of each field, and the position after it."""
    n = buf[pos]
    if n == 0:
        return [], pos + 1
    n, pos = read_uvarint(buf, pos)
    if n > len(buf) - pos:
        raise ProtocolError(f"tag section at offset {pos} claims {n} tags")
    out = []
    for _ in range(n):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise ProtocolError(f"tagged field {tag} at offset {pos} has size {size}, past the end")
        out.append((tag, pos, end))
        pos = end
    return out, pos


def _pair(unpack: Any, buf: Buffer, start: int, end: int, width: int) -> tuple[int, int]:
    """A tagged struct of two fixed fields (its own tagged fields after them are skipped)."""
    if end - start < width + 1:
        raise ProtocolError(f"tagged field at offset {start} is too short ({end - start} bytes)")
    return unpack(buf, start)  # type: ignore[no-any-return]


def decode_fetch_body(buf: Buffer, pos: int, version: int) -> dict[str, Any]:
    """The Fetch response body at ``pos`` (after the header) of ``version``: the generic decoder's dict, with
    ``FetchedPartition`` entries. Raises ``ProtocolError`` on bytes that do not parse."""
    if version < MIN_VERSION:
        raise UnsupportedVersionError(f"Fetch v{version}: akresil reads v{MIN_VERSION} or later")
    try:
        return _decode(buf, pos, version)
    except ProtocolError as exc:
        raise ProtocolError(f"FetchResponse v{version}: {exc}") from None
    except _DECODE_ERRORS as exc:
        raise ProtocolError(f"FetchResponse v{version}: malformed or truncated ({type(exc).__name__}: {exc})") \
            from None


def _decode(buf: Buffer, pos: int, version: int) -> dict[str, Any]:
    flexible = version >= FLEXIBLE_VERSION
    by_id = version >= TOPIC_ID_VERSION
    has_log_start = version >= 5
    has_replica = version >= 11
    size = len(buf)
    view = memoryview(buf)
    if version >= SESSION_VERSION:
        throttle, error_code, session_id = _TOP7_AT(buf, pos)
        pos += 10
    else:
        throttle, error_code, session_id = _I32_AT(buf, pos)[0], 0, 0
        pos += 4
    n_topics, pos = _count(buf, pos, flexible)
    topics = []
    for _ in range(n_topics):
        topic: dict[str, Any]
        if by_id:
            if pos + 16 > size:
                raise ProtocolError(f"uuid at offset {pos} past the end")
            topic = {"topic_id": bytes(buf[pos:pos + 16])}
            pos += 16
        else:
            name, pos = _read_string(buf, pos, flexible)
            topic = {"topic": name}
        n_parts, pos = _count(buf, pos, flexible)
        items: list[FetchedPartition | memoryview] = []
        append = items.append
        left = n_parts
        while left:
            if flexible:
                # most entries at 10,000 partitions say only "nothing new": no aborted transactions (null or
                # empty), no records (empty or null), no tagged fields, 37 bytes each. A run of them is kept as
                # its bytes (``FetchedPartitions`` reads them when iterated), found by those three bytes
                run = _nothing_new_run(view, pos, min(left, (size - pos) // _EMPTY_SIZE))
                if run:
                    at = pos + run * _EMPTY_SIZE
                    append(view[pos:at])
                    left -= run
                    pos = at
                    continue
            part, pos = _entry(buf, pos, size, flexible, has_log_start, has_replica)
            append(part)
            left -= 1
        if flexible:
            pos = _tagged(buf, pos)[1]
        topic["partitions"] = FetchedPartitions(items, n_parts)
        topics.append(topic)
    endpoints = None
    if flexible:
        fields, pos = _tagged(buf, pos)
        for tag, start, end in fields:
            if tag == 0 and version >= 16:
                endpoints, at = _endpoints(buf, start)
                if at != end:
                    raise ProtocolError(f"tagged field node_endpoints (tag 0) declared {end - start} bytes but its "
                                        f"value took {at - start}")
    return {"throttle_time_ms": throttle, "error_code": error_code, "session_id": session_id, "responses": topics,
            "node_endpoints": endpoints}


def _entry(buf: Buffer, pos: int, size: int, flexible: bool, has_log_start: bool, has_replica: bool
           ) -> tuple[FetchedPartition, int]:
    """One partition entry of any shape at ``pos``, and the position after it."""
    if has_log_start:
        index, code, hwm, lso, log_start = _PART5_AT(buf, pos)
        pos += 30
    else:
        index, code, hwm, lso = _PART4_AT(buf, pos)
        log_start = -1
        pos += 22
    n, pos = _length(buf, pos, flexible)
    aborted: Sequence[tuple[int, int]] | None = None
    if n == 0:
        aborted = _NO_ABORTED
    elif n > 0:
        if n * 16 > size - pos:
            raise ProtocolError(f"array at offset {pos} claims {n} aborted transactions past the end")
        found: list[tuple[int, int]] = []
        for _ in range(n):
            found.append(_PAIR_QQ_AT(buf, pos))
            pos += 16
            if flexible:
                pos = _tagged(buf, pos)[1]
        aborted = found
    if has_replica:
        replica = _I32_AT(buf, pos)[0]
        pos += 4
    else:
        replica = -1
    n, pos = _length(buf, pos, flexible)
    if n > 0:
        end = pos + n
        if end > size:
            raise ProtocolError(f"bytes at offset {pos} claims {n} bytes but only {size - pos} remain")
        records: Buffer = buf[pos:end]
        pos = end
    else:
        records = _NO_RECORDS
    leader = diverging = None
    if flexible:
        if buf[pos]:
            fields, pos = _tagged(buf, pos)
            for tag, start, end in fields:
                if tag == 0:
                    diverging = _pair(_PAIR_IQ_AT, buf, start, end, 12)
                elif tag == 1:
                    leader = _pair(_PAIR_II_AT, buf, start, end, 8)
        else:
            pos += 1
    return _new(FetchedPartition, (index, code, hwm, lso, log_start, aborted, replica, records, leader,
                                   diverging)), pos


def _endpoints(buf: Buffer, pos: int) -> tuple[list[dict[str, Any]], int]:
    """KIP-951 node endpoints (v16+): the generic decoder's dicts, a few per answer at most."""
    n, pos = _count(buf, pos, True)
    out = []
    for _ in range(n):
        node_id = _I32_AT(buf, pos)[0]
        host, pos = _read_string(buf, pos + 4, True)
        port = _I32_AT(buf, pos)[0]
        rack, pos = _read_nullable_compact_string(buf, pos + 4)
        pos = _tagged(buf, pos)[1]
        out.append({"node_id": node_id, "host": host, "port": port, "rack": rack})
    return out, pos
