'use strict';
// Producer-side checks, each received by a SimpleConsumer that acks what it gets (as grpc-java's Producers.java):
//   send-normal      200 sends (each awaited before the next); every message received once with identical body, tag,
//                    keys, user properties and message id (the send receipt's)
//   send-fifo        4 message groups x 50 messages to a FIFO topic, consumed by a FIFO (consumeMessageOrderly)
//                    group: each group arrives complete and in send order, with its message group
//   send-delay       deliveryTimestamp = T + 3 s (DELAY topic): received not before T + 3 s, not after T + 6 s
//   tx-commit        transactional messages committed at once are delivered (once; again only if the broker
//                    checked back the committed transaction, which Apache does when its commit is processed late)
//   tx-rollback      rolled-back ones never are (watched until the check-backs are over, plus 6 s)
//   tx-check-commit  ones left open are resolved by the TransactionChecker's check-back (COMMIT; the checker sees
//                    the message's id and content) and then delivered
const G = require('./g');

const NORMAL_COUNT = 200;
const FIFO_GROUPS = 4;
const FIFO_PER_GROUP = 50;
const DELAY_COUNT = 5;
const DELAY_MS = 3000;
const DELAY_LATE_MS = 3000;
const TX_EACH = 3;
const SUB_ALL = G.sdk.FilterExpression.SUB_ALL;

async function normal(s) {
  const check = 'send-normal';
  const topic = G.topic('normal');
  const r = await G.Receiver.start(s, G.group('normal'), topic, SUB_ALL, G.INVISIBLE, true, 32);
  let p;
  try {
    p = await G.producer(s, topic);
    const sent = [];
    const tags = [ 'TagA', 'TagB', null ];
    for (let i = 0; i < NORMAL_COUNT; i++) {
      const m = new G.Sent(check, i, tags[i % tags.length]);
      await G.send(p, topic, m);
      sent.push(m);
    }
    s.diag(check, `sent ${sent.length} messages in ${sent[sent.length - 1].sendEnd - sent[0].sendStart} ms`);
    await G.receiveAll(s, check, r, topic, G.byKey(sent), G.timeoutMs(60));
    s.report(check);
  } finally {
    await G.closeQuietly(s, p);
    await r.close();
  }
}

function abbreviate(l) {
  return l.length <= 20 ? JSON.stringify(l) : JSON.stringify(l.slice(0, 20)).replace(/]$/, ',...]');
}

async function fifo(s) {
  const check = 'send-fifo';
  const topic = G.topic('fifo');
  const r = await G.Receiver.start(s, G.group('fifo'), topic, SUB_ALL, G.INVISIBLE, true, 32);
  let p;
  try {
    p = await G.producer(s, topic);
    const byKey = new Map();
    // Round-robin over the groups: the groups' messages interleave in the queues they share.
    for (let i = 0; i < FIFO_PER_GROUP; i++) {
      for (let g = 0; g < FIFO_GROUPS; g++) {
        const m = new G.Sent(check, g * FIFO_PER_GROUP + i, null);
        m.messageGroup = `mg_${g}`;
        m.props.set('p_seq', String(i));
        await G.send(p, topic, m);
        byKey.set(m.key, m);
      }
    }
    const first = await G.receiveAll(s, check, r, topic, byKey, G.timeoutMs(60));
    // Per message group, the arrival order must be the send order.
    const order = new Map();
    for (const a of first.values()) {
      const m = byKey.get(G.keyOf(a.view));
      if (!order.has(m.messageGroup)) order.set(m.messageGroup, []);
      order.get(m.messageGroup).push(parseInt(m.props.get('p_seq'), 10));
    }
    for (const [ mg, seqs ] of order) {
      for (let i = 0; i < seqs.length; i++) {
        if (seqs[i] !== i) {
          s.problem(check, `message group ${mg} arrived out of order: position ${i} holds seq ${seqs[i]} `
            + `(order ${abbreviate(seqs)})`);
          break;
        }
      }
    }
    s.report(check);
  } finally {
    await G.closeQuietly(s, p);
    await r.close();
  }
}

