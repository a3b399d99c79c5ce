"""Partition choice, byte-compatible with the Java client's built-in partitioner.

Which partition a record goes to, in the order Java's ``KafkaProducer.partition`` decides it:

1. an explicit ``partition`` wins (it must exist: ``0 <= partition < num_partitions``);
2. otherwise a custom :class:`Partitioner`, if configured, decides (same range check);
3. otherwise a non-null key (unless ``ignore_keys``, Java's ``partitioner.ignore.keys``) goes to
   ``to_positive(murmur2(key)) % num_partitions`` over *all* partitions, available or not, so a key
   lands where the Java client and librdkafka's ``murmur2_random`` put it;
4. otherwise the record is *sticky* (:class:`StickyPartitioner`).

Sticky behaviour implemented: Java 3.3+'s ``BuiltInPartitioner`` (KIP-794, which replaced
KIP-480's "switch when a new batch is created"). Unkeyed records of a topic all go to one partition
until ``batch_size`` bytes were appended to it *and* the caller says the partition's last batch is
full (``enable_switch``), or unconditionally once ``2 * batch_size`` bytes were appended; then a
new partition is drawn. The draw is uniform over the partitions that have a leader (all partitions
if none has), or, with adaptive partitioning on (Java's default) and queue-size statistics fed in
through :meth:`StickyPartitioner.update_load_stats` (or read live from a ``load_stats`` source),
weighted towards partitions whose queues are shorter. Like Java, a draw may pick the partition it is
leaving. librdkafka differs here: it switches on a timer (``sticky.partitioning.linger.ms``); only
keyed placement is shared.

One deliberate difference: the unit of stickiness is ``min(batch_size, 16 KiB)`` (Java's default
``batch.size``), not ``batch_size`` itself. akresil's batches default to 256 KiB for throughput
(docs/architecture.md); sticking to one partition for a whole 256 KiB would leave the other
partitions, and the brokers leading them, idle for seconds at moderate rates. With a unit smaller
than the batch, a partition's open batch keeps growing across visits until it is full or lingered,
so batches stay large while records spread; the switch then ignores whether the batch is full.

Everything is sans-IO and single-threaded: randomness comes from an injectable ``random.Random``.
"""

from __future__ import annotations

import random
import struct
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

__all__ = [
    "DefaultPartitioner",
    "MURMUR2_M",
    "MURMUR2_SEED",
    "Partitioner",
    "StickyPartitioner",
    "murmur2",
    "partition_for_key",
    "to_positive",
]

#: Kafka's murmur2 is Austin Appleby's 32-bit MurmurHash2 with this seed, over the key bytes.
MURMUR2_SEED = 0x9747B28C
#: murmur2's multiplier m (its shift r is 24); written inline in ``murmur2`` for speed
MURMUR2_M = 0x5BD1E995
_POSITIVE31 = 0x7FFFFFFF
#: Java's default ``batch.size``: the largest unit of stickiness (see the module docstring)
STICKY_UNIT_MAX = 16384

#: ``load_stats(topic)`` -> (partition ids, their queue sizes) or None: the adaptive statistics, read at a switch
LoadStats = Callable[[str], "tuple[Sequence[int], Sequence[int]] | None"]

# One compiled little-endian "n uint32" unpacker per block count: unpacking all blocks in one C
# call is the cheapest way to read them (measured ~10% faster than per-block reads).
_Unpack = Callable[[bytes | bytearray | memoryview], tuple[int, ...]]
_block_unpackers: dict[int, _Unpack] = {}


