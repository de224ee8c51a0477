//! Epochs: which master term wrote which part of the CommitLog (RocketMQ 5's
//! `EpochFileCache`, controller mode). Every master term has a number, the epoch, and the
//! offset its first record went to; replicas keep the same list. When a former master comes
//! back as a slave, the newest epoch both logs share tells where they diverge: it truncates
//! to there before following, so nothing it wrote after the fork reappears.
//!
//! The history is a pure value ([`EpochHistory`], [`consistent_point`]); [`EpochFile`] keeps
//! it durable beside the checkpoint, in RocketMQ's `epochFileCheckpoint` text format (a line
//! count, a CRC32 of the entry lines, then `epoch-startOffset` lines), written atomically.

use std::fs;
use std::io::Write;
use std::path::Path;

pub use crate::error::EpochError;
use crate::error::{IoContext, Result, StoreError};

/// One master term: its epoch and where its first record went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    /// The term's number (strictly increasing along a history).
    pub epoch: u32,
    /// CommitLog offset of the term's first record.
    pub start_offset: u64,
}

/// The terms that wrote a CommitLog, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochHistory {
    /// Epochs strictly increasing, start offsets non-decreasing.
    entries: Vec<EpochEntry>,
}

impl EpochHistory {
    /// A history from entries, checked for order.
    pub fn from_entries(entries: Vec<EpochEntry>) -> Result<Self, EpochError> {
        let mut h = Self::default();
        for e in entries {
            h.push(e.epoch, e.start_offset)?;
        }
        Ok(h)
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The newest term, if any.
    pub fn last(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// The newest epoch number (0 when the history is empty).
    pub fn last_epoch(&self) -> u32 {
        self.last().map_or(0, |e| e.epoch)
    }

    /// Starts term `epoch` at `start`. Re-announcing the newest term with its own start is a
    /// no-op (a master restarting in the same term).
    pub fn push(&mut self, epoch: u32, start: u64) -> Result<(), EpochError> {
        if let Some(last) = self.last() {
            if epoch == last.epoch && start == last.start_offset {
                return Ok(());
            }
            if epoch <= last.epoch {
                return Err(EpochError::Stale {
                    epoch,
                    current: last.epoch,
                });
            }
            if start < last.start_offset {
                return Err(EpochError::StartsBefore {
                    epoch,
                    start,
                    current_start: last.start_offset,
                });
            }
        }
        self.entries.push(EpochEntry {
            epoch,
            start_offset: start,
        });
        Ok(())
    }

    /// Forgets the terms that start at or after `offset` (the log was cut there).
    pub fn truncate_from(&mut self, offset: u64) {
        self.entries.retain(|e| e.start_offset < offset);
    }

    /// The term that wrote the byte at `offset`, if the history covers it.
    pub fn epoch_at(&self, offset: u64) -> Option<EpochEntry> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.start_offset <= offset)
            .copied()
    }

    /// The term that wrote the byte at `offset` (epoch 0 from offset 0 when the history does
    /// not cover it) and where the next term starts (`u64::MAX` for the newest): a replication
    /// batch from `offset` stops there, so that it never spans two terms.
    pub fn term_at(&self, offset: u64) -> (EpochEntry, u64) {
        let term = self.epoch_at(offset).unwrap_or(EpochEntry {
            epoch: 0,
            start_offset: 0,
        });
        let next = self
            .entries
            .iter()
            .find(|e| e.start_offset > offset)
            .map_or(u64::MAX, |e| e.start_offset);
        (term, next)
    }

    /// Where term number `i` (an index into [`Self::entries`]) ends in a log ending at
    /// `log_end`: the next term's start, or the log's end for the newest.
    fn end_of(&self, i: usize, log_end: u64) -> u64 {
        self.entries
            .get(i + 1)
            .map_or(log_end, |next| next.start_offset)
            .min(log_end)
    }
}

