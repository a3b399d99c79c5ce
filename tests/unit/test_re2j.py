"""Python regexes in the RE2J syntax the broker resolves KIP-848 subscriptions with (``core.re2j``)."""

from __future__ import annotations

import re

import pytest

from akresil.core.re2j import to_re2j
from akresil.errors import ConfigError


@pytest.mark.parametrize(("python", "re2j"), [
    ("orders-.*", "orders-.*"),
    (r"^(?P<env>prod|dev)\.orders\Z", r"^(?P<env>prod|dev)\.orders\z"),     # \Z is RE2's \z
    (r"a{,3}b{2}c{1,}", r"a{0,3}b{2}c{1,}"),                               # Python's {,n} is {0,n}
    (r"t{x}", r"t\{x}"),                                                   # a brace that is no quantifier
    (r"[\]\d{,2}]+?x*?", r"[\]\d{,2}]+?x*?"),                              # classes copied; lazy quantifiers
    (r"(?i:Orders)|(?-s:x)", r"(?i:Orders)|(?-s:x)"),
    (re.compile("orders", re.IGNORECASE | re.DOTALL), "(?is)orders"),     # compiled flags become inline ones
])
def test_translated(python: str | re.Pattern[str], re2j: str) -> None:
    assert to_re2j(python) == re2j


@pytest.mark.parametrize(("python", "words"), [
    (r"(a)\1", r"backreference \1 at position 3"),
    (r"(?P<x>a)(?P=x)", "named backreference"),
    (r"orders(?=-eu)", "lookahead"),
    (r"orders(?!-test)", "negative lookahead"),
    (r"(?<=prod-)orders", "lookbehind"),
    (r"(?<!test-)orders", "negative lookbehind"),
    (r"(?>a+)b", "atomic group"),
    (r"a++b", "possessive quantifier"),
    (r"a{2}+", "possessive quantifier"),
    (r"(a)?(?(1)b|c)", "conditional group"),
    (r"a(?#note)", "comment group"),
    (r"(?x)a b", "inline flag 'x'"),
    (r"\N{DIGIT ONE}", r"escape \N"),
])
def test_what_re2j_lacks_is_refused_naming_pattern_and_the_construct(python: str, words: str) -> None:
    with pytest.raises(ConfigError, match=r"^pattern: .*" + re.escape(words) + r".*group_protocol='classic'"):
        to_re2j(python)


def test_verbose_and_invalid_regexes_are_refused() -> None:
    with pytest.raises(ConfigError, match="VERBOSE"):
        to_re2j(re.compile("a # b", re.VERBOSE))
    with pytest.raises(ConfigError, match="not a valid regex"):
        to_re2j("(")


def test_a_consumer_group_subscription_regex_is_checked_at_construction() -> None:
    from akresil import Consumer
    with pytest.raises(ConfigError, match=r"pattern: .*lookahead"):
        Consumer(pattern="orders(?=-eu)", bootstrap_servers="127.0.0.1:1", group_id="g", group_protocol="consumer")
    Consumer(pattern="orders(?=-eu)", bootstrap_servers="127.0.0.1:1", group_id="g")   # classic: matched here
