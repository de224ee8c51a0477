"""PushConsumer checks (see grpc-java's PushConsumers.java):
  push-success             50 messages, the listener returns SUCCESS: each consumed once (attempt 1), identical
  push-failure-redelivery  a group with retryMaxTimes 2 (mqadmin updateSubGroup -r 2): the listener returns FAILURE
                           for 3 of 8 messages every time; those are redelivered with deliveryAttempt 1, 2, 3 (never
                           more); the other 5 are consumed once
  push-dlq                 the 3 then land in %DLQ%group (read by a SimpleConsumer of another group) with their body,
                           tag, keys, user properties and message id; none of the 5 do
"""
import threading

import g
from g import now_ms
from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

SUCCESS_COUNT = 50
FAIL_COUNT = 3
OK_COUNT = 5
RETRY_MAX_TIMES = 2  # Resources.RETRY_MAX_TIMES
MAX_ATTEMPTS = RETRY_MAX_TIMES + 1
FAR = 1 << 62


class Delivery:
    def __init__(self, view, at):
        self.view = view
        self.at = at


class Listener(MessageListener):
    def __init__(self, fn):
        self.fn = fn

    def consume(self, message):
        return self.fn(message)


class Deliveries:
    """Thread-safe key -> [Delivery]."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_key = {}

    def add(self, v):
        k = g.key_of(v) or "?"
        with self.lock:
            self.by_key.setdefault(k, []).append(Delivery(v, now_ms()))

    def snapshot(self):
        with self.lock:
            return {k: list(v) for k, v in self.by_key.items()}


def push_consumer(s, grp, t, fn, threads=4):
    return g.build(s, "PushConsumer(%s on %s)" % (grp, t), lambda: PushConsumer(
        g.config(), grp, Listener(fn), {t: FilterExpression()}, consumption_thread_count=threads,
        tls_enable=g.tls_enable()))


def send(p, t, check, tag, i):
    m = g.Sent(check, i, tag)
    m.send_start = now_ms()
    m.message_id = p.send(m.build(t)).message_id
    m.send_end = now_ms()
    return m


def attempts(ds):
    return [d.view.delivery_attempt for d in ds]


def success(s):
    check = "push-success"
    t = g.topic("push")
    got = Deliveries()

    def listener(v):
        got.add(v)
        return ConsumeResult.SUCCESS

    c = push_consumer(s, g.group("push"), t, listener)
    p = None
    try:
        p = g.producer(s, t)
        sent = {}
        for i in range(SUCCESS_COUNT):
            m = send(p, t, check, "TagA" if i % 2 == 0 else "TagB", i)
            sent[m.key] = m
        try:
            g.await_cond(s, "every message consumed", g.timeout_ms(60),
                         lambda: all(k in got.snapshot() for k in sent),
                         lambda: "%d of %d consumed" % (len(got.snapshot()), len(sent)))
        except g.Failure as f:
            s.problem(check, str(f))
        for k, ds in got.snapshot().items():
            m = sent.get(k)
            if m is None:
                s.problem(check, "consumed a message that was not sent: " + g.describe(ds[0].view))
                continue
            if len(ds) > 1:
                s.problem(check, "%s was consumed %d times although the listener returned SUCCESS (attempts %s)"
                          % (m.key, len(ds), attempts(ds)))
            d = m.differences(ds[0].view, t, True)
            if d:
                s.problem(check, m.key + " arrived different from what was sent: " + "; ".join(d))
            if ds[0].view.delivery_attempt != 1:
                s.problem(check, "%s arrived with deliveryAttempt %s" % (m.key, ds[0].view.delivery_attempt))
        s.report(check)
    finally:
        g.close_quietly(s, p)
        g.close_quietly(s, c)


def summary(got, all_sent):
    snap = got.snapshot()
    return " ".join("%s#%d=%d" % (m.tag, m.index, len(snap.get(m.key, []))) for m in all_sent.values())


def retry_dlq(s):
    redo = "push-failure-redelivery"
    dlq = "push-dlq"
    t = g.topic("retry")
    grp = g.group("retry")
    dlq_t = g.dlq_topic("retry")
    got = Deliveries()
    # The DLQ reader subscribes first (its topic exists: grpc.sh created it).
    dlq_reader = g.Receiver(s, g.group("dlq"), dlq_t, "*", g.INVISIBLE, True, 32)
    c = None
    p = None
    try:
        def listener(v):
            got.add(v)
            s.diag(redo, "consumed " + g.describe(v))
            return ConsumeResult.FAILURE if v.tag == "fail" else ConsumeResult.SUCCESS

        c = push_consumer(s, grp, t, listener)
        p = g.producer(s, t)
        fail, ok = {}, {}
        for i in range(FAIL_COUNT + OK_COUNT):
            f = i % 3 == 0 and len(fail) < FAIL_COUNT
            m = send(p, t, redo, "fail" if f else "ok", i)
            (fail if f else ok)[m.key] = m
        sent_at = now_ms()
        all_sent = dict(fail)
        all_sent.update(ok)

        # Redelivery: every failing message reaches attempt MAX_ATTEMPTS.
        def reached():
            snap = got.snapshot()
            return all(len(snap.get(k, [])) >= MAX_ATTEMPTS for k in fail) and all(k in snap for k in ok)

        try:
            g.await_cond(s, "each failing message delivered %d times" % MAX_ATTEMPTS, g.timeout_ms(90), reached,
                         lambda: "deliveries " + summary(got, all_sent))
        except g.Failure as f:
            s.problem(redo, str(f))

        # Dead-letter queue: the failing messages, each once, as they were sent.
        in_dlq = {}
        deadline = now_ms() + g.timeout_ms(60)
        quiet_until = FAR
        while True:
            now = now_ms()
            if quiet_until == FAR and all(k in in_dlq for k in fail):
                quiet_until = now + 3000
            if now >= min(deadline, quiet_until):
                break
            a = dlq_reader.poll(min(deadline, quiet_until))
            if a is None:
                continue
            k = g.key_of(a.view)
            if k in ok:
                s.problem(dlq, "message %s, consumed with SUCCESS, is in %s" % (k, dlq_t))
                continue
            m = fail.get(k)
            if m is None:
                s.problem(dlq, "unexpected message in %s: %s" % (dlq_t, g.describe(a.view)))
                continue
            if k in in_dlq:
                s.problem(dlq, "%s is in %s twice" % (k, dlq_t))
                continue
            in_dlq[k] = a
            ds = got.snapshot().get(k, [])
            last = ds[-1].at if ds else sent_at
            s.diag(dlq, "%s read from %s %d ms after its last delivery (%s, properties %s)"
                   % (k, dlq_t, a.at - last, g.describe(a.view), dict(a.view.properties)))
            d = m.differences(a.view, dlq_t, True)
            if d:
                s.problem(dlq, "%s in %s differs from what was sent: %s" % (k, dlq_t, "; ".join(d)))
        for k in fail:
            if k not in in_dlq:
                s.problem(dlq, "%s (FAILURE on every attempt) did not reach %s within %d s of its last attempt; %s"
                          % (k, dlq_t, g.timeout_ms(60) // 1000, dlq_reader.errors()))

        # Redelivery verdict, now that the DLQ wait gave extra attempts a chance to show up.
        snap = got.snapshot()
        for k, m in all_sent.items():
            ds = snap.get(k)
            if not ds:
                s.problem(redo, "%s (%s) was never consumed" % (m.key, m.tag))
                continue
            d = m.differences(ds[0].view, t, True)
            if d:
                s.problem(redo, m.key + " arrived different from what was sent: " + "; ".join(d))
            att = attempts(ds)
            if k in fail:
                want = list(range(1, MAX_ATTEMPTS + 1))
                if att != want:
                    s.problem(redo, "%s (FAILURE every time) was delivered with attempts %s, expected %s "
                              "(retryMaxTimes %d)" % (m.key, att, want, RETRY_MAX_TIMES))
                gaps = [ds[i].at - ds[i - 1].at for i in range(1, len(ds))]
                s.diag(redo, "%s: attempts %s, ms between deliveries %s" % (m.key, att, gaps))
            elif att != [1]:
                s.problem(redo, "%s (SUCCESS) was delivered with attempts %s, expected [1]" % (m.key, att))
        s.report(redo)
        s.report(dlq)
    finally:
        g.close_quietly(s, p)
        g.close_quietly(s, c)
        dlq_reader.close()


if __name__ == "__main__":
    g.run_all(
        g.Scenario("push-success", ["push-success"], success),
        g.Scenario("push-retry-dlq", ["push-failure-redelivery", "push-dlq"], retry_dlq),
    )
