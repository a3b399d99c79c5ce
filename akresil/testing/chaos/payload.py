"""The soak's record values: ``b"<producer>.<partition>.<seq>|"`` padded to a size, so a record in the log names
who sent it and in which order; packed into one int (producer, seq) for the compact ledger."""

from __future__ import annotations

__all__ = ["decode_payload", "encode_payload"]

_SEQ_BITS = 40
MAX_PRODUCERS = 1 << 15


def encode_payload(producer: int, partition: int, seq: int, size: int = 0) -> bytes:
    """``b"<producer>.<partition>.<seq>|"`` padded with ``x`` to ``size`` bytes (shorter ids are not cut)."""
    head = b"%d.%d.%d|" % (producer, partition, seq)
    return head + b"x" * (size - len(head)) if size > len(head) else head


def decode_payload(value: bytes | None) -> tuple[int, int, int] | None:
    """(producer, partition, seq), or None for a value the soak did not write."""
    if not value:
        return None
    head, sep, _ = value.partition(b"|")
    parts = head.split(b".")
    if not sep or len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    producer, partition, seq = (int(p) for p in parts)
    if producer >= MAX_PRODUCERS or seq >= 1 << _SEQ_BITS:
        return None
    return producer, partition, seq


def pack(producer: int, seq: int) -> int:
    return producer << _SEQ_BITS | seq


def unpack(packed: int) -> tuple[int, int]:
    return packed >> _SEQ_BITS, packed & ((1 << _SEQ_BITS) - 1)
