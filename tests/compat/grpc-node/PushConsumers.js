'use strict';
// PushConsumer checks, as grpc-java's PushConsumers.java:
//   push-success             50 messages, the listener returns SUCCESS: each consumed once (attempt 1), identical
//   push-failure-redelivery  a group with retryMaxTimes 2 (mqadmin updateSubGroup -r 2): the listener returns
//                            FAILURE for 3 of 8 messages every time; those are redelivered with deliveryAttempt
//                            1, 2, 3 (never more); the other 5 are consumed once
//   push-dlq                 the 3 then land in %DLQ%group (read by a SimpleConsumer of another group) with their
//                            body, tag, keys, user properties and message id; none of the 5 do
// The Node SDK has no consumption thread count: its PushConsumer calls the (asynchronous) listener for every message
// of a received batch at once.
const G = require('./g');

const SUCCESS_COUNT = 50;
const FAIL_COUNT = 3;
const OK_COUNT = 5;
const RETRY_MAX_TIMES = 2; // grpc-java's Resources.RETRY_MAX_TIMES: the retry group's updateSubGroup -r
const MAX_ATTEMPTS = RETRY_MAX_TIMES + 1;
const { ConsumeResult } = G.sdk;
const SUB_ALL = G.sdk.FilterExpression.SUB_ALL;

function record(got, v) {
  const k = G.keyOf(v) || '?';
  if (!got.has(k)) got.set(k, []);
  // The SDK may change the view's deliveryAttempt later (FIFO local retries): keep the value seen now.
  got.get(k).push({ view: v, attempt: v.deliveryAttempt, at: Date.now() });
}

async function success(s) {
  const check = 'push-success';
  const topic = G.topic('push');
  const got = new Map();
  const c = await G.pushConsumer(s, null, G.group('push'), topic, v => {
    record(got, v);
    return ConsumeResult.SUCCESS;
  });
  let p;
  try {
    p = await G.producer(s, topic);
    const sent = new Map();
    for (let i = 0; i < SUCCESS_COUNT; i++) {
      const m = new G.Sent(check, i, i % 2 === 0 ? 'TagA' : 'TagB');
      await G.send(p, topic, m);
      sent.set(m.key, m);
    }
    try {
      await G.waitFor(s, 'every message consumed', G.timeoutMs(60), () => [ ...sent.keys() ].every(k => got.has(k)),
        () => `${got.size} of ${sent.size} consumed`);
    } catch (e) {
      if (!(e instanceof G.Failure)) throw e;
      s.problem(check, e.message);
    }
    for (const [ k, ds ] of got) {
      const m = sent.get(k);
      if (!m) {
        s.problem(check, `consumed a message that was not sent: ${G.describe(ds[0].view)}`);
        continue;
      }
      if (ds.length > 1) {
        s.problem(check, `${m.key} was consumed ${ds.length} times although the listener returned SUCCESS `
          + `(attempts ${JSON.stringify(ds.map(d => d.attempt))})`);
      }
      const d = m.differences(ds[0].view, topic, true);
      if (d.length > 0) s.problem(check, `${m.key} arrived different from what was sent: ${d.join('; ')}`);
      if (ds[0].attempt !== 1) s.problem(check, `${m.key} arrived with deliveryAttempt ${ds[0].attempt}`);
    }
    s.report(check);
  } finally {
    await G.closeQuietly(s, p);
    await G.closeQuietly(s, c, 'PushConsumer');
  }
}

function summary(got, all) {
  return [ ...all.values() ].map(m => `${m.tag}#${m.index}=${(got.get(m.key) || []).length}`).join(' ');
}

