package conveyor.compat;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Thread-safe record of what a consumer received, checked against the expected messages.
 * Messages are matched by their first key. Duplicates are counted but allowed; a message that is not
 * expected (wrong tag, an old message after resume, garbage) is recorded as unexpected.
 */
final class Collector implements Consumer<MessageExt> {
    private final Map<String, Expected> expected = new ConcurrentHashMap<>();
    private final Map<String, AtomicInteger> received = new ConcurrentHashMap<>();
    private final Map<Integer, AtomicInteger> receivedPerQueue = new ConcurrentHashMap<>();
    private final ConcurrentLinkedQueue<String> problems = new ConcurrentLinkedQueue<>();
    private final ConcurrentLinkedQueue<String> unexpected = new ConcurrentLinkedQueue<>();
    private final AtomicInteger problemCount = new AtomicInteger();
    private final AtomicInteger unexpectedCount = new AtomicInteger();
    private final AtomicInteger deliveries = new AtomicInteger();
    /** Topic the received copies must carry; null: the topic each message was sent to. */
    private final String topicOverride;

    Collector() {
        this(null);
    }

    /** A collector for copies that live in another topic than the one they were sent to (e.g. a DLQ). */
    Collector(String topicOverride) {
        this.topicOverride = topicOverride;
    }

    void expect(Collection<Expected> messages) {
        for (Expected e : messages) {
            expected.put(e.key, e);
        }
    }

    @Override
    public void accept(MessageExt m) {
        deliveries.incrementAndGet();
        receivedPerQueue.computeIfAbsent(m.getQueueId(), q -> new AtomicInteger()).incrementAndGet();
        String keys = m.getKeys();
        String first = keys == null ? "" : keys.split(MessageConst.KEY_SEPARATOR, 2)[0];
        Expected e = expected.get(first);
        if (e == null) {
            if (unexpectedCount.incrementAndGet() <= 10) {
                unexpected.add("topic=" + m.getTopic() + " queue=" + m.getQueueId() + " offset=" + m.getQueueOffset()
                        + " keys=" + Expected.quote(keys) + " tags=" + Expected.quote(m.getTags())
                        + " msgId=" + m.getMsgId());
            }
            return;
        }
        String diff = topicOverride == null ? e.compare(m) : e.compare(m, topicOverride);
        if (diff != null && problemCount.incrementAndGet() <= 10) {
            problems.add(diff + " (queue=" + m.getQueueId() + " offset=" + m.getQueueOffset() + ")");
        }
        received.computeIfAbsent(first, k -> new AtomicInteger()).incrementAndGet();
    }

    boolean complete() {
        return received.size() >= expected.size() && missing(1).isEmpty();
    }

    /** How many times the message with this key was delivered (0 if never). */
    int count(String key) {
        AtomicInteger n = received.get(key);
        return n == null ? 0 : n.get();
    }

    int distinct() {
        return received.size();
    }

    int deliveries() {
        return deliveries.get();
    }

    int unexpectedCount() {
        return unexpectedCount.get();
    }

    int problemCount() {
        return problemCount.get();
    }

    List<String> missing(int limit) {
        List<String> out = new ArrayList<>();
        for (Expected e : expected.values()) {
            if (!received.containsKey(e.key)) {
                out.add(e.key + " [" + e.sendInfo + "]");
                if (out.size() >= limit) {
                    break;
                }
            }
        }
        return out;
    }

    String progress() {
        return distinct() + "/" + expected.size() + " distinct received, " + deliveries() + " deliveries";
    }

    /** Multi-line report used as a diagnostic. */
    String report() {
        StringBuilder sb = new StringBuilder();
        sb.append("received ").append(progress()).append(", ").append(problemCount()).append(" mismatched, ")
                .append(unexpectedCount()).append(" unexpected\n");
        Map<Integer, Integer> sentPerQueue = new TreeMap<>();
        for (Expected e : expected.values()) {
            sentPerQueue.merge(e.sentQueueId, 1, Integer::sum);
        }
        sb.append("sent per queue (-1 = oneway/unknown): ").append(sentPerQueue).append('\n');
        sb.append("deliveries per queue: ").append(new TreeMap<>(receivedPerQueue)).append('\n');
        List<String> miss = missing(10);
        if (!miss.isEmpty()) {
            sb.append("missing (first ").append(miss.size()).append("): ").append(String.join("; ", miss)).append('\n');
        }
        for (String p : problems) {
            sb.append("mismatch: ").append(p).append('\n');
        }
        for (String u : unexpected) {
            sb.append("unexpected: ").append(u).append('\n');
        }
        return sb.toString().trim();
    }

    /** Throws when anything received differed from what was sent or was not expected at all. */
    void checkClean() throws Common.Failure {
        if (problemCount() > 0) {
            throw new Common.Failure(problemCount() + " received messages differ from what was sent, e.g. "
                    + problems.peek());
        }
        if (unexpectedCount() > 0) {
            throw new Common.Failure(unexpectedCount() + " unexpected messages received, e.g. " + unexpected.peek());
        }
    }
}
