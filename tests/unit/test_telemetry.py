"""KIP-714's sans-IO part: the subscription state machine (Java's ClientTelemetryReporter life-cycle, error codes
and first-push jitter) driven by plain calls with times passed in, and the series kept for pushes (deltas that add
up across pushes, totals, the subscription's name prefixes)."""

from __future__ import annotations

from typing import Any

import pytest

from akresil import Producer, errors
from akresil.core.series import LATENCY_BUCKETS
from akresil.core.telemetry import (DEFAULT_PUSH_INTERVAL_MS, ZERO_UUID, Phase, Subscription, TelemetryMetrics,
                                    TelemetryState)
from akresil.protocol.otlp import HistogramPoint, NumberPoint
from akresil.protocol.records import codec_available, compress

INSTANCE = bytes(range(1, 17))


class Jitter:
    """A random source that records the range it is asked for and answers ``pick`` of the way into it."""

    def __init__(self, pick: float = 0.5) -> None:
        self.pick = pick
        self.asked: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.asked.append((a, b))
        return a + (b - a) * self.pick


def answer(**changes: Any) -> dict[str, Any]:
    response = {"error_code": 0, "client_instance_id": INSTANCE, "subscription_id": 7,
                "accepted_compression_types": [4, 3, 1, 2], "push_interval_ms": 1_000,
                "telemetry_max_bytes": 1_048_576, "delta_temporality": True,
                "requested_metrics": ["akresil.producer."]}
    response.update(changes)
    return response


def subscribed(now: float = 0.0, rng: Jitter | None = None, **changes: Any) -> TelemetryState:
    state = TelemetryState(rng or Jitter())
    assert state.start_get() == ZERO_UUID           # the broker assigns the instance id on the first request
    state.on_subscription(answer(**changes), now)
    return state


def test_the_first_push_is_jittered_then_pushes_follow_the_interval() -> None:
    state = TelemetryState(Jitter())
    assert state.due_at() == float("-inf")          # the first request goes at once
    rng = Jitter(pick=1.0)
    state = subscribed(now=10_000, rng=rng)
    assert rng.asked == [(0.5, 1.5)] and state.phase is Phase.PUSH_NEEDED
    assert state.due_at() == 10_000 + 1_500          # 1.5 x the interval at most, 0.5 x at least
    subscription, terminating = state.start_push()
    assert not terminating and subscription.subscription_id == 7 and state.due_at() is None   # one at a time
    state.on_push(0, 12_000)
    assert state.phase is Phase.PUSH_NEEDED and state.due_at() == 13_000


def test_a_subscription_without_metrics_asks_again_after_the_interval_with_its_instance_id() -> None:
    state = subscribed(now=0, requested_metrics=[])
    assert state.phase is Phase.SUBSCRIPTION_NEEDED and state.due_at() == 1_000
    assert state.start_get() == INSTANCE
    state.on_subscription(answer(push_interval_ms=0), 1_000)      # no usable interval: Java's default
    assert state.subscription is not None and state.subscription.push_interval_ms == DEFAULT_PUSH_INTERVAL_MS


@pytest.mark.parametrize("error, due", [
    (errors.UnknownSubscriptionIdError.errno, 5_000),             # ask for the new subscription at once
    (errors.UnsupportedCompressionTypeError.errno, 5_000),
    (errors.TelemetryTooLargeError.errno, 6_000),                # wait out the push interval
    (errors.ThrottlingQuotaExceededError.errno, 6_000),
    (errors.InvalidRecordError.errno, None),                      # telemetry stops for good
    (errors.InvalidRequestError.errno, None),
    (errors.UnsupportedVersionError.errno, None),
    (errors.UnknownServerError.errno, None),                      # an error Java does not map: stops too
])
def test_push_errors_are_handled_as_the_java_client_handles_them(error: int, due: float | None) -> None:
    state = subscribed()
    state.start_push()
    state.on_push(error, 5_000)
    assert state.due_at() == due
    assert state.enabled is (due is not None)
    if due is not None:
        assert state.phase is Phase.SUBSCRIPTION_NEEDED


def test_no_answer_means_another_subscription_request_after_the_retry_wait() -> None:
    state = subscribed()
    state.start_push()
    state.on_failure(2_000, 300)
    assert state.phase is Phase.SUBSCRIPTION_NEEDED and state.due_at() == 2_300 and state.enabled


def test_a_broker_without_an_instance_id_stops_telemetry() -> None:
    state = TelemetryState(Jitter())
    state.start_get()
    state.on_subscription(answer(client_instance_id=ZERO_UUID), 0)
    assert not state.enabled and state.due_at() is None


def test_close_sends_a_terminating_push_only_while_pushing() -> None:
    state = subscribed()
    assert state.begin_close()
    subscription, terminating = state.start_push()
    assert terminating and state.due_at() is None
    state.on_push(0, 1)
    assert state.phase is Phase.TERMINATED and state.due_at() is None
    never = TelemetryState(Jitter())                 # no subscription yet: nothing to end
    assert not never.begin_close() and never.phase is Phase.TERMINATED
    nothing_subscribed = subscribed(requested_metrics=[])
    assert not nothing_subscribed.begin_close()
    late = TelemetryState(Jitter())                  # an answer that comes after close began is ignored
    late.start_get()
    assert not late.begin_close()
    late.on_subscription(answer(), 5)
    assert late.phase is Phase.TERMINATED and late.subscription is None


