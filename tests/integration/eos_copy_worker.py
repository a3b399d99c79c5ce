"""A process running an exactly-once runner that copies ``src`` to ``dst`` (same partition) until it is killed.

Used by test_runner_exactly_once.py to kill a runner mid-transaction and restart it:
``python eos_copy_worker.py BOOTSTRAP SRC DST GROUP TRANSACTIONAL_ID PARTITIONS``. Prints ``ready`` once its
producer is initialized (which fences and aborts the previous process's open transaction).
"""

from __future__ import annotations

import sys

import anyio

from akresil import Consumer, Producer, TopicPartition
from akresil.runner import HandlerContext, Runner
from akresil.types import ConsumerRecord


async def main(bootstrap: str, src: str, dst: str, group: str, txn_id: str, partitions: int) -> None:
    async def copy(rec: ConsumerRecord, ctx: HandlerContext) -> None:
        await ctx.send(dst, rec.value, rec.key, partition=rec.partition)
        await anyio.sleep(0.005)          # spread the copy over many transactions (~5 s per 1000 records)

    async with Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                        auto_offset_reset="earliest", isolation_level="read_committed",
                        fetch_max_wait_ms=50) as consumer, \
            Producer(bootstrap_servers=bootstrap, transactional_id=txn_id, linger_ms=2) as producer:
        consumer.assign([TopicPartition(src, p) for p in range(partitions)])
        await producer.init_transactions()
        print("ready", flush=True)
        runner = Runner(consumer, copy, producer=producer, processing_guarantee="exactly_once",
                        commit_interval_ms=100)
        await runner.run()


if __name__ == "__main__":
    b, s, d, g, t, n = sys.argv[1:7]
    anyio.run(main, b, s, d, g, t, int(n))
