"""Record batches (magic 2): an adapter over aiokafka's C-accelerated builder and reader.

aiokafka's Cython ``DefaultRecordBatchBuilder`` / ``DefaultRecordBatch`` encode and decode records roughly
70x faster than its pure-Python fallback, so akresil reuses them instead of re-implementing the format; the one
exception is an uncompressed batch of larger records, which ``record_encoder.PlainBatchEncoder`` writes in Python
and seals with the hardware CRC-32C (aiokafka's table-driven CRC is most of that batch's cost).
This module adds what the producer and consumer need around them:

* ``BatchBuilder``: one batch under construction, with codec names, record-count bookkeeping, producer
  state (id, epoch, base sequence) settable before ``build()``, and the choice of encoder;
* ``restamp_producer_state``: re-stamps a *built* batch with a new producer id/epoch/base sequence and
  recomputes the CRC, for retries after an epoch bump (KIP-360) without re-encoding the records;
* ``read_batches``: walks a Fetch ``records`` blob that may hold several batches and end with a truncated
  one (the broker cuts at ``max_bytes``): the partial tail is skipped, not an error.

Only magic 2 is supported (Kafka >= 0.11 log format); older batches raise ``ProtocolError``.

aiokafka is imported when the first batch is built or read (``_aiokafka``), not with this module: any
``aiokafka.record`` import runs ``aiokafka/__init__``, which loads aiokafka's whole client (~50 modules), and
``import akresil.consumer`` (a Spark planner, a CLI command) should not pay for that. The classes are looked
up once and kept, so the per-batch cost is one call.
"""

from __future__ import annotations

import functools
import struct
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

from ..errors import ConfigError, CorruptRecordError, ProtocolError


class _AiokafkaRecords(NamedTuple):
    builder: Any                            # DefaultRecordBatchBuilder
    batch: Any                              # DefaultRecordBatch
    crc32c: Callable[[bytes], int]
    #: True when aiokafka's Cython extension is in use (it should be; the fallback is ~70x slower)
    c_accelerated: bool


_loaded: _AiokafkaRecords | None = None


def _aiokafka() -> _AiokafkaRecords:
    """aiokafka's record classes, imported on the first call and kept."""
    global _loaded
    if _loaded is None:
        from aiokafka.record import default_records
        from aiokafka.record.util import calc_crc32c

        builder = default_records.DefaultRecordBatchBuilder
        _loaded = _AiokafkaRecords(builder, default_records.DefaultRecordBatch, _hardware_crc32c() or calc_crc32c,
                                   builder.__module__.startswith("aiokafka.record._crecords"))
    return _loaded


def _hardware_crc32c() -> Callable[[bytes], int] | None:
    """google-crc32c's CRC-32C when its C extension is in use (SSE4.2 / ARMv8 instructions): ~10x aiokafka's
    table-driven one, and every batch a consumer reads is checked (``check_crcs``): 20 MB per 200,000 records of
    100 B, 1 GB per million of 1 KiB. None when it is missing or fell back to pure Python (slower than aiokafka's)."""
    try:
        import google_crc32c
    except ImportError:
        return None
    if getattr(google_crc32c, "implementation", None) != "c":
        return None
    value: Callable[[bytes], int] = google_crc32c.value
    return value


@functools.cache
def _python_encoder() -> Callable[..., Any] | None:
    """``new(transactional, producer_id, producer_epoch, base_sequence, batch_size)`` making a Python-encoded
    batch, or None without the hardware CRC (aiokafka's table-driven one would undo the gain, and aiokafka's
    builder then writes every batch). Looked up once."""
    crc32c = _hardware_crc32c()
    if crc32c is None:
        return None
    from .record_encoder import PlainBatchEncoder
    return functools.partial(PlainBatchEncoder, crc32c)


_LAZY_NAMES = {"DefaultRecordBatchBuilder": "builder", "DefaultRecordBatch": "batch",
               "C_ACCELERATED": "c_accelerated"}


