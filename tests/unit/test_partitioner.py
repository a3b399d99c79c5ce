"""Partitioner: Java-compatible murmur2 placement, explicit/custom precedence, KIP-794 stickiness."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from akresil.core.partitioner import (
    DefaultPartitioner,
    Partitioner,
    StickyPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)

# Apache Kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2
JAVA_MURMUR2_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


class ScriptedRandom(random.Random):
    """A Random whose 31-bit draws are scripted, to pin which partition a switch picks."""

    def __init__(self, draws: Sequence[int]) -> None:
        super().__init__(0)
        self.draws = list(draws)

    def getrandbits(self, k: int) -> int:
        assert k == 31
        return self.draws.pop(0)


# --------------------------------------------------------------------------- murmur2
@pytest.mark.parametrize(("data", "expected"), JAVA_MURMUR2_VECTORS)
def test_murmur2_matches_java_utils_test_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected
    assert murmur2(bytearray(data)) == expected
    assert murmur2(memoryview(data)) == expected


@given(st.binary(max_size=70))
def test_murmur2_agrees_with_kafka_python_port_for_every_tail_length(data: bytes) -> None:
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

    ours = murmur2(data)
    assert -(2**31) <= ours < 2**31
    assert ours & 0xFFFFFFFF == kafka_python_murmur2(bytearray(data)) & 0xFFFFFFFF


def test_to_positive_clears_the_sign_bit_like_java_not_abs() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5
    # "21" hashes negative: Java masks (1173551340), abs() would give 973932308
    assert to_positive(murmur2(b"21")) == 1173551340
    assert [partition_for_key(b"21", n) for n in (3, 7, 50)] == [
        1173551340 % 3,
        1173551340 % 7,
        1173551340 % 50,
    ]
    assert partition_for_key(b"21", 7) != 973932308 % 7


def test_partition_for_key_matches_java_for_vectors() -> None:
    for data, java_hash in JAVA_MURMUR2_VECTORS:
        for n in (1, 2, 3, 12, 50, 1000):
            assert partition_for_key(data, n) == (java_hash & 0x7FFFFFFF) % n
    assert partition_for_key(b"foobar", 50) == 16
    with pytest.raises(ValueError, match="num_partitions must be positive"):
        partition_for_key(b"k", 0)


# --------------------------------------------------------------------------- precedence
def test_explicit_partition_wins_over_key_and_is_range_checked() -> None:
    p = DefaultPartitioner()
    assert p.partition("t", b"foobar", 50, range(50), partition=3) == 3
    assert p.partition("t", b"foobar", 50, range(50)) == 16
    with pytest.raises(ValueError, match=r"partition 50 given for topic 't' is not in \[0, 50\)"):
        p.partition("t", b"k", 50, range(50), partition=50)
    with pytest.raises(ValueError, match="partition -1"):
        p.partition("t", None, 50, range(50), partition=-1)
    with pytest.raises(ValueError, match="has no partitions"):
        p.partition("t", b"k", 0, ())


def test_keyed_records_ignore_availability_like_java() -> None:
    p = DefaultPartitioner()
    # the key's partition (16) has no leader right now: Java still sends it there (it waits)
    assert p.partition("t", b"foobar", 50, [0, 1]) == 16


def test_custom_partitioner_decides_and_bad_results_are_rejected() -> None:
    calls: list[tuple[str, bytes | None, int, Sequence[int]]] = []

    def last_partition(
        topic: str, key: bytes | None, num_partitions: int, available: Sequence[int]
    ) -> int:
        calls.append((topic, key, num_partitions, available))
        return num_partitions - 1

    assert isinstance(last_partition, Partitioner)
    p = DefaultPartitioner(partitioner=last_partition)
    assert p.partition("orders", b"foobar", 5, [0, 4]) == 4
    assert p.partition("orders", None, 5, [0, 4]) == 4
    assert p.partition("orders", b"k", 5, [0, 4], partition=1) == 1  # explicit still wins
    assert calls == [("orders", b"foobar", 5, [0, 4]), ("orders", None, 5, [0, 4])]
    assert not p.uses_sticky(None)

    for bad in (5, -1, None, "1", True):
        q = DefaultPartitioner(partitioner=lambda *_a, _r=bad: _r)  # type: ignore[misc]
        with pytest.raises(ValueError, match="custom partitioner returned"):
            q.partition("orders", b"k", 5, [0])
    with pytest.raises(TypeError, match="partitioner must be callable"):
        DefaultPartitioner(partitioner=42)  # type: ignore[arg-type]


def test_key_cache_is_transparent_bounded_and_skips_mutable_keys() -> None:
    keys = [b"k%d" % i for i in range(10)]
    cached = DefaultPartitioner(key_cache_size=3)
    uncached = DefaultPartitioner(key_cache_size=0)
    for _ in range(2):
        for key in keys:
            assert cached.partition("t", key, 7, ()) == partition_for_key(key, 7)
            assert uncached.partition("t", key, 7, ()) == partition_for_key(key, 7)
    assert len(cached._cache) <= 3
    assert uncached._cache == {}
    assert cached.partition("t", bytearray(b"foobar"), 50, ()) == 16
    assert bytearray(b"foobar") not in [bytearray(k) for k in cached._cache]
    long_key = b"x" * 300
    assert cached.partition("t", long_key, 7, ()) == partition_for_key(long_key, 7)
    assert long_key not in cached._cache


# --------------------------------------------------------------------------- sticky (KIP-794)
def test_unkeyed_records_stick_until_batch_size_then_switch_on_full_batch() -> None:
    # draws: first pick -> available[1] = 2; next pick -> available[0] = 0
    p = DefaultPartitioner(batch_size=100, rng=ScriptedRandom([1, 3]))
    available = [0, 2, 4]
    assert p.uses_sticky(None)
    first = p.partition("t", None, 5, available)
    assert first == 2
    for _ in range(9):  # 90 bytes: below batch_size, no switch whatever the batch state
        assert not p.record_appended("t", first, 10, enable_switch=True)
        assert p.partition("t", None, 5, available) == 2
    assert p.record_appended("t", first, 10, enable_switch=True)  # 100 bytes and batch full
    assert p.partition("t", None, 5, available) == 0


def test_switch_waits_for_a_full_batch_but_not_beyond_twice_batch_size() -> None:
    p = StickyPartitioner(batch_size=100, rng=ScriptedRandom([0, 1]))
    assert p.current("t", 3, [0, 1, 2]) == 0
    switched = [p.record_appended("t", 0, 25, enable_switch=False) for _ in range(8)]
    assert switched == [False] * 7 + [True]  # forced at 200 bytes = 2 * batch_size
    assert p.current("t", 3, [0, 1, 2]) == 1


def test_stale_append_report_for_a_previous_partition_is_ignored() -> None:
    p = StickyPartitioner(batch_size=10, rng=ScriptedRandom([0, 1]))
    assert p.current("t", 2, [0, 1]) == 0
    assert p.record_appended("t", 0, 10)
    assert not p.record_appended("t", 0, 1000)  # reported after the switch to 1
    assert not p.record_appended("other", 0, 1000)  # topic never placed stickily
    assert p.current("t", 2, [0, 1]) == 1
    with pytest.raises(ValueError, match="appended_bytes"):
        p.record_appended("t", 1, -1)


def test_sticky_draws_only_available_partitions_and_all_when_none_is() -> None:
    p = StickyPartitioner(batch_size=1, rng=random.Random(7))
    seen: Counter[int] = Counter()
    for _ in range(3000):
        part = p.current("t", 8, [1, 6])
        seen[part] += 1
        p.record_appended("t", part, 1)
    assert set(seen) == {1, 6}
    assert min(seen.values()) > 1300  # uniform between the two

    q = StickyPartitioner(batch_size=1, rng=random.Random(7))
    everywhere: Counter[int] = Counter()
    for _ in range(4000):
        part = q.current("t", 8, [])
        everywhere[part] += 1
        q.record_appended("t", part, 1)
    assert set(everywhere) == set(range(8))
    assert min(everywhere.values()) > 350


def test_sticky_state_is_per_topic() -> None:
    p = DefaultPartitioner(batch_size=10, rng=ScriptedRandom([0, 3, 1]))
    assert p.partition("a", None, 4, range(4)) == 0
    assert p.partition("b", None, 4, range(4)) == 3
    assert p.record_appended("a", 0, 10)
    assert p.partition("a", None, 4, range(4)) == 1
    assert p.partition("b", None, 4, range(4)) == 3


def test_ignore_keys_places_keyed_records_stickily() -> None:
    p = DefaultPartitioner(ignore_keys=True, rng=ScriptedRandom([5]))
    assert p.uses_sticky(b"foobar")
    assert p.partition("t", b"foobar", 50, range(50)) == 5
    assert p.partition("t", b"other", 50, range(50)) == 5


def test_bad_sticky_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        StickyPartitioner(batch_size=0)
    p = StickyPartitioner(rng=ScriptedRandom([0]))
    with pytest.raises(ValueError, match="available partition 9 is outside"):
        p.current("t", 3, [9])


# --------------------------------------------------------------------------- adaptive
def test_adaptive_weights_follow_inverted_queue_sizes() -> None:
    # queue sizes 0 3 1 -> weights 4 1 3 -> cumulative 4 5 8: draws 0-3 -> p0, 4 -> p1, 5-7 -> p2
    draws = list(range(8))
    p = StickyPartitioner(batch_size=1, rng=ScriptedRandom(draws))
    p.update_load_stats("t", [0, 3, 1], [0, 1, 2], 3)
    chosen = [p.current("t", 3, [0, 1, 2])]
    while len(chosen) < len(draws):
        assert p.record_appended("t", chosen[-1], 1)  # each append of batch_size switches
        chosen.append(p.current("t", 3, [0, 1, 2]))
    assert chosen == [0, 0, 0, 0, 1, 2, 2, 2]


def test_adaptive_uses_partition_ids_and_falls_back_to_uniform() -> None:
    p = StickyPartitioner(batch_size=1, rng=ScriptedRandom([0, 1, 1]))
    # partition 1 has no leader and is excluded: ids 0 and 2 with sizes 2 and 0 -> weights 1 3
    p.update_load_stats("t", [2, 0], [0, 2], 3)
    assert p.current("t", 3, [0, 2]) == 0  # draw 0 -> slot 0
    p.record_appended("t", 0, 1)
    assert p.current("t", 3, [0, 2]) == 2  # draw 1 -> slot 1 (partition id 2)
    # equal queues over all partitions: back to uniform over available partitions
    p.update_load_stats("t", [4, 4, 4], [0, 1, 2], 3)
    p.record_appended("t", 2, 1)
    assert p.current("t", 3, [0, 2]) == 2  # uniform: available[1 % 2]


def test_adaptive_off_or_tiny_topics_ignore_load_stats() -> None:
    off = StickyPartitioner(batch_size=1, adaptive=False, rng=ScriptedRandom([1]))
    off.update_load_stats("t", [0, 9, 9], [0, 1, 2], 3)
    assert off.current("t", 3, [0, 1, 2]) == 1  # uniform, not weighted towards 0
    single = StickyPartitioner(batch_size=1, rng=ScriptedRandom([0]))
    single.update_load_stats("t", [3], [0], 1)
    assert single.current("t", 1, [0]) == 0
    with pytest.raises(ValueError, match="same length"):
        off.update_load_stats("t", [1, 2], [0], 3)
    with pytest.raises(ValueError, match="queue sizes must be >= 0"):
        single.update_load_stats("t", [1, -2], [0, 1], 3)


def test_batches_larger_than_javas_default_stick_for_16_kib_whatever_the_batch_state() -> None:
    """akresil's 256 KiB batches: the unit of stickiness stays Java's default batch.size (16 KiB), and the
    switch does not wait for a full batch (the batch keeps growing across visits)."""
    p = StickyPartitioner(batch_size=262_144, rng=ScriptedRandom([0, 2]))
    assert p.unit == 16_384
    assert p.current("t", 3, [0, 1, 2]) == 0
    switched = [p.record_appended("t", 0, 4096, enable_switch=False) for _ in range(4)]
    assert switched == [False, False, False, True]
    assert p.current("t", 3, [0, 1, 2]) == 2
    # at or below 16 KiB nothing changes: Java's rule (full batch, or twice the batch size)
    assert StickyPartitioner(batch_size=16_384).unit == 16_384
    assert StickyPartitioner(batch_size=1_000).unit == 1_000


def test_live_load_stats_are_read_at_each_switch() -> None:
    """The producer hands the partitioner its accumulator's queue sizes: a partition whose leader is slow or
    down (a long queue) gets fewer unkeyed records; equal queues draw uniformly again."""
    queues = {"sizes": [0, 5, 0]}
    reads: list[str] = []

    def stats(topic: str) -> tuple[list[int], list[int]]:
        reads.append(topic)
        return [0, 1, 2], queues["sizes"]

    # sizes 0 5 0 -> weights 6 1 6 -> cumulative 6 7 13: draw 6 -> p1, draws 0 and 12 -> p0 and p2
    p = StickyPartitioner(batch_size=1, rng=ScriptedRandom([0, 6, 12, 1]), load_stats=stats)
    assert p.current("t", 3, [0, 1, 2]) == 0 and reads == ["t"]
    p.record_appended("t", 0, 1)
    assert p.current("t", 3, [0, 1, 2]) == 1
    p.record_appended("t", 1, 1)
    assert p.current("t", 3, [0, 1, 2]) == 2
    queues["sizes"] = [2, 2, 2]
    p.record_appended("t", 2, 1)
    assert p.current("t", 3, [0, 1, 2]) == 1 and len(reads) == 4     # uniform: available[1 % 3]
    off = StickyPartitioner(batch_size=1, adaptive=False, rng=ScriptedRandom([0]), load_stats=stats)
    off.current("t", 3, [0, 1, 2])
    assert len(reads) == 4                                              # adaptive off: never read


# --------------------------------------------------------------------------- librdkafka cross-check
@pytest.mark.broker
def test_keyed_placement_matches_librdkafka_murmur2_random() -> None:
    """confluent-kafka's murmur2_random partitioner and ours put every key on the same partition."""
    from confluent_kafka import Producer

    from akresil.testing.rdkafka_mock import MockCluster

    rnd = random.Random(42)
    keys = [b"user-%d" % i for i in range(150)]
    keys += [rnd.randbytes(rnd.randrange(1, 64)) for _ in range(150)]
    keys += [b"\xff" * n for n in range(1, 9)] + [b""]  # empty key: hashed, not random
    with MockCluster(1) as cluster:
        for name, count in (("p7", 7), ("p13", 13), ("p64", 64)):
            cluster.create_topic(name, count)
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "partitioner": "murmur2_random",
                "linger.ms": 5,
                "log_level": 0,
            }
        )
        placed: dict[tuple[str, bytes], int] = {}

        def on_delivery(err: object, msg: object) -> None:
            assert err is None, err
            placed[(msg.topic(), msg.key())] = msg.partition()  # type: ignore[attr-defined]

        for topic in ("p7", "p13", "p64"):
            for key in keys:
                producer.produce(topic, b"v", key=key, on_delivery=on_delivery)
        assert producer.flush(15) == 0
        del producer  # destroyed while the cluster is still up: no reconnect attempts
    counts = {"p7": 7, "p13": 13, "p64": 64}
    assert len(placed) == 3 * len(set(keys))
    mismatches = [
        (topic, key, part)
        for (topic, key), part in placed.items()
        if partition_for_key(key, counts[topic]) != part
    ]
    assert mismatches == []
    assert len({part for (topic, _), part in placed.items() if topic == "p64"}) > 50
