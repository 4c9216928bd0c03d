package dev.wharf.javatests;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.admin.ConsumeStats;
import org.apache.rocketmq.common.admin.OffsetWrapper;
import org.apache.rocketmq.common.admin.TopicOffset;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Apache's RocketMQ 4.9 Java client (rocketmq-client 4.9.8) against a broker's remoting port,
 * as an application uses it. Usage: {@code Rmq4Scenarios NAMESRV_ADDR SCENARIO...}; the
 * scenarios run at once, each on its own topics, groups and client instances, and each prints
 * one JSON line {@code {"scenario": name, "ok": true|false, "seconds": s, ...}} with what it
 * sent and received; tests/broker/remoting/test_java_client.py judges them. One JVM for all:
 * a JVM and client start cost ~2 s, which eight separate programs would pay eight times.
 */
public final class Rmq4Scenarios {
    private static String namesrv;

    private Rmq4Scenarios() {
    }

    public static void main(String[] args) throws Exception {
        namesrv = args[0];
        Map<String, Callable<Map<String, Object>>> table = new LinkedHashMap<>();
        table.put("produce", Rmq4Scenarios::produce);
        table.put("orderly", Rmq4Scenarios::orderly);
        table.put("delay", Rmq4Scenarios::delay);
        table.put("filter", Rmq4Scenarios::filter);
        table.put("retry", Rmq4Scenarios::retry);
        table.put("transaction", Rmq4Scenarios::transaction);
        table.put("broadcast", Rmq4Scenarios::broadcast);
        table.put("litepull", Rmq4Scenarios::litePull);
        Scenarios.run(table, new ArrayList<>(List.of(args).subList(1, args.length)), 240);
    }

    // --- clients ----------------------------------------------------------------------------

