//! IndexService: find messages by key (`KEYS`) or unique id (`UNIQ_KEY`) within a time range,
//! for QUERY_MESSAGE and VIEW_MESSAGE_BY_ID. Uses RocketMQ's IndexFile layout: a 40-byte
//! header, a table of 4-byte hash slots holding the newest entry per slot, and 20-byte entries
//! (key hash, commit-log offset, seconds since the file's first message, previous entry) that
//! chain colliding keys. Files are named by creation time (`yyyyMMddHHmmssSSS`).
//!
//! Index hits are only candidates: the store re-reads the record and checks its key, so a hash
//! collision or a stale entry past a recovered tail never returns a wrong message.

use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::error::{IoContext, ReadSite, Result, StoreError};
use crate::mapped_file::{sync_dir, MappedFile};

const HEADER: u64 = 40;
const SLOT: u64 = 4;
const ENTRY: u64 = 20;

/// Java's `String.hashCode()` of `topic#key`, made non-negative as RocketMQ does.
pub fn key_hash(topic: &str, key: &str) -> u32 {
    let mut h: i32 = 0;
    for unit in topic
        .encode_utf16()
        .chain("#".encode_utf16())
        .chain(key.encode_utf16())
    {
        h = h.wrapping_mul(31).wrapping_add(unit as i32);
    }
    // Math.abs(Integer.MIN_VALUE) stays negative in Java; RocketMQ then uses 0.
    h.checked_abs().unwrap_or(0) as u32
}

/// One index file.
pub struct IndexFile {
    file: MappedFile,
    slots: u32,
    max_entries: u32,
}

fn get_u64(f: &MappedFile, at: u64) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(f.read(at, 8));
    u64::from_be_bytes(b)
}
fn get_u32(f: &MappedFile, at: u64) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(f.read(at, 4));
    u32::from_be_bytes(b)
}

impl IndexFile {
    fn open(dir: &Path, name: &str, slots: u32, max_entries: u32) -> Result<Self> {
        let size = HEADER + slots as u64 * SLOT + (max_entries as u64 + 1) * ENTRY;
        // MappedFile names files by offset; index files are named by time, so open by path.
        let file = MappedFile::open_named(dir, name, size)?;
        // The header is read through the mapping from here on: read it with pread first, so
        // that an unreadable one fails the open instead of raising SIGBUS.
        file.check_readable(0, HEADER)
            .map_err(|source| StoreError::ReadFailed {
                site: ReadSite::Index {
                    file: name.to_string(),
                },
                offset: 0,
                source,
            })?;
        let f = Self {
            file,
            slots,
            max_entries,
        };
        if f.count() == 0 {
            // SAFETY: the file is new and not yet shared: this is its only user.
            unsafe { f.set_header(0, 0, 0, 0, 1) };
        }
        Ok(f)
    }

    fn begin_timestamp(&self) -> u64 {
        get_u64(&self.file, 0)
    }
    fn end_timestamp(&self) -> u64 {
        get_u64(&self.file, 8)
    }
    fn begin_phys(&self) -> u64 {
        get_u64(&self.file, 16)
    }
    /// Commit-log offset of the newest indexed record.
    pub fn end_phys(&self) -> u64 {
        get_u64(&self.file, 24)
    }
    /// Next entry number (entries start at 1; 0 means "none").
    fn count(&self) -> u32 {
        get_u32(&self.file, 36)
    }
    fn is_full(&self) -> bool {
        self.count() > self.max_entries
    }
    /// True when nothing was indexed yet.
    fn is_empty(&self) -> bool {
        self.count() <= 1
    }

    /// # Safety
    /// The caller is the file's single writer (see [`IndexService::put`]).
    unsafe fn set_header(
        &self,
        begin_ts: u64,
        end_ts: u64,
        begin_phys: u64,
        end_phys: u64,
        count: u32,
    ) {
        let mut h = [0u8; 40];
        h[..8].copy_from_slice(&begin_ts.to_be_bytes());
        h[8..16].copy_from_slice(&end_ts.to_be_bytes());
        h[16..24].copy_from_slice(&begin_phys.to_be_bytes());
        h[24..32].copy_from_slice(&end_phys.to_be_bytes());
        h[32..36].copy_from_slice(&self.slots.to_be_bytes());
        h[36..40].copy_from_slice(&count.to_be_bytes());
        // SAFETY: single writer (caller). Readers may see a header mid-update; they only use
        // it to skip files by time range and to bound entry numbers, and re-check every hit.
        unsafe { self.file.write(0, &h) };
    }

