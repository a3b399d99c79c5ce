"""A broker-side KIP-714 receiver for tests: ``akresil/testing/java/TelemetrySink.java``, compiled against the
Kafka jars ``KafkaCluster`` runs, writes every PushTelemetry the broker accepts as one JSON line (client id,
instance id, terminating flag, and the metrics decoded by Kafka's own OTLP classes).

    sink = TelemetrySink(tmp_path / "pushes.jsonl")
    with KafkaCluster(1, classpath=[sink.classes()], broker_config=sink.broker_config()) as cluster:
        ...                        # configure a client-metrics subscription, run clients
        sink.pushes()              # [{"client_id": ..., "terminating": ..., "resources": [...]}, ...]

The compiled class is cached next to the jars (per Kafka version and source), so only the first use pays javac.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .kafka_jars import KafkaUnavailable, java_command, kafka_version, resolve_kafka_jars

__all__ = ["TelemetrySink", "SINK_SOURCE", "SINK_CLASS", "metrics_of"]

SINK_SOURCE = Path(__file__).with_name("java") / "TelemetrySink.java"
SINK_CLASS = "akresil.testing.TelemetrySink"
_FILE_CONFIG = "akresil.telemetry.sink.file"


class TelemetrySink:
    """The receiver plugin and the file it writes to."""

    def __init__(self, path: str | os.PathLike[str], *, version: str | None = None) -> None:
        self.path = Path(path)
        self.version = kafka_version(version)

    def classes(self) -> Path:
        """The folder holding the compiled plugin (javac on first use), for ``KafkaCluster(classpath=...)``."""
        libs = resolve_kafka_jars(self.version)
        source = SINK_SOURCE.read_bytes()
        out = libs.parent / "plugins" / f"telemetry-sink-{hashlib.sha256(source).hexdigest()[:12]}"
        if (out / "akresil" / "testing" / "TelemetrySink.class").exists():
            return out
        javac = Path(java_command()).with_name("javac")
        if not javac.exists():
            raise KafkaUnavailable(f"compiling the telemetry sink needs a JDK's javac (none next to {javac.parent}): "
                                   "install one, e.g. `apt-get install -y openjdk-17-jdk-headless`")
        out.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
        done = subprocess.run([str(javac), "--release", "17", "-Xlint:-removal", "-Xlint:-deprecation",
                               "-cp", f"{libs}/*", "-d", str(building), str(SINK_SOURCE)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"javac failed on {SINK_SOURCE} against Kafka {self.version}:\n{done.stderr[-3000:]}")
        try:
            building.rename(out)           # atomic: a concurrent build that finished first wins
        except OSError:
            if not out.exists():
                raise
        return out

    def broker_config(self) -> dict[str, str]:
        """The broker settings that register the plugin and name its file."""
        return {"metric.reporters": SINK_CLASS, _FILE_CONFIG: str(self.path)}

    def pushes(self) -> list[dict[str, Any]]:
        """Every push received so far, oldest first."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


def metrics_of(push: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The metrics of one push, whatever resource and scope they came under."""
    for resource in push.get("resources", ()):
        for scope in resource["scopes"]:
            yield from scope["metrics"]
