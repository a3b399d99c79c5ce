"""OTLP metrics (OpenTelemetry's ``MetricsData`` v1 protobuf), encoded for KIP-714's PushTelemetry.

Only the messages a client push needs are written: ``MetricsData`` → one ``ResourceMetrics`` → one
``ScopeMetrics`` → ``Metric`` (``Gauge``, ``Sum`` or ``Histogram``) → ``NumberDataPoint`` /
``HistogramDataPoint``, with ``KeyValue`` attributes.  The encoder is written here (a protobuf writer of
varints, fixed64 and length-delimited fields) rather than taken from ``opentelemetry-proto``: that package
brings the ``protobuf`` runtime, whose major versions other libraries pin against each other, into every
application for a feature that is on by default, and the handful of messages (OTLP v1 is stable) are a page
of code.  tests/unit/test_otlp.py decodes the output with ``opentelemetry-proto``; the Apache Kafka tier test
has the broker's own (shaded) classes parse it.  Field numbers are those of
``opentelemetry/proto/metrics/v1/metrics.proto`` and ``common/v1/common.proto``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Literal, Sequence

__all__ = ["NumberPoint", "HistogramPoint", "Metric", "encode_metrics_data", "AttributeValue", "Attributes"]

AttributeValue = str | bool | int | float
Attributes = Sequence[tuple[str, AttributeValue]]

_FIXED64 = struct.Struct("<Q")
_DOUBLE = struct.Struct("<d")

# wire types
_VARINT, _I64, _LEN = 0, 1, 2
#: AggregationTemporality
_DELTA, _CUMULATIVE = 1, 2


@dataclass(frozen=True, slots=True)
class NumberPoint:
    """A gauge reading or a sum (counter) value."""

    attributes: Attributes
    start_ns: int
    time_ns: int
    value: float


@dataclass(frozen=True, slots=True)
class HistogramPoint:
    """Explicit-bucket histogram: ``bucket_counts`` has ``len(bounds) + 1`` entries (the last: above all)."""

    attributes: Attributes
    start_ns: int
    time_ns: int
    count: int
    sum: float
    bucket_counts: Sequence[int]
    bounds: Sequence[float]


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric and its points: ``kind`` gauge, sum (``monotonic`` for counters) or histogram;
    ``delta``: sums and histograms hold the change since the previous push, else totals since ``start_ns``."""

    name: str
    description: str
    unit: str
    kind: Literal["gauge", "sum", "histogram"]
    points: Sequence[NumberPoint] | Sequence[HistogramPoint]
    monotonic: bool = False
    delta: bool = False


# ----------------------------------------------------------------------------- the protobuf writer
def _varint(out: bytearray, value: int) -> None:
    if value < 0:
        value += 1 << 64            # int64: two's complement, ten bytes
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _key(out: bytearray, field: int, wire: int) -> None:
    _varint(out, field << 3 | wire)


def _bytes(out: bytearray, field: int, data: bytes | bytearray) -> None:
    _key(out, field, _LEN)
    _varint(out, len(data))
    out += data


def _string(out: bytearray, field: int, text: str) -> None:
    if text:
        _bytes(out, field, text.encode())


def _fixed64(out: bytearray, field: int, value: int) -> None:
    _key(out, field, _I64)
    out += _FIXED64.pack(value)


def _double(out: bytearray, field: int, value: float) -> None:
    _key(out, field, _I64)
    out += _DOUBLE.pack(value)


def _uint(out: bytearray, field: int, value: int) -> None:
    if value:
        _key(out, field, _VARINT)
        _varint(out, value)


# ----------------------------------------------------------------------------- the messages
def _any_value(value: AttributeValue) -> bytearray:
    out = bytearray()
    if isinstance(value, bool):
        _key(out, 2, _VARINT)
        out.append(1 if value else 0)
    elif isinstance(value, int):
        _key(out, 3, _VARINT)
        _varint(out, value)
    elif isinstance(value, float):
        _double(out, 4, value)
    else:
        _key(out, 1, _LEN)           # a string value, even an empty one (the oneof is set)
        data = str(value).encode()
        _varint(out, len(data))
        out += data
    return out


def _attributes(out: bytearray, field: int, attributes: Attributes) -> None:
    for key, value in attributes:
        kv = bytearray()
        _string(kv, 1, key)
        _bytes(kv, 2, _any_value(value))
        _bytes(out, field, kv)


def _number_point(point: NumberPoint) -> bytearray:
    out = bytearray()
    _fixed64(out, 2, point.start_ns)
    _fixed64(out, 3, point.time_ns)
    _double(out, 4, point.value)                 # as_double: part of a oneof, so written even when 0
    _attributes(out, 7, point.attributes)
    return out


def _histogram_point(point: HistogramPoint) -> bytearray:
    if len(point.bucket_counts) != len(point.bounds) + 1:
        raise ValueError(f"histogram point: {len(point.bucket_counts)} bucket counts for {len(point.bounds)} bounds "
                         "(expected one more count than bounds)")
    out = bytearray()
    _fixed64(out, 2, point.start_ns)
    _fixed64(out, 3, point.time_ns)
    _fixed64(out, 4, point.count)
    _double(out, 5, point.sum)                    # optional double: written to say it is known
    _bytes(out, 6, b"".join(_FIXED64.pack(n) for n in point.bucket_counts))      # packed fixed64
    if point.bounds:
        _bytes(out, 7, b"".join(_DOUBLE.pack(b) for b in point.bounds))        # packed double
    _attributes(out, 9, point.attributes)
    return out


def _metric(metric: Metric) -> bytearray:
    out = bytearray()
    _string(out, 1, metric.name)
    _string(out, 2, metric.description)
    _string(out, 3, metric.unit)
    data = bytearray()
    temporality = _DELTA if metric.delta else _CUMULATIVE
    if metric.kind == "histogram":
        for point in metric.points:
            assert isinstance(point, HistogramPoint)
            _bytes(data, 1, _histogram_point(point))
        _uint(data, 2, temporality)
        _bytes(out, 9, data)
    else:
        for point in metric.points:
            assert isinstance(point, NumberPoint)
            _bytes(data, 1, _number_point(point))
        if metric.kind == "sum":
            _uint(data, 2, temporality)
            _uint(data, 3, 1 if metric.monotonic else 0)
            _bytes(out, 7, data)
        else:
            _bytes(out, 5, data)
    return out


def encode_metrics_data(metrics: Sequence[Metric], *, resource: Attributes = (), scope_name: str = "",
                        scope_version: str = "") -> bytes:
    """``MetricsData`` holding ``metrics`` under one resource and one instrumentation scope."""
    scope = bytearray()
    _string(scope, 1, scope_name)
    _string(scope, 2, scope_version)
    scope_metrics = bytearray()
    _bytes(scope_metrics, 1, scope)
    for metric in metrics:
        _bytes(scope_metrics, 2, _metric(metric))
    resource_message = bytearray()
    _attributes(resource_message, 1, resource)
    resource_metrics = bytearray()
    _bytes(resource_metrics, 1, resource_message)
    _bytes(resource_metrics, 2, scope_metrics)
    out = bytearray()
    _bytes(out, 1, resource_metrics)
    return bytes(out)
