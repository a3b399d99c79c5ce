"""The failure scenarios as data: load, fault script and the metrics each one reports.

``build(name, quick=..., seed=...)`` returns a ``Scenario`` whose fault script is fixed by the seed, so every
client in a run (and every run with that seed) meets the same faults at the same offsets.  ``summarize``
turns what one client's phase produced (its ``DeliveryLog`` and the proxy's recordings) into the summary
metrics; it is pure, so the definitions below are unit-tested on hand-made timelines.  On librdkafka's mock
cluster ``mock_scenarios.summarize_mock`` reuses every definition that needs only the delivery log and the
times of requests to a node.

Metric definitions (times on the proxy's monotonic clock):

* throughput: records acknowledged per second; latency: hand-over to acknowledgement of each record.
* latency from schedule (``schedule_metrics``, every failure scenario): acknowledgement minus the record's
  scheduled time, over every record *scheduled* in a span, a failed or never completed record counting as
  ``inf`` (a stall can never score well): overall, before the first fault, on the live partitions (those the
  faulty node does not lead) in the fault windows, and the seconds after the fault until the per-second p99
  stays within ``BASELINE_FACTOR`` of the pre-fault p99.
* move → first success: for each leader move and each moved partition, from the client's first Produce
  naming that partition after the move to the new leader's first error-free answer for it.
* requests in throttle windows: requests the proxy read on a connection strictly after it wrote a throttled
  response there and before that response's ``throttle_time_ms`` ran out (from its write); of those, the ones
  read within ``IN_FLIGHT_MS`` of the write are also counted apart: the client may have sent them before the
  response could reach it.
* connection attempts while down: TCP connects to a stopped node (the proxy's listener accepts and resets
  them, recording each as "refused").
* recovery: from the end of a fault to the first record acknowledged on a partition the faulty node leads.
"""

from __future__ import annotations

import random
import bisect
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Sequence

from ..protocol.api import ApiKey
from ..testing.recorder import ConnectionEvent, RecordedRequest, RecordedResponse
from . import stats
from .clients import DEFAULT_LOAD, Settings, check_load
from .script import FaultScript, FaultStep

PRODUCE = int(ApiKey.PRODUCE)
METADATA = int(ApiKey.METADATA)
NOT_LEADER_OR_FOLLOWER = 6
NOT_ENOUGH_REPLICAS = 19
#: a request read this soon after a throttled response was written may have left the client before the
#: response arrived (loopback, a loaded machine): reported apart, not excused
IN_FLIGHT_MS = 5.0
FAILURE_SCENARIOS = ("leader-move", "throttle", "broker-bounce", "retry-storm")
SCENARIOS = ("steady", *FAILURE_SCENARIOS)


@dataclass(frozen=True)
class Scenario:
    """One failure scenario: offered load, client settings and the fault script."""

    name: str
    script: FaultScript
    rate: int                      # records offered per second, over all producers
    value_size: int = 100
    partitions: int = 6
    nodes: int = 3
    producers: int = 1
    settings: Settings = Settings()
    #: after the load stops: how long to wait for outstanding records before counting them unfinished
    drain_s: float = 10.0
    params: dict[str, Any] = field(default_factory=dict)
    #: the idiom the load uses (``clients.LOADS``)
    load: str = DEFAULT_LOAD
    #: ``gc.freeze()`` after every client's warm-up (what a long-running service does after start-up): full
    #: collections then skip the heap that existed before the load, and scan only what the load keeps alive
    gc_freeze: bool = False

    @property
    def duration_s(self) -> float:
        return self.script.duration_s

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "load": self.load, "gc_freeze": self.gc_freeze, "rate": self.rate,
                "value_size": self.value_size, "partitions": self.partitions, "nodes": self.nodes, "producers": self.producers,
                "settings": {"linger_ms": self.settings.linger_ms,
                             "delivery_timeout_ms": self.settings.delivery_timeout_ms,
                             "request_timeout_ms": self.settings.request_timeout_ms,
                             "acks": self.settings.acks},
                "drain_s": self.drain_s, "params": self.params, "script": self.script.as_dict()}


