package dev.wharf.javatests;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

/** Runs a program's named scenarios at once in one JVM, each printing one JSON line
 *  {@code {"scenario": name, "ok": true|false, "seconds": s, ...}} on stdout for pytest. */
final class Scenarios {
    private Scenarios() {
    }

    /** Runs {@code names} ("all" or none: every one of {@code table}) and exits the JVM: the
     *  clients' threads are not all daemons. Exit 3 when one did not end within the time. */
    static void run(Map<String, Callable<Map<String, Object>>> table, List<String> names,
                    long timeoutSeconds) throws InterruptedException {
        if (names.isEmpty() || names.contains("all")) {
            names = new ArrayList<>(table.keySet());
        }
        ExecutorService pool = Executors.newFixedThreadPool(names.size());
        for (String name : names) {
            Callable<Map<String, Object>> scenario = table.get(name);
            if (scenario == null) {
                throw new IllegalArgumentException("no scenario " + name + ": " + table.keySet());
            }
            pool.submit(() -> report(name, scenario));
        }
        pool.shutdown();
        boolean done = pool.awaitTermination(timeoutSeconds, TimeUnit.SECONDS);
        System.out.flush();
        System.exit(done ? 0 : 3);
    }

    static void report(String name, Callable<Map<String, Object>> scenario) {
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
        print(Json.write(out));
    }

    static void print(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static boolean await(BooleanSupplier done, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!done.getAsBoolean()) {
            if (System.currentTimeMillis() >= deadline) {
                return false;
            }
            Thread.sleep(50);
        }
        return true;
    }
}
