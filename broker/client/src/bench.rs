//! Reusable load generators, shared by the bench binary, CLI and tests so that every
//! throughput or latency number Conveyor reports is produced the same way:
//!
//! - [`produce`]: N producers (one connection each), each with M sends in flight, for a
//!   duration or a message count; latency = send round trip.
//! - [`consume`]: pull consumers draining a topic from offset 0 across all queues, up to the
//!   max offsets seen at start; latency = pull round trip.
//! - [`long_poll_latency`]: how fast a parked long-poll pull returns once a message arrives.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use conveyor_protocol::route::MessageQueue;
use rand::Rng;
use tracing::warn;

use crate::consumer::{PullConsumer, PullConsumerConfig, PullStatus};
use crate::error::{ClientError, Result};
use crate::histogram::Histogram;
use crate::message::Message;
use crate::producer::{Producer, ProducerConfig};

/// When a load generator stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// After this much time.
    Duration(Duration),
    /// After this many attempts (successful or not).
    Count(u64),
}

/// Load-generator results.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Messages sent / received.
    pub msgs: u64,
    /// Body bytes sent / received.
    pub bytes: u64,
    /// Failed requests.
    pub errors: u64,
    /// The first error seen, as text.
    pub first_error: Option<String>,
    /// Wall time of the measured phase.
    pub elapsed: Duration,
    /// Per-request latency.
    pub latency: Histogram,
}

impl Stats {
    /// Messages per second.
    pub fn msgs_per_sec(&self) -> f64 {
        self.msgs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// MiB of bodies per second.
    pub fn mib_per_sec(&self) -> f64 {
        self.bytes as f64 / (1024.0 * 1024.0) / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Median latency.
    pub fn p50(&self) -> Duration {
        self.latency.quantile(0.5)
    }

    /// 99th percentile latency.
    pub fn p99(&self) -> Duration {
        self.latency.quantile(0.99)
    }

    /// 99.9th percentile latency.
    pub fn p999(&self) -> Duration {
        self.latency.quantile(0.999)
    }

    fn add(&mut self, other: Stats) {
        self.msgs += other.msgs;
        self.bytes += other.bytes;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.latency.merge(&other.latency);
    }

    fn error(&mut self, e: &ClientError) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} msgs, {} bytes in {:.3}s: {:.0} msg/s, {:.2} MiB/s; latency p50 {:?} p99 {:?} p999 {:?} max {:?}; {} errors",
            self.msgs,
            self.bytes,
            self.elapsed.as_secs_f64(),
            self.msgs_per_sec(),
            self.mib_per_sec(),
            self.p50(),
            self.p99(),
            self.p999(),
            self.latency.max(),
            self.errors
        )
    }
}

/// Settings of [`produce`].
#[derive(Debug, Clone)]
pub struct ProduceConfig {
    /// Name servers.
    pub namesrv: String,
    /// Topic (auto-created through TBW102 if it has no route).
    pub topic: String,
    /// Producer group.
    pub group: String,
    /// Body size in bytes (random content).
    pub message_size: usize,
    /// Producers, each with its own connection.
    pub producers: usize,
    /// Concurrent sends per producer.
    pub in_flight: usize,
    /// When to stop.
    pub limit: Limit,
    /// Limit per send.
    pub send_timeout: Duration,
    /// Messages per request: 1 sends singles (SEND_MESSAGE_V2), more sends batches
    /// (SEND_BATCH_MESSAGE).
    pub batch: usize,
}

impl ProduceConfig {
    /// 1 KiB messages, 1 producer, 16 in flight, 10 s.
    pub fn new(namesrv: impl Into<String>, topic: impl Into<String>) -> Self {
        Self {
            namesrv: namesrv.into(),
            topic: topic.into(),
            group: "conveyor-bench-producer".into(),
            message_size: 1024,
            producers: 1,
            in_flight: 16,
            limit: Limit::Duration(Duration::from_secs(10)),
            send_timeout: Duration::from_secs(3),
            batch: 1,
        }
    }
}

/// Shared stop condition of a run.
struct Budget {
    deadline: Option<Instant>,
    remaining: AtomicI64,
}

impl Budget {
    fn new(limit: Limit, start: Instant) -> Self {
        match limit {
            Limit::Duration(d) => Self {
                deadline: Some(start + d),
                remaining: AtomicI64::new(i64::MAX),
            },
            Limit::Count(n) => Self {
                deadline: None,
                remaining: AtomicI64::new(i64::try_from(n).unwrap_or(i64::MAX)),
            },
        }
    }

