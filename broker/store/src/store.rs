//! MessageStore: the store's public face (RocketMQ's DefaultMessageStore). It owns the
//! CommitLog, the ConsumeQueues and the index, recovers them on open, runs the background
//! services (dispatcher, flusher, checkpointer, cleaner) and answers reads.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use conveyor_protocol::message::{encode_message, keys, RecordView, StoredMessage};
use tokio::sync::watch;

use crate::checkpoint::Checkpoint;
use crate::commit_log::{CommitLog, EncodedBatch, Placement, RecordSlice};
use crate::config::{FlushMode, StoreConfig};
use crate::consume_queue::{ConsumeQueue, CqEntry};
use crate::dispatch::{self, Targets};
use crate::error::{IoContext, Result, StoreError};
use crate::flush::{self, FlushSignal};
use crate::index::IndexService;
use crate::retention;

/// Called by the dispatcher when a queue grows: (topic, queue id, new max offset).
pub type ArrivalListener = Arc<dyn Fn(&str, i32, i64) + Send + Sync>;

/// Checks a topic name against RocketMQ's rules.
pub fn validate_topic(topic: &str) -> Result<()> {
    let reason = if topic.is_empty() {
        "the topic name is empty"
    } else if topic.len() > 127 {
        "the topic name is longer than 127 characters"
    } else if !topic
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
    {
        "the topic name may only contain characters matching ^[%|a-zA-Z0-9_-]+$"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidTopic {
        topic: topic.chars().take(200).collect(),
        reason,
    })
}

/// Whether a put is durable as the flush mode requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutStatus {
    /// Stored (and, under SYNC_FLUSH, flushed).
    Ok,
    /// Stored, but the SYNC flush did not finish within `sync_flush_timeout`
    /// (RocketMQ's FLUSH_DISK_TIMEOUT).
    FlushDiskTimeout,
}

/// Result of a put.
#[derive(Debug, Clone)]
pub struct PutResult {
    pub status: PutStatus,
    /// One placement per message, in order.
    pub placements: Vec<Placement>,
    /// STORETIMESTAMP written into the records.
    pub store_timestamp: i64,
}

/// Outcome of a queue read, with RocketMQ's GetMessageStatus meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetStatus {
    /// Messages returned.
    Found,
    /// Entries were there but the filter matched none.
    NoMatchedMessage,
    /// Entries point below the CommitLog minimum (deleted by retention).
    OffsetFoundNull,
    /// The queue has no messages.
    NoMessageInQueue,
    /// The requested offset is below the queue's minimum ("offset moved").
    OffsetTooSmall,
    /// The requested offset equals the maximum: nothing new yet.
    OffsetOverflowOne,
    /// The requested offset is beyond the maximum.
    OffsetOverflowBadly,
    /// The topic/queue does not exist.
    NoMatchedLogicQueue,
}

/// Messages read from a queue.
#[derive(Debug, Clone)]
pub struct GetResult {
    pub status: GetStatus,
    pub messages: Vec<RecordSlice>,
    /// Queue offsets of `messages`.
    pub queue_offsets: Vec<i64>,
    /// Where the next read should start.
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
}

/// Decides which messages a read returns. Tag-code filtering happens on the ConsumeQueue
/// entry, before the CommitLog is touched; `matches_record` then sees the record itself (for
/// the exact tag check behind a hash match, or property filters).
pub trait MessageFilter {
    /// Checks the entry (commit-log offset, size, tag hash).
    fn matches_entry(&self, _entry: &CqEntry) -> bool {
        true
    }
    /// Checks the record.
    fn matches_record(&self, _record: &RecordView<'_>) -> bool {
        true
    }
}

/// Accepts every message.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptAll;

impl MessageFilter for AcceptAll {}

thread_local! {
    /// Each appending thread reuses one encode buffer instead of allocating per append.
    static BATCH: std::cell::RefCell<EncodedBatch> = std::cell::RefCell::new(EncodedBatch::default());
}

/// Scan at most this many entries per read when a filter skips messages
/// (RocketMQ's `maxFilterMessageCount`).
const MAX_FILTER_SCAN: usize = 16_000;

