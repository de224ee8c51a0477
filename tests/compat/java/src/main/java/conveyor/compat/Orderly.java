package conveyor.compat;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenario (k): ordered consumption. A topic with 8 queues; 10,000 messages over 100 keys (100 per key), sent
 * synchronously in rounds (sequence s of every key, then s + 1, ...) with a MessageQueueSelector that maps the key's
 * hash to a queue. Two MessageListenerOrderly consumers in one group share the queues (queue locks on the broker:
 * LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).
 *
 * While messages flow, consumer 2 is shut down (consumer 1 must take over all 8 queues) and later a new consumer 2
 * starts (they must split the queues again). For every key, the observed sequence numbers must never skip ahead:
 * a delivery of s is allowed only when s <= (highest seen so far) + 1. Going back (redelivery after a rebalance,
 * from the committed offset) is allowed; reordering is not. Every message must arrive.
 */
public final class Orderly {
    private static final int QUEUES = 8;
    private static final int KEYS = 100;
    private static final int PER_KEY = 100;
    private static final int GATE1_ROUND = 30;
    private static final int GATE2_ROUND = 65;

    /** Per-key order tracking. */
    static final class KeyState {
        int maxSeen = -1;
        int deliveries;
        int redeliveries;
    }

    public static void main(String[] args) {
        Common.run("k-orderly", diag -> {
            String run = Common.newRunId();
            String topic = Common.name("t", "k", run);
            String group = Common.name("g", "k", run);
            diag.add("topic=" + topic + " group=" + group);
            Common.Problems problems = new Common.Problems();

            DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);
            Common.createTopic(admin, topic, QUEUES, diag);

            KeyState[] keys = new KeyState[KEYS];
            for (int i = 0; i < KEYS; i++) {
                keys[i] = new KeyState();
            }
            Set<Long> distinct = ConcurrentHashMap.newKeySet();
            AtomicInteger violations = new AtomicInteger();
            AtomicInteger garbage = new AtomicInteger();
            AtomicInteger overlaps = new AtomicInteger();
            Map<Integer, String> inFlight = new ConcurrentHashMap<>();
            Map<String, AtomicInteger> perConsumer = new ConcurrentHashMap<>();
            List<String> events = java.util.Collections.synchronizedList(new ArrayList<>());
            long t0 = System.currentTimeMillis();
            diag.addLater(() -> "events (ms since start): " + events);
            diag.addLater(() -> "distinct received " + distinct.size() + "/" + KEYS * PER_KEY + ", deliveries per consumer "
                    + perConsumer + ", order violations " + violations + ", unparseable " + garbage
                    + ", concurrent consumption of one queue by two consumers " + overlaps);

            // Builds one orderly consumer; name distinguishes the instances in diagnostics.
            java.util.function.Function<String, DefaultMQPushConsumer> make = name -> {
                try {
                    DefaultMQPushConsumer c = Common.newPushConsumer(group, name + "-" + run);
                    c.subscribe(topic, "*");
                    c.setAwaitTerminationMillisWhenShutdown(10_000);
                    AtomicInteger mine = perConsumer.computeIfAbsent(name, k -> new AtomicInteger());
                    c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                        int q = ctx.getMessageQueue().getQueueId();
                        String other = inFlight.putIfAbsent(q, name);
                        if (other != null && !other.equals(name)) {
                            overlaps.incrementAndGet();
                            events.add((System.currentTimeMillis() - t0) + " " + name + " consumes queue " + q
                                    + " while " + other + " does");
                        }
                        try {
                            for (MessageExt m : msgs) {
                                mine.incrementAndGet();
                                String k = m.getUserProperty("okey");
                                String s = m.getUserProperty("oseq");
                                if (k == null || s == null) {
                                    garbage.incrementAndGet();
                                    continue;
                                }
                                int key = Integer.parseInt(k);
                                int seq = Integer.parseInt(s);
                                distinct.add((long) key * PER_KEY + seq);
                                KeyState st = keys[key];
                                synchronized (st) {
                                    st.deliveries++;
                                    if (seq > st.maxSeen + 1) {
                                        if (violations.incrementAndGet() <= 20) {
                                            problems.add("key " + key + ": " + name + " got seq " + seq + " (queue " + q
                                                    + " offset " + m.getQueueOffset() + ") while the highest seen was "
                                                    + st.maxSeen + ": seq " + (st.maxSeen + 1) + " skipped");
                                        }
                                        st.maxSeen = seq;
                                    } else if (seq <= st.maxSeen) {
                                        st.redeliveries++;
                                    } else {
                                        st.maxSeen = seq;
                                    }
                                }
                            }
                        } finally {
                            inFlight.remove(q, name);
                        }
                        return ConsumeOrderlyStatus.SUCCESS;
                    });
                    return c;
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            };

            DefaultMQPushConsumer c1 = make.apply("c1");
            DefaultMQPushConsumer c2 = make.apply("c2");
            AtomicReference<DefaultMQPushConsumer> second = new AtomicReference<>(c2);
            diag.addLater(() -> "c1 queues: " + Common.ids(Common.assignedQueues(c1, topic)) + "; second consumer queues: "
                    + Common.ids(Common.assignedQueues(second.get(), topic)));
            c1.start();
            c2.start();
            awaitSplit(c1, c2, topic);
            events.add((System.currentTimeMillis() - t0) + " c1 and c2 split the queues: " + Common.ids(Common.assignedQueues(c1, topic))
                    + " / " + Common.ids(Common.assignedQueues(c2, topic)));

            // The sender: rounds of one message per key; pauses before the gate rounds until the main thread opens them.
            DefaultMQProducer producer = Common.startProducer(group + "_p", "p-" + run);
            MessageQueueSelector selector = (mqs, msg, arg) -> mqs.get(Math.floorMod(arg.hashCode(), mqs.size()));
            Object gate = new Object();
            int[] openedUpTo = {GATE1_ROUND};
            AtomicReference<String> sendError = new AtomicReference<>();
            AtomicInteger sent = new AtomicInteger();
            Thread sender = new Thread(() -> {
                try {
                    for (int seq = 0; seq < PER_KEY; seq++) {
                        synchronized (gate) {
                            while (seq >= openedUpTo[0]) {
                                gate.wait();
                            }
                        }
                        for (int key = 0; key < KEYS; key++) {
                            String keyName = "key-" + key;
                            Message m = new Message(topic, "TagO", "o_" + run + "_" + key + "_" + seq,
                                    (keyName + ":" + seq).getBytes(StandardCharsets.UTF_8));
                            m.putUserProperty("okey", Integer.toString(key));
                            m.putUserProperty("oseq", Integer.toString(seq));
                            SendResult r = producer.send(m, selector, keyName);
                            if (r.getSendStatus() != SendStatus.SEND_OK) {
                                throw new IllegalStateException("send of key " + key + " seq " + seq + " returned " + r);
                            }
                            int expectedQueue = Math.floorMod(keyName.hashCode(), QUEUES);
                            if (r.getMessageQueue().getQueueId() != expectedQueue) {
                                throw new IllegalStateException("key " + key + " went to queue "
                                        + r.getMessageQueue().getQueueId() + ", selector chose " + expectedQueue);
                            }
                            sent.incrementAndGet();
                        }
                    }
                } catch (Exception e) {
                    sendError.set(e.toString());
                }
            }, "orderly-sender");
            sender.setDaemon(true);
            sender.start();
            diag.addLater(() -> "sent " + sent.get() + (sendError.get() != null ? ", send error: " + sendError.get() : ""));

            java.util.function.BooleanSupplier sendFailed = () -> sendError.get() != null;
            Common.await("consumption of the first rounds", Common.timeoutMillis(120),
                    () -> sendFailed.getAsBoolean() || distinct.size() >= (GATE1_ROUND - 5) * KEYS,
                    () -> distinct.size() + " distinct, " + sent.get() + " sent");
            if (sendFailed.getAsBoolean()) {
                throw new Common.Failure("sending failed: " + sendError.get());
            }

            // Shut consumer 2 down while the next rounds are being sent.
            synchronized (gate) {
                openedUpTo[0] = GATE2_ROUND;
                gate.notifyAll();
            }
            events.add((System.currentTimeMillis() - t0) + " shutting c2 down at " + distinct.size() + " distinct");
            c2.shutdown();
            events.add((System.currentTimeMillis() - t0) + " c2 shut down at " + distinct.size() + " distinct");
            Common.await("c1 to take over all " + QUEUES + " queues after c2's shutdown", Common.timeoutMillis(60),
                    () -> Common.assignedQueues(c1, topic).size() == QUEUES,
                    () -> Common.ids(Common.assignedQueues(c1, topic)));
            events.add((System.currentTimeMillis() - t0) + " c1 owns all queues at " + distinct.size() + " distinct");
            Common.await("consumption of the middle rounds by c1 alone", Common.timeoutMillis(120),
                    () -> sendFailed.getAsBoolean() || distinct.size() >= (GATE2_ROUND - 5) * KEYS,
                    () -> distinct.size() + " distinct, " + sent.get() + " sent");
            if (sendFailed.getAsBoolean()) {
                throw new Common.Failure("sending failed: " + sendError.get());
            }

            // A new consumer 2 joins while c1 may still be consuming the middle rounds; the last
            // rounds are sent once the two split the queues. (Opened before the split, c1 could
            // consume every last round alone before the rebalance, and c2b would get nothing to
            // show: seen once in a run of the test command.)
            DefaultMQPushConsumer c3 = make.apply("c2b");
            second.set(c3);
            events.add((System.currentTimeMillis() - t0) + " starting c2b at " + distinct.size() + " distinct");
            c3.start();
            awaitSplit(c1, c3, topic);
            events.add((System.currentTimeMillis() - t0) + " c1 and c2b split the queues at " + distinct.size()
                    + " distinct: " + Common.ids(Common.assignedQueues(c1, topic)) + " / " + Common.ids(Common.assignedQueues(c3, topic)));
            synchronized (gate) {
                openedUpTo[0] = PER_KEY;
                gate.notifyAll();
            }

            Common.await("every message", Common.timeoutMillis(180),
                    () -> sendFailed.getAsBoolean() || distinct.size() == KEYS * PER_KEY,
                    () -> distinct.size() + " distinct, " + sent.get() + " sent, consumers " + perConsumer);
            if (sendFailed.getAsBoolean()) {
                throw new Common.Failure("sending failed: " + sendError.get());
            }
            int redeliveries = 0;
            for (KeyState st : keys) {
                synchronized (st) {
                    redeliveries += st.redeliveries;
                }
            }
            String summary = KEYS * PER_KEY + " messages, " + redeliveries + " redeliveries, per consumer " + perConsumer;
            diag.add(summary);
            System.err.println("  .. " + summary + "; " + (System.currentTimeMillis() - t0) + " ms");
            synchronized (events) {
                events.forEach(ev -> System.err.println("  .. " + ev));
            }
            if (garbage.get() > 0) {
                problems.add(garbage.get() + " deliveries without okey/oseq properties");
            }
            if (perConsumer.getOrDefault("c2b", new AtomicInteger()).get() == 0) {
                problems.add("the restarted consumer c2b received nothing");
            }
            if (overlaps.get() > 0) {
                diag.add("note: " + overlaps.get() + " times two consumers consumed the same queue at the same time");
            }
            problems.throwIfAny(diag);

            Common.shutdownQuietly(c1);
            Common.shutdownQuietly(c3);
            Common.shutdownQuietly(producer);
            Common.shutdownQuietly(admin);
        });
    }

    private static void awaitSplit(DefaultMQPushConsumer a, DefaultMQPushConsumer b, String topic) throws Exception {
        // A consumer whose LOCK_BATCH_MQ lost the race against the other's unlock retries at its next rebalance,
        // 20 s later. After 5 s the test asks both clients to rebalance now instead of waiting for that timer.
        long[] nudgeAfter = {System.currentTimeMillis() + 5_000};
        Common.await("the two consumers to split the " + QUEUES + " queues", Common.timeoutMillis(60), () -> {
            List<MessageQueue> qa = Common.assignedQueues(a, topic);
            List<MessageQueue> qb = Common.assignedQueues(b, topic);
            Set<MessageQueue> union = new HashSet<>(qa);
            union.addAll(qb);
            boolean split = !qa.isEmpty() && !qb.isEmpty() && union.size() == qa.size() + qb.size()
                    && union.size() == QUEUES;
            if (!split && System.currentTimeMillis() > nudgeAfter[0]) {
                System.err.println("  .. queues not split after 5 s (a=" + Common.ids(qa) + " b=" + Common.ids(qb)
                        + "): asking both consumers to rebalance");
                a.getDefaultMQPushConsumerImpl().getmQClientFactory().rebalanceImmediately();
                b.getDefaultMQPushConsumerImpl().getmQClientFactory().rebalanceImmediately();
                nudgeAfter[0] = System.currentTimeMillis() + 2_000;
            }
            return split;
        }, () -> "a=" + Common.ids(Common.assignedQueues(a, topic)) + " b=" + Common.ids(Common.assignedQueues(b, topic)));
    }
}
