package conveyor.compat;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenario (j): transactional messages with TransactionMQProducer.
 *   commit    (5): executeLocalTransaction answers COMMIT_MESSAGE   -> delivered exactly once
 *   rollback  (5): executeLocalTransaction answers ROLLBACK_MESSAGE -> never delivered
 *   unknown-commit   (5): UNKNOW, then the broker's check-back (CHECK_TRANSACTION_STATE) is answered COMMIT_MESSAGE
 *                        -> delivered exactly once, after the check
 *   unknown-rollback (3): UNKNOW, check-back answered ROLLBACK_MESSAGE -> never delivered
 * Check-backs come after the broker's transaction timeout (Apache: 6 s, then every 30-60 s), so the test waits up
 * to 90 s for them (COMPAT_TIMEOUT_SECS overrides). A check-back for a message that was already committed or
 * rolled back, or a check repeated more than 2 s after a definite answer, is reported as a problem.
 */
public final class Transactions {
    private static final String PROP = "compat_tx";
    private static final long REPEAT_GRACE_MS = 2000;

    enum Kind {
        COMMIT("c", 5), ROLLBACK("r", 5), UNKNOWN_COMMIT("uc", 5), UNKNOWN_ROLLBACK("ur", 3);

        final String code;
        final int count;

        Kind(String code, int count) {
            this.code = code;
            this.count = count;
        }

        static Kind of(String code) {
            for (Kind k : values()) {
                if (k.code.equals(code)) {
                    return k;
                }
            }
            return null;
        }

        boolean delivered() {
            return this == COMMIT || this == UNKNOWN_COMMIT;
        }
    }

    public static void main(String[] args) {
        Common.run("j-transactions", diag -> {
            String run = Common.newRunId();
            String topic = Common.name("t", "j", run);
            String group = Common.name("g", "j", run);
            String producerGroup = Common.name("pg", "j", run);
            diag.add("topic=" + topic + " group=" + group + " producer group=" + producerGroup);
            Common.Problems problems = new Common.Problems();

            DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);
            Common.createTopic(admin, topic, 4, diag);

            Map<String, Kind> kindOf = new HashMap<>();
            Map<Kind, List<Expected>> byKind = new HashMap<>();
            List<Expected> all = new ArrayList<>();
            int index = 0;
            for (Kind k : Kind.values()) {
                List<Expected> list = Senders.build(topic, run, index, k.count);
                index += k.count;
                for (Expected e : list) {
                    e.props.put(PROP, k.code);
                    kindOf.put(e.key, k);
                }
                byKind.put(k, list);
                all.addAll(list);
            }

            // Check-backs: key -> times of checks; and checks the listener could not attribute.
            Map<String, List<Long>> checks = new ConcurrentHashMap<>();
            Map<String, Long> answeredAt = new ConcurrentHashMap<>();
            List<String> strayChecks = java.util.Collections.synchronizedList(new ArrayList<>());
            final String[] firstCheck = {null};
            diag.addLater(() -> "check-backs per key (ms since epoch): " + checks);
            diag.addLater(() -> "first check-back message: " + firstCheck[0]);
            diag.addLater(() -> "check-backs for unknown messages: " + strayChecks);

            TransactionMQProducer producer = new TransactionMQProducer(producerGroup);
            producer.setNamesrvAddr(Common.namesrv());
            producer.setInstanceName("tp-" + run);
            producer.setSendMsgTimeout(10_000);
            producer.setTransactionListener(new TransactionListener() {
                @Override
                public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                    Kind k = Kind.of(msg.getUserProperty(PROP));
                    if (k == Kind.COMMIT) {
                        return LocalTransactionState.COMMIT_MESSAGE;
                    }
                    if (k == Kind.ROLLBACK) {
                        return LocalTransactionState.ROLLBACK_MESSAGE;
                    }
                    return LocalTransactionState.UNKNOW;
                }

                @Override
                public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                    long now = System.currentTimeMillis();
                    if (firstCheck[0] == null) {
                        firstCheck[0] = "topic=" + msg.getTopic() + " keys=" + msg.getKeys() + " transactionId="
                                + msg.getTransactionId() + " props=" + msg.getProperties();
                    }
                    String keys = msg.getKeys();
                    String first = keys == null ? "" : keys.split(MessageConst.KEY_SEPARATOR, 2)[0];
                    Kind k = kindOf.get(first);
                    if (k == null) {
                        strayChecks.add("keys=" + keys + " msgId=" + msg.getMsgId() + " props=" + msg.getProperties());
                        return LocalTransactionState.UNKNOW;
                    }
                    checks.computeIfAbsent(first, x -> java.util.Collections.synchronizedList(new ArrayList<>()))
                            .add(now);
                    answeredAt.putIfAbsent(first, now);
                    return k.delivered() ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
                }
            });
            producer.start();

