package conveyor.grpc;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.zip.CRC32;

import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * mixed-pop-group: one consumer group consumed at once by a remoting push consumer in POP mode and a gRPC
 * SimpleConsumer, as Apache RocketMQ 5 documents it (PushConsumer and SimpleConsumer, both pop-based with
 * server-managed progress, may share a group). grpc.sh's setup (Resources) creates the topic (4 queues) and the group
 * and switches the group to POP for the topic with `mqadmin setConsumeMode -m POP -q 0` (SET_MESSAGE_REQUEST_MODE).
 *
 * The remoting consumer is rocketmq-client 5.3.3's DefaultMQPushConsumer with clientRebalance=false (it then takes
 * its queues and their mode from QUERY_ASSIGNMENT), popInvisibleTime 15 s, 4 messages per pop; it runs in a child JVM
 * (remoting/MixedRemotingConsumer.java on java-rmq5.classpath: the remoting client and the gRPC SDK bring clashing
 * unshaded libraries) whose RPC hook reports what went over the wire. The gRPC SimpleConsumer receives up to 4 with
 * a 15 s invisible duration and acks each message at once. Once both consume (the remoting consumer has popped),
 * 4 producer threads send 200 messages concurrently. Passes when:
 *   - the remoting consumer really pops: QUERY_ASSIGNMENT answered mode POP for the topic, POP_MESSAGE requests
 *     for it, no PULL_MESSAGE for it, every message it consumed carries a POP_CK receipt;
 *   - every message is consumed and acknowledged (gRPC ack OK, remoting ACK_MESSAGE answered SUCCESS), with the
 *     content sent (gRPC: body, tag, keys, properties, id; remoting: body CRC, id, topic);
 *   - both kinds got a share;
 *   - no message is delivered twice, except again after a delivery that was not acknowledged in time (no successful
 *     ack before its invisibility ended: gRPC receive call + 15 s, a lower bound of the endpoint's deadline; remoting:
 *     the pop time + invisible time of its POP_CK), and then not before that deadline; watched until 15 s + 12 s
 *     after the last delivery (Apache redelivers about 5 s late);
 *   - the group's backlog (examineConsumeStats, what mqadmin consumerProgress shows) reaches 0 within 30 s, with
 *     the topic's 200 messages in its broker offsets.
 */
public final class MixedGroup {
    static final String CHECK = "mixed-pop-group";
    static final int COUNT = 200;
    static final int SENDERS = 4;
    static final Duration GRPC_INVISIBLE = Duration.ofSeconds(15);
    static final long REMOTING_INVISIBLE_MS = 15000;
    static final long LATE_MS = 12000;

    public static void main(String[] args) {
        G.runAll(new G.Scenario("mixed-pop-group", List.of(CHECK), MixedGroup::mixed));
    }

    /** One delivery of a message to one consumer. */
    static final class Delivery {
        final String kind; // "grpc" or "remoting"
        final String key;
        /** gRPC: the receive call's start; remoting: the server's pop time (from POP_CK). */
        final long popLow;
        /** The latest the endpoint can have popped it: gRPC: receive return; remoting: the pop time. */
        final long popHigh;
        /** The earliest its invisibility can end. */
        final long deadline;
        final long at;
        volatile long ackAt = -1;
        volatile boolean ackOk;
        volatile String ackInfo = "no ack";
        final String popCk; // remoting only
        final String detail;

        Delivery(String kind, String key, long popLow, long popHigh, long deadline, long at, String popCk,
                 String detail) {
            this.kind = kind;
            this.key = key;
            this.popLow = popLow;
            this.popHigh = popHigh;
            this.deadline = deadline;
            this.at = at;
            this.popCk = popCk;
            this.detail = detail;
        }

        boolean ackedInTime() {
            return ackOk && ackAt >= 0 && ackAt < deadline;
        }

        @Override
        public String toString() {
            return kind + "@" + at + " (" + detail + ", invisible until >= " + deadline + ", " + ackInfo + ")";
        }
    }

