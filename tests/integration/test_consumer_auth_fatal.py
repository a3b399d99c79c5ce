"""An authentication failure on a *later* connection stops the consumer, as it stops the producer.

The bootstrap connection authenticates; then the credentials stop working (rotated on the broker side) and the
consumer has to open a new connection: to the partition leader for a Fetch, or to some broker for a metadata
refresh. Either way the refusal must surface from the next ``getmany`` / ``async for`` as ``AuthenticationError``
(not be retried with backoff as a connection error, which would hammer the broker with refused logins), and
``close()`` must still be clean. The brokered tests drive FaultProxy as the SASL front; the unit-level ones
pin each request path (Fetch, ListOffsets, committed-offset lookup, the cluster's refresher) with fakes.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, TopicPartition, errors
from akresil.config import resolve
from akresil.core.backoff import ExponentialBackoff
from akresil.core.metadata import BrokerInfo, MetadataSnapshot, PartitionInfo
from akresil.core.node_state import Nodes, NodeState
from akresil.core.fetch_state import FetchState
from akresil.net.fetcher import Fetcher
from akresil.testing.sasl_server import SaslUserTable
from akresil.protocol.api import ApiKey
from akresil.testing import EmbeddedBroker, FaultProxy

from ..harness.e2e import unique_topic

USER, PASSWORD = "alice", "Alice-pw-7c1e9f"
FAST = dict(request_timeout_ms=5_000, socket_connection_setup_timeout_ms=5_000, reconnect_backoff_ms=20,
            reconnect_backoff_max_ms=100, retry_backoff_ms=20, retry_backoff_max_ms=100)
#: generous for a loaded 2-core machine; the refusal takes a few ms when idle
FAIL_WITHIN_S = 10.0


def _sasl(mechanism: str = "SCRAM-SHA-256") -> dict[str, Any]:
    return dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism, sasl_plain_username=USER,
                sasl_plain_password=PASSWORD)


def _refused(proxy: FaultProxy) -> list[int]:
    """Connection ids whose SaslAuthenticate the proxy refused."""
    return [r.connection_id for r in proxy.responses(ApiKey.SASL_AUTHENTICATE) if r.error_codes]


async def _topic_with_records(broker: EmbeddedBroker, n: int) -> str:
    topic = unique_topic("authfatal")
    async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    async with Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=1) as producer:
        await producer.send_many(topic, [(None, b"v%d" % i) for i in range(n)], partition=0)
    return topic


async def _until_raises(consumer: Consumer) -> errors.AuthenticationError:
    with anyio.fail_after(FAIL_WITHIN_S):
        while True:
            try:
                await consumer.getmany(timeout_ms=200)
            except errors.AuthenticationError as exc:
                return exc


@pytest.mark.broker
@pytest.mark.parametrize("group", [False, True], ids=["assigned", "group"])
async def test_rotated_credentials_on_reconnect_are_fatal(broker: EmbeddedBroker, group: bool) -> None:
    topic = await _topic_with_records(broker, 5)
    tp = TopicPartition(topic, 0)
    async with FaultProxy(broker.bootstrap_servers, nodes=2, sasl_users={USER: PASSWORD}) as proxy:
        kwargs: dict[str, Any] = dict(bootstrap_servers=proxy.bootstrap_servers, auto_offset_reset="earliest",
                                      **FAST, **_sasl())
        consumer = (Consumer(topic, group_id=unique_topic("g"), session_timeout_ms=6_000,
                             heartbeat_interval_ms=500, **kwargs) if group else Consumer(**kwargs))
        if not group:
            consumer.assign([tp])
        # the bound sits outside the consumer: its task group must be exited inside the scopes it entered in
        with anyio.fail_after(60):
            async with consumer:
                await _consume_then_rotate(proxy, consumer)
        # close() was clean: no ExceptionGroup or cancellation leaked from a background task


async def _consume_then_rotate(proxy: FaultProxy, consumer: Consumer) -> None:
        got: list[bytes] = []
        with anyio.fail_after(30):
            while len(got) < 5:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records]
        assert got == [b"v%d" % i for i in range(5)]
        assert not _refused(proxy)
        # the broker side rotates the password; only new connections feel it, so drop the current ones
        proxy.sasl = SaslUserTable({USER: "rotated-elsewhere"})
        await proxy.adrop_connections()
        error = await _until_raises(consumer)
        assert error.errno == 58 and not error.retriable
        assert f"authentication as '{USER}'" in str(error)
        refused = len(_refused(proxy))
        assert refused >= 1
        opened = {c.connection_id for c in proxy.connections(kind="open")}
        await anyio.sleep(0.5)    # 5+ reconnect backoffs: a client still retrying would show up now
        # nothing connects again: a connection the proxy saw open after the error surfaced can only be a login
        # that was already under way then (its TCP accept may reach the proxy's thread late), and it was refused
        late = {c.connection_id for c in proxy.connections(kind="open")} - opened
        assert late <= set(_refused(proxy)), late
        # a login already in its handshake when the error surfaced may still be refused (one per node at most)
        assert refused <= len(_refused(proxy)) <= 2
        # sticky: every later call raises it too, async for included
        with pytest.raises(errors.AuthenticationError):
            await consumer.getmany(timeout_ms=0)
        with pytest.raises(errors.AuthenticationError):
            async for _ in consumer:
                pass


@pytest.mark.broker
async def test_refused_only_by_the_leader_node(broker: EmbeddedBroker) -> None:
    """Bootstrap through one node; the partition's leader is another node, which refuses the login."""
    topic = await _topic_with_records(broker, 3)
    tp = TopicPartition(topic, 0)
    async with FaultProxy(broker.bootstrap_servers, nodes=2, sasl_users={USER: PASSWORD}) as proxy:
        leader, _ = proxy.leader(topic, 0)
        other = next(n for n in proxy.node_ids if n != leader)
        await proxy.astop_node(leader)        # no connection to the leader until the credentials changed
        consumer = Consumer(bootstrap_servers=proxy.address(other), auto_offset_reset="earliest", **FAST,
                            **_sasl("PLAIN"))
        consumer.assign([tp])
        with anyio.fail_after(60):
            async with consumer:
                assert await consumer.getmany(timeout_ms=300) == {}     # leader down: retried, not fatal
                proxy.sasl = SaslUserTable({USER: "rotated-elsewhere"})
                await proxy.astart_node(leader)
                started = time.monotonic()
                error = await _until_raises(consumer)
                assert time.monotonic() - started < FAIL_WITHIN_S
                assert error.errno == 58


