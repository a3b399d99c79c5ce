"""benchmarks/bench_scale.py's pure parts: case parsing, the figures of a round, medians and worst rounds, targets."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .repo_scripts import load_script

bs = load_script("benchmarks/bench_scale.py")


def test_cases_parse_with_defaults() -> None:
    assert bs.parse_case("10000") == bs.Case(10000, 1, 3)
    assert bs.parse_case("10000/1000@30") == bs.Case(10000, 1000, 30)
    assert bs.parse_case("10000/1000").per_topic == 10
    assert [bs.parse_case(c).name for c in bs.DEFAULT_CASES]


@pytest.mark.parametrize("text", ["", "ten", "10/3", "0", "10/0", "10@0", "10/2@3/4"])
def test_bad_cases_name_the_option(text: str) -> None:
    with pytest.raises(ValueError, match="--cases"):
        bs.parse_case(text)


def test_layout_goes_round_robin_over_topics_then_partitions() -> None:
    assert bs.layout("t", 2, 2) == [("t-0", 0), ("t-0", 1), ("t-1", 0), ("t-1", 1)]


def test_round_figures_and_summary() -> None:
    case = bs.Case(1000)
    raw = {"records": 200_000, "wall_s": 2.0, "cpu_s": 1.0, "peak_rss_kib": 61_440.0, "base_rss_kib": 40_960.0,
           "load_1m": 1.5}
    fig = bs.derive(raw, case)
    assert fig["cpu_us_per_record"] == pytest.approx(5.0)
    assert fig["records_per_s"] == pytest.approx(100_000)
    assert fig["rss_growth_mib"] == pytest.approx(20.0)
    assert fig["kib_per_partition"] == pytest.approx(20.48)
    slow = bs.derive({**raw, "wall_s": 4.0, "cpu_s": 3.0}, case)
    out = bs.summarize([fig, slow, bs.derive({"error": "exit 1"}, case)])
    assert out["rounds"] == 2 and out["errors"] == ["exit 1"]
    assert out["cpu_s"]["worst"] == 3.0           # lower is better: the worst is the highest
    assert out["records_per_s"]["worst"] == 50_000   # higher is better: the worst is the lowest
    assert out["cpu_s"]["median"] == 2.0


def _case(name: str, produce: dict[str, float], consume: dict[str, float]) -> dict[str, object]:
    def fig(v: float) -> dict[str, float]:
        return {"median": v, "worst": v * 2}
    return {"case": name,
            "produce": {i: {"cpu_s": fig(v), "cpu_us_per_record": fig(v * 5)} for i, v in produce.items()},
            "consume": {i: {"records_per_s": fig(v)} for i, v in consume.items()}}


def test_targets_compare_the_issue_figures() -> None:
    cases = [_case("10/1@3", {"akresil gather": 3.0, "akresil callback": 1.2, "akresil tasks": 1.6,
                              "confluent callback": 1.0}, {}),
             _case("10000/1@3", {"akresil gather": 0.9, "akresil callback": 0.9, "akresil tasks": 2.0,
                                 "akresil send_many": 0.5, "confluent callback": 1.0},
                   {"akresil getmany": 90.0, "confluent consume": 100.0})]
    by = {(t["target"], t["case"], t["median"]): t["met"] for t in bs.targets(cases)}
    assert by[("consumer records/s vs confluent-kafka", "10000/1@3", 0.9)] is False
    assert by[("produce CPU vs confluent-kafka", "10000/1@3", 0.5)] is True
    assert by[("produce CPU vs confluent-kafka", "10000/1@3", 2.0)] is False
    assert by[("CPU per record vs librdkafka", "10/1@3", 1.2)] is True
    assert by[("CPU per record vs librdkafka", "10/1@3", 3.0)] is False
    ratios = bs.ratios(cases)["10/1@3"]
    assert ratios["akresil gather / confluent callback cpu_s"] == {"median": 3.0, "worst": 3.0}


def test_missing_figures_make_no_verdict() -> None:
    assert all(t["met"] is None for t in bs.targets([]))


@pytest.mark.parametrize("text", ["10000", "12345", "10000/1000", "20000/2", "60"])
def test_apache_topics_are_made_in_operations_the_controller_accepts(text: str) -> None:
    """A KRaft controller refuses an operation of more than 10,000 records (one per topic and per partition)."""
    case = bs.parse_case(text)
    ops = bs.apache_topic_ops(case, "c")
    counts: dict[str, int] = {}
    for op, names, count in ops:
        assert len(names) + (len(names) * count if op == "create" else count - counts[names[0]]) <= 10_000
        for name in names:
            assert op == "create" or counts[name] < count     # CreatePartitions only ever raises the count
            counts[name] = count
    assert counts == {f"c-{t}": case.per_topic for t in range(case.topics)}


def test_fetch_counting_wraps_send_and_counts_only_fetches() -> None:
    class Conn:
        def send(self, request: str, *, timeout: int = 0) -> str:
            return f"{request}:{timeout}"
    count = bs._count_fetches(Conn, "send", lambda request: request == "fetch")
    conn = Conn()
    assert [conn.send("fetch"), conn.send("metadata", timeout=3), conn.send("fetch")] == \
        ["fetch:0", "metadata:3", "fetch:0"]
    assert count == [2]
    assert bs._with_fetches({"records": 1}, count) == {"records": 1, "fetch_requests": 2}
    assert bs._with_fetches({"records": 1}, None) == {"records": 1}


def test_librdkafka_fetches_are_counted_from_its_protocol_log() -> None:
    import logging
    sent = bs._SentFetches()
    for line in ("127.0.0.1:9092/1: Sent FetchRequest (v15, 120 bytes @ 0, CorrId 7)",
                 "127.0.0.1:9092/1: Received FetchResponse (v15, 80 bytes, CorrId 7, rtt 1.2ms)",
                 "127.0.0.1:9092/1: Sent MetadataRequest (v12, 40 bytes @ 0, CorrId 8)"):
        sent.emit(logging.LogRecord("rdkafka", logging.DEBUG, __file__, 0, line, None, None))
    assert sent.count == 1


def test_served_reads_the_cpu_of_its_processes() -> None:
    import os
    assert bs.Served("b:1", []).jvm_cpu_s() is None
    assert bs.Served("b:1", []).settle()[1] == 0.0     # nothing to wait for
    spent = bs.Served("b:1", [os.getpid()]).jvm_cpu_s()
    assert spent is not None and spent > 0


def test_consume_ratios_include_cpu() -> None:
    cases = [{"case": "10000/1@3", "produce": {},
              "consume": {"akresil getmany": {"records_per_s": {"median": 90.0, "worst": 80.0},
                                              "cpu_s": {"median": 0.5, "worst": 0.6}},
                          "confluent consume": {"records_per_s": {"median": 100.0, "worst": 100.0},
                                                "cpu_s": {"median": 1.0, "worst": 1.2}}}}]
    ratios = bs.ratios(cases)["10000/1@3"]
    assert ratios["akresil getmany / confluent consume cpu_s"] == {"median": 0.5, "worst": 0.5}
    assert ratios["akresil getmany / confluent consume records_per_s"] == {"median": 0.9, "worst": 0.8}


def test_compiling_ahead_writes_current_bytecode_for_every_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    import importlib.util
    import types

    from akresil.bench import bytecode

    package = tmp_path / "akresil"
    (package / "core").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "core" / "mod.py").write_text("X = 1\n")
    monkeypatch.setitem(sys.modules, "akresil", types.SimpleNamespace(__file__=str(package / "__init__.py")))
    assert "compiled ahead" in bytecode.compile_akresil()
    for source in (package / "__init__.py", package / "core" / "mod.py"):
        assert Path(importlib.util.cache_from_source(str(source))).is_file()
    (package / "core" / "bad.py").write_text("def (:\n")
    with pytest.raises(RuntimeError, match="compiling .*akresil to bytecode failed"):
        bytecode.compile_akresil()


def test_consume_rounds_warm_up_on_a_partition_per_broker_of_their_own_topic() -> None:
    assert bs._warm_partitions({"brokers": 3}) == [("warm", 0), ("warm", 1), ("warm", 2)]
    assert bs.WARM_TOPIC not in {t for t, _ in bs.layout("c", 2, 3)}


def test_a_negative_consume_warmup_names_the_option(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["bench_scale.py", "--consume-warmup", "-1"])
    with pytest.raises(SystemExit):
        bs.main()
    assert "--consume-warmup: must be >= 0" in capsys.readouterr().err
