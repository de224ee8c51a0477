//! PopService: RocketMQ 5's Pop consumption, where the broker, not the client, decides which
//! queue a consumer reads and keeps what it delivered in flight until it is acknowledged.
//! The remoting POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME codes
//! ([`processor`]) and the gRPC endpoint's ReceiveMessage / AckMessage /
//! ChangeInvisibleDuration (which reach the broker through those codes) share this one state.
//!
//! How it works (RocketMQ's `PopMessageProcessor`, `AckMessageProcessor`,
//! `PopReviveService`):
//! - a pop reads a queue from the group's committed offset, appends a checkpoint record to the
//!   revive topic ([`record`]) and, for a concurrent group, commits the offset past the batch
//!   at once: the batch is now the checkpoint's to redeliver;
//! - an ack appends an ack record; the [`inflight`] table drops finished checkpoints;
//! - a checkpoint not acknowledged within its invisible time is *revived*: each message left
//!   is copied into the group's pop retry topic `%RETRY%<group>_<topic>` with one more
//!   reconsume time (or, past the group's `retryMaxTimes`, into `%DLQ%<group>`), then an ack
//!   record closes the checkpoint. Pops read that retry topic too;
//! - an orderly group (`consumeMessageOrderly`) has at most one batch in flight per queue, its
//!   offset moves only when the batch is acknowledged, and an expired batch is delivered again
//!   from the same queue with its attempt count raised (RocketMQ's `ConsumerOrderInfoManager`);
//! - the table is rebuilt at the start of every master term by replaying the revive log from
//!   the oldest record still in flight (saved as the revive group's consumer offset), so a
//!   restart or a promoted slave neither loses what was in flight nor delivers again what
//!   was acknowledged.

pub mod handle;
pub mod inflight;
pub mod processor;
pub mod record;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use conveyor_protocol::message::{keys, Properties, RecordView, StoredMessage};
use conveyor_protocol::time::now_ms;
use conveyor_store::{GetStatus, MessageStore, StoreError};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::durability::{Durability, NotDurable};
use super::filter::TagFilter;
use super::groups::SubscriptionGroupConfig;
use super::hold::PullHold;
use super::offsets::ConsumerOffsetManager;
use super::reader::QueueReader;
use super::register::NameServerRegistrar;
use super::retry;
use super::stats::BrokerStats;
use super::topics::{self, TopicConfigManager};
use handle::ReceiptHandle;
use inflight::{Acked, Checkpoint, CheckpointKey, InFlight};
use record::{AckBody, CheckpointBody, ReviveRecord, REVIVE_QUEUES};

/// The consumer group under which the revive log's replay start is saved (RocketMQ's
/// `PopAckConstants.REVIVE_GROUP`).
pub const REVIVE_GROUP: &str = "CID_RMQ_SYS_REVIVE_GROUP";
/// Most messages in flight over all groups: pops beyond it are refused (POLLING_FULL), so
/// consumers that never acknowledge cannot grow the broker's memory without end.
pub const MAX_IN_FLIGHT: usize = 1_000_000;
/// Most messages one pop returns (RocketMQ's limit for a pop's `maxMsgNums`).
pub const MAX_POP_BATCH: usize = 32;
/// Bytes one pop reads at most.
const MAX_POP_BYTES: usize = 4 << 20;
/// Shortest and longest invisible time (RocketMQ's proxy: 10 s … 12 h for receives; the
/// broker itself takes any positive value, changes may go down to 0).
pub const MAX_INVISIBLE_MS: i64 = 12 * 3600 * 1000;
/// Longest long-poll a pop may ask for.
const MAX_POLL: Duration = Duration::from_secs(60);
/// How often the revive loop looks even when nothing woke it.
const REVIVE_TICK: Duration = Duration::from_millis(500);
/// Checkpoints revived per round.
const REVIVE_BATCH: usize = 256;

/// `%RETRY%<group>_<topic>`: the pop retry topic of a group's topic (RocketMQ's
/// `KeyBuilder.buildPopRetryTopic`, V1 naming).
pub fn pop_retry_topic(group: &str, topic: &str) -> String {
    format!("{}{group}_{topic}", topics::RETRY_GROUP_TOPIC_PREFIX)
}

/// Where a new group starts on a queue it never committed on (RocketMQ's `ConsumeInitMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitMode {
    /// From the queue's first message.
    Min,
    /// From the queue's end; from its start while the queue's first message is still in
    /// memory (a new topic's first consumers get everything, as in RocketMQ).
    Max,
}

/// One pop.
#[derive(Debug, Clone)]
pub struct PopRequest {
    /// The consumer group.
    pub group: SubscriptionGroupConfig,
    /// The topic.
    pub topic: String,
    /// The queue, or `None` for any readable queue of the topic (the broker balances).
    pub queue_id: Option<i32>,
    /// Most messages to return.
    pub max: usize,
    /// How long the messages stay invisible (ms).
    pub invisible_ms: i64,
    /// How long to wait for messages when there are none.
    pub poll: Duration,
    /// Which messages the consumer wants.
    pub filter: TagFilter,
    /// Deliver orderly (the group's flag, or the request's `order`).
    pub orderly: bool,
    /// Where a new group starts.
    pub init_mode: InitMode,
}

