// A broker-side KIP-714 client-telemetry receiver for tests (akresil/testing/telemetry_sink.py builds it).
//
// Registered as a metric reporter (`metric.reporters=akresil.testing.TelemetrySink`), it makes the broker accept
// GetTelemetrySubscriptions and PushTelemetry; every push it receives is decoded with the OTLP classes Kafka
// ships (shaded inside kafka-clients) and appended as one JSON line to the file named by the broker config
// `akresil.telemetry.sink.file`: the pushing client's id and instance id, whether the push was terminating, the
// resource and scope, and each metric with its points.  It implements the ClientTelemetry interface every Kafka
// 4.x broker knows (4.2+ deprecate it for ClientTelemetryExporterProvider but still call it).
package akresil.testing;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetry;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.apache.kafka.server.telemetry.ClientTelemetryReceiver;
import org.apache.kafka.shaded.io.opentelemetry.proto.common.v1.AnyValue;
import org.apache.kafka.shaded.io.opentelemetry.proto.common.v1.KeyValue;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.HistogramDataPoint;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.Metric;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.MetricsData;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.ScopeMetrics;

@SuppressWarnings({"deprecation", "removal"})
public class TelemetrySink implements MetricsReporter, ClientTelemetry, ClientTelemetryReceiver {
    public static final String FILE_CONFIG = "akresil.telemetry.sink.file";

    private Path file;

    @Override
    public void configure(Map<String, ?> configs) {
        Object path = configs.get(FILE_CONFIG);
        if (path == null) {
            throw new IllegalArgumentException(FILE_CONFIG + " must name the file pushes are written to");
        }
        file = Path.of(path.toString());
    }

    @Override
    public void init(List<KafkaMetric> metrics) {
    }

    @Override
    public void metricChange(KafkaMetric metric) {
    }

    @Override
    public void metricRemoval(KafkaMetric metric) {
    }

    @Override
    public void close() {
    }

    @Override
    public ClientTelemetryReceiver clientReceiver() {
        return this;
    }

    @Override
    public synchronized void exportMetrics(AuthorizableRequestContext context, ClientTelemetryPayload payload) {
        StringBuilder out = new StringBuilder(4096);
        out.append("{\"client_id\":").append(str(context.clientId()));
        out.append(",\"client_instance_id\":").append(str(payload.clientInstanceId().toString()));
        out.append(",\"terminating\":").append(payload.isTerminating());
        out.append(",\"content_type\":").append(str(payload.contentType()));
        try {
            MetricsData data = MetricsData.parseFrom(payload.data().duplicate());
            out.append(",\"resources\":[");
            String sep = "";
            for (ResourceMetrics resource : data.getResourceMetricsList()) {
                out.append(sep).append("{\"attributes\":");
                attributes(out, resource.getResource().getAttributesList());
                out.append(",\"scopes\":[");
                String scopeSep = "";
                for (ScopeMetrics scope : resource.getScopeMetricsList()) {
                    out.append(scopeSep).append("{\"name\":").append(str(scope.getScope().getName()));
                    out.append(",\"version\":").append(str(scope.getScope().getVersion()));
                    out.append(",\"metrics\":[");
                    String metricSep = "";
                    for (Metric metric : scope.getMetricsList()) {
                        out.append(metricSep);
                        metric(out, metric);
                        metricSep = ",";
                    }
                    out.append("]}");
                    scopeSep = ",";
                }
                out.append("]}");
                sep = ",";
            }
            out.append("]");
        } catch (IOException e) {
            out.append(",\"error\":").append(str(e.toString()));
        }
        out.append("}\n");
        try {
            Files.writeString(file, out.toString(), StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                              StandardOpenOption.APPEND);
        } catch (IOException e) {
            throw new RuntimeException("TelemetrySink: cannot write " + file, e);
        }
    }

    private static void metric(StringBuilder out, Metric metric) {
        out.append("{\"name\":").append(str(metric.getName()));
        out.append(",\"unit\":").append(str(metric.getUnit()));
        out.append(",\"description\":").append(str(metric.getDescription()));
        switch (metric.getDataCase()) {
            case GAUGE:
                out.append(",\"kind\":\"gauge\",\"points\":");
                numbers(out, metric.getGauge().getDataPointsList());
                break;
            case SUM:
                out.append(",\"kind\":\"sum\",\"monotonic\":").append(metric.getSum().getIsMonotonic());
                out.append(",\"temporality\":").append(str(metric.getSum().getAggregationTemporality().name()));
                out.append(",\"points\":");
                numbers(out, metric.getSum().getDataPointsList());
                break;
            case HISTOGRAM:
                out.append(",\"kind\":\"histogram\",\"temporality\":");
                out.append(str(metric.getHistogram().getAggregationTemporality().name()));
                out.append(",\"points\":[");
                String sep = "";
                for (HistogramDataPoint p : metric.getHistogram().getDataPointsList()) {
                    out.append(sep).append("{\"attributes\":");
                    attributes(out, p.getAttributesList());
                    out.append(",\"start\":").append(Long.toUnsignedString(p.getStartTimeUnixNano()));
                    out.append(",\"time\":").append(Long.toUnsignedString(p.getTimeUnixNano()));
                    out.append(",\"count\":").append(Long.toUnsignedString(p.getCount()));
                    out.append(",\"sum\":").append(p.getSum());
                    out.append(",\"bucket_counts\":[");
                    for (int i = 0; i < p.getBucketCountsCount(); i++) {
                        out.append(i == 0 ? "" : ",").append(Long.toUnsignedString(p.getBucketCounts(i)));
                    }
                    out.append("],\"bounds\":[");
                    for (int i = 0; i < p.getExplicitBoundsCount(); i++) {
                        out.append(i == 0 ? "" : ",").append(p.getExplicitBounds(i));
                    }
                    out.append("]}");
                    sep = ",";
                }
                out.append("]");
                break;
            default:
                out.append(",\"kind\":").append(str(metric.getDataCase().name()));
        }
        out.append("}");
    }

    private static void numbers(StringBuilder out, List<NumberDataPoint> points) {
        out.append("[");
        String sep = "";
        for (NumberDataPoint p : points) {
            out.append(sep).append("{\"attributes\":");
            attributes(out, p.getAttributesList());
            out.append(",\"start\":").append(Long.toUnsignedString(p.getStartTimeUnixNano()));
            out.append(",\"time\":").append(Long.toUnsignedString(p.getTimeUnixNano()));
            out.append(",\"value\":");
            if (p.getValueCase() == NumberDataPoint.ValueCase.AS_INT) {
                out.append(p.getAsInt());
            } else {
                out.append(p.getAsDouble());
            }
            out.append("}");
            sep = ",";
        }
        out.append("]");
    }

    private static void attributes(StringBuilder out, List<KeyValue> attributes) {
        out.append("{");
        String sep = "";
        for (KeyValue kv : attributes) {
            out.append(sep).append(str(kv.getKey())).append(":");
            AnyValue v = kv.getValue();
            switch (v.getValueCase()) {
                case BOOL_VALUE:
                    out.append(v.getBoolValue());
                    break;
                case INT_VALUE:
                    out.append(v.getIntValue());
                    break;
                case DOUBLE_VALUE:
                    out.append(v.getDoubleValue());
                    break;
                default:
                    out.append(str(v.getStringValue()));
            }
            sep = ",";
        }
        out.append("}");
    }

    private static String str(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
