package dev.wharf.peers;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The same client against Apache's broker and against Wharf (tests/bench/peers.py runs it, one
 * JVM a phase, and reads its one JSON line).
 *
 * <p>The RocketMQ 4.x phases do what rocketmq-example's benchmark Producer and Consumer do
 * (org.apache.rocketmq.example.benchmark, not published on Maven Central): {@code threads}
 * threads each sending synchronously with DefaultMQProducer, one message at a time (the
 * tool's -w, default 64), and a DefaultMQPushConsumer with its defaults (20 consume threads,
 * pulls of 32). The 5.x phases do the same with the official gRPC client (Producer.send from
 * {@code threads} threads; a PushConsumer with its defaults). The latency phases send at a
 * fixed rate from one thread, the send time (System.nanoTime) in the body's first 8 bytes, and
 * a consumer in the same JVM records send-to-listener time.
 *
 * <pre>
 * rmq4-produce  NAMESRV  TOPIC COUNT SIZE THREADS
 * rmq4-consume  NAMESRV  TOPIC GROUP COUNT
 * rmq4-latency  NAMESRV  TOPIC GROUP RATE COUNT SIZE
 * rmq5-produce  ENDPOINT TOPIC COUNT SIZE THREADS
 * rmq5-consume  ENDPOINT TOPIC GROUP COUNT
 * rmq5-latency  ENDPOINT TOPIC GROUP RATE COUNT SIZE
 * kafka-latency BOOTSTRAP TOPIC PARTITIONS RATE COUNT SIZE
 * </pre>
 *
 * Output: {"phase": ..., "count": N, "seconds": S, "failed": F[, "p50_us", "p99_us", ...]}.
 */
public final class PeerBench {
    /** Messages sent before a latency phase's measured ones (JIT, routes, rebalance). */
    private static final int WARMUP_SECONDS = 3;

    private PeerBench() {
    }

    public static void main(String[] args) throws Exception {
        String phase = args[0];
        String[] rest = Arrays.copyOfRange(args, 1, args.length);
        String out = switch (phase) {
            case "rmq4-produce" -> rmq4Produce(rest[0], rest[1], i(rest[2]), i(rest[3]), i(rest[4]));
            case "rmq4-consume" -> rmq4Consume(rest[0], rest[1], rest[2], i(rest[3]));
            case "rmq4-latency" -> rmq4Latency(rest[0], rest[1], rest[2], i(rest[3]), i(rest[4]), i(rest[5]));
            case "rmq5-produce" -> rmq5Produce(rest[0], rest[1], i(rest[2]), i(rest[3]), i(rest[4]));
            case "rmq5-consume" -> rmq5Consume(rest[0], rest[1], rest[2], i(rest[3]));
            case "rmq5-latency" -> rmq5Latency(rest[0], rest[1], rest[2], i(rest[3]), i(rest[4]), i(rest[5]));
            case "kafka-latency" -> kafkaLatency(rest[0], rest[1], i(rest[2]), i(rest[3]), i(rest[4]), i(rest[5]));
            default -> throw new IllegalArgumentException("unknown phase " + phase);
        };
        System.out.println("{\"phase\": \"" + phase + "\", " + out + "}");
        System.out.flush();
        // The clients' non-daemon threads (schedulers, netty) may outlive shutdown a while.
        Runtime.getRuntime().halt(0);
    }

    private static int i(String s) {
        return Integer.parseInt(s);
    }

    private static String result(long count, long nanos, long failed) {
        return String.format("\"count\": %d, \"seconds\": %.6f, \"failed\": %d", count, nanos / 1e9, failed);
    }

    private static byte[] body(int size) {
        byte[] b = new byte[size];
        new java.util.Random(7).nextBytes(b);
        return b;
    }

    /** Runs {@code threads} senders until {@code count} sends were made; nanoseconds taken. */
    private static long parallel(int threads, long count, AtomicLong failed, Sender sender) throws Exception {
        AtomicLong next = new AtomicLong();
        List<Thread> all = new ArrayList<>();
        long started = System.nanoTime();
        for (int t = 0; t < threads; t++) {
            Thread th = new Thread(() -> {
                while (next.getAndIncrement() < count) {
                    try {
                        if (!sender.send()) {
                            failed.incrementAndGet();
                        }
                    } catch (Exception e) {
                        failed.incrementAndGet();
                    }
                }
            });
            th.start();
            all.add(th);
        }
        for (Thread th : all) {
            th.join();
        }
        return System.nanoTime() - started;
    }

    private interface Sender {
        boolean send() throws Exception;
    }

    // --- latency bookkeeping ---------------------------------------------------------------