/// One message popped.
#[derive(Debug, Clone)]
pub struct Popped {
    /// The record as stored.
    pub record: Bytes,
    /// The topic it was read from (the topic, or the group's pop retry topic).
    pub topic: String,
    /// Its receipt handle.
    pub handle: ReceiptHandle,
    /// Orderly redeliveries before this one (0 on the first delivery).
    pub attempts: i32,
}

/// What a pop returned.
#[derive(Debug, Clone, Default)]
pub struct PopBatch {
    /// Pop time of the batch (ms).
    pub pop_time: i64,
    /// Messages, per queue in offset order.
    pub messages: Vec<Popped>,
    /// Messages left in the queues read (RocketMQ's `restNum`).
    pub rest: i64,
}

/// Why a pop, an ack or a change of invisible time failed.
#[derive(Debug, thiserror::Error)]
pub enum PopError {
    /// This broker is not the master of its group (or is still replaying the revive log).
    #[error(
        "this broker is not serving pops now (not master, or its pop state is loading); retry"
    )]
    NotServing,
    /// Too many messages are in flight.
    #[error("{0} messages are in flight on this broker (at most {MAX_IN_FLIGHT}); acknowledge some first")]
    Full(usize),
    /// The handle names a batch this broker never had, or one already revived.
    #[error("the receipt handle is expired or unknown: {0}")]
    Expired(String),
    /// The handle is not a handle.
    #[error(transparent)]
    Handle(#[from] handle::InvalidHandle),
    /// A store failure.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The pop state was written but is not durable (SYNC flush timed out, slaves missing).
    #[error("the pop state is stored but not durable: {0}")]
    NotDurable(NotDurable),
}

/// What the pop service needs from the rest of the broker.
pub struct PopDeps {
    /// Messages and revive records.
    pub store: Arc<MessageStore>,
    /// When revive records and retry copies count as written.
    pub durability: Arc<Durability>,
    /// Topics (queue counts, retry and DLQ topics created here).
    pub topics: Arc<TopicConfigManager>,
    /// Committed offsets.
    pub offsets: Arc<ConsumerOffsetManager>,
    /// Long polling (woken by the dispatcher).
    pub hold: Arc<PullHold>,
    /// Reads records off the runtime workers.
    pub reader: Arc<QueueReader>,
    /// Counts delivered messages.
    pub stats: Arc<BrokerStats>,
    /// Told when a retry or DLQ topic was created.
    pub registrar: Arc<NameServerRegistrar>,
}

/// The Pop state and its services.
pub struct PopService {
    /// Messages and revive records.
    store: Arc<MessageStore>,
    /// When revive records and retry copies count as written.
    durability: Arc<Durability>,
    /// Topics.
    topics: Arc<TopicConfigManager>,
    /// Committed offsets.
    offsets: Arc<ConsumerOffsetManager>,
    /// Long polling.
    hold: Arc<PullHold>,
    /// Reads records.
    reader: Arc<QueueReader>,
    /// Counts delivered messages.
    stats: Arc<BrokerStats>,
    /// Told when a retry or DLQ topic was created.
    registrar: Arc<NameServerRegistrar>,
    /// The broker group's name (in receipt handles).
    broker_name: String,
    /// STOREHOST of revive records and copies.
    store_host: SocketAddr,
    /// `rmq_sys_REVIVE_LOG_<cluster>`.
    revive_topic: String,
    /// What is in flight.
    state: Mutex<InFlight>,
    /// True while this broker serves pops: a master whose replay finished.
    serving: AtomicBool,
    /// Queues being popped right now ((group, topic, queue)): two pops of one queue at once
    /// would read the same offsets, so the second skips it (RocketMQ's queue lock).
    busy: Mutex<HashSet<(String, String, i32)>>,
    /// Woken when an orderly queue is released or a retry copy is due, for held pops.
    released: Arc<Notify>,
    /// Woken when a checkpoint with an earlier revive time arrives.
    revive_wake: Notify,
    /// Where the next pop of "any queue" starts (spreads consumers over the queues).
    cursor: AtomicUsize,
}

impl PopService {
    /// The service, not serving until [`PopService::run`] replayed the revive log.
    pub fn new(deps: PopDeps, cluster: &str, broker_name: &str, store_host: SocketAddr) -> Self {
        let revive_topic = record::revive_topic(cluster);
        deps.topics.ensure(&revive_topic, REVIVE_QUEUES);
        Self {
            store: deps.store,
            durability: deps.durability,
            topics: deps.topics,
            offsets: deps.offsets,
            hold: deps.hold,
            reader: deps.reader,
            stats: deps.stats,
            registrar: deps.registrar,
            broker_name: broker_name.to_string(),
            store_host,
            revive_topic,
            state: Mutex::new(InFlight::default()),
            serving: AtomicBool::new(false),
            busy: Mutex::new(HashSet::new()),
            released: Arc::new(Notify::new()),
            revive_wake: Notify::new(),
            cursor: AtomicUsize::new(0),
        }
    }

