"""Chaos soak: a seeded fault script over the fault proxy (or a real Apache Kafka cluster) and a driver that proves
no acknowledged record is lost.

One module per concern, each testable on its own (this package re-exports their public names):

* ``schedule`` (pure): ``generate_schedule(spec, seed)`` -> ``FaultEvent`` list; ``timeline`` -> apply/undo steps;
* ``controls``: ``FaultControl``, the runner's protocol; ``FaultProxyControl`` (the proxy's ``BrokerControl``) and
  ``KafkaClusterControl`` (Apache Kafka itself, with the faults a real cluster can take);
* ``runner``: ``FaultRunner`` plays the steps at their times (injected clock and sleep) and always heals;
* ``payload``: record values that name their producer, partition and send sequence;
* ``ledger`` (pure): ``Ledger``, ``Consumption``, ``LogImage`` and ``judge``, which counts what went wrong;
* ``resources``: the tasks and file descriptors a soak must not leave behind;
* ``soak``: ``run_soak`` -- idempotent producers and a consumer group under the script, then a fresh reader
  checks the log (``SoakConfig``, ``SoakReport``).

A record the group delivers twice at the *same* offset is an at-least-once redelivery after a rebalance
(``redelivered``, allowed); the same payload at two *offsets* is a duplicate in the log, an idempotence failure
(``duplicates``, never allowed).  The soak runs on asyncio (task leak check via ``asyncio.all_tasks``).
"""

from __future__ import annotations

from .controls import (FaultControl, FaultProxyControl, GroupMembers, KafkaClusterControl, MemberControl,
                       ProxyControl, unsupported_faults)
from .ledger import Consumption, Ledger, LogImage, judge
from .payload import decode_payload, encode_payload
from .resources import ResourceSnapshot, leaked_fds, tcp_sockets
from .runner import FaultRunner
from .schedule import (DEFAULT_FETCH_ERRORS, DEFAULT_PRODUCE_ERRORS, DEFAULT_WEIGHTS, FAULT_NEEDS, Fault,
                       FaultEvent, ScheduleSpec, Step, generate_schedule, timeline)
from .soak import SoakConfig, SoakReport, run_soak

__all__ = ["DEFAULT_FETCH_ERRORS", "DEFAULT_PRODUCE_ERRORS", "DEFAULT_WEIGHTS", "FAULT_NEEDS", "Consumption",
           "Fault", "FaultControl", "FaultEvent", "FaultProxyControl", "FaultRunner", "GroupMembers",
           "KafkaClusterControl", "Ledger", "LogImage", "MemberControl", "ProxyControl", "ResourceSnapshot",
           "ScheduleSpec", "SoakConfig", "SoakReport", "Step", "decode_payload", "encode_payload", "generate_schedule",
           "judge", "leaked_fds", "run_soak", "tcp_sockets", "timeline", "unsupported_faults"]
