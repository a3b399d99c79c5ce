"""Chaos for the exactly-once runner (issue 14): a runner process copies a topic through a FaultProxy in front
of noida-db while leaders move, connections drop and the coordinator moves every 250 ms, and the process is
SIGKILLed part-way and restarted with the same transactional id. The read_committed output must equal the input
exactly once, in order per partition. Figures go to docs/reliability.md.
"""

from __future__ import annotations

import itertools
import subprocess
import time

import anyio
import pytest

from akresil import Admin, NewTopic, Producer, TopicPartition
from akresil.admin import LATEST
from akresil.testing import EmbeddedBroker
from akresil.testing.proxy import FaultProxy

from ..harness.eos import committed_by_partition, read_committed, start_copy_worker, unique_name

pytestmark = pytest.mark.broker

N = 1500


async def test_exactly_once_copy_under_leader_moves_drops_and_a_killed_process() -> None:
    with EmbeddedBroker(kind="noida") as broker:
        proxy = FaultProxy(broker.bootstrap_servers, nodes=3).start()
        try:
            await _chaos(broker.bootstrap_servers, proxy)
        finally:
            proxy.stop()


def _aborts_logged(worker: subprocess.Popen[bytes]) -> int:
    """Transactions the runner aborted (its WARNING lines on stderr; the coordinator's abort of a killed
    process's open transaction is not among them)."""
    assert worker.stderr is not None
    return worker.stderr.read().count(b"transaction aborted")


async def _chaos(direct: str, proxy: FaultProxy) -> None:
    src, dst = unique_name("chaos-in"), unique_name("chaos-out")
    group, txn_id = unique_name("chaos-g"), unique_name("chaos-tx")
    async with Admin(bootstrap_servers=direct) as admin:
        await admin.create_topics([NewTopic(src, 2, 1), NewTopic(dst, 2, 1)])
    async with Producer(bootstrap_servers=direct) as producer:
        for p in (0, 1):
            await producer.send_many(src, [(b"k", b"p%d-%05d" % (p, i)) for i in range(N)], partition=p)
    faults = itertools.cycle(("move", "drop", "coordinator"))
    nodes = itertools.cycle(proxy.node_ids)
    applied = {"move": 0, "drop": 0, "coordinator": 0}

    def inject() -> None:
        kind = next(faults)
        if kind == "move":
            proxy.move_all_leaders()
        elif kind == "drop":
            proxy.drop_connections()
        else:
            proxy.set_coordinator(next(nodes))
        applied[kind] += 1

    started = time.monotonic()
    worker = await start_copy_worker(proxy.bootstrap_servers, src, dst, group, txn_id)
    killed_at: dict[int, int] = {}
    restarts = 0
    aborts = 0
    try:
        with anyio.fail_after(150):
            while True:
                done = await committed_by_partition(direct, group)
                if done == {0: N, 1: N}:
                    break
                if not restarts and sum(done.values()) >= 2 * N * 2 // 5:
                    worker.kill()
                    worker.wait()
                    aborts += _aborts_logged(worker)
                    killed_at = done
                    worker = await start_copy_worker(proxy.bootstrap_servers, src, dst, group, txn_id)
                    restarts += 1
                inject()
                await anyio.sleep(0.25)
    finally:
        worker.kill()
        worker.wait()
        aborts += _aborts_logged(worker)
    elapsed = time.monotonic() - started
    out = await read_committed(direct, dst, 2, 2 * N)
    async with Admin(bootstrap_servers=direct) as admin:
        ends = await admin.list_offsets({TopicPartition(dst, p): LATEST for p in (0, 1)})
    duplicates = sum(len(v) - len(set(v)) for v in out.values())
    lost = sum(N - len(set(v)) for v in out.values())
    print(f"chaos: {2 * N} records copied in {elapsed:.1f} s; faults {applied}; killed at {killed_at}, "
          f"restarts {restarts} (fencing the killed epoch), aborted transactions logged {aborts}; "
          f"output log {sum(o for o, _ in ends.values())} offsets; duplicates {duplicates}, lost {lost}")
    assert restarts == 1 and killed_at and sum(killed_at.values()) < 2 * N
    for p in (0, 1):
        assert out[p] == [b"p%d-%05d" % (p, i) for i in range(N)]
