package conveyor.grpc;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * gRPC produce and SimpleConsumer receive/ack throughput with the official Java SDK (rocketmq-client-java), for
 * tests/bench/grpc.sh. Not one of the compatibility checks (grpc-java/sdk.sh does not list it).
 *
 *   GRPC_ENDPOINT=127.0.0.1:8081 java -cp "$(cat ~/.cache/conveyor/compat/grpc-java.classpath)" conveyor.grpc.Bench
 *
 * The topics and the groups must exist (grpc.sh creates them with mqadmin): BENCH_TOPIC, BENCH_WARMUP_TOPIC (NORMAL,
 * 8 queues), BENCH_GROUP and BENCH_WARMUP_GROUP. Phases, one after the other:
 *   0. warm-up (not reported): PRODUCERS x IN_FLIGHT/PRODUCERS async sends to the warm-up topic for WARMUP seconds,
 *      then the warm-up group receives and acks that topic for at most WARMUP seconds (the client's and the
 *      server's JIT and connections); meanwhile each bench consumer issues one receive on the still empty bench
 *      topic, so that the group's queue offsets exist before anything is produced (all of these receives have
 *      returned before phase 1 starts);
 *   1. produce: PRODUCERS Producer clients, IN_FLIGHT sendAsync calls in flight in all (a semaphore), BODY-byte
 *      bodies (the first 8 bytes a sequence number), for DURATION seconds; then the sends in flight are awaited.
 *      Rate = successful sends / (last completion - start); latency = sendAsync call to its completion;
 *   2. receive/ack: CONSUMERS SimpleConsumer clients (one thread each) call receive(BATCH, INVISIBLE) back to back
 *      and ackAsync every message they get, waiting for a batch's acks before the next receive, until every message
 *      of phase 1 was acked (or CONSUME_LIMIT seconds passed). Rate = acked / (last ack - first receive call).
 *      Then the receives still in flight are awaited (each at most the long-polling time): whatever they or earlier
 *      receives brought that was already acked counts as a duplicate.
 * Exact: every successful send received and acked once, no duplicate, no message that was not sent.
 *
 * Output (stdout), one line per phase, "key=value" separated by spaces:
 *   BENCH warmup sends=.. consumed=..
 *   BENCH produce sends=N errors=E secs=S rate=MSG_PER_S mb_per_s=M p50_ms=.. p90_ms=.. p99_ms=.. p999_ms=..
 *         max_ms=.. server_cpu_s=.. client_cpu_s=..
 *   BENCH consume expected=N acked=A received=R duplicates=D unknown=U receive_calls=C empty_receives=E
 *         receive_errors=.. ack_errors=.. secs=S rate=MSG_PER_S mb_per_s=M exact=true|false server_cpu_s=..
 *         client_cpu_s=..
 * server_cpu_s: user+system CPU time the processes in BENCH_SERVER_PIDS (space-separated) spent during the phase,
 * from /proc/PID/stat (ticks of BENCH_CLK_TCK per second, default 100); client_cpu_s: this JVM's. Diagnostics go to
 * stderr. Exit status 0 when both phases ran and the consume was exact, 1 otherwise.
 */
public final class Bench {
    static final String TOPIC = G.env("BENCH_TOPIC", "BenchGrpc");
    static final String WARM_TOPIC = G.env("BENCH_WARMUP_TOPIC", "BenchGrpcWarmup");
    static final String GROUP = G.env("BENCH_GROUP", "BenchGrpcGroup");
    static final String WARM_GROUP = G.env("BENCH_WARMUP_GROUP", "BenchGrpcWarmupGroup");
    static final int DURATION = Integer.parseInt(G.env("BENCH_DURATION", "12"));
    static final int WARMUP = Integer.parseInt(G.env("BENCH_WARMUP", "5"));
    static final int PRODUCERS = Integer.parseInt(G.env("BENCH_PRODUCERS", "2"));
    static final int IN_FLIGHT = Integer.parseInt(G.env("BENCH_IN_FLIGHT", "16"));
    static final int BODY = Integer.parseInt(G.env("BENCH_BODY", "1024"));
    static final int CONSUMERS = Integer.parseInt(G.env("BENCH_CONSUMERS", "4"));
    static final int BATCH = Integer.parseInt(G.env("BENCH_BATCH", "32"));
    static final Duration INVISIBLE = Duration.ofSeconds(Long.parseLong(G.env("BENCH_INVISIBLE", "30")));
    static final Duration AWAIT = Duration.ofSeconds(Long.parseLong(G.env("BENCH_AWAIT", "5")));
    static final int CONSUME_LIMIT = Integer.parseInt(G.env("BENCH_CONSUME_LIMIT", "120"));
    static final long CLK_TCK = Long.parseLong(G.env("BENCH_CLK_TCK", "100"));
    static final long T0 = System.nanoTime();

