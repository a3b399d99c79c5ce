"""Fault scripts: a fixed timeline of proxy actions, the same for every client in a run.

A script is data (``FaultStep``s at offsets from the start of a client's run) so it can be printed into the
report, shaded in the plots and unit-tested without a proxy.  ``ScriptCursor`` hands out the steps that are
due at a given elapsed time; the runner drives it with the real clock, tests with made-up times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: actions the runner knows how to apply to a ``FaultProxy`` (see ``runner.apply_step``)
ACTIONS = frozenset({"move_all_leaders", "throttle_all_nodes", "stop_node", "start_node", "fail_produce",
                     "clear"})


@dataclass(frozen=True)
class FaultStep:
    """One proxy action ``at_s`` seconds into the run; ``window_s`` is how long its effect lasts (for shading
    and per-window metrics), 0 for an instantaneous action."""

    at_s: float
    action: str
    args: dict[str, Any] = field(default_factory=dict)
    window_s: float = 0.0
    label: str = ""

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"fault step action: unknown {self.action!r} (known: {', '.join(sorted(ACTIONS))})")
        if self.at_s < 0:
            raise ValueError(f"fault step {self.action}: at_s must be >= 0, got {self.at_s}")
        if self.window_s < 0:
            raise ValueError(f"fault step {self.action}: window_s must be >= 0, got {self.window_s}")

    def as_dict(self) -> dict[str, Any]:
        return {"at_s": round(self.at_s, 3), "action": self.action, "args": self.args,
                "window_s": round(self.window_s, 3), "label": self.label}


@dataclass(frozen=True)
class FaultScript:
    """Steps in time order within ``duration_s`` (the load runs for the whole duration)."""

    duration_s: float
    steps: tuple[FaultStep, ...]

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise ValueError(f"fault script: duration_s must be > 0, got {self.duration_s}")
        times = [s.at_s for s in self.steps]
        if times != sorted(times):
            raise ValueError("fault script: steps must be in time order")
        for s in self.steps:
            if s.at_s > self.duration_s:
                raise ValueError(f"fault script: step {s.action} at {s.at_s} s is after the end "
                                 f"({self.duration_s} s)")

    def windows(self) -> list[tuple[float, float, str]]:
        """(start_s, end_s, label) of every step with a lasting effect: the shaded spans of the plots."""
        return [(s.at_s, min(self.duration_s, s.at_s + s.window_s), s.label or s.action)
                for s in self.steps if s.window_s > 0]

    def instants(self) -> list[tuple[float, str]]:
        """(at_s, label) of instantaneous steps (leader moves): vertical lines in the plots."""
        return [(s.at_s, s.label or s.action) for s in self.steps if s.window_s == 0 and s.action != "clear"]

    def cursor(self) -> ScriptCursor:
        return ScriptCursor(self)

    def as_dict(self) -> dict[str, Any]:
        return {"duration_s": self.duration_s, "steps": [s.as_dict() for s in self.steps]}


class ScriptCursor:
    """Walks a script once: ``due(elapsed_s)`` returns the steps whose time has come, each exactly once."""

    def __init__(self, script: FaultScript) -> None:
        self.script = script
        self._next = 0

    def due(self, elapsed_s: float) -> list[FaultStep]:
        steps = self.script.steps
        start = self._next
        while self._next < len(steps) and steps[self._next].at_s <= elapsed_s:
            self._next += 1
        return list(steps[start:self._next])

    def next_at(self) -> float | None:
        """When the next step is due (``None``: the script is done)."""
        steps = self.script.steps
        return steps[self._next].at_s if self._next < len(steps) else None

    @property
    def done(self) -> bool:
        return self._next >= len(self.script.steps)
