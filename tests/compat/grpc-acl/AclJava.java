import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientConfigurationBuilder;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.java.misc.MetadataUtils;

/**
 * The Java 5.x SDK (rocketmq-client-java, grpc-java's classpath) against a gRPC endpoint with ACL on; run by
 * ../grpc-acl.sh as a single-file program. Credentials go in ClientConfiguration.setCredentialProvider; the
 * connection is the SDK's default (TLS). Checks, one "ok java/NAME" or "FAIL java/NAME: reason" line each on stdout
 * (the refusals the SDK raised are printed on stderr):
 *   send-permitted      the producer user (PUB on ACL_TOPIC) sends ACL_MESSAGES messages
 *   receive-permitted   the consumer user (SUB on ACL_TOPIC and ACL_GROUP) receives every one with a SimpleConsumer
 *                       and acks each
 *   send-denied-topic   the producer user sending to ACL_DENIED_TOPIC (no permission) fails with UNAUTHORIZED
 *                       (40100) naming "PUB on topic ACL_DENIED_TOPIC"
 *   consumer-cannot-send the consumer user (SUB only) sending to ACL_TOPIC fails with 40100, "PUB on topic"
 *   receive-denied-group the consumer user receiving from ACL_TOPIC as ACL_DENIED_GROUP (not among its groups) fails
 *                       with 40100, "SUB as group ACL_DENIED_GROUP"
 *   wrong-secret        the producer user with a wrong secret key fails with 40100, "check signature failed"
 *   unknown-user        an access key that is not in the users file fails with 40100, "no user with AccessKey"
 *   no-credentials      no credential provider fails with 40100, "no credentials"
 * Environment: GRPC_ENDPOINT, ACL_TOPIC, ACL_DENIED_TOPIC, ACL_GROUP, ACL_DENIED_GROUP, ACL_PRODUCER (ak:sk), ACL_CONSUMER (ak:sk),
 * ACL_MESSAGES (default 20), ACL_RECEIVE_SECS (default 30).
 */
public final class AclJava {
    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();
    static final long T0 = System.currentTimeMillis();
    static int failed = 0;

    static String env(String name, String def) {
        String v = System.getenv(name);
        if (v == null || v.isBlank()) {
            if (def == null) {
                throw new IllegalStateException(name + " is not set");
            }
            return def;
        }
        return v.trim();
    }

    static synchronized void diag(String check, String line) {
        String t = String.format("%7.3f", (System.currentTimeMillis() - T0) / 1000.0);
        for (String l : line.split("\n")) {
            System.err.println("[" + check + "] " + t + " " + l);
        }
        System.err.flush();
    }

    static synchronized void ok(String check, String detail) {
        System.out.println("ok java/" + check + (detail.isEmpty() ? "" : " (" + detail + ")"));
        System.out.flush();
    }

    static synchronized void fail(String check, String reason) {
        failed++;
        System.out.println("FAIL java/" + check + ": " + reason.replace('\n', ' '));
        System.out.flush();
    }

    /** The SDK's default connection (TLS), with credentials AK:SK, or none when userPass is null. */
    static ClientConfiguration config(String userPass) {
        ClientConfigurationBuilder b = ClientConfiguration.newBuilder()
                .setEndpoints(env("GRPC_ENDPOINT", null))
                .setRequestTimeout(Duration.ofSeconds(10));
        if (userPass != null) {
            String[] p = userPass.split(":", 2);
            b.setCredentialProvider(new StaticSessionCredentialsProvider(p[0], p[1]));
        }
        return b.build();
    }