    /** What the remoting child reported. */
    static final class Child {
        final Process process;
        final PrintWriter in;
        final List<String[]> assignments = new CopyOnWriteArrayList<>();
        final List<String> pulls = new CopyOnWriteArrayList<>();
        final Map<String, Integer> popCodes = new ConcurrentHashMap<>();
        final Map<String, Integer> popRequests = new ConcurrentHashMap<>();
        final Map<String, Integer> pullCodes = new ConcurrentHashMap<>();
        final List<String> backlog = new CopyOnWriteArrayList<>();
        final Map<String, Delivery> byCk = new ConcurrentHashMap<>();
        final Map<String, String[]> earlyAcks = new ConcurrentHashMap<>();
        volatile String started;
        volatile String backlogEnd;
        volatile String connection;
        volatile String stopped;
        volatile int badCk;

        Child(Process p) {
            this.process = p;
            this.in = new PrintWriter(new OutputStreamWriter(p.getOutputStream(), StandardCharsets.UTF_8), true);
        }

        int pops(String topic) {
            return popCodes.entrySet().stream().filter(e -> e.getKey().startsWith(topic + " "))
                    .mapToInt(Map.Entry::getValue).sum();
        }
    }

    static void mixed(G.Scenario s) throws Exception {
        String topic = G.topic("mixed");
        String group = G.group("mixed");
        String logDir = G.env("GRPC_LOG_DIR", System.getProperty("java.io.tmpdir"));
        String cpFile = G.env("GRPC_RMQ5_CLASSPATH_FILE", null);
        String javaDir = G.env("GRPC_JAVA_DIR", null);
        String namesrv = G.env("NAMESRV_ADDR", null);
        if (cpFile == null || javaDir == null || namesrv == null) {
            throw new G.Failure("GRPC_RMQ5_CLASSPATH_FILE, GRPC_JAVA_DIR (sdk.sh sets them) and NAMESRV_ADDR are needed");
        }
        Map<String, List<Delivery>> deliveries = new ConcurrentHashMap<>();
        Map<String, G.Sent> sent = new ConcurrentHashMap<>();
        List<String> contentProblems = new CopyOnWriteArrayList<>();

        // --- the remoting consumer, in its own JVM
        String home = logDir + "/mixed-remoting";
        new File(home).mkdirs();
        ProcessBuilder pb = new ProcessBuilder("java", "-Xms32m", "-Xmx256m",
                "-Drocketmq.client.logRoot=" + home, "-Drocketmq.log.root=" + home, "-Duser.home=" + home + "/home",
                "-cp", Files.readString(Paths.get(cpFile)).trim(),
                Paths.get(javaDir, "remoting", "MixedRemotingConsumer.java").toString(),
                namesrv, group, topic, Long.toString(REMOTING_INVISIBLE_MS));
        pb.redirectError(new File(logDir, "MixedRemotingConsumer.stderr"));
        Path outLog = Paths.get(logDir, "MixedRemotingConsumer.stdout");
        Child child = new Child(pb.start());
        s.diag("remoting consumer: child JVM pid " + child.process.pid() + ", its stdout in " + outLog);
        Thread reader = new Thread(() -> readChild(s, child, topic, deliveries, outLog), "mixed-child-reader");
        reader.setDaemon(true);
        reader.start();

        SimpleConsumer consumer = null;
        Producer producer = null;
        Thread grpcLoop = null;
        final boolean[] running = {true};
        try {
            // --- the gRPC SimpleConsumer of the same group
            consumer = G.build(s, "SimpleConsumer(" + group + ")", () -> G.PROVIDER.newSimpleConsumerBuilder()
                    .setClientConfiguration(G.config()).setConsumerGroup(group).setAwaitDuration(G.AWAIT)
                    .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL)).build());
            final SimpleConsumer c = consumer;
            final int[] receiveErrors = {0};
            grpcLoop = new Thread(() -> {
                while (running[0]) {
                    long t0 = System.currentTimeMillis();
                    List<MessageView> got;
                    try {
                        got = c.receive(4, GRPC_INVISIBLE);
                    } catch (Exception e) {
                        if (!running[0]) {
                            return;
                        }
                        if (++receiveErrors[0] <= 5) {
                            s.diag("gRPC receive failed: " + e);
                        }
                        try {
                            Thread.sleep(200);
                        } catch (InterruptedException ie) {
                            return;
                        }
                        continue;
                    }
                    long t = System.currentTimeMillis();
                    for (MessageView v : got) {
                        String k = G.keyOf(v);
                        Delivery d = new Delivery("grpc", k, t0, t, t0 + GRPC_INVISIBLE.toMillis(), t, null,
                                "id " + v.getMessageId() + " attempt " + v.getDeliveryAttempt());
                        G.Sent m = k == null ? null : sent.get(k);
                        if (m == null) {
                            contentProblems.add("gRPC consumer got a message this check did not send (yet?): "
                                    + G.describe(v));
                        } else {
                            List<String> diff = m.differences(v, topic, true);
                            if (!diff.isEmpty()) {
                                contentProblems.add(k + " arrived at the gRPC consumer different: "
                                        + String.join("; ", diff));
                            }
                        }
                        try {
                            c.ack(v);
                            d.ackAt = System.currentTimeMillis();
                            d.ackOk = true;
                            d.ackInfo = "acked at " + d.ackAt;
                        } catch (Exception e) {
                            d.ackAt = System.currentTimeMillis();
                            d.ackInfo = "ack failed at " + d.ackAt + ": " + e;
                            s.diag("gRPC ack of " + k + " failed: " + e);
                        }
                        deliveries.computeIfAbsent(k == null ? "?" : k, x -> new CopyOnWriteArrayList<>()).add(d);
                    }
                }
            }, "mixed-grpc-receive");
            grpcLoop.setDaemon(true);
            grpcLoop.start();

