//! MappedFile: one preallocated, memory-mapped file of a fixed size, named by the 20-digit
//! offset of its first byte. CommitLog segments, ConsumeQueue files and index files are all
//! MappedFiles.
//!
//! Concurrency model (RocketMQ's): exactly one writer appends at increasing positions while
//! any number of readers read below a position the writer has published (with release
//! ordering) *after* writing. Readers never see bytes being written, so the map is shared
//! through raw pointers rather than `&mut` borrows. Files are preallocated with
//! `posix_fallocate`, so a full disk fails the creation of a file with a clean error instead
//! of a SIGBUS on a later write into a sparse hole.
//!
//! The single-writer rule is part of the types: the writing methods are `unsafe fn` and
//! `pub(crate)`, so every call site names who the one writer is (the append lock's holder,
//! the dispatcher thread, or recovery before any reader exists).

use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapRaw;

use crate::error::{IoContext, Result, StoreError};

/// Name of a file starting at `offset`.
pub fn file_name(offset: u64) -> String {
    format!("{offset:020}")
}

/// Parses a 20-digit file name back into its offset.
pub fn parse_file_name(name: &str) -> Option<u64> {
    if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
        name.parse().ok()
    } else {
        None
    }
}

/// A fixed-size memory-mapped file.
pub struct MappedFile {
    path: PathBuf,
    base: u64,
    size: u64,
    map: MmapRaw,
    /// Bytes below this position have been msync'ed.
    flushed: AtomicU64,
    /// The open file (kept for the mapping's lifetime, and for fallocate).
    file: File,
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile")
            .field("path", &self.path)
            .field("base", &self.base)
            .finish()
    }
}

/// How a new file's blocks are reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Allocation {
    /// `posix_fallocate`: blocks are reserved but marked unwritten, so the first flush of each
    /// block also commits a metadata change (on ext4/xfs a journal transaction).
    Reserve,
    /// Reserve, then write zeros over the whole file and fdatasync it (RocketMQ's
    /// `warmMapedFileEnable`): costs one extra sequential write of the file, after which
    /// flushes are pure data writes.
    Zeroed,
}

fn preallocate(file: &File, size: u64) -> std::io::Result<()> {
    // SAFETY: plain syscall on a valid, owned descriptor.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size as libc::off_t) };
    match rc {
        0 => Ok(()),
        // Filesystems without fallocate: allocate by writing zeros past the current end. Never
        // a sparse file: a write through the mapping into a hole that the full disk cannot
        // back raises SIGBUS, where a refused creation is a clean DiskFull error.
        libc::EOPNOTSUPP | libc::EINVAL => {
            let len = file.metadata()?.len();
            write_zeros_from(file, len, size)
        }
        err => Err(std::io::Error::from_raw_os_error(err)),
    }
}

impl MappedFile {
    /// Creates (or reuses) `dir/<20-digit base>` of exactly `size` bytes, preallocated and
    /// mapped. A file that already exists shorter (a truncated tail) is extended with zeros.
    pub fn open(dir: &Path, base: u64, size: u64) -> Result<Self> {
        Self::open_path(dir.join(file_name(base)), base, size, Allocation::Reserve)
    }

    /// Like [`MappedFile::open`], choosing how a newly created file's blocks are allocated
    /// (an existing file keeps what it has).
    pub(crate) fn create(dir: &Path, base: u64, size: u64, allocation: Allocation) -> Result<Self> {
        Self::open_path(dir.join(file_name(base)), base, size, allocation)
    }

    /// Like [`MappedFile::open`] for a file named otherwise (index files are named by time).
    pub fn open_named(dir: &Path, name: &str, size: u64) -> Result<Self> {
        Self::open_path(dir.join(name), 0, size, Allocation::Reserve)
    }

