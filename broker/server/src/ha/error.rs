//! HaError: why a replication connection (or a role change) failed.

use std::time::Duration;

use conveyor_store::StoreError;

use super::frame;

/// Why a replication connection ended.
#[derive(Debug, thiserror::Error)]
pub enum HaError {
    /// The socket failed.
    #[error("replication connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent bytes that are not a frame.
    #[error(transparent)]
    Frame(#[from] frame::FrameError),
    /// The peer sent a frame out of turn or with impossible values.
    #[error("replication protocol: {0}")]
    Protocol(String),
    /// The peer refused the connection (or this side refused it).
    #[error("replication refused: {0}")]
    Refused(String),
    /// The peer sent nothing for this long.
    #[error("no replication frame for {0:?}")]
    Silent(Duration),
    /// The peer took no bytes for this long.
    #[error("the peer accepted no replication bytes for {0:?}")]
    Stuck(Duration),
    /// This replica's log cannot follow the master's without losing data it cannot judge.
    #[error("replica diverged: {0}")]
    Diverged(String),
    /// The store refused the replicated bytes or a truncation.
    #[error(transparent)]
    Store(#[from] StoreError),
}