/// Where a replica whose log is `local` (ending at `local_end`) must be cut to agree with the
/// master's `remote` (ending at `remote_end`): the end of the newest term both have with the
/// same start, as far as both logs reach (RocketMQ's `findConsistentPoint`). `None` when they
/// share no term; an empty local history (a fresh replica) is the caller's case.
///
/// Example: the old master A holds epoch 1 up to 1000; the new master B has
/// `[(1, 0), (2, 800)]`: A is cut to 800, where B's epoch 2 started.
pub fn consistent_point(
    local: &EpochHistory,
    local_end: u64,
    remote: &EpochHistory,
    remote_end: u64,
) -> Option<u64> {
    for (i, mine) in local.entries.iter().enumerate().rev() {
        let Some(j) = remote.entries.iter().position(|r| r == mine) else {
            continue;
        };
        let point = local.end_of(i, local_end).min(remote.end_of(j, remote_end));
        return Some(point.max(mine.start_offset));
    }
    None
}

/// The durable copy of a store's [`EpochHistory`] (`<root>/epochFileCheckpoint`).
#[derive(Debug)]
pub struct EpochFile;

/// RocketMQ's file name for the epoch history.
const FILE: &str = "epochFileCheckpoint";

impl EpochFile {
    /// Loads the history; a missing file is an empty history, a damaged one an error (the
    /// store must not guess where its terms began).
    pub fn load(root: &Path) -> Result<EpochHistory> {
        let path = root.join(FILE);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(EpochHistory::default())
            }
            Err(e) => return Err(e).ctx(|| format!("read {}", path.display())),
        };
        decode(&text).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "{}: damaged epoch history (remove it only if this replica is wiped too)",
                path.display()
            ))
        })
    }

    /// Writes the history durably (temp file, fsync, rename, directory fsync).
    pub fn store(root: &Path, history: &EpochHistory) -> Result<()> {
        let tmp = root.join(format!("{FILE}.tmp"));
        let mut f = fs::File::create(&tmp).ctx(|| format!("create {}", tmp.display()))?;
        f.write_all(encode(history).as_bytes())
            .and_then(|_| f.sync_data())
            .ctx(|| format!("write {}", tmp.display()))?;
        fs::rename(&tmp, root.join(FILE)).ctx(|| format!("rename {}", tmp.display()))?;
        crate::mapped_file::sync_dir(root)
    }
}

fn entry_lines(history: &EpochHistory) -> String {
    history
        .entries
        .iter()
        .map(|e| format!("{}-{}\n", e.epoch, e.start_offset))
        .collect()
}

fn encode(history: &EpochHistory) -> String {
    let lines = entry_lines(history);
    format!(
        "{}\n{}\n{lines}",
        history.entries.len(),
        crc32fast::hash(lines.as_bytes())
    )
}

