//! Shared plumbing of the gRPC checks (the Rust counterpart of grpc-java's G.java): environment, resource names,
//! client construction, deadline-based waiting, a background SimpleConsumer receive loop, message content comparison
//! and the PASS/FAIL output contract.
//!
//! Output contract: every check prints exactly one line on stdout, "PASS grpc-rust-VERSION/CHECK" or
//! "FAIL grpc-rust-VERSION/CHECK: reason". Everything else goes to stderr, each line prefixed with "[CHECK] " (or
//! "[SCENARIO] ") and the seconds since the start, so grpc.sh can show a failed check's own diagnostics. The SDK's
//! own log (slog, to the process's stderr) is moved to GRPC_LOG_DIR/sdk/PROGRAM.log.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocketmq::conf::{ClientOption, ProducerOption, SimpleConsumerOption};
use rocketmq::error::ClientError;
use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::{Message, MessageBuilder, MessageView};
use rocketmq::{Producer, SimpleConsumer};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The receive invisible duration used throughout; 10 s is the minimum the proxy accepts for receive.
pub const INVISIBLE: Duration = Duration::from_secs(10);
/// SimpleConsumer long polling (`ClientOption::set_long_polling_timeout`). This SDK gives a receive call a deadline
/// of exactly this duration (not long polling + request timeout like the Java SDK), so the endpoint must answer a
/// held receive before it; Apache's proxy and Conveyor both hold a receive for less than the remaining deadline.
pub const AWAIT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------- environment

pub fn env(name: &str, def: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_string(),
        _ => def.to_string(),
    }
}

pub fn endpoint() -> String {
    let e = env("GRPC_ENDPOINT", "");
    if e.is_empty() {
        panic!("GRPC_ENDPOINT (host:port of the gRPC endpoint) is not set");
    }
    e
}

pub fn tls() -> bool {
    env("GRPC_TLS", "false").eq_ignore_ascii_case("true")
}

/// Shared by grpc.sh (which creates the topics and groups with mqadmin) and the programs.
pub fn run_id() -> String {
    let r = env("GRPC_RUN_ID", "");
    if r.is_empty() {
        panic!("GRPC_RUN_ID is not set (grpc.sh sets it; grpc-java's Resources prints the names)");
    }
    r
}

/// The SDK version (sdk.sh reads it from Cargo.lock, which pins the crate, and passes it on).
pub fn sdk_version() -> String {
    env("GRPC_RUST_SDK_VERSION", "unknown")
}

pub fn check_name(check: &str) -> String {
    format!("grpc-rust-{}/{}", sdk_version(), check)
}

/// A wait's limit: DEFAULT seconds, scaled by GRPC_TIMEOUT_SCALE (default 1), in ms.
pub fn timeout_ms(default_secs: u64) -> i64 {
    let scale: f64 = env("GRPC_TIMEOUT_SCALE", "1").parse().unwrap_or(1.0);
    (default_secs as f64 * 1000.0 * scale) as i64
}

pub fn client_option() -> ClientOption {
    let mut o = ClientOption::default();
    o.set_access_url(endpoint());
    // The SDK's TLS: https with tonic's default rustls configuration (native roots); it has no option to accept any
    // certificate, so a self-signed endpoint certificate fails the handshake.
    o.set_enable_tls(tls());
    o.set_timeout(Duration::from_secs(10));
    o.set_long_polling_timeout(AWAIT);
    o
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

// ---------------------------------------------------------------- resources (created by grpc.sh with mqadmin)

pub fn topic(key: &str) -> String {
    format!("grpc_{}_{}", key, run_id())
}

pub fn group(key: &str) -> String {
    format!("grpcg_{}_{}", key, run_id())
}

// ---------------------------------------------------------------- output

static OUT: Mutex<()> = Mutex::new(());
static DIAG: OnceLock<Mutex<File>> = OnceLock::new();
static T0: OnceLock<Instant> = OnceLock::new();

/// Keeps the process's stderr for the diagnostics and sends what else writes to stderr (the SDK's slog terminal
/// logger) to GRPC_LOG_DIR/sdk/PROGRAM.log.
pub fn init_output(program: &str) {
    T0.get_or_init(Instant::now);
    let log_dir = env("GRPC_LOG_DIR", "");
    if log_dir.is_empty() {
        return;
    }
    let dir = format!("{}/sdk", log_dir);
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let path = format!("{}/{}.log", dir, program);
    let Ok(f) = OpenOptions::new().create(true).append(true).open(&path) else {
        return;
    };
    // SAFETY: plain descriptor duplication at start-up, before any other thread exists.
    unsafe {
        let saved = libc::dup(2);
        if saved < 0 {
            return;
        }
        if libc::dup2(f.as_raw_fd(), 2) < 0 {
            libc::close(saved);
            return;
        }
        let _ = DIAG.set(Mutex::new(File::from_raw_fd(saved)));
    }
    let _ = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        stderr("panic", &format!("{}", info));
    }));
}

