"""The failure scenarios on librdkafka's mock cluster: which of them it can express, and their metrics from
what it records.

The mock logs per request only the broker id, the API key and the arrival time (µs on CLOCK_MONOTONIC, the
``time.monotonic()`` the benchmark runs on): no partitions, no responses, no connection events.  So request
counts and rates per node and API come from that log, everything that needs partitions or outcomes from the
client's own ``DeliveryLog``, and what needs neither source is ``None`` (rendered "–"), never estimated:

* move → first success (``leader-move``): for each leader move and each moved partition, from the moment
  the mock had moved every leader to the client's acknowledgement of the first record handed over for that
  partition afterwards; a moved partition with no such acknowledgement before the next move (or the end)
  counts as without success.  The proxy's figure runs from the first Produce naming the partition to the
  broker's answer; this one also holds the client's linger and the wait for the next record of the round
  robin, so compare clients with each other, not with the proxy's figure.
* not-leader responses, connections opened / closed, connection attempts while a node is down: ``None``.
* recovery, records acked past the delivery timeout, every latency from schedule (overall, before the fault,
  live partitions during it, back to baseline): the same definitions as on the proxy (``scenarios``), from the
  delivery log and the pinned leaders.

``summarize_mock`` is pure, like ``scenarios.summarize``, so these mappings are unit-tested on hand-made logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..testing.rdkafka_mock import MockRequest
from . import stats
from .scenarios import (HEADLINES, METADATA, PRODUCE, AppliedStep, Scenario, bounce_metrics, delivery_summary,
                        fault_node, schedule_metrics, storm_metrics)

#: scenarios left out on the mock, and why (each one line in the output, the table and the JSON)
MOCK_SKIPS: dict[str, str] = {
    "steady": "proxy-only: it measures throughput through FaultProxy in front of Tansu, and the mock keeps only "
              "5 MiB or 100k batches per partition",
    "throttle": "librdkafka's mock cluster cannot throttle (it never sends throttle_time_ms > 0)",
}
#: errors queued per second of a ``retry-storm`` window: far more Produce requests than any client sends to one
#: node, so the fault never runs dry before the script clears it (``summarize_mock`` checks that it did not)
STORM_ERRORS_PER_S = 2000
#: headline labels whose definition differs on the mock (see the module docstring)
_MOCK_LABELS = {"move_to_first_success.median_ms": "median move → first ack ms (client side)"}
MOCK_HEADLINES: dict[str, list[tuple[str, str, str]]] = {
    name: [(_MOCK_LABELS.get(path, label), path, better) for label, path, better in rows]
    for name, rows in HEADLINES.items() if name not in MOCK_SKIPS}


def storm_errors(window_s: float) -> int:
    """How many Produce errors to queue for a failing window of ``window_s``."""
    return math.ceil(window_s * STORM_ERRORS_PER_S)


@dataclass
class MockPhaseData:
    """Everything one client's phase on the mock left behind; ``summarize_mock`` reads only this."""

    scenario: Scenario
    client: str
    start_s: float
    log: stats.DeliveryLog
    requests: Sequence[MockRequest]
    applied: list[AppliedStep]
    #: partition -> leader broker when the load started
    leaders: dict[int, int]


def request_times(requests: Sequence[MockRequest], api_key: int, broker_id: int | None = None) -> list[float]:
    """Arrival times (monotonic seconds) of the requests with ``api_key`` (to ``broker_id``, or any broker)."""
    return [r.timestamp_us / 1e6 for r in requests
            if r.api_key == api_key and (broker_id is None or r.broker_id == broker_id)]


#: a scenario's own metrics: (phase data, start, end, per-second series to add to) -> summary entries
ExtraMetrics = Callable[[MockPhaseData, float, float, dict[str, Any]], dict[str, Any]]


