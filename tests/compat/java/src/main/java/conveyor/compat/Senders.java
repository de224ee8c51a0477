package conveyor.compat;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/** Sends lists of {@link Expected} messages with the three send modes of DefaultMQProducer. */
final class Senders {
    private Senders() {
    }

    private static final String[] TAGS = {"TagA", "TagB", "TagC"};

    /** Builds count messages with indexes [firstIndex, firstIndex + count), tags cycling TagA/TagB/TagC. */
    static List<Expected> build(String topic, String runId, int firstIndex, int count) {
        List<Expected> out = new ArrayList<>(count);
        for (int i = firstIndex; i < firstIndex + count; i++) {
            out.add(new Expected(topic, runId, i, TAGS[i % TAGS.length]));
        }
        return out;
    }

    private static String describe(SendResult r) {
        return r.getSendStatus() + " queue=" + r.getMessageQueue().getQueueId() + " offset=" + r.getQueueOffset()
                + " msgId=" + r.getMsgId();
    }

    static void sendSync(DefaultMQProducer producer, List<Expected> messages) throws Exception {
        for (Expected e : messages) {
            Message m = e.toMessage();
            SendResult r;
            try {
                r = producer.send(m);
            } catch (Exception ex) {
                throw new Common.Failure("sync send of " + e.key + " failed: " + ex);
            }
            if (r.getSendStatus() != SendStatus.SEND_OK) {
                throw new Common.Failure("sync send of " + e.key + " returned " + r);
            }
            e.sent(m, "sync " + describe(r), r.getMessageQueue().getQueueId(), r.getOffsetMsgId());
        }
    }

    /** Asynchronous sends with at most maxInFlight outstanding; waits for every callback (with a deadline). */
    static void sendAsync(DefaultMQProducer producer, List<Expected> messages, int maxInFlight, long timeoutMs)
            throws Exception {
        Semaphore inFlight = new Semaphore(maxInFlight);
        CountDownLatch done = new CountDownLatch(messages.size());
        ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();
        for (Expected e : messages) {
            Message m = e.toMessage();
            if (!inFlight.tryAcquire(timeoutMs, TimeUnit.MILLISECONDS)) {
                throw new Common.Failure("async send: no callback for " + maxInFlight + " outstanding sends");
            }
            producer.send(m, new SendCallback() {
                @Override
                public void onSuccess(SendResult r) {
                    if (r.getSendStatus() != SendStatus.SEND_OK) {
                        errors.add(e.key + ": " + r);
                    }
                    e.sent(m, "async " + describe(r), r.getMessageQueue().getQueueId(), r.getOffsetMsgId());
                    inFlight.release();
                    done.countDown();
                }

                @Override
                public void onException(Throwable t) {
                    errors.add(e.key + ": " + t);
                    inFlight.release();
                    done.countDown();
                }
            }, 10_000);
        }
        if (!done.await(timeoutMs, TimeUnit.MILLISECONDS)) {
            throw new Common.Failure("async send: " + done.getCount() + " callbacks missing after "
                    + timeoutMs / 1000 + "s");
        }
        if (!errors.isEmpty()) {
            throw new Common.Failure(errors.size() + " async sends failed, e.g. " + errors.peek());
        }
    }

    static void sendOneway(DefaultMQProducer producer, List<Expected> messages) throws Exception {
        for (Expected e : messages) {
            Message m = e.toMessage();
            try {
                producer.sendOneway(m);
            } catch (Exception ex) {
                throw new Common.Failure("oneway send of " + e.key + " failed: " + ex);
            }
            e.sent(m, "oneway", -1, null);
        }
    }
}