pub(crate) struct Inner {
    pub(crate) config: StoreConfig,
    pub(crate) commit_log: CommitLog,
    queues: RwLock<HashMap<String, HashMap<i32, Arc<ConsumeQueue>>>>,
    pub(crate) index: Option<IndexService>,
    /// Every record below this offset has its ConsumeQueue and index entries.
    pub(crate) dispatched: AtomicU64,
    pub(crate) flush: FlushSignal,
    pub(crate) flushed_tx: watch::Sender<u64>,
    pub(crate) shutdown: AtomicBool,
    pub(crate) disk_full: AtomicBool,
    last_disk_check: Mutex<Option<Instant>>,
    listener: RwLock<Option<ArrivalListener>>,
    dispatcher: OnceLock<std::thread::Thread>,
    sleeper: (Mutex<()>, Condvar),
    _lock: File,
}

impl Inner {
    fn cq_dir(&self, topic: &str, queue_id: i32) -> PathBuf {
        self.config
            .root
            .join("consumequeue")
            .join(topic)
            .join(queue_id.to_string())
    }

    pub(crate) fn queue(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)?
            .get(&queue_id)
            .cloned()
    }

    pub(crate) fn queue_or_create(&self, topic: &str, queue_id: i32) -> Result<Arc<ConsumeQueue>> {
        if let Some(q) = self.queue(topic, queue_id) {
            return Ok(q);
        }
        let mut queues = self.queues.write().unwrap_or_else(|e| e.into_inner());
        let per_topic = queues.entry(topic.to_string()).or_default();
        if let Some(q) = per_topic.get(&queue_id) {
            return Ok(q.clone());
        }
        let q = Arc::new(ConsumeQueue::open(
            &self.cq_dir(topic, queue_id),
            topic,
            queue_id,
            self.config.consume_queue_entries_per_file,
        )?);
        per_topic.insert(queue_id, q.clone());
        Ok(q)
    }

    pub(crate) fn all_queues(&self) -> Vec<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    pub(crate) fn arrival_listener(&self) -> Option<ArrivalListener> {
        self.listener
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn sleep_unless_shutdown(&self, d: Duration) {
        let guard = self.sleeper.0.lock().unwrap_or_else(|e| e.into_inner());
        if !self.shutdown.load(Ordering::Acquire) {
            let _ = self.sleeper.1.wait_timeout(guard, d);
        }
    }

    /// Flushes ConsumeQueues and the index, then records what is durable.
    fn checkpoint(&self) -> Result<()> {
        let dispatched = self.dispatched.load(Ordering::Acquire);
        for cq in self.all_queues() {
            cq.flush()?;
        }
        if let Some(index) = &self.index {
            index.flush()?;
        }
        Checkpoint {
            commit_log_flushed: self.commit_log.flushed_offset(),
            dispatch_flushed: dispatched,
            written_at_ms: now_ms() as u64,
        }
        .store(&self.config.root)
    }

    fn check_disk(&self) -> Result<()> {
        if !self.disk_full.load(Ordering::Acquire) {
            return Ok(());
        }
        // Re-check at most every 100 ms so that freed space is noticed promptly.
        {
            let mut last = self
                .last_disk_check
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if last.is_none_or(|t| t.elapsed() >= Duration::from_millis(100)) {
                *last = Some(Instant::now());
                drop(last);
                retention::refresh_disk_full(self)?;
            }
        }
        if self.disk_full.load(Ordering::Acquire) {
            let usage = retention::disk_usage(&self.config.root).unwrap_or(1.0);
            return Err(StoreError::DiskFull(format!(
                "disk usage {:.1}% is at or above the {:.1}% full watermark; writes resume when space is freed",
                usage * 100.0,
                self.config.disk_full_ratio * 100.0
            )));
        }
        Ok(())
    }
}

/// How far ahead of the write position pages are faulted in.
const PREFAULT_AHEAD: u64 = 16 << 20;
/// Faulted in per step.
const PREFAULT_STEP: u64 = 1 << 20;

