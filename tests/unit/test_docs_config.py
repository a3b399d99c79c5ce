"""docs/configuration.md is generated from akresil.config.OPTIONS: it must be current and say true things."""

from __future__ import annotations

from pathlib import Path

import re

import pytest

from akresil.config import OPTIONS, resolve
from akresil.errors import ConfigError

from .repo_scripts import ROOT, load_script

PAGE = ROOT / "docs" / "configuration.md"


gen = load_script("tools/gen_config_docs.py")


def test_committed_page_is_current() -> None:
    assert PAGE.read_text(encoding="utf-8") == gen.render(), (
        "docs/configuration.md is stale: run python tools/gen_config_docs.py")


def test_check_mode_reports_a_stale_page(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(gen.render().replace("`linger_ms`", "`linger`"), encoding="utf-8")
    assert gen.main(["--check", "--out", str(stale)]) == 1
    assert gen.main(["--out", str(stale)]) == 0
    assert gen.main(["--check", "--out", str(stale)]) == 0


def _row(name: str) -> list[str]:
    text = gen.render()
    rows = [line for line in text.splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"{name}: expected one row, found {len(rows)}"
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", rows[0])[1:-1]]


@pytest.mark.parametrize("opt", OPTIONS, ids=lambda o: o.name)
def test_every_key_has_one_row_with_its_default_and_kip(opt) -> None:
    cells = _row(opt.name)
    assert len(cells) == 6
    default = cells[2]
    if isinstance(opt.default, int) and not isinstance(opt.default, bool):
        assert default.startswith(f"`{opt.default:_}`")
    else:
        assert default == f"`{opt.default!r}`" or default == f"`{opt.default}`"
    if opt.kip is not None:
        assert opt.kip in cells[4]


def test_kip_fallbacks_name_real_keys_and_do_not_contradict_the_table() -> None:
    names = {o.name for o in OPTIONS}
    assert set(gen.RELATED_KIPS) <= names
    for opt in OPTIONS:
        gen.kip_for(opt)      # raises SystemExit on a contradiction


def test_extra_keyword_arguments_match_the_clients() -> None:
    from akresil import Consumer, Producer
    assert set(gen.EXTRA_KEYS) == gen._extra_keys()
    values: dict[str, object] = {"hooks": [], "max_buffered_bytes": 1_024}
    for name, (clients, _) in gen.EXTRA_KEYS.items():
        for client in clients.split(", "):
            cls = {"producer": Producer, "consumer": Consumer}[client]
            cls(**{name: values.get(name, bytes)})      # accepted at run time, where the page says


# Each documented rule between keys, checked against resolve() so the list cannot outlive the code.
@pytest.mark.parametrize("kind, kwargs, key", [
    ("producer", {"delivery_timeout_ms": 1_000, "linger_ms": 5, "request_timeout_ms": 30_000}, "delivery_timeout_ms"),
    ("producer", {"acks": 1}, "enable_idempotence"),
    ("producer", {"max_in_flight_requests_per_connection": 6}, "max_in_flight_requests_per_connection"),
    ("consumer", {"heartbeat_interval_ms": 45_000}, "heartbeat_interval_ms"),
    ("admin", {"security_protocol": "SASL_PLAINTEXT"}, "sasl_plain_username"),
])
def test_documented_cross_rules_are_enforced(kind: str, kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        resolve(kind, kwargs)


def test_documented_normalisations_hold() -> None:
    cfg = resolve("consumer", {"max_poll_interval_ms": 1234, "bootstrap_servers": "a:1, b:2"})
    assert cfg.rebalance_timeout_ms == 1234
    assert cfg.bootstrap_servers == ["a:1", "b:2"]
    assert resolve("producer", {"acks": "all"}).acks == -1
    assert resolve("producer", {"acks": "1", "enable_idempotence": False}).acks == 1
