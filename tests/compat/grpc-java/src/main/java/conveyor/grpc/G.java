package conveyor.grpc;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.java.misc.MetadataUtils;

/**
 * Shared plumbing of the gRPC checks: environment, resource names, client construction, deadline-based waiting,
 * a background SimpleConsumer receive loop, message content comparison and the PASS/FAIL output contract.
 *
 * Output contract: every check prints exactly one line on stdout, "PASS grpc-java-VERSION/CHECK" or
 * "FAIL grpc-java-VERSION/CHECK: reason". Everything else goes to stderr, each line prefixed with "[CHECK] " (or
 * "[SCENARIO] ") so grpc.sh can show a failed check's own diagnostics.
 */
final class G {
    private G() {
    }

    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    /** The receive invisible duration used throughout; 10 s is the minimum the SDK/proxy accept for receive. */
    static final Duration INVISIBLE = Duration.ofSeconds(10);
    /** SimpleConsumer long-polling duration (the proxy clamps long polling to at least 5 s). */
    static final Duration AWAIT = Duration.ofSeconds(5);

    // ---------------------------------------------------------------- environment

    static String env(String name, String def) {
        String v = System.getenv(name);
        return v == null || v.isBlank() ? def : v.trim();
    }

    static String endpoint() {
        String e = env("GRPC_ENDPOINT", null);
        if (e == null) {
            throw new IllegalStateException("GRPC_ENDPOINT (host:port of the gRPC endpoint) is not set");
        }
        return e;
    }

    static boolean tls() {
        return Boolean.parseBoolean(env("GRPC_TLS", "false"));
    }

    /** Shared by grpc.sh (which creates the topics and groups with mqadmin) and the programs. */
    static String runId() {
        String r = env("GRPC_RUN_ID", null);
        if (r == null) {
            throw new IllegalStateException("GRPC_RUN_ID is not set (grpc.sh sets it; Resources prints the names)");
        }
        return r;
    }

    static String clientVersion() {
        String v = MetadataUtils.getVersion();
        return v == null ? "unknown" : v;
    }

    static String checkName(String check) {
        return "grpc-java-" + clientVersion() + "/" + check;
    }

    /** A wait's limit: DEFAULT seconds, scaled by GRPC_TIMEOUT_SCALE (default 1). */
    static long timeoutMs(long defaultSecs) {
        double scale = Double.parseDouble(env("GRPC_TIMEOUT_SCALE", "1"));
        return (long) (defaultSecs * 1000 * scale);
    }

    static ClientConfiguration config() {
        return ClientConfiguration.newBuilder()
                .setEndpoints(endpoint())
                .enableSsl(tls())
                .setRequestTimeout(Duration.ofSeconds(10))
                .build();
    }

    // ---------------------------------------------------------------- resources (created by grpc.sh with mqadmin)

    static String topic(String key) {
        return "grpc_" + key + "_" + runId();
    }

    static String group(String key) {
        return "grpcg_" + key + "_" + runId();
    }

    static String dlqTopic(String groupKey) {
        return "%DLQ%" + group(groupKey);
    }

    // ---------------------------------------------------------------- output

    private static final Object OUT = new Object();
    private static final long T0 = System.currentTimeMillis();

