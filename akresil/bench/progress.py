"""The live progress line: rich's ``Live`` on a terminal, one plain line per phase change otherwise (CI logs
and pipes get no carriage-return spam)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class Progress:
    """Callable as the runner's progress function; use as a context manager around the run."""

    def __init__(self, out: TextIO | None = None, *, live: bool | None = None) -> None:
        self.out = out if out is not None else sys.stderr
        self.live = self.out.isatty() if live is None else live
        self._live: Any = None
        self._phase: tuple[str, str] | None = None
        self._started = time.monotonic()

    def __enter__(self) -> Progress:
        if self.live:
            try:
                from rich.console import Console
                from rich.live import Live
            except ImportError:   # the bench extra is missing: plain lines still work
                self.live = False
            else:
                self._live = Live("", console=Console(file=self.out), refresh_per_second=8, transient=True)
                self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def __call__(self, scenario: str, client: str, elapsed: float, duration: float, acked: int,
                 failed: int) -> None:
        line = format_line(scenario, client, elapsed, duration, acked, failed, time.monotonic() - self._started)
        if self._live is not None:
            self._live.update(line)
        elif (scenario, client) != self._phase:
            print(line, file=self.out, flush=True)
        self._phase = (scenario, client)

    def note(self, text: str) -> None:
        """A line that stays (a finished phase's headline)."""
        if self._live is not None:
            self._live.console.print(text)
        else:
            print(text, file=self.out, flush=True)


def format_line(scenario: str, client: str, elapsed: float, duration: float, acked: int, failed: int,
                total_s: float) -> str:
    pct = 0 if duration <= 0 else min(100, int(100 * elapsed / duration))
    return (f"[{total_s:5.0f} s] {scenario:<13} {client:<22} {pct:3d}%  acked {acked:>8,}  "
            f"failed {failed:>6,}")