async function delay(s) {
  const check = 'send-delay';
  const topic = G.topic('delay');
  const r = await G.Receiver.start(s, G.group('delay'), topic, SUB_ALL, G.INVISIBLE, true, 32);
  let p;
  try {
    p = await G.producer(s, topic);
    const sent = [];
    for (let i = 0; i < DELAY_COUNT; i++) {
      const m = new G.Sent(check, i, 'TagD');
      m.deliveryTimestamp = Date.now() + DELAY_MS;
      await G.send(p, topic, m);
      sent.push(m);
    }
    const first = await G.receiveAll(s, check, r, topic, G.byKey(sent), DELAY_MS + G.timeoutMs(30));
    const measured = [];
    for (const m of sent) {
      const a = first.get(m.key);
      if (!a) continue;
      const rel = a.at - m.deliveryTimestamp;
      measured.push(`${rel} ms`);
      if (a.at < m.deliveryTimestamp) {
        s.problem(check, `${m.key} (deliveryTimestamp T+${DELAY_MS} ms) arrived ${-rel} ms early, at T+`
          + `${a.at - (m.deliveryTimestamp - DELAY_MS)} ms`);
      } else if (rel > DELAY_LATE_MS) {
        s.problem(check, `${m.key} (deliveryTimestamp T+${DELAY_MS} ms) arrived ${rel} ms after it was due `
          + `(allowed: ${DELAY_LATE_MS} ms)`);
      }
    }
    s.diag(check, `arrival relative to the delivery timestamp: [${measured.join(', ')}]`);
    s.report(check);
  } finally {
    await G.closeQuietly(s, p);
    await r.close();
  }
}

