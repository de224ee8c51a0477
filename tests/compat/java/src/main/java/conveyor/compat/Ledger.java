package conveyor.compat;

import java.io.FileWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * The Java client's side of the failover ledger test (tests/compat/failover.sh).
 *
 * {@code produce NAMESRV TOPIC DIR}: sends keyed messages one after another with the client's
 * default retry settings until {@code DIR/stop} exists. Every key is written to
 * {@code DIR/attempted} before its send and to {@code DIR/ok} once the send returned SEND_OK
 * (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE and exceptions are not acknowledgements). The route
 * is polled every second instead of every 30 s so that a test cycle is short. Every failed send
 * (an exception or another status than SEND_OK, after the client's own retries) is written to
 * {@code DIR/failed} and every send that took 500 ms or more to {@code DIR/slow}, each line
 * {@code key epoch-millis millis status}; the time of every SEND_OK (epoch millis) goes to
 * {@code DIR/ok-at}.
 *
 * {@code produce-defaults NAMESRV TOPIC DIR}: the same with every client setting at its default
 * (the route polled every 30 s), as applications run it.
 *
 * {@code drain NAMESRV TOPIC DIR}: reads every queue of the topic from offset 0 and writes each
 * key to {@code DIR/seen}, until nothing new arrived for 10 s.
 *
 * {@code drain-push NAMESRV TOPIC DIR [NAME]}: the same with a push consumer of a new group from
 * the first offset, writing {@code DIR/NAME} (default {@code seen-push}): it reads through
 * whichever replica the route and the brokers' suggestions offer, a slave when the group has no
 * master (the lite pull consumer's seek needs a master) or, with {@code ROCKETMQ_ZONE} set, the
 * replica in that zone.
 *
 * <p>With {@code LEDGER_ACCESS_KEY} and {@code LEDGER_SECRET_KEY} in the environment every client
 * signs its requests with them ({@code AclClientRPCHook}), for clusters with ACL on.
 */
public final class Ledger {
    private Ledger() {
    }

    /** The ACL hook of the environment's credentials, or none. */
    private static RPCHook hook() {
        String ak = System.getenv("LEDGER_ACCESS_KEY");
        String sk = System.getenv("LEDGER_SECRET_KEY");
        if (ak == null || ak.isEmpty() || sk == null || sk.isEmpty()) {
            return null;
        }
        return new AclClientRPCHook(new SessionCredentials(ak, sk));
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String namesrv = args[1];
        String topic = args[2];
        Path dir = Paths.get(args[3]);
        if (mode.equals("produce")) {
            produce(namesrv, topic, dir, true);
        } else if (mode.equals("produce-defaults")) {
            produce(namesrv, topic, dir, false);
        } else if (mode.equals("drain-push")) {
            drainPush(namesrv, topic, dir, args.length > 4 ? args[4] : "seen-push");
        } else {
            drain(namesrv, topic, dir);
        }
    }

    private static void produce(String namesrv, String topic, Path dir, boolean fastRoutes) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("ledger-producer", hook());
        producer.setNamesrvAddr(namesrv);
        if (fastRoutes) {
            producer.setPollNameServerInterval(1000);
        }
        producer.start();
        long failed = 0;
        long slowest = 0;
        long sent = 0;
        long ok = 0;
        // The longest time without a SEND_OK: how long the producer could not write.
        long lastOk = 0;
        long longestGap = 0;
        try (PrintWriter attempted = new PrintWriter(new FileWriter(dir.resolve("attempted").toFile(), true));
             PrintWriter acked = new PrintWriter(new FileWriter(dir.resolve("ok").toFile(), true));
             PrintWriter failures = new PrintWriter(new FileWriter(dir.resolve("failed").toFile(), true));
             PrintWriter slow = new PrintWriter(new FileWriter(dir.resolve("slow").toFile(), true));
             PrintWriter ackedAt = new PrintWriter(new FileWriter(dir.resolve("ok-at").toFile(), true))) {
            while (!Files.exists(dir.resolve("stop"))) {
                String key = String.format("k-%09d", sent++);
                attempted.println(key);
                attempted.flush();
                Message msg = new Message(topic, "TagA", key, key.getBytes(StandardCharsets.UTF_8));
                long began = System.currentTimeMillis();
                String status;
                try {
                    SendResult r = producer.send(msg);
                    status = r.getSendStatus().name();
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        acked.println(key);
                        acked.flush();
                        ok++;
                        long now = System.currentTimeMillis();
                        ackedAt.println(now);
                        ackedAt.flush();
                        if (lastOk > 0) {
                            longestGap = Math.max(longestGap, now - lastOk);
                        }
                        lastOk = now;
                    }
                } catch (Exception e) {
                    // Not acknowledged; the next message goes on.
                    status = e.getClass().getSimpleName();
                    Thread.sleep(20);
                }
                long took = System.currentTimeMillis() - began;
                slowest = Math.max(slowest, took);
                String line = key + " " + began + " " + took + " " + status;
                if (!status.equals("SEND_OK")) {
                    failed++;
                    failures.println(line);
                    failures.flush();
                }
                if (took >= 500) {
                    slow.println(line);
                    slow.flush();
                }
            }
        } finally {
            producer.shutdown();
        }
        System.out.println("PASS ledger-producer: " + sent + " sent, " + ok + " SEND_OK, " + failed
                + " failed, longest gap between SEND_OKs " + longestGap + " ms, slowest send " + slowest + " ms");
    }

    private static void drainPush(String namesrv, String topic, Path dir, String name) throws Exception {
        Set<String> seen = ConcurrentHashMap.newKeySet();
        long[] last = {System.currentTimeMillis()};
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("ledger-push-" + System.nanoTime(), hook(),
                new AllocateMessageQueueAveragely());
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                seen.add(m.getKeys());
            }
            last[0] = System.currentTimeMillis();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long started = System.currentTimeMillis();
        try {
            // Until nothing new for 10 s after the first message, or 120 s with nothing.
            while (true) {
                Thread.sleep(200);
                long now = System.currentTimeMillis();
                if (seen.isEmpty() ? now - started > 120_000 : now - last[0] > 10_000) {
                    break;
                }
            }
        } finally {
            consumer.shutdown();
        }
        try (PrintWriter out = new PrintWriter(new FileWriter(dir.resolve(name).toFile(), false))) {
            for (String k : seen) {
                out.println(k);
            }
        }
        System.out.println("PASS ledger-drain-push: " + seen.size() + " keys read");
    }

    private static void drain(String namesrv, String topic, Path dir) throws Exception {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer("ledger-drain-" + System.nanoTime(), hook());
        consumer.setNamesrvAddr(namesrv);
        consumer.setAutoCommit(false);
        // A new group from the first offset, and no seek: assign() starts pulling at once, and a
        // seek racing a pull in flight drops the pulled batch from the cache while the pull moves
        // the offset past it (the lite pull consumer's seek/pull race: a CI run reported queue 1's
        // first 15 and queue 3's 14th-18th messages missing, with no log cut back while they were
        // written, after the seek of queue 2 had failed once and slept). A pull that fails (the
        // first connection right after the last failover) is retried by the consumer itself.
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.start();
        long seen = 0;
        try (PrintWriter out = new PrintWriter(new FileWriter(dir.resolve("seen").toFile(), false))) {
            Collection<MessageQueue> queues = consumer.fetchMessageQueues(topic);
            consumer.assign(new ArrayList<>(queues));
            long idleSince = System.currentTimeMillis();
            while (System.currentTimeMillis() - idleSince < 10_000) {
                List<MessageExt> batch = consumer.poll(1000);
                if (!batch.isEmpty()) {
                    idleSince = System.currentTimeMillis();
                }
                for (MessageExt m : batch) {
                    out.println(m.getKeys());
                    seen++;
                }
            }
        } finally {
            consumer.shutdown();
        }
        System.out.println("PASS ledger-drain: " + seen + " messages read");
    }
}
