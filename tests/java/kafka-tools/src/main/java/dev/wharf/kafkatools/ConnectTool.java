package dev.wharf.kafkatools;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.connect.cli.ConnectDistributed;
import org.apache.kafka.connect.runtime.Connect;
import org.apache.kafka.connect.runtime.distributed.DistributedHerder;

/**
 * Kafka Connect in distributed mode against a broker's Kafka port, as a data team runs it.
 * Usage: {@code ConnectTool BOOTSTRAP WORK_DIR}; one JSON line on stdout (Tools.run), judged
 * by tests/broker/kafka/test_kafka_connect_streams.py, which also checks the compacted topics
 * the workers leave behind.
 *
 * <p>A distributed worker (ConnectDistributed, its REST API on a free port) copies a file
 * into a topic with FileStreamSource and that topic into a file with FileStreamSink; the
 * worker is stopped while lines are still being copied, lines are added while it is down, and
 * a new worker of the same group resumes both connectors from its config and offset topics.
 */
public final class ConnectTool {
    private static String bootstrap;
    private static Path work;

    private ConnectTool() {
    }

    public static void main(String[] args) {
        bootstrap = args[0];
        work = Path.of(args[1]);
        Tools.run("connect", ConnectTool::connect);
    }

    static final String LINES_TOPIC = "connect-lines";
    static final List<String> CONNECT_TOPICS = List.of("connect-configs", "connect-offsets", "connect-status");

    private static Map<String, String> workerProps() {
        Map<String, String> props = new HashMap<>();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", "wharf-connect");
        props.put("key.converter", "org.apache.kafka.connect.storage.StringConverter");
        props.put("value.converter", "org.apache.kafka.connect.storage.StringConverter");
        props.put("config.storage.topic", CONNECT_TOPICS.get(0));
        props.put("offset.storage.topic", CONNECT_TOPICS.get(1));
        props.put("status.storage.topic", CONNECT_TOPICS.get(2));
        props.put("config.storage.replication.factor", "1");
        props.put("offset.storage.replication.factor", "1");
        props.put("status.storage.replication.factor", "1");
        // One partition each: the compaction check reads every key's versions in one log.
        props.put("offset.storage.partitions", "1");
        props.put("status.storage.partitions", "1");
        props.put("offset.flush.interval.ms", "300");
        props.put("listeners", "http://127.0.0.1:0");
        props.put("rest.advertised.host.name", "127.0.0.1");
        // A lone worker's restart: its connectors are reassigned at once, not after 5 minutes.
        props.put("scheduled.rebalance.max.delay.ms", "0");
        // The connectors are on the class path with their ServiceLoader manifests: no scan.
        props.put("plugin.discovery", "service_load");
        return props;
    }

    private static final HttpClient HTTP = HttpClient.newHttpClient();

    private static HttpResponse<String> rest(URI base, String method, String path, Object body) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(base.resolve(path))
            .timeout(Duration.ofSeconds(30)).header("Content-Type", "application/json");
        request.method(method, body == null ? HttpRequest.BodyPublishers.noBody()
            : HttpRequest.BodyPublishers.ofString(Tools.JSON.writeValueAsString(body)));
        return HTTP.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    /** PUT a connector's config (created or replaced), retried while the worker rebalances. */
    private static void putConnector(URI base, String name, Map<String, String> config) throws Exception {
        String last = "";
        long deadline = System.currentTimeMillis() + 60_000;
        while (System.currentTimeMillis() < deadline) {
            try {
                HttpResponse<String> answer = rest(base, "PUT", "connectors/" + name + "/config", config);
                if (answer.statusCode() / 100 == 2) {
                    return;
                }
                last = answer.statusCode() + " " + answer.body();
            } catch (IOException e) {
                last = e.toString();
            }
            Thread.sleep(250);
        }
        throw new AssertionError("connector " + name + " not accepted within 60 s: " + last);
    }

