"""Per-broker state: connection lifecycle with reconnect backoff, in-flight count, KIP-219 mute window.

KIP-219 changed brokers to answer a quota-violating request at once, with ``throttle_time_ms`` set, and to
expect the client to stay quiet for that long ("mute" the connection). Older response versions were instead
delayed by the broker before being sent, so muting after them would throttle twice. ``MUTE_FROM_VERSION``
says, per API key, from which response version a throttle means "mute me".

While muted a node receives nothing; callers wait (requests are not failed) and a queued request's timeout
only starts once it is written, so the mute never eats into ``request_timeout_ms``. A mute only moves
forward: a shorter throttle on a later response never shortens the window.

All methods take ``now`` (monotonic ms) explicitly; nothing here reads a clock or sleeps.
"""

from __future__ import annotations

import enum
from typing import Iterator

from ..errors import IllegalStateError
from . import events
from .backoff import ExponentialBackoff, RetryState
from .events import Hooks

#: API key -> first response version for which ``throttle_time_ms > 0`` means the client must mute
#: (from the message specs' "Starting in version N, on quota violation, brokers send out responses before
#: throttling"). An API missing here mutes in every version whose response has the field, as the Java client
#: does (``AbstractResponse.shouldClientThrottle``: any schema with ``throttle_time_ms``, unless the response
#: class names a version): every API added after KIP-219 (ElectLeaders, OffsetDelete, DescribeProducers, ...)
#: is answered at once and expects the client to stay quiet.
MUTE_FROM_VERSION: dict[int, int] = {
    0: 6,    # Produce
    1: 8,    # Fetch
    2: 3,    # ListOffsets
    3: 6,    # Metadata
    8: 4,    # OffsetCommit
    9: 4,    # OffsetFetch
    10: 2,   # FindCoordinator
    11: 3,   # JoinGroup
    12: 2,   # Heartbeat
    13: 2,   # LeaveGroup
    14: 2,   # SyncGroup
    15: 2,   # DescribeGroups
    16: 2,   # ListGroups
    18: 2,   # ApiVersions
    19: 3,   # CreateTopics
    20: 2,   # DeleteTopics
    21: 1,   # DeleteRecords
    22: 1,   # InitProducerId
    23: 2,   # OffsetForLeaderEpoch (throttle field added after KIP-219)
    24: 1,   # AddPartitionsToTxn
    25: 1,   # AddOffsetsToTxn
    26: 1,   # EndTxn
    28: 1,   # TxnOffsetCommit
    29: 1,   # DescribeAcls
    30: 1,   # CreateAcls
    31: 1,   # DeleteAcls
    32: 2,   # DescribeConfigs
    33: 1,   # AlterConfigs
    34: 1,   # AlterReplicaLogDirs
    35: 1,   # DescribeLogDirs
    37: 1,   # CreatePartitions
    42: 1,   # DeleteGroups
    45: 0,   # AlterPartitionReassignments (post KIP-219, as the three below)
    46: 0,   # ListPartitionReassignments
    48: 0,   # DescribeClientQuotas
    49: 0,   # AlterClientQuotas
    60: 0,   # DescribeCluster (post KIP-219)
    68: 0,   # ConsumerGroupHeartbeat (KIP-848, post KIP-219)
    69: 0,   # ConsumerGroupDescribe
    76: 0,   # ShareGroupHeartbeat (KIP-932)
    77: 0,   # ShareGroupDescribe
    78: 0,   # ShareFetch
    79: 0,   # ShareAcknowledge
}


def should_mute(api_key: int, version: int) -> bool:
    """True when a throttled response of this API version asks the client to mute (KIP-219)."""
    return version >= MUTE_FROM_VERSION.get(int(api_key), 0)