            // --- wait until the remoting consumer pops the topic
            long until = System.currentTimeMillis() + G.timeoutMs(60);
            while (child.popRequests.getOrDefault(topic, 0) == 0 && child.process.isAlive()
                    && System.currentTimeMillis() < until) {
                Thread.sleep(100);
            }
            if (child.popRequests.getOrDefault(topic, 0) == 0) {
                throw new G.Failure("the remoting push consumer never popped " + topic + " within 60 s (alive "
                        + child.process.isAlive() + ", started " + child.started + ", QUERY_ASSIGNMENT answers "
                        + describeAssignments(child) + ", PULL_MESSAGE " + child.pulls.size() + ": "
                        + child.pulls.subList(0, Math.min(3, child.pulls.size())) + ")");
            }
            s.diag("remoting consumer pops: assignments " + describeAssignments(child) + ", POP_MESSAGE requests so far "
                    + child.popRequests);

            // --- 200 messages from 4 producer threads at once
            producer = G.build(s, "Producer(" + topic + ")", () -> G.PROVIDER.newProducerBuilder()
                    .setClientConfiguration(G.config()).setTopics(topic).build());
            List<G.Sent> all = new ArrayList<>();
            for (int i = 0; i < COUNT; i++) {
                G.Sent m = new G.Sent(CHECK, i, "mixed");
                all.add(m);
                sent.put(m.key, m);
            }
            ExecutorService pool = Executors.newFixedThreadPool(SENDERS);
            List<Future<?>> fs = new ArrayList<>();
            final Producer p = producer;
            for (int t = 0; t < SENDERS; t++) {
                final int first = t;
                fs.add(pool.submit(() -> {
                    for (int i = first; i < COUNT; i += SENDERS) {
                        G.Sent m = all.get(i);
                        m.sendStart = System.currentTimeMillis();
                        m.messageId = p.send(m.build(topic)).getMessageId().toString();
                        m.sendEnd = System.currentTimeMillis();
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) {
                f.get(G.timeoutMs(60), TimeUnit.MILLISECONDS);
            }
            pool.shutdown();
            long sentAt = System.currentTimeMillis();
            s.diag("sent " + COUNT + " messages from " + SENDERS + " threads");

            // --- until every message was acknowledged once
            until = sentAt + G.timeoutMs(60);
            while (System.currentTimeMillis() < until && ackedKeys(deliveries, sent) < COUNT) {
                Thread.sleep(200);
            }
            s.diag("acknowledged " + ackedKeys(deliveries, sent) + " of " + COUNT + " after "
                    + (System.currentTimeMillis() - sentAt) + " ms; watching for redeliveries");

            // --- watch: until the last delivery's invisibility + LATE_MS
            long watchEnd = System.currentTimeMillis();
            for (List<Delivery> l : deliveries.values()) {
                for (Delivery d : l) {
                    watchEnd = Math.max(watchEnd, d.popHigh + Math.max(GRPC_INVISIBLE.toMillis(),
                            REMOTING_INVISIBLE_MS) + LATE_MS);
                }
            }
            while (System.currentTimeMillis() < watchEnd) {
                Thread.sleep(200);
            }

            // --- the group's backlog
            child.in.println("BACKLOG " + G.timeoutMs(30));
            until = System.currentTimeMillis() + G.timeoutMs(30) + 15000;
            while (child.backlogEnd == null && child.process.isAlive() && System.currentTimeMillis() < until) {
                Thread.sleep(100);
            }
        } finally {
            running[0] = false;
            G.closeQuietly(s, producer);
            G.closeQuietly(s, consumer);
            if (child.process.isAlive()) {
                child.in.println("STOP");
                child.process.waitFor(20, TimeUnit.SECONDS);
            }
            if (child.process.isAlive()) {
                s.diag("remoting consumer JVM did not stop; killing it");
                child.process.destroyForcibly();
                child.process.waitFor(10, TimeUnit.SECONDS);
            }
            reader.join(5000);
        }

        evaluate(s, child, topic, deliveries, sent, contentProblems);
        s.report(CHECK);
    }

    static String describeAssignments(Child child) {
        List<String> l = new ArrayList<>();
        for (String[] a : child.assignments) {
            l.add(a[2] + " code " + a[3] + " modes " + (a.length > 4 ? a[4] : "") + " queues "
                    + (a.length > 5 ? a[5] : ""));
        }
        return l.isEmpty() ? "(none)" : String.join("; ", l);
    }

    static int ackedKeys(Map<String, List<Delivery>> deliveries, Map<String, G.Sent> sent) {
        int n = 0;
        for (String k : sent.keySet()) {
            List<Delivery> l = deliveries.get(k);
            if (l != null && l.stream().anyMatch(d -> d.ackOk)) {
                n++;
            }
        }
        return n;
    }

    static void readChild(G.Scenario s, Child child, String topic, Map<String, List<Delivery>> deliveries,
                          Path outLog) {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(child.process.getInputStream(),
                StandardCharsets.UTF_8));
             PrintWriter log = new PrintWriter(Files.newBufferedWriter(outLog, StandardCharsets.UTF_8), true)) {
            String line;
            boolean firstPop = true;
            while ((line = r.readLine()) != null) {
                log.println(line);
                String[] f = line.split(" ");
                switch (f[0]) {
                    case "STARTED":
                        child.started = line;
                        s.diag("remoting: " + line);
                        break;
                    case "ASSIGNMENT":
                        child.assignments.add(f);
                        s.diag("remoting: " + line);
                        break;
                    case "POPREQ":
                        child.popRequests.merge(f[2], 1, Integer::sum);
                        break;
                    case "POP":
                        child.popCodes.merge(f[2] + " " + f[4], 1, Integer::sum);
                        if (firstPop && f[2].equals(topic)) {
                            firstPop = false;
                            s.diag("remoting: first pop of the topic: " + line);
                        }
                        break;
                    case "PULL":
                        child.pulls.add(line);
                        if (child.pullCodes.merge(f[2] + " " + f[4], 1, Integer::sum) == 1) {
                            s.diag("remoting: first PULL_MESSAGE answer with this code: " + line);
                        }
                        break;
                    case "MSG": {
                        // MSG start end key msgId crc topic queueId queueOffset reconsumeTimes popTime invisible popCk
                        String[] m = line.split(" ", 13);
                        long start = Long.parseLong(m[1]);
                        long popTime = Long.parseLong(m[10]);
                        long inv = Long.parseLong(m[11]);
                        String ck = m[12];
                        if (ck.equals("-") || popTime <= 0 || inv <= 0) {
                            child.badCk++;
                            popTime = start;
                            inv = 0;
                        }
                        String detail = "id " + m[4] + " crc " + m[5] + " topic " + m[6] + " queue " + m[7] + " offset "
                                + m[8] + " reconsumeTimes " + m[9] + " popTime " + m[10] + " invisible " + m[11];
                        Delivery d = new Delivery("remoting", m[3], popTime, popTime, popTime + inv, start, ck, detail);
                        String[] early = child.earlyAcks.remove(ck);
                        if (early != null) {
                            applyAck(d, early);
                        }
                        child.byCk.put(ck, d);
                        deliveries.computeIfAbsent(m[3], x -> new CopyOnWriteArrayList<>()).add(d);
                        break;
                    }
                    case "ACK": {
                        String[] a = line.split(" ", 4);
                        Delivery d = child.byCk.get(a[3]);
                        if (d == null) {
                            child.earlyAcks.put(a[3], a);
                        } else {
                            applyAck(d, a);
                        }
                        if (!a[2].equals("0")) {
                            s.diag("remoting: ACK_MESSAGE answered code " + a[2] + ": " + line);
                        }
                        break;
                    }
                    case "CHANGE":
                        s.diag("remoting: " + line);
                        break;
                    case "CONNECTION":
                    case "CONNECTION_ERROR":
                        child.connection = line;
                        s.diag("remoting: " + line);
                        break;
                    case "BACKLOG":
                    case "BACKLOG_ERROR":
                        child.backlog.add(line);
                        s.diag("remoting: " + line);
                        break;
                    case "BACKLOG_END":
                        child.backlogEnd = line;
                        s.diag("remoting: " + line);
                        break;
                    case "STOPPED":
                        child.stopped = line;
                        s.diag("remoting: " + line);
                        break;
                    default:
                        s.diag("remoting (unexpected line): " + line);
                }
            }
        } catch (Exception e) {
            s.diag("reading the remoting consumer's output failed: " + e);
        }
    }

