"""fence_producers, abort_transaction and remove_members_from_consumer_group on Apache Kafka (the session's one-node
``kafka_node``): a zombie transactional producer fenced and its open transaction hidden from read_committed
readers; a hanging transaction found with describe_producers aborted so read_committed readers move past it; a
static members that left without a LeaveGroup removed from their group (Admin and CLI). Request building and answer mapping:
tests/unit/test_admin_fence_abort_remove.py."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import anyio
import orjson
import pytest

from akresil import Admin, Consumer, Producer, TopicPartition, errors
from akresil.cli import build_parser, cmd_groups
from akresil.testing import EmbeddedBroker

pytestmark = pytest.mark.broker


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _read_committed_until(bootstrap: str, tp: TopicPartition, last: bytes) -> list[bytes]:
    """Every value a read_committed reader gets from ``tp``'s start up to ``last`` (it must get there in 30 s)."""
    seen: list[bytes] = []
    async with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed", fetch_max_wait_ms=100) as rc:
        rc.assign([tp])
        rc.seek(tp, 0)
        with anyio.fail_after(30):
            while last not in seen:
                for recs in (await rc.getmany(timeout_ms=200)).values():
                    seen.extend(r.value for r in recs if r.value is not None)
    return seen


async def test_fence_producers_fences_a_zombie_and_aborts_its_open_transaction(kafka_node: EmbeddedBroker) -> None:
    bootstrap = kafka_node.bootstrap_servers
    topic = await kafka_node.create_topic(_unique("fence"))
    tp = TopicPartition(topic, 0)
    txn_id = _unique("zombie")
    async with Producer(bootstrap_servers=bootstrap, transactional_id=txn_id) as zombie, \
            Admin(bootstrap_servers=bootstrap) as admin:
        await zombie.init_transactions()
        zombie.begin_transaction()
        await zombie.send_many(topic, [(None, b"zombie-%d" % i) for i in range(3)], partition=0)
        before = (await admin.describe_transactions([txn_id]))[txn_id]
        assert before.state == "Ongoing"

        fenced = (await admin.fence_producers([txn_id]))[txn_id]
        assert fenced.producer_id == before.producer_id and fenced.producer_epoch > before.producer_epoch
        with pytest.raises(errors.ProducerFencedError):
            await zombie.commit_transaction()
        with anyio.fail_after(30):      # the coordinator writes the abort markers after answering
            while (await admin.describe_transactions([txn_id]))[txn_id].state not in ("Empty", "CompleteAbort"):
                await anyio.sleep(0.1)
    async with Producer(bootstrap_servers=bootstrap) as plain:
        await plain.send(topic, b"after", partition=0)
    assert await _read_committed_until(bootstrap, tp, b"after") == [b"after"]


async def test_abort_transaction_lets_read_committed_readers_past_a_hanging_transaction(
        kafka_node: EmbeddedBroker) -> None:
    bootstrap = kafka_node.bootstrap_servers
    topic = await kafka_node.create_topic(_unique("hanging"))
    tp = TopicPartition(topic, 0)
    async with Producer(bootstrap_servers=bootstrap) as plain:
        await plain.send(topic, b"before", partition=0)
        # an open transaction its coordinator will not end for a minute: it holds the last stable offset back
        async with Producer(bootstrap_servers=bootstrap, transactional_id=_unique("hung"),
                            transaction_timeout_ms=60_000) as hung, Admin(bootstrap_servers=bootstrap) as admin:
            await hung.init_transactions()
            hung.begin_transaction()
            await hung.send_many(topic, [(None, b"hung-%d" % i) for i in range(3)], partition=0)
            await plain.send(topic, b"after", partition=0)

            (state,) = [s for s in (await admin.describe_producers([tp]))[tp] if s.current_txn_start_offset >= 0]
            assert state.current_txn_start_offset == 1
            listed = await admin.list_offsets({tp: -1}, isolation_level="read_committed")
            assert listed[tp][0] == 1                 # stuck at the open transaction's first record

            await admin.abort_transaction(tp, state.producer_id, state.producer_epoch, state.coordinator_epoch)
            assert all(s.current_txn_start_offset < 0 for s in (await admin.describe_producers([tp]))[tp])
            assert await _read_committed_until(bootstrap, tp, b"after") == [b"before", b"after"]
            with pytest.raises(errors.UnknownTopicOrPartitionError, match=f"{topic}-7"):
                await admin.abort_transaction(TopicPartition(topic, 7), state.producer_id, state.producer_epoch, 0)
            with contextlib.suppress(errors.KafkaError):
                await hung.abort_transaction()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_static_members_removed_leave_their_group(kafka_node: EmbeddedBroker, protocol: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = kafka_node.bootstrap_servers
    topic = await kafka_node.create_topic(_unique("static"), partitions=2)
    group = _unique("g")
    # the session outlives the test (KIP-848 groups: the broker's 45 s)
    settings: dict[str, Any] = {"group_protocol": protocol}
    if protocol == "classic":
        settings["session_timeout_ms"] = 45_000
    async with Consumer(topic, bootstrap_servers=bootstrap, group_id=group, group_instance_id="box-1",
                        **settings) as one, \
            Consumer(topic, bootstrap_servers=bootstrap, group_id=group, group_instance_id="box-2",
                     **settings) as two:
        with anyio.fail_after(30):
            while not (one.assignment() and two.assignment()):
                await one.getmany(timeout_ms=100)
                await two.getmany(timeout_ms=100)
    # a static member that closes stays in the group (no LeaveGroup) until its session times out
    async with Admin(bootstrap_servers=bootstrap) as admin:
        described = (await admin.describe_consumer_groups([group]))[group]
        assert sorted(m.group_instance_id or "" for m in described.members) == ["box-1", "box-2"]

        results = await admin.remove_members_from_consumer_group(group, ["box-1", "box-9"])
        assert results.ok == {"box-1": None}
        with pytest.raises(errors.UnknownMemberIdError, match=f"member 'box-9' of group '{group}'"):
            results["box-9"]
        assert [m.group_instance_id for m in (await admin.describe_consumer_groups([group]))[group].members] == [
            "box-2"]

        # the CLI, every member left: the group described first
        args = build_parser().parse_args(["groups", "remove-members", group, "--all-members", "-b", bootstrap,
                                          "--json"])
        assert await cmd_groups(args) == 0
        assert [orjson.loads(line) for line in capsys.readouterr().out.splitlines()] == [
            {"item": "box-2", "result": "removed"}]
        assert (await admin.describe_consumer_groups([group]))[group].members == ()
