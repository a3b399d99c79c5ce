"""The combination matrix's scenario (issue 28), run on the brokers of tests/capabilities/test_combination_matrix.py:
group protocol x guarantee x backend, copying records through the runner in two member processes
(tests/integration/matrix_worker.py) while leaders move and one member is SIGKILLed mid-way.

Expected: at-least-once loses nothing (every input appears in the output, duplicates allowed after the kill);
exactly-once gives every input once in the read_committed output, in order per partition. For exactly-once the
killed member is started again with its transactional id, as a deployment restarts a pod: that fences the
dead process's producer and aborts its open transaction.
"""


from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import anyio

from akresil import Admin, Consumer, Producer, TopicPartition
from akresil.admin import LATEST
from akresil.testing import BrokerControl
from akresil.testing.control import next_node

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "integration" / "matrix_worker.py"
PARTITIONS = 4
PER_PARTITION = 200
SESSION_MS = 6_000


async def move_to_next(broker: BrokerControl, topic: str, partition: int) -> None:
    """Make another replica (the next broker id) the partition's leader."""
    leader, _ = await broker.leader(topic, partition)
    await broker.move_leader(topic, partition, next_node(broker.node_ids, leader))


def before_group_forms(broker: BrokerControl) -> None:
    """librdkafka's mock answers a follower's late SyncGroup with INVALID_REQUEST after the leader's: ordering the
    one rebalance's SyncGroups lets a new group of several members settle there (docs/brokers.md)."""
    from akresil.testing.rdkafka_mock import MockControl
    if isinstance(broker, MockControl):
        broker.mock.consumer_group_set_session_timeout(SESSION_MS)
        broker.mock.consumer_group_set_heartbeat_interval(300)
        broker.mock.let_followers_sync_first()


class Member:
    """A worker process (tests/integration/matrix_worker.py)."""

    def __init__(self, args: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)

    async def ready(self) -> None:
        assert self.proc.stdout is not None
        line = await anyio.to_thread.run_sync(self.proc.stdout.readline)
        if line.strip() != b"ready":
            self.kill()
            assert self.proc.stderr is not None
            raise AssertionError(f"worker did not start: {line!r} {self.proc.stderr.read().decode()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stderr_tail(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")[-3000:]


async def output_size(admin: Admin, topic: str) -> int:
    ends = await admin.list_offsets({TopicPartition(topic, p): LATEST for p in range(PARTITIONS)})
    return sum(offset for offset, _ in ends.values())


async def read_output(bootstrap: str, topic: str, *, read_committed: bool, expect: int, timeout_s: float,
                      linger_s: float = 2.0) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    # librdkafka's mock writes transaction markers that fail their CRC check (docs/brokers.md)
    async with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed" if read_committed
                        else "read_uncommitted", fetch_max_wait_ms=100, auto_offset_reset="earliest",
                        check_crcs=False) as c:
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        with anyio.move_on_after(timeout_s):
            while len({v for vs in out.values() for v in vs}) < expect:
                for tp, recs in (await c.getmany(timeout_ms=200)).items():
                    out[tp.partition].extend(r.value for r in recs if r.value is not None)
        with anyio.move_on_after(linger_s):           # a duplicate or an aborted output would show up now
            while True:
                for tp, recs in (await c.getmany(timeout_ms=200)).items():
                    out[tp.partition].extend(r.value for r in recs if r.value is not None)
    return out


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def produce(bs: str, topic: str, values: dict[int, list[bytes]]) -> None:
    async with Producer(bootstrap_servers=bs, linger_ms=5) as producer:
        for p, vs in values.items():
            await producer.send_many(topic, [(None, v) for v in vs], partition=p)


async def copy_with_a_kill_and_a_leader_move(broker: BrokerControl, protocol: str, guarantee: str,
                                             backend: str) -> None:
    """The first half of the input is copied (committed, for exactly-once) by both members; the leaders of an
    input and an output partition move; the second half is produced and, while it is being copied, one member
    is killed. The survivor (and for exactly-once the restarted member) must finish every partition."""
    bs = broker.bootstrap_servers
    eos = guarantee == "exactly_once"
    src, dst, group = _name("mx-in"), _name("mx-out"), _name("mx-g")
    await broker.create_topic(src, partitions=PARTITIONS, replication_factor=3)
    await broker.create_topic(dst, partitions=PARTITIONS, replication_factor=3)
    half = PER_PARTITION // 2
    inputs = {p: [b"%d-%04d" % (p, i) for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    total = PARTITIONS * PER_PARTITION
    await produce(bs, src, {p: vs[:half] for p, vs in inputs.items()})

    def member(txn_id: str) -> Member:
        return Member([bs, src, dst, group, protocol, guarantee, backend, txn_id, str(SESSION_MS)])

    before_group_forms(broker)
    killed_id, survivor_id = _name("tx-a"), _name("tx-b")
    members = [member(killed_id)]
    try:
        await members[0].ready()
        members.append(member(survivor_id))
        await members[1].ready()
        first = await read_output(bs, dst, read_committed=eos, expect=total // 2, timeout_s=120, linger_s=0)
        assert all(len(set(first[p])) == half for p in range(PARTITIONS)), {p: len(v) for p, v in first.items()}
        await move_to_next(broker, src, 0)
        await move_to_next(broker, dst, 1)
        await produce(bs, src, {p: vs[half:] for p, vs in inputs.items()})
        async with Admin(bootstrap_servers=bs) as admin:
            base = await output_size(admin, dst)
            with anyio.fail_after(120):
                while await output_size(admin, dst) < base + PARTITIONS * 5:     # the second half under way
                    await anyio.sleep(0.05)
            members[0].kill()                                          # no LeaveGroup, no commit, txn left open
            at_kill = await output_size(admin, dst)
        assert at_kill - base < total // 2, "the kill came after the copy was over"
        if eos:
            members.append(member(killed_id))                          # fences the dead producer, aborts its txn
            await members[2].ready()
        out = await read_output(bs, dst, read_committed=eos, expect=total, timeout_s=150)
    finally:
        for m in members:
            m.kill()
    for p in range(PARTITIONS):
        got = out[p]
        missing = set(inputs[p]) - set(got)
        assert not missing, f"partition {p}: {len(missing)} inputs lost, e.g. {sorted(missing)[:3]}"
        assert set(got) <= set(inputs[p]), f"partition {p}: outputs that are no input of it"
        if eos:
            dup = [v for v, n in Counter(got).items() if n > 1]
            assert not dup, f"partition {p}: {len(dup)} inputs copied twice, e.g. {dup[:3]}"
            assert got == inputs[p], f"partition {p}: out of order"


