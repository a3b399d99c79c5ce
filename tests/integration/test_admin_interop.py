"""Interop: a group created by confluent-kafka (librdkafka) is described and its offsets reset by akresil's
CLI, then confluent-kafka resumes from the reset offsets. Runs on noida-db (Kafka-like group semantics)."""

from __future__ import annotations

import time
from typing import Any, Iterator

import anyio
import orjson
import pytest

from akresil import Admin, NewTopic, Producer
from akresil.cli import main
from akresil.testing import EmbeddedBroker

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def noida() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(kind="noida") as broker:
        yield broker


def _ck_consumer(bootstrap: str, group: str) -> Any:
    return confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "client.id": "ck-interop", "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500})


def _poll_until(consumer: Any, n: int, deadline_s: float = 30.0) -> list[Any]:
    got: list[Any] = []
    end = time.monotonic() + deadline_s
    while len(got) < n and time.monotonic() < end:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg)
    return got


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_confluent_group_described_reset_by_akresil_then_resumed(noida: EmbeddedBroker,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bs, topic, group = noida.bootstrap_servers, "interop-reset", "ck-group"

    async def setup() -> None:
        async with Admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 2, 1)])
        async with Producer(bootstrap_servers=bs) as producer:
            for p in range(2):
                for i in range(20):
                    await producer.send(topic, b"%d-%d" % (p, i), partition=p)

    anyio.run(setup)
    consumer = _ck_consumer(bs, group)
    consumer.subscribe([topic])
    try:
        assert len(_poll_until(consumer, 40)) == 40
        consumer.commit(asynchronous=False)
        # described while librdkafka is a member: its assignment is decoded from the consumer protocol
        assert main(["groups", "describe", group, "--json", "-b", bs]) == 0
        described = _json_lines(capsys.readouterr().out)[0]
        assert described["state"] == "Stable" and described["protocol"] == "range"
        (member,) = described["members"]
        assert member["client_id"] == "ck-interop"
        assert sorted(map(tuple, member["assignment"])) == [(topic, 0), (topic, 1)]
        assert [(o["partition"], o["current_offset"], o["lag"], o["member_id"]) for o in described["offsets"]] == [
            (0, 20, 0, member["member_id"]), (1, 20, 0, member["member_id"])]
        # an active group is not reset: the broker refuses the commit, the CLI says so and exits 1
        assert main(["groups", "reset-offsets", group, "--topic", topic, "--to-offset", "5", "--execute",
                     "--json", "-b", bs]) == 1
        refused = _json_lines(capsys.readouterr().out)
        assert all("UnknownMemberIdError" in row["status"] for row in refused)
    finally:
        consumer.close()

    # dry run first: nothing changes
    assert main(["groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "5", "--json",
                 "-b", bs]) == 0
    plan = _json_lines(capsys.readouterr().out)
    assert [(r["partition"], r["previous_offset"], r["new_offset"]) for r in plan] == [(0, 20, 5)]
    assert plan[0]["status"].startswith("planned")
    assert main(["groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "5", "--execute",
                 "-b", bs]) == 0
    assert main(["groups", "reset-offsets", group, "--topic", f"{topic}:1", "--shift-by", "-3", "--execute",
                 "-b", bs]) == 0
    table = capsys.readouterr().out
    assert "NEW-OFFSET" in table and "reset" in table

    resumed = _ck_consumer(bs, group)
    resumed.subscribe([topic])
    try:
        msgs = _poll_until(resumed, 15 + 3)
        firsts: dict[int, int] = {}
        for m in msgs:
            firsts.setdefault(m.partition(), m.offset())
        assert firsts == {0: 5, 1: 17}
        assert len(msgs) == 18
    finally:
        resumed.close()

    # the human table, as kafka-consumer-groups.sh --describe prints it (no members now)
    assert main(["groups", "describe", group, "-b", bs]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"group {group}: state Empty")
    assert lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert lines[2].split() == [group, topic, "0", "5", "20", "15", "-", "-", "-"]
    assert main(["groups", "list", "-b", bs]) == 0
    assert group in capsys.readouterr().out
    assert main(["groups", "delete", group, "--json", "-b", bs]) == 0
    assert _json_lines(capsys.readouterr().out) == [{"item": group, "result": "deleted"}]
