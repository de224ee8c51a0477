package conveyor.compat;

import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenario (b): two push consumers in one group. Their rebalance must split the topic's queues (disjoint,
 * both non-empty, together all queues); afterwards they must together receive every message (duplicates
 * allowed) and each must receive some.
 */
public final class SplitGroup {
    public static void main(String[] args) {
        int total = args.length > 0 ? Integer.parseInt(args[0]) : 2_000;
        Common.run("b-split-group", diag -> {
            String run = Common.newRunId();
            String topic = Common.name("t", "b", run);
            String group = Common.name("g", "b", run);
            int queues = 4;
            diag.add("topic=" + topic + " group=" + group);

            DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);
            Common.createTopic(admin, topic, queues, diag);

            Collector all = new Collector();
            Collector one = new Collector();
            Collector two = new Collector();
            DefaultMQPushConsumer c1 = Common.pushConsumer(group, "c1-" + run, topic, "*",
                    m -> { all.accept(m); one.accept(m); });
            DefaultMQPushConsumer c2 = Common.pushConsumer(group, "c2-" + run, topic, "*",
                    m -> { all.accept(m); two.accept(m); });
            diag.addLater(() -> "consumer 1 queues: " + Common.assignedQueues(c1, topic));
            diag.addLater(() -> "consumer 2 queues: " + Common.assignedQueues(c2, topic));
            diag.addLater(() -> "consumer 1: " + one.progress() + "; consumer 2: " + two.progress());
            diag.addLater(all::report);
            c1.start();
            c2.start();

            // Rebalance runs on start, every 20 s and on NOTIFY_CONSUMER_IDS_CHANGED from the broker.
            Common.await("the two consumers to split the " + queues + " queues", Common.timeoutMillis(90), () -> {
                List<MessageQueue> q1 = Common.assignedQueues(c1, topic);
                List<MessageQueue> q2 = Common.assignedQueues(c2, topic);
                Set<MessageQueue> union = new HashSet<>(q1);
                union.addAll(q2);
                return !q1.isEmpty() && !q2.isEmpty() && union.size() == q1.size() + q2.size()
                        && union.size() == queues;
            }, () -> "c1=" + Common.assignedQueues(c1, topic) + " c2=" + Common.assignedQueues(c2, topic));

            List<Expected> msgs = Senders.build(topic, run, 0, total);
            all.expect(msgs);
            one.expect(msgs);
            two.expect(msgs);
            DefaultMQProducer producer = Common.startProducer(group + "_p", "p-" + run);
            Senders.sendSync(producer, msgs);

            Common.await("the group to consume every message", Common.timeoutMillis(180), all::complete,
                    all::progress);
            all.checkClean();
            if (one.distinct() == 0 || two.distinct() == 0) {
                throw new Common.Failure("one consumer received nothing: consumer 1 " + one.progress()
                        + ", consumer 2 " + two.progress());
            }
            System.err.println("  .. consumer 1: " + one.progress() + "; consumer 2: " + two.progress());

            Common.shutdownQuietly(c1);
            Common.shutdownQuietly(c2);
            Common.shutdownQuietly(producer);
            Common.shutdownQuietly(admin);
        });
    }
}
