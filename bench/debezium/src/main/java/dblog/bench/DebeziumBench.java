package dblog.bench;

import io.debezium.embedded.Connect;
import io.debezium.embedded.EmbeddedWorkerConfig;
import io.debezium.embedded.KafkaConnectUtil;
import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.storage.FileOffsetBackingStore;
import org.apache.kafka.connect.storage.OffsetStorageWriter;

/**
 * One run of Debezium's embedded engine over a log range that bench/wide.py has just written
 * and measured with our capture. Prints one JSON line on stdout; logs go to stderr.
 *
 * <p>Arguments are {@code key=value}; the password comes from the environment variable
 * {@code DBZ_PASSWORD}, never argv. Required: {@code connector=postgres|mysql|mariadb},
 * {@code consumer=count|json|kafka}, {@code host}, {@code port}, {@code user}, {@code table}
 * (schema.table / database.table), {@code events} (stop after that many change events of the
 * table), {@code workdir} (offsets, schema history). PostgreSQL: {@code database}, {@code slot},
 * {@code publication} (both created before the load, so the slot starts where the load
 * starts). MySQL/MariaDB (Debezium's MariaDB connector for a MariaDB server): {@code binlog_file}, {@code binlog_pos} (the position before the
 * load; written into the offset store before the engine starts), {@code server_id}, for
 * MariaDB also {@code binlog_gtids} (the GTID position at that file/position); without
 * {@code binlog_file} nothing is seeded (a snapshot run). Any {@code dbz.NAME=VALUE}
 * is passed to the engine as {@code NAME=VALUE}. Everything else is Debezium's default.
 *
 * <p>Consumers: {@code count} counts the change events in a {@code notifying} batch handler
 * (the engine's Connect format: SourceRecords, nothing serialised); {@code json} lets the
 * engine serialise every record to JSON with Kafka's JsonConverter (Debezium's Json format,
 * key and value, schemas included as by default) and counts them and their bytes;
 * {@code kafka} sends those JSON records (give {@code dbz.converter.schemas.enable=false} for
 * the payload only, as our {@code format=debezium}) to the topic {@code kafka_topic} on
 * {@code bootstrap} with a Kafka producer and finishes each batch once every send of it was
 * acknowledged, as Debezium Server's Kafka sink does.
 */
public final class DebeziumBench {

    private static final String ENGINE_NAME = "dblog-bench";
    private static final String TOPIC_PREFIX = "bench";

    private DebeziumBench() {
    }

