//! ConsumeQueue: the per-(topic, queue id) index that turns a queue offset into a CommitLog
//! position. Consumers pull by queue offset, so this is what makes a shared log look like many
//! queues. Entries are 20 bytes (commit-log offset u64, size u32, tag hash i64), stored in
//! MappedFiles named by the byte offset of their first entry, exactly like RocketMQ's.
//!
//! Only the dispatcher writes entries, in queue-offset order; readers read below `max`.

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::error::{ReadSite, Result, StoreError};
use crate::mapped_file::{sync_dir, MappedFile};
use crate::mapped_file_queue::{MappedFileQueue, OnGap};

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
    /// Topic name.
    topic: String,
    /// Queue id within the topic.
    queue_id: i32,
    /// The files, named by the byte offset of their first entry.
    files: MappedFileQueue,
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
    /// when files already existed. A gap between files keeps only the newest run.
    pub fn open(dir: &Path, topic: &str, queue_id: i32, entries_per_file: u64) -> Result<Self> {
        let files =
            MappedFileQueue::load(dir, entries_per_file * CQ_UNIT, OnGap::KeepNewest, false)?;
        let start = files.min_offset().map_or(0, |b| (b / CQ_UNIT) as i64);
        Ok(Self {
            topic: topic.to_string(),
            queue_id,
            files,
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

    /// Finds the queue's end after an open: one past its last entry that leads to a record of
    /// its own (`is_own(queue_offset, entry)`, which checks the CommitLog) below `log_end`;
    /// wipes what lies after it and deletes later files, so the queue agrees with the
    /// recovered CommitLog. Damaged entries before the end stay as holes pulls skip (and
    /// recovery's re-dispatch rewrites those of the re-verified tail).
    ///
    /// Cost: a binary search per file for the end of the written slots, a bounded look past it
    /// for slots written after a hole, then one CommitLog read per candidate entry walking
    /// back; the unwritten rest of a file is never read unless garbage was found in it.
    /// Called by the store's open, before anything reads the queue.
    pub(crate) fn recover(
        &self,
        log_end: u64,
        is_own: impl Fn(i64, &CqEntry) -> Result<bool>,
    ) -> Result<Option<u64>> {
        let files = self.files.snapshot();
        let Some(first) = files.first() else {
            return Ok(None);
        };
        let mut end_byte = first.base();
        let mut garbage_after = false;
        // CommitLog offset just past the record of the last entry kept (a record boundary).
        let mut kept_upto = 0u64;
        // Every read here is positional (pread), not through the mapping: an unreadable
        // block fails the open with its offset instead of raising SIGBUS.
        'files: for file in files.iter().rev() {
            let slots = (file.size() / CQ_UNIT) as usize;
            let written = written_slots(slots, |first, n| self.read_slots(file, first, n))?;
            for slot in (0..written).rev() {
                let raw = self.read_slots(file, slot, 1)?;
                let Some(entry) = CqEntry::decode(&raw) else {
                    garbage_after |= raw.iter().any(|b| *b != 0);
                    continue;
                };
                let byte = file.base() + slot as u64 * CQ_UNIT;
                let own = entry.physical_offset + u64::from(entry.size) <= log_end
                    && is_own((byte / CQ_UNIT) as i64, &entry)?;
                if own {
                    end_byte = byte + CQ_UNIT;
                    kept_upto = entry.physical_offset + u64::from(entry.size);
                    break 'files;
                }
                garbage_after = true;
            }
        }
        // Files wholly past the end hold nothing of this queue any more.
        let stale_files = files.iter().any(|f| f.base() > end_byte);
        if garbage_after || stale_files {
            // SAFETY: recovery runs before the store serves: no reader, no other writer.
            let kept = unsafe { self.files.truncate_to(end_byte) }?;
            if let Some(last) = kept.last() {
                last.flush_all()?;
            }
        }
        self.max
            .store((end_byte / CQ_UNIT) as i64, Ordering::Release);
        // Entries were lost after the last one kept (a damaged queue file): their records may
        // still be in the log, before the part recovery re-verifies, so the caller must
        // re-dispatch from just after the kept entry's record or new messages would reuse their
        // queue offsets. (A queue with no verifiable entry at all gives no such point; it is
        // not rebuilt from the whole log.)
        Ok((garbage_after && kept_upto > 0).then_some(kept_upto))
    }

    /// `n` slots of `file` from slot `first`, read with pread: an unreadable block is
    /// [`StoreError::ReadFailed`] with the first slot's queue offset.
    fn read_slots(&self, file: &MappedFile, first: usize, n: usize) -> Result<Vec<u8>> {
        let mut raw = vec![0u8; n * CQ_UNIT as usize];
        let pos = first as u64 * CQ_UNIT;
        file.read_at(pos, &mut raw)
            .map_err(|source| self.read_failed((file.base() + pos) / CQ_UNIT, source))?;
        Ok(raw)
    }

    /// The error of a failed read at `queue_offset`.
    fn read_failed(&self, queue_offset: u64, source: std::io::Error) -> StoreError {
        StoreError::ReadFailed {
            site: ReadSite::ConsumeQueue {
                topic: self.topic.clone(),
                queue_id: self.queue_id,
            },
            offset: queue_offset,
            source,
        }
    }

    /// Moves the minimum offset past entries whose records are below `log_min` (after
    /// retention deleted CommitLog segments).
    pub fn correct_min(&self, log_min: u64) -> Result<()> {
        let lo = self.first_entry_at_or_after(log_min)?;
        self.min.fetch_max(lo, Ordering::AcqRel);
        Ok(())
    }

    /// Drops the entries whose records start at or past `log_offset` (the CommitLog was cut
    /// there while the store runs). Returns the new end.
    ///
    /// # Safety
    /// The caller is the queue's single writer with the dispatcher stopped, and readers are not
    /// served entries past the cut (the broker is fenced while the store truncates).
    pub(crate) unsafe fn truncate_live(&self, log_offset: u64) -> Result<i64> {
        let max = self.max_offset();
        let cut = self.first_entry_at_or_after(log_offset)?;
        if cut < max {
            self.max.store(cut, Ordering::Release);
            // SAFETY: forwarded from the caller.
            unsafe { self.files.truncate_to(cut as u64 * CQ_UNIT) }?;
            if self.min.load(Ordering::Acquire) > cut {
                self.min.store(cut, Ordering::Release);
            }
        }
        Ok(cut.min(max))
    }

    /// The first queue offset whose entry points at or past `log_offset`: a binary search,
    /// entries being ordered by physical offset; a hole (a damaged or never-written slot) says
    /// nothing, so it is decided by the next entry. Slots are read with pread (a few per
    /// step; it runs at open, on retention and on truncation, never per message), so an
    /// unreadable block is an error, not a SIGBUS.
    fn first_entry_at_or_after(&self, log_offset: u64) -> Result<i64> {
        let (mut lo, mut hi) = (self.min_offset(), self.max_offset());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let mut found = None;
            for n in mid..hi {
                if let Some(e) = self.entry_positional(n)? {
                    found = Some((n, e));
                    break;
                }
            }
            match found {
                Some((n, e)) if e.physical_offset < log_offset => lo = n + 1,
                _ => hi = mid,
            }
        }
        Ok(lo)
    }

    /// The entry at `queue_offset` read with pread (`None` for a hole or outside the files).
    fn entry_positional(&self, queue_offset: i64) -> Result<Option<CqEntry>> {
        let byte = queue_offset as u64 * CQ_UNIT;
        let Some(file) = self.files.find(byte) else {
            return Ok(None);
        };
        let raw = self.read_slots(file.as_ref(), ((byte - file.base()) / CQ_UNIT) as usize, 1)?;
        Ok(CqEntry::decode(&raw))
    }

    /// Writes the entry for `queue_offset`. Rewriting an existing entry with the same content
    /// is harmless, which makes recovery's re-dispatch idempotent.
    ///
    /// # Safety
    /// The caller is the queue's single writer (the dispatcher thread, or recovery before it
    /// starts), and `queue_offset` is at or beyond [`Self::max_offset`] unless the entry is
    /// rewritten with the bytes it already has.
    pub(crate) unsafe fn put(&self, queue_offset: i64, entry: CqEntry) -> Result<()> {
        let byte = queue_offset as u64 * CQ_UNIT;
        let base = byte - byte % self.files.file_size();
        let dir = self.files.dir();
        let (file, created) = self.files.get_or_append(base, || {
            crate::mapped_file::create_dir_durable(dir)?;
            MappedFile::open(dir, base, self.files.file_size())
        })?;
        if created {
            sync_dir(dir)?;
        }
        if byte == base && self.files.min_offset() == Some(base) {
            // The first file of a (re)started queue: nothing below it is readable.
            self.min
                .fetch_max((base / CQ_UNIT) as i64, Ordering::AcqRel);
        }
        let max = self.max.load(Ordering::Relaxed);
        if queue_offset > max && self.min.load(Ordering::Relaxed) == max {
            // The first entry of a queue that starts past its first slot (a slave that copies
            // its master from a later segment on): nothing below it was ever written here.
            self.min.store(queue_offset, Ordering::Release);
        }
        // SAFETY: single writer (caller); the entry becomes visible only through `max` below,
        // stored with release ordering after the write.
        unsafe { file.write(byte - file.base(), &entry.encode()) };
        if queue_offset >= self.max.load(Ordering::Relaxed) {
            self.max.store(queue_offset + 1, Ordering::Release);
        }
        Ok(())
    }

    /// The entry at `queue_offset`, if it is within [min, max).
    pub fn get(&self, queue_offset: i64) -> Option<CqEntry> {
        if queue_offset < 0 || queue_offset >= self.max_offset() {
            return None;
        }
        let byte = queue_offset as u64 * CQ_UNIT;
        let file = self.files.find(byte)?;
        CqEntry::decode(file.read(byte - file.base(), CQ_UNIT as usize))
    }

    /// The entries `[from, from + count)` (clipped to [0, max)) with positional reads (pread)
    /// instead of the mapping, for a queue file that is not in memory: an unreadable block is
    /// [`StoreError::ReadFailed`], not a SIGBUS. One read per file; each slot decodes as in
    /// [`ConsumeQueue::get`] (`None` for a hole). Returns the first offset read and the slots.
    pub fn read_entries_positional(
        &self,
        from: i64,
        count: usize,
    ) -> Result<(i64, Vec<Option<CqEntry>>)> {
        let from = from.max(0);
        let end = from
            .saturating_add(count as i64)
            .min(self.max_offset())
            .max(from);
        let mut out = Vec::with_capacity((end - from) as usize);
        let mut at = from;
        let mut raw = Vec::new();
        while at < end {
            let byte = at as u64 * CQ_UNIT;
            let Some(file) = self.files.find(byte) else {
                // Below the first file (deleted by retention) or past the last: holes.
                out.push(None);
                at += 1;
                continue;
            };
            let stop = (end as u64 * CQ_UNIT).min(file.end());
            raw.resize((stop - byte) as usize, 0);
            file.read_at(byte - file.base(), &mut raw)
                .map_err(|source| self.read_failed(at as u64, source))?;
            out.extend(raw.chunks_exact(CQ_UNIT as usize).map(CqEntry::decode));
            at = (stop / CQ_UNIT) as i64;
        }
        Ok((from, out))
    }

    /// Whether the entries `[queue_offset, queue_offset + count)` are in memory, so that
    /// reading them cannot block on the disk.
    pub fn is_resident(&self, queue_offset: i64, count: usize) -> bool {
        if queue_offset < 0 {
            return true;
        }
        let from = queue_offset as u64 * CQ_UNIT;
        let to = from + count as u64 * CQ_UNIT;
        let mut at = from;
        while at < to {
            let Some(file) = self.files.find(at) else {
                return true;
            };
            let stop = to.min(file.end());
            if !file.is_resident(at - file.base(), stop - at) {
                return false;
            }
            at = stop;
        }
        true
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
        for f in self.files.snapshot() {
            if f.flushed() < f.size() && f.base() < end {
                f.flush(end.min(f.end()) - f.base())?;
            }
        }
        Ok(())
    }

    /// Deletes every file of the queue (its topic is being deleted).
    pub(crate) fn delete_files(&self) -> Result<()> {
        for f in self.files.snapshot() {
            f.delete()?;
        }
        Ok(())
    }

    /// Deletes files (never the last) whose entries all point below `log_min`.
    pub fn delete_expired(&self, log_min: u64) -> Result<usize> {
        self.correct_min(log_min)?;
        let min_byte = self.min_offset() as u64 * CQ_UNIT;
        self.files.delete_front(|f| f.end() <= min_byte)
    }
}