    /** Send-to-receive times of the measured messages (sequence numbers >= warm-up). */
    private static final class Latencies {
        private final long[] micros;
        private final int warmup;
        private final CountDownLatch done;
        private final AtomicLong seen = new AtomicLong();

        Latencies(int warmup, int count) {
            this.micros = new long[count];
            this.warmup = warmup;
            this.done = new CountDownLatch(count);
        }

        void received(ByteBuffer body) {
            long now = System.nanoTime();
            long seq = body.getLong(0);
            long sent = body.getLong(8);
            int slot = (int) (seq - warmup);
            if (slot >= 0 && slot < micros.length && micros[slot] == 0) {
                micros[slot] = Math.max(1, (now - sent) / 1000);
                seen.incrementAndGet();
                done.countDown();
            }
        }

        String report(long nanos, long failed, long waitMs) throws InterruptedException {
            done.await(waitMs, TimeUnit.MILLISECONDS);
            long[] got = Arrays.stream(micros).filter(v -> v > 0).sorted().toArray();
            long lost = micros.length - got.length;
            if (got.length == 0) {
                return result(0, nanos, failed + lost);
            }
            return result(got.length, nanos, failed + lost)
                + String.format(", \"p50_us\": %d, \"p99_us\": %d, \"p999_us\": %d, \"max_us\": %d",
                    pct(got, 0.50), pct(got, 0.99), pct(got, 0.999), got[got.length - 1]);
        }

        private static long pct(long[] sorted, double q) {
            return sorted[Math.min(sorted.length - 1, (int) Math.ceil(q * sorted.length) - 1)];
        }
    }

    /** Sends warm-up then measured messages at {@code rate} per second from this thread. */
    private static long paced(int rate, int warmup, int count, int size, AtomicLong failed, PacedSender sender)
            throws Exception {
        byte[] payload = body(size);
        long interval = 1_000_000_000L / rate;
        long started = System.nanoTime();
        for (long seq = 0; seq < warmup + count; seq++) {
            long due = started + seq * interval;
            long wait;
            while ((wait = due - System.nanoTime()) > 0) {
                if (wait > 200_000) {
                    Thread.sleep(0, 100_000);
                } else {
                    Thread.onSpinWait();
                }
            }
            byte[] b = payload.clone();
            ByteBuffer.wrap(b).putLong(0, seq).putLong(8, System.nanoTime());
            try {
                if (!sender.send(b)) {
                    failed.incrementAndGet();
                }
            } catch (Exception e) {
                failed.incrementAndGet();
            }
        }
        return System.nanoTime() - started;
    }

    private interface PacedSender {
        boolean send(byte[] body) throws Exception;
    }

    // --- RocketMQ 4.x (remoting) --------------------------------------------------------------

