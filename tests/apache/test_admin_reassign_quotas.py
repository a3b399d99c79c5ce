"""Partition reassignments and client quotas on Apache Kafka: a leader moved the way an operator moves it
(reorder the replicas, elect the preferred one), a reassignment listed while replication throttling keeps it
from finishing and then cancelled, and a client quota that makes the broker throttle that client for real
(KIP-219)."""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import pytest

from akresil import NewTopic, Producer, TopicPartition, errors
from akresil.admin_types import (DEFAULT, ClientQuotaEntity, ClientQuotaFilter, ClientQuotaFilterComponent,
                                 ConfigResource, PartitionReassignment)
from akresil.cli import main
from akresil.testing import KafkaCluster

from .conftest import TopicMaker


async def test_reordered_replicas_and_a_preferred_election_move_the_leader(kafka_cluster: KafkaCluster,
                                                                           make_topic: TopicMaker) -> None:
    topic = await make_topic(partitions=1, replication_factor=3)
    tp = TopicPartition(topic, 0)
    async with kafka_cluster.admin() as admin:
        before = (await admin.describe_topics([topic]))[topic].partitions[0]
        new_leader = next(r for r in before.replicas if r != before.leader)
        order = [new_leader] + [r for r in before.replicas if r != new_leader]

        refused = await admin.alter_partition_reassignments({tp: order[:2]}, allow_replication_factor_change=False)
        assert isinstance(refused.errors[tp], errors.InvalidReplicationFactorError)
        unknown_broker = await admin.alter_partition_reassignments({tp: order[:2] + [987]})
        assert isinstance(unknown_broker.errors[tp], errors.InvalidReplicaAssignmentError)

        assert (await admin.alter_partition_reassignments({tp: order})).ok == {tp: None}

        async def reordered() -> bool:
            current = (await admin.describe_topics([topic]))[topic].partitions[0]
            return list(current.replicas) == order and not await admin.list_partition_reassignments([tp])

        await kafka_cluster.wait_for(reordered)     # a reorder moves no data: done as soon as brokers know it
        assert (await admin.elect_leaders([tp])).ok == {tp: None}

        async def moved() -> bool:
            return (await admin.describe_topics([topic]))[topic].partitions[0].leader == new_leader

        await kafka_cluster.wait_for(moved)
        after = (await admin.describe_topics([topic]))[topic].partitions[0]
        assert after.leader_epoch > before.leader_epoch
        again = await admin.elect_leaders([tp])     # the preferred replica leads now: nothing to elect
        assert isinstance(again.errors[tp], errors.ElectionNotNeededError)


async def test_a_throttled_reassignment_is_listed_until_cancelled(kafka_cluster: KafkaCluster,
                                                                  unique: Callable[[str], str]) -> None:
    home, target = kafka_cluster.broker_ids[0], kafka_cluster.broker_ids[1]
    topic = unique("reassign")
    tp, idle, missing = TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(unique("no-such"), 0)
    throttled = {"leader.replication.throttled.replicas": "*", "follower.replication.throttled.replicas": "*"}
    brokers = [ConfigResource("broker", str(home)), ConfigResource("broker", str(target))]
    rate = {"leader.replication.throttled.rate": "1", "follower.replication.throttled.rate": "1"}
    async with kafka_cluster.admin() as admin:
        await admin.create_topics([NewTopic(topic, replica_assignment={0: [home], 1: [home]}, configs=throttled)])
    # more than one replica fetch (1 MiB) of data, copied at 1 B/s: the new replica cannot catch up in the test
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, linger_ms=20) as producer:
        for f in [await producer.enqueue(topic, b"x" * 10_000, partition=0) for _ in range(300)]:
            await f
    async with kafka_cluster.admin() as admin:
        try:
            (await admin.incremental_alter_configs({b: rate for b in brokers})).raise_on_error()

            async def rate_applied() -> bool:
                seen = await admin.describe_configs(brokers)
                return all(b in seen.ok and seen.ok[b].get("follower.replication.throttled.rate") is not None
                           and seen.ok[b]["follower.replication.throttled.rate"].value == "1" for b in brokers)

            await kafka_cluster.wait_for(rate_applied)
            moved = await admin.alter_partition_reassignments({tp: [home, target], idle: None, missing: [home]})
            assert moved[tp] is None
            assert isinstance(moved.errors[idle], errors.NoReassignmentInProgressError)
            assert isinstance(moved.errors[missing], errors.UnknownTopicOrPartitionError)

            listed = await admin.list_partition_reassignments()
            assert listed[tp] == PartitionReassignment(replicas=(home, target), adding_replicas=(target,),
                                                       removing_replicas=())
            assert idle not in listed
            assert await admin.list_partition_reassignments([tp, idle]) == {tp: listed[tp]}

            assert (await admin.alter_partition_reassignments({tp: None})).ok == {tp: None}
            assert await admin.list_partition_reassignments([tp]) == {}

            async def back_home() -> bool:
                return (await admin.describe_topics([topic]))[topic].partitions[0].replicas == (home,)

            await kafka_cluster.wait_for(back_home)
        finally:
            await admin.incremental_alter_configs({b: {k: None for k in rate} for b in brokers})