@dataclass(frozen=True)
class SteadyConfig:
    """``steady``: produce then consume ``records`` records of each size as fast as each client can."""

    records: int
    sizes: tuple[int, ...] = (100, 1024)
    partitions: int = 6
    nodes: int = 3

    def as_dict(self) -> dict[str, Any]:
        return {"name": "steady", "records": self.records, "sizes": list(self.sizes),
                "partitions": self.partitions, "nodes": self.nodes}


def steady_config(*, quick: bool) -> SteadyConfig:
    return SteadyConfig(records=100_000 if quick else 300_000)


def build(name: str, *, quick: bool, seed: int, load: str = DEFAULT_LOAD, gc_freeze: bool = False) -> Scenario:
    """The scenario ``name`` with its fault script fixed by ``seed``, its load offered in the idiom ``load``."""
    rng = random.Random(f"{name}:{seed}")
    if name == "leader-move":
        sc = _leader_move(quick, rng)
    elif name == "throttle":
        sc = _throttle(quick)
    elif name == "broker-bounce":
        sc = _broker_bounce(quick, rng)
    elif name == "retry-storm":
        sc = _retry_storm(quick, rng)
    else:
        raise ValueError(f"scenario: unknown {name!r} (known: {', '.join(SCENARIOS)})")
    return replace(sc, load=check_load(load), gc_freeze=gc_freeze)


def _leader_move(quick: bool, rng: random.Random) -> Scenario:
    duration, period, rate = (8.0, 2.0, 2000) if quick else (40.0, 4.0, 5000)
    steps = []
    at = period
    while at <= duration - 1.0:
        # a little seeded jitter so moves do not line up with the 1 s buckets of the series
        steps.append(FaultStep(round(at + rng.uniform(-0.1, 0.1) * period, 3), "move_all_leaders",
                               label="leader move"))
        at += period
    return Scenario("leader-move", FaultScript(duration, tuple(steps)), rate=rate,
                    params={"move_every_s": period})


def _throttle(quick: bool) -> Scenario:
    duration, period, ms, rate = (7.0, 1.5, 500, 2000) if quick else (30.0, 2.0, 800, 5000)
    steps = []
    at = 1.0
    while at + ms / 1000 <= duration - 0.5:
        steps.append(FaultStep(at, "throttle_all_nodes", {"ms": ms}, window_s=ms / 1000, label="throttle"))
        at += period
    return Scenario("throttle", FaultScript(duration, tuple(steps)), rate=rate,
                    params={"throttle_ms": ms, "throttle_every_s": period})


def _broker_bounce(quick: bool, rng: random.Random) -> Scenario:
    # the node stays down longer than the delivery timeout, so records routed to it can expire (KIP-91)
    duration, at, down, delivery, request, rate = ((10.0, 2.0, 4.0, 2500, 1500, 2000) if quick
                                                    else (40.0, 5.0, 15.0, 10_000, 5000, 5000))
    node = rng.choice((1, 2, 3))
    steps = (FaultStep(at, "stop_node", {"node": node}, window_s=down, label=f"node {node} down"),
             FaultStep(at + down, "start_node", {"node": node}))
    return Scenario("broker-bounce", FaultScript(duration, steps), rate=rate,
                    settings=Settings(delivery_timeout_ms=delivery, request_timeout_ms=request),
                    drain_s=delivery / 1000 + 3.0, params={"node": node, "down_s": down})


