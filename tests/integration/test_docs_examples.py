"""docs/getting-started.md runs: each Python and console block is executed against the default embedded broker
(Apache Kafka) and its output compared with the ``text`` block shown after it (``...`` in the shown output matches anything).

The blocks are read from the page itself, so an edit that breaks an example fails here.  They run in page
order because later ones read what earlier ones wrote (offsets, committed positions).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from .conftest import CliBroker

pytestmark = [pytest.mark.broker, pytest.mark.kafka_too]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"
DOC_BOOTSTRAP = "127.0.0.1:9092"
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


class Block(NamedTuple):
    lang: str
    code: str
    expected: str | None     # the ``text`` block right after it, if any
    line: int


def page_blocks(text: str) -> list[Block]:
    fences = [(m.group(1), m.group(2), m.start(), m.end()) for m in _FENCE.finditer(text)]
    blocks = []
    for i, (lang, body, start, end) in enumerate(fences):
        if lang not in ("python", "console"):
            continue
        expected = None
        if i + 1 < len(fences):
            nlang, nbody, nstart, _ = fences[i + 1]
            if nlang == "text" and not text[end:nstart].strip():
                expected = nbody
        blocks.append(Block(lang, body, expected, text.count("\n", 0, start) + 1))
    return blocks


def assert_output(expected: str, actual: str, where: str) -> None:
    exp, act = expected.rstrip("\n").splitlines(), actual.rstrip("\n").splitlines()
    patterns = [re.compile(".*".join(map(re.escape, line.split("...")))) for line in exp]
    ok = len(exp) == len(act) and all(p.fullmatch(a) for p, a in zip(patterns, act))
    assert ok, f"{where}: output differs from the page\n--- page\n{expected}--- actual\n{actual}"


@pytest.fixture(scope="module")
def fresh_broker(kafka_cli_broker: CliBroker) -> CliBroker:
    """The default embedded broker where Java is: Apache Kafka (``akresil broker --kind kafka``, shared with
    test_embedded_kafka.py, whose topics and groups have names of their own: the page's offsets stay exact)."""
    return kafka_cli_broker


def test_page_has_the_examples_it_promises() -> None:
    blocks = page_blocks(PAGE.read_text(encoding="utf-8"))
    assert sum(b.lang == "python" for b in blocks) >= 7
    assert sum(b.lang == "console" for b in blocks) >= 1
    assert all(b.expected is not None for b in blocks if b.lang == "python"), "every example shows its output"


def test_python_examples_run_and_print_what_the_page_shows(fresh_broker: CliBroker) -> None:
    for block in page_blocks(PAGE.read_text(encoding="utf-8")):
        if block.lang != "python":
            continue
        where = f"getting-started.md:{block.line}"
        code = block.code.replace(DOC_BOOTSTRAP, fresh_broker.bootstrap_servers)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, where, "exec"), {"__name__": "__main__"})
        assert block.expected is not None
        assert_output(block.expected, out.getvalue(), where)


def test_console_examples_run_and_print_what_the_page_shows(fresh_broker: CliBroker) -> None:
    bindir = Path(sys.executable).parent
    assert (bindir / "akresil").exists(), f"the akresil command is not installed next to {sys.executable}"
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
           "AKRESIL_BOOTSTRAP_SERVERS": fresh_broker.bootstrap_servers}
    for block in page_blocks(PAGE.read_text(encoding="utf-8")):
        if block.lang != "console":
            continue
        # a command is a "$ " line; the lines up to the next command are its output (stdout, then stderr)
        steps: list[tuple[str, list[str]]] = []
        for line in block.code.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                assert steps, f"getting-started.md:{block.line}: output before the first command"
                steps[-1][1].append(line)
        for command, shown in steps:
            done = subprocess.run(["bash", "-c", command], capture_output=True, env=env, timeout=30, text=True)
            where = f"getting-started.md:{block.line}: {command}"
            assert done.returncode == 0, f"{where}: exit {done.returncode}\n{done.stderr}"
            assert_output("\n".join(shown) + "\n", done.stdout + done.stderr, where)


def test_output_matching_is_strict() -> None:
    assert_output("a ... c\n", "a b c\n", "x")
    with pytest.raises(AssertionError):
        assert_output("a ... c\n", "a b d\n", "x")
    with pytest.raises(AssertionError):
        assert_output("one\n", "one\ntwo\n", "x")
