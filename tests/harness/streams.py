"""A text stream that keeps what is written to it: where a test points the bench's progress output."""

from __future__ import annotations


class TextSink:
    """Not a terminal (so progress output is plain lines); ``lines`` holds every ``write``."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines.append(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False
