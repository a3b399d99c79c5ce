"""The bench's client adapters: what each one calls on its client."""

from __future__ import annotations

from typing import Any

import pytest

from akresil import errors
from akresil.bench.clients import AkresilProducer, Settings
from akresil.core.batch import BulkCounts


class _CountingProducer:
    """Stands in for akresil's Producer: counted bulk calls only, the first one failing its last record."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    async def send_many_counted(self, topic: str, records: list[tuple[Any, bytes]]) -> BulkCounts:
        self.calls.append(len(records))
        counts = BulkCounts(records)
        counts.complete_range(topic, 0, range(len(records) - 1), 0, 0)
        if len(self.calls) == 1:
            counts.fail_range(range(len(records) - 1, len(records)), errors.KafkaTimeoutError("expired"))
        else:
            counts.complete_range(topic, 0, range(len(records) - 1, len(records)), len(records) - 1, 0)
        return counts

    async def send_many(self, *_args: object, **_kw: object) -> None:
        raise AssertionError("per-record metadata is not what the bench's bulk path measures")


async def test_akresil_bulk_produce_counts_and_raises_a_failed_record() -> None:
    adapter = AkresilProducer("127.0.0.1:9", "bench", Settings())
    fake = _CountingProducer()
    adapter._producer = fake  # type: ignore[assignment]
    with pytest.raises(errors.KafkaTimeoutError, match="expired"):
        await adapter.produce_bulk("t", b"v", 25_000)
    assert fake.calls == [10_000]
    await adapter.produce_bulk("t", b"v", 25_000)
    assert fake.calls == [10_000, 10_000, 10_000, 5_000]
