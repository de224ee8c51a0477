package conveyor.grpc;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * PushConsumer checks:
 *   push-success             50 messages, the listener returns SUCCESS: each consumed once (attempt 1), identical
 *   push-failure-redelivery  a group with retryMaxTimes 2 (mqadmin updateSubGroup -r 2): the listener returns
 *                            FAILURE for 3 of 8 messages every time; those are redelivered with deliveryAttempt
 *                            1, 2, 3 (never more); the other 5 are consumed once
 *   push-dlq                 the 3 then land in %DLQ%group (read by a SimpleConsumer of another group) with their
 *                            body, tag, keys, user properties and message id; none of the 5 do
 */
public final class PushConsumers {
    static final int SUCCESS_COUNT = 50;
    static final int FAIL_COUNT = 3;
    static final int OK_COUNT = 5;
    static final int MAX_ATTEMPTS = Resources.RETRY_MAX_TIMES + 1;

    public static void main(String[] args) {
        G.runAll(
            new G.Scenario("push-success", List.of("push-success"), PushConsumers::success),
            new G.Scenario("push-retry-dlq", List.of("push-failure-redelivery", "push-dlq"), PushConsumers::retryDlq));
    }

    static final class Delivery {
        final MessageView view;
        final long at;

        Delivery(MessageView view, long at) {
            this.view = view;
            this.at = at;
        }
    }

    static Producer producer(G.Scenario s, String topic) throws Exception {
        return G.build(s, "Producer(" + topic + ")", () -> G.PROVIDER.newProducerBuilder()
                .setClientConfiguration(G.config()).setTopics(topic).build());
    }

