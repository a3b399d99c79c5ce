"""Turn a schema + version into straight-line Python encode/decode functions.

Interpreting a schema field by field costs a dispatch per field per record batch; instead, for each
(message, version) we emit one function per struct with the version's layout baked in (consecutive
fixed-width fields become a single ``struct`` call, absent fields cost nothing), ``exec`` it once and
cache it.  The result is plain dicts in, plain dicts out.

Encoding rules (documented in docs/protocol.md):

* a missing key takes the field's default for that version;
* a key for a field the version lacks is ignored when the spec marks the field ``ignorable`` or its value
  is the default, otherwise :class:`UnsupportedVersionError` is raised (the Java client's rule);
* a key that no version of the struct knows raises :class:`ProtocolError` (typos must not be silent);
* tagged scalars are written when they differ from their default, tagged structs/arrays when not None;
* ``_unknown_tags`` ({tag: bytes}) found when decoding is written back in tag order.

Any other bad value (wrong type, out of range) makes the fast path fail; the error is then explained by
:func:`diagnose`, which walks the schema and names the offending field path.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from akresil.errors import ProtocolError, UnsupportedVersionError
from akresil.protocol import primitives as P
from akresil.protocol.schema import Field, Message

Decoder = Callable[[Any, int], tuple[dict[str, Any], int]]
Encoder = Callable[[dict[str, Any], list[Any]], None]

_DECODE_ERRORS = (struct.error, IndexError, ValueError, OverflowError, TypeError, MemoryError, RecursionError)
_ENCODE_ERRORS = (struct.error, TypeError, AttributeError, ValueError, OverflowError, KeyError)


def _fields_in(fields: tuple[Field, ...], version: int) -> list[Field]:
    return [f for f in fields if version in f.versions]


def _compact(field: Field, version: int, flexible: bool) -> bool:
    if field.flexible is not None:
        return version in field.flexible
    return flexible


def min_size(fields: tuple[Field, ...], version: int, flexible: bool) -> int:
    """Fewest bytes a struct can take on the wire (caps element counts read from the wire)."""
    total = 1 if flexible else 0
    for f in _fields_in(fields, version):
        if f.is_tagged(version):
            continue
        compact = _compact(f, version, flexible)
        if f.is_array:
            total += 1 if compact else 4
        elif f.is_struct:
            total += 1 if f.is_nullable(version) else min_size(f.fields, version, flexible)
        elif f.type in P.FIXED_SIZES:
            total += P.FIXED_SIZES[f.type]
        elif f.type == "string":
            total += 1 if compact else 2
        else:  # bytes, records
            total += 1 if compact else 4
    return total


def _element_min_size(f: Field, version: int, flexible: bool) -> int:
    if f.is_struct:
        return min_size(f.fields, version, flexible)
    if f.element in P.FIXED_SIZES:
        return P.FIXED_SIZES[f.element]
    return 1 if _compact(f, version, flexible) else (2 if f.element == "string" else 4)


#: arrays of fixed-width elements shorter than this are read with a prepared ``Struct`` per length
_PREPARED_ARRAY = 16
#: per element type (``int32``...: the name is part of an identifier in the generated code, the format
#: character, ``?`` for bool, could not be)
_ARRAYS: dict[str, list[Callable[..., tuple[Any, ...]]]] = {
    element: [struct.Struct(f">{n}{code}").unpack_from for n in range(_PREPARED_ARRAY)]
    for element, code in P.FIXED_FORMATS.items()}


class _Codegen:
    """Emits the source of one (message, version) codec into a shared namespace."""

    def __init__(self, message: Message, version: int) -> None:
        self.message = message
        self.version = version
        self.flexible = message.is_flexible(version)
        self.src: list[str] = []
        self.ns: dict[str, Any] = {
            "_P": P,
            "_unpack_from": struct.unpack_from,
            **{f"_ARRAYS_{element}": readers for element, readers in _ARRAYS.items()},
            "_pack": struct.pack,
            "_ProtocolError": ProtocolError,
            "_unsupported": self._unsupported_factory(),
            "_bad_keys": _bad_keys,
            "_ruv": P.read_uvarint,
            "_ral": P.read_array_length,
            "_rcal": P.read_compact_array_length,
            "_wal": P.write_array_length,
            "_wcal": P.write_compact_array_length,
            "_wtags": P.write_tags,
            "_EMPTY": {},
            "_bad_len": _bad_len,
            "_too_many": _too_many,
            "_short": P.short_read,
        }
        self.counter = 0

    def _unsupported_factory(self) -> Callable[[str], UnsupportedVersionError]:
        name, version = self.message.name, self.version

        def unsupported(path: str) -> UnsupportedVersionError:
            return UnsupportedVersionError(
                f"{name} v{version} has no field {path}; it is set to a non-default value "
                f"and the spec does not mark it ignorable"
            )

        return unsupported

    def _name(self, prefix: str, hint: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}_{hint}"

    def _const(self, value: object) -> str:
        """A literal for simple defaults; other values go into the namespace."""
        if value is None or isinstance(value, (bool, int, float, str)) or value == ():
            return repr(value)
        name = f"_C{len(self.ns)}"
        self.ns[name] = value
        return name

    # ------------------------------------------------------------------ decode
    def _reader(self, type_: str, nullable: bool, compact: bool) -> str:
        if type_ == "uuid":
            return "_P.read_uuid"
        kind = "string" if type_ == "string" else "bytes"
        return "_P.read_" + ("compact_" if compact else "") + ("nullable_" if nullable else "") + kind

    def _length(self, var: str, compact: bool, width: str, ind: str, lines: list[str]) -> None:
        """Read a length prefix into ``var``: compact = uvarint(n + 1) (fast path: one byte), else int16/32.
        Afterwards ``var`` is the real length, -1 meaning null."""
        if compact:
            lines.append(f"{ind}{var} = buf[pos]")
            lines.append(f"{ind}if {var} > 127:")
            lines.append(f"{ind}    {var}, pos = _ruv(buf, pos)")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    pos += 1")
            lines.append(f"{ind}{var} -= 1")
        else:
            lines.append(f"{ind}{var}, = _unpack_from('>{width}', buf, pos)")
            lines.append(f"{ind}pos += {2 if width == 'h' else 4}")

    def _decode_value(self, f: Field, var: str, ind: str, lines: list[str]) -> None:
        """Lines that read field ``f`` at ``pos`` into ``var`` and advance ``pos``."""
        v = self.version
        compact = _compact(f, v, self.flexible)
        nullable = f.is_nullable(v)
        if f.is_array:
            esize = max(_element_min_size(f, v, self.flexible), 1)
            self._length("n", compact, "i", ind, lines)
            lines.append(f"{ind}if n < 0:")
            if nullable:
                lines.append(f"{ind}    if n != -1:")
                lines.append(f"{ind}        raise _bad_len('array', n, pos)")
                lines.append(f"{ind}    {var} = None")
            else:
                lines.append(f"{ind}    raise _bad_len('array', n, pos)")
            lines.append(f"{ind}else:")
            inner = ind + "    "
            lines.append(f"{inner}if n * {esize} > len(buf) - pos:")
            lines.append(f"{inner}    raise _too_many(n, {esize}, pos, len(buf))")
            el = f.element
            if f.is_struct:
                fn = self.struct_decoder(f.fields, el)
                lines.append(f"{inner}{var} = []")
                lines.append(f"{inner}ap = {var}.append")
                lines.append(f"{inner}for _ in range(n):")
                lines.append(f"{inner}    x, pos = {fn}(buf, pos)")
                lines.append(f"{inner}    ap(x)")
            elif el in P.FIXED_FORMATS:
                # short arrays (replica lists, ISRs: a few ids) read with a prepared Struct; a format string
                # built and looked up per array cost twice as much
                code = P.FIXED_FORMATS[el]
                lines.append(f"{inner}{var} = [] if not n else list(_ARRAYS_{el}[n](buf, pos) if n < "
                             f"{_PREPARED_ARRAY} else _unpack_from('>%d{code}' % n, buf, pos))")
                lines.append(f"{inner}pos += n * {P.FIXED_SIZES[el]}")
            else:
                rd = self._reader(el, False, compact)
                lines.append(f"{inner}{var} = []")
                lines.append(f"{inner}for _ in range(n):")
                lines.append(f"{inner}    x, pos = {rd}(buf, pos)")
                lines.append(f"{inner}    {var}.append(x)")
        elif f.is_struct:
            fn = self.struct_decoder(f.fields, f.type)
            if nullable and not f.is_tagged(v):
                lines.append(f"{ind}if _unpack_from('>b', buf, pos)[0] < 0:")
                lines.append(f"{ind}    {var} = None")
                lines.append(f"{ind}    pos += 1")
                lines.append(f"{ind}else:")
                lines.append(f"{ind}    {var}, pos = {fn}(buf, pos + 1)")
            else:
                lines.append(f"{ind}{var}, pos = {fn}(buf, pos)")
        elif f.type in P.FIXED_FORMATS:
            lines.append(f"{ind}{var}, = _unpack_from('>{P.FIXED_FORMATS[f.type]}', buf, pos)")
            lines.append(f"{ind}pos += {P.FIXED_SIZES[f.type]}")
        elif f.type in ("bytes", "records"):
            # inlined: the records field is the hot path of Fetch responses.  ``records`` is a plain
            # slice of the input: bytes for bytes input, a zero-copy view for memoryview input.
            self._length("n", compact, "i", ind, lines)
            lines.append(f"{ind}if n < 0:")
            if nullable:
                lines.append(f"{ind}    if n != -1:")
                lines.append(f"{ind}        raise _bad_len('bytes', n, pos)")
                lines.append(f"{ind}    {var} = None")
            else:
                lines.append(f"{ind}    raise _bad_len('non-nullable bytes', n, pos)")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    e = pos + n")
            lines.append(f"{ind}    if e > len(buf):")
            lines.append(f"{ind}        raise _short('bytes', n, pos, len(buf))")
            if f.type == "records":
                lines.append(f"{ind}    {var} = buf[pos:e]")
            else:
                lines.append(f"{ind}    {var} = bytes(buf[pos:e])")
            lines.append(f"{ind}    pos = e")
        elif f.type == "string" and compact:
            # inlined (three calls less per string: 10,000 topic names in a Metadata answer); the errors are
            # the primitives' (a length byte past the end goes to ``_ruv``, which names the truncation)
            lines.append(f"{ind}n = buf[pos] if pos < len(buf) else 128")
            lines.append(f"{ind}if n > 127:")
            lines.append(f"{ind}    n, pos = _ruv(buf, pos)")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    pos += 1")
            lines.append(f"{ind}if not n:")
            if nullable:
                lines.append(f"{ind}    {var} = None")
            else:
                lines.append(f"{ind}    raise _ProtocolError(f'non-nullable compact string before offset {{pos}} "
                             f"is null')")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    e = pos + n - 1")
            lines.append(f"{ind}    if e > len(buf):")
            lines.append(f"{ind}        raise _short('compact string', n - 1, pos, len(buf))")
            lines.append(f"{ind}    {var} = str(buf[pos:e], 'utf-8')")
            lines.append(f"{ind}    pos = e")
        elif f.type == "uuid":
            lines.append(f"{ind}e = pos + 16")
            lines.append(f"{ind}if e > len(buf):")
            lines.append(f"{ind}    raise _short('uuid', 16, pos, len(buf))")
            lines.append(f"{ind}{var} = bytes(buf[pos:e])")
            lines.append(f"{ind}pos = e")
        else:
            lines.append(f"{ind}{var}, pos = {self._reader(f.type, nullable, compact)}(buf, pos)")

    def struct_decoder(self, fields: tuple[Field, ...], hint: str) -> str:
        v = self.version
        name = self._name("_d", hint)
        present = _fields_in(fields, v)
        lines = [f"def {name}(buf, pos):"]
        names: list[tuple[str, str]] = []  # (key, local var)
        run: list[tuple[Field, str]] = []

        def flush() -> None:
            if not run:
                return
            fmt = ">" + "".join(P.FIXED_FORMATS[f.type] for f, _ in run)
            st = f"_S{len(self.ns)}"
            self.ns[st] = struct.Struct(fmt).unpack_from
            size = struct.calcsize(fmt)
            targets = ", ".join(var for _, var in run)
            lines.append(f"    {targets}{',' if len(run) == 1 else ''} = {st}(buf, pos)")
            lines.append(f"    pos += {size}")
            run.clear()

        tagged: list[tuple[Field, str]] = []
        for i, f in enumerate(present):
            var = f"v{i}"
            names.append((f.name, var))
            if f.is_tagged(v):
                tagged.append((f, var))
                continue
            if not f.is_array and f.type in P.FIXED_FORMATS:
                run.append((f, var))
                continue
            flush()
            self._decode_value(f, var, "    ", lines)
        flush()
        if self.flexible:
            for f, var in tagged:
                default = None if (f.is_struct or f.is_array) else f.default_for(v)
                lines.append(f"    {var} = {self._const(default)}")
            lines.append("    u = None")
            lines.append("    if buf[pos]:")
            lines.append("        nt, pos = _ruv(buf, pos)")
            lines.append("        if nt > len(buf) - pos:")
            lines.append("            raise _ProtocolError(f'tag section at offset {pos} claims {nt} tags')")
            lines.append("        for _ in range(nt):")
            lines.append("            tg, pos = _ruv(buf, pos)")
            lines.append("            sz, pos = _ruv(buf, pos)")
            lines.append("            te = pos + sz")
            lines.append("            if te > len(buf):")
            lines.append(
                "                raise _ProtocolError(f'tagged field {tg} at offset {pos} has size {sz}, "
                "past the end')"
            )
            kw = "if"
            for f, var in tagged:
                lines.append(f"            {kw} tg == {f.tag}:")
                self._decode_value(f, var, "                ", lines)
                lines.append("                if pos != te:")
                lines.append(
                    f"                    raise _ProtocolError(f'tagged field {f.name} (tag {f.tag}) "
                    f"declared {{sz}} bytes but its value took {{pos - te + sz}}')"
                )
                kw = "elif"
            lines.append(f"            {'else' if tagged else 'if True'}:")
            lines.append("                if u is None:")
            lines.append("                    u = {}")
            lines.append("                u[tg] = bytes(buf[pos:te])")
            lines.append("                pos = te")
            lines.append("    else:")
            lines.append("        pos += 1")
        body = ", ".join(f"{k!r}: {var}" for k, var in names)
        lines.append(f"    d = {{{body}}}")
        if self.flexible:
            lines.append("    if u is not None:")
            lines.append("        d['_unknown_tags'] = u")
        lines.append("    return d, pos")
        self.src.append("\n".join(lines))
        return name

    # ------------------------------------------------------------------ encode
    def _writer(self, type_: str, nullable: bool, compact: bool) -> str:
        if type_ == "uuid":
            return "_P.write_uuid"
        kind = "string" if type_ == "string" else "bytes"
        return "_P.write_" + ("compact_" if compact else "") + ("nullable_" if nullable else "") + kind

    def _encode_value(self, f: Field, val: str, out: str, ind: str, lines: list[str]) -> None:
        """Lines that append the value held in local ``val`` to the parts list ``out``."""
        v = self.version
        compact = _compact(f, v, self.flexible)
        nullable = f.is_nullable(v)
        if f.is_array:
            lines.append(f"{ind}{'_wcal' if compact else '_wal'}({out}, {val}, {nullable})")
            inner = ind
            if nullable:
                lines.append(f"{ind}if {val} is not None:")
                inner = ind + "    "
            el = f.element
            if f.is_struct:
                fn = self.struct_encoder(f.fields, el)
                lines.append(f"{inner}for y in {val}:")
                lines.append(f"{inner}    {fn}(y, {out})")
            elif el in P.FIXED_FORMATS:
                lines.append(f"{inner}{out}.append(_pack('>%d{P.FIXED_FORMATS[el]}' % len({val}), *{val}))")
            else:
                wr = self._writer(el, False, compact)
                lines.append(f"{inner}for y in {val}:")
                lines.append(f"{inner}    {wr}({out}, y)")
        elif f.is_struct:
            fn = self.struct_encoder(f.fields, f.type)
            if nullable and not f.is_tagged(v):
                lines.append(f"{ind}if {val} is None:")
                lines.append(f"{ind}    {out}.append(b'\\xff')")
                lines.append(f"{ind}else:")
                lines.append(f"{ind}    {out}.append(b'\\x01')")
                lines.append(f"{ind}    {fn}({val}, {out})")
            else:
                lines.append(f"{ind}{fn}(_EMPTY if {val} is None else {val}, {out})")
        elif f.type in P.FIXED_FORMATS:
            lines.append(f"{ind}{out}.append(_pack('>{P.FIXED_FORMATS[f.type]}', {val}))")
        else:
            lines.append(f"{ind}{self._writer(f.type, nullable, compact)}({out}, {val})")

    def struct_encoder(self, fields: tuple[Field, ...], hint: str) -> str:
        v = self.version
        name = self._name("_e", hint)
        keys = frozenset(f.name for f in fields) | {"_unknown_tags"}
        kname = f"_K{len(self.ns)}"
        self.ns[kname] = keys
        lines = [f"def {name}(d, out):"]
        lines.append(f"    if not {kname}.issuperset(d):")
        lines.append(f"        _bad_keys(d, {kname}, {hint!r})")
        for f in fields:
            if v in f.versions or f.ignorable:
                continue
            lines.append(f"    x = d.get({f.name!r})")
            if f.is_array or f.is_struct:
                lines.append("    if x:")
            else:
                lines.append(f"    if x is not None and x != {self._const(f.default_for(v))}:")
            lines.append(f"        raise _unsupported({(hint + '.' + f.name)!r})")
        run: list[Field] = []

        def flush() -> None:
            if not run:
                return
            fmt = ">" + "".join(P.FIXED_FORMATS[f.type] for f in run)
            st = f"_S{len(self.ns)}"
            self.ns[st] = struct.Struct(fmt).pack
            args = ", ".join(f"d.get({f.name!r}, {self._const(f.default_for(v))})" for f in run)
            lines.append(f"    out.append({st}({args}))")
            run.clear()

        tagged: list[Field] = []
        for f in _fields_in(fields, v):
            if f.is_tagged(v):
                tagged.append(f)
                continue
            if not f.is_array and f.type in P.FIXED_FORMATS:
                run.append(f)
                continue
            flush()
            default = f.default_for(v)
            if f.is_array and default == []:
                default = ()
            lines.append(f"    x = d.get({f.name!r}, {self._const(default)})")
            self._encode_value(f, "x", "out", "    ", lines)
        flush()
        if self.flexible:
            lines.append("    t = []")
            for f in sorted(tagged, key=lambda f: f.tag or 0):
                if f.is_struct or f.is_array:
                    lines.append(f"    x = d.get({f.name!r})")
                    lines.append("    if x is not None:")
                else:
                    default = self._const(f.default_for(v))
                    lines.append(f"    x = d.get({f.name!r}, {default})")
                    lines.append(f"    if x != {default}:")
                lines.append("        b = []")
                self._encode_value(f, "x", "b", "        ", lines)
                lines.append(f"        t.append(({f.tag}, b''.join(b)))")
            lines.append("    u = d.get('_unknown_tags')")
            lines.append("    if t or u:")
            lines.append("        _wtags(out, t, u)")
            lines.append("    else:")
            lines.append("        out.append(b'\\x00')")
        self.src.append("\n".join(lines))
        return name

    def build(self, direction: str) -> Callable[..., Any]:
        root = self.message.name
        fn = self.struct_decoder(self.message.fields, root) if direction == "decode" else (
            self.struct_encoder(self.message.fields, root)
        )
        source = "\n\n".join(self.src)
        code = compile(source, f"<akresil codec {self.message.name} v{self.version} {direction}>", "exec")
        exec(code, self.ns)  # noqa: S102 - the source is generated from our own schemas
        func: Callable[..., Any] = self.ns[fn]
        func.__akresil_source__ = source  # type: ignore[attr-defined]
        return func


def _bad_len(what: str, n: int, pos: int) -> ProtocolError:
    return ProtocolError(f"{what} before offset {pos} has invalid length {n}")


def _too_many(n: int, size: int, pos: int, end: int) -> ProtocolError:
    return ProtocolError(
        f"array at offset {pos} claims {n} elements of >= {size} bytes but only {end - pos} bytes remain"
    )


def _bad_keys(d: object, allowed: frozenset[str], where: str) -> None:
    if not isinstance(d, dict):
        raise ProtocolError(f"{where}: expected a dict, got {type(d).__name__}")
    unknown = sorted(str(k) for k in d if k not in allowed)
    raise ProtocolError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(allowed))}")


_DECODER_CACHE: dict[tuple[str, int], Decoder] = {}
_ENCODER_CACHE: dict[tuple[str, int], Encoder] = {}


def decoder(message: Message, version: int) -> Decoder:
    """``decode(buf, pos) -> (dict, pos)``; raises only :class:`ProtocolError` on bad bytes."""
    key = (message.name, version)
    fn = _DECODER_CACHE.get(key)
    if fn is None:
        message.check_version(version)
        raw = _Codegen(message, version).build("decode")
        label = f"{message.name} v{version}"

        def fn(buf: Any, pos: int = 0, _raw: Callable[..., Any] = raw) -> tuple[dict[str, Any], int]:
            try:
                return _raw(buf, pos)  # type: ignore[no-any-return]
            except ProtocolError as e:
                raise ProtocolError(f"{label}: {e}") from None
            except _DECODE_ERRORS as e:
                raise ProtocolError(f"{label}: malformed or truncated ({type(e).__name__}: {e})") from None

        fn.__akresil_source__ = raw.__akresil_source__  # type: ignore[attr-defined]
        _DECODER_CACHE[key] = fn
    return fn


def encoder(message: Message, version: int) -> Encoder:
    """``encode(body, parts)`` appends the body's pieces to the list ``parts`` (join them); bad values raise a :class:`ProtocolError`
    naming the field path (or :class:`UnsupportedVersionError` for a field the version lacks)."""
    key = (message.name, version)
    fn = _ENCODER_CACHE.get(key)
    if fn is None:
        message.check_version(version)
        raw = _Codegen(message, version).build("encode")
        label = f"{message.name} v{version}"

        def fn(body: dict[str, Any], out: list[Any], _raw: Callable[..., Any] = raw) -> None:
            start = len(out)
            try:
                _raw(body, out)
            except ProtocolError as e:
                del out[start:]
                where = diagnose(message, version, body)
                raise ProtocolError(f"{label}: {where or e}") from None
            except _ENCODE_ERRORS as e:
                del out[start:]
                where = diagnose(message, version, body)
                raise ProtocolError(f"{label}: {where or f'cannot encode ({type(e).__name__}: {e})'}") from e

        fn.__akresil_source__ = raw.__akresil_source__  # type: ignore[attr-defined]
        _ENCODER_CACHE[key] = fn
    return fn


# --------------------------------------------------------------------------- diagnosis
def diagnose(message: Message, version: int, body: object) -> str | None:
    """Find the first value the encoder cannot write and say where it is and why."""
    flexible = message.is_flexible(version)
    return _diagnose_struct(message.fields, version, flexible, body, message.name)


def _diagnose_struct(fields: tuple[Field, ...], version: int, flexible: bool, value: object, path: str) -> str | None:
    if not isinstance(value, dict):
        return f"{path}: expected a dict, got {type(value).__name__}"
    for f in _fields_in(fields, version):
        if f.name not in value:
            continue
        problem = _diagnose_field(f, version, flexible, value[f.name], f"{path}.{f.name}")
        if problem:
            return problem
    tags = value.get("_unknown_tags")
    if tags is not None:
        if not isinstance(tags, dict) or not all(
            isinstance(k, int) and k >= 0 and isinstance(b, (bytes, bytearray, memoryview)) for k, b in tags.items()
        ):
            return f"{path}._unknown_tags: expected a dict of int tag -> bytes"
    return None


def _diagnose_field(f: Field, version: int, flexible: bool, value: object, path: str) -> str | None:
    nullable = f.is_nullable(version)
    if value is None:
        if nullable or f.is_tagged(version) or (f.is_struct and not f.is_array):
            return None
        return f"{path}: None given but the field is not nullable in v{version}"
    if f.is_array:
        if not isinstance(value, (list, tuple)):
            return f"{path}: expected a list, got {type(value).__name__}"
        for i, item in enumerate(value):
            if f.is_struct:
                problem = _diagnose_struct(f.fields, version, flexible, item, f"{path}[{i}]")
            else:
                problem = _diagnose_scalar(f.element, item, f"{path}[{i}]", _compact(f, version, flexible))
            if problem:
                return problem
        return None
    if f.is_struct:
        return _diagnose_struct(f.fields, version, flexible, value, path)
    return _diagnose_scalar(f.type, value, path, _compact(f, version, flexible))


def _diagnose_scalar(type_: str, value: object, path: str, compact: bool) -> str | None:
    if type_ in P.INT_RANGES:
        lo, hi = P.INT_RANGES[type_]
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{path}: expected an int ({type_}), got {type(value).__name__}"
        if not lo <= value <= hi:
            return f"{path}: {value} is out of range for {type_} ({lo}..{hi})"
    elif type_ == "bool":
        if not isinstance(value, bool):
            return f"{path}: expected a bool, got {type(value).__name__}"
    elif type_ == "float64":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"{path}: expected a float, got {type(value).__name__}"
    elif type_ == "string":
        if not isinstance(value, str):
            return f"{path}: expected a str, got {type(value).__name__}"
        try:
            n = len(value.encode())
        except UnicodeEncodeError as e:
            return f"{path}: string is not encodable as UTF-8 ({e.reason})"
        if not compact and n > 0x7FFF:
            return f"{path}: string of {n} UTF-8 bytes exceeds the int16 length limit"
    elif type_ == "uuid":
        if not isinstance(value, bytes) or len(value) != 16:
            return f"{path}: a uuid must be 16 bytes, got {value!r:.40}"
    elif type_ in ("bytes", "records"):
        if not isinstance(value, (bytes, bytearray, memoryview)):
            return f"{path}: expected bytes, got {type(value).__name__}"
    return None
