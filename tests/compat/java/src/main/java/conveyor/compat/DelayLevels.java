package conveyor.compat;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenario (h): delay levels. Messages with delayTimeLevel k (k = 1..6, three each, sent interleaved) must not
 * be delivered before their store time + delay(k), and must arrive at most 1 s after it. The store time lies
 * between the start and the end of the synchronous send, so a delivery before sendStart + delay is certainly
 * early and one after sendEnd + delay + 1 s is certainly late. A level-0 message sent first checks that the
 * consumer is polling, so that consumer start-up does not count as delay.
 *
 * Delays come from COMPAT_DELAY_LEVELS (default: level n = n seconds).
 */
public final class DelayLevels {
    private static final int[] LEVELS = {6, 1, 4, 2, 5, 3};
    private static final int PER_LEVEL = 3;
    private static final long LATE_MS = 1000;

    static final class Sent {
        final Expected e;
        final int level;
        long sendStart;
        long sendEnd;

        Sent(Expected e, int level) {
            this.e = e;
            this.level = level;
        }
    }

    public static void main(String[] args) {
        Common.run("h-delay-levels", diag -> {
            String run = Common.newRunId();
            String topic = Common.name("t", "h", run);
            String group = Common.name("g", "h", run);
            diag.add("topic=" + topic + " group=" + group);
            Common.Problems problems = new Common.Problems();

            DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);
            Common.createTopic(admin, topic, 4, diag);

            List<Expected> warm = Senders.build(topic, run, 0, 1);
            List<Expected> delayed = Senders.build(topic, run, 1, LEVELS.length * PER_LEVEL);
            Map<String, List<Long>> arrivals = new ConcurrentHashMap<>();
            Map<String, String> arrivalInfo = new ConcurrentHashMap<>();
            Collector collector = new Collector();
            collector.expect(warm);
            collector.expect(delayed);
            diag.addLater(collector::report);

            DefaultMQPushConsumer consumer = Common.pushConsumer(group, "c-" + run, topic, "*", m -> {
                long now = System.currentTimeMillis();
                String keys = m.getKeys();
                String first = keys == null ? "" : keys.split(MessageConst.KEY_SEPARATOR, 2)[0];
                arrivals.computeIfAbsent(first, k -> java.util.Collections.synchronizedList(new ArrayList<>())).add(now);
                arrivalInfo.putIfAbsent(first, "storeTs=" + m.getStoreTimestamp() + " bornTs=" + m.getBornTimestamp()
                        + " queue=" + m.getQueueId() + " offset=" + m.getQueueOffset() + " DELAY="
                        + m.getProperty(MessageConst.PROPERTY_DELAY_TIME_LEVEL));
                collector.accept(m);
            });
            diag.addLater(() -> "consumer queues: " + Common.assignedQueues(consumer, topic));
            consumer.start();
            Common.await("the consumer to be assigned the topic's queues", Common.timeoutMillis(60),
                    () -> Common.assignedQueues(consumer, topic).size() == 4,
                    () -> String.valueOf(Common.assignedQueues(consumer, topic)));

            DefaultMQProducer producer = Common.startProducer(group + "_p", "p-" + run);
            Senders.sendSync(producer, warm);
            Common.await("the level-0 warm-up message", Common.timeoutMillis(30),
                    () -> arrivals.containsKey(warm.get(0).key), collector::progress);

            List<Sent> sent = new ArrayList<>();
            int i = 0;
            for (int rep = 0; rep < PER_LEVEL; rep++) {
                for (int level : LEVELS) {
                    Sent s = new Sent(delayed.get(i++), level);
                    Message m = s.e.toMessage();
                    m.setDelayTimeLevel(level);
                    s.sendStart = System.currentTimeMillis();
                    SendResult r = producer.send(m);
                    s.sendEnd = System.currentTimeMillis();
                    if (r.getSendStatus() != SendStatus.SEND_OK) {
                        throw new Common.Failure("send of " + s.e.key + " (level " + level + ") returned " + r);
                    }
                    s.e.sent(m, "level " + level + " queue=" + r.getMessageQueue().getQueueId() + " msgId="
                            + r.getMsgId() + " sent " + s.sendStart + ".." + s.sendEnd, r.getMessageQueue().getQueueId(),
                            r.getOffsetMsgId());
                    sent.add(s);
                }
            }
            long maxDelay = 0;
            for (int level : LEVELS) {
                maxDelay = Math.max(maxDelay, Common.delayOfLevelMs(level));
            }
            Common.await("every delayed message", maxDelay + Common.timeoutMillis(30), collector::complete,
                    collector::progress);
            collector.checkClean();

            Map<Integer, List<String>> perLevel = new TreeMap<>();
            for (Sent s : sent) {
                long delay = Common.delayOfLevelMs(s.level);
                List<Long> at;
                synchronized (arrivals.get(s.e.key)) {
                    at = new ArrayList<>(arrivals.get(s.e.key));
                }
                long first = at.stream().mapToLong(Long::longValue).min().getAsLong();
                perLevel.computeIfAbsent(s.level, k -> new ArrayList<>()).add((first - s.sendEnd) + "ms");
                for (long t : at) {
                    if (t < s.sendStart + delay) {
                        problems.add(s.e.key + " (level " + s.level + " = " + delay + " ms) delivered "
                                + (t - s.sendStart) + " ms after its send started: early (" + arrivalInfo.get(s.e.key)
                                + ")");
                    }
                }
                if (first > s.sendEnd + delay + LATE_MS) {
                    problems.add(s.e.key + " (level " + s.level + " = " + delay + " ms) first delivered "
                            + (first - s.sendEnd) + " ms after its send returned: more than " + LATE_MS + " ms late ("
                            + arrivalInfo.get(s.e.key) + ")");
                }
            }
            diag.add("arrival after send returned, per level: " + perLevel);
            System.err.println("  .. arrival after send returned, per level: " + perLevel);
            problems.throwIfAny(diag);

            Common.shutdownQuietly(consumer);
            Common.shutdownQuietly(producer);
            Common.shutdownQuietly(admin);
        });
    }
}
