import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.zip.CRC32;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.CommandCustomHeader;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RemotingSerializable;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.remoting.protocol.admin.OffsetWrapper;
import org.apache.rocketmq.remoting.protocol.body.Connection;
import org.apache.rocketmq.remoting.protocol.body.ConsumerConnection;
import org.apache.rocketmq.remoting.protocol.body.QueryAssignmentRequestBody;
import org.apache.rocketmq.remoting.protocol.body.QueryAssignmentResponseBody;
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.heartbeat.SubscriptionData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The remoting half of MixedGroup's mixed-pop-group check: a RocketMQ 5.3.3 DefaultMQPushConsumer (remoting protocol)
 * with clientRebalance=false, so that it asks the broker for its queues (QUERY_ASSIGNMENT) and, for a group/topic set
 * to POP with setConsumeMode, pops (POP_MESSAGE) and acks (ACK_MESSAGE) instead of pulling. It runs in its own JVM
 * (rocketmq-client 5.3.3 and the gRPC SDK bring different versions of the same unshaded libraries: io.grpc,
 * zstd-jni, lz4, perfmark) with java-rmq5.classpath; MixedGroup starts it and reads its stdout:
 *
 *   java -cp "$(cat ~/.cache/conveyor/compat/java-rmq5.classpath)" MixedRemotingConsumer.java NAMESRV GROUP TOPIC INVISIBLE_MS
 *
 * An RPC hook sees every request the client sends and every response it gets, so the lines below are what went over
 * the wire, not what the client believes:
 *   ASSIGNMENT time topic code modes queues   a QUERY_ASSIGNMENT response (modes: the assignments' modes)
 *   POPREQ time topic                         a POP_MESSAGE request sent
 *   POP time topic queueId code               a POP_MESSAGE response (code 0 found, 210 long poll timed out, ...)
 *   PULL time topic queueId code              a PULL_MESSAGE response
 *   MSG start end key msgId crc32 topic queueId queueOffset reconsumeTimes popTime invisibleTime popCk
 *                                             one listener call (one message; CONSUME_SUCCESS), popCk: the message's
 *                                             POP_CK property ("-" if none), popTime/invisibleTime parsed from it
 *   ACK time code extraInfo                   an ACK_MESSAGE response (extraInfo is the acked message's POP_CK)
 *   CHANGE time code extraInfo                a CHANGE_MESSAGE_INVISIBLETIME response
 *   BACKLOG time scope diff brokerSum consumerSum queues   examineConsumeStats, on the "BACKLOG ms" command
 *   BACKLOG_ERROR time scope error
 *   CONNECTION time consumeType messageModel clients=... subscriptions=topic=expression,...
 *                                             the group's connections and subscriptions (consumerConnection), after
 *                                             the backlog
 *   STOPPED counters                          after the "STOP" command shut the consumer down; then the JVM exits
 * It exits when stdin ends (its parent is gone). Commands on stdin: "BACKLOG TIMEOUT_MS" (polls until the group's
 * total diff is 0 or the timeout, printing each poll), "STOP".
 */
public final class MixedRemotingConsumer {
    private static final Object LOCK = new Object();
    private static final Map<String, AtomicInteger> COUNTS = new ConcurrentHashMap<>();

    static void emit(String line) {
        synchronized (LOCK) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static void count(String what) {
        COUNTS.computeIfAbsent(what, k -> new AtomicInteger()).incrementAndGet();
    }

    static String oneWord(String s) {
        return s == null || s.isEmpty() ? "-" : s.replace(' ', '_');
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String group = args[1];
        String topic = args[2];
        long invisibleMs = Long.parseLong(args[3]);

        RPCHook hook = new RPCHook() {
            @Override
            public void doBeforeRequest(String remoteAddr, RemotingCommand request) {
                count("request-" + request.getCode());
                if (request.getCode() == RequestCode.POP_MESSAGE
                        && request.readCustomHeader() instanceof PopMessageRequestHeader) {
                    emit("POPREQ " + System.currentTimeMillis() + " "
                            + ((PopMessageRequestHeader) request.readCustomHeader()).getTopic());
                }
            }

            @Override
            public void doAfterResponse(String remoteAddr, RemotingCommand request, RemotingCommand response) {
                long now = System.currentTimeMillis();
                CommandCustomHeader h = request.readCustomHeader();
                switch (request.getCode()) {
                    case RequestCode.QUERY_ASSIGNMENT: {
                        String t = "?";
                        try {
                            t = RemotingSerializable.decode(request.getBody(), QueryAssignmentRequestBody.class).getTopic();
                        } catch (Exception e) {
                            // keep "?"
                        }
                        List<String> modes = new ArrayList<>();
                        List<String> queues = new ArrayList<>();
                        if (response.getCode() == 0 && response.getBody() != null) {
                            QueryAssignmentResponseBody b = RemotingSerializable.decode(response.getBody(),
                                    QueryAssignmentResponseBody.class);
                            if (b.getMessageQueueAssignments() != null) {
                                b.getMessageQueueAssignments().forEach(a -> {
                                    modes.add(String.valueOf(a.getMode()));
                                    MessageQueue q = a.getMessageQueue();
                                    queues.add(q == null ? "null" : q.getBrokerName() + ":" + q.getQueueId());
                                });
                            }
                        }
                        emit("ASSIGNMENT " + now + " " + oneWord(t) + " " + response.getCode() + " "
                                + String.join(",", new java.util.TreeSet<>(modes)) + " " + String.join(",", queues));
                        break;
                    }
                    case RequestCode.POP_MESSAGE:
                        count("pop-" + response.getCode());
                        if (h instanceof PopMessageRequestHeader) {
                            PopMessageRequestHeader p = (PopMessageRequestHeader) h;
                            emit("POP " + now + " " + p.getTopic() + " " + p.getQueueId() + " " + response.getCode());
                        }
                        break;
                    case RequestCode.PULL_MESSAGE:
                        if (h instanceof PullMessageRequestHeader) {
                            PullMessageRequestHeader p = (PullMessageRequestHeader) h;
                            emit("PULL " + now + " " + p.getTopic() + " " + p.getQueueId() + " " + response.getCode());
                        }
                        break;
                    case RequestCode.ACK_MESSAGE:
                        if (h instanceof AckMessageRequestHeader) {
                            emit("ACK " + now + " " + response.getCode() + " "
                                    + ((AckMessageRequestHeader) h).getExtraInfo());
                        }
                        break;
                    case RequestCode.CHANGE_MESSAGE_INVISIBLETIME:
                        emit("CHANGE " + now + " " + response.getCode() + " " + request.getExtFields());
                        break;
                    default:
                        break;
                }
            }
        };

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group, hook);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("mixed-remoting-" + ProcessHandle.current().pid());
        // Ask the broker for the assignment (QUERY_ASSIGNMENT): the only way a DefaultMQPushConsumer learns POP mode.
        consumer.setClientRebalance(false);
        consumer.setPopInvisibleTime(invisibleMs);
        // Small pops, so that the gRPC consumer of the group gets a share.
        consumer.setPopBatchNums(4);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeThreadMin(4);
        consumer.setConsumeThreadMax(4);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                long start = System.currentTimeMillis();
                String key = "-";
                if (m.getKeys() != null) {
                    for (String k : m.getKeys().split(MessageConst.KEY_SEPARATOR)) {
                        if (k.startsWith("k_")) {
                            key = k;
                            break;
                        }
                    }
                }
                CRC32 crc = new CRC32();
                crc.update(m.getBody() == null ? new byte[0] : m.getBody());
                String ck = m.getProperty(MessageConst.PROPERTY_POP_CK);
                long popTime = -1;
                long inv = -1;
                if (ck != null) {
                    try {
                        String[] parts = ExtraInfoUtil.split(ck);
                        popTime = ExtraInfoUtil.getPopTime(parts);
                        inv = ExtraInfoUtil.getInvisibleTime(parts);
                    } catch (Exception e) {
                        // reported as -1
                    }
                }
                try {
                    Thread.sleep(20); // some work, so that the two consumers interleave
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                emit("MSG " + start + " " + System.currentTimeMillis() + " " + key + " "
                        + oneWord(MessageClientIDSetter.getUniqID(m)) + " " + crc.getValue() + " " + m.getTopic() + " "
                        + m.getQueueId() + " " + m.getQueueOffset() + " " + m.getReconsumeTimes() + " " + popTime
                        + " " + inv + " " + (ck == null ? "-" : ck));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        emit("STARTED " + System.currentTimeMillis() + " " + consumer.getDefaultMQPushConsumerImpl().getmQClientFactory()
                .getClientId());

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.startsWith("BACKLOG")) {
                long timeout = Long.parseLong(line.substring("BACKLOG".length()).trim());
                backlog(namesrv, group, topic, timeout);
            } else if (line.equals("STOP")) {
                consumer.shutdown();
                emit("STOPPED " + new TreeMap<>(COUNTS));
                System.out.flush();
                Runtime.getRuntime().halt(0);
            }
        }
        // The parent is gone.
        Runtime.getRuntime().halt(3);
    }

    /** The group's connections and subscriptions as the broker reports them (mqadmin consumerConnection). */
    static void connection(DefaultMQAdminExt admin, String group) {
        try {
            ConsumerConnection cc = admin.examineConsumerConnectionInfo(group);
            List<String> clients = new ArrayList<>();
            for (Connection c : cc.getConnectionSet()) {
                clients.add(c.getClientId() + "/" + c.getLanguage() + "/" + c.getVersion());
            }
            List<String> subs = new ArrayList<>();
            for (Map.Entry<String, SubscriptionData> e : new TreeMap<>(cc.getSubscriptionTable()).entrySet()) {
                subs.add(e.getKey() + "=" + oneWord(e.getValue().getSubString()));
            }
            emit("CONNECTION " + System.currentTimeMillis() + " " + cc.getConsumeType() + " " + cc.getMessageModel()
                    + " clients=" + String.join(",", clients) + " subscriptions=" + String.join(",", subs));
        } catch (Exception e) {
            emit("CONNECTION_ERROR " + System.currentTimeMillis() + " " + oneWord(e.toString().replace('\n', ' ')));
        }
    }

    /**
     * Polls the group's consume stats as mqadmin consumerProgress does (examineConsumeStats(group): the queues of
     * every topic the group consumes, found through %RETRY%GROUP's route), falling back to the topic's
     * (examineConsumeStats(group, topic)) if the group-wide call fails, until the total diff is 0 or TIMEOUT.
     */
    static void backlog(String namesrv, String group, String topic, long timeout) {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("mixed-admin-" + System.nanoTime());
        try {
            admin.start();
            long deadline = System.currentTimeMillis() + timeout;
            while (true) {
                long diff = -1;
                for (String scope : new String[] {"group", "topic"}) {
                    try {
                        ConsumeStats cs = scope.equals("group") ? admin.examineConsumeStats(group)
                                : admin.examineConsumeStats(group, topic);
                        long b = 0;
                        long c = 0;
                        List<String> qs = new ArrayList<>();
                        for (Map.Entry<MessageQueue, OffsetWrapper> e : new TreeMap<>(cs.getOffsetTable()).entrySet()) {
                            OffsetWrapper w = e.getValue();
                            qs.add(e.getKey().getTopic() + ":" + e.getKey().getQueueId() + "=" + w.getBrokerOffset() + "/"
                                    + w.getConsumerOffset());
                            if (e.getKey().getTopic().equals(topic)) {
                                b += w.getBrokerOffset();
                                c += w.getConsumerOffset();
                            }
                        }
                        diff = cs.computeTotalDiff();
                        emit("BACKLOG " + System.currentTimeMillis() + " " + scope + " " + diff + " " + b + " " + c
                                + " " + String.join(",", qs));
                        break;
                    } catch (Exception e) {
                        emit("BACKLOG_ERROR " + System.currentTimeMillis() + " " + scope + " " + oneWord(e.toString()
                                .replace('\n', ' ')));
                    }
                }
                if (diff == 0 || System.currentTimeMillis() >= deadline) {
                    connection(admin, group);
                    emit("BACKLOG_END " + System.currentTimeMillis() + " " + diff);
                    return;
                }
                Thread.sleep(1000);
            }
        } catch (Exception e) {
            emit("BACKLOG_ERROR " + System.currentTimeMillis() + " admin " + oneWord(e.toString()));
            emit("BACKLOG_END " + System.currentTimeMillis() + " -1");
        } finally {
            admin.shutdown();
        }
    }
}
