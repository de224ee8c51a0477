//! Recovery on open: verify the CommitLog from the checkpoint on, cut it at the first damaged
//! byte, bring every ConsumeQueue back in line with it, re-dispatch the verified tail (and
//! rebuild a missing index), and record the result in a fresh checkpoint.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::checkpoint::Checkpoint;
use crate::core::StoreCore;
use crate::dispatch::{self, Targets};
use crate::error::Result;

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

/// Recovers `core` (opened, nothing served yet). `unclean` is set when the previous run left
/// its abort marker behind.
pub(crate) fn recover(core: &StoreCore, unclean: bool, started: Instant) -> Result<RecoveryReport> {
    let log = &core.commit_log;
    let checkpoint = Checkpoint::load(&core.config.root).unwrap_or_default();
    let seg = log.segment_size();
    let mut scan_from = checkpoint.safe_offset();
    scan_from -= scan_from % seg;
    if unclean {
        // Be generous after a crash: re-verify one more segment.
        scan_from = scan_from.saturating_sub(seg);
    }
    scan_from = scan_from.max(log.min_offset());
    let recovered = log.recover(scan_from, core.config.require_record_crc, |_, _| {})?;
    let end = recovered.valid_end;
    for cq in core.queues.all() {
        cq.recover(end)?;
    }
    // Re-dispatch the scanned tail; rebuild the index from further back if it is missing.
    let index_from = match &core.index {
        Some(index) => index.indexed_upto().map_or(log.min_offset(), |u| u + 1),
        None => end,
    };
    let from = scan_from.min(index_from);
    dispatch::walk(core, from, end, |phys, view| {
        let targets = Targets {
            consume_queue: phys >= scan_from,
            index: phys >= index_from,
        };
        dispatch::dispatch_record(core, phys, view, targets)
    })?;
    // The next queue offsets follow from the queues.
    {
        let mut state = log.lock_append();
        for cq in core.queues.all() {
            state
                .queue_offsets
                .set(cq.topic(), cq.queue_id(), cq.max_offset());
        }
    }
    let min = log.min_offset();
    for cq in core.queues.all() {
        cq.correct_min(min);
    }
    core.dispatched.store(end, Ordering::Release);
    core.checkpoint()?;
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
