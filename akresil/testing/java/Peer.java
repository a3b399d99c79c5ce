// The Java client (kafka-clients) as a peer for akresil's tests and benchmarks: one file, run by the JDK's
// single-file source launcher, no build step:
//
//   java -cp '<kafka libs>/*' Peer.java MODE --bootstrap HOST:PORT --topic T [options] [--config key=value ...]
//
// MODE consume        a group member (--group G, --protocol classic|consumer); commits after each poll
//      produce        --count N records (values "<prefix>-<i>"), one ack line each, then {"event":"done"}
//      share-consume  a share-group member (--group G), explicit acknowledgement (--ack accept|release|reject)
//
// Every event is one JSON line on stdout ("ready", "assigned", "revoked", "record", "ack", "done", "closed",
// "error"). The consumers run until stdin reaches its end (the caller closes it): they then close cleanly
// (leaving the group) and print {"event":"closed"}.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;

public class Peer {
    static final Map<String, String> opts = new TreeMap<>();
    static final Properties extra = new Properties();
    static final AtomicBoolean stopping = new AtomicBoolean();

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            fail("usage: Peer.java consume|produce|share-consume --bootstrap B --topic T [options]");
        }
        String mode = args[0];
        for (int i = 1; i < args.length; i++) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                fail("expected --option value, got " + args[i]);
            }
            String key = args[i].substring(2), value = args[++i];
            if (key.equals("config")) {
                int eq = value.indexOf('=');
                if (eq < 1) {
                    fail("--config needs key=value, got " + value);
                }
                extra.setProperty(value.substring(0, eq), value.substring(eq + 1));
            } else {
                opts.put(key, value);
            }
        }
        switch (mode) {
            case "consume": consume(); break;
            case "produce": produce(); break;
            case "share-consume": shareConsume(); break;
            default: fail("unknown mode " + mode + " (consume, produce, share-consume)");
        }
    }

    static String need(String key) {
        String v = opts.get(key);
        if (v == null) {
            fail("missing --" + key);
        }
        return v;
    }

    static void fail(String message) {
        emit("{\"event\":\"error\",\"message\":" + str(message) + "}");
        System.exit(2);
    }

    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String str(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
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

    static String partitions(Collection<TopicPartition> tps) {
        List<String> out = new ArrayList<>();
        for (TopicPartition tp : tps) {
            out.add("[" + str(tp.topic()) + "," + tp.partition() + "]");
        }
        return "[" + String.join(",", out) + "]";
    }

    static String record(ConsumerRecord<String, String> r, String extraFields) {
        return "{\"event\":\"record\",\"topic\":" + str(r.topic()) + ",\"partition\":" + r.partition()
            + ",\"offset\":" + r.offset() + ",\"key\":" + str(r.key()) + ",\"value\":" + str(r.value())
            + extraFields + "}";
    }

    static Properties base() {
        Properties p = new Properties();
        p.setProperty("bootstrap.servers", need("bootstrap"));
        p.setProperty("client.id", opts.getOrDefault("client-id", "java-peer"));
        p.putAll(extra);
        return p;
    }

    /** A thread that waits for stdin to end, then asks the poll loop to stop. */
    static void stopOnStdinEnd(Runnable wakeup) {
        Thread t = new Thread(() -> {
            try {
                while (System.in.read() != -1) {
                    // the caller writes nothing: it only closes stdin
                }
            } catch (Exception ignored) {
                // a broken stdin means the caller is gone: stop as well
            }
            stopping.set(true);
            wakeup.run();
        });
        t.setDaemon(true);
        t.start();
    }

    static void consume() {
        Properties p = base();
        p.setProperty("group.id", need("group"));
        p.setProperty("group.protocol", opts.getOrDefault("protocol", "classic"));
        p.putIfAbsent("auto.offset.reset", "earliest");
        p.putIfAbsent("enable.auto.commit", "false");
        p.setProperty("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        p.setProperty("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            stopOnStdinEnd(consumer::wakeup);
            consumer.subscribe(List.of(need("topic")), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                    if (!tps.isEmpty()) {
                        consumer.commitSync();   // what was handed out so far is done: commit before handing over
                        emit("{\"event\":\"revoked\",\"partitions\":" + partitions(tps) + "}");
                    }
                }

                public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                    emit("{\"event\":\"assigned\",\"partitions\":" + partitions(tps) + "}");
                }

                public void onPartitionsLost(Collection<TopicPartition> tps) {
                    emit("{\"event\":\"lost\",\"partitions\":" + partitions(tps) + "}");
                }
            });
            emit("{\"event\":\"ready\"}");
            while (!stopping.get()) {
                ConsumerRecords<String, String> records;
                try {
                    records = consumer.poll(Duration.ofMillis(200));
                } catch (WakeupException e) {
                    break;
                }
                for (ConsumerRecord<String, String> r : records) {
                    emit(record(r, ""));
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
            }
        }
        emit("{\"event\":\"closed\"}");
    }

    static void produce() throws Exception {
        Properties p = base();
        p.putIfAbsent("acks", "all");
        p.setProperty("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        p.setProperty("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        int count = Integer.parseInt(need("count"));
        String topic = need("topic"), prefix = opts.getOrDefault("prefix", "java");
        String partition = opts.get("partition");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            emit("{\"event\":\"ready\"}");
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                Integer part = partition == null ? null : Integer.valueOf(partition);
                sent.add(producer.send(new ProducerRecord<>(topic, part, null, prefix + "-" + i)));
            }
            for (Future<RecordMetadata> f : sent) {
                RecordMetadata md = f.get();
                emit("{\"event\":\"ack\",\"topic\":" + str(md.topic()) + ",\"partition\":" + md.partition()
                     + ",\"offset\":" + md.offset() + "}");
            }
        }
        emit("{\"event\":\"done\"}");
    }

    static void shareConsume() {
        Properties p = base();
        p.setProperty("group.id", need("group"));
        p.setProperty("share.acknowledgement.mode", "explicit");
        p.setProperty("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        p.setProperty("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        AcknowledgeType ack = AcknowledgeType.valueOf(opts.getOrDefault("ack", "accept").toUpperCase());
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(p)) {
            stopOnStdinEnd(consumer::wakeup);
            consumer.subscribe(List.of(need("topic")));
            emit("{\"event\":\"ready\"}");
            while (!stopping.get()) {
                ConsumerRecords<String, String> records;
                try {
                    records = consumer.poll(Duration.ofMillis(200));
                } catch (WakeupException e) {
                    break;
                }
                for (ConsumerRecord<String, String> r : records) {
                    int count = r.deliveryCount().map(Short::intValue).orElse(-1);
                    emit(record(r, ",\"delivery_count\":" + count));
                    consumer.acknowledge(r, ack);
                }
                if (!records.isEmpty()) {
                    try {
                        consumer.commitSync();
                    } catch (WakeupException e) {
                        break;
                    }
                }
            }
        }
        emit("{\"event\":\"closed\"}");
    }
}
