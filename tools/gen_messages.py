"""Generate ``akresil/protocol/messages.py``: a TypedDict per request and response, from the compiled schemas.

Messages stay plain dicts at run time (the compiled codecs make and read dicts); these types only let mypy check
the key reads and writes in the shell. They are derived from ``akresil.protocol.specs`` (itself generated from
Kafka's JSON by ``tools/gen_specs.py``, which runs this too), so the two cannot drift:
``python tools/gen_messages.py --check`` fails when the file is stale (a unit test runs it).

Typing rules, from what the codec does (``akresil/protocol/compiler.py``):

* a decoded response holds exactly the fields of its version, so a field missing from some valid version is
  ``NotRequired``; a field in every version is required;
* a tagged struct or array absent from the wire decodes as ``None``; a field nullable in any version may be ``None``;
* a request may leave any field out (it takes its default), so request types are ``total=False``, and take any
  sequence for an array and any buffer for bytes;
* ``records`` decode to a slice of the input (``bytes`` or a zero-copy ``memoryview``).

It also writes ``akresil/net/request_types.py``: the shell's request entry points (``Cluster.request``,
``Cluster.request_any``, ``Connection.request``, ``Router.to_controller``) as callback protocols with one
``@overload`` per API, so a call with ``ApiKey.PRODUCE`` takes a ``ProduceRequest`` (or a builder of one from the
negotiated version) and returns a ``ProduceResponse``. The classes declare the attribute with that type under
``TYPE_CHECKING`` and bind the one implementation otherwise: no cost at run time. An API key that is not a
literal matches no overload (there is no untyped fallback, which a mistyped body would silently match).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from akresil.protocol import specs  # noqa: E402
from akresil.protocol.api import ApiKey  # noqa: E402
from akresil.protocol.schema import Field, Message, Versions  # noqa: E402

OUT = ROOT / "akresil" / "protocol" / "messages.py"
REQUEST_TYPES = ROOT / "akresil" / "net" / "request_types.py"

#: entry point -> (protocol class, docstring, parameters before the API key, keyword parameters, return type
#: with {R} for the response type); a body is the request type or a builder of it from the negotiated version
_ENTRY_POINTS = (
    ("ClusterRequest", "``Cluster.request``: ``(version, response)`` from one broker.",
     "node_id: int, ", "min_version: int = ..., max_version: int | None = ..., timeout_ms: int | None = ...",
     "tuple[int, {R}]", True),
    ("ClusterRequestAny", "``Cluster.request_any``: ``(node_id, version, response)`` from the least loaded broker.",
     "", "min_version: int = ..., timeout_ms: int | None = ...", "tuple[int, int, {R}]", True),
    ("ConnectionRequest", "``Connection.request``: the response on this connection.",
     "", "version: int | None = ..., timeout_ms: float | None = ...", "{R}", False),
    ("ControllerRequest", "``Router.to_controller``: the controller's response, NOT_CONTROLLER retried.",
     "", "timeout_ms: int", "{R}", True),
)

_SCALARS = {
    "int8": "int", "int16": "int", "int32": "int", "int64": "int", "uint16": "int",
    "float64": "float", "bool": "bool", "uuid": "bytes", "string": "str",
}


@dataclass
class _Out:
    classes: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)


def _scalar(type_: str, request: bool) -> str:
    if type_ in _SCALARS:
        return _SCALARS[type_]
    if type_ == "bytes":
        return "Buffer" if request else "bytes"
    if type_ == "records":
        return "Buffer"
    raise ValueError(f"unknown primitive {type_!r}")


def _class_name(message: Message, element: str) -> str:
    return element if element.startswith(message.name) else message.name + element


def _may_be_none(f: Field, message: Message) -> bool:
    if not f.nullable.empty:
        return True
    # a tagged struct or array that is not on the wire decodes as None (compiler: tagged defaults)
    return f.tag is not None and (f.is_struct or f.is_array)


def _in_every_version(f: Field, within: Versions) -> bool:
    """Whether ``f`` exists wherever its parent (the message, or the struct field holding it) does."""
    return f.versions.lo <= within.lo and f.versions.hi >= within.hi


def _type_of(f: Field, message: Message, out: _Out, request: bool, within: Versions) -> str:
    if f.is_struct:
        inner = _class_name(message, f.element)
        # the struct's fields exist where both they and this field do
        lo, hi = max(f.versions.lo, within.lo), min(f.versions.hi, within.hi)
        _struct(inner, f.fields, message, out, request, Versions(lo, hi))
    else:
        inner = _scalar(f.element, request)
    if f.is_array:
        inner = f"Sequence[{inner}]" if request else f"list[{inner}]"
    if _may_be_none(f, message):
        inner += " | None"
    return inner


def _struct(name: str, fields: tuple[Field, ...], message: Message, out: _Out, request: bool,
            within: Versions) -> None:
    if name in out.names:
        return
    out.names.add(name)
    lines = []
    for f in fields:
        type_ = _type_of(f, message, out, request, within)
        if not request and not _in_every_version(f, within):
            type_ = f"NotRequired[{type_}]"
        lines.append(f"    {f.name}: {type_}\n")
    if message.flexible.hi >= message.flexible.lo:
        lines.append("    _unknown_tags: NotRequired[dict[int, bytes]]\n")
    total = ", total=False" if request else ""
    body = "".join(lines) or "    pass\n"
    out.classes.append(f"class {name}(TypedDict{total}):\n{body}")


def render() -> str:
    out = _Out()
    by_key: dict[int, dict[str, str]] = {}
    for message in specs.ALL:
        if message.kind not in ("request", "response"):
            continue
        request = message.kind == "request"
        _struct(message.name, message.fields, message, out, request, message.valid)
        if message.api_key is not None:
            by_key.setdefault(message.api_key, {})[message.kind] = message.name
    names = {int(k): k.name for k in ApiKey}
    pairs = []
    for key in sorted(by_key):
        if key not in names:
            continue
        kinds = by_key[key]
        pairs.append(f"    ApiKey.{names[key]}: ({kinds['request']}, {kinds['response']}),\n")
    head = (
        '"""Typed views of Kafka\'s messages, generated by tools/gen_messages.py from akresil.protocol.specs: '
        'do not edit.\n\n'
        "At run time messages are plain dicts; these TypedDicts let a type checker see each key read and write.\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from collections.abc import Sequence\n"
        "from typing import TypedDict\n\n"
        "from typing_extensions import NotRequired\n\n"
        "from akresil.protocol.api import ApiKey\n\n"
        "Buffer = bytes | bytearray | memoryview\n\n\n"
    )
    tail = (
        "\n\n#: the request and response type of each API akresil speaks\n"
        "BY_API_KEY: dict[ApiKey, tuple[type, type]] = {\n" + "".join(pairs) + "}\n"
    )
    return head + "\n\n".join(out.classes) + tail


