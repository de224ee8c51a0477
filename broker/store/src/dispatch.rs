//! Dispatcher (RocketMQ's ReputMessageService): reads the CommitLog behind the appenders and
//! builds ConsumeQueue and index entries, then tells the arrival listener (the broker's long
//! polling) that a queue grew. Recovery re-runs the same code over the recovered tail, which is
//! why ConsumeQueues can always be rebuilt from the CommitLog.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use conveyor_protocol::message::tag_hash_code;
use conveyor_protocol::message::{keys, Marker, RecordView};
use conveyor_protocol::sysflag;

use crate::consume_queue::CqEntry;
use crate::core::StoreCore;
use crate::error::Result;

/// Which structures a dispatch writes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Targets {
    pub consume_queue: bool,
    pub index: bool,
}

/// Builds the entries of one record.
pub(crate) fn dispatch_record(
    core: &StoreCore,
    phys: u64,
    view: &RecordView<'_>,
    targets: Targets,
) -> Result<()> {
    if targets.consume_queue {
        put_queue_entry(core, phys, view)?;
    }
    if targets.index {
        put_index_entry(core, phys, view)?;
    }
    Ok(())
}

/// Writes the ConsumeQueue entry of a consumable record and tells the arrival listener.
fn put_queue_entry(core: &StoreCore, phys: u64, view: &RecordView<'_>) -> Result<()> {
    if !sysflag::is_consumable(view.sys_flag()) {
        return Ok(());
    }
    let cq = core.queues.get_or_create(view.topic(), view.queue_id())?;
    let tag_code = view.property(keys::TAGS).map_or(0, tag_hash_code);
    let entry = CqEntry {
        physical_offset: phys,
        size: view.total_size() as u32,
        tag_code,
    };
    // SAFETY: dispatch runs on the dispatcher thread, or in recovery before that thread
    // starts: the queue's single writer. Entries go in queue-offset order; recovery's
    // re-dispatch rewrites existing entries with the bytes they already hold.
    unsafe { cq.put(view.queue_offset(), entry) }?;
    if let Some(listener) = core.arrival_listener() {
        listener(view.topic(), view.queue_id(), view.queue_offset() + 1);
    }
    Ok(())
}

