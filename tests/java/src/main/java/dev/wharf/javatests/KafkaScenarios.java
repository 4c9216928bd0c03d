package dev.wharf.javatests;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's own Java client (kafka-clients) against a broker's Kafka port, as an application
 * uses it. Usage: {@code KafkaScenarios BOOTSTRAP SCENARIO...} runs the scenarios at once, each
 * on its own topics and groups, one JSON line each (tests/broker/kafka/test_java_client.py
 * judges them); {@code KafkaScenarios BOOTSTRAP kill9 TOPIC} produces with acks=all until the
 * broker goes away, printing one line per acknowledged record as the acknowledgement arrives.
 */
public final class KafkaScenarios {
    private static String bootstrap;

    private KafkaScenarios() {
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        if (args.length > 1 && args[1].equals("kill9")) {
            kill9(args[2]);
            return;
        }
        Map<String, Callable<Map<String, Object>>> table = new LinkedHashMap<>();
        table.put("produce", KafkaScenarios::produce);
        table.put("group_cooperative", () -> group("JK_COOP", "G_COOP", CooperativeStickyAssignor.class));
        table.put("group_eager", () -> group("JK_EAGER", "G_EAGER", RangeAssignor.class));
        table.put("seek", KafkaScenarios::seek);
        table.put("admin", KafkaScenarios::topics);
        List<String> names = new ArrayList<>(List.of(args).subList(1, args.length));
        Scenarios.run(table, names, 150);
    }

    // --- clients ----------------------------------------------------------------------------

