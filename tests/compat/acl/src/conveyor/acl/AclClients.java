package conveyor.acl;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * The Java half of tests/compat/acl.sh: RocketMQ's own remoting client (4.9.x or 5.x, whichever is on the
 * classpath) signing with {@code new AclClientRPCHook(new SessionCredentials(ak, sk))}, exactly as an application
 * does. The same source compiles against both generations (only APIs present in both are used).
 *
 * <pre>
 *   AclClients clients key=value...   send + consume with credentials, then the refusals
 *   AclClients reload key=value...    a producer user removed from the users file is refused within a deadline
 * </pre>
 *
 * Keys: ns, topic (the producer has PUB, the consumer SUB), subOnlyTopic (the producer has SUB only), noPermTopic (the
 * producer has nothing), producer=AK:SK, consumer=AK:SK, admin=AK:SK (reload), pgroup, cgroup, n, prefix (of each
 * check's name), ready and trigger (files, reload), deadlineMs.
 *
 * Output: one line per check, "ok PREFIX/NAME: detail" or "FAIL PREFIX/NAME: reason"; exits 1 if any failed.
 * NO_PERMISSION is response code 16 in both client generations (ResponseCode.NO_PERMISSION).
 */
public final class AclClients {
    static final int NO_PERMISSION = 16;

    private final Map<String, String> args;
    private final String prefix;
    private int failures;

    private AclClients(Map<String, String> args) {
        this.args = args;
        this.prefix = args.getOrDefault("prefix", "java-" + MQVersion.getVersionDesc(MQVersion.CURRENT_VERSION));
    }

    public static void main(String[] argv) throws Exception {
        if (argv.length < 1) {
            System.err.println("usage: AclClients clients|reload key=value...");
            System.exit(2);
        }
        Map<String, String> args = new HashMap<>();
        for (int i = 1; i < argv.length; i++) {
            int eq = argv[i].indexOf('=');
            if (eq < 0) {
                System.err.println("not key=value: " + argv[i]);
                System.exit(2);
            }
            args.put(argv[i].substring(0, eq), argv[i].substring(eq + 1));
        }
        AclClients run = new AclClients(args);
        System.err.println("client " + MQVersion.getVersionDesc(MQVersion.CURRENT_VERSION) + ", mode " + argv[0]);
        switch (argv[0]) {
            case "clients":
                run.clients();
                break;
            case "reload":
                run.reload();
                break;
            default:
                System.err.println("unknown mode " + argv[0]);
                System.exit(2);
        }
        System.out.flush();
        // The clients' non-daemon threads must not keep the JVM alive after a failed shutdown.
        System.exit(run.failures == 0 ? 0 : 1);
    }

    // --- output ----------------------------------------------------------------------------------------------

    private void ok(String name, String detail) {
        System.out.println("ok " + prefix + "/" + name + ": " + detail);
        System.out.flush();
    }

    private void fail(String name, String reason) {
        failures++;
        System.out.println("FAIL " + prefix + "/" + name + ": " + reason);
        System.out.flush();
    }

    private String arg(String key) {
        String v = args.get(key);
        if (v == null) {
            throw new IllegalArgumentException("missing argument " + key + "=");
        }
        return v;
    }

    private RPCHook hook(String akSk) {
        int colon = akSk.indexOf(':');
        return new AclClientRPCHook(new SessionCredentials(akSk.substring(0, colon), akSk.substring(colon + 1)));
    }

    private static String accessKey(String akSk) {
        return akSk.substring(0, akSk.indexOf(':'));
    }

    // --- clients ---------------------------------------------------------------------------------------------

    /**
     * A producer whose client instance is its own: clients of one JVM share an MQClientInstance (and with it
     * the RPC hook of whichever was created first) unless their instance names differ.
     */
    private DefaultMQProducer producer(RPCHook hook, String instance) throws MQClientException {
        DefaultMQProducer p = hook == null
            ? new DefaultMQProducer(arg("pgroup") + "_" + instance)
            : new DefaultMQProducer(arg("pgroup"), hook);
        p.setNamesrvAddr(arg("ns"));
        p.setInstanceName(instance + "-" + UUID.randomUUID());
        p.setSendMsgTimeout(5000);
        p.start();
        return p;
    }

    private static Message message(String topic, String key, String body) {
        return new Message(topic, "acl", key, body.getBytes(StandardCharsets.UTF_8));
    }

    /** The first exception of the chain of type {@code type} carrying NO_PERMISSION. */
    private static Throwable noPermission(Throwable t, Class<?> type) {
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (!type.isInstance(c)) {
                continue;
            }
            if (c instanceof MQBrokerException && ((MQBrokerException) c).getResponseCode() == NO_PERMISSION) {
                return c;
            }
            if (c instanceof MQClientException && ((MQClientException) c).getResponseCode() == NO_PERMISSION) {
                return c;
            }
        }
        return null;
    }

    /** What the server said, from the exception that carried its answer. */
    private static String remark(Throwable t) {
        if (t instanceof MQBrokerException) {
            return ((MQBrokerException) t).getErrorMessage();
        }
        if (t instanceof MQClientException) {
            return ((MQClientException) t).getErrorMessage();
        }
        return t.getMessage();
    }

    /** The chain of exceptions, class and code, on one line. */
    private static String describe(Throwable t) {
        StringBuilder b = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (b.length() > 0) {
                b.append(" <- ");
            }
            b.append(c.getClass().getSimpleName());
            if (c instanceof MQBrokerException) {
                b.append("(code ").append(((MQBrokerException) c).getResponseCode()).append(')');
            } else if (c instanceof MQClientException) {
                b.append("(code ").append(((MQClientException) c).getResponseCode()).append(')');
            }
            String m = c instanceof MQBrokerException || c instanceof MQClientException ? remark(c) : c.getMessage();
            if (m != null) {
                m = m.replaceAll("\\s+", " ").trim();
                b.append(" \"").append(m.length() > 160 ? m.substring(0, 160) + "..." : m).append('"');
            }
        }
        return b.toString();
    }

    private void clients() throws Exception {
        String topic = arg("topic");
        int n = Integer.parseInt(arg("n"));
        long deadlineMs = Long.parseLong(args.getOrDefault("deadlineMs", "60000"));
        String run = UUID.randomUUID().toString().substring(0, 8);

        // 1. The producer user (PUB on topic) sends n messages, each must be SEND_OK.
        DefaultMQProducer producer = producer(hook(arg("producer")), "producer");
        int sendOk = 0;
        String firstError = null;
        for (int i = 0; i < n; i++) {
            try {
                SendResult r = producer.send(message(topic, run + "-" + i, "acl " + run + " #" + i));
                if (r.getSendStatus() == SendStatus.SEND_OK) {
                    sendOk++;
                } else if (firstError == null) {
                    firstError = "message " + i + ": " + r.getSendStatus();
                }
            } catch (Exception e) {
                if (firstError == null) {
                    firstError = "message " + i + ": " + describe(e);
                }
            }
        }
        if (sendOk == n) {
            ok("send", n + " messages to " + topic + " as " + accessKey(arg("producer")) + ", all SEND_OK");
        } else {
            fail("send", sendOk + "/" + n + " SEND_OK; first problem: " + firstError);
        }

        // 2. The consumer user (SUB on topic and group) consumes all of them with a push consumer.
        Set<String> seen = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(arg("cgroup"), hook(arg("consumer")),
            new AllocateMessageQueueAveragely());
        consumer.setNamesrvAddr(arg("ns"));
        consumer.setInstanceName("consumer-" + UUID.randomUUID());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String key = m.getKeys();
                if (key != null && key.startsWith(run + "-")) {
                    seen.add(key);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        long t0 = System.currentTimeMillis();
        try {
            consumer.start();
            long deadline = t0 + deadlineMs;
            while (seen.size() < sendOk && System.currentTimeMillis() < deadline) {
                Thread.sleep(50);
            }
            if (sendOk > 0 && seen.size() == sendOk) {
                ok("consume", seen.size() + "/" + sendOk + " messages consumed as " + accessKey(arg("consumer"))
                    + " (group " + arg("cgroup") + ") in " + (System.currentTimeMillis() - t0) + " ms");
            } else {
                fail("consume", seen.size() + "/" + sendOk + " of the sent messages consumed within " + deadlineMs
                    + " ms (client log: rocketmq_client.log)");
            }
        } catch (Exception e) {
            fail("consume", "the push consumer did not start: " + describe(e));
        } finally {
            consumer.shutdown();
        }

        // 3. The same producer on a topic where it has SUB but not PUB: it reads the route, the broker refuses.
        String subOnly = arg("subOnlyTopic");
        try {
            SendResult r = producer.send(message(subOnly, run + "-x", "must be refused"));
            fail("lacks-pub", "send to " + subOnly + " answered " + r.getSendStatus());
        } catch (Exception e) {
            Throwable hit = noPermission(e, MQBrokerException.class);
            String want = "needs PUB on topic " + subOnly;
            if (hit != null && remark(hit).contains(want)) {
                ok("lacks-pub", "send to " + subOnly + " threw " + (hit == e ? "MQBrokerException"
                    : e.getClass().getSimpleName() + " caused by MQBrokerException") + ", code 16, remark: \""
                    + remark(hit) + "\"");
            } else {
                fail("lacks-pub", "expected MQBrokerException code 16 with \"" + want + "\", got " + describe(e));
            }
        }

        // 4. A topic the producer has no permission on at all: the name server refuses its route.
        routeRefused("no-perm-topic", producer, arg("noPermTopic"), "on topic " + arg("noPermTopic"));

        // 5. A producer without the hook: unsigned requests are refused.
        DefaultMQProducer unsigned = producer(null, "unsigned");
        try {
            routeRefused("unsigned", unsigned, topic, "not signed");
        } finally {
            unsigned.shutdown();
        }

        // 6. The producer's access key with a wrong secret key.
        String wrong = accessKey(arg("producer")) + ":not-the-secret-key";
        DefaultMQProducer forged = producer(hook(wrong), "wrong-secret");
        try {
            routeRefused("wrong-secret", forged, topic, "check signature failed for AccessKey "
                + accessKey(arg("producer")));
        } finally {
            forged.shutdown();
        }

        // 7. The broker checks signatures too: the producer of step 1 (its route known) with its secret changed.
        RPCHook changing = hook(arg("producer"));
        DefaultMQProducer later = producer(changing, "secret-changed");
        try {
            later.send(message(topic, run + "-y", "before the change"));
            ((AclClientRPCHook) changing).getSessionCredentials().setSecretKey("changed-secret-key");
            try {
                SendResult r = later.send(message(topic, run + "-z", "must be refused"));
                fail("wrong-secret-at-broker", "send with a changed secret answered " + r.getSendStatus());
            } catch (Exception e) {
                Throwable hit = noPermission(e, MQBrokerException.class);
                if (hit != null && remark(hit).contains("check signature failed")) {
                    ok("wrong-secret-at-broker", "the broker refused the send: code 16, remark: \"" + remark(hit)
                        + "\"");
                } else {
                    fail("wrong-secret-at-broker", "expected MQBrokerException code 16 \"check signature failed\", got "
                        + describe(e));
                }
            }
        } catch (Exception e) {
            fail("wrong-secret-at-broker", "the send before the change failed: " + describe(e));
        } finally {
            later.shutdown();
        }
        producer.shutdown();
    }

    /**
     * A send to {@code topic} by {@code p} must fail, and the name server must refuse the same client's route
     * request with NO_PERMISSION and {@code why} in the remark (the send itself fails on the client's side
     * with "No route info", the server's answer being logged only).
     */
    private void routeRefused(String name, DefaultMQProducer p, String topic, String why) {
        String sent;
        try {
            SendResult r = p.send(message(topic, "refused", "must be refused"));
            fail(name, "send to " + topic + " answered " + r.getSendStatus());
            return;
        } catch (Exception e) {
            sent = describe(e);
        }
        try {
            p.fetchPublishMessageQueues(topic);
            fail(name, "send failed (" + sent + ") but the name server gave the route of " + topic);
        } catch (Exception e) {
            Throwable hit = noPermission(e, MQClientException.class);
            if (hit != null && remark(hit).contains(why)) {
                ok(name, "send to " + topic + " failed on the client: " + sent + "; the name server refused the route"
                    + " with code 16: \"" + remark(hit) + "\"");
            } else {
                fail(name, "send failed (" + sent + "); expected the route refused with code 16 and \"" + why
                    + "\", got " + describe(e));
            }
        }
    }

    // --- reload ----------------------------------------------------------------------------------------------

    private void reload() throws Exception {
        String topic = arg("topic");
        long deadlineMs = Long.parseLong(args.getOrDefault("deadlineMs", "10000"));
        Path ready = Paths.get(arg("ready"));
        Path trigger = Paths.get(arg("trigger"));
        String ak = accessKey(arg("producer"));
        DefaultMQProducer producer = producer(hook(arg("producer")), "reload");
        try {
            SendResult first = producer.send(message(topic, "before-reload", "before"));
            if (first.getSendStatus() != SendStatus.SEND_OK) {
                fail("reload-refused", "the send before the change answered " + first.getSendStatus());
                return;
            }
        } catch (Exception e) {
            fail("reload-refused", "the send before the change failed: " + describe(e));
            return;
        }
        Files.write(ready, new byte[0]);
        long waitUntil = System.currentTimeMillis() + 120_000;
        while (!Files.exists(trigger)) {
            if (System.currentTimeMillis() > waitUntil) {
                fail("reload-refused", "the users file was not changed within 120 s (" + trigger + " missing)");
                return;
            }
            Thread.sleep(20);
        }
        // The trigger file holds the time (ms) at which the users file was replaced.
        long changed = Long.parseLong(new String(Files.readAllBytes(trigger), StandardCharsets.UTF_8).trim());
        long deadline = changed + deadlineMs;
        int sends = 0;
        String last = "no send made";
        boolean refused = false;
        while (System.currentTimeMillis() < deadline) {
            sends++;
            try {
                last = producer.send(message(topic, "after-reload-" + sends, "after")).getSendStatus().toString();
            } catch (Exception e) {
                Throwable hit = noPermission(e, MQBrokerException.class);
                if (hit != null && remark(hit).contains("no user with AccessKey " + ak)) {
                    ok("reload-refused", "send #" + sends + " refused " + (System.currentTimeMillis() - changed)
                        + " ms after the users file lost " + ak + ": code 16, remark: \"" + remark(hit) + "\"");
                    refused = true;
                    break;
                }
                last = describe(e);
            }
            Thread.sleep(100);
        }
        if (!refused) {
            fail("reload-refused", sends + " sends in the " + deadlineMs + " ms after the users file lost " + ak
                + " were not refused; the last: " + last);
        }
        producer.shutdown();

        // A producer started afresh by the removed user: its route is refused at once.
        DefaultMQProducer fresh = producer(hook(arg("producer")), "reload-fresh");
        try {
            routeRefused("reload-new-producer", fresh, topic, "no user with AccessKey " + ak);
        } finally {
            fresh.shutdown();
        }

        // The rest of the file still holds: the admin user sends to the same topic.
        DefaultMQProducer admin = producer(hook(arg("admin")), "reload-admin");
        try {
            SendResult r = admin.send(message(topic, "admin-after-reload", "admin"));
            if (r.getSendStatus() == SendStatus.SEND_OK) {
                ok("reload-others-unaffected", "after the reload " + accessKey(arg("admin")) + " still sends to "
                    + topic + " (SEND_OK)");
            } else {
                fail("reload-others-unaffected", "admin send answered " + r.getSendStatus());
            }
        } catch (Exception e) {
            fail("reload-others-unaffected", "admin send failed: " + describe(e));
        } finally {
            admin.shutdown();
        }
    }
}
