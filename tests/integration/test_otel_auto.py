"""``opentelemetry-instrument python app.py`` traces akresil with no OpenTelemetry code in the app: the
``opentelemetry_instrumentor`` entry point loads ``AkresilInstrumentor``, and one trace runs from the producer's
``send`` through the broker to the consumer's ``process`` span, and on to a reply the handler sends; a ``Runner``
service makes the same trace, its handler call being the ``process`` span.

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

#: a Runner service as a user writes it (the upstream producer first, then the service), nothing about tracing
RUNNER_APP = '''
import sys

import anyio

from akresil import Consumer, Producer, TopicPartition
from akresil.runner import Runner


async def main(bootstrap: str, topic: str) -> None:
    async with Producer(bootstrap_servers=bootstrap, client_id="order-api", linger_ms=0) as producer:
        await producer.send(topic, b"order-1", key=b"alice")
    done = anyio.Event()

    async def bill(record, ctx):
        await ctx.send(topic + "-billed", record.value, key=record.key)
        done.set()

    async with Consumer(bootstrap_servers=bootstrap, client_id="billing", group_id="billing",
                        enable_auto_commit=False, auto_offset_reset="earliest") as consumer, \\
            Producer(bootstrap_servers=bootstrap, client_id="billing-out", linger_ms=0) as out:
        consumer.assign([TopicPartition(topic, 0)])
        async with Runner(consumer, bill, producer=out):
            await done.wait()
    print("billed", file=sys.stderr)


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


async def run_instrumented(app_text: str, broker: EmbeddedBroker, tmp_path: Path, topic: str
                           ) -> tuple[subprocess.CompletedProcess[str], set[tuple[str, int]]]:
    """Create ``topic`` and ``topic-billed``, run the app under ``opentelemetry-instrument`` with the console span
    exporter; the finished process and the cluster's broker addresses."""
    launcher = Path(sys.executable).parent / "opentelemetry-instrument"
    if not launcher.exists():
        pytest.skip("opentelemetry-instrument is not installed (pip install 'akresil[otel]' opentelemetry-distro)")
    async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=1), NewTopic(topic + "-billed", num_partitions=1)])
        cluster = await admin.describe_cluster()
    app = tmp_path / "app.py"
    app.write_text(app_text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=os.pathsep.join([str(entry_point_dist(tmp_path)), str(ROOT)]),
               OTEL_SERVICE_NAME="orders", OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none",
               OTEL_LOGS_EXPORTER="none")
    done = subprocess.run([str(launcher), sys.executable, str(app), broker.bootstrap_servers, topic],
                          capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done, {(b.host, b.port) for b in cluster.brokers}


async def test_opentelemetry_instrument_traces_an_unchanged_app(broker: EmbeddedBroker, tmp_path: Path) -> None:
    topic = unique_topic("otel-auto")
    done, brokers = await run_instrumented(APP, broker, tmp_path, topic)
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


async def test_opentelemetry_instrument_traces_a_runner_service_in_one_trace(broker: EmbeddedBroker,
                                                                           tmp_path: Path) -> None:
    topic = unique_topic("otel-runner")
    done, brokers = await run_instrumented(RUNNER_APP, broker, tmp_path, topic)
    assert "billed" in done.stderr

    spans = spans_from(done.stdout)
    named = {name: [s for s in spans if s["name"] == name]
             for name in (f"send {topic}", f"receive {topic}", f"process {topic}", f"send {topic}-billed")}
    [send], [process], [output] = named[f"send {topic}"], named[f"process {topic}"], named[f"send {topic}-billed"]
    assert named[f"receive {topic}"], "the runner's poll is a receive span"

    # the upstream send (root) -> the handler call's process span -> the handler's ctx.send, in one trace
    assert send["parent_id"] is None
    assert process["kind"] == "SpanKind.CONSUMER" and process["parent_id"] == send["context"]["span_id"]
    assert output["kind"] == "SpanKind.PRODUCER" and output["parent_id"] == process["context"]["span_id"]
    assert send["context"]["trace_id"] == process["context"]["trace_id"] == output["context"]["trace_id"]
    assert process["attributes"]["messaging.consumer.group.name"] == "billing"
    assert (process["attributes"]["server.address"], process["attributes"]["server.port"]) in brokers
    # the receive span links to the upstream send without being part of its trace
    [receive] = named[f"receive {topic}"]
    assert receive["parent_id"] is None
    assert [link["context"]["span_id"] for link in receive["links"]] == [send["context"]["span_id"]]


def test_the_instrumentor_traces_every_client_through_the_default_tracer_and_patches_nothing() -> None:
    from akresil import Consumer, ShareConsumer
    from akresil.otel import OTelTracing
    from akresil.otel_instrumentor import AkresilInstrumentor

    classes = {cls: dict(vars(cls)) for cls in (Producer, Consumer, ShareConsumer)}
    before = Producer(bootstrap_servers="127.0.0.1:1")
    AkresilInstrumentor().instrument(skip_dep_check=True)
    try:
        after = Consumer(bootstrap_servers="127.0.0.1:1")
        assert isinstance(before.hooks.tracer, OTelTracing) and after.hooks.tracer is before.hooks.tracer
        assert {cls: dict(vars(cls)) for cls in classes} == classes
    finally:
        AkresilInstrumentor().uninstrument()     # a second instance: the instrumentor is a singleton
    assert before.hooks.tracer is None and after.hooks.tracer is None
