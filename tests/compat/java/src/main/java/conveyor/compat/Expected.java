package conveyor.compat;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;

import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * One message a test sends, kept so that the received copy can be compared field by field.
 *
 * Every message carries two keys (a unique one first, then one shared by the run), a tag, three user
 * properties (one with non-ASCII text and separator-like characters) and a body that mixes binary
 * bytes; every 500th body is larger than the producer's 4 KiB compression threshold.
 */
final class Expected {
    final String topic;
    final int index;
    final String key;
    final String sharedKey;
    final String tags;
    final byte[] body;
    final Map<String, String> props = new LinkedHashMap<>();

    /** UNIQ_KEY the producer assigned (read back from the sent Message). */
    volatile String uniqId;
    /** SendResult summary or "oneway"; for diagnostics. */
    volatile String sendInfo = "not sent";
    volatile int sentQueueId = -1;
    volatile String offsetMsgId;

    Expected(String topic, String runId, int index, String tags) {
        this.topic = topic;
        this.index = index;
        this.key = "k_" + runId + "_" + index;
        this.sharedKey = "all_" + runId;
        this.tags = tags;
        this.body = makeBody(runId, index);
        props.put("compat_idx", Integer.toString(index));
        props.put("compat_run", runId);
        props.put("compat_text", "h\u00e9llo w\u00f6rld \u2713 a=b; c:d #" + index);
    }

    static byte[] makeBody(String runId, int index) {
        String head = "conveyor-compat " + runId + " #" + index + " ";
        if (index % 500 == 7) {
            // Large and compressible: the Java producer zlib-compresses bodies over 4 KiB.
            StringBuilder sb = new StringBuilder(head);
            while (sb.length() < 6000 + index % 100) {
                sb.append("the quick brown fox ").append(index).append(' ');
            }
            return sb.toString().getBytes(StandardCharsets.UTF_8);
        }
        byte[] headBytes = head.getBytes(StandardCharsets.UTF_8);
        byte[] b = new byte[headBytes.length + 16 + (index * 37) % 300];
        new Random(runId.hashCode() * 31L + index).nextBytes(b);
        System.arraycopy(headBytes, 0, b, 0, headBytes.length);
        return b;
    }

    String keysString() {
        return key + MessageConst.KEY_SEPARATOR + sharedKey;
    }

    Message toMessage() {
        Message m = new Message(topic, tags, keysString(), body);
        props.forEach(m::putUserProperty);
        return m;
    }

    /** Called after sending: remembers the unique id the producer stamped on the message. */
    void sent(Message m, String info, int queueId, String offsetMsgId) {
        this.uniqId = m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
        this.sendInfo = info;
        this.sentQueueId = queueId;
        this.offsetMsgId = offsetMsgId;
    }

    /** Returns null when got is identical to what was sent, otherwise a description of the differences. */
    String compare(MessageExt got) {
        return compare(got, topic);
    }

    /** Like {@link #compare(MessageExt)}, for a copy that lives in another topic (e.g. a dead-letter queue). */
    String compare(MessageExt got, String expectedTopic) {
        StringBuilder d = new StringBuilder();
        if (!expectedTopic.equals(got.getTopic())) {
            d.append(" topic=").append(got.getTopic());
        }
        if (!Arrays.equals(body, got.getBody())) {
            byte[] g = got.getBody();
            int first = -1;
            if (g != null) {
                for (int i = 0; i < Math.min(g.length, body.length); i++) {
                    if (g[i] != body[i]) {
                        first = i;
                        break;
                    }
                }
            }
            d.append(" body differs (sent ").append(body.length).append(" bytes, got ")
                    .append(g == null ? "null" : g.length + " bytes")
                    .append(first >= 0 ? ", first difference at " + first : "").append(')');
        }
        if (!keysString().equals(got.getKeys())) {
            d.append(" keys=").append(quote(got.getKeys()));
        }
        if (!tags.equals(got.getTags())) {
            d.append(" tags=").append(quote(got.getTags()));
        }
        for (Map.Entry<String, String> p : props.entrySet()) {
            String v = got.getUserProperty(p.getKey());
            if (!p.getValue().equals(v)) {
                d.append(" property ").append(p.getKey()).append('=').append(quote(v))
                        .append(" (sent ").append(quote(p.getValue())).append(')');
            }
        }
        String gotUniq = got.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
        if (uniqId != null && !uniqId.equals(gotUniq)) {
            d.append(" UNIQ_KEY=").append(quote(gotUniq)).append(" (sent ").append(uniqId).append(')');
        }
        return d.length() == 0 ? null : key + ":" + d;
    }

    static String quote(String s) {
        return s == null ? "null" : '"' + s + '"';
    }
}
