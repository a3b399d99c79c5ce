"""The I/O shell's clock: monotonic milliseconds, the unit every core object reasons in."""

from __future__ import annotations

import time
from typing import Callable

Clock = Callable[[], float]


def monotonic_ms() -> float:
    """Monotonic time in milliseconds (same source asyncio's and trio's loops use)."""
    return time.monotonic() * 1000.0


def clock_source(clock: Clock) -> tuple[Callable[[], float], float]:
    """``clock`` as ``(source, scale)`` with ``clock() == source() * scale``: a per-record path (the share
    consumer's ``acknowledge``) reads the default clock's C source inline, a Python call less per record; any
    other clock (a test's) is its own source."""
    return (time.monotonic, 1000.0) if clock is monotonic_ms else (clock, 1.0)