    private static String state(URI base, String name) {
        try {
            HttpResponse<String> answer = rest(base, "GET", "connectors/" + name + "/status", null);
            if (answer.statusCode() != 200) {
                return "HTTP " + answer.statusCode();
            }
            Map<?, ?> status = Tools.JSON.readValue(answer.body(), Map.class);
            List<?> tasks = (List<?>) status.get("tasks");
            String task = tasks.isEmpty() ? "no task" : String.valueOf(((Map<?, ?>) tasks.get(0)).get("state"));
            return ((Map<?, ?>) status.get("connector")).get("state") + "/" + task;
        } catch (Exception e) {
            return e.toString();
        }
    }

    private static List<String> lines(Path file) {
        try {
            return Files.exists(file) ? Files.readAllLines(file) : List.of();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    private static void append(Path file, int from, int to) throws IOException {
        StringBuilder text = new StringBuilder();
        for (int i = from; i < to; i++) {
            text.append(String.format("line-%04d%n", i));
        }
        Files.writeString(file, text, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }

    private static Map<String, Object> connect() throws Exception {
        Path dir = Files.createDirectories(work.resolve("connect"));
        Path source = dir.resolve("in.txt");
        Path sink = dir.resolve("out.txt");
        Map<String, Object> out = new LinkedHashMap<>();
        Map<String, Object> timings = new LinkedHashMap<>();
        out.put("timings", timings);
        long t0 = System.nanoTime();
        try (Admin admin = Tools.admin(bootstrap)) {
            Tools.createTopic(admin, LINES_TOPIC, 1);
        }
        append(source, 0, 100);
        Connect<DistributedHerder> first = new ConnectDistributed().startConnect(workerProps());
        List<String> sinkLines;
        try {
            URI base = first.rest().serverUrl();
            Map<String, String> src = new LinkedHashMap<>();
            src.put("connector.class", "org.apache.kafka.connect.file.FileStreamSourceConnector");
            src.put("file", source.toString());
            src.put("topic", LINES_TOPIC);
            src.put("tasks.max", "1");
            Map<String, String> snk = new LinkedHashMap<>();
            snk.put("connector.class", "org.apache.kafka.connect.file.FileStreamSinkConnector");
            snk.put("file", sink.toString());
            snk.put("topics", LINES_TOPIC);
            snk.put("tasks.max", "1");
            putConnector(base, "file-source", src);
            putConnector(base, "file-sink", snk);
            timings.put("connectors_put", Tools.since(t0));
            Tools.await("100 lines in the sink, " + state(base, "file-source") + " " + state(base, "file-sink"),
                () -> lines(sink).size() >= 100, 60_000);
            timings.put("first_100", Tools.since(t0));
            // A second version of the source's config (and of its task's) for the compaction check.
            src.put("batch.size", "500");
            putConnector(base, "file-source", src);
            append(source, 100, 200);
            Tools.await("200 lines in the sink", () -> lines(sink).size() >= 200, 60_000);
            Thread.sleep(1500); // several offset flushes: lines 0-199 committed on both sides
            out.put("states_first", List.of(state(base, "file-source"), state(base, "file-sink")));
            append(source, 200, 250); // and the worker stops while it copies them
        } finally {
            first.stop();
            first.awaitStop();
        }
        out.put("sink_at_stop", lines(sink).size());
        timings.put("first_stopped", Tools.since(t0));
        append(source, 250, 300); // while no worker runs
        Connect<DistributedHerder> second = new ConnectDistributed().startConnect(workerProps());
        try {
            URI base = second.rest().serverUrl();
            Tools.await("300 distinct lines in the sink after the restart, " + state(base, "file-source")
                + " " + state(base, "file-sink"),
                () -> new HashSet<>(lines(sink)).size() >= 300, 60_000);
            timings.put("all_300", Tools.since(t0));
            Thread.sleep(1000); // a duplicate still on its way would show
            out.put("states_second", List.of(state(base, "file-source"), state(base, "file-sink")));
        } finally {
            second.stop();
            second.awaitStop();
        }
        sinkLines = lines(sink);
        out.put("source", lines(source));
        out.put("sink", sinkLines);
        try (Admin admin = Tools.admin(bootstrap)) {
            out.put("cleanup_policy", Tools.cleanupPolicies(admin, CONNECT_TOPICS));
        }
        return out;
    }
}
