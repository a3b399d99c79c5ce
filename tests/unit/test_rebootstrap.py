"""Rebootstrap (KIP-899 / KIP-1102): the rule in the core, and Cluster going back to bootstrap_servers when every
broker it knows has moved, or when a broker says REBOOTSTRAP_REQUIRED; never with metadata_recovery_strategy='none'.
"""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest

from akresil import errors
from akresil.config import resolve
from akresil.core.backoff import ExponentialBackoff
from akresil.core.node_state import NodeState
from akresil.core.rebootstrap import MetadataRecovery
from akresil.net import cluster as cluster_module
from akresil.net.cluster import Cluster
from akresil.protocol.api import ApiKey

# ------------------------------------------------------------------------------------------ the core rule


def states(*failed: bool) -> list[NodeState]:
    out = []
    for i, fail in enumerate(failed):
        s = NodeState(i + 1, reconnect_backoff=ExponentialBackoff(50, 1000, rng=random.Random(0)))
        s.on_connecting(0)
        if fail:
            s.on_disconnected(0, failed=True)
        else:
            s.on_connected(0)
        out.append(s)
    return out


def test_every_known_broker_unreachable_means_rebootstrap() -> None:
    rule = MetadataRecovery(enabled=True, trigger_ms=300_000)
    assert rule.unreachable(states(True, True, True))
    assert not rule.unreachable(states(True, False, True))      # one still answers
    assert not rule.unreachable([])                             # nothing known yet: the bootstrap phase
    assert not MetadataRecovery(enabled=False, trigger_ms=300_000).unreachable(states(True, True))


def test_metadata_missing_for_the_trigger_time_since_the_first_attempt_means_rebootstrap() -> None:
    rule = MetadataRecovery(enabled=True, trigger_ms=1_000)
    assert not rule.overdue(50_000)                             # nothing wanted
    rule.on_attempt(10_000)
    rule.on_attempt(10_500)                                     # the clock runs from the first attempt
    assert not rule.overdue(10_999)
    assert rule.overdue(11_000)
    assert not rule.on_answer(0) and not rule.overdue(20_000)   # an answer stops it
    rule.on_attempt(30_000)
    rule.on_rebootstrap()
    assert not rule.overdue(40_000) and rule.rebootstraps == 1
    off = MetadataRecovery(enabled=False, trigger_ms=1_000)
    off.on_attempt(0)
    assert not off.overdue(10_000)


def test_rebootstrap_required_asks_for_it_only_when_enabled() -> None:
    assert MetadataRecovery(enabled=True, trigger_ms=1).on_answer(errors.RebootstrapRequiredError.errno)
    assert not MetadataRecovery(enabled=False, trigger_ms=1).on_answer(errors.RebootstrapRequiredError.errno)


@pytest.mark.parametrize(("value", "problem"), [
    ("sometimes", "metadata_recovery_strategy: 'sometimes' is not one of 'none', 'rebootstrap'"),
    (-1, "metadata_recovery_rebootstrap_trigger_ms: -1 is below the minimum 0"),
])
def test_bad_settings_are_named(value: Any, problem: str) -> None:
    key = problem.split(":")[0]
    with pytest.raises(errors.ConfigError, match=problem):
        resolve("producer", {key: value})


def test_java_defaults() -> None:
    config = resolve("admin", {})
    assert (config.metadata_recovery_strategy, config.metadata_recovery_rebootstrap_trigger_ms) == (
        "rebootstrap", 300_000)


# ------------------------------------------------------------------------------------------ Cluster
OLD = {1: ("old-1", 9091), 2: ("old-2", 9092)}
NEW = {1: ("new-1", 9191), 2: ("new-2", 9192)}
BOOTSTRAP = ("seed", 9000)


class Brokers:
    """Where the fake connections lead: which addresses refuse, and what Metadata answers say."""

    def __init__(self, *, old_answers: dict[str, Any] | None = None) -> None:
        self.refusing = {OLD[1], OLD[2]} if old_answers is None else set()
        self.old_answers = old_answers
        self.connects: list[tuple[str, int]] = []
        self.refused = 0
        self.enough_refusals = anyio.Event()


def metadata_answer(brokers: dict[int, tuple[str, int]], error_code: int = 0) -> dict[str, Any]:
    return {"error_code": error_code, "brokers": [{"node_id": n, "host": h, "port": p} for n, (h, p) in brokers.items()],
            "topics": [], "controller_id": 1, "cluster_id": "c"}