    static void stdout(String line) {
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static void stderr(String tag, String line) {
        synchronized (OUT) {
            String t = String.format("%7.3f", (System.currentTimeMillis() - T0) / 1000.0);
            for (String l : line.split("\n")) {
                System.err.println("[" + tag + "] " + t + " " + l);
            }
            System.err.flush();
        }
    }

    // ---------------------------------------------------------------- scenarios and checks

    interface Body {
        void run(Scenario s) throws Exception;
    }

    /**
     * One scenario: a body that reports one or more checks. Problems are collected per check; a check passes when
     * the body reported it without problems. A check the body did not reach is failed with the body's exception.
     */
    static final class Scenario {
        final String name;
        final List<String> checks;
        final Body body;
        private final Map<String, List<String>> problems = new ConcurrentHashMap<>();
        private final Set<String> done = ConcurrentHashMap.newKeySet();
        private final Map<String, Boolean> passed = new ConcurrentHashMap<>();

        Scenario(String name, List<String> checks, Body body) {
            this.name = name;
            this.checks = checks;
            this.body = body;
            for (String c : checks) {
                problems.put(c, Collections.synchronizedList(new ArrayList<>()));
            }
        }

        void diag(String line) {
            stderr(name, line);
        }

        void diag(String check, String line) {
            stderr(check, line);
        }

        /** Records a problem for CHECK (it will fail; the first problem is the reason). */
        void problem(String check, String p) {
            List<String> l = problems.get(check);
            if (l == null) {
                throw new IllegalArgumentException("unknown check " + check);
            }
            l.add(p);
            stderr(check, "problem: " + p);
        }

        int problemCount(String check) {
            return problems.get(check).size();
        }

        /** Prints CHECK's verdict now (once): PASS when no problem was recorded. */
        void report(String check) {
            if (!done.add(check)) {
                return;
            }
            List<String> l = problems.get(check);
            synchronized (l) {
                if (l.isEmpty()) {
                    passed.put(check, true);
                    stdout("PASS " + checkName(check));
                } else {
                    passed.put(check, false);
                    String more = l.size() > 1 ? " (and " + (l.size() - 1) + " more problems, see stderr)" : "";
                    stdout("FAIL " + checkName(check) + ": " + l.get(0) + more);
                }
            }
        }

        /** Fails CHECK now with REASON, unless it was already reported. */
        void failNow(String check, String reason) {
            if (!done.add(check)) {
                return;
            }
            passed.put(check, false);
            stderr(check, "FAIL: " + reason);
            stdout("FAIL " + checkName(check) + ": " + reason);
        }

        boolean reported(String check) {
            return done.contains(check);
        }

        boolean allPassed() {
            for (String c : checks) {
                if (!Boolean.TRUE.equals(passed.get(c))) {
                    return false;
                }
            }
            return true;
        }
    }

    /** A scenario failure with a reason: fails every check of the scenario not yet reported. */
    static final class Failure extends Exception {
        Failure(String message) {
            super(message);
        }
    }

    /**
     * Runs the scenarios concurrently (each in its own thread, with its own topics, groups and clients), selected
     * by GRPC_CHECKS (space-separated check names; default all), then halts the JVM: status 0 when every selected
     * check passed. A scenario still running after GRPC_PROGRAM_SECS (default 170 s) has its unreported checks
     * failed.
     */
    static void runAll(Scenario... scenarios) {
        String sel = env("GRPC_CHECKS", "");
        Set<String> selected = new HashSet<>(Arrays.asList(sel.split("\\s+")));
        selected.remove("");
        List<Scenario> run = new ArrayList<>();
        for (Scenario s : scenarios) {
            if (selected.isEmpty() || s.checks.stream().anyMatch(selected::contains)) {
                run.add(s);
            }
        }
        stderr("main", "client rocketmq-client-java " + clientVersion() + ", endpoint " + endpoint() + ", tls " + tls()
                + ", run id " + runId() + ", scenarios " + run.stream().map(s -> s.name).reduce((a, b) -> a + " " + b)
                .orElse("(none)"));
        CountDownLatch latch = new CountDownLatch(run.size());
        for (Scenario s : run) {
            Thread t = new Thread(() -> {
                long t0 = System.currentTimeMillis();
                try {
                    s.body.run(s);
                    for (String c : s.checks) {
                        if (!s.reported(c)) {
                            s.failNow(c, "the scenario ended without a verdict for this check (test bug)");
                        }
                    }
                } catch (Failure f) {
                    for (String c : s.checks) {
                        s.failNow(c, f.getMessage());
                    }
                } catch (Throwable e) {
                    StringBuilder sb = new StringBuilder("exception: " + e);
                    for (StackTraceElement el : e.getStackTrace()) {
                        sb.append("\n  at ").append(el);
                    }
                    s.diag(sb.toString());
                    for (String c : s.checks) {
                        s.failNow(c, "unexpected " + e);
                    }
                } finally {
                    s.diag("scenario took " + (System.currentTimeMillis() - t0) + " ms");
                    latch.countDown();
                }
            }, "scenario-" + s.name);
            t.setDaemon(true);
            t.start();
        }
        long limit = Long.parseLong(env("GRPC_PROGRAM_SECS", "170"));
        boolean finished;
        try {
            finished = latch.await(limit, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            finished = false;
        }
        boolean ok = true;
        for (Scenario s : run) {
            if (!finished) {
                for (String c : s.checks) {
                    s.failNow(c, "scenario " + s.name + " did not finish within " + limit + " s");
                }
            }
            ok &= s.allPassed();
        }
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(ok ? 0 : 1);
    }

    // ---------------------------------------------------------------- waiting

    /** Waits until COND holds or TIMEOUT_MS pass (polls every 50 ms, a progress note on stderr every 10 s). */
    static void await(Scenario s, String what, long timeoutMs, BooleanSupplier cond, Supplier<String> progress)
            throws Failure, InterruptedException {
        long start = System.currentTimeMillis();
        long deadline = start + timeoutMs;
        long nextNote = start + 10_000;
        while (!cond.getAsBoolean()) {
            long now = System.currentTimeMillis();
            if (now >= deadline) {
                throw new Failure("timed out after " + timeoutMs / 1000 + " s waiting for " + what
                        + (progress == null ? "" : " (" + progress.get() + ")"));
            }
            if (now >= nextNote) {
                s.diag(".. still waiting for " + what + (progress == null ? "" : ": " + progress.get()));
                nextNote = now + 10_000;
            }
            Thread.sleep(50);
        }
    }

    /**
     * Builds a client, retrying for up to 30 s: right after mqadmin created a topic the endpoint may not see its
     * route yet, and the SDK's start-up fails on a topic it cannot route.
     */
    static <T> T build(Scenario s, String what, Callable<T> c) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs(30);
        Exception last;
        int attempts = 0;
        while (true) {
            attempts++;
            try {
                T t = c.call();
                if (attempts > 1) {
                    s.diag(what + " started after " + attempts + " attempts");
                }
                return t;
            } catch (Exception e) {
                last = e;
                s.diag(what + " did not start (attempt " + attempts + "): " + e);
            }
            if (System.currentTimeMillis() >= deadline) {
                throw new Failure("could not start " + what + " within 30 s: " + last);
            }
            Thread.sleep(1000);
        }
    }

    static void closeQuietly(Scenario s, AutoCloseable c) {
        if (c == null) {
            return;
        }
        try {
            c.close();
        } catch (Exception e) {
            s.diag("close of " + c.getClass().getSimpleName() + " failed: " + e);
        }
    }

    // ---------------------------------------------------------------- messages

    /** A message this test sent, with what it must look like when received. */
    static final class Sent {
        final String check;
        final int index;
        final String key;
        final String tag;
        final byte[] body;
        final List<String> keys;
        final Map<String, String> props;
        String messageGroup;
        Long deliveryTimestamp;
        String messageId;
        long sendStart;
        long sendEnd;

        Sent(String check, int index, String tag) {
            this.check = check;
            this.index = index;
            this.tag = tag;
            this.key = "k_" + check + "_" + runId() + "_" + index;
            this.keys = Arrays.asList(key, "alt_" + index);
            // A body with every byte value, of a length that varies with the index (binary-safe transport).
            int len = 64 + (index * 37) % 1500;
            byte[] b = new byte[len];
            byte[] head = (key + "|").getBytes(StandardCharsets.UTF_8);
            for (int i = 0; i < len; i++) {
                b[i] = i < head.length ? head[i] : (byte) ((i * 31 + index) & 0xff);
            }
            this.body = b;
            Map<String, String> p = new LinkedHashMap<>();
            p.put("p_check", check);
            p.put("p_index", Integer.toString(index));
            p.put("p_text", "caf\u00e9 \u2713 " + index);
            this.props = p;
        }

        Message build(String topic) {
            MessageBuilder mb = PROVIDER.newMessageBuilder().setTopic(topic).setBody(body)
                    .setKeys(keys.toArray(new String[0]));
            if (tag != null) {
                mb.setTag(tag);
            }
            for (Map.Entry<String, String> e : props.entrySet()) {
                mb.addProperty(e.getKey(), e.getValue());
            }
            if (messageGroup != null) {
                mb.setMessageGroup(messageGroup);
            }
            if (deliveryTimestamp != null) {
                mb.setDeliveryTimestamp(deliveryTimestamp);
            }
            return mb.build();
        }

        /** Differences between this message and a received view (empty: identical). */
        List<String> differences(MessageView v, String topic, boolean compareId) {
            List<String> d = new ArrayList<>();
            if (!topic.equals(v.getTopic())) {
                d.add("topic " + v.getTopic() + " != " + topic);
            }
            byte[] got = bytes(v.getBody());
            if (!Arrays.equals(got, body)) {
                d.add("body differs (" + got.length + " bytes received, " + body.length + " sent)");
            }
            if (!Objects.equals(v.getTag().orElse(null), tag)) {
                d.add("tag " + v.getTag().orElse(null) + " != " + tag);
            }
            if (!new LinkedHashSet<>(v.getKeys()).equals(new LinkedHashSet<>(keys))) {
                d.add("keys " + v.getKeys() + " != " + keys);
            }
            Map<String, String> gotProps = new TreeMap<>(v.getProperties());
            gotProps.keySet().removeAll(INTERNAL_PROPERTIES);
            if (!gotProps.equals(new TreeMap<>(props))) {
                d.add("user properties " + new TreeMap<>(v.getProperties()) + " != " + new TreeMap<>(props));
            }
            if (compareId && messageId != null && !messageId.equals(v.getMessageId().toString())) {
                d.add("message id " + v.getMessageId() + " != " + messageId + " (from the send receipt)");
            }
            if (messageGroup != null && !messageGroup.equals(v.getMessageGroup().orElse(null))) {
                d.add("message group " + v.getMessageGroup().orElse(null) + " != " + messageGroup);
            }
            if (deliveryTimestamp != null && !deliveryTimestamp.equals(v.getDeliveryTimestamp().orElse(null))) {
                d.add("delivery timestamp " + v.getDeliveryTimestamp().orElse(null) + " != " + deliveryTimestamp);
            }
            return d;
        }
    }

    /**
     * RocketMQ-internal message properties that Apache RocketMQ 5.3.3's proxy passes through as user properties
     * (they are not in MessageConst's system-key set it strips): the FIFO sharding key, the transaction id, the
     * broker's check-back counter. An endpoint may or may not show them; any other extra property is a difference.
     */
    static final Set<String> INTERNAL_PROPERTIES = Set.of("__SHARDINGKEY", "__transactionId__",
            "TRANSACTION_CHECK_TIMES");

    static byte[] bytes(ByteBuffer bb) {
        ByteBuffer d = bb.duplicate();
        byte[] out = new byte[d.remaining()];
        d.get(out);
        return out;
    }

    /** The first key of a received message (our Sent.key), or null. */
    static String keyOf(MessageView v) {
        for (String k : v.getKeys()) {
            if (k.startsWith("k_")) {
                return k;
            }
        }
        return null;
    }

    static String describe(MessageView v) {
        return "id=" + v.getMessageId() + " key=" + keyOf(v) + " tag=" + v.getTag().orElse(null) + " attempt="
                + v.getDeliveryAttempt() + " group=" + v.getMessageGroup().orElse(null);
    }

    // ---------------------------------------------------------------- SimpleConsumer receive loop

    /** One message as the receive loop got it. */
    static final class Arrival {
        final MessageView view;
        /** When receive() returned it. */
        final long at;
        /** When the receive() call that returned it was issued (the message became invisible no earlier). */
        final long receiveStart;

        Arrival(MessageView view, long at, long receiveStart) {
            this.view = view;
            this.at = at;
            this.receiveStart = receiveStart;
        }
    }

    /**
     * A SimpleConsumer with a thread that calls receive() back to back and queues what arrives (optionally acking
     * each message at once). The consumer is built (and its first receive issued) before the scenario sends.
     */
    static final class Receiver implements AutoCloseable {
        final Scenario s;
        final String what;
        final SimpleConsumer consumer;
        final LinkedBlockingQueue<Arrival> queue = new LinkedBlockingQueue<>();
        final List<Arrival> all = Collections.synchronizedList(new ArrayList<>());
        private final Duration invisible;
        private final boolean autoAck;
        private final int batch;
        private volatile boolean running = true;
        private final Thread thread;
        volatile int receiveErrors;
        volatile int ackErrors;
        volatile String lastError;

        Receiver(Scenario s, String group, String topic, FilterExpression filter, Duration invisible, boolean autoAck,
                 int batch) throws Exception {
            this.s = s;
            this.what = "SimpleConsumer(" + group + " on " + topic + " " + filter.getExpression() + ")";
            this.invisible = invisible;
            this.autoAck = autoAck;
            this.batch = batch;
            this.consumer = build(s, what, () -> PROVIDER.newSimpleConsumerBuilder()
                    .setClientConfiguration(config())
                    .setConsumerGroup(group)
                    .setAwaitDuration(AWAIT)
                    .setSubscriptionExpressions(Collections.singletonMap(topic, filter))
                    .build());
            this.thread = new Thread(this::loop, "receive-" + group);
            this.thread.setDaemon(true);
            this.thread.start();
        }

        private void loop() {
            while (running) {
                long t0 = System.currentTimeMillis();
                List<MessageView> got;
                try {
                    got = consumer.receive(batch, invisible);
                } catch (Exception e) {
                    if (!running) {
                        return;
                    }
                    receiveErrors++;
                    lastError = e.toString();
                    s.diag(what + ": receive failed: " + e);
                    try {
                        Thread.sleep(200); // back off a failing endpoint instead of spinning
                    } catch (InterruptedException ie) {
                        return;
                    }
                    continue;
                }
                long t = System.currentTimeMillis();
                for (MessageView v : got) {
                    if (autoAck) {
                        try {
                            consumer.ack(v);
                        } catch (Exception e) {
                            ackErrors++;
                            lastError = "ack: " + e;
                            s.diag(what + ": ack of " + describe(v) + " failed: " + e);
                        }
                    }
                    Arrival a = new Arrival(v, t, t0);
                    all.add(a);
                    queue.add(a);
                }
            }
        }

        /** The next arrival, or null once UNTIL (epoch ms) has passed. */
        Arrival poll(long until) throws InterruptedException {
            long wait = until - System.currentTimeMillis();
            if (wait <= 0) {
                return queue.poll();
            }
            return queue.poll(wait, TimeUnit.MILLISECONDS);
        }

        String errors() {
            return "receive errors " + receiveErrors + ", ack errors " + ackErrors
                    + (lastError == null ? "" : ", last: " + lastError);
        }

        @Override
        public void close() {
            running = false;
            try {
                consumer.close();
            } catch (IOException e) {
                s.diag(what + ": close failed: " + e);
            }
            thread.interrupt();
        }
    }

    /**
     * Receives until every message of EXPECT (by key) has arrived once, checking each arrival's content; duplicates
     * and unknown messages are problems of CHECK. Returns the first arrival of each key.
     */
    static Map<String, Arrival> receiveAll(Scenario s, String check, Receiver r, String topic, Map<String, Sent> expect,
                                           long timeoutMs) throws Exception {
        Map<String, Arrival> first = new LinkedHashMap<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (first.size() < expect.size()) {
            Arrival a = r.poll(deadline);
            if (a == null) {
                List<String> missing = new ArrayList<>();
                for (String k : expect.keySet()) {
                    if (!first.containsKey(k)) {
                        missing.add(k);
                    }
                }
                s.problem(check, "received " + first.size() + " of " + expect.size() + " messages within "
                        + timeoutMs / 1000 + " s; missing e.g. " + missing.subList(0, Math.min(5, missing.size()))
                        + "; " + r.errors());
                return first;
            }
            checkArrival(s, check, a, topic, expect, first);
        }
        return first;
    }

    static void checkArrival(Scenario s, String check, Arrival a, String topic, Map<String, Sent> expect,
                             Map<String, Arrival> first) {
        String k = keyOf(a.view);
        Sent sent = k == null ? null : expect.get(k);
        if (sent == null) {
            s.problem(check, "received a message that was not sent to this topic: " + describe(a.view));
            return;
        }
        if (first.containsKey(k)) {
            s.problem(check, "received " + k + " twice (" + describe(a.view) + ")");
            return;
        }
        first.put(k, a);
        List<String> d = sent.differences(a.view, topic, true);
        if (!d.isEmpty()) {
            s.problem(check, k + " arrived different from what was sent: " + String.join("; ", d));
        }
        if (a.view.getDeliveryAttempt() != 1) {
            s.problem(check, k + " arrived with deliveryAttempt " + a.view.getDeliveryAttempt() + ", expected 1");
        }
    }

    static Map<String, Sent> byKey(List<Sent> list) {
        Map<String, Sent> m = new LinkedHashMap<>();
        for (Sent x : list) {
            m.put(x.key, x);
        }
        return m;
    }
}