def test_prefixes_select_metric_names() -> None:
    def selects(requested: list[str], name: str) -> bool:
        return Subscription.from_response(answer(requested_metrics=requested)).selects(name)
    assert selects(["akresil.producer."], "akresil.producer.records_sent")
    assert not selects(["akresil.producer."], "akresil.consumer.lag")
    assert selects(["*"], "akresil.consumer.lag") and selects([""], "akresil.consumer.lag")
    assert not selects([], "akresil.consumer.lag")


# ----------------------------------------------------------------------------- the metrics
class WallClock:
    def __init__(self) -> None:
        self.ns = 1_000

    def __call__(self) -> int:
        return self.ns


def metrics_of(wall: WallClock) -> TelemetryMetrics:
    return TelemetryMetrics(client_id="p1", kind="producer", clock=lambda: 0.0, wall_ns=wall)


def sub(delta: bool, *prefixes: str) -> Subscription:
    return Subscription.from_response(answer(delta_temporality=delta, requested_metrics=list(prefixes or ["*"])))


def values(metrics: list[Any], name: str) -> list[tuple[Any, ...]]:
    out = []
    for m in metrics:
        if m.name == name:
            for p in m.points:
                if isinstance(p, HistogramPoint):
                    out.append((dict(p.attributes), p.start_ns, p.count, tuple(p.bucket_counts), p.sum))
                else:
                    assert isinstance(p, NumberPoint)
                    out.append((dict(p.attributes), p.start_ns, p.value))
    return out


def test_deltas_add_up_across_pushes_and_a_failed_push_loses_nothing() -> None:
    wall = WallClock()
    m = metrics_of(wall)
    m.on_batch_completed(topic="t", partition=0, records=3, attempts=1, error=None)
    wall.ns = 2_000
    first, snapshot = m.collect(sub(True), 2_000)
    assert values(first, "akresil.producer.records_sent") == [({"topic": "t"}, 1_000, 3.0)]
    m.pushed(snapshot, 2_000)
    m.on_batch_completed(topic="t", partition=0, records=2, attempts=1, error=None)
    failed, _ = m.collect(sub(True), 3_000)           # this push is refused: its snapshot is never marked
    assert values(failed, "akresil.producer.records_sent") == [({"topic": "t"}, 2_000, 2.0)]
    m.on_batch_completed(topic="t", partition=0, records=4, attempts=1, error=None)
    again, snapshot = m.collect(sub(True), 4_000)
    assert values(again, "akresil.producer.records_sent") == [({"topic": "t"}, 2_000, 6.0)]
    m.pushed(snapshot, 4_000)
    quiet, _ = m.collect(sub(True), 5_000)
    assert values(quiet, "akresil.producer.records_sent") == []       # nothing happened: no point
    totals, _ = m.collect(sub(False), 5_000)                        # cumulative: since the series began
    assert values(totals, "akresil.producer.records_sent") == [({"topic": "t"}, 1_000, 9.0)]
    assert all(m.delta for m in again) and not any(m.delta for m in totals)


def test_histograms_count_into_upper_inclusive_buckets() -> None:
    wall = WallClock()
    m = metrics_of(wall)
    for latency_ms in (0.5, 1.0, 1.5, 100_000.0):
        m.on_response_received(node_id=1, api_key=0, version=11, latency_ms=latency_ms, response={})
    [(attributes, _, count, buckets, total)] = values(m.collect(sub(False), 9)[0], "akresil.request.duration")
    assert attributes == {"node_id": "1", "api": "Produce"} and count == 4
    assert total == pytest.approx((0.5 + 1.0 + 1.5 + 100_000.0) / 1000)
    assert len(buckets) == len(LATENCY_BUCKETS) + 1
    # 0.0005 s and 0.001 s sit on bounds (counted at them), 0.0015 s in (0.001, 0.0025], 100 s above every bound
    assert buckets[0] == 1 and buckets[1] == 1 and buckets[2] == 1 and buckets[-1] == 1


def test_only_subscribed_series_are_collected_and_gauges_are_read_at_collection() -> None:
    m = metrics_of(WallClock())
    m.on_node_state(node_id=1, state="connected")
    m.on_batch_completed(topic="t", partition=0, records=1, attempts=1, error=None)
    m.on_metadata_refresh(causes={}, brokers=1, topics=1, stale_partitions=0, not_ready=0)
    collected, _ = m.collect(sub(True, "akresil.connections", "akresil.producer."), 5)
    assert {metric.name for metric in collected} == {"akresil.connections", "akresil.producer.records_sent"}
    assert values(collected, "akresil.connections") == [({}, 0, 1.0)]
    [gauge] = [metric for metric in collected if metric.name == "akresil.connections"]
    assert gauge.kind == "gauge"
    m.close()                                          # the client closed: its gauges are gone
    assert values(m.collect(sub(True, "akresil.connections"), 6)[0], "akresil.connections") == []


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_payloads_compress_in_kafkas_record_batch_framings(codec: int) -> None:
    from aiokafka import codec as aiokafka_codec
    if not codec_available(codec):
        pytest.skip(f"codec {codec} needs cramjam")
    payload = b"otlp metrics " * 100
    decode = {1: aiokafka_codec.gzip_decode, 2: aiokafka_codec.snappy_decode, 3: aiokafka_codec.lz4_decode,
              4: aiokafka_codec.zstd_decode}[codec]
    assert bytes(decode(compress(codec, payload))) == payload
    assert compress(0, payload) == payload
    with pytest.raises(ValueError, match="compression codec 9"):
        compress(9, payload)


def test_enable_metrics_push_is_a_checked_boolean() -> None:
    with pytest.raises(errors.ConfigError, match="enable_metrics_push"):
        Producer(enable_metrics_push="no")  # type: ignore[arg-type]