    /** The exception and its causes, one per line. */
    static String chain(Throwable t) {
        StringBuilder sb = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (sb.length() > 0) {
                sb.append("\n  caused by: ");
            }
            sb.append(c.getClass().getName()).append(": ").append(c.getMessage());
        }
        return sb.toString();
    }

    interface Attempt {
        void run() throws Exception;
    }

    /**
     * CHECK passes when ATTEMPT throws, the exception (or a cause) is the SDK's UnauthorizedException with response
     * code 40100, and the server's reason contains REASON.
     */
    static void expectRefusal(String check, String reason, Attempt attempt) {
        long t = System.currentTimeMillis();
        try {
            attempt.run();
            fail(check, "succeeded, expected a refusal with UNAUTHORIZED (40100)");
        } catch (Throwable e) {
            String text = chain(e);
            long ms = System.currentTimeMillis() - t;
            // The SDK wraps a refusal at start-up (its route query) in IllegalStateException and others: the
            // server's answer is the innermost exception.
            Throwable root = e;
            boolean unauthorized = false;
            for (Throwable c = e; c != null; c = c.getCause() == c ? null : c.getCause()) {
                unauthorized |= c.getClass().getSimpleName().equals("UnauthorizedException");
                root = c;
            }
            System.err.println("java/" + check + " raised: " + root.getClass().getName() + ": " + root.getMessage());
            diag(check, text);
            if (!text.contains("40100") || !unauthorized) {
                fail(check, "expected UnauthorizedException with code 40100, got: " + text);
            } else if (!text.contains(reason)) {
                fail(check, "refused with 40100 but the reason lacks \"" + reason + "\": " + text);
            } else {
                ok(check, "refused with 40100 in " + ms + " ms");
            }
        }
    }

    static void send(String userPass, String topic, int n, String tag) throws Exception {
        try (Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config(userPass)).setTopics(topic)
                .build()) {
            for (int i = 0; i < n; i++) {
                p.send(PROVIDER.newMessageBuilder().setTopic(topic).setTag(tag).setKeys(tag + "-" + i)
                        .setBody((tag + "-" + i).getBytes(StandardCharsets.UTF_8)).build());
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String topic = env("ACL_TOPIC", null);
        String denied = env("ACL_DENIED_TOPIC", null);
        String group = env("ACL_GROUP", null);
        String otherGroup = env("ACL_DENIED_GROUP", null);
        String producer = env("ACL_PRODUCER", null);
        String consumer = env("ACL_CONSUMER", null);
        int n = Integer.parseInt(env("ACL_MESSAGES", "20"));
        long receiveMs = Long.parseLong(env("ACL_RECEIVE_SECS", "30")) * 1000;
        String producerKey = producer.split(":", 2)[0];
        diag("main", "rocketmq-client-java " + MetadataUtils.getVersion() + " against " + env("GRPC_ENDPOINT", null)
                + " (TLS, the SDK's default)");

        // send-permitted: each message sent and acknowledged by the endpoint.
        Set<String> sent = new HashSet<>();
        long t = System.currentTimeMillis();
        try (Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config(producer)).setTopics(topic)
                .build()) {
            for (int i = 0; i < n; i++) {
                String body = "acl-java-" + i;
                p.send(PROVIDER.newMessageBuilder().setTopic(topic).setTag("acl").setKeys(body)
                        .setBody(body.getBytes(StandardCharsets.UTF_8)).build());
                sent.add(body);
            }
            ok("send-permitted", n + " messages in " + (System.currentTimeMillis() - t) + " ms");
        } catch (Throwable e) {
            diag("send-permitted", chain(e));
            fail("send-permitted", sent.size() + " of " + n + " sent, then: " + chain(e));
        }

        // receive-permitted: a SimpleConsumer of the consumer user gets every message sent, and acks each.
        t = System.currentTimeMillis();
        Set<String> received = new HashSet<>();
        List<String> problems = new ArrayList<>();
        try (SimpleConsumer c = PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(config(consumer))
                .setConsumerGroup(group).setAwaitDuration(Duration.ofSeconds(5))
                .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL)).build()) {
            long deadline = t + receiveMs;
            while (!received.containsAll(sent) && System.currentTimeMillis() < deadline) {
                for (MessageView m : c.receive(16, Duration.ofSeconds(15))) {
                    String body = StandardCharsets.UTF_8.decode(m.getBody()).toString();
                    if (!sent.contains(body)) {
                        problems.add("unexpected message " + body);
                    }
                    received.add(body);
                    c.ack(m);
                }
            }
            Set<String> missing = new HashSet<>(sent);
            missing.removeAll(received);
            if (sent.isEmpty()) {
                fail("receive-permitted", "nothing was sent");
            } else if (!missing.isEmpty()) {
                fail("receive-permitted", missing.size() + " of " + sent.size() + " messages not received within "
                        + receiveMs / 1000 + " s");
            } else if (!problems.isEmpty()) {
                fail("receive-permitted", String.join("; ", problems));
            } else {
                ok("receive-permitted", received.size() + " received and acked in "
                        + (System.currentTimeMillis() - t) + " ms");
            }
        } catch (Throwable e) {
            diag("receive-permitted", chain(e));
            fail("receive-permitted", received.size() + " of " + sent.size() + " received, then: " + chain(e));
        }

        // The refusals.
        expectRefusal("send-denied-topic", "PUB on topic " + denied, () -> send(producer, denied, 1, "denied"));
        expectRefusal("consumer-cannot-send", "PUB on topic " + topic, () -> send(consumer, topic, 1, "by-consumer"));
        expectRefusal("receive-denied-group", "SUB as group " + otherGroup, () -> {
            try (SimpleConsumer c = PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(config(consumer))
                    .setConsumerGroup(otherGroup).setAwaitDuration(Duration.ofSeconds(5))
                    .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL)).build()) {
                c.receive(16, Duration.ofSeconds(15));
            }
        });
        expectRefusal("wrong-secret", "check signature failed for AccessKey " + producerKey,
                () -> send(producerKey + ":not-the-secret-key", topic, 1, "wrong-secret"));
        expectRefusal("unknown-user", "no user with AccessKey nobody-acl",
                () -> send("nobody-acl:nobody-secret-key", topic, 1, "unknown-user"));
        expectRefusal("no-credentials", "no credentials", () -> send(null, topic, 1, "no-credentials"));

        System.out.flush();
        System.exit(failed == 0 ? 0 : 1);
    }
}
