'use strict';
// Shared plumbing of the Node.js gRPC checks (the counterpart of grpc-java's G.java): environment, resource names,
// client construction, deadline-based waiting, a background SimpleConsumer receive loop, message content comparison
// and the PASS/FAIL output contract.
//
// Output contract: every check prints exactly one line on stdout, "PASS grpc-node-VERSION/CHECK" or
// "FAIL grpc-node-VERSION/CHECK: reason". Everything else goes to stderr, each line prefixed with "[CHECK] " (or
// "[SCENARIO] ") so grpc.sh can show a failed check's own diagnostics.
//
// The SDK (rocketmq-client-nodejs) is resolved through NODE_PATH (sdk.sh run points it at the installed copy).

const fs = require('node:fs');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');

// GRPC_TLS=true: TLS with any server certificate accepted. The SDK builds its channel credentials with
// ChannelCredentials.createSsl() (certificate verified); grpc-js honours verifyOptions.rejectUnauthorized, so the
// checks add it. This must happen before the SDK creates its first channel.
if (/^true$/i.test((process.env.GRPC_TLS || '').trim())) {
  const createSsl = grpc.ChannelCredentials.createSsl.bind(grpc.ChannelCredentials);
  grpc.ChannelCredentials.createSsl = (rootCerts, privateKey, certChain, verifyOptions) =>
    createSsl(rootCerts, privateKey, certChain, Object.assign({}, verifyOptions, { rejectUnauthorized: false }));
}

const sdk = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

// ---------------------------------------------------------------- environment

function env(name, def) {
  const v = process.env[name];
  return v === undefined || v.trim() === '' ? def : v.trim();
}

function endpoint() {
  const e = env('GRPC_ENDPOINT', null);
  if (!e) throw new Error('GRPC_ENDPOINT (host:port of the gRPC endpoint) is not set');
  return e;
}

function tls() {
  return /^true$/i.test(env('GRPC_TLS', 'false'));
}

/** Shared by grpc.sh (which creates the topics and groups with mqadmin) and the programs. */
function runId() {
  const r = env('GRPC_RUN_ID', null);
  if (!r) throw new Error('GRPC_RUN_ID is not set (grpc.sh sets it; grpc-java\'s Resources prints the names)');
  return r;
}

let VERSION = null;
function clientVersion() {
  if (VERSION === null) {
    try {
      const pj = require.resolve('rocketmq-client-nodejs/package.json');
      VERSION = JSON.parse(fs.readFileSync(pj, 'utf8')).version;
    } catch (e) {
      VERSION = 'unknown';
    }
  }
  return VERSION;
}

function checkName(check) {
  return `grpc-node-${clientVersion()}/${check}`;
}

/** A wait's limit: DEFAULT seconds, scaled by GRPC_TIMEOUT_SCALE (default 1). */
function timeoutMs(defaultSecs) {
  const scale = parseFloat(env('GRPC_TIMEOUT_SCALE', '1'));
  return Math.round(defaultSecs * 1000 * (Number.isFinite(scale) && scale > 0 ? scale : 1));
}

/** The receive invisible duration used throughout (ms); 10 s is the minimum the proxy accepts for receive. */
const INVISIBLE = 10000;
/** SimpleConsumer long-polling duration (ms; the proxy clamps long polling to at least 5 s). */
const AWAIT = 5000;
const REQUEST_TIMEOUT = 10000;

// ---------------------------------------------------------------- SDK logging

// The SDK logs through an ILogger; the checks give every client one that writes to GRPC_LOG_DIR/sdk/ (never to
// stdout). A wrapper without close(): the SDK closes its client's logger on shutdown, and the file is shared.
let sdkLoggerImpl = null;
function sdkLogger() {
  if (sdkLoggerImpl === null) {
    const { Logger, FileTransport } = require('egg-logger');
    const dir = path.join(env('GRPC_LOG_DIR', path.join(require('node:os').tmpdir(), 'grpc-node')), 'sdk');
    fs.mkdirSync(dir, { recursive: true });
    const level = env('GRPC_NODE_SDK_LOG_LEVEL', 'INFO').toUpperCase();
    const logger = new Logger();
    logger.set('file', new FileTransport({ file: path.join(dir, 'rocketmq_client_nodejs.log'), level }));
    sdkLoggerImpl = logger;
  }
  const l = sdkLoggerImpl;
  return {
    info: (...a) => l.info(...a),
    warn: (...a) => l.warn(...a),
    error: (...a) => l.error(...a),
    debug: (...a) => l.debug(...a),
  };
}

