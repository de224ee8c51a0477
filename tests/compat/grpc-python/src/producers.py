"""Producer-side checks, each received by a SimpleConsumer that acks what it gets (see grpc-java's Producers.java):
  send-normal      200 sync sends; every message received once with identical body, tag, keys, user properties
                   and message id (the send receipt's)
  send-fifo        4 message groups x 50 messages to a FIFO topic, consumed by a FIFO (consumeMessageOrderly)
                   group: each group arrives complete and in send order, with its message group
  send-delay       delivery_timestamp = T + 3 s (DELAY topic; the Python SDK sends whole seconds, so T + 3 s rounded
                   up to the second): received not before it, not more than 3 s after it
  tx-commit        transactional messages committed at once are delivered (once; again only if the broker checked
                   back the committed transaction)
  tx-rollback      rolled-back ones never are (watched until the check-backs are over, plus 6 s)
  tx-check-commit  ones left open are resolved by the TransactionChecker's check-back (COMMIT; the checker sees the
                   message's id and content) and then delivered
"""
import threading

import g
from g import now_ms
from rocketmq import TransactionChecker, TransactionResolution

NORMAL_COUNT = 200
FIFO_GROUPS = 4
FIFO_PER_GROUP = 50
DELAY_COUNT = 5
DELAY_MS = 3000
DELAY_LATE_MS = 3000
TX_EACH = 3


def send(p, t, m, transaction=None):
    m.send_start = now_ms()
    r = p.send(m.build(t), transaction) if transaction is not None else p.send(m.build(t))
    m.send_end = now_ms()
    m.message_id = r.message_id
    return r


def normal(s):
    check = "send-normal"
    t = g.topic("normal")
    r = g.Receiver(s, g.group("normal"), t, "*", g.INVISIBLE, True, 32)
    p = None
    try:
        p = g.producer(s, t)
        sent = []
        tags = ["TagA", "TagB", None]
        for i in range(NORMAL_COUNT):
            m = g.Sent(check, i, tags[i % 3])
            send(p, t, m)
            sent.append(m)
        s.diag(check, "sent %d messages in %d ms" % (len(sent), sent[-1].send_end - sent[0].send_start))
        g.receive_all(s, check, r, t, g.by_key(sent), g.timeout_ms(60))
        s.report(check)
    finally:
        g.close_quietly(s, p)
        r.close()


def abbreviate(seqs):
    return str(seqs) if len(seqs) <= 20 else str(seqs[:20])[:-1] + ", ...]"


def fifo(s):
    check = "send-fifo"
    t = g.topic("fifo")
    r = g.Receiver(s, g.group("fifo"), t, "*", g.INVISIBLE, True, 32)
    p = None
    try:
        p = g.producer(s, t)
        by_key = {}
        # Round-robin over the groups: the groups' messages interleave in the queues they share.
        for i in range(FIFO_PER_GROUP):
            for grp in range(FIFO_GROUPS):
                m = g.Sent(check, grp * FIFO_PER_GROUP + i, None)
                m.message_group = "mg_%d" % grp
                m.props["p_seq"] = str(i)
                send(p, t, m)
                by_key[m.key] = m
        first = g.receive_all(s, check, r, t, by_key, g.timeout_ms(60))
        # Per message group, the arrival order must be the send order (first is in arrival order).
        order = {}
        for k in first:
            m = by_key[k]
            order.setdefault(m.message_group, []).append(int(m.props["p_seq"]))
        for mg, seqs in order.items():
            for i, q in enumerate(seqs):
                if q != i:
                    s.problem(check, "message group %s arrived out of order: position %d holds seq %d (order %s)"
                              % (mg, i, q, abbreviate(seqs)))
                    break
        s.report(check)
    finally:
        g.close_quietly(s, p)
        r.close()


def delay(s):
    check = "send-delay"
    t = g.topic("delay")
    r = g.Receiver(s, g.group("delay"), t, "*", g.INVISIBLE, True, 32)
    p = None
    try:
        p = g.producer(s, t)
        sent = []
        for i in range(DELAY_COUNT):
            m = g.Sent(check, i, "TagD")
            # T + 3 s, rounded up to the whole second the SDK can express.
            m.delivery_timestamp = g.ceil_second(now_ms() + DELAY_MS)
            send(p, t, m)
            sent.append(m)
        first = g.receive_all(s, check, r, t, g.by_key(sent), DELAY_MS + 1000 + g.timeout_ms(30))
        measured = []
        for m in sent:
            a = first.get(m.key)
            if a is None:
                continue
            rel = a.at - m.delivery_timestamp
            measured.append("%d ms" % rel)
            if a.at < m.delivery_timestamp:
                s.problem(check, "%s (deliveryTimestamp %d, %d ms after its send) arrived %d ms early"
                          % (m.key, m.delivery_timestamp, m.delivery_timestamp - m.send_start, -rel))
            elif rel > DELAY_LATE_MS:
                s.problem(check, "%s arrived %d ms after its delivery timestamp (allowed: %d ms)"
                          % (m.key, rel, DELAY_LATE_MS))
        s.diag(check, "arrival relative to the delivery timestamp: %s" % measured)
        s.report(check)
    finally:
        g.close_quietly(s, p)
        r.close()


