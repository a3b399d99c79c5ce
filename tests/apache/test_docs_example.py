"""docs/testing.md's Apache Kafka example runs as written, against the tier's cluster."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from akresil.testing import KafkaCluster

PAGE = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


async def test_the_pages_kafka_cluster_example_passes(kafka_cluster: KafkaCluster) -> None:
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## Apache Kafka, the reference broker"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, "the section lost its example"
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), f"{PAGE}:example", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    await tests[0](kafka_cluster)
