//! ConsumeQueue: the per-(topic, queue id) index that turns a queue offset into a CommitLog
//! position. Consumers pull by queue offset, so this is what makes a shared log look like many
//! queues. Entries are 20 bytes (commit-log offset u64, size u32, tag hash i64), stored in
//! MappedFiles named by the byte offset of their first entry, exactly like RocketMQ's.
//!
//! Only the dispatcher writes entries, in queue-offset order; readers read below `max`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use crate::error::{Result, StoreError};
use crate::mapped_file::{list_offsets, sync_dir, MappedFile};

/// Bytes per entry.
pub const CQ_UNIT: u64 = 20;

/// One ConsumeQueue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqEntry {
    /// CommitLog offset of the record.
    pub physical_offset: u64,
    /// Record size.
    pub size: u32,
    /// Tag hash code (Java `String.hashCode()` of the TAGS property, 0 without tags).
    pub tag_code: i64,
}

impl CqEntry {
    /// The 20-byte big-endian encoding.
    pub fn encode(&self) -> [u8; 20] {
        let mut out = [0u8; 20];
        out[..8].copy_from_slice(&self.physical_offset.to_be_bytes());
        out[8..12].copy_from_slice(&self.size.to_be_bytes());
        out[12..].copy_from_slice(&self.tag_code.to_be_bytes());
        out
    }

    /// Decodes an entry; an all-zero-size slot is "no entry".
    pub fn decode(raw: &[u8]) -> Option<Self> {
        let raw: &[u8; 20] = raw.try_into().ok()?;
        let mut p = [0u8; 8];
        p.copy_from_slice(&raw[..8]);
        let size = u32::from_be_bytes([raw[8], raw[9], raw[10], raw[11]]);
        let mut t = [0u8; 8];
        t.copy_from_slice(&raw[12..]);
        (size > 0).then_some(Self {
            physical_offset: u64::from_be_bytes(p),
            size,
            tag_code: i64::from_be_bytes(t),
        })
    }
}

/// The queue of one (topic, queue id).
pub struct ConsumeQueue {
    topic: String,
    queue_id: i32,
    dir: PathBuf,
    file_size: u64,
    files: RwLock<Vec<Arc<MappedFile>>>,
    /// Next queue offset (one past the last readable entry).
    max: AtomicI64,
    /// First queue offset whose message is still in the CommitLog.
    min: AtomicI64,
}

impl std::fmt::Debug for ConsumeQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConsumeQueue({}:{})", self.topic, self.queue_id)
    }
}

impl ConsumeQueue {
    /// Opens (or starts) the queue stored in `dir`; call [`ConsumeQueue::recover`] before use
    /// when files already existed.
    pub fn open(dir: &Path, topic: &str, queue_id: i32, entries_per_file: u64) -> Result<Self> {
        let file_size = entries_per_file * CQ_UNIT;
        let mut files: Vec<Arc<MappedFile>> = Vec::new();
        for base in list_offsets(dir)? {
            if base % file_size != 0 {
                return Err(StoreError::Corrupt(format!(
                    "consume queue file {} in {} is not aligned",
                    base,
                    dir.display()
                )));
            }
            if let Some(prev) = files.last() {
                if prev.end() != base {
                    // A gap: everything before it is unreachable; keep the newest run.
                    for f in files.drain(..) {
                        f.delete()?;
                    }
                }
            }
            files.push(Arc::new(MappedFile::open(dir, base, file_size)?));
        }
        let start = files.first().map_or(0, |f| (f.base() / CQ_UNIT) as i64);
        Ok(Self {
            topic: topic.to_string(),
            queue_id,
            dir: dir.to_path_buf(),
            file_size,
            files: RwLock::new(files),
            max: AtomicI64::new(start),
            min: AtomicI64::new(start),
        })
    }

    /// Topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }
    /// Queue id.
    pub fn queue_id(&self) -> i32 {
        self.queue_id
    }

    /// Finds the last valid entry (one whose record lies below `log_end`), wipes everything
    /// after it and deletes later files, so the queue agrees with the recovered CommitLog.
    pub fn recover(&self, log_end: u64) -> Result<()> {
        let valid = |raw: &[u8]| matches!(CqEntry::decode(raw), Some(e) if e.physical_offset + e.size as u64 <= log_end);
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        if files.is_empty() {
            return Ok(());
        }
        // Entries are written in order and their commit-log offsets grow, so the valid ones
        // form a prefix: find the last file that starts with a valid entry, then binary-search
        // its end. Recovery thus costs O(files + log entries), not a scan of every entry.
        let mut keep = files.len();
        while keep > 1 && !valid(files[keep - 1].read(0, CQ_UNIT as usize)) {
            keep -= 1;
        }
        let last = &files[keep - 1];
        let data = last.all();
        let entries = data.len() / CQ_UNIT as usize;
        let entry = |n: usize| &data[n * CQ_UNIT as usize..(n + 1) * CQ_UNIT as usize];
        let (mut lo, mut hi) = (0usize, entries);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if valid(entry(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        // Everything after the last valid entry must read as empty: wipe leftovers (a torn or
        // truncated tail) so they can never be taken for entries later.
        if lo < entries && entry(lo).iter().any(|b| *b != 0) {
            last.zero_from(lo as u64 * CQ_UNIT);
            last.flush_all()?;
        }
        let max = (last.base() / CQ_UNIT) as i64 + lo as i64;
        if keep < files.len() {
            for f in files.drain(keep..) {
                f.delete()?;
            }
            sync_dir(&self.dir)?;
        }
        self.max.store(max, Ordering::Release);
        Ok(())
    }

    /// Moves the minimum offset past entries whose records are below `log_min` (after
    /// retention deleted CommitLog segments).
    pub fn correct_min(&self, log_min: u64) {
        let max = self.max_offset();
        let mut lo = self.min_offset();
        // Entries are ordered by physical offset: binary search for the first kept one.
        let mut hi = max;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid) {
                Some(e) if e.physical_offset < log_min => lo = mid + 1,
                Some(_) => hi = mid,
                None => lo = mid + 1,
            }
        }
        self.min.fetch_max(lo, Ordering::AcqRel);
    }

