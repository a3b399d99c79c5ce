"""``BrokerControl`` without a running broker: what each test broker says it can do, the refusal of what it
cannot, the fault proxy's control acting on its script state, and the broker a move goes to."""

from __future__ import annotations

import pytest

from akresil.testing import (BrokerControl, Capability, EmbeddedBroker, FaultProxy, FaultProxyControl, KafkaCluster,
                             Unsupported)
from akresil.testing.control import FEATURES, KAFKA, NOIDA, PROXY, TANSU, next_node


def test_each_broker_lists_what_it_has() -> None:
    assert KafkaCluster(brokers=3).capabilities == KAFKA
    assert Capability.MOVE_LEADER not in KafkaCluster(brokers=1).capabilities     # nowhere to move a leader
    assert EmbeddedBroker(kind="tansu").capabilities == TANSU
    assert EmbeddedBroker(kind="noida").capabilities == NOIDA
    # one Kafka node: Kafka's features, no node controls
    assert EmbeddedBroker(kind="kafka").capabilities == KAFKA & FEATURES
    # the proxy: its own controls and what the broker behind it implements (not that broker's controls)
    proxied = FaultProxyControl(FaultProxy("127.0.0.1:9"), upstream=KAFKA).capabilities
    assert proxied == PROXY | (KAFKA & FEATURES) and Capability.QUOTAS in proxied
    assert FaultProxyControl(FaultProxy("127.0.0.1:9")).capabilities == PROXY


async def test_what_a_broker_cannot_do_raises_unsupported_naming_it() -> None:
    broker: BrokerControl = EmbeddedBroker(kind="tansu")
    with pytest.raises(Unsupported, match="cannot move leader .*MOVE_LEADER") as raised:
        await broker.move_leader("t", 0, 2)
    assert isinstance(raised.value, NotImplementedError) and raised.value.capability is Capability.MOVE_LEADER
    with pytest.raises(Unsupported, match="KILL_NODE"):
        await broker.kill_node(111)
    with pytest.raises(Unsupported, match="THROTTLE.*set_client_quota"):    # a real broker throttles under a quota
        await KafkaCluster(brokers=3).throttle(1, 100)


async def test_the_proxy_s_control_acts_on_its_script_state() -> None:
    proxy = FaultProxy("127.0.0.1:9", nodes=3)
    control = FaultProxyControl(proxy)
    assert control.node_ids == (1, 2, 3) and control.bootstrap_servers == proxy.bootstrap_servers
    leader, epoch = await control.leader("t", 1)
    assert leader == 2                                     # partition p led by node p % 3 + 1
    assert await control.move_leader("t", 1, 3) == epoch + 1
    assert await control.leader("t", 1) == (3, epoch + 1)
    await control.throttle(3, 50, count=2)
    with pytest.raises(RuntimeError, match="stop_node: the proxy is not running"):
        await control.stop_node(1)                         # I/O on the proxy's loop: none yet


def test_a_move_goes_to_the_next_broker_id() -> None:
    assert next_node([3, 1, 2], 1) == 2 and next_node((1, 2, 3), 3) == 1
    with pytest.raises(ValueError, match="node: 7 is not one of the broker ids"):
        next_node([1, 2, 3], 7)
