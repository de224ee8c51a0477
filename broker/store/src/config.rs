//! Store configuration, with RocketMQ's `MessageStoreConfig` defaults
//! (rocketmq-reference.md §7-§9).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Result, StoreError};

/// When an append counts as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushMode {
    /// SYNC_FLUSH: an append returns only once its bytes are on disk; concurrent appends share
    /// one flush (group commit).
    Sync,
    /// ASYNC_FLUSH: a background flusher writes dirty pages on an interval; a process crash
    /// loses nothing (the page cache survives), a machine crash may lose the last interval.
    Async,
}

/// Everything the store needs to open.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Store root directory (RocketMQ's `storePathRootDir`).
    pub root: PathBuf,
    /// CommitLog segment size in bytes (`mappedFileSizeCommitLog`, 1 GiB).
    pub commit_log_segment_size: u64,
    /// Largest record accepted (`maxMessageSize`, 4 MiB).
    pub max_message_size: usize,
    /// SYNC or ASYNC flush (`flushDiskType`, ASYNC).
    pub flush_mode: FlushMode,
    /// How long a SYNC append waits for its flush (`syncFlushTimeout`, 5 s).
    pub sync_flush_timeout: Duration,
    /// ASYNC flush cadence (`flushIntervalCommitLog`, 500 ms).
    pub flush_interval: Duration,
    /// ASYNC flush only when this many 4 KiB pages are dirty (`flushCommitLogLeastPages`, 4).
    pub flush_least_pages: u64,
    /// ASYNC flush everything at least this often (`flushCommitLogThoroughInterval`, 10 s).
    pub flush_thorough_interval: Duration,
    /// Entries per ConsumeQueue file (300 000).
    pub consume_queue_entries_per_file: u64,
    /// ConsumeQueue/index flush and checkpoint cadence (`flushIntervalConsumeQueue`, 1 s).
    pub consume_queue_flush_interval: Duration,
    /// Build the key index (`messageIndexEnable`, true).
    pub index_enabled: bool,
    /// Hash slots per index file (`maxHashSlotNum`, 5 000 000).
    pub index_hash_slots: u32,
    /// Entries per index file (`maxIndexNum`, 20 000 000).
    pub index_max_entries: u32,
    /// Segments older than this are deleted (`fileReservedTime`, 72 h).
    pub retention: Duration,
    /// Cleanup cadence (`cleanResourceInterval`, 10 s).
    pub clean_interval: Duration,
    /// Disk usage from which expired segments are cleaned eagerly (`diskMaxUsedSpaceRatio`, 0.75).
    pub disk_clean_ratio: f64,
    /// Disk usage from which the oldest segments are deleted even if not expired (0.85).
    pub disk_force_clean_ratio: f64,
    /// Disk usage from which appends are refused (`diskSpaceWarningLevelRatio`, 0.90). A
    /// watermark of 1.0 switches that behaviour off.
    pub disk_full_ratio: f64,
    /// Address written as STOREHOST into every record (the broker's advertised address).
    pub store_host: SocketAddr,
    /// Under SYNC flush, write zeros over each new CommitLog segment (on the allocator thread,
    /// before the segment is used) so that flushes only write data and never convert
    /// unwritten extents (RocketMQ's `warmMapedFileEnable`, off by default there too). Off by
    /// default: measured here, the extra segment-sized write competes with the flushes SYNC
    /// appenders wait for (docs/benchmarks.md). Ignored under ASYNC flush.
    pub zero_new_segments: bool,
    /// Treat records without Conveyor's checksum trailer as damaged (off only for stores
    /// written by Apache RocketMQ).
    pub require_record_crc: bool,
}

impl StoreConfig {
    /// Defaults for a store rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            commit_log_segment_size: 1 << 30,
            max_message_size: 4 << 20,
            flush_mode: FlushMode::Async,
            sync_flush_timeout: Duration::from_secs(5),
            flush_interval: Duration::from_millis(500),
            flush_least_pages: 4,
            flush_thorough_interval: Duration::from_secs(10),
            consume_queue_entries_per_file: 300_000,
            consume_queue_flush_interval: Duration::from_secs(1),
            index_enabled: true,
            index_hash_slots: 5_000_000,
            index_max_entries: 20_000_000,
            retention: Duration::from_secs(72 * 3600),
            clean_interval: Duration::from_secs(10),
            disk_clean_ratio: 0.75,
            disk_force_clean_ratio: 0.85,
            disk_full_ratio: 0.90,
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            zero_new_segments: false,
            require_record_crc: true,
        }
    }

    /// Small files and fast services, for tests. Disk watermarks are off (1.0) so that how
    /// full the host's disk happens to be cannot delete test data; tests of the watermarks set
    /// them explicitly.
    pub fn small(root: impl Into<PathBuf>) -> Self {
        Self {
            disk_clean_ratio: 1.0,
            disk_force_clean_ratio: 1.0,
            disk_full_ratio: 1.0,
            commit_log_segment_size: 1 << 20,
            max_message_size: 256 << 10,
            consume_queue_entries_per_file: 1000,
            consume_queue_flush_interval: Duration::from_millis(100),
            flush_interval: Duration::from_millis(50),
            index_hash_slots: 1024,
            index_max_entries: 4096,
            clean_interval: Duration::from_millis(100),
            ..Self::new(root)
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(StoreError::InvalidConfig(m));
        if self.commit_log_segment_size < (self.max_message_size as u64) + 8 {
            return bad(format!(
                "commit_log_segment_size {} must exceed max_message_size {} + 8",
                self.commit_log_segment_size, self.max_message_size
            ));
        }
        if self.commit_log_segment_size > i32::MAX as u64 * 2 {
            return bad("commit_log_segment_size must be below 4 GiB".into());
        }
        if self.max_message_size > i32::MAX as usize {
            return bad("max_message_size must fit an int32".into());
        }
        if self.consume_queue_entries_per_file == 0 {
            return bad("consume_queue_entries_per_file must be positive".into());
        }
        if self.index_hash_slots == 0 || self.index_max_entries == 0 {
            return bad("index sizes must be positive".into());
        }
        let ratios = [
            self.disk_clean_ratio,
            self.disk_force_clean_ratio,
            self.disk_full_ratio,
        ];
        if ratios.iter().any(|r| !(0.0..=1.0).contains(r)) {
            return bad("disk ratios must be within 0.0..=1.0".into());
        }
        Ok(())
    }
}
