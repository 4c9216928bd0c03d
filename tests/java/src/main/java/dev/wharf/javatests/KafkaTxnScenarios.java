package dev.wharf.javatests;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Kafka's own Java client (kafka-clients 4.4) in a transaction on Wharf, for
 *  tests/broker/kafka/test_transactions.py: a committed, an aborted (its records flushed
 *  first) and a committed transaction, the Admin client's describeTransactions and
 *  listTransactions while the last is open, then read_committed and read_uncommitted
 *  consumers of the partition. One JSON line (Scenarios). */
public final class KafkaTxnScenarios {
    private static String bootstrap;

    private KafkaTxnScenarios() {
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        Map<String, Callable<Map<String, Object>>> table = new LinkedHashMap<>();
        table.put("txn", KafkaTxnScenarios::txn);
        Scenarios.run(table, List.of(args).subList(1, args.length), 120);
    }

    private static Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        return Admin.create(p);
    }

    private static Map<String, Object> txn() throws Exception {
        String topic = "JK_TXN";
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all()
                .get(30, TimeUnit.SECONDS);
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "jk-txn");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, "kept-" + i));
            }
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, "dropped-" + i));
            }
            producer.flush();  // stored, then aborted
            producer.abortTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "last")).get();
            try (Admin admin = admin()) {
                TransactionDescription described = admin.describeTransactions(List.of("jk-txn"))
                    .description("jk-txn").get(30, TimeUnit.SECONDS);
                out.put("described_state", described.state().toString());
                out.put("described_partitions", described.topicPartitions().size());
                out.put("listed", admin.listTransactions().all().get(30, TimeUnit.SECONDS).size());
            }
            producer.commitTransaction();
        }
        out.put("committed", read("read_committed", topic, 4));
        out.put("uncommitted", read("read_uncommitted", topic, 7));
        return out;
    }

    private static List<String> read(String isolation, String topic, int want) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            TopicPartition partition = new TopicPartition(topic, 0);
            consumer.assign(List.of(partition));
            consumer.seekToBeginning(List.of(partition));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (got.size() < want && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    got.add(r.value());
                }
            }
        }
        return got;
    }
}
