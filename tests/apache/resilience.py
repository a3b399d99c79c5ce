"""Helpers of the tier's resilience tests (KIP-951, KIP-219, KIP-91, idempotence, the consumer across failures).

They read what akresil did from its own hooks (``akresil.core.events``), stamped with akresil's clock
(``net.clock.monotonic_ms``, the clock its mute windows and deadlines are computed on), and run under asyncio
and trio alike (anyio only).
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import anyio

from akresil.admin import Admin
from akresil.net.clock import monotonic_ms
from akresil.testing import KafkaCluster
from akresil.types import NewTopic


@dataclass
class TimedHook:
    """Every event akresil emits, with the time it was emitted on akresil's clock (ms)."""

    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)

    def on_event(self, name: str, fields: dict[str, Any]) -> None:
        self.events.append((monotonic_ms(), name, fields))

    def named(self, name: str, **match: Any) -> list[tuple[float, dict[str, Any]]]:
        """``(time_ms, fields)`` of each ``name`` event whose fields equal ``match``."""
        return [(t, f) for t, n, f in self.events
                if n == name and all(f.get(k) == v for k, v in match.items())]

    def mark(self) -> int:
        """A position in the log: ``since(mark)`` lists what came after it."""
        return len(self.events)

    def since(self, mark: int, name: str, **match: Any) -> list[tuple[float, dict[str, Any]]]:
        return [(t, f) for t, n, f in self.events[mark:]
                if n == name and all(f.get(k) == v for k, v in match.items())]


class LoopLag:
    """The worst lateness of the event loop's timers while a test runs (a task sleeps 5 ms at a time).

    A client's timer (a backoff end, a mute end, a deadline) is late by about as much on a loaded machine, so
    upper bounds on timing add ``max_ms``: only a machine that was actually disturbed widens them."""

    def __init__(self) -> None:
        self.max_ms = 0.0

    async def _run(self, period_s: float) -> None:
        while True:
            t0 = time.monotonic()
            await anyio.sleep(period_s)
            self.max_ms = max(self.max_ms, (time.monotonic() - t0 - period_s) * 1000.0)

    def slack_ms(self, base_ms: float) -> float:
        return base_ms + self.max_ms


@asynccontextmanager
async def loop_lag(period_s: float = 0.005) -> AsyncIterator[LoopLag]:
    lag = LoopLag()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lag._run, period_s)
        try:
            yield lag
        finally:
            tg.cancel_scope.cancel()


async def pinned_topic(cluster: KafkaCluster, name: str, replicas: dict[int, list[int]]) -> str:
    """A topic whose partition ``p`` lives on the brokers ``replicas[p]`` (the first is its leader)."""
    async with Admin(bootstrap_servers=cluster.bootstrap(brokers=cluster.running_brokers())) as admin:
        await admin.create_topics([NewTopic(name, replica_assignment=replicas)])
    return name


async def wait_leader(cluster: KafkaCluster, topic: str, partition: int, *, not_on: int,
                      timeout_s: float = 60.0) -> tuple[int, int]:
    """Until the partition's leader is a live broker other than ``not_on``: ``(leader, epoch)``."""
    with anyio.fail_after(timeout_s):
        while True:
            leader, epoch = await cluster.leader(topic, partition)
            if leader >= 0 and leader != not_on:
                return leader, epoch
            await anyio.sleep(0.1)
