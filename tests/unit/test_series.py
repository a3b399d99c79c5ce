"""core.series.SERIES, the one table both metrics back-ends are derived from: its rows are checked when
declared and docs/metrics.md lists exactly its series (test_otel_metrics.py checks that both back-ends export
every row with the same values)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from akresil.core import events as ev
from akresil.core.series import SERIES, Series
from akresil.otel import METRIC_NAMES

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
_ROW = re.compile(r"^\| `(akresil_\w+)` \| (\w+) \| ([^|]+) \|", re.M)


def test_docs_list_every_series_with_its_kind_and_labels() -> None:
    rows = {m.group(1): (m.group(2), m.group(3)) for m in _ROW.finditer(DOC.read_text(encoding="utf-8"))}
    assert set(rows) == {s.name for s in SERIES}, "docs/metrics.md and core.series.SERIES differ"
    for s in SERIES:
        kind, labels = rows[s.name]
        assert kind == s.kind, s.name
        named = [re.sub(r"\s*\(.*", "", part).strip() for part in re.split(r",\s*(?![^(]*\))", labels)]
        assert named == ["client_id", *s.labels], s.name


def test_names_are_unique_and_otel_names_follow_the_table() -> None:
    assert len({s.name for s in SERIES}) == len({s.otel for s in SERIES}) == len(SERIES)
    assert METRIC_NAMES == {s.name: s.otel for s in SERIES}
    assert all(s.name.endswith("_total") == (s.kind == "counter") for s in SERIES)


@pytest.mark.parametrize(("row", "problem"), [
    (dict(kind="gauge", feeds={ev.NODE_STATE: lambda s, f: []}), "a gauge has a read and no feeds"),
    (dict(kind="counter"), "a gauge has a read and no feeds"),
    (dict(kind="histogram", feeds={ev.BATCH_SENT: lambda s, f: []}), "every histogram has them"),
    (dict(kind="counter", feeds={"batch_sentt": lambda s, f: []}), r"unknown events \['batch_sentt'\]"),
])
def test_a_malformed_row_is_refused_naming_it(row: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=f"akresil_x_total: .*{problem}"):
        Series("akresil_x_total", "akresil.x", labels=(), unit="1", help="x", **row)