def _retry_storm(quick: bool, rng: random.Random) -> Scenario:
    duration, at, window, producers, rate = (8.0, 2.0, 4.0, 4, 2000) if quick else (30.0, 5.0, 15.0, 8, 5000)
    node = rng.choice((1, 2, 3))
    steps = (FaultStep(at, "fail_produce", {"node": node, "error_code": NOT_ENOUGH_REPLICAS}, window_s=window,
                       label=f"node {node} failing"),
             FaultStep(at + window, "clear"))
    return Scenario("retry-storm", FaultScript(duration, steps), rate=rate, producers=producers,
                    params={"node": node, "error_code": NOT_ENOUGH_REPLICAS, "failing_s": window})


# ---------------------------------------------------------------------------------------------- metrics
@dataclass
class AppliedStep:
    """A script step as the runner applied it: when, and what it did (moved partitions and their leaders).

    ``at_s`` is when the step took effect as the runner defines it (a move once Metadata reports every new
    leader, a restarted broker once it serves); ``began_s`` is when the runner started applying it (default:
    ``at_s``). On Apache Kafka a move's reassignment and election take 0.3-1.2 s, and the clients meet the move
    from its start: ``fault_windows`` opens a fault at the earlier of the two, so no record scheduled while a
    step was being applied counts as "before the fault"."""

    step: FaultStep
    at_s: float
    moved: list[tuple[tuple[str, int], int]] = field(default_factory=list)
    began_s: float | None = None

    def __post_init__(self) -> None:
        if self.began_s is None:
            self.began_s = self.at_s

    @property
    def from_s(self) -> float:
        """From when the step could affect the clients: the earlier of ``began_s`` and ``at_s``."""
        return self.at_s if self.began_s is None else min(self.began_s, self.at_s)


class PhaseRecord(Protocol):
    """What every harness's phase leaves behind besides its broker-side recordings: the metrics computed from
    these alone (delivery, latency, recovery) mean the same on the proxy and on librdkafka's mock."""

    scenario: Scenario
    client: str
    start_s: float
    log: stats.DeliveryLog
    applied: list[AppliedStep]
    leaders: dict[int, int]


@dataclass
class PhaseData:
    """Everything one client's phase left behind; ``summarize`` reads only this."""

    scenario: Scenario
    client: str
    start_s: float
    log: stats.DeliveryLog
    requests: Sequence[RecordedRequest]
    responses: Sequence[RecordedResponse]
    connections: Sequence[ConnectionEvent]
    applied: list[AppliedStep]
    #: partition -> leader node when the load started
    leaders: dict[int, int]


def delivery_summary(log: stats.DeliveryLog, start: float, duration_s: float) -> dict[str, Any]:
    """The metrics of the client's own delivery log: outcomes, throughput, latency."""
    acked = log.acked()
    errors = log.error_counts()
    lat = stats.latency_summary([d - s for s, d, _ in acked])
    return {
        "records_offered": len(log),
        "records_acked": len(acked),
        "failed_timeout": errors[stats.TIMEOUT],
        "failed_other": errors[stats.OTHER],
        "unfinished": errors[stats.UNFINISHED],
        "throughput_msg_per_s": round(sum(1 for _, d, _ in acked if d < start + duration_s) / duration_s, 1),
        "latency": lat.as_dict(),
    }


def summarize(data: PhaseData) -> tuple[dict[str, Any], dict[str, Any]]:
    """(summary metrics, per-second series) of one client's phase."""
    sc = data.scenario
    start, end = data.start_s, data.start_s + sc.duration_s
    log = data.log
    in_run = [r for r in data.requests if start <= r.time_ms / 1000 < end]
    opened = [c for c in data.connections if c.kind == "open" and start <= c.time_ms / 1000 < end]
    closed_by_client = [c for c in data.connections if c.kind == "close" and c.reason.startswith("client")
                        and start <= c.time_ms / 1000 < end]
    summary = delivery_summary(log, start, sc.duration_s)
    summary.update({
        "metadata_requests": sum(1 for r in in_run if r.api_key == METADATA),
        "produce_requests": sum(1 for r in in_run if r.api_key == PRODUCE),
        "connections_opened": len(opened),
        "connections_closed_by_client": len(closed_by_client),
    })
    series: dict[str, Any] = dict(stats.delivery_series(log, start, sc.duration_s))
    series["produce_requests_per_s"] = stats.rate_series(
        (r.time_ms / 1000 for r in data.requests if r.api_key == PRODUCE), start, sc.duration_s)
    summary.update(_EXTRA[sc.name](data, start, end, series))
    summary.update(schedule_metrics(data, start, end, series))
    return summary, series