    /// Takes one unit of work; false when the run is over.
    fn take(&self) -> bool {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        self.remaining.fetch_sub(1, Ordering::Relaxed) > 0
    }
}

/// Pause after a failed request so a dead peer does not turn the generator into a spin loop.
const ERROR_BACKOFF: Duration = Duration::from_millis(10);

/// Sends messages as fast as `in_flight` × `producers` concurrent sends allow.
pub async fn produce(config: &ProduceConfig) -> Result<Stats> {
    if config.producers == 0 || config.in_flight == 0 {
        return Err(ClientError::InvalidArgument(
            "producers and in_flight must be positive".into(),
        ));
    }
    let mut body = vec![0u8; config.message_size];
    rand::rng().fill(&mut body[..]);
    let body = Bytes::from(body);
    let mut producers = Vec::with_capacity(config.producers);
    for _ in 0..config.producers {
        let mut pc = ProducerConfig::new(config.namesrv.clone(), config.group.clone());
        pc.send_timeout = config.send_timeout;
        let p = Arc::new(Producer::new(pc)?);
        p.publish_queues(&config.topic).await?; // resolve the route before timing
        producers.push(p);
    }
    let msg = Message::new(config.topic.clone(), body);
    let batch = config.batch.max(1);
    let total = drive(
        &producers,
        config.in_flight,
        config.limit,
        msg,
        move |p, m| async move {
            if batch == 1 {
                p.send(&m).await.map(|_| 1)
            } else {
                let msgs = vec![m; batch];
                p.send_batch(&msgs).await.map(|_| batch as u64)
            }
        },
    )
    .await;
    for p in &producers {
        p.close();
    }
    Ok(total)
}

/// Settings of [`consume`].
#[derive(Debug, Clone)]
pub struct ConsumeConfig {
    /// Name servers.
    pub namesrv: String,
    /// Topic to drain.
    pub topic: String,
    /// Consumer group (pulls do not commit offsets).
    pub group: String,
    /// Consumers, each with its own connection; queues are spread over them.
    pub consumers: usize,
    /// `maxMsgNums` per pull.
    pub batch: i32,
    /// Give up after this long even if not drained.
    pub max_duration: Duration,
}

impl ConsumeConfig {
    /// 1 consumer, batches of 32, at most 60 s.
    pub fn new(namesrv: impl Into<String>, topic: impl Into<String>) -> Self {
        Self {
            namesrv: namesrv.into(),
            topic: topic.into(),
            group: "conveyor-bench-consumer".into(),
            consumers: 1,
            batch: 32,
            max_duration: Duration::from_secs(60),
        }
    }
}