    private static DefaultMQProducer producer(String group) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        setUp(producer, group);
        producer.start();
        return producer;
    }

    private static void setUp(DefaultMQProducer producer, String instance) {
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(instance);
        producer.setVipChannelEnabled(false);
        producer.setSendMsgTimeout(10_000);
    }

    private static DefaultMQPushConsumer pushConsumer(String group, String instance) {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(instance);
        consumer.setVipChannelEnabled(false);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        // Offsets reach the broker each second rather than each 5 s (the default): the
        // filter scenario times how soon committed offsets reach the queue ends.
        consumer.setPersistConsumerOffsetInterval(1000);
        return consumer;
    }

    private static DefaultMQAdminExt admin(String instance) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName(instance);
        admin.setVipChannelEnabled(false);
        admin.start();
        return admin;
    }

    private static Message message(String topic, String tags, String keys, String body) {
        return new Message(topic, tags, keys, body.getBytes(StandardCharsets.UTF_8));
    }

    /** What a consumer saw of one message. */
    private static Map<String, Object> seen(MessageExt m, String... props) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
        out.put("topic", m.getTopic());
        out.put("tags", m.getTags());
        out.put("keys", m.getKeys());
        out.put("queue_id", m.getQueueId());
        out.put("queue_offset", m.getQueueOffset());
        out.put("reconsume_times", m.getReconsumeTimes());
        out.put("msg_id", m.getMsgId());
        out.put("born_ms", m.getBornTimestamp());
        out.put("store_ms", m.getStoreTimestamp());
        out.put("received_ms", System.currentTimeMillis());
        Map<String, Object> user = new LinkedHashMap<>();
        for (String p : props) {
            user.put(p, m.getUserProperty(p));
        }
        out.put("props", user);
        return out;
    }

    private static Map<String, Object> sent(SendResult r) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("status", r.getSendStatus().name());
        out.put("msg_id", r.getMsgId());
        out.put("offset_msg_id", r.getOffsetMsgId());
        out.put("queue_id", r.getMessageQueue().getQueueId());
        out.put("queue_offset", r.getQueueOffset());
        return out;
    }

    private static MessageListenerConcurrently collect(List<Map<String, Object>> into, String... props) {
        return (msgs, context) -> {
            for (MessageExt m : msgs) {
                into.add(seen(m, props));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
    }

    private static boolean await(BooleanSupplier done, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!done.getAsBoolean()) {
            if (System.currentTimeMillis() >= deadline) {
                return false;
            }
            Thread.sleep(50);
        }
        return true;
    }

    private static long distinctBodies(Collection<Map<String, Object>> seen) {
        return seen.stream().map(m -> m.get("body")).distinct().count();
    }

    /** The broker's consumer offsets of a group against the queue ends (GET_CONSUME_STATS). */
    private static Map<String, Object> progress(DefaultMQAdminExt admin, String group) throws Exception {
        ConsumeStats stats = admin.examineConsumeStats(group);
        Map<String, Object> out = new LinkedHashMap<>();
        long lag = 0;
        long consumed = 0;
        Map<String, Object> queues = new LinkedHashMap<>();
        for (Map.Entry<MessageQueue, OffsetWrapper> e : stats.getOffsetTable().entrySet()) {
            OffsetWrapper w = e.getValue();
            lag += w.getBrokerOffset() - w.getConsumerOffset();
            consumed += w.getConsumerOffset();
            queues.put(e.getKey().getTopic() + ":" + e.getKey().getQueueId(),
                List.of(w.getBrokerOffset(), w.getConsumerOffset()));
        }
        out.put("lag", lag);
        out.put("consumer_offsets", consumed);
        out.put("queues", queues);
        return out;
    }

    // --- scenarios --------------------------------------------------------------------------

    /** Sync, async, oneway and batch sends, then a push consumer receiving every message. */
    private static Map<String, Object> produce() throws Exception {
        String topic = "J_PRODUCE";
        Map<String, Object> out = new LinkedHashMap<>();
        DefaultMQProducer producer = producer("PG_PRODUCE");
        List<Object> sync = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            Message m = message(topic, "TagS", "key-sync-" + i, "sync-" + i);
            m.putUserProperty("seq", String.valueOf(i));
            sync.add(sent(producer.send(m)));
        }
        out.put("sync", sync);
        List<Object> async = new CopyOnWriteArrayList<>();
        CountDownLatch acked = new CountDownLatch(4);
        for (int i = 0; i < 4; i++) {
            Message m = message(topic, "TagA", "key-async-" + i, "async-" + i);
            m.putUserProperty("seq", String.valueOf(i));
            producer.send(m, new SendCallback() {
                @Override
                public void onSuccess(SendResult r) {
                    async.add(sent(r));
                    acked.countDown();
                }

                @Override
                public void onException(Throwable e) {
                    async.add("exception: " + e);
                    acked.countDown();
                }
            });
        }
        out.put("async_all_acked", acked.await(20, TimeUnit.SECONDS));
        out.put("async", async);
        for (int i = 0; i < 4; i++) {
            Message m = message(topic, "TagO", "key-oneway-" + i, "oneway-" + i);
            m.putUserProperty("seq", String.valueOf(i));
            producer.sendOneway(m);
        }
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            Message m = message(topic, "TagB", "key-batch-" + i, "batch-" + i);
            m.putUserProperty("seq", String.valueOf(i));
            batch.add(m);
        }
        SendResult batchResult = producer.send(batch);
        out.put("batch", sent(batchResult));

        List<Map<String, Object>> received = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer consumer = pushConsumer("CG_PRODUCE", "CG_PRODUCE");
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener(collect(received, "seq"));
        consumer.start();
        await(() -> distinctBodies(received) >= 16, 40_000);
        Thread.sleep(1000); // anything more (a duplicate) shows up too
        consumer.shutdown();
        producer.shutdown();
        out.put("received", received);
        return out;
    }

    /** MessageQueueSelector sends of three orders and a MessageListenerOrderly consumer. */
    private static Map<String, Object> orderly() throws Exception {
        String topic = "J_ORDER";
        Map<String, Object> out = new LinkedHashMap<>();
        DefaultMQProducer producer = producer("PG_ORDER");
        MessageQueueSelector byOrder = (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size());
        List<Object> sends = new ArrayList<>();
        for (int seq = 0; seq < 10; seq++) {
            for (int order = 0; order < 3; order++) {
                Message m = message(topic, "TagOrder", "order-" + order, "o" + order + "-" + seq);
                Map<String, Object> s = sent(producer.send(m, byOrder, order));
                s.put("body", "o" + order + "-" + seq);
                sends.add(s);
            }
        }
        out.put("sent", sends);
        List<Map<String, Object>> received = new CopyOnWriteArrayList<>();
        Map<Integer, String> busy = new ConcurrentHashMap<>();
        List<String> overlaps = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer consumer = pushConsumer("CG_ORDER", "CG_ORDER");
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerOrderly) (msgs, context) -> {
            int queue = context.getMessageQueue().getQueueId();
            String me = Thread.currentThread().getName();
            String other = busy.putIfAbsent(queue, me);
            if (other != null) { // two threads in one queue at once: the lock failed
                overlaps.add(queue + ": " + other + " and " + me);
            }
            for (MessageExt m : msgs) {
                received.add(seen(m));
            }
            busy.remove(queue, me);
            return ConsumeOrderlyStatus.SUCCESS;
        });
        consumer.start();
        await(() -> distinctBodies(received) >= 30, 40_000);
        Thread.sleep(500);
        consumer.shutdown();
        producer.shutdown();
        out.put("received", received);
        out.put("overlaps", overlaps);
        return out;
    }

    /** A message at delay level 2, timed from its send to its delivery. */
    private static Map<String, Object> delay() throws Exception {
        String topic = "J_DELAY";
        Map<String, Object> out = new LinkedHashMap<>();
        DefaultMQProducer producer = producer("PG_DELAY");
        producer.send(message(topic, "TagNow", "now", "now"));
        List<Map<String, Object>> received = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer consumer = pushConsumer("CG_DELAY", "CG_DELAY");
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener(collect(received));
        consumer.start();
        // The consumer is live (it has its queues) once the undelayed message arrived.
        out.put("live", await(() -> distinctBodies(received) >= 1, 30_000));
        Message later = message(topic, "TagLater", "later", "later");
        later.setDelayTimeLevel(2);
        long sentAt = System.currentTimeMillis();
        out.put("sent", sent(producer.send(later)));
        out.put("sent_ms", sentAt);
        await(() -> distinctBodies(received) >= 2, 30_000);
        consumer.shutdown();
        producer.shutdown();
        out.put("received", received);
        return out;
    }

    /**
     * Tag and SQL92 push consumers, both postSubscriptionWhenPull modes, over queues of which
     * some hold only messages they do not match; then how soon the broker's committed offsets
     * reach every queue's end (the lag mqadmin consumerProgress shows).
     */
    private static Map<String, Object> filter() throws Exception {
        String topic = "J_FILTER";
        Map<String, Object> out = new LinkedHashMap<>();
        DefaultMQProducer producer = producer("PG_FILTER");
        MessageQueueSelector byIndex = (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size());
        for (int i = 0; i < 24; i++) {
            int queue = i % 4; // queue 0: TagA; 1: TagB; 2 and 3: TagC; red only on queue 2
            String tag = queue == 0 ? "TagA" : queue == 1 ? "TagB" : "TagC";
            Message m = message(topic, tag, "f-" + i, "f-" + i);
            m.putUserProperty("color", queue == 2 ? "red" : "blue");
            m.putUserProperty("n", String.valueOf(i));
            producer.send(m, byIndex, i);
        }
        Map<String, String> groups = new LinkedHashMap<>();
        groups.put("CG_TAGS", "TAG:TagA || TagB");
        groups.put("CG_SQL", "SQL:color = 'red' AND n >= 10");
        groups.put("CG_SQL_POST", "SQL:color = 'red' AND n >= 10");
        Map<String, Integer> expected = Map.of("CG_TAGS", 12, "CG_SQL", 4, "CG_SQL_POST", 4);
        Map<String, List<Map<String, Object>>> received = new LinkedHashMap<>();
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        for (Map.Entry<String, String> g : groups.entrySet()) {
            String group = g.getKey();
            List<Map<String, Object>> got = new CopyOnWriteArrayList<>();
            received.put(group, got);
            DefaultMQPushConsumer consumer = pushConsumer(group, group);
            String expr = g.getValue().substring(4);
            if (g.getValue().startsWith("SQL:")) {
                consumer.subscribe(topic, MessageSelector.bySql(expr));
            } else {
                consumer.subscribe(topic, expr);
            }
            consumer.setPostSubscriptionWhenPull(group.endsWith("_POST"));
            consumer.registerMessageListener(collect(got, "color", "n"));
            consumer.start();
            consumers.add(consumer);
        }
        boolean all = await(() -> received.entrySet().stream()
            .allMatch(e -> distinctBodies(e.getValue()) >= expected.get(e.getKey())), 40_000);
        out.put("all_received", all);
        long matchedAt = System.currentTimeMillis();
        DefaultMQAdminExt admin = admin("admin-filter");
        // When each queue's committed offset first reached its end (GET_CONSUME_STATS), in s
        // after every matching message was received. The push consumer persists offsets 10 s
        // after its start and then each second; a queue with nothing to match reaches its end
        // sooner only when the broker answers the filtered-out range at once (the next pull
        // carries the new offset). Up to 25 s: a broker holding that range for the whole long
        // poll (15 s) shows here as times past 15 s.
        Map<String, Map<String, Object>> caughtUp = new LinkedHashMap<>();
        Map<String, Object> last = new LinkedHashMap<>();
        for (String group : groups.keySet()) {
            caughtUp.put(group, new LinkedHashMap<>());
        }
        long deadline = matchedAt + 25_000;
        while (System.currentTimeMillis() < deadline
            && !caughtUp.values().stream().allMatch(q -> q.size() == 4)) {
            for (String group : groups.keySet()) {
                Map<String, Object> p = progress(admin, group);
                last.put(group, p);
                @SuppressWarnings("unchecked")
                Map<String, List<Long>> queues = (Map<String, List<Long>>) p.get("queues");
                for (Map.Entry<String, List<Long>> q : queues.entrySet()) {
                    if (q.getKey().startsWith(topic + ":") && q.getValue().get(0).equals(q.getValue().get(1))) {
                        caughtUp.get(group).putIfAbsent(q.getKey().substring(topic.length() + 1),
                            (System.currentTimeMillis() - matchedAt) / 1000.0);
                    }
                }
            }
            Thread.sleep(200);
        }
        out.put("queue_at_end_after_s", caughtUp);
        out.put("progress", last);
        for (DefaultMQPushConsumer c : consumers) {
            c.shutdown();
        }
        admin.shutdown();
        producer.shutdown();
        out.put("received", received);
        return out;
    }

    /** RECONSUME_LATER: a message retried once, another retried until it goes to the DLQ. */
    private static Map<String, Object> retry() throws Exception {
        String topic = "J_RETRY";
        String group = "CG_RETRY";
        Map<String, Object> out = new LinkedHashMap<>();
        DefaultMQProducer producer = producer("PG_RETRY");
        producer.send(message(topic, "TagR", "retry-once", "once"));
        producer.send(message(topic, "TagR", "retry-always", "always"));
        List<Map<String, Object>> received = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer consumer = pushConsumer(group, group);
        consumer.subscribe(topic, "*");
        consumer.setMaxReconsumeTimes(2);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                received.add(seen(m));
            }
            MessageExt m = msgs.get(0);
            String body = new String(m.getBody(), StandardCharsets.UTF_8);
            boolean fail = body.equals("always") || m.getReconsumeTimes() == 0;
            return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        await(() -> received.size() >= 5, 60_000); // once x2, always x3 (maxReconsumeTimes 2)
        String dlq = "%DLQ%" + group;
        DefaultMQAdminExt admin = admin("admin-retry");
        List<Object> inDlq = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 20_000;
        while (System.currentTimeMillis() < deadline) {
            try {
                long count = 0;
                for (TopicOffset o : admin.examineTopicStats(dlq).getOffsetTable().values()) {
                    count += o.getMaxOffset() - o.getMinOffset();
                }
                if (count > 0) {
                    for (MessageExt m : admin.queryMessage(dlq, "retry-always", 32, 0, Long.MAX_VALUE)
                        .getMessageList()) {
                        inDlq.add(seen(m));
                    }
                    break;
                }
            } catch (Exception notYet) { // the DLQ topic is made by the first message it gets
                out.put("dlq_not_yet", notYet.toString());
            }
            Thread.sleep(250);
        }
        Thread.sleep(1500); // a fourth delivery of "always" would be back by now (1 s levels)
        consumer.shutdown();
        admin.shutdown();
        producer.shutdown();
        out.put("received", received);
        out.put("dlq", inDlq);
        return out;
    }

    /** TransactionMQProducer: commit, rollback, and UNKNOW resolved by the check-back. */
    private static Map<String, Object> transaction() throws Exception {
        String topic = "J_TX";
        Map<String, Object> out = new LinkedHashMap<>();
        List<String> checks = new CopyOnWriteArrayList<>();
        TransactionMQProducer producer = new TransactionMQProducer("PG_TX");
        setUp(producer, "PG_TX");
        // A check-back goes to a producer the broker knows by its heartbeat (Apache's as
        // Wharf's). The client sends its first one at start + 1 s, to the brokers it has
        // routes for by then: none when its first send came later (a loaded VM), and the
        // next is 30 s on (heartbeatBrokerInterval), past this scenario's 40 s wait for the
        // check. Each second here.
        producer.setHeartbeatBrokerInterval(1_000);
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                switch ((String) arg) {
                    case "commit":
                        return LocalTransactionState.COMMIT_MESSAGE;
                    case "rollback":
                        return LocalTransactionState.ROLLBACK_MESSAGE;
                    default:
                        return LocalTransactionState.UNKNOW;
                }
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                checks.add(body);
                return body.equals("check") ? LocalTransactionState.COMMIT_MESSAGE
                    : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        producer.start();
        Map<String, Object> states = new LinkedHashMap<>();
        for (String body : List.of("commit", "rollback", "check")) {
            TransactionSendResult r = producer.sendMessageInTransaction(
                message(topic, "TagTx", "tx-" + body, body), body);
            states.put(body, r.getSendStatus().name() + "/" + r.getLocalTransactionState().name());
        }
        out.put("states", states);
        List<Map<String, Object>> received = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer consumer = pushConsumer("CG_TX", "CG_TX");
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener(collect(received));
        consumer.start();
        await(() -> distinctBodies(received) >= 2 && !checks.isEmpty(), 40_000);
        Thread.sleep(2000); // a rolled-back message delivered late would show up by now
        consumer.shutdown();
        producer.shutdown();
        out.put("checks", checks);
        out.put("received", received);
        return out;
    }

    /** Two BROADCASTING consumers of one group: each gets every message. */
    private static Map<String, Object> broadcast() throws Exception {
        String topic = "J_BCAST";
        Map<String, Object> out = new LinkedHashMap<>();
        DefaultMQProducer producer = producer("PG_BCAST");
        for (int i = 0; i < 6; i++) {
            producer.send(message(topic, "TagB", "b-" + i, "b-" + i));
        }
        Map<String, List<Map<String, Object>>> received = new LinkedHashMap<>();
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        for (String instance : List.of("bcast-1", "bcast-2")) {
            List<Map<String, Object>> got = new CopyOnWriteArrayList<>();
            received.put(instance, got);
            DefaultMQPushConsumer consumer = pushConsumer("CG_BCAST", instance);
            consumer.setMessageModel(MessageModel.BROADCASTING);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener(collect(got));
            consumer.start();
            consumers.add(consumer);
        }
        await(() -> received.values().stream().allMatch(g -> distinctBodies(g) >= 6), 40_000);
        Thread.sleep(500);
        for (DefaultMQPushConsumer c : consumers) {
            c.shutdown();
        }
        producer.shutdown();
        out.put("received", received);
        return out;
    }

    /** DefaultLitePullConsumer: subscribe + commitSync, and assign + seek + commitSync. */
    private static Map<String, Object> litePull() throws Exception {
        String topic = "J_LITE";
        Map<String, Object> out = new LinkedHashMap<>();
        DefaultMQProducer producer = producer("PG_LITE");
        for (int i = 0; i < 8; i++) {
            producer.send(message(topic, "TagL", "l-" + i, "l-" + i));
        }
        DefaultMQAdminExt admin = admin("admin-lite");

        DefaultLitePullConsumer sub = new DefaultLitePullConsumer("CG_LITE_SUB");
        sub.setNamesrvAddr(namesrv);
        sub.setInstanceName("CG_LITE_SUB");
        sub.setVipChannelEnabled(false);
        sub.setAutoCommit(false);
        sub.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        sub.subscribe(topic, "*");
        long started = System.currentTimeMillis();
        sub.start();
        List<Map<String, Object>> subGot = new ArrayList<>();
        long firstAt = -1;
        while (distinctBodies(subGot) < 8 && System.currentTimeMillis() - started < 40_000) {
            for (MessageExt m : sub.poll(1000)) {
                if (firstAt < 0) {
                    firstAt = System.currentTimeMillis();
                }
                subGot.add(seen(m));
            }
        }
        sub.commitSync();
        sub.shutdown(); // commitSync leaves the offsets to the next persist; shutdown persists
        out.put("subscribe_first_message_after_s", firstAt < 0 ? null : (firstAt - started) / 1000.0);
        out.put("subscribe_received", subGot);

        DefaultLitePullConsumer assign = new DefaultLitePullConsumer("CG_LITE_ASSIGN");
        assign.setNamesrvAddr(namesrv);
        assign.setInstanceName("CG_LITE_ASSIGN");
        assign.setVipChannelEnabled(false);
        assign.setAutoCommit(false);
        assign.start();
        Collection<MessageQueue> queues = assign.fetchMessageQueues(topic);
        assign.assign(queues);
        for (MessageQueue mq : queues) {
            assign.seek(mq, 0);
        }
        List<Map<String, Object>> assignGot = new ArrayList<>();
        started = System.currentTimeMillis();
        while (distinctBodies(assignGot) < 8 && System.currentTimeMillis() - started < 40_000) {
            for (MessageExt m : assign.poll(1000)) {
                assignGot.add(seen(m));
            }
        }
        Map<MessageQueue, Long> next = new LinkedHashMap<>();
        for (Map<String, Object> m : assignGot) { // commit each queue past its last message
            for (MessageQueue mq : queues) {
                if (mq.getQueueId() == (Integer) m.get("queue_id")) {
                    next.merge(mq, (Long) m.get("queue_offset") + 1, Math::max);
                }
            }
        }
        assign.commitSync(next, true);
        out.put("assign_queues", queues.size());
        out.put("assign_received", assignGot);

        // The subscribe consumer's offsets were sent by its shutdown; the assign consumer's
        // commitSync(offsets, persist=true) sent them at once.
        Map<String, Object> committed = new LinkedHashMap<>();
        for (String group : List.of("CG_LITE_SUB", "CG_LITE_ASSIGN")) {
            Map<String, Object> p = Collections.emptyMap();
            long deadline = System.currentTimeMillis() + 15_000;
            while (System.currentTimeMillis() < deadline) {
                p = progress(admin, group);
                if ((Long) p.get("consumer_offsets") >= 8) {
                    break;
                }
                Thread.sleep(200);
            }
            committed.put(group, p);
        }
        out.put("committed", committed);
        assign.shutdown();
        admin.shutdown();
        producer.shutdown();
        return out;
    }
}
