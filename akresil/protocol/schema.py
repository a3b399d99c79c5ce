"""Declarative message schemas: fields with the version ranges they exist in.

The definitions themselves live in the generated :mod:`akresil.protocol.specs`; this module gives them
their shape and answers the questions the compiler asks ("is this field in v7? nullable? tagged?").
Version ranges are kept as the spec's strings ("0+", "3-13", "none") in ``specs.py`` so the generated
file stays short and reviewable against Kafka's JSON, and are parsed once here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from akresil.errors import UnsupportedVersionError

#: upper bound used for open ranges ("3+")
MAX_VERSION = 0x7FFF

PRIMITIVES = frozenset(
    {
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "float64",
        "bool",
        "uuid",
        "string",
        "bytes",
        "records",
    }
)

_RANGE = re.compile(r"^(\d+)(?:(\+)|-(\d+))?$")
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def snake_case(name: str) -> str:
    """``ThrottleTimeMs`` -> ``throttle_time_ms`` (same rule as kafka-python, so names line up)."""
    return _CAMEL.sub("_", name).lower()


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; ``Versions.NONE`` is empty."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return NONE
        m = _RANGE.match(text.strip())
        if m is None:
            raise ValueError(f"bad version range {text!r}: expected 'none', 'N', 'N+' or 'N-M'")
        lo = int(m.group(1))
        hi = MAX_VERSION if m.group(2) else int(m.group(3) or lo)
        if hi < lo:
            raise ValueError(f"bad version range {text!r}: upper bound below lower bound")
        return cls(lo, hi)

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi

    @property
    def empty(self) -> bool:
        return self.hi < self.lo


NONE = Versions(0, -1)


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message or struct.

    ``type`` is a primitive name, ``"[]<primitive>"``, a struct name, or ``"[]<StructName>"``;
    struct-typed fields carry their members in ``fields``.  ``default`` is the already-parsed Python
    value (``None`` for a ``"null"`` default).
    """

    name: str
    type: str
    versions: Versions
    nullable: Versions = NONE
    tag: int | None = None
    tagged: Versions = NONE
    default: object = None
    has_default: bool = False
    ignorable: bool = False
    #: Kafka allows a field to opt out of compact encoding (RequestHeader.ClientId)
    flexible: Versions | None = None
    fields: tuple[Field, ...] = ()

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element not in PRIMITIVES

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged

    def is_nullable(self, version: int) -> bool:
        return version in self.nullable

    def default_for(self, version: int) -> object:
        """The value a field takes when the caller leaves it out (Kafka's default rules)."""
        if self.is_array:
            if self.has_default and self.default is None and self.is_nullable(version):
                return None
            if self.is_tagged(version) and self.is_nullable(version):
                return None
            return []
        if self.is_struct:
            return None
        if self.has_default:
            if self.default is None and not self.is_nullable(version):
                return zero_value(self.type)
            return self.default
        return zero_value(self.type)


def zero_value(type_: str) -> object:
    if type_ in ("int8", "int16", "int32", "int64", "uint16"):
        return 0
    if type_ == "float64":
        return 0.0
    if type_ == "bool":
        return False
    if type_ == "string":
        return ""
    if type_ in ("bytes", "records"):
        return b""
    if type_ == "uuid":
        return bytes(16)
    raise ValueError(f"no zero value for type {type_!r}")


@dataclass(frozen=True, slots=True)
class Message:
    """A request/response body, a header, or a standalone data payload (consumer protocol)."""

    name: str
    api_key: int | None
    kind: Literal["request", "response", "header", "data"]
    valid: Versions
    flexible: Versions
    fields: tuple[Field, ...] = field(default=())

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible

    def check_version(self, version: int) -> None:
        if version not in self.valid:
            raise UnsupportedVersionError(
                f"{self.name} has no version {version} (akresil knows {self.valid.lo}-{self.valid.hi})"
            )


def F(
    name: str,
    type_: str,
    versions: str,
    *,
    nullable: str | None = None,
    tag: int | None = None,
    tagged: str | None = None,
    default: object = ...,
    ignorable: bool = False,
    flexible: str | None = None,
    fields: tuple[Field, ...] = (),
) -> Field:
    """Compact constructor used by the generated ``specs`` module."""
    return Field(
        name=name,
        type=type_,
        versions=Versions.parse(versions),
        nullable=Versions.parse(nullable),
        tag=tag,
        tagged=Versions.parse(tagged),
        default=None if default is ... else default,
        has_default=default is not ...,
        ignorable=ignorable,
        flexible=None if flexible is None else Versions.parse(flexible),
        fields=fields,
    )


def M(
    name: str,
    api_key: int | None,
    kind: Literal["request", "response", "header", "data"],
    valid: str,
    flexible: str,
    fields: tuple[Field, ...],
) -> Message:
    """Compact constructor used by the generated ``specs`` module."""
    return Message(name, api_key, kind, Versions.parse(valid), Versions.parse(flexible), fields)
