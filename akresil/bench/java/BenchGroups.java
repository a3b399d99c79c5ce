// The Java client (org.apache.kafka:kafka-clients) in benchmarks/bench_groups.py: share consumers and a group
// rebalance, timed inside this JVM so that neither its start nor compiling this file counts.  Driven by
// akresil.bench.java_groups over stdin/stdout; run with the JDK's source launcher:
//   java -cp 'KAFKA_LIBS/*' BenchGroups.java
// Prints {"ready":true,"java":VERSION}, then answers each command line with one JSON line ({"error":"..."} if it failed):
//   share BOOTSTRAP GROUP TOPIC RECORDS CONSUMERS MODE TIMEOUT_MS
//       CONSUMERS KafkaShareConsumers (one thread each) drain TOPIC until RECORDS records are acknowledged;
//       MODE explicit: acknowledge() each record, then commitSync() after each poll; implicit: commitSync()
//       after each poll.  {"seconds": from creating the consumers until the commit that reached RECORDS,
//       "first_s": until a poll first returned records, "close_s": the slowest member's close(),
//       "acked": records acknowledged}
//   rebalance BOOTSTRAP GROUP TOPIC PARTITIONS PROTOCOL TIMEOUT_MS
//       two KafkaConsumers (group.protocol=PROTOCOL) settle on TOPIC, a third starts; {"seconds": from the third
//       one's start until the three hold disjoint, non-empty assignments covering the PARTITIONS partitions}
//   quit
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.AtomicReferenceArray;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class BenchGroups {
    /** the answers' channel: System.out goes to stderr, so a library printing there cannot garble them */
    static final PrintStream OUT = new PrintStream(new FileOutputStream(FileDescriptor.out), true);

    public static void main(String[] args) throws Exception {
        System.setOut(System.err);
        OUT.println("{\"ready\":true,\"java\":\"" + System.getProperty("java.version") + "\"}");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.trim().split(" ");
            String reply;
            try {
                switch (f[0]) {
                    case "share": reply = share(f); break;
                    case "rebalance": reply = rebalance(f); break;
                    case "quit": return;
                    default: reply = error("unknown command " + f[0]);
                }
            } catch (Throwable t) {
                reply = error(t.toString());
            }
            OUT.println(reply);
        }
    }

    static String error(String message) {
        StringBuilder b = new StringBuilder("{\"error\":\"");
        for (char c : message.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(' ');
            else b.append(c);
        }
        return b.append("\"}").toString();
    }

    static String share(String[] f) throws Exception {
        if (f.length != 8) return error("share needs BOOTSTRAP GROUP TOPIC RECORDS CONSUMERS MODE TIMEOUT_MS");
        String bootstrap = f[1], group = f[2], topic = f[3], mode = f[6];
        long records = Long.parseLong(f[4]);
        int consumers = Integer.parseInt(f[5]);
        long deadline = System.nanoTime() + Long.parseLong(f[7]) * 1_000_000L;
        boolean explicit = mode.equals("explicit");
        if (!explicit && !mode.equals("implicit")) return error("MODE must be explicit or implicit, got " + mode);
        AtomicLong done = new AtomicLong();
        AtomicLong committedAt = new AtomicLong(Long.MIN_VALUE);
        AtomicLong firstAt = new AtomicLong(Long.MIN_VALUE);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        long[] closes = new long[consumers];
        Thread[] threads = new Thread[consumers];
        long start = System.nanoTime();
        for (int i = 0; i < consumers; i++) {
            final int me = i;
            threads[i] = new Thread(() -> {
                Properties p = new Properties();
                p.put("bootstrap.servers", bootstrap);
                p.put("group.id", group);
                p.put("client.id", "bench-java-share-" + me);
                p.put("share.acknowledgement.mode", mode);
                KafkaShareConsumer<byte[], byte[]> c = null;
                try {
                    c = new KafkaShareConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
                    c.subscribe(List.of(topic));
                    while (done.get() < records && failure.get() == null) {
                        if (System.nanoTime() > deadline) {
                            throw new IllegalStateException("timed out: " + done.get() + " of " + records
                                                            + " records acknowledged");
                        }
                        ConsumerRecords<byte[], byte[]> batch = c.poll(Duration.ofMillis(100));
                        int n = 0;
                        for (ConsumerRecord<byte[], byte[]> r : batch) {
                            if (explicit) c.acknowledge(r);
                            n++;
                        }
                        if (n > 0) {
                            firstAt.compareAndSet(Long.MIN_VALUE, System.nanoTime());
                            // commitSync reports a failed acknowledgement per partition instead of throwing
                            for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : c.commitSync().entrySet()) {
                                if (e.getValue().isPresent()) {
                                    throw new IllegalStateException("commit of " + e.getKey() + " failed: "
                                                                    + e.getValue().get());
                                }
                            }
                            if (done.addAndGet(n) >= records) committedAt.compareAndSet(Long.MIN_VALUE, System.nanoTime());
                        }
                    }
                } catch (Throwable t) {
                    failure.compareAndSet(null, t);
                } finally {
                    if (c != null) {
                        long t = System.nanoTime();
                        c.close();
                        closes[me] = System.nanoTime() - t;
                    }
                }
            }, "bench-share-" + i);
            threads[i].start();
        }
        for (Thread t : threads) t.join();
        if (failure.get() != null) return error(failure.get().toString());
        long slowestClose = 0;
        for (long c : closes) slowestClose = Math.max(slowestClose, c);
        return "{\"seconds\":" + (committedAt.get() - start) / 1e9 + ",\"first_s\":" + (firstAt.get() - start) / 1e9
               + ",\"close_s\":" + slowestClose / 1e9 + ",\"acked\":" + done.get() + "}";
    }

    static boolean settled(AtomicReferenceArray<Set<TopicPartition>> assignments, int members, int partitions) {
        Set<TopicPartition> union = new HashSet<>();
        int total = 0;
        for (int i = 0; i < members; i++) {
            Set<TopicPartition> a = assignments.get(i);
            if (a.isEmpty()) return false;
            union.addAll(a);
            total += a.size();
        }
        return union.size() == partitions && total == partitions;
    }

    static String rebalance(String[] f) throws Exception {
        if (f.length != 7) return error("rebalance needs BOOTSTRAP GROUP TOPIC PARTITIONS PROTOCOL TIMEOUT_MS");
        String bootstrap = f[1], group = f[2], topic = f[3], protocol = f[5];
        int partitions = Integer.parseInt(f[4]);
        long timeoutNs = Long.parseLong(f[6]) * 1_000_000L;
        AtomicReferenceArray<Set<TopicPartition>> assignments = new AtomicReferenceArray<>(3);
        for (int i = 0; i < 3; i++) assignments.set(i, Set.of());
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        Runnable[] members = new Runnable[3];
        for (int i = 0; i < 3; i++) {
            final int me = i;
            members[i] = () -> {
                Properties p = new Properties();
                p.put("bootstrap.servers", bootstrap);
                p.put("group.id", group);
                p.put("client.id", "bench-java-rb-" + me);
                p.put("group.protocol", protocol);
                p.put("auto.offset.reset", "earliest");
                try (KafkaConsumer<byte[], byte[]> c =
                         new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                    c.subscribe(List.of(topic));
                    while (!stop.get()) {
                        c.poll(Duration.ofMillis(20));
                        assignments.set(me, Set.copyOf(c.assignment()));
                    }
                } catch (Throwable t) {
                    failure.compareAndSet(null, t);
                }
            };
        }
        try {
            for (int i = 0; i < 2; i++) {
                Thread t = new Thread(members[i], "bench-rb-" + i);
                t.start();
                threads.add(t);
            }
            String waited = await(assignments, 2, partitions, timeoutNs, failure);
            if (waited != null) return error("two members did not settle: " + waited);
            long start = System.nanoTime();
            Thread third = new Thread(members[2], "bench-rb-2");
            third.start();
            threads.add(third);
            waited = await(assignments, 3, partitions, timeoutNs, failure);
            if (waited != null) return error("three members did not settle: " + waited);
            return "{\"seconds\":" + (System.nanoTime() - start) / 1e9 + "}";
        } finally {
            stop.set(true);
            for (Thread t : threads) t.join();
        }
    }

    /** null once the first {@code members} members are settled, else why not (timeout, a member's failure). */
    static String await(AtomicReferenceArray<Set<TopicPartition>> assignments, int members, int partitions,
                        long timeoutNs, AtomicReference<Throwable> failure) throws InterruptedException {
        long deadline = System.nanoTime() + timeoutNs;
        while (!settled(assignments, members, partitions)) {
            if (failure.get() != null) return failure.get().toString();
            if (System.nanoTime() > deadline) return "timed out after " + timeoutNs / 1_000_000 + " ms";
            Thread.sleep(5);
        }
        return null;
    }
}