            Collector collector = new Collector();
            collector.expect(all); // rolled-back ones are "expected" so that a delivery of one is recognised
            Map<String, Long> firstDelivery = new ConcurrentHashMap<>();
            diag.addLater(collector::report);
            DefaultMQPushConsumer consumer = Common.pushConsumer(group, "c-" + run, topic, "*", m -> {
                String keys = m.getKeys();
                String first = keys == null ? "" : keys.split(MessageConst.KEY_SEPARATOR, 2)[0];
                firstDelivery.putIfAbsent(first, System.currentTimeMillis());
                collector.accept(m);
            });
            diag.addLater(() -> "consumer queues: " + Common.assignedQueues(consumer, topic));
            consumer.start();
            Common.await("the consumer to be assigned the topic's queues", Common.timeoutMillis(60),
                    () -> Common.assignedQueues(consumer, topic).size() == 4,
                    () -> String.valueOf(Common.assignedQueues(consumer, topic)));

            long sendStart = System.currentTimeMillis();
            for (Expected e : all) {
                Message m = e.toMessage();
                TransactionSendResult r;
                try {
                    r = producer.sendMessageInTransaction(m, null);
                } catch (Exception ex) {
                    throw new Common.Failure("sendMessageInTransaction of " + e.key + " (" + kindOf.get(e.key)
                            + ") failed: " + ex);
                }
                if (r.getSendStatus() != SendStatus.SEND_OK) {
                    throw new Common.Failure("sendMessageInTransaction of " + e.key + " returned " + r);
                }
                e.sent(m, kindOf.get(e.key) + " " + r.getLocalTransactionState() + " queue="
                        + r.getMessageQueue().getQueueId() + " msgId=" + r.getMsgId() + " txId=" + r.getTransactionId(),
                        r.getMessageQueue().getQueueId(), r.getOffsetMsgId());
            }
            long sendEnd = System.currentTimeMillis();
            System.err.println("  .. sent " + all.size() + " transactional messages in " + (sendEnd - sendStart) + " ms");

            Common.await("the committed messages", Common.timeoutMillis(30),
                    () -> byKind.get(Kind.COMMIT).stream().allMatch(e -> collector.count(e.key) > 0),
                    collector::progress);
            long checkWait = Common.timeoutMillis(90);
            Common.await("check-backs of every UNKNOW message and delivery of those answered COMMIT", checkWait,
                    () -> byKind.get(Kind.UNKNOWN_COMMIT).stream().allMatch(e -> collector.count(e.key) > 0)
                            && byKind.get(Kind.UNKNOWN_ROLLBACK).stream().allMatch(e -> checks.containsKey(e.key)),
                    () -> collector.progress() + ", " + checks.size() + " messages checked back");
            System.err.println("  .. all check-backs " + (System.currentTimeMillis() - sendEnd)
                    + " ms after the last send");
            // Rolled-back messages must stay invisible: give them a while (at least 10 s after sending, and 5 s
            // after the last check answer) to show up wrongly.
            long lastAnswer = answeredAt.values().stream().mapToLong(Long::longValue).max().orElse(sendEnd);
            long quietUntil = Math.max(sendEnd + 10_000, lastAnswer + 5_000);
            while (System.currentTimeMillis() < quietUntil) {
                Thread.sleep(100);
            }

            collector.checkClean();
            for (Expected e : all) {
                Kind k = kindOf.get(e.key);
                int n = collector.count(e.key);
                List<Long> c = checks.getOrDefault(e.key, List.of());
                if (k.delivered() && n != 1) {
                    problems.add(e.key + " (" + k + ") delivered " + n + " times, expected once");
                }
                if (!k.delivered() && n != 0) {
                    problems.add(e.key + " (" + k + ") was rolled back but delivered " + n + " times");
                }
                if ((k == Kind.COMMIT || k == Kind.ROLLBACK) && !c.isEmpty()) {
                    problems.add(e.key + " (" + k + ", resolved by END_TRANSACTION) was checked back " + c.size()
                            + " times, first " + (c.get(0) - sendStart) + " ms after the first send");
                }
                if (k == Kind.UNKNOWN_COMMIT && n > 0 && !c.isEmpty() && firstDelivery.get(e.key) < c.get(0)) {
                    problems.add(e.key + " (" + k + ") delivered before its check-back");
                }
                if ((k == Kind.UNKNOWN_COMMIT || k == Kind.UNKNOWN_ROLLBACK) && c.size() > 1) {
                    long repeat = c.get(c.size() - 1) - c.get(0);
                    if (repeat > REPEAT_GRACE_MS) {
                        problems.add(e.key + " (" + k + ") checked back " + c.size() + " times over " + repeat
                                + " ms although the first check was answered definitively");
                    }
                }
            }
            if (!strayChecks.isEmpty()) {
                problems.add(strayChecks.size() + " check-backs for messages this test did not send, e.g. "
                        + strayChecks.get(0));
            }
            List<String> checkDelays = new ArrayList<>();
            for (Kind k : new Kind[]{Kind.UNKNOWN_COMMIT, Kind.UNKNOWN_ROLLBACK}) {
                for (Expected e : byKind.get(k)) {
                    List<Long> c = checks.getOrDefault(e.key, List.of());
                    checkDelays.add(c.isEmpty() ? "none" : (c.get(0) - sendStart) + "ms x" + c.size());
                }
            }
            diag.add("first check-back after the first send (x number of checks): " + checkDelays);
            System.err.println("  .. check-backs after the first send: " + checkDelays);
            problems.throwIfAny(diag);

            Common.shutdownQuietly(consumer);
            Common.shutdownQuietly(producer);
            Common.shutdownQuietly(admin);
        });
    }
}