class ConnectionState(enum.Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BACKING_OFF = "backing-off"   # disconnected after a failure; reconnect not before the backoff ends


class NodeState:
    """One connection to a broker as the scheduler sees it. ``can_send(now)`` is the single gate for writing a
    request. ``lane`` names which of the broker's connections it is (``net.cluster.Lane``: the shared one, or a
    group member's to its coordinator); every event carries it next to the broker's ``node_id``."""

    __slots__ = ("node_id", "lane", "max_in_flight", "state", "in_flight", "muted_until", "_reconnect", "_hooks",
                 "last_throttle_ms")

    def __init__(self, node_id: int, *, reconnect_backoff: ExponentialBackoff, max_in_flight: int = 5,
                 hooks: Hooks | None = None, lane: str = "shared") -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight_requests_per_connection: must be >= 1, got {max_in_flight!r}")
        self.node_id = node_id
        self.lane = lane
        self.max_in_flight = max_in_flight
        self.state = ConnectionState.DISCONNECTED
        self.in_flight = 0
        self.muted_until = 0.0
        self.last_throttle_ms = 0.0
        self._reconnect = RetryState(reconnect_backoff)
        self._hooks = hooks if hooks is not None else Hooks()

    # ------------------------------------------------------------------ connection lifecycle
    def _set_state(self, state: ConnectionState) -> None:
        if state is not self.state:
            self.state = state
            self._hooks.emit(events.NODE_STATE, node_id=self.node_id, lane=self.lane, state=state.value)

    def on_connecting(self, now: float) -> None:
        if self.state is ConnectionState.BACKING_OFF and not self._reconnect.ready(now):
            raise IllegalStateError(
                f"node {self.node_id}: connecting during reconnect backoff "
                f"({self._reconnect.remaining_ms(now):.0f} ms left)")
        self._set_state(ConnectionState.CONNECTING)

    def on_connected(self, now: float) -> None:
        self._reconnect.on_success()
        self._set_state(ConnectionState.CONNECTED)

    def on_disconnected(self, now: float, *, failed: bool = True) -> None:
        """The connection closed (or never opened). A failure starts the KIP-580 reconnect backoff.

        ``in_flight`` is left alone: each outstanding request still reports ``on_request_done`` as it fails.
        """
        if failed:
            delay = self._reconnect.on_failure(now)
            self._set_state(ConnectionState.BACKING_OFF)
            self._hooks.emit(events.RECONNECT_BACKOFF, node_id=self.node_id, lane=self.lane, failures=self._reconnect.failures,
                             backoff_ms=delay)
        else:
            self._set_state(ConnectionState.DISCONNECTED)

    @property
    def reconnect_failures(self) -> int:
        return self._reconnect.failures

    def next_connect_at(self, now: float) -> float | None:
        """When a (re)connect may start, or None if it may start now."""
        if self.state is ConnectionState.BACKING_OFF and not self._reconnect.ready(now):
            return self._reconnect.next_allowed_at
        return None

    # ------------------------------------------------------------------ requests
    def on_request_sent(self, now: float) -> None:
        self.in_flight += 1
        self._hooks.emit(events.REQUEST_SENT, node_id=self.node_id, lane=self.lane, in_flight=self.in_flight)

    def on_request_done(self, now: float) -> None:
        if self.in_flight <= 0:
            raise IllegalStateError(f"node {self.node_id}: request completed with none in flight")
        self.in_flight -= 1
        self._hooks.emit(events.REQUEST_DONE, node_id=self.node_id, lane=self.lane, in_flight=self.in_flight)

    def on_response(self, api_key: int, version: int, throttle_time_ms: float, now: float) -> bool:
        """Apply a response's throttle; returns True when it muted (or extended the mute of) the node."""
        if throttle_time_ms is None or throttle_time_ms <= 0:
            return False
        self.last_throttle_ms = float(throttle_time_ms)
        mute = should_mute(api_key, version)
        extended = False
        if mute:
            until = now + throttle_time_ms
            if until > self.muted_until:   # a mute only moves forward
                self.muted_until = until
                extended = True
        self._hooks.emit(events.THROTTLED, node_id=self.node_id, lane=self.lane, api_key=int(api_key), version=version,
                         throttle_ms=float(throttle_time_ms), muted=mute, muted_until=self.muted_until)
        return extended

    # ------------------------------------------------------------------ queries
    def is_muted(self, now: float) -> bool:
        return now < self.muted_until

    def remaining_mute_ms(self, now: float) -> float:
        return max(0.0, self.muted_until - now)

    def can_send(self, now: float) -> bool:
        """Connected, not muted, and below ``max_in_flight_requests_per_connection``."""
        return (self.state is ConnectionState.CONNECTED and now >= self.muted_until
                and self.in_flight < self.max_in_flight)

    def next_send_at(self, now: float) -> float | None:
        """The earliest time-based gate (mute end, reconnect backoff end) still ahead, or None.

        In-flight slots and connection setup are event-driven, not timers, so they are not reflected here.
        """
        at = self.muted_until if self.muted_until > now else None
        connect_at = self.next_connect_at(now)
        if connect_at is not None and (at is None or connect_at > at):
            at = connect_at
        return at

    next_ready_at = next_send_at

    def __repr__(self) -> str:
        return (f"NodeState(node_id={self.node_id}, state={self.state.value}, in_flight={self.in_flight}, "
                f"muted_until={self.muted_until:g})")


class Nodes:
    """Node states keyed by node id, created on first use with shared backoff and limits."""

    def __init__(self, *, reconnect_backoff: ExponentialBackoff, max_in_flight: int = 5,
                 hooks: Hooks | None = None) -> None:
        self._reconnect_backoff = reconnect_backoff
        self._max_in_flight = max_in_flight
        self._hooks = hooks
        self._nodes: dict[int, NodeState] = {}

    def __getitem__(self, node_id: int) -> NodeState:
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = NodeState(node_id, reconnect_backoff=self._reconnect_backoff,
                                                    max_in_flight=self._max_in_flight, hooks=self._hooks)
        return node

    get = __getitem__

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def __iter__(self) -> Iterator[NodeState]:
        return iter(list(self._nodes.values()))

    def __len__(self) -> int:
        return len(self._nodes)

    def forget(self, node_id: int) -> None:
        self._nodes.pop(node_id, None)

    def sendable(self, now: float) -> set[int]:
        """Ids of nodes that may be written to right now."""
        return {node_id for node_id, node in self._nodes.items() if node.can_send(now)}

    def remaining_mute_ms(self, now: float) -> dict[int, float]:
        return {node_id: node.remaining_mute_ms(now) for node_id, node in self._nodes.items()
                if node.is_muted(now)}

    def next_send_at(self, now: float) -> float | None:
        """Earliest future time at which some node's mute or reconnect backoff ends."""
        times = [t for t in (node.next_send_at(now) for node in self._nodes.values()) if t is not None]
        return min(times) if times else None
