package conveyor.grpc;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * push-fifo-order: FIFO order per message group under concurrency. 8 message groups x 25 messages go to a FIFO
 * topic from two producers at once (each sends its 4 groups round-robin, synchronously); two FIFO PushConsumers
 * (a consumeMessageOrderly group; 4 consumption threads each, FIFO consume accelerator on, so different groups are
 * consumed in parallel) consume them, taking 0-3 ms per message; the listeners hold the first messages until all
 * are sent, so every group has a backlog when consumption starts. Every message must be consumed; per message group,
 * a message is only consumed after the previous one of its group finished (never two of a group at once, across
 * both consumers), first deliveries come in send order without gaps, and a message consumed again must carry a
 * higher deliveryAttempt.
 */
public final class FifoPush {
    static final int GROUPS = 8;
    static final int PER_GROUP = 25;

    public static void main(String[] args) {
        G.runAll(new G.Scenario("push-fifo-order", List.of("push-fifo-order"), FifoPush::run));
    }

    static final class Event {
        final String consumer;
        final int seq;
        final int attempt;
        final long ticket;

        Event(String consumer, int seq, int attempt, long ticket) {
            this.consumer = consumer;
            this.seq = seq;
            this.attempt = attempt;
            this.ticket = ticket;
        }
    }

    static void run(G.Scenario s) throws Exception {
        String check = "push-fifo-order";
        String topic = G.topic("fifopush");
        String group = G.group("fifopush");
        AtomicLong tickets = new AtomicLong();
        Map<String, AtomicInteger> inFlight = new ConcurrentHashMap<>();
        Map<String, List<Event>> events = new ConcurrentHashMap<>();
        Map<String, G.Sent> byKey = new ConcurrentHashMap<>();
        Map<String, AtomicInteger> perConsumer = new ConcurrentHashMap<>();
        Map<String, List<String>> contentProblems = new ConcurrentHashMap<>();

        CountDownLatch gate = new CountDownLatch(1);
        List<PushConsumer> consumers = new ArrayList<>();
        try {
            for (String name : List.of("c1", "c2")) {
                perConsumer.put(name, new AtomicInteger());
                consumers.add(G.build(s, "FIFO PushConsumer " + name, () -> G.PROVIDER.newPushConsumerBuilder()
                        .setClientConfiguration(G.config())
                        .setConsumerGroup(group)
                        .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL))
                        .setConsumptionThreadCount(4)
                        .setEnableFifoConsumeAccelerator(true)
                        .setMessageListener((MessageView v) -> {
                            // Held until every message is sent, so that each group has a backlog to consume.
                            try {
                                if (!gate.await(G.timeoutMs(60), TimeUnit.MILLISECONDS)) {
                                    s.problem(check, "the sends did not finish within 60 s");
                                }
                            } catch (InterruptedException e) {
                                Thread.currentThread().interrupt();
                                return ConsumeResult.FAILURE;
                            }
                            String mg = v.getMessageGroup().orElse("<none>");
                            AtomicInteger n = inFlight.computeIfAbsent(mg, x -> new AtomicInteger());
                            int concurrent = n.incrementAndGet();
                            long ticket = tickets.incrementAndGet();
                            try {
                                String k = G.keyOf(v);
                                G.Sent m = k == null ? null : byKey.get(k);
                                if (concurrent > 1) {
                                    s.problem(check, "two messages of group " + mg + " consumed at once (" + name
                                            + " got " + G.describe(v) + " while another was in progress)");
                                }
                                if (m == null) {
                                    s.problem(check, "consumed a message that was not sent: " + G.describe(v));
                                    return ConsumeResult.SUCCESS;
                                }
                                List<String> d = m.differences(v, topic, true);
                                if (!d.isEmpty()) {
                                    contentProblems.put(k, d);
                                }
                                perConsumer.get(name).incrementAndGet();
                                events.computeIfAbsent(mg, x -> Collections.synchronizedList(new ArrayList<>()))
                                        .add(new Event(name, Integer.parseInt(m.props.get("p_seq")),
                                                v.getDeliveryAttempt(), ticket));
                                Thread.sleep(ThreadLocalRandom.current().nextInt(4)); // simulated work
                                return ConsumeResult.SUCCESS;
                            } catch (InterruptedException e) {
                                Thread.currentThread().interrupt();
                                return ConsumeResult.FAILURE;
                            } finally {
                                n.decrementAndGet();
                            }
                        })
                        .build()));
            }

