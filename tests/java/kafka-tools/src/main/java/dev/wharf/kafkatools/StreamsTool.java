package dev.wharf.kafkatools;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * Kafka Streams against a broker's Kafka port. Usage: {@code StreamsTool BOOTSTRAP WORK_DIR};
 * one JSON line on stdout (Tools.run), judged by
 * tests/broker/kafka/test_kafka_connect_streams.py, which also checks the changelog and the
 * counts topic it leaves behind.
 *
 * <p>A word count (groupBy word: a repartition topic; count: a state store with its changelog)
 * over lines sent at a steady pace; the first instance is closed mid-stream, its state
 * directory deleted, and the second restores the store from the changelog.
 */
public final class StreamsTool {
    private static String bootstrap;
    private static Path work;

    private StreamsTool() {
    }

    public static void main(String[] args) {
        bootstrap = args[0];
        work = Path.of(args[1]);
        // -Dprocessing.guarantee=exactly_once_v2: the same on topics and an application id of
        // its own (transactions: KIP-447's producer per thread, read_committed consumers).
        guarantee = System.getProperty("processing.guarantee", StreamsConfig.AT_LEAST_ONCE);
        String suffix = guarantee.equals(StreamsConfig.AT_LEAST_ONCE) ? "" : "-eos";
        app = "wharf-wordcount" + suffix;
        wordsIn = "words-in" + suffix;
        countsOut = "word-counts" + suffix;
        Tools.run("streams" + suffix, StreamsTool::streams);
    }

    private static String guarantee;
    private static String app;
    private static String wordsIn;
    private static String countsOut;
    static final String STORE = "counts";
    static final int LINES = 300;

    static String repartition() {
        return app + "-words-repartition";
    }

    static String changelog() {
        return app + "-" + STORE + "-changelog";
    }

    static final int WORDS_PER_LINE = 4;