    /// The broker group's name.
    pub fn broker_name(&self) -> &str {
        &self.broker_name
    }

    /// Messages of `group` on `topic` popped and not acknowledged (its retry topic's
    /// included): RocketMQ counts them as the group's in-flight messages.
    pub fn in_flight(&self, group: &str, topic: &str) -> usize {
        let s = self.lock();
        s.messages_of(group, topic) + s.messages_of(group, &pop_retry_topic(group, topic))
    }

    /// Messages popped beyond the committed offsets and not acknowledged, per queue (for the
    /// lag in metrics and admin requests).
    pub fn popped(&self) -> crate::broker::lag::Popped {
        self.lock().popped()
    }

    fn lock(&self) -> MutexGuard<'_, InFlight> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_serving(&self) -> Result<(), PopError> {
        if self.serving.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(PopError::NotServing)
        }
    }

    /// Pops messages, waiting up to `req.poll` when there are none.
    pub async fn pop(
        &self,
        req: &PopRequest,
        stopping: &CancellationToken,
    ) -> Result<PopBatch, PopError> {
        let deadline = Instant::now() + req.poll.min(MAX_POLL);
        loop {
            self.check_serving()?;
            let in_flight = self.lock().messages();
            if in_flight >= MAX_IN_FLIGHT {
                return Err(PopError::Full(in_flight));
            }
            let queues = self.queues_to_read(req);
            let arrival = self.arrival(req, &queues, true);
            let batch = self.pop_once(req, &queues).await?;
            if !batch.messages.is_empty() || Instant::now() >= deadline {
                return Ok(batch);
            }
            if !arrival.wait(deadline, stopping).await {
                // Timed out (or stopping): one last look.
                return self.pop_once(req, &queues).await;
            }
        }
    }

    /// A wait for the next message on the queues `req` reads (`queues`) and, with
    /// `released`, for an orderly queue being released, registered now: made before a read,
    /// it also sees what arrives between the read and the wait. A concurrent group whose
    /// retry topic does not exist yet waits on it too: the first revive creates it, and a pop
    /// already waiting must wake for that redelivery (RocketMQ's revive notifies the waiting
    /// pops of the original topic) instead of holding until its poll ends.
    fn arrival(&self, req: &PopRequest, queues: &[(String, i32, bool)], released: bool) -> Arrival {
        let mut waits: Vec<_> = queues
            .iter()
            .map(|(t, q, _)| Box::pin(self.hold.notifier(t, *q).notified_owned()))
            .collect();
        if !req.orderly && !queues.iter().any(|(_, _, retry)| *retry) {
            let retry_topic = pop_retry_topic(&req.group.group_name, &req.topic);
            waits.push(Box::pin(
                self.hold.notifier(&retry_topic, 0).notified_owned(),
            ));
        }
        if released {
            waits.push(Box::pin(self.released.clone().notified_owned()));
        }
        for w in &mut waits {
            w.as_mut().enable();
        }
        Arrival(waits)
    }

    /// The queues a pop reads, in order: (topic, queue, from the retry topic).
    fn queues_to_read(&self, req: &PopRequest) -> Vec<(String, i32, bool)> {
        let retry_topic = pop_retry_topic(&req.group.group_name, &req.topic);
        let retry: Vec<(String, i32, bool)> = self
            .topics
            .get(&retry_topic)
            .map(|c| {
                (0..c.read_queue_nums.max(0))
                    .map(|q| (retry_topic.clone(), q, true))
                    .collect()
            })
            .unwrap_or_default();
        let normal: Vec<(String, i32, bool)> = match req.queue_id {
            Some(q) => vec![(req.topic.clone(), q, false)],
            None => {
                let n = self
                    .topics
                    .get(&req.topic)
                    .map_or(0, |c| c.read_queue_nums.max(0));
                let start = self.cursor.fetch_add(1, Ordering::Relaxed);
                (0..n)
                    .map(|i| {
                        (
                            req.topic.clone(),
                            ((start + i as usize) % n as usize) as i32,
                            false,
                        )
                    })
                    .collect()
            }
        };
        // Orderly groups redeliver in place; their retry topic stays unused. Otherwise one
        // pop in five reads the retry topic first (RocketMQ's 20 %), so retries are not
        // starved by a busy topic, and every pop reads it when the topic had too little.
        if req.orderly {
            normal
        } else if rand::Rng::random_ratio(&mut rand::rng(), 1, 5) {
            retry.into_iter().chain(normal).collect()
        } else {
            normal.into_iter().chain(retry).collect()
        }
    }

    /// One pass over the queues, until `req.max` messages are found.
    async fn pop_once(
        &self,
        req: &PopRequest,
        queues: &[(String, i32, bool)],
    ) -> Result<PopBatch, PopError> {
        let pop_time = now_ms();
        let mut batch = PopBatch {
            pop_time,
            ..PopBatch::default()
        };
        for (topic, queue_id, retry) in queues {
            let room = req.max.saturating_sub(batch.messages.len());
            if room == 0 {
                break;
            }
            let rest = self
                .pop_queue(
                    req,
                    topic,
                    *queue_id,
                    *retry,
                    room,
                    pop_time,
                    &mut batch.messages,
                )
                .await?;
            batch.rest += rest;
        }
        Ok(batch)
    }

    /// Where the group reads a queue next.
    fn next_offset(
        &self,
        group: &str,
        topic: &str,
        queue_id: i32,
        init: InitMode,
        retry: bool,
    ) -> i64 {
        if let Some(o) = self.offsets.query(group, topic, queue_id) {
            return o;
        }
        let min = self.store.min_offset(topic, queue_id);
        let offset = if init == InitMode::Min || retry {
            min
        } else if min <= 0 && self.store.is_resident(topic, queue_id, 0, 1, 1) {
            0
        } else {
            (self.store.max_offset(topic, queue_id) - 1).max(0)
        };
        self.offsets.commit(group, topic, queue_id, offset);
        offset
    }

    /// Pops up to `room` messages of one queue into `out`; returns the messages left there.
    #[allow(clippy::too_many_arguments)]
    async fn pop_queue(
        &self,
        req: &PopRequest,
        topic: &str,
        queue_id: i32,
        retry: bool,
        room: usize,
        pop_time: i64,
        out: &mut Vec<Popped>,
    ) -> Result<i64, PopError> {
        let group = req.group.group_name.as_str();
        let Some(_busy) = BusyQueue::take(&self.busy, group, topic, queue_id) else {
            return Ok(0);
        };
        // An orderly queue with a batch in flight gives nothing; one whose batch expired
        // gives that batch again, each message's attempt raised.
        let mut superseded: Option<Checkpoint> = None;
        if req.orderly {
            let mut s = self.lock();
            if s.is_locked(group, topic, queue_id, pop_time) {
                return Ok(0);
            }
            if let Some(old) = s.lock_holder(group, topic, queue_id).map(|c| c.key.clone()) {
                superseded = s.remove(&old);
            }
        }
        let mut start = self.next_offset(group, topic, queue_id, req.init_mode, retry);
        let mut r = self
            .reader
            .read(topic, queue_id, start, room, MAX_POP_BYTES, &req.filter)
            .await?;
        if matches!(
            r.status,
            GetStatus::OffsetTooSmall | GetStatus::OffsetOverflowBadly
        ) {
            // Retention removed the group's position, or it lies past the end: start over at
            // the queue's valid range, as RocketMQ corrects a pop offset.
            start = r.next_begin_offset;
            self.offsets.commit(group, topic, queue_id, start);
            r = self
                .reader
                .read(topic, queue_id, start, room, MAX_POP_BYTES, &req.filter)
                .await?;
        }
        let rest = (r.max_offset - r.next_begin_offset).max(0);
        let earlier: HashMap<i64, i32> = superseded
            .as_ref()
            .map(|c| {
                c.offsets
                    .iter()
                    .copied()
                    .zip(c.attempts.iter().copied())
                    .collect()
            })
            .unwrap_or_default();
        let mut offsets = Vec::new();
        let mut attempts = Vec::new();
        let mut records = Vec::new();
        let mut dead = Vec::new();
        for (record, offset) in r.messages.iter().zip(&r.queue_offsets) {
            let attempt = earlier.get(offset).map_or(0, |a| a + 1);
            if req.orderly && attempt > 0 {
                let reconsumed = RecordView::parse(record).map_or(0, |v| v.reconsume_times());
                if reconsumed + attempt > req.group.retry_max_times {
                    dead.push(Bytes::copy_from_slice(record));
                    continue;
                }
            }
            offsets.push(*offset);
            attempts.push(attempt);
            records.push(Bytes::copy_from_slice(record));
        }
        let mut revive_records = Vec::new();
        if let Some(old) = &superseded {
            let left: Vec<i64> = old.unacked().map(|(o, _)| o).collect();
            if !left.is_empty() {
                revive_records.push(ReviveRecord::Ack(AckBody::of(&old.key, left)));
            }
        }
        for record in &dead {
            self.move_to_dlq(group, record).await?;
        }
        if offsets.is_empty() {
            // Nothing to deliver: filtered out, moved to the DLQ, or the queue is drained.
            if !revive_records.is_empty() {
                self.append_revive(queue_id, &revive_records)?;
            }
            if r.next_begin_offset > start {
                self.offsets
                    .commit(group, topic, queue_id, r.next_begin_offset);
            }
            if superseded.is_some() {
                self.released.notify_waiters();
            }
            return Ok(rest);
        }
        let revive_qid = queue_id.rem_euclid(REVIVE_QUEUES);
        let mut ck = Checkpoint {
            key: CheckpointKey {
                group: group.to_string(),
                topic: topic.to_string(),
                queue_id,
                start_offset: start,
                pop_time,
            },
            invisible_ms: req.invisible_ms,
            revive_qid,
            revive_offset: 0,
            offsets: offsets.clone(),
            attempts: attempts.clone(),
            acked: Default::default(),
            orderly: req.orderly,
        };
        revive_records.push(ReviveRecord::Checkpoint(CheckpointBody::of(&ck)));
        let (placed, end) = self.append_revive(queue_id, &revive_records)?;
        ck.revive_offset = placed;
        let earlier_revive = {
            let mut s = self.lock();
            let earlier = s.next_revive_time().is_none_or(|t| ck.revive_time() < t);
            s.insert(ck);
            earlier
        };
        if earlier_revive {
            self.revive_wake.notify_one();
        }
        if !req.orderly {
            self.offsets
                .commit(group, topic, queue_id, r.next_begin_offset);
        }
        self.durability
            .wait(end)
            .await
            .map_err(PopError::NotDurable)?;
        let bytes: usize = records.iter().map(|r| r.len()).sum();
        self.stats.record_out(topic, group, records.len(), bytes);
        for ((record, offset), attempt) in records.into_iter().zip(offsets).zip(attempts) {
            out.push(Popped {
                record,
                topic: topic.to_string(),
                handle: ReceiptHandle {
                    start_offset: start,
                    pop_time,
                    invisible_ms: req.invisible_ms,
                    revive_qid,
                    retry,
                    broker_name: self.broker_name.clone(),
                    queue_id,
                    offset,
                },
                attempts: attempt,
            });
        }
        Ok(rest)
    }

    /// Up to `max` messages from the group's position on `queues` of `topic`, without
    /// popping them (PEEK_MESSAGE); also the messages left there.
    pub async fn peek(
        &self,
        group: &str,
        topic: &str,
        queues: &[i32],
        max: usize,
    ) -> Result<(Vec<Bytes>, i64), PopError> {
        let all = TagFilter::parse("*");
        let (mut records, mut rest) = (Vec::new(), 0);
        for q in queues {
            let start = self
                .offsets
                .query(group, topic, *q)
                .unwrap_or_else(|| self.store.min_offset(topic, *q));
            let room = max.saturating_sub(records.len());
            if room == 0 {
                rest += (self.store.max_offset(topic, *q) - start).max(0);
                continue;
            }
            let r = self
                .reader
                .read(topic, *q, start, room, MAX_POP_BYTES, &all)
                .await?;
            rest += (r.max_offset - r.next_begin_offset).max(0);
            records.extend(r.messages.iter().map(|m| Bytes::copy_from_slice(m)));
        }
        Ok((records, rest))
    }

    /// True once the group has messages to pop on `topic` (`queue_id`, or any queue, its pop
    /// retry topic included), waiting up to `poll` (NOTIFICATION).
    pub async fn wait_for_messages(
        &self,
        group: &SubscriptionGroupConfig,
        topic: &str,
        queue_id: Option<i32>,
        poll: Duration,
        stopping: &CancellationToken,
    ) -> bool {
        let req = PopRequest {
            group: group.clone(),
            topic: topic.to_string(),
            queue_id,
            max: 1,
            invisible_ms: 0,
            poll,
            filter: TagFilter::parse("*"),
            orderly: false,
            init_mode: InitMode::Max,
        };
        let deadline = Instant::now() + poll.min(MAX_POLL);
        loop {
            let queues = self.queues_to_read(&req);
            let arrival = self.arrival(&req, &queues, false);
            let has = queues.iter().any(|(t, q, _)| {
                let next = self
                    .offsets
                    .query(&group.group_name, t, *q)
                    .unwrap_or_else(|| self.store.min_offset(t, *q));
                self.store.max_offset(t, *q) > next
            });
            if has || Instant::now() >= deadline || queues.is_empty() {
                return has;
            }
            if !arrival.wait(deadline, stopping).await {
                return false;
            }
        }
    }

    /// The checkpoint a handle names.
    fn key_of(&self, group: &str, topic: &str, h: &ReceiptHandle) -> CheckpointKey {
        CheckpointKey {
            group: group.to_string(),
            // The remoting client names the retry topic itself; the gRPC SDKs the topic.
            topic: if h.retry && !topic.starts_with(topics::RETRY_GROUP_TOPIC_PREFIX) {
                pop_retry_topic(group, topic)
            } else {
                topic.to_string()
            },
            queue_id: h.queue_id,
            start_offset: h.start_offset,
            pop_time: h.pop_time,
        }
    }

    /// Acknowledges one message. `Ok(false)`: it was acknowledged before. A handle whose
    /// batch is gone (revived, or from another broker) is [`PopError::Expired`].
    pub async fn ack(&self, group: &str, topic: &str, h: &ReceiptHandle) -> Result<bool, PopError> {
        self.check_serving()?;
        let named = self.key_of(group, topic, h);
        let (key, outcome, released) = {
            let mut s = self.lock();
            let Some(key) = s.resolve(&named, h.offset) else {
                return Err(PopError::Expired(h.to_string()));
            };
            let outcome = s.ack(&key, h.offset);
            // A finished orderly batch unlocks its queue and moves the group's offset past it
            // in one step under the table's lock: a pop between the two would read the batch
            // again from the old offset, as a first delivery.
            let released = match &outcome {
                Acked::Now {
                    finished: Some(done),
                } if done.orderly => {
                    self.offsets
                        .commit(&key.group, &key.topic, key.queue_id, done.end_offset());
                    true
                }
                _ => false,
            };
            (key, outcome, released)
        };
        match outcome {
            Acked::Unknown => Err(PopError::Expired(h.to_string())),
            Acked::Already => Ok(false),
            Acked::Now { .. } => {
                let record = ReviveRecord::Ack(AckBody::of(&key, vec![h.offset]));
                let (_, end) = self.append_revive(h.queue_id, &[record])?;
                if released {
                    self.released.notify_waiters();
                }
                self.durability
                    .wait(end)
                    .await
                    .map_err(PopError::NotDurable)?;
                Ok(true)
            }
        }
    }

    /// Gives one message a new invisible time from now and returns its new handle. A message
    /// of a concurrent group gets a checkpoint of its own and is acknowledged in the old one
    /// (RocketMQ's `ChangeInvisibleTimeProcessor`); an orderly batch keeps its one checkpoint,
    /// so its one lock on the queue, and the whole batch gets the new time (RocketMQ moves the
    /// order lock's visible time): every receipt handle of the batch stays valid, and the new
    /// handle keeps the batch's start and pop time, its invisible time counted from that pop.
    pub async fn change_invisible(
        &self,
        group: &str,
        topic: &str,
        h: &ReceiptHandle,
        invisible_ms: i64,
    ) -> Result<ReceiptHandle, PopError> {
        self.check_serving()?;
        let key = self.key_of(group, topic, h);
        let now = now_ms();
        let (handle, end, earlier) = {
            let mut s = self.lock();
            let Some(key) = s.resolve(&key, h.offset) else {
                return Err(PopError::Expired(h.to_string()));
            };
            let Some(old) = s.get(&key) else {
                return Err(PopError::Expired(h.to_string()));
            };
            let Some(index) = old.offsets.iter().position(|o| *o == h.offset) else {
                return Err(PopError::Expired(h.to_string()));
            };
            if old.acked.contains(&h.offset) {
                return Err(PopError::Expired(h.to_string()));
            }
            let (ck, records) = if old.orderly {
                let mut ck = old.clone();
                ck.invisible_ms = now
                    .saturating_sub(key.pop_time)
                    .saturating_add(invisible_ms);
                let records = vec![ReviveRecord::Checkpoint(CheckpointBody::of(&ck))];
                (ck, records)
            } else {
                let mut ck = Checkpoint {
                    key: CheckpointKey {
                        start_offset: h.offset,
                        pop_time: now,
                        ..key.clone()
                    },
                    invisible_ms,
                    revive_qid: old.revive_qid,
                    revive_offset: 0,
                    offsets: vec![h.offset],
                    attempts: vec![old.attempts[index]],
                    acked: Default::default(),
                    orderly: false,
                };
                if s.get(&ck.key).is_some() {
                    // Changed twice in the same millisecond: the new key must differ.
                    ck.key.pop_time += 1;
                }
                let records = vec![
                    ReviveRecord::Checkpoint(CheckpointBody::of(&ck)),
                    ReviveRecord::Ack(AckBody::of(&key, vec![h.offset])),
                ];
                (ck, records)
            };
            // Appended under the table's lock: an ack of the old handle racing this change either
            // comes first (the change then finds it acknowledged) or after (it finds it gone).
            let (placed, end) = self.append_revive(h.queue_id, &records)?;
            let handle = ReceiptHandle {
                start_offset: ck.key.start_offset,
                pop_time: ck.key.pop_time,
                invisible_ms: ck.invisible_ms,
                ..h.clone()
            };
            let earlier = s.next_revive_time().is_none_or(|t| ck.revive_time() < t);
            if ck.orderly {
                s.set_invisible(&key, ck.invisible_ms);
            } else {
                let mut ck = ck;
                ck.revive_offset = placed;
                s.insert(ck);
                s.ack(&key, h.offset);
            }
            (handle, end, earlier)
        };
        if earlier {
            self.revive_wake.notify_one();
        }
        self.durability
            .wait(end)
            .await
            .map_err(PopError::NotDurable)?;
        Ok(handle)
    }

    /// Appends revive records to the revive queue of `queue_id`; returns the queue offset of
    /// the last record and the log's end after them.
    fn append_revive(
        &self,
        queue_id: i32,
        records: &[ReviveRecord],
    ) -> Result<(i64, u64), StoreError> {
        let qid = queue_id.rem_euclid(REVIVE_QUEUES);
        let messages: Vec<StoredMessage> = records
            .iter()
            .map(|r| {
                let (tag, body) = r.encode();
                self.system_message(&self.revive_topic, qid, tag, Bytes::from(body))
            })
            .collect();
        let (placed, _) = self.store.append(&messages)?;
        Ok(placed
            .last()
            .map_or((0, self.store.commit_log_max_offset()), |p| {
                (p.queue_offset, p.physical_offset + p.size as u64)
            }))
    }

    fn system_message(&self, topic: &str, queue_id: i32, tag: &str, body: Bytes) -> StoredMessage {
        let mut properties = Properties::new();
        properties.insert(keys::TAGS, tag);
        StoredMessage {
            topic: topic.to_string(),
            queue_id,
            flag: 0,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: 0,
            born_timestamp: now_ms(),
            born_host: self.store_host,
            store_timestamp: 0,
            store_host: self.store_host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body,
            properties,
        }
    }

    /// Serves pops during one master term: replays the revive log, then revives expired
    /// batches until `stop`. Pops, acks and changes are refused before the replay finished
    /// and after the term ended.
    pub async fn run(
        self: Arc<Self>,
        groups: Arc<super::groups::SubscriptionGroupManager>,
        stop: CancellationToken,
    ) {
        let replayed = {
            let me = self.clone();
            tokio::task::spawn_blocking(move || me.replay()).await
        };
        match replayed {
            Ok(Ok(n)) => tracing::info!(in_flight = n, "pop state replayed from the revive log"),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "replaying the revive log failed; pops are not served");
                stop.cancelled().await;
                return;
            }
            Err(_) => return,
        }
        self.serving.store(true, Ordering::Release);
        loop {
            let next = self.lock().next_revive_time();
            let wait =
                next.map_or(REVIVE_TICK, |t| {
                    Duration::from_millis(
                        (t - now_ms()).clamp(0, REVIVE_TICK.as_millis() as i64) as u64
                    )
                });
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.revive_wake.notified() => continue,
                _ = stop.cancelled() => break,
            }
            if let Err(e) = self.revive_due(&groups).await {
                tracing::warn!(error = %e, "reviving expired pops failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.cancelled() => break,
                }
            }
            self.save_replay_start();
        }
        self.serving.store(false, Ordering::Release);
        self.save_replay_start();
        self.lock().clear();
    }

    /// Rebuilds the table from the revive log; returns the messages in flight.
    fn replay(&self) -> Result<usize, StoreError> {
        let mut table = InFlight::default();
        let all = TagFilter::parse("*");
        for qid in 0..REVIVE_QUEUES {
            let mut offset = self
                .offsets
                .query(REVIVE_GROUP, &self.revive_topic, qid)
                .unwrap_or(0)
                .max(self.store.min_offset(&self.revive_topic, qid));
            loop {
                let r = self.store.get_messages_cold(
                    &self.revive_topic,
                    qid,
                    offset,
                    1024,
                    8 << 20,
                    &all,
                )?;
                if r.messages.is_empty() {
                    if r.next_begin_offset > offset {
                        offset = r.next_begin_offset;
                        continue;
                    }
                    break;
                }
                for (m, at) in r.messages.iter().zip(&r.queue_offsets) {
                    let Ok(view) = RecordView::parse(m) else {
                        continue;
                    };
                    match ReviveRecord::decode(view.property(keys::TAGS), view.body()) {
                        Ok(ReviveRecord::Checkpoint(c)) => {
                            let ck = c.into_checkpoint(qid, *at);
                            // A second record of a key is an orderly batch's new time.
                            if !table.set_invisible(&ck.key, ck.invisible_ms) {
                                table.insert(ck)
                            }
                        }
                        Ok(ReviveRecord::Ack(a)) => {
                            let key = a.key();
                            for o in a.offsets {
                                table.ack(&key, o);
                            }
                        }
                        Err(e) => {
                            tracing::warn!(qid, offset = at, error = %e, "revive record skipped")
                        }
                    }
                }
                offset = r.next_begin_offset;
            }
        }
        let n = table.messages();
        *self.lock() = table;
        Ok(n)
    }

    /// Saves where the next replay starts (the oldest checkpoint record still in flight).
    fn save_replay_start(&self) {
        let s = self.lock();
        for qid in 0..REVIVE_QUEUES {
            let end = self.store.max_offset(&self.revive_topic, qid);
            let start = s.replay_start(qid, end);
            if self.offsets.query(REVIVE_GROUP, &self.revive_topic, qid) != Some(start) {
                self.offsets
                    .commit(REVIVE_GROUP, &self.revive_topic, qid, start);
            }
        }
    }

    /// Revives the checkpoints whose invisible time passed.
    async fn revive_due(
        &self,
        groups: &super::groups::SubscriptionGroupManager,
    ) -> Result<(), PopError> {
        let due = self.lock().due(now_ms(), REVIVE_BATCH);
        let mut woke = false;
        for key in due {
            let Some(ck) = self.lock().get(&key).cloned() else {
                continue;
            };
            if ck.orderly {
                // Delivered again from its queue by the next pop; wake the pops waiting.
                if !woke {
                    self.released.notify_waiters();
                    woke = true;
                }
                continue;
            }
            let max = groups.get(&key.group).map_or(16, |g| g.retry_max_times);
            let left: Vec<i64> = ck.unacked().map(|(o, _)| o).collect();
            let mut end = 0;
            for offset in &left {
                if let Some(e) = self.revive_one(&key, *offset, max)? {
                    end = end.max(e);
                }
            }
            let (_, ack_end) =
                self.append_revive(key.queue_id, &[ReviveRecord::Ack(AckBody::of(&key, left))])?;
            self.durability
                .wait(end.max(ack_end))
                .await
                .map_err(PopError::NotDurable)?;
            self.lock().remove(&key);
        }
        Ok(())
    }

    /// Copies one expired message into the retry topic (or the DLQ); returns the log's end
    /// after the copy, `None` when the original is gone (retention) or unreadable.
    fn revive_one(
        &self,
        key: &CheckpointKey,
        offset: i64,
        max_reconsume: i32,
    ) -> Result<Option<u64>, PopError> {
        let Some(entry) = self.store.queue_entry(&key.topic, key.queue_id, offset) else {
            return Ok(None);
        };
        let Some(record) = self.store.message_at(entry.physical_offset) else {
            return Ok(None);
        };
        let to_dlq = RecordView::parse(&record).is_ok_and(|v| v.reconsume_times() >= max_reconsume);
        self.append_copy(&key.group, &record, to_dlq, key.pop_time)
    }

    /// Moves a record straight to the group's DLQ (an orderly message out of attempts).
    async fn move_to_dlq(&self, group: &str, record: &[u8]) -> Result<(), PopError> {
        if let Some(end) = self.append_copy(group, record, true, now_ms())? {
            self.durability
                .wait(end)
                .await
                .map_err(PopError::NotDurable)?;
        }
        Ok(())
    }

    /// Appends a copy of `record` for `group`: into its pop retry topic, or (`to_dlq`) its
    /// dead-letter queue, with one reconsume time more; returns the log's end after the copy,
    /// `None` when the record is unreadable.
    fn append_copy(
        &self,
        group: &str,
        record: &[u8],
        to_dlq: bool,
        first_pop_time: i64,
    ) -> Result<Option<u64>, PopError> {
        let Ok(mut msg) = RecordView::parse(record).and_then(|v| v.to_message()) else {
            return Ok(None);
        };
        let original = msg
            .properties
            .get(keys::RETRY_TOPIC)
            .map(str::to_string)
            .unwrap_or_else(|| msg.topic.clone());
        let destination = if to_dlq {
            topics::dlq_topic(group)
        } else {
            pop_retry_topic(group, &original)
        };
        let origin = msg
            .properties
            .get(keys::ORIGIN_MESSAGE_ID)
            .map_or_else(|| msg.msg_id(), str::to_string);
        retry::mark_redelivery(&mut msg, &original, origin, to_dlq);
        if msg.properties.get(keys::FIRST_POP_TIME).is_none() {
            msg.properties
                .insert(keys::FIRST_POP_TIME, first_pop_time.to_string());
        }
        let (_, created) = self.topics.ensure(&destination, 1);
        if created {
            self.registrar.register_soon();
        }
        msg.topic = destination;
        msg.queue_id = 0;
        msg.reconsume_times += 1;
        msg.store_host = self.store_host;
        let (placed, _) = self.store.append(std::slice::from_ref(&msg))?;
        if to_dlq {
            tracing::info!(
                group,
                topic = original,
                "popped message moved to the dead-letter queue"
            );
        }
        Ok(placed.last().map(|p| p.physical_offset + p.size as u64))
    }
}

