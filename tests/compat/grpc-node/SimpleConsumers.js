'use strict';
// SimpleConsumer checks (receive with a 10 s invisible duration, the minimum), as grpc-java's SimpleConsumers.java:
//   simple-ack       a received and acked message does not come back within 2 x the invisible duration of the ack
//   simple-redeliver a received message that is not acked comes back after the invisible duration (never before
//                    the receive call + 10 s, at most 12 s after that), with deliveryAttempt 2 (1 the first time)
//   simple-change-invisible-extend
//                    changeInvisibleDuration(20 s) right after the receive: not redelivered at the old deadline
//                    (receive + 10 s) nor before the change + 20 s; redelivered after it (attempt 2) and acked
//   simple-change-invisible-ack
//                    changeInvisibleDuration(20 s), then, past the old deadline (receive + 13 s), ack with the
//                    handle the change returned (the SDK stores it in the MessageView): the ack succeeds and the
//                    message never comes back (watched until the new deadline + 12 s)
//   simple-tag-filter
//                    FilterExpression "TagA||TagB" gets exactly the TagA and TagB messages (a second group with
//                    "TagC" gets exactly the TagC ones); watched for 6 s after the last expected one
// The two pairs of checks share a topic and a consumer each; the scenarios run concurrently.
const G = require('./g');

const INV = G.INVISIBLE;
/** How late a redelivery may be, after the invisible duration ran out. */
const LATE_MS = 12000;
const EXTENDED = 20000;
const SUB_ALL = G.sdk.FilterExpression.SUB_ALL;

async function sendN(p, topic, check, tag, from, n) {
  const out = [];
  for (let i = from; i < from + n; i++) {
    const m = new G.Sent(check, i, tag);
    await G.send(p, topic, m);
    out.push(m);
  }
  return out;
}

/** Per message: its deliveries so far. */
function track(sent, check) {
  return { sent, check, deliveries: [], ackedAt: -1, changeStart: -1, changeEnd: -1, done: false };
}

