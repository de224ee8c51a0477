//! MappedFileQueue (RocketMQ's name): an ordered, gap-free run of equally sized
//! [`MappedFile`]s in one directory, each named by the offset of its first byte. The CommitLog
//! and every ConsumeQueue are one such run; this module is the one place that finds the file
//! holding an offset, appends the next file, cuts the run at an offset (recovery, and later
//! truncation to an epoch start) and deletes files from its front (retention).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::error::{Result, StoreError};
use crate::mapped_file::{list_offsets, sync_dir, MappedFile};

/// What [`MappedFileQueue::load`] does when the files on disk are not contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnGap {
    /// Refuse to open: a hole in the CommitLog means lost records, which an operator must see.
    Refuse,
    /// Keep the newest contiguous run and delete the files before the gap: a ConsumeQueue can
    /// restart further on once everything older was deleted, so its oldest run is unreachable.
    KeepNewest,
}

/// An ordered run of mapped files.
pub(crate) struct MappedFileQueue {
    /// Directory holding the files.
    dir: PathBuf,
    /// Size of every file; file bases are multiples of it.
    file_size: u64,
    /// What a gap means, at load and when a file is appended past the run's end.
    on_gap: OnGap,
    /// The files, oldest first, each starting where the previous one ends.
    files: RwLock<Vec<Arc<MappedFile>>>,
}

impl std::fmt::Debug for MappedFileQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFileQueue")
            .field("dir", &self.dir)
            .field("files", &self.snapshot().len())
            .finish()
    }
}

