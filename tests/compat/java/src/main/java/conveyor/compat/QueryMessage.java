package conveyor.compat;

import java.util.List;

import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Scenario (d): after sync sends, every message can be
 *   - viewed by its offset message id (VIEW_MESSAGE_BY_ID),
 *   - viewed by its unique message id (QUERY_MESSAGE with the unique-key flag),
 *   - found by queryMessage on its own key and on the key shared by the whole run (QUERY_MESSAGE).
 * Index building is asynchronous on a real broker, so queries are retried until a deadline.
 */
public final class QueryMessage {
    public static void main(String[] args) {
        int total = args.length > 0 ? Integer.parseInt(args[0]) : 20;
        Common.run("d-query-message", diag -> {
            String run = Common.newRunId();
            String topic = Common.name("t", "d", run);
            String group = Common.name("g", "d", run);
            diag.add("topic=" + topic);

            DefaultMQAdminExt admin = Common.startAdmin("adm-" + run);
            Common.createTopic(admin, topic, 4, diag);
            long begin = System.currentTimeMillis() - 60_000;

            List<Expected> msgs = Senders.build(topic, run, 0, total);
            DefaultMQProducer producer = Common.startProducer(group + "_p", "p-" + run);
            Senders.sendSync(producer, msgs);
            long timeout = Common.timeoutMillis(60);

            final String[] last = {"-"};
            final Expected[] current = {null};
            diag.addLater(() -> current[0] == null ? "no lookup done"
                    : "last lookup of " + current[0].key + " (" + current[0].sendInfo + "): " + last[0]);
            for (Expected e : msgs) {
                current[0] = e;

                Common.await("viewMessage(offsetMsgId " + e.offsetMsgId + ")", timeout,
                        () -> identical(e, () -> admin.viewMessage(topic, e.offsetMsgId), last), () -> last[0]);
                Common.await("viewMessage(msgId " + e.uniqId + ")", timeout,
                        () -> identical(e, () -> admin.viewMessage(topic, e.uniqId), last), () -> last[0]);
                Common.await("queryMessage(key " + e.key + ")", timeout, () -> {
                    try {
                        QueryResult r = admin.queryMessage(topic, e.key, 32, begin, Long.MAX_VALUE);
                        for (MessageExt m : r.getMessageList()) {
                            if (e.compare(m) == null) {
                                return true;
                            }
                            last[0] = "queryMessage returned a different message: " + e.compare(m);
                        }
                        last[0] = "queryMessage returned " + r.getMessageList().size() + " messages";
                    } catch (Exception ex) {
                        last[0] = ex.toString();
                    }
                    return false;
                }, () -> last[0]);
            }

            String shared = msgs.get(0).sharedKey;
            current[0] = null;
            diag.addLater(() -> "last shared-key query: " + last[0]);
            Common.await("queryMessage(shared key " + shared + ") to return all " + total + " messages", timeout, () -> {
                try {
                    QueryResult r = admin.queryMessage(topic, shared, 64, begin, Long.MAX_VALUE);
                    long distinct = r.getMessageList().stream().map(MessageExt::getKeys).distinct().count();
                    last[0] = "returned " + r.getMessageList().size() + " messages, " + distinct + " distinct";
                    return distinct == total;
                } catch (Exception ex) {
                    last[0] = ex.toString();
                    return false;
                }
            }, () -> last[0]);

            Common.shutdownQuietly(producer);
            Common.shutdownQuietly(admin);
        });
    }

    interface Lookup {
        MessageExt get() throws Exception;
    }

    private static boolean identical(Expected e, Lookup lookup, String[] last) {
        try {
            MessageExt m = lookup.get();
            if (m == null) {
                last[0] = "null";
                return false;
            }
            String diff = e.compare(m);
            last[0] = diff == null ? "ok" : diff;
            return diff == null;
        } catch (Exception ex) {
            last[0] = ex.toString();
            return false;
        }
    }
}
