package conveyor.grpc;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * SimpleConsumer checks (receive with a 10 s invisible duration, the minimum):
 *   simple-ack       a received and acked message does not come back within 2 x the invisible duration of the ack
 *   simple-redeliver a received message that is not acked comes back after the invisible duration (never before
 *                    the receive call + 10 s, at most 12 s after that), with deliveryAttempt 2 (1 the first time)
 *   simple-change-invisible-extend
 *                    changeInvisibleDuration(20 s) right after the receive: not redelivered at the old deadline
 *                    (receive + 10 s) nor before the change + 20 s; redelivered after it (attempt 2) and acked
 *   simple-change-invisible-ack
 *                    changeInvisibleDuration(20 s), then, past the old deadline (receive + 13 s), ack with the
 *                    handle the change returned (the SDK keeps it in the MessageView): the ack succeeds and the
 *                    message never comes back (watched until the new deadline + 12 s)
 *   simple-tag-filter
 *                    FilterExpression "TagA||TagB" gets exactly the TagA and TagB messages (a second group with
 *                    "TagC" gets exactly the TagC ones); watched for 6 s after the last expected one
 * The two pairs of checks share a topic and a consumer each; the scenarios run concurrently.
 */
public final class SimpleConsumers {
    static final long INV = G.INVISIBLE.toMillis();
    /** How late a redelivery may be, after the invisible duration ran out. */
    static final long LATE_MS = 12000;
    static final Duration EXTENDED = Duration.ofSeconds(20);

    public static void main(String[] args) {
        G.runAll(
            new G.Scenario("ack-redeliver", List.of("simple-ack", "simple-redeliver"), SimpleConsumers::ackRedeliver),
            new G.Scenario("change-invisible",
                List.of("simple-change-invisible-extend", "simple-change-invisible-ack"),
                SimpleConsumers::changeInvisible),
            new G.Scenario("tag-filter", List.of("simple-tag-filter"), SimpleConsumers::tagFilter));
    }

    static Producer producer(G.Scenario s, String topic) throws Exception {
        return G.build(s, "Producer(" + topic + ")", () -> G.PROVIDER.newProducerBuilder()
                .setClientConfiguration(G.config()).setTopics(topic).build());
    }

    static List<G.Sent> send(Producer p, String topic, String check, String tag, int from, int n) throws Exception {
        List<G.Sent> out = new ArrayList<>();
        for (int i = from; i < from + n; i++) {
            G.Sent m = new G.Sent(check, i, tag);
            m.sendStart = System.currentTimeMillis();
            m.messageId = p.send(m.build(topic)).getMessageId().toString();
            m.sendEnd = System.currentTimeMillis();
            out.add(m);
        }
        return out;
    }

    /** Per message: its deliveries so far. */
    static final class Track {
        final G.Sent sent;
        final String check;
        final List<G.Arrival> deliveries = new ArrayList<>();
        long ackedAt = -1;
        long changeStart = -1;
        long changeEnd = -1;
        boolean done;

        Track(G.Sent sent, String check) {
            this.sent = sent;
            this.check = check;
        }
    }

