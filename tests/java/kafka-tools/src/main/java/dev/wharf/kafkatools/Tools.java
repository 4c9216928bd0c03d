package dev.wharf.kafkatools;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;

/** What the tool programs (ConnectTool, StreamsTool) share: the result line, bounded waits and
 *  the admin calls. Compiled into each of the two programs (kafka-tools/connect and
 *  kafka-tools/streams: Connect and Streams resolve different client versions). One JSON line
 *  on stdout, {@code {"scenario": name, "ok": true|false, "seconds": s, ...}}, for pytest. */
final class Tools {
    static final ObjectMapper JSON = new ObjectMapper();

    private Tools() {
    }

    /** Runs the scenario, prints its line and exits the JVM (the tools' threads are not all
     *  daemons). */
    static void run(String name, Callable<Map<String, Object>> scenario) {
        long start = System.nanoTime();
        Map<String, Object> out;
        try {
            out = scenario.call();
            out.put("ok", true);
        } catch (Throwable e) {
            StringWriter trace = new StringWriter();
            e.printStackTrace(new PrintWriter(trace));
            out = new LinkedHashMap<>();
            out.put("ok", false);
            out.put("error", trace.toString());
        }
        out.put("scenario", name);
        out.put("seconds", (System.nanoTime() - start) / 1e9);
        try {
            System.out.println(JSON.writeValueAsString(out));
        } catch (IOException e) {
            e.printStackTrace();
        }
        System.out.flush();
        System.exit(0);
    }

    static void await(String what, BooleanSupplier done, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!done.getAsBoolean()) {
            if (System.currentTimeMillis() >= deadline) {
                throw new AssertionError("not within " + timeoutMs + " ms: " + what);
            }
            Thread.sleep(100);
        }
    }

    static double since(long t0) {
        return Math.round((System.nanoTime() - t0) / 1e7) / 100.0;
    }

    static Admin admin(String bootstrap) {
        return Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap));
    }

    static void createTopic(Admin admin, String name, int partitions) throws Exception {
        try {
            admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1))).all()
                .get(20, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) {
                throw e;
            }
        }
    }

    /** Each topic's cleanup.policy as DescribeConfigs answers it (null: not reported). */
    static Map<String, Object> cleanupPolicies(Admin admin, Collection<String> topics) throws Exception {
        List<ConfigResource> resources = new ArrayList<>();
        for (String topic : topics) {
            resources.add(new ConfigResource(ConfigResource.Type.TOPIC, topic));
        }
        Map<ConfigResource, Config> configs = admin.describeConfigs(resources).all().get(20, TimeUnit.SECONDS);
        Map<String, Object> out = new TreeMap<>();
        for (Map.Entry<ConfigResource, Config> e : configs.entrySet()) {
            ConfigEntry entry = e.getValue().get("cleanup.policy");
            out.put(e.getKey().name(), entry == null ? null : entry.value());
        }
        return out;
    }
}