    /// Writes the entry for `queue_offset` (dispatcher only). Rewriting an existing entry
    /// with the same content is harmless, which makes recovery's re-dispatch idempotent.
    pub fn put(&self, queue_offset: i64, entry: CqEntry) -> Result<()> {
        let byte = queue_offset as u64 * CQ_UNIT;
        let file = self.file_for_write(byte)?;
        file.write(byte - file.base(), &entry.encode());
        if queue_offset >= self.max.load(Ordering::Relaxed) {
            self.max.store(queue_offset + 1, Ordering::Release);
        }
        Ok(())
    }

    fn file_for_write(&self, byte: u64) -> Result<Arc<MappedFile>> {
        if let Some(f) = self.file_at(byte) {
            return Ok(f);
        }
        let base = byte - byte % self.file_size;
        std::fs::create_dir_all(&self.dir).map_err(|source| StoreError::Io {
            context: format!("create {}", self.dir.display()),
            source,
        })?;
        let file = Arc::new(MappedFile::open(&self.dir, base, self.file_size)?);
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        if files.last().is_some_and(|l| l.end() != base) {
            // Only after every older entry was deleted can a queue restart further on.
            for f in files.drain(..) {
                f.delete()?;
            }
            self.min.store((base / CQ_UNIT) as i64, Ordering::Release);
        }
        if files.is_empty() {
            let start = (base / CQ_UNIT) as i64;
            self.min.fetch_max(start, Ordering::AcqRel);
        }
        files.push(file.clone());
        Ok(file)
    }

    fn file_at(&self, byte: u64) -> Option<Arc<MappedFile>> {
        let files = self.files.read().unwrap_or_else(|e| e.into_inner());
        let first = files.first()?.base();
        if byte < first {
            return None;
        }
        files
            .get(((byte - first) / self.file_size) as usize)
            .cloned()
    }

    /// The entry at `queue_offset`, if it is within [min, max).
    pub fn get(&self, queue_offset: i64) -> Option<CqEntry> {
        if queue_offset < 0 || queue_offset >= self.max_offset() {
            return None;
        }
        let byte = queue_offset as u64 * CQ_UNIT;
        let file = self.file_at(byte)?;
        CqEntry::decode(file.read(byte - file.base(), CQ_UNIT as usize))
    }

    /// One past the last entry.
    pub fn max_offset(&self) -> i64 {
        self.max.load(Ordering::Acquire)
    }

    /// First entry still backed by the CommitLog.
    pub fn min_offset(&self) -> i64 {
        self.min.load(Ordering::Acquire)
    }

    /// Flushes written entries to disk.
    pub fn flush(&self) -> Result<()> {
        let end = self.max_offset() as u64 * CQ_UNIT;
        let files = self.files.read().unwrap_or_else(|e| e.into_inner()).clone();
        for f in files {
            if f.flushed() < f.size() && f.base() < end {
                f.flush(end.min(f.end()) - f.base())?;
            }
        }
        Ok(())
    }

    /// Deletes files (never the last) whose entries all point below `log_min`.
    pub fn delete_expired(&self, log_min: u64) -> Result<usize> {
        self.correct_min(log_min);
        let min_byte = self.min_offset() as u64 * CQ_UNIT;
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        let deletable = files.len().saturating_sub(1);
        let mut removed = 0;
        for f in files.iter().take(deletable) {
            if f.end() > min_byte {
                break;
            }
            f.delete()?;
            removed += 1;
        }
        files.drain(..removed);
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn entry_round_trip(phys in any::<u64>(), size in 1u32.., tag in any::<i64>()) {
            let e = CqEntry { physical_offset: phys, size, tag_code: tag };
            prop_assert_eq!(CqEntry::decode(&e.encode()), Some(e));
        }
    }

    #[test]
    fn put_get_across_files_and_recover() {
        let dir = tempfile::tempdir().unwrap();
        let cq = ConsumeQueue::open(dir.path(), "T", 0, 4).unwrap();
        for i in 0..10 {
            let e = CqEntry {
                physical_offset: i * 100,
                size: 100,
                tag_code: i as i64,
            };
            cq.put(i as i64, e).unwrap();
        }
        assert_eq!(cq.max_offset(), 10);
        assert_eq!(cq.get(5).unwrap().physical_offset, 500);
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![0, 80, 160]);
        drop(cq);
        // The log only kept the first 6 records intact.
        let cq = ConsumeQueue::open(dir.path(), "T", 0, 4).unwrap();
        cq.recover(600).unwrap();
        assert_eq!(cq.max_offset(), 6);
        assert_eq!(cq.get(6), None);
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![0, 80]);
        cq.correct_min(250);
        assert_eq!(cq.min_offset(), 3);
        assert_eq!(cq.delete_expired(450).unwrap(), 1);
        assert_eq!(cq.min_offset(), 5);
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![80]);
    }
}
