"""CoordinatorLocator: the one FindCoordinator path and cache of a client (groups, transactions, the admin); and
CoordinatorTracker, the coordinator as one group member (of any protocol) or a consumer's offsets path sees it."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from akresil import errors
from akresil.core.backoff import ExponentialBackoff
from akresil.net.coordinator import GROUP, TRANSACTION, CoordinatorLocator, CoordinatorTracker
from akresil.protocol.api import ApiKey


class FakeCluster:
    """Answers FindCoordinator (v4, batched) from ``nodes`` (key -> node or error code); counts requests."""

    def __init__(self, nodes: dict[str, int], brokers: set[int] | None = None) -> None:
        self.nodes = nodes
        self.asked: list[tuple[int, list[str]]] = []
        self.gate: anyio.Event | None = None
        self.config = SimpleNamespace(request_timeout_ms=50)
        self.metadata = SimpleNamespace(snapshot=SimpleNamespace(brokers=brokers if brokers is not None else {1, 2, 3}))
        self.coordinators = CoordinatorLocator(self)  # type: ignore[arg-type]
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def request_any(self, api: ApiKey, body: Any, **kw: Any) -> tuple[int, int, dict[str, Any]]:
        assert api is ApiKey.FIND_COORDINATOR
        b = body(4)
        self.asked.append((b["key_type"], list(b["coordinator_keys"])))
        if self.gate is not None:
            await self.gate.wait()
        entries = []
        for key in b["coordinator_keys"]:
            value = self.nodes[key]
            code, node = (0, value) if value > 0 else (-value, -1)
            entries.append({"key": key, "node_id": node, "host": "h", "port": 9, "error_code": code,
                            "error_message": None})
        return 1, 4, {"coordinators": entries}

    async def wait_for_metadata(self, *, timeout_ms: float, until: Any) -> None:
        raise TimeoutError


def test_cached_until_someone_who_saw_the_node_fail_says_so() -> None:
    cluster = FakeCluster({"g": 1})
    locator = CoordinatorLocator(cluster)  # type: ignore[arg-type]

    async def main() -> None:
        assert await locator.find("g") == 1
        assert await locator.find("g") == 1
        assert len(cluster.asked) == 1                        # the second came from the cache
        cluster.nodes["g"] = 2
        assert await locator.find("g", stale=3) == 1          # another node's failure: the answer stays
        assert await locator.find("g", stale=1) == 2          # the node in the cache failed: asked again
        locator.forget("g", node=1)                           # an older failure: the newer answer stays
        assert locator.cached("g") == 2
        assert await locator.find("g", TRANSACTION) == 2      # key types are cached apart
        assert cluster.asked[-1] == (TRANSACTION, ["g"])

    anyio.run(main)


def test_one_lookup_in_flight_per_key() -> None:
    cluster = FakeCluster({"g": 2})
    cluster.gate = anyio.Event()
    locator = CoordinatorLocator(cluster)  # type: ignore[arg-type]
    found: list[int] = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(lambda: _append(found, locator.find("g")))
            await wait_all_tasks_blocked()
            assert cluster.gate is not None
            cluster.gate.set()
        assert found == [2, 2, 2] and len(cluster.asked) == 1

    anyio.run(main)


async def _append(out: list[int], lookup: Any) -> None:
    out.append(await lookup)


def test_errors_are_raised_for_the_caller_to_classify_and_nothing_is_cached() -> None:
    cluster = FakeCluster({"denied": -errors.GroupAuthorizationFailedError.errno, "unknown-node": 7})
    locator = CoordinatorLocator(cluster)  # type: ignore[arg-type]

    async def main() -> None:
        with pytest.raises(errors.GroupAuthorizationFailedError, match="FindCoordinator for 'denied'"):
            await locator.find("denied")
        with pytest.raises(errors.CoordinatorNotAvailableError, match="not in the cluster metadata"):
            await locator.find("unknown-node")
        assert locator.cached("denied") is None and locator.cached("unknown-node") is None

    anyio.run(main)


def test_find_many_batches_what_is_not_cached_and_reports_errors_per_key() -> None:
    cluster = FakeCluster({"a": 1, "b": 2, "c": -errors.CoordinatorLoadInProgressError.errno})
    locator = CoordinatorLocator(cluster)  # type: ignore[arg-type]

    async def main() -> None:
        assert await locator.find("a") == 1
        found = await locator.find_many(["a", "b", "c"], GROUP)
        assert found == {"a": 1, "b": 2, "c": (errors.CoordinatorLoadInProgressError.errno, None)}
        assert cluster.asked[-1] == (GROUP, ["b", "c"])
        assert locator.cached("b") == 2 and locator.cached("c") is None

    anyio.run(main)


def tracker(cluster: FakeCluster) -> CoordinatorTracker:
    return CoordinatorTracker(cluster, "g", backoff=ExponentialBackoff(100, 1_000, rng=random.Random(0),  # type: ignore[arg-type]
                                                                       jitter=0.0))


def test_tracker_backs_off_between_failed_lookups_and_hands_a_failed_node_back_as_stale() -> None:
    cluster = FakeCluster({"g": -errors.CoordinatorNotAvailableError.errno})
    t = tracker(cluster)

    async def main() -> None:
        with pytest.raises(errors.KafkaTimeoutError, match="not found in time"):
            await t.get(deadline_ms=50)               # failed once; the next lookup (100 ms on) is past the deadline
        assert len(cluster.asked) == 1 and t.node is None
        cluster.nodes["g"] = 2
        cluster.now = 100                             # the backoff is over: no sleep, one more lookup
        assert await t.get() == 2 and len(cluster.asked) == 2
        assert await t.get() == 2 and len(cluster.asked) == 2     # known: no lookup
        cluster.nodes["g"] = 3
        t.lost("NOT_COORDINATOR")
        assert await t.get() == 3 and len(cluster.asked) == 3     # node 2 was passed as stale: not from the cache

    anyio.run(main)


def test_tracker_raises_what_retrying_cannot_mend() -> None:
    cluster = FakeCluster({"g": -errors.GroupAuthorizationFailedError.errno})

    async def main() -> None:
        with pytest.raises(errors.GroupAuthorizationFailedError):
            await tracker(cluster).get()

    anyio.run(main)