/** Options every client shares. */
function baseOptions() {
  return {
    endpoints: endpoint(),
    namespace: '',
    sslEnabled: tls(),
    requestTimeout: REQUEST_TIMEOUT,
    logger: sdkLogger(),
  };
}

// ---------------------------------------------------------------- resources (created by grpc.sh with mqadmin)

function topic(key) {
  return `grpc_${key}_${runId()}`;
}

function group(key) {
  return `grpcg_${key}_${runId()}`;
}

function dlqTopic(groupKey) {
  return `%DLQ%${group(groupKey)}`;
}

// ---------------------------------------------------------------- output

const T0 = Date.now();

function stdout(line) {
  fs.writeSync(1, line + '\n');
}

function stderr(tag, line) {
  const t = ((Date.now() - T0) / 1000).toFixed(3).padStart(7);
  for (const l of String(line).split('\n')) {
    fs.writeSync(2, `[${tag}] ${t} ${l}\n`);
  }
}

function sleep(ms) {
  return new Promise(resolve => setTimeout(resolve, Math.max(0, ms)));
}

/** An error with its chain of causes (the SDK wraps gRPC errors, e.g. a startup failure's route query). */
function errString(e) {
  const parts = [];
  for (let x = e, depth = 0; x !== undefined && x !== null && depth < 5; x = x.cause, depth++) {
    if (!(x instanceof Error)) {
      parts.push(String(x));
      break;
    }
    const code = x.code !== undefined ? ` (code ${x.code})` : '';
    const line = `${x.name}: ${x.message}${code}`;
    if (!parts.some(p => p.includes(x.message))) parts.push(line);
  }
  return parts.join(' / cause: ');
}

// ---------------------------------------------------------------- scenarios and checks

/** A scenario failure with a reason: fails every check of the scenario not yet reported. */
class Failure extends Error {}

/**
 * One scenario: a body that reports one or more checks. Problems are collected per check; a check passes when the
 * body reported it without problems. A check the body did not reach is failed with the body's exception.
 */
class Scenario {
  constructor(name, checks, body) {
    this.name = name;
    this.checks = checks;
    this.body = body;
    this.problems = new Map(checks.map(c => [ c, [] ]));
    this.done = new Set();
    this.passed = new Map();
  }

  diag(checkOrLine, line) {
    if (line === undefined) stderr(this.name, checkOrLine);
    else stderr(checkOrLine, line);
  }

  /** Records a problem for CHECK (it will fail; the first problem is the reason). */
  problem(check, p) {
    const l = this.problems.get(check);
    if (!l) throw new Error(`unknown check ${check}`);
    l.push(p);
    stderr(check, `problem: ${p}`);
  }

  problemCount(check) {
    return this.problems.get(check).length;
  }

  /** Prints CHECK's verdict now (once): PASS when no problem was recorded. */
  report(check) {
    if (this.done.has(check)) return;
    this.done.add(check);
    const l = this.problems.get(check);
    if (l.length === 0) {
      this.passed.set(check, true);
      stdout(`PASS ${checkName(check)}`);
    } else {
      this.passed.set(check, false);
      const more = l.length > 1 ? ` (and ${l.length - 1} more problems, see stderr)` : '';
      stdout(`FAIL ${checkName(check)}: ${l[0]}${more}`);
    }
  }

  /** Fails CHECK now with REASON, unless it was already reported. */
  failNow(check, reason) {
    if (this.done.has(check)) return;
    this.done.add(check);
    this.passed.set(check, false);
    stderr(check, `FAIL: ${reason}`);
    stdout(`FAIL ${checkName(check)}: ${reason}`);
  }

