"""Python's cyclic collections during a phase (``gc.callbacks``): how many of each generation ran, how long they
took, and which fell inside a fault window, so a latency spike can be told apart from a full collection."""

from __future__ import annotations

import gc
import time
from typing import Any


class GcLog:
    """Records (generation, start, duration, objects collected) of every collection between ``start`` and
    ``stop``; the clock is the benchmarks' ``now_s`` (``time.monotonic``)."""

    def __init__(self) -> None:
        self.events: list[tuple[int, float, float, int]] = []
        self._began = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.monotonic()
        else:
            now = time.monotonic()
            self.events.append((info["generation"], self._began, now - self._began, info["collected"]))

    def start(self) -> None:
        self.events.clear()
        gc.callbacks.append(self._callback)

    def stop(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def summary(self, windows: list[tuple[float, float]]) -> dict[str, Any]:
        """Per generation: count, total and longest ms over the phase, and the same inside the fault ``windows``
        (spans on the same clock)."""
        def per_gen(events: list[tuple[int, float, float, int]]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for gen in (0, 1, 2):
                ds = [d for g, _, d, _ in events if g == gen]
                out[f"gen{gen}"] = {"count": len(ds), "total_ms": round(sum(ds) * 1000, 2),
                                    "max_ms": round(max(ds, default=0.0) * 1000, 2)}
            return out
        return {"phase": per_gen(self.events),
                "fault": per_gen([e for e in self.events if any(lo <= e[1] < hi for lo, hi in windows)])}
