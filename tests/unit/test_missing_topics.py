"""The consumer's missing-topic reports: at once, then at a low rate, and again at once after a return."""

from __future__ import annotations

import pytest

from akresil.core.missing_topics import MissingTopicWarnings


def test_first_sighting_at_once_then_once_per_interval_while_missing() -> None:
    w = MissingTopicWarnings(interval_ms=60_000)
    assert w.due({"orders"}, 0) == [("orders", True)]
    assert w.due({"orders"}, 1_000) == []          # every metadata refresh asks: no repeat
    assert w.due({"orders"}, 59_999) == []
    assert w.due({"orders"}, 60_000) == [("orders", False)]
    assert w.due({"orders"}, 61_000) == []


def test_topics_are_tracked_one_by_one_and_a_topic_that_appears_is_forgotten() -> None:
    w = MissingTopicWarnings(interval_ms=10)
    assert w.due({"b", "a"}, 0) == [("a", True), ("b", True)]
    assert w.due({"b"}, 5) == []                    # "a" was created
    assert w.due({"a", "b"}, 6) == [("a", True)]    # deleted again: reported at once, as a first sighting
    assert w.due(set(), 100) == []


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_ms"):
        MissingTopicWarnings(interval_ms=0)
