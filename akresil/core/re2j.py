"""A Python regex as the RE2J syntax a Kafka broker resolves KIP-848 subscriptions with, or a clear refusal.

With ``group_protocol="consumer"`` the coordinator matches the subscription regex against the cluster's topics
itself (``SubscribedTopicRegex``), with RE2J, which has no backtracking: backreferences, lookaround, atomic groups,
possessive quantifiers, conditionals, comments and the verbose flag do not exist there, and a few spellings differ
(``\\Z`` is RE2's ``\\z``; Python reads ``{,n}`` as ``{0,n}``, RE2 as a literal). ``to_re2j`` translates what has
an RE2J spelling and refuses the rest with ``ConfigError`` naming ``pattern``, the construct and its position, so
the mistake shows at ``Consumer(...)``, not as a broker's INVALID_REGULAR_EXPRESSION after the join (or, worse, a
regex RE2J reads differently). Pure string work, no I/O.
"""

from __future__ import annotations

import re

from ..errors import ConfigError

__all__ = ["to_re2j"]

#: Python's re flags with an RE2J inline spelling
_FLAGS = {re.IGNORECASE: "i", re.MULTILINE: "m", re.DOTALL: "s"}
#: inline flag letters RE2J knows (U: ungreedy is RE2's own; Python has no such flag)
_INLINE = set("imsU-")
_HINT = ("the broker matches group_protocol='consumer' subscriptions with RE2J; rewrite the regex, or use "
         "group_protocol='classic', which matches topics in the client")


def _refuse(pattern: str, at: int, what: str) -> ConfigError:
    return ConfigError(f"pattern: {pattern!r} uses {what} at position {at}, which RE2J does not have ({_HINT})")


def to_re2j(pattern: str | re.Pattern[str]) -> str:
    """``pattern`` (a string, or a compiled regex with its flags) in RE2J syntax; ``ConfigError`` if it has none."""
    if isinstance(pattern, re.Pattern):
        source, flags = pattern.pattern, pattern.flags
    else:
        source, flags = pattern, 0
    if not isinstance(source, str):
        raise ConfigError(f"pattern: expected a str regex, got {type(source).__name__}")
    try:
        re.compile(source, flags)
    except re.error as exc:
        raise ConfigError(f"pattern: {source!r} is not a valid regex: {exc}") from None
    if flags & re.VERBOSE:
        raise ConfigError(f"pattern: the VERBOSE flag has no RE2J equivalent ({_HINT})")
    inline = "".join(letter for flag, letter in _FLAGS.items() if flags & flag)
    body = _translate(source)
    return f"(?{inline}){body}" if inline else body


def _translate(p: str) -> str:
    out: list[str] = []
    i, n = 0, len(p)
    in_class = False
    after_quantifier = False      # the previous token was a quantifier: a '+' now would make it possessive
    while i < n:
        c = p[i]
        if c == "\\":
            nxt = p[i + 1] if i + 1 < n else ""
            if not in_class:
                if nxt.isdigit() and nxt != "0":
                    raise _refuse(p, i, f"the backreference \\{nxt}")
                if nxt == "Z":
                    out.append("\\z")       # end of input: RE2's spelling
                    i += 2
                    after_quantifier = False
                    continue
            if nxt in ("N", "u", "U"):
                raise _refuse(p, i, f"the escape \\{nxt}")
            out.append(p[i:i + 2])
            i += 2
            after_quantifier = False
            continue
        if in_class:
            out.append(c)
            if c == "]":
                in_class = False
            i += 1
            continue
        if c == "[":
            in_class = True
            start = i
            i += 1
            if i < n and p[i] == "^":
                i += 1
            if i < n and p[i] == "]":       # a ']' first in a class is a literal one
                i += 1
            out.append(p[start:i])
            after_quantifier = False
            continue
        if c == "(" and p.startswith("?", i + 1):
            i = _group_opening(p, i, out)
            after_quantifier = False
            continue
        if c == "+" and after_quantifier:
            raise _refuse(p, i, "a possessive quantifier")
        if c in "*+?":
            # '?' right after a quantifier makes it lazy (RE2J has that); it ends the quantifier either way
            lazy = c == "?" and after_quantifier
            out.append(c)
            after_quantifier = not lazy
            i += 1
            continue
        if c == "{":
            close = p.find("}", i)
            inside = p[i + 1:close] if close > 0 else ""
            if close > 0 and re.fullmatch(r"\d*(,\d*)?", inside) and inside not in ("", ","):
                if inside.startswith(","):
                    inside = "0" + inside   # Python's {,n} is {0,n}; RE2 would read "{,n}" literally
                out.append("{" + inside + "}")
                i = close + 1
                after_quantifier = True
                continue
            out.append("\\{")             # a literal brace, as Python reads it
            i += 1
            after_quantifier = False
            continue
        out.append(c)
        after_quantifier = False
        i += 1
    return "".join(out)


def _group_opening(p: str, i: int, out: list[str]) -> int:
    """A ``(?...`` construct at ``i``: copied if RE2J has it, else refused; returns the index after its opening."""
    rest = p[i + 2:]
    for prefix, what in (("=", "a lookahead"), ("!", "a negative lookahead"), ("<=", "a lookbehind"),
                         ("<!", "a negative lookbehind"), (">", "an atomic group"), ("(", "a conditional group"),
                         ("P=", "a named backreference"), ("#", "a comment group")):
        if rest.startswith(prefix):
            raise _refuse(p, i, f"{what} (?{prefix}")
    if rest.startswith("P<") or rest.startswith("<") or rest.startswith(":"):
        out.append("(?")
        return i + 2
    j = i + 2
    while j < len(p) and p[j] not in ":)":
        if p[j] not in _INLINE:
            raise _refuse(p, i, f"the inline flag {p[j]!r}")
        j += 1
    out.append(p[i:j])
    return j
