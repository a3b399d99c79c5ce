"""What every group member does the same way whatever its protocol (classic, KIP-848, KIP-932 share), sans-IO.

``net.group_session.GroupSession`` runs one membership loop for all three protocols. It asks the protocol for
the next ``Step`` and carries it out the one way every protocol shares (Java's ``ConsumerCoordinator`` and
``ConsumerMembershipManager`` agree on it, and so does franz-go's ``groupConsumer``):

- ``lose``: the membership ended under the member (fenced, unknown, session expired): ``on_partitions_lost``,
  nothing committed, since another member may own the partitions already;
- ``revoke``: commit the positions (with auto-commit), ``on_partitions_revoked``, then give them up;
- ``join``: the protocol's own join step (the classic JoinGroup / SyncGroup; the new protocols join by
  heartbeat and never ask for it);
- ``assign``: take the new full assignment, ``on_partitions_assigned`` with what it adds (possibly nothing):
  the rebalance is complete.

``listener_method`` picks the user's callback (a listener without ``on_partitions_lost`` gets
``on_partitions_revoked`` for lost partitions, as in Java); ``RebalanceRecord`` times one rebalance from its
first step to its completion for the ``rebalance`` / ``rebalance_failed`` events (``core.events``).
Every time is monotonic milliseconds passed in.
"""

from __future__ import annotations

import enum
from typing import Awaitable, Callable, Iterable, NamedTuple, TypedDict

from ..types import TopicPartition

__all__ = ["Step", "WAIT", "Callback", "listener_method", "RebalanceRecord", "RebalanceEvent", "RebalanceFailedEvent"]


class Step(NamedTuple):
    """What the membership loop does next; at most one of the four actions is set."""

    lose: frozenset[TopicPartition] = frozenset()
    revoke: frozenset[TopicPartition] = frozenset()
    join: bool = False
    #: the new full assignment (None: nothing to assign now)
    assign: frozenset[TopicPartition] | None = None
    #: with no action: nothing to do until then (None: until something changes)
    wait_until: float | None = None

    @property
    def idle(self) -> bool:
        return not (self.lose or self.revoke or self.join or self.assign is not None)


WAIT = Step()


class Callback(enum.Enum):
    """The rebalance listener's callbacks (Java's ConsumerRebalanceListener), by method name."""

    REVOKED = "on_partitions_revoked"
    ASSIGNED = "on_partitions_assigned"
    LOST = "on_partitions_lost"


def listener_method(listener: object, callback: Callback
                    ) -> Callable[[set[TopicPartition]], Awaitable[None]] | None:
    """The method of ``listener`` that serves ``callback`` (every method is optional): lost partitions go to
    ``on_partitions_revoked`` when the listener has no ``on_partitions_lost``, as in the Java client."""
    if listener is None:
        return None
    method = getattr(listener, callback.value, None)
    if method is None and callback is Callback.LOST:
        method = getattr(listener, Callback.REVOKED.value, None)
    return method if callable(method) else None


class RebalanceEvent(TypedDict):
    """The ``rebalance`` event's fields (``core.events.REBALANCE``)."""

    group_id: str
    #: the classic generation, or the member epoch (KIP-848, KIP-932)
    generation: int
    #: the full new assignment
    assigned: list[TopicPartition]
    #: what the member gave up (revoked or lost) during the rebalance
    revoked: list[TopicPartition]
    duration_ms: float


class RebalanceFailedEvent(TypedDict):
    """The ``rebalance_failed`` event's fields (``core.events.REBALANCE_FAILED``)."""

    group_id: str
    #: the error's class name
    error: str


class RebalanceRecord:
    """One rebalance as the member lives it: it starts at its first step (a revocation, a loss, a join, or a new
    target assignment) and completes when the member takes its new assignment. A failed attempt (a JoinGroup
    error, a fenced member) does not end it: the retry belongs to the same rebalance, so the duration covers it."""

    __slots__ = ("started_at", "revoked")

    def __init__(self) -> None:
        self.started_at: float | None = None
        #: partitions given up (revoked or lost) since the rebalance started
        self.revoked: set[TopicPartition] = set()

    @property
    def in_progress(self) -> bool:
        return self.started_at is not None

    def start(self, now: float) -> None:
        """A rebalance step is taken at ``now``; the first one starts the rebalance."""
        if self.started_at is None:
            self.started_at = now

    def gave_up(self, partitions: Iterable[TopicPartition], now: float) -> None:
        self.start(now)
        self.revoked.update(partitions)

    def complete(self, group_id: str, generation: int, assigned: Iterable[TopicPartition],
                 now: float) -> RebalanceEvent:
        """The ``rebalance`` event's fields; the record starts afresh."""
        started = self.started_at if self.started_at is not None else now
        fields = RebalanceEvent(group_id=group_id, generation=generation, assigned=sorted(assigned),
                                revoked=sorted(self.revoked), duration_ms=max(0.0, now - started))
        self.started_at = None
        self.revoked = set()
        return fields

    def failed(self, group_id: str, error: BaseException, now: float) -> RebalanceFailedEvent:
        """The ``rebalance_failed`` event's fields; the rebalance goes on (its retry is part of it)."""
        self.start(now)
        return RebalanceFailedEvent(group_id=group_id, error=type(error).__name__)
