"""The run's JSON document, the ratios table and the docs update; pure apart from ``environment()`` and the
file writers at the end.

Ratios are ``akresil / other`` for each headline metric of a scenario, with the direction that is better
(``lower`` for latencies and request counts, ``higher`` for throughput), so a reader never has to guess
whether 0.2 is good news.  Every document, table and docs section names its harness (``HARNESSES``): figures
from FaultProxy + Tansu and from librdkafka's mock cluster are not interchangeable.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

import orjson

from .apache_runner import APACHE_HEADLINES
from .mock_scenarios import MOCK_HEADLINES
from .scenarios import HEADLINES

DOC_BEGIN = "<!-- bench:begin -->"
DOC_END = "<!-- bench:end -->"
MOCK_DOC_BEGIN = "<!-- bench-mock:begin -->"
MOCK_DOC_END = "<!-- bench-mock:end -->"
APACHE_DOC_BEGIN = "<!-- bench-apache:begin -->"
APACHE_DOC_END = "<!-- bench-apache:end -->"
JSON_NAME = "bench.json"
TABLE_NAME = "table.txt"
#: harness -> what it is, for the table's run line and the plot titles
HARNESSES = {"proxy": "FaultProxy in front of Tansu", "mock": "librdkafka's mock cluster",
             "apache": "Apache Kafka (3 brokers, KRaft)"}


def check_harness(harness: str) -> str:
    if harness not in HARNESSES:
        raise ValueError(f"harness: unknown {harness!r} (known: {', '.join(HARNESSES)})")
    return harness


def headlines(harness: str) -> dict[str, list[tuple[str, str, str]]]:
    """The headline metrics of each scenario on ``harness``."""
    check_harness(harness)
    return MOCK_HEADLINES if harness == "mock" else APACHE_HEADLINES if harness == "apache" else HEADLINES


def markers(harness: str) -> tuple[str, str]:
    """The docs page markers between which ``--update-docs`` puts this harness's table: each harness has its own,
    so a mock run never overwrites the proxy's table."""
    check_harness(harness)
    if harness == "apache":
        return APACHE_DOC_BEGIN, APACHE_DOC_END
    return (MOCK_DOC_BEGIN, MOCK_DOC_END) if harness == "mock" else (DOC_BEGIN, DOC_END)


def environment() -> dict[str, Any]:
    """Python, machine, load and the versions of the three clients (figures mean little without them)."""
    from importlib.metadata import version

    import confluent_kafka

    from .. import __version__
    return {"python": platform.python_version(), "machine": platform.machine(), "system": platform.system(),
            "cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()],
            "akresil": __version__, "aiokafka": version("aiokafka"),
            "confluent_kafka": version("confluent-kafka"), "librdkafka": confluent_kafka.libversion()[0]}


def lookup(summary: Mapping[str, Any], path: str) -> float | None:
    """``a.b.c`` inside nested dicts; ``None`` when any part is missing."""
    node: Any = summary
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def ratios(scenario: str, summaries: Mapping[str, Mapping[str, Any]], base: str = "akresil",
           harness: str = "proxy") -> list[dict[str, Any]]:
    """One row per headline metric: every client's value and ``base / other`` for each other client."""
    rows = []
    for label, path, better in headlines(harness)[scenario]:
        values = {client: lookup(s, path) for client, s in summaries.items()}
        row: dict[str, Any] = {"metric": label, "path": path, "better": better, "values": values, "ratios": {}}
        if base in summaries:
            for client in summaries:
                if client != base:
                    row["ratios"][client] = _ratio(values[base], values[client])
        rows.append(row)
    return rows