    /// # Safety
    /// The caller is the file's single writer (see [`IndexService::put`]).
    unsafe fn put(&self, hash: u32, phys: u64, store_ts: u64) {
        let count = self.count();
        let (begin_ts, begin_phys) = if self.is_empty() {
            (store_ts, phys)
        } else {
            (self.begin_timestamp(), self.begin_phys())
        };
        let slot_at = HEADER + (hash % self.slots) as u64 * SLOT;
        let prev = get_u32(&self.file, slot_at);
        let prev = if prev >= count { 0 } else { prev };
        let diff = (store_ts.saturating_sub(begin_ts) / 1000).min(i32::MAX as u64) as u32;
        let mut e = [0u8; 20];
        e[..4].copy_from_slice(&hash.to_be_bytes());
        e[4..12].copy_from_slice(&phys.to_be_bytes());
        e[12..16].copy_from_slice(&diff.to_be_bytes());
        e[16..].copy_from_slice(&prev.to_be_bytes());
        // SAFETY: single writer (caller); the entry lies past every slot's reach until the
        // slot below points at it.
        unsafe { self.file.write(self.entry_at(count), &e) };
        // Readers follow the slot to the entry: publish the entry first.
        fence(Ordering::Release);
        // SAFETY: single writer; a reader racing this 4-byte slot update sees the old or new
        // chain head, both valid entry numbers below `count + 1`, and re-checks hits.
        unsafe { self.file.write(slot_at, &count.to_be_bytes()) };
        let end_ts = store_ts.max(self.end_timestamp());
        // SAFETY: single writer (caller).
        unsafe { self.set_header(begin_ts, end_ts, begin_phys, phys, count + 1) };
    }

    fn entry_at(&self, n: u32) -> u64 {
        HEADER + self.slots as u64 * SLOT + n as u64 * ENTRY
    }

    fn lookup(&self, hash: u32, begin: u64, end: u64, max: usize, out: &mut Vec<u64>) {
        if self.is_empty() || self.end_timestamp() < begin || self.begin_timestamp() > end {
            return;
        }
        let count = self.count();
        let begin_ts = self.begin_timestamp();
        let mut n = get_u32(&self.file, HEADER + (hash % self.slots) as u64 * SLOT);
        fence(Ordering::Acquire);
        // Each step goes to a strictly older entry, so this ends; the bound guards bad data.
        let mut steps = 0;
        while n > 0 && n < count && out.len() < max && steps < count {
            steps += 1;
            let at = self.entry_at(n);
            let h = get_u32(&self.file, at);
            let phys = get_u64(&self.file, at + 4);
            let ts = begin_ts + get_u32(&self.file, at + 12) as u64 * 1000;
            let prev = get_u32(&self.file, at + 16);
            // Timestamps are stored at second granularity: widen the window by a second.
            if h == hash && ts + 1000 > begin && ts <= end {
                out.push(phys);
            }
            if prev >= n {
                break;
            }
            n = prev;
        }
    }
}

/// All index files, newest last.
pub struct IndexService {
    dir: PathBuf,
    slots: u32,
    max_entries: u32,
    files: RwLock<Vec<Arc<IndexFile>>>,
    /// Serialises creating a new file when the last one fills up.
    roll: Mutex<()>,
}

/// Formats a Unix time in ms as `yyyyMMddHHmmssSSS` (UTC), RocketMQ's index file name.
pub fn format_index_name(ms: u64) -> String {
    let t = conveyor_protocol::time::CivilTime::from_ms(ms as i64);
    format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}{:03}",
        t.year, t.month, t.day, t.hour, t.minute, t.second, t.millis
    )
}

