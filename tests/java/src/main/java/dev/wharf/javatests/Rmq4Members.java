package dev.wharf.javatests;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Apache's RocketMQ 4.9 Java client (rocketmq-client 4.9.8) as long-lived processes that a
 * test steers line by line: what Rmq4Scenarios cannot do in one self-contained run, because
 * the test acts between the steps (starts and SIGKILLs a second JVM, kills and restarts a
 * broker, runs mqadmin while a consumer is up). Usage: {@code Rmq4Members NAMESRV_ADDR}, then
 * commands on stdin, one a line:
 * <ul>
 * <li>{@code produce TOPIC COUNT INTERVAL_MS PREFIX}: a thread sending COUNT sync messages
 *     (body and key PREFIX-i), one line per outcome: {@code sent} (status, broker, queue,
 *     offset, ids) or {@code send_failed}; {@code produced} at the end;</li>
 * <li>{@code stop PREFIX}: that producer thread stops after its send in flight;</li>
 * <li>{@code join GROUP TOPIC MEMBER}: a push consumer (instance MEMBER, from the first
 *     offset), a {@code got} line per message it consumes and an {@code alloc} line per
 *     rebalance (the consumer ids it saw and the queues it took), then {@code joined} with its
 *     client id;</li>
 * <li>{@code leave MEMBER}: its shutdown (offsets persisted, unregistered), then {@code left};</li>
 * <li>{@code quit}.</li>
 * </ul>
 * Every line is one JSON object with {@code "event"} and {@code "ms"} (wall clock); tests
 * read them through tests/javaclients.py's Steered.
 */
public final class Rmq4Members {
    private static String namesrv;
    private static final Map<String, DefaultMQPushConsumer> MEMBERS = new ConcurrentHashMap<>();
    private static final Map<String, Boolean> STOPPED = new ConcurrentHashMap<>();
    private static DefaultMQProducer producer;

    private Rmq4Members() {
    }

    public static void main(String[] args) throws Exception {
        namesrv = args[0];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        event("ready", new LinkedHashMap<>());
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] w = line.trim().split("\\s+");
            try {
                switch (w[0]) {
                    case "produce" -> produce(w[1], Integer.parseInt(w[2]), Long.parseLong(w[3]), w[4]);
                    case "stop" -> STOPPED.put(w[1], true);
                    case "join" -> join(w[1], w[2], w[3]);
                    case "leave" -> leave(w[1]);
                    case "quit" -> System.exit(0);
                    default -> throw new IllegalArgumentException("unknown command: " + line);
                }
            } catch (Exception e) {
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("command", line);
                out.put("error", e.toString());
                event("error", out);
            }
        }
        System.exit(0); // stdin closed: the test is gone
    }

    private static void event(String name, Map<String, Object> fields) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("event", name);
        out.put("ms", System.currentTimeMillis());
        out.putAll(fields);
        Scenarios.print(Json.write(out));
    }

    private static String queue(MessageQueue mq) {
        return mq.getBrokerName() + ":" + mq.getQueueId();
    }

    private static synchronized DefaultMQProducer producer() throws Exception {
        if (producer == null) {
            producer = new DefaultMQProducer("PG_MEMBERS");
            producer.setNamesrvAddr(namesrv);
            producer.setInstanceName("PG_MEMBERS");
            producer.setVipChannelEnabled(false);
            producer.setSendMsgTimeout(5_000);
            // Routes each second (default 30 s): a restarted broker is sent to again soon.
            producer.setPollNameServerInterval(1_000);
            producer.start();
        }
        return producer;
    }

    private static void produce(String topic, int count, long intervalMs, String prefix) throws Exception {
        DefaultMQProducer p = producer();
        STOPPED.remove(prefix);
        Thread t = new Thread(() -> {
            int sent = 0;
            int failed = 0;
            for (int i = 0; i < count && !STOPPED.containsKey(prefix); i++) {
                String body = prefix + "-" + i;
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("body", body);
                try {
                    SendResult r = p.send(new Message(topic, "TagM", body, body.getBytes(StandardCharsets.UTF_8)));
                    out.put("status", r.getSendStatus().name());
                    out.put("queue", queue(r.getMessageQueue()));
                    out.put("offset", r.getQueueOffset());
                    out.put("msg_id", r.getMsgId());
                    out.put("offset_msg_id", r.getOffsetMsgId());
                    event("sent", out);
                    sent++;
                } catch (Exception e) {
                    out.put("error", e.toString());
                    event("send_failed", out);
                    failed++;
                }
                if (intervalMs > 0) {
                    try {
                        Thread.sleep(intervalMs);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("prefix", prefix);
            out.put("sent", sent);
            out.put("failed", failed);
            event("produced", out);
        }, "produce-" + prefix);
        t.start();
    }

    private static void join(String group, String topic, String member) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(member);
        consumer.setVipChannelEnabled(false);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPersistConsumerOffsetInterval(1_000); // default 5 s: fewer redeliveries
        consumer.setPollNameServerInterval(1_000);
        consumer.setAllocateMessageQueueStrategy(new Recorded(member));
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("member", member);
                out.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
                out.put("queue", queue(context.getMessageQueue()));
                out.put("offset", m.getQueueOffset());
                out.put("msg_id", m.getMsgId());
                event("got", out);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        MEMBERS.put(member, consumer);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("member", member);
        out.put("client_id", consumer.buildMQClientId());
        event("joined", out);
    }

    private static void leave(String member) {
        DefaultMQPushConsumer consumer = MEMBERS.remove(member);
        if (consumer == null) {
            throw new IllegalArgumentException("no member " + member);
        }
        consumer.shutdown();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("member", member);
        event("left", out);
    }

    /** RocketMQ's default strategy (AllocateMessageQueueAveragely), each result printed: the
     *  queues a member holds from one rebalance to the next (dropped ones are dropped at once
     *  by a concurrently consuming push consumer). */
    private static final class Recorded implements AllocateMessageQueueStrategy {
        private final AllocateMessageQueueStrategy inner = new AllocateMessageQueueAveragely();
        private final String member;

        Recorded(String member) {
            this.member = member;
        }

        @Override
        public List<MessageQueue> allocate(String group, String currentCID, List<MessageQueue> mqAll,
                                           List<String> cidAll) {
            List<MessageQueue> mine = inner.allocate(group, currentCID, mqAll, cidAll);
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("member", member);
            out.put("topic", mqAll.isEmpty() ? "" : mqAll.get(0).getTopic());
            out.put("cids", new ArrayList<>(cidAll));
            List<String> queues = new ArrayList<>();
            for (MessageQueue mq : mine) {
                queues.add(queue(mq));
            }
            out.put("queues", queues);
            event("alloc", out);
            return mine;
        }

        @Override
        public String getName() {
            return inner.getName();
        }
    }
}
