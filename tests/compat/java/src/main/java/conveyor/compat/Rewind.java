package conveyor.compat;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The online group of the mqadmin operations checks (issue 13): a producer and a push consumer stay up while the
 * runner's mqadmin commands inspect them (consumerConnection, consumerStatus, producerConnection, queryCq, …) and
 * rewind the group with resetOffsetByTime.
 *
 * Usage: Rewind STATE_DIR
 *   1. Creates a topic, sends batch A and consumes it, then (once the clock has moved past A's store times) batch B
 *      and consumes it.
 *   2. Writes STATE_DIR/ready: topic, group, producer group, a broker of the topic, resetTime (the first store time
 *      of B) and the unique id of a message of B.
 *   3. Waits for STATE_DIR/reset: the runner ran `mqadmin resetOffsetByTime -s resetTime -f true` meanwhile.
 *   4. Requires that the running consumer receives every message of B again and none of A, until the group's
 *      backlog is 0 (offsets committed at the end of every queue).
 *   5. Stays up until STATE_DIR/done so the runner's other checks see the clients online, then prints PASS.
 */
public final class Rewind {
    private static final int BATCH = 40;

    public static void main(String[] args) {
        if (args.length < 1) {
            System.out.println("FAIL " + Common.testName("m-rewind") + ": missing STATE_DIR argument");
            System.exit(2);
        }
        Path dir = Paths.get(args[0]);
        Common.run("m-rewind", diag -> run(dir, diag));
    }

    /** Deliveries per message key and store times, before and after the group was declared ready. */
    private static final class Recorder {
        final Map<String, Long> storeTime = new ConcurrentHashMap<>();
        final Map<String, AtomicInteger> redelivered = new ConcurrentHashMap<>();
        final AtomicBoolean ready = new AtomicBoolean();
        final AtomicInteger redeliveries = new AtomicInteger();

        void accept(MessageExt m) {
            String keys = m.getKeys();
            String key = keys == null ? "" : keys.split(MessageConst.KEY_SEPARATOR, 2)[0];
            storeTime.putIfAbsent(key, m.getStoreTimestamp());
            if (ready.get()) {
                redeliveries.incrementAndGet();
                redelivered.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet();
            }
        }
    }

    static void run(Path dir, Common.Diag diag) throws Exception {
        String run = Common.newRunId();
        String topic = Common.name("t", "m", run);
        String group = Common.name("g", "m", run);
        String producerGroup = group + "_p";
        diag.add("topic=" + topic + " group=" + group);

        DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);
        Common.createTopic(admin, topic, 4, diag);

        List<Expected> a = Senders.build(topic, run, 0, BATCH);
        List<Expected> b = Senders.build(topic, run, 1000, BATCH);
        Collector collector = new Collector();
        collector.expect(a);
        collector.expect(b);
        Recorder recorder = new Recorder();
        diag.addLater(() -> "consumer: " + collector.report());

        DefaultMQProducer producer = Common.startProducer(producerGroup, "p-" + run);
        DefaultMQPushConsumer consumer = Common.pushConsumer(group, "c-" + run, topic, "*", m -> {
            collector.accept(m);
            recorder.accept(m);
        });
        consumer.start();

        Senders.sendSync(producer, a);
        Common.await("batch A consumed", Common.timeoutMillis(120),
                () -> a.stream().allMatch(e -> collector.count(e.key) > 0), collector::progress);
        long lastOfA = a.stream().mapToLong(e -> recorder.storeTime.get(e.key)).max().orElse(0);
        // B must be stored strictly after A: wait for the clock to pass A's last store time.
        Common.await("the clock passing batch A", 10_000, () -> System.currentTimeMillis() > lastOfA + 2, null);
        Senders.sendSync(producer, b);
        Common.await("batch B consumed", Common.timeoutMillis(120), collector::complete, collector::progress);
        long firstOfB = b.stream().mapToLong(e -> recorder.storeTime.get(e.key)).min().orElse(0);
        if (firstOfB <= lastOfA) {
            throw new Common.Failure("batch B was stored at " + firstOfB + ", not after batch A (" + lastOfA + ")");
        }
        collector.checkClean();

        // Offsets committed at the end before the rewind, so the rewind is what brings B back.
        Common.await("the group's committed offsets at the end", Common.timeoutMillis(60),
                () -> backlog(admin, group) == 0, () -> "backlog " + backlog(admin, group));
        var broker = admin.examineTopicRouteInfo(topic).getBrokerDatas().get(0);
        recorder.ready.set(true);
        List<String> state = new ArrayList<>();
        state.add("topic=" + topic);
        state.add("group=" + group);
        state.add("producerGroup=" + producerGroup);
        state.add("brokerName=" + broker.getBrokerName());
        state.add("brokerAddr=" + broker.selectBrokerAddr());
        state.add("resetTime=" + firstOfB);
        state.add("uniqId=" + b.get(0).uniqId);
        state.add("queueId=" + b.get(0).sentQueueId);
        state.add("key=" + b.get(0).key);
        state.add("offsetMsgId=" + b.get(0).offsetMsgId);
        Path tmp = dir.resolve("ready.tmp");
        Files.write(tmp, String.join("\n", state).concat("\n").getBytes(StandardCharsets.UTF_8));
        Files.move(tmp, dir.resolve("ready"), StandardCopyOption.ATOMIC_MOVE);
        diag.add("ready: resetTime=" + firstOfB + " (A ends at " + lastOfA + ")");

        Common.await("the runner's resetOffsetByTime", Common.timeoutMillis(300),
                () -> Files.exists(dir.resolve("reset")), null);
        Common.await("every message of B delivered again", Common.timeoutMillis(120),
                () -> b.stream().allMatch(e -> recorder.redelivered.containsKey(e.key)),
                () -> recorder.redelivered.size() + " of " + BATCH + " redelivered");
        Common.await("the group's backlog back to 0", Common.timeoutMillis(60),
                () -> backlog(admin, group) == 0, () -> "backlog " + backlog(admin, group));
        List<String> wrong = new ArrayList<>();
        for (Expected e : a) {
            if (recorder.redelivered.containsKey(e.key)) {
                wrong.add(e.key);
            }
        }
        if (!wrong.isEmpty()) {
            throw new Common.Failure("messages stored before the reset time were delivered again: " + wrong);
        }
        diag.add("redelivered: " + recorder.redelivered.size() + " messages, " + recorder.redeliveries.get()
                + " deliveries");
        Files.write(dir.resolve("rewound"), ("redelivered=" + recorder.redelivered.size() + "\n")
                .getBytes(StandardCharsets.UTF_8));

        Common.await("the runner's other online checks", Common.timeoutMillis(600),
                () -> Files.exists(dir.resolve("done")), null);
        consumer.shutdown();
        producer.shutdown();
        admin.shutdown();
    }

    /** The group's total backlog over its topics (-1 when it cannot be read yet). */
    private static long backlog(DefaultMQAdminExt admin, String group) {
        try {
            return admin.examineConsumeStats(group).computeTotalDiff();
        } catch (Exception e) {
            return -1;
        }
    }
}
