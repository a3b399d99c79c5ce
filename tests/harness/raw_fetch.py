"""Read a partition back with plain Fetch requests, to check what a producer really wrote.

Independent of any consumer implementation: one akresil ``Connection`` (the transport under test elsewhere)
sends Fetch v4..v12 (topics by name) and the record batches are decoded by ``read_batches``, so a test sees
each batch's codec, producer id and base sequence along with the records.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from akresil.net.connection import Connection
from akresil.protocol.api import ApiKey
from akresil.protocol.records import RecordBatchView, read_batches

FETCH_MAX_VERSION = 12     # the last version naming topics (v13+ needs topic ids)


class FetchedRecord(NamedTuple):
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class FetchedBatch(NamedTuple):
    base_offset: int
    compression: str
    producer_id: int
    base_sequence: int
    timestamp_type: int
    records: tuple[FetchedRecord, ...]


def _batch(view: RecordBatchView) -> FetchedBatch:
    records = tuple(FetchedRecord(r.offset, r.timestamp, None if r.key is None else bytes(r.key),
                                  None if r.value is None else bytes(r.value),
                                  tuple((k, None if v is None else bytes(v)) for k, v in r.headers))
                    for r in view.records())
    return FetchedBatch(view.base_offset, view.compression, view.producer_id, view.base_sequence,
                        view.timestamp_type, records)


def _fetch_body(topic: str, partition: int, offset: int) -> dict[str, Any]:
    # min_bytes >= 1: Tansu answers min_bytes=0 with no partitions at all (DESIGN.md)
    return {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 8 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                 "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 4 << 20}]}]}


async def read_partition(bootstrap_servers: str, topic: str, partition: int, *, until_offset: int
                         ) -> list[FetchedBatch]:
    """Every batch of ``topic``/``partition`` from offset 0 up to (excluding) ``until_offset``."""
    host, _, port = bootstrap_servers.split(",")[0].rpartition(":")
    conn = await Connection.connect(host, int(port), client_id="e2e-raw-fetch")
    try:
        version = min(conn.versions[ApiKey.FETCH], FETCH_MAX_VERSION)
        out: list[FetchedBatch] = []
        offset = 0
        for _ in range(1000):
            if offset >= until_offset:
                return out
            response = await conn.request(ApiKey.FETCH, _fetch_body(topic, partition, offset), version=version)
            part = response["responses"][0]["partitions"][0]
            if part["error_code"]:
                raise AssertionError(f"Fetch {topic}-{partition}@{offset}: error {part['error_code']}")
            for view in read_batches(part["records"], check_crcs=True):
                if view.next_offset <= offset:
                    continue
                out.append(_batch(view))
                offset = view.next_offset
        raise AssertionError(f"Fetch {topic}-{partition}: stuck before offset {until_offset} (at {offset})")
    finally:
        await conn.close()


def records_of(batches: Sequence[FetchedBatch]) -> list[FetchedRecord]:
    return [r for b in batches for r in b.records]