  reported(check) {
    return this.done.has(check);
  }

  allPassed() {
    return this.checks.every(c => this.passed.get(c) === true);
  }
}

/**
 * Runs the scenarios concurrently (each with its own topics, groups and clients), selected by GRPC_CHECKS
 * (space-separated check names; default all), then exits: status 0 when every selected check passed. A scenario
 * still running after GRPC_PROGRAM_SECS (default 170 s) has its unreported checks failed.
 */
async function runAll(...scenarios) {
  const selected = new Set(env('GRPC_CHECKS', '').split(/\s+/).filter(Boolean));
  const run = scenarios.filter(s => selected.size === 0 || s.checks.some(c => selected.has(c)));
  stderr('main', `client rocketmq-client-nodejs ${clientVersion()} (node ${process.version}), endpoint ${endpoint()}, `
    + `tls ${tls()}, run id ${runId()}, scenarios ${run.map(s => s.name).join(' ') || '(none)'}`);
  process.on('unhandledRejection', e => stderr('main', `unhandled rejection: ${e && e.stack ? e.stack : e}`));
  const limit = parseInt(env('GRPC_PROGRAM_SECS', '170'), 10);
  let finished = false;
  const all = Promise.all(run.map(async s => {
    const t0 = Date.now();
    try {
      await s.body(s);
      for (const c of s.checks) {
        if (!s.reported(c)) s.failNow(c, 'the scenario ended without a verdict for this check (test bug)');
      }
    } catch (e) {
      if (e instanceof Failure) {
        for (const c of s.checks) s.failNow(c, e.message);
      } else {
        s.diag(`exception: ${e && e.stack ? e.stack : e}`);
        for (const c of s.checks) s.failNow(c, `unexpected ${errString(e)}`);
      }
    } finally {
      s.diag(`scenario took ${Date.now() - t0} ms`);
    }
  })).then(() => { finished = true; });
  let timer;
  await Promise.race([ all, new Promise(resolve => { timer = setTimeout(resolve, limit * 1000); }) ]);
  clearTimeout(timer);
  let ok = true;
  for (const s of run) {
    if (!finished) {
      for (const c of s.checks) s.failNow(c, `scenario ${s.name} did not finish within ${limit} s`);
    }
    ok = ok && s.allPassed();
  }
  process.exit(ok ? 0 : 1);
}

// ---------------------------------------------------------------- waiting

