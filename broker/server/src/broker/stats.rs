//! BrokerStats: the traffic counters `/metrics` and GET_BROKER_RUNTIME_INFO report. The send
//! and pull paths count, in total and per topic (RocketMQ 5's `rocketmq_messages_in_total`
//! by topic and message type, `rocketmq_messages_out_total` by topic and consumer group); the
//! probes and admin only read snapshots.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use conveyor_protocol::message::{keys, Properties};

/// RocketMQ 5's message types (`TopicMessageType`), as the `message_type` label names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MessageType {
    /// Plain messages.
    Normal,
    /// Messages of a message group (`__SHARDINGKEY`): ordered.
    Fifo,
    /// Delay-level or timer messages.
    Delay,
    /// Transactional (half) messages.
    Transaction,
}

/// The property RocketMQ 5 clients put on messages of a message group (FIFO).
use conveyor_protocol::message::keys::SHARDING_KEY;

impl MessageType {
    /// The type of a message with these properties, as sent (RocketMQ's
    /// `TopicMessageType.parseFromMessageProperty`).
    pub fn of(properties: &Properties) -> Self {
        if properties.get(keys::TRANSACTION_PREPARED) == Some("true") {
            MessageType::Transaction
        } else if [
            keys::DELAY_TIME_LEVEL,
            keys::TIMER_DELIVER_MS,
            keys::TIMER_DELAY_SEC,
            keys::TIMER_DELAY_MS,
        ]
        .iter()
        .any(|k| properties.get(k).is_some())
        {
            MessageType::Delay
        } else if properties.get(SHARDING_KEY).is_some() {
            MessageType::Fifo
        } else {
            MessageType::Normal
        }
    }

    /// The label value, as RocketMQ 5's broker exports it (`TopicMessageType`'s metrics
    /// value, checked against Apache RocketMQ 5.3.3).
    pub fn as_str(self) -> &'static str {
        match self {
            MessageType::Normal => "normal",
            MessageType::Fifo => "fifo",
            MessageType::Delay => "delay",
            MessageType::Transaction => "transaction",
        }
    }
}

/// Messages and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Messages.
    pub messages: u64,
    /// Bytes of their records.
    pub bytes: u64,
}

impl Traffic {
    fn add(&mut self, messages: usize, bytes: usize) {
        self.messages += messages as u64;
        self.bytes += bytes as u64;
    }
}

/// The entry of `key` in `map`, created the first time only (looked up by `&str`, so the
/// common case allocates nothing).
fn traffic_of<'a, V: Default>(map: &'a mut HashMap<String, V>, key: &str) -> &'a mut V {
    if !map.contains_key(key) {
        map.insert(key.to_string(), V::default());
    }
    map.get_mut(key).expect("inserted above")
}

/// (topic, second key as a label, traffic) rows of a two-level map.
fn flatten<K>(
    map: &HashMap<String, HashMap<K, Traffic>>,
    label: impl Fn(&K) -> String,
) -> Vec<(String, String, Traffic)> {
    let label = &label;
    map.iter()
        .flat_map(|(topic, by)| by.iter().map(move |(k, t)| (topic.clone(), label(k), *t)))
        .collect()
}

/// Messages and bytes in and out since the broker started, and how long sends and pull reads
/// take.
#[derive(Debug)]
pub struct BrokerStats {
    /// Messages stored by sends.
    messages_in: AtomicU64,
    /// Bytes of the records stored by sends.
    bytes_in: AtomicU64,
    /// Messages returned by pulls.
    messages_out: AtomicU64,
    /// Bytes of the records returned by pulls.
    bytes_out: AtomicU64,
    /// Stored, by topic, then by message type (bounded by the topic table's limit). Nested
    /// maps so that the send path looks a topic up by `&str`: no key is allocated but the
    /// first time a topic is seen.
    topics_in: Mutex<HashMap<String, HashMap<MessageType, Traffic>>>,
    /// Delivered, by topic, then by consumer group (bounded by the topic and group limits).
    topics_out: Mutex<HashMap<String, HashMap<String, Traffic>>>,
    /// Time from a send's dispatch to its answer (durability waits included), in seconds.
    send_latency: prometheus::Histogram,
    /// Time to read one pull's records from the store, in seconds.
    read_latency: prometheus::Histogram,
    /// Counter samples of the last minute, for rates (see [`BrokerStats::sample`]).
    samples: Mutex<VecDeque<(Instant, Counts)>>,
}

/// The window rates are computed over, as RocketMQ's per-minute broker statistics.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);