def _api_types() -> list[tuple[str, str, str]]:
    """(ApiKey member name, request type, response type) per API akresil speaks."""
    by_key: dict[int, dict[str, str]] = {}
    for message in specs.ALL:
        if message.kind in ("request", "response") and message.api_key is not None:
            by_key.setdefault(message.api_key, {})[message.kind] = message.name
    return [(k.name, by_key[int(k)]["request"], by_key[int(k)]["response"]) for k in ApiKey]


def render_request_types() -> str:
    apis = _api_types()
    classes = []
    for name, doc, leading, keywords, returns, builder in _ENTRY_POINTS:
        lines = [f"class {name}(Protocol):\n", f'    """{doc}"""\n']
        for member, request, response in apis:
            body = f"{request} | Callable[[int], {request}]" if builder else request
            lines.append(
                f"\n    @overload\n"
                f"    async def __call__(\n"
                f"        self, {leading}api_key: Literal[ApiKey.{member}],\n"
                f"        body: {body},\n"
                f"        *, {keywords},\n"
                f"    ) -> {returns.format(R=response)}: ...\n")
        classes.append("".join(lines))
    imports = sorted({t for _, request, response in apis for t in (request, response)})
    head = (
        '"""The shell\'s request entry points typed by the API they send, generated by tools/gen_messages.py: '
        'do not edit.\n\n'
        "One overload per API: ``ApiKey.X`` takes an ``XRequest`` (or a builder of it from the negotiated version)\n"
        "and returns an ``XResponse``. The classes declare their method with these types under ``TYPE_CHECKING``;\n"
        "at run time the one implementation is bound and messages are plain dicts.\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from typing import Callable, Literal, Protocol, overload\n\n"
        "from ..protocol.api import ApiKey\n"
        "from ..protocol.messages import (\n" + "".join(f"    {t},\n" for t in imports) + ")\n\n"
        "__all__ = [" + ", ".join(f'"{c[0]}"' for c in _ENTRY_POINTS) + "]\n\n\n"
    )
    return head + "\n\n".join(classes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a committed file is stale")
    args = parser.parse_args(argv)
    outputs = {OUT: render(), REQUEST_TYPES: render_request_types()}
    if args.check:
        stale = [path for path, text in outputs.items() if not path.exists() or path.read_text() != text]
        for path in stale:
            print(f"{path} is stale: run python tools/gen_messages.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.write_text(text)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