async function ackRedeliver(s) {
  const topic = G.topic('simple');
  const r = await G.Receiver.start(s, G.group('simple'), topic, SUB_ALL, INV, false, 16);
  let p;
  try {
    p = await G.producer(s, topic);
    const tracks = new Map();
    for (const m of await sendN(p, topic, 'simple-ack', 'ack', 0, 4)) tracks.set(m.key, track(m, 'simple-ack'));
    for (const m of await sendN(p, topic, 'simple-redeliver', 'hold', 4, 4)) {
      tracks.set(m.key, track(m, 'simple-redeliver'));
    }
    const sentAt = Date.now();
    // Ends when every "hold" message came back and was acked, and 2 x INV passed since the last ack of an "ack"
    // message; or at the deadline.
    const deadline = sentAt + G.timeoutMs(20) + INV + LATE_MS;
    for (;;) {
      const now = Date.now();
      let lastAck = 0;
      let allAcked = true;
      let allRedelivered = true;
      for (const t of tracks.values()) {
        if (t.check === 'simple-ack') {
          allAcked = allAcked && t.ackedAt >= 0;
          lastAck = Math.max(lastAck, t.ackedAt);
        } else {
          allRedelivered = allRedelivered && t.done;
        }
      }
      // The watch over the acked messages ends 2 x INV after the last ack.
      const watchEnd = allAcked ? lastAck + 2 * INV : Infinity;
      if (allAcked && allRedelivered && now >= watchEnd) break;
      if (now >= Math.max(deadline, allAcked ? watchEnd : 0)) break;
      const a = await r.poll(allAcked && allRedelivered ? watchEnd : Math.max(deadline, allAcked ? watchEnd : 0));
      if (a === null) continue;
      const t = tracks.get(G.keyOf(a.view));
      if (!t) {
        s.problem('simple-ack', `received a message that was not sent: ${G.describe(a.view)}`);
        continue;
      }
      t.deliveries.push(a);
      const n = t.deliveries.length;
      if (n === 1) {
        const d = t.sent.differences(a.view, topic, true);
        if (d.length > 0) s.problem(t.check, `${t.sent.key} arrived different from what was sent: ${d.join('; ')}`);
        if (a.view.deliveryAttempt !== 1) {
          s.problem(t.check, `${t.sent.key} first arrived with deliveryAttempt ${a.view.deliveryAttempt}`);
        }
        if (t.check === 'simple-ack') {
          try {
            await r.consumer.ack(a.view);
            t.ackedAt = Date.now();
          } catch (e) {
            t.ackedAt = Date.now();
            s.problem('simple-ack', `ack of ${t.sent.key} failed: ${G.errString(e)}`);
          }
        }
        continue;
      }
      if (t.check === 'simple-ack') {
        s.problem('simple-ack', `acked message ${t.sent.key} came back ${a.at - t.ackedAt} ms after the ack `
          + `(${G.describe(a.view)})`);
        continue;
      }
      const first = t.deliveries[0];
      if (n === 2) {
        const early = first.receiveStart + INV;
        const late = first.at + INV + LATE_MS;
        s.diag('simple-redeliver', `${t.sent.key} redelivered ${a.at - first.at} ms after the first delivery, `
          + `attempt ${a.view.deliveryAttempt}`);
        if (a.at < early) {
          s.problem('simple-redeliver', `${t.sent.key} came back ${a.at - first.receiveStart} ms after the receive `
            + `call, before its invisible duration (${INV} ms) ran out`);
        } else if (a.at > late) {
          s.problem('simple-redeliver', `${t.sent.key} came back ${a.at - first.at} ms after the first delivery `
            + `(allowed: ${INV + LATE_MS} ms)`);
        }
        if (a.view.deliveryAttempt !== 2) {
          s.problem('simple-redeliver', `${t.sent.key} came back with deliveryAttempt ${a.view.deliveryAttempt}, `
            + 'expected 2');
        }
        if (a.view.messageId !== first.view.messageId) {
          s.problem('simple-redeliver', `${t.sent.key} came back with message id ${a.view.messageId}, first `
            + `delivered as ${first.view.messageId}`);
        }
        try {
          await r.consumer.ack(a.view);
        } catch (e) {
          s.problem('simple-redeliver', `ack of the redelivered ${t.sent.key} failed: ${G.errString(e)}`);
        }
        t.done = true;
        continue;
      }
      s.problem('simple-redeliver', `${t.sent.key} came back a third time, after its redelivery was acked `
        + `(${G.describe(a.view)})`);
    }
    for (const t of tracks.values()) {
      if (t.deliveries.length === 0) {
        s.problem(t.check, `${t.sent.key} was never received; ${r.errors()}`);
      } else if (t.check === 'simple-redeliver' && !t.done) {
        s.problem(t.check, `${t.sent.key} (not acked) did not come back within ${INV + LATE_MS} ms of its first `
          + 'delivery');
      }
    }
    s.report('simple-ack');
    s.report('simple-redeliver');
  } finally {
    await G.closeQuietly(s, p);
    await r.close();
  }
}