    static void ackRedeliver(G.Scenario s) throws Exception {
        String topic = G.topic("simple");
        G.Receiver r = new G.Receiver(s, G.group("simple"), topic, FilterExpression.SUB_ALL, G.INVISIBLE, false, 16);
        Producer p = producer(s, topic);
        try {
            Map<String, Track> tracks = new LinkedHashMap<>();
            for (G.Sent m : send(p, topic, "simple-ack", "ack", 0, 4)) {
                tracks.put(m.key, new Track(m, "simple-ack"));
            }
            for (G.Sent m : send(p, topic, "simple-redeliver", "hold", 4, 4)) {
                tracks.put(m.key, new Track(m, "simple-redeliver"));
            }
            long sentAt = System.currentTimeMillis();
            // Ends when every "hold" message came back and was acked, and 2 x INV passed since the last ack of
            // an "ack" message; or at the deadline.
            long deadline = sentAt + G.timeoutMs(20) + INV + LATE_MS;
            while (true) {
                long now = System.currentTimeMillis();
                long lastAck = 0;
                boolean allAcked = true;
                boolean allRedelivered = true;
                for (Track t : tracks.values()) {
                    if (t.check.equals("simple-ack")) {
                        allAcked &= t.ackedAt >= 0;
                        lastAck = Math.max(lastAck, t.ackedAt);
                    } else {
                        allRedelivered &= t.done;
                    }
                }
                // The watch over the acked messages ends 2 x INV after the last ack.
                long watchEnd = allAcked ? lastAck + 2 * INV : Long.MAX_VALUE;
                if (allAcked && allRedelivered && now >= watchEnd) {
                    break;
                }
                if (now >= Math.max(deadline, allAcked ? watchEnd : 0)) {
                    break;
                }
                G.Arrival a = r.poll(allAcked && allRedelivered ? watchEnd : Math.max(deadline, allAcked ? watchEnd : 0));
                if (a == null) {
                    continue;
                }
                Track t = tracks.get(G.keyOf(a.view));
                if (t == null) {
                    s.problem("simple-ack", "received a message that was not sent: " + G.describe(a.view));
                    continue;
                }
                t.deliveries.add(a);
                int n = t.deliveries.size();
                if (n == 1) {
                    List<String> d = t.sent.differences(a.view, topic, true);
                    if (!d.isEmpty()) {
                        s.problem(t.check, t.sent.key + " arrived different from what was sent: " + String.join("; ", d));
                    }
                    if (a.view.getDeliveryAttempt() != 1) {
                        s.problem(t.check, t.sent.key + " first arrived with deliveryAttempt "
                                + a.view.getDeliveryAttempt());
                    }
                    if (t.check.equals("simple-ack")) {
                        try {
                            r.consumer.ack(a.view);
                            t.ackedAt = System.currentTimeMillis();
                        } catch (Exception e) {
                            t.ackedAt = System.currentTimeMillis();
                            s.problem("simple-ack", "ack of " + t.sent.key + " failed: " + e);
                        }
                    }
                    continue;
                }
                if (t.check.equals("simple-ack")) {
                    s.problem("simple-ack", "acked message " + t.sent.key + " came back " + (a.at - t.ackedAt)
                            + " ms after the ack (" + G.describe(a.view) + ")");
                    continue;
                }
                G.Arrival first = t.deliveries.get(0);
                if (n == 2) {
                    long early = first.receiveStart + INV;
                    long late = first.at + INV + LATE_MS;
                    s.diag("simple-redeliver", t.sent.key + " redelivered " + (a.at - first.at)
                            + " ms after the first delivery, attempt " + a.view.getDeliveryAttempt());
                    if (a.at < early) {
                        s.problem("simple-redeliver", t.sent.key + " came back " + (a.at - first.receiveStart)
                                + " ms after the receive call, before its invisible duration (" + INV + " ms) ran out");
                    } else if (a.at > late) {
                        s.problem("simple-redeliver", t.sent.key + " came back " + (a.at - first.at)
                                + " ms after the first delivery (allowed: " + (INV + LATE_MS) + " ms)");
                    }
                    if (a.view.getDeliveryAttempt() != 2) {
                        s.problem("simple-redeliver", t.sent.key + " came back with deliveryAttempt "
                                + a.view.getDeliveryAttempt() + ", expected 2");
                    }
                    if (!a.view.getMessageId().equals(first.view.getMessageId())) {
                        s.problem("simple-redeliver", t.sent.key + " came back with message id "
                                + a.view.getMessageId() + ", first delivered as " + first.view.getMessageId());
                    }
                    try {
                        r.consumer.ack(a.view);
                    } catch (Exception e) {
                        s.problem("simple-redeliver", "ack of the redelivered " + t.sent.key + " failed: " + e);
                    }
                    t.done = true;
                    continue;
                }
                s.problem("simple-redeliver", t.sent.key + " came back a third time, after its redelivery was acked ("
                        + G.describe(a.view) + ")");
            }
            for (Track t : tracks.values()) {
                if (t.deliveries.isEmpty()) {
                    s.problem(t.check, t.sent.key + " was never received; " + r.errors());
                } else if (t.check.equals("simple-redeliver") && !t.done) {
                    s.problem(t.check, t.sent.key + " (not acked) did not come back within " + (INV + LATE_MS)
                            + " ms of its first delivery");
                }
            }
            s.report("simple-ack");
            s.report("simple-redeliver");
        } finally {
            G.closeQuietly(s, p);
            r.close();
        }
    }

