"""push-fifo-order: FIFO order per message group under concurrency (see grpc-java's FifoPush.java). 8 message
groups x 25 messages go to a FIFO topic from two producers at once (each sends its 4 groups round-robin,
synchronously); two FIFO PushConsumers (a consumeMessageOrderly group; 4 consumption threads each; the Python SDK's
FIFO consumption always runs the message groups of a received batch in parallel, one task per group - it has no
accelerator switch) consume them, taking 0-3 ms per message; the listeners hold the first messages until all are
sent, so every group has a backlog when consumption starts. Every message must be consumed; per message group, a
message is only consumed after the previous one of its group finished (never two of a group at once, across both
consumers), first deliveries come in send order without gaps, and a message consumed again must carry a higher
deliveryAttempt.
"""
import random
import threading
import time

import g
from g import now_ms
from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

GROUPS = 8
PER_GROUP = 25


class Event:
    def __init__(self, consumer, seq, attempt, ticket):
        self.consumer = consumer
        self.seq = seq
        self.attempt = attempt
        self.ticket = ticket


class Listener(MessageListener):
    def __init__(self, fn):
        self.fn = fn

    def consume(self, message):
        return self.fn(message)


def order(events):
    parts = ["%d%s" % (e.seq, "(a%d)" % e.attempt if (e.attempt or 0) > 1 else "") for e in events[:30]]
    return "[" + " ".join(parts) + (" ...]" if len(events) > 30 else "]")


def run(s):
    check = "push-fifo-order"
    t = g.topic("fifopush")
    grp = g.group("fifopush")
    lock = threading.Lock()
    tickets = [0]
    in_flight = {}
    events = {}
    by_key = {}
    per_consumer = {}
    content_problems = {}
    gate = threading.Event()
    consumers = []

    def make_listener(name):
        def listener(v):
            # Held until every message is sent, so that each group has a backlog to consume.
            if not gate.wait(g.timeout_ms(60) / 1000.0):
                s.problem(check, "the sends did not finish within 60 s")
            mg = v.message_group or "<none>"
            with lock:
                n = in_flight.get(mg, 0) + 1
                in_flight[mg] = n
                tickets[0] += 1
                ticket = tickets[0]
            try:
                k = g.key_of(v)
                m = by_key.get(k) if k is not None else None
                if n > 1:
                    s.problem(check, "two messages of group %s consumed at once (%s got %s while another was in "
                              "progress)" % (mg, name, g.describe(v)))
                if m is None:
                    s.problem(check, "consumed a message that was not sent: " + g.describe(v))
                    return ConsumeResult.SUCCESS
                d = m.differences(v, t, True)
                with lock:
                    if d:
                        content_problems[k] = d
                    per_consumer[name] += 1
                    events.setdefault(mg, []).append(Event(name, int(m.props["p_seq"]), v.delivery_attempt, ticket))
                time.sleep(random.randint(0, 3) / 1000.0)  # simulated work
                return ConsumeResult.SUCCESS
            finally:
                with lock:
                    in_flight[mg] -= 1
        return listener

    try:
        for name in ("c1", "c2"):
            per_consumer[name] = 0
            consumers.append(g.build(s, "FIFO PushConsumer " + name, lambda name=name: PushConsumer(
                g.config(), grp, Listener(make_listener(name)), {t: FilterExpression()},
                consumption_thread_count=4, tls_enable=g.tls_enable())))
        for c in consumers:
            if not c.fifo:
                s.problem(check, "the endpoint's settings did not make %s a FIFO consumer (group %s is "
                          "consumeMessageOrderly)" % (c, grp))

        # Two producers, each with its own 4 groups, sending concurrently.
        all_sent = []
        for gi in range(GROUPS):
            for i in range(PER_GROUP):
                m = g.Sent(check, gi * PER_GROUP + i, "TagF")
                m.message_group = "mg_%d" % gi
                m.props["p_seq"] = str(i)
                by_key[m.key] = m
                all_sent.append(m)
        send_errors = []
        producers = [g.producer(s, t) for _ in range(2)]

        def sender(half, p):
            try:
                for i in range(PER_GROUP):
                    for gi in range(half * GROUPS // 2, (half + 1) * GROUPS // 2):
                        m = by_key["k_%s_%s_%d" % (check, g.run_id(), gi * PER_GROUP + i)]
                        m.send_start = now_ms()
                        m.message_id = p.send(m.build(t)).message_id
                        m.send_end = now_ms()
            except Exception as e:
                send_errors.append(repr(e))
            finally:
                g.close_quietly(s, p)

        senders = [threading.Thread(target=sender, args=(i, producers[i]), name="producer-%d" % i)
                   for i in range(2)]
        t0 = now_ms()
        for th in senders:
            th.start()
        for th in senders:
            th.join()
        gate.set()
        if send_errors:
            raise g.Failure("send failed: " + send_errors[0])
        s.diag(check, "sent %d messages in %d ms" % (len(all_sent), now_ms() - t0))

        def consumed_all():
            with lock:
                return sum(len({e.seq for e in lst}) for lst in events.values()) == len(all_sent)

        try:
            g.await_cond(s, "every message consumed", g.timeout_ms(60), consumed_all,
                         lambda: "consumed per consumer %s" % per_consumer)
        except g.Failure as f:
            s.problem(check, str(f))
        s.diag(check, "messages consumed per consumer: %s" % per_consumer)

        with lock:
            cp = dict(content_problems)
            snap = {mg: sorted(lst, key=lambda e: e.ticket) for mg, lst in events.items()}
        for k, d in cp.items():
            s.problem(check, k + " arrived different from what was sent: " + "; ".join(d))
        redeliveries = 0
        for gi in range(GROUPS):
            mg = "mg_%d" % gi
            lst = snap.get(mg, [])
            mx = -1
            last_attempt = {}
            for ev in lst:
                if ev.seq == mx + 1:
                    mx = ev.seq
                elif ev.seq > mx + 1:
                    s.problem(check, "group %s: seq %d consumed (by %s) before seq %d (order %s)"
                              % (mg, ev.seq, ev.consumer, mx + 1, order(lst)))
                    break
                else:
                    redeliveries += 1
                    prev = last_attempt.get(ev.seq)
                    if prev is not None and (ev.attempt or 0) <= prev:
                        s.problem(check, "group %s: seq %d consumed again with deliveryAttempt %s (previously %s)"
                                  % (mg, ev.seq, ev.attempt, prev))
                last_attempt[ev.seq] = ev.attempt or 0
            if mx != PER_GROUP - 1:
                s.problem(check, "group %s: only seq 0..%d consumed in order (order %s)" % (mg, mx, order(lst)))
        s.diag(check, "redeliveries: %d" % redeliveries)
        s.report(check)
    finally:
        gate.set()
        for c in consumers:
            g.close_quietly(s, c)


if __name__ == "__main__":
    g.run_all(g.Scenario("push-fifo-order", ["push-fifo-order"], run))
