"""The Python batch encoder (``record_encoder.PlainBatchEncoder``) writes the bytes aiokafka's C builder writes for
the same input, byte for byte, and ``records.BatchBuilder`` picks it per batch on the first record's size (never
for compressed batches or without google-crc32c's C extension)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from akresil.core.accumulator import RecordAccumulator
from akresil.core.batch import RECORD_BASE_ESTIMATE, BulkCompletion
from akresil.protocol import records
from akresil.protocol.record_encoder import PlainBatchEncoder, zigzag_varint
from akresil.protocol.records import BatchBuilder, read_batches
from akresil.types import TopicPartition

TS = 1_764_400_000_000
Rec = tuple[int, int, "bytes | None", "bytes | None", list[Any]]     # offset delta, timestamp, key, value, headers


def crc() -> Any:
    fast = records._hardware_crc32c()
    assert fast is not None         # google-crc32c's C extension is a dependency
    return fast


def c_builder(batch_size: int = 1 << 30, transactional: bool = False, state: tuple[int, int, int] = (-1, -1, -1)
              ) -> Any:
    return records._aiokafka().builder(2, 0, int(transactional), *state, max(batch_size, 61))


def py_builder(batch_size: int = 1 << 30, transactional: bool = False, state: tuple[int, int, int] = (-1, -1, -1)
               ) -> PlainBatchEncoder:
    return PlainBatchEncoder(crc(), transactional, *state, batch_size)


def fill(builder: Any, recs: list[Rec]) -> list[bool]:
    return [builder.append(*rec) is not None for rec in recs]


def both(recs: list[Rec], **kw: Any) -> tuple[bytes, bytes]:
    """The batch each encoder makes of ``recs``, after checking they took the same records."""
    c, p = c_builder(**kw), py_builder(**kw)
    assert fill(p, recs) == fill(c, recs)
    assert p.size() == c.size()
    return bytes(c.build()), p.build()


def decode(blob: bytes) -> list[tuple[int, int, bytes | None, bytes | None, list[Any]]]:
    [view] = read_batches(blob, check_crcs=True)
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in view.records()]


def test_zigzag_varints() -> None:
    assert [zigzag_varint(n) for n in (0, -1, 1, 63, -64, 64, 8191, -8193, 2**31 - 1)] == [
        b"\x00", b"\x01", b"\x02", b"\x7e", b"\x7f", b"\x80\x01", b"\xfe\x7f", b"\x81\x80\x01", b"\xfe\xff\xff\xff\x0f"]


HEADERS: list[list[Any]] = [[], [("a", b"1")], [("trace", b"x" * 300), ("empty", b""), ("none", None), ("é", b"\xff")]]


@pytest.mark.parametrize("key", [None, b"", b"k", b"K" * 200, b"L" * 9000])
@pytest.mark.parametrize("value", [None, b"", b"v" * 1000, b"W" * 20_000])
@pytest.mark.parametrize("headers", HEADERS, ids=["no-headers", "one", "several"])
def test_same_bytes_as_aiokafka_for_keys_values_and_headers(key: bytes | None, value: bytes | None,
                                                            headers: list[Any]) -> None:
    recs: list[Rec] = [(i, TS + i, key, value, headers) for i in range(3)]
    c, p = both(recs)
    assert p == c
    assert decode(p) == [(i, TS + i, key, value, headers) for i in range(3)]


@pytest.mark.parametrize("deltas", [[0, 0, 0], [0, 63, 64, 1023, 1024, 8191, 8192, 10**7, 2**40], [0, -1, -64, -8193, -10**9, 5],
                                    [5, 3, 9, 1]], ids=["zero", "large", "negative", "unordered"])
def test_same_bytes_as_aiokafka_for_timestamp_deltas(deltas: list[int]) -> None:
    recs: list[Rec] = [(i, TS + d, b"k", b"v" * 700, []) for i, d in enumerate(deltas)]
    c, p = both(recs)
    assert p == c
    [view] = read_batches(p)
    assert (view.first_timestamp, view.max_timestamp) == (TS + deltas[0], TS + max(deltas))
    assert [r[1] for r in decode(p)] == [TS + d for d in deltas]


def test_same_bytes_as_aiokafka_past_one_and_two_byte_offset_deltas() -> None:
    recs: list[Rec] = [(i, TS, None, b"%d" % i, []) for i in range(8300)]     # offset deltas 64 and 8192 and on
    c, p = both(recs)
    assert p == c
    assert [r[0] for r in decode(p)] == list(range(8300))


@pytest.mark.parametrize("transactional", [False, True])
@pytest.mark.parametrize("state", [(-1, -1, -1), (0, 0, 0), (2**40, 7, 2**31 - 1)])
def test_same_bytes_as_aiokafka_for_producer_state_and_transactional_flag(transactional: bool,
                                                                          state: tuple[int, int, int]) -> None:
    recs: list[Rec] = [(i, TS, b"k", b"v" * 900, [("h", None)]) for i in range(4)]
    c, p = both(recs, transactional=transactional, state=state)
    assert p == c
    [view] = read_batches(p, check_crcs=True)
    assert (view.producer_id, view.producer_epoch, view.base_sequence, view.is_transactional) == \
        (*state, transactional)


def test_producer_state_set_before_and_after_build_through_batch_builder() -> None:
    def make(python: bool) -> bytes:
        b = BatchBuilder(transactional=True, first_record_bytes=1001 if python else 0)
        b.set_producer_state(11, 1, 5)           # before the first record
        for i in range(3):
            assert b.append_at(i, TS, b"k", b"v" * 1000, []) is not None
        assert b.encoder == ("python" if python else "aiokafka")
        b.set_producer_state(12, 2, 6)           # before build
        first = bytes(b.build())
        assert read_batches(first).__next__().producer_id == 12
        b.set_producer_state(13, 3, 7)           # after build: re-stamped
        return first + bytes(b.build())

    assert make(True) == make(False)


def full_sizes() -> tuple[int, int]:
    """Batch sizes after one and two of the records ``test_exactly_full`` appends."""
    c = c_builder()
    c.append(0, TS, b"k", b"v" * 1000, [])
    one = c.size()
    c.append(1, TS, b"k", b"v" * 1000, [])
    return one, c.size()


@pytest.mark.parametrize("slack", [-1, 0, 1, 2])
def test_a_batch_exactly_full_or_a_byte_over_takes_what_aiokafka_takes(slack: int) -> None:
    _, two = full_sizes()
    recs: list[Rec] = [(i, TS, b"k", b"v" * 1000, []) for i in range(3)]
    c, p = c_builder(two + slack), py_builder(two + slack)
    took = fill(p, recs)
    assert took == fill(c, recs)
    # aiokafka's C builder takes a record only if the batch stays below batch_size
    assert took == [True, slack > 0, False]
    assert p.build() == bytes(c.build())


def test_the_first_record_is_always_taken_even_above_batch_size() -> None:
    recs: list[Rec] = [(0, TS, b"k", b"v" * 5000, []), (1, TS, None, b"x", [])]
    c, p = both(recs, batch_size=100)
    assert p == c
    assert len(decode(p)) == 1
    assert both([(0, TS, None, b"v" * 5000, [])], batch_size=0)[1] == both([(0, TS, None, b"v" * 5000, [])])[0]


def test_random_batches_are_the_same_bytes_as_aiokafka() -> None:
    rng = random.Random(35)
    for _ in range(300):
        batch_size = rng.choice([0, 200, 4000, 16_384, 1 << 30])
        state = (rng.choice([-1, 3]), rng.choice([-1, 0]), rng.choice([-1, 40]))
        start = rng.choice([0, 100, 9000]) if batch_size == 1 << 30 else 0    # aiokafka: offset 0 is "the first"
        recs: list[Rec] = [(start + i, TS + rng.choice([0, 1, -3, 20_000]),
                            rng.choice([None, b"", b"k" * rng.randrange(100)]),
                            rng.choice([None, b"", b"v" * rng.randrange(3000)]), rng.choice(HEADERS))
                           for i in range(rng.randrange(1, 40))]
        c, p = both(recs, batch_size=batch_size, transactional=rng.random() < 0.5, state=state)
        assert p == c


def run_both(recs: list[tuple[bytes | None, bytes | None]], headers: list[Any], budget: int, batch_size: int
             ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    out = []
    for python in (False, True):
        b = BatchBuilder(batch_size=batch_size, first_record_bytes=1 << 40 if python else 0, bulk=True)
        first = b.append_run(recs, 1, 0, TS, headers, budget, RECORD_BASE_ESTIMATE, len(recs) - 1)
        assert b.encoder == ("python" if python else "aiokafka")
        more = b.append_run(recs, 1 + first[0], first[0], TS + 5, headers, budget, RECORD_BASE_ESTIMATE) \
            if not first[2] else (0, 0, False)
        out.append((first, more, bytes(b.build())))
    return out[0], out[1]


@pytest.mark.parametrize("headers", HEADERS, ids=["no-headers", "one", "several"])
@pytest.mark.parametrize("budget", [1 << 40, 3000])
@pytest.mark.parametrize("batch_size", [0, 5000, 16_384, 1 << 30])
def test_append_run_takes_and_writes_what_the_aiokafka_loop_does(headers: list[Any], budget: int, batch_size: int
                                                                 ) -> None:
    rng = random.Random(batch_size + budget)
    recs = [(rng.choice([None, b"k%d" % i]), rng.choice([None, b"v" * rng.randrange(2000)])) for i in range(40)]
    c, p = run_both(recs, headers, budget, batch_size)
    assert p == c


def test_append_run_past_multi_byte_offsets_and_lengths() -> None:
    recs: list[tuple[bytes | None, bytes | None]] = [(None, b"%d" % i) for i in range(8300)] + [(b"k", b"x" * 9000)]
    c, p = run_both(recs, [], 1 << 40, 1 << 30)
    assert p == c


@pytest.mark.parametrize("size, single, run", [(767, "aiokafka", "python"), (768, "python", "python"),
                                               (383, "aiokafka", "aiokafka"), (384, "aiokafka", "python")])
def test_the_encoder_is_chosen_on_the_first_record_size(size: int, single: str, run: str) -> None:
    b = BatchBuilder(first_record_bytes=size)
    assert b.encoder == single
    assert b.append_at(0, TS, b"k", b"v" * (size - 1), []) is not None
    assert b.append_at(1, TS, None, b"", []) is not None
    r = BatchBuilder(first_record_bytes=size, bulk=True)
    assert r.encoder == run
    r.append_run([(b"k", b"v" * (size - 1)), (None, b"")], 0, 0, TS, [], 1 << 40, RECORD_BASE_ESTIMATE)
    assert bytes(b.build()) == bytes(r.build())


def test_compressed_batches_and_no_hardware_crc_stay_with_aiokafka(monkeypatch: pytest.MonkeyPatch) -> None:
    big = b"v" * 4000
    gz = BatchBuilder(compression_type="gzip", first_record_bytes=len(big))
    assert gz.encoder == "aiokafka"
    gz.append(TS, None, big)
    assert next(read_batches(gz.build(), check_crcs=True)).compression == "gzip"
    assert BatchBuilder(first_record_bytes=len(big)).encoder == "python"
    monkeypatch.setattr(records, "_hardware_crc32c", lambda: None)       # google-crc32c's C extension missing
    records._python_encoder.cache_clear()
    try:
        plain = BatchBuilder(first_record_bytes=len(big))
        assert plain.encoder == "aiokafka"
        assert plain.append(TS, None, big)
    finally:
        monkeypatch.undo()
        records._python_encoder.cache_clear()       # the next test looks again, with the extension


def test_an_empty_batch_builds_as_aiokafka_does() -> None:
    assert bytes(BatchBuilder().build()) == bytes(c_builder(16_384).build())


def test_append_rejects_what_is_not_bytes() -> None:
    with pytest.raises(TypeError, match="record value must be bytes"):
        BatchBuilder().append(TS, None, "text")      # type: ignore[arg-type]
    with pytest.raises(TypeError, match="timestamp must be an int"):
        py_builder().append(0, float(TS), None, b"v", [])   # type: ignore[arg-type]


def test_the_accumulator_chooses_on_the_record_that_opens_the_batch() -> None:
    """One record of 400 B alone: aiokafka's builder; 400 B records in ``append_many``: the Python encoder; 100 B:
    aiokafka's either way."""
    def encoder_of(value: bytes, bulk: bool) -> str:
        tp = TopicPartition("t", 0)
        acc = RecordAccumulator(linger_ms=5, delivery_timeout_ms=10_000, request_timeout_ms=500, rng=random.Random(0))
        if bulk:
            recs: list[tuple[bytes | None, bytes | None]] = [(None, value)] * 3
            acc.append_many(tp, recs, range(3), 0, TS, [], BulkCompletion(recs), now=0)
        else:
            acc.append(tp, TS, None, value, [], None, now=0)
        [batch] = acc.drain(10, sendable={1}, leader_of={tp: (1, 3)}.get).batches[1]
        assert [r[3] for r in decode(batch.payload.build())] == [value] * (3 if bulk else 1)
        encoder: str = batch.payload.encoder
        return encoder

    assert [encoder_of(b"v" * 400, False), encoder_of(b"v" * 400, True)] == ["aiokafka", "python"]
    assert [encoder_of(b"v" * 100, False), encoder_of(b"v" * 100, True)] == ["aiokafka", "aiokafka"]