def _leader_move_metrics(data: PhaseData, start: float, end: float, series: dict[str, Any]) -> dict[str, Any]:
    ok = [(r.time_ms / 1000, r.node_id, tp) for r in data.responses if r.api_key == PRODUCE
          for tp, code in r.partition_errors.items() if code == 0]
    tried = [(r.time_ms / 1000, tp) for r in data.requests if r.api_key == PRODUCE for tp in r.partitions]
    delays: list[float] = []
    missing = 0
    moves = [a for a in data.applied if a.step.action == "move_all_leaders"]
    for i, move in enumerate(moves):
        until = moves[i + 1].at_s if i + 1 < len(moves) else end
        for tp, node in move.moved:
            # from the client's first attempt at the partition after the move, so the partitioner's idle
            # time on that partition does not count
            first_try = stats.first_after((t for t, p in tried if p == tp and t < until), move.at_s)
            if first_try is None:
                continue
            delay = stats.first_after((t for t, n, p in ok if n == node and p == tp and t < until),
                                      move.at_s + first_try)
            if delay is None:
                missing += 1
            else:
                delays.append(delay)
    refused = [r.time_ms / 1000 for r in data.responses
               if r.api_key == PRODUCE and NOT_LEADER_OR_FOLLOWER in r.partition_errors.values()]
    series["metadata_requests_per_s"] = stats.rate_series(
        (r.time_ms / 1000 for r in data.requests if r.api_key == METADATA), start, end - start)
    return {"moves": len(moves), "move_to_first_success": stats.summary_of(delays),
            "moved_partitions_without_success": missing,
            "not_leader_responses": sum(1 for t in refused if start <= t < end)}


def throttle_arrivals(requests: Sequence[RecordedRequest], responses: Sequence[RecordedResponse]
                      ) -> list[tuple[float, float]]:
    """(arrival s, ms since the notice) of every request read on a connection while a throttle the proxy
    wrote there was still running: strictly after the first throttled response of a mute (the notice) and
    before the latest end that mute's responses announced (write time + ``throttle_time_ms``)."""
    mutes: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for r in sorted((r for r in responses if r.throttle_time_ms > 0), key=lambda r: r.time_ms):
        periods = mutes.setdefault((r.node_id, r.connection_id), [])
        end = r.time_ms + r.throttle_time_ms
        if periods and r.time_ms < periods[-1][1]:
            periods[-1] = (periods[-1][0], max(periods[-1][1], end))
        else:
            periods.append((r.time_ms, end))
    starts = {conn: [p[0] for p in periods] for conn, periods in mutes.items()}
    out: list[tuple[float, float]] = []
    for q in requests:
        conn = (q.node_id, q.connection_id)
        muted = mutes.get(conn)
        if not muted:
            continue
        i = bisect.bisect_left(starts[conn], q.time_ms) - 1   # the last notice strictly before the arrival
        if i >= 0 and q.time_ms < muted[i][1]:
            out.append((q.time_ms / 1000, q.time_ms - muted[i][0]))
    return out


