"""The short chaos soak on Apache Kafka: idempotent producers and a 2-member group straight against the tier's
cluster while a seeded script moves leaders (reassignment + preferred election), kills a broker (SIGKILL) and
starts it again, throttles every client with a real quota (KIP-219) and kills a group member without leaving.
Nothing acknowledged may be lost, duplicated or reordered; the group consumes everything (``KafkaClusterControl``
says which faults a real broker cannot take: they are left out).

``AKRESIL_CHAOS_SEED=<seed>`` replays another script (a pure function of the seed; client timing still varies).
"""

from __future__ import annotations

import os

import orjson
import pytest

from akresil.testing import KafkaCluster
from akresil.testing.chaos import KafkaClusterControl, SoakConfig, run_soak

pytestmark = pytest.mark.timeout(240)

#: seeds whose 20 s script holds one broker kill, throttles, several leader moves and a member kill once the
#: group formed (``generate_schedule`` is pure: tests/unit/test_chaos_schedule.py checks these contents)
SEEDS = {"classic": 14, "consumer": 22}


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_short_soak_on_apache_kafka_keeps_every_acknowledged_record(kafka_cluster: KafkaCluster,
                                                                          protocol: str) -> None:
    seed = int(os.environ.get("AKRESIL_CHAOS_SEED", SEEDS[protocol]))
    cfg = SoakConfig(seed=seed, duration_s=20.0, producers=3, partitions=6, records_per_s=300.0,
                     auto_commit=protocol == "consumer", drain_timeout_s=60.0, mean_fault_interval_ms=1200.0,
                     session_timeout_ms=6_000, kill_after_ms=5_000.0, quiet_start_ms=2_000.0,
                     group_protocol=protocol)  # type: ignore[arg-type]
    report = await run_soak(cfg, control=KafkaClusterControl(kafka_cluster))
    summary = orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode()
    where = f"seed={seed} group_protocol={protocol} (AKRESIL_CHAOS_SEED={seed} replays the fault script)"
    assert report.violations() == [], f"{where}\n{summary}"
    assert report.acked >= report.sent * 0.9 and report.acked > 300, f"{where}\n{summary}"
    assert {"move_leader", "throttle", "stop_node", "start_node", "kill_consumer"} <= set(report.faults), \
        f"{where}\n{summary}"
    assert not {"drop_connections", "latency", "fail_requests"} & set(report.faults), summary
    assert report.killed_members and report.killed_members_left == 0, f"{where}\n{summary}"
    assert report.consumed == report.acked and report.duplicates == 0 and report.reordered == 0, summary
    assert kafka_cluster.running_brokers() == kafka_cluster.broker_ids
    print(f"chaos soak on Apache Kafka {where}: {summary}")
