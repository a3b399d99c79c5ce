"""``FaultRunner``: plays a fault script's ``timeline`` on a ``FaultControl`` at its times (injected clock and sleep)
and heals on the way out (restarts stopped nodes, removes latency), even when cancelled.  The control is the
broker's ``BrokerControl`` with the soak's extra faults: ``FaultProxyControl`` for the fault proxy,
``KafkaClusterControl`` for Apache Kafka (controls.py)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Awaitable, Callable, Sequence

import anyio

from .controls import FaultControl
from .schedule import FaultEvent, Step, timeline

__all__ = ["FaultRunner"]

log = logging.getLogger("akresil.testing.chaos")


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class FaultRunner:
    """Plays a schedule's ``timeline`` on a ``FaultControl``; always heals (restarts nodes, removes latency).

    ``clock`` returns ms, ``sleep`` takes seconds: inject both to run a script without waiting.
    A step that raises is recorded in ``errors`` and the script goes on (a soak reports it as a violation).
    """

    def __init__(self, control: FaultControl, events: Sequence[FaultEvent], *,
                 clock: Callable[[], float] = _monotonic_ms,
                 sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
        self.control = control
        self.events = list(events)
        self.steps = timeline(self.events)
        self._clock, self._sleep = clock, sleep
        #: (ms since start when applied, step)
        self.applied: list[tuple[float, Step]] = []
        self.errors: list[str] = []
        self.faults: Counter[str] = Counter()
        self._down: set[int] = set()
        self._latency: list[tuple[int, float]] = []

    async def run(self) -> None:
        start = self._clock()
        try:
            for step in self.steps:
                delay = start + step.at_ms - self._clock()
                if delay > 0:
                    await self._sleep(delay / 1000.0)
                await self._apply(step, self._clock() - start)
        finally:
            with anyio.CancelScope(shield=True):
                await self.heal()

    async def heal(self) -> None:
        """Undo what is still in force: restart stopped nodes, remove latency rules."""
        for node in sorted(self._down):
            await self._apply(Step(0.0, "start_node", {"node": node}), None)
        for node, ms in list(self._latency):
            await self._apply(Step(0.0, "remove_latency", {"node": node, "ms": ms}), None)

    async def _apply(self, step: Step, at: float | None) -> None:
        a, c = step.args, self.control
        try:
            if step.action == "move_leader":
                await c.move_leader(a["topic"], a["partition"], a["to_node"])
            elif step.action == "throttle":
                await c.throttle(a["node"], a["ms"], count=a["count"])
            elif step.action == "drop_connections":
                await c.drop_connections(a["node"])
            elif step.action == "stop_node":
                await c.stop_node(a["node"])
                self._down.add(a["node"])
            elif step.action == "start_node":
                await c.start_node(a["node"])
                self._down.discard(a["node"])
            elif step.action == "latency":
                await c.add_latency(a["node"], a["ms"])
                self._latency.append((a["node"], a["ms"]))
            elif step.action == "remove_latency":
                await c.remove_latency(a["node"], a["ms"])
                self._latency.remove((a["node"], a["ms"]))
            elif step.action == "fail_requests":
                await c.fail_requests(a["api_key"], a["error_code"], a["count"], a["node"])
            elif step.action == "kill_consumer":
                await c.kill_consumer(a["member"])
            else:
                raise ValueError(f"unknown step action {step.action!r}")
        except Exception as exc:   # recorded: the soak reports harness failures instead of dying mid-run
            self.errors.append(f"{step.action} {dict(a)}: {type(exc).__name__}: {exc}")
            log.warning("chaos step %s %s failed: %r", step.action, dict(a), exc)
            return
        if at is not None:
            self.applied.append((at, step))
            self.faults[step.action] += 1
