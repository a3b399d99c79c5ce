"""The ``akresil`` command as a user runs it: subprocesses against an embedded broker."""

from __future__ import annotations

import base64
import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from akresil.cli import main
from akresil.testing import EmbeddedBroker

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]

CLI = [sys.executable, "-m", "akresil.cli"]


def akresil(*args: str, stdin: bytes = b"", timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, timeout=timeout)


def test_topics_create_list_describe_delete(broker: EmbeddedBroker) -> None:
    bs = ["-b", broker.bootstrap_servers]
    created = akresil("topics", "create", "cli-topics-a", "--partitions", "3", *bs)
    assert created.returncode == 0, created.stderr
    assert akresil("topics", "create", "cli-topics-a", *bs).returncode == 1     # exists: a runtime error
    assert akresil("topics", "create", "cli-topics-a", "--if-not-exists", *bs).returncode == 0
    listed = akresil("topics", "list", *bs)
    assert "cli-topics-a" in listed.stdout.decode().split()
    described = akresil("topics", "describe", "cli-topics-a", *bs)
    desc = orjson.loads(described.stdout)
    assert desc["name"] == "cli-topics-a" and [p["partition"] for p in desc["partitions"]] == [0, 1, 2]
    assert all(p["leader"] >= 0 for p in desc["partitions"])
    assert akresil("topics", "delete", "cli-topics-a", *bs).returncode == 0


def test_produce_consume_round_trips_json_lines(broker: EmbeddedBroker) -> None:
    bs = ["-b", broker.bootstrap_servers]
    topic = "cli-roundtrip"
    assert akresil("topics", "create", topic, "-p", "2", *bs).returncode == 0
    binary = bytes(range(250, 256))
    records = [
        {"key": "k1", "value": "hello", "headers": [["h", "1"], ["h", "2"]], "partition": 0},
        {"key": None, "value": '{"nested": true}', "headers": [], "partition": 1},
        {"key": "k3", "value": None, "headers": [["bin", {"base64": base64.b64encode(binary).decode()}]],
         "partition": 0},
        {"key": {"base64": base64.b64encode(binary).decode()}, "value": "ünïcødé", "headers": [], "partition": 1},
    ]
    lines = b"".join(orjson.dumps(r) + b"\n" for r in records)
    produced = akresil("produce", topic, "--json", *bs, stdin=lines)
    assert produced.returncode == 0, produced.stderr
    assert b"produced 4 record(s)" in produced.stderr

    consumed = akresil("consume", topic, "--from-beginning", "--max-messages", "4", *bs)
    assert consumed.returncode == 0, consumed.stderr
    out = [orjson.loads(line) for line in consumed.stdout.splitlines()]
    assert len(out) == 4
    in_log_order = [{k: r[k] for k in ("key", "value", "headers", "partition")}
                    for r in sorted(out, key=lambda r: (r["partition"], r["offset"]))]
    assert in_log_order == sorted(records, key=lambda r: r["partition"])    # stable: input order per partition
    assert all(r["topic"] == topic and r["offset"] >= 0 for r in out)

    # the consumer's output feeds produce --json unchanged (topic/offset/timestamp are ignored; each record keeps
    # its partition, so the copy needs as many: a topic Apache Kafka auto-creates has one)
    assert akresil("topics", "create", topic + "-copy", "-p", "2", *bs).returncode == 0
    copy = akresil("produce", topic + "-copy", "--json", *bs, stdin=consumed.stdout)
    assert copy.returncode == 0, copy.stderr


def test_plain_lines_with_key_and_headers(broker: EmbeddedBroker) -> None:
    bs = ["-b", broker.bootstrap_servers]
    topic = "cli-plain"
    assert akresil("topics", "create", topic, *bs).returncode == 0
    produced = akresil("produce", topic, "--key", "K", "--header", "src=cli", *bs, stdin=b"one\ntwo\r\nthree")
    assert produced.returncode == 0, produced.stderr
    consumed = akresil("consume", topic, "--from-beginning", "--max-messages", "3", *bs)
    out = [orjson.loads(line) for line in consumed.stdout.splitlines()]
    assert [r["value"] for r in out] == ["one", "two", "three"]
    assert {r["key"] for r in out} == {"K"} and all(r["headers"] == [["src", "cli"]] for r in out)


