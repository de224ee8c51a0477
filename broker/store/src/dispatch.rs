//! Dispatcher (RocketMQ's ReputMessageService): reads the CommitLog behind the appenders and
//! builds ConsumeQueue and index entries, then tells the arrival listener (the broker's long
//! polling) that a queue grew. Recovery re-runs the same code over the recovered tail, which is
//! why ConsumeQueues can always be rebuilt from the CommitLog.

use std::sync::atomic::Ordering;
use std::time::Duration;

use conveyor_protocol::message::tag_hash_code;
use conveyor_protocol::message::{keys, RecordView, BLANK_MAGIC, DAMAGED_MAGIC};
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
    let flag = view.sys_flag();
    if targets.consume_queue && sysflag::is_consumable(flag) {
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
    }
    if let Some(index) = &core.index {
        let rolled_back = sysflag::transaction_type(flag) == sysflag::TRANSACTION_ROLLBACK_TYPE;
        if targets.index && !rolled_back {
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
            }?;
        }
    }
    Ok(())
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
        if head.len() == 8 {
            let magic = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
            let size = u64::from(u32::from_be_bytes([head[0], head[1], head[2], head[3]]));
            if magic == BLANK_MAGIC {
                pos = seg.end();
                continue;
            }
            if magic == DAMAGED_MAGIC && size >= 8 && pos + size <= seg.end() {
                // A range recovery found damaged and kept a copy of; records follow it.
                pos += size;
                continue;
            }
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

/// The dispatcher thread's body.
pub(crate) fn run(core: &StoreCore) {
    let targets = Targets {
        consume_queue: true,
        index: true,
    };
    loop {
        let from = core.dispatched.load(Ordering::Acquire);
        let to = core.commit_log.max_offset();
        if from < to {
            let result = walk(core, from, to, |phys, view| {
                dispatch_record(core, phys, view, targets)?;
                // Publish per record so long-polling consumers see it right away.
                core.dispatched
                    .store(phys + view.total_size() as u64, Ordering::Release);
                Ok(())
            });
            let stuck = match result {
                Ok(reached) => {
                    core.dispatched
                        .fetch_max(reached, Ordering::AcqRel)
                        .max(reached)
                        < to
                }
                Err(e) => {
                    tracing::error!(error = %e, "dispatch failed; retrying");
                    true
                }
            };
            if stuck && !core.shutdown.is_set() {
                std::thread::sleep(Duration::from_millis(100));
            } else if stuck {
                return;
            }
            continue;
        }
        if core.shutdown.is_set() {
            return;
        }
        std::thread::park_timeout(Duration::from_millis(1));
    }
}