def _throttle_metrics(data: PhaseData, start: float, end: float, series: dict[str, Any]) -> dict[str, Any]:
    inside = [(t, since) for t, since in throttle_arrivals(data.requests, data.responses) if start <= t < end]
    series["requests_in_throttle_window_per_s"] = stats.rate_series((t for t, _ in inside), start, end - start)
    windows = [a for a in data.applied if a.step.action == "throttle_all_nodes"]
    return {"throttle_windows": len(windows),
            "requests_in_throttle_windows": len(inside),
            "requests_in_throttle_windows_within_5ms": sum(1 for _, since in inside if since <= IN_FLIGHT_MS),
            "throttled_responses": sum(1 for r in data.responses
                                       if r.throttle_time_ms > 0 and start <= r.time_ms / 1000 < end)}


#: "back to baseline": the per-second p99 after the fault stays within this factor of the pre-fault p99
BASELINE_FACTOR = 1.5
#: the script steps that open a fault window, and the steps that may end it earlier than its nominal length
_WINDOW_ENDS = {"stop_node": "start_node", "fail_produce": "clear", "throttle_all_nodes": None}


def fault_windows(data: PhaseRecord, end: float) -> list[tuple[float, float]]:
    """The spans (monotonic s) in which the phase's faults were in force: each windowed step from where its
    application began (``AppliedStep.from_s``) to where its closing step was applied (or its nominal end);
    leader moves are instants, so from where the first move began to the end of the run."""
    applied = sorted(data.applied, key=lambda a: a.from_s)
    moves = [a.from_s for a in applied if a.step.action == "move_all_leaders"]
    if moves:
        return [(moves[0], end)]
    out = []
    for i, a in enumerate(applied):
        if a.step.action not in _WINDOW_ENDS:
            continue
        closer = _WINDOW_ENDS[a.step.action]
        closed = [b.at_s for b in applied[i + 1:] if b.step.action == closer]
        out.append((a.from_s, min(closed[0] if closed else end, end) if closer else a.from_s + a.step.window_s))
    return out


def live_partitions(data: PhaseRecord) -> set[int]:
    """Partitions the scenario's faulty node did not lead when the load started (all, with no faulty node)."""
    node = data.scenario.params.get("node")
    return {p for p, n in data.leaders.items() if node is None or n != int(node)}


def schedule_metrics(data: PhaseRecord, start: float, end: float, series: dict[str, Any]) -> dict[str, Any]:
    """Latency from each record's scheduled time, over every record *scheduled* in a span (see
    ``DeliveryLog.scheduled_latencies``: a failed or never completed record is ``inf``), the same on every
    harness: overall, before the first fault (the baseline), on the live partitions while a fault is in force,
    and how long after the last fault ends the per-second p99 takes to stay within ``BASELINE_FACTOR`` of the
    baseline."""
    log = data.log
    windows = fault_windows(data, end)
    series["sched_p99_ms"] = stats.scheduled_p99_series(log, start, end - start)
    out: dict[str, Any] = {"sched_latency": stats.scheduled_summary(log.scheduled_latencies(start, end))}
    if not windows:
        raise ValueError(f"phase of {data.client}: no fault step of {data.scenario.name!r} was applied")
    first, last = windows[0][0], max(e for _, e in windows)
    before = stats.scheduled_summary(log.scheduled_latencies(start, first))
    live = live_partitions(data)
    series["sched_p99_live_ms"] = stats.scheduled_p99_series(log, start, end - start, partitions=live)
    during = [x for a, b in windows for x in log.scheduled_latencies(a, b, live)]
    live_summary = stats.scheduled_summary(during)
    after = stats.scheduled_p99_series(log, last, max(end - last, 1e-9)) if last < end else []
    out.update({
        "sched_before_fault": before,
        "sched_live_during_fault": live_summary,
        "live_p99_during_fault_vs_before": stats.ratio(live_summary["p99_ms"], before["p99_ms"]),
        "back_to_baseline_s": stats.back_to_baseline_s(after, before["p99_ms"], BASELINE_FACTOR),
    })
    return out


def fault_node(data: PhaseRecord) -> int:
    return int(data.scenario.params["node"])


