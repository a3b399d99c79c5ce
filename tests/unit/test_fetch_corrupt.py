"""Corrupt fetched data: batches whose CRC fails, and batches with a valid CRC over records that do not decode.

Either way the application gets ``errors.CorruptRecordError`` (a ``CorruptBatchError`` naming the partition,
the first offset not handed out and where to seek to skip the batch) from the poll that reaches the
partition, after the records before it, as from the Java consumer; never aiokafka's own exception types or a
``UnicodeDecodeError``. The partition stops there (and stops fetching) until the application seeks.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest
from aiokafka.record.util import calc_crc32c

from akresil import errors
from akresil.core.fetch_state import CorruptBatchError, FetchState, decode_batch
from akresil.protocol.records import build_batch, read_batches
from akresil.types import TopicPartition

from .test_fetch_state import T, TP0, TP1, batch, fetch_state, metadata, only_request, response

_CRC = struct.Struct(">I")


def _recrc(raw: bytearray) -> bytes:
    """Make the CRC valid again over whatever the records now hold."""
    _CRC.pack_into(raw, 17, calc_crc32c(bytes(raw[21:])))
    return bytes(raw)


def bad_header_batch(base: int, n: int, bad_index: int) -> bytes:
    """``n`` records; record ``bad_index`` has a header key that is not UTF-8. The CRC is valid."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(n):
        b.append(i, 1_000 + i, b"k", b"v%d" % i, [("zz", b"x")] if i == bad_index else [])
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, base)
    at = raw.index(b"zz")
    raw[at:at + 2] = b"\xff\xfe"
    return _recrc(raw)


def overcounted_batch(base: int, n: int) -> bytes:
    """``n`` good records but a record count of ``n + 2``: the reader runs off the end (CorruptRecordException)."""
    raw = bytearray(batch(base, [b"v%d" % i for i in range(n)]))
    struct.pack_into(">i", raw, 57, n + 2)
    return _recrc(raw)


def _fed(blob: bytes, *, start: int = 0, parts: tuple[TopicPartition, ...] = (TP0,),
         more: dict[TopicPartition, bytes] | None = None, **kw: Any) -> FetchState:
    cache = metadata({tp.partition: (1, 0) for tp in parts})
    st = fetch_state(**kw)
    st.assign(parts)
    for tp in parts:
        st.seek(tp, start)
    req = only_request(st, 0, cache)
    answers = {TP0: {"records": blob}, **{tp: {"records": b} for tp, b in (more or {}).items()}}
    out = st.on_fetch_response(req, response(answers), 0, cache)
    assert out.data
    return st


# ------------------------------------------------------------------------------ garbage behind a valid CRC
def test_records_before_the_undecodable_one_come_first_then_the_error_names_partition_and_offset() -> None:
    st = _fed(batch(0, [b"a", b"b"]) + bad_header_batch(2, 4, bad_index=2))
    assert [r.offset for r in st.drain(100)[TP0]] == [0, 1, 2, 3]     # 2 and 3 precede the bad record (4)
    with pytest.raises(errors.CorruptRecordError) as info:
        st.drain(100)
    exc = info.value
    assert isinstance(exc, CorruptBatchError)
    assert (exc.topic_partition, exc.offset, exc.next_offset) == (TP0, 4, 6)
    assert str(exc).startswith("t-0: the record batch at offsets 2..5 cannot be decoded from offset 4 on "
                               "(UnicodeDecodeError")
    assert "seek to 6" in str(exc)
    assert isinstance(exc.__cause__, UnicodeDecodeError)
    assert st.position(TP0) == 4                       # stopped at the first record not handed out
    with pytest.raises(CorruptBatchError):             # raised again on every poll until a seek
        st.drain(100)
    assert st.plan_fetches(0, metadata({0: (1, 0)}).snapshot).requests == []   # and nothing is fetched


def test_a_small_max_records_drains_the_good_records_across_polls_before_raising() -> None:
    st = _fed(bad_header_batch(0, 5, bad_index=3))
    assert [r.offset for r in st.drain(2)[TP0]] == [0, 1]
    assert [r.offset for r in st.drain(2)[TP0]] == [2]
    with pytest.raises(CorruptBatchError, match="from offset 3 on"):
        st.drain(2)


def test_aiokafka_corrupt_record_exception_is_mapped() -> None:
    st = _fed(overcounted_batch(10, 3), start=10)
    assert [r.offset for r in st.drain(100)[TP0]] == [10, 11, 12]
    with pytest.raises(CorruptBatchError) as info:
        st.drain(100)
    assert type(info.value.__cause__).__name__ == "CorruptRecordException"
    assert info.value.topic_partition == TP0