    fn open_path(path: PathBuf, base: u64, size: u64, allocation: Allocation) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .ctx(|| format!("open {}", path.display()))?;
        let len = file
            .metadata()
            .ctx(|| format!("stat {}", path.display()))?
            .len();
        if len > size {
            return Err(StoreError::Corrupt(format!(
                "{} is {len} bytes, larger than the configured file size {size}",
                path.display()
            )));
        }
        let mut prepared =
            preallocate(&file, size).ctx(|| format!("preallocate {}", path.display()));
        if prepared.is_ok() && len == 0 && allocation == Allocation::Zeroed {
            prepared = write_zeros(&file, size).ctx(|| format!("zero {}", path.display()));
        }
        if let Err(e) = prepared {
            if len == 0 {
                // Leave no half-made file behind: the next attempt starts clean.
                let _ = std::fs::remove_file(&path);
            }
            return Err(e);
        }
        let map = MmapRaw::map_raw(&file).ctx(|| format!("mmap {}", path.display()))?;
        Ok(Self {
            path,
            base,
            size,
            map,
            flushed: AtomicU64::new(0),
            file,
        })
    }

    /// Moves the file into `dir` (same filesystem), keeping its name. The rename is durable
    /// only once `dir` is fsynced ([`sync_dir`]).
    pub(crate) fn move_into(&mut self, dir: &Path) -> Result<()> {
        let Some(name) = self.path.file_name() else {
            return Err(StoreError::Corrupt(format!(
                "{} has no file name",
                self.path.display()
            )));
        };
        let to = dir.join(name);
        std::fs::rename(&self.path, &to)
            .ctx(|| format!("rename {} to {}", self.path.display(), to.display()))?;
        self.path = to;
        Ok(())
    }

    /// Offset of the first byte (the file name).
    pub fn base(&self) -> u64 {
        self.base
    }
    /// File size.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Offset one past the last byte.
    pub fn end(&self) -> u64 {
        self.base + self.size
    }
    /// Path on disk.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `data` at `pos` (relative to the file).
    ///
    /// # Safety
    /// The caller is the file's single writer: no other thread writes the range at the same
    /// time, and no reader reads it before the writer publishes a position beyond it (with
    /// release ordering) after this call returns.
    pub(crate) unsafe fn write(&self, pos: u64, data: &[u8]) {
        assert!(
            pos + data.len() as u64 <= self.size,
            "write past end of mapped file"
        );
        // SAFETY: in bounds (asserted); the caller guarantees that no reader reads this
        // unpublished range and no other writer writes it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.map.as_mut_ptr().add(pos as usize),
                data.len(),
            );
        }
    }

    /// Fills `[pos, size)` with zeros (used to wipe a truncated tail).
    ///
    /// # Safety
    /// As for [`MappedFile::write`]: the caller is the single writer, and no reader reads at
    /// or beyond `pos` (recovery before the store serves, or a writer undoing its own
    /// unpublished bytes).
    pub(crate) unsafe fn zero_from(&self, pos: u64) {
        // SAFETY: forwarded from the caller.
        unsafe { self.zero_range(pos, self.size.saturating_sub(pos)) }
    }

    /// Fills `[pos, pos + len)` (clamped to the file) with zeros. Pages that already read as
    /// zeros are left alone: wiping the unwritten rest of a preallocated segment must not
    /// dirty (and later write back) up to a whole segment of zeros.
    ///
    /// # Safety
    /// As for [`MappedFile::zero_from`], for the range.
    pub(crate) unsafe fn zero_range(&self, pos: u64, len: u64) {
        const PAGE: u64 = 4096;
        let end = pos.saturating_add(len).min(self.size);
        if end <= pos {
            return;
        }
        if end - pos >= 1 << 20 && self.zero_range_in_place(pos, end - pos) {
            return;
        }
        let mut at = pos;
        while at < end {
            let stop = (at - at % PAGE + PAGE).min(end);
            let n = (stop - at) as usize;
            if self.read(at, n).iter().any(|b| *b != 0) {
                // SAFETY: in bounds; the caller guarantees no reader sees this range.
                unsafe { std::ptr::write_bytes(self.map.as_mut_ptr().add(at as usize), 0, n) };
            }
            at = stop;
        }
    }

    /// Zeroes a large range through the filesystem (`FALLOC_FL_ZERO_RANGE`: the blocks become
    /// unwritten extents and the page cache of the range is dropped, without reading or
    /// writing it); `false` where the filesystem cannot (then the caller zeroes by hand).
    fn zero_range_in_place(&self, pos: u64, len: u64) -> bool {
        // SAFETY: plain syscall on the owned descriptor; the range lies within the file, whose
        // size it keeps.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                pos as libc::off_t,
                len as libc::off_t,
            )
        };
        rc == 0
    }

    /// Reads `len` bytes at `pos`. Callers read only published ranges.
    pub fn read(&self, pos: u64, len: usize) -> &[u8] {
        assert!(
            pos + len as u64 <= self.size,
            "read past end of mapped file"
        );
        // SAFETY: in bounds; the range was published by the writer before this read and is
        // never written again except by recovery/truncation while no reader holds it.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(pos as usize), len) }
    }

    /// Reads `buf.len()` bytes at `pos` with a positional read (pread) of the file instead of
    /// through the mapping. Data that is not in memory is read from the disk either way, but
    /// a block the disk cannot read then comes back as an error (EIO) for the caller to
    /// answer, where a page fault of the mapping would raise SIGBUS and end the process.
    /// Uses the descriptor opened with the mapping: on FUSE a fresh open may drop the cache.
    pub fn read_at(&self, pos: u64, buf: &mut [u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        if pos.saturating_add(buf.len() as u64) > self.size {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "read of {} bytes at {pos} past the end of {} ({} bytes)",
                    buf.len(),
                    self.path.display(),
                    self.size
                ),
            ));
        }
        self.file.read_exact_at(buf, pos)
    }

    /// Reads `[pos, pos + len)` (clamped to the file) with positional reads and throws the
    /// bytes away: a block the disk cannot read is an error here, before a read of the same
    /// range through the mapping would raise SIGBUS. The pages read stay in the page cache,
    /// so the mapped read that follows costs no second disk read. Recovery calls it ahead of
    /// everything it reads through the mappings, so that a store on an unreadable disk fails
    /// to open with the offset it could not read instead of killing the process.
    pub fn check_readable(&self, pos: u64, len: u64) -> std::io::Result<()> {
        const CHUNK: u64 = 1 << 20;
        let end = pos.saturating_add(len).min(self.size);
        let mut buf = vec![0u8; end.saturating_sub(pos).min(CHUNK) as usize];
        let mut at = pos;
        while at < end {
            let n = (end - at).min(CHUNK) as usize;
            self.read_at(at, &mut buf[..n])?;
            at += n as u64;
        }
        Ok(())
    }

    /// The whole mapping (for recovery scans).
    pub fn all(&self) -> &[u8] {
        self.read(0, self.size as usize)
    }

    /// Faults `[pos, pos + len)` into the page cache ahead of the writer, so the zeroing of
    /// fresh pages happens on the calling (background) thread rather than inside appends.
    /// Best effort: an old kernel without MADV_POPULATE_READ simply skips it.
    pub fn prefault(&self, pos: u64, len: u64) {
        const MADV_POPULATE_READ: libc::c_int = 22;
        let page = 4096u64;
        let start = pos - pos % page;
        let end = (pos + len).min(self.size);
        if end <= start {
            return;
        }
        // SAFETY: the range lies inside this mapping; MADV_POPULATE_READ only faults pages in
        // (read-only), it never changes their content.
        unsafe {
            libc::madvise(
                self.map.as_mut_ptr().add(start as usize).cast(),
                (end - start) as usize,
                MADV_POPULATE_READ,
            );
        }
    }

    /// Whether every page of `[pos, pos + len)` is in memory (mincore), so that reading it
    /// cannot block on the disk. `true` for an empty range or when the kernel cannot say.
    pub fn is_resident(&self, pos: u64, len: u64) -> bool {
        const PAGE: u64 = 4096;
        let start = pos - pos % PAGE;
        let end = (pos + len).min(self.size);
        if end <= start {
            return true;
        }
        let pages = (end - start).div_ceil(PAGE) as usize;
        let mut residency = vec![0u8; pages];
        // SAFETY: the range lies inside this mapping and `residency` has one byte per page.
        let rc = unsafe {
            libc::mincore(
                self.map.as_mut_ptr().add(start as usize).cast(),
                (end - start) as usize,
                residency.as_mut_ptr(),
            )
        };
        rc != 0 || residency.iter().all(|r| r & 1 == 1)
    }

    /// Position below which bytes are durable.
    pub fn flushed(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }

    /// Marks everything below `pos` as already durable (recovery).
    pub fn set_flushed(&self, pos: u64) {
        self.flushed.store(pos, Ordering::Release);
    }

    /// Makes `[flushed, upto)` durable with msync (fdatasync semantics for the range).
    pub fn flush(&self, upto: u64) -> Result<()> {
        let from = self.flushed();
        let upto = upto.min(self.size);
        if upto <= from {
            return Ok(());
        }
        self.map
            .flush_range(from as usize, (upto - from) as usize)
            .ctx(|| format!("msync {}", self.path.display()))?;
        self.flushed.fetch_max(upto, Ordering::AcqRel);
        Ok(())
    }

    /// Flushes the whole file regardless of the tracked position.
    pub fn flush_all(&self) -> Result<()> {
        self.map
            .flush()
            .ctx(|| format!("msync {}", self.path.display()))
    }

    /// Deletes the file from disk. The mapping stays valid for readers that still hold this
    /// MappedFile; the space is freed when the last of them drops it.
    pub fn delete(&self) -> Result<()> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).ctx(|| format!("delete {}", self.path.display())),
        }
    }

    /// Last modification time of the file.
    pub fn modified(&self) -> Option<std::time::SystemTime> {
        std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok()
    }
}

