"""SimpleConsumer checks (receive with a 10 s invisible duration, the minimum; see grpc-java's SimpleConsumers.java):
  simple-ack       a received and acked message does not come back within 2 x the invisible duration of the ack
  simple-redeliver a received message that is not acked comes back after the invisible duration (never before the
                   receive call + 10 s, at most 12 s after that), with deliveryAttempt 2 (1 the first time)
  simple-change-invisible-extend
                   change_invisible_duration(20 s) right after the receive: not redelivered at the old deadline
                   (receive + 10 s) nor before the change + 20 s; redelivered after it (attempt 2) and acked
  simple-change-invisible-ack
                   change_invisible_duration(20 s), then, past the old deadline (receive + 13 s), ack with the handle
                   the change returned (the SDK stores it in the Message): the ack succeeds and the message never
                   comes back (watched until the new deadline + 12 s)
  simple-tag-filter
                   FilterExpression "TagA||TagB" gets exactly the TagA and TagB messages (a second group with "TagC"
                   gets exactly the TagC ones); watched for 6 s after the last expected one
"""
import time

import g
from g import now_ms

INV = g.INVISIBLE * 1000
LATE_MS = 12000  # how late a redelivery may be, after the invisible duration ran out
EXTENDED = 20  # seconds
FAR = 1 << 62


def send(p, t, check, tag, frm, n):
    out = []
    for i in range(frm, frm + n):
        m = g.Sent(check, i, tag)
        m.send_start = now_ms()
        m.message_id = p.send(m.build(t)).message_id
        m.send_end = now_ms()
        out.append(m)
    return out


class Track:
    """Per message: its deliveries so far."""

    def __init__(self, sent, check):
        self.sent = sent
        self.check = check
        self.deliveries = []
        self.acked_at = -1
        self.change_start = -1
        self.change_end = -1
        self.done = False


def ack_redeliver(s):
    t = g.topic("simple")
    r = g.Receiver(s, g.group("simple"), t, "*", g.INVISIBLE, False, 16)
    p = None
    try:
        p = g.producer(s, t)
        tracks = {}
        for m in send(p, t, "simple-ack", "ack", 0, 4):
            tracks[m.key] = Track(m, "simple-ack")
        for m in send(p, t, "simple-redeliver", "hold", 4, 4):
            tracks[m.key] = Track(m, "simple-redeliver")
        sent_at = now_ms()
        # Ends when every "hold" message came back and was acked, and 2 x INV passed since the last ack of an "ack"
        # message; or at the deadline.
        deadline = sent_at + g.timeout_ms(20) + INV + LATE_MS
        while True:
            now = now_ms()
            last_ack = 0
            all_acked = True
            all_redelivered = True
            for tr in tracks.values():
                if tr.check == "simple-ack":
                    all_acked = all_acked and tr.acked_at >= 0
                    last_ack = max(last_ack, tr.acked_at)
                else:
                    all_redelivered = all_redelivered and tr.done
            # The watch over the acked messages ends 2 x INV after the last ack.
            watch_end = last_ack + 2 * INV if all_acked else FAR
            if all_acked and all_redelivered and now >= watch_end:
                break
            if now >= max(deadline, watch_end if all_acked else 0):
                break
            a = r.poll(watch_end if all_acked and all_redelivered else max(deadline, watch_end if all_acked else 0))
            if a is None:
                continue
            tr = tracks.get(g.key_of(a.view))
            if tr is None:
                s.problem("simple-ack", "received a message that was not sent: " + g.describe(a.view))
                continue
            tr.deliveries.append(a)
            n = len(tr.deliveries)
            if n == 1:
                d = tr.sent.differences(a.view, t, True)
                if d:
                    s.problem(tr.check, tr.sent.key + " arrived different from what was sent: " + "; ".join(d))
                if a.view.delivery_attempt != 1:
                    s.problem(tr.check, "%s first arrived with deliveryAttempt %s"
                              % (tr.sent.key, a.view.delivery_attempt))
                if tr.check == "simple-ack":
                    try:
                        r.consumer.ack(a.view)
                        tr.acked_at = now_ms()
                    except Exception as e:
                        tr.acked_at = now_ms()
                        s.problem("simple-ack", "ack of %s failed: %r" % (tr.sent.key, e))
                continue
            if tr.check == "simple-ack":
                s.problem("simple-ack", "acked message %s came back %d ms after the ack (%s)"
                          % (tr.sent.key, a.at - tr.acked_at, g.describe(a.view)))
                continue
            first = tr.deliveries[0]
            if n == 2:
                early = first.receive_start + INV
                late = first.at + INV + LATE_MS
                s.diag("simple-redeliver", "%s redelivered %d ms after the first delivery, attempt %s"
                       % (tr.sent.key, a.at - first.at, a.view.delivery_attempt))
                if a.at < early:
                    s.problem("simple-redeliver", "%s came back %d ms after the receive call, before its invisible "
                              "duration (%d ms) ran out" % (tr.sent.key, a.at - first.receive_start, INV))
                elif a.at > late:
                    s.problem("simple-redeliver", "%s came back %d ms after the first delivery (allowed: %d ms)"
                              % (tr.sent.key, a.at - first.at, INV + LATE_MS))
                if a.view.delivery_attempt != 2:
                    s.problem("simple-redeliver", "%s came back with deliveryAttempt %s, expected 2"
                              % (tr.sent.key, a.view.delivery_attempt))
                if a.view.message_id != first.view.message_id:
                    s.problem("simple-redeliver", "%s came back with message id %s, first delivered as %s"
                              % (tr.sent.key, a.view.message_id, first.view.message_id))
                try:
                    r.consumer.ack(a.view)
                except Exception as e:
                    s.problem("simple-redeliver", "ack of the redelivered %s failed: %r" % (tr.sent.key, e))
                tr.done = True
                continue
            s.problem("simple-redeliver", "%s came back a third time, after its redelivery was acked (%s)"
                      % (tr.sent.key, g.describe(a.view)))
        for tr in tracks.values():
            if not tr.deliveries:
                s.problem(tr.check, "%s was never received; %s" % (tr.sent.key, r.errors()))
            elif tr.check == "simple-redeliver" and not tr.done:
                s.problem(tr.check, "%s (not acked) did not come back within %d ms of its first delivery"
                          % (tr.sent.key, INV + LATE_MS))
        s.report("simple-ack")
        s.report("simple-redeliver")
    finally:
        g.close_quietly(s, p)
        r.close()