def fake_connection(brokers: Brokers) -> type:
    class FakeConnection:
        def __init__(self, address: tuple[str, int]) -> None:
            self.address, self.closed = address, False
            self.versions = {api: 12 for api in ApiKey}
            self.api_ranges = {api: (0, 12) for api in ApiKey}
            self.finalized_features: dict[str, int] = {}
            self.finalized_features_epoch = -1
            self.stepped_api_versions: int | None = None

        @classmethod
        async def connect(cls, host: str, port: int, *, node_id: int, **_: Any) -> "FakeConnection":
            brokers.connects.append((host, port))
            await anyio.sleep(0)
            if (host, port) in brokers.refusing:
                brokers.refused += 1
                if brokers.refused >= 8:
                    brokers.enough_refusals.set()
                raise errors.KafkaConnectionError(f"cannot connect to {host}:{port}: refused", reason="refused")
            return cls((host, port))

        def reauthentication_due(self, now: float) -> bool:
            return False

        async def request(self, api_key: ApiKey, payload: Any, *, version: int, timeout_ms: int | None) -> Any:
            assert api_key == ApiKey.METADATA
            if self.address in OLD.values() and brokers.old_answers is not None:
                return brokers.old_answers
            return metadata_answer(NEW)

        async def close(self, error: BaseException | None = None) -> None:
            self.closed = True

    return FakeConnection


def known_cluster(monkeypatch: pytest.MonkeyPatch, brokers: Brokers, strategy: str) -> Cluster:
    monkeypatch.setattr(cluster_module, "Connection", fake_connection(brokers))
    config = resolve("consumer", {"bootstrap_servers": f"{BOOTSTRAP[0]}:{BOOTSTRAP[1]}", "retry_backoff_ms": 1,
                                  "retry_backoff_max_ms": 2, "reconnect_backoff_ms": 1,
                                  "reconnect_backoff_max_ms": 2, "metadata_recovery_strategy": strategy})
    cluster = Cluster(config, rng=random.Random(0))
    cluster.metadata.update_from_metadata(metadata_answer(OLD), cluster.clock())   # what bootstrapping found
    return cluster


async def refreshing(cluster: Cluster, until: Any) -> None:
    async with anyio.create_task_group() as tg:
        cluster._tg = tg                                      # noqa: SLF001 - the refresher without a bootstrap
        tg.start_soon(cluster._refresher)                     # noqa: SLF001
        cluster.request_metadata_refresh("test")
        with anyio.fail_after(10):                            # a guard against a hang
            await until()
        await cluster.close()
        tg.cancel_scope.cancel()


def test_every_broker_moved_the_cluster_rebootstraps_and_finds_them(monkeypatch: pytest.MonkeyPatch) -> None:
    brokers = Brokers()
    cluster = known_cluster(monkeypatch, brokers, "rebootstrap")

    async def moved() -> None:
        await cluster.wait_for_metadata(timeout_ms=10_000, until=lambda: 1 in cluster.metadata.snapshot.brokers
                                        and cluster.metadata.snapshot.brokers[1].host == "new-1")

    anyio.run(refreshing, cluster, moved)
    seed = brokers.connects.index(BOOTSTRAP)
    assert set(brokers.connects[:seed]) == {OLD[1], OLD[2]}     # every known broker refused first
    assert cluster.recovery.rebootstraps == 1
    assert {(b.host, b.port) for b in cluster.metadata.snapshot.brokers.values()} == set(NEW.values())


def test_without_rebootstrap_the_known_brokers_are_tried_on(monkeypatch: pytest.MonkeyPatch) -> None:
    brokers = Brokers()
    cluster = known_cluster(monkeypatch, brokers, "none")
    anyio.run(refreshing, cluster, brokers.enough_refusals.wait)
    assert BOOTSTRAP not in brokers.connects and set(brokers.connects) == {OLD[1], OLD[2]}
    assert cluster.recovery.rebootstraps == 0


def test_rebootstrap_required_from_a_broker_sends_the_client_back_to_bootstrap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    brokers = Brokers(old_answers=metadata_answer({}, errors.RebootstrapRequiredError.errno))
    cluster = known_cluster(monkeypatch, brokers, "rebootstrap")

    async def moved() -> None:
        await cluster.wait_for_metadata(timeout_ms=10_000, until=lambda: cluster.recovery.rebootstraps > 0
                                        and 1 in cluster.metadata.snapshot.brokers)

    anyio.run(refreshing, cluster, moved)
    assert brokers.connects[0] in OLD.values() and BOOTSTRAP in brokers.connects
    assert cluster.metadata.snapshot.brokers[1].host == "new-1"
