"""When a client goes back to ``bootstrap_servers`` (KIP-899, KIP-1102): the rule, with no I/O.

A client learns the brokers' addresses from Metadata and from then on talks only to them. If they all move (a
cluster rebuilt behind the same bootstrap name, brokers redeployed on new hosts), none of the addresses it knows
answers any more and, left alone, it retries them forever. The Java client (4.x default
``metadata.recovery.strategy=rebootstrap``) then forgets them and bootstraps again; so does akresil, on any of:

* every broker the metadata names has refused or dropped its last connection and waits out its reconnect
  backoff (KIP-899: Java's "no node available" for the metadata update);
* the metadata wanted has not arrived for ``metadata_recovery_rebootstrap_trigger_ms`` since the first attempt
  to get it (KIP-1102: brokers that accept connections but never answer);
* a broker answers Metadata with REBOOTSTRAP_REQUIRED (KIP-1102: the cluster says the client's view is stale).

With ``metadata_recovery_strategy="none"`` none of these does anything. Times are ms on the caller's clock.
"""

from __future__ import annotations

from typing import Iterable

from .. import errors
from .node_state import ConnectionState, NodeState

__all__ = ["MetadataRecovery", "REBOOTSTRAP_REQUIRED"]

REBOOTSTRAP_REQUIRED = errors.RebootstrapRequiredError.errno


class MetadataRecovery:
    """Decides when the known brokers are given up for ``bootstrap_servers`` again."""

    __slots__ = ("enabled", "trigger_ms", "_attempt_started_at", "rebootstraps")

    def __init__(self, *, enabled: bool, trigger_ms: float) -> None:
        #: ``metadata_recovery_strategy == "rebootstrap"`` (the config table refuses any other strategy)
        self.enabled = enabled
        self.trigger_ms = trigger_ms
        #: when the first attempt at the metadata wanted now started (None: the last attempt succeeded)
        self._attempt_started_at: float | None = None
        #: how many times the client went back to bootstrap_servers
        self.rebootstraps = 0

    def on_attempt(self, now: float) -> None:
        """A metadata request is about to be sent (the first since the last answer starts the KIP-1102 clock)."""
        if self._attempt_started_at is None:
            self._attempt_started_at = now

    def on_answer(self, error_code: int = 0) -> bool:
        """A Metadata answer arrived; True when it asks for a rebootstrap (REBOOTSTRAP_REQUIRED)."""
        self._attempt_started_at = None
        return self.enabled and error_code == REBOOTSTRAP_REQUIRED

    def overdue(self, now: float) -> bool:
        """True when the metadata wanted has not arrived for ``trigger_ms`` since the first attempt."""
        started = self._attempt_started_at
        return self.enabled and started is not None and now - started >= self.trigger_ms

    def unreachable(self, brokers: Iterable[NodeState]) -> bool:
        """True when there are known brokers and each one's last connection failed (it is backing off)."""
        if not self.enabled:
            return False
        states = list(brokers)
        return bool(states) and all(s.state is ConnectionState.BACKING_OFF for s in states)

    def on_rebootstrap(self) -> None:
        self.rebootstraps += 1
        self._attempt_started_at = None
