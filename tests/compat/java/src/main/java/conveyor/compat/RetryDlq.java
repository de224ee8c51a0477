package conveyor.compat;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenario (g): retry and dead-letter queue.
 *
 * A clustering push consumer with maxReconsumeTimes = 2 returns RECONSUME_LATER for every 4th message (always)
 * and CONSUME_SUCCESS for the others. Each failing message must come back with reconsumeTimes 1 and then 2,
 * each time after the delay of level 3 + reconsumeTimes of the failed delivery (the broker's rule for
 * CONSUMER_SEND_MSG_BACK with delayLevel 0): level 3, then level 4. It must not arrive earlier, and at most
 * 1.5 s later. After the third failure it must go to %DLQ%group, where a push consumer of another group reads
 * it with the original body, keys, tags and user properties; it must not be delivered to the original group
 * again.
 *
 * Delays come from COMPAT_DELAY_LEVELS (default: level n = n seconds, as run-against-standalone.sh configures).
 */
public final class RetryDlq {
    private static final int TOTAL = 40;
    private static final int MAX_RECONSUME = 2;
    private static final long LATE_MS = 1500;

    private static boolean failing(int index) {
        return index % 4 == 1;
    }

    /** One delivery of a message to the main consumer. */
    static final class Delivery {
        final int reconsumeTimes;
        final long at;
        volatile long returnedAt = -1;
        final String topic;
        final String diff;
        final String where;

        Delivery(MessageExt m, long at, String diff) {
            this.reconsumeTimes = m.getReconsumeTimes();
            this.at = at;
            this.topic = m.getTopic();
            this.diff = diff;
            this.where = "queue=" + m.getQueueId() + " offset=" + m.getQueueOffset() + " storeTs=" + m.getStoreTimestamp()
                    + " msgId=" + m.getMsgId() + " RETRY_TOPIC=" + m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC)
                    + " ORIGIN_MESSAGE_ID=" + m.getProperty(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID);
        }