/** Waits until COND holds or TIMEOUT_MS pass (polls every 50 ms, a progress note on stderr every 10 s). */
async function waitFor(s, what, timeout, cond, progress) {
  const start = Date.now();
  const deadline = start + timeout;
  let nextNote = start + 10000;
  while (!cond()) {
    const now = Date.now();
    if (now >= deadline) {
      throw new Failure(`timed out after ${Math.round(timeout / 1000)} s waiting for ${what}`
        + (progress ? ` (${progress()})` : ''));
    }
    if (now >= nextNote) {
      s.diag(`.. still waiting for ${what}${progress ? ': ' + progress() : ''}`);
      nextNote = now + 10000;
    }
    await sleep(50);
  }
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not complete within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * Creates (FACTORY) and starts a client, retrying for up to 30 s: right after mqadmin created a topic the endpoint
 * may not see its route yet, and the SDK's start-up fails on a topic it cannot route. The SDK's startup() waits
 * without a limit for the endpoint's first Settings on the telemetry stream; each attempt is limited to 15 s.
 */
async function build(s, what, factory) {
  const deadline = Date.now() + timeoutMs(30);
  let last;
  for (let attempt = 1; ; attempt++) {
    const c = factory();
    try {
      await withTimeout(c.startup(), timeoutMs(15), `startup of ${what}`);
      if (attempt > 1) s.diag(`${what} started after ${attempt} attempts`);
      return c;
    } catch (e) {
      last = e;
      s.diag(`${what} did not start (attempt ${attempt}): ${errString(e)}`);
      try {
        await withTimeout(c.shutdown(), 5000, `shutdown of ${what}`);
      } catch (e2) {
        // a client that did not start may not shut down cleanly either
      }
    }
    if (Date.now() >= deadline) {
      throw new Failure(`could not start ${what} within ${Math.round(timeoutMs(30) / 1000)} s: ${errString(last)}`);
    }
    await sleep(1000);
  }
}

/**
 * Shuts a client down (at most 30 s; a PushConsumer's shutdown waits for its in-flight long-polling receive, up to
 * the endpoint's long-polling timeout, and for its cached messages to be consumed).
 */
async function closeQuietly(s, c, what) {
  if (!c) return;
  const t0 = Date.now();
  try {
    await withTimeout(c.shutdown(), 30000, `shutdown of ${what || c.constructor.name}`);
    if (Date.now() - t0 > 5000) s.diag(`close of ${what || c.constructor.name} took ${Date.now() - t0} ms`);
  } catch (e) {
    s.diag(`close of ${what || c.constructor.name} failed: ${errString(e)}`);
  }
}

function producer(s, topicName, checker) {
  const opts = Object.assign(baseOptions(), { topics: [ topicName ] });
  if (checker) opts.checker = checker;
  return build(s, `${checker ? 'transactional ' : ''}Producer(${topicName})`, () => new sdk.Producer(opts));
}

/** A PushConsumer of GROUP on TOPIC (all tags); LISTENER(view) returns a ConsumeResult (or a promise of one). */
function pushConsumer(s, what, groupName, topicName, listener, extra) {
  return build(s, what || `PushConsumer(${groupName} on ${topicName})`, () => new sdk.PushConsumer(Object.assign(
    baseOptions(), {
      consumerGroup: groupName,
      subscriptions: new Map([ [ topicName, sdk.FilterExpression.SUB_ALL ] ]),
      messageListener: { consume: listener },
    }, extra || {})));
}

// ---------------------------------------------------------------- messages

/**
 * RocketMQ-internal message properties that Apache RocketMQ 5.3.3's proxy passes through as user properties (they
 * are not in MessageConst's system-key set it strips): the FIFO sharding key, the transaction id, the broker's
 * check-back counter. An endpoint may or may not show them; any other extra property is a difference.
 */
const INTERNAL_PROPERTIES = new Set([ '__SHARDINGKEY', '__transactionId__', 'TRANSACTION_CHECK_TIMES' ]);

/** The SDK's MessageView gives '' for an absent tag or message group (protobuf default); null here. */
function opt(v) {
  return v === undefined || v === null || v === '' ? null : v;
}

function sortedProps(m) {
  const o = {};
  for (const k of [ ...m.keys() ].sort()) o[k] = m.get(k);
  return o;
}

/** A message this test sent, with what it must look like when received. */
class Sent {
  constructor(check, index, tag) {
    this.check = check;
    this.index = index;
    this.tag = tag === undefined ? null : tag;
    this.key = `k_${check}_${runId()}_${index}`;
    this.keys = [ this.key, `alt_${index}` ];
    // A body with every byte value, of a length that varies with the index (binary-safe transport).
    const len = 64 + (index * 37) % 1500;
    const b = Buffer.alloc(len);
    const head = Buffer.from(this.key + '|', 'utf8');
    for (let i = 0; i < len; i++) {
      b[i] = i < head.length ? head[i] : ((i * 31 + index) & 0xff);
    }
    this.body = b;
    this.props = new Map([
      [ 'p_check', check ],
      [ 'p_index', String(index) ],
      [ 'p_text', `caf\u00e9 \u2713 ${index}` ],
    ]);
    this.messageGroup = null;
    this.deliveryTimestamp = null; // epoch ms
    this.messageId = null;
    this.sendStart = 0;
    this.sendEnd = 0;
  }

  build(topicName) {
    const m = { topic: topicName, body: Buffer.from(this.body), keys: [ ...this.keys ], properties: new Map(this.props) };
    if (this.tag !== null) m.tag = this.tag;
    if (this.messageGroup !== null) m.messageGroup = this.messageGroup;
    if (this.deliveryTimestamp !== null) m.deliveryTimestamp = new Date(this.deliveryTimestamp);
    return m;
  }

  /** Differences between this message and a received view (empty: identical). */
  differences(v, topicName, compareId) {
    const d = [];
    if (v.topic !== topicName) d.push(`topic ${v.topic} != ${topicName}`);
    const got = Buffer.from(v.body);
    if (!got.equals(this.body)) d.push(`body differs (${got.length} bytes received, ${this.body.length} sent)`);
    if (opt(v.tag) !== this.tag) d.push(`tag ${opt(v.tag)} != ${this.tag}`);
    const gk = [ ...new Set(v.keys) ];
    const wk = [ ...new Set(this.keys) ];
    if (gk.length !== wk.length || gk.some((k, i) => k !== wk[i])) {
      d.push(`keys ${JSON.stringify(v.keys)} != ${JSON.stringify(this.keys)}`);
    }
    const gotProps = new Map(v.properties);
    for (const k of INTERNAL_PROPERTIES) gotProps.delete(k);
    if (JSON.stringify(sortedProps(gotProps)) !== JSON.stringify(sortedProps(this.props))) {
      d.push(`user properties ${JSON.stringify(sortedProps(v.properties))} != ${JSON.stringify(sortedProps(this.props))}`);
    }
    if (compareId && this.messageId !== null && this.messageId !== v.messageId) {
      d.push(`message id ${v.messageId} != ${this.messageId} (from the send receipt)`);
    }
    if (this.messageGroup !== null && this.messageGroup !== opt(v.messageGroup)) {
      d.push(`message group ${opt(v.messageGroup)} != ${this.messageGroup}`);
    }
    if (this.deliveryTimestamp !== null) {
      const got2 = v.deliveryTimestamp ? v.deliveryTimestamp.getTime() : null;
      if (got2 !== this.deliveryTimestamp) d.push(`delivery timestamp ${got2} != ${this.deliveryTimestamp}`);
    }
    if (v.corrupted) d.push('the SDK marked it corrupted (body digest mismatch)');
    return d;
  }
}

/** The first key of a received message (our Sent.key), or null. */
function keyOf(v) {
  for (const k of v.keys || []) {
    if (k.startsWith('k_')) return k;
  }
  return null;
}

function describe(v) {
  return `id=${v.messageId} key=${keyOf(v)} tag=${opt(v.tag)} attempt=${v.deliveryAttempt} group=${opt(v.messageGroup)}`;
}

function byKey(list) {
  const m = new Map();
  for (const x of list) m.set(x.key, x);
  return m;
}

async function send(p, topicName, m, tx) {
  m.sendStart = Date.now();
  const r = tx ? await p.send(m.build(topicName), tx) : await p.send(m.build(topicName));
  m.sendEnd = Date.now();
  m.messageId = r.messageId;
  return r;
}

// ---------------------------------------------------------------- SimpleConsumer receive loop

/** An unbounded queue with a deadline-bounded asynchronous take. */
class AsyncQueue {
  constructor() {
    this.items = [];
    this.waiters = [];
  }

  push(x) {
    const w = this.waiters.shift();
    if (w) w(x);
    else this.items.push(x);
  }

  /** Takes the next item now, or undefined. */
  tryTake() {
    return this.items.length > 0 ? this.items.shift() : undefined;
  }

  /** The next item, or null once UNTIL (epoch ms) has passed. */
  poll(until) {
    if (this.items.length > 0) return Promise.resolve(this.items.shift());
    const wait = until - Date.now();
    if (wait <= 0) return Promise.resolve(null);
    return new Promise(resolve => {
      let done = false;
      const waiter = x => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        resolve(x);
      };
      const timer = setTimeout(() => {
        if (done) return;
        done = true;
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        resolve(null);
      }, wait);
      this.waiters.push(waiter);
    });
  }
}

