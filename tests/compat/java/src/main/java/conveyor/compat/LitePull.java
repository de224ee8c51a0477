package conveyor.compat;

import java.util.List;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/** Scenario (c): a subscribing DefaultLitePullConsumer polls every message with identical content. */
public final class LitePull {
    public static void main(String[] args) {
        int total = args.length > 0 ? Integer.parseInt(args[0]) : 2_000;
        Common.run("c-lite-pull", diag -> {
            String run = Common.newRunId();
            String topic = Common.name("t", "c", run);
            String group = Common.name("g", "c", run);
            diag.add("topic=" + topic + " group=" + group);

            DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);
            Common.createTopic(admin, topic, 4, diag);

            List<Expected> msgs = Senders.build(topic, run, 0, total);
            Collector collector = new Collector();
            collector.expect(msgs);
            diag.addLater(collector::report);

            DefaultMQProducer producer = Common.startProducer(group + "_p", "p-" + run);
            Senders.sendSync(producer, msgs.subList(0, total / 2));

            DefaultLitePullConsumer consumer = Common.litePullConsumer(group, "c-" + run, topic);
            consumer.start();
            // The second half is sent while the consumer is already polling.
            Senders.sendSync(producer, msgs.subList(total / 2, total));

            long deadline = System.currentTimeMillis() + Common.timeoutMillis(180);
            while (!collector.complete() && System.currentTimeMillis() < deadline) {
                List<MessageExt> batch = consumer.poll(1000);
                batch.forEach(collector);
            }
            if (!collector.complete()) {
                throw new Common.Failure("poll() did not return every message: " + collector.progress());
            }
            collector.checkClean();

            Common.shutdownQuietly(consumer);
            Common.shutdownQuietly(producer);
            Common.shutdownQuietly(admin);
        });
    }
}
