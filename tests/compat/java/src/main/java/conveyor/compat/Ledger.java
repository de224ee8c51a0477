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

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The Java client's side of the failover ledger test (tests/compat/failover.sh).
 *
 * {@code produce NAMESRV TOPIC DIR}: sends keyed messages one after another with the client's
 * default retry settings until {@code DIR/stop} exists. Every key is written to
 * {@code DIR/attempted} before its send and to {@code DIR/ok} once the send returned SEND_OK
 * (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE and exceptions are not acknowledgements). The route
 * is polled every second instead of every 30 s so that a test cycle is short.
 *
 * {@code drain NAMESRV TOPIC DIR}: reads every queue of the topic from offset 0 and writes each
 * key to {@code DIR/seen}, until nothing new arrived for 10 s.
 */
public final class Ledger {
    private Ledger() {
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String namesrv = args[1];
        String topic = args[2];
        Path dir = Paths.get(args[3]);
        if (mode.equals("produce")) {
            produce(namesrv, topic, dir);
        } else {
            drain(namesrv, topic, dir);
        }
    }

    private static void produce(String namesrv, String topic, Path dir) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("ledger-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setPollNameServerInterval(1000);
        producer.start();
        long sent = 0;
        long ok = 0;
        try (PrintWriter attempted = new PrintWriter(new FileWriter(dir.resolve("attempted").toFile(), true));
             PrintWriter acked = new PrintWriter(new FileWriter(dir.resolve("ok").toFile(), true))) {
            while (!Files.exists(dir.resolve("stop"))) {
                String key = String.format("k-%09d", sent++);
                attempted.println(key);
                attempted.flush();
                Message msg = new Message(topic, "TagA", key, key.getBytes(StandardCharsets.UTF_8));
                try {
                    SendResult r = producer.send(msg);
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        acked.println(key);
                        acked.flush();
                        ok++;
                    }
                } catch (Exception e) {
                    // Not acknowledged; the next message goes on.
                    Thread.sleep(20);
                }
            }
        } finally {
            producer.shutdown();
        }
        System.out.println("PASS ledger-producer: " + sent + " sent, " + ok + " SEND_OK");
    }

    private static void drain(String namesrv, String topic, Path dir) throws Exception {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer("ledger-drain-" + System.nanoTime());
        consumer.setNamesrvAddr(namesrv);
        consumer.setAutoCommit(false);
        consumer.start();
        long seen = 0;
        try (PrintWriter out = new PrintWriter(new FileWriter(dir.resolve("seen").toFile(), false))) {
            Collection<MessageQueue> queues = consumer.fetchMessageQueues(topic);
            List<MessageQueue> all = new ArrayList<>(queues);
            consumer.assign(all);
            for (MessageQueue mq : all) {
                consumer.seek(mq, 0);
            }
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
