package conveyor.grpc;

import java.util.ArrayList;
import java.util.List;

/**
 * The topics and consumer groups the checks use, as mqadmin commands for grpc.sh (the single source of the names;
 * the programs derive the same names from GRPC_RUN_ID through {@link G#topic} and {@link G#group}).
 *
 *   GRPC_RUN_ID=abc java -cp ... conveyor.grpc.Resources CLUSTER
 *
 * Prints one line per command in MqadminBatch's format: the regex its output must match, a tab, the mqadmin
 * arguments. Apache RocketMQ 5.x checks a topic's message.type attribute on send through the proxy (FIFO messages
 * need a FIFO topic, delivery timestamps a DELAY topic, transactions a TRANSACTION topic), and a group's
 * consumeMessageOrderly flag makes its consumers FIFO consumers; retryMaxTimes bounds the delivery attempts
 * (attempts = retryMaxTimes + 1) before the dead-letter queue %DLQ%group. After creating the topics the commands
 * check that the name server routes each of them.
 */
public final class Resources {
    /** retryMaxTimes of the retry/DLQ group: delivery attempts 1, 2, 3, then the DLQ. */
    static final int RETRY_MAX_TIMES = 2;

    public static void main(String[] args) {
        String cluster = args.length > 0 ? args[0] : "DefaultCluster";
        List<String> out = new ArrayList<>();
        // topic key, message type, queues
        String[][] topics = {
            {"normal", "NORMAL", "4"}, {"fifo", "FIFO", "4"}, {"delay", "DELAY", "4"}, {"tx", "TRANSACTION", "4"},
            {"simple", "NORMAL", "4"}, {"inv", "NORMAL", "4"}, {"tag", "NORMAL", "4"},
            {"push", "NORMAL", "4"}, {"retry", "NORMAL", "4"}, {"fifopush", "FIFO", "4"}, {"mixed", "NORMAL", "4"},
        };
        List<String> names = new ArrayList<>();
        for (String[] t : topics) {
            names.add(G.topic(t[0]));
            out.add("success\tupdateTopic -c " + cluster + " -t " + G.topic(t[0]) + " -r " + t[2] + " -w " + t[2]
                    + " -a +message.type=" + t[1]);
        }
        // The retry group's dead-letter topic, created up front so that its reader can subscribe before the
        // first message is dead-lettered (the broker keeps an existing %DLQ% topic's configuration).
        names.add(G.dlqTopic("retry"));
        out.add("success\tupdateTopic -c " + cluster + " -t " + G.dlqTopic("retry") + " -r 1 -w 1"
                + " -a +message.type=NORMAL");
        // group key, orderly, retryMaxTimes (-1: default)
        String[][] groups = {
            {"normal", "false", "-1"}, {"fifo", "true", "-1"}, {"delay", "false", "-1"}, {"tx", "false", "-1"},
            {"simple", "false", "-1"}, {"inv", "false", "-1"}, {"tag", "false", "-1"}, {"tagc", "false", "-1"},
            {"push", "false", "-1"}, {"retry", "false", Integer.toString(RETRY_MAX_TIMES)}, {"dlq", "false", "-1"},
            {"fifopush", "true", "-1"}, {"mixed", "false", "-1"},
        };
        for (String[] g : groups) {
            StringBuilder sb = new StringBuilder("success\tupdateSubGroup -c " + cluster + " -g " + G.group(g[0]));
            if (g[1].equals("true")) {
                sb.append(" -o true");
            }
            if (!g[2].equals("-1")) {
                sb.append(" -r ").append(g[2]);
            }
            out.add(sb.toString());
        }
        out.add(""); // a new block: the routes once the topics exist
        for (String n : names) {
            out.add("\"brokerAddrs\"\ttopicRoute -t " + n);
        }
        // MixedGroup's group pops its topic (SET_MESSAGE_REQUEST_MODE): a remoting DefaultMQPushConsumer of the group
        // then gets POP from QUERY_ASSIGNMENT; -q 0: every consumer pops every queue.
        out.add("consume mode\\[POP\\]\tsetConsumeMode -c " + cluster + " -t " + G.topic("mixed") + " -g "
                + G.group("mixed") + " -m POP -q 0");
        for (String l : out) {
            System.out.println(l);
        }
    }
}
