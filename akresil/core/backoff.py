"""Exponential backoff with jitter (KIP-580) and the small per-node / per-partition retry state built on it.

KIP-580 replaced Kafka's static retry backoff with ``min(max, base * 2**(failures-1))`` scaled by a random
factor in ``[1 - jitter, 1 + jitter]`` (jitter 0.2): after an outage, clients that failed together must not
retry together. ``ExponentialBackoff`` is stateless and shareable (one per config pair); ``RetryState``
remembers one subject's consecutive failures and when it may try again.

Times are monotonic milliseconds passed in as ``now``; randomness comes from an injected ``random.Random``
so tests can fix it.
"""

from __future__ import annotations

import logging
import random
from typing import Protocol

from ..errors import ConfigError

log = logging.getLogger(__name__)

#: configurations already warned about (base > max), so per-node objects do not repeat the warning
_warned: set[tuple[str, float, float]] = set()


class RandomSource(Protocol):
    def uniform(self, a: float, b: float) -> float: ...


class ExponentialBackoff:
    """``backoff_ms(failures)``: the wait before retry number ``failures`` (1 = first retry)."""

    __slots__ = ("base_ms", "max_ms", "jitter", "_rng", "_constant", "_cap_exponent")

    def __init__(self, base_ms: float, max_ms: float, *, jitter: float = 0.2, rng: RandomSource | None = None,
                 name: str = "retry_backoff_ms") -> None:
        if base_ms < 0:
            raise ConfigError(f"{name}: must be >= 0, got {base_ms!r}")
        if max_ms < 0:
            raise ConfigError(f"{name.replace('_ms', '_max_ms')}: must be >= 0, got {max_ms!r}")
        if not 0 <= jitter < 1:
            raise ConfigError(f"backoff jitter must be in [0, 1), got {jitter!r}")
        self.base_ms = float(base_ms)
        self.max_ms = float(max_ms)
        self.jitter = float(jitter)
        self._rng: RandomSource = rng if rng is not None else random.Random()
        # KIP-580: a base above the cap means "constant cap from the first retry"; base == max is simply a
        # constant backoff and a legitimate choice, so only base > max earns the warning.
        self._constant = self.base_ms >= self.max_ms or self.base_ms == 0
        if self.base_ms > self.max_ms:
            key = (name, self.base_ms, self.max_ms)
            if key not in _warned:
                _warned.add(key)
                log.warning("%s (%g) is greater than %s (%g): using a constant backoff of %g ms",
                            name, self.base_ms, name.replace("_ms", "_max_ms"), self.max_ms, self.max_ms)
        # beyond this exponent base * 2**e is at the cap: avoids huge ints for large failure counts
        exponent = 0
        while not self._constant and self.base_ms * (2 ** exponent) < self.max_ms:
            exponent += 1
        self._cap_exponent = exponent

    def raw_ms(self, failures: int) -> float:
        """The backoff without jitter; 0 for ``failures <= 0`` (nothing failed yet)."""
        if failures <= 0:
            return 0.0
        if self._constant:
            return self.max_ms if self.base_ms > 0 else 0.0
        exponent = failures - 1
        if exponent >= self._cap_exponent:
            return self.max_ms
        return min(self.max_ms, self.base_ms * (1 << exponent))

    def backoff_ms(self, failures: int) -> float:
        """The jittered backoff before retry ``failures`` (1-based)."""
        raw = self.raw_ms(failures)
        if raw == 0.0 or self.jitter == 0.0:
            return raw
        return raw * self._rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)

    def __repr__(self) -> str:
        return f"ExponentialBackoff(base_ms={self.base_ms:g}, max_ms={self.max_ms:g}, jitter={self.jitter:g})"


class RetryState:
    """Consecutive failures of one subject (a node, a partition, the metadata refresher) and its next try.

    ``on_failure(now)`` counts a failure and pushes ``next_allowed_at`` out by the backoff; ``on_success``
    resets both. ``ready(now)`` is true when no backoff is pending.
    """

    __slots__ = ("backoff", "failures", "next_allowed_at", "last_backoff_ms")

    def __init__(self, backoff: ExponentialBackoff) -> None:
        self.backoff = backoff
        self.failures = 0
        self.next_allowed_at: float | None = None
        self.last_backoff_ms = 0.0

    def on_failure(self, now: float) -> float:
        """Record a failure at ``now``; return the backoff (ms) before the next attempt."""
        self.failures += 1
        delay = self.backoff.backoff_ms(self.failures)
        self.last_backoff_ms = delay
        self.next_allowed_at = now + delay
        return delay

    def on_success(self) -> None:
        self.failures = 0
        self.next_allowed_at = None
        self.last_backoff_ms = 0.0

    def ready(self, now: float) -> bool:
        return self.next_allowed_at is None or now >= self.next_allowed_at

    def remaining_ms(self, now: float) -> float:
        if self.next_allowed_at is None:
            return 0.0
        return max(0.0, self.next_allowed_at - now)

    def __repr__(self) -> str:
        return f"RetryState(failures={self.failures}, next_allowed_at={self.next_allowed_at})"