    static void applyAck(Delivery d, String[] a) {
        d.ackAt = Long.parseLong(a[1]);
        d.ackOk = a[2].equals("0");
        d.ackInfo = (d.ackOk ? "ACK_MESSAGE SUCCESS at " : "ACK_MESSAGE code " + a[2] + " at ") + d.ackAt;
    }

    static void evaluate(G.Scenario s, Child child, String topic, Map<String, List<Delivery>> deliveries,
                         Map<String, G.Sent> sent, List<String> contentProblems) {
        // 1. the remoting consumer really popped
        boolean popMode = false;
        for (String[] a : child.assignments) {
            if (a[2].equals(topic)) {
                if (a[3].equals("0") && a.length > 4 && a[4].equals("POP")) {
                    popMode = true;
                } else {
                    s.problem(CHECK, "QUERY_ASSIGNMENT for " + topic + " answered code " + a[3] + " modes "
                            + (a.length > 4 ? a[4] : "(none)") + ", expected POP only");
                }
            }
        }
        if (!popMode) {
            s.problem(CHECK, "no QUERY_ASSIGNMENT answer gave the remoting consumer POP mode for " + topic + " ("
                    + describeAssignments(child) + ")");
        }
        if (child.pops(topic) == 0) {
            s.problem(CHECK, "the remoting consumer got no POP_MESSAGE answer for " + topic + " (requests: "
                    + child.popRequests + ")");
        }
        long mainPulls = child.pulls.stream().filter(l -> l.split(" ")[2].equals(topic)).count();
        if (mainPulls > 0) {
            s.problem(CHECK, "the remoting consumer sent " + mainPulls + " PULL_MESSAGE for " + topic
                    + " (it should only pop it), e.g. " + child.pulls.get(0));
        }
        if (child.badCk > 0) {
            s.problem(CHECK, child.badCk + " messages reached the remoting consumer without a usable POP_CK receipt"
                    + " (not popped)");
        }
        // Not part of the verdict, but a difference worth seeing: Apache answers the remoting consumer's PULL_MESSAGE
        // of %RETRY%GROUP (its retry topic stays in PULL mode) PULL_NOT_FOUND after the long poll.
        for (Map.Entry<String, Integer> e : child.pullCodes.entrySet()) {
            String code = e.getKey().substring(e.getKey().lastIndexOf(' ') + 1);
            if (!code.equals("0") && !code.equals("19") && !code.equals("20")) {
                s.diag("NOTE: PULL_MESSAGE of " + e.getKey().substring(0, e.getKey().lastIndexOf(' '))
                        + " answered code " + code + " " + e.getValue() + " times (Apache 5.3.3: 19 PULL_NOT_FOUND"
                        + " after the long poll); the group's subscriptions as the broker reports them: "
                        + child.connection);
            }
        }
        s.diag("remoting: POP_MESSAGE answers by topic and code " + child.popCodes + ", PULL_MESSAGE answers by topic and code "
                + child.pullCodes + ", " + child.stopped);

        // 2. content
        for (String p : contentProblems.subList(0, Math.min(5, contentProblems.size()))) {
            s.problem(CHECK, p);
        }
        if (contentProblems.size() > 5) {
            s.problem(CHECK, (contentProblems.size() - 5) + " more content problems");
        }
        for (Map.Entry<String, List<Delivery>> e : deliveries.entrySet()) {
            G.Sent m = sent.get(e.getKey());
            for (Delivery d : e.getValue()) {
                if (!d.kind.equals("remoting")) {
                    continue;
                }
                if (m == null) {
                    s.problem(CHECK, "the remoting consumer got a message this check did not send: " + d);
                    continue;
                }
                CRC32 crc = new CRC32();
                crc.update(m.body);
                String expect = "id " + m.messageId + " crc " + crc.getValue() + " topic " + topic + " ";
                if (!d.detail.startsWith(expect)) {
                    s.problem(CHECK, m.key + " arrived at the remoting consumer different: " + d.detail + ", expected "
                            + expect);
                }
            }
        }

        // 3. every message consumed and acknowledged; no delivery after an ack in time; none while invisible
        int grpc = 0;
        int remoting = 0;
        int redelivered = 0;
        List<String> missing = new ArrayList<>();
        for (G.Sent m : sent.values()) {
            List<Delivery> l = new ArrayList<>(deliveries.getOrDefault(m.key, List.of()));
            l.sort(Comparator.comparingLong(d -> d.popHigh));
            if (l.isEmpty()) {
                missing.add(m.key);
                continue;
            }
            Delivery owner = null;
            for (int i = 0; i < l.size(); i++) {
                Delivery d = l.get(i);
                if (d.ackOk && owner == null) {
                    owner = d;
                }
                if (d.ackAt >= 0 && !d.ackOk) {
                    s.problem(CHECK, m.key + ": the " + d.kind + " consumer's acknowledgement failed: " + d);
                }
                if (i == 0) {
                    continue;
                }
                redelivered++;
                Delivery prev = l.get(i - 1);
                if (prev.ackedInTime()) {
                    s.problem(CHECK, m.key + " delivered again after it was acknowledged in time: first " + prev
                            + ", then " + d);
                } else if (d.popHigh < prev.deadline) {
                    s.problem(CHECK, m.key + " delivered again while still invisible: first " + prev + ", then " + d);
                } else {
                    s.diag(m.key + " redelivered after its invisibility ended unacknowledged (allowed): " + prev
                            + ", then " + d);
                }
            }
            if (owner == null) {
                s.problem(CHECK, m.key + " was never acknowledged: " + l);
            } else if (owner.kind.equals("grpc")) {
                grpc++;
            } else {
                remoting++;
            }
        }
        Collections.sort(missing);
        if (!missing.isEmpty()) {
            s.problem(CHECK, missing.size() + " of " + COUNT + " messages never consumed, e.g. "
                    + missing.subList(0, Math.min(5, missing.size())));
        }
        s.diag("consumed and acknowledged: " + grpc + " by the gRPC SimpleConsumer, " + remoting
                + " by the remoting push consumer; " + redelivered + " redeliveries");
        if (grpc == 0 || remoting == 0) {
            s.problem(CHECK, "one kind got no share: gRPC " + grpc + ", remoting " + remoting);
        }

        // 4. the backlog
        String end = child.backlogEnd;
        if (end == null) {
            s.problem(CHECK, "the group's consume stats were never read (" + child.backlog + ")");
        } else {
            String[] f = end.split(" ");
            String last = null;
            for (String b : child.backlog) {
                if (b.startsWith("BACKLOG ")) {
                    last = b;
                }
            }
            if (!f[2].equals("0")) {
                s.problem(CHECK, "the group's backlog did not reach 0 within 30 s: " + (last == null
                        ? child.backlog.toString() : last));
            } else if (last != null && !last.split(" ")[4].equals(Integer.toString(COUNT))) {
                s.problem(CHECK, "the group's consume stats do not show the topic's " + COUNT
                        + " messages (broker offsets sum " + last.split(" ")[4] + "): " + last);
            }
        }
    }
}
