package conveyor.compat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenario (l): broadcasting. Two push consumers of one group in BROADCASTING mode must each be assigned every
 * queue and each receive every message (1,000, with identical content). Broadcasting consumers keep their
 * offsets in local files; they go to a fresh directory under COMPAT_LOG_DIR (or the temp directory).
 */
public final class Broadcast {
    public static void main(String[] args) throws Exception {
        int total = args.length > 0 ? Integer.parseInt(args[0]) : 1_000;
        // Read once by the client (static field of LocalFileOffsetStore): set before any client class loads it.
        String base = System.getenv("COMPAT_LOG_DIR");
        Path offsets = base != null && !base.isBlank()
                ? Files.createDirectories(Paths.get(base, "broadcast-offsets-" + Common.clientVersion()))
                : Files.createTempDirectory("compat-broadcast-offsets");
        System.setProperty("rocketmq.client.localOffsetStoreDir", offsets.toString());

        Common.run("l-broadcast", diag -> {
            String run = Common.newRunId();
            String topic = Common.name("t", "l", run);
            String group = Common.name("g", "l", run);
            int queues = 4;
            diag.add("topic=" + topic + " group=" + group + " local offsets in " + offsets);

            DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);
            Common.createTopic(admin, topic, queues, diag);

            Collector one = new Collector();
            Collector two = new Collector();
            DefaultMQPushConsumer c1 = broadcaster(group, "b1-" + run, topic, one);
            DefaultMQPushConsumer c2 = broadcaster(group, "b2-" + run, topic, two);
            diag.addLater(() -> "consumer 1 queues: " + Common.assignedQueues(c1, topic));
            diag.addLater(() -> "consumer 2 queues: " + Common.assignedQueues(c2, topic));
            diag.addLater(() -> "consumer 1: " + one.report());
            diag.addLater(() -> "consumer 2: " + two.report());
            c1.start();
            c2.start();
            Common.await("both broadcasting consumers to be assigned all " + queues + " queues",
                    Common.timeoutMillis(60), () -> {
                        List<MessageQueue> q1 = Common.assignedQueues(c1, topic);
                        List<MessageQueue> q2 = Common.assignedQueues(c2, topic);
                        return q1.size() == queues && q2.size() == queues;
                    }, () -> "c1=" + Common.assignedQueues(c1, topic) + " c2=" + Common.assignedQueues(c2, topic));

            List<Expected> msgs = Senders.build(topic, run, 0, total);
            one.expect(msgs);
            two.expect(msgs);
            DefaultMQProducer producer = Common.startProducer(group + "_p", "p-" + run);
            Senders.sendSync(producer, msgs);

            Common.await("both consumers to receive every message", Common.timeoutMillis(120),
                    () -> one.complete() && two.complete(),
                    () -> "consumer 1 " + one.progress() + "; consumer 2 " + two.progress());
            one.checkClean();
            two.checkClean();
            System.err.println("  .. consumer 1: " + one.progress() + "; consumer 2: " + two.progress());

            Common.shutdownQuietly(c1);
            Common.shutdownQuietly(c2);
            Common.shutdownQuietly(producer);
            Common.shutdownQuietly(admin);
        });
    }

    private static DefaultMQPushConsumer broadcaster(String group, String instance, String topic, Collector collector)
            throws Exception {
        DefaultMQPushConsumer c = Common.newPushConsumer(group, instance);
        Common.setBroadcasting(c);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            msgs.forEach(collector::accept);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        return c;
    }
}
