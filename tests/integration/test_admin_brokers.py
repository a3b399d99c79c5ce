"""The operator admin surface against real brokers: noida-db (Kafka-like semantics) and Tansu.

What each broker refuses is asserted here too, so docs/brokers.md stays true: a broker that starts accepting
an API makes its test fail and the table gets updated.
"""

from __future__ import annotations

import time
from typing import Iterator

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition, errors
from akresil.admin import EARLIEST, LATEST
from akresil.admin_types import AclBinding, AclBindingFilter, ClientQuotaEntity, ConfigResource, ScramUpsertion
from akresil.testing import EmbeddedBroker

FAST = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 500, "retry_backoff_ms": 20}
#: record timestamps: a minute ago, one second apart (recent: retention must not delete them)
BASE_MS = int(time.time() * 1000) - 60_000


@pytest.fixture(scope="module")
def noida() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(kind="noida") as broker:
        yield broker


async def _topic_with_records(bootstrap: str, topic: str, partitions: int, per_partition: int, **producer: object) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    async with Producer(bootstrap_servers=bootstrap, **producer) as p:
        for part in range(partitions):
            for i in range(per_partition):
                await p.send(topic, b"v%d" % i, partition=part, timestamp_ms=BASE_MS + i * 1000)


async def _consume(consumer: Consumer, n: int) -> int:
    got = 0
    with anyio.fail_after(30):
        while got < n:
            batch = await consumer.getmany(timeout_ms=1000)
            got += sum(len(v) for v in batch.values())
    return got


# ---------------------------------------------------------------------------------------------- noida-db
async def test_group_lifecycle_offsets_and_lag_noida(noida: EmbeddedBroker) -> None:
    bs, topic, group = noida.bootstrap_servers, "admin-groups", "ops-group"
    t0, t1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    await _topic_with_records(bs, topic, 2, 10)
    async with Admin(bootstrap_servers=bs, default_api_timeout_ms=10_000) as admin:
        async with Consumer(topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                            enable_auto_commit=False, **FAST) as consumer:
            assert await _consume(consumer, 20) == 20
            await consumer.commit({t0: 4, t1: 10})
            listed = await admin.list_consumer_groups()
            assert [(g.group_id, g.state) for g in listed if g.group_id == group] == [(group, "Stable")]
            described = await admin.describe_consumer_groups([group, "no-such-group"])
            desc = described[group]
            assert desc.state == "Stable" and desc.protocol_type == "consumer" and len(desc.members) == 1
            assert desc.members[0].assignment == {t0, t1}
            assert isinstance(described.errors["no-such-group"], errors.GroupIdNotFoundError)
            offsets = await admin.list_consumer_group_offsets(group)
            assert offsets[t0].committed == 4 and offsets[t0].log_end == 10 and offsets[t0].lag == 6
            assert offsets[t1].lag == 0
            meta = consumer.group_metadata()
            assert meta.group_id == group and meta.generation_id >= 1 and meta.member_id == desc.members[0].member_id
            # an active group refuses an admin commit (the coordinator does not know "member" "")
            busy = await admin.alter_consumer_group_offsets(group, {t0: 0})
            assert isinstance(busy.errors[t0], (errors.UnknownMemberIdError, errors.IllegalGenerationError))
            busy_delete = await admin.delete_consumer_groups([group])
            assert isinstance(busy_delete.errors[group], errors.NonEmptyGroupError)
        reset = await admin.alter_consumer_group_offsets(group, {t0: 1, t1: (7, "rewound")})
        assert reset.ok == {t0: None, t1: None}
        offsets = await admin.list_consumer_group_offsets(group, [t0, t1, TopicPartition(topic, 5)])
        assert (offsets[t0].committed, offsets[t0].lag) == (1, 9)
        assert (offsets[t1].committed, offsets[t1].metadata) == (7, "rewound")
        assert offsets[TopicPartition(topic, 5)].committed is None
        # "none": the positions must come from the offsets just set, never from a reset policy
        async with Consumer(topic, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                            auto_offset_reset="none", **FAST) as again:
            assert await _consume(again, 12) == 12          # 9 from t0 (1..9) and 3 from t1 (7..9)
            assert await again.position(t0) == 10
        deleted = await admin.delete_consumer_group_offsets(group, [t1])
        assert deleted[t1] is None
        assert (await admin.list_consumer_group_offsets(group, [t1]))[t1].committed is None
        gone = await admin.delete_consumer_groups([group, "no-such-group"])
        assert gone[group] is None and isinstance(gone.errors["no-such-group"], errors.GroupIdNotFoundError)
        assert group not in {g.group_id for g in await admin.list_consumer_groups()}


