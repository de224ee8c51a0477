package conveyor.compat;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenario (i), 5.x clients only: timer messages (arbitrary delivery time; properties TIMER_DELIVER_MS,
 * TIMER_DELAY_SEC, TIMER_DELAY_MS). A message sent at T for T + 3 s must arrive in [T + 3 s, T + 4 s]:
 *   setDeliverTimeMs(T + 3000), setDelayTimeSec(3), setDelayTimeMs(3000), three messages each, interleaved.
 * T is taken just before the send; for the relative forms the upper bound is measured from the end of the send.
 * The setters do not exist in 4.9.x and are called reflectively so that this file compiles against both.
 */
public final class TimerMessages {
    private static final int PER_KIND = 3;
    private static final long DELAY_MS = 3000;
    private static final long LATE_MS = 1000;
    private static final String[] KINDS = {"setDeliverTimeMs", "setDelayTimeSec", "setDelayTimeMs"};

    static final class Sent {
        final Expected e;
        final String kind;
        long due;
        long sendEnd;

        Sent(Expected e, String kind) {
            this.e = e;
            this.kind = kind;
        }
    }

    public static void main(String[] args) {
        Common.run("i-timer-messages", diag -> {
            Map<String, Method> setters = new java.util.HashMap<>();
            for (String k : KINDS) {
                try {
                    setters.put(k, Message.class.getMethod(k, long.class));
                } catch (NoSuchMethodException ex) {
                    throw new Common.Failure("Message." + k + "(long) does not exist in client " + Common.clientVersion()
                            + " (timer messages need a 5.x client)");
                }
            }
            String run = Common.newRunId();
            String topic = Common.name("t", "i", run);
            String group = Common.name("g", "i", run);
            diag.add("topic=" + topic + " group=" + group);
            Common.Problems problems = new Common.Problems();

            DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);
            Common.createTopic(admin, topic, 4, diag);

            List<Expected> warm = Senders.build(topic, run, 0, 1);
            List<Expected> timed = Senders.build(topic, run, 1, KINDS.length * PER_KIND);
            Map<String, Long> firstArrival = new ConcurrentHashMap<>();
            Map<String, String> arrivalInfo = new ConcurrentHashMap<>();
            Collector collector = new Collector();
            collector.expect(warm);
            collector.expect(timed);
            diag.addLater(collector::report);

            DefaultMQPushConsumer consumer = Common.pushConsumer(group, "c-" + run, topic, "*", m -> {
                long now = System.currentTimeMillis();
                String keys = m.getKeys();
                String first = keys == null ? "" : keys.split(MessageConst.KEY_SEPARATOR, 2)[0];
                firstArrival.putIfAbsent(first, now);
                arrivalInfo.putIfAbsent(first, "storeTs=" + m.getStoreTimestamp() + " bornTs=" + m.getBornTimestamp()
                        + " queue=" + m.getQueueId() + " offset=" + m.getQueueOffset() + " props=" + m.getProperties());
                collector.accept(m);
            });
            diag.addLater(() -> "consumer queues: " + Common.assignedQueues(consumer, topic));
            consumer.start();
            Common.await("the consumer to be assigned the topic's queues", Common.timeoutMillis(60),
                    () -> Common.assignedQueues(consumer, topic).size() == 4,
                    () -> String.valueOf(Common.assignedQueues(consumer, topic)));

            DefaultMQProducer producer = Common.startProducer(group + "_p", "p-" + run);
            Senders.sendSync(producer, warm);
            Common.await("the warm-up message", Common.timeoutMillis(30),
                    () -> firstArrival.containsKey(warm.get(0).key), collector::progress);

            List<Sent> sent = new ArrayList<>();
            int i = 0;
            for (int rep = 0; rep < PER_KIND; rep++) {
                for (String kind : KINDS) {
                    Sent s = new Sent(timed.get(i++), kind);
                    Message m = s.e.toMessage();
                    long t = System.currentTimeMillis();
                    switch (kind) {
                        case "setDeliverTimeMs": setters.get(kind).invoke(m, t + DELAY_MS); break;
                        case "setDelayTimeSec": setters.get(kind).invoke(m, DELAY_MS / 1000); break;
                        default: setters.get(kind).invoke(m, DELAY_MS); break;
                    }
                    s.due = t + DELAY_MS;
                    SendResult r = producer.send(m);
                    s.sendEnd = System.currentTimeMillis();
                    if (r.getSendStatus() != SendStatus.SEND_OK) {
                        throw new Common.Failure("send of " + s.e.key + " (" + kind + ") returned " + r);
                    }
                    s.e.sent(m, kind + " T=" + t + " queue=" + r.getMessageQueue().getQueueId() + " msgId="
                            + r.getMsgId(), r.getMessageQueue().getQueueId(), r.getOffsetMsgId());
                    sent.add(s);
                }
            }
            Common.await("every timer message", DELAY_MS + Common.timeoutMillis(30), collector::complete,
                    collector::progress);
            collector.checkClean();

            List<String> measured = new ArrayList<>();
            for (Sent s : sent) {
                long at = firstArrival.get(s.e.key);
                // deliverTimeMs is absolute; the relative forms count from the broker's receipt (<= sendEnd).
                long latest = (s.kind.equals("setDeliverTimeMs") ? s.due : s.sendEnd + DELAY_MS) + LATE_MS;
                measured.add(s.kind + " " + (at - s.due) + "ms");
                if (at < s.due) {
                    problems.add(s.e.key + " (" + s.kind + ", due at T+" + DELAY_MS + " ms) arrived " + (s.due - at)
                            + " ms early (" + arrivalInfo.get(s.e.key) + ")");
                } else if (at > latest) {
                    problems.add(s.e.key + " (" + s.kind + ", due at T+" + DELAY_MS + " ms) arrived " + (at - s.due)
                            + " ms after it was due, more than " + LATE_MS + " ms late (" + arrivalInfo.get(s.e.key) + ")");
                }
            }
            diag.add("arrival relative to due time: " + measured);
            System.err.println("  .. arrival relative to due time: " + measured);
            problems.throwIfAny(diag);

            Common.shutdownQuietly(consumer);
            Common.shutdownQuietly(producer);
            Common.shutdownQuietly(admin);
        });
    }
}
