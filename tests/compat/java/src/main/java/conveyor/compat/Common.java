package conveyor.compat;

import java.lang.reflect.Method;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;
import java.util.function.Supplier;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Shared plumbing for the compatibility programs: environment, unique names, client construction,
 * topic creation, deadline-based waiting and the PASS/FAIL output contract.
 *
 * Only APIs whose package and signature are the same in rocketmq-client 4.9.x and 5.x are used here;
 * types that moved between the two lines (route data, cluster info, consume stats) are only touched
 * through {@code var} so the same source compiles against both.
 */
final class Common {
    private Common() {
    }

    /** A scenario failed; the message becomes the reason on the FAIL line. */
    static final class Failure extends Exception {
        Failure(String message) {
            super(message);
        }
    }

    interface Body {
        void run(Diag diag) throws Exception;
    }

    /** Diagnostics collected while a scenario runs; printed only when it fails. */
    static final class Diag {
        private final List<Supplier<String>> lines = new ArrayList<>();

        void add(String line) {
            lines.add(() -> line);
        }

        /** A line computed at failure time (e.g. current counters). */
        void addLater(Supplier<String> line) {
            lines.add(line);
        }

        void print() {
            for (Supplier<String> s : lines) {
                String text;
                try {
                    text = s.get();
                } catch (RuntimeException e) {
                    text = "<diagnostic failed: " + e + ">";
                }
                for (String l : text.split("\n")) {
                    System.out.println("  # " + l);
                }
            }
        }
    }

    static String clientVersion() {
        return MQVersion.getVersionDesc(MQVersion.CURRENT_VERSION).replace("V", "").replace('_', '.');
    }

    /** Test name printed on the PASS/FAIL line, e.g. {@code java-4.9.8/a-send-receive}. */
    static String testName(String scenario) {
        return "java-" + clientVersion() + "/" + scenario;
    }

    static String namesrv() throws Failure {
        String addr = System.getenv("NAMESRV_ADDR");
        if (addr == null || addr.isBlank()) {
            throw new Failure("NAMESRV_ADDR is not set");
        }
        return addr.trim();
    }

    /** Overall per-wait timeout, overridable with COMPAT_TIMEOUT_SECS. */
    static long timeoutMillis(long defaultSecs) {
        String s = System.getenv("COMPAT_TIMEOUT_SECS");
        long secs = defaultSecs;
        if (s != null && !s.isBlank()) {
            secs = Long.parseLong(s.trim());
        }
        return secs * 1000L;
    }

    private static final SecureRandom RANDOM = new SecureRandom();

    /** A run id that is unique per invocation and valid inside topic and group names. */
    static String newRunId() {
        return Long.toString(System.currentTimeMillis(), 36) + Integer.toString(RANDOM.nextInt(1 << 20), 36);
    }

    /** Topic/group name: only [A-Za-z0-9_-], short enough for every limit. */
    static String name(String kind, String scenario, String runId) {
        String v = clientVersion().replace('.', '_');
        return ("compat_" + kind + "_" + scenario + "_j" + v + "_" + runId).toLowerCase(Locale.ROOT);
    }

    /**
     * Runs a scenario and exits the JVM: prints "PASS name" (exit 0) or diagnostics followed by
     * "FAIL name: reason" (exit 1). Client threads are non-daemon, so the explicit exit matters.
     */
    static void run(String scenario, Body body) {
        String name = testName(scenario);
        Diag diag = new Diag();
        int code;
        try {
            body.run(diag);
            System.out.println("PASS " + name);
            code = 0;
        } catch (Failure f) {
            diag.print();
            System.out.println("FAIL " + name + ": " + f.getMessage());
            code = 1;
        } catch (Throwable t) {
            diag.print();
            System.out.println("  # exception:");
            t.printStackTrace(System.out);
            System.out.println("FAIL " + name + ": unexpected " + t);
            code = 1;
        }
        System.out.flush();
        Runtime.getRuntime().halt(code);
    }

    /**
     * Waits until cond is true or the deadline passes. Polls every 100 ms; prints a progress note to stderr
     * every 10 s so a human watching a slow run can see what is being waited for.
     */
    static void await(String what, long timeoutMs, BooleanSupplier cond, Supplier<String> progress)
            throws Failure, InterruptedException {
        long start = System.currentTimeMillis();
        long deadline = start + timeoutMs;
        long nextNote = start + 10_000;
        while (true) {
            if (cond.getAsBoolean()) {
                return;
            }
            long now = System.currentTimeMillis();
            if (now >= deadline) {
                String p = progress == null ? "" : " (" + progress.get() + ")";
                throw new Failure("timed out after " + timeoutMs / 1000 + "s waiting for " + what + p);
            }
            if (now >= nextNote) {
                String p = progress == null ? "" : ": " + progress.get();
                System.err.println("  .. still waiting for " + what + p);
                nextNote = now + 10_000;
            }
            Thread.sleep(100);
        }
    }