async function retryDlq(s) {
  const redo = 'push-failure-redelivery';
  const dlq = 'push-dlq';
  const topic = G.topic('retry');
  const group = G.group('retry');
  const dlqTopic = G.dlqTopic('retry');
  const got = new Map();
  // The DLQ reader subscribes first (its topic exists: grpc.sh created it).
  const dlqReader = await G.Receiver.start(s, G.group('dlq'), dlqTopic, SUB_ALL, G.INVISIBLE, true, 32);
  let c;
  let p;
  try {
    c = await G.pushConsumer(s, null, group, topic, v => {
      record(got, v);
      s.diag(redo, `consumed ${G.describe(v)}`);
      return G.opt(v.tag) === 'fail' ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
    });
    p = await G.producer(s, topic);
    const fail = new Map();
    const ok = new Map();
    for (let i = 0; i < FAIL_COUNT + OK_COUNT; i++) {
      const f = i % 3 === 0 && fail.size < FAIL_COUNT;
      const m = new G.Sent(redo, i, f ? 'fail' : 'ok');
      await G.send(p, topic, m);
      (f ? fail : ok).set(m.key, m);
    }
    const sentAt = Date.now();
    const all = new Map([ ...fail, ...ok ]);

    // Redelivery: every failing message reaches attempt MAX_ATTEMPTS.
    try {
      await G.waitFor(s, `each failing message delivered ${MAX_ATTEMPTS} times`, G.timeoutMs(90),
        () => [ ...fail.keys() ].every(k => (got.get(k) || []).length >= MAX_ATTEMPTS)
          && [ ...ok.keys() ].every(k => got.has(k)),
        () => `deliveries ${summary(got, all)}`);
    } catch (e) {
      if (!(e instanceof G.Failure)) throw e;
      s.problem(redo, e.message);
    }

    // Dead-letter queue: the failing messages, each once, as they were sent.
    const inDlq = new Map();
    const deadline = Date.now() + G.timeoutMs(60);
    let quietUntil = Infinity;
    for (;;) {
      const now = Date.now();
      if (quietUntil === Infinity && [ ...fail.keys() ].every(k => inDlq.has(k))) quietUntil = now + 3000;
      if (now >= Math.min(deadline, quietUntil)) break;
      const a = await dlqReader.poll(Math.min(deadline, quietUntil));
      if (a === null) continue;
      const k = G.keyOf(a.view);
      if (ok.has(k)) {
        s.problem(dlq, `message ${k}, consumed with SUCCESS, is in ${dlqTopic}`);
        continue;
      }
      const m = fail.get(k);
      if (!m) {
        s.problem(dlq, `unexpected message in ${dlqTopic}: ${G.describe(a.view)}`);
        continue;
      }
      if (inDlq.has(k)) {
        s.problem(dlq, `${k} is in ${dlqTopic} twice`);
        continue;
      }
      inDlq.set(k, a);
      const ds = got.get(k);
      const last = !ds || ds.length === 0 ? sentAt : ds[ds.length - 1].at;
      s.diag(dlq, `${k} read from ${dlqTopic} ${a.at - last} ms after its last delivery (${G.describe(a.view)}, `
        + `properties ${JSON.stringify(Object.fromEntries(a.view.properties))})`);
      const d = m.differences(a.view, dlqTopic, true);
      if (d.length > 0) s.problem(dlq, `${k} in ${dlqTopic} differs from what was sent: ${d.join('; ')}`);
    }
    for (const k of fail.keys()) {
      if (!inDlq.has(k)) {
        s.problem(dlq, `${k} (FAILURE on every attempt) did not reach ${dlqTopic} within ${G.timeoutMs(60) / 1000} s `
          + `of its last attempt; ${dlqReader.errors()}`);
      }
    }

    // Redelivery verdict, now that the DLQ wait gave extra attempts a chance to show up.
    for (const m of all.values()) {
      const ds = got.get(m.key);
      if (!ds || ds.length === 0) {
        s.problem(redo, `${m.key} (${m.tag}) was never consumed`);
        continue;
      }
      const d = m.differences(ds[0].view, topic, true);
      if (d.length > 0) s.problem(redo, `${m.key} arrived different from what was sent: ${d.join('; ')}`);
      const att = ds.map(x => x.attempt);
      if (fail.has(m.key)) {
        const want = Array.from({ length: MAX_ATTEMPTS }, (_, i) => i + 1);
        if (JSON.stringify(att) !== JSON.stringify(want)) {
          s.problem(redo, `${m.key} (FAILURE every time) was delivered with attempts ${JSON.stringify(att)}, `
            + `expected ${JSON.stringify(want)} (retryMaxTimes ${RETRY_MAX_TIMES})`);
        }
        const gaps = [];
        for (let i = 1; i < ds.length; i++) gaps.push(ds[i].at - ds[i - 1].at);
        s.diag(redo, `${m.key}: attempts ${JSON.stringify(att)}, ms between deliveries ${JSON.stringify(gaps)}`);
      } else if (JSON.stringify(att) !== '[1]') {
        s.problem(redo, `${m.key} (SUCCESS) was delivered with attempts ${JSON.stringify(att)}, expected [1]`);
      }
    }
    s.report(redo);
    s.report(dlq);
  } finally {
    await G.closeQuietly(s, p);
    await G.closeQuietly(s, c, 'PushConsumer');
    await dlqReader.close();
  }
}

G.runAll(
  new G.Scenario('push-success', [ 'push-success' ], success),
  new G.Scenario('push-retry-dlq', [ 'push-failure-redelivery', 'push-dlq' ], retryDlq),
);