/// What [`PopService::arrival`] registered.
struct Arrival(Vec<std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>>);

impl Arrival {
    /// True when woken before `deadline` (false also when `stopping`).
    async fn wait(self, deadline: Instant, stopping: &CancellationToken) -> bool {
        if self.0.is_empty() {
            return false;
        }
        tokio::select! {
            r = tokio::time::timeout_at(deadline.into(), futures_util::future::select_all(self.0)) => r.is_ok(),
            _ = stopping.cancelled() => false,
        }
    }
}

/// A queue taken for one pop; released when dropped.
struct BusyQueue<'a> {
    set: &'a Mutex<HashSet<(String, String, i32)>>,
    key: (String, String, i32),
}

impl<'a> BusyQueue<'a> {
    fn take(
        set: &'a Mutex<HashSet<(String, String, i32)>>,
        group: &str,
        topic: &str,
        queue_id: i32,
    ) -> Option<Self> {
        let key = (group.to_string(), topic.to_string(), queue_id);
        // The guard must be gone before a `Self` can be dropped (its drop takes the lock), and
        // a queue already taken must not yield a `Self` at all: its drop would release the
        // other pop's claim. (`then_some` would build and drop one under the lock: deadlock.)
        let taken = set
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone());
        taken.then(|| Self { set, key })
    }
}

impl Drop for BusyQueue<'_> {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_queue_is_refused_without_releasing_the_first_claim() {
        let set = Mutex::new(HashSet::new());
        let first = BusyQueue::take(&set, "g", "t", 0).expect("free");
        // Refused while taken; the refusal neither deadlocks nor releases the claim.
        assert!(BusyQueue::take(&set, "g", "t", 0).is_none());
        assert!(BusyQueue::take(&set, "g", "t", 0).is_none());
        assert!(
            BusyQueue::take(&set, "g", "t", 1).is_some(),
            "another queue is free"
        );
        drop(first);
        assert!(
            BusyQueue::take(&set, "g", "t", 0).is_some(),
            "free again once released"
        );
    }
}
