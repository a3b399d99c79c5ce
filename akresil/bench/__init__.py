"""``akresil bench``: throughput and latency under failure, akresil vs aiokafka vs confluent-kafka.

Scenarios (``scenarios.py``) are seeded, time-bounded fault scripts (``script.py``) that the runner
(``runner.py``) applies identically to every client (``clients.py``) through ``akresil.testing.FaultProxy``,
or, with ``--harness mock``, on librdkafka's mock cluster (``mock_runner.py``, metrics in ``mock_scenarios.py``);
``report.py`` writes the JSON document and the docs table, ``plots.py`` the PNGs (matplotlib, imported lazily),
``progress.py`` the live line.  See docs/benchmarks.md.
"""

from __future__ import annotations