    private static KafkaStreams wordCount(Path stateDir, AtomicLong restored) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(wordsIn, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.split(" ")))
            .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
            .count(Materialized.as(STORE))
            .toStream()
            .to(countsOut, Produced.with(Serdes.String(), Serdes.Long()));
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        // Every update goes to the changelog (no cache folding them): versions to compact.
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        // Consumed repartition records are deleted (DeleteRecords) twice a second, not every 30 s.
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 500);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(TopicPartition partition, String store, long start, long end) {
            }

            @Override
            public void onBatchRestored(TopicPartition partition, String store, long end, long count) {
                restored.addAndGet(count);
            }

            @Override
            public void onRestoreEnd(TopicPartition partition, String store, long total) {
            }
        });
        return streams;
    }

    private static Map<String, Long> storeCounts(KafkaStreams streams) {
        Map<String, Long> out = new TreeMap<>();
        try {
            ReadOnlyKeyValueStore<String, Long> store = streams.store(
                StoreQueryParameters.fromNameAndType(STORE, QueryableStoreTypes.keyValueStore()));
            try (KeyValueIterator<String, Long> all = store.all()) {
                while (all.hasNext()) {
                    KeyValue<String, Long> kv = all.next();
                    out.put(kv.key, kv.value);
                }
            }
        } catch (RuntimeException e) {
            // not queryable while it rebalances or restores: none yet
        }
        return out;
    }

    private static long total(Map<String, Long> counts) {
        return counts.values().stream().mapToLong(Long::longValue).sum();
    }

    private static void awaitRunning(KafkaStreams streams, String what) throws Exception {
        Tools.await(what + " running (" + streams.state() + ")", () -> streams.state() == KafkaStreams.State.RUNNING, 60_000);
    }

    private static Map<String, Object> streams() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        Map<String, Object> timings = new LinkedHashMap<>();
        out.put("timings", timings);
        long t0 = System.nanoTime();
        try (Admin admin = Tools.admin(bootstrap)) {
            Tools.createTopic(admin, wordsIn, 2);
            Tools.createTopic(admin, countsOut, 2);
        }
        Map<String, Long> expected = new TreeMap<>();
        List<String> text = new ArrayList<>();
        for (int i = 0; i < LINES; i++) {
            List<String> words = new ArrayList<>();
            for (int j = 0; j < WORDS_PER_LINE; j++) {
                String word = "word" + ((i * 7 + j * 3) % 10);
                words.add(word);
                expected.merge(word, 1L, Long::sum);
            }
            text.add(String.join(" ", words));
        }
        Map<String, Object> props = Map.of(
            ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
            ProducerConfig.ACKS_CONFIG, "all");
        AtomicLong sent = new AtomicLong();
        Thread sender = new Thread(() -> {
            try (KafkaProducer<String, String> producer =
                     new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
                for (int i = 0; i < LINES; i++) {
                    producer.send(new ProducerRecord<>(wordsIn, "line-" + i, text.get(i))).get();
                    sent.incrementAndGet();
                    Thread.sleep(25); // 300 lines in 8 s or more
                }
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }, "lines");
        AtomicLong restoredFirst = new AtomicLong();
        AtomicLong restoredSecond = new AtomicLong();
        Path firstDir = Files.createDirectories(work.resolve("streams-first"));
        KafkaStreams first = wordCount(firstDir, restoredFirst);
        first.start();
        Map<String, Long> atStop;
        try {
            awaitRunning(first, "the first instance");
            timings.put("first_running", Tools.since(t0));
            sender.start(); // once it runs (its start-up takes seconds): the close falls mid-stream
            long quarter = (long) LINES * WORDS_PER_LINE / 4;
            Tools.await("the first instance counted a quarter of the words", () -> total(storeCounts(first)) >= quarter, 60_000);
            atStop = storeCounts(first);
        } finally {
            out.put("sent_at_stop", sent.get());
            // LEAVE_GROUP: the second instance is assigned at once, not after a session timeout.
            first.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                .withTimeout(Duration.ofSeconds(30)));
        }
        timings.put("first_closed", Tools.since(t0));
        out.put("counted_by_first", total(atStop));
        deleteTree(firstDir); // the local state: gone
        KafkaStreams second = wordCount(Files.createDirectories(work.resolve("streams-second")), restoredSecond);
        second.start();
        try {
            awaitRunning(second, "the second instance");
            sender.join(60_000);
            Tools.await("the second instance's counts reach the words sent", () -> storeCounts(second).equals(expected), 60_000);
            timings.put("all_counted", Tools.since(t0));
            out.put("counts", storeCounts(second));
            Thread.sleep(1500); // purges of the repartition topic after the last commits
        } finally {
            out.put("counts_last_seen", storeCounts(second));
            out.put("restored_by_second", restoredSecond.get());
            second.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                .withTimeout(Duration.ofSeconds(30)));
        }
        out.put("expected", expected);
        out.put("sent", sent.get());
        out.put("restored_by_first", restoredFirst.get());
        try (Admin admin = Tools.admin(bootstrap)) {
            out.put("cleanup_policy", Tools.cleanupPolicies(admin, List.of(changelog(), repartition())));
            Map<TopicPartition, OffsetSpec> earliest = new HashMap<>();
            for (int p = 0; p < 2; p++) {
                earliest.put(new TopicPartition(repartition(), p), OffsetSpec.earliest());
            }
            Map<String, Object> starts = new TreeMap<>();
            admin.listOffsets(earliest).all().get(20, TimeUnit.SECONDS)
                .forEach((tp, info) -> starts.put(String.valueOf(tp.partition()), info.offset()));
            out.put("repartition_log_start", starts);
        }
        return out;
    }

    private static void deleteTree(Path dir) throws IOException {
        try (var paths = Files.walk(dir)) {
            for (Path p : paths.sorted(Comparator.reverseOrder()).toList()) {
                Files.delete(p);
            }
        }
    }
}
