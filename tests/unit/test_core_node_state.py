"""KIP-219 mute windows, version gating, reconnect backoff and in-flight limits, driven with plain `now`."""

from __future__ import annotations

import random

import pytest

from akresil.core.backoff import ExponentialBackoff
from akresil.core.events import Hooks, RecordingHook, THROTTLED
from akresil.core.node_state import MUTE_FROM_VERSION, ConnectionState, NodeState, Nodes, should_mute
from akresil.errors import IllegalStateError

PRODUCE, FETCH, METADATA, HEARTBEAT = 0, 1, 3, 12


def connected(max_in_flight: int = 5, hooks: Hooks | None = None) -> NodeState:
    node = NodeState(1, reconnect_backoff=ExponentialBackoff(50, 1000, jitter=0.0), max_in_flight=max_in_flight,
                     hooks=hooks)
    node.on_connecting(0)
    node.on_connected(0)
    return node


def test_throttle_mutes_until_window_end_and_not_a_moment_longer() -> None:
    node = connected()
    assert node.on_response(PRODUCE, 9, throttle_time_ms=250, now=1000)
    # every instant inside the window refuses a send; the end instant allows it
    for t in (1000, 1000.5, 1100, 1249.999):
        assert not node.can_send(t)
        assert node.next_send_at(t) == 1250
    assert node.remaining_mute_ms(1100) == 150
    assert node.can_send(1250) and node.next_send_at(1250) is None and node.remaining_mute_ms(1250) == 0


@pytest.mark.parametrize("api_key, threshold", [(PRODUCE, 6), (FETCH, 8), (METADATA, 6), (HEARTBEAT, 2),
                                                (11, 3), (19, 3), (8, 4), (22, 1)])
def test_throttle_is_version_gated(api_key: int, threshold: int) -> None:
    old = connected()
    assert not old.on_response(api_key, threshold - 1, throttle_time_ms=500, now=0)
    assert old.can_send(0) and old.muted_until == 0       # the broker already delayed that response
    new = connected()
    assert new.on_response(api_key, threshold, throttle_time_ms=500, now=0)
    assert not new.can_send(499) and new.can_send(500)


@pytest.mark.parametrize("api_key", [45, 46, 48, 49, 43, 44, 47, 50, 51, 61, 65, 66])
def test_apis_newer_than_kip219_mute_from_v0(api_key: int) -> None:
    # introduced after KIP-219 with throttle_time_ms in every version: Kafka's client throttles on all of them
    node = connected()
    assert node.on_response(api_key, 0, throttle_time_ms=500, now=0)
    assert not node.can_send(499) and node.can_send(500)


def test_an_api_not_in_the_table_mutes_as_javas_client_does_and_the_table_matches_design() -> None:
    # a throttle_time_ms > 0 can only come in a response whose schema has the field: Java then mutes
    assert should_mute(9999, 0) and should_mute(43, 0)
    assert not should_mute(0, 5) and should_mute(0, 6)
    assert {k: MUTE_FROM_VERSION[k] for k in (0, 3, 1, 2, 11, 19, 8, 9, 10, 12, 13, 14, 15, 16, 18, 20, 22, 21, 37)} \
        == {0: 6, 3: 6, 1: 8, 2: 3, 11: 3, 19: 3, 8: 4, 9: 4, 10: 2, 12: 2, 13: 2, 14: 2, 15: 2, 16: 2, 18: 2,
            20: 2, 22: 1, 21: 1, 37: 1}


def test_mute_only_moves_forward() -> None:
    node = connected()
    node.on_response(FETCH, 12, 1000, now=0)
    assert not node.on_response(FETCH, 12, 10, now=100)   # 110 < 1000: keeps the longer window
    assert node.muted_until == 1000
    assert node.on_response(FETCH, 12, 1000, now=500)      # 1500 > 1000: extends
    assert node.muted_until == 1500
    assert not node.on_response(FETCH, 12, 0, now=600)


def test_throttle_event_reports_mute_and_non_mute() -> None:
    rec = RecordingHook()
    node = connected(hooks=Hooks([rec]))
    node.on_response(PRODUCE, 5, 100, now=0)
    node.on_response(PRODUCE, 6, 100, now=0)
    events = rec.named(THROTTLED)
    assert [(e["muted"], e["muted_until"]) for e in events] == [(False, 0.0), (True, 100)]


def test_in_flight_limit_gates_sends() -> None:
    node = connected(max_in_flight=2)
    node.on_request_sent(0)
    assert node.can_send(0)
    node.on_request_sent(0)
    assert not node.can_send(0)
    node.on_request_done(1)
    assert node.can_send(1)
    node.on_request_done(1)
    with pytest.raises(IllegalStateError, match="none in flight"):
        node.on_request_done(1)


def test_reconnect_backoff_grows_and_resets_on_connect() -> None:
    node = NodeState(3, reconnect_backoff=ExponentialBackoff(50, 1000, jitter=0.0))
    assert node.next_connect_at(0) is None and not node.can_send(0)
    node.on_connecting(0)
    node.on_disconnected(10, failed=True)
    assert node.state is ConnectionState.BACKING_OFF and node.next_connect_at(10) == 60
    with pytest.raises(IllegalStateError, match="reconnect backoff"):
        node.on_connecting(30)
    node.on_connecting(60)
    node.on_disconnected(60, failed=True)
    assert node.next_connect_at(60) == 160            # second failure: 100 ms
    assert node.next_send_at(100) == 160
    node.on_connecting(160)
    node.on_connected(170)
    assert node.reconnect_failures == 0 and node.can_send(170)
    node.on_disconnected(200, failed=False)           # clean close: no backoff
    assert node.state is ConnectionState.DISCONNECTED and node.next_connect_at(200) is None


def test_disconnect_keeps_in_flight_accounting_balanced() -> None:
    node = connected()
    node.on_request_sent(0)
    node.on_request_sent(0)
    node.on_disconnected(5, failed=True)
    node.on_request_done(5)   # each failed request still reports completion
    node.on_request_done(5)
    assert node.in_flight == 0


def test_next_send_at_is_the_later_of_mute_and_reconnect_backoff() -> None:
    node = connected()
    node.on_response(PRODUCE, 9, 500, now=0)
    node.on_disconnected(0, failed=True)   # backoff 50 ms, mute 500 ms
    assert node.next_send_at(0) == 500


def test_nodes_registry_reports_sendable_and_mutes() -> None:
    nodes = Nodes(reconnect_backoff=ExponentialBackoff(50, 1000, rng=random.Random(0)), max_in_flight=1)
    for node_id in (1, 2, 3):
        nodes[node_id].on_connecting(0)
        nodes[node_id].on_connected(0)
    nodes[2].on_response(PRODUCE, 9, 300, now=0)
    nodes[3].on_request_sent(0)
    assert nodes.sendable(0) == {1}
    assert nodes.remaining_mute_ms(100) == {2: 200}
    assert nodes.next_send_at(100) == 300
    assert nodes.sendable(300) == {1, 2}
    assert len(nodes) == 3 and 2 in nodes and 9 not in nodes
