"""The command line both page generators share: write the page, or ``--check`` that the committed one is current."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable


def run(doc: str, render: Callable[[], str], default_out: Path, script: str, argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed page differs")
    parser.add_argument("--out", type=Path, default=default_out)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run python tools/{script}", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0