    static void changeInvisible(G.Scenario s) throws Exception {
        String ext = "simple-change-invisible-extend";
        String ack = "simple-change-invisible-ack";
        String topic = G.topic("inv");
        G.Receiver r = new G.Receiver(s, G.group("inv"), topic, FilterExpression.SUB_ALL, G.INVISIBLE, false, 16);
        Producer p = producer(s, topic);
        try {
            Map<String, Track> tracks = new LinkedHashMap<>();
            for (G.Sent m : send(p, topic, ext, "extend", 0, 2)) {
                tracks.put(m.key, new Track(m, ext));
            }
            for (G.Sent m : send(p, topic, ack, "ackafter", 2, 2)) {
                tracks.put(m.key, new Track(m, ack));
            }
            long sentAt = System.currentTimeMillis();
            long deadline = sentAt + G.timeoutMs(20) + EXTENDED.toMillis() + LATE_MS;
            while (true) {
                long now = System.currentTimeMillis();
                // Next time-driven action: an "ackafter" message to ack past its old deadline, or the end of the
                // watch over its new one.
                long next = deadline;
                boolean finished = true;
                for (Track t : tracks.values()) {
                    if (t.deliveries.isEmpty()) {
                        finished = false;
                        continue;
                    }
                    G.Arrival first = t.deliveries.get(0);
                    if (t.check.equals(ack)) {
                        long ackAt = first.receiveStart + INV + 3000;
                        if (t.ackedAt < 0 && t.changeEnd >= 0) {
                            if (now >= ackAt) {
                                try {
                                    r.consumer.ack(first.view);
                                    s.diag(ack, t.sent.key + " acked " + (System.currentTimeMillis() - first.at)
                                            + " ms after its receive, with the handle from changeInvisibleDuration");
                                } catch (Exception e) {
                                    s.problem(ack, "ack of " + t.sent.key + " past its old deadline, with the handle "
                                            + "changeInvisibleDuration returned, failed: " + e);
                                }
                                t.ackedAt = System.currentTimeMillis();
                            } else {
                                next = Math.min(next, ackAt);
                            }
                        }
                        long watchEnd = t.changeEnd + EXTENDED.toMillis() + LATE_MS;
                        if (t.ackedAt < 0 || now < watchEnd) {
                            finished = false;
                            if (t.ackedAt >= 0) {
                                next = Math.min(next, watchEnd);
                            }
                        }
                    } else if (!t.done) {
                        finished = false;
                    }
                }
                if (finished || now >= deadline) {
                    break;
                }
                G.Arrival a = r.poll(next);
                if (a == null) {
                    continue;
                }
                Track t = tracks.get(G.keyOf(a.view));
                if (t == null) {
                    s.problem(ext, "received a message that was not sent: " + G.describe(a.view));
                    continue;
                }
                t.deliveries.add(a);
                int n = t.deliveries.size();
                if (n == 1) {
                    List<String> d = t.sent.differences(a.view, topic, true);
                    if (!d.isEmpty()) {
                        s.problem(t.check, t.sent.key + " arrived different from what was sent: " + String.join("; ", d));
                    }
                    if (a.view.getDeliveryAttempt() != 1) {
                        s.problem(t.check, t.sent.key + " first arrived with deliveryAttempt "
                                + a.view.getDeliveryAttempt());
                    }
                    t.changeStart = System.currentTimeMillis();
                    try {
                        r.consumer.changeInvisibleDuration(a.view, EXTENDED);
                    } catch (Exception e) {
                        s.problem(t.check, "changeInvisibleDuration(" + EXTENDED.getSeconds() + " s) of "
                                + t.sent.key + " failed: " + e);
                    }
                    t.changeEnd = System.currentTimeMillis();
                    s.diag(t.check, t.sent.key + ": changeInvisibleDuration " + (t.changeStart - a.at)
                            + " ms after the receive, took " + (t.changeEnd - t.changeStart) + " ms");
                    continue;
                }
                G.Arrival first = t.deliveries.get(0);
                if (t.check.equals(ack)) {
                    s.problem(ack, t.sent.key + " came back " + (a.at - first.at) + " ms after its first delivery"
                            + (t.ackedAt >= 0 ? ", " + (a.at - t.ackedAt) + " ms after the ack" : ", before the ack")
                            + " (" + G.describe(a.view) + ")");
                    continue;
                }
                if (n == 2) {
                    long oldDeadline = first.receiveStart + INV;
                    long newDeadline = t.changeStart + EXTENDED.toMillis();
                    s.diag(ext, t.sent.key + " redelivered " + (a.at - first.at) + " ms after the first delivery ("
                            + (a.at - t.changeStart) + " ms after the change), attempt " + a.view.getDeliveryAttempt());
                    if (a.at < newDeadline) {
                        s.problem(ext, t.sent.key + " came back " + (a.at - t.changeStart)
                                + " ms after changeInvisibleDuration(" + EXTENDED.getSeconds() + " s)"
                                + (a.at < oldDeadline + LATE_MS ? ", i.e. around its original deadline" : ""));
                    } else if (a.at > t.changeEnd + EXTENDED.toMillis() + LATE_MS) {
                        s.problem(ext, t.sent.key + " came back " + (a.at - t.changeEnd) + " ms after the change "
                                + "(allowed: " + (EXTENDED.toMillis() + LATE_MS) + " ms)");
                    }
                    if (a.view.getDeliveryAttempt() != 2) {
                        s.problem(ext, t.sent.key + " came back with deliveryAttempt " + a.view.getDeliveryAttempt()
                                + ", expected 2");
                    }
                    try {
                        r.consumer.ack(a.view);
                    } catch (Exception e) {
                        s.problem(ext, "ack of the redelivered " + t.sent.key + " failed: " + e);
                    }
                    t.done = true;
                    continue;
                }
                s.problem(ext, t.sent.key + " came back again after its redelivery was acked (" + G.describe(a.view)
                        + ")");
            }
            for (Track t : tracks.values()) {
                if (t.deliveries.isEmpty()) {
                    s.problem(t.check, t.sent.key + " was never received; " + r.errors());
                } else if (t.check.equals(ext) && !t.done) {
                    s.problem(ext, t.sent.key + " did not come back within " + (EXTENDED.toMillis() + LATE_MS)
                            + " ms of changeInvisibleDuration(" + EXTENDED.getSeconds() + " s)");
                } else if (t.check.equals(ack) && t.ackedAt < 0) {
                    s.problem(ack, t.sent.key + " was not acked (the scenario ran out of time)");
                }
            }
            s.report(ext);
            s.report(ack);
        } finally {
            G.closeQuietly(s, p);
            r.close();
        }
    }

