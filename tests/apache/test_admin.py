"""Every admin call on Apache Kafka, against what the cluster really holds (reassignments, quotas and ElectLeaders
are in test_admin_reassign_quotas.py; incremental configs on groups in test_share_groups.py)."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from typing import Any, Callable

import anyio
import pytest

from akresil import Consumer, ConsumerRecord, Producer, ShareConsumer, TopicPartition
from akresil.admin_types import (AclBinding, AclBindingFilter, ConfigResource, ScramDeletion, ScramUpsertion)
from akresil.errors import (GroupIdNotFoundError, NonEmptyGroupError, SaslAuthenticationFailedError,
                            TopicAuthorizationFailedError, UnknownTopicOrPartitionError)
from akresil.testing import KafkaCluster

from .conftest import TopicMaker


async def test_cluster_topics_partitions_configs_and_records(kafka_cluster: KafkaCluster,
                                                             make_topic: TopicMaker) -> None:
    topic = await make_topic(partitions=2)
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as producer:
        await producer.send_many(topic, [(None, b"%d" % i) for i in range(10)], partition=0)
    async with kafka_cluster.admin() as admin:
        cluster = await admin.describe_cluster()
        assert sorted(b.node_id for b in cluster.brokers) == kafka_cluster.broker_ids
        assert cluster.cluster_id == kafka_cluster.cluster_id
        assert topic in await admin.list_topics()

        (await admin.create_partitions({topic: 4})).raise_on_error()

        async def four() -> bool:        # accepted by the controller; brokers learn it from the metadata log
            return len((await admin.describe_topics([topic]))[topic].partitions) == 4
        await kafka_cluster.wait_for(four)
        desc = (await admin.describe_topics([topic]))[topic]
        assert all(len(p.replicas) == 3 for p in desc.partitions)
        with pytest.raises(Exception, match="(?i)partition"):
            (await admin.create_partitions({topic: 3})).raise_on_error()      # fewer: refused per topic

        resource = ConfigResource("topic", topic)
        (await admin.incremental_alter_configs({resource: {"retention.ms": "3600000"}})).raise_on_error()

        async def applied() -> bool:     # the change reaches the broker asked through the metadata log
            return (await admin.describe_configs([resource]))[resource]["retention.ms"].value == "3600000"
        await kafka_cluster.wait_for(applied)
        assert (await admin.describe_configs([resource]))[resource]["cleanup.policy"].value == "delete"

        low = (await admin.delete_records({TopicPartition(topic, 0): 4})).raise_on_error()
        assert low[TopicPartition(topic, 0)] == 4
    async with Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        first: list[ConsumerRecord[bytes, bytes]] = []
        deadline = time.monotonic() + 60
        while not first and time.monotonic() < deadline:
            first = (await consumer.getmany(timeout_ms=1000)).get(TopicPartition(topic, 0), [])
        assert first and first[0].offset == 4                 # the log now starts where the records were cut

    async with kafka_cluster.admin() as admin:
        await admin.delete_topics([topic])

        async def gone() -> bool:
            return topic not in await admin.list_topics()
        await kafka_cluster.wait_for(gone)
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.describe_topics([topic])


async def test_consumer_groups_and_their_offsets(kafka_cluster: KafkaCluster, make_topic: TopicMaker,
                                                 unique: Callable[[str], str]) -> None:
    topic = await make_topic(partitions=2)
    group = unique("g")
    tps = [TopicPartition(topic, p) for p in range(2)]
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as producer:
        for tp in tps:
            await producer.send_many(topic, [(None, b"x")] * 5, partition=tp.partition)
    async with Consumer(topic, bootstrap_servers=kafka_cluster.bootstrap_servers, group_id=group,
                        auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        got = 0
        deadline = time.monotonic() + 60
        while got < 10 and time.monotonic() < deadline:
            got += sum(len(v) for v in (await consumer.getmany(timeout_ms=500)).values())
        await consumer.commit()
        async with kafka_cluster.admin() as admin:
            listed = {g.group_id: g for g in await admin.list_consumer_groups()}
            assert listed[group].state == "Stable"
            desc = (await admin.describe_consumer_groups([group]))[group]
            assert desc.state == "Stable" and len(desc.members) == 1
            with pytest.raises(NonEmptyGroupError):
                (await admin.delete_consumer_groups([group])).raise_on_error()
    async with kafka_cluster.admin() as admin:
        offsets = await admin.list_consumer_group_offsets(group)
        assert {tp: o.committed for tp, o in offsets.items()} == {tp: 5 for tp in tps}
        (await admin.alter_consumer_group_offsets(group, {tps[0]: 2})).raise_on_error()
        (await admin.delete_consumer_group_offsets(group, [tps[1]])).raise_on_error()
        offsets = await admin.list_consumer_group_offsets(group)
        assert {tp: o.committed for tp, o in offsets.items()} == {tps[0]: 2}
        assert offsets[tps[0]].lag == 3
        (await admin.delete_consumer_groups([group])).raise_on_error()
        with pytest.raises(GroupIdNotFoundError):
            (await admin.describe_consumer_groups([group])).raise_on_error()


async def test_producers_and_transactions_are_described(kafka_cluster: KafkaCluster, make_topic: TopicMaker,
                                                         unique: Callable[[str], str]) -> None:
    topic = await make_topic()
    txn_id = unique("tx")
    tp = TopicPartition(topic, 0)
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, transactional_id=txn_id) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send(topic, b"open", partition=0)
        async with kafka_cluster.admin() as admin:
            states = (await admin.describe_producers([tp]))[tp]
            assert len(states) == 1 and states[0].current_txn_start_offset == 0
            listing = {t.transactional_id: t for t in await admin.list_transactions()}
            assert listing[txn_id].state == "Ongoing"
            desc = (await admin.describe_transactions([txn_id]))[txn_id]
            assert desc.state == "Ongoing" and tp in desc.partitions
            assert desc.producer_id == states[0].producer_id
        await producer.commit_transaction()
    async with kafka_cluster.admin() as admin:
        async def settled() -> bool:
            d = (await admin.describe_transactions([txn_id]))[txn_id]
            return d.state == "CompleteCommit" and not d.partitions
        await kafka_cluster.wait_for(settled)
        assert (await admin.describe_producers([tp]))[tp][0].current_txn_start_offset == -1


async def test_scram_users_and_acls_end_to_end(kafka_cluster: KafkaCluster, make_topic: TopicMaker,
                                               unique: Callable[[str], str]) -> None:
    topic = await make_topic()
    user = unique("carol")
    password = "carol-secret"
    async with kafka_cluster.admin() as admin:
        (await admin.alter_user_scram_credentials([ScramUpsertion(user, "SCRAM-SHA-256", password,
                                                                  iterations=8192)])).raise_on_error()

        async def described() -> bool:   # a broker answers from its copy of the metadata log: a moment later
            found = (await admin.describe_user_scram_credentials([user])).ok     # not found yet: an item error
            return [(c.mechanism, c.iterations) for c in found.get(user, ())] == [("SCRAM-SHA-256", 8192)]
        await kafka_cluster.wait_for(described)
        binding = AclBinding(resource_type="topic", resource_name=topic, principal=f"User:{user}",
                             operation="write")
        (await admin.create_acls([binding])).raise_on_error()
        mine = AclBindingFilter(resource_type="topic", resource_name=topic)

        async def visible() -> bool:
            return binding in await admin.describe_acls(mine)
        await kafka_cluster.wait_for(visible)

    config = dict(bootstrap_servers=kafka_cluster.bootstrap("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user, sasl_plain_password=password)

    async def can_write() -> bool:
        try:
            async with Producer(**config) as producer:       # type: ignore[arg-type]
                await producer.send(topic, b"by-carol")
            return True
        except (SaslAuthenticationFailedError, TopicAuthorizationFailedError):
            return False           # the credential and the ACL reach every broker through the metadata log
    await kafka_cluster.wait_for(can_write, timeout_s=30)

    async with kafka_cluster.admin() as admin:
        deleted = (await admin.delete_acls([mine])).raise_on_error()
        assert deleted[mine] == [binding]
        (await admin.alter_user_scram_credentials([ScramDeletion(user, "SCRAM-SHA-256")])).raise_on_error()

        async def acl_gone() -> bool:
            return binding not in await admin.describe_acls(mine)
        await kafka_cluster.wait_for(acl_gone)


async def _polling(clients: list[Any], stop: anyio.Event) -> None:
    """Keep every client polling (classic members rebalance inside poll) until ``stop``."""
    async def poll(c: Any) -> None:
        while not stop.is_set():
            await c.getmany(timeout_ms=100)
    async with anyio.create_task_group() as tg:
        for c in clients:
            tg.start_soon(poll, c)


async def test_groups_of_every_protocol_are_described_as_their_members_hold_them(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    """A classic group, a KIP-848 group and a share group, each of two akresil members: the descriptions match
    what the members hold (ids, assignments, epochs), and a group that does not exist is a clear per-group error."""
    topic = await make_topic(partitions=4)
    everything = {TopicPartition(topic, p) for p in range(4)}
    bootstrap = kafka_cluster.bootstrap_servers
    gc, gk, gs, missing = unique("classic"), unique("kip848"), unique("share"), unique("missing")
    async with AsyncExitStack() as stack:
        classic = [await stack.enter_async_context(Consumer(
            topic, bootstrap_servers=bootstrap, group_id=gc, client_id=f"cc{i}",
            group_instance_id="static-c0" if i == 0 else None)) for i in range(2)]
        kip848 = [await stack.enter_async_context(Consumer(
            topic, bootstrap_servers=bootstrap, group_id=gk, group_protocol="consumer", client_id=f"ck{i}",
            group_instance_id="static-k0" if i == 0 else None)) for i in range(2)]
        share = [await stack.enter_async_context(ShareConsumer(
            topic, bootstrap_servers=bootstrap, group_id=gs, client_id=f"cs{i}")) for i in range(2)]
        admin = await stack.enter_async_context(kafka_cluster.admin())
        stop = anyio.Event()
        last: dict[str, Any] = {}

        async def settled() -> bool:
            """Every group stable with the assignment its members hold (compared while they keep polling)."""
            described = await admin.describe_consumer_groups([gc, gk, missing])
            shared = await admin.describe_share_groups([gs, missing])
            last.update(classic=described.ok.get(gc), kip848=described.ok.get(gk), share=shared.ok.get(gs))
            if any(v is None or v.state != "Stable" for v in (last["classic"], last["kip848"], last["share"])):
                return False
            for desc, members in ((last["classic"], classic), (last["kip848"], kip848)):
                held = {c.group_metadata().member_id: c.assignment() for c in members}
                if {m.member_id: m.assignment for m in desc.members} != held:
                    return False
                if set().union(*held.values()) != everything or not all(held.values()):
                    return False
            if any(m.target_assignment != m.assignment for m in last["kip848"].members):
                return False
            held = {s.member_id: s.assignment() for s in share}
            return {m.member_id: m.assignment for m in last["share"].members} == held and all(held.values())

        async with anyio.create_task_group() as tg:
            tg.start_soon(_polling, [*classic, *kip848, *share], stop)
            try:
                await kafka_cluster.wait_for(settled, timeout_s=90, interval_s=0.5)
            except TimeoutError:
                pytest.fail(f"groups never matched their members; last descriptions: {last}")
            finally:
                stop.set()
            epochs = {c.group_metadata().member_id: c.group_metadata().generation_id for c in kip848}
        # classic: DescribeGroups' view
        c = last["classic"]
        assert (c.group_type, c.protocol_type, c.group_epoch, c.assignment_epoch) == ("classic", "consumer", None, None)
        by_id = {m.member_id: m for m in c.members}
        assert by_id[classic[0].group_metadata().member_id].group_instance_id == "static-c0"
        assert {m.client_id for m in c.members} == {"cc0", "cc1"}
        assert all(m.target_assignment is None and m.member_epoch is None for m in c.members)
        # KIP-848: ConsumerGroupDescribe's view, epochs and subscriptions included
        k = last["kip848"]
        assert (k.group_type, k.protocol_type, k.assignor) == ("consumer", "consumer", "uniform")
        assert k.group_epoch == k.assignment_epoch and k.group_epoch >= 2
        by_id = {m.member_id: m for m in k.members}
        assert by_id[kip848[0].group_metadata().member_id].group_instance_id == "static-k0"
        assert {m.client_id for m in k.members} == {"ck0", "ck1"}
        for m in k.members:
            assert m.subscribed_topics == (topic,) and m.member_type == "consumer"
            assert m.member_epoch is not None and m.member_epoch <= k.group_epoch
        assert {mid: by_id[mid].member_epoch for mid in epochs} == epochs
        # share group: ShareGroupDescribe's view
        s = last["share"]
        assert (s.group_type, s.protocol_type, s.assignor) == ("share", "share", "simple")
        assert s.group_epoch == s.assignment_epoch and s.group_epoch >= 2
        assert {m.client_id for m in s.members} == {"cs0", "cs1"}
        assert all(m.subscribed_topics == (topic,) and m.target_assignment is None for m in s.members)
        # a group that does not exist, and a group asked with the other kind's call: per-group errors
        described = await admin.describe_consumer_groups([missing, gs, gc])
        assert described[gc].group_type == "classic"
        with pytest.raises(GroupIdNotFoundError, match=f"group '{missing}' does not exist .*not found"):
            described[missing]
        with pytest.raises(GroupIdNotFoundError, match=f"group '{gs}' does not exist or is not a consumer group"):
            described[gs]
        shared = await admin.describe_share_groups([missing, gk])
        with pytest.raises(GroupIdNotFoundError, match=f"share group '{missing}'"):
            shared[missing]
        with pytest.raises(GroupIdNotFoundError, match=f"share group '{gk}'"):
            shared[gk]
