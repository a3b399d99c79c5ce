"""The I/O shell's clock: monotonic milliseconds, the unit every core object reasons in."""

from __future__ import annotations

import time
from typing import Callable

Clock = Callable[[], float]


def monotonic_ms() -> float:
    """Monotonic time in milliseconds (same source asyncio's and trio's loops use)."""
    return time.monotonic() * 1000.0
