"""Write docs/configuration.md from ``akresil.config.OPTIONS``, so the reference cannot drift from the code.

    python tools/gen_config_docs.py            # rewrite docs/configuration.md
    python tools/gen_config_docs.py --check    # exit 1 if the committed page is stale (CI, scripts/docs.sh)

Every key, its type, default, bounds or choices and clients come from the table itself.  The KIP column
takes ``Option.kip``; keys the table does not tag yet fall back to ``RELATED_KIPS`` below (a fallback that
contradicts a tag in the table is an error, so moving a KIP into config.py never leaves two answers).
The keyword arguments that clients accept outside the table (serializers, hooks) are documented from
``EXTRA_KEYS``, checked against the clients' own lists so a new one cannot go undocumented.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "configuration.md"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from akresil import config  # noqa: E402
from akresil.config import OPTIONS, Option  # noqa: E402

#: KIPs that introduced or define a key whose Option has no ``kip`` yet (Apache Kafka's KIP numbers)
RELATED_KIPS: dict[str, str] = {
    "linger_ms": "KIP-1030",
    "max_block_ms": "KIP-19",
    "enable_idempotence": "KIP-98, KIP-679",
    "acks": "KIP-679",
    "transactional_id": "KIP-98",
    "isolation_level": "KIP-98",
    "partitioner_ignore_keys": "KIP-794",
    "compression_type": "KIP-110",
    "socket_connection_setup_timeout_ms": "KIP-601",
    "sasl_mechanism": "KIP-43, KIP-84",
    "group_instance_id": "KIP-345",
    "session_timeout_ms": "KIP-735",
    "max_poll_interval_ms": "KIP-62",
    "rebalance_timeout_ms": "KIP-62",
    "partition_assignment_strategy": "KIP-429",
    "fetch_max_bytes": "KIP-74",
    "max_poll_records": "KIP-41",
}

#: keyword arguments a client takes besides the table: name -> (clients, description)
EXTRA_KEYS: dict[str, tuple[str, str]] = {
    "key_serializer": ("producer", "callable turning a key into `bytes` (applied when the key is not None)"),
    "value_serializer": ("producer", "callable turning a value into `bytes` (applied when the value is not None)"),
    "key_deserializer": ("consumer", "callable applied to every non-None key `bytes` before it is returned"),
    "value_deserializer": ("consumer", "callable applied to every non-None value `bytes` before it is returned"),
    "hooks": ("producer, consumer", "iterable of event hook objects (see [Metrics](metrics.md)); "
              "`metrics_registry` adds the Prometheus hook"),
    "max_buffered_bytes": ("consumer", "bound on prefetched record bytes (int >= 1); default `fetch_max_bytes`"),
}

#: rules between keys, as enforced by ``config._cross_check`` (tests/unit/test_docs_config.py checks each)
CROSS_RULES: tuple[str, ...] = (
    "`delivery_timeout_ms` must be >= `linger_ms` + `request_timeout_ms` (producer).",
    "`enable_idempotence=True` requires `acks='all'` and `max_in_flight_requests_per_connection` <= 5.",
    "`heartbeat_interval_ms` must be lower than `session_timeout_ms` (consumer).",
    "`security_protocol` `SASL_PLAINTEXT` / `SASL_SSL` requires `sasl_plain_username` and "
    "`sasl_plain_password`, or with `sasl_mechanism='OAUTHBEARER'` a `sasl_oauth_token_provider` (which no "
    "other mechanism takes).",
    "`rebalance_timeout_ms=None` becomes `max_poll_interval_ms`.",
    "`bootstrap_servers` may be one comma-separated string or a list of `host:port` strings.",
    "`acks` accepts `'all'`, `-1`, `0`, `1` (or their strings); it is stored as -1, 0 or 1.",
)

_SECTIONS = (
    ("Every client", lambda o: o.clients == config._ALL),
    ("Producer", lambda o: o.clients == frozenset({config._PRODUCER})),
    ("Consumer", lambda o: o.clients == frozenset({config._CONSUMER})),
    ("Consumer and admin", lambda o: o.clients == frozenset({config._CONSUMER, config._ADMIN})),
)


def _number(value: float) -> str:
    if value == 2**31 - 1:
        return "2³¹−1"
    if value == 2**62:
        return "2⁶²"
    if float(value).is_integer():
        return f"{int(value):,}".replace(",", "_")
    return f"{value:g}"


def _default(opt: Option) -> str:
    value = opt.default
    if isinstance(value, bool) or value is None:
        return f"`{value}`"
    if isinstance(value, int):
        text = f"`{_number(value)}`"
        if opt.name.endswith("_ms") and value >= 1000 and value % 1000 == 0:
            seconds = value // 1000
            text += f" ({seconds // 60} min)" if seconds % 60 == 0 and seconds >= 60 else f" ({seconds} s)"
        elif opt.name.endswith(("_bytes", "_size", "_memory")) and value >= 1024 and value % 1024 == 0:
            kib = value // 1024
            text += f" ({kib // 1024} MiB)" if kib % 1024 == 0 else f" ({kib} KiB)"
        return text
    return f"`{value!r}`"


def _bounds(opt: Option) -> str:
    parts = []
    if opt.choices is not None:
        parts.append("one of " + ", ".join(f"`{c!r}`" for c in opt.choices))
    if opt.minimum is not None or opt.maximum is not None:
        lo = _number(opt.minimum) if opt.minimum is not None else "…"
        hi = _number(opt.maximum) if opt.maximum is not None else "…"
        parts.append(f"{lo} … {hi}")
    if opt.nullable:
        parts.append("or `None`")
    return "; ".join(parts) or "—"


def _types(opt: Option) -> str:
    return " \\| ".join(t.__name__ for t in opt.types)


def kip_for(opt: Option) -> str:
    """The KIP(s) governing ``opt``: the table's tag, else the documented fallback, else none."""
    fallback = RELATED_KIPS.get(opt.name)
    if opt.kip is not None:
        if fallback is not None and opt.kip not in fallback:
            raise SystemExit(f"gen_config_docs: RELATED_KIPS[{opt.name!r}] = {fallback!r} contradicts "
                             f"config.py's kip={opt.kip!r}; remove the fallback")
        return opt.kip
    return fallback or ""