def test_seeking_past_the_batch_resumes_fetching_and_consuming() -> None:
    cache = metadata({0: (1, 0)})
    st = _fed(bad_header_batch(0, 3, bad_index=0))
    with pytest.raises(CorruptBatchError) as info:
        st.drain(100)
    assert info.value.offset == 0
    st.seek(TP0, info.value.next_offset)
    assert st.drain(100) == {}                              # the error went with the seek
    req = only_request(st, 0, cache)
    assert req.partitions[0].fetch_offset == 3
    st.on_fetch_response(req, response({TP0: {"records": batch(3, [b"ok"])}}), 0, cache)
    assert [(r.offset, r.value) for r in st.drain(100)[TP0]] == [(3, b"ok")]


def test_other_partitions_keep_flowing_and_the_error_waits_for_an_empty_poll() -> None:
    st = _fed(bad_header_batch(0, 2, bad_index=0), parts=(TP0, TP1), more={TP1: batch(0, [b"x", b"y"])})
    seen: dict[TopicPartition, list[int]] = {}
    raised = 0
    for _ in range(4):
        try:
            for tp, records in st.drain(100).items():
                seen.setdefault(tp, []).extend(r.offset for r in records)
        except CorruptBatchError as exc:
            assert exc.topic_partition == TP0
            raised += 1
    assert seen == {TP1: [0, 1]} and raised >= 1
    assert st.partitions[TP1].error is None and st.position(TP1) == 2


def test_the_reported_offset_is_never_below_the_position() -> None:
    # the position is inside the batch, past the unreadable record: nothing of the batch can be handed out
    st = _fed(bad_header_batch(0, 6, bad_index=1), start=3)
    with pytest.raises(CorruptBatchError) as info:
        st.drain(100)
    assert (info.value.offset, info.value.next_offset) == (3, 6)
    assert st.position(TP0) == 3


def test_deserializer_errors_propagate_unchanged_and_keep_the_batch() -> None:
    calls = {"n": 0}

    def flaky(value: bytes) -> str:
        calls["n"] += 1
        if calls["n"] == 2:
            raise ValueError("application deserializer failed")
        return value.decode()

    st = _fed(batch(0, [b"a", b"b", b"c"]), value_deserializer=flaky)
    with pytest.raises(ValueError, match="application deserializer"):
        st.drain(100)
    assert st.position(TP0) == 0 and st.partitions[TP0].error is None
    assert [r.value for r in st.drain(100)[TP0]] == ["a", "b", "c"]     # the batch was not lost


def test_deserializers_apply_to_the_records_before_a_corrupt_one() -> None:
    st = _fed(bad_header_batch(0, 3, bad_index=2), key_deserializer=bytes.decode, value_deserializer=bytes.decode)
    assert [(r.key, r.value) for r in st.drain(100)[TP0]] == [("k", "v0"), ("k", "v1")]
    with pytest.raises(CorruptBatchError, match="from offset 2 on"):
        st.drain(100)


# ------------------------------------------------------------------------------ CRC and framing failures
def test_crc_failure_in_a_later_batch_hands_out_the_earlier_batches_first() -> None:
    bad = bytearray(batch(2, [b"c", b"d"]))
    bad[-2] ^= 0x55
    st = _fed(batch(0, [b"a", b"b"]) + bytes(bad) + batch(4, [b"e"]))
    assert [r.value for r in st.drain(100)[TP0]] == [b"a", b"b"]
    with pytest.raises(CorruptBatchError, match=r"t-0: the record batch at offsets 2\.\.3 fails its CRC check; "
                                                r"seek to 4 to skip it") as info:
        st.drain(100)
    assert (info.value.offset, info.value.next_offset) == (2, 4)
    assert st.position(TP0) == 2
    assert st.partitions[TP0].fetch_offset is None


def test_crc_is_not_checked_when_disabled() -> None:
    bad = bytearray(batch(0, [b"value"]))
    bad[-2] ^= 0x01                                    # flips a value byte: still decodes
    st = _fed(bytes(bad), check_crcs=False)
    assert len(st.drain(100)[TP0]) == 1


def test_unreadable_framing_names_the_partition() -> None:
    bad = bytearray(batch(1, [b"b"]))
    bad[16] = 1                                        # magic 1: not supported
    st = _fed(batch(0, [b"a"]) + bytes(bad))
    assert [r.value for r in st.drain(100)[TP0]] == [b"a"]
    with pytest.raises(errors.ProtocolError, match="t-0: records after offset 1 .* magic 1"):
        st.drain(100)