/// How far past the end of the written slots [`written_slots`] looks for slots written after
/// a hole (a page of entries that never reached the disk while a later one did): 16 pages.
const HOLE_LOOKAHEAD: usize = 16 * 4096;

/// The number of leading slots of a queue file of `slots` slots that may hold entries: a
/// binary search for the first zero slot (slots are written in order), extended past holes of
/// up to [`HOLE_LOOKAHEAD`] bytes that are followed by written slots. `read(first, n)` reads
/// `n` slots from slot `first` (and may fail).
fn written_slots(
    slots: usize,
    mut read: impl FnMut(usize, usize) -> Result<Vec<u8>>,
) -> Result<usize> {
    let unit = CQ_UNIT as usize;
    let used = |raw: &[u8]| raw.iter().any(|b| *b != 0);
    let (mut lo, mut hi) = (0usize, slots);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if used(&read(mid, 1)?) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    // The look past the end, a window at a time; each written slot found extends it.
    let (mut end, mut probe) = (lo, lo);
    loop {
        let stop = (end + HOLE_LOOKAHEAD.div_ceil(unit)).min(slots);
        if probe >= stop {
            return Ok(end);
        }
        if let Some(i) = read(probe, stop - probe)?
            .chunks_exact(unit)
            .rposition(used)
        {
            end = probe + i + 1;
        }
        probe = stop;
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
        use crate::mapped_file::list_offsets;
        let dir = tempfile::tempdir().unwrap();
        let cq = ConsumeQueue::open(dir.path(), "T", 0, 4).unwrap();
        for i in 0..10 {
            let e = CqEntry {
                physical_offset: i * 100,
                size: 100,
                tag_code: i as i64,
            };
            // SAFETY: this test is the queue's only writer.
            unsafe { cq.put(i as i64, e) }.unwrap();
        }
        assert_eq!(cq.max_offset(), 10);
        assert_eq!(cq.get(5).unwrap().physical_offset, 500);
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![0, 80, 160]);
        drop(cq);
        // The log only kept the first 6 records intact.
        let cq = ConsumeQueue::open(dir.path(), "T", 0, 4).unwrap();
        cq.recover(600, |_, _| Ok(true)).unwrap();
        assert_eq!(cq.max_offset(), 6);
        assert_eq!(cq.get(6), None);
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![0, 80]);
        cq.correct_min(250).unwrap();
        assert_eq!(cq.min_offset(), 3);
        assert_eq!(cq.delete_expired(450).unwrap(), 1);
        assert_eq!(cq.min_offset(), 5);
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![80]);
    }

    fn queue_of(dir: &Path, entries: u64) -> ConsumeQueue {
        let cq = ConsumeQueue::open(dir, "T", 0, 64).unwrap();
        for i in 0..entries {
            let e = CqEntry {
                physical_offset: i * 100,
                size: 100,
                tag_code: 0,
            };
            // SAFETY: this test is the queue's only writer.
            unsafe { cq.put(i as i64, e) }.unwrap();
        }
        cq
    }

    fn zero_slot(dir: &Path, slot: u64) {
        let path = dir.join(format!("{:020}", 0));
        let mut data = std::fs::read(&path).unwrap();
        data[(slot * CQ_UNIT) as usize..((slot + 1) * CQ_UNIT) as usize].fill(0);
        std::fs::write(&path, data).unwrap();
    }

    #[test]
    fn stale_entries_after_a_hole_are_wiped_not_exposed() {
        let dir = tempfile::tempdir().unwrap();
        drop(queue_of(dir.path(), 10));
        // Slot 5 never reached the disk; slots 6..10 are stale: their records now belong to
        // other queues (is_own says no), although they lie inside the log.
        zero_slot(dir.path(), 5);
        let cq = ConsumeQueue::open(dir.path(), "T", 0, 64).unwrap();
        cq.recover(10_000, |qoff, _| Ok(qoff < 5)).unwrap();
        assert_eq!(cq.max_offset(), 5);
        drop(cq);
        let data = std::fs::read(dir.path().join(format!("{:020}", 0))).unwrap();
        assert!(
            data[(5 * CQ_UNIT) as usize..].iter().all(|b| *b == 0),
            "the stale slots are wiped on disk"
        );
    }

    #[test]
    fn own_entries_after_a_hole_are_kept_and_the_hole_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        drop(queue_of(dir.path(), 10));
        zero_slot(dir.path(), 5);
        let cq = ConsumeQueue::open(dir.path(), "T", 0, 64).unwrap();
        cq.recover(10_000, |_, _| Ok(true)).unwrap();
        assert_eq!(cq.max_offset(), 10);
        assert_eq!(cq.get(5), None);
        assert_eq!(cq.get(9).unwrap().physical_offset, 900);
        // A hole says nothing about retention: min stays below the kept entries.
        cq.correct_min(0).unwrap();
        assert_eq!(cq.min_offset(), 0);
        // Retention deleted records 0..4: min moves up to the hole (conservative: never past
        // an entry whose record may still be there).
        cq.correct_min(450).unwrap();
        assert_eq!(cq.min_offset(), 5);
    }
}