async def test_configs_partitions_records_producers_noida(noida: EmbeddedBroker) -> None:
    bs, topic = noida.bootstrap_servers, "admin-ops"
    await _topic_with_records(bs, topic, 2, 10)
    res = ConfigResource("topic", topic)
    async with Admin(bootstrap_servers=bs) as admin:
        before = (await admin.describe_configs([res]))[res]
        assert before["retention.ms"].is_default
        altered = await admin.incremental_alter_configs({res: {"retention.ms": "3600000"}})
        assert altered[res] is None
        after = (await admin.describe_configs([res]))[res]["retention.ms"]
        assert after.value == "3600000" and after.source == "dynamic_topic_config" and not after.is_default
        node = (await admin.describe_cluster()).brokers[0].node_id
        broker_res = ConfigResource("broker", str(node))
        missing = ConfigResource("topic", "no-such-topic")
        both = await admin.describe_configs([broker_res, missing])
        assert broker_res in both.ok
        assert isinstance(both.errors[missing], errors.UnknownTopicOrPartitionError)

        grown = await admin.create_partitions({topic: 4, "no-such-topic": 2})
        assert grown[topic] is None
        assert isinstance(grown.errors["no-such-topic"], errors.UnknownTopicOrPartitionError)
        assert len((await admin.describe_topics([topic]))[topic].partitions) == 4
        shrink = await admin.create_partitions({topic: 3})
        assert isinstance(shrink.errors[topic], errors.InvalidPartitionsError)

        t0 = TopicPartition(topic, 0)
        trimmed = await admin.delete_records({t0: 4, TopicPartition(topic, 1): 99})
        assert trimmed[t0] == 4
        assert isinstance(trimmed.errors[TopicPartition(topic, 1)], errors.OffsetOutOfRangeError)
        assert (await admin.list_offsets({t0: EARLIEST}))[t0][0] == 4

        producers = await admin.describe_producers([t0, TopicPartition(topic, 9)])
        assert producers[t0] == ()   # noida-db 0.2 answers, but tracks no producer state (docs/brokers.md)
        assert isinstance(producers.errors[TopicPartition(topic, 9)], errors.UnknownTopicOrPartitionError)
        assert await admin.list_transactions() == []
        unknown = await admin.describe_transactions(["no-such-txn"])
        assert isinstance(unknown.errors["no-such-txn"], errors.TransactionalIdNotFoundError)

        # noida-db has no authorizer: every ACL call is refused per item, clearly
        acl = AclBinding("topic", topic, "User:alice", "read")
        created = await admin.create_acls([acl])
        assert isinstance(created.errors[acl], errors.SecurityDisabledError)
        with pytest.raises(errors.SecurityDisabledError):
            await admin.describe_acls(AclBindingFilter())
        # and no SCRAM credential or leader election APIs
        with pytest.raises(errors.UnsupportedVersionError, match="DESCRIBE_USER_SCRAM_CREDENTIALS"):
            await admin.describe_user_scram_credentials()
        refused = await admin.elect_leaders([t0])
        assert isinstance(refused.errors[t0], errors.UnsupportedVersionError)
        # nor reassignments or client quotas (docs/brokers.md)
        await _refuses_reassignments_and_quotas(admin, t0, list_reassignments=False)


async def _refuses_reassignments_and_quotas(admin: Admin, tp: TopicPartition, *, list_reassignments: bool) -> None:
    moved = await admin.alter_partition_reassignments({tp: [1]})
    assert isinstance(moved.errors[tp], errors.UnsupportedVersionError)
    if list_reassignments:
        # Tansu 0.6 lists every partition as if it were being reassigned: its replicas, none adding or removing
        listed = await admin.list_partition_reassignments([tp])
        assert listed[tp].adding_replicas == listed[tp].removing_replicas == () and listed[tp].replicas
    else:
        with pytest.raises(errors.UnsupportedVersionError, match="LIST_PARTITION_REASSIGNMENTS"):
            await admin.list_partition_reassignments()
    with pytest.raises(errors.UnsupportedVersionError, match="DESCRIBE_CLIENT_QUOTAS"):
        await admin.describe_client_quotas()
    entity = ClientQuotaEntity(client_id="c")
    quota = await admin.alter_client_quotas({entity: {"producer_byte_rate": 1024.0}})
    assert isinstance(quota.errors[entity], errors.UnsupportedVersionError)