def change_invisible(s):
    ext = "simple-change-invisible-extend"
    ack = "simple-change-invisible-ack"
    t = g.topic("inv")
    r = g.Receiver(s, g.group("inv"), t, "*", g.INVISIBLE, False, 16)
    p = None
    try:
        p = g.producer(s, t)
        tracks = {}
        for m in send(p, t, ext, "extend", 0, 2):
            tracks[m.key] = Track(m, ext)
        for m in send(p, t, ack, "ackafter", 2, 2):
            tracks[m.key] = Track(m, ack)
        sent_at = now_ms()
        deadline = sent_at + g.timeout_ms(20) + EXTENDED * 1000 + LATE_MS
        while True:
            now = now_ms()
            # Next time-driven action: an "ackafter" message to ack past its old deadline, or the end of the watch
            # over its new one.
            nxt = deadline
            finished = True
            for tr in tracks.values():
                if not tr.deliveries:
                    finished = False
                    continue
                first = tr.deliveries[0]
                if tr.check == ack:
                    ack_at = first.receive_start + INV + 3000
                    if tr.acked_at < 0 and tr.change_end >= 0:
                        if now >= ack_at:
                            try:
                                # The SDK replaced the Message's receipt handle with the one the change returned.
                                r.consumer.ack(first.view)
                                s.diag(ack, "%s acked %d ms after its receive, with the handle from "
                                       "change_invisible_duration" % (tr.sent.key, now_ms() - first.at))
                            except Exception as e:
                                s.problem(ack, "ack of %s past its old deadline, with the handle "
                                          "change_invisible_duration returned, failed: %r" % (tr.sent.key, e))
                            tr.acked_at = now_ms()
                        else:
                            nxt = min(nxt, ack_at)
                    watch_end = tr.change_end + EXTENDED * 1000 + LATE_MS
                    if tr.acked_at < 0 or now < watch_end:
                        finished = False
                        if tr.acked_at >= 0:
                            nxt = min(nxt, watch_end)
                elif not tr.done:
                    finished = False
            if finished or now >= deadline:
                break
            a = r.poll(nxt)
            if a is None:
                continue
            tr = tracks.get(g.key_of(a.view))
            if tr is None:
                s.problem(ext, "received a message that was not sent: " + g.describe(a.view))
                continue
            tr.deliveries.append(a)
            n = len(tr.deliveries)
            if n == 1:
                d = tr.sent.differences(a.view, t, True)
                if d:
                    s.problem(tr.check, tr.sent.key + " arrived different from what was sent: " + "; ".join(d))
                if a.view.delivery_attempt != 1:
                    s.problem(tr.check, "%s first arrived with deliveryAttempt %s"
                              % (tr.sent.key, a.view.delivery_attempt))
                tr.change_start = now_ms()
                try:
                    r.consumer.change_invisible_duration(a.view, EXTENDED)
                except Exception as e:
                    s.problem(tr.check, "change_invisible_duration(%d s) of %s failed: %r"
                              % (EXTENDED, tr.sent.key, e))
                tr.change_end = now_ms()
                s.diag(tr.check, "%s: change_invisible_duration %d ms after the receive, took %d ms"
                       % (tr.sent.key, tr.change_start - a.at, tr.change_end - tr.change_start))
                continue
            first = tr.deliveries[0]
            if tr.check == ack:
                s.problem(ack, "%s came back %d ms after its first delivery%s (%s)"
                          % (tr.sent.key, a.at - first.at,
                             ", %d ms after the ack" % (a.at - tr.acked_at) if tr.acked_at >= 0 else ", before the ack",
                             g.describe(a.view)))
                continue
            if n == 2:
                old_deadline = first.receive_start + INV
                new_deadline = tr.change_start + EXTENDED * 1000
                s.diag(ext, "%s redelivered %d ms after the first delivery (%d ms after the change), attempt %s"
                       % (tr.sent.key, a.at - first.at, a.at - tr.change_start, a.view.delivery_attempt))
                if a.at < new_deadline:
                    s.problem(ext, "%s came back %d ms after change_invisible_duration(%d s)%s"
                              % (tr.sent.key, a.at - tr.change_start, EXTENDED,
                                 ", i.e. around its original deadline" if a.at < old_deadline + LATE_MS else ""))
                elif a.at > tr.change_end + EXTENDED * 1000 + LATE_MS:
                    s.problem(ext, "%s came back %d ms after the change (allowed: %d ms)"
                              % (tr.sent.key, a.at - tr.change_end, EXTENDED * 1000 + LATE_MS))
                if a.view.delivery_attempt != 2:
                    s.problem(ext, "%s came back with deliveryAttempt %s, expected 2"
                              % (tr.sent.key, a.view.delivery_attempt))
                try:
                    r.consumer.ack(a.view)
                except Exception as e:
                    s.problem(ext, "ack of the redelivered %s failed: %r" % (tr.sent.key, e))
                tr.done = True
                continue
            s.problem(ext, "%s came back again after its redelivery was acked (%s)"
                      % (tr.sent.key, g.describe(a.view)))
        for tr in tracks.values():
            if not tr.deliveries:
                s.problem(tr.check, "%s was never received; %s" % (tr.sent.key, r.errors()))
            elif tr.check == ext and not tr.done:
                s.problem(ext, "%s did not come back within %d ms of change_invisible_duration(%d s)"
                          % (tr.sent.key, EXTENDED * 1000 + LATE_MS, EXTENDED))
            elif tr.check == ack and tr.acked_at < 0:
                s.problem(ack, "%s was not acked (the scenario ran out of time)" % tr.sent.key)
        s.report(ext)
        s.report(ack)
    finally:
        g.close_quietly(s, p)
        r.close()