    static PushConsumer pushConsumer(G.Scenario s, String group, String topic,
                                     java.util.function.Function<MessageView, ConsumeResult> listener) throws Exception {
        return G.build(s, "PushConsumer(" + group + " on " + topic + ")", () -> G.PROVIDER.newPushConsumerBuilder()
                .setClientConfiguration(G.config())
                .setConsumerGroup(group)
                .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL))
                .setConsumptionThreadCount(4)
                .setMessageListener(listener::apply)
                .build());
    }

    static G.Sent send(Producer p, String topic, String check, String tag, int i) throws Exception {
        G.Sent m = new G.Sent(check, i, tag);
        m.sendStart = System.currentTimeMillis();
        m.messageId = p.send(m.build(topic)).getMessageId().toString();
        m.sendEnd = System.currentTimeMillis();
        return m;
    }

    static void success(G.Scenario s) throws Exception {
        String check = "push-success";
        String topic = G.topic("push");
        Map<String, List<Delivery>> got = new ConcurrentHashMap<>();
        PushConsumer c = pushConsumer(s, G.group("push"), topic, v -> {
            String k = G.keyOf(v);
            got.computeIfAbsent(k == null ? "?" : k, x -> Collections.synchronizedList(new ArrayList<>()))
                    .add(new Delivery(v, System.currentTimeMillis()));
            return ConsumeResult.SUCCESS;
        });
        Producer p = producer(s, topic);
        try {
            Map<String, G.Sent> sent = new LinkedHashMap<>();
            for (int i = 0; i < SUCCESS_COUNT; i++) {
                G.Sent m = send(p, topic, check, i % 2 == 0 ? "TagA" : "TagB", i);
                sent.put(m.key, m);
            }
            try {
                G.await(s, "every message consumed", G.timeoutMs(60),
                        () -> got.keySet().containsAll(sent.keySet()),
                        () -> got.size() + " of " + sent.size() + " consumed");
            } catch (G.Failure f) {
                s.problem(check, f.getMessage());
            }
            for (Map.Entry<String, List<Delivery>> e : got.entrySet()) {
                G.Sent m = sent.get(e.getKey());
                List<Delivery> ds = new ArrayList<>(e.getValue());
                if (m == null) {
                    s.problem(check, "consumed a message that was not sent: " + G.describe(ds.get(0).view));
                    continue;
                }
                if (ds.size() > 1) {
                    s.problem(check, m.key + " was consumed " + ds.size() + " times although the listener returned "
                            + "SUCCESS (attempts " + attempts(ds) + ")");
                }
                List<String> d = m.differences(ds.get(0).view, topic, true);
                if (!d.isEmpty()) {
                    s.problem(check, m.key + " arrived different from what was sent: " + String.join("; ", d));
                }
                if (ds.get(0).view.getDeliveryAttempt() != 1) {
                    s.problem(check, m.key + " arrived with deliveryAttempt " + ds.get(0).view.getDeliveryAttempt());
                }
            }
            s.report(check);
        } finally {
            G.closeQuietly(s, p);
            G.closeQuietly(s, c);
        }
    }

    static List<Integer> attempts(List<Delivery> ds) {
        List<Integer> out = new ArrayList<>();
        for (Delivery d : ds) {
            out.add(d.view.getDeliveryAttempt());
        }
        return out;
    }

    static void retryDlq(G.Scenario s) throws Exception {
        String redo = "push-failure-redelivery";
        String dlq = "push-dlq";
        String topic = G.topic("retry");
        String group = G.group("retry");
        String dlqTopic = G.dlqTopic("retry");
        Map<String, List<Delivery>> got = new ConcurrentHashMap<>();
        // The DLQ reader subscribes first (its topic exists: grpc.sh created it).
        G.Receiver dlqReader = new G.Receiver(s, G.group("dlq"), dlqTopic, FilterExpression.SUB_ALL, G.INVISIBLE,
                true, 32);
        PushConsumer c = pushConsumer(s, group, topic, v -> {
            String k = G.keyOf(v);
            got.computeIfAbsent(k == null ? "?" : k, x -> Collections.synchronizedList(new ArrayList<>()))
                    .add(new Delivery(v, System.currentTimeMillis()));
            s.diag(redo, "consumed " + G.describe(v));
            return "fail".equals(v.getTag().orElse(null)) ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
        });
        Producer p = producer(s, topic);
        try {
            Map<String, G.Sent> fail = new LinkedHashMap<>();
            Map<String, G.Sent> ok = new LinkedHashMap<>();
            for (int i = 0; i < FAIL_COUNT + OK_COUNT; i++) {
                boolean f = i % 3 == 0 && fail.size() < FAIL_COUNT;
                G.Sent m = send(p, topic, redo, f ? "fail" : "ok", i);
                (f ? fail : ok).put(m.key, m);
            }
            long sentAt = System.currentTimeMillis();
            Map<String, G.Sent> all = new LinkedHashMap<>(fail);
            all.putAll(ok);

            // Redelivery: every failing message reaches attempt MAX_ATTEMPTS.
            try {
                G.await(s, "each failing message delivered " + MAX_ATTEMPTS + " times", G.timeoutMs(90), () -> {
                    for (String k : fail.keySet()) {
                        List<Delivery> ds = got.get(k);
                        if (ds == null || ds.size() < MAX_ATTEMPTS) {
                            return false;
                        }
                    }
                    return got.keySet().containsAll(ok.keySet());
                }, () -> "deliveries " + summary(got, all));
            } catch (G.Failure f) {
                s.problem(redo, f.getMessage());
            }

            // Dead-letter queue: the failing messages, each once, as they were sent.
            Map<String, G.Arrival> inDlq = new LinkedHashMap<>();
            long deadline = System.currentTimeMillis() + G.timeoutMs(60);
            long quietUntil = Long.MAX_VALUE;
            while (true) {
                long now = System.currentTimeMillis();
                if (quietUntil == Long.MAX_VALUE && inDlq.keySet().containsAll(fail.keySet())) {
                    quietUntil = now + 3000;
                }
                if (now >= Math.min(deadline, quietUntil)) {
                    break;
                }
                G.Arrival a = dlqReader.poll(Math.min(deadline, quietUntil));
                if (a == null) {
                    continue;
                }
                String k = G.keyOf(a.view);
                if (ok.containsKey(k)) {
                    s.problem(dlq, "message " + k + ", consumed with SUCCESS, is in " + dlqTopic);
                    continue;
                }
                G.Sent m = fail.get(k);
                if (m == null) {
                    s.problem(dlq, "unexpected message in " + dlqTopic + ": " + G.describe(a.view));
                    continue;
                }
                if (inDlq.containsKey(k)) {
                    s.problem(dlq, k + " is in " + dlqTopic + " twice");
                    continue;
                }
                inDlq.put(k, a);
                List<Delivery> ds = got.get(k);
                long last = ds == null || ds.isEmpty() ? sentAt : ds.get(ds.size() - 1).at;
                s.diag(dlq, k + " read from " + dlqTopic + " " + (a.at - last) + " ms after its last delivery ("
                        + G.describe(a.view) + ", properties " + a.view.getProperties() + ")");
                List<String> d = m.differences(a.view, dlqTopic, true);
                if (!d.isEmpty()) {
                    s.problem(dlq, k + " in " + dlqTopic + " differs from what was sent: " + String.join("; ", d));
                }
            }
            for (String k : fail.keySet()) {
                if (!inDlq.containsKey(k)) {
                    s.problem(dlq, k + " (FAILURE on every attempt) did not reach " + dlqTopic + " within "
                            + G.timeoutMs(60) / 1000 + " s of its last attempt; " + dlqReader.errors());
                }
            }

            // Redelivery verdict, now that the DLQ wait gave extra attempts a chance to show up.
            for (Map.Entry<String, G.Sent> e : all.entrySet()) {
                G.Sent m = e.getValue();
                List<Delivery> ds = got.get(e.getKey());
                if (ds == null || ds.isEmpty()) {
                    s.problem(redo, m.key + " (" + m.tag + ") was never consumed");
                    continue;
                }
                ds = new ArrayList<>(ds);
                List<String> d = m.differences(ds.get(0).view, topic, true);
                if (!d.isEmpty()) {
                    s.problem(redo, m.key + " arrived different from what was sent: " + String.join("; ", d));
                }
                List<Integer> att = attempts(ds);
                if (fail.containsKey(m.key)) {
                    List<Integer> want = new ArrayList<>();
                    for (int i = 1; i <= MAX_ATTEMPTS; i++) {
                        want.add(i);
                    }
                    if (!att.equals(want)) {
                        s.problem(redo, m.key + " (FAILURE every time) was delivered with attempts " + att
                                + ", expected " + want + " (retryMaxTimes " + Resources.RETRY_MAX_TIMES + ")");
                    }
                    List<Long> gaps = new ArrayList<>();
                    for (int i = 1; i < ds.size(); i++) {
                        gaps.add(ds.get(i).at - ds.get(i - 1).at);
                    }
                    s.diag(redo, m.key + ": attempts " + att + ", ms between deliveries " + gaps);
                } else if (!att.equals(List.of(1))) {
                    s.problem(redo, m.key + " (SUCCESS) was delivered with attempts " + att + ", expected [1]");
                }
            }
            s.report(redo);
            s.report(dlq);
        } finally {
            G.closeQuietly(s, p);
            G.closeQuietly(s, c);
            dlqReader.close();
        }
    }

    static String summary(Map<String, List<Delivery>> got, Map<String, G.Sent> all) {
        StringBuilder sb = new StringBuilder();
        for (G.Sent m : all.values()) {
            List<Delivery> ds = got.get(m.key);
            sb.append(m.tag).append('#').append(m.index).append('=').append(ds == null ? 0 : ds.size()).append(' ');
        }
        return sb.toString().trim();
    }
}
