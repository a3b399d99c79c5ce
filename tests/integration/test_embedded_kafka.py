"""What a user meets on the default embedded broker where Java is: Apache Kafka, started by ``akresil broker``.

Each test is a place where Tansu, the embedded broker before, misled a user (issue 32): a read_committed reader
after a ``kill -9`` of an exactly-once service saw aborted records, a ``ShareConsumer`` could not work, ``akresil
consume`` without ``--from-beginning`` printed old records and ``akresil groups describe`` showed a current offset
past the log end.  One broker (``kafka_cli_broker``, tests/integration/conftest.py) serves the whole folder.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import orjson
import pytest

from akresil import Admin, Consumer, NewTopic, Producer, ShareConsumer
from akresil.admin_types import ConfigResource
from akresil.protocol.api import ApiKey, decode_response, encode_request

from .conftest import ROOT, CliBroker
from ..harness.eos import killed_runner_restarts_exactly_once

pytestmark = pytest.mark.broker

CLI = [sys.executable, "-m", "akresil"]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _api_versions(bootstrap: str) -> dict[str, object]:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_request(ApiKey.API_VERSIONS, 3, 1, "test",
                                    {"client_software_name": "akresil-test", "client_software_version": "1"}))
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            data += sock.recv(65536)
    return decode_response(ApiKey.API_VERSIONS, 3, data[4:])


def test_the_cli_broker_is_apache_kafka_with_share_groups_and_transactions_v2(kafka_cli_broker: CliBroker) -> None:
    answer = _api_versions(kafka_cli_broker.bootstrap_servers)
    features = {f["name"]: f["max_version_level"] for f in answer["finalized_features"]}   # type: ignore[attr-defined]
    assert features["share.version"] >= 1 and features["transaction.version"] >= 2
    keys = {k["api_key"] for k in answer["api_keys"]}                                        # type: ignore[attr-defined]
    assert {ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH, ApiKey.CONSUMER_GROUP_HEARTBEAT} <= keys
    match = re.search(r"Apache Kafka 4\.\S+ broker listening on \S+ \(pid (\d+)\)", kafka_cli_broker.stderr)
    assert match, kafka_cli_broker.stderr
    cmdline = Path(f"/proc/{match.group(1)}/cmdline").read_bytes().split(b"\0")
    assert Path(cmdline[0].decode()).name == "java" and b"kafka.Kafka" in cmdline     # the JVM's own pid


async def test_read_committed_after_kill_9_of_an_exactly_once_service(kafka_cli_broker: CliBroker) -> None:
    """The scenario of tests/capabilities/test_transactions.py (SIGKILL mid-transaction, restart with the same transactional
    id): the read_committed output holds each input once, in order (Tansu showed the aborted records too)."""
    await killed_runner_restarts_exactly_once(kafka_cli_broker.bootstrap_servers)


async def test_a_share_group_works(kafka_cli_broker: CliBroker) -> None:
    bs = kafka_cli_broker.bootstrap_servers
    topic, group = _name("jobs"), _name("workers")
    async with Admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, 2)])
        (await admin.incremental_alter_configs({ConfigResource("group", group): {
            "share.auto.offset.reset": "earliest"}})).raise_on_error()
    async with Producer(bootstrap_servers=bs) as producer:
        await producer.send_many(topic, [(None, b"job-%d" % i) for i in range(20)])
    got: list[bytes] = []
    async with ShareConsumer(topic, bootstrap_servers=bs, group_id=group, acknowledgement_mode="explicit",
                             fetch_max_wait_ms=200) as queue:
        with anyio.fail_after(60):
            async for job in queue:
                assert job.value is not None
                got.append(job.value)
                queue.acknowledge(job, "accept")
                if len(got) == 20:
                    break
        assert set((await queue.commit()).values()) <= {None}
    assert sorted(got) == sorted(b"job-%d" % i for i in range(20))


async def test_consume_without_from_beginning_prints_only_new_records(kafka_cli_broker: CliBroker) -> None:
    bs = kafka_cli_broker.bootstrap_servers
    topic = _name("clicks")
    async with Admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, 2)])
    async with Producer(bootstrap_servers=bs) as producer:
        await producer.send_many(topic, [(None, b"old-%d" % i) for i in range(50)])
        consume = await anyio.open_process([*CLI, "consume", topic, "-b", bs, "--max-messages", "3"], env=ENV)
        try:
            assert consume.stdout is not None
            lines: list[dict[str, object]] = []
            buffered = b""
            n = 0
            with anyio.fail_after(60):
                while len(lines) < 3:
                    # new records keep coming until the consumer, whenever it found the log end, printed three
                    await producer.send(topic, b"new-%d" % n, partition=n % 2)
                    n += 1
                    with anyio.move_on_after(0.2):
                        buffered += await consume.stdout.receive()
                    *complete, buffered = buffered.split(b"\n")
                    lines += [orjson.loads(line) for line in complete if line]
            assert await consume.wait() == 0
        finally:
            if consume.returncode is None:
                consume.kill()
                await consume.wait()
    values = [str(line["value"]) for line in lines]
    assert values and all(v.startswith("new-") for v in values), values


async def test_groups_describe_shows_the_log_end_and_the_lag(kafka_cli_broker: CliBroker) -> None:
    bs = kafka_cli_broker.bootstrap_servers
    topic, group = _name("orders"), _name("billing")
    async with Admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, 1)])
    async with Producer(bootstrap_servers=bs, linger_ms=5) as producer:
        await producer.send_many(topic, [(None, b"%d" % i) for i in range(353)])
    async with Consumer(topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False) as consumer:
        seen = 0
        with anyio.fail_after(60):
            async for _ in consumer:
                seen += 1
                if seen == 300:
                    break
        await consumer.commit()
    done = subprocess.run([*CLI, "groups", "describe", group, "-b", bs, "--json"], capture_output=True,
                          env=ENV, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    [row] = orjson.loads(done.stdout)["offsets"]
    assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (300, 353, 53)


def test_the_cli_names_the_cause_and_the_fix_of_a_port_in_use(kafka_cli_broker: CliBroker) -> None:
    """The broker's own port is taken: ``--kind kafka`` says so before starting a JVM."""
    port = kafka_cli_broker.bootstrap_servers.rsplit(":", 1)[1]
    done = subprocess.run([*CLI, "broker", "--kind", "kafka", "--port", port], capture_output=True, text=True,
                          env=ENV, timeout=60)
    assert done.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr and "choose another port" in done.stderr