    private static DefaultMQProducer producer4(String namesrv, String group) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(group + "-" + ProcessHandle.current().pid());
        // No VIP channel (listenPort - 2): the same connection to either broker.
        producer.setVipChannelEnabled(false);
        // The benchmark Producer's settings: bodies are never compressed.
        producer.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        producer.setSendMsgTimeout(10_000);
        producer.start();
        return producer;
    }

    private static DefaultMQPushConsumer consumer4(String namesrv, String group, String topic) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(group + "-" + ProcessHandle.current().pid());
        consumer.setVipChannelEnabled(false);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        return consumer;
    }

    private static String rmq4Produce(String namesrv, String topic, int count, int size, int threads)
            throws Exception {
        DefaultMQProducer producer = producer4(namesrv, "bench_producer");
        byte[] payload = body(size);
        // One send first: the route, the connection.
        producer.send(new Message(topic, payload));
        AtomicLong failed = new AtomicLong();
        long nanos = parallel(threads, count, failed, () -> {
            SendResult r = producer.send(new Message(topic, payload));
            return r.getSendStatus() == SendStatus.SEND_OK;
        });
        producer.shutdown();
        return result(count, nanos, failed.get());
    }

    private static String rmq4Consume(String namesrv, String topic, String group, int count) throws Exception {
        DefaultMQPushConsumer consumer = consumer4(namesrv, group, topic);
        AtomicLong got = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);
        AtomicLong first = new AtomicLong();
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            first.compareAndSet(0, System.nanoTime());
            if (got.addAndGet(msgs.size()) >= count) {
                done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long started = System.nanoTime();
        consumer.start();
        boolean all = done.await(300, TimeUnit.SECONDS);
        long nanos = System.nanoTime() - started;
        consumer.shutdown();
        return result(got.get(), nanos, all ? 0 : count - got.get())
            + String.format(", \"first_s\": %.6f", (first.get() - started) / 1e9);
    }

    private static String rmq4Latency(String namesrv, String topic, String group, int rate, int count, int size)
            throws Exception {
        int warmup = rate * WARMUP_SECONDS;
        Latencies lat = new Latencies(warmup, count);
        DefaultMQPushConsumer consumer = consumer4(namesrv, group, topic);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                lat.received(ByteBuffer.wrap(m.getBody()));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        DefaultMQProducer producer = producer4(namesrv, "bench_latency");
        AtomicLong failed = new AtomicLong();
        long nanos = paced(rate, warmup, count, size, failed,
            b -> producer.send(new Message(topic, b)).getSendStatus() == SendStatus.SEND_OK);
        String out = lat.report(nanos, failed.get(), 10_000);
        producer.shutdown();
        consumer.shutdown();
        return out;
    }

    // --- RocketMQ 5.x (gRPC) ----------------------------------------------------------------

    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    private static ClientConfiguration config5(String endpoint) {
        return ClientConfiguration.newBuilder().setEndpoints(endpoint).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10)).build();
    }

    private static String rmq5Produce(String endpoint, String topic, int count, int size, int threads)
            throws Exception {
        Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config5(endpoint))
            .setTopics(topic).build();
        byte[] payload = body(size);
        producer.send(PROVIDER.newMessageBuilder().setTopic(topic).setBody(payload).build());
        AtomicLong failed = new AtomicLong();
        long nanos = parallel(threads, count, failed, () -> {
            producer.send(PROVIDER.newMessageBuilder().setTopic(topic).setBody(payload).build());
            return true;
        });
        producer.close();
        return result(count, nanos, failed.get());
    }

    private static PushConsumer consumer5(String endpoint, String topic, String group,
            java.util.function.Consumer<ByteBuffer> each) throws Exception {
        return PROVIDER.newPushConsumerBuilder().setClientConfiguration(config5(endpoint))
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL))
            .setMessageListener(m -> {
                each.accept(m.getBody());
                return ConsumeResult.SUCCESS;
            })
            .build();
    }

    private static String rmq5Consume(String endpoint, String topic, String group, int count) throws Exception {
        AtomicLong got = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);
        long started = System.nanoTime();
        PushConsumer consumer = consumer5(endpoint, topic, group, b -> {
            if (got.incrementAndGet() >= count) {
                done.countDown();
            }
        });
        boolean all = done.await(300, TimeUnit.SECONDS);
        long nanos = System.nanoTime() - started;
        consumer.close();
        return result(got.get(), nanos, all ? 0 : count - got.get());
    }

    private static String rmq5Latency(String endpoint, String topic, String group, int rate, int count, int size)
            throws Exception {
        int warmup = rate * WARMUP_SECONDS;
        Latencies lat = new Latencies(warmup, count);
        PushConsumer consumer = consumer5(endpoint, topic, group, lat::received);
        Producer producer = PROVIDER.newProducerBuilder().setClientConfiguration(config5(endpoint))
            .setTopics(topic).build();
        AtomicLong failed = new AtomicLong();
        long nanos = paced(rate, warmup, count, size, failed, b -> {
            producer.send(PROVIDER.newMessageBuilder().setTopic(topic).setBody(b).build());
            return true;
        });
        String out = lat.report(nanos, failed.get(), 10_000);
        producer.close();
        consumer.close();
        return out;
    }

    // --- Kafka ------------------------------------------------------------------------------

    private static String kafkaLatency(String bootstrap, String topic, int partitions, int rate, int count, int size)
            throws Exception {
        int warmup = rate * WARMUP_SECONDS;
        Latencies lat = new Latencies(warmup, count);
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
        List<TopicPartition> parts = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            parts.add(new TopicPartition(topic, p));
        }
        consumer.assign(parts);
        consumer.seekToEnd(parts);
        for (TopicPartition tp : parts) {
            consumer.position(tp);
        }
        Thread poller = new Thread(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    lat.received(ByteBuffer.wrap(r.value()));
                }
            }
        });
        poller.setDaemon(true);
        poller.start();
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        // As EndToEndLatency sets it: a record leaves at once (the default lingers 5 ms).
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp);
        AtomicLong failed = new AtomicLong();
        long nanos = paced(rate, warmup, count, size, failed, b -> {
            producer.send(new ProducerRecord<>(topic, b), (md, e) -> {
                if (e != null) {
                    failed.incrementAndGet();
                }
            });
            return true;
        });
        producer.flush();
        String out = lat.report(nanos, failed.get(), 10_000);
        producer.close(Duration.ofSeconds(5));
        return out;
    }
}
