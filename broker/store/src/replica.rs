//! What replication needs from the store, in one place: appending a master's bytes verbatim
//! on a slave, the terms (epochs) that wrote the log, the high watermark, and cutting the log
//! back to a consistent point while the store runs (a former master rejoining as a slave).
//! The network side (who sends what to whom) is the broker's; this module only keeps every
//! structure of the store consistent with the CommitLog through those changes.

use std::sync::atomic::Ordering;

use crate::core::StoreCore;
use crate::dispatch::walk;
use crate::epoch::{EpochEntry, EpochFile};
use crate::error::{Result, StoreError};

/// Appends replicated bytes at `offset` (see [`crate::commit_log::CommitLog::append_replicated`]);
/// returns how many were taken.
pub(crate) fn append_replicated(core: &StoreCore, offset: u64, data: &[u8]) -> Result<usize> {
    if core.shutdown.is_set() {
        return Err(StoreError::ShutDown);
    }
    core.disk.check()?;
    if let Some(error) = core.flush.failure() {
        return Err(StoreError::FlushFailed(error));
    }
    let mut state = core.commit_log.lock_append();
    core.commit_log
        .append_replicated(&mut state, offset, data, core.config.require_record_crc)
}

/// Makes an empty store's log start at `offset` (a fresh slave of a master whose log starts
/// there). Refused when the store holds records.
pub(crate) fn start_empty_at(core: &StoreCore, offset: u64) -> Result<()> {
    let mut state = core.commit_log.lock_append();
    let _dispatch = core.lock_dispatch();
    core.commit_log.restart_empty_at(&mut state, offset)?;
    core.dispatched.store(offset, Ordering::Release);
    let mut epochs = core.lock_epochs();
    epochs.truncate_from(0);
    EpochFile::store(&core.config.root, &epochs)
}

/// Starts master term `epoch` at the end of the log and persists it. Re-announcing the
/// current term is a no-op; an older epoch is refused.
pub(crate) fn begin_epoch(core: &StoreCore, epoch: u32) -> Result<EpochEntry> {
    let state = core.commit_log.lock_append();
    let mut epochs = core.lock_epochs();
    let start = match epochs.last() {
        Some(last) if last.epoch == epoch => last.start_offset,
        Some(_) => state.write_pos,
        // The first term also covers what the log held before replication was configured,
        // so that every byte a slave receives belongs to a term.
        None => core.commit_log.min_offset(),
    };
    let mut next = epochs.clone();
    next.push(epoch, start)?;
    if next != *epochs {
        EpochFile::store(&core.config.root, &next)?;
        *epochs = next;
    }
    Ok(EpochEntry {
        epoch,
        start_offset: start,
    })
}

/// Records, on a slave, that the master's term `epoch` starts at `start` (when the stream
/// first carries it).
pub(crate) fn follow_epoch(core: &StoreCore, epoch: u32, start: u64) -> Result<()> {
    let mut epochs = core.lock_epochs();
    let mut next = epochs.clone();
    next.push(epoch, start)?;
    if next != *epochs {
        EpochFile::store(&core.config.root, &next)?;
        *epochs = next;
    }
    Ok(())
}

/// Cuts the store at `offset` while it runs: the CommitLog (zeroed from there, later
/// segments deleted), every ConsumeQueue (entries of records at or past the cut), the next
/// queue offsets, the dispatch position, the epochs starting at or past the cut and the
/// checkpoint. Index entries past the cut stay but can never match: every key lookup checks
/// the record it finds. The broker fences reads and writes while this runs.
pub(crate) fn truncate_to(core: &StoreCore, offset: u64) -> Result<()> {
    let mut state = core.commit_log.lock_append();
    let _dispatch = core.lock_dispatch();
    if offset >= state.write_pos {
        return Ok(());
    }
    tracing::warn!(
        from = offset,
        to = state.write_pos,
        "cutting the commit log back to the point shared with the master"
    );
    core.commit_log.truncate_live(&mut state, offset)?;
    // Next queue offsets: the queue ends after the cut, then every record below the cut that
    // the dispatcher had not reached yet.
    let dispatched = core.dispatched.load(Ordering::Acquire).min(offset);
    let mut next = crate::commit_log::QueueOffsetTable::default();
    for cq in core.queues.all() {
        // SAFETY: the dispatch lock stops the dispatcher (the queues' single writer), and the
        // broker serves no reads while it truncates.
        let end = unsafe { cq.truncate_live(offset) }?;
        next.set(cq.topic(), cq.queue_id(), end);
    }
    walk(core, dispatched, offset, |_, view| {
        if conveyor_protocol::sysflag::is_consumable(view.sys_flag()) {
            let n = view.queue_offset() + 1;
            if n > next.get(view.topic(), view.queue_id()) {
                next.set(view.topic(), view.queue_id(), n);
            }
        }
        Ok(())
    })?;
    state.queue_offsets = next;
    core.dispatched.store(dispatched, Ordering::Release);
    {
        let mut epochs = core.lock_epochs();
        epochs.truncate_from(offset);
        EpochFile::store(&core.config.root, &epochs)?;
    }
    drop(state);
    core.checkpoint()
}