def __getattr__(name: str) -> Any:
    """``DefaultRecordBatchBuilder``, ``DefaultRecordBatch``, ``C_ACCELERATED``: aiokafka loads when first asked."""
    field = _LAZY_NAMES.get(name)
    if field is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_aiokafka(), field)

COMPRESSION_CODECS: dict[str, int] = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CODEC_NAMES = {v: k for k, v in COMPRESSION_CODECS.items()}

# BaseOffset q, Length i, PartitionLeaderEpoch i, Magic b, CRC I, Attributes h, LastOffsetDelta i,
# FirstTimestamp q, MaxTimestamp q, ProducerId q, ProducerEpoch h, BaseSequence i, RecordCount i
_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = _HEADER.size                 # 61
_LOG_OVERHEAD = 12                               # BaseOffset + Length
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_PRODUCER_STATE = struct.Struct(">qhi")          # ProducerId, ProducerEpoch, BaseSequence
_PRODUCER_STATE_OFFSET = 43
_CRC = struct.Struct(">I")
#: worst-case per-record framing besides key/value/headers (length, attributes, deltas as varints)
MAX_RECORD_OVERHEAD = 21

_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_TIMESTAMP_TYPE = 0x08
_CODEC_MASK = 0x07

Header = tuple[str, "bytes | None"]
_NO_HEADERS: list[Header] = []


def codec_available(codec: int) -> bool:
    """Whether this process can compress with ``codec`` (gzip always; the others need cramjam)."""
    from aiokafka import codec as _codec
    available: bool = {0: True, 1: _codec.has_gzip(), 2: _codec.has_snappy(), 3: _codec.has_lz4(),
                       4: _codec.has_zstd()}.get(codec, False)
    return available


def compress(codec: int, data: bytes) -> bytes:
    """``data`` in the framing Kafka uses for record batches of magic 2 (the framing KIP-714 pushes use too):
    gzip, xerial snappy, the LZ4 frame format, zstd."""
    from aiokafka import codec as _codec
    if codec == 0:
        return data
    encode = {1: _codec.gzip_encode, 2: _codec.snappy_encode, 3: _codec.lz4_encode, 4: _codec.zstd_encode}.get(codec)
    if encode is None:
        raise ValueError(f"compression codec {codec} is not one of {sorted(CODEC_NAMES)}")
    return bytes(encode(data))


def compression_codec(name: str | int) -> int:
    """Codec id for a ``compression_type`` name (or id); ConfigError naming the key for anything else."""
    if isinstance(name, int) and not isinstance(name, bool):
        if name in CODEC_NAMES:
            return name
    elif isinstance(name, str) and name.lower() in COMPRESSION_CODECS:
        return COMPRESSION_CODECS[name.lower()]
    raise ConfigError(f"compression_type: {name!r} is not one of {', '.join(COMPRESSION_CODECS)}")


def estimate_record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()) -> int:
    """Upper bound of one record's encoded size inside a batch (without the batch header)."""
    size: int = _aiokafka().builder.size_of(key, value, headers if isinstance(headers, list) else list(headers))
    return size + MAX_RECORD_OVERHEAD


#: a batch whose first record (key + value) has at least this many bytes is written by ``PlainBatchEncoder``,
#: one with a smaller first record by aiokafka's C builder. Per record the Python encoder costs ~0.25 µs more when
#: each record is a call (send, enqueue) and ~0.15 µs more in ``send_many``'s loop; per byte its hardware CRC
#: costs ~0.45 ns less. The two break even at these sizes, in 16 KiB and 256 KiB batches (docs/benchmarks.md)
ENCODER_MIN_RECORD_BYTES = 768
#: the same for a batch made for ``append_run`` (``send_many``: ``bulk``)
ENCODER_MIN_RUN_RECORD_BYTES = 384


