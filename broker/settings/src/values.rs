//! Enumerated values of the settings file.

use serde::{Deserialize, Serialize};

/// `[store] flush-mode`: when an append counts as done (RocketMQ's `flushDiskType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushMode {
    /// `"sync"` (SYNC_FLUSH): acknowledge after fsync; concurrent appends share one flush
    /// (group commit).
    Sync,
    /// `"async"` (ASYNC_FLUSH): acknowledge at once; a background flusher writes dirty pages on
    /// an interval.
    Async,
}

impl FlushMode {
    /// The value as written in the file (`"sync"`, `"async"`).
    pub fn as_str(self) -> &'static str {
        match self {
            FlushMode::Sync => "sync",
            FlushMode::Async => "async",
        }
    }
}

/// `[broker] broker-role`: RocketMQ's `brokerRole`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BrokerRole {
    /// `"SYNC_MASTER"`: a master that acknowledges once a slave has the message.
    SyncMaster,
    /// `"ASYNC_MASTER"`: a master that acknowledges without waiting for slaves.
    AsyncMaster,
    /// `"SLAVE"`: a replica of its group's master.
    Slave,
}

impl BrokerRole {
    /// The value as written in the file (`"SYNC_MASTER"`, `"ASYNC_MASTER"`, `"SLAVE"`).
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerRole::SyncMaster => "SYNC_MASTER",
            BrokerRole::AsyncMaster => "ASYNC_MASTER",
            BrokerRole::Slave => "SLAVE",
        }
    }
}

/// `[replication] slave-ack`: when a slave acknowledges replicated bytes to its master.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlaveAck {
    /// `"write"`: once the bytes are in the slave's page cache (RocketMQ's behaviour). A
    /// master and slave losing power together can lose what was acknowledged this way.
    Write,
    /// `"flush"`: once the slave has fsynced them. With SYNC flush on the master, an
    /// acknowledged message survives all nodes losing power at once.
    Flush,
}

impl SlaveAck {
    /// The value as written in the file (`"write"`, `"flush"`).
    pub fn as_str(self) -> &'static str {
        match self {
            SlaveAck::Write => "write",
            SlaveAck::Flush => "flush",
        }
    }
}
