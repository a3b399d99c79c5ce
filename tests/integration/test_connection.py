"""akresil's raw Connection against the embedded Tansu broker: negotiation, Metadata, CreateTopics, Produce, Fetch."""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from akresil import errors
from akresil.net.connection import Connection
from akresil.protocol.api import CLIENT_VERSIONS, ApiKey
from akresil.testing import EmbeddedBroker

pytestmark = pytest.mark.broker

BACKENDS = ["asyncio", "trio"]


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def connect(broker: EmbeddedBroker, **kwargs: Any) -> Connection:
    return await Connection.connect(broker.host, broker.port, client_id="akresil-it", node_id=-1, **kwargs)


async def topic_metadata(conn: Connection, topic: str) -> dict[str, Any]:
    """Metadata naming ``topic`` once the broker knows it: Apache Kafka answers UNKNOWN_TOPIC_OR_PARTITION for a
    moment after CreateTopics returns (the new topic reaches the broker's metadata asynchronously), as clients
    see and retry; Tansu knows it at once."""
    with anyio.fail_after(15):
        while True:
            metadata = await conn.request(ApiKey.METADATA, {
                "topics": [{"name": topic, "topic_id": bytes(16)}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False})
            (meta,) = metadata["topics"]
            if meta["error_code"] != errors.UnknownTopicOrPartitionError.errno:
                return metadata
            await anyio.sleep(0.05)


def record_batch(values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    now_ms = int(time.time() * 1000)
    for i, value in enumerate(values):
        builder.append(i, timestamp=now_ms, key=b"k%d" % i, value=value, headers=[("h", b"v%d" % i)])
    return bytes(builder.build())


@pytest.mark.parametrize("backend", BACKENDS)
def test_api_versions_negotiation(broker: EmbeddedBroker, backend: str) -> None:
    async def body() -> None:
        async with await connect(broker) as conn:
            # the broker's advertised ranges (Tansu's: DESIGN.md); akresil picks the highest common version.
            assert conn.api_ranges[ApiKey.PRODUCE][1] >= 11
            for api in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA):
                assert conn.versions[api] == min(CLIENT_VERSIONS[api][1], conn.api_ranges[api][1]), api
            assert conn.versions[ApiKey.API_VERSIONS] <= 4

    anyio.run(body, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_create_topic_metadata_produce_fetch_round_trip(broker: EmbeddedBroker, backend: str) -> None:
    topic = unique_topic("conn-rt")
    values = [b"value-%d" % i * 3 for i in range(5)]

    async def body() -> None:
        async with await connect(broker) as conn:
            created = await conn.request(ApiKey.CREATE_TOPICS, {
                "topics": [{"name": topic, "num_partitions": 2, "replication_factor": 1, "assignments": [],
                            "configs": []}],
                "timeout_ms": 10_000, "validate_only": False})
            assert [(t["name"], t["error_code"]) for t in created["topics"]] == [(topic, 0)]

            metadata = await topic_metadata(conn, topic)
            assert metadata["brokers"] and metadata["brokers"][0]["port"] == broker.port
            (meta,) = metadata["topics"]
            assert meta["error_code"] == 0 and meta["name"] == topic
            assert sorted(p["partition_index"] for p in meta["partitions"]) == [0, 1]
            leader = {p["partition_index"]: p["leader_id"] for p in meta["partitions"]}[1]
            assert leader == metadata["brokers"][0]["node_id"]
            topic_id = meta["topic_id"]
            assert topic_id and bytes(topic_id) != bytes(16)

            produced = await conn.request(ApiKey.PRODUCE, {
                "transactional_id": None, "acks": -1, "timeout_ms": 10_000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 1, "records": record_batch(values)}]}]},
                version=11)
            (part,) = produced["responses"][0]["partition_responses"]
            assert part["index"] == 1 and part["error_code"] == 0 and part["base_offset"] == 0

            fetch_version = conn.versions[ApiKey.FETCH]
            assert fetch_version >= 13  # topics named by id
            fetched = await conn.request(ApiKey.FETCH, {
                "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic_id": topic_id, "partitions": [{
                    "partition": 1, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                    "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            assert fetched["error_code"] == 0
            (fpart,) = fetched["responses"][0]["partitions"]
            assert fpart["error_code"] == 0 and fpart["high_watermark"] == len(values)
            records = MemoryRecords(bytes(fpart["records"]))
            got = []
            while (batch := records.next_batch()) is not None:
                got.extend((r.offset, r.key, r.value, list(r.headers)) for r in batch)
            assert got == [(i, b"k%d" % i, v, [("h", b"v%d" % i)]) for i, v in enumerate(values)]

    anyio.run(body, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pipelined_metadata_requests_on_one_connection(broker: EmbeddedBroker, backend: str) -> None:
    async def body() -> None:
        async with await connect(broker, max_in_flight=8) as conn:
            results: list[dict[str, Any]] = []

            async def one() -> None:
                results.append(await conn.request(ApiKey.METADATA, {
                    "topics": [], "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False}))

            async with anyio.create_task_group() as tg:
                for _ in range(100):
                    tg.start_soon(one)
            assert len(results) == 100 and all(r["brokers"] for r in results)
            assert conn.in_flight == 0

    anyio.run(body, backend=backend)


def test_acks_zero_produce_then_a_normal_request(broker: EmbeddedBroker) -> None:
    topic = unique_topic("conn-acks0")

    async def body() -> None:
        async with await connect(broker) as conn:
            await conn.request(ApiKey.CREATE_TOPICS, {
                "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                            "configs": []}], "timeout_ms": 10_000, "validate_only": False})
            await topic_metadata(conn, topic)
            await conn.send_no_response(ApiKey.PRODUCE, {
                "transactional_id": None, "acks": 0, "timeout_ms": 10_000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": record_batch([b"x"])}]}]})
            # The next response must still match its request: acks=0 produced no answer to skip.
            metadata = await conn.request(ApiKey.METADATA, {
                "topics": [{"name": topic, "topic_id": bytes(16)}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False})
            assert metadata["topics"][0]["name"] == topic

    anyio.run(body)


def test_connecting_to_a_stopped_broker_fails_cleanly(free_port: int) -> None:
    async def body() -> None:
        with pytest.raises(errors.KafkaConnectionError, match=f"127.0.0.1:{free_port}"):
            await Connection.connect("127.0.0.1", free_port, connect_timeout_ms=2000)

    anyio.run(body)


def test_embedded_broker_lifecycle_and_noida() -> None:
    async def body() -> None:
        async with EmbeddedBroker(kind="noida") as noida:
            pid = noida.pid
            async with await Connection.connect(noida.host, noida.port) as conn:
                assert conn.versions[ApiKey.PRODUCE] <= 9  # noida stops at Produce v9
        assert not noida.running and pid is not None
        with pytest.raises(ProcessLookupError):
            import os
            os.kill(pid, 0)

    anyio.run(body)