async function changeInvisible(s) {
  const ext = 'simple-change-invisible-extend';
  const ack = 'simple-change-invisible-ack';
  const topic = G.topic('inv');
  const r = await G.Receiver.start(s, G.group('inv'), topic, SUB_ALL, INV, false, 16);
  let p;
  try {
    p = await G.producer(s, topic);
    const tracks = new Map();
    for (const m of await sendN(p, topic, ext, 'extend', 0, 2)) tracks.set(m.key, track(m, ext));
    for (const m of await sendN(p, topic, ack, 'ackafter', 2, 2)) tracks.set(m.key, track(m, ack));
    const sentAt = Date.now();
    const deadline = sentAt + G.timeoutMs(20) + EXTENDED + LATE_MS;
    for (;;) {
      const now = Date.now();
      // Next time-driven action: an "ackafter" message to ack past its old deadline, or the end of the watch over
      // its new one.
      let next = deadline;
      let finished = true;
      for (const t of tracks.values()) {
        if (t.deliveries.length === 0) {
          finished = false;
          continue;
        }
        const first = t.deliveries[0];
        if (t.check === ack) {
          const ackAt = first.receiveStart + INV + 3000;
          if (t.ackedAt < 0 && t.changeEnd >= 0) {
            if (now >= ackAt) {
              try {
                await r.consumer.ack(first.view);
                s.diag(ack, `${t.sent.key} acked ${Date.now() - first.at} ms after its receive, with the handle `
                  + 'from changeInvisibleDuration');
              } catch (e) {
                s.problem(ack, `ack of ${t.sent.key} past its old deadline, with the handle `
                  + `changeInvisibleDuration returned, failed: ${G.errString(e)}`);
              }
              t.ackedAt = Date.now();
            } else {
              next = Math.min(next, ackAt);
            }
          }
          const watchEnd = t.changeEnd + EXTENDED + LATE_MS;
          if (t.ackedAt < 0 || now < watchEnd) {
            finished = false;
            if (t.ackedAt >= 0) next = Math.min(next, watchEnd);
          }
        } else if (!t.done) {
          finished = false;
        }
      }
      if (finished || now >= deadline) break;
      const a = await r.poll(next);
      if (a === null) continue;
      const t = tracks.get(G.keyOf(a.view));
      if (!t) {
        s.problem(ext, `received a message that was not sent: ${G.describe(a.view)}`);
        continue;
      }
      t.deliveries.push(a);
      const n = t.deliveries.length;
      if (n === 1) {
        const d = t.sent.differences(a.view, topic, true);
        if (d.length > 0) s.problem(t.check, `${t.sent.key} arrived different from what was sent: ${d.join('; ')}`);
        if (a.view.deliveryAttempt !== 1) {
          s.problem(t.check, `${t.sent.key} first arrived with deliveryAttempt ${a.view.deliveryAttempt}`);
        }
        t.changeStart = Date.now();
        try {
          await r.consumer.changeInvisibleDuration(a.view, EXTENDED);
        } catch (e) {
          s.problem(t.check, `changeInvisibleDuration(${EXTENDED / 1000} s) of ${t.sent.key} failed: `
            + G.errString(e));
        }
        t.changeEnd = Date.now();
        s.diag(t.check, `${t.sent.key}: changeInvisibleDuration ${t.changeStart - a.at} ms after the receive, took `
          + `${t.changeEnd - t.changeStart} ms`);
        if (!a.view.receiptHandle) {
          s.problem(t.check, `changeInvisibleDuration of ${t.sent.key} left the message without a receipt handle `
            + '(the response carried none)');
        }
        continue;
      }
      const first = t.deliveries[0];
      if (t.check === ack) {
        s.problem(ack, `${t.sent.key} came back ${a.at - first.at} ms after its first delivery`
          + (t.ackedAt >= 0 ? `, ${a.at - t.ackedAt} ms after the ack` : ', before the ack')
          + ` (${G.describe(a.view)})`);
        continue;
      }
      if (n === 2) {
        const oldDeadline = first.receiveStart + INV;
        const newDeadline = t.changeStart + EXTENDED;
        s.diag(ext, `${t.sent.key} redelivered ${a.at - first.at} ms after the first delivery (${a.at - t.changeStart}`
          + ` ms after the change), attempt ${a.view.deliveryAttempt}`);
        if (a.at < newDeadline) {
          s.problem(ext, `${t.sent.key} came back ${a.at - t.changeStart} ms after changeInvisibleDuration(`
            + `${EXTENDED / 1000} s)` + (a.at < oldDeadline + LATE_MS ? ', i.e. around its original deadline' : ''));
        } else if (a.at > t.changeEnd + EXTENDED + LATE_MS) {
          s.problem(ext, `${t.sent.key} came back ${a.at - t.changeEnd} ms after the change (allowed: `
            + `${EXTENDED + LATE_MS} ms)`);
        }
        if (a.view.deliveryAttempt !== 2) {
          s.problem(ext, `${t.sent.key} came back with deliveryAttempt ${a.view.deliveryAttempt}, expected 2`);
        }
        try {
          await r.consumer.ack(a.view);
        } catch (e) {
          s.problem(ext, `ack of the redelivered ${t.sent.key} failed: ${G.errString(e)}`);
        }
        t.done = true;
        continue;
      }
      s.problem(ext, `${t.sent.key} came back again after its redelivery was acked (${G.describe(a.view)})`);
    }
    for (const t of tracks.values()) {
      if (t.deliveries.length === 0) {
        s.problem(t.check, `${t.sent.key} was never received; ${r.errors()}`);
      } else if (t.check === ext && !t.done) {
        s.problem(ext, `${t.sent.key} did not come back within ${EXTENDED + LATE_MS} ms of `
          + `changeInvisibleDuration(${EXTENDED / 1000} s)`);
      } else if (t.check === ack && t.ackedAt < 0) {
        s.problem(ack, `${t.sent.key} was not acked (the scenario ran out of time)`);
      }
    }
    s.report(ext);
    s.report(ack);
  } finally {
    await G.closeQuietly(s, p);
    await r.close();
  }
}

