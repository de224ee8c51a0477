//! AllocateService (RocketMQ's AllocateMappedFileService): creates the next CommitLog segment
//! on its own thread before the writer needs it. Creating a segment means `posix_fallocate`
//! of a whole segment (1 GiB by default), optionally writing zeros over it, and an fsync of
//! the directory; done inside a roll it would stall every appender holding or waiting for the
//! append lock, and the tokio workers they run on, for that long.
//!
//! Segments are prepared in a directory of their own (`commitlog-prepared/`, beside
//! `commitlog/`), so the CommitLog directory only ever holds segments that belong to the log.
//! The CommitLog asks for the segment after the one it just started; when it rolls, it takes
//! the prepared segment and renames it into place (a metadata-only step; the directory fsync
//! that makes the new name durable is left to the next flush, off the append lock). Only when appends outrun the allocator (or no allocator thread runs,
//! as in unit tests of the CommitLog alone) does a roll wait for, or do, the work itself.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::error::{IoContext, Result, StoreError};
use crate::mapped_file::{file_name, list_offsets, Allocation, MappedFile};

/// How long a roll waits for the allocator before reporting an error.
const TAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The allocator's mutable state.
#[derive(Default)]
struct Slot {
    /// Base of the segment the allocator should prepare next.
    requested: Option<u64>,
    /// The prepared segment (or why preparing it failed), with its base.
    ready: Option<(u64, Result<MappedFile>)>,
    /// The allocator thread is running.
    running: bool,
    /// The allocator thread should exit.
    stopping: bool,
}

/// Prepares CommitLog segments ahead of the writer.
pub(crate) struct AllocateService {
    /// Where segments are prepared.
    dir: PathBuf,
    /// Segment size.
    segment_size: u64,
    /// Whether new segments are written with zeros before use.
    allocation: Allocation,
    /// Request, result and lifecycle.
    slot: Mutex<Slot>,
    /// Signalled when `slot` changes.
    changed: Condvar,
}

impl AllocateService {
    /// An allocator preparing segments of `segment_size` in `dir`; nothing runs until
    /// [`Self::run`].
    pub(crate) fn new(dir: &Path, segment_size: u64, allocation: Allocation) -> Self {
        Self {
            dir: dir.to_path_buf(),
            segment_size,
            allocation,
            slot: Mutex::new(Slot::default()),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn create(&self, base: u64) -> Result<MappedFile> {
        crate::mapped_file::create_dir_durable(&self.dir)?;
        // Only one segment is prepared at a time: anything else here is left over from a
        // previous run and would only hold disk space.
        for stale in list_offsets(&self.dir)?.into_iter().filter(|b| *b != base) {
            let path = self.dir.join(file_name(stale));
            std::fs::remove_file(&path).ctx(|| format!("delete {}", path.display()))?;
        }
        let file = MappedFile::create(&self.dir, base, self.segment_size, self.allocation)?;
        tracing::debug!(segment = %file.path().display(), "prepared commit log segment");
        Ok(file)
    }

    /// Asks for the segment starting at `base` to be prepared (does not wait). A request for
    /// a segment already prepared or being prepared is a no-op.
    pub(crate) fn request(&self, base: u64) {
        let mut slot = self.lock();
        if slot.requested == Some(base) || slot.ready.as_ref().is_some_and(|(b, _)| *b == base) {
            return;
        }
        slot.requested = Some(base);
        self.changed.notify_all();
    }

    /// The segment starting at `base`: the prepared one when ready, else waits for the
    /// allocator, or creates it on this thread when no allocator runs.
    pub(crate) fn take(&self, base: u64) -> Result<MappedFile> {
        let mut slot = self.lock();
        if !slot.running {
            drop(slot);
            return self.create(base);
        }
        if slot.requested != Some(base) && slot.ready.as_ref().is_none_or(|(b, _)| *b != base) {
            slot.requested = Some(base);
            self.changed.notify_all();
        }
        let deadline = std::time::Instant::now() + TAKE_TIMEOUT;
        loop {
            if let Some((b, _)) = &slot.ready {
                if *b == base {
                    let (_, result) = slot.ready.take().expect("checked above");
                    return result;
                }
            }
            if !slot.running {
                drop(slot);
                return self.create(base);
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(StoreError::Io {
                    context: format!("waiting for commit log segment {base}"),
                    source: std::io::Error::from(std::io::ErrorKind::TimedOut),
                });
            }
            slot = self
                .changed
                .wait_timeout(slot, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The allocator thread's body: prepares requested segments until [`Self::stop`].
    pub(crate) fn run(&self) {
        let mut slot = self.lock();
        slot.running = true;
        loop {
            if slot.stopping {
                break;
            }
            let Some(base) = slot.requested.take() else {
                slot = self.changed.wait(slot).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            if slot.ready.as_ref().is_some_and(|(b, _)| *b == base) {
                continue;
            }
            // An unclaimed segment prepared earlier stays on disk; the CommitLog finds it on
            // its next roll or at the next open.
            drop(slot);
            let result = self.create(base);
            if let Err(e) = &result {
                tracing::warn!(base, error = %e, "preparing the next commit log segment failed");
            }
            slot = self.lock();
            slot.ready = Some((base, result));
            self.changed.notify_all();
        }
        slot.running = false;
        slot.ready = None;
        self.changed.notify_all();
    }

    /// Makes [`Self::run`] return.
    pub(crate) fn stop(&self) {
        self.lock().stopping = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn prepares_ahead_and_hands_over() {
        let dir = tempfile::tempdir().unwrap();
        let alloc = Arc::new(AllocateService::new(dir.path(), 4096, Allocation::Zeroed));
        let runner = {
            let alloc = alloc.clone();
            std::thread::spawn(move || alloc.run())
        };
        alloc.request(4096);
        let f = alloc.take(4096).unwrap();
        assert_eq!(f.base(), 4096);
        // A take without a request works too.
        assert_eq!(alloc.take(8192).unwrap().base(), 8192);
        alloc.stop();
        runner.join().unwrap();
        // Without a running allocator the caller does the work.
        assert_eq!(alloc.take(12288).unwrap().base(), 12288);
    }
}
