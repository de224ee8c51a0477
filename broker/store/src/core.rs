//! StoreCore: the state every part of the store shares (RocketMQ's DefaultMessageStore
//! fields). The facade ([`crate::MessageStore`]), recovery and the background services all
//! hold it; it depends on none of them, so there is no import circle between them.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use crate::checkpoint::Checkpoint;
use crate::commit_log::CommitLog;
use crate::config::StoreConfig;
use crate::disk::DiskGuard;
use crate::epoch::EpochHistory;
use crate::flush::FlushService;
use crate::index::IndexService;
use crate::queues::ConsumeQueueTable;
use crate::shutdown::ShutdownSignal;

/// Called by the dispatcher when a queue grows: (topic, queue id, new max offset).
pub type ArrivalListener = Arc<dyn Fn(&str, i32, i64) + Send + Sync>;

/// Shared store state.
pub(crate) struct StoreCore {
    /// What the store was opened with.
    pub(crate) config: StoreConfig,
    /// Every record, in append order.
    pub(crate) commit_log: CommitLog,
    /// Per-queue offset indexes built by the dispatcher.
    pub(crate) queues: ConsumeQueueTable,
    /// Key index, when enabled.
    pub(crate) index: Option<IndexService>,
    /// Every record below this offset was dispatched (see `dispatch_floor` for the records
    /// of a stalled queue).
    pub(crate) dispatched: AtomicU64,
    /// Lowest offset of a record whose queue entry the dispatcher could not write yet
    /// (`u64::MAX` when none): the checkpoint never claims past it, so a restart re-dispatches
    /// it.
    pub(crate) dispatch_floor: AtomicU64,
    /// The high watermark (RocketMQ's `confirmOffset`): the dispatcher never goes past it, so
    /// no consumer sees a record before the replicas that must hold it do. `u64::MAX` when
    /// nothing holds dispatch back (no synchronous replication).
    pub(crate) confirm: AtomicU64,
    /// Held by the dispatcher while it walks, and by a live truncation so that the two never
    /// overlap. Taken after the append lock, never before it.
    pub(crate) dispatch_lock: Mutex<()>,
    /// Woken after every append, for replication senders waiting for new bytes.
    pub(crate) appended: tokio::sync::Notify,
    /// The master terms that wrote the log (persisted in the epoch file); changed under the
    /// append lock so that a term's start offset is exact.
    pub(crate) epochs: Mutex<EpochHistory>,
    /// Held while the checkpoint file is written.
    checkpoint_lock: Mutex<()>,
    /// SYNC group commit and the ASYNC flusher.
    pub(crate) flush: FlushService,
    /// Set on shutdown; background threads sleep on it.
    pub(crate) shutdown: ShutdownSignal,
    /// Refuses appends while the disk is over the full watermark.
    pub(crate) disk: DiskGuard,
    /// The broker's callback for queue growth (long polling).
    listener: RwLock<Option<ArrivalListener>>,
    /// The dispatcher thread, unparked on shutdown.
    pub(crate) dispatcher: OnceLock<std::thread::Thread>,
    /// Held for the store's lifetime: the `lock` file's flock.
    _lock: File,
}

impl StoreCore {
    /// Shared state over opened (not yet recovered) parts.
    pub(crate) fn new(
        config: StoreConfig,
        commit_log: CommitLog,
        queues: ConsumeQueueTable,
        index: Option<IndexService>,
        lock: File,
        epochs: EpochHistory,
    ) -> Self {
        Self {
            disk: DiskGuard::new(&config.root, config.disk_full_ratio),
            config,
            commit_log,
            queues,
            index,
            dispatched: AtomicU64::new(0),
            dispatch_floor: AtomicU64::new(u64::MAX),
            confirm: AtomicU64::new(u64::MAX),
            dispatch_lock: Mutex::new(()),
            appended: tokio::sync::Notify::new(),
            epochs: Mutex::new(epochs),
            checkpoint_lock: Mutex::new(()),
            flush: FlushService::default(),
            shutdown: ShutdownSignal::default(),
            listener: RwLock::new(None),
            dispatcher: OnceLock::new(),
            _lock: lock,
        }
    }

    /// The arrival listener, if the broker set one.
    pub(crate) fn arrival_listener(&self) -> Option<ArrivalListener> {
        self.listener
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The dispatch lock (see `dispatch_lock`).
    pub(crate) fn lock_dispatch(&self) -> MutexGuard<'_, ()> {
        self.dispatch_lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The epoch history.
    pub(crate) fn lock_epochs(&self) -> MutexGuard<'_, EpochHistory> {
        self.epochs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the arrival listener.
    pub(crate) fn set_arrival_listener(&self, listener: ArrivalListener) {
        *self.listener.write().unwrap_or_else(|e| e.into_inner()) = Some(listener);
    }

    /// Flushes ConsumeQueues and the index, then records what is durable. Serialised: the
    /// checkpoint thread and a live truncation both write it, through one temp file.
    pub(crate) fn checkpoint(&self) -> crate::Result<()> {
        let _one_writer = self
            .checkpoint_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let dispatched = self
            .dispatched
            .load(Ordering::Acquire)
            .min(self.dispatch_floor.load(Ordering::Acquire));
        for cq in self.queues.all() {
            cq.flush()?;
        }
        if let Some(index) = &self.index {
            index.flush()?;
        }
        Checkpoint {
            commit_log_flushed: self.commit_log.flushed_offset(),
            dispatch_flushed: dispatched,
            written_at_ms: conveyor_protocol::time::now_ms() as u64,
        }
        .store(&self.config.root)
    }
}