def test_the_producer_batches_1_kib_records_with_the_python_encoder_and_splits_them() -> None:
    """Through the accumulator: records appended one by one and by ``append_many`` land in Python-encoded batches
    that decode to what was sent, and a split (MESSAGE_TOO_LARGE) re-encodes them in order."""
    tp = TopicPartition("t", 0)
    acc = RecordAccumulator(linger_ms=5, delivery_timeout_ms=10_000, request_timeout_ms=500, batch_size=1_000_000,
                            rng=random.Random(0))
    sent = [(TS + i, b"k%d" % i, bytes([i]) * 1024, [("h", b"%d" % i)]) for i in range(10)]
    for ts, key, value, headers in sent:
        assert acc.append(tp, ts, key, value, headers, None, now=0).appended
    bulk: list[tuple[bytes | None, bytes | None]] = [(None, b"b" * 1024) for _ in range(10)]
    acc.append_many(tp, bulk, range(10), 0, TS + 50, [], BulkCompletion(bulk), now=0)
    [batch] = acc.drain(10, sendable={1}, leader_of={tp: (1, 3)}.get).batches[1]
    assert batch.payload.encoder == "python"
    expected = [(i, *rec) for i, rec in enumerate(sent)] + [(10 + i, TS + 50, None, b"b" * 1024, []) for i in range(10)]
    assert decode(batch.payload.build()) == expected
    pieces = acc.split(batch, now=20)
    assert len(pieces) >= 2 and all(p.payload.encoder == "python" for p in pieces)
    assert [r[1:] for p in pieces for r in decode(p.payload.build())] == [r[1:] for r in expected]


@pytest.mark.parametrize("slack", [-1, 0, 1, 2])
def test_append_run_exactly_full_or_a_byte_over_takes_what_aiokafka_takes(slack: int) -> None:
    _, two = full_sizes()
    recs: list[tuple[bytes | None, bytes | None]] = [(b"k", b"v" * 1000)] * 3
    taken = []
    for python in (False, True):
        b = BatchBuilder(batch_size=two + slack, first_record_bytes=1001 if python else 0, bulk=True)
        assert b.encoder == ("python" if python else "aiokafka")
        taken.append((b.append_run(recs, 0, 0, TS, [], 1 << 40, RECORD_BASE_ESTIMATE), bytes(b.build())))
    assert taken[0] == taken[1]
    assert taken[1][0][0] == (2 if slack > 0 else 1) and taken[1][0][2]