pub fn stdout(line: &str) {
    let _g = OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{}", line);
    let _ = o.flush();
}

pub fn stderr(tag: &str, line: &str) {
    let _g = OUT.lock().unwrap_or_else(|e| e.into_inner());
    let t = T0.get_or_init(Instant::now).elapsed().as_secs_f64();
    let mut text = String::new();
    for l in line.split('\n') {
        text.push_str(&format!("[{}] {:7.3} {}\n", tag, t, l));
    }
    match DIAG.get() {
        Some(f) => {
            let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
            let _ = f.write_all(text.as_bytes());
            let _ = f.flush();
        }
        None => {
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
    }
}

// ---------------------------------------------------------------- scenarios and checks

/// A scenario failure with a reason: fails every check of the scenario not yet reported.
#[derive(Debug)]
pub struct Failure(pub String);

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Failure(format!("unexpected SDK error: {}", err(&e)))
    }
}

/// An SDK error with the chain of its source (the SDK's Display shows only the outermost cause, e.g. "transport
/// error" for a failed TLS handshake).
pub fn err(e: &ClientError) -> String {
    match e.source() {
        Some(src) => {
            let chain: Vec<String> = src.chain().skip(1).map(|c| c.to_string()).collect();
            if chain.is_empty() {
                e.to_string()
            } else {
                format!("{} (caused by: {})", e, chain.join(": "))
            }
        }
        None => e.to_string(),
    }
}

pub type BoxFuture = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send>>;
pub type Body = fn(Arc<Scenario>) -> BoxFuture;

/// One scenario: a body that reports one or more checks. Problems are collected per check; a check passes when the
/// body reported it without problems. A check the body did not reach is failed with the body's error.
pub struct Scenario {
    pub name: String,
    pub checks: Vec<String>,
    body: Body,
    problems: Mutex<HashMap<String, Vec<String>>>,
    done: Mutex<HashSet<String>>,
    passed: Mutex<HashMap<String, bool>>,
}

impl Scenario {
    pub fn new(name: &str, checks: &[&str], body: Body) -> Scenario {
        Scenario {
            name: name.to_string(),
            checks: checks.iter().map(|c| c.to_string()).collect(),
            body,
            problems: Mutex::new(checks.iter().map(|c| (c.to_string(), Vec::new())).collect()),
            done: Mutex::new(HashSet::new()),
            passed: Mutex::new(HashMap::new()),
        }
    }

    pub fn diag(&self, line: &str) {
        stderr(&self.name, line);
    }

    pub fn diag_check(&self, check: &str, line: &str) {
        stderr(check, line);
    }

    /// Records a problem for CHECK (it will fail; the first problem is the reason).
    pub fn problem(&self, check: &str, p: &str) {
        let mut m = self.problems.lock().unwrap();
        let l = m.get_mut(check).unwrap_or_else(|| panic!("unknown check {}", check));
        l.push(p.to_string());
        drop(m);
        stderr(check, &format!("problem: {}", p));
    }

    /// Prints CHECK's verdict now (once): PASS when no problem was recorded.
    pub fn report(&self, check: &str) {
        if !self.done.lock().unwrap().insert(check.to_string()) {
            return;
        }
        let m = self.problems.lock().unwrap();
        let l = &m[check];
        if l.is_empty() {
            self.passed.lock().unwrap().insert(check.to_string(), true);
            stdout(&format!("PASS {}", check_name(check)));
        } else {
            self.passed.lock().unwrap().insert(check.to_string(), false);
            let more = if l.len() > 1 {
                format!(" (and {} more problems, see stderr)", l.len() - 1)
            } else {
                String::new()
            };
            stdout(&format!("FAIL {}: {}{}", check_name(check), l[0], more));
        }
    }

