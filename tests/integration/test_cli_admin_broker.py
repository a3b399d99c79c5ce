"""``akresil configs describe|alter`` and ``akresil topics add-partitions`` against noida-db, tables and JSON."""

from __future__ import annotations

from typing import Iterator

import orjson
import pytest

from akresil.cli import main
from akresil.testing import EmbeddedBroker


@pytest.fixture(scope="module")
def noida() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(kind="noida") as broker:
        yield broker


def test_configs_and_partitions_cli(noida: EmbeddedBroker, capsys: pytest.CaptureFixture[str]) -> None:
    bs = ["-b", noida.bootstrap_servers]
    assert main(["topics", "create", "cli-cfg", "-p", "2", *bs]) == 0
    capsys.readouterr()
    assert main(["configs", "describe", "--topic", "cli-cfg", *bs]) == 0
    assert capsys.readouterr().out.splitlines() == ["NAME  VALUE  SOURCE  READ-ONLY  SENSITIVE"]  # all default
    assert main(["configs", "alter", "--topic", "cli-cfg", "--set", "retention.ms=7200000",
                 "--set", "cleanup.policy=compact", *bs]) == 0
    assert "altered" in capsys.readouterr().out
    assert main(["configs", "describe", "--topic", "cli-cfg", "--json", *bs]) == 0
    rows = {r["name"]: r for r in map(orjson.loads, capsys.readouterr().out.splitlines())}
    assert rows["retention.ms"]["value"] == "7200000" and rows["retention.ms"]["source"] == "dynamic_topic_config"
    assert rows["cleanup.policy"]["value"] == "compact"
    assert main(["configs", "alter", "--topic", "cli-cfg", "--delete", "cleanup.policy", *bs]) == 0
    capsys.readouterr()
    assert main(["configs", "describe", "--topic", "cli-cfg", "--all", "--json", *bs]) == 0
    rows = {r["name"]: r for r in map(orjson.loads, capsys.readouterr().out.splitlines())}
    assert rows["cleanup.policy"]["value"] == "delete" and rows["cleanup.policy"]["source"] == "default_config"

    assert main(["topics", "add-partitions", "cli-cfg", "--total", "5", "--json", *bs]) == 0
    assert orjson.loads(capsys.readouterr().out) == {"item": "cli-cfg", "result": "now 5 partitions"}
    assert main(["topics", "describe", "cli-cfg", *bs]) == 0
    assert len(orjson.loads(capsys.readouterr().out)["partitions"]) == 5
    # fewer partitions than now: the broker's refusal is shown per topic and the exit code is 1
    assert main(["topics", "add-partitions", "cli-cfg", "--total", "3", *bs]) == 1
    assert "InvalidPartitionsError" in capsys.readouterr().out
    assert main(["configs", "alter", "--topic", "cli-cfg", *bs]) == 2
    assert "nothing to change" in capsys.readouterr().err