def _recovery(data: PhaseRecord, node: int, fault_end: float) -> float | None:
    """From ``fault_end`` to the first record acknowledged on a partition ``node`` led."""
    led = {p for p, n in data.leaders.items() if n == node}
    return stats.first_after((d for _, d, p in data.log.acked() if p in led), fault_end)


def _window(data: PhaseRecord, action: str) -> tuple[float, float]:
    for a in data.applied:
        if a.step.action == action:
            return a.at_s, a.at_s + a.step.window_s
    raise ValueError(f"phase of {data.client}: the script step {action!r} was never applied")


def _bounce_metrics(data: PhaseData, start: float, end: float, series: dict[str, Any]) -> dict[str, Any]:
    node = fault_node(data)
    attempts = [c.time_ms / 1000 for c in data.connections
                if c.kind == "refused" and c.node_id == node and c.reason == "node stopped"]
    to_node = [r.time_ms / 1000 for r in data.requests if r.api_key == PRODUCE and r.node_id == node]
    return bounce_metrics(data, start, end, series, to_node=to_node, attempts=attempts)


def bounce_metrics(data: PhaseRecord, start: float, end: float, series: dict[str, Any], *,
                   to_node: Sequence[float], attempts: Sequence[float] | None) -> dict[str, Any]:
    """``broker-bounce`` from the times of the Produce requests the stopped node read and of the connection
    attempts it refused (``None``: the harness cannot see them, the metrics stay ``None``)."""
    node = fault_node(data)
    down_at, up_at = _window(data, "stop_node")
    restarted = [a.at_s for a in data.applied if a.step.action == "start_node"]
    up_at = restarted[0] if restarted else up_at
    if attempts is not None:
        series["connect_attempts_per_s"] = stats.rate_series(attempts, start, end - start)
    series["produce_requests_to_node_per_s"] = stats.rate_series(to_node, start, end - start)
    after = [t for t in to_node if up_at <= t < min(end, up_at + 1.0)]
    recovery = _recovery(data, node, up_at)
    down_s = max(up_at - down_at, 1e-9)
    # the bound every client was given (aiokafka: its request timeout, see clients.settings_for); a record
    # acknowledged later than it broke the promise, a record failed at it kept it
    bound = data.scenario.settings.delivery_timeout_ms
    acked = data.log.acked()
    late = sum(1 for s, d, _ in acked if bound is not None and (d - s) * 1000 > bound)
    return {"node": node, "down_s": round(up_at - down_at, 3),
            "connect_attempts_while_down": None if attempts is None else len(attempts),
            "connect_attempts_per_s_while_down": None if attempts is None else round(len(attempts) / down_s, 2),
            "produce_requests_first_s_after_return": len(after),
            "recovery_ms": None if recovery is None else round(recovery * 1000, 1),
            "acked_beyond_delivery_timeout": late}


def _storm_metrics(data: PhaseData, start: float, end: float, series: dict[str, Any]) -> dict[str, Any]:
    node = fault_node(data)
    to_node = [r.time_ms / 1000 for r in data.requests if r.api_key == PRODUCE and r.node_id == node]
    return storm_metrics(data, start, end, series, to_node=to_node)


def storm_metrics(data: PhaseRecord, start: float, end: float, series: dict[str, Any], *,
                  to_node: Sequence[float]) -> dict[str, Any]:
    """``retry-storm`` from the times of the Produce requests the failing node read."""
    node = fault_node(data)
    fail_at, fail_end = _window(data, "fail_produce")
    cleared = [a.at_s for a in data.applied if a.step.action == "clear"]
    fail_end = cleared[0] if cleared else fail_end
    per_s = stats.rate_series(to_node, start, end - start)
    series["produce_requests_to_node_per_s"] = per_s
    during = stats.count_between(to_node, fail_at, fail_end)
    span = max(fail_end - fail_at, 1e-9)
    recovery = _recovery(data, node, fail_end)
    return {"node": node, "failing_s": round(span, 3), "producers": data.scenario.producers,
            "requests_to_failing_node": during,
            "requests_per_s_to_failing_node": round(during / span, 1),
            "requests_per_s_per_producer": round(during / span / data.scenario.producers, 2),
            # only requests inside the window: its last bucket may run past the end into the recovery burst
            "peak_requests_per_s_to_node": max(stats.rate_series(
                (t for t in to_node if fail_at <= t < fail_end), fail_at, span)),
            "recovery_ms": None if recovery is None else round(recovery * 1000, 1)}