def test_consume_stops_after_idle_timeout(broker: EmbeddedBroker) -> None:
    bs = ["-b", broker.bootstrap_servers]
    topic = "cli-timeout"
    assert akresil("topics", "create", topic, *bs).returncode == 0
    assert akresil("produce", topic, *bs, stdin=b"a\nb\n").returncode == 0
    started = time.monotonic()
    consumed = akresil("consume", topic, "--from-beginning", "--timeout-ms", "1500", *bs)
    assert consumed.returncode == 0, consumed.stderr
    assert [orjson.loads(line)["value"] for line in consumed.stdout.splitlines()] == ["a", "b"]
    assert time.monotonic() - started < 15


def test_broker_prints_the_brokers_own_pid() -> None:
    proc = subprocess.Popen([*CLI, "broker", "--kind", "tansu"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        match = re.search(r"\(pid (\d+)\)", line)
        assert match, line
        cmdline = Path(f"/proc/{match.group(1)}/cmdline").read_bytes().split(b"\0")
        assert b"tansu" in Path(cmdline[0].decode()).name.encode() and cmdline[1] == b"broker", cmdline
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_group_consume_counts_idle_time_from_its_assignment(broker: EmbeddedBroker) -> None:
    # the group's join takes longer than the idle timeout (the broker holds a new member ~3 s): the join is
    # not idle time, so both records arrive
    bs = ["-b", broker.bootstrap_servers]
    topic = "cli-group-timeout"
    assert akresil("topics", "create", topic, *bs).returncode == 0
    assert akresil("produce", topic, *bs, stdin=b"a\nb\n").returncode == 0
    consumed = akresil("consume", topic, "--group", "cli-g1", "--from-beginning", "--timeout-ms", "2000", *bs,
                       timeout=60)
    assert consumed.returncode == 0, consumed.stderr
    assert [orjson.loads(line)["value"] for line in consumed.stdout.splitlines()] == ["a", "b"]
    assert b"consumed 2 record(s)" in consumed.stderr


@pytest.mark.parametrize("args, stdin, message", [
    (["produce", "t", "--json"], b'{"value": "ok"}\nnot json\n', "stdin line 2: not valid JSON"),
    (["produce", "t", "--json"], b'{"value": "v", "partiton": 1}\n', "unknown field(s) partiton"),
    (["produce", "t", "--json"], b'{"value": "v", "partition": -1}\n', "partition must be a non-negative"),
    (["produce", "t", "--json"], b'{"value": {"base64": "!!"}}\n', "not valid base64"),
    (["produce", "t", "--json"], b'[1, 2]\n', "expected a JSON object"),
    (["produce", "t", "--header", "novalue"], b"x\n", "--header 'novalue': expected name=value"),
    (["produce", "t", "-X", "linger_ms=-5"], b"x\n", "linger_ms"),
    (["produce", "t", "-X", "lingerms=5"], b"x\n", "did you mean 'linger_ms'"),
    (["consume", "bad topic!", "--from-beginning"], b"", "illegal characters"),
    (["consume", "t", "--max-messages", "0"], b"", "expected a positive integer"),
    (["demo", "--duration", "0"], b"", "between 1 and 3600"),
    (["nonsense"], b"", "invalid choice"),
])
def test_bad_input_exits_2_naming_the_problem(broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str], args: list[str], stdin: bytes,
                                               message: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    if args[0] in ("produce", "consume"):
        args = [*args, "-b", broker.bootstrap_servers]
    try:
        code = main(args)
    except SystemExit as exc:      # argparse's own usage errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("bad", "words"), [
    (b'{"value": oops}', "stdin line 3: not valid JSON"),
    # a record the producer refuses: it ended in the library's ValueError traceback
    (b'{"value": "x", "partition": 4}', "stdin line 3: partition 4 given for topic"),
])
def test_produce_json_stopping_at_a_bad_line_says_how_many_went_before(broker: EmbeddedBroker, bad: bytes,
                                                                      words: str) -> None:
    bs = ["-b", broker.bootstrap_servers]
    topic = f"cli-partial-{len(bad)}"
    assert akresil("topics", "create", topic, *bs).returncode == 0
    lines = b'{"value": "one"}\n{"value": "two"}\n' + bad + b'\n{"value": "four"}\n'
    produced = akresil("produce", topic, "--json", *bs, stdin=lines)
    assert produced.returncode == 2
    err = produced.stderr.decode()
    assert words in err and f"the 2 record(s) before it were produced to {topic}" in err and "Traceback" not in err
    consumed = akresil("consume", topic, "--from-beginning", "--timeout-ms", "1500", *bs)
    assert [orjson.loads(line)["value"] for line in consumed.stdout.splitlines()] == ["one", "two"]
    plain = akresil("produce", topic, "--partition", "3", *bs, stdin=b"x\n")
    assert plain.returncode == 2 and "stdin line 1: partition 3 given" in plain.stderr.decode()


