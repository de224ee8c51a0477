//! CleanService: deletes old data so the disk never fills. CommitLog segments older than the
//! retention time go first; above the force-clean watermark the oldest segments go even if
//! young; above the full watermark appends are refused until space comes back. ConsumeQueue
//! and index files that only point below the CommitLog's new minimum follow.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use crate::error::{Result, StoreError};
use crate::store::Inner;

/// Segments deleted per round at most (RocketMQ's `deleteFileBatchMax`).
const DELETE_BATCH_MAX: usize = 10;

/// Fraction of the filesystem holding `path` that is in use, as `df` reports it.
pub fn disk_usage(path: &Path) -> Result<f64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| StoreError::InvalidConfig(format!("path {} has a NUL", path.display())))?;
    // SAFETY: `stat` is a plain out-parameter struct, zero is a valid bit pattern for it.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid NUL-terminated path and out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut stat) } != 0 {
        return Err(StoreError::Io {
            context: format!("statvfs {}", path.display()),
            source: std::io::Error::last_os_error(),
        });
    }
    // df's "Use%": blocks in use over blocks usable by us (in use + available). Counting
    // blocks reserved for others as used would make a filesystem with a large reservation
    // look nearly full and trigger forced deletion on an idle disk.
    let used = stat.f_blocks.saturating_sub(stat.f_bfree) as f64;
    let usable = used + stat.f_bavail as f64;
    if usable <= 0.0 {
        return Ok(0.0);
    }
    Ok(used / usable)
}

/// True when `usage` reached a watermark; a watermark of 1.0 or more is switched off.
fn over(usage: f64, watermark: f64) -> bool {
    watermark < 1.0 && usage >= watermark
}

/// Re-reads disk usage and updates the disk-full flag; returns the usage.
pub(crate) fn refresh_disk_full(inner: &Inner) -> Result<f64> {
    let usage = disk_usage(&inner.config.root)?;
    let full = over(usage, inner.config.disk_full_ratio);
    let was = inner.disk_full.swap(full, Ordering::AcqRel);
    if full && !was {
        tracing::error!(
            usage,
            watermark = inner.config.disk_full_ratio,
            "disk full: refusing writes"
        );
    } else if was && !full {
        tracing::info!(usage, "disk has room again: accepting writes");
    }
    Ok(usage)
}

/// One cleanup round. Returns how many CommitLog segments were deleted.
pub(crate) fn clean_once(inner: &Inner) -> Result<usize> {
    let cfg = &inner.config;
    let usage = refresh_disk_full(inner)?;
    let now = SystemTime::now();
    let expired = |modified: Option<SystemTime>| {
        modified
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age >= cfg.retention)
    };
    let mut deleted = 0usize;
    inner.commit_log.delete_segments(|seg| {
        if deleted >= DELETE_BATCH_MAX || !expired(seg.modified()) {
            return false;
        }
        deleted += 1;
        true
    })?;
    if over(usage, cfg.disk_force_clean_ratio) {
        let mut forced = 0usize;
        inner.commit_log.delete_segments(|_| {
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
        let min = inner.commit_log.min_offset();
        for cq in inner.all_queues() {
            cq.delete_expired(min)?;
        }
        if let Some(index) = &inner.index {
            index.delete_expired(min)?;
        }
        refresh_disk_full(inner)?;
    }
    Ok(deleted)
}

/// The cleaner thread's body.
pub(crate) fn run(inner: &Inner) {
    while !inner.shutdown.load(Ordering::Acquire) {
        if let Err(e) = clean_once(inner) {
            tracing::error!(error = %e, "cleanup failed");
        }
        inner.sleep_unless_shutdown(inner.config.clean_interval.max(Duration::from_millis(10)));
    }
}