async def test_consumer_offset_lookups_and_lag_noida(noida: EmbeddedBroker) -> None:
    bs, topic = noida.bootstrap_servers, "admin-lookups"
    t0 = TopicPartition(topic, 0)
    await _topic_with_records(bs, topic, 1, 10)
    async with Consumer(bootstrap_servers=bs, auto_offset_reset="earliest", **FAST) as consumer:
        assert await consumer.beginning_offsets([t0]) == {t0: 0}
        assert await consumer.end_offsets([t0]) == {t0: 10}
        found = await consumer.offsets_for_times({t0: BASE_MS + 3_500})
        assert found[t0] is not None and found[t0].offset == 4 and found[t0].timestamp_ms == BASE_MS + 4_000
        assert (await consumer.offsets_for_times({t0: BASE_MS + 3_600_000}))[t0] is None
        consumer.assign([t0])
        assert consumer.lag(t0) is None                   # no Fetch answer yet
        with anyio.fail_after(20):
            batch = await consumer.getmany(t0, timeout_ms=5_000, max_records=3)
            while not batch:
                batch = await consumer.getmany(t0, timeout_ms=5_000, max_records=3)
        taken = len(batch[t0])
        assert consumer.lag(t0) == 10 - taken
        with pytest.raises(errors.IllegalStateError, match="group_id"):
            consumer.group_metadata()
        with pytest.raises(ValueError, match="timestamps"):
            await consumer.offsets_for_times({t0: -1})
        with pytest.raises(errors.IllegalStateError, match="not assigned"):
            consumer.lag(TopicPartition(topic, 7))


# ---------------------------------------------------------------------------------------------- Tansu
async def test_groups_and_configs_tansu(broker: EmbeddedBroker) -> None:
    if broker.kind != "tansu":
        pytest.skip(f"Tansu's own answers; the session broker is {broker.kind} (AKRESIL_TEST_BROKER)")
    bs, topic, group = broker.bootstrap_servers, f"admin-tansu-{time.monotonic_ns()}", f"g-{time.monotonic_ns()}"
    t0 = TopicPartition(topic, 0)
    await _topic_with_records(bs, topic, 1, 10)
    async with Admin(bootstrap_servers=bs, default_api_timeout_ms=5_000) as admin:
        async with Consumer(topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                            enable_auto_commit=False, **FAST) as consumer:
            await _consume(consumer, 10)
            await consumer.commit({t0: 3})
            desc = (await admin.describe_consumer_groups([group]))[group]
            assert desc.state == "Stable" and len(desc.members) == 1
        offsets = await admin.list_consumer_group_offsets(group)
        assert offsets[t0].committed == 3
        assert (await admin.alter_consumer_group_offsets(group, {t0: 6}))[t0] is None
        assert (await admin.list_consumer_group_offsets(group))[t0].committed == 6
        res = ConfigResource("topic", topic)
        assert (await admin.incremental_alter_configs({res: {"retention.ms": "3600000"}}))[res] is None
        # Tansu 0.6 reports only the configs set on the topic, all as "default_config"
        assert (await admin.describe_configs([res]))[res]["retention.ms"].value == "3600000"
        assert (await admin.delete_consumer_groups([group]))[group] is None
        # Tansu 0.6's refusals (docs/brokers.md): no CreatePartitions, OffsetDelete, DescribeProducers,
        # transactions listing or ElectLeaders; its SCRAM describe and CreateAcls answers are malformed
        grown = await admin.create_partitions({topic: 2})
        assert isinstance(grown.errors[topic], errors.UnsupportedVersionError)
        with pytest.raises(errors.UnsupportedVersionError):
            await admin.list_transactions()
        described = await admin.describe_user_scram_credentials(["nobody"])
        assert isinstance(described.errors["nobody"], errors.ProtocolError)
        assert "malformed" in str(described.errors["nobody"])
        scram = await admin.alter_user_scram_credentials([ScramUpsertion("ops", "SCRAM-SHA-256", "pw")])
        assert scram["ops"] is None
        # ListPartitionReassignments answers (wrongly); the other three are not advertised
        await _refuses_reassignments_and_quotas(admin, t0, list_reassignments=True)


def test_admin_group_calls_under_trio(noida: EmbeddedBroker) -> None:
    """The admin engine (task groups per round, backoff sleeps, deadlines) is anyio-only: it runs on trio."""
    bs, topic, group = noida.bootstrap_servers, "admin-trio", "trio-group"
    t0 = TopicPartition(topic, 0)

    async def scenario() -> None:
        await _topic_with_records(bs, topic, 1, 5)
        async with Admin(bootstrap_servers=bs) as admin:
            assert (await admin.alter_consumer_group_offsets(group, {t0: 2}))[t0] is None
            offsets = await admin.list_consumer_group_offsets(group)
            assert (offsets[t0].committed, offsets[t0].lag) == (2, 3)
            missing = await admin.describe_consumer_groups(["trio-nope"])
            assert isinstance(missing.errors["trio-nope"], errors.GroupIdNotFoundError)
            assert (await admin.delete_consumer_groups([group]))[group] is None

    anyio.run(scenario, backend="trio")