    /// Fails CHECK now with REASON, unless it was already reported.
    pub fn fail_now(&self, check: &str, reason: &str) {
        if !self.done.lock().unwrap().insert(check.to_string()) {
            return;
        }
        self.passed.lock().unwrap().insert(check.to_string(), false);
        stderr(check, &format!("FAIL: {}", reason));
        stdout(&format!("FAIL {}: {}", check_name(check), reason.replace('\n', " ")));
    }

    pub fn reported(&self, check: &str) -> bool {
        self.done.lock().unwrap().contains(check)
    }

    pub fn all_passed(&self) -> bool {
        let p = self.passed.lock().unwrap();
        self.checks.iter().all(|c| p.get(c) == Some(&true))
    }
}

/// Runs the scenarios concurrently (each a task, with its own topics, groups and clients), selected by GRPC_CHECKS
/// (space-separated check names; default all). Returns true when every selected check passed. A scenario still
/// running after GRPC_PROGRAM_SECS (default 170 s) has its unreported checks failed.
pub async fn run_all(scenarios: Vec<Scenario>) -> bool {
    let sel: HashSet<String> = env("GRPC_CHECKS", "").split_whitespace().map(str::to_string).collect();
    let run: Vec<Arc<Scenario>> = scenarios
        .into_iter()
        .filter(|s| sel.is_empty() || s.checks.iter().any(|c| sel.contains(c)))
        .map(Arc::new)
        .collect();
    stderr(
        "main",
        &format!(
            "client rocketmq (Rust) {}, endpoint {}, tls {}, run id {}, scenarios {}",
            sdk_version(),
            endpoint(),
            tls(),
            run_id(),
            run.iter().map(|s| s.name.clone()).collect::<Vec<_>>().join(" ")
        ),
    );
    let mut handles = Vec::new();
    for s in &run {
        let s = Arc::clone(s);
        handles.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let inner = tokio::spawn((s.body)(Arc::clone(&s)));
            match inner.await {
                Ok(Ok(())) => {
                    for c in &s.checks {
                        if !s.reported(c) {
                            s.fail_now(c, "the scenario ended without a verdict for this check (test bug)");
                        }
                    }
                }
                Ok(Err(Failure(reason))) => {
                    for c in &s.checks {
                        s.fail_now(c, &reason);
                    }
                }
                Err(e) => {
                    s.diag(&format!("the scenario panicked: {}", e));
                    for c in &s.checks {
                        s.fail_now(c, &format!("unexpected panic: {}", e));
                    }
                }
            }
            s.diag(&format!("scenario took {} ms", t0.elapsed().as_millis()));
        }));
    }
    let limit: u64 = env("GRPC_PROGRAM_SECS", "170").parse().unwrap_or(170);
    let all = futures_join_all(handles);
    let finished = tokio::time::timeout(Duration::from_secs(limit), all).await.is_ok();
    let mut ok = true;
    for s in &run {
        if !finished {
            for c in &s.checks {
                s.fail_now(c, &format!("scenario {} did not finish within {} s", s.name, limit));
            }
        }
        ok &= s.all_passed();
    }
    ok
}

async fn futures_join_all(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}

// ---------------------------------------------------------------- waiting