    private static KafkaProducer<String, String> producer(String compression) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        // enable.idempotence is left to its default (true since Kafka 3.0): InitProducerId, then
        // sequence numbers on every batch. acks=all is that default's too; said explicitly.
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "jk-producer-" + compression);
        return new KafkaProducer<>(p);
    }

    private static KafkaConsumer<String, String> consumer(String group, Map<String, Object> extra) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    private static Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        return Admin.create(p);
    }

    private static void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
    }

    private static Map<String, Object> seen(ConsumerRecord<String, String> r) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("key", r.key());
        out.put("value", r.value());
        out.put("partition", r.partition());
        out.put("offset", r.offset());
        out.put("timestamp", r.timestamp());
        Map<String, Object> headers = new LinkedHashMap<>();
        for (Header h : r.headers()) {
            headers.put(h.key(), h.value() == null ? null : new String(h.value(), StandardCharsets.UTF_8));
        }
        out.put("headers", headers);
        return out;
    }

    private static Map<String, Object> sent(RecordMetadata m) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("partition", m.partition());
        out.put("offset", m.offset());
        return out;
    }

    private static List<Object> names(Collection<TopicPartition> partitions) {
        List<Object> out = new ArrayList<>();
        for (TopicPartition tp : partitions) {
            out.add(tp.partition());
        }
        out.sort(null);
        return out;
    }

    /** Every record of {@code topic} from the beginning, by a consumer with no group. */
    private static List<Map<String, Object>> readAll(String topic, int expected) throws Exception {
        List<Map<String, Object>> got = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(null, Map.of())) {
            List<TopicPartition> parts = new ArrayList<>();
            c.partitionsFor(topic).forEach(i -> parts.add(new TopicPartition(topic, i.partition())));
            c.assign(parts);
            c.seekToBeginning(parts);
            long deadline = System.currentTimeMillis() + 30_000;
            while (got.size() < expected && System.currentTimeMillis() < deadline) {
                c.poll(Duration.ofMillis(200)).forEach(r -> got.add(seen(r)));
            }
            // a little longer: a record more than expected is a duplicate to report
            c.poll(Duration.ofMillis(300)).forEach(r -> got.add(seen(r)));
        }
        return got;
    }

    // --- scenarios --------------------------------------------------------------------------

    /** The default (idempotent) producer with acks=all, once per compression codec, each
     *  record with a key and a header; then every record read back from the beginning. */
    private static Map<String, Object> produce() throws Exception {
        String topic = "JK_PRODUCE";
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            createTopic(admin, topic, 2);
        }
        Map<String, Object> sent = new LinkedHashMap<>();
        // 300 bytes of repeated text per value: each codec has something to compress.
        String pad = "wharf ".repeat(50);
        for (String codec : List.of("none", "gzip", "lz4", "zstd", "snappy")) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            try (KafkaProducer<String, String> producer = producer(codec)) {
                for (int i = 0; i < 10; i++) {
                    ProducerRecord<String, String> r = new ProducerRecord<>(
                        topic, "k-" + codec + "-" + i, codec + "-" + i + " " + pad);
                    r.headers().add("codec", codec.getBytes(StandardCharsets.UTF_8));
                    futures.add(producer.send(r));
                }
                producer.flush();
                List<Object> acks = new ArrayList<>();
                for (Future<RecordMetadata> f : futures) {
                    acks.add(sent(f.get()));
                }
                sent.put(codec, acks);
            }
        }
        out.put("sent", sent);
        List<Map<String, Object>> got = readAll(topic, 50);
        for (Map<String, Object> m : got) { // the pad is checked here, not sent to pytest
            String value = (String) m.get("value");
            m.put("value", value.endsWith(" " + pad) ? value.substring(0, value.length() - pad.length() - 1) : value);
        }
        out.put("received", got);
        return out;
    }

    /** A consumer group of two with one assignor: member a joins alone and reads 20 records,
     *  then b joins and both read 20 more, each committing with commitSync after each poll;
     *  the admin client lists and describes the group with both members in it. */
    private static Map<String, Object> group(String topic, String group, Class<?> assignor) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        int partitions = 4;
        Admin admin = admin();
        createTopic(admin, topic, partitions);
        KafkaProducer<String, String> producer = producer("none");
        Map<String, List<Map<String, Object>>> received = new TreeMap<>();
        Map<String, List<Object>> events = new TreeMap<>();
        Map<String, AtomicReference<Set<Integer>>> assigned = new TreeMap<>();
        AtomicInteger commits = new AtomicInteger();
        AtomicBoolean stop = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        Map<String, Object> extra = Map.of(
            ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor.getName(),
            // a rebalance reaches the other member at its next heartbeat: 0.5 s, not 3 s
            ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500,
            ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10_000);
        for (String member : List.of("a", "b")) {
            received.put(member, new CopyOnWriteArrayList<>());
            events.put(member, new CopyOnWriteArrayList<>());
            assigned.put(member, new AtomicReference<>(Set.of()));
            Map<String, Object> props = new LinkedHashMap<>(extra);
            props.put(ConsumerConfig.CLIENT_ID_CONFIG, group + "-" + member);
            threads.add(new Thread(() -> {
                try (KafkaConsumer<String, String> c = consumer(group, props)) {
                    c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                        @Override
                        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                            events.get(member).add(List.of("revoked", names(parts)));
                        }

                        @Override
                        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                            events.get(member).add(List.of("assigned", names(parts)));
                        }
                    });
                    while (!stop.get()) {
                        var records = c.poll(Duration.ofMillis(100));
                        records.forEach(r -> received.get(member).add(seen(r)));
                        Set<Integer> now = new HashSet<>();
                        c.assignment().forEach(tp -> now.add(tp.partition()));
                        assigned.get(member).set(now);
                        if (!records.isEmpty()) {
                            c.commitSync();
                            commits.incrementAndGet();
                        }
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            }, group + "-" + member));
        }
        threads.get(0).start();
        boolean aAlone = Scenarios.await(() -> assigned.get("a").get().size() == partitions, 30_000);
        for (int i = 0; i < 20; i++) {
            producer.send(new ProducerRecord<>(topic, i % partitions, "k" + i, "r-" + i));
        }
        producer.flush();
        boolean aRead = Scenarios.await(() -> received.get("a").size() >= 20, 30_000);
        threads.get(1).start();
        boolean split = Scenarios.await(() -> !assigned.get("a").get().isEmpty()
            && !assigned.get("b").get().isEmpty()
            && assigned.get("a").get().size() + assigned.get("b").get().size() == partitions, 30_000);
        for (int i = 20; i < 40; i++) {
            producer.send(new ProducerRecord<>(topic, i % partitions, "k" + i, "r-" + i));
        }
        producer.flush();
        Scenarios.await(() -> received.get("a").size() + received.get("b").size() >= 40, 30_000);
        out.put("a_alone", aAlone);
        out.put("a_read_first", aRead);
        out.put("split", split);

        // The admin client while both members are in the group.
        Map<String, Object> listed = new LinkedHashMap<>();
        for (GroupListing g : admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get()) {
            listed.put(g.groupId(), String.valueOf(g.groupState().orElse(null)));
        }
        out.put("listed", listed);
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        Map<String, Object> described = new LinkedHashMap<>();
        described.put("state", d.groupState().toString());
        described.put("assignor", d.partitionAssignor());
        described.put("coordinator", d.coordinator().id());
        Map<String, Object> members = new TreeMap<>();
        for (MemberDescription m : d.members()) {
            members.put(m.clientId(), names(m.assignment().topicPartitions()));
        }
        described.put("members", members);
        out.put("described", described);

        Thread.sleep(300); // a duplicate delivery, if any, would arrive now
        stop.set(true);
        for (Thread t : threads) {
            t.join(15_000);
        }
        Map<String, Object> committed = new TreeMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e
                : admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().entrySet()) {
            committed.put(String.valueOf(e.getKey().partition()), e.getValue().offset());
        }
        out.put("committed", committed);
        out.put("commits", commits.get());
        out.put("received", received);
        out.put("events", events);
        out.put("errors", errors.stream().map(String::valueOf).toList());
        producer.close();
        admin.close();
        return out;
    }

    /** assign + seek, seekToBeginning, seekToEnd and position; commitSync of explicit offsets,
     *  read back with committed() and resumed by a new consumer of the group. */
    private static Map<String, Object> seek() throws Exception {
        String topic = "JK_SEEK";
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
        }
        try (KafkaProducer<String, String> producer = producer("none")) {
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k" + i, "s-" + i));
            }
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = consumer("G_SEEK", Map.of())) {
            c.assign(List.of(tp));
            c.seek(tp, 5);
            List<Object> fromFive = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 15_000;
            while (fromFive.size() < 5 && System.currentTimeMillis() < deadline) {
                c.poll(Duration.ofMillis(200)).forEach(r -> fromFive.add(List.of(r.offset(), r.value())));
            }
            out.put("from_five", fromFive);
            c.seekToBeginning(List.of(tp));
            out.put("beginning", c.position(tp));
            c.seekToEnd(List.of(tp));
            out.put("end", c.position(tp));
            c.commitSync(Map.of(tp, new OffsetAndMetadata(7, "seventh")));
            OffsetAndMetadata committed = c.committed(Set.of(tp)).get(tp);
            out.put("committed", List.of(committed.offset(), committed.metadata()));
        }
        try (KafkaConsumer<String, String> c = consumer("G_SEEK", Map.of())) {
            c.subscribe(List.of(topic));
            List<Object> resumed = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 20_000;
            while (resumed.size() < 3 && System.currentTimeMillis() < deadline) {
                c.poll(Duration.ofMillis(200)).forEach(r -> resumed.add(List.of(r.offset(), r.value())));
            }
            out.put("resumed", resumed);
        }
        return out;
    }

    /** Admin: create, list, describe and delete topics; list offsets (earliest, latest). */
    private static Map<String, Object> topics() throws Exception {
        String topic = "JK_ADMIN";
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            out.put("nodes", admin.describeCluster().nodes().get().stream().map(Node::id).toList());
            createTopic(admin, topic, 3);
            ExecutionException again = null;
            try {
                createTopic(admin, topic, 3);
            } catch (ExecutionException e) {
                again = e;
            }
            out.put("create_again", again == null ? null : again.getCause().getClass().getSimpleName());
            out.put("listed", admin.listTopics().names().get().contains(topic));
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            List<Object> parts = new ArrayList<>();
            for (TopicPartitionInfo p : d.partitions()) {
                parts.add(List.of(p.partition(), p.leader().id(), p.replicas().size(), p.isr().size()));
            }
            out.put("described", parts);
            try (KafkaProducer<String, String> producer = producer("none")) {
                for (int i = 0; i < 6; i++) {
                    producer.send(new ProducerRecord<>(topic, i % 3, "k" + i, "a-" + i));
                }
            }
            Map<TopicPartition, OffsetSpec> earliest = new LinkedHashMap<>();
            Map<TopicPartition, OffsetSpec> latest = new LinkedHashMap<>();
            for (int p = 0; p < 3; p++) {
                earliest.put(new TopicPartition(topic, p), OffsetSpec.earliest());
                latest.put(new TopicPartition(topic, p), OffsetSpec.latest());
            }
            out.put("earliest", offsets(admin.listOffsets(earliest).all().get()));
            out.put("latest", offsets(admin.listOffsets(latest).all().get()));
            admin.deleteTopics(List.of(topic)).all().get();
            boolean gone = Scenarios.await(() -> {
                try {
                    return !admin.listTopics().names().get().contains(topic);
                } catch (Exception e) {
                    return false;
                }
            }, 10_000);
            out.put("deleted", gone);
        }
        return out;
    }

    private static List<Object> offsets(Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> infos) {
        List<Object> out = new ArrayList<>();
        new TreeMap<>(infos.entrySet().stream().collect(
            java.util.stream.Collectors.toMap(e -> e.getKey().partition(), e -> e.getValue().offset())))
            .forEach((p, o) -> out.add(List.of(p, o)));
        return out;
    }

    /** acks=all sends (two partitions) as fast as acknowledgements come, one line
     *  {@code ACK partition offset n} per acknowledged record, until a send fails (the broker
     *  was killed) or 60 s pass; then one JSON line with the counts. */
    private static void kill9(String topic) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, 2);
        // After the kill the outstanding sends fail within ~3 s rather than the default 2 min.
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 3_000);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 1_000);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 3_000);
        AtomicInteger acked = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        AtomicReference<String> firstError = new AtomicReference<>();
        long deadline = System.currentTimeMillis() + 60_000;
        int sent = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            while (failed.get() == 0 && System.currentTimeMillis() < deadline) {
                int n = sent++;
                try {
                    producer.send(new ProducerRecord<>(topic, n % 2, "k" + n, "v" + n), (m, e) -> {
                        if (e == null) {
                            acked.incrementAndGet();
                            Scenarios.print("ACK " + m.partition() + " " + m.offset() + " " + n);
                        } else {
                            failed.incrementAndGet();
                            firstError.compareAndSet(null, e.toString());
                        }
                    });
                } catch (Exception e) { // max.block.ms: no metadata, the broker is gone
                    failed.incrementAndGet();
                    firstError.compareAndSet(null, e.toString());
                }
                if (n % 20 == 19) {
                    Thread.sleep(2); // ~10,000 records/s at most: a steady stream, not a burst
                }
            }
            producer.flush();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("scenario", "kill9");
        out.put("sent", sent);
        out.put("acked", acked.get());
        out.put("failed", failed.get());
        out.put("first_error", firstError.get());
        Scenarios.print(Json.write(out));
        System.exit(0);
    }
}