/// Adds a record's UNIQ_KEY and KEYS to the key index (rolled-back transaction records are
/// not indexed).
fn put_index_entry(core: &StoreCore, phys: u64, view: &RecordView<'_>) -> Result<()> {
    let Some(index) = &core.index else {
        return Ok(());
    };
    if sysflag::transaction_type(view.sys_flag()) == sysflag::TRANSACTION_ROLLBACK_TYPE {
        return Ok(());
    }
    let uniq = view.property(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
    let user_keys = view
        .property(keys::KEYS)
        .into_iter()
        .flat_map(|k| k.split(keys::KEY_SEPARATOR));
    // SAFETY: the dispatcher (or recovery before it starts) is the index's only writer.
    unsafe {
        index.put(
            view.topic(),
            uniq.into_iter().chain(user_keys),
            phys,
            view.store_timestamp().max(0) as u64,
        )
    }
}

/// Walks records in `[from, to)` (skipping segment-end blanks) and hands each to `visit`.
/// Returns the offset reached, which is `to` unless a record could not be parsed.
pub(crate) fn walk(
    core: &StoreCore,
    from: u64,
    to: u64,
    mut visit: impl FnMut(u64, &RecordView<'_>) -> Result<()>,
) -> Result<u64> {
    let log = &core.commit_log;
    let mut pos = from;
    while pos < to {
        let Some(seg) = log.segment_at(pos) else {
            // Below the minimum (deleted by retention): continue at the first segment.
            let min = log.min_offset();
            if min > pos {
                pos = min;
                continue;
            }
            break;
        };
        let rel = pos - seg.base();
        let avail = (to.min(seg.end()) - pos) as usize;
        let head = seg.read(rel, avail.min(8));
        match Marker::at(head, seg.end() - pos) {
            Some(Marker::SegmentEnd) => {
                pos = seg.end();
                continue;
            }
            // A range recovery found damaged and kept a copy of; records follow it.
            Some(Marker::Damaged(size)) => {
                pos += size;
                continue;
            }
            None => {}
        }
        match RecordView::parse(seg.read(rel, avail)) {
            Ok(view) => {
                visit(pos, &view)?;
                pos += view.total_size() as u64;
            }
            Err(e) => {
                tracing::error!(offset = pos, error = %e, "unparsable record in the commit log");
                break;
            }
        }
    }
    Ok(pos)
}

/// Queues the dispatcher could not write an entry for (a ConsumeQueue file that could not be
/// created: disk full, out of file descriptors), each with the offset of its first record
/// that lacks its entry. While a queue is here the dispatcher skips its records and goes on
/// with every other queue; retries re-walk the log from that offset for this queue alone, so
/// its entries still go in in order. One queue's trouble never stops delivery for the rest.
#[derive(Default)]
struct StalledQueues {
    /// (topic, queue id) → offset of the first record missing its entry.
    queues: HashMap<(String, i32), u64>,
    /// When to retry next.
    next_retry: Option<Instant>,
    /// Current retry interval (doubles up to [`MAX_RETRY_INTERVAL`]).
    interval: Duration,
}

/// First retry of a stalled queue.
const MIN_RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// Longest wait between retries of a stalled queue (each retry re-reads the log behind it).
const MAX_RETRY_INTERVAL: Duration = Duration::from_secs(5);

impl StalledQueues {
    /// Dispatches one record as it arrives: its queue entry unless its queue is stalled (a
    /// failure stalls it), and its index entry (an index failure is logged and the record left
    /// out of key lookups; it never holds up delivery).
    fn dispatch(&mut self, core: &StoreCore, phys: u64, view: &RecordView<'_>) {
        // The common case (nothing stalled) costs no key allocation.
        if self.queues.is_empty() || !self.is_stalled(view) {
            if let Err(e) = put_queue_entry(core, phys, view) {
                tracing::error!(
                    topic = view.topic(),
                    queue_id = view.queue_id(),
                    offset = phys,
                    error = %e,
                    "consume queue entry could not be written; the queue waits, others go on"
                );
                self.queues
                    .insert((view.topic().to_string(), view.queue_id()), phys);
                self.interval = MIN_RETRY_INTERVAL;
                self.next_retry = Some(Instant::now() + self.interval);
            }
        }
        if let Err(e) = put_index_entry(core, phys, view) {
            tracing::error!(offset = phys, error = %e, "record not added to the key index");
        }
    }

    /// Whether the record's queue is stalled.
    fn is_stalled(&self, view: &RecordView<'_>) -> bool {
        self.queues
            .contains_key(&(view.topic().to_string(), view.queue_id()))
    }

    /// Retries every stalled queue whose retry is due, up to `upto` (what the main walk has
    /// dispatched).
    fn retry_due(&mut self, core: &StoreCore, upto: u64) {
        if self.next_retry.is_none_or(|t| Instant::now() < t) {
            return;
        }
        self.queues.retain(|(topic, queue_id), first| {
            let result = walk(core, *first, upto, |phys, view| {
                if view.topic() == topic && view.queue_id() == *queue_id {
                    put_queue_entry(core, phys, view).inspect_err(|_| *first = phys)?;
                }
                Ok(())
            });
            match result {
                Ok(_) => {
                    tracing::info!(topic, queue_id, "stalled consume queue caught up");
                    false
                }
                Err(_) => true,
            }
        });
        self.interval = (self.interval * 2).min(MAX_RETRY_INTERVAL);
        self.next_retry = (!self.queues.is_empty()).then(|| Instant::now() + self.interval);
    }

    /// The lowest offset whose record may lack its entry (`u64::MAX` when none does).
    fn floor(&self) -> u64 {
        self.queues.values().copied().min().unwrap_or(u64::MAX)
    }
}

/// The dispatcher thread's body.
pub(crate) fn run(core: &StoreCore) {
    let mut stalled = StalledQueues::default();
    loop {
        let from = core.dispatched.load(Ordering::Acquire);
        stalled.retry_due(core, from);
        core.dispatch_floor
            .store(stalled.floor(), Ordering::Release);
        let to = core
            .commit_log
            .max_offset()
            .min(core.confirm.load(Ordering::Acquire));
        if from < to {
            let guard = core.lock_dispatch();
            // A live truncation may have moved `dispatched` back meanwhile.
            let from = core.dispatched.load(Ordering::Acquire);
            let to = to.min(core.commit_log.max_offset());
            let reached = walk(core, from, to, |phys, view| {
                stalled.dispatch(core, phys, view);
                // Publish per record so long-polling consumers see it right away.
                core.dispatched
                    .store(phys + view.total_size() as u64, Ordering::Release);
                Ok(())
            })
            .unwrap_or(from);
            core.dispatch_floor
                .store(stalled.floor(), Ordering::Release);
            let reached = core
                .dispatched
                .fetch_max(reached, Ordering::AcqRel)
                .max(reached);
            drop(guard);
            if reached < to {
                // An unparsable record below the committed end (`walk` logged it): wait for
                // an operator rather than spin.
                if core.shutdown.is_set() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        }
        if core.shutdown.is_set() {
            return;
        }
        std::thread::park_timeout(Duration::from_millis(1));
    }
}
