"""Helpers of the tier's resilience tests (KIP-951, KIP-219, KIP-91, idempotence, the consumer across failures);
``loop_lag`` is the end-to-end harness's (tests/harness/e2e.py), re-exported here.

They read what akresil did from its own hooks (``akresil.core.events``), stamped with akresil's clock
(``net.clock.monotonic_ms``, the clock its mute windows and deadlines are computed on), and run under asyncio
and trio alike (anyio only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

from akresil.admin import Admin
from akresil.net.clock import monotonic_ms
from akresil.testing import KafkaCluster
from akresil.types import NewTopic

from ..harness.e2e import LoopLag, loop_lag

__all__ = ["LoopLag", "TimedHook", "loop_lag", "pinned_topic", "wait_leader"]


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