def summarize_phase(data: MockPhaseData, extras: Mapping[str, ExtraMetrics], skips: Mapping[str, str], where: str, *,
                    request_log: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(summary metrics, per-second series) of one client's phase, keyed like the proxy's. ``request_log``: the
    harness saw every request (librdkafka's mock tracks them; a real broker does not), else those figures are
    ``None``; ``extras`` adds the scenario's own metrics, ``skips`` says why a scenario has none on ``where``."""
    sc = data.scenario
    start, end = data.start_s, data.start_s + sc.duration_s
    summary = delivery_summary(data.log, start, sc.duration_s)
    series: dict[str, Any] = dict(stats.delivery_series(data.log, start, sc.duration_s))
    if request_log:
        produce = request_times(data.requests, PRODUCE)
        summary["metadata_requests"] = stats.count_between(request_times(data.requests, METADATA), start, end)
        summary["produce_requests"] = stats.count_between(produce, start, end)
        series["produce_requests_per_s"] = stats.rate_series(produce, start, sc.duration_s)
    else:
        summary["metadata_requests"] = summary["produce_requests"] = None
    summary["connections_opened"] = summary["connections_closed_by_client"] = None
    try:
        extra = extras[sc.name]
    except KeyError:
        raise ValueError(f"scenario {sc.name!r} does not run on {where}: "
                         f"{skips.get(sc.name, 'no metrics for it')}") from None
    summary.update(extra(data, start, end, series))
    summary.update(schedule_metrics(data, start, end, series))
    return summary, series


def summarize_mock(data: MockPhaseData) -> tuple[dict[str, Any], dict[str, Any]]:
    """(summary metrics, per-second series) of one client's phase on the mock, keyed like the proxy's."""
    return summarize_phase(data, _EXTRA, MOCK_SKIPS, "librdkafka's mock cluster", request_log=True)


def _leader_move(data: MockPhaseData, start: float, end: float, series: dict[str, Any]) -> dict[str, Any]:
    acked = data.log.acked()
    delays: list[float] = []
    missing = 0
    moves = [a for a in data.applied if a.step.action == "move_all_leaders"]
    for i, move in enumerate(moves):
        until = moves[i + 1].at_s if i + 1 < len(moves) else end
        for (_, partition), _ in move.moved:
            # records handed over after every leader had moved: the old leader refuses them all, so the first
            # acknowledgement is the new leader's (the log names a record's partition only once it succeeded)
            delay = stats.first_after((d for s, d, p in acked if p == partition and move.at_s <= s and d < until),
                                      move.at_s)
            if delay is None:
                missing += 1
            else:
                delays.append(delay)
    series["metadata_requests_per_s"] = stats.rate_series(request_times(data.requests, METADATA), start,
                                                          end - start)
    return {"moves": len(moves), "move_to_first_success": stats.summary_of(delays),
            "moved_partitions_without_success": missing, "not_leader_responses": None}


def _bounce(data: MockPhaseData, start: float, end: float, series: dict[str, Any]) -> dict[str, Any]:
    to_node = request_times(data.requests, PRODUCE, fault_node(data))
    return bounce_metrics(data, start, end, series, to_node=to_node, attempts=None)


def _storm(data: MockPhaseData, start: float, end: float, series: dict[str, Any]) -> dict[str, Any]:
    to_node = request_times(data.requests, PRODUCE, fault_node(data))
    out = storm_metrics(data, start, end, series, to_node=to_node)
    queued = sum(storm_errors(a.step.window_s) for a in data.applied if a.step.action == "fail_produce")
    if out["requests_to_failing_node"] > queued:
        raise ValueError(f"retry-storm on the mock: {out['requests_to_failing_node']} Produce requests reached "
                         f"node {out['node']} in the window but only {queued} errors were queued; some were "
                         f"answered without the fault (raise STORM_ERRORS_PER_S)")
    return out


_EXTRA: dict[str, ExtraMetrics] = {
    "leader-move": _leader_move, "broker-bounce": _bounce, "retry-storm": _storm}
