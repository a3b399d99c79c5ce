"""The combination matrix (issue 28): group protocol {classic, consumer} x guarantee {at-least-once, exactly-once} x
backend {asyncio, trio}, each copying records through the runner in two member processes while the leaders of an
input and an output partition move and one member is SIGKILLed mid-copy (tests/harness/matrix.py says what each cell
must show), on Apache Kafka (reassignment + preferred election) and librdkafka's mock (``set_leader``).

Exactly-once needs offsets committed with their transaction (``TRANSACTIONAL_OFFSETS``): the mock answers
TxnOffsetCommit without storing the offsets, so after a rebalance the new owner starts over and exactly-once cannot
hold there; its cells are the at-least-once ones.  The fault proxy in front of Tansu could run the classic cells too;
they are left out to keep CI's time (the chaos soak moves leaders under a group there).
"""

from __future__ import annotations

import anyio
import pytest

from akresil.testing import BrokerControl, Capability

from ..harness.matrix import copy_with_a_kill_and_a_leader_move
from .conftest import BROKERS, GROUP_PROTOCOLS, broker_case

GUARANTEES = {"at_least_once": frozenset({Capability.MOVE_LEADER}),
              "exactly_once": frozenset({Capability.MOVE_LEADER, Capability.TRANSACTIONS,
                                         Capability.TRANSACTIONAL_OFFSETS})}
CELLS = [broker_case(kind, protocol, guarantee) for kind in ("apache", "mock")
         for protocol, group_cap in GROUP_PROTOCOLS.items()
         for guarantee, needs in GUARANTEES.items() if {group_cap, *needs} <= BROKERS[kind]]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize(("control", "protocol", "guarantee"), CELLS, indirect=["control"])
def test_copy_through_the_runner_with_a_killed_member_and_leader_moves(control: BrokerControl, protocol: str,
                                                                       guarantee: str, backend: str) -> None:
    anyio.run(copy_with_a_kill_and_a_leader_move, control, protocol, guarantee, backend)