class _Throttles:
    """Records the client's KIP-219 throttle events (node, API, throttle time, whether it muted the node)."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def on_throttled(self, **event: Any) -> None:
        self.seen.append(event)


async def test_a_client_quota_is_described_throttles_that_client_and_is_removed(
        kafka_cluster: KafkaCluster, make_topic: TopicMaker, unique: Callable[[str], str]) -> None:
    topic = await make_topic(partitions=1, replication_factor=1)
    client = unique("throttled")
    entity = ClientQuotaEntity(client_id=client)
    mixed = ClientQuotaEntity(user=unique("u"), ip="10.1.2.3")          # Kafka: an IP quota stands alone
    only_this = ClientQuotaFilter((ClientQuotaFilterComponent("client-id", client),))
    async with kafka_cluster.admin() as admin:
        results = await admin.alter_client_quotas({
            entity: {"producer_byte_rate": 1024.0, "consumer_byte_rate": 4096.0},
            ClientQuotaEntity(client_id=unique("bad")): {"no_such_quota": 1.0},
            mixed: {"producer_byte_rate": 1.0}})
        assert results[entity] is None
        assert [type(e) for e in results.errors.values()] == [errors.InvalidRequestError] * 2

        async def described() -> bool:
            return await admin.describe_client_quotas(only_this) == {
                entity: {"producer_byte_rate": 1024.0, "consumer_byte_rate": 4096.0}}

        await kafka_cluster.wait_for(described)

    throttles = _Throttles()
    sent = 0
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, client_id=client,
                        hooks=[throttles]) as producer:
        deadline = time.monotonic() + 60      # the partition leader learns the quota from the controller
        while not throttles.seen and time.monotonic() < deadline:
            await producer.send(topic, b"x" * 4096, partition=0)
            sent += 1
    produce = [t for t in throttles.seen if t["api_key"] == 0]
    assert produce, f"no Produce answer was throttled after {sent} records of 4 KiB at a 1 KiB/s quota"
    assert produce[0]["throttle_ms"] > 0 and produce[0]["muted"]        # Produce v6+: the client mutes (KIP-219)

    async with kafka_cluster.admin() as admin:
        removed = await admin.alter_client_quotas({entity: {"producer_byte_rate": None}})
        assert removed[entity] is None

        async def only_consumer_rate_left() -> bool:
            return await admin.describe_client_quotas(only_this) == {entity: {"consumer_byte_rate": 4096.0}}

        await kafka_cluster.wait_for(only_consumer_rate_left)
        assert (await admin.alter_client_quotas({entity: {"consumer_byte_rate": None}}))[entity] is None

        async def gone() -> bool:
            return await admin.describe_client_quotas(only_this) == {}

        await kafka_cluster.wait_for(gone)


async def test_default_entities_and_validate_only(kafka_cluster: KafkaCluster, unique: Callable[[str], str]) -> None:
    user = unique("u")
    users_clients = ClientQuotaEntity(user=user, client_id=DEFAULT)     # every client id of this user
    every_user = ClientQuotaEntity(user=DEFAULT)
    async with kafka_cluster.admin() as admin:
        checked = await admin.alter_client_quotas({every_user: {"consumer_byte_rate": 1.0}}, validate_only=True)
        assert checked[every_user] is None
        assert (await admin.alter_client_quotas({users_clients: {"consumer_byte_rate": 2048.0}}))[users_clients] is None
        exact = ClientQuotaFilter((ClientQuotaFilterComponent("user", user),
                                   ClientQuotaFilterComponent("client-id", DEFAULT)), strict=True)

        async def described() -> bool:
            return await admin.describe_client_quotas(exact) == {users_clients: {"consumer_byte_rate": 2048.0}}

        await kafka_cluster.wait_for(described)
        # the validate-only change went to the controller first: had it been applied, it would show by now
        defaults = await admin.describe_client_quotas(
            ClientQuotaFilter((ClientQuotaFilterComponent("user", DEFAULT),), strict=True))
        assert defaults.get(every_user, {}).get("consumer_byte_rate") != 1.0
        # no name: every entity with a user part (Kafka 4.4 includes the default user's in it)
        anyone = await admin.describe_client_quotas(ClientQuotaFilter((ClientQuotaFilterComponent("user"),)))
        assert anyone[users_clients] == {"consumer_byte_rate": 2048.0}
        assert (await admin.alter_client_quotas({users_clients: {"consumer_byte_rate": None}}))[users_clients] is None


async def test_the_cluster_helpers_built_on_these_calls(kafka_cluster: KafkaCluster, make_topic: TopicMaker,
                                                        unique: Callable[[str], str]) -> None:
    # KafkaCluster.move_leader (reassignment + preferred election) and set_client_quota, which the tier's
    # leader-move and throttle tests rely on
    topic = await make_topic(partitions=1, replication_factor=3)
    leader, epoch = await kafka_cluster.leader(topic, 0)
    to_node = next(b for b in kafka_cluster.broker_ids if b != leader)
    new_epoch = await kafka_cluster.move_leader(topic, 0, to_node)
    assert await kafka_cluster.leader(topic, 0) == (to_node, new_epoch) and new_epoch > epoch

    client = unique("helper")
    entity, only_this = ClientQuotaEntity(client_id=client), ClientQuotaFilter(
        (ClientQuotaFilterComponent("client-id", client),))
    await kafka_cluster.set_client_quota(client_id=client, producer_byte_rate=2048.0)
    async with kafka_cluster.admin() as admin:
        async def has_quota() -> bool:
            return await admin.describe_client_quotas(only_this) == {entity: {"producer_byte_rate": 2048.0}}

        await kafka_cluster.wait_for(has_quota)
        await kafka_cluster.set_client_quota(client_id=client)          # every value None: removed

        async def no_quota() -> bool:
            return await admin.describe_client_quotas(only_this) == {}

        await kafka_cluster.wait_for(no_quota)


def _until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not true within {timeout_s} s: {condition.__name__}"
        time.sleep(0.1)


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, Any]]]:
    """Run ``akresil ARGV --json``: (exit code, the JSON lines it printed)."""
    code = main(argv + ["--json"])
    return code, [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_the_cli_moves_partitions_and_sets_quotas(kafka_cluster: KafkaCluster, unique: Callable[[str], str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bs = ["-b", kafka_cluster.bootstrap_servers]
    topic, client = unique("cli"), unique("cli-client")
    assert main(["topics", "create", topic, "-r", "3"] + bs) == 0
    assert main(["topics", "describe", topic] + bs) == 0
    replicas = json.loads(capsys.readouterr().out)["partitions"][0]["replicas"]
    order = replicas[1:] + replicas[:1]

    code, rows = _cli(["partitions", "reassign", f"{topic}:0={','.join(map(str, order))}", "no-such-topic:0=1"] + bs,
                      capsys)
    assert code == 1                                         # one partition failed
    assert rows[0] == {"topic": topic, "partition": 0, "replicas": ",".join(map(str, order)), "result": "accepted"}
    assert rows[1]["result"].startswith("UnknownTopicOrPartitionError")
    def reordered() -> bool:                                 # a reorder copies nothing: done once brokers know it
        assert main(["topics", "describe", topic] + bs) == 0
        return bool(json.loads(capsys.readouterr().out)["partitions"][0]["replicas"] == order)

    _until(reordered)
    assert _cli(["partitions", "list-reassignments", "--topic", topic] + bs, capsys) == (0, [])

    code, rows = _cli(["quotas", "alter", "--client-id", client, "--set", "producer_byte_rate=1024",
                       "--set", "consumer_byte_rate=2048"] + bs, capsys)
    assert (code, [r["result"] for r in rows]) == (0, ["altered"])
    want = [{"entity": {"client-id": client}, "quotas": {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}}]
    _until(lambda: _cli(["quotas", "describe", "--client-id", client] + bs, capsys) == (0, want))
    assert _cli(["quotas", "alter", "--client-id", client, "--delete", "producer_byte_rate",
                 "--delete", "consumer_byte_rate"] + bs, capsys)[0] == 0
    code, rows = _cli(["quotas", "alter", "--user-default", "--set", "no_such_quota=1", "--dry-run"] + bs, capsys)
    assert code == 1 and rows[0]["result"].startswith("InvalidRequestError")
