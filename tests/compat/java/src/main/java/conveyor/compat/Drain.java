package conveyor.compat;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Draining a broker group with mqadmin wipeWritePerm (issue 13): a producer sends continuously to a topic on two
 * broker groups and a push consumer reads it; the runner wipes the write permission of DRAINED in the name server.
 * The producer must move to the other group with no failed send (default client retries), and the consumer must
 * finish the drained group's backlog (every acknowledged message received).
 *
 * Usage: Drain STATE_DIR TOPIC DRAINED
 *   writes STATE_DIR/sending once sends land on both groups; waits for STATE_DIR/wiped; writes STATE_DIR/moved
 *   once 50 sends in a row went to the other group; waits for STATE_DIR/stop; then requires every acknowledged
 *   message consumed and no failed send.
 */
public final class Drain {
    public static void main(String[] args) {
        if (args.length < 3) {
            System.out.println("FAIL " + Common.testName("n-drain") + ": usage Drain STATE_DIR TOPIC DRAINED");
            System.exit(2);
        }
        Common.run("n-drain", diag -> run(Paths.get(args[0]), args[1], args[2], diag));
    }

    static void run(Path dir, String topic, String drained, Common.Diag diag) throws Exception {
        String run = Common.newRunId();
        String group = Common.name("g", "n", run);
        DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);

        Map<String, Boolean> acknowledged = new ConcurrentHashMap<>();
        Map<String, AtomicInteger> perBroker = new ConcurrentHashMap<>();
        Map<String, Boolean> received = new ConcurrentHashMap<>();
        List<String> failures = new ArrayList<>();

        DefaultMQPushConsumer consumer = Common.newPushConsumer(group, "c-" + run);
        consumer.setPollNameServerInterval(1000);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently)
                (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        received.put(m.getKeys(), true);
                    }
                    return org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
        consumer.start();

        DefaultMQProducer producer = new DefaultMQProducer(group + "_p");
        producer.setNamesrvAddr(Common.namesrv());
        producer.setInstanceName("p-" + run);
        producer.setPollNameServerInterval(1000);
        producer.start();

        int seq = 0;
        int inARowElsewhere = 0;
        boolean wiped = false;
        boolean moved = false;
        long deadline = System.currentTimeMillis() + Common.timeoutMillis(300);
        while (!Files.exists(dir.resolve("stop"))) {
            if (System.currentTimeMillis() > deadline) {
                throw new Common.Failure("the runner never said stop");
            }
            String key = "drain-" + run + "-" + seq++;
            Message m = new Message(topic, "TagA", key, ("drain " + key).getBytes(StandardCharsets.UTF_8));
            try {
                SendResult r = producer.send(m);
                if (r.getSendStatus() != SendStatus.SEND_OK) {
                    failures.add(key + ": " + r.getSendStatus());
                } else {
                    acknowledged.put(key, true);
                    String broker = r.getMessageQueue().getBrokerName();
                    perBroker.computeIfAbsent(broker, b -> new AtomicInteger()).incrementAndGet();
                    inARowElsewhere = broker.equals(drained) ? 0 : inARowElsewhere + 1;
                }
            } catch (Exception e) {
                failures.add(key + ": " + e);
            }
            if (!wiped && perBroker.size() >= 2 && !Files.exists(dir.resolve("sending"))) {
                Files.write(dir.resolve("sending"), ("sent=" + seq + "\n").getBytes(StandardCharsets.UTF_8));
            }
            if (!wiped && Files.exists(dir.resolve("wiped"))) {
                wiped = true;
                inARowElsewhere = 0;
                diag.add("wiped after " + seq + " sends: " + perBroker);
            }
            if (wiped && !moved && inARowElsewhere >= 50) {
                moved = true;
                diag.add("moved after " + seq + " sends: " + perBroker);
                Files.write(dir.resolve("moved"), ("sent=" + seq + "\n").getBytes(StandardCharsets.UTF_8));
            }
            Thread.sleep(20);
        }
        producer.shutdown();
        diag.add("sent " + seq + ", acknowledged " + acknowledged.size() + " " + perBroker + ", failed "
                + failures.size());
        if (!failures.isEmpty()) {
            throw new Common.Failure(failures.size() + " sends failed after client retries, first: "
                    + failures.get(0));
        }
        if (!moved) {
            throw new Common.Failure("the producer never moved off " + drained + ": " + perBroker);
        }
        Common.await("every acknowledged message consumed (the drained group's backlog included)",
                Common.timeoutMillis(120), () -> received.keySet().containsAll(acknowledged.keySet()),
                () -> received.size() + " of " + acknowledged.size() + " received");
        Common.await("the group's backlog at 0", Common.timeoutMillis(60), () -> {
            try {
                return admin.examineConsumeStats(group).computeTotalDiff() == 0;
            } catch (Exception e) {
                return false;
            }
        }, null);
        System.out.println("  # sent " + seq + ", acknowledged " + acknowledged.size() + " " + perBroker
                + ", failed 0, consumed " + received.size());
        consumer.shutdown();
        admin.shutdown();
    }
}
