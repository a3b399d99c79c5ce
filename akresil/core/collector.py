"""Python's cyclic collector paused while a burst of objects that cannot form a cycle is built.

Every GC-tracked allocation counts towards a young collection; tens of thousands at once (a bulk completion's
``RecordMetadata``, a Spark write's ``(key, value)`` pairs) run a young collection every ~700 and, every tenth of
those, one counting towards a full collection over the whole process. None of these objects can be cyclic
garbage, so the one young collection after the pause frees what the many would have.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

#: bursts at least this long are built with the collector paused
PAUSE_MIN = 1024


@contextmanager
def paused_for(n: int) -> Iterator[None]:
    """Pause the collector while ``n`` objects are made, when ``n >= PAUSE_MIN`` and it is enabled (a caller
    that turned it off keeps it off)."""
    paused = n >= PAUSE_MIN and gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