/**
 * A SimpleConsumer with a loop that calls receive() back to back and queues what arrives (optionally acking each
 * message at once). Create with Receiver.start, which builds the consumer and issues its first receive before the
 * scenario sends. Each arrival: { view, at (when receive returned it), receiveStart (when that receive was issued) }.
 */
class Receiver {
  static async start(s, groupName, topicName, filter, invisible, autoAck, batch) {
    const r = new Receiver();
    r.s = s;
    r.what = `SimpleConsumer(${groupName} on ${topicName} ${filter.expression})`;
    r.invisible = invisible;
    r.autoAck = autoAck;
    r.batch = batch;
    r.queue = new AsyncQueue();
    r.all = [];
    r.running = true;
    r.receiveErrors = 0;
    r.ackErrors = 0;
    r.lastError = null;
    r.consumer = await build(s, r.what, () => new sdk.SimpleConsumer(Object.assign(baseOptions(), {
      consumerGroup: groupName,
      subscriptions: new Map([ [ topicName, filter ] ]),
      awaitDuration: AWAIT,
    })));
    r.loopDone = r.loop();
    return r;
  }

  async loop() {
    while (this.running) {
      const t0 = Date.now();
      let got;
      try {
        got = await this.consumer.receive(this.batch, this.invisible);
      } catch (e) {
        if (!this.running) return;
        this.receiveErrors++;
        this.lastError = errString(e);
        this.s.diag(`${this.what}: receive failed: ${errString(e)}`);
        await sleep(200); // back off a failing endpoint instead of spinning
        continue;
      }
      const t = Date.now();
      for (const v of got) {
        if (this.autoAck) {
          try {
            await this.consumer.ack(v);
          } catch (e) {
            this.ackErrors++;
            this.lastError = `ack: ${errString(e)}`;
            this.s.diag(`${this.what}: ack of ${describe(v)} failed: ${errString(e)}`);
          }
        }
        const a = { view: v, at: t, receiveStart: t0 };
        this.all.push(a);
        this.queue.push(a);
      }
    }
  }

