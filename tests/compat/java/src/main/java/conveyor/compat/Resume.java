package conveyor.compat;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;
import java.util.Properties;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenario (f): committed consumer offsets survive a consumer restart (and, when the runner restarts the
 * broker between the phases, a broker restart).
 *
 * Usage: Resume phase1 STATE_FILE | Resume phase2 STATE_FILE | Resume all
 *   phase1: create a topic, send N1 messages, consume them all with group G, shut the consumer down and wait
 *           until the broker reports the committed offsets at the end of every queue. Writes STATE_FILE.
 *   phase2: send N2 new messages, start a new consumer in G (CONSUME_FROM_FIRST_OFFSET, so a lost offset
 *           shows up as redelivered old messages) and require that it receives all new and none of the old.
 */
public final class Resume {
    private static final int PHASE1_COUNT = 400;
    private static final int PHASE2_COUNT = 300;
    private static final int PHASE2_FIRST_INDEX = 100_000;

    public static void main(String[] args) {
        String phase = args.length > 0 ? args[0] : "all";
        switch (phase) {
            case "phase1":
                Common.run("f-resume-phase1", diag -> phase1(Paths.get(arg(args, 1)), diag));
                break;
            case "phase2":
                Common.run("f-resume-phase2", diag -> phase2(Paths.get(arg(args, 1)), diag));
                break;
            case "all":
                Common.run("f-resume", diag -> {
                    Path state = Files.createTempFile("compat-resume", ".properties");
                    phase1(state, diag);
                    phase2(state, diag);
                });
                break;
            default:
                System.out.println("FAIL " + Common.testName("f-resume") + ": unknown phase " + phase
                        + " (use phase1 STATE_FILE, phase2 STATE_FILE or all)");
                System.exit(2);
        }
    }

    private static String arg(String[] args, int i) {
        if (args.length <= i) {
            System.out.println("FAIL " + Common.testName("f-resume") + ": missing STATE_FILE argument");
            System.exit(2);
        }
        return args[i];
    }

    static void phase1(Path stateFile, Common.Diag diag) throws Exception {
        String run = Common.newRunId();
        String topic = Common.name("t", "f", run);
        String group = Common.name("g", "f", run);
        diag.add("phase1: topic=" + topic + " group=" + group);

        DefaultMQAdminExt admin = Common.startAdmin("adm1-" + run);
        Common.createTopic(admin, topic, 4, diag);

        List<Expected> msgs = Senders.build(topic, run, 0, PHASE1_COUNT);
        Collector collector = new Collector();
        collector.expect(msgs);
        diag.addLater(() -> "phase1 consumer: " + collector.report());

        DefaultMQProducer producer = Common.startProducer(group + "_p", "p1-" + run);
        Senders.sendSync(producer, msgs);
        DefaultMQPushConsumer consumer = Common.pushConsumer(group, "c1-" + run, topic, "*", collector);
        consumer.start();
        Common.await("phase1 consumption", Common.timeoutMillis(180), collector::complete, collector::progress);
        collector.checkClean();
        // shutdown() persists the consumed offsets (UPDATE_CONSUMER_OFFSET) and unregisters the client.
        consumer.shutdown();

        // Confirm with the broker (GET_CONSUME_STATS, as mqadmin consumerProgress does) that the offsets
        // are committed at the end of every queue. phase2 checks the effect independently.
        final String[] last = {"-"};
        diag.addLater(() -> "consume stats: " + last[0]);
        Common.await("committed offsets to reach the end of every queue", Common.timeoutMillis(60), () -> {
            try {
                var stats = admin.examineConsumeStats(group);
                long lag = 0;
                for (var w : stats.getOffsetTable().values()) {
                    lag += w.getBrokerOffset() - w.getConsumerOffset();
                }
                last[0] = stats.getOffsetTable().toString();
                return !stats.getOffsetTable().isEmpty() && lag == 0;
            } catch (Exception e) {
                last[0] = e.toString();
                return false;
            }
        }, () -> last[0]);

        Properties p = new Properties();
        p.setProperty("run", run);
        p.setProperty("topic", topic);
        p.setProperty("group", group);
        p.setProperty("phase1Count", Integer.toString(PHASE1_COUNT));
        try (var w = Files.newBufferedWriter(stateFile, StandardCharsets.UTF_8)) {
            p.store(w, "conveyor compat scenario f state");
        }
        Common.shutdownQuietly(producer);
        Common.shutdownQuietly(admin);
    }

    static void phase2(Path stateFile, Common.Diag diag) throws Exception {
        Properties p = new Properties();
        try (var r = Files.newBufferedReader(stateFile, StandardCharsets.UTF_8)) {
            p.load(r);
        }
        String run = p.getProperty("run");
        String topic = p.getProperty("topic");
        String group = p.getProperty("group");
        diag.add("phase2: topic=" + topic + " group=" + group + " (from " + stateFile + ")");

        // After a broker restart the route may take a moment to come back.
        DefaultMQAdminExt admin = Common.startAdmin("adm2-" + run);
        final String[] lastRoute = {"-"};
        Common.await("route of " + topic + " after restart", Common.timeoutMillis(120), () -> {
            try {
                var route = admin.examineTopicRouteInfo(topic);
                lastRoute[0] = String.valueOf(route);
                return route.getQueueDatas() != null && !route.getQueueDatas().isEmpty()
                        && route.getBrokerDatas() != null && !route.getBrokerDatas().isEmpty();
            } catch (Exception e) {
                lastRoute[0] = e.toString();
                return false;
            }
        }, () -> lastRoute[0]);

        // Fresh keys, so that re-running phase2 on the same state file cannot confuse old and new messages.
        List<Expected> msgs = Senders.build(topic, Common.newRunId(), PHASE2_FIRST_INDEX, PHASE2_COUNT);
        Collector collector = new Collector();
        collector.expect(msgs);
        diag.addLater(() -> "phase2 consumer: " + collector.report());

        DefaultMQProducer producer = Common.startProducer(group + "_p", "p2-" + run);
        Senders.sendSync(producer, msgs);
        DefaultMQPushConsumer consumer = Common.pushConsumer(group, "c2-" + run, topic, "*", collector);
        consumer.start();
        // Old messages precede the new ones in every queue, so by the time all new ones have arrived any
        // redelivered old message has arrived too (it is counted as unexpected).
        Common.await("phase2 consumption", Common.timeoutMillis(180), collector::complete, collector::progress);
        consumer.shutdown();
        if (collector.unexpectedCount() > 0) {
            throw new Common.Failure("the resumed consumer received " + collector.unexpectedCount()
                    + " messages from before its group's committed offset (offsets lost?)");
        }
        collector.checkClean();
        Common.shutdownQuietly(producer);
        Common.shutdownQuietly(admin);
    }
}