/// Messages in and out, in total and by topic (and group), at one moment.
#[derive(Debug, Clone, Default)]
struct Counts {
    /// Messages stored.
    messages_in: u64,
    /// Messages delivered.
    messages_out: u64,
    /// Stored, by topic.
    by_topic: HashMap<String, u64>,
    /// Delivered, by (topic, group).
    by_group: HashMap<(String, String), u64>,
}

/// Messages per second over the last minute (or since the oldest sample, if younger).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rates {
    /// Stored per second.
    pub messages_in: f64,
    /// Delivered per second.
    pub messages_out: f64,
    /// Stored per second, by topic.
    pub by_topic: Vec<(String, f64)>,
    /// Delivered per second, by topic and group.
    pub by_group: Vec<(String, String, f64)>,
}

/// Buckets of the latency histograms, in seconds: 50 µs to 5 s.
const LATENCY_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0,
];

fn histogram(name: &str, help: &str) -> prometheus::Histogram {
    prometheus::Histogram::with_opts(
        prometheus::HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()),
    )
    .expect("constant, valid histogram options")
}

impl Default for BrokerStats {
    fn default() -> Self {
        Self {
            messages_in: AtomicU64::default(),
            bytes_in: AtomicU64::default(),
            messages_out: AtomicU64::default(),
            bytes_out: AtomicU64::default(),
            topics_in: Mutex::default(),
            topics_out: Mutex::default(),
            send_latency: histogram(
                "conveyor_send_latency_seconds",
                "Time from a send's dispatch to its answer, durability waits included.",
            ),
            read_latency: histogram(
                "conveyor_pull_read_latency_seconds",
                "Time to read one pull's records from the store.",
            ),
            samples: Mutex::default(),
        }
    }
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Messages stored by sends.
    pub messages_in: u64,
    /// Bytes of the records stored by sends.
    pub bytes_in: u64,
    /// Messages returned by pulls.
    pub messages_out: u64,
    /// Bytes of the records returned by pulls.
    pub bytes_out: u64,
}

impl BrokerStats {
    /// Counts messages of `topic` stored by one send.
    pub fn record_in(&self, topic: &str, kind: MessageType, messages: usize, bytes: usize) {
        self.messages_in
            .fetch_add(messages as u64, Ordering::Relaxed);
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
        let mut topics = self.topics_in.lock().unwrap_or_else(|e| e.into_inner());
        traffic_of(&mut topics, topic)
            .entry(kind)
            .or_default()
            .add(messages, bytes);
    }

    /// Counts messages of `topic` delivered to `group` by one pull.
    pub fn record_out(&self, topic: &str, group: &str, messages: usize, bytes: usize) {
        self.messages_out
            .fetch_add(messages as u64, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
        let mut topics = self.topics_out.lock().unwrap_or_else(|e| e.into_inner());
        traffic_of(traffic_of(&mut topics, topic), group).add(messages, bytes);
    }

    /// One send took `elapsed`.
    pub fn observe_send(&self, elapsed: Duration) {
        self.send_latency.observe(elapsed.as_secs_f64());
    }

    /// One pull's read took `elapsed`.
    pub fn observe_read(&self, elapsed: Duration) {
        self.read_latency.observe(elapsed.as_secs_f64());
    }

    /// The latency histograms (sharing their counts with these stats), for export.
    pub fn latencies(&self) -> [prometheus::Histogram; 2] {
        [self.send_latency.clone(), self.read_latency.clone()]
    }

    /// Stored traffic as (topic, message type, traffic).
    pub fn topics_in(&self) -> Vec<(String, String, Traffic)> {
        let topics = self.topics_in.lock().unwrap_or_else(|e| e.into_inner());
        flatten(&topics, |kind| kind.as_str().to_string())
    }

    /// Delivered traffic as (topic, consumer group, traffic).
    pub fn topics_out(&self) -> Vec<(String, String, Traffic)> {
        let topics = self.topics_out.lock().unwrap_or_else(|e| e.into_inner());
        flatten(&topics, String::clone)
    }

    fn counts(&self) -> Counts {
        let by_topic = {
            let topics = self.topics_in.lock().unwrap_or_else(|e| e.into_inner());
            topics
                .iter()
                .map(|(t, by)| (t.clone(), by.values().map(|x| x.messages).sum()))
                .collect()
        };
        let by_group = {
            let topics = self.topics_out.lock().unwrap_or_else(|e| e.into_inner());
            topics
                .iter()
                .flat_map(|(t, by)| {
                    by.iter()
                        .map(move |(g, x)| ((t.clone(), g.clone()), x.messages))
                })
                .collect()
        };
        Counts {
            messages_in: self.messages_in.load(Ordering::Relaxed),
            messages_out: self.messages_out.load(Ordering::Relaxed),
            by_topic,
            by_group,
        }
    }

    /// Keeps a sample of the counters taken `now` (called every few seconds), forgetting
    /// those older than the rate window.
    pub fn sample(&self, now: Instant) {
        let counts = self.counts();
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.push_back((now, counts));
        while samples
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW)
        {
            samples.pop_front();
        }
    }

