"""The combination matrix (issue 28) on librdkafka's mock: the at-least-once cells, group protocol {classic,
consumer} x backend {asyncio, trio}. The mock answers TxnOffsetCommit without storing the offsets, so after a
rebalance the new owner starts over and exactly-once cannot hold there: all eight cells, exactly-once included, run
on Apache Kafka in tests/apache/test_combination_matrix.py. The mock's classic SyncGroup barrier copes with one
rebalance of several members (``let_followers_sync_first``, docs/brokers.md).
"""

from __future__ import annotations

from typing import Iterator

import anyio
import pytest

from ..harness.matrix import SESSION_MS, MatrixBroker, copy_with_a_kill_and_a_leader_move

pytestmark = pytest.mark.broker


class MockBroker:
    name = "mock"

    def __init__(self) -> None:
        from akresil.testing.rdkafka_mock import MockCluster
        self.mock = MockCluster(3)
        self.mock.consumer_group_set_session_timeout(SESSION_MS)
        self.mock.consumer_group_set_heartbeat_interval(300)
        self.bootstrap_servers = self.mock.bootstrap_servers
        self._leaders: dict[tuple[str, int], int] = {}

    async def create_topic(self, name: str, partitions: int) -> None:
        await anyio.to_thread.run_sync(self.mock.create_topic, name, partitions, 3)

    async def move_leader(self, topic: str, partition: int) -> None:
        current = self._leaders.get((topic, partition), partition % 3 + 1)
        target = current % 3 + 1
        await anyio.to_thread.run_sync(self.mock.set_leader, topic, partition, target)
        self._leaders[(topic, partition)] = target

    def before_group_forms(self) -> None:
        self.mock.let_followers_sync_first()

    def close(self) -> None:
        self.mock.close()


@pytest.fixture(scope="module")
def broker() -> Iterator[MockBroker]:
    b = MockBroker()
    try:
        yield b
    finally:
        b.close()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_at_least_once_copy_with_a_killed_member_and_leader_moves(broker: MatrixBroker, protocol: str,
                                                                  backend: str) -> None:
    anyio.run(copy_with_a_kill_and_a_leader_move, broker, protocol, "at_least_once", backend)