    /** Instance names keep several clients in one JVM apart (each gets its own client id). */
    static DefaultMQProducer startProducer(String group, String instance) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(namesrv());
        p.setInstanceName(instance);
        p.setSendMsgTimeout(10_000);
        p.start();
        return p;
    }

    /** A clustering push consumer starting from the first offset for a fresh group (not yet started). */
    static DefaultMQPushConsumer pushConsumer(String group, String instance, String topic, String subExpression,
                                              Consumer<MessageExt> collector) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv());
        c.setInstanceName(instance);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, subExpression);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            msgs.forEach(collector::accept);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        return c;
    }

    static DefaultLitePullConsumer litePullConsumer(String group, String instance, String topic) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(namesrv());
        c.setInstanceName(instance);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        return c;
    }

    static DefaultMQAdminExt startAdmin(String instance) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv());
        admin.setInstanceName(instance);
        admin.start();
        return admin;
    }

    /**
     * Creates the topic on every master broker known to the name server (UPDATE_AND_CREATE_TOPIC), then waits
     * until the name server returns a route with the expected number of queues. Tests therefore do not depend on
     * automatic topic creation.
     */
    static void createTopic(DefaultMQAdminExt admin, String topic, int queues, Diag diag) throws Exception {
        // A broker that has just started may not have registered with the name server yet: wait for one.
        List<String> masters = new ArrayList<>();
        final String[] lastCluster = {"-"};
        await("a master broker registered with the name server", timeoutMillis(60), () -> {
            try {
                var cluster = admin.examineBrokerClusterInfo();
                lastCluster[0] = String.valueOf(cluster.getBrokerAddrTable());
                masters.clear();
                for (var broker : cluster.getBrokerAddrTable().values()) {
                    String addr = broker.getBrokerAddrs().get(0L);
                    if (addr != null) {
                        masters.add(addr);
                    }
                }
                return !masters.isEmpty();
            } catch (Exception e) {
                lastCluster[0] = e.toString();
                return false;
            }
        }, () -> "GET_BROKER_CLUSTER_INFO brokerAddrTable: " + lastCluster[0]);
        diag.add("master brokers from GET_BROKER_CLUSTER_INFO: " + masters);
        TopicConfig config = new TopicConfig(topic, queues, queues, 6 /* read|write */);
        for (String addr : masters) {
            admin.createAndUpdateTopicConfig(addr, config);
        }
        final String[] lastRoute = {"<none>"};
        diag.addLater(() -> "last route for " + topic + ": " + lastRoute[0]);
        await("route of " + topic + " with " + queues + " queues per broker", timeoutMillis(60), () -> {
            try {
                var route = admin.examineTopicRouteInfo(topic);
                lastRoute[0] = String.valueOf(route);
                return route.getQueueDatas() != null && !route.getQueueDatas().isEmpty()
                        && route.getQueueDatas().stream().allMatch(q -> q.getReadQueueNums() == queues
                        && q.getWriteQueueNums() == queues);
            } catch (Exception e) {
                lastRoute[0] = e.toString();
                return false;
            }
        }, () -> lastRoute[0]);
    }

    /** Queue ids assigned to a push consumer for one topic (client-side rebalance result). */
    static List<MessageQueue> assignedQueues(DefaultMQPushConsumer consumer, String topic) {
        List<MessageQueue> out = new ArrayList<>();
        for (MessageQueue mq : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl()
                .getProcessQueueTable().keySet()) {
            if (mq.getTopic().equals(topic)) {
                out.add(mq);
            }
        }
        out.sort(MessageQueue::compareTo);
        return out;
    }

    /** A clustering push consumer starting from the first offset for a fresh group: no subscription or listener. */
    static DefaultMQPushConsumer newPushConsumer(String group, String instance) throws Failure {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv());
        c.setInstanceName(instance);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        return c;
    }

    /**
     * Switches a push consumer to BROADCASTING. MessageModel moved packages between 4.9 and 5.x, so the enum
     * constant is looked up through the setter's parameter type.
     */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static void setBroadcasting(DefaultMQPushConsumer c) throws Exception {
        for (Method m : c.getClass().getMethods()) {
            if (m.getName().equals("setMessageModel") && m.getParameterCount() == 1) {
                Class<? extends Enum> type = (Class<? extends Enum>) m.getParameterTypes()[0];
                m.invoke(c, Enum.valueOf(type, "BROADCASTING"));
                return;
            }
        }
        throw new IllegalStateException("DefaultMQPushConsumer.setMessageModel not found");
    }

    /** The route of a topic as the name server returns it, or null when there is none (or on error). */
    static String routeOrNull(DefaultMQAdminExt admin, String topic) {
        try {
            var route = admin.examineTopicRouteInfo(topic);
            if (route == null || route.getQueueDatas() == null || route.getQueueDatas().isEmpty()) {
                return null;
            }
            return String.valueOf(route);
        } catch (Exception e) {
            return null;
        }
    }

    /**
     * Makes a push consumer fetch the route of a topic now and rebalance, instead of waiting for the client's
     * 30 s route poll and 20 s rebalance timers (used for system topics a broker creates after the consumer
     * started, e.g. %RETRY%group).
     */
    static void refreshRoute(DefaultMQPushConsumer c, String topic) {
        var factory = c.getDefaultMQPushConsumerImpl().getmQClientFactory();
        if (factory != null) {
            factory.updateTopicRouteInfoFromNameServer(topic);
            factory.rebalanceImmediately();
        }
    }

    /**
     * Delay levels the broker under test uses, from COMPAT_DELAY_LEVELS (RocketMQ's messageDelayLevel syntax,
     * e.g. "1s 5s 10s 30s 1m"); the default is the short ladder run-against-standalone.sh configures
     * (level n = n seconds).
     */
    static long[] delayLevelsMs() {
        String s = System.getenv("COMPAT_DELAY_LEVELS");
        if (s == null || s.isBlank()) {
            s = "1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s";
        }
        String[] parts = s.trim().split("\\s+");
        long[] out = new long[parts.length];
        for (int i = 0; i < parts.length; i++) {
            String p = parts[i];
            long mult;
            String num;
            if (p.endsWith("ms")) {
                mult = 1;
                num = p.substring(0, p.length() - 2);
            } else {
                char u = p.charAt(p.length() - 1);
                num = p.substring(0, p.length() - 1);
                switch (u) {
                    case 's': mult = 1000L; break;
                    case 'm': mult = 60_000L; break;
                    case 'h': mult = 3_600_000L; break;
                    case 'd': mult = 86_400_000L; break;
                    default: throw new IllegalArgumentException("bad delay level " + p + " in COMPAT_DELAY_LEVELS");
                }
            }
            out[i] = Long.parseLong(num) * mult;
        }
        return out;
    }

    /** Delay of level n (1-based), as {@link #delayLevelsMs()} defines it; levels above the last are clamped. */
    static long delayOfLevelMs(int level) {
        long[] levels = delayLevelsMs();
        return levels[Math.min(level, levels.length) - 1];
    }

    /** Problems found by a scenario; all are printed, the first becomes the FAIL reason. */
    static final class Problems {
        private final List<String> list = java.util.Collections.synchronizedList(new ArrayList<>());

        void add(String p) {
            list.add(p);
        }

        int size() {
            return list.size();
        }

        void throwIfAny(Diag diag) throws Failure {
            synchronized (list) {
                if (list.isEmpty()) {
                    return;
                }
                int n = 0;
                for (String p : list) {
                    if (++n > 40) {
                        diag.add("problem: ... " + (list.size() - 40) + " more");
                        break;
                    }
                    diag.add("problem: " + p);
                }
                throw new Failure(list.get(0) + (list.size() > 1 ? " (and " + (list.size() - 1) + " more problems)" : ""));
            }
        }
    }

    /** Queue ids of a queue list, e.g. "[0, 1, 2]" (compact diagnostics). */
    static String ids(List<MessageQueue> queues) {
        List<Integer> out = new ArrayList<>();
        for (MessageQueue q : queues) {
            out.add(q.getQueueId());
        }
        return out.toString();
    }

    static void shutdownQuietly(Object client) {
        try {
            if (client instanceof DefaultMQPushConsumer) {
                ((DefaultMQPushConsumer) client).shutdown();
            } else if (client instanceof DefaultLitePullConsumer) {
                ((DefaultLitePullConsumer) client).shutdown();
            } else if (client instanceof DefaultMQProducer) {
                ((DefaultMQProducer) client).shutdown();
            } else if (client instanceof DefaultMQAdminExt) {
                ((DefaultMQAdminExt) client).shutdown();
            }
        } catch (RuntimeException e) {
            System.err.println("  .. shutdown of " + client.getClass().getSimpleName() + " failed: " + e);
        }
    }
}
