"""When to warn that a consumer's topic (or assigned partition) does not exist (sans-IO: the caller passes the clock).

A consumer assigned or subscribed to a topic the cluster does not have gets no records from it and no error:
Kafka answers UNKNOWN_TOPIC_OR_PARTITION in Metadata, and the topic may yet be created, so it is not a failure.
Silence would hide a typo, and one line per metadata refresh would bury everything else: the first sighting
is reported at once, then again every ``interval_ms`` while the topic is still missing.  A topic that appears
is forgotten, so if it is deleted later that is reported at once again.
"""

from __future__ import annotations

from typing import Generic, Hashable, Iterable, Mapping, TypeVar

from .. import errors

__all__ = ["MissingTopicWarnings", "missing_topics"]

def missing_topics(topic_errors: Mapping[str, int], named: Iterable[str]) -> list[str]:
    """The topics of ``named`` that the latest Metadata answered as not existing (UNKNOWN_TOPIC_OR_PARTITION)."""
    code = errors.UnknownTopicOrPartitionError.errno
    return [t for t in named if topic_errors.get(t) == code]

#: between two reports of the same missing topic
DEFAULT_INTERVAL_MS = 60_000.0


#: what is reported: a topic name, or an assigned ``TopicPartition`` beyond its topic's partitions
K = TypeVar("K", bound=Hashable)


class MissingTopicWarnings(Generic[K]):
    """Which missing topics (or partitions) to report now."""

    def __init__(self, interval_ms: float = DEFAULT_INTERVAL_MS) -> None:
        if interval_ms <= 0:
            raise ValueError(f"interval_ms must be > 0, got {interval_ms}")
        self.interval_ms = interval_ms
        self._next_at: dict[K, float] = {}     # topic -> when it may be reported again
        self._reported: set[K] = set()         # reported at least once since it went missing

    def due(self, missing: Iterable[K], now_ms: float) -> list[tuple[K, bool]]:
        """``(topic, first)`` for each topic of ``missing`` to report now, sorted; ``first`` is True for the
        first report since the topic went missing.  Topics not in ``missing`` any more are forgotten."""
        missing = set(missing)
        for topic in [t for t in self._next_at if t not in missing]:
            del self._next_at[topic]
            self._reported.discard(topic)
        out: list[tuple[K, bool]] = []
        for topic in sorted(missing, key=str):
            at = self._next_at.get(topic)
            if at is None or now_ms >= at:
                out.append((topic, topic not in self._reported))
                self._reported.add(topic)
                self._next_at[topic] = now_ms + self.interval_ms
        return out