    public static void main(String[] args) {
        int rc;
        try {
            rc = run();
        } catch (Throwable e) {
            log("failed: " + e);
            e.printStackTrace();
            rc = 2;
        }
        System.out.flush();
        System.err.flush();
        // The SDK's clients are not closed: their shutdown waits for receives in flight and adds nothing here.
        Runtime.getRuntime().halt(rc);
    }

    static void log(String s) {
        System.err.printf(Locale.ROOT, "[bench] %7.3f %s%n", (System.nanoTime() - T0) / 1e9, s);
        System.err.flush();
    }

    static ClientConfiguration config() {
        return ClientConfiguration.newBuilder().setEndpoints(G.endpoint()).enableSsl(G.tls())
                .setRequestTimeout(Duration.ofSeconds(10)).build();
    }

    /** Builds a client, retrying for up to 30 s (the endpoint may not route a topic just created yet). */
    static <T> T build(String what, Callable<T> c) throws Exception {
        long deadline = System.currentTimeMillis() + 30_000;
        for (int attempt = 1; ; attempt++) {
            try {
                return c.call();
            } catch (Exception e) {
                log(what + " did not start (attempt " + attempt + "): " + e);
                if (System.currentTimeMillis() >= deadline) {
                    throw e;
                }
            }
            Thread.sleep(1000);
        }
    }

    static Producer producer(String topic) throws Exception {
        return build("Producer(" + topic + ")", () -> G.PROVIDER.newProducerBuilder()
                .setClientConfiguration(config()).setTopics(topic).build());
    }