            // Two producers, each with its own 4 groups, sending concurrently.
            List<G.Sent> all = Collections.synchronizedList(new ArrayList<>());
            for (int g = 0; g < GROUPS; g++) {
                for (int i = 0; i < PER_GROUP; i++) {
                    G.Sent m = new G.Sent(check, g * PER_GROUP + i, "TagF");
                    m.messageGroup = "mg_" + g;
                    m.props.put("p_seq", Integer.toString(i));
                    byKey.put(m.key, m);
                    all.add(m);
                }
            }
            List<Thread> senders = new ArrayList<>();
            List<String> sendErrors = Collections.synchronizedList(new ArrayList<>());
            for (int pi = 0; pi < 2; pi++) {
                final int half = pi;
                Producer p = G.build(s, "Producer " + pi, () -> G.PROVIDER.newProducerBuilder()
                        .setClientConfiguration(G.config()).setTopics(topic).build());
                Thread t = new Thread(() -> {
                    try {
                        for (int i = 0; i < PER_GROUP; i++) {
                            for (int g = half * GROUPS / 2; g < (half + 1) * GROUPS / 2; g++) {
                                G.Sent m = byKey.get("k_" + check + "_" + G.runId() + "_" + (g * PER_GROUP + i));
                                m.sendStart = System.currentTimeMillis();
                                m.messageId = p.send(m.build(topic)).getMessageId().toString();
                                m.sendEnd = System.currentTimeMillis();
                            }
                        }
                    } catch (Exception e) {
                        sendErrors.add(e.toString());
                    } finally {
                        G.closeQuietly(s, p);
                    }
                }, "producer-" + pi);
                senders.add(t);
            }
            long t0 = System.currentTimeMillis();
            senders.forEach(Thread::start);
            for (Thread t : senders) {
                t.join();
            }
            gate.countDown();
            if (!sendErrors.isEmpty()) {
                throw new G.Failure("send failed: " + sendErrors.get(0));
            }
            s.diag(check, "sent " + all.size() + " messages in " + (System.currentTimeMillis() - t0) + " ms");

            try {
                G.await(s, "every message consumed", G.timeoutMs(60), () -> {
                    int firsts = 0;
                    for (List<Event> l : events.values()) {
                        synchronized (l) {
                            firsts += (int) l.stream().mapToInt(e -> e.seq).distinct().count();
                        }
                    }
                    return firsts == all.size();
                }, () -> "consumed per consumer " + perConsumer);
            } catch (G.Failure f) {
                s.problem(check, f.getMessage());
            }
            s.diag(check, "messages consumed per consumer: " + perConsumer);

            for (Map.Entry<String, List<String>> e : contentProblems.entrySet()) {
                s.problem(check, e.getKey() + " arrived different from what was sent: " + String.join("; ", e.getValue()));
            }
            Map<String, List<Event>> sorted = new LinkedHashMap<>();
            for (int g = 0; g < GROUPS; g++) {
                List<Event> l = new ArrayList<>(events.getOrDefault("mg_" + g, List.of()));
                l.sort((a, b) -> Long.compare(a.ticket, b.ticket));
                sorted.put("mg_" + g, l);
            }
            int redeliveries = 0;
            for (Map.Entry<String, List<Event>> e : sorted.entrySet()) {
                int max = -1;
                Map<Integer, Integer> lastAttempt = new LinkedHashMap<>();
                for (Event ev : e.getValue()) {
                    if (ev.seq == max + 1) {
                        max = ev.seq;
                    } else if (ev.seq > max + 1) {
                        s.problem(check, "group " + e.getKey() + ": seq " + ev.seq + " consumed (by " + ev.consumer
                                + ") before seq " + (max + 1) + " (order " + order(e.getValue()) + ")");
                        break;
                    } else {
                        redeliveries++;
                        Integer prev = lastAttempt.get(ev.seq);
                        if (prev != null && ev.attempt <= prev) {
                            s.problem(check, "group " + e.getKey() + ": seq " + ev.seq + " consumed again with "
                                    + "deliveryAttempt " + ev.attempt + " (previously " + prev + ")");
                        }
                    }
                    lastAttempt.put(ev.seq, ev.attempt);
                }
                if (max != PER_GROUP - 1) {
                    s.problem(check, "group " + e.getKey() + ": only seq 0.." + max + " consumed in order (order "
                            + order(e.getValue()) + ")");
                }
            }
            s.diag(check, "redeliveries: " + redeliveries);
            s.report(check);
        } finally {
            gate.countDown();
            for (PushConsumer c : consumers) {
                G.closeQuietly(s, c);
            }
        }
    }

    static String order(List<Event> l) {
        StringBuilder sb = new StringBuilder("[");
        for (int i = 0; i < Math.min(l.size(), 30); i++) {
            Event e = l.get(i);
            sb.append(i == 0 ? "" : " ").append(e.seq).append(e.attempt > 1 ? "(a" + e.attempt + ")" : "");
        }
        return sb.append(l.size() > 30 ? " ...]" : "]").toString();
    }
}
