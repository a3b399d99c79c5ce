"""akresil's OTLP encoder (protocol/otlp.py) read back by OpenTelemetry's own generated classes."""

from __future__ import annotations

import pytest

metrics_pb2 = pytest.importorskip("opentelemetry.proto.metrics.v1.metrics_pb2")

from akresil.protocol.otlp import HistogramPoint, Metric, NumberPoint, encode_metrics_data


def attributes(kvs: object) -> dict[str, object]:
    out = {}
    for kv in kvs:  # type: ignore[attr-defined]
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which)
    return out


def test_gauges_sums_and_histograms_decode_as_written() -> None:
    data = encode_metrics_data([
        Metric("akresil.connections", "Open connections", "{connection}", "gauge",
               [NumberPoint((), 0, 2_000, 3.0), NumberPoint((("node_id", "1"),), 0, 2_000, 0.0)]),
        Metric("akresil.producer.records_sent", "Records acknowledged", "{record}", "sum",
               [NumberPoint((("topic", "orders"),), 1_000, 2_000, 42.0)], monotonic=True, delta=True),
        Metric("akresil.request.duration", "", "s", "histogram",
               [HistogramPoint((("api", "Produce"), ("node_id", "1")), 1_000, 2_000, 5, 0.25, [1, 3, 1], [0.01, 0.1])]),
        Metric("cumulative", "", "", "sum", [NumberPoint((), 5, 6, 7.5)], monotonic=False, delta=False),
    ], resource=(("group_id", "billing"), ("flag", True), ("n", -3), ("ratio", 0.5)), scope_name="akresil",
        scope_version="1.2.3")
    decoded = metrics_pb2.MetricsData.FromString(data)
    [resource_metrics] = decoded.resource_metrics
    assert attributes(resource_metrics.resource.attributes) == {"group_id": "billing", "flag": True, "n": -3,
                                                                "ratio": 0.5}
    [scope] = resource_metrics.scope_metrics
    assert (scope.scope.name, scope.scope.version) == ("akresil", "1.2.3")
    gauge, counter, histogram, cumulative = scope.metrics
    assert (gauge.name, gauge.description, gauge.unit, gauge.WhichOneof("data")) == (
        "akresil.connections", "Open connections", "{connection}", "gauge")
    assert [(attributes(p.attributes), p.as_double, p.time_unix_nano) for p in gauge.gauge.data_points] == [
        ({}, 3.0, 2_000), ({"node_id": "1"}, 0.0, 2_000)]
    assert gauge.gauge.data_points[1].WhichOneof("value") == "as_double"      # a 0 reading is still a reading
    assert counter.sum.is_monotonic and counter.sum.aggregation_temporality == 1      # DELTA
    [point] = counter.sum.data_points
    assert (point.start_time_unix_nano, point.time_unix_nano, point.as_double) == (1_000, 2_000, 42.0)
    assert attributes(point.attributes) == {"topic": "orders"}
    assert histogram.histogram.aggregation_temporality == 2                           # CUMULATIVE
    [h] = histogram.histogram.data_points
    assert (h.count, h.sum, list(h.bucket_counts), list(h.explicit_bounds)) == (5, 0.25, [1, 3, 1], [0.01, 0.1])
    assert h.HasField("sum") and attributes(h.attributes) == {"api": "Produce", "node_id": "1"}
    assert not cumulative.sum.is_monotonic and cumulative.sum.aggregation_temporality == 2


def test_a_histogram_needs_one_more_count_than_bounds() -> None:
    with pytest.raises(ValueError, match="2 bucket counts for 2 bounds"):
        encode_metrics_data([Metric("h", "", "", "histogram", [HistogramPoint((), 0, 0, 1, 1.0, [0, 1], [1.0, 2.0])])])
