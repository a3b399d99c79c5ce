"""The KIP-932 share-group admin calls on Apache Kafka (the session's one-node ``kafka_node``): a group's start
offsets listed, reset to the start with the group empty and replayed by a new member, then forgotten and the group
deleted; and what Kafka refuses while members are there, or for a consumer group. Request building and answer
mapping: tests/unit/test_admin_share_offsets.py."""

from __future__ import annotations

import uuid

import anyio
import orjson
import pytest

from akresil import Admin, Producer, ShareConsumer, TopicPartition
from akresil.admin import EARLIEST
from akresil.admin_types import ShareGroupOffset
from akresil.cli import build_parser, cmd_groups
from akresil.errors import GroupIdNotFoundError, NonEmptyGroupError
from akresil.testing import EmbeddedBroker

from ..harness.share import FAST, share_group

pytestmark = pytest.mark.broker


async def _consume(bootstrap: str, topic: str, group: str, count: int) -> list[int]:
    """The offsets a new member of ``group`` gets (each accepted and committed) until it has ``count``."""
    got: list[int] = []
    async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **FAST) as consumer:
        with anyio.fail_after(60):
            while len(got) < count:
                batch = await consumer.getmany(timeout_ms=200)
                got += [r.offset for records in batch.values() for r in records]
                if batch:
                    await consumer.commit()
    return got


async def test_a_share_group_reset_to_the_start_gets_its_records_again(kafka_node: EmbeddedBroker) -> None:
    bootstrap = kafka_node.bootstrap_servers
    topic = await kafka_node.create_topic(f"share-reset-{uuid.uuid4().hex[:8]}")
    group = await share_group(kafka_node, f"sg-{uuid.uuid4().hex[:8]}")
    tp = TopicPartition(topic, 0)
    async with Producer(bootstrap_servers=bootstrap) as producer:
        await producer.send_many(topic, [(None, b"%d" % i) for i in range(10)], partition=0)
    assert sorted(await _consume(bootstrap, topic, group, 10)) == list(range(10))

    async with Admin(bootstrap_servers=bootstrap) as admin:
        listed = (await admin.list_share_group_offsets([group]))[group]
        # every record acknowledged: nothing left behind the start offset (Kafka moves the start itself lazily)
        assert set(listed) == {tp} and listed[tp].lag == 0
        assert listed[tp].start_offset is not None and 0 <= listed[tp].start_offset <= 10

        # docs/operations.md's recipe: the start offsets set to the log's earliest
        earliest = await admin.list_offsets({t: EARLIEST for t in listed})
        (await admin.alter_share_group_offsets(group, {t: off for t, (off, _) in earliest.items()})).raise_on_error()
        assert (await admin.list_share_group_offsets({group: [tp]}))[group] == {tp: ShareGroupOffset(0, 0, 10)}
        assert sorted(await _consume(bootstrap, topic, group, 10)) == list(range(10))

        (await admin.delete_share_group_offsets(group, [topic])).raise_on_error()
        assert (await admin.list_share_group_offsets([group]))[group] == {}
        mistaken = await admin.delete_consumer_groups([group])    # a share group named as a consumer group
        with pytest.raises(GroupIdNotFoundError, match=f"group '{group}'.*is a share group"):
            mistaken[group]
        assert group in (await admin.describe_share_groups([group])).ok
        (await admin.delete_share_groups([group])).raise_on_error()
        with pytest.raises(GroupIdNotFoundError, match=f"share group '{group}'"):
            (await admin.describe_share_groups([group]))[group]


async def test_kafka_refuses_a_share_group_with_members_and_a_consumer_group(
        kafka_node: EmbeddedBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """Offsets of a share group with a member are not altered nor deleted, nor is the group: each error names the
    group (the CLI's reset-offsets too, which finds the group is a share group). delete_share_groups leaves a
    consumer group alone (Kafka's DeleteGroups would delete it)."""
    bootstrap = kafka_node.bootstrap_servers
    topic = await kafka_node.create_topic(f"share-busy-{uuid.uuid4().hex[:8]}")
    group, consumers = await share_group(kafka_node, f"sg-{uuid.uuid4().hex[:8]}"), f"cg-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    async with Admin(bootstrap_servers=bootstrap) as admin:
        (await admin.alter_consumer_group_offsets(consumers, {tp: 0})).raise_on_error()
        async with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **FAST) as member:
            with anyio.fail_after(60):
                while not member.assignment():
                    await member.getmany(timeout_ms=100)
            altered = await admin.alter_share_group_offsets(group, {tp: 0})
            with pytest.raises(NonEmptyGroupError, match=f"share group '{group}'"):
                altered[tp]
            deleted = await admin.delete_share_group_offsets(group, [topic])
            with pytest.raises(NonEmptyGroupError, match=f"share group '{group}'"):
                deleted[topic]
            with pytest.raises(NonEmptyGroupError, match=f"share group '{group}'"):
                (await admin.delete_share_groups([group]))[group]
            cli = ["-b", bootstrap, "--json"]
            assert await cmd_groups(build_parser().parse_args(["groups", "describe", group, *cli])) == 0
            (described,) = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
            assert described["type"] == "share" and [o["partition"] for o in described["offsets"]] == [0]
            assert await cmd_groups(build_parser().parse_args(["groups", "reset-offsets", group, "--topic", topic,
                                                               "--to-earliest", "--execute", *cli])) == 1
            (row,) = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
            assert row["status"].startswith(f"NonEmptyGroupError: share group '{group}'")
        wrong = await admin.delete_share_groups([consumers])
        with pytest.raises(GroupIdNotFoundError, match=f"share group '{consumers}'.*not a share group"):
            wrong[consumers]
        assert consumers in {g.group_id for g in await admin.list_consumer_groups()}
        (await admin.delete_consumer_groups([consumers])).raise_on_error()
