//! CleanService: deletes old data so the disk never fills. CommitLog segments older than the
//! retention time go first; above the force-clean watermark the oldest segments go even if
//! young; above the full watermark appends are refused until space comes back. ConsumeQueue
//! and index files that only point below the CommitLog's new minimum follow.

use std::time::{Duration, SystemTime};

use crate::core::StoreCore;
use crate::disk::{disk_usage, over};
use crate::error::Result;

/// Segments deleted per round at most (RocketMQ's `deleteFileBatchMax`).
const DELETE_BATCH_MAX: usize = 10;

/// One cleanup round. Returns how many CommitLog segments were deleted.
pub(crate) fn clean_once(core: &StoreCore) -> Result<usize> {
    let cfg = &core.config;
    let usage = core.disk.refresh()?;
    let now = SystemTime::now();
    let expired = |modified: Option<SystemTime>| {
        modified
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age >= cfg.retention)
    };
    let mut deleted = 0usize;
    core.commit_log.delete_segments(|seg| {
        if deleted >= DELETE_BATCH_MAX || !expired(seg.modified()) {
            return false;
        }
        deleted += 1;
        true
    })?;
    if over(usage, cfg.disk_force_clean_ratio) {
        let mut forced = 0usize;
        core.commit_log.delete_segments(|_| {
            // Re-check after each deletion: stop as soon as we are under the watermark.
            let still = disk_usage(&cfg.root).is_ok_and(|u| over(u, cfg.disk_force_clean_ratio));
            if forced >= DELETE_BATCH_MAX || !still {
                return false;
            }
            forced += 1;
            true
        })?;
        if forced > 0 {
            tracing::warn!(
                usage,
                forced,
                "disk over the force-clean watermark: deleted the oldest segments"
            );
        }
        deleted += forced;
    }
    if deleted > 0 {
        let min = core.commit_log.min_offset();
        for cq in core.queues.all() {
            cq.delete_expired(min)?;
        }
        if let Some(index) = &core.index {
            index.delete_expired(min)?;
        }
        core.disk.refresh()?;
    }
    Ok(deleted)
}

/// The cleaner thread's body.
pub(crate) fn run(core: &StoreCore) {
    while !core.shutdown.is_set() {
        if let Err(e) = clean_once(core) {
            tracing::error!(error = %e, "cleanup failed");
        }
        core.shutdown
            .sleep(core.config.clean_interval.max(Duration::from_millis(10)));
    }
}