def test_a_corrupt_partition_does_not_fail_the_others_in_the_same_answer() -> None:
    bad = bytearray(batch(0, [b"x"]))
    bad[-2] ^= 0x55
    st = _fed(bytes(bad), parts=(TP0, TP1), more={TP1: batch(0, [b"fine"])})
    got = st.drain(100)
    assert [r.value for r in got[TP1]] == [b"fine"]
    with pytest.raises(CorruptBatchError):
        st.drain(100)


# ------------------------------------------------------------------------------ any garbage, any codec
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_random_garbage_behind_a_valid_crc_only_ever_raises_corrupt_record_error(codec: str) -> None:
    """Seeded mutations of the records area: every outcome is records or ``CorruptBatchError``."""
    raw = build_batch([(1_000 + i, b"k%d" % i, b"value-%d" % i * 5, [("h", b"x")]) for i in range(8)],
                      compression_type=codec)
    rng = random.Random(codec)
    outcomes: dict[str, int] = {}
    for _ in range(150):
        buf = bytearray(raw)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(61, len(buf))
            buf[at] = rng.randrange(256)
        view = next(read_batches(_recrc(buf)))
        try:
            records = decode_batch(view, T, 0, 0)
            outcome = "decoded"
            assert all(r.topic == T for r in records)
        except CorruptBatchError as exc:
            outcome = "corrupt"
            assert exc.topic_partition == TP0 and exc.next_offset == view.next_offset
            assert 0 <= exc.offset <= view.next_offset
            assert str(exc).startswith("t-0: the record batch at offsets 0..7 cannot be decoded")
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("corrupt", 0) > 0, outcomes


# ------------------------------------------------------------------------------ a record a deserializer refuses
def _strict_utf8(value: bytes) -> str:
    return value.decode("utf-8")


def test_a_refused_value_comes_after_the_records_before_it_and_names_partition_offset_and_cause() -> None:
    # before, the deserializer's bare UnicodeDecodeError came out of every poll, naming no record to skip
    st = _fed(batch(0, [b"a", b"b"]) + batch(2, [b"c", b"\xff", b"e"]), value_deserializer=_strict_utf8)
    assert [(r.offset, r.value) for r in st.drain(100)[TP0]] == [(0, "a"), (1, "b"), (2, "c")]
    with pytest.raises(errors.RecordDeserializationError) as info:
        st.drain(100)
    exc = info.value
    assert (exc.topic_partition, exc.offset, exc.next_offset, exc.origin) == (TP0, 3, 4, "value")
    assert str(exc).startswith("t-0: the value of the record at offset 3 could not be deserialized "
                               "(UnicodeDecodeError") and "seek to 4 to skip it" in str(exc)
    assert isinstance(exc.__cause__, UnicodeDecodeError)
    assert (exc.raw.offset, exc.raw.key, exc.raw.value) == (3, b"k", b"\xff")   # as fetched, for a dead letter
    assert st.position(TP0) == 3
    with pytest.raises(errors.RecordDeserializationError):       # again on every poll until a seek
        st.drain(100)
    st.seek(TP0, exc.next_offset)
    req = only_request(st, 0, metadata({0: (1, 0)}))
    assert req.partitions[0].fetch_offset == 4
    st.on_fetch_response(req, response({TP0: {"records": batch(4, [b"e"])}}), 0, metadata({0: (1, 0)}))
    assert [(r.offset, r.value) for r in st.drain(100)[TP0]] == [(4, "e")]


def test_a_refused_key_says_key_and_a_refusal_before_a_corruption_is_reported_first() -> None:
    st = _fed(bad_header_batch(0, 4, bad_index=3), key_deserializer=lambda k: int(k))
    with pytest.raises(errors.RecordDeserializationError) as info:
        st.drain(100)
    assert (info.value.offset, info.value.origin) == (0, "key") and isinstance(info.value.__cause__, ValueError)
    assert not isinstance(info.value, CorruptBatchError)


def test_records_before_the_position_are_not_deserialized() -> None:
    # after a seek past a refused record the broker answers from its batch's start: the refused record is
    # skipped, not deserialized again (it raised the deserializer's bare error past the seek)
    st = _fed(batch(0, [b"a", b"\xff", b"c"]), start=2, value_deserializer=_strict_utf8)
    assert [(r.offset, r.value) for r in st.drain(100)[TP0]] == [(2, "c")]