impl IndexService {
    /// Opens the index files in `dir`.
    pub fn open(dir: &Path, slots: u32, max_entries: u32) -> Result<Self> {
        crate::mapped_file::create_dir_durable(dir)?;
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .ctx(|| format!("list {}", dir.display()))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.len() == 17 && n.bytes().all(|b| b.is_ascii_digit()))
            .collect();
        names.sort();
        let mut files = Vec::new();
        for name in names {
            files.push(Arc::new(IndexFile::open(dir, &name, slots, max_entries)?));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            slots,
            max_entries,
            files: RwLock::new(files),
            roll: Mutex::new(()),
        })
    }

    /// Commit-log offset of the newest indexed record, if any.
    pub fn indexed_upto(&self) -> Option<u64> {
        let files = self.files.read().unwrap_or_else(|e| e.into_inner());
        files
            .iter()
            .rev()
            .find(|f| !f.is_empty())
            .map(|f| f.end_phys())
    }

    /// Indexes `keys` of the record at `phys`.
    ///
    /// # Safety
    /// The caller is the index's single writer: the dispatcher thread, or recovery before it
    /// starts.
    pub(crate) unsafe fn put<'k>(
        &self,
        topic: &str,
        keys: impl Iterator<Item = &'k str>,
        phys: u64,
        store_ts: u64,
    ) -> Result<()> {
        for key in keys.filter(|k| !k.is_empty()) {
            let file = self.writable_file(store_ts)?;
            // SAFETY: the caller is the single writer.
            unsafe { file.put(key_hash(topic, key), phys, store_ts) };
        }
        Ok(())
    }

    fn writable_file(&self, now_ms: u64) -> Result<Arc<IndexFile>> {
        if let Some(f) = self
            .files
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .filter(|f| !f.is_full())
        {
            return Ok(f.clone());
        }
        let _guard = self.roll.lock().unwrap_or_else(|e| e.into_inner());
        let mut ms = now_ms;
        let mut name = format_index_name(ms);
        while self.dir.join(&name).exists() {
            ms += 1;
            name = format_index_name(ms);
        }
        let file = Arc::new(IndexFile::open(
            &self.dir,
            &name,
            self.slots,
            self.max_entries,
        )?);
        sync_dir(&self.dir)?;
        self.files
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(file.clone());
        Ok(file)
    }

    /// Candidate commit-log offsets for `topic#key` stored within `[begin, end]` ms, newest
    /// first, at most `max`.
    pub fn query(&self, topic: &str, key: &str, begin: u64, end: u64, max: usize) -> Vec<u64> {
        let hash = key_hash(topic, key);
        let files = self.files.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut out = Vec::new();
        for f in files.iter().rev() {
            if out.len() >= max {
                break;
            }
            f.lookup(hash, begin, end, max, &mut out);
        }
        out
    }

    /// Flushes every index file.
    pub fn flush(&self) -> Result<()> {
        let files = self.files.read().unwrap_or_else(|e| e.into_inner()).clone();
        for f in files {
            f.file.flush_all()?;
        }
        Ok(())
    }

    /// Deletes index files (never the newest) that only point below `log_min`.
    pub fn delete_expired(&self, log_min: u64) -> Result<()> {
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        let deletable = files.len().saturating_sub(1);
        let mut removed = 0;
        for f in files.iter().take(deletable) {
            if f.end_phys() >= log_min {
                break;
            }
            f.file.delete()?;
            removed += 1;
        }
        files.drain(..removed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn index_names() {
        assert_eq!(format_index_name(0), "19700101000000000");
        assert_eq!(format_index_name(1_764_428_400_123), "20251129150000123");
        assert_eq!(format_index_name(951_782_400_000), "20000229000000000");
    }

    #[test]
    fn key_hash_matches_java() {
        // "TopicTest#KEY1".hashCode() on a JVM.
        assert_eq!(key_hash("TopicTest", "KEY1"), 1_656_969_516);
    }

    proptest! {
        #[test]
        fn every_put_key_is_found(keys in prop::collection::vec("[a-z]{1,6}", 1..300)) {
            let dir = tempfile::tempdir().unwrap();
            // Few slots and entries force collisions and several files.
            let idx = IndexService::open(dir.path(), 7, 50).unwrap();
            let base = 1_700_000_000_000u64;
            for (i, k) in keys.iter().enumerate() {
                // SAFETY: this test is the only writer.
                unsafe { idx.put("T", std::iter::once(k.as_str()), i as u64 * 10, base + i as u64 * 10) }.unwrap();
            }
            for (i, k) in keys.iter().enumerate() {
                let hits = idx.query("T", k, base, base + 1_000_000, usize::MAX);
                prop_assert!(hits.contains(&(i as u64 * 10)), "key {} at {} not found", k, i);
            }
            // A different topic does not match by construction of the hash (candidates only).
            let hits = idx.query("T", "no-such-key-ever", base, base + 1_000_000, usize::MAX);
            for h in hits {
                let k = &keys[(h / 10) as usize];
                prop_assert_eq!(key_hash("T", k), key_hash("T", "no-such-key-ever"));
            }
        }
    }
}