class Checker(TransactionChecker):
    def __init__(self, s, t):
        self.s = s
        self.t = t
        self.lock = threading.Lock()
        self.checks = {}  # message id -> [ms of each check-back]
        self.by_id = {}
        self.kind_by_id = {}
        self.problems = []

    def check(self, message):
        now = now_ms()
        mid = message.message_id
        with self.lock:
            self.checks.setdefault(mid, []).append(now)
            kind = self.kind_by_id.get(mid)
            m = self.by_id.get(mid)
        self.s.diag("tx-check-commit", "check-back for %s (%s)" % (g.describe(message), kind))
        if kind is None:
            with self.lock:
                self.problems.append("check-back for a message this producer did not send: " + g.describe(message))
            return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
        d = m.differences(message, self.t, True)
        if d:
            with self.lock:
                self.problems.append("the checker's view of %s differs from what was sent: %s"
                                     % (m.key, "; ".join(d)))
        return TransactionResolution.ROLLBACK if kind == "rollback" else TransactionResolution.COMMIT


def transactions(s):
    t = g.topic("tx")
    r = g.Receiver(s, g.group("tx"), t, "*", g.INVISIBLE, True, 32)
    checker = Checker(s, t)
    commit, rollback, unknown = {}, {}, {}
    p = None
    try:
        p = g.build(s, "transactional Producer(%s)" % t,
                    lambda: g.Producer(g.config(), topics=[t], checker=checker, tls_enable=g.tls_enable()))
        open_txs = []
        for i in range(TX_EACH * 3):
            kind = ["commit", "rollback", "unknown"][i % 3]
            check = {"commit": "tx-commit", "rollback": "tx-rollback", "unknown": "tx-check-commit"}[kind]
            m = g.Sent(check, i, "TagT")
            tx = p.begin_transaction()
            send(p, t, m, tx)
            with checker.lock:
                checker.by_id[m.message_id] = m
                checker.kind_by_id[m.message_id] = kind
            if kind == "commit":
                tx.commit()
                commit[m.key] = m
            elif kind == "rollback":
                tx.rollback()
                rollback[m.key] = m
            else:
                open_txs.append(tx)  # neither committed nor rolled back: left to the check-back
                unknown[m.key] = m
        sent_at = now_ms()
        s.diag("sent %d committed, %d rolled back, %d open transactional messages"
               % (len(commit), len(rollback), len(unknown)))

        got = {}
        # Wait for the committed and the checked-back messages (the check-back takes the broker's transaction
        # timeout and check interval), then watch a further 6 s for anything rolled back.
        deadline = sent_at + g.timeout_ms(90)
        quiet_until = None
        while True:
            now = now_ms()
            complete = all(k in got for k in commit) and all(k in got for k in unknown)
            if complete and quiet_until is None:
                quiet_until = now + 6000
            if (quiet_until is not None and now >= quiet_until) or now >= deadline:
                break
            a = r.poll(min(deadline, quiet_until if quiet_until is not None else deadline))
            if a is None:
                continue
            k = g.key_of(a.view)
            check = ("tx-commit" if k in commit else "tx-rollback" if k in rollback
                     else "tx-check-commit" if k in unknown else None)
            if check is None:
                s.problem("tx-commit", "received a message that was not sent: " + g.describe(a.view))
                continue
            if check == "tx-rollback":
                s.problem(check, "rolled-back message %s was delivered %d ms after the sends (%s)"
                          % (k, a.at - sent_at, g.describe(a.view)))
                continue
            m = commit.get(k) or unknown.get(k)
            if k in got:
                with checker.lock:
                    checked = m.message_id in checker.checks
                if check == "tx-commit" and checked:
                    s.diag(check, "note: %s delivered again after a check-back of its committed transaction (%s)"
                           % (k, g.describe(a.view)))
                else:
                    s.problem(check, "%s was delivered twice (%s)" % (k, g.describe(a.view)))
                continue
            got[k] = a
            d = m.differences(a.view, t, True)
            if d:
                s.problem(check, k + " arrived different from what was sent: " + "; ".join(d))
        for m in commit.values():
            if m.key not in got:
                s.problem("tx-commit", "committed message %s was not delivered within %d s"
                          % (m.key, g.timeout_ms(90) // 1000))
        with checker.lock:
            checks = {k: list(v) for k, v in checker.checks.items()}
            checker_problems = list(checker.problems)
        for m in unknown.values():
            c = checks.get(m.message_id)
            a = got.get(m.key)
            if c is None:
                s.problem("tx-check-commit", "no check-back for the open transaction of %s within %d s"
                          % (m.key, g.timeout_ms(90) // 1000))
            elif a is None:
                s.problem("tx-check-commit", "%s was checked back (COMMIT) %d ms after its send but not delivered"
                          % (m.key, c[0] - m.send_end))
            else:
                s.diag("tx-check-commit", "%s: first check-back %d ms after the send (%d check-backs), delivered "
                       "%d ms after it" % (m.key, c[0] - m.send_end, len(c), a.at - c[0]))
                if a.at < c[0]:
                    s.problem("tx-check-commit", m.key + " was delivered before its check-back")
        for cp in checker_problems:
            s.problem("tx-check-commit", cp)
        for mid in checks:
            kind = checker.kind_by_id.get(mid)
            if kind is not None and kind != "unknown":
                s.diag("note: the broker asked about a resolved (%s) transaction: %s" % (kind, mid))
        s.report("tx-commit")
        s.report("tx-rollback")
        s.report("tx-check-commit")
    finally:
        g.close_quietly(s, p)
        r.close()


if __name__ == "__main__":
    g.run_all(
        g.Scenario("send-normal", ["send-normal"], normal),
        g.Scenario("send-fifo", ["send-fifo"], fifo),
        g.Scenario("send-delay", ["send-delay"], delay),
        g.Scenario("transactions", ["tx-commit", "tx-rollback", "tx-check-commit"], transactions),
    )