    /// Rates at `now` against the oldest sample of the window (none yet: no rates).
    pub fn rates(&self, now: Instant) -> Rates {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let Some((t0, then)) = samples.front() else {
            return Rates::default();
        };
        let secs = now.duration_since(*t0).as_secs_f64();
        if secs < 1.0 {
            return Rates::default();
        }
        let counts = self.counts();
        let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
        Rates {
            messages_in: rate(counts.messages_in, then.messages_in),
            messages_out: rate(counts.messages_out, then.messages_out),
            by_topic: counts
                .by_topic
                .iter()
                .map(|(t, n)| {
                    (
                        t.clone(),
                        rate(*n, then.by_topic.get(t).copied().unwrap_or(0)),
                    )
                })
                .collect(),
            by_group: counts
                .by_group
                .iter()
                .map(|(k, n)| {
                    let before = then.by_group.get(k).copied().unwrap_or(0);
                    (k.0.clone(), k.1.clone(), rate(*n, before))
                })
                .collect(),
        }
    }

    /// The current values.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            messages_in: self.messages_in.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            messages_out: self.messages_out.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_types_follow_rocketmqs_rules() {
        let with = |k: &str, v: &str| {
            let mut p = Properties::default();
            p.insert(k, v);
            p
        };
        assert_eq!(MessageType::of(&Properties::default()), MessageType::Normal);
        assert_eq!(
            MessageType::of(&with("TRAN_MSG", "true")),
            MessageType::Transaction
        );
        assert_eq!(MessageType::of(&with("DELAY", "3")), MessageType::Delay);
        assert_eq!(
            MessageType::of(&with("TIMER_DELAY_SEC", "9")),
            MessageType::Delay
        );
        assert_eq!(
            MessageType::of(&with("__SHARDINGKEY", "k")),
            MessageType::Fifo
        );
    }

    #[test]
    fn traffic_is_counted_in_total_and_per_topic() {
        let stats = BrokerStats::default();
        stats.record_in("T", MessageType::Normal, 2, 200);
        stats.record_in("T", MessageType::Normal, 1, 100);
        stats.record_in("T", MessageType::Delay, 1, 50);
        stats.record_out("T", "g", 3, 300);
        let s = stats.snapshot();
        assert_eq!((s.messages_in, s.bytes_in, s.messages_out), (4, 350, 3));
        let mut by_type = stats.topics_in();
        by_type.sort_by(|a, b| a.1.cmp(&b.1));
        let traffic = |messages, bytes| Traffic { messages, bytes };
        assert_eq!(
            by_type,
            vec![
                (
                    "T".into(),
                    MessageType::Delay.as_str().into(),
                    traffic(1, 50)
                ),
                (
                    "T".into(),
                    MessageType::Normal.as_str().into(),
                    traffic(3, 300)
                ),
            ]
        );
        assert_eq!(
            stats.topics_out(),
            vec![("T".into(), "g".into(), traffic(3, 300))]
        );
    }

    #[test]
    fn rates_are_over_the_oldest_sample_of_the_window() {
        let stats = BrokerStats::default();
        let t0 = Instant::now();
        assert_eq!(stats.rates(t0), Rates::default(), "no sample yet");
        stats.record_in("T", MessageType::Normal, 10, 100);
        stats.sample(t0);
        stats.record_in("T", MessageType::Normal, 20, 200);
        stats.record_out("T", "g", 40, 400);
        let r = stats.rates(t0 + Duration::from_secs(10));
        assert_eq!((r.messages_in, r.messages_out), (2.0, 4.0));
        assert_eq!(r.by_topic, vec![("T".to_string(), 2.0)]);
        assert_eq!(r.by_group, vec![("T".to_string(), "g".to_string(), 4.0)]);
        // Samples older than the window are forgotten.
        stats.sample(t0 + Duration::from_secs(30));
        stats.sample(t0 + Duration::from_secs(61));
        let r = stats.rates(t0 + Duration::from_secs(91));
        assert_eq!(r.messages_in, 0.0, "nothing since the sample at 30 s");
    }
}