/// Builds and starts a client, retrying for up to 30 s: right after mqadmin created a topic the endpoint may not see
/// its route yet, and the SDK's start-up fails on a topic it cannot route.
pub async fn build<T, F, Fut>(s: &Scenario, what: &str, mut make: F) -> Result<T, Failure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let deadline = now_ms() + timeout_ms(30);
    let mut attempts = 0;
    loop {
        attempts += 1;
        match make().await {
            Ok(t) => {
                if attempts > 1 {
                    s.diag(&format!("{} started after {} attempts", what, attempts));
                }
                return Ok(t);
            }
            Err(e) => {
                s.diag(&format!("{} did not start (attempt {}): {}", what, attempts, err(&e)));
                if now_ms() >= deadline {
                    return Err(Failure(format!("could not start {} within {} s: {}", what, timeout_ms(30) / 1000, err(&e))));
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A started Producer for TOPIC (the SDK prefetches the route of its topics at start).
pub async fn producer(s: &Scenario, topic: &str) -> Result<Producer, Failure> {
    build(s, &format!("Producer({})", topic), || async {
        let mut o = ProducerOption::default();
        o.set_topics(vec![topic.to_string()]);
        let mut p = Producer::new(o, client_option())?;
        p.start().await?;
        Ok(p)
    })
    .await
}

pub async fn shutdown_producer(s: &Scenario, p: Producer) {
    if let Err(e) = p.shutdown().await {
        s.diag(&format!("shutdown of a Producer failed: {}", err(&e)));
    }
}

// ---------------------------------------------------------------- messages

/// A message this test sent, with what it must look like when received.
#[derive(Clone, Debug)]
pub struct Sent {
    pub key: String,
    pub tag: Option<String>,
    pub body: Vec<u8>,
    pub keys: Vec<String>,
    pub props: BTreeMap<String, String>,
    pub message_group: Option<String>,
    /// In seconds: this SDK's delivery timestamps (set and received) have whole-second precision.
    pub delivery_timestamp_s: Option<i64>,
    pub message_id: Option<String>,
    pub send_start: i64,
    pub send_end: i64,
}

impl Sent {
    pub fn new(check: &str, index: usize, tag: Option<&str>) -> Sent {
        let key = format!("k_{}_{}_{}", check, run_id(), index);
        let keys = vec![key.clone(), format!("alt_{}", index)];
        // A body with every byte value, of a length that varies with the index (binary-safe transport).
        let len = 64 + (index * 37) % 1500;
        let head = format!("{}|", key).into_bytes();
        let body: Vec<u8> = (0..len)
            .map(|i| if i < head.len() { head[i] } else { ((i * 31 + index) & 0xff) as u8 })
            .collect();
        let mut props = BTreeMap::new();
        props.insert("p_check".to_string(), check.to_string());
        props.insert("p_index".to_string(), index.to_string());
        props.insert("p_text".to_string(), format!("caf\u{e9} \u{2713} {}", index));
        Sent {
            key,
            tag: tag.map(str::to_string),
            body,
            keys,
            props,
            message_group: None,
            delivery_timestamp_s: None,
            message_id: None,
            send_start: 0,
            send_end: 0,
        }
    }

    pub fn builder(&self, topic: &str) -> MessageBuilder {
        let mut b = MessageBuilder::builder()
            .set_topic(topic)
            .set_body(self.body.clone())
            .set_keys(self.keys.clone())
            .set_properties(self.props.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<HashMap<_, _>>());
        if let Some(t) = &self.tag {
            b = b.set_tag(t.clone());
        }
        if let Some(g) = &self.message_group {
            b = b.set_message_group(g.clone());
        }
        if let Some(d) = self.delivery_timestamp_s {
            b = b.set_delivery_timestamp(d);
        }
        b
    }

    pub fn build(&self, topic: &str) -> Result<impl Message, Failure> {
        self.builder(topic).build().map_err(|e| Failure(format!("could not build message {}: {}", self.key, e)))
    }

    /// Differences between this message and a received view (empty: identical).
    pub fn differences(&self, v: &MessageView, topic: &str, compare_id: bool) -> Vec<String> {
        let mut d = Vec::new();
        if v.topic() != topic {
            d.push(format!("topic {} != {}", v.topic(), topic));
        }
        if v.body() != self.body.as_slice() {
            d.push(format!("body differs ({} bytes received, {} sent)", v.body().len(), self.body.len()));
        }
        if v.tag() != self.tag.as_deref() {
            d.push(format!("tag {:?} != {:?}", v.tag(), self.tag));
        }
        let got_keys: BTreeSet<&String> = v.keys().iter().collect();
        let want_keys: BTreeSet<&String> = self.keys.iter().collect();
        if got_keys != want_keys {
            d.push(format!("keys {:?} != {:?}", v.keys(), self.keys));
        }
        let got_props: BTreeMap<String, String> = v
            .properties()
            .iter()
            .filter(|(k, _)| !INTERNAL_PROPERTIES.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if got_props != self.props {
            let all: BTreeMap<_, _> = v.properties().iter().collect();
            d.push(format!("user properties {:?} != {:?}", all, self.props));
        }
        if compare_id {
            if let Some(id) = &self.message_id {
                if v.message_id() != id {
                    d.push(format!("message id {} != {} (from the send receipt)", v.message_id(), id));
                }
            }
        }
        if let Some(g) = &self.message_group {
            if v.message_group() != Some(g.as_str()) {
                d.push(format!("message group {:?} != {}", v.message_group(), g));
            }
        }
        if let Some(ts) = self.delivery_timestamp_s {
            if v.delivery_timestamp() != Some(ts) {
                d.push(format!("delivery timestamp {:?} s != {} s", v.delivery_timestamp(), ts));
            }
        }
        d
    }
}

/// RocketMQ-internal message properties that Apache RocketMQ 5.3.3's proxy passes through as user properties (the
/// FIFO sharding key, the transaction id, the broker's check-back counter). An endpoint may or may not show them; any
/// other extra property is a difference.
pub const INTERNAL_PROPERTIES: [&str; 3] = ["__SHARDINGKEY", "__transactionId__", "TRANSACTION_CHECK_TIMES"];

/// The first key of a received message (our Sent.key), or None.
pub fn key_of(v: &MessageView) -> Option<String> {
    v.keys().iter().find(|k| k.starts_with("k_")).cloned()
}

pub fn describe(v: &MessageView) -> String {
    format!(
        "id={} key={} tag={} attempt={} group={}",
        v.message_id(),
        key_of(v).unwrap_or_else(|| "null".into()),
        v.tag().unwrap_or("null"),
        v.delivery_attempt(),
        v.message_group().unwrap_or("null")
    )
}

pub fn by_key(list: &[Sent]) -> BTreeMap<String, Sent> {
    list.iter().map(|m| (m.key.clone(), m.clone())).collect()
}

// ---------------------------------------------------------------- SimpleConsumer receive loop

/// One message as the receive loop got it.
pub struct Arrival {
    pub view: Arc<MessageView>,
    /// When receive returned it (epoch ms).
    pub at: i64,
    /// When the receive call that returned it was issued (the message became invisible no earlier).
    pub receive_start: i64,
}

#[derive(Default)]
pub struct Stats {
    pub receive_errors: AtomicU64,
    pub ack_errors: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

/// A SimpleConsumer with a task that calls receive back to back and queues what arrives (optionally acking each
/// message at once). The consumer is started (and its first receive issued) before the scenario sends.
pub struct Receiver {
    pub what: String,
    pub consumer: Arc<SimpleConsumer>,
    rx: mpsc::UnboundedReceiver<Arrival>,
    stats: Arc<Stats>,
    running: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Receiver {
    #[allow(clippy::too_many_arguments)]
    pub async fn new(
        s: &Arc<Scenario>,
        group: &str,
        topic: &str,
        filter: &str,
        invisible: Duration,
        auto_ack: bool,
        batch: i32,
    ) -> Result<Receiver, Failure> {
        let what = format!("SimpleConsumer({} on {} {})", group, topic, filter);
        let consumer = build(s, &what, || async {
            let mut o = SimpleConsumerOption::default();
            o.set_consumer_group(group);
            o.set_topics(vec![topic.to_string()]);
            let mut c = SimpleConsumer::new(o, client_option())?;
            c.start().await?;
            Ok(c)
        })
        .await?;
        let consumer = Arc::new(consumer);
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(Stats::default());
        let running = Arc::new(AtomicBool::new(true));
        let task = {
            let (s, consumer, stats, running) = (Arc::clone(s), Arc::clone(&consumer), Arc::clone(&stats), Arc::clone(&running));
            let (what, topic, filter) = (what.clone(), topic.to_string(), filter.to_string());
            tokio::spawn(async move {
                let expr = FilterExpression::new(FilterType::Tag, filter);
                while running.load(Ordering::SeqCst) {
                    let t0 = now_ms();
                    let got = match consumer.receive_with(&topic, &expr, batch, invisible).await {
                        Ok(got) => got,
                        Err(e) => {
                            if !running.load(Ordering::SeqCst) {
                                return;
                            }
                            stats.receive_errors.fetch_add(1, Ordering::SeqCst);
                            *stats.last_error.lock().unwrap() = Some(err(&e));
                            s.diag(&format!("{}: receive failed: {}", what, err(&e)));
                            // back off a failing endpoint instead of spinning
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue;
                        }
                    };
                    let t = now_ms();
                    for v in got {
                        let v = Arc::new(v);
                        if auto_ack {
                            if let Err(e) = consumer.ack(&*v).await {
                                stats.ack_errors.fetch_add(1, Ordering::SeqCst);
                                *stats.last_error.lock().unwrap() = Some(format!("ack: {}", err(&e)));
                                s.diag(&format!("{}: ack of {} failed: {}", what, describe(&v), err(&e)));
                            }
                        }
                        let _ = tx.send(Arrival { view: v, at: t, receive_start: t0 });
                    }
                }
            })
        };
        Ok(Receiver { what, consumer, rx, stats, running, task })
    }

    /// The next arrival, or None once UNTIL (epoch ms) has passed.
    pub async fn poll(&mut self, until: i64) -> Option<Arrival> {
        let wait = until - now_ms();
        if wait <= 0 {
            return self.rx.try_recv().ok();
        }
        tokio::time::timeout(Duration::from_millis(wait as u64), self.rx.recv()).await.ok().flatten()
    }

    /// The next arrival if one is queued.
    pub fn try_poll(&mut self) -> Option<Arrival> {
        self.rx.try_recv().ok()
    }

    pub async fn ack(&self, v: &Arc<MessageView>) -> Result<(), ClientError> {
        self.consumer.ack(&**v).await
    }

    pub fn errors(&self) -> String {
        let last = self.stats.last_error.lock().unwrap().clone();
        format!(
            "receive errors {}, ack errors {}{}",
            self.stats.receive_errors.load(Ordering::SeqCst),
            self.stats.ack_errors.load(Ordering::SeqCst),
            last.map(|l| format!(", last: {}", l)).unwrap_or_default()
        )
    }

    pub async fn close(self, s: &Scenario) {
        self.running.store(false, Ordering::SeqCst);
        self.task.abort();
        let _ = self.task.await;
        drop(self.rx);
        match Arc::try_unwrap(self.consumer) {
            Ok(c) => {
                if let Err(e) = c.shutdown().await {
                    s.diag(&format!("{}: shutdown failed: {}", self.what, err(&e)));
                }
            }
            Err(_) => s.diag(&format!("{}: still in use, not shut down", self.what)),
        }
    }
}

/// Receives until every message of EXPECT (by key) has arrived once, checking each arrival's content; duplicates and
/// unknown messages are problems of CHECK. Returns the first arrival of each key, in arrival order.
pub async fn receive_all(
    s: &Scenario,
    check: &str,
    r: &mut Receiver,
    topic: &str,
    expect: &BTreeMap<String, Sent>,
    timeout_ms: i64,
) -> Vec<(String, Arrival)> {
    let mut first: Vec<(String, Arrival)> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let deadline = now_ms() + timeout_ms;
    while seen.len() < expect.len() {
        let Some(a) = r.poll(deadline).await else {
            let missing: Vec<&String> = expect.keys().filter(|k| !seen.contains(*k)).take(5).collect();
            s.problem(
                check,
                &format!(
                    "received {} of {} messages within {} s; missing e.g. {:?}; {}",
                    seen.len(),
                    expect.len(),
                    timeout_ms / 1000,
                    missing,
                    r.errors()
                ),
            );
            return first;
        };
        let k = key_of(&a.view);
        let sent = k.as_ref().and_then(|k| expect.get(k));
        let Some(sent) = sent else {
            s.problem(check, &format!("received a message that was not sent to this topic: {}", describe(&a.view)));
            continue;
        };
        if seen.contains(&sent.key) {
            s.problem(check, &format!("received {} twice ({})", sent.key, describe(&a.view)));
            continue;
        }
        seen.insert(sent.key.clone());
        let d = sent.differences(&a.view, topic, true);
        if !d.is_empty() {
            s.problem(check, &format!("{} arrived different from what was sent: {}", sent.key, d.join("; ")));
        }
        if a.view.delivery_attempt() != 1 {
            s.problem(
                check,
                &format!("{} arrived with deliveryAttempt {}, expected 1", sent.key, a.view.delivery_attempt()),
            );
        }
        first.push((sent.key.clone(), a));
    }
    first
}