def tag_filter(s):
    check = "simple-tag-filter"
    t = g.topic("tag")
    ab = g.Receiver(s, g.group("tag"), t, "TagA||TagB", g.INVISIBLE, True, 32)
    c = None
    p = None
    try:
        c = g.Receiver(s, g.group("tagc"), t, "TagC", g.INVISIBLE, True, 32)
        p = g.producer(s, t)
        want_ab, want_c = {}, {}
        tags = ["TagC", "TagA", "TagB"]
        for i in range(18):
            tag = tags[i % 3]
            m = send(p, t, check, tag, i, 1)[0]
            (want_c if tag == "TagC" else want_ab)[m.key] = m
        got_ab, got_c = {}, {}
        deadline = now_ms() + g.timeout_ms(30)
        quiet_until = FAR
        while True:
            now = now_ms()
            if quiet_until == FAR and len(got_ab) == len(want_ab) and len(got_c) == len(want_c):
                quiet_until = now + 6000
            if now >= quiet_until or now >= deadline:
                break
            until = min(quiet_until, deadline)
            anything = False
            for r, want, got, flt in ((ab, want_ab, got_ab, "TagA||TagB"), (c, want_c, got_c, "TagC")):
                a = r.poll_now()
                if a is None:
                    continue
                anything = True
                k = g.key_of(a.view)
                if k not in want:
                    s.problem(check, "filter \"%s\" received a message with tag %s (%s)"
                              % (flt, a.view.tag, g.describe(a.view)))
                    continue
                if k in got:
                    s.problem(check, "filter \"%s\" received %s twice" % (flt, k))
                    continue
                got[k] = a
                d = want[k].differences(a.view, t, True)
                if d:
                    s.problem(check, k + " arrived different from what was sent: " + "; ".join(d))
            if not anything:
                time.sleep(max(0.001, min(50, until - now_ms()) / 1000.0))
        if len(got_ab) < len(want_ab):
            s.problem(check, "filter \"TagA||TagB\" received %d of the %d TagA/TagB messages within %d s; %s"
                      % (len(got_ab), len(want_ab), g.timeout_ms(30) // 1000, ab.errors()))
        if len(got_c) < len(want_c):
            s.problem(check, "filter \"TagC\" received %d of the %d TagC messages within %d s; %s"
                      % (len(got_c), len(want_c), g.timeout_ms(30) // 1000, c.errors()))
        s.report(check)
    finally:
        g.close_quietly(s, p)
        ab.close()
        if c is not None:
            c.close()


if __name__ == "__main__":
    g.run_all(
        g.Scenario("ack-redeliver", ["simple-ack", "simple-redeliver"], ack_redeliver),
        g.Scenario("change-invisible", ["simple-change-invisible-extend", "simple-change-invisible-ack"],
                   change_invisible),
        g.Scenario("tag-filter", ["simple-tag-filter"], tag_filter),
    )