    private static long cpuNanos() {
        var os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean sun) {
            return sun.getProcessCpuTime();
        }
        return -1;
    }

    /** What both consumers share: counting, timing and telling main() to stop. */
    static final class Counter {
        final long target;
        final String topic;
        final CountDownLatch done = new CountDownLatch(1);
        long events;
        long bytes;
        long firstNanos = -1;
        long endNanos = -1;
        long endCpu = -1;

        Counter(long target, String topic) {
            this.target = target;
            this.topic = topic;
        }

        void seen(long n, long size) {
            if (firstNanos < 0) {
                firstNanos = System.nanoTime();
            }
            events += n;
            bytes += size;
            if (events >= target && endNanos < 0) {
                endNanos = System.nanoTime();
                endCpu = cpuNanos();
                done.countDown();
            }
        }
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String s : argv) {
            int eq = s.indexOf('=');
            if (eq < 0) {
                throw new IllegalArgumentException("expected key=value, got " + s);
            }
            a.put(s.substring(0, eq), s.substring(eq + 1));
        }
        String connector = need(a, "connector");
        String consumer = need(a, "consumer");
        String table = need(a, "table");
        long target = Long.parseLong(need(a, "events"));
        double timeout = Double.parseDouble(a.getOrDefault("timeout", "900"));
        Path work = Path.of(need(a, "workdir"));
        Files.createDirectories(work);
        String password = System.getenv().getOrDefault("DBZ_PASSWORD", "");

        Properties p = new Properties();
        p.setProperty("name", ENGINE_NAME);
        p.setProperty("topic.prefix", TOPIC_PREFIX);
        p.setProperty("database.hostname", need(a, "host"));
        p.setProperty("database.port", need(a, "port"));
        p.setProperty("database.user", need(a, "user"));
        p.setProperty("database.password", password);
        p.setProperty("table.include.list", table);
        p.setProperty("offset.storage", FileOffsetBackingStore.class.getName());
        p.setProperty("offset.storage.file.filename", work.resolve("offsets.dat").toString());
        switch (connector) {
            case "postgres" -> {
                p.setProperty("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
                p.setProperty("database.dbname", need(a, "database"));
                p.setProperty("plugin.name", "pgoutput");
                p.setProperty("slot.name", need(a, "slot"));
                p.setProperty("publication.name", need(a, "publication"));
                p.setProperty("publication.autocreate.mode", "disabled");
                p.setProperty("snapshot.mode", "no_data");
            }
            case "mysql", "mariadb" -> {
                p.setProperty("connector.class", connector.equals("mysql")
                        ? "io.debezium.connector.mysql.MySqlConnector"
                        : "io.debezium.connector.mariadb.MariaDbConnector");
                // Required (no default): the replica id this reader registers with.
                p.setProperty("database.server.id", need(a, "server_id"));
                p.setProperty("database.include.list", table.substring(0, table.indexOf('.')));
                p.setProperty("schema.history.internal", "io.debezium.storage.file.history.FileSchemaHistory");
                p.setProperty("schema.history.internal.file.filename", work.resolve("schema-history.dat").toString());
                // The offsets are written below (the log range starts there); the table's
                // schema is read from the server, as the CREATE TABLE lies before the range.
                p.setProperty("snapshot.mode", "recovery");
            }
            default -> throw new IllegalArgumentException("connector must be postgres, mysql or mariadb: " + connector);
        }
        for (var e : a.entrySet()) {
            if (e.getKey().startsWith("dbz.")) {
                p.setProperty(e.getKey().substring(4), e.getValue());
            }
        }
        // Without binlog_file the connector starts afresh (a snapshot run: dbz.snapshot.mode=initial).
        if (!connector.equals("postgres") && a.containsKey("binlog_file")) {
            seedBinlogOffset(p, need(a, "binlog_file"), Long.parseLong(need(a, "binlog_pos")), a.get("binlog_gtids"));
        }

        // Data change events of the table go to <prefix>.<schema>.<table>; anything else
        // (schema changes, heartbeats) is not counted.
        Counter c = new Counter(target, TOPIC_PREFIX + "." + table);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        DebeziumEngine.CompletionCallback completion = (ok, message, error) -> {
            if (!ok && error != null) {
                failure.compareAndSet(null, error);
            }
            else if (!ok) {
                failure.compareAndSet(null, new RuntimeException(message));
            }
            c.done.countDown();
        };

        long startCpu = cpuNanos();
        long jvmMillis = ManagementFactory.getRuntimeMXBean().getUptime();
        long start = System.nanoTime();
        DebeziumEngine<?> engine;
        KafkaProducer<String, String> producer = null;
        if (consumer.equals("count")) {
            engine = DebeziumEngine.create(Connect.class)
                    .using(p)
                    .using(completion)
                    .notifying((List<ChangeEvent<SourceRecord, SourceRecord>> records,
                            DebeziumEngine.RecordCommitter<ChangeEvent<SourceRecord, SourceRecord>> committer) -> {
                        long n = 0;
                        for (ChangeEvent<SourceRecord, SourceRecord> r : records) {
                            SourceRecord sr = r.value();
                            if (sr != null && sr.value() != null && c.topic.equals(sr.topic())) {
                                n++;
                            }
                            committer.markProcessed(r);
                        }
                        committer.markBatchFinished();
                        c.seen(n, 0);
                    })
                    .build();
        }
        else if (consumer.equals("json") || consumer.equals("kafka")) {
            // kafka: the JSON records sent on, as Debezium Server's Kafka sink does
            KafkaProducer<String, String> out = consumer.equals("kafka")
                    ? new KafkaProducer<>(producerConfig(need(a, "bootstrap")))
                    : null;
            producer = out;
            String topic = out == null ? null : need(a, "kafka_topic");
            engine = DebeziumEngine.create(Json.class)
                    .using(p)
                    .using(completion)
                    .notifying((List<ChangeEvent<String, String>> records,
                            DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer) -> {
                        long n = 0;
                        long size = 0;
                        List<Future<RecordMetadata>> sent = new ArrayList<>();
                        for (ChangeEvent<String, String> r : records) {
                            if (r.value() != null && c.topic.equals(r.destination())) {
                                if (out != null) {
                                    sent.add(out.send(new ProducerRecord<>(topic, r.key(), r.value())));
                                }
                                n++;
                                size += r.value().length() + (r.key() == null ? 0 : r.key().length());
                            }
                            committer.markProcessed(r);
                        }
                        // The batch is finished (its offsets may be stored) once the broker
                        // acknowledged every record of it.
                        for (Future<RecordMetadata> f : sent) {
                            try {
                                f.get();
                            }
                            catch (ExecutionException e) {
                                throw new RuntimeException(e.getCause());
                            }
                        }
                        committer.markBatchFinished();
                        c.seen(n, size);
                    })
                    .build();
        }
        else {
            throw new IllegalArgumentException("consumer must be count, json or kafka: " + consumer);
        }

        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        boolean finished = c.done.await((long) (timeout * 1000), TimeUnit.MILLISECONDS);
        // Closing waits for the connector to stop; bounded, so a stuck connector still ends
        // the run with a result line.
        Thread closer = new Thread(() -> {
            try {
                engine.close();
            }
            catch (IOException | IllegalStateException e) {
                // already stopped (after a failure, reported through the completion callback)
            }
        }, "closer");
        closer.setDaemon(true);
        closer.start();
        closer.join(60_000);
        executor.shutdownNow();
        if (producer != null) {
            producer.close(Duration.ofSeconds(30));
        }

        if (c.endNanos < 0) {
            Throwable t = failure.get();
            String why = t != null ? t.toString() : (finished ? "engine stopped" : "timeout after " + timeout + " s");
            System.out.println("{\"error\": " + quote(why) + ", \"events\": " + c.events + "}");
            System.exit(1);
        }
        double seconds = (c.endNanos - start) / 1e9;
        double firstEvent = (c.firstNanos - start) / 1e9;
        double cpu = (c.endCpu - startCpu) / 1e9;
        System.out.println("{\"connector\": " + quote(connector)
                + ", \"consumer\": " + quote(consumer)
                + ", \"engine\": " + quote(engine.getClass().getName())
                + ", \"events\": " + c.events
                + ", \"seconds\": " + seconds
                + ", \"first_event_s\": " + firstEvent
                + ", \"cpu_s\": " + cpu
                + ", \"jvm_start_s\": " + jvmMillis / 1000.0
                + ", \"jvm_start_cpu_s\": " + startCpu / 1e9
                + ", \"json_bytes\": " + c.bytes
                + "}");
        System.exit(0);
    }

    /**
     * The producer settings our Kafka output sets (linger.ms=5, lz4) with Debezium Server's
     * Kafka sink defaults otherwise (acks=all and idempotence: Kafka's own defaults).
     */
    private static Properties producerConfig(String bootstrap) {
        Properties k = new Properties();
        k.setProperty("bootstrap.servers", bootstrap);
        k.setProperty("linger.ms", "5");
        k.setProperty("compression.type", "lz4");
        k.setProperty("acks", "all");
        k.setProperty("enable.idempotence", "true");
        k.setProperty("key.serializer", StringSerializer.class.getName());
        k.setProperty("value.serializer", StringSerializer.class.getName());
        return k;
    }

    /** Writes {file, pos} as the connector's stored offset, as the engine itself would. */
    private static void seedBinlogOffset(Properties p, String file, long pos, String gtids) throws Exception {
        Map<String, String> conf = new HashMap<>();
        for (String k : p.stringPropertyNames()) {
            conf.put(k, p.getProperty(k));
        }
        FileOffsetBackingStore store = KafkaConnectUtil.fileOffsetBackingStore();
        store.configure(new EmbeddedWorkerConfig(conf));
        store.start();
        try {
            JsonConverter key = new JsonConverter();
            key.configure(Map.of("schemas.enable", "false"), true);
            JsonConverter value = new JsonConverter();
            value.configure(Map.of("schemas.enable", "false"), false);
            OffsetStorageWriter w = new OffsetStorageWriter(store, ENGINE_NAME, key, value);
            Map<String, Object> offset = new HashMap<>(Map.of("file", file, "pos", pos));
            if (gtids != null && !gtids.isEmpty()) {
                offset.put("gtids", gtids); // MariaDB's connector positions by GTID
            }
            w.offset(Map.of("server", TOPIC_PREFIX), offset);
            if (!w.beginFlush()) {
                throw new IOException("nothing to flush");
            }
            w.doFlush((error, ignored) -> {
            }).get(30, TimeUnit.SECONDS);
        }
        finally {
            store.stop();
        }
    }

    private static String need(Map<String, String> a, String key) {
        String v = a.get(key);
        if (v == null) {
            throw new IllegalArgumentException("missing " + key + "=...");
        }
        return v;
    }

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                default -> {
                    if (ch < 0x20) {
                        b.append(String.format("\\u%04x", (int) ch));
                    }
                    else {
                        b.append(ch);
                    }
                }
            }
        }
        return b.append('"').toString();
    }
}
