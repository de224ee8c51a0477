//! StoreCheckpoint: the positions known durable at the last flush, so that recovery scans
//! only what may be missing instead of the whole log. Written atomically (temp file, fsync,
//! rename, fsync directory) and checksummed, so a crash mid-write leaves the previous one.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};

/// Durable positions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// CommitLog bytes below this offset are on disk.
    pub commit_log_flushed: u64,
    /// ConsumeQueue and index entries of every record below this offset are on disk.
    pub dispatch_flushed: u64,
    /// Wall-clock time of the write (ms), for operators.
    pub written_at_ms: u64,
}

const LEN: usize = 8 * 3 + 4;

impl Checkpoint {
    /// Where recovery must start scanning: nothing below is missing from any structure.
    pub fn safe_offset(&self) -> u64 {
        self.commit_log_flushed.min(self.dispatch_flushed)
    }

    fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[..8].copy_from_slice(&self.commit_log_flushed.to_be_bytes());
        b[8..16].copy_from_slice(&self.dispatch_flushed.to_be_bytes());
        b[16..24].copy_from_slice(&self.written_at_ms.to_be_bytes());
        let crc = crc32fast::hash(&b[..24]);
        b[24..].copy_from_slice(&crc.to_be_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != LEN || crc32fast::hash(&b[..24]).to_be_bytes() != b[24..] {
            return None;
        }
        let u = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(a)
        };
        Some(Self {
            commit_log_flushed: u(0),
            dispatch_flushed: u(8),
            written_at_ms: u(16),
        })
    }

    /// Loads the checkpoint; a missing or damaged file yields `None` (recover from the start).
    pub fn load(root: &Path) -> Option<Self> {
        fs::read(root.join("checkpoint"))
            .ok()
            .and_then(|b| Self::decode(&b))
    }

    /// Writes the checkpoint durably.
    pub fn store(&self, root: &Path) -> Result<()> {
        let tmp: PathBuf = root.join("checkpoint.tmp");
        let mut f = fs::File::create(&tmp).ctx(|| format!("create {}", tmp.display()))?;
        f.write_all(&self.encode())
            .and_then(|_| f.sync_data())
            .ctx(|| format!("write {}", tmp.display()))?;
        fs::rename(&tmp, root.join("checkpoint")).ctx(|| "rename checkpoint".to_string())?;
        crate::mapped_file::sync_dir(root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Checkpoint::load(dir.path()), None);
        let c = Checkpoint {
            commit_log_flushed: 10,
            dispatch_flushed: 7,
            written_at_ms: 99,
        };
        c.store(dir.path()).unwrap();
        assert_eq!(Checkpoint::load(dir.path()), Some(c));
        assert_eq!(c.safe_offset(), 7);
        let mut raw = fs::read(dir.path().join("checkpoint")).unwrap();
        raw[3] ^= 1;
        fs::write(dir.path().join("checkpoint"), raw).unwrap();
        assert_eq!(Checkpoint::load(dir.path()), None);
    }
}
