//! Prefaulting: keeps the pages just ahead of the CommitLog's write position faulted in
//! (RocketMQ warms mapped files for the same reason). A first touch of a page costs a fault
//! and, for a fresh page, zeroing it; both would otherwise land inside appends.

use std::time::Duration;

use crate::core::StoreCore;

/// How far ahead of the write position pages are faulted in.
const PREFAULT_AHEAD: u64 = 16 << 20;
/// Faulted in per step.
const PREFAULT_STEP: u64 = 1 << 20;

/// The prefault thread's body.
pub(crate) fn run(core: &StoreCore) {
    let mut warmed = 0u64;
    while !core.shutdown.is_set() {
        let write_pos = core.commit_log.max_offset();
        warmed = warmed.max(write_pos);
        if warmed >= write_pos + PREFAULT_AHEAD {
            std::thread::park_timeout(Duration::from_millis(1));
            continue;
        }
        match core.commit_log.segment_at(warmed) {
            Some(seg) => {
                let step = PREFAULT_STEP.min(seg.end() - warmed);
                seg.prefault(warmed - seg.base(), step);
                warmed += step;
            }
            // The next segment is not in the log yet: wait for the roll.
            None => std::thread::park_timeout(Duration::from_millis(1)),
        }
    }
}