/// Keeps the pages just ahead of the CommitLog's write position faulted in (RocketMQ warms
/// mapped files for the same reason): a first touch of a page costs a fault and zeroing a
/// page, which would otherwise land inside appends.
fn prefault_ahead(inner: &Inner) {
    let mut warmed = 0u64;
    while !inner.shutdown.load(Ordering::Acquire) {
        let write_pos = inner.commit_log.max_offset();
        warmed = warmed.max(write_pos);
        if warmed >= write_pos + PREFAULT_AHEAD {
            std::thread::park_timeout(Duration::from_millis(1));
            continue;
        }
        match inner.commit_log.segment_at(warmed) {
            Some(seg) => {
                let step = PREFAULT_STEP.min(seg.end() - warmed);
                seg.prefault(warmed - seg.base(), step);
                warmed += step;
            }
            // The next segment does not exist yet: wait for the roll.
            None => std::thread::park_timeout(Duration::from_millis(1)),
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The message store.
pub struct MessageStore {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for MessageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageStore")
            .field("root", &self.inner.config.root)
            .finish()
    }
}

/// What `open` did, for logs and tests.
#[derive(Debug, Clone, Copy)]
pub struct RecoveryReport {
    /// The previous run did not shut down cleanly.
    pub unclean: bool,
    /// Where the scan started.
    pub scan_from: u64,
    /// End of the intact log.
    pub valid_end: u64,
    /// Bytes verified.
    pub scanned: u64,
    /// Time the verifying scan took.
    pub scan_elapsed: Duration,
    /// Time the whole recovery took (scan, queue repair, re-dispatch, checkpoint).
    pub elapsed: Duration,
}

fn lock_dir(root: &Path) -> Result<File> {
    let path = root.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .ctx(|| format!("open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Locked(root.to_path_buf())),
        Err(std::fs::TryLockError::Error(e)) => Err(e).ctx(|| format!("lock {}", path.display())),
    }
}

fn load_queues(
    root: &Path,
    per_file: u64,
) -> Result<HashMap<String, HashMap<i32, Arc<ConsumeQueue>>>> {
    let base = root.join("consumequeue");
    let mut out: HashMap<String, HashMap<i32, Arc<ConsumeQueue>>> = HashMap::new();
    let Ok(topics) = std::fs::read_dir(&base) else {
        return Ok(out);
    };
    for topic in topics.flatten() {
        let Ok(name) = topic.file_name().into_string() else {
            continue;
        };
        if validate_topic(&name).is_err() {
            continue;
        }
        let Ok(qdirs) = std::fs::read_dir(topic.path()) else {
            continue;
        };
        for q in qdirs.flatten() {
            let Some(qid) = q.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let cq = ConsumeQueue::open(&q.path(), &name, qid, per_file)?;
            out.entry(name.clone())
                .or_default()
                .insert(qid, Arc::new(cq));
        }
    }
    Ok(out)
}

impl MessageStore {
    /// Opens (creating if needed) the store at `config.root`, recovers it and starts its
    /// services.
    pub fn open(config: StoreConfig) -> Result<(Self, RecoveryReport)> {
        config.validate()?;
        let started = Instant::now();
        let root = config.root.clone();
        std::fs::create_dir_all(root.join("config"))
            .ctx(|| format!("create store directory {}", root.display()))?;
        let lock = lock_dir(&root)?;
        let abort = root.join("abort");
        let unclean = abort.exists();
        File::create(&abort)
            .and_then(|f| f.sync_all())
            .ctx(|| format!("create {}", abort.display()))?;
        crate::mapped_file::sync_dir(&root)?;

        let commit_log = CommitLog::open(&root.join("commitlog"), config.commit_log_segment_size)?;
        let queues = load_queues(&root, config.consume_queue_entries_per_file)?;
        let index = if config.index_enabled {
            Some(IndexService::open(
                &root.join("index"),
                config.index_hash_slots,
                config.index_max_entries,
            )?)
        } else {
            None
        };
        let (flushed_tx, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            config,
            commit_log,
            queues: RwLock::new(queues),
            index,
            dispatched: AtomicU64::new(0),
            flush: FlushSignal::default(),
            flushed_tx,
            shutdown: AtomicBool::new(false),
            disk_full: AtomicBool::new(false),
            last_disk_check: Mutex::new(None),
            listener: RwLock::new(None),
            dispatcher: OnceLock::new(),
            sleeper: (Mutex::new(()), Condvar::new()),
            _lock: lock,
        });
        let report = Self::recover(&inner, unclean, started)?;
        let store = Self {
            inner,
            threads: Mutex::new(Vec::new()),
        };
        store.start_services()?;
        Ok((store, report))
    }

    fn recover(inner: &Arc<Inner>, unclean: bool, started: Instant) -> Result<RecoveryReport> {
        let log = &inner.commit_log;
        let checkpoint = Checkpoint::load(&inner.config.root).unwrap_or_default();
        let seg = log.segment_size();
        let mut scan_from = checkpoint.safe_offset();
        scan_from -= scan_from % seg;
        if unclean {
            // Be generous after a crash: re-verify one more segment.
            scan_from = scan_from.saturating_sub(seg);
        }
        scan_from = scan_from.max(log.min_offset());
        let recovered = log.recover(scan_from, inner.config.require_record_crc, |_, _| {})?;
        let end = recovered.valid_end;
        for cq in inner.all_queues() {
            cq.recover(end)?;
        }
        // Re-dispatch the scanned tail; rebuild the index from further back if it is missing.
        let index_from = match &inner.index {
            Some(index) => index.indexed_upto().map_or(log.min_offset(), |u| u + 1),
            None => end,
        };
        let from = scan_from.min(index_from);
        dispatch::walk(inner, from, end, |phys, view| {
            let targets = Targets {
                consume_queue: phys >= scan_from,
                index: phys >= index_from,
            };
            dispatch::dispatch_record(inner, phys, view, targets)
        })?;
        // The next queue offsets follow from the queues.
        {
            let mut state = log.lock_append();
            for cq in inner.all_queues() {
                state
                    .queue_offsets
                    .set(cq.topic(), cq.queue_id(), cq.max_offset());
            }
        }
        let min = log.min_offset();
        for cq in inner.all_queues() {
            cq.correct_min(min);
        }
        inner.dispatched.store(end, Ordering::Release);
        inner.flushed_tx.send_replace(end);
        inner.checkpoint()?;
        let report = RecoveryReport {
            unclean,
            scan_from,
            valid_end: end,
            scanned: recovered.scanned,
            scan_elapsed: recovered.scan_elapsed,
            elapsed: started.elapsed(),
        };
        tracing::info!(?report, "store recovered");
        Ok(report)
    }

    fn start_services(&self) -> Result<()> {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let spawn = |name: &str, body: fn(&Inner)| {
            let inner = self.inner.clone();
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(move || body(&inner))
                .ctx(|| format!("spawn {name}"))
        };
        let dispatcher = spawn("store-dispatch", dispatch::run)?;
        let _ = self.inner.dispatcher.set(dispatcher.thread().clone());
        threads.push(dispatcher);
        threads.push(spawn("store-flush", flush::run)?);
        threads.push(spawn("store-checkpoint", |inner| {
            while !inner.shutdown.load(Ordering::Acquire) {
                inner.sleep_unless_shutdown(inner.config.consume_queue_flush_interval);
                if let Err(e) = inner.checkpoint() {
                    tracing::error!(error = %e, "checkpoint failed");
                }
            }
        })?);
        threads.push(spawn("store-clean", retention::run)?);
        threads.push(spawn("store-prefault", prefault_ahead)?);
        Ok(())
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// Registers the callback the dispatcher calls when a queue grows.
    pub fn set_arrival_listener(&self, listener: ArrivalListener) {
        *self
            .inner
            .listener
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(listener);
    }

    /// Appends messages without waiting for a flush. All messages must target the same topic
    /// and queue (a single message, or a SEND_BATCH_MESSAGE batch). STORETIMESTAMP and
    /// STOREHOST are set by the store; QUEUEOFFSET and PHYSICALOFFSET are assigned.
    pub fn append(&self, messages: &[StoredMessage]) -> Result<(Vec<Placement>, i64)> {
        let inner = &self.inner;
        if inner.shutdown.load(Ordering::Acquire) {
            return Err(StoreError::ShutDown);
        }
        let Some(first) = messages.first() else {
            return Ok((Vec::new(), now_ms()));
        };
        validate_topic(&first.topic)?;
        inner.check_disk()?;
        let store_ts = now_ms();
        BATCH
            .with(|cell| {
                let mut batch = cell.borrow_mut();
                batch.buf.clear();
                batch.sizes.clear();
                let result = self.append_encoded(messages, first, store_ts, &mut batch);
                if batch.buf.capacity() > 1 << 20 {
                    // Keep the cached buffer small after an exceptionally large batch.
                    *batch = EncodedBatch::default();
                }
                result
            })
            .map(|placements| (placements, store_ts))
    }

    fn append_encoded(
        &self,
        messages: &[StoredMessage],
        first: &StoredMessage,
        store_ts: i64,
        batch: &mut EncodedBatch,
    ) -> Result<Vec<Placement>> {
        let inner = &self.inner;
        for m in messages {
            if m.topic != first.topic || m.queue_id != first.queue_id {
                return Err(StoreError::InvalidConfig(
                    "a batch must target one topic and queue".into(),
                ));
            }
            let size = encode_message(m, store_ts, inner.config.store_host, &mut batch.buf)?;
            if size > inner.config.max_message_size {
                return Err(StoreError::MessageTooLarge {
                    size,
                    max: inner.config.max_message_size,
                });
            }
            batch.sizes.push(size);
        }
        let mut placements = Vec::with_capacity(messages.len());
        {
            let mut state = inner.commit_log.lock_append();
            inner.commit_log.append_locked(
                &mut state,
                &first.topic,
                first.queue_id,
                batch,
                &mut placements,
            )?;
        }
        // The dispatcher is not woken per append: it polls every millisecond (RocketMQ's reput
        // service does the same), which keeps context switches off the append path.
        Ok(placements)
    }

    /// Appends and, under SYNC_FLUSH, waits until the records are durable (unless the first
    /// message's WAIT property is "false", as in RocketMQ).
    pub fn put_messages(&self, messages: &[StoredMessage]) -> Result<PutResult> {
        let (placements, store_timestamp) = self.append(messages)?;
        let mut status = PutStatus::Ok;
        if let (Some(last), FlushMode::Sync) = (placements.last(), self.inner.config.flush_mode) {
            let end = last.physical_offset + last.size as u64;
            let wait = messages
                .first()
                .and_then(|m| m.properties.get(keys::WAIT_STORE_MSG_OK))
                != Some("false");
            if wait {
                if !self.wait_flushed(end, self.inner.config.sync_flush_timeout) {
                    status = PutStatus::FlushDiskTimeout;
                }
            } else {
                self.inner.flush.request(end);
            }
        }
        Ok(PutResult {
            status,
            placements,
            store_timestamp,
        })
    }

    /// [`MessageStore::put_messages`] for one message.
    pub fn put_message(&self, message: &StoredMessage) -> Result<PutResult> {
        self.put_messages(std::slice::from_ref(message))
    }

    /// Blocks until the CommitLog is durable up to `end` (SYNC_FLUSH group commit).
    pub fn wait_flushed(&self, end: u64, timeout: Duration) -> bool {
        self.inner.flush.wait(&self.inner, end, timeout)
    }

    /// Asks the flusher to flush up to `end` and returns a receiver of the flushed offset,
    /// for async callers (the broker) that wait without blocking a thread.
    pub fn request_flush(&self, end: u64) -> watch::Receiver<u64> {
        let rx = self.inner.flushed_tx.subscribe();
        self.inner.flush.request(end);
        rx
    }

    /// Reads up to `max_count` messages (and about `max_bytes`) from a queue starting at
    /// `offset`, keeping those `filter` accepts.
    pub fn get_messages(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
        filter: &dyn MessageFilter,
    ) -> GetResult {
        let mut result = GetResult {
            status: GetStatus::NoMatchedLogicQueue,
            messages: Vec::new(),
            queue_offsets: Vec::new(),
            next_begin_offset: 0,
            min_offset: 0,
            max_offset: 0,
        };
        let Some(cq) = self.inner.queue(topic, queue_id) else {
            return result;
        };
        let (min, max) = (cq.min_offset(), cq.max_offset());
        result.min_offset = min;
        result.max_offset = max;
        if max == 0 {
            result.status = GetStatus::NoMessageInQueue;
            return result;
        }
        if offset < min {
            result.status = GetStatus::OffsetTooSmall;
            result.next_begin_offset = min;
            return result;
        }
        if offset == max {
            result.status = GetStatus::OffsetOverflowOne;
            result.next_begin_offset = offset;
            return result;
        }
        if offset > max {
            result.status = GetStatus::OffsetOverflowBadly;
            result.next_begin_offset = max;
            return result;
        }
        let log_min = self.inner.commit_log.min_offset();
        let mut status = GetStatus::NoMatchedMessage;
        let mut bytes = 0usize;
        let mut next = offset;
        let scan_limit = (offset + MAX_FILTER_SCAN.max(max_count) as i64).min(max);
        while next < scan_limit && result.messages.len() < max_count {
            let Some(entry) = cq.get(next) else {
                status = GetStatus::OffsetFoundNull;
                next += 1;
                continue;
            };
            if entry.physical_offset < log_min {
                status = GetStatus::OffsetFoundNull;
                next += 1;
                continue;
            }
            if !result.messages.is_empty() && bytes + entry.size as usize > max_bytes {
                break;
            }
            next += 1;
            if !filter.matches_entry(&entry) {
                continue;
            }
            let Some(slice) = self
                .inner
                .commit_log
                .read(entry.physical_offset, entry.size as usize)
            else {
                status = GetStatus::OffsetFoundNull;
                continue;
            };
            match RecordView::parse(&slice) {
                Ok(view) if filter.matches_record(&view) => {}
                Ok(_) => continue,
                Err(_) => {
                    status = GetStatus::OffsetFoundNull;
                    continue;
                }
            }
            bytes += slice.len();
            result.messages.push(slice);
            result.queue_offsets.push(next - 1);
        }
        result.status = if result.messages.is_empty() {
            status
        } else {
            GetStatus::Found
        };
        result.next_begin_offset = next;
        result
    }

    /// The record at a commit-log offset (VIEW_MESSAGE_BY_ID, CONSUMER_SEND_MSG_BACK).
    pub fn message_at(&self, physical_offset: u64) -> Option<RecordSlice> {
        if physical_offset < self.inner.commit_log.min_offset() {
            return None;
        }
        self.inner.commit_log.read_record_at(physical_offset)
    }

    /// Messages of `topic` whose KEYS contain `key` or whose UNIQ_KEY is `key`, stored within
    /// `[begin_ms, end_ms]`, newest first, at most `max`.
    pub fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        max: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> Vec<RecordSlice> {
        let Some(index) = &self.inner.index else {
            return Vec::new();
        };
        let candidates = index.query(
            topic,
            key,
            begin_ms.max(0) as u64,
            end_ms.max(0) as u64,
            max.saturating_mul(4).max(64),
        );
        let mut out: Vec<RecordSlice> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for phys in candidates {
            if out.len() >= max || !seen.insert(phys) {
                continue;
            }
            let Some(slice) = self.message_at(phys) else {
                continue;
            };
            let Ok(view) = RecordView::parse(&slice) else {
                continue;
            };
            let matches = view.topic() == topic
                && (view.property(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == Some(key)
                    || view
                        .property(keys::KEYS)
                        .is_some_and(|k| k.split(keys::KEY_SEPARATOR).any(|k| k == key)));
            let ts = view.store_timestamp();
            if matches && ts >= begin_ms && ts <= end_ms {
                out.push(slice);
            }
        }
        out
    }

    /// Lowest queue offset still readable (0 for an unknown queue).
    pub fn min_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner
            .queue(topic, queue_id)
            .map_or(0, |q| q.min_offset())
    }

    /// Next queue offset to be written (0 for an unknown queue).
    pub fn max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner
            .queue(topic, queue_id)
            .map_or(0, |q| q.max_offset())
    }

    /// STORETIMESTAMP of the message at a queue offset.
    pub fn store_time_at(&self, topic: &str, queue_id: i32, offset: i64) -> Option<i64> {
        let entry = self.inner.queue(topic, queue_id)?.get(offset)?;
        let slice = self
            .inner
            .commit_log
            .read(entry.physical_offset, entry.size as usize)?;
        RecordView::parse(&slice).ok().map(|v| v.store_timestamp())
    }

    /// STORETIMESTAMP of the oldest readable message of a queue.
    pub fn earliest_store_time(&self, topic: &str, queue_id: i32) -> Option<i64> {
        let cq = self.inner.queue(topic, queue_id)?;
        (cq.min_offset()..cq.max_offset()).find_map(|o| self.store_time_at(topic, queue_id, o))
    }

    /// The first queue offset whose message was stored at or after `timestamp_ms` (the max
    /// offset if none), by binary search over the queue.
    pub fn offset_by_time(&self, topic: &str, queue_id: i32, timestamp_ms: i64) -> i64 {
        let Some(cq) = self.inner.queue(topic, queue_id) else {
            return 0;
        };
        let (mut lo, mut hi) = (cq.min_offset(), cq.max_offset());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.store_time_at(topic, queue_id, mid) {
                Some(ts) if ts < timestamp_ms => lo = mid + 1,
                Some(_) => hi = mid,
                // Removed underneath us: treat as older.
                None => lo = mid + 1,
            }
        }
        lo
    }

    /// All (topic, queue id) pairs that have a ConsumeQueue.
    pub fn queues(&self) -> Vec<(String, i32)> {
        self.inner
            .all_queues()
            .iter()
            .map(|q| (q.topic().to_string(), q.queue_id()))
            .collect()
    }

    /// Lowest commit-log offset on disk.
    pub fn commit_log_min_offset(&self) -> u64 {
        self.inner.commit_log.min_offset()
    }

    /// End of the commit log.
    pub fn commit_log_max_offset(&self) -> u64 {
        self.inner.commit_log.max_offset()
    }

    /// Offset below which the commit log is durable.
    pub fn commit_log_flushed_offset(&self) -> u64 {
        self.inner.commit_log.flushed_offset()
    }

    /// Offset below which records are in ConsumeQueues and the index.
    pub fn dispatched_offset(&self) -> u64 {
        self.inner.dispatched.load(Ordering::Acquire)
    }

    /// Waits until everything appended so far is dispatched (tests and shutdown).
    pub fn wait_dispatched(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let target = self.commit_log_max_offset();
        while self.dispatched_offset() < target {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Runs one retention round now (normally the cleaner does this on its interval).
    pub fn clean_now(&self) -> Result<usize> {
        retention::clean_once(&self.inner)
    }

    /// True while appends are refused for lack of disk space.
    pub fn is_disk_full(&self) -> bool {
        self.inner.disk_full.load(Ordering::Acquire)
    }

    /// Stops the services, flushes everything, writes the checkpoint and removes the abort
    /// marker. Called by `Drop` too; calling it twice is harmless.
    pub fn shutdown(&self) -> Result<()> {
        if self.inner.shutdown.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        {
            let _g = self
                .inner
                .sleeper
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.inner.sleeper.1.notify_all();
        }
        self.inner.flush.request(u64::MAX);
        if let Some(t) = self.inner.dispatcher.get() {
            t.unpark();
        }
        let threads: Vec<_> = self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for t in threads {
            let _ = t.join();
        }
        let end = self.inner.commit_log.max_offset();
        self.inner.commit_log.flush(end)?;
        self.inner.checkpoint()?;
        let abort = self.inner.config.root.join("abort");
        std::fs::remove_file(&abort).ctx(|| format!("remove {}", abort.display()))?;
        crate::mapped_file::sync_dir(&self.inner.config.root)?;
        tracing::info!("store shut down cleanly");
        Ok(())
    }
}

impl Drop for MessageStore {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(error = %e, "store shutdown failed");
        }
    }
}