/// Writes zeros over `[0, size)` and makes them durable, so that later flushes of the file
/// change no block allocation metadata.
fn write_zeros(file: &File, size: u64) -> std::io::Result<()> {
    write_zeros_from(file, 0, size)
}

/// Writes zeros over `[from, size)` and fdatasyncs the file.
fn write_zeros_from(file: &File, from: u64, size: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let chunk = vec![0u8; 1 << 20];
    let mut at = from;
    while at < size {
        let n = chunk.len().min((size - at) as usize);
        file.write_all_at(&chunk[..n], at)?;
        at += n as u64;
    }
    file.sync_data()
}

/// Lists `dir`'s files named by 20-digit offsets, sorted by offset; other names are ignored.
pub fn list_offsets(dir: &Path) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).ctx(|| format!("list {}", dir.display())),
    };
    for entry in entries {
        let entry = entry.ctx(|| format!("list {}", dir.display()))?;
        if let Some(off) = entry.file_name().to_str().and_then(parse_file_name) {
            out.push(off);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// fsyncs a directory so that file creations and deletions in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx(|| format!("fsync directory {}", dir.display()))
}

/// Creates `dir` and any missing parents so that they survive a power loss: a new directory's
/// name is durable only once its parent is fsynced (POSIX), so each directory created here has
/// its parent fsynced. Without this a whole ConsumeQueue tree could vanish at a power loss,
/// below the checkpoint that recovery trusts (found by the power-loss test).
pub fn create_dir_durable(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        missing.push(d);
        at = d.parent();
    }
    std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
    for d in missing.iter().rev() {
        if let Some(parent) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(file_name(1073741824), "00000000001073741824");
        assert_eq!(parse_file_name("00000000001073741824"), Some(1073741824));
        assert_eq!(parse_file_name("abc"), None);
    }

    #[test]
    fn write_read_flush_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let f = MappedFile::open(dir.path(), 4096, 8192).unwrap();
        // SAFETY: this test is the only writer and reads only after writing.
        unsafe { f.write(10, b"hello") };
        f.flush(15).unwrap();
        assert_eq!(f.flushed(), 15);
        drop(f);
        let f = MappedFile::open(dir.path(), 4096, 8192).unwrap();
        assert_eq!(f.read(10, 5), b"hello");
        assert_eq!(list_offsets(dir.path()).unwrap(), vec![4096]);
    }

    #[test]
    fn zeroed_allocation_writes_every_block() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let f = MappedFile::create(dir.path(), 0, 1 << 20, Allocation::Zeroed).unwrap();
        assert!(f.all().iter().all(|b| *b == 0));
        let meta = std::fs::metadata(f.path()).unwrap();
        assert_eq!(meta.len(), 1 << 20);
        assert!(meta.blocks() * 512 >= 1 << 20, "blocks are allocated");
    }

    #[test]
    fn zero_range_clears_exactly_the_range_through_the_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let size = 4u64 << 20;
        let f = MappedFile::open(dir.path(), 0, size).unwrap();
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8 | 1).collect();
        // SAFETY: this test is the file's only reader and writer.
        unsafe { f.write(0, &data) };
        f.flush_all().unwrap();
        // Large enough for the in-place path, unaligned at both ends.
        let (pos, len) = (4097u64, (3u64 << 20) + 123);
        // SAFETY: as above.
        unsafe { f.zero_range(pos, len) };
        let all = f.all();
        assert!(all[pos as usize..(pos + len) as usize]
            .iter()
            .all(|b| *b == 0));
        assert_eq!(&all[..pos as usize], &data[..pos as usize]);
        assert_eq!(&all[(pos + len) as usize..], &data[(pos + len) as usize..]);
        // And on disk, after a fresh mapping.
        f.flush_all().unwrap();
        drop(f);
        let on_disk = std::fs::read(dir.path().join(file_name(0))).unwrap();
        assert!(on_disk[pos as usize..(pos + len) as usize]
            .iter()
            .all(|b| *b == 0));
        assert_eq!(
            &on_disk[(pos + len) as usize..],
            &data[(pos + len) as usize..]
        );
    }

    #[test]
    fn residency_follows_the_page_cache() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let f = MappedFile::open(dir.path(), 0, 1 << 20).unwrap();
        // SAFETY: this test is the file's only reader and writer.
        unsafe { f.write(0, &[7u8; 64 << 10]) };
        assert!(f.is_resident(0, 64 << 10), "just written");
        f.flush_all().unwrap();
        // Evict the (now clean) pages, as memory pressure would: unmap them from this process,
        // then drop them from the page cache.
        // SAFETY: the range lies in the mapping; DONTNEED on a shared file mapping only drops
        // the page table entries (the content stays in the file).
        let rc = unsafe { libc::madvise(f.map.as_mut_ptr().cast(), 64 << 10, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0);
        // SAFETY: plain syscall on the file's own descriptor.
        let rc =
            unsafe { libc::posix_fadvise(f.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        assert!(
            !f.is_resident(0, 64 << 10),
            "evicted pages are reported cold"
        );
        let _ = f.read(0, 64 << 10).iter().map(|b| *b as u64).sum::<u64>();
        assert!(f.is_resident(0, 64 << 10), "read back in");
    }

    #[test]
    fn refuses_oversized_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(file_name(0)), vec![0u8; 100]).unwrap();
        assert!(matches!(
            MappedFile::open(dir.path(), 0, 50),
            Err(StoreError::Corrupt(_))
        ));
    }
}