async function transactions(s) {
  const topic = G.topic('tx');
  const { TransactionResolution } = G;
  const r = await G.Receiver.start(s, G.group('tx'), topic, SUB_ALL, G.INVISIBLE, true, 32);
  const commit = new Map();
  const rollback = new Map();
  const unknown = new Map();
  const byId = new Map();
  const kindById = new Map();
  // Check-backs: message id -> times the checker was asked.
  const checks = new Map();
  const checkerProblems = [];
  const checker = {
    async check(v) {
      const now = Date.now();
      const id = v.messageId;
      if (!checks.has(id)) checks.set(id, []);
      checks.get(id).push(now);
      const kind = kindById.get(id);
      s.diag('tx-check-commit', `check-back for ${G.describe(v)} (${kind})`);
      if (kind === undefined) {
        checkerProblems.push(`check-back for a message this producer did not send: ${G.describe(v)}`);
        return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED; // the SDK's "unknown": no answer
      }
      const m = byId.get(id);
      const d = m.differences(v, topic, true);
      if (d.length > 0) {
        checkerProblems.push(`the checker's view of ${m.key} differs from what was sent: ${d.join('; ')}`);
      }
      return kind === 'rollback' ? TransactionResolution.ROLLBACK : TransactionResolution.COMMIT;
    },
  };
  let p;
  try {
    p = await G.producer(s, topic, checker);
    for (let i = 0; i < TX_EACH * 3; i++) {
      const kind = [ 'commit', 'rollback', 'unknown' ][i % 3];
      const check = kind === 'commit' ? 'tx-commit' : kind === 'rollback' ? 'tx-rollback' : 'tx-check-commit';
      const m = new G.Sent(check, i, 'TagT');
      const tx = p.beginTransaction();
      await G.send(p, topic, m, tx);
      byId.set(m.messageId, m);
      kindById.set(m.messageId, kind);
      if (kind === 'commit') {
        await tx.commit();
        commit.set(m.key, m);
      } else if (kind === 'rollback') {
        await tx.rollback();
        rollback.set(m.key, m);
      } else {
        unknown.set(m.key, m); // neither committed nor rolled back: left to the check-back
      }
    }
    const sentAt = Date.now();
    s.diag(`sent ${commit.size} committed, ${rollback.size} rolled back, ${unknown.size} open transactional messages`);

    const got = new Map();
    // Wait for the committed and the checked-back messages (the check-back takes the broker's transaction timeout
    // and check interval), then watch a further 6 s for anything rolled back.
    const deadline = sentAt + G.timeoutMs(90);
    let quietUntil = Infinity;
    for (;;) {
      const now = Date.now();
      const complete = [ ...commit.keys() ].every(k => got.has(k)) && [ ...unknown.keys() ].every(k => got.has(k));
      if (complete && quietUntil === Infinity) quietUntil = now + 6000;
      if (now >= quietUntil || now >= deadline) break;
      const a = await r.poll(Math.min(deadline, quietUntil));
      if (a === null) continue;
      const k = G.keyOf(a.view);
      const check = commit.has(k) ? 'tx-commit' : rollback.has(k) ? 'tx-rollback'
        : unknown.has(k) ? 'tx-check-commit' : null;
      if (check === null) {
        s.problem('tx-commit', `received a message that was not sent: ${G.describe(a.view)}`);
        continue;
      }
      if (check === 'tx-rollback') {
        s.problem(check, `rolled-back message ${k} was delivered ${a.at - sentAt} ms after the sends `
          + `(${G.describe(a.view)})`);
        continue;
      }
      if (got.has(k)) {
        const dup = commit.has(k) ? commit.get(k) : unknown.get(k);
        if (check === 'tx-commit' && checks.has(dup.messageId)) {
          // The broker checked back a transaction the producer had already committed (its commit was not processed
          // yet) and the checker said COMMIT again: a duplicate at-least-once allows.
          s.diag(check, `note: ${k} delivered again after a check-back of its committed transaction `
            + `(${G.describe(a.view)})`);
        } else {
          s.problem(check, `${k} was delivered twice (${G.describe(a.view)})`);
        }
        continue;
      }
      got.set(k, a);
      const m = commit.has(k) ? commit.get(k) : unknown.get(k);
      const d = m.differences(a.view, topic, true);
      if (d.length > 0) s.problem(check, `${k} arrived different from what was sent: ${d.join('; ')}`);
    }
    for (const m of commit.values()) {
      if (!got.has(m.key)) {
        s.problem('tx-commit', `committed message ${m.key} was not delivered within ${G.timeoutMs(90) / 1000} s`);
      }
    }
    for (const m of unknown.values()) {
      const c = checks.get(m.messageId);
      const a = got.get(m.key);
      if (!c) {
        s.problem('tx-check-commit', `no check-back for the open transaction of ${m.key} within `
          + `${G.timeoutMs(90) / 1000} s`);
      } else if (!a) {
        s.problem('tx-check-commit', `${m.key} was checked back (COMMIT) ${c[0] - m.sendEnd} ms after its send `
          + 'but not delivered');
      } else {
        s.diag('tx-check-commit', `${m.key}: first check-back ${c[0] - m.sendEnd} ms after the send (${c.length} `
          + `check-backs), delivered ${a.at - c[0]} ms after it`);
        if (a.at < c[0]) s.problem('tx-check-commit', `${m.key} was delivered before its check-back`);
      }
    }
    for (const cp of checkerProblems) s.problem('tx-check-commit', cp);
    for (const [ id ] of checks) {
      const kind = kindById.get(id);
      if (kind !== undefined && kind !== 'unknown') {
        s.diag(`note: the broker asked about a resolved (${kind}) transaction: ${id}`);
      }
    }
    s.report('tx-commit');
    s.report('tx-rollback');
    s.report('tx-check-commit');
  } finally {
    await G.closeQuietly(s, p);
    await r.close();
  }
}

G.runAll(
  new G.Scenario('send-normal', [ 'send-normal' ], normal),
  new G.Scenario('send-fifo', [ 'send-fifo' ], fifo),
  new G.Scenario('send-delay', [ 'send-delay' ], delay),
  new G.Scenario('transactions', [ 'tx-commit', 'tx-rollback', 'tx-check-commit' ], transactions),
);
