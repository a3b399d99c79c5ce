"""Generate ``akresil/protocol/specs.py`` from Kafka's JSON message specs.

Run once (and again when adding an API): ``python tools/gen_specs.py [SPEC_DIR]``; it also regenerates
``akresil/protocol/messages.py`` (the TypedDicts, tools/gen_messages.py).  The default input is
the copy of Kafka's ``clients/src/main/resources/common/message/*.json`` that kafka-python ships; the
output is committed, so akresil does not need kafka-python at runtime.  Only facts are carried over
(names, types, version ranges, tags, defaults); the prose ("about") is dropped.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

SPEC_DIR_DEFAULT = "kafka/protocol/schemas/resources"
#: specs kafka-python 3.0 does not ship (KIP-848 and KIP-932 APIs, Kafka 4.1 layouts): facts only
#: (names, types, version ranges) transcribed from apache/kafka's JSON, no prose
EXTRA_SPEC_DIR = Path(__file__).resolve().parent / "kafka_specs"
OUT = Path(__file__).resolve().parent.parent / "akresil" / "protocol" / "specs.py"

#: (JSON name, python constant) for each API akresil speaks, requests and responses both
APIS = [
    "ApiVersions",
    "Metadata",
    "Produce",
    "Fetch",
    "ListOffsets",
    "FindCoordinator",
    "JoinGroup",
    "SyncGroup",
    "Heartbeat",
    "LeaveGroup",
    "OffsetCommit",
    "OffsetFetch",
    "InitProducerId",
    "CreateTopics",
    "DeleteTopics",
    "SaslHandshake",
    "SaslAuthenticate",
    "DescribeCluster",
    # admin (issue 15)
    "ListGroups",
    "DescribeGroups",
    "DeleteGroups",
    "OffsetDelete",
    "DescribeConfigs",
    "IncrementalAlterConfigs",
    "CreatePartitions",
    "DeleteRecords",
    "DescribeAcls",
    "CreateAcls",
    "DeleteAcls",
    "ElectLeaders",
    "DescribeUserScramCredentials",
    "AlterUserScramCredentials",
    "DescribeProducers",
    "ListTransactions",
    "DescribeTransactions",
    # partition reassignments and client quotas (issue 26)
    "AlterPartitionReassignments",
    "ListPartitionReassignments",
    "DescribeClientQuotas",
    "AlterClientQuotas",
    "ConsumerGroupHeartbeat",
    "ShareGroupHeartbeat",
    # describing KIP-848 consumer groups and KIP-932 share groups
    "ConsumerGroupDescribe",
    "ShareGroupDescribe",
    "ShareFetch",
    "ShareAcknowledge",
    # KIP-932 share-group offsets (admin)
    "DescribeShareGroupOffsets",
    "AlterShareGroupOffsets",
    "DeleteShareGroupOffsets",
    # transactions (issue 14)
    "AddPartitionsToTxn",
    "AddOffsetsToTxn",
    "EndTxn",
    "TxnOffsetCommit",
    # admin: aborting a hanging transaction (KIP-664 abortTransaction)
    "WriteTxnMarkers",
    # KIP-714 client metrics push (issue 36)
    "GetTelemetrySubscriptions",
    "PushTelemetry",
    # operations: log directories, feature levels, the KRaft metadata quorum
    "DescribeLogDirs",
    "AlterReplicaLogDirs",
    "DescribeQuorum",
    "UpdateFeatures",
]
EXTRA = ["RequestHeader", "ResponseHeader", "ConsumerProtocolSubscription", "ConsumerProtocolAssignment"]

#: Kafka 4.0 dropped old versions from the JSON although their fields are still described with ranges
#: starting at 0 ("0+"); brokers akresil meets (and the request header) still use them.
LOWEST_VERSION_OVERRIDE = {
    "CreateTopicsRequest": 0,
    "CreateTopicsResponse": 0,
    "DeleteTopicsRequest": 0,
    "DeleteTopicsResponse": 0,
    "RequestHeader": 0,
}

_COMMENT = re.compile(r"^\s*//.*$", re.MULTILINE)
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
_INT_TYPES = {"int8", "int16", "int32", "int64", "uint16"}


def snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


def load(spec_dir: Path, name: str) -> dict[str, Any]:
    path = spec_dir / f"{name}.json"
    if not path.exists():
        path = EXTRA_SPEC_DIR / f"{name}.json"
    text = path.read_text()
    return json.loads(_COMMENT.sub("", text))


def parse_default(type_: str, raw: object) -> object:
    if isinstance(raw, str) and raw == "null":
        return None
    if type_ in _INT_TYPES:
        return int(raw, 0) if isinstance(raw, str) else int(raw)  # type: ignore[arg-type]
    if type_ == "bool":
        return raw if isinstance(raw, bool) else str(raw).lower() == "true"
    if type_ == "float64":
        return float(raw)  # type: ignore[arg-type]
    if type_ == "string":
        return str(raw)
    raise ValueError(f"unsupported default {raw!r} for type {type_}")


def check_range(text: str, where: str) -> None:
    if text != "none" and not re.match(r"^\d+(\+|-\d+)?$", text):
        raise ValueError(f"{where}: bad version range {text!r}")


def render_field(f: dict[str, Any], common: dict[str, list[dict[str, Any]]], indent: int, where: str) -> str:
    name = f["name"]
    type_ = f["type"]
    element = type_[2:] if type_.startswith("[]") else type_
    check_range(f["versions"], f"{where}.{name}")
    args = [repr(snake(name)), repr(type_), repr(f["versions"])]
    if "nullableVersions" in f:
        check_range(f["nullableVersions"], f"{where}.{name}")
        args.append(f"nullable={f['nullableVersions']!r}")
    if "tag" in f:
        args.append(f"tag={int(f['tag'])}")
        args.append(f"tagged={f.get('taggedVersions', f['versions'])!r}")
    if "default" in f:
        args.append(f"default={parse_default(element, f['default'])!r}")
    if f.get("ignorable"):
        args.append("ignorable=True")
    if "flexibleVersions" in f:
        args.append(f"flexible={f['flexibleVersions']!r}")
    sub = f.get("fields")
    if sub is None and element[:1].isupper():
        if element not in common:
            raise ValueError(f"{where}.{name}: struct {element} has no fields and is not a common struct")
        sub = common[element]
    pad = " " * indent
    if sub:
        inner = "".join(render_field(s, common, indent + 4, f"{where}.{name}") for s in sub)
        args.append(f"fields=(\n{inner}{pad})")
    return f"{pad}F({', '.join(args)}),\n"


def render_message(spec: dict[str, Any]) -> tuple[str, str, str]:
    name = spec["name"]
    valid = spec["validVersions"]
    if name in LOWEST_VERSION_OVERRIDE:
        lo_new = LOWEST_VERSION_OVERRIDE[name]
        lo, _, hi = valid.partition("-")
        if int(lo) < lo_new:
            raise ValueError(f"{name}: override {lo_new} would narrow {valid}")
        valid = f"{lo_new}-{hi}"
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
    fields = "".join(render_field(f, common, 8, name) for f in spec["fields"])
    const = snake(name).upper()
    api_key = spec.get("apiKey")
    body = (
        f"def _{const.lower()}() -> Message:\n    return M(\n        {name!r}, {api_key!r}, {spec['type']!r}, "
        f"{valid!r}, {spec.get('flexibleVersions', 'none')!r}, (\n{_indent(fields)}        ),\n    )\n"
    )
    row = f"    {const!r}: (_{const.lower()}, {name!r}, {api_key!r}, {spec['type']!r}, {valid!r}),\n"
    return const, body, row


def _indent(text: str) -> str:
    return "".join("    " + line if line.strip() else line for line in text.splitlines(keepends=True))


_ACCESS = '''

def message(const: str) -> Message:
    """The schema named ``const`` (``"FETCH_REQUEST"``), built on first use and kept (one object per schema)."""
    built = globals().get(const)
    if built is None:
        built = globals()[const] = TABLE[const][0]()
    return built


def __getattr__(name: str) -> Any:
    if name == "ALL":    # every schema, in TABLE's order
        return tuple(message(const) for const in TABLE)
    if name in TABLE:
        return message(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("spec_dir", nargs="?", help="directory holding Kafka's message JSON files")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    if args.spec_dir:
        spec_dir = Path(args.spec_dir)
    else:
        import kafka  # only the generator needs kafka-python

        spec_dir = Path(kafka.__file__).parent / "protocol" / "schemas" / "resources"
    names = [f"{api}{kind}" for api in APIS for kind in ("Request", "Response")] + EXTRA
    consts: list[str] = []
    bodies: list[str] = []
    rows: list[str] = []
    for n in names:
        const, body, row = render_message(load(spec_dir, n))
        consts.append(const)
        bodies.append(body)
        rows.append(row)
    out = [
        '"""Kafka message schemas, generated by tools/gen_specs.py from Kafka\'s JSON specs: do not edit.\n\n'
        "Field names are snake_case; version ranges use the spec's notation.  CreateTopics and DeleteTopics\n"
        'are extended down to v0, which their field ranges already describe.\n\n'
        "Each schema is built the first time it is asked for (``specs.FETCH_REQUEST``, ``message(name)``) and\n"
        "kept: building all of them costs more than a process that speaks a few APIs needs. ``TABLE`` says what\n"
        'each one is without building it.\n"""\n\n'
        "from __future__ import annotations\n\n"
        "from collections.abc import Callable\nfrom typing import Any\n\n"
        "from akresil.protocol.schema import F, M, Message\n\n\n",
        "\n\n".join(bodies),
        "\n\n#: constant -> (builder, message name, API key, kind, valid versions), in Kafka's API order\n"
        "TABLE: dict[str, tuple[Callable[[], Message], str, int | None, str, str]] = {\n" + "".join(rows) + "}\n",
        _ACCESS,
    ]
    Path(args.out).write_text("".join(out))
    print(f"wrote {len(consts)} schemas to {args.out}", file=sys.stderr)
    if Path(args.out) == OUT:
        # the typed views follow the schemas (tools/gen_messages.py reads the file just written)
        import subprocess

        subprocess.run([sys.executable, str(Path(__file__).with_name("gen_messages.py"))], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