/// Reads every queue of the topic from offset 0 up to its max offset at start.
pub async fn consume(config: &ConsumeConfig) -> Result<Stats> {
    if config.consumers == 0 {
        return Err(ClientError::InvalidArgument(
            "consumers must be positive".into(),
        ));
    }
    let mut consumers = Vec::with_capacity(config.consumers);
    for _ in 0..config.consumers {
        let c = PullConsumer::new(PullConsumerConfig::new(
            config.namesrv.clone(),
            config.group.clone(),
        ))?;
        c.subscribe(&config.topic, "*")?;
        consumers.push(Arc::new(c));
    }
    let queues = consumers[0].fetch_queues(&config.topic).await?;
    let mut targets: Vec<(MessageQueue, i64)> = Vec::with_capacity(queues.len());
    for q in queues {
        let max = consumers[0].max_offset(&q).await?;
        targets.push((q, max));
    }
    if let Err(e) = consumers[0].heartbeat().await {
        warn!(error = %e, "heartbeat failed; pulling anyway");
    }
    let start = Instant::now();
    let deadline = start + config.max_duration;
    let mut tasks = Vec::new();
    for (i, (queue, target)) in targets.into_iter().enumerate() {
        let c = consumers[i % consumers.len()].clone();
        let batch = config.batch;
        tasks.push(tokio::spawn(async move {
            let mut s = Stats::default();
            let mut offset = 0i64;
            while offset < target && Instant::now() < deadline {
                let t0 = Instant::now();
                match c.pull(&queue, offset, batch, Duration::ZERO).await {
                    Ok(r) => {
                        s.latency.record(t0.elapsed());
                        s.msgs += r.messages.len() as u64;
                        s.bytes += r.messages.iter().map(|m| m.body.len() as u64).sum::<u64>();
                        if r.status == PullStatus::NoNewMsg && r.next_begin_offset <= offset {
                            // Not readable yet (e.g. still being dispatched): brief pause.
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        offset = offset.max(r.next_begin_offset);
                    }
                    Err(e) => {
                        s.error(&e);
                        tokio::time::sleep(ERROR_BACKOFF).await;
                    }
                }
            }
            s
        }));
    }
    let mut total = collect(tasks, "consumer task failed").await;
    total.elapsed = start.elapsed();
    for c in &consumers {
        c.close();
    }
    Ok(total)
}

/// Settings of [`long_poll_latency`].
#[derive(Debug, Clone)]
pub struct LongPollConfig {
    /// Name servers.
    pub namesrv: String,
    /// Topic (auto-created if needed).
    pub topic: String,
    /// Consumer group.
    pub group: String,
    /// Number of measurements.
    pub trials: usize,
    /// Long-poll hold requested by the idle pull.
    pub suspend: Duration,
    /// Time given to the pull to reach the broker and park before the message is sent.
    pub settle: Duration,
    /// Body size.
    pub message_size: usize,
}

impl LongPollConfig {
    /// 10 trials, 15 s hold, 100 ms settle, 128-byte bodies.
    pub fn new(namesrv: impl Into<String>, topic: impl Into<String>) -> Self {
        Self {
            namesrv: namesrv.into(),
            topic: topic.into(),
            group: "conveyor-bench-longpoll".into(),
            trials: 10,
            suspend: Duration::from_secs(15),
            settle: Duration::from_millis(100),
            message_size: 128,
        }
    }
}

/// Long-poll wake-up latencies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongPollStats {
    /// Each trial's latency: from just before the send to the pull's return.
    pub samples: Vec<Duration>,
    /// Fastest trial.
    pub min: Duration,
    /// Median trial.
    pub median: Duration,
    /// Slowest trial.
    pub max: Duration,
}

impl LongPollStats {
    /// Summary of `samples`.
    pub fn from_samples(samples: Vec<Duration>) -> Self {
        let mut sorted = samples.clone();
        sorted.sort();
        Self {
            min: sorted.first().copied().unwrap_or_default(),
            median: sorted
                .get(sorted.len().saturating_sub(1) / 2)
                .copied()
                .unwrap_or_default(),
            max: sorted.last().copied().unwrap_or_default(),
            samples,
        }
    }
}

impl fmt::Display for LongPollStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} trials: min {:?} median {:?} max {:?}",
            self.samples.len(),
            self.min,
            self.median,
            self.max
        )
    }
}

/// Measures how long a parked long-poll pull takes to return once a message is sent to its
/// queue: per trial, pull at the queue's max offset with a long hold, wait `settle`, send one
/// message to that queue, and time from just before the send until the pull returns.
pub async fn long_poll_latency(config: &LongPollConfig) -> Result<LongPollStats> {
    let producer = Producer::new(ProducerConfig::new(
        config.namesrv.clone(),
        format!("{}-producer", config.group),
    ))?;
    let consumer = Arc::new(PullConsumer::new(PullConsumerConfig::new(
        config.namesrv.clone(),
        config.group.clone(),
    ))?);
    consumer.subscribe(&config.topic, "*")?;
    let body = Bytes::from(vec![b'x'; config.message_size]);
    let msg = Message::new(config.topic.clone(), body);
    let queue = producer
        .publish_queues(&config.topic)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| ClientError::NoRoute {
            topic: config.topic.clone(),
        })?;
    // Warm-up: creates the topic if needed and opens the connections.
    producer.send_to_queue(&msg, &queue).await?;
    wait_for_route(&consumer, &config.topic, Duration::from_secs(10)).await?;
    if let Err(e) = consumer.heartbeat().await {
        warn!(error = %e, "heartbeat failed; pulling anyway");
    }
    let mut samples = Vec::with_capacity(config.trials);
    for trial in 0..config.trials {
        let offset = consumer.max_offset(&queue).await?;
        let c = consumer.clone();
        let q = queue.clone();
        let suspend = config.suspend;
        let pull = tokio::spawn(async move {
            let r = c.pull(&q, offset, 1, suspend).await;
            (r, Instant::now())
        });
        tokio::time::sleep(config.settle).await;
        let t0 = Instant::now();
        producer.send_to_queue(&msg, &queue).await?;
        let (result, returned_at) = pull
            .await
            .map_err(|e| ClientError::InvalidArgument(format!("pull task failed: {e}")))?;
        let result = result?;
        if result.status != PullStatus::Found {
            return Err(ClientError::InvalidArgument(format!(
                "trial {trial}: long poll returned {:?} instead of the message",
                result.status
            )));
        }
        samples.push(returned_at.saturating_duration_since(t0));
    }
    producer.close();
    consumer.close();
    Ok(LongPollStats::from_samples(samples))
}