class BatchBuilder:
    """One magic-2 batch being filled. ``append`` returns False once the batch is full (never for the first).

    The encoder is chosen with the batch, on the size of the record it is made for (``first_record_bytes``: key
    plus value): an uncompressed batch whose first record has at least ``ENCODER_MIN_RECORD_BYTES``
    (``ENCODER_MIN_RUN_RECORD_BYTES`` when it is made for ``append_run``: ``bulk``) is written by
    ``record_encoder.PlainBatchEncoder`` and sealed with the hardware CRC-32C, everything else (compressed batches,
    small records, no google-crc32c C extension) by aiokafka's C builder. Both write the same bytes; they differ
    only in where the CPU goes. The caller knows the first record when it makes the batch, so choosing costs one
    comparison (a batch at 10,000 partitions often holds one record of 100 B).
    """

    __slots__ = ("_builder", "append_at", "compression", "batch_size", "record_count", "_built", "transactional")

    def __init__(self, *, compression_type: str | int = "none", batch_size: int = 16_384,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 transactional: bool = False, first_record_bytes: int = 0, bulk: bool = False) -> None:
        if batch_size < 0:
            raise ConfigError(f"batch_size: must be >= 0, got {batch_size!r}")
        self.compression = compression_codec(compression_type)
        self.batch_size = batch_size
        self.transactional = transactional
        new = None
        if not self.compression and first_record_bytes >= (ENCODER_MIN_RUN_RECORD_BYTES if bulk
                                                           else ENCODER_MIN_RECORD_BYTES):
            new = _python_encoder()
        self._builder: Any
        if new is None:
            self._builder = _aiokafka().builder(2, self.compression, int(transactional), producer_id, producer_epoch,
                                                base_sequence, max(batch_size, BATCH_HEADER_SIZE))
        else:
            self._builder = new(transactional, producer_id, producer_epoch, base_sequence, batch_size)
        #: the encoder's own append, the producer's per-record path (no Python frame in between for aiokafka's):
        #: ``append_at(offset_delta, timestamp_ms, key, value, headers)`` with ``headers`` a list; returns None when
        #: the batch is full. The caller tracks offset deltas and appends only before ``build()``
        self.append_at: Callable[[int, int, bytes | None, bytes | None, list[Header]], object] = self._builder.append
        #: records taken through ``append`` (the producer's batches count their own)
        self.record_count = 0
        self._built: bytes | bytearray | None = None

    @property
    def encoder(self) -> str:
        """Which encoder writes this batch: "python" (``PlainBatchEncoder``) or "aiokafka"."""
        return "aiokafka" if self._builder.__class__ is _aiokafka().builder else "python"

    def append(self, timestamp_ms: int, key: bytes | None, value: bytes | None,
               headers: Sequence[Header] = ()) -> bool:
        """Add a record (offset delta = its index); False when it does not fit in ``batch_size``."""
        if self._built is not None:
            raise ProtocolError("record batch already built: no more appends")
        for what, data in (("key", key), ("value", value)):
            if not (data is None or isinstance(data, (bytes, bytearray))):
                raise TypeError(f"record {what} must be bytes, bytearray or None, got {type(data).__name__}")
        if headers.__class__ is not list:
            headers = list(headers) if headers else _NO_HEADERS   # the encoders want a list; never mutate it
        if timestamp_ms.__class__ is not int:
            timestamp_ms = int(timestamp_ms)
        if self.append_at(self.record_count, timestamp_ms, key, value, headers) is None:
            return False
        self.record_count += 1
        return True

    def append_run(self, records: Sequence[tuple[bytes | None, bytes | None]], start: int, first_delta: int,
                   timestamp_ms: int, headers: list[Header], budget: int, base_size: int, stop: int | None = None
                   ) -> tuple[int, int, bool]:
        """Append ``records[start:stop]`` (one timestamp, one header list for all) at offset deltas from
        ``first_delta`` on while the estimated bytes stay within ``budget``; returns ``(appended, estimated bytes,
        batch full)``.

        The bulk path of ``send_many``: one tight loop around the encoder instead of a method call, a
        header conversion and a memory reservation per record. A record's estimate is ``base_size +
        len(key) + len(value)`` (the caller's upper bound, see ``core.batch.estimate_record_size``). The
        first record of an empty batch is always taken, whatever ``batch_size`` says.
        """
        if self._built is not None:
            raise ProtocolError("record batch already built: no more appends")
        if timestamp_ms.__class__ is not int:
            timestamp_ms = int(timestamp_ms)
        builder = self._builder
        if builder.__class__ is not _aiokafka().builder:
            counts: tuple[int, int, bool] = builder.append_run(records, start, first_delta, timestamp_ms, headers,
                                                               budget, base_size, stop)
            return counts
        append = self.append_at
        n = first_delta
        used = 0
        full = False
        end = len(records) if stop is None else stop
        i = start
        # an index loop, not islice: a list subscript is cheap in 3.11 and islice would skip ``start`` items
        for i in range(start, end):     # noqa: B007 - i is the stop position after the loop
            key, value = records[i]
            size = base_size
            if key is not None:
                size += len(key)
            if value is not None:
                size += len(value)
            if used + size > budget:
                break
            if append(n, timestamp_ms, key, value, headers) is None:
                full = True
                break
            n += 1
            used += size
        else:
            i = end
        return i - start, used, full

    @property
    def size_bytes(self) -> int:
        """Bytes written so far (uncompressed, header included)."""
        size: int = self._builder.size()
        return size

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Set the idempotence fields; after ``build()`` the built bytes are re-stamped (CRC recomputed)."""
        if self._built is not None:
            self._built = restamp_producer_state(self._built, producer_id, producer_epoch, base_sequence)
        else:
            self._builder.set_producer_state(producer_id, producer_epoch, base_sequence)

    def records(self) -> Iterator[tuple[int, bytes | None, bytes | None, list[Header]]]:
        """The built batch's records in order, as ``(timestamp_ms, key, value, headers)``: what a split of a batch
        the broker refused as too large re-encodes (decoded from the bytes, so nothing is kept per record)."""
        for view in read_batches(self.build()):
            for record in view.records():
                yield record.timestamp, record.key, record.value, list(record.headers)

    @property
    def built(self) -> bool:
        return self._built is not None

    def build(self) -> bytes | bytearray:
        """Compress (when it helps) and seal; idempotent. The encoder's own buffer is returned, not a copy
        (a batch is copied once more into the request frame anyway); treat it as read-only."""
        if self._built is None:
            self._built = self._builder.build()
        return self._built


def restamp_producer_state(batch: bytes | bytearray, producer_id: int, producer_epoch: int,
                           base_sequence: int) -> bytes:
    """A copy of a built batch with new producer id/epoch/base sequence and a recomputed CRC."""
    if len(batch) < BATCH_HEADER_SIZE or batch[_MAGIC_OFFSET] != 2:
        raise ProtocolError("restamp_producer_state needs one complete magic-2 record batch")
    buf = bytearray(batch)
    _PRODUCER_STATE.pack_into(buf, _PRODUCER_STATE_OFFSET, producer_id, producer_epoch, base_sequence)
    _CRC.pack_into(buf, _CRC_OFFSET, _aiokafka().crc32c(bytes(buf[_ATTRIBUTES_OFFSET:])))
    return bytes(buf)


class RecordBatchView:
    """Header fields of one batch in a fetched blob; ``records()`` decodes its records (C extension).

    Records are aiokafka's C ``DefaultRecord`` objects (``offset``, ``timestamp``, ``timestamp_type``,
    ``key``, ``value``, ``headers``); wrapping each again would halve decode throughput.
    """

    __slots__ = ("_buf", "base_offset", "length", "partition_leader_epoch", "magic", "crc", "attributes",
                 "last_offset_delta", "first_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                 "base_sequence", "record_count")
    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    def __init__(self, buf: memoryview) -> None:
        self._buf = buf
        (self.base_offset, self.length, self.partition_leader_epoch, self.magic, self.crc, self.attributes,
         self.last_offset_delta, self.first_timestamp, self.max_timestamp, self.producer_id,
         self.producer_epoch, self.base_sequence, self.record_count) = _HEADER.unpack_from(buf)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & _TIMESTAMP_TYPE else 0

    @property
    def compression(self) -> str:
        return CODEC_NAMES.get(self.attributes & _CODEC_MASK, f"unknown({self.attributes & _CODEC_MASK})")

    @property
    def size_bytes(self) -> int:
        return len(self._buf)

    def validate_crc(self) -> bool:
        return _aiokafka().crc32c(bytes(self._buf[_ATTRIBUTES_OFFSET:])) == self.crc

    def records(self) -> Any:
        """Iterator over the batch's records (aiokafka's ``DefaultRecordBatch``, decompressing if needed)."""
        try:
            return _aiokafka().batch(self._buf)
        except Exception as exc:  # codec errors surface from the C extension as assorted types
            raise CorruptRecordError(f"batch at offset {self.base_offset}: {exc}") from exc

    def control_type(self) -> int | None:
        """For a control batch: 0 = ABORT, 1 = COMMIT (from the control record key); else None."""
        if not self.is_control:
            return None
        for record in self.records():
            key = record.key
            if key is None or len(key) < 4:
                raise CorruptRecordError(f"control batch at offset {self.base_offset} has a malformed key")
            kind: int = struct.unpack_from(">h", key, 2)[0]
            return kind
        return None

    def __repr__(self) -> str:
        return (f"RecordBatchView(base_offset={self.base_offset}, records={self.record_count}, "
                f"last_offset={self.last_offset}, control={self.is_control}, "
                f"transactional={self.is_transactional}, producer_id={self.producer_id})")


def read_batches(data: bytes | bytearray | memoryview | None, *, check_crcs: bool = False) -> Iterator[RecordBatchView]:
    """Batches in a Fetch ``records`` blob; a truncated trailing batch is skipped silently.

    A batch whose declared length is impossible (shorter than a header) or whose magic is not 2 raises
    ``ProtocolError``; with ``check_crcs`` a CRC mismatch raises ``CorruptRecordError``.
    """
    if not data:
        return
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    total = len(view)
    pos = 0
    while total - pos >= _LOG_OVERHEAD:
        length = struct.unpack_from(">i", view, pos + 8)[0]
        end = pos + _LOG_OVERHEAD + length
        if length < BATCH_HEADER_SIZE - _LOG_OVERHEAD:
            if end > total:
                return  # even the header is cut off
            raise ProtocolError(f"record batch at byte {pos} declares length {length}, below the header size")
        if end > total:
            return      # partial trailing batch: the broker stopped at max_bytes
        magic = view[pos + _MAGIC_OFFSET]
        if magic != 2:
            raise ProtocolError(f"record batch at byte {pos} has magic {magic}; only magic 2 is supported")
        batch = RecordBatchView(view[pos:end])
        if check_crcs and not batch.validate_crc():
            raise CorruptRecordError(f"record batch at offset {batch.base_offset}: CRC mismatch")
        yield batch
        pos = end


def build_batch(records: Iterable[tuple[int, bytes | None, bytes | None, Sequence[Header]]], *,
                compression_type: str | int = "none", producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, transactional: bool = False) -> bytes | bytearray:
    """Encode ``(timestamp_ms, key, value, headers)`` records into one batch, whatever their size."""
    builder = BatchBuilder(compression_type=compression_type, batch_size=2**31 - 1, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=base_sequence, transactional=transactional)
    for ts, key, value, headers in records:
        builder.append(ts, key, value, headers)
    return builder.build()
