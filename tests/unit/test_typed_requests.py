"""``request()`` is typed by the API it sends (akresil/net/request_types.py): mypy accepts a body and key reads
that match the API's message types and rejects, on exactly the marked lines, a body key the request does not have,
a read of a key the response does not have, a body meant for another API and a wrong value type. Without the
typed entry points every line of the sample passes (bodies and answers were ``dict[str, Any]``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parents[2]

#: ``# error: CODE`` marks a line mypy must reject with that error code; every other line must pass
SAMPLE = '''
from akresil.net.cluster import Cluster
from akresil.net.connection import Connection
from akresil.net.router import Router
from akresil.protocol.api import ApiKey
from akresil.protocol.messages import FetchRequest, MetadataRequest


def metadata_body(version: int) -> MetadataRequest:
    return {"topics": None, "allow_auto_topic_creation": version < 4}


async def right(cluster: Cluster, conn: Connection, router: Router) -> list[str]:
    _, md = await cluster.request(0, ApiKey.METADATA, metadata_body)
    hosts = [f"{b['host']}:{b['port']}" for b in md["brokers"]]
    leaders = [p["leader_id"] for t in md["topics"] for p in t["partitions"]]
    node, _, found = await cluster.request_any(ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": ["g"]})
    hosts += [c["host"] for c in found.get("coordinators") or ()]
    versions = await conn.request(ApiKey.API_VERSIONS, {"client_software_name": "app"})
    created = await router.to_controller(ApiKey.CREATE_TOPICS, {"topics": [{"name": "t", "num_partitions": 1}]},
                                         timeout_ms=1000)
    return hosts + [str(node), str(leaders), str(versions["api_keys"]), created["topics"][0]["name"]]


async def wrong(cluster: Cluster, conn: Connection, router: Router, fetch: FetchRequest) -> None:
    await cluster.request(0, ApiKey.METADATA, {"topicz": None})  # error: call-overload
    _, md = await cluster.request(0, ApiKey.METADATA, metadata_body)
    print(md["brokerz"])  # error: typeddict-item
    print([b["hostname"] for b in md["brokers"]])  # error: typeddict-item
    await cluster.request(0, ApiKey.PRODUCE, fetch)  # error: call-overload
    await cluster.request_any(ApiKey.FIND_COORDINATOR, {"key_type": "group"})  # error: call-overload
    versions = await conn.request(ApiKey.API_VERSIONS, {})
    print(versions["api_key"])  # error: typeddict-item
    created = await router.to_controller(ApiKey.CREATE_TOPICS, {"topics": []}, timeout_ms=1000)
    print(created["topics"][0]["topic"])  # error: typeddict-item
'''


def test_request_bodies_and_response_reads_are_checked_per_api(tmp_path: Path) -> None:
    (tmp_path / "sample.py").write_text(SAMPLE.lstrip("\n"), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    # silent imports: akresil's own modules are analysed for their types, only the sample's lines are reported
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                           "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", "--show-error-codes",
                           "--hide-error-context", "sample.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert not done.stderr, done.stderr
    found: dict[int, str] = {}
    for line in done.stdout.splitlines():
        m = re.match(r"^sample\.py:(\d+): (error|note): (.*)$", line)
        assert m is not None, f"unparsed mypy output: {line}"
        if m.group(2) == "error":
            found[int(m.group(1))] = m.group(3)
    expected = {number: line.split("# error: ", 1)[1]
                for number, line in enumerate(SAMPLE.lstrip("\n").splitlines(), 1) if "# error: " in line}
    assert set(found) == set(expected), found
    for number, code in expected.items():
        assert f"[{code}]" in found[number], (number, found[number])
