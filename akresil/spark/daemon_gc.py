"""Keep a Spark Python worker's long-lived heap out of the full collection Spark's daemon runs after every task.

Spark forks most of its Python processes from a daemon (``python -m pyspark.daemon``): the executors' task workers
and the driver's planner and commit runners (the streaming sink's commit among them). With worker reuse (the
default) the forked worker runs ``gc.collect()`` after every task or call it served, just when the JVM moves on:
after a micro-batch's tasks and its sink commit, the driver writes the commit log (``commitOffsets``) and the next
offset log (``walCommit``) while each of those workers walks every tracked object it holds — pyspark's, pyarrow's
and akresil's modules, some 35,000–50,000 objects, several ms of CPU each on a 2-core machine. The JVM sink pays
none of it; Spark's own no-op Python sink pays it as akresil did (docs/spark.md, "Phases of a micro-batch").

``freeze_long_lived()``, called where akresil's code finishes its work in such a worker, collects once and moves the
survivors into the permanent generation (``gc.freeze()``), so the daemon's collections walk only what later tasks
allocate. Once per process: the first call pays one full collection; a process that froze already (by anyone) is
left alone. Frozen objects are still freed by reference counting, only cycles among them are never collected —
the modules and caches that live as long as the worker anyway.
"""

from __future__ import annotations

import gc
import sys
from types import ModuleType

__all__ = ["forked_by_spark_daemon", "freeze_long_lived"]

#: the module Spark's daemon runs as ``__main__``; its forked workers keep it
DAEMON_MODULE = "pyspark.daemon"


def forked_by_spark_daemon(main: ModuleType | None = None) -> bool:
    """Whether this process (its ``__main__``, or ``main``) is Spark's Python daemon or a worker forked from it,
    the processes that collect after every task; not the user's driver program or a test run."""
    if main is None:
        main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", None) == DAEMON_MODULE


def freeze_long_lived(*, in_daemon_worker: bool | None = None) -> bool:
    """Collect and freeze this worker's heap once (see the module docstring); True when this call froze it.

    ``in_daemon_worker`` overrides the ``__main__`` check (tests)."""
    if in_daemon_worker is None:
        in_daemon_worker = forked_by_spark_daemon()
    if not in_daemon_worker or gc.get_freeze_count():
        return False
    gc.collect()
    gc.freeze()
    return True