  poll(until) {
    return this.queue.poll(until);
  }

  errors() {
    return `receive errors ${this.receiveErrors}, ack errors ${this.ackErrors}`
      + (this.lastError === null ? '' : `, last: ${this.lastError}`);
  }

  async close() {
    this.running = false;
    await closeQuietly(this.s, this.consumer, this.what);
  }
}

function checkArrival(s, check, a, topicName, expect, first) {
  const k = keyOf(a.view);
  const sent = k === null ? undefined : expect.get(k);
  if (!sent) {
    s.problem(check, `received a message that was not sent to this topic: ${describe(a.view)}`);
    return;
  }
  if (first.has(k)) {
    s.problem(check, `received ${k} twice (${describe(a.view)})`);
    return;
  }
  first.set(k, a);
  const d = sent.differences(a.view, topicName, true);
  if (d.length > 0) s.problem(check, `${k} arrived different from what was sent: ${d.join('; ')}`);
  if (a.view.deliveryAttempt !== 1) {
    s.problem(check, `${k} arrived with deliveryAttempt ${a.view.deliveryAttempt}, expected 1`);
  }
}

/**
 * Receives until every message of EXPECT (by key) has arrived once, checking each arrival's content; duplicates
 * and unknown messages are problems of CHECK. Returns the first arrival of each key.
 */
async function receiveAll(s, check, r, topicName, expect, timeout) {
  const first = new Map();
  const deadline = Date.now() + timeout;
  while (first.size < expect.size) {
    const a = await r.poll(deadline);
    if (a === null) {
      const missing = [ ...expect.keys() ].filter(k => !first.has(k));
      s.problem(check, `received ${first.size} of ${expect.size} messages within ${Math.round(timeout / 1000)} s; `
        + `missing e.g. ${JSON.stringify(missing.slice(0, 5))}; ${r.errors()}`);
      return first;
    }
    checkArrival(s, check, a, topicName, expect, first);
  }
  return first;
}

module.exports = {
  sdk, TransactionResolution, env, endpoint, tls, runId, clientVersion, checkName, timeoutMs, INVISIBLE, AWAIT,
  topic, group, dlqTopic, stdout, stderr, sleep, errString, Failure, Scenario, runAll, waitFor, withTimeout, build,
  closeQuietly, producer, pushConsumer, INTERNAL_PROPERTIES, opt, Sent, keyOf, describe, byKey, send, AsyncQueue,
  Receiver, checkArrival, receiveAll,
};