    static void tagFilter(G.Scenario s) throws Exception {
        String check = "simple-tag-filter";
        String topic = G.topic("tag");
        G.Receiver ab = new G.Receiver(s, G.group("tag"), topic,
                new FilterExpression("TagA||TagB", FilterExpressionType.TAG), G.INVISIBLE, true, 32);
        G.Receiver c = new G.Receiver(s, G.group("tagc"), topic,
                new FilterExpression("TagC", FilterExpressionType.TAG), G.INVISIBLE, true, 32);
        Producer p = producer(s, topic);
        try {
            Map<String, G.Sent> wantAb = new LinkedHashMap<>();
            Map<String, G.Sent> wantC = new LinkedHashMap<>();
            String[] tags = {"TagC", "TagA", "TagB"};
            for (int i = 0; i < 18; i++) {
                String tag = tags[i % 3];
                G.Sent m = send(p, topic, check, tag, i, 1).get(0);
                (tag.equals("TagC") ? wantC : wantAb).put(m.key, m);
            }
            Map<String, G.Arrival> gotAb = new HashMap<>();
            Map<String, G.Arrival> gotC = new HashMap<>();
            long deadline = System.currentTimeMillis() + G.timeoutMs(30);
            long quietUntil = Long.MAX_VALUE;
            while (true) {
                long now = System.currentTimeMillis();
                if (quietUntil == Long.MAX_VALUE && gotAb.size() == wantAb.size() && gotC.size() == wantC.size()) {
                    quietUntil = now + 6000;
                }
                if (now >= quietUntil || now >= deadline) {
                    break;
                }
                long until = Math.min(quietUntil, deadline);
                boolean any = false;
                for (int which = 0; which < 2; which++) {
                    G.Receiver r = which == 0 ? ab : c;
                    Map<String, G.Sent> want = which == 0 ? wantAb : wantC;
                    Map<String, G.Arrival> got = which == 0 ? gotAb : gotC;
                    String filter = which == 0 ? "TagA||TagB" : "TagC";
                    G.Arrival a = r.queue.poll();
                    if (a == null) {
                        continue;
                    }
                    any = true;
                    String k = G.keyOf(a.view);
                    if (!want.containsKey(k)) {
                        s.problem(check, "filter \"" + filter + "\" received a message with tag "
                                + a.view.getTag().orElse(null) + " (" + G.describe(a.view) + ")");
                        continue;
                    }
                    if (got.containsKey(k)) {
                        s.problem(check, "filter \"" + filter + "\" received " + k + " twice");
                        continue;
                    }
                    got.put(k, a);
                    List<String> d = want.get(k).differences(a.view, topic, true);
                    if (!d.isEmpty()) {
                        s.problem(check, k + " arrived different from what was sent: " + String.join("; ", d));
                    }
                }
                if (!any) {
                    Thread.sleep(Math.max(1, Math.min(50, until - System.currentTimeMillis())));
                }
            }
            if (gotAb.size() < wantAb.size()) {
                s.problem(check, "filter \"TagA||TagB\" received " + gotAb.size() + " of the " + wantAb.size()
                        + " TagA/TagB messages within " + G.timeoutMs(30) / 1000 + " s; " + ab.errors());
            }
            if (gotC.size() < wantC.size()) {
                s.problem(check, "filter \"TagC\" received " + gotC.size() + " of the " + wantC.size()
                        + " TagC messages within " + G.timeoutMs(30) / 1000 + " s; " + c.errors());
            }
            s.report(check);
        } finally {
            G.closeQuietly(s, p);
            ab.close();
            c.close();
        }
    }
}
