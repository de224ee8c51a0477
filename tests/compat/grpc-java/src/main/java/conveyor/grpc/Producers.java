package conveyor.grpc;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * Producer-side checks, each received by a SimpleConsumer that acks what it gets:
 *   send-normal      200 sync sends; every message received once with identical body, tag, keys, user properties
 *                    and message id (the send receipt's)
 *   send-fifo        4 message groups x 50 messages to a FIFO topic, consumed by a FIFO (consumeMessageOrderly)
 *                    group: each group arrives complete and in send order, with its message group
 *   send-delay       deliveryTimestamp = T + 3 s (DELAY topic): received not before T + 3 s, not after T + 6 s
 *   tx-commit        transactional messages committed at once are delivered (once; again only if the broker
 *                    checked back the committed transaction, which Apache does when its commit is processed late)
 *   tx-rollback      rolled-back ones never are (watched until the check-backs are over, plus 6 s)
 *   tx-check-commit  ones left open are resolved by the TransactionChecker's check-back (COMMIT; the checker sees
 *                    the message's id and content) and then delivered
 */
public final class Producers {
    static final int NORMAL_COUNT = 200;
    static final int FIFO_GROUPS = 4;
    static final int FIFO_PER_GROUP = 50;
    static final int DELAY_COUNT = 5;
    static final long DELAY_MS = 3000;
    static final long DELAY_LATE_MS = 3000;
    static final int TX_EACH = 3;

    public static void main(String[] args) {
        G.runAll(
            new G.Scenario("send-normal", List.of("send-normal"), Producers::normal),
            new G.Scenario("send-fifo", List.of("send-fifo"), Producers::fifo),
            new G.Scenario("send-delay", List.of("send-delay"), Producers::delay),
            new G.Scenario("transactions", List.of("tx-commit", "tx-rollback", "tx-check-commit"),
                Producers::transactions));
    }

    static Producer producer(G.Scenario s, String topic) throws Exception {
        return G.build(s, "Producer(" + topic + ")", () -> G.PROVIDER.newProducerBuilder()
                .setClientConfiguration(G.config()).setTopics(topic).build());
    }

    static void send(Producer p, String topic, G.Sent m) throws Exception {
        m.sendStart = System.currentTimeMillis();
        SendReceipt r = p.send(m.build(topic));
        m.sendEnd = System.currentTimeMillis();
        m.messageId = r.getMessageId().toString();
    }

    static void normal(G.Scenario s) throws Exception {
        String check = "send-normal";
        String topic = G.topic("normal");
        G.Receiver r = new G.Receiver(s, G.group("normal"), topic, FilterExpression.SUB_ALL, G.INVISIBLE, true, 32);
        Producer p = producer(s, topic);
        try {
            List<G.Sent> sent = new ArrayList<>();
            String[] tags = {"TagA", "TagB", null};
            for (int i = 0; i < NORMAL_COUNT; i++) {
                G.Sent m = new G.Sent(check, i, tags[i % tags.length]);
                send(p, topic, m);
                sent.add(m);
            }
            s.diag(check, "sent " + sent.size() + " messages in "
                    + (sent.get(sent.size() - 1).sendEnd - sent.get(0).sendStart) + " ms");
            G.receiveAll(s, check, r, topic, G.byKey(sent), G.timeoutMs(60));
            s.report(check);
        } finally {
            G.closeQuietly(s, p);
            r.close();
        }
    }

    static void fifo(G.Scenario s) throws Exception {
        String check = "send-fifo";
        String topic = G.topic("fifo");
        G.Receiver r = new G.Receiver(s, G.group("fifo"), topic, FilterExpression.SUB_ALL, G.INVISIBLE, true, 32);
        Producer p = producer(s, topic);
        try {
            List<G.Sent> sent = new ArrayList<>();
            Map<String, G.Sent> byKey = new LinkedHashMap<>();
            // Round-robin over the groups: the groups' messages interleave in the queues they share.
            for (int i = 0; i < FIFO_PER_GROUP; i++) {
                for (int g = 0; g < FIFO_GROUPS; g++) {
                    G.Sent m = new G.Sent(check, g * FIFO_PER_GROUP + i, null);
                    m.messageGroup = "mg_" + g;
                    m.props.put("p_seq", Integer.toString(i));
                    send(p, topic, m);
                    sent.add(m);
                    byKey.put(m.key, m);
                }
            }
            Map<String, G.Arrival> first = G.receiveAll(s, check, r, topic, byKey, G.timeoutMs(60));
            // Per message group, the arrival order must be the send order.
            Map<String, List<Integer>> order = new LinkedHashMap<>();
            List<G.Arrival> arrivals = new ArrayList<>(first.values());
            for (G.Arrival a : arrivals) {
                G.Sent m = byKey.get(G.keyOf(a.view));
                order.computeIfAbsent(m.messageGroup, k -> new ArrayList<>()).add(Integer.parseInt(m.props.get("p_seq")));
            }
            for (Map.Entry<String, List<Integer>> e : order.entrySet()) {
                List<Integer> seqs = e.getValue();
                for (int i = 0; i < seqs.size(); i++) {
                    if (seqs.get(i) != i) {
                        s.problem(check, "message group " + e.getKey() + " arrived out of order: position " + i
                                + " holds seq " + seqs.get(i) + " (order " + abbreviate(seqs) + ")");
                        break;
                    }
                }
            }
            s.report(check);
        } finally {
            G.closeQuietly(s, p);
            r.close();
        }
    }

    static String abbreviate(List<Integer> l) {
        return l.size() <= 20 ? l.toString() : l.subList(0, 20) + "...";
    }

    static void delay(G.Scenario s) throws Exception {
        String check = "send-delay";
        String topic = G.topic("delay");
        G.Receiver r = new G.Receiver(s, G.group("delay"), topic, FilterExpression.SUB_ALL, G.INVISIBLE, true, 32);
        Producer p = producer(s, topic);
        try {
            List<G.Sent> sent = new ArrayList<>();
            for (int i = 0; i < DELAY_COUNT; i++) {
                G.Sent m = new G.Sent(check, i, "TagD");
                long t = System.currentTimeMillis();
                m.deliveryTimestamp = t + DELAY_MS;
                send(p, topic, m);
                sent.add(m);
            }
            Map<String, G.Arrival> first = G.receiveAll(s, check, r, topic, G.byKey(sent),
                    DELAY_MS + G.timeoutMs(30));
            List<String> measured = new ArrayList<>();
            for (G.Sent m : sent) {
                G.Arrival a = first.get(m.key);
                if (a == null) {
                    continue;
                }
                long rel = a.at - m.deliveryTimestamp;
                measured.add(rel + " ms");
                if (a.at < m.deliveryTimestamp) {
                    s.problem(check, m.key + " (deliveryTimestamp T+" + DELAY_MS + " ms) arrived " + (-rel)
                            + " ms early, at T+" + (a.at - (m.deliveryTimestamp - DELAY_MS)) + " ms");
                } else if (rel > DELAY_LATE_MS) {
                    s.problem(check, m.key + " (deliveryTimestamp T+" + DELAY_MS + " ms) arrived " + rel
                            + " ms after it was due (allowed: " + DELAY_LATE_MS + " ms)");
                }
            }
            s.diag(check, "arrival relative to the delivery timestamp: " + measured);
            s.report(check);
        } finally {
            G.closeQuietly(s, p);
            r.close();
        }
    }

    static void transactions(G.Scenario s) throws Exception {
        String topic = G.topic("tx");
        G.Receiver r = new G.Receiver(s, G.group("tx"), topic, FilterExpression.SUB_ALL, G.INVISIBLE, true, 32);
        Map<String, G.Sent> commit = new LinkedHashMap<>();
        Map<String, G.Sent> rollback = new LinkedHashMap<>();
        Map<String, G.Sent> unknown = new LinkedHashMap<>();
        Map<String, G.Sent> byId = new ConcurrentHashMap<>();
        Map<String, String> kindById = new ConcurrentHashMap<>();
        // Check-backs: message id -> times the checker was asked.
        Map<String, List<Long>> checks = new ConcurrentHashMap<>();
        List<String> checkerProblems = Collections.synchronizedList(new ArrayList<>());
        Producer p = G.build(s, "transactional Producer(" + topic + ")", () -> G.PROVIDER.newProducerBuilder()
                .setClientConfiguration(G.config()).setTopics(topic)
                .setTransactionChecker((MessageView v) -> {
                    long now = System.currentTimeMillis();
                    String id = v.getMessageId().toString();
                    checks.computeIfAbsent(id, k -> Collections.synchronizedList(new ArrayList<>())).add(now);
                    String kind = kindById.get(id);
                    s.diag("tx-check-commit", "check-back for " + G.describe(v) + " (" + kind + ")");
                    if (kind == null) {
                        checkerProblems.add("check-back for a message this producer did not send: " + G.describe(v));
                        return TransactionResolution.UNKNOWN;
                    }
                    G.Sent m = byId.get(id);
                    List<String> d = m.differences(v, topic, true);
                    if (!d.isEmpty()) {
                        checkerProblems.add("the checker's view of " + m.key + " differs from what was sent: "
                                + String.join("; ", d));
                    }
                    return kind.equals("rollback") ? TransactionResolution.ROLLBACK : TransactionResolution.COMMIT;
                })
                .build());
        try {
            List<Transaction> open = new ArrayList<>();
            for (int i = 0; i < TX_EACH * 3; i++) {
                String kind = Arrays.asList("commit", "rollback", "unknown").get(i % 3);
                String check = kind.equals("commit") ? "tx-commit" : kind.equals("rollback") ? "tx-rollback"
                        : "tx-check-commit";
                G.Sent m = new G.Sent(check, i, "TagT");
                Transaction tx = p.beginTransaction();
                m.sendStart = System.currentTimeMillis();
                SendReceipt rc = p.send(m.build(topic), tx);
                m.sendEnd = System.currentTimeMillis();
                m.messageId = rc.getMessageId().toString();
                byId.put(m.messageId, m);
                kindById.put(m.messageId, kind);
                switch (kind) {
                    case "commit":
                        tx.commit();
                        commit.put(m.key, m);
                        break;
                    case "rollback":
                        tx.rollback();
                        rollback.put(m.key, m);
                        break;
                    default:
                        open.add(tx); // neither committed nor rolled back: left to the check-back
                        unknown.put(m.key, m);
                        break;
                }
            }
            long sentAt = System.currentTimeMillis();
            s.diag("sent " + commit.size() + " committed, " + rollback.size() + " rolled back, " + unknown.size()
                    + " open transactional messages");

            Map<String, G.Arrival> got = new LinkedHashMap<>();
            // Wait for the committed and the checked-back messages (the check-back takes the broker's transaction
            // timeout and check interval), then watch a further 6 s for anything rolled back.
            long deadline = sentAt + G.timeoutMs(90);
            long quietUntil = Long.MAX_VALUE;
            while (true) {
                long now = System.currentTimeMillis();
                boolean complete = got.keySet().containsAll(commit.keySet())
                        && got.keySet().containsAll(unknown.keySet());
                if (complete && quietUntil == Long.MAX_VALUE) {
                    quietUntil = now + 6000;
                }
                if (now >= quietUntil || now >= deadline) {
                    break;
                }
                G.Arrival a = r.poll(Math.min(deadline, quietUntil));
                if (a == null) {
                    continue;
                }
                String k = G.keyOf(a.view);
                String check = commit.containsKey(k) ? "tx-commit" : rollback.containsKey(k) ? "tx-rollback"
                        : unknown.containsKey(k) ? "tx-check-commit" : null;
                if (check == null) {
                    s.problem("tx-commit", "received a message that was not sent: " + G.describe(a.view));
                    continue;
                }
                if (check.equals("tx-rollback")) {
                    s.problem(check, "rolled-back message " + k + " was delivered " + (a.at - sentAt)
                            + " ms after the sends (" + G.describe(a.view) + ")");
                    continue;
                }
                if (got.containsKey(k)) {
                    G.Sent dup = commit.containsKey(k) ? commit.get(k) : unknown.get(k);
                    if (check.equals("tx-commit") && checks.containsKey(dup.messageId)) {
                        // The broker checked back a transaction the producer had already committed (its commit was
                        // not processed yet) and the checker said COMMIT again: a duplicate at-least-once allows.
                        s.diag(check, "note: " + k + " delivered again after a check-back of its committed "
                                + "transaction (" + G.describe(a.view) + ")");
                    } else {
                        s.problem(check, k + " was delivered twice (" + G.describe(a.view) + ")");
                    }
                    continue;
                }
                got.put(k, a);
                G.Sent m = commit.containsKey(k) ? commit.get(k) : unknown.get(k);
                List<String> d = m.differences(a.view, topic, true);
                if (!d.isEmpty()) {
                    s.problem(check, k + " arrived different from what was sent: " + String.join("; ", d));
                }
            }
            for (G.Sent m : commit.values()) {
                if (!got.containsKey(m.key)) {
                    s.problem("tx-commit", "committed message " + m.key + " was not delivered within "
                            + G.timeoutMs(90) / 1000 + " s");
                }
            }
            for (G.Sent m : unknown.values()) {
                List<Long> c = checks.get(m.messageId);
                G.Arrival a = got.get(m.key);
                if (c == null) {
                    s.problem("tx-check-commit", "no check-back for the open transaction of " + m.key + " within "
                            + G.timeoutMs(90) / 1000 + " s");
                } else if (a == null) {
                    s.problem("tx-check-commit", m.key + " was checked back (COMMIT) " + (c.get(0) - m.sendEnd)
                            + " ms after its send but not delivered");
                } else {
                    s.diag("tx-check-commit", m.key + ": first check-back " + (c.get(0) - m.sendEnd)
                            + " ms after the send (" + c.size() + " check-backs), delivered "
                            + (a.at - c.get(0)) + " ms after it");
                    if (a.at < c.get(0)) {
                        s.problem("tx-check-commit", m.key + " was delivered before its check-back");
                    }
                }
            }
            for (String cp : checkerProblems) {
                s.problem("tx-check-commit", cp);
            }
            for (Map.Entry<String, List<Long>> e : checks.entrySet()) {
                String kind = kindById.get(e.getKey());
                if (kind != null && !kind.equals("unknown")) {
                    s.diag("note: the broker asked about a resolved (" + kind + ") transaction: " + e.getKey());
                }
            }
            s.report("tx-commit");
            s.report("tx-rollback");
            s.report("tx-check-commit");
        } finally {
            G.closeQuietly(s, p);
            r.close();
        }
    }
}
