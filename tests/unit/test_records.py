"""Record-batch adapter: C extension in use, codecs, producer state re-stamping, multi-batch reads."""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest

from akresil.errors import ConfigError, CorruptRecordError, ProtocolError
from akresil.protocol import records
from akresil.protocol.records import (BATCH_HEADER_SIZE, BatchBuilder, build_batch, compression_codec,
                                      estimate_record_size, read_batches, restamp_producer_state)


def sample(n: int = 5, start: int = 1000) -> list[tuple[int, bytes | None, bytes | None, list]]:
    return [(start + i, b"k%d" % i if i % 2 else None, b"v" * (i * 7), [("h", b"%d" % i), ("n", None)])
            for i in range(n)]


def test_uses_aiokafka_c_extension() -> None:
    assert records.C_ACCELERATED
    assert "_crecords" in records.DefaultRecordBatchBuilder.__module__
    assert "_crecords" in records.DefaultRecordBatch.__module__


def test_batches_are_checked_with_the_hardware_crc32c_when_its_c_extension_is_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from aiokafka.record.util import calc_crc32c

    data = bytes(range(256)) * 9
    fast = records._hardware_crc32c()
    assert fast is not None and fast(data) == calc_crc32c(data)   # google-crc32c is a dependency
    assert records._aiokafka().crc32c is fast
    blob = bytearray(build_batch([(0, b"k", b"v" * 100, [])] * 20))
    assert next(records.read_batches(blob)).validate_crc()
    blob[-1] ^= 1
    assert not next(records.read_batches(blob)).validate_crc()
    # its pure-Python fallback is ~100x slower than aiokafka's table: not used
    monkeypatch.setitem(sys.modules, "google_crc32c", types.SimpleNamespace(implementation="python", value=None))
    assert records._hardware_crc32c() is None
    monkeypatch.setitem(sys.modules, "google_crc32c", None)      # not installed: import fails
    assert records._hardware_crc32c() is None


def test_aiokafka_loads_with_the_first_batch_not_with_the_consumer() -> None:
    """``import akresil.consumer`` leaves aiokafka (its whole client, via ``aiokafka/__init__``) unloaded; the first
    batch built or read loads its C classes (fresh interpreter: this one has aiokafka loaded already)."""
    code = """if True:
        import sys
        import akresil.consumer
        from akresil.protocol.records import build_batch, read_batches
        before = "aiokafka" in sys.modules
        [batch] = read_batches(build_batch([(1, b"k", b"v", [])]))
        [record] = batch.records()
        from akresil.protocol import records
        print(before, "aiokafka.record._crecords" in sys.modules, records.C_ACCELERATED, record.value)
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True", "b'v'"]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_every_codec(codec: str) -> None:
    recs = sample(20) + [(5000, b"big", b"z" * 5000, [])]
    data = build_batch(recs, compression_type=codec, producer_id=42, producer_epoch=3, base_sequence=17)
    [batch] = read_batches(data, check_crcs=True)
    assert batch.compression == codec   # the payload compresses well, so the codec is kept
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 17)
    assert batch.record_count == 21 and batch.last_offset_delta == 20
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()] == \
        [(i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(recs)]


def test_builder_reports_full_but_always_takes_the_first_record() -> None:
    b = BatchBuilder(batch_size=100)
    assert b.append(1, None, b"x" * 500)          # first record: accepted even if oversized
    assert not b.append(1, None, b"x")
    assert b.record_count == 1
    b = BatchBuilder(batch_size=200)
    n = 0
    while b.append(1, None, b"y" * 30):
        n += 1
    assert 2 <= n <= 4 and b.record_count == n and b.size_bytes <= 200


def test_set_producer_state_before_and_after_build() -> None:
    b = BatchBuilder()
    b.append(1, b"k", b"v")
    b.set_producer_state(5, 1, 10)
    first = b.build()
    assert b.build() is first                      # idempotent
    b.set_producer_state(5, 2, 0)                  # retry after an epoch bump: re-stamped, CRC recomputed
    [view] = read_batches(b.build(), check_crcs=True)
    assert (view.producer_id, view.producer_epoch, view.base_sequence) == (5, 2, 0)
    with pytest.raises(ProtocolError, match="built"):
        b.append(2, None, b"late")


def test_restamp_rejects_non_batches() -> None:
    with pytest.raises(ProtocolError):
        restamp_producer_state(b"\x00" * 10, 1, 1, 1)


def test_reads_several_batches_and_skips_truncated_tail() -> None:
    a = build_batch(sample(3))
    b = build_batch(sample(2, start=2000), compression_type="lz4")
    blob = bytearray(a + b)
    struct.pack_into(">q", blob, len(a), 3)         # second batch's base offset as a broker would set it
    for cut in (0, 5, 11, 12, 40, len(b) - 1):
        got = list(read_batches(bytes(blob) + bytes(b[:cut])))
        assert [g.base_offset for g in got] == [0, 3]
    got = list(read_batches(bytes(blob)))
    assert [r.offset for g in got for r in g.records()] == [0, 1, 2, 3, 4]
    assert got[1].last_offset == 4 and got[1].next_offset == 5
    assert list(read_batches(b"")) == [] and list(read_batches(None)) == []


def test_corrupt_input_is_reported() -> None:
    data = bytearray(build_batch(sample(2)))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(read_batches(bytes(data), check_crcs=True))
    bad_len = bytearray(build_batch(sample(1)))
    struct.pack_into(">i", bad_len, 8, 10)           # length smaller than a batch header
    with pytest.raises(ProtocolError, match="length 10"):
        list(read_batches(bytes(bad_len)))
    old_magic = bytearray(build_batch(sample(1)))
    old_magic[16] = 1
    with pytest.raises(ProtocolError, match="magic 1"):
        list(read_batches(bytes(old_magic)))


def test_control_batch_flags_and_type() -> None:
    # a COMMIT marker as the broker writes it: control + transactional attributes, key = (version 0, type 1)
    data = bytearray(build_batch([(1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])], producer_id=9))
    attrs_offset = 21
    struct.pack_into(">h", data, attrs_offset, 0x30)
    data = bytearray(restamp_producer_state(bytes(data), 9, 0, -1))   # recompute the CRC
    [batch] = read_batches(bytes(data), check_crcs=True)
    assert batch.is_control and batch.is_transactional and batch.control_type() == 1
    [plain] = read_batches(build_batch(sample(1)))
    assert not plain.is_control and plain.control_type() is None


def test_codec_names_and_size_estimate() -> None:
    assert compression_codec("ZSTD") == 4 and compression_codec(2) == 2
    with pytest.raises(ConfigError, match="compression_type"):
        compression_codec("brotli")
    est = estimate_record_size(b"key", b"v" * 100, [("h", b"x")])
    actual = len(build_batch([(1, b"key", b"v" * 100, [("h", b"x")])])) - BATCH_HEADER_SIZE
    assert actual <= est <= actual + 21