        @Override
        public String toString() {
            return "reconsumeTimes=" + reconsumeTimes + " at=" + at + (returnedAt >= 0 ? " returned=" + returnedAt : "")
                    + " topic=" + topic + " " + where + (diff != null ? " DIFF " + diff : "");
        }
    }

    public static void main(String[] args) {
        Common.run("g-retry-dlq", diag -> {
            String run = Common.newRunId();
            String topic = Common.name("t", "g", run);
            String group = Common.name("g", "g", run);
            String retryTopic = "%RETRY%" + group;
            String dlqTopic = "%DLQ%" + group;
            String dlqGroup = Common.name("g", "gdlq", run);
            diag.add("topic=" + topic + " group=" + group + " dlq group=" + dlqGroup);
            long level3 = Common.delayOfLevelMs(3);
            long level4 = Common.delayOfLevelMs(4);
            long level5 = Common.delayOfLevelMs(5);
            diag.add("expected retry delays: level 3 = " + level3 + " ms, level 4 = " + level4 + " ms");
            Common.Problems problems = new Common.Problems();

            DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);
            Common.createTopic(admin, topic, 4, diag);

            List<Expected> msgs = Senders.build(topic, run, 0, TOTAL);
            Map<String, Expected> byKey = new HashMap<>();
            List<Expected> failingMsgs = new ArrayList<>();
            for (Expected e : msgs) {
                byKey.put(e.key, e);
                if (failing(e.index)) {
                    failingMsgs.add(e);
                }
            }
            Map<String, List<Delivery>> deliveries = new ConcurrentHashMap<>();
            List<String> unexpected = java.util.Collections.synchronizedList(new ArrayList<>());
            diag.addLater(() -> {
                StringBuilder sb = new StringBuilder("deliveries of failing messages:");
                for (Expected e : failingMsgs) {
                    sb.append("\n  ").append(e.key).append(" [").append(e.sendInfo).append("]");
                    List<Delivery> ds = deliveries.getOrDefault(e.key, List.of());
                    synchronized (ds) {
                        for (Delivery d : ds) {
                            sb.append("\n    ").append(d);
                        }
                    }
                }
                return sb.toString();
            });
            diag.addLater(() -> "unexpected deliveries to the main group: " + unexpected);

            DefaultMQPushConsumer consumer = Common.newPushConsumer(group, "c-" + run);
            consumer.setMaxReconsumeTimes(MAX_RECONSUME);
            consumer.setConsumeMessageBatchMaxSize(1);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (batch, ctx) -> {
                long now = System.currentTimeMillis();
                boolean later = false;
                List<Delivery> mine = new ArrayList<>();
                for (MessageExt m : batch) {
                    String keys = m.getKeys();
                    String first = keys == null ? "" : keys.split(MessageConst.KEY_SEPARATOR, 2)[0];
                    Expected e = byKey.get(first);
                    if (e == null) {
                        unexpected.add("keys=" + keys + " topic=" + m.getTopic() + " msgId=" + m.getMsgId());
                        continue;
                    }
                    Delivery d = new Delivery(m, now, e.compare(m));
                    deliveries.computeIfAbsent(e.key, k -> java.util.Collections.synchronizedList(new ArrayList<>()))
                            .add(d);
                    if (failing(e.index)) {
                        later = true;
                        mine.add(d);
                    }
                }
                long ret = System.currentTimeMillis();
                for (Delivery d : mine) {
                    d.returnedAt = ret;
                }
                return later ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            diag.addLater(() -> "main consumer queues: " + Common.assignedQueues(consumer, topic) + " retry queues: "
                    + Common.assignedQueues(consumer, retryTopic));
            consumer.start();
            long started = System.currentTimeMillis();

            // Apache RocketMQ creates %RETRY%group when the consumer's heartbeat arrives. The client only learns
            // routes on start and every 30 s, so the test refreshes the retry route as soon as it exists.
            final String[] retryRoute = {null};
            diag.addLater(() -> "route of " + retryTopic + ": " + retryRoute[0]);
            ScheduledExecutorService nudger = Executors.newSingleThreadScheduledExecutor(r -> {
                Thread t = new Thread(r, "retry-route-refresh");
                t.setDaemon(true);
                return t;
            });
            nudger.scheduleWithFixedDelay(() -> {
                try {
                    if (Common.assignedQueues(consumer, retryTopic).isEmpty()) {
                        String r = Common.routeOrNull(admin, retryTopic);
                        if (r != null) {
                            retryRoute[0] = r;
                            Common.refreshRoute(consumer, retryTopic);
                        }
                    }
                } catch (RuntimeException e) {
                    System.err.println("  .. retry route refresh: " + e);
                }
            }, 0, 200, TimeUnit.MILLISECONDS);
            try {
                Common.await(retryTopic + " to have a route (created on the consumer's heartbeat)", 5_000,
                        () -> retryRoute[0] != null, () -> "none yet");
            } catch (Common.Failure f) {
                problems.add("no route for " + retryTopic + " within 5 s of the consumer's start (Apache RocketMQ "
                        + "creates the retry topic on the first HEART_BEAT; a client learns it only at its next 30 s "
                        + "route poll otherwise)");
            }
            Common.await("the consumer to be assigned the topic's queues", Common.timeoutMillis(60),
                    () -> Common.assignedQueues(consumer, topic).size() == 4,
                    () -> String.valueOf(Common.assignedQueues(consumer, topic)));

            DefaultMQProducer producer = Common.startProducer(group + "_p", "p-" + run);
            Senders.sendSync(producer, msgs);
            System.err.println("  .. sent " + TOTAL + " messages, " + failingMsgs.size() + " of them fail; consumer"
                    + " started " + (System.currentTimeMillis() - started) + " ms ago");

            // Every message delivered; every failing one three times (reconsumeTimes 0, 1, 2).
            long retryWait = Common.timeoutMillis(30) + level3 + level4;
            Common.await("every message, and every failing message " + (MAX_RECONSUME + 1) + " times", retryWait,
                    () -> {
                        for (Expected e : msgs) {
                            List<Delivery> ds = deliveries.get(e.key);
                            if (ds == null || ds.size() < (failing(e.index) ? MAX_RECONSUME + 1 : 1)) {
                                return false;
                            }
                        }
                        return true;
                    }, () -> {
                        int done = 0;
                        int retries = 0;
                        for (Expected e : msgs) {
                            List<Delivery> ds = deliveries.getOrDefault(e.key, List.of());
                            if (ds.size() >= (failing(e.index) ? MAX_RECONSUME + 1 : 1)) {
                                done++;
                            }
                            if (failing(e.index)) {
                                retries += Math.max(0, ds.size() - 1);
                            }
                        }
                        return done + "/" + TOTAL + " complete, " + retries + " redeliveries of failing messages";
                    });

            // The dead-letter queue: wait for its route, then read it with another group, as a user would.
            final String[] dlqRoute = {null};
            diag.addLater(() -> "route of " + dlqTopic + ": " + dlqRoute[0]);
            Common.await("a route for " + dlqTopic, Common.timeoutMillis(30),
                    () -> (dlqRoute[0] = Common.routeOrNull(admin, dlqTopic)) != null, () -> "none");
            Collector dlq = new Collector(dlqTopic);
            dlq.expect(failingMsgs);
            diag.addLater(() -> "DLQ consumer: " + dlq.report());
            final String[] firstDlqProps = {null};
            diag.addLater(() -> "properties of the first DLQ message: " + firstDlqProps[0]);
            DefaultMQPushConsumer dlqConsumer = Common.pushConsumer(dlqGroup, "d-" + run, dlqTopic, "*", m -> {
                if (firstDlqProps[0] == null) {
                    firstDlqProps[0] = "reconsumeTimes=" + m.getReconsumeTimes() + " " + m.getProperties();
                }
                dlq.accept(m);
            });
            diag.addLater(() -> "DLQ consumer queues: " + Common.assignedQueues(dlqConsumer, dlqTopic));
            dlqConsumer.start();
            Common.await("every failing message in " + dlqTopic, Common.timeoutMillis(60), dlq::complete,
                    dlq::progress);
            try {
                dlq.checkClean();
            } catch (Common.Failure f) {
                problems.add("dead-letter queue: " + f.getMessage());
            }

            // A message in the DLQ must not be retried again: a fourth delivery would come level 5 after the third.
            long lastReturn = 0;
            for (Expected e : failingMsgs) {
                for (Delivery d : deliveries.get(e.key)) {
                    lastReturn = Math.max(lastReturn, d.returnedAt);
                }
            }
            long quietUntil = lastReturn + level5 + LATE_MS;
            while (System.currentTimeMillis() < quietUntil) {
                boolean extra = failingMsgs.stream().anyMatch(e -> deliveries.get(e.key).size() > MAX_RECONSUME + 1);
                if (extra) {
                    break;
                }
                Thread.sleep(100);
            }

            // Per-message checks.
            List<String> delays = new ArrayList<>();
            for (Expected e : msgs) {
                List<Delivery> ds;
                synchronized (deliveries.get(e.key)) {
                    ds = new ArrayList<>(deliveries.get(e.key));
                }
                for (Delivery d : ds) {
                    if (d.diff != null) {
                        problems.add("delivery " + d.reconsumeTimes + " differs from what was sent: " + d.diff);
                    }
                }
                if (!failing(e.index)) {
                    for (Delivery d : ds) {
                        if (d.reconsumeTimes != 0) {
                            problems.add(e.key + " (consumed successfully) delivered with reconsumeTimes "
                                    + d.reconsumeTimes);
                        }
                    }
                    continue;
                }
                StringBuilder rt = new StringBuilder();
                for (Delivery d : ds) {
                    rt.append(rt.length() == 0 ? "" : ",").append(d.reconsumeTimes);
                }
                if (!rt.toString().equals("0,1,2")) {
                    problems.add(e.key + ": reconsumeTimes of its deliveries were [" + rt
                            + "], expected [0,1,2] (then the DLQ)");
                    continue;
                }
                StringBuilder ms = new StringBuilder(e.key + ":");
                for (int i = 1; i < ds.size(); i++) {
                    long expected = Common.delayOfLevelMs(3 + ds.get(i - 1).reconsumeTimes);
                    long delay = ds.get(i).at - ds.get(i - 1).returnedAt;
                    ms.append(" retry ").append(i).append(" after ").append(delay).append(" ms (level ")
                            .append(3 + ds.get(i - 1).reconsumeTimes).append(" = ").append(expected).append(" ms)");
                    if (delay < expected) {
                        problems.add(e.key + ": retry " + i + " delivered " + delay + " ms after RECONSUME_LATER,"
                                + " before its delay of " + expected + " ms");
                    } else if (delay > expected + LATE_MS) {
                        problems.add(e.key + ": retry " + i + " delivered " + delay + " ms after RECONSUME_LATER,"
                                + " more than " + LATE_MS + " ms after its delay of " + expected + " ms");
                    }
                    if (!topic.equals(ds.get(i).topic)) {
                        problems.add(e.key + ": retry " + i + " was delivered with topic " + ds.get(i).topic
                                + " (the client restores the original topic from the RETRY_TOPIC property)");
                    }
                }
                delays.add(ms.toString());
            }
            diag.add("retry delays:\n  " + String.join("\n  ", delays));
            if (!unexpected.isEmpty()) {
                problems.add(unexpected.size() + " unexpected deliveries to the main group, e.g. " + unexpected.get(0));
            }
            System.err.println("  .. retry delays: " + (delays.isEmpty() ? "-" : delays.get(0)));
            problems.throwIfAny(diag);

            nudger.shutdownNow();
            Common.shutdownQuietly(dlqConsumer);
            Common.shutdownQuietly(consumer);
            Common.shutdownQuietly(producer);
            Common.shutdownQuietly(admin);
        });
    }
}