def _unpacker(blocks: int) -> _Unpack:
    fn = _block_unpackers.get(blocks)
    if fn is None:
        fn = struct.Struct(f"<{blocks}I").unpack_from
        if len(_block_unpackers) < 4096:  # keys are rarely longer than 16 KiB; bound the table
            _block_unpackers[blocks] = fn
    return fn


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2``: the hash as a signed 32-bit int, exactly as Java returns it."""
    # Hot path: m (MURMUR2_M) and the 32-bit mask are literals because a constant load is cheaper
    # than a global lookup (~10% faster measured); Python ints are unbounded, so every product is
    # masked back to 32 bits, and the sign is applied only at the end.
    length = len(data)
    h = MURMUR2_SEED ^ length
    blocks = length >> 2
    if blocks:
        for k in _unpacker(blocks)(data):
            k = (k * 0x5BD1E995) & 0xFFFFFFFF
            h = ((h * 0x5BD1E995) ^ (((k ^ (k >> 24)) * 0x5BD1E995) & 0xFFFFFFFF)) & 0xFFFFFFFF
    rest = length & 3
    if rest:
        # the 1-3 trailing bytes are folded in little-endian, then mixed once
        tail = blocks << 2
        if rest == 3:
            h ^= data[tail] | (data[tail + 1] << 8) | (data[tail + 2] << 16)
        elif rest == 2:
            h ^= data[tail] | (data[tail + 1] << 8)
        else:
            h ^= data[tail]
        h = (h * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows on MIN_VALUE)."""
    return number & _POSITIVE31


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """Java's ``BuiltInPartitioner.partitionForKey``: ``to_positive(murmur2(key)) % n``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (murmur2(key) & _POSITIVE31) % num_partitions


def check_partition(partition: object) -> None:
    """An explicit partition must be an int >= 0 (as Java's ``ProducerRecord``); the error names the argument."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(f"partition must be an int or None, got {type(partition).__name__} {partition!r}")
    if partition < 0:
        raise ValueError(f"partition {partition} is negative: it must be >= 0 or None")


@runtime_checkable
class Partitioner(Protocol):
    """A custom partitioner (Java's ``partitioner.class``).

    Called for every record without an explicit partition with the topic, the serialized key
    (``None`` for a null key), the topic's partition count and the ids of partitions that currently
    have a leader (possibly empty while metadata is incomplete). Must return a partition id in
    ``[0, num_partitions)``; anything else fails the record with ``ValueError``. Keep it fast and
    side-effect free: it runs on the producer's hot path, inside the event loop.
    """

    def __call__(
        self,
        topic: str,
        key: bytes | None,
        num_partitions: int,
        available_partitions: Sequence[int],
    ) -> int: ...


class _StickyTopic:
    """Sticky state of one topic: the partition unkeyed records go to and what they appended."""

    __slots__ = ("partition", "produced_bytes", "num_partitions", "available", "cft", "cft_ids")

    def __init__(self) -> None:
        self.partition = -1  # -1: none chosen yet
        self.produced_bytes = 0
        self.num_partitions = 0
        self.available: Sequence[int] = ()
        # adaptive statistics: cumulative frequency table and the partition id of each slot
        self.cft: list[int] | None = None
        self.cft_ids: list[int] = []


class StickyPartitioner:
    """KIP-794 sticky placement of unkeyed records, per topic (Java's ``BuiltInPartitioner``).

    The caller (the accumulator) asks :meth:`current` where an unkeyed record goes, appends it,
    then reports :meth:`record_appended` with the bytes the append added to the batch and whether
    the partition's last batch is now full (Java passes "all batches of the partition are full",
    i.e. the deque is empty or its last batch is full). Switching only at a full batch keeps a
    high ``linger_ms`` from cutting batches into odd fractions; the ``2 * unit`` cap bounds
    how long a partition can keep the stickiness when batches never fill. ``unit`` is
    ``min(batch_size, 16 KiB)``: above Java's default batch size the switch comes after one unit
    whatever the batch state (module docstring).
    """

    def __init__(
        self,
        batch_size: int = 16384,
        *,
        adaptive: bool = True,
        rng: random.Random | None = None,
        load_stats: LoadStats | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.batch_size = batch_size
        #: bytes a partition takes before the next draw; below batch_size a full batch is not waited for
        self.unit = min(batch_size, STICKY_UNIT_MAX)
        self._switch_any_batch = self.unit < batch_size
        self.adaptive = adaptive
        self._rng = rng if rng is not None else random.Random()
        self._topics: dict[str, _StickyTopic] = {}
        #: live queue sizes (the accumulator's), read at every switch when adaptive
        self._load_stats = load_stats

    def current(self, topic: str, num_partitions: int, available_partitions: Sequence[int]) -> int:
        """The partition the next unkeyed record of ``topic`` goes to (drawn on first use)."""
        state = self._topics.get(topic)
        if state is None:
            state = self._topics[topic] = _StickyTopic()
        state.num_partitions = num_partitions
        state.available = available_partitions
        if state.partition < 0 or state.partition >= num_partitions:
            self._switch(topic, state)
        return state.partition

    def record_appended(
        self, topic: str, partition: int, appended_bytes: int, *, enable_switch: bool = True
    ) -> bool:
        """Account ``appended_bytes`` for a sticky record; returns True if the topic switched.

        A report for a partition that is not the topic's current sticky one is ignored (the
        record was placed before a switch), as Java ignores a stale ``StickyPartitionInfo``.
        """
        state = self._topics.get(topic)
        if state is None or partition != state.partition:
            return False
        if appended_bytes < 0:
            raise ValueError(f"appended_bytes must be >= 0, got {appended_bytes}")
        produced = state.produced_bytes + appended_bytes
        state.produced_bytes = produced
        unit = self.unit
        if produced >= unit and (enable_switch or self._switch_any_batch) or produced >= 2 * unit:
            self._switch(topic, state)
            return True
        return False

    def update_load_stats(
        self,
        topic: str,
        queue_sizes: Sequence[int],
        partition_ids: Sequence[int],
        num_partitions: int,
    ) -> None:
        """Feed per-partition queue lengths (batches waiting) for adaptive partitioning.

        ``partition_ids[i]`` has ``queue_sizes[i]`` batches queued; partitions without a leader
        (or excluded for latency) are left out. A partition's weight is ``max + 1 - size``, so
        the longest queue still gets weight 1. Equal sizes over all partitions, fewer than two
        partitions in the topic, adaptive off or an empty list clear the statistics (uniform).
        """
        if len(queue_sizes) != len(partition_ids):
            raise ValueError(
                f"queue_sizes ({len(queue_sizes)}) and partition_ids ({len(partition_ids)}) "
                "must have the same length"
            )
        state = self._topics.get(topic)
        if state is None:
            state = self._topics[topic] = _StickyTopic()
        if not self.adaptive or not queue_sizes or num_partitions < 2:
            state.cft = None
            return
        if min(queue_sizes) < 0:
            raise ValueError(f"queue sizes must be >= 0, got {list(queue_sizes)}")
        biggest = max(queue_sizes)
        if len(queue_sizes) == num_partitions and min(queue_sizes) == biggest:
            state.cft = None
            return
        running = 0
        cft = []
        for size in queue_sizes:
            running += biggest + 1 - size
            cft.append(running)
        state.cft = cft
        state.cft_ids = list(partition_ids)

    def _switch(self, topic: str, state: _StickyTopic) -> None:
        if self._load_stats is not None and self.adaptive:
            stats = self._load_stats(topic)
            if stats is None:
                state.cft = None
            else:
                ids, sizes = stats
                self.update_load_stats(topic, sizes, ids, state.num_partitions)
        state.partition = self._next_partition(topic, state)
        state.produced_bytes = 0

    def _next_partition(self, topic: str, state: _StickyTopic) -> int:
        if state.num_partitions <= 0:
            raise ValueError(f"topic {topic!r}: num_partitions must be positive, got {state.num_partitions}")
        draw = self._rng.getrandbits(31)  # Java: toPositive(random int)
        cft = state.cft
        if cft is not None:
            # first slot whose cumulative weight is strictly greater than the draw
            return state.cft_ids[bisect_right(cft, draw % cft[-1])]
        available = state.available
        if available:
            chosen = available[draw % len(available)]
            if not 0 <= chosen < state.num_partitions:
                raise ValueError(
                    f"topic {topic!r}: available partition {chosen} is outside "
                    f"[0, {state.num_partitions})"
                )
            return chosen
        return draw % state.num_partitions


class DefaultPartitioner:
    """The producer's partition choice: explicit > custom > key hash > sticky (module docstring).

    ``key_cache_size`` bounds a cache of ``to_positive(murmur2(key))`` per key bytes: pure-Python
    murmur2 costs ~1.5 us for a 10-byte key here, a cache hit ~0.15 us, and producers often reuse
    keys (entity ids). The cache is cleared when full; 0 disables it. Only ``bytes`` keys of at
    most ``key_cache_max_len`` bytes are cached (bytearray is mutable, long keys would pin memory).
    """

    def __init__(
        self,
        batch_size: int = 16384,
        *,
        partitioner: Partitioner | None = None,
        ignore_keys: bool = False,
        adaptive: bool = True,
        rng: random.Random | None = None,
        key_cache_size: int = 65536,
        key_cache_max_len: int = 256,
        load_stats: LoadStats | None = None,
    ) -> None:
        if partitioner is not None and not callable(partitioner):
            raise TypeError(f"partitioner must be callable, got {type(partitioner).__name__}")
        if key_cache_size < 0 or key_cache_max_len < 0:
            raise ValueError("key_cache_size and key_cache_max_len must be >= 0")
        self.custom = partitioner
        self.ignore_keys = ignore_keys
        self.sticky = StickyPartitioner(batch_size, adaptive=adaptive, rng=rng, load_stats=load_stats)
        self._cache: dict[bytes, int] = {}
        self._cache_size = key_cache_size
        self._cache_max_len = key_cache_max_len

    def key_hash(self, key: bytes | bytearray | memoryview) -> int:
        """``to_positive(murmur2(key))``, through the bounded per-key cache."""
        if type(key) is bytes and len(key) <= self._cache_max_len:
            cache = self._cache
            h = cache.get(key)
            if h is None:
                h = murmur2(key) & _POSITIVE31
                if self._cache_size:
                    if len(cache) >= self._cache_size:
                        cache.clear()
                    cache[key] = h
            return h
        return murmur2(key) & _POSITIVE31

    def uses_sticky(self, key: bytes | None, partition: int | None = None) -> bool:
        """Whether :meth:`partition` places such a record stickily (then report its append)."""
        return partition is None and self.custom is None and (key is None or self.ignore_keys)

    def partition(
        self,
        topic: str,
        key: bytes | None,
        num_partitions: int,
        available_partitions: Sequence[int],
        partition: int | None = None,
    ) -> int:
        """Partition for one record; raises ``ValueError`` naming a bad explicit/custom choice."""
        if num_partitions <= 0:
            raise ValueError(f"topic {topic!r} has no partitions (num_partitions={num_partitions})")
        if partition is not None:
            check_partition(partition)
            if partition >= num_partitions:
                raise ValueError(
                    f"partition {partition} given for topic {topic!r} is not in [0, {num_partitions})"
                )
            return partition
        custom = self.custom
        if custom is not None:
            chosen = custom(topic, key, num_partitions, available_partitions)
            if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < num_partitions:
                raise ValueError(
                    f"custom partitioner returned {chosen!r} for topic {topic!r}; "
                    f"expected an int in [0, {num_partitions})"
                )
            return chosen
        if key is not None and not self.ignore_keys:
            return self.key_hash(key) % num_partitions
        return self.sticky.current(topic, num_partitions, available_partitions)

    def group(
        self,
        topic: str,
        keys: Sequence[bytes | None],
        num_partitions: int,
        available_partitions: Sequence[int],
    ) -> tuple[dict[int, list[int]], list[int]]:
        """Place many records at once (the bulk path): positions per partition, plus the positions of
        records left to the sticky partitioner (null keys, or every key with ``ignore_keys``).

        Same choice as :meth:`partition` per record, without a call per record for keyed placement:
        the key hash goes through the same bounded cache, inlined.
        """
        if num_partitions <= 0:
            raise ValueError(f"topic {topic!r} has no partitions (num_partitions={num_partitions})")
        groups: dict[int, list[int]] = {}
        unkeyed: list[int] = []
        custom = self.custom
        if custom is not None:
            for i, key in enumerate(keys):
                p = self.partition(topic, key, num_partitions, available_partitions)
                positions = groups.get(p)
                if positions is None:
                    groups[p] = [i]
                else:
                    positions.append(i)
            return groups, unkeyed
        if self.ignore_keys:
            return groups, list(range(len(keys)))
        cache = self._cache
        cache_get = cache.get
        cache_max_len = self._cache_max_len
        for i, key in enumerate(keys):
            if key is None:
                unkeyed.append(i)
                continue
            h = cache_get(key) if key.__class__ is bytes and len(key) <= cache_max_len else None
            if h is None:
                h = self.key_hash(key)
            p = h % num_partitions
            positions = groups.get(p)
            if positions is None:
                groups[p] = [i]
            else:
                positions.append(i)
        return groups, unkeyed

    def record_appended(
        self, topic: str, partition: int, appended_bytes: int, *, enable_switch: bool = True
    ) -> bool:
        """Report a sticky record's append (see :meth:`StickyPartitioner.record_appended`)."""
        return self.sticky.record_appended(
            topic, partition, appended_bytes, enable_switch=enable_switch
        )

    def update_load_stats(
        self,
        topic: str,
        queue_sizes: Sequence[int],
        partition_ids: Sequence[int],
        num_partitions: int,
    ) -> None:
        """Feed queue sizes for adaptive sticky placement (see :class:`StickyPartitioner`)."""
        self.sticky.update_load_stats(topic, queue_sizes, partition_ids, num_partitions)