impl MappedFileQueue {
    /// Opens the files already in `dir` (creating the directory when `create_dir` is set).
    pub(crate) fn load(
        dir: &Path,
        file_size: u64,
        on_gap: OnGap,
        create_dir: bool,
    ) -> Result<Self> {
        if create_dir {
            crate::mapped_file::create_dir_durable(dir)?;
        }
        let mut files: Vec<Arc<MappedFile>> = Vec::new();
        for base in list_offsets(dir)? {
            if base % file_size != 0 {
                return Err(StoreError::Corrupt(format!(
                    "{} holds file {base}, which is not aligned to the file size {file_size}",
                    dir.display()
                )));
            }
            if let Some(prev) = files.last().map(|f| f.end()) {
                if prev != base {
                    match on_gap {
                        OnGap::Refuse => {
                            return Err(StoreError::Corrupt(format!(
                                "{} has a gap: file {base} follows one ending at {prev}",
                                dir.display()
                            )))
                        }
                        OnGap::KeepNewest => {
                            for f in files.drain(..) {
                                f.delete()?;
                            }
                        }
                    }
                }
            }
            files.push(Arc::new(MappedFile::open(dir, base, file_size)?));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            file_size,
            on_gap,
            files: RwLock::new(files),
        })
    }

    /// Directory holding the files.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Size of every file.
    pub(crate) fn file_size(&self) -> u64 {
        self.file_size
    }

    /// The file containing `offset`, if any.
    pub(crate) fn find(&self, offset: u64) -> Option<Arc<MappedFile>> {
        let files = self.files.read().unwrap_or_else(|e| e.into_inner());
        let first = files.first()?.base();
        if offset < first {
            return None;
        }
        files
            .get(((offset - first) / self.file_size) as usize)
            .cloned()
    }

    /// The oldest file.
    pub(crate) fn first(&self) -> Option<Arc<MappedFile>> {
        self.files
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .first()
            .cloned()
    }

    /// Offset one past the newest file.
    fn end(&self) -> Option<u64> {
        self.files
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .map(|f| f.end())
    }

    /// A copy of the file list, oldest first.
    pub(crate) fn snapshot(&self) -> Vec<Arc<MappedFile>> {
        self.files.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Offset of the first byte still on disk.
    pub(crate) fn min_offset(&self) -> Option<u64> {
        self.first().map(|f| f.base())
    }

    /// Returns the file starting at `base`, appending the one `create` makes when the run does
    /// not have it yet (then `true` comes with it: the caller makes the new name durable with
    /// [`sync_dir`] before it relies on the file). A `base` past the run's end is a gap, handled
    /// as the queue's [`OnGap`] says (a ConsumeQueue restarting further on after retention
    /// deletes every older file; the CommitLog refuses); a `base` below the run is refused.
    pub(crate) fn get_or_append(
        &self,
        base: u64,
        create: impl FnOnce() -> Result<MappedFile>,
    ) -> Result<(Arc<MappedFile>, bool)> {
        if let Some(f) = self.find(base) {
            return Ok((f, false));
        }
        let refuse = |what: &str| {
            Err(StoreError::Corrupt(format!(
                "{}: file {base} would {what}",
                self.dir.display()
            )))
        };
        if self.first().is_some_and(|f| base < f.base()) {
            return refuse("lie below the first file");
        }
        if self.on_gap == OnGap::Refuse && self.end().is_some_and(|end| base > end) {
            return refuse("leave a gap after the last file");
        }
        let file = Arc::new(create()?);
        debug_assert_eq!(file.base(), base);
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = files.iter().find(|f| f.base() == base) {
            // Appended by someone else meanwhile.
            return Ok((f.clone(), false));
        }
        if files.last().is_some_and(|l| l.end() != base) {
            // A gap under OnGap::KeepNewest (checked above for Refuse): the older run is
            // unreachable.
            for f in files.drain(..) {
                f.delete()?;
            }
        }
        files.push(file.clone());
        Ok((file, true))
    }

    /// Cuts the run at `offset`: the file containing it is zeroed from there on, later files
    /// are deleted (a file starting exactly at `offset` stays, empty, to anchor the run).
    /// Returns the files kept.
    ///
    /// # Safety
    /// No reader may read at or beyond `offset` during or after the call until a writer
    /// publishes new data there, and no writer writes concurrently (recovery before the store
    /// serves, or a writer that holds the queue's write side).
    pub(crate) unsafe fn truncate_to(&self, offset: u64) -> Result<Vec<Arc<MappedFile>>> {
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        let mut keep = Vec::with_capacity(files.len());
        let mut deleted = false;
        for f in files.iter() {
            if f.base() > offset {
                tracing::warn!(file = %f.path().display(), "deleting file past the cut");
                f.delete()?;
                deleted = true;
                continue;
            }
            if offset < f.end() {
                // SAFETY: the caller guarantees no reader or other writer touches bytes at or
                // beyond `offset`.
                unsafe { f.zero_from(offset - f.base()) };
            }
            keep.push(f.clone());
        }
        *files = keep.clone();
        drop(files);
        if deleted {
            sync_dir(&self.dir)?;
        }
        Ok(keep)
    }

    /// Deletes files from the front, oldest first, while `select` picks them, never the newest
    /// file (it anchors the write position across restarts). Returns how many went.
    pub(crate) fn delete_front(
        &self,
        mut select: impl FnMut(&MappedFile) -> bool,
    ) -> Result<usize> {
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        let deletable = files.len().saturating_sub(1);
        let mut removed = 0;
        for f in files.iter().take(deletable) {
            if !select(f) {
                break;
            }
            f.delete()?;
            removed += 1;
        }
        files.drain(..removed);
        drop(files);
        if removed > 0 {
            sync_dir(&self.dir)?;
        }
        Ok(removed)
    }

    /// Deletes every file (an empty CommitLog restarting at another offset).
    pub(crate) fn delete_front_all(&self) -> Result<()> {
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        for f in files.drain(..) {
            f.delete()?;
        }
        drop(files);
        sync_dir(&self.dir)
    }

    /// Flushes `[from, upto)` of the run, oldest file first.
    pub(crate) fn flush(&self, from: u64, upto: u64) -> Result<()> {
        for f in self.snapshot() {
            if f.end() <= from || f.base() >= upto {
                continue;
            }
            f.flush(upto.min(f.end()) - f.base())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(dir: &Path) -> MappedFileQueue {
        MappedFileQueue::load(dir, 100, OnGap::Refuse, true).unwrap()
    }

    fn append(q: &MappedFileQueue, base: u64) -> Arc<MappedFile> {
        q.get_or_append(base, || MappedFile::open(q.dir(), base, q.file_size()))
            .unwrap()
            .0
    }

    #[test]
    fn finds_appends_truncates_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path());
        assert!(q.find(0).is_none());
        for base in [0, 100, 200, 300] {
            append(&q, base);
        }
        assert_eq!(q.find(250).unwrap().base(), 200);
        assert!(q.find(400).is_none());
        // SAFETY: this test is the only reader and writer.
        unsafe { q.find(100).unwrap().write(10, b"abc") };
        // SAFETY: as above.
        let kept = unsafe { q.truncate_to(150) }.unwrap();
        assert_eq!(kept.len(), 2);
        assert_eq!(q.find(150).unwrap().read(10, 3), b"abc");
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![0, 100]);
        assert_eq!(q.delete_front(|_| true).unwrap(), 1);
        assert_eq!(q.min_offset(), Some(100));
        drop(q);
        let q = queue(dir.path());
        assert_eq!(q.snapshot().len(), 1);
        assert_eq!(q.find(100).unwrap().read(10, 3), b"abc");
    }

    #[test]
    fn a_zeroed_tail_and_an_anchor_file_stay() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path());
        let f = append(&q, 0);
        append(&q, 100);
        // SAFETY: only reader and writer.
        unsafe { f.write(10, b"xyz") };
        // SAFETY: as above.
        unsafe { q.truncate_to(100) }.unwrap();
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![0, 100]);
        // SAFETY: as above.
        unsafe { q.truncate_to(11) }.unwrap();
        assert_eq!(q.find(0).unwrap().read(10, 3), b"x\0\0");
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![0]);
    }

    #[test]
    fn gaps_are_refused_or_resolved_by_keeping_the_newest_run() {
        let dir = tempfile::tempdir().unwrap();
        for base in [0u64, 100, 300] {
            MappedFile::open(dir.path(), base, 100).unwrap();
        }
        assert!(matches!(
            MappedFileQueue::load(dir.path(), 100, OnGap::Refuse, false),
            Err(StoreError::Corrupt(_))
        ));
        let q = MappedFileQueue::load(dir.path(), 100, OnGap::KeepNewest, false).unwrap();
        assert_eq!(q.min_offset(), Some(300));
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![300]);
        // A restart further on deletes the older run too; a file below the run is refused.
        append(&q, 700);
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![700]);
        assert!(matches!(
            q.get_or_append(100, || MappedFile::open(q.dir(), 100, 100)),
            Err(StoreError::Corrupt(_))
        ));
        // The CommitLog's policy refuses a gap instead of deleting anything.
        let q = MappedFileQueue::load(dir.path(), 100, OnGap::Refuse, false).unwrap();
        assert!(matches!(
            q.get_or_append(900, || MappedFile::open(q.dir(), 900, 100)),
            Err(StoreError::Corrupt(_))
        ));
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![700]);
    }
}
