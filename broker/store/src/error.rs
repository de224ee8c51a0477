//! The store's typed errors. Callers (the broker) map each to a RocketMQ response code, so
//! every failure a client can cause or observe has its own variant and a message that says
//! what to do.

use std::io;
use std::path::PathBuf;

/// Errors returned by the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The encoded record is larger than `max_message_size`.
    #[error("message of {size} bytes exceeds the maximum message size of {max} bytes")]
    MessageTooLarge {
        /// Record size in bytes.
        size: usize,
        /// Maximum allowed size in bytes.
        max: usize,
    },
    /// The topic name breaks RocketMQ's rules.
    #[error("invalid topic {topic:?}: {reason}")]
    InvalidTopic {
        /// The refused name (at most 200 characters of it).
        topic: String,
        /// Which rule it breaks.
        reason: conveyor_protocol::naming::InvalidName,
    },
    /// The message itself cannot be encoded (for example properties over 32 767 bytes).
    #[error("invalid message: {0}")]
    InvalidMessage(#[from] conveyor_protocol::message::RecordError),
    /// Writes are refused because the disk is over the full watermark or out of space.
    #[error("disk full: {0}")]
    DiskFull(String),
    /// Another process holds the store directory.
    #[error("store directory {0} is locked by another process")]
    Locked(PathBuf),
    /// An IO operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the store was doing.
        context: String,
        /// The underlying IO error.
        #[source]
        source: io::Error,
    },
    /// On-disk state that recovery cannot repair (for example a gap between segments).
    #[error("store corrupt: {0}")]
    Corrupt(String),
    /// The configuration is inconsistent.
    #[error("invalid store configuration: {0}")]
    InvalidConfig(String),
    /// The store is shutting down or has shut down.
    #[error("store is shut down")]
    ShutDown,
    /// Reading stored data failed (EIO from the disk). Only this read fails: the store goes
    /// on serving everything else, and the same read succeeds once the disk reads again.
    #[error("read failed at {site} offset {offset}: {source}")]
    ReadFailed {
        /// Which file kind the read was for.
        site: ReadSite,
        /// The commit-log offset, the consume queue's queue offset, or the index file's byte
        /// position of the read.
        offset: u64,
        /// The underlying IO error.
        #[source]
        source: io::Error,
    },
    /// A CommitLog flush failed: nothing written since can be trusted to be on disk, so the
    /// store refuses writes until it is reopened and recovery re-verifies the log.
    #[error("commit log flush failed ({0}); writes are refused until the store is reopened")]
    FlushFailed(String),
    /// A replicated append did not start at the replica's write position (the stream and the
    /// replica disagree on where the log ends; the replication connection starts over).
    #[error("replicated bytes start at {got}, but the commit log ends at {expected}")]
    ReplicaOffset {
        /// The replica's write position.
        expected: u64,
        /// Where the bytes start.
        got: u64,
    },
    /// Replicated bytes that are not whole verified records, blanks or markers at their
    /// offsets (a damaged stream or a master with another log).
    #[error("bad replication stream: {0}")]
    ReplicaStream(String),
    /// A master term that would go backwards (a stale master or controller).
    #[error(transparent)]
    Epoch(#[from] EpochError),
}

/// Where a failed read was reading, as [`StoreError::ReadFailed`] names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadSite {
    /// The CommitLog (the offset is a physical offset).
    CommitLog,
    /// A ConsumeQueue (the offset is a queue offset).
    ConsumeQueue {
        /// Its topic.
        topic: String,
        /// Its queue id.
        queue_id: i32,
    },
    /// An index file (the offset is a byte position in it).
    Index {
        /// The file's name.
        file: String,
    },
}

impl std::fmt::Display for ReadSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadSite::CommitLog => f.write_str("commitlog"),
            ReadSite::ConsumeQueue { topic, queue_id } => {
                write!(f, "consumequeue {topic}/{queue_id}")
            }
            ReadSite::Index { file } => write!(f, "index file {file}"),
        }
    }
}

/// Why an epoch could not be appended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EpochError {
    /// The epoch is not newer than the last one (a stale master or controller).
    #[error("epoch {epoch} is not newer than the current epoch {current}")]
    Stale {
        /// The refused epoch.
        epoch: u32,
        /// The newest epoch of the history.
        current: u32,
    },
    /// The epoch would start before the last one did.
    #[error(
        "epoch {epoch} would start at {start}, before the current epoch's start {current_start}"
    )]
    StartsBefore {
        /// The refused epoch.
        epoch: u32,
        /// Its start offset.
        start: u64,
        /// Where the newest epoch starts.
        current_start: u64,
    },
}

/// Store result.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Adds context to IO errors: `file.sync_all().ctx(|| format!("fsync {path:?}"))`.
pub(crate) trait IoContext<T> {
    fn ctx<F: FnOnce() -> String>(self, f: F) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx<F: FnOnce() -> String>(self, f: F) -> Result<T> {
        self.map_err(|source| {
            if source.raw_os_error() == Some(libc::ENOSPC) {
                StoreError::DiskFull(format!("{}: {source}", f()))
            } else {
                StoreError::Io {
                    context: f(),
                    source,
                }
            }
        })
    }
}
