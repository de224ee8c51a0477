//! Recovery on open: verify the CommitLog from the checkpoint on, cut it at the first damaged
//! byte, bring every ConsumeQueue back in line with it, re-dispatch the verified tail (and
//! rebuild a missing index), and record the result in a fresh checkpoint.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use conveyor_protocol::message::RecordView;

use crate::checkpoint::Checkpoint;
use crate::core::StoreCore;
use crate::dispatch::{self, Targets};
use crate::error::{Result, StoreError};

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
    /// Damaged ranges in the scanned log that were skipped (a copy of each is in
    /// `quarantine/`), keeping the valid records after them.
    pub damaged_ranges: usize,
    /// Bytes in those ranges.
    pub damaged_bytes: u64,
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
    let require_crc = core.config.require_record_crc;
    let quarantine = core.config.root.join("quarantine");
    let mut recovered = log.recover(scan_from, require_crc, &quarantine, |_, _| {})?;
    let end = recovered.valid_end;
    // Where re-dispatch starts: the scanned segment, or earlier where a damaged queue lost
    // entries whose records lie before it.
    let mut redispatch_from = scan_from;
    for cq in core.queues.all() {
        // An entry is kept only if it leads to a record of its own queue and offset (or to
        // one retention already deleted, which cannot be checked and was valid when written).
        // The record is read with pread, like every read recovery makes: an unreadable block
        // fails the open with its offset, never a SIGBUS.
        let min = log.min_offset();
        let max_record = core.config.max_message_size;
        let lost_after = cq.recover(end, |queue_offset, entry| {
            if entry.physical_offset < min {
                return Ok(true);
            }
            let record =
                log.read_record_positional(entry.physical_offset, entry.size as usize, max_record)?;
            Ok(record
                .and_then(|slice| {
                    let view = RecordView::parse_verified(&slice, require_crc).ok()?;
                    Some(
                        view.topic() == cq.topic()
                            && view.queue_id() == cq.queue_id()
                            && view.queue_offset() == queue_offset,
                    )
                })
                .unwrap_or(false))
        })?;
        if let Some(from) = lost_after {
            redispatch_from = redispatch_from.min(from.max(log.min_offset()));
        }
    }
    // ConsumeQueues: re-dispatch the verified tail. `scan_from` is a segment start, so the walk
    // starts on a record boundary; it must reach the end, or records would miss their queue
    // while new messages reused their queue offsets.
    // The scan read `[scan_from, end)` with positional reads; a walk that starts before it
    // reads that part the same way first.
    let redispatch = |from: u64| {
        log.check_readable(from, scan_from.min(end))?;
        dispatch::walk(core, from, end, |phys, view| {
            let targets = Targets {
                consume_queue: true,
                index: false,
            };
            dispatch::dispatch_record(core, phys, view, targets)
        })
    };
    let mut reached = redispatch(redispatch_from)?;
    if reached < end && reached < scan_from {
        // A damaged queue sent the walk back before the verified part of the log, and it met
        // a record that does not parse there (a segment cut or damaged after its flush was
        // checkpointed). Verify the log from that segment on, as for the scanned part: the
        // damaged bytes are marked and quarantined and the records after them kept; then the
        // walk goes on past them. It walks again from the segment's start: the record it
        // stopped at may lie inside a damaged range, which is marked from the range's first
        // byte (re-dispatching a record twice rewrites its entry with the same bytes).
        let segment = reached - reached % seg;
        let again = log.recover(segment, require_crc, &quarantine, |_, _| {})?;
        if again.valid_end == end {
            recovered.scanned += again.scanned;
            recovered.damaged.extend(again.damaged);
            reached = redispatch(segment)?;
        }
    }
    if reached < end {
        return Err(StoreError::Corrupt(format!(
            "re-dispatch stopped at {reached}, before the end of the verified log at {end}"
        )));
    }
    // Index: rebuild what it lacks, walking from the start of the segment holding the last
    // indexed record (a record boundary; the index may lag the ConsumeQueues by segments).
    if core.index.is_some() {
        let last = core.index.as_ref().and_then(|index| index.indexed_upto());
        let from = match last {
            Some(u) => (u - u % seg).max(log.min_offset()),
            None => log.min_offset(),
        };
        log.check_readable(from, scan_from.min(end))?;
        dispatch::walk(core, from.min(end), end, |phys, view| {
            if last.is_some_and(|u| phys <= u) {
                return Ok(());
            }
            let targets = Targets {
                consume_queue: false,
                index: true,
            };
            dispatch::dispatch_record(core, phys, view, targets)
        })?;
    }
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
        cq.correct_min(min)?;
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
        damaged_ranges: recovered.damaged.len(),
        damaged_bytes: recovered.damaged.iter().map(|(_, len)| len).sum(),
    };
    tracing::info!(?report, "store recovered");
    Ok(report)
}
