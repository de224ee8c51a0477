//! The faults a test can switch on while the filesystem is mounted. Each is deterministic:
//! a fault in force fails every matching request, so a test knows exactly which call failed.

/// Which files a fault applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every file and directory.
    All,
    /// Files and directories whose path from the mount root (`/commitlog/0000…`) contains
    /// this substring.
    PathContains(String),
}

impl Target {
    /// True when the fault applies to `path` (a path from the mount root, starting with `/`).
    pub fn matches(&self, path: &str) -> bool {
        match self {
            Target::All => true,
            Target::PathContains(part) => path.contains(part.as_str()),
        }
    }
}

/// The faults in force, and the capacity. [`Faults::default`] is a healthy filesystem of
/// [`DEFAULT_CAPACITY`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Faults {
    /// Bytes the filesystem holds: a write, fallocate or extension that would need more fails
    /// with ENOSPC, and statfs reports it (so statvfs-based free-space checks see it).
    pub capacity: u64,
    /// fsync/fdatasync (and msync, which ends in one) of matching files and directories fail
    /// with EIO, and nothing becomes durable.
    pub fail_fsync: Option<Target>,
    /// Writes to matching files fail with EIO (write(2), and the kernel's writeback of dirty
    /// mmap pages, which msync then reports).
    pub fail_writes: Option<Target>,
    /// Reads of matching files fail with EIO (read(2), and page faults of mappings not yet
    /// cached, which then raise SIGBUS).
    pub fail_reads: Option<Target>,
    /// fallocate(2) fails with EOPNOTSUPP, as on filesystems without it.
    pub fallocate_unsupported: bool,
}

/// Capacity of a filesystem mounted without one: 4 GiB. Content lives in memory, but only
/// what is written takes memory (holes and reservations do not).
pub const DEFAULT_CAPACITY: u64 = 4 << 30;

impl Default for Faults {
    fn default() -> Self {
        Self {
            capacity: DEFAULT_CAPACITY,
            fail_fsync: None,
            fail_writes: None,
            fail_reads: None,
            fallocate_unsupported: false,
        }
    }
}

/// True when `fault` is in force for `path`.
pub(crate) fn hits(fault: &Option<Target>, path: impl FnOnce() -> String) -> bool {
    match fault {
        None => false,
        Some(Target::All) => true,
        Some(t) => t.matches(&path()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_match_by_substring() {
        let t = Target::PathContains("commitlog/".into());
        assert!(t.matches("/data/commitlog/00000000000000000000"));
        assert!(!t.matches("/data/consumequeue/T/0"));
        assert!(Target::All.matches("/anything"));
        assert!(!hits(&None, || "/x".into()));
        assert!(hits(&Some(t), || "/commitlog/1".into()));
    }
}
