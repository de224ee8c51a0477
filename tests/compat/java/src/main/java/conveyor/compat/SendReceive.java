package conveyor.compat;

import java.util.List;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenario (a): 10,000 messages (4,000 sync, 4,000 async, 2,000 oneway) with keys, tags and user properties;
 * one clustering push consumer must receive every message with identical body, keys, tags and properties.
 * Optional argument: total message count (default 10000). With -Dtls.enable=true (the clients' TLS switch) it is
 * scenario (t), every connection over TLS.
 */
public final class SendReceive {
    public static void main(String[] args) {
        int total = args.length > 0 ? Integer.parseInt(args[0]) : 10_000;
        String scenario = Boolean.getBoolean("tls.enable") ? "t-send-receive-tls" : "a-send-receive";
        Common.run(scenario, diag -> {
            String run = Common.newRunId();
            String topic = Common.name("t", "a", run);
            String group = Common.name("g", "a", run);
            diag.add("topic=" + topic + " group=" + group);

            DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);
            Common.createTopic(admin, topic, 4, diag);

            Collector collector = new Collector();
            DefaultMQPushConsumer consumer = Common.pushConsumer(group, "c-" + run, topic, "*", collector);
            diag.addLater(() -> "consumer assigned queues: " + Common.assignedQueues(consumer, topic));
            diag.addLater(collector::report);
            consumer.start();

            int sync = total * 2 / 5;
            int async = total * 2 / 5;
            int oneway = total - sync - async;
            List<Expected> syncMsgs = Senders.build(topic, run, 0, sync);
            List<Expected> asyncMsgs = Senders.build(topic, run, sync, async);
            List<Expected> onewayMsgs = Senders.build(topic, run, sync + async, oneway);
            collector.expect(syncMsgs);
            collector.expect(asyncMsgs);
            collector.expect(onewayMsgs);

            DefaultMQProducer producer = Common.startProducer(group + "_p", "p-" + run);
            long t0 = System.currentTimeMillis();
            Senders.sendSync(producer, syncMsgs);
            Senders.sendAsync(producer, asyncMsgs, 256, Common.timeoutMillis(120));
            Senders.sendOneway(producer, onewayMsgs);
            long t1 = System.currentTimeMillis();
            System.err.println("  .. sent " + total + " messages in " + (t1 - t0) + " ms");

            Common.await("every message to be consumed", Common.timeoutMillis(180), collector::complete,
                    collector::progress);
            System.err.println("  .. consumed " + collector.progress() + " " + (System.currentTimeMillis() - t0)
                    + " ms after the first send");
            collector.checkClean();

            Common.shutdownQuietly(consumer);
            Common.shutdownQuietly(producer);
            Common.shutdownQuietly(admin);
        });
    }
}
