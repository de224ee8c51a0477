package conveyor.compat;

import java.util.ArrayList;
import java.util.List;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenario (e): a consumer subscribed with "TagA || TagB" receives all TagA and TagB messages and none
 * tagged TagC or TagAB (a tag that only shares a prefix). The last message sent to every queue is a TagA
 * message, so once every expected message has arrived, any wrongly delivered message (which sits earlier
 * in the same queue) has arrived too.
 */
public final class TagFilter {
    private static final String[] TAGS = {"TagA", "TagB", "TagC", "TagAB"};

    public static void main(String[] args) {
        int total = args.length > 0 ? Integer.parseInt(args[0]) : 1_200;
        Common.run("e-tag-filter", diag -> {
            String run = Common.newRunId();
            String topic = Common.name("t", "e", run);
            String group = Common.name("g", "e", run);
            diag.add("topic=" + topic + " group=" + group);

            DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);
            Common.createTopic(admin, topic, 4, diag);

            List<Expected> all = new ArrayList<>();
            for (int i = 0; i < total; i++) {
                all.add(new Expected(topic, run, i, TAGS[i % TAGS.length]));
            }
            DefaultMQProducer producer = Common.startProducer(group + "_p", "p-" + run);
            Senders.sendSync(producer, all);

            // One final TagA message on every queue.
            List<Expected> wanted = new ArrayList<>();
            int index = total;
            for (MessageQueue mq : producer.fetchPublishMessageQueues(topic)) {
                Expected e = new Expected(topic, run, index++, "TagA");
                Message m = e.toMessage();
                SendResult r = producer.send(m, mq);
                e.sent(m, "sync to " + mq + ": " + r.getSendStatus(), mq.getQueueId(), r.getOffsetMsgId());
                wanted.add(e);
            }
            for (Expected e : all) {
                if (e.tags.equals("TagA") || e.tags.equals("TagB")) {
                    wanted.add(e);
                }
            }

            Collector collector = new Collector();
            collector.expect(wanted);
            diag.addLater(collector::report);
            DefaultMQPushConsumer consumer = Common.pushConsumer(group, "c-" + run, topic, "TagA || TagB",
                    collector);
            consumer.start();

            Common.await("every TagA/TagB message", Common.timeoutMillis(180), collector::complete,
                    collector::progress);
            consumer.shutdown();
            collector.checkClean();

            Common.shutdownQuietly(producer);
            Common.shutdownQuietly(admin);
        });
    }
}