def test_json_values_round_trip_through_consume(broker: EmbeddedBroker) -> None:
    bs = ["-b", broker.bootstrap_servers]
    topic = "cli-json-values"
    assert akresil("topics", "create", topic, *bs).returncode == 0
    values = [{"nested": 1, "list": [1, "a", None]}, [1, 2], "text", '{"spaced": true}', {"base64": "//4="},
              '{"base64":"//4="}']
    lines = b"".join(orjson.dumps({"value": v}) + b"\n" for v in values)
    assert akresil("produce", topic, "--json", *bs, stdin=lines).returncode == 0
    consumed = akresil("consume", topic, "--from-beginning", "--max-messages", str(len(values)), *bs)
    out = [orjson.loads(line)["value"] for line in consumed.stdout.splitlines()]
    # an object or array comes back as itself; a string stays a string unless it is compact JSON text of one
    # (the same bytes either way); {"base64": ...} is bytes, and JSON text that looks like it stays text
    assert out == [values[0], values[1], "text", '{"spaced": true}', {"base64": "//4="}, '{"base64":"//4="}']
    copy = akresil("produce", topic + "-copy", "--json", *bs, stdin=consumed.stdout)
    assert copy.returncode == 0, copy.stderr
    again = akresil("consume", topic + "-copy", "--from-beginning", "--max-messages", str(len(values)), *bs)
    assert [orjson.loads(line)["value"] for line in again.stdout.splitlines()] == out


def test_groups_list_gives_each_groups_state(broker: EmbeddedBroker) -> None:
    # Tansu's ListGroups says "Unknown" for every group; the coordinator's DescribeGroups knows better
    bs = ["-b", broker.bootstrap_servers]
    topic = "cli-groups-list"
    assert akresil("topics", "create", topic, *bs).returncode == 0
    assert akresil("produce", topic, *bs, stdin=b"a\n").returncode == 0
    for group in ("cli-gl-1", "cli-gl-2"):
        consumed = akresil("consume", topic, "--group", group, "--from-beginning", "--max-messages", "1", *bs,
                           timeout=60)
        assert consumed.returncode == 0, consumed.stderr
    listed = akresil("groups", "list", "--json", *bs)
    assert listed.returncode == 0, listed.stderr
    states = {r["group"]: r["state"] for r in map(orjson.loads, listed.stdout.splitlines())}
    assert states["cli-gl-1"] == states["cli-gl-2"] == "Empty", states
    assert "Unknown" not in states.values(), states
    empty = akresil("groups", "list", "--state", "empty", "--json", *bs)
    assert {"cli-gl-1", "cli-gl-2"} <= {r["group"] for r in map(orjson.loads, empty.stdout.splitlines())}
    stable = akresil("groups", "list", "--state", "Stable", "--json", *bs)
    assert not {"cli-gl-1", "cli-gl-2"} & {r["group"] for r in map(orjson.loads, stable.stdout.splitlines())}


def test_python_dash_m_akresil_runs_the_cli() -> None:
    done = subprocess.run([sys.executable, "-m", "akresil", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("akresil "), done.stderr


def test_broker_kind_kafka_without_java_names_the_cause_and_the_fix() -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = "/nonexistent"
    done = subprocess.run([sys.executable, "-m", "akresil", "broker", "--kind", "kafka"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 1, done.stderr
    assert "akresil: error: Apache Kafka needs a Java 17+ runtime" in done.stderr
    assert "apt-get install -y openjdk-17-jdk-headless" in done.stderr and "Traceback" not in done.stderr
