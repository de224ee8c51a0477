'use strict';
// push-fifo-order (as grpc-java's FifoPush.java): FIFO order per message group under concurrency. 8 message groups x
// 25 messages go to a FIFO topic from two producers at once (each sends its 4 groups round-robin, one send awaited
// before the next); two FIFO PushConsumers (a consumeMessageOrderly group, FIFO consume accelerator on, so the
// message groups of a batch are consumed in parallel; the Node SDK has no consumption thread count) consume them,
// taking 0-3 ms per message; the listeners hold the first messages until all are sent, so every group has a backlog
// when consumption starts. Every message must be consumed; per message group, a message is only consumed after the
// previous one of its group finished (never two of a group at once, across both consumers), first deliveries come
// in send order without gaps, and a message consumed again must carry a higher deliveryAttempt.
const G = require('./g');

const GROUPS = 8;
const PER_GROUP = 25;
const { ConsumeResult } = G.sdk;

function order(l) {
  const parts = l.slice(0, 30).map(e => `${e.seq}${e.attempt > 1 ? `(a${e.attempt})` : ''}`);
  return `[${parts.join(' ')}${l.length > 30 ? ' ...' : ''}]`;
}

async function run(s) {
  const check = 'push-fifo-order';
  const topic = G.topic('fifopush');
  const group = G.group('fifopush');
  let tickets = 0;
  const inFlight = new Map();
  const events = new Map();
  const byKey = new Map();
  const perConsumer = {};
  const contentProblems = new Map();

  let openGate;
  const gate = new Promise(resolve => { openGate = resolve; });
  let gateOpen = false;
  const consumers = [];
  const producers = [];
  try {
    for (const name of [ 'c1', 'c2' ]) {
      perConsumer[name] = 0;
      consumers.push(await G.pushConsumer(s, `FIFO PushConsumer ${name}`, group, topic, async v => {
        // Held until every message is sent, so that each group has a backlog to consume.
        if (!gateOpen) {
          const opened = await Promise.race([ gate.then(() => true), G.sleep(G.timeoutMs(60)).then(() => false) ]);
          if (!opened) s.problem(check, 'the sends did not finish within 60 s');
        }
        const mg = G.opt(v.messageGroup) || '<none>';
        const attempt = v.deliveryAttempt;
        const concurrent = (inFlight.get(mg) || 0) + 1;
        inFlight.set(mg, concurrent);
        const ticket = ++tickets;
        try {
          const k = G.keyOf(v);
          const m = k === null ? undefined : byKey.get(k);
          if (concurrent > 1) {
            s.problem(check, `two messages of group ${mg} consumed at once (${name} got ${G.describe(v)} while another `
              + 'was in progress)');
          }
          if (!m) {
            s.problem(check, `consumed a message that was not sent: ${G.describe(v)}`);
            return ConsumeResult.SUCCESS;
          }
          const d = m.differences(v, topic, true);
          if (d.length > 0) contentProblems.set(k, d);
          perConsumer[name]++;
          if (!events.has(mg)) events.set(mg, []);
          events.get(mg).push({ consumer: name, seq: parseInt(m.props.get('p_seq'), 10), attempt, ticket });
          await G.sleep(Math.floor(Math.random() * 4)); // simulated work
          return ConsumeResult.SUCCESS;
        } finally {
          inFlight.set(mg, inFlight.get(mg) - 1);
        }
      }, { enableFifoConsumeAccelerator: true }));
    }

    // Two producers, each with its own 4 groups, sending concurrently.
    const all = [];
    for (let g = 0; g < GROUPS; g++) {
      for (let i = 0; i < PER_GROUP; i++) {
        const m = new G.Sent(check, g * PER_GROUP + i, 'TagF');
        m.messageGroup = `mg_${g}`;
        m.props.set('p_seq', String(i));
        byKey.set(m.key, m);
        all.push(m);
      }
    }
    for (let pi = 0; pi < 2; pi++) producers.push(await G.producer(s, topic));
    const sendErrors = [];
    const t0 = Date.now();
    await Promise.all(producers.map(async (p, half) => {
      try {
        for (let i = 0; i < PER_GROUP; i++) {
          for (let g = half * GROUPS / 2; g < (half + 1) * GROUPS / 2; g++) {
            const m = byKey.get(`k_${check}_${G.runId()}_${g * PER_GROUP + i}`);
            await G.send(p, topic, m);
          }
        }
      } catch (e) {
        sendErrors.push(G.errString(e));
      }
    }));
    gateOpen = true;
    openGate();
    if (sendErrors.length > 0) throw new G.Failure(`send failed: ${sendErrors[0]}`);
    s.diag(check, `sent ${all.length} messages in ${Date.now() - t0} ms`);

    try {
      await G.waitFor(s, 'every message consumed', G.timeoutMs(60), () => {
        let firsts = 0;
        for (const l of events.values()) firsts += new Set(l.map(e => e.seq)).size;
        return firsts === all.length;
      }, () => `consumed per consumer ${JSON.stringify(perConsumer)}`);
    } catch (e) {
      if (!(e instanceof G.Failure)) throw e;
      s.problem(check, e.message);
    }
    s.diag(check, `messages consumed per consumer: ${JSON.stringify(perConsumer)}`);

    for (const [ k, d ] of contentProblems) s.problem(check, `${k} arrived different from what was sent: ${d.join('; ')}`);
    let redeliveries = 0;
    for (let g = 0; g < GROUPS; g++) {
      const mg = `mg_${g}`;
      const l = [ ...(events.get(mg) || []) ].sort((a, b) => a.ticket - b.ticket);
      let max = -1;
      const lastAttempt = new Map();
      for (const ev of l) {
        if (ev.seq === max + 1) {
          max = ev.seq;
        } else if (ev.seq > max + 1) {
          s.problem(check, `group ${mg}: seq ${ev.seq} consumed (by ${ev.consumer}) before seq ${max + 1} `
            + `(order ${order(l)})`);
          break;
        } else {
          redeliveries++;
          const prev = lastAttempt.get(ev.seq);
          if (prev !== undefined && ev.attempt <= prev) {
            s.problem(check, `group ${mg}: seq ${ev.seq} consumed again with deliveryAttempt ${ev.attempt} `
              + `(previously ${prev})`);
          }
        }
        lastAttempt.set(ev.seq, ev.attempt);
      }
      if (max !== PER_GROUP - 1) {
        s.problem(check, `group ${mg}: only seq 0..${max} consumed in order (order ${order(l)})`);
      }
    }
    s.diag(check, `redeliveries: ${redeliveries}`);
    s.report(check);
  } finally {
    gateOpen = true;
    openGate();
    for (const p of producers) await G.closeQuietly(s, p);
    await Promise.all(consumers.map(c => G.closeQuietly(s, c, 'FIFO PushConsumer')));
  }
}

G.runAll(new G.Scenario('push-fifo-order', [ 'push-fifo-order' ], run));