def _extra_keys() -> set[str]:
    """The keywords the producer and consumer accept outside the table: their (de)serializer parameters and
    the keys of their config TypedDicts that the table lacks (``hooks``, ``max_buffered_bytes``)."""
    import inspect

    from akresil.config_keys import ConsumerConfig, ProducerConfig
    from akresil.consumer import Consumer
    from akresil.producer import Producer

    names = {o.name for o in OPTIONS}
    keys = (set(ProducerConfig.__annotations__) | set(ConsumerConfig.__annotations__)) - names
    for client in (Producer, Consumer):
        keys |= {p for p in inspect.signature(client.__init__).parameters if p.endswith("serializer")}
    return keys


def _check_inputs() -> None:
    names = {o.name for o in OPTIONS}
    unknown = sorted(set(RELATED_KIPS) - names)
    if unknown:
        raise SystemExit(f"gen_config_docs: RELATED_KIPS names keys config.py does not have: {unknown}")
    accepted = _extra_keys()
    if accepted != set(EXTRA_KEYS):
        raise SystemExit(f"gen_config_docs: EXTRA_KEYS out of step with the clients: "
                         f"undocumented {sorted(accepted - set(EXTRA_KEYS))}, "
                         f"stale {sorted(set(EXTRA_KEYS) - accepted)}")
    placed = [o for o in OPTIONS if any(pred(o) for _, pred in _SECTIONS)]
    if len(placed) != len(OPTIONS):
        missing = sorted(names - {o.name for o in placed})
        raise SystemExit(f"gen_config_docs: no section for {missing}; add one to _SECTIONS")


def render() -> str:
    """The whole page as markdown."""
    _check_inputs()
    out: list[str] = [
        "# Configuration reference",
        "",
        "<!-- Generated by tools/gen_config_docs.py from akresil/config.py: do not edit by hand. -->",
        "",
        "Every client takes its configuration as keyword arguments named after Kafka's configs in snake_case",
        "(`retry.backoff.ms` → `retry_backoff_ms`), with the Java client's defaults. Each value is checked",
        "when the client is constructed: an unknown key, a wrong type, a value out of bounds or an",
        "inconsistent combination raises `akresil.errors.ConfigError` naming the key (with a \"did you mean\"",
        "suggestion for typos, and the right client for a key that belongs to another one).",
        "",
        "```python",
        "Producer(bootstrap_servers=\"127.0.0.1:9092\", linger_ms=10, delivery_timeout_ms=60_000)",
        "Producer(bootstrap_servers=\"127.0.0.1:9092\", linger_ms=-1)      # ConfigError: linger_ms: -1 is below the minimum 0",
        "Consumer(\"t\", group_id=\"g\", linger_ms=5)                         # ConfigError: linger_ms: unknown consumer configuration key (it is a producer setting)",
        "```",
        "",
        "`Admin` takes the keys of the first table only. Times are milliseconds, sizes bytes. The KIP column",
        "names the Kafka Improvement Proposal that defines the behaviour; [Resilience](resilience-guide.md)",
        "explains the ones akresil implements beyond other Python clients (KIP-580, KIP-219, KIP-951, KIP-91).",
        "",
    ]
    for title, pred in _SECTIONS:
        out += [f"## {title}", "", "| key | type | default | bounds | KIP | meaning |", "|---|---|---|---|---|---|"]
        for opt in OPTIONS:
            if pred(opt):
                out.append(f"| `{opt.name}` | {_types(opt)} | {_default(opt)} | {_bounds(opt)} | "
                           f"{kip_for(opt) or '—'} | {opt.doc} |")
        out.append("")
    out += ["## Rules between keys", ""]
    out += [f"* {rule}" for rule in CROSS_RULES]
    out += ["", "## Keyword arguments outside the table", "",
            "These are accepted next to the configuration keys and not validated by the table "
            "(callables are checked to be callable).", "",
            "| argument | client | meaning |", "|---|---|---|"]
    for name, (clients, doc) in EXTRA_KEYS.items():
        out.append(f"| `{name}` | {clients} | {doc} |")
    out += ["", "`Consumer` also takes `*topics`, `pattern=` (a regex; topics starting with `__` are never "
            "matched) and `listener=` (a `RebalanceListener`) as its subscription.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from docgen_cli import run
    return run(__doc__ or "", render, OUT, "gen_config_docs.py", argv)


if __name__ == "__main__":
    sys.exit(main())
