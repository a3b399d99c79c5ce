// The Java client (org.apache.kafka:kafka-clients) as a benchmark peer of akresil, driven over stdin/stdout by
// akresil.bench.java_client.  Run with the JDK's source launcher: java -cp 'KAFKA_LIBS/*' BenchClient.java
//   args: BOOTSTRAP CLIENT_ID [key=value producer configs ...]
// Commands (one per line, space-separated):
//   S idx topic partition size      send one record; its outcome comes back as "A idx partition" or "E idx kind"
//   B topic count size              send count records (default partitioner), wait for all; "D seconds"
//   C topic partitions expected ms  read topic from the beginning (assign), until expected or ms;
//                                   "D count seconds" (from creating the consumer to the last record)
//   Q                               flush, close, exit
// Outcome lines are written by the producer's I/O thread as acknowledgements arrive; stdout is line-buffered
// under one lock so lines never interleave.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.BufferedOutputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class BenchClient {
    private static final PrintStream OUT =
        new PrintStream(new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16), false);

    private static void emit(String line) {
        synchronized (OUT) {
            OUT.println(line);
            OUT.flush();
        }
    }

    private static String kind(Exception e) {
        return (e instanceof TimeoutException) ? "timeout" : "other";
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String clientId = args[1];
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("client.id", clientId);
        for (int i = 2; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        KafkaProducer<byte[], byte[]> producer =
            new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
        byte[] cached = new byte[0];
        emit("R");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in), 1 << 16);
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split(" ");
            switch (f[0]) {
                case "S": {
                    final String idx = f[1];
                    int size = Integer.parseInt(f[4]);
                    if (cached.length != size) cached = new byte[size];
                    try {
                        producer.send(new ProducerRecord<>(f[2], Integer.parseInt(f[3]), null, cached), (md, e) -> {
                            if (e == null) emit("A " + idx + " " + md.partition());
                            else emit("E " + idx + " " + kind(e));
                        });
                    } catch (Exception e) {
                        emit("E " + idx + " " + kind(e));
                    }
                    break;
                }
                case "B": {
                    int count = Integer.parseInt(f[2]);
                    byte[] value = new byte[Integer.parseInt(f[3])];
                    CountDownLatch left = new CountDownLatch(count);
                    AtomicReference<Exception> failure = new AtomicReference<>();
                    long t0 = System.nanoTime();
                    for (int i = 0; i < count; i++) {
                        producer.send(new ProducerRecord<>(f[1], value), (md, e) -> {
                            if (e != null) failure.compareAndSet(null, e);
                            left.countDown();
                        });
                    }
                    left.await(120, TimeUnit.SECONDS);
                    if (failure.get() != null || left.getCount() > 0) {
                        emit("X bulk failed: " + failure.get() + ", unacknowledged " + left.getCount());
                    } else {
                        emit("D " + (System.nanoTime() - t0) / 1e9);
                    }
                    break;
                }
                case "C": {
                    int partitions = Integer.parseInt(f[2]);
                    long expected = Long.parseLong(f[3]);
                    long deadline = System.currentTimeMillis() + Long.parseLong(f[4]);
                    Properties cp = new Properties();
                    cp.put("bootstrap.servers", bootstrap);
                    cp.put("client.id", clientId + "-consumer");
                    cp.put("enable.auto.commit", "false");
                    cp.put("auto.offset.reset", "earliest");
                    long got = 0;
                    long c0 = System.nanoTime();
                    try (KafkaConsumer<byte[], byte[]> consumer =
                             new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                        List<TopicPartition> tps = new ArrayList<>();
                        for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(f[1], p));
                        consumer.assign(tps);
                        consumer.seekToBeginning(tps);
                        while (got < expected && System.currentTimeMillis() < deadline) {
                            ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                            got += records.count();
                        }
                    }
                    emit("D " + got + " " + (System.nanoTime() - c0) / 1e9);
                    break;
                }
                case "Q": {
                    producer.close(Duration.ofSeconds(5));
                    emit("D closed");
                    return;
                }
                default:
                    emit("X unknown command " + f[0]);
            }
        }
        producer.close(Duration.ofSeconds(5));
    }
}
