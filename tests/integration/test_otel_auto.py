"""``opentelemetry-instrument python app.py`` traces akresil with no OpenTelemetry code in the app: the
``opentelemetry_instrumentor`` entry point loads ``AkresilInstrumentor``, and one trace runs from the producer's
``send`` through the broker to the consumer's ``process`` span, and on to a reply the handler sends.

The app runs in a subprocess under the real ``opentelemetry-instrument`` with the console exporter; the entry
point comes from this checkout's pyproject.toml (a dist-info made from it, first on the path), so the test does
not depend on what the installed metadata of akresil declares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.instrumentation")
pytest.importorskip("opentelemetry.distro")

from akresil import Admin, NewTopic, Producer, __version__
from akresil.testing import EmbeddedBroker

from ..harness.e2e import unique_topic

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parents[2]

#: a service as a user writes it: nothing about tracing in it
APP = '''
import sys

import anyio

from akresil import Consumer, Producer, TopicPartition


async def main(bootstrap: str, topic: str) -> None:
    async with Producer(bootstrap_servers=bootstrap, client_id="order-api", linger_ms=0) as producer:
        await producer.send(topic, b"order-1", key=b"alice")
    async with Consumer(bootstrap_servers=bootstrap, client_id="billing", auto_offset_reset="earliest") as consumer, \\
            Producer(bootstrap_servers=bootstrap, client_id="billing-replies", linger_ms=0) as replies:
        consumer.assign([TopicPartition(topic, 0)])
        async for record in consumer:
            await replies.send(topic + "-billed", record.value, key=record.key)
            print("billed", record.value, file=sys.stderr)
            break


anyio.run(main, sys.argv[1], sys.argv[2])
'''


def spans_from(console: str) -> list[dict[str, Any]]:
    """The JSON objects the console exporter wrote, one per span, back to back."""
    decoder = json.JSONDecoder()
    spans, at = [], 0
    while (start := console.find("{", at)) != -1:
        span, at = decoder.raw_decode(console, start)
        spans.append(span)
    return spans


def entry_point_dist(tmp_path: Path) -> Path:
    """A dist-info named akresil with this checkout's entry points, to put first on the subprocess's path."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    groups = project["entry-points"]
    assert "opentelemetry_instrumentor" in groups, "pyproject.toml must register the instrumentor"
    dist = tmp_path / "site" / f"akresil-{__version__}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: akresil\nVersion: {__version__}\n")
    (dist / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items()) + "\n"
        for group, entries in groups.items()))
    return dist.parent


async def test_opentelemetry_instrument_traces_an_unchanged_app(broker: EmbeddedBroker, tmp_path: Path) -> None:
    launcher = Path(sys.executable).parent / "opentelemetry-instrument"
    if not launcher.exists():
        pytest.skip("opentelemetry-instrument is not installed (pip install 'akresil[otel]' opentelemetry-distro)")
    topic = unique_topic("otel-auto")
    async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=1), NewTopic(topic + "-billed", num_partitions=1)])
        cluster = await admin.describe_cluster()
    brokers = {(b.host, b.port) for b in cluster.brokers}
    app = tmp_path / "app.py"
    app.write_text(APP, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=os.pathsep.join([str(entry_point_dist(tmp_path)), str(ROOT)]),
               OTEL_SERVICE_NAME="orders", OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none",
               OTEL_LOGS_EXPORTER="none")
    done = subprocess.run([str(launcher), sys.executable, str(app), broker.bootstrap_servers, topic],
                          capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "billed b'order-1'" in done.stderr

    spans = spans_from(done.stdout)
    by_name = {s["name"]: s for s in spans}
    send, process, reply = by_name[f"send {topic}"], by_name[f"process {topic}"], by_name[f"send {topic}-billed"]
    ids = {name: s["context"]["span_id"] for name, s in by_name.items()}

    # one trace: send (root) -> process (its child, linked to it too) -> the reply sent while processing
    assert send["kind"] == "SpanKind.PRODUCER" and send["parent_id"] is None
    assert process["kind"] == "SpanKind.CONSUMER" and process["parent_id"] == ids[f"send {topic}"]
    assert [link["context"]["span_id"] for link in process["links"]] == [ids[f"send {topic}"]]
    assert reply["kind"] == "SpanKind.PRODUCER" and reply["parent_id"] == ids[f"process {topic}"]
    assert send["context"]["trace_id"] == process["context"]["trace_id"] == reply["context"]["trace_id"]

    # the broker each request went to, and the body size
    for span in (send, process, reply):
        attrs = span["attributes"]
        assert (attrs["server.address"], attrs["server.port"]) in brokers, attrs
        assert attrs["messaging.message.body.size"] == len(b"order-1")
    assert send["attributes"]["messaging.client.id"] == "order-api"
    assert process["attributes"]["messaging.client.id"] == "billing"
    assert process["attributes"]["messaging.kafka.offset"] == 0
    assert send["resource"]["attributes"]["service.name"] == "orders"


def test_the_instrumentor_patches_and_restores_the_classes() -> None:
    from akresil import Consumer, ShareConsumer
    from akresil.otel import TracedConsumer, TracedProducer, TracedShareConsumer
    from akresil.otel_instrumentor import AkresilInstrumentor

    before = {(cls, name): cls.__dict__[name] for cls, name in [
        (Producer, "send"), (Producer, "enqueue"), (Producer, "send_many"), (Consumer, "getmany"),
        (Consumer, "getone"), (Consumer, "__anext__"), (Consumer, "close"), (ShareConsumer, "getmany"),
        (ShareConsumer, "__anext__"), (ShareConsumer, "close")]}
    traced = {Producer: TracedProducer, Consumer: TracedConsumer, ShareConsumer: TracedShareConsumer}
    AkresilInstrumentor().instrument(skip_dep_check=True)
    try:
        for cls, name in before:
            assert cls.__dict__[name] is traced[cls].__dict__[name], (cls, name)
    finally:
        AkresilInstrumentor().uninstrument()     # a second instance: the instrumentor is a singleton
    for (cls, name), function in before.items():
        assert cls.__dict__[name] is function, (cls, name)