/// Polls until the consumer's name server returns a route for `topic`.
async fn wait_for_route(consumer: &PullConsumer, topic: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match consumer.fetch_queues(topic).await {
            Ok(q) if !q.is_empty() => return Ok(()),
            Ok(_) => {}
            Err(e) if e.code().is_some() => {}
            Err(e) => return Err(e),
        }
        if Instant::now() >= deadline {
            return Err(ClientError::NoRoute {
                topic: topic.to_string(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_poll_summary() {
        let ms = Duration::from_millis;
        let s = LongPollStats::from_samples(vec![ms(5), ms(1), ms(3)]);
        assert_eq!((s.min, s.median, s.max), (ms(1), ms(3), ms(5)));
        assert_eq!(s.samples, vec![ms(5), ms(1), ms(3)]);
        let empty = LongPollStats::from_samples(Vec::new());
        assert_eq!(empty.max, Duration::ZERO);
    }

    #[test]
    fn budget_counts_and_deadlines() {
        let b = Budget::new(Limit::Count(3), Instant::now());
        assert!(b.take() && b.take() && b.take());
        assert!(!b.take());
        let b = Budget::new(Limit::Duration(Duration::ZERO), Instant::now());
        assert!(!b.take());
    }
}

/// Runs `op` with `in_flight` concurrent tasks per producer until `limit`, collecting stats.
async fn drive<F, Fut>(
    producers: &[Arc<Producer>],
    in_flight: usize,
    limit: Limit,
    msg: Message,
    op: F,
) -> Stats
where
    F: Fn(Arc<Producer>, Message) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<u64>> + Send,
{
    let start = Instant::now();
    let budget = Arc::new(Budget::new(limit, start));
    let mut tasks = Vec::new();
    for p in producers {
        for _ in 0..in_flight {
            let (p, budget, msg, op) = (p.clone(), budget.clone(), msg.clone(), op.clone());
            tasks.push(tokio::spawn(async move {
                let mut s = Stats::default();
                while budget.take() {
                    let t0 = Instant::now();
                    match op(p.clone(), msg.clone()).await {
                        Ok(n) => {
                            s.latency.record(t0.elapsed());
                            s.msgs += n;
                            s.bytes += n * msg.body.len() as u64;
                        }
                        Err(e) => {
                            s.error(&e);
                            tokio::time::sleep(ERROR_BACKOFF).await;
                        }
                    }
                }
                s
            }));
        }
    }
    let mut total = collect(tasks, "load task failed").await;
    total.elapsed = start.elapsed();
    total
}

async fn bench_producers(
    namesrv: &str,
    group: &str,
    topic: &str,
    n: usize,
) -> Result<Vec<Arc<Producer>>> {
    let mut producers = Vec::with_capacity(n);
    for _ in 0..n {
        let p = Arc::new(Producer::new(ProducerConfig::new(
            namesrv.to_string(),
            group.to_string(),
        ))?);
        p.publish_queues(topic).await?;
        producers.push(p);
    }
    Ok(producers)
}

/// A counted load: who sends how many messages of what size, how concurrently. Shared by
/// [`transactions`] and [`delayed`].
#[derive(Debug, Clone)]
pub struct CountedLoad {
    /// Name servers.
    pub namesrv: String,
    /// Topic.
    pub topic: String,
    /// Producer/consumer group.
    pub group: String,
    /// Body size in bytes.
    pub message_size: usize,
    /// Producers (one connection each).
    pub producers: usize,
    /// Concurrent operations per producer.
    pub in_flight: usize,
    /// Messages to send.
    pub count: u64,
}

/// Settings of [`transactions`].
pub type TransactionConfig = CountedLoad;

/// Transactional sends: each unit is a half message followed by its commit.
pub async fn transactions(config: &TransactionConfig) -> Result<Stats> {
    let producers = bench_producers(
        &config.namesrv,
        &config.group,
        &config.topic,
        config.producers.max(1),
    )
    .await?;
    let msg = Message::new(
        config.topic.clone(),
        Bytes::from(vec![b't'; config.message_size]),
    );
    let stats = drive(
        &producers,
        config.in_flight.max(1),
        Limit::Count(config.count),
        msg,
        |p, m| async move {
            let half = p.send_half(&m).await?;
            p.end_transaction(&half, true).await.map(|_| 1)
        },
    )
    .await;
    for p in &producers {
        p.close();
    }
    Ok(stats)
}

/// Settings of [`delayed`].
#[derive(Debug, Clone)]
pub struct DelayConfig {
    /// Senders, topic and message count.
    pub load: CountedLoad,
    /// Delay level of every message.
    pub level: i32,
    /// The level's delay (to check that nothing arrives early).
    pub delay: Duration,
    /// Give up waiting for deliveries after this long.
    pub max_wait: Duration,
}

/// What [`delayed`] measured.
#[derive(Debug, Clone)]
pub struct DelayStats {
    /// Scheduling (the sends).
    pub scheduled: Stats,
    /// Messages delivered to the topic.
    pub delivered: u64,
    /// From the first to the last delivery.
    pub delivery_window: Duration,
    /// Deliveries stored before born time + delay (must be 0).
    pub early: u64,
    /// Largest delivery time minus (born time + delay).
    pub max_lateness: Duration,
}

/// Schedules `count` messages at one delay level, then drains their deliveries.
pub async fn delayed(config: &DelayConfig) -> Result<DelayStats> {
    let producers = bench_producers(
        &config.load.namesrv,
        &config.load.group,
        &config.load.topic,
        config.load.producers.max(1),
    )
    .await?;
    let consumer = PullConsumer::new(PullConsumerConfig::new(
        config.load.namesrv.clone(),
        config.load.group.clone(),
    ))?;
    consumer.subscribe(&config.load.topic, "*")?;
    let queues = consumer.fetch_queues(&config.load.topic).await?;
    let mut offsets = Vec::with_capacity(queues.len());
    for q in &queues {
        offsets.push(consumer.max_offset(q).await?);
    }
    let msg = Message::new(
        config.load.topic.clone(),
        Bytes::from(vec![b'd'; config.load.message_size]),
    )
    .with_delay_level(config.level);
    let scheduled = drive(
        &producers,
        config.load.in_flight.max(1),
        Limit::Count(config.load.count),
        msg,
        |p, m| async move { p.send(&m).await.map(|_| 1) },
    )
    .await;
    for p in &producers {
        p.close();
    }
    let delay_ms = config.delay.as_millis() as i64;
    let deadline = Instant::now() + config.delay + config.max_wait;
    let (mut delivered, mut early, mut max_late) = (0u64, 0u64, 0i64);
    let (mut first, mut last) = (None::<i64>, 0i64);
    while delivered < scheduled.msgs && Instant::now() < deadline {
        let mut got_any = false;
        for (q, offset) in queues.iter().zip(offsets.iter_mut()) {
            let r = consumer.pull(q, *offset, 256, Duration::ZERO).await?;
            *offset = (*offset).max(r.next_begin_offset);
            for m in &r.messages {
                got_any = true;
                delivered += 1;
                let late = m.store_timestamp - (m.born_timestamp + delay_ms);
                if late < 0 {
                    early += 1;
                }
                max_late = max_late.max(late);
                first = Some(first.map_or(m.store_timestamp, |f: i64| f.min(m.store_timestamp)));
                last = last.max(m.store_timestamp);
            }
        }
        if !got_any {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    consumer.close();
    Ok(DelayStats {
        scheduled,
        delivered,
        delivery_window: Duration::from_millis((last - first.unwrap_or(last)).max(0) as u64),
        early,
        max_lateness: Duration::from_millis(max_late.max(0) as u64),
    })
}

/// Sums the stats of finished load tasks (a task that panicked is logged and skipped).
async fn collect(tasks: Vec<tokio::task::JoinHandle<Stats>>, what: &str) -> Stats {
    let mut total = Stats::default();
    for t in tasks {
        match t.await {
            Ok(s) => total.add(s),
            Err(e) => warn!(error = %e, "{what}"),
        }
    }
    total
}

/// Settings of [`scrape_cost`].
#[derive(Debug, Clone)]
pub struct ScrapeConfig {
    /// Name servers.
    pub namesrv: String,
    /// The cluster the topics are created in.
    pub cluster: String,
    /// The broker's metrics URL (`http://host:port/metrics`).
    pub metrics_url: String,
    /// The broker's process id, to read its CPU time (`None`: not measured).
    pub broker_pid: Option<u32>,
    /// Consumer groups given offsets.
    pub groups: usize,
    /// Topics each group has offsets on.
    pub topics: usize,
    /// Queues per topic.
    pub queues: i32,
    /// Scrapes measured before and after.
    pub scrapes: usize,
}

/// What scrapes cost at one moment.
#[derive(Debug, Clone, Copy)]
pub struct ScrapeSample {
    /// Median wall time of one scrape.
    pub p50: Duration,
    /// Longest scrape.
    pub max: Duration,
    /// Size of one answer.
    pub bytes: usize,
    /// Broker CPU time per scrape (all its threads), when its pid was given.
    pub cpu: Option<Duration>,
}

/// [`scrape_cost`]'s result: the same scrapes before and after the groups got offsets.
#[derive(Debug, Clone, Copy)]
pub struct ScrapeReport {
    /// Scrapes of the broker as it was.
    pub before: ScrapeSample,
    /// Scrapes with `groups × topics` (group, topic) lag rows more.
    pub after: ScrapeSample,
    /// How many (group, topic) pairs were added.
    pub rows: usize,
}

/// Measures what a `/metrics` scrape costs the broker once `groups` consumer groups have
/// offsets on `topics` topics (the lag series are per group and topic): scrapes before, then
/// offsets committed at each queue's start (so every row has lag to compute), then the same
/// scrapes again.
pub async fn scrape_cost(config: &ScrapeConfig) -> Result<ScrapeReport> {
    use futures_util::stream::{self, StreamExt, TryStreamExt};

    let before = scrape_sample(config).await?;
    let admin = crate::admin::Admin::new(&config.namesrv)?;
    let topics: Vec<String> = (0..config.topics)
        .map(|t| format!("ScrapeCost{t}"))
        .collect();
    for topic in &topics {
        admin
            .create_topic(
                &config.cluster,
                &crate::admin::TopicSpec::new(topic, config.queues),
            )
            .await?;
        admin.wait_for_route(topic, Duration::from_secs(30)).await?;
    }
    let pairs: Vec<(String, String)> = (0..config.groups)
        .flat_map(|g| {
            topics
                .iter()
                .map(move |t| (format!("ScrapeCostGroup{g}"), t.clone()))
        })
        .collect();
    let admin = &admin;
    stream::iter(pairs)
        .map(|(group, topic)| async move {
            admin
                .reset_offsets(&group, &topic, crate::admin::ResetTo::Earliest)
                .await
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let after = scrape_sample(config).await?;
    Ok(ScrapeReport {
        before,
        after,
        rows: config.groups * config.topics,
    })
}

async fn scrape_sample(config: &ScrapeConfig) -> Result<ScrapeSample> {
    let cpu_before = config.broker_pid.and_then(process_cpu);
    let mut times = Vec::with_capacity(config.scrapes);
    let mut bytes = 0;
    for _ in 0..config.scrapes.max(1) {
        let started = Instant::now();
        let (status, body) = crate::http::get(&config.metrics_url, Duration::from_secs(30))
            .await
            .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        times.push(started.elapsed());
        if status != 200 {
            return Err(ClientError::InvalidArgument(format!(
                "{} answered HTTP {status}",
                config.metrics_url
            )));
        }
        bytes = body.len();
    }
    let cpu = match (cpu_before, config.broker_pid.and_then(process_cpu)) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) / times.len() as u32),
        _ => None,
    };
    times.sort();
    Ok(ScrapeSample {
        p50: times[times.len() / 2],
        max: times[times.len() - 1],
        bytes,
        cpu,
    })
}

/// CPU time `pid` has used, summed over its threads (`/proc/<pid>/task/*/schedstat`, in ns).
fn process_cpu(pid: u32) -> Option<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(total))
}
