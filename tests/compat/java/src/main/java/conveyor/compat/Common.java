package conveyor.compat;

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
