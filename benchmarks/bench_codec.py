"""Codec throughput: akresil's compiled schemas vs kafka-python 3.x's protocol layer, in one run.

Workload (the hot paths): a Produce v11 request and a Fetch v16 response, each carrying 100 partitions of
one ~16 KiB record batch of 100-byte records (built with aiokafka's C batch builder).  Records are counted
inside the batches; MB/s counts whole frames.  Prints one JSON document (orjson) with ratios.

    python benchmarks/bench_codec.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kafka.protocol.consumer import FetchResponse as KpFetchResponse
from kafka.protocol.producer import ProduceRequest as KpProduceRequest

from akresil.protocol import ApiKey, decode_response, encode_request, encode_response

PARTITIONS = 100
VALUE = b"v" * 100


def record_batch(base_offset: int) -> tuple[bytes, int]:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 16384)
    n = 0
    while builder.append(base_offset + n, timestamp=1_700_000_000_000, key=None, value=VALUE, headers=[]) is not None:
        n += 1
    return bytes(builder.build()), n


def measure(fn: Callable[[], Any], seconds: float) -> float:
    """Calls per second, best of 3 rounds of ~seconds/3 each."""
    fn()
    best = 0.0
    for _ in range(3):
        n = 0
        start = time.perf_counter()
        deadline = start + seconds / 3
        while True:
            fn()
            n += 1
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, n / (now - start))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.5, help="time per measurement")
    args = parser.parse_args(argv)

    batch, per_batch = record_batch(0)
    records = per_batch * PARTITIONS
    topic_id = uuid.uuid4()

    # ---------------------------------------------------------------- Produce v11 request (encode)
    def ak_produce_body() -> dict[str, Any]:
        return {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 30000,
            "topic_data": [{"name": "bench", "partition_data": [{"index": p, "records": batch} for p in range(PARTITIONS)]}],
        }

    def kp_produce_obj() -> Any:
        part = KpProduceRequest.TopicProduceData.PartitionProduceData
        req = KpProduceRequest(
            version=11,
            transactional_id=None,
            acks=-1,
            timeout_ms=30000,
            topic_data=[
                KpProduceRequest.TopicProduceData(
                    version=11, name="bench",
                    partition_data=[part(version=11, index=p, records=batch) for p in range(PARTITIONS)],
                )
            ],
        )
        req.with_header(correlation_id=1, client_id="bench")
        return req

    ak_body = ak_produce_body()
    kp_obj = kp_produce_obj()
    ak_frame = encode_request(ApiKey.PRODUCE, 11, 1, "bench", ak_body)
    kp_frame = bytes(kp_obj.encode(version=11, header=True, framed=True))
    assert ak_frame == kp_frame, "the two encoders disagree"
    produce = {
        "akresil_encode": measure(lambda: encode_request(ApiKey.PRODUCE, 11, 1, "bench", ak_body), args.seconds),
        "kafka_python_encode": measure(lambda: kp_obj.encode(version=11, header=True, framed=True), args.seconds),
        "akresil_build_and_encode": measure(
            lambda: encode_request(ApiKey.PRODUCE, 11, 1, "bench", ak_produce_body()), args.seconds
        ),
        "kafka_python_build_and_encode": measure(
            lambda: kp_produce_obj().encode(version=11, header=True, framed=True), args.seconds
        ),
    }

    # ---------------------------------------------------------------- Fetch v16 response (decode)
    fetch_body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic_id": topic_id.bytes,
                "partitions": [
                    {
                        "partition_index": p,
                        "error_code": 0,
                        "high_watermark": per_batch,
                        "last_stable_offset": per_batch,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": batch,
                    }
                    for p in range(PARTITIONS)
                ],
            }
        ],
    }
    fetch_frame = encode_response(ApiKey.FETCH, 16, 1, fetch_body)[4:]
    kp_decoded = KpFetchResponse.decode(fetch_frame, version=16, header=True)
    assert bytes(kp_decoded.responses[0].partitions[7].records) == batch
    assert decode_response(ApiKey.FETCH, 16, fetch_frame)["responses"][0]["partitions"][7]["records"] == batch
    view = memoryview(fetch_frame)
    fetch = {
        "akresil_decode": measure(lambda: decode_response(ApiKey.FETCH, 16, fetch_frame), args.seconds),
        "akresil_decode_memoryview": measure(lambda: decode_response(ApiKey.FETCH, 16, view), args.seconds),
        "kafka_python_decode": measure(
            lambda: KpFetchResponse.decode(fetch_frame, version=16, header=True), args.seconds
        ),
    }

    def rates(calls: float, frame_len: int) -> dict[str, float]:
        return {
            "frames_per_s": round(calls, 1),
            "records_per_s": round(calls * records),
            "mb_per_s": round(calls * frame_len / 1e6, 1),
        }

    result = {
        "workload": {
            "partitions": PARTITIONS,
            "records_per_batch": per_batch,
            "batch_bytes": len(batch),
            "records_per_frame": records,
            "produce_frame_bytes": len(ak_frame),
            "fetch_frame_bytes": len(fetch_frame),
        },
        "produce_v11_request": {k: rates(v, len(ak_frame)) for k, v in produce.items()},
        "fetch_v16_response": {k: rates(v, len(fetch_frame)) for k, v in fetch.items()},
        "ratios_akresil_over_kafka_python": {
            "produce_encode": round(produce["akresil_encode"] / produce["kafka_python_encode"], 2),
            "produce_build_and_encode": round(
                produce["akresil_build_and_encode"] / produce["kafka_python_build_and_encode"], 2
            ),
            "fetch_decode": round(fetch["akresil_decode"] / fetch["kafka_python_decode"], 2),
        },
        "python": sys.version.split()[0],
        "machine": platform.machine(),
    }
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