fn decode(text: &str) -> Option<EpochHistory> {
    let mut lines = text.lines();
    let count: usize = lines.next()?.trim().parse().ok()?;
    let crc: u32 = lines.next()?.trim().parse().ok()?;
    let mut entries = Vec::with_capacity(count.min(1 << 16));
    for line in lines.by_ref().take(count) {
        let (epoch, start) = line.trim().split_once('-')?;
        entries.push(EpochEntry {
            epoch: epoch.parse().ok()?,
            start_offset: start.parse().ok()?,
        });
    }
    if entries.len() != count || lines.any(|l| !l.trim().is_empty()) {
        return None;
    }
    let history = EpochHistory::from_entries(entries).ok()?;
    (crc32fast::hash(entry_lines(&history).as_bytes()) == crc).then_some(history)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(entries: &[(u32, u64)]) -> EpochHistory {
        EpochHistory::from_entries(
            entries
                .iter()
                .map(|&(epoch, start_offset)| EpochEntry {
                    epoch,
                    start_offset,
                })
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn the_old_master_is_cut_where_the_new_term_started() {
        // RocketMQ's design example: A wrote epoch 1 to 1000, B took over at 800.
        assert_eq!(
            consistent_point(&h(&[(1, 0)]), 1000, &h(&[(1, 0), (2, 800)]), 1500),
            Some(800)
        );
    }

    #[test]
    fn a_lagging_replica_of_the_same_term_keeps_everything() {
        assert_eq!(
            consistent_point(&h(&[(1, 0), (2, 500)]), 700, &h(&[(1, 0), (2, 500)]), 900),
            Some(700)
        );
    }

    #[test]
    fn a_replica_ahead_in_the_same_term_is_cut_to_the_master_end() {
        // Unacknowledged bytes past what the promoted master got.
        assert_eq!(
            consistent_point(&h(&[(1, 0), (2, 500)]), 900, &h(&[(1, 0), (2, 500)]), 700),
            Some(700)
        );
    }

    #[test]
    fn several_lost_terms_are_all_cut() {
        // Local wrote terms 3 and 4 that the master never saw; they share term 2.
        let local = h(&[(1, 0), (2, 100), (3, 300), (4, 400)]);
        let remote = h(&[(1, 0), (2, 100), (5, 250)]);
        assert_eq!(consistent_point(&local, 600, &remote, 900), Some(250));
    }

    #[test]
    fn a_term_with_a_different_start_is_not_shared() {
        // Same epoch number, different start: not the same term (never happens with a
        // correct controller, but must not be trusted).
        let local = h(&[(1, 0), (2, 120)]);
        let remote = h(&[(1, 0), (2, 100)]);
        assert_eq!(consistent_point(&local, 600, &remote, 900), Some(100));
    }

    #[test]
    fn no_shared_term_gives_none() {
        assert_eq!(consistent_point(&h(&[(3, 0)]), 10, &h(&[(1, 0)]), 20), None);
        assert_eq!(consistent_point(&h(&[]), 0, &h(&[(1, 0)]), 20), None);
    }

    #[test]
    fn push_refuses_stale_and_backwards_terms() {
        let mut x = h(&[(2, 100)]);
        assert_eq!(x.push(2, 100), Ok(()), "same term again is a no-op");
        assert!(matches!(x.push(2, 150), Err(EpochError::Stale { .. })));
        assert!(matches!(x.push(1, 150), Err(EpochError::Stale { .. })));
        assert!(matches!(
            x.push(3, 50),
            Err(EpochError::StartsBefore { .. })
        ));
        x.push(3, 100).unwrap();
        assert_eq!(x.entries().len(), 2);
    }

    #[test]
    fn truncation_forgets_terms_past_the_cut() {
        let mut x = h(&[(1, 0), (2, 100), (3, 300)]);
        x.truncate_from(300);
        assert_eq!(x, h(&[(1, 0), (2, 100)]));
        assert_eq!(x.epoch_at(250).unwrap().epoch, 2);
        assert_eq!(x.epoch_at(99).unwrap().epoch, 1);
        assert_eq!(
            x.term_at(150),
            (
                EpochEntry {
                    epoch: 2,
                    start_offset: 100
                },
                u64::MAX
            )
        );
        assert_eq!(
            x.term_at(50),
            (
                EpochEntry {
                    epoch: 1,
                    start_offset: 0
                },
                100
            )
        );
        assert_eq!(
            h(&[(3, 40)]).term_at(10),
            (
                EpochEntry {
                    epoch: 0,
                    start_offset: 0
                },
                40
            )
        );
    }

    #[test]
    fn file_round_trip_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            EpochFile::load(dir.path()).unwrap(),
            EpochHistory::default()
        );
        let x = h(&[(1, 0), (7, 4096)]);
        EpochFile::store(dir.path(), &x).unwrap();
        assert_eq!(EpochFile::load(dir.path()).unwrap(), x);
        let path = dir.path().join(FILE);
        let text = fs::read_to_string(&path).unwrap();
        fs::write(&path, text.replace("7-4096", "7-4097")).unwrap();
        assert!(matches!(
            EpochFile::load(dir.path()),
            Err(StoreError::Corrupt(_))
        ));
    }
}
