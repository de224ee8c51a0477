//! MessageStore: the store's public face (RocketMQ's DefaultMessageStore). It owns the
//! CommitLog, the ConsumeQueues and the index, recovers them on open, runs the background
//! services (dispatcher, flusher, checkpointer, cleaner) and answers reads.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use conveyor_protocol::message::{encode_message, keys, RecordView, StoredMessage};
use conveyor_protocol::time::now_ms;

use crate::commit_log::{CommitLog, EncodedBatch, Placement, RecordSlice};
use crate::config::{FlushMode, StoreConfig};
use crate::consume_queue::{ConsumeQueue, CqEntry};
use crate::core::{ArrivalListener, StoreCore};
use crate::epoch::{EpochEntry, EpochFile, EpochHistory};
use crate::error::{IoContext, Result, StoreError};
use crate::filter::MessageFilter;
use crate::flush::FlushTicket;
use crate::index::IndexService;
use crate::mapped_file::{sync_dir, Allocation};
use crate::queues::ConsumeQueueTable;
use crate::recovery::{self, RecoveryReport};
use crate::replica;
use crate::retention;
use crate::services::Services;

/// Checks a topic name against RocketMQ's rules ([`conveyor_protocol::naming`]).
pub fn validate_topic(topic: &str) -> Result<()> {
    conveyor_protocol::naming::validate_topic(topic).map_err(|reason| StoreError::InvalidTopic {
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
    /// Whether the put is as durable as the flush mode requires.
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
    /// RocketMQ's GetMessageStatus of the read.
    pub status: GetStatus,
    /// The records read, in queue order.
    pub messages: Vec<RecordSlice>,
    /// Queue offsets of `messages`.
    pub queue_offsets: Vec<i64>,
    /// Where the next read should start.
    pub next_begin_offset: i64,
    /// Lowest queue offset still readable.
    pub min_offset: i64,
    /// Next queue offset to be written (one past the last entry).
    pub max_offset: i64,
}

/// Where [`MessageStore::read_queue`] takes ConsumeQueue entries and records from.
trait ReadSource {
    /// What a read can fail with.
    type Error;
    /// The entry at `offset` of `cq` (`None`: a hole or out of range); `end` is where the
    /// read stops, so a source may read the entries up to it at once.
    fn entry(
        &mut self,
        cq: &ConsumeQueue,
        offset: i64,
        end: i64,
    ) -> Result<Option<CqEntry>, Self::Error>;
    /// The record `entry` points at, if one starts there.
    fn record(
        &mut self,
        log: &CommitLog,
        entry: &CqEntry,
    ) -> Result<Option<RecordSlice>, Self::Error>;
}

/// Reads through the mappings (data in memory): cannot fail, copies nothing.
struct Mapped;

impl ReadSource for Mapped {
    type Error = std::convert::Infallible;
    fn entry(
        &mut self,
        cq: &ConsumeQueue,
        offset: i64,
        _end: i64,
    ) -> Result<Option<CqEntry>, Self::Error> {
        Ok(cq.get(offset))
    }
    fn record(
        &mut self,
        log: &CommitLog,
        entry: &CqEntry,
    ) -> Result<Option<RecordSlice>, Self::Error> {
        Ok(log.read_record_at(entry.physical_offset))
    }
}

/// Entries a positional read fetches at once (20 bytes each).
const POSITIONAL_ENTRIES: usize = 1024;

/// Reads with pread (data not in memory): an unreadable block is an error, not a SIGBUS.
struct Positional {
    /// Largest record the store appends (a larger declared size is no record).
    max_record: usize,
    /// Queue offset of `entries[0]`.
    first: i64,
    /// Entries read ahead.
    entries: Vec<Option<CqEntry>>,
}

impl ReadSource for Positional {
    type Error = StoreError;
    fn entry(&mut self, cq: &ConsumeQueue, offset: i64, end: i64) -> Result<Option<CqEntry>> {
        if offset < 0 || offset >= cq.max_offset() {
            return Ok(None);
        }
        let cached = offset
            .checked_sub(self.first)
            .and_then(|i| usize::try_from(i).ok())
            .filter(|i| *i < self.entries.len());
        let index = match cached {
            Some(i) => i,
            None => {
                let count = usize::try_from(end.saturating_sub(offset))
                    .unwrap_or(0)
                    .clamp(1, POSITIONAL_ENTRIES);
                (self.first, self.entries) = cq.read_entries_positional(offset, count)?;
                0
            }
        };
        Ok(self.entries.get(index).copied().flatten())
    }
    fn record(&mut self, log: &CommitLog, entry: &CqEntry) -> Result<Option<RecordSlice>> {
        log.read_record_positional(entry.physical_offset, entry.size as usize, self.max_record)
    }
}

thread_local! {
    /// Each appending thread reuses one encode buffer instead of allocating per append.
    static BATCH: std::cell::RefCell<EncodedBatch> = std::cell::RefCell::new(EncodedBatch::default());
}

/// Scan at most this many entries per read when a filter skips messages
/// (RocketMQ's `maxFilterMessageCount`).
const MAX_FILTER_SCAN: usize = 16_000;

/// The message store.
pub struct MessageStore {
    /// State shared with the background services.
    core: Arc<StoreCore>,
    /// The background threads.
    services: Services,
}

impl std::fmt::Debug for MessageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageStore")
            .field("root", &self.core.config.root)
            .finish()
    }
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

impl MessageStore {
    /// Opens (creating if needed) the store at `config.root`, recovers it and starts its
    /// services.
    pub fn open(config: StoreConfig) -> Result<(Self, RecoveryReport)> {
        config.validate()?;
        let started = Instant::now();
        let root = config.root.clone();
        crate::mapped_file::create_dir_durable(&root.join("config"))?;
        let lock = lock_dir(&root)?;
        let abort = root.join("abort");
        let unclean = abort.exists();
        File::create(&abort)
            .and_then(|f| f.sync_all())
            .ctx(|| format!("create {}", abort.display()))?;
        sync_dir(&root)?;

        let allocation = if config.zero_new_segments && config.flush_mode == FlushMode::Sync {
            Allocation::Zeroed
        } else {
            Allocation::Reserve
        };
        let commit_log = CommitLog::open(
            &root.join("commitlog"),
            &root.join("commitlog-prepared"),
            config.commit_log_segment_size,
            allocation,
        )?;
        let queues = ConsumeQueueTable::load(&root, config.consume_queue_entries_per_file)?;
        let index = if config.index_enabled {
            Some(IndexService::open(
                &root.join("index"),
                config.index_hash_slots,
                config.index_max_entries,
            )?)
        } else {
            None
        };
        let epochs = EpochFile::load(&root)?;
        let core = Arc::new(StoreCore::new(
            config, commit_log, queues, index, lock, epochs,
        ));
        let report = recovery::recover(&core, unclean, started)?;
        {
            // Terms that started past the recovered end wrote nothing that survived (a term
            // starting exactly there is kept: it may simply not have written yet).
            let mut epochs = core.lock_epochs();
            let before = epochs.clone();
            epochs.truncate_from(report.valid_end + 1);
            if *epochs != before {
                EpochFile::store(&root, &epochs)?;
            }
        }
        let store = Self {
            core,
            services: Services::default(),
        };
        store.services.start(&store.core)?;
        Ok((store, report))
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.core.config
    }

    /// Registers the callback the dispatcher calls when a queue grows.
    pub fn set_arrival_listener(&self, listener: ArrivalListener) {
        self.core.set_arrival_listener(listener);
    }

    /// Appends messages without waiting for a flush. All messages must target the same topic
    /// and queue (a single message, or a SEND_BATCH_MESSAGE batch). STORETIMESTAMP and
    /// STOREHOST are set by the store; QUEUEOFFSET and PHYSICALOFFSET are assigned.
    pub fn append(&self, messages: &[StoredMessage]) -> Result<(Vec<Placement>, i64)> {
        let core = &*self.core;
        if core.shutdown.is_set() {
            return Err(StoreError::ShutDown);
        }
        let Some(first) = messages.first() else {
            return Ok((Vec::new(), now_ms()));
        };
        validate_topic(&first.topic)?;
        core.disk.check()?;
        if let Some(error) = core.flush.failure() {
            return Err(StoreError::FlushFailed(error));
        }
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
        let core = &*self.core;
        for m in messages {
            if m.topic != first.topic || m.queue_id != first.queue_id {
                return Err(StoreError::InvalidConfig(
                    "a batch must target one topic and queue".into(),
                ));
            }
            let size = encode_message(m, store_ts, core.config.store_host, &mut batch.buf)?;
            if size > core.config.max_message_size {
                return Err(StoreError::MessageTooLarge {
                    size,
                    max: core.config.max_message_size,
                });
            }
            batch.sizes.push(size);
        }
        let mut placements = Vec::with_capacity(messages.len());
        {
            let mut state = core.commit_log.lock_append();
            core.commit_log.append_locked(
                &mut state,
                &first.topic,
                first.queue_id,
                batch,
                &mut placements,
            )?;
        }
        // The dispatcher is not woken per append: it polls every millisecond (RocketMQ's reput
        // service does the same), which keeps context switches off the append path. Replication
        // senders are woken, so that a synchronous replica's round trip starts at once.
        core.appended.notify_waiters();
        Ok(placements)
    }

    /// Appends and, under SYNC_FLUSH, waits until the records are durable (unless the first
    /// message's WAIT property is "false", as in RocketMQ).
    pub fn put_messages(&self, messages: &[StoredMessage]) -> Result<PutResult> {
        let (placements, store_timestamp) = self.append(messages)?;
        let mut status = PutStatus::Ok;
        if let (Some(last), FlushMode::Sync) = (placements.last(), self.core.config.flush_mode) {
            let end = last.physical_offset + last.size as u64;
            let wait = messages
                .first()
                .and_then(|m| m.properties.get(keys::WAIT_STORE_MSG_OK))
                != Some("false");
            if wait {
                if !self.wait_flushed(end, self.core.config.sync_flush_timeout) {
                    status = PutStatus::FlushDiskTimeout;
                }
            } else {
                self.core.flush.request(end);
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
        self.core
            .flush
            .wait(&self.core.commit_log, &self.core.shutdown, end, timeout)
    }

    /// Asks the flusher to flush up to `end` and returns a ticket that completes when it has,
    /// for async callers (the broker) that wait without blocking a thread.
    pub fn request_flush(&self, end: u64) -> FlushTicket {
        self.core.flush.ticket(&self.core.commit_log, end)
    }

    /// Appends bytes a master sent at `offset` verbatim (a slave); returns how many were
    /// taken, the rest being an incomplete record the caller passes again with the next bytes.
    pub fn append_replicated(&self, offset: u64, data: &[u8]) -> Result<usize> {
        replica::append_replicated(&self.core, offset, data)
    }

    /// Makes an empty store start its log at `offset` (a segment start), so that a fresh
    /// slave can copy a master whose oldest segments are already deleted.
    pub fn start_empty_at(&self, offset: u64) -> Result<()> {
        replica::start_empty_at(&self.core, offset)
    }

    /// CommitLog bytes from `from` for a replica (at most `max`, never past the readable end
    /// or `from`'s segment end).
    pub fn read_for_replica(&self, from: u64, max: usize) -> Option<RecordSlice> {
        self.core.commit_log.read_for_replica(from, max)
    }

    /// Whether the CommitLog bytes `[from, to)` are in memory (reading them cannot block on
    /// the disk).
    pub fn log_is_resident(&self, from: u64, to: u64) -> bool {
        self.core.commit_log.is_resident(from, to)
    }

    /// Completes when something is appended after the call started (a replication sender
    /// waiting for new bytes; check the end again after creating the future).
    pub fn appended(&self) -> tokio::sync::futures::Notified<'_> {
        self.core.appended.notified()
    }

    /// Sets the high watermark: no record at or past `offset` reaches a ConsumeQueue (so no
    /// consumer sees it) until it rises. `u64::MAX` lifts it.
    pub fn set_confirm_offset(&self, offset: u64) {
        self.core.confirm.store(offset, Ordering::Release);
    }

    /// The high watermark (`u64::MAX` when none holds dispatch back).
    pub fn confirm_offset(&self) -> u64 {
        self.core.confirm.load(Ordering::Acquire)
    }

    /// The master terms that wrote the log.
    pub fn epochs(&self) -> EpochHistory {
        self.core.lock_epochs().clone()
    }

    /// Starts master term `epoch` at the log's end (persisted); the current term again is a
    /// no-op, an older one refused.
    pub fn begin_epoch(&self, epoch: u32) -> Result<EpochEntry> {
        replica::begin_epoch(&self.core, epoch)
    }

    /// Records on a slave that the master's term `epoch` starts at `start`.
    pub fn follow_epoch(&self, epoch: u32, start: u64) -> Result<()> {
        replica::follow_epoch(&self.core, epoch, start)
    }

    /// Cuts the whole store back to `offset` (a record boundary) while it runs: a former master
    /// drops what it wrote after the point it shares with the new master. The caller serves
    /// no reads or writes meanwhile.
    pub fn truncate_to(&self, offset: u64) -> Result<()> {
        replica::truncate_to(&self.core, offset)
    }

    /// Reads up to `max_count` messages (and about `max_bytes`) from a queue starting at
    /// `offset`, keeping those `filter` accepts. Reads through the mappings: for data in
    /// memory ([`MessageStore::is_resident`]); see [`MessageStore::get_messages_cold`] for
    /// data that is not.
    pub fn get_messages(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
        filter: &dyn MessageFilter,
    ) -> GetResult {
        let Ok(result) = self.read_queue(
            &mut Mapped,
            topic,
            queue_id,
            offset,
            max_count,
            max_bytes,
            filter,
        );
        result
    }

    /// [`MessageStore::get_messages`] with positional reads (pread) of the ConsumeQueue and
    /// CommitLog files instead of the mappings, for data that is not in memory: a block the
    /// disk cannot read is [`StoreError::ReadFailed`] (the caller answers that read with an
    /// error and goes on), where a page fault of a mapping would raise SIGBUS and end the
    /// process. Entries and records are checked exactly as by `get_messages` (one loop
    /// serves both). Blocks on the disk: call it off an async runtime's workers.
    pub fn get_messages_cold(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
        filter: &dyn MessageFilter,
    ) -> Result<GetResult> {
        let mut source = Positional {
            max_record: self.core.config.max_message_size,
            first: 0,
            entries: Vec::new(),
        };
        self.read_queue(
            &mut source,
            topic,
            queue_id,
            offset,
            max_count,
            max_bytes,
            filter,
        )
    }

    /// The read of a queue both [`MessageStore::get_messages`] and
    /// [`MessageStore::get_messages_cold`] run: `source` says where the bytes come from, and
    /// every rule about what is served (bounds, filters, record checks) is here once.
    #[allow(clippy::too_many_arguments)]
    fn read_queue<S: ReadSource>(
        &self,
        source: &mut S,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
        filter: &dyn MessageFilter,
    ) -> Result<GetResult, S::Error> {
        let mut result = GetResult {
            status: GetStatus::NoMatchedLogicQueue,
            messages: Vec::new(),
            queue_offsets: Vec::new(),
            next_begin_offset: 0,
            min_offset: 0,
            max_offset: 0,
        };
        let Some(cq) = self.core.queues.get(topic, queue_id) else {
            return Ok(result);
        };
        let (min, max) = (cq.min_offset(), cq.max_offset());
        result.min_offset = min;
        result.max_offset = max;
        if max == 0 {
            result.status = GetStatus::NoMessageInQueue;
            return Ok(result);
        }
        if offset < min {
            result.status = GetStatus::OffsetTooSmall;
            result.next_begin_offset = min;
            return Ok(result);
        }
        if offset == max {
            result.status = GetStatus::OffsetOverflowOne;
            result.next_begin_offset = offset;
            return Ok(result);
        }
        if offset > max {
            result.status = GetStatus::OffsetOverflowBadly;
            result.next_begin_offset = max;
            return Ok(result);
        }
        let log_min = self.core.commit_log.min_offset();
        let mut status = GetStatus::NoMatchedMessage;
        let mut bytes = 0usize;
        let mut next = offset;
        let scan_limit = (offset + MAX_FILTER_SCAN.max(max_count) as i64).min(max);
        while next < scan_limit && result.messages.len() < max_count {
            let Some(entry) = source.entry(&cq, next, scan_limit)? else {
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
            // The record's own size, not the entry's: a damaged entry must not hand out a
            // slice that runs into the next record.
            let Some(slice) = source.record(&self.core.commit_log, &entry)? else {
                status = GetStatus::OffsetFoundNull;
                continue;
            };
            match RecordView::parse_verified(&slice, self.core.config.require_record_crc) {
                // An entry must lead to a record of this very queue and offset: a stale or
                // damaged entry may point into the intact log at another queue's record.
                Ok(view)
                    if view.topic() != topic
                        || view.queue_id() != queue_id
                        || view.queue_offset() != next - 1 =>
                {
                    tracing::warn!(
                        topic,
                        queue_id,
                        queue_offset = next - 1,
                        physical_offset = entry.physical_offset,
                        "consume queue entry points at a record of another queue; skipped"
                    );
                    status = GetStatus::OffsetFoundNull;
                    continue;
                }
                Ok(view) if filter.matches_record(&view) => {}
                Ok(_) => continue,
                Err(e) => {
                    // Never served: a damaged record is skipped, so consumers move past it.
                    tracing::error!(
                        topic,
                        queue_id,
                        queue_offset = next - 1,
                        physical_offset = entry.physical_offset,
                        error = %e,
                        "damaged record in the commit log; skipped"
                    );
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
        Ok(result)
    }

    /// Deletes a topic's ConsumeQueues (files and directories) and forgets its queue offsets,
    /// as RocketMQ's DELETE_TOPIC_IN_BROKER does; its records stay in the CommitLog until
    /// retention removes them. Returns how many queues went.
    pub fn delete_topic(&self, topic: &str) -> Result<usize> {
        self.core
            .commit_log
            .lock_append()
            .queue_offsets
            .remove_topic(topic);
        self.core.queues.remove_topic(topic)
    }

    /// Whether a read of `max_count` entries and about `max_bytes` from `offset` of the queue
    /// would find its entries and records in memory. Callers on an async runtime read cold data on a blocking thread instead: a
    /// page fault that waits for the disk must not stall a runtime worker (and every request
    /// it serves).
    pub fn is_resident(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
    ) -> bool {
        let Some(cq) = self.core.queues.get(topic, queue_id) else {
            return true;
        };
        // The queue's entries first: reading even one entry of a cold file faults.
        if !cq.is_resident(offset, max_count) {
            return false;
        }
        let Some(entry) = cq.get(offset) else {
            return true;
        };
        let log = &self.core.commit_log;
        let from = entry.physical_offset.max(log.min_offset());
        let to = from
            .saturating_add(max_bytes.max(entry.size as usize) as u64)
            .min(log.max_offset());
        log.is_resident(from, to)
    }

    /// The record at a commit-log offset (VIEW_MESSAGE_BY_ID, CONSUMER_SEND_MSG_BACK).
    pub fn message_at(&self, physical_offset: u64) -> Option<RecordSlice> {
        if physical_offset < self.core.commit_log.min_offset() {
            return None;
        }
        let slice = self.core.commit_log.read_record_at(physical_offset)?;
        // A damaged record is never handed out (its checksum no longer matches).
        RecordView::parse_verified(&slice, self.core.config.require_record_crc).ok()?;
        Some(slice)
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
        let Some(index) = &self.core.index else {
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

    /// The ConsumeQueue entry at `offset` of a queue (`None` outside [min, max) or for an
    /// unknown queue): what `mqadmin queryCq` shows.
    pub fn queue_entry(&self, topic: &str, queue_id: i32, offset: i64) -> Option<CqEntry> {
        let cq = self.core.queues.get(topic, queue_id)?;
        if offset < cq.min_offset() {
            return None;
        }
        cq.get(offset)
    }

    /// Deletes now the ConsumeQueue files whose entries all point below the CommitLog's
    /// minimum (RocketMQ's `cleanExpiredConsumerQueue`, which retention otherwise does after
    /// deleting segments). Unlike RocketMQ, a wholly expired queue keeps its offsets: it
    /// continues from its old end, so committed offsets never point past a restarted queue.
    /// Returns how many files went.
    pub fn clean_expired_queues(&self) -> Result<usize> {
        let min = self.core.commit_log.min_offset();
        let mut deleted = 0;
        for cq in self.core.queues.all() {
            deleted += cq.delete_expired(min)?;
        }
        Ok(deleted)
    }

    /// Lowest queue offset still readable (0 for an unknown queue).
    pub fn min_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.core
            .queues
            .get(topic, queue_id)
            .map_or(0, |q| q.min_offset())
    }

    /// Next queue offset to be written (0 for an unknown queue).
    pub fn max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.core
            .queues
            .get(topic, queue_id)
            .map_or(0, |q| q.max_offset())
    }

    /// STORETIMESTAMP of the message at a queue offset.
    pub fn store_time_at(&self, topic: &str, queue_id: i32, offset: i64) -> Option<i64> {
        let entry = self.core.queues.get(topic, queue_id)?.get(offset)?;
        let slice = self
            .core
            .commit_log
            .read(entry.physical_offset, entry.size as usize)?;
        RecordView::parse(&slice).ok().map(|v| v.store_timestamp())
    }

    /// STORETIMESTAMP of the oldest readable message of a queue.
    pub fn earliest_store_time(&self, topic: &str, queue_id: i32) -> Option<i64> {
        let cq = self.core.queues.get(topic, queue_id)?;
        (cq.min_offset()..cq.max_offset()).find_map(|o| self.store_time_at(topic, queue_id, o))
    }

    /// The first queue offset whose message was stored at or after `timestamp_ms` (the max
    /// offset if none), by binary search over the queue.
    pub fn offset_by_time(&self, topic: &str, queue_id: i32, timestamp_ms: i64) -> i64 {
        let Some(cq) = self.core.queues.get(topic, queue_id) else {
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
        self.core
            .queues
            .all()
            .iter()
            .map(|q| (q.topic().to_string(), q.queue_id()))
            .collect()
    }

    /// Lowest commit-log offset on disk.
    pub fn commit_log_min_offset(&self) -> u64 {
        self.core.commit_log.min_offset()
    }

    /// End of the commit log.
    pub fn commit_log_max_offset(&self) -> u64 {
        self.core.commit_log.max_offset()
    }

    /// Offset below which the commit log is durable.
    pub fn commit_log_flushed_offset(&self) -> u64 {
        self.core.commit_log.flushed_offset()
    }

    /// Offset below which records are in ConsumeQueues and the index.
    pub fn dispatched_offset(&self) -> u64 {
        self.core.dispatched.load(Ordering::Acquire)
    }

    /// Waits until everything appended so far is dispatched (tests and shutdown).
    pub fn wait_dispatched(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let target = self.commit_log_max_offset().min(self.confirm_offset());
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
        retention::clean_once(&self.core)
    }

    /// How long CommitLog flushes took (the histogram shares its counts with the flusher).
    pub fn flush_latency(&self) -> prometheus::Histogram {
        self.core.flush.latency()
    }

    /// The error of a failed CommitLog flush, if one failed: the store then refuses writes
    /// (and the broker reports not ready) until it is reopened.
    pub fn flush_failure(&self) -> Option<String> {
        self.core.flush.failure()
    }

    /// Whether the store takes writes: not shut down, its last flush did not fail and the
    /// disk is not over its full watermark.
    pub fn is_writable(&self) -> bool {
        !self.core.shutdown.is_set() && self.flush_failure().is_none() && !self.is_disk_full()
    }

    /// True while appends are refused for lack of disk space.
    pub fn is_disk_full(&self) -> bool {
        self.core.disk.is_full()
    }

    /// Stops the services, flushes everything, writes the checkpoint and removes the abort
    /// marker. Called by `Drop` too; calling it twice is harmless.
    pub fn shutdown(&self) -> Result<()> {
        let core = &self.core;
        if !core.shutdown.set() {
            return Ok(());
        }
        self.services.stop(core);
        let end = core.commit_log.max_offset();
        core.commit_log.flush(end)?;
        core.checkpoint()?;
        let abort = core.config.root.join("abort");
        std::fs::remove_file(&abort).ctx(|| format!("remove {}", abort.display()))?;
        sync_dir(&core.config.root)?;
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