async function tagFilter(s) {
  const check = 'simple-tag-filter';
  const topic = G.topic('tag');
  const { FilterExpression } = G.sdk;
  const ab = await G.Receiver.start(s, G.group('tag'), topic, new FilterExpression('TagA||TagB'), INV, true, 32);
  let c;
  let p;
  try {
    c = await G.Receiver.start(s, G.group('tagc'), topic, new FilterExpression('TagC'), INV, true, 32);
    p = await G.producer(s, topic);
    const wantAb = new Map();
    const wantC = new Map();
    const tags = [ 'TagC', 'TagA', 'TagB' ];
    for (let i = 0; i < 18; i++) {
      const tag = tags[i % 3];
      const m = (await sendN(p, topic, check, tag, i, 1))[0];
      (tag === 'TagC' ? wantC : wantAb).set(m.key, m);
    }
    const gotAb = new Map();
    const gotC = new Map();
    const deadline = Date.now() + G.timeoutMs(30);
    let quietUntil = Infinity;
    for (;;) {
      const now = Date.now();
      if (quietUntil === Infinity && gotAb.size === wantAb.size && gotC.size === wantC.size) quietUntil = now + 6000;
      if (now >= quietUntil || now >= deadline) break;
      const until = Math.min(quietUntil, deadline);
      let any = false;
      for (let which = 0; which < 2; which++) {
        const r = which === 0 ? ab : c;
        const want = which === 0 ? wantAb : wantC;
        const got = which === 0 ? gotAb : gotC;
        const filter = which === 0 ? 'TagA||TagB' : 'TagC';
        const a = r.queue.tryTake();
        if (a === undefined) continue;
        any = true;
        const k = G.keyOf(a.view);
        if (!want.has(k)) {
          s.problem(check, `filter "${filter}" received a message with tag ${G.opt(a.view.tag)} (${G.describe(a.view)})`);
          continue;
        }
        if (got.has(k)) {
          s.problem(check, `filter "${filter}" received ${k} twice`);
          continue;
        }
        got.set(k, a);
        const d = want.get(k).differences(a.view, topic, true);
        if (d.length > 0) s.problem(check, `${k} arrived different from what was sent: ${d.join('; ')}`);
      }
      if (!any) await G.sleep(Math.max(1, Math.min(50, until - Date.now())));
    }
    if (gotAb.size < wantAb.size) {
      s.problem(check, `filter "TagA||TagB" received ${gotAb.size} of the ${wantAb.size} TagA/TagB messages within `
        + `${G.timeoutMs(30) / 1000} s; ${ab.errors()}`);
    }
    if (gotC.size < wantC.size) {
      s.problem(check, `filter "TagC" received ${gotC.size} of the ${wantC.size} TagC messages within `
        + `${G.timeoutMs(30) / 1000} s; ${c.errors()}`);
    }
    s.report(check);
  } finally {
    await G.closeQuietly(s, p);
    await ab.close();
    if (c) await c.close();
  }
}

G.runAll(
  new G.Scenario('ack-redeliver', [ 'simple-ack', 'simple-redeliver' ], ackRedeliver),
  new G.Scenario('change-invisible', [ 'simple-change-invisible-extend', 'simple-change-invisible-ack' ],
    changeInvisible),
  new G.Scenario('tag-filter', [ 'simple-tag-filter' ], tagFilter),
);