    static SimpleConsumer consumer(String group, String topic) throws Exception {
        return build("SimpleConsumer(" + group + ")", () -> G.PROVIDER.newSimpleConsumerBuilder()
                .setClientConfiguration(config()).setConsumerGroup(group).setAwaitDuration(AWAIT)
                .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL)).build());
    }

    // ---------------------------------------------------------------- CPU time of the servers and of this JVM

    static final List<String> SERVER_PIDS = new ArrayList<>();

    static {
        for (String p : G.env("BENCH_SERVER_PIDS", "").split("\\s+")) {
            if (!p.isEmpty()) {
                SERVER_PIDS.add(p);
            }
        }
    }

    /** utime + stime of /proc/PID/stat in ticks (-1 if unreadable). */
    static long ticks(String pid) {
        try {
            String s = new String(Files.readAllBytes(Paths.get("/proc/" + pid + "/stat")), StandardCharsets.US_ASCII);
            String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
            // fields after the command: state(3) ppid ... utime is field 14 of the whole line, 12th here (index 11)
            return Long.parseLong(f[11]) + Long.parseLong(f[12]);
        } catch (IOException | RuntimeException e) {
            return -1;
        }
    }

    static long serverTicks() {
        long sum = 0;
        for (String p : SERVER_PIDS) {
            long t = ticks(p);
            if (t < 0) {
                return -1;
            }
            sum += t;
        }
        return SERVER_PIDS.isEmpty() ? -1 : sum;
    }

    static String cpu(long before, long after) {
        return before < 0 || after < 0 ? "na" : String.format(Locale.ROOT, "%.2f", (after - before) / (double) CLK_TCK);
    }

    // ---------------------------------------------------------------- produce

    static final class ProduceResult {
        long ok;
        long errors;
        double secs;
        long[] latNanos;
        String firstError;
    }

    /** Sends for SECS seconds with IN_FLIGHT sends in flight over the PRODUCERS clients; seq numbers from 0. */
    static ProduceResult produce(List<Producer> producers, String topic, int secs, boolean keepLatencies)
            throws InterruptedException {
        byte[] filler = new byte[BODY];
        new Random(42).nextBytes(filler);
        Semaphore slots = new Semaphore(IN_FLIGHT);
        AtomicLong ok = new AtomicLong();
        AtomicLong errors = new AtomicLong();
        AtomicLong lastDone = new AtomicLong();
        AtomicReference<String> firstError = new AtomicReference<>();
        long[][] lat = {new long[1 << 20]};
        int[] latN = {0};
        Object latLock = new Object();
        long start = System.nanoTime();
        long end = start + secs * 1_000_000_000L;
        long seq = 0;
        while (System.nanoTime() < end) {
            if (!slots.tryAcquire(100, TimeUnit.MILLISECONDS)) {
                continue;
            }
            byte[] body = filler.clone();
            ByteBuffer.wrap(body).putLong(seq);
            Message m = G.PROVIDER.newMessageBuilder().setTopic(topic).setBody(body).build();
            Producer p = producers.get((int) (seq % producers.size()));
            seq++;
            long t = System.nanoTime();
            CompletableFuture<?> f;
            try {
                f = p.sendAsync(m);
            } catch (RuntimeException e) {
                f = CompletableFuture.failedFuture(e);
            }
            f.whenComplete((r, e) -> {
                long now = System.nanoTime();
                if (e == null) {
                    ok.incrementAndGet();
                    if (keepLatencies) {
                        synchronized (latLock) {
                            if (latN[0] == lat[0].length) {
                                lat[0] = Arrays.copyOf(lat[0], lat[0].length * 2);
                            }
                            lat[0][latN[0]++] = now - t;
                        }
                    }
                } else {
                    if (errors.incrementAndGet() == 1) {
                        firstError.set(e.toString());
                        log("send failed: " + e);
                    }
                }
                lastDone.accumulateAndGet(now, Math::max);
                slots.release();
            });
        }
        // The sends in flight.
        if (!slots.tryAcquire(IN_FLIGHT, 60, TimeUnit.SECONDS)) {
            log("sends still in flight 60 s after the end");
        }
        ProduceResult r = new ProduceResult();
        r.ok = ok.get();
        r.errors = errors.get();
        r.secs = (Math.max(lastDone.get(), end) - start) / 1e9;
        synchronized (latLock) {
            r.latNanos = Arrays.copyOf(lat[0], latN[0]);
        }
        r.firstError = firstError.get();
        if (seq != r.ok + r.errors) {
            log("issued " + seq + " sends, " + (r.ok + r.errors) + " completed");
        }
        return r;
    }

    static double pct(long[] sorted, double p) {
        if (sorted.length == 0) {
            return Double.NaN;
        }
        int i = (int) Math.ceil(p / 100.0 * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))] / 1e6;
    }

    // ---------------------------------------------------------------- receive/ack

    static final class Consume {
        final long expected;
        final BitSet acked = new BitSet();
        final BitSet received = new BitSet();
        long ackedCount;
        long receivedMsgs;
        long duplicates;
        long unknown;
        final AtomicLong receiveCalls = new AtomicLong();
        final AtomicLong emptyReceives = new AtomicLong();
        final AtomicLong receiveErrors = new AtomicLong();
        final AtomicLong ackErrors = new AtomicLong();
        volatile boolean stop;
        volatile long firstReceive;
        volatile long lastAck;
        volatile String lastError;

        Consume(long expected) {
            this.expected = expected;
        }

        synchronized boolean done() {
            return ackedCount >= expected;
        }

        /** A received message (acked in any case, so that it does not come back). */
        synchronized void onReceive(long seq) {
            receivedMsgs++;
            if (seq < 0 || seq >= expected) {
                unknown++;
            } else if (received.get((int) seq)) {
                duplicates++;
            } else {
                received.set((int) seq);
            }
        }

        synchronized void onAck(long seq) {
            if (seq >= 0 && seq < expected && !acked.get((int) seq)) {
                acked.set((int) seq);
                ackedCount++;
                if (ackedCount >= expected) {
                    lastAck = System.nanoTime();
                    notifyAll();
                }
            }
        }

        synchronized void awaitDone(long deadlineNanos) throws InterruptedException {
            while (ackedCount < expected) {
                long left = deadlineNanos - System.nanoTime();
                if (left <= 0) {
                    return;
                }
                wait(Math.max(1, left / 1_000_000));
            }
        }
    }

    static long seqOf(MessageView v) {
        ByteBuffer b = v.getBody().duplicate();
        return b.remaining() >= 8 ? b.getLong() : -1;
    }

    /** One consumer's loop: receive, ack everything asynchronously, wait for the acks, again. */
    static void consumeLoop(SimpleConsumer c, Consume st) {
        while (!st.stop) {
            List<MessageView> got;
            long t = System.nanoTime();
            if (st.firstReceive == 0) {
                synchronized (st) {
                    if (st.firstReceive == 0) {
                        st.firstReceive = t;
                    }
                }
            }
            try {
                st.receiveCalls.incrementAndGet();
                got = c.receive(BATCH, INVISIBLE);
            } catch (Exception e) {
                if (st.stop) {
                    return;
                }
                if (st.receiveErrors.incrementAndGet() <= 5) {
                    log("receive failed: " + e);
                }
                st.lastError = e.toString();
                try {
                    Thread.sleep(100);
                } catch (InterruptedException ie) {
                    return;
                }
                continue;
            }
            if (got.isEmpty()) {
                st.emptyReceives.incrementAndGet();
                continue;
            }
            List<CompletableFuture<Void>> acks = new ArrayList<>(got.size());
            for (MessageView v : got) {
                long seq = seqOf(v);
                st.onReceive(seq);
                CompletableFuture<Void> f;
                try {
                    f = c.ackAsync(v);
                } catch (RuntimeException e) {
                    f = CompletableFuture.failedFuture(e);
                }
                acks.add(f.whenComplete((r, e) -> {
                    if (e == null) {
                        st.onAck(seq);
                    } else {
                        if (st.ackErrors.incrementAndGet() <= 5) {
                            log("ack failed: " + e);
                        }
                        st.lastError = "ack: " + e;
                    }
                }));
            }
            try {
                CompletableFuture.allOf(acks.toArray(new CompletableFuture[0])).get(30, TimeUnit.SECONDS);
            } catch (Exception e) {
                // counted above
            }
        }
    }

    static List<Thread> startConsumers(List<SimpleConsumer> cs, Consume st, String name) {
        List<Thread> ts = new ArrayList<>();
        for (int i = 0; i < cs.size(); i++) {
            SimpleConsumer c = cs.get(i);
            Thread t = new Thread(() -> consumeLoop(c, st), name + "-" + i);
            t.setDaemon(true);
            t.start();
            ts.add(t);
        }
        return ts;
    }

    static void join(List<Thread> ts, long millis) throws InterruptedException {
        long deadline = System.currentTimeMillis() + millis;
        for (Thread t : ts) {
            t.join(Math.max(1, deadline - System.currentTimeMillis()));
        }
    }

    // ---------------------------------------------------------------- main

    static int run() throws Exception {
        log("rocketmq-client-java " + G.clientVersion() + ", endpoint " + G.endpoint() + ", tls " + G.tls()
                + ", topic " + TOPIC + ", " + PRODUCERS + " producers, " + IN_FLIGHT + " sends in flight, " + BODY
                + " B bodies, " + DURATION + " s; " + CONSUMERS + " consumers, batch " + BATCH + ", invisible "
                + INVISIBLE.getSeconds() + " s, await " + AWAIT.getSeconds() + " s; server pids " + SERVER_PIDS);
        List<Producer> warmProducers = new ArrayList<>();
        List<Producer> producers = new ArrayList<>();
        for (int i = 0; i < PRODUCERS; i++) {
            warmProducers.add(producer(WARM_TOPIC));
            producers.add(producer(TOPIC));
        }
        List<SimpleConsumer> warmConsumers = new ArrayList<>();
        List<SimpleConsumer> consumers = new ArrayList<>();
        for (int i = 0; i < CONSUMERS; i++) {
            warmConsumers.add(consumer(WARM_GROUP, WARM_TOPIC));
            consumers.add(consumer(GROUP, TOPIC));
        }
        log("clients started");

        // 0. Warm-up; meanwhile one receive per bench consumer on the empty bench topic.
        List<Thread> init = new ArrayList<>();
        AtomicLong early = new AtomicLong();
        for (SimpleConsumer c : consumers) {
            Thread t = new Thread(() -> {
                try {
                    List<MessageView> got = c.receive(BATCH, INVISIBLE);
                    early.addAndGet(got.size());
                } catch (Exception e) {
                    log("initial receive failed: " + e);
                }
            }, "init-receive");
            t.setDaemon(true);
            t.start();
            init.add(t);
        }
        long warmSends = 0;
        long warmConsumed = 0;
        if (WARMUP > 0) {
            ProduceResult w = produce(warmProducers, WARM_TOPIC, WARMUP, false);
            warmSends = w.ok;
            Consume wc = new Consume(w.ok);
            List<Thread> wt = startConsumers(warmConsumers, wc, "warm-consume");
            wc.awaitDone(System.nanoTime() + WARMUP * 1_000_000_000L);
            wc.stop = true;
            warmConsumed = wc.ackedCount;
            join(wt, AWAIT.toMillis() + 15_000);
        }
        join(init, AWAIT.toMillis() + 15_000);
        for (Thread t : init) {
            if (t.isAlive()) {
                log("an initial receive on the bench topic has not returned: the produce phase starts anyway");
            }
        }
        if (early.get() > 0) {
            log(early.get() + " messages received from the bench topic before anything was produced");
        }
        System.out.println("BENCH warmup sends=" + warmSends + " consumed=" + warmConsumed);
        System.out.flush();
        Thread.sleep(1000);

        // 1. Produce.
        long s0 = serverTicks();
        long c0 = ticks("self");
        ProduceResult r = produce(producers, TOPIC, DURATION, true);
        long s1 = serverTicks();
        long c1 = ticks("self");
        long[] lat = r.latNanos;
        Arrays.sort(lat);
        System.out.println(String.format(Locale.ROOT,
                "BENCH produce sends=%d errors=%d secs=%.2f rate=%.0f mb_per_s=%.2f p50_ms=%.2f p90_ms=%.2f"
                        + " p99_ms=%.2f p999_ms=%.2f max_ms=%.2f server_cpu_s=%s client_cpu_s=%s",
                r.ok, r.errors, r.secs, r.ok / r.secs, r.ok * (double) BODY / r.secs / 1e6, pct(lat, 50),
                pct(lat, 90), pct(lat, 99), pct(lat, 99.9), pct(lat, 100), cpu(s0, s1), cpu(c0, c1)));
        System.out.flush();
        if (r.firstError != null) {
            log("first send error: " + r.firstError);
        }
        // Let the server settle (dispatch, flush) before the next phase.
        Thread.sleep(2000);

        // 2. Receive and ack everything phase 1 sent.
        Consume st = new Consume(r.ok);
        long s2 = serverTicks();
        long c2 = ticks("self");
        List<Thread> ts = startConsumers(consumers, st, "consume");
        st.awaitDone(System.nanoTime() + CONSUME_LIMIT * 1_000_000_000L);
        long end = st.lastAck != 0 ? st.lastAck : System.nanoTime();
        long s3 = serverTicks();
        long c3 = ticks("self");
        st.stop = true;
        join(ts, AWAIT.toMillis() + 15_000);
        double secs = (end - st.firstReceive) / 1e9;
        long acked;
        long received;
        long dups;
        long unknown;
        synchronized (st) {
            acked = st.ackedCount;
            received = st.receivedMsgs;
            dups = st.duplicates;
            unknown = st.unknown;
        }
        boolean exact = acked == r.ok && dups == 0 && unknown == 0 && st.received.cardinality() == r.ok;
        System.out.println(String.format(Locale.ROOT,
                "BENCH consume expected=%d acked=%d received=%d duplicates=%d unknown=%d receive_calls=%d"
                        + " empty_receives=%d receive_errors=%d ack_errors=%d secs=%.2f rate=%.0f mb_per_s=%.2f"
                        + " exact=%s server_cpu_s=%s client_cpu_s=%s",
                r.ok, acked, received, dups, unknown, st.receiveCalls.get(), st.emptyReceives.get(),
                st.receiveErrors.get(), st.ackErrors.get(), secs, acked / secs, acked * (double) BODY / secs / 1e6,
                exact, cpu(s2, s3), cpu(c2, c3)));
        System.out.flush();
        if (!exact) {
            log("not exact: " + (r.ok - acked) + " of " + r.ok + " not acked, " + dups + " duplicates, " + unknown
                    + " unknown" + (st.lastError == null ? "" : "; last error: " + st.lastError));
        }
        return exact && r.ok > 0 ? 0 : 1;
    }
}