# ------------------------------------------------------------------------------------ unit-level fakes
class _RefusingCluster:
    """The parts of ``Cluster`` the Fetcher uses; every request is refused as a SASL login would be."""

    def __init__(self) -> None:
        self.metadata = _Metadata()
        self.fatal_error: errors.AuthenticationError | None = None
        self.requests: list[tuple[int, ApiKey]] = []
        self.refreshes: list[str] = []
        self._now = 0.0
        self._nodes = Nodes(reconnect_backoff=ExponentialBackoff(50, 1000))

    def clock(self) -> float:
        return self._now

    def node(self, node_id: int) -> NodeState:
        """Node states as ``Cluster`` keeps them (the fetcher asks when a node may be sent to)."""
        return self._nodes[node_id]

    def on_metadata_change(self, callback: Any) -> None:
        self.listener = callback

    def request_metadata_refresh(self, cause: str) -> None:
        self.refreshes.append(cause)

    async def request(self, node_id: int, api_key: ApiKey, body: Any, **_: Any) -> tuple[int, dict[str, Any]]:
        self.requests.append((node_id, api_key))
        raise errors.AuthenticationError(f"SASL PLAIN authentication as '{USER}' with node {node_id} failed")


class _Metadata:
    # t-0 led by node 7, which has an endpoint (a leader without one counts as unknown)
    snapshot = MetadataSnapshot(brokers={7: BrokerInfo(7, "127.0.0.1", 9)},
                                topics={"t": {0: PartitionInfo("t", 0, 7, 0)}})


async def _run_until_fatal(fetcher: Fetcher) -> BaseException:
    async with anyio.create_task_group() as tg:
        await tg.start(fetcher.run)
        with anyio.fail_after(5):
            while fetcher.fatal_error is None:
                await fetcher.data_event().wait()
        # more turns: a fatal fetcher must not send again
        for _ in range(3):
            fetcher.wake()
            await anyio.sleep(0)
        fetcher.stop()
        tg.cancel_scope.cancel()
    assert fetcher.fatal_error is not None
    return fetcher.fatal_error


@pytest.mark.parametrize("start", ["fetch", "list_offsets", "committed"])
async def test_fetcher_makes_a_refused_login_fatal_on_every_request_path(start: str) -> None:
    cluster = _RefusingCluster()
    state = FetchState(auto_offset_reset="earliest")
    tp = TopicPartition("t", 0)
    state.assign([tp], from_committed=start == "committed")
    calls: list[list[TopicPartition]] = []

    async def committed(tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
        calls.append(tps)
        raise errors.AuthenticationError("SASL PLAIN authentication as 'alice' with node 3 failed")

    if start == "fetch":
        state.seek(tp, 0)
    elif start == "list_offsets":
        state.request_reset(tp)
    fetcher = Fetcher(cluster, state, resolve("consumer", {}),  # type: ignore[arg-type]
                      committed_lookup=committed if start == "committed" else None)
    error = await _run_until_fatal(fetcher)
    assert isinstance(error, errors.AuthenticationError)
    expected_key = {"fetch": ApiKey.FETCH, "list_offsets": ApiKey.LIST_OFFSETS}.get(start)
    if expected_key is None:
        assert len(calls) == 1 and not cluster.requests
    else:
        assert cluster.requests == [(7, expected_key)]     # exactly one attempt, no backoff-and-retry
    assert state.partitions[tp].error is None             # the consumer's error, not a partition's


async def test_fetcher_stops_on_an_authentication_failure_seen_by_the_cluster() -> None:
    """The metadata refresher (or the group) was refused: the cluster keeps it, the fetcher raises it."""
    cluster = _RefusingCluster()
    state = FetchState()
    fetcher = Fetcher(cluster, state, resolve("consumer", {}))  # type: ignore[arg-type]
    cluster.fatal_error = errors.AuthenticationError("TLS handshake with node 2 at 127.0.0.1:1 failed")
    error = await _run_until_fatal(fetcher)
    assert error is cluster.fatal_error and not cluster.requests
