"""One member of the combination matrix (test_combination_matrix.py): a Runner copying ``src`` to ``dst`` (same
partition) in a consumer group until it is killed.

``python matrix_worker.py BOOTSTRAP SRC DST GROUP PROTOCOL GUARANTEE BACKEND TRANSACTIONAL_ID SESSION_MS``
(PROTOCOL: classic | consumer; GUARANTEE: at_least_once | exactly_once; BACKEND: asyncio | trio). Prints
``ready`` once its clients started (for exactly-once: after init_transactions, which fences and aborts an earlier
process's open transaction with the same transactional id).
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from akresil import Consumer, Producer
from akresil.runner import HandlerContext, Runner, RunnerRebalanceListener
from akresil.types import ConsumerRecord


async def main(bootstrap: str, src: str, dst: str, group: str, protocol: str, guarantee: str, txn_id: str,
               session_ms: int) -> None:
    async def copy(rec: ConsumerRecord[bytes, bytes], ctx: HandlerContext) -> None:
        await ctx.send(dst, rec.value, rec.key, partition=rec.partition)
        await anyio.sleep(0.03)           # a few seconds per partition: the test kills a member mid-copy

    consumer_config: dict[str, Any] = dict(
        bootstrap_servers=bootstrap, group_id=group, group_protocol=protocol, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=100, retry_backoff_ms=50, request_timeout_ms=10_000)
    if protocol == "classic":           # KIP-848 members get their timeouts from the broker
        consumer_config.update(session_timeout_ms=session_ms, heartbeat_interval_ms=max(100, session_ms // 10))
    producer_config: dict[str, Any] = dict(bootstrap_servers=bootstrap, linger_ms=2, retry_backoff_ms=50)
    if guarantee == "exactly_once":
        consumer_config["isolation_level"] = "read_committed"
        producer_config["transactional_id"] = txn_id
    listener = RunnerRebalanceListener()
    async with Consumer(src, listener=listener, **consumer_config) as consumer, \
            Producer(**producer_config) as producer:
        if guarantee == "exactly_once":
            await producer.init_transactions()
        print("ready", flush=True)
        runner = Runner(consumer, copy, producer=producer, processing_guarantee=guarantee,  # type: ignore[arg-type]
                        commit_interval_ms=100, rebalance_listener=listener)
        await runner.run()


if __name__ == "__main__":
    b, s, d, g, proto, guar, backend, t, session = sys.argv[1:10]
    anyio.run(main, b, s, d, g, proto, guar, t, int(session), backend=backend)