_EXTRA = {"leader-move": _leader_move_metrics, "throttle": _throttle_metrics,
          "broker-bounce": _bounce_metrics, "retry-storm": _storm_metrics}

def _fault_rows(during: str, after: str) -> list[tuple[str, str, str]]:
    """The headline rows of ``schedule_metrics`` for a scenario whose fault has a window."""
    return [(f"p99 ms from schedule, {during}", "sched_live_during_fault.p99_ms", "lower"),
            (f"p99.9 ms from schedule, {during}", "sched_live_during_fault.p999_ms", "lower"),
            (f"max ms from schedule, {during}", "sched_live_during_fault.max_ms", "lower"),
            ("p99 ms from schedule before the fault", "sched_before_fault.p99_ms", "lower"),
            (f"… during / before (target ≤ {BASELINE_FACTOR})", "live_p99_during_fault_vs_before", "lower"),
            (f"s until p99 stays ≤ {BASELINE_FACTOR}× before, {after}", "back_to_baseline_s", "lower")]


#: the headline metrics of each scenario: (label, path in the summary, which direction is better)
HEADLINES: dict[str, list[tuple[str, str, str]]] = {
    "steady": [("produce msg/s, 100 B", "100B.produce_msg_per_s", "higher"),
               ("produce msg/s, 1 KiB", "1024B.produce_msg_per_s", "higher"),
               ("consume msg/s, 100 B", "100B.consume_msg_per_s", "higher"),
               ("consume msg/s, 1 KiB", "1024B.consume_msg_per_s", "higher")],
    "leader-move": [("p99 ms from schedule", "sched_latency.p99_ms", "lower"),
                    ("p99.9 ms from schedule", "sched_latency.p999_ms", "lower"),
                    ("max ms from schedule", "sched_latency.max_ms", "lower"),
                    ("p99 ms from schedule before the first move", "sched_before_fault.p99_ms", "lower"),
                    ("median move → first success ms", "move_to_first_success.median_ms", "lower"),
                    ("Metadata requests", "metadata_requests", "lower"),
                    ("throughput msg/s", "throughput_msg_per_s", "higher")],
    "throttle": [("requests inside throttle windows", "requests_in_throttle_windows", "lower"),
                 ("… of them within 5 ms of the throttled response", "requests_in_throttle_windows_within_5ms",
                  "lower"),
                 *_fault_rows("inside the windows", "after the last window"),
                 ("throughput msg/s", "throughput_msg_per_s", "higher"),
                 ("connections opened", "connections_opened", "lower")],
    "broker-bounce": [*_fault_rows("live partitions, node down", "after it returns"),
                      ("records acked later than the delivery timeout", "acked_beyond_delivery_timeout", "lower"),
                      ("records failed by delivery timeout (expected: the down node's, past the bound)",
                       "failed_timeout", "—"),
                      ("connect attempts/s while down", "connect_attempts_per_s_while_down", "lower"),
                      ("recovery ms", "recovery_ms", "lower")],
    "retry-storm": [("requests/s to failing node", "requests_per_s_to_failing_node", "lower"),
                    ("peak requests/s to failing node", "peak_requests_per_s_to_node", "lower"),
                    *_fault_rows("live partitions, node failing", "after it clears"),
                    ("recovery ms", "recovery_ms", "lower"),
                    ("p99 ms from schedule, all", "sched_latency.p99_ms", "lower")],
}