def combine_rounds(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The element-wise median of several rounds' summaries (numbers only; anything else from the first round;
    a value missing or ``None`` in some round is the median of the rounds that have it)."""
    first = summaries[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, Mapping):
            out[key] = combine_rounds([s[key] for s in summaries if isinstance(s.get(key), Mapping)])
        elif isinstance(value, (int, float)) and not isinstance(value, bool) or value is None:
            nums = [s.get(key) for s in summaries]
            present = [float(v) for v in nums if isinstance(v, (int, float)) and not isinstance(v, bool)]
            out[key] = statistics.median(present) if present else None
        else:
            out[key] = value
    return out


def worst_of(scenario: str, summaries: Sequence[Mapping[str, Any]], harness: str = "proxy") -> dict[str, Any]:
    """Each headline metric's worst round (the highest of a lower-is-better metric, the lowest of a higher-is-
    better one; ``None`` where no round has it): a median hides stalls, the worst round shows them."""
    out: dict[str, Any] = {}
    for _, path, better in headlines(harness)[scenario]:
        values = [v for v in (lookup(s, path) for s in summaries) if v is not None]
        if not values or better not in ("lower", "higher"):
            out[path] = None
            continue
        out[path] = max(values) if better == "lower" else min(values)
    return out


def _ratio(a: float | None, b: float | None) -> float | str | None:
    if a is None or b is None:
        return None
    if a == b:          # 0 / 0 and inf / inf: both did the same
        return 1.0
    if b == 0 or math.isinf(a):
        return 1.0 if a == 0 else "inf"
    return round(a / b, 3)


def document(*, seed: int, quick: bool, env: Mapping[str, Any], scenarios: Mapping[str, Any],
             harness: str = "proxy") -> dict[str, Any]:
    return {"benchmark": "akresil-bench", "harness": check_harness(harness), "seed": seed, "quick": quick,
            "environment": dict(env), "scenarios": dict(scenarios)}


def dumps(doc: Mapping[str, Any]) -> bytes:
    """orjson with NaN / infinity made explicit strings (JSON has neither)."""
    return orjson.dumps(_clean(doc), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, Mapping):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _fmt(x: Any) -> str:
    if x is None:
        return "–"
    if x == "inf" or (isinstance(x, float) and math.isinf(x) and x > 0):
        return "∞"
    if isinstance(x, float):
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def markdown_table(doc: Mapping[str, Any]) -> str:
    """The ratios of every scenario in the document as one markdown table (pasted into docs/benchmarks.md)."""
    scen = doc["scenarios"]
    clients: list[str] = []
    for s in scen.values():
        for c in s.get("clients", {}):
            if c not in clients:
                clients.append(c)
    others = [c for c in clients if c != "akresil"]
    head = ["scenario", "metric", "better", *clients, *[f"akresil / {c}" for c in others]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rounds = doc.get("rounds", 1)
    for name, s in scen.items():
        for row in s.get("ratios", []):
            def value(c: str) -> str:
                worst = s.get("clients", {}).get(c, {}).get("worst", {}).get(row["path"]) if rounds > 1 else None
                shown = _fmt(row["values"].get(c))
                return shown if worst is None else f"{shown} ({_fmt(worst)})"
            cells = [name, row["metric"], row["better"], *[value(c) for c in clients],
                     *[_fmt(row["ratios"].get(c)) for c in others]]
            lines.append("| " + " | ".join(cells) + " |")
    env = doc["environment"]
    lines.append("")
    skipped = [f"{name} ({s['skipped']})" for name, s in scen.items() if "skipped" in s]
    if skipped:
        lines.append(f"Skipped: {'; '.join(skipped)}.")
    loads = sorted({s["scenario"]["load"] for s in scen.values() if "load" in s.get("scenario", {})})
    load = f", --load {'/'.join(loads)}" if loads else ""
    if rounds > 1:
        lines.append(f"Each client's value is the median of {rounds} rounds (seeds {doc['seed']}.."
                     f"{doc['seed'] + rounds - 1}, the client order rotating), the worst round in brackets; the "
                     "ratios compare medians.")
    lines.append(f"Run: {HARNESSES[doc['harness']]} (--harness {doc['harness']}), seed {doc['seed']}, "
                 f"{'--quick' if doc['quick'] else 'full'}{load}; Python {env['python']}, "
                 f"{env['cpus']} CPUs, load average {', '.join(str(x) for x in env['load_avg'])}; aiokafka "
                 f"{env['aiokafka']}, confluent-kafka {env['confluent_kafka']} (librdkafka {env['librdkafka']}).")
    return "\n".join(lines) + "\n"


def replace_between_markers(text: str, snippet: str, harness: str = "proxy") -> str:
    """Put ``snippet`` between the bench markers of ``harness`` in a markdown page (the markers stay)."""
    begin_marker, end_marker = markers(harness)
    begin, end = text.find(begin_marker), text.find(end_marker)
    if begin < 0 or end < 0 or end < begin:
        raise ValueError(f"docs page: needs the markers {begin_marker} and {end_marker}, in that order")
    return text[:begin + len(begin_marker)] + "\n" + snippet + text[end:]


def write(doc: Mapping[str, Any], out_dir: Path, docs_page: Path | None = None) -> list[Path]:
    """Write the JSON document and the table snippet (and update ``docs_page``); returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / JSON_NAME
    json_path.write_bytes(dumps(doc))
    table = markdown_table(doc)
    table_path = out_dir / TABLE_NAME
    table_path.write_text(table)
    written = [json_path, table_path]
    if docs_page is not None:
        docs_page.write_text(replace_between_markers(docs_page.read_text(), table, doc["harness"]))
        written.append(docs_page)
    return written
