"""Hooks: per-event methods, catch-all, validation, and isolation from faulty hooks."""

from __future__ import annotations

import logging

import pytest

from akresil.core.events import BATCH_EXPIRED, THROTTLED, Hooks, RecordingHook


class ThrottleOnly:
    def __init__(self) -> None:
        self.seen: list[float] = []

    def on_throttled(self, *, node_id: int, throttle_ms: float, **_: object) -> None:
        self.seen.append(throttle_ms)


class Broken:
    def on_event(self, name: str, fields: dict) -> None:
        raise RuntimeError("exporter down")


def test_dispatch_to_specific_and_catch_all_hooks(caplog: pytest.LogCaptureFixture) -> None:
    specific, everything = ThrottleOnly(), RecordingHook()
    hooks = Hooks([Broken(), specific, everything])
    with caplog.at_level(logging.ERROR):
        hooks.emit(THROTTLED, node_id=1, throttle_ms=20.0)
        hooks.emit(BATCH_EXPIRED, topic="t", partition=0, stage="queued", records=1, age_ms=5.0)
    assert specific.seen == [20.0]
    assert [name for name, _ in everything.events] == [THROTTLED, BATCH_EXPIRED]
    assert "exporter down" in caplog.text            # logged, not raised


def test_rejects_objects_without_handlers_and_supports_removal() -> None:
    with pytest.raises(TypeError, match="on_event"):
        Hooks([object()])
    rec = RecordingHook()
    hooks = Hooks([rec])
    hooks.remove(rec)
    hooks.emit(THROTTLED, node_id=1)
    assert rec.events == [] and len(hooks) == 0
