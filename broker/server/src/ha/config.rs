//! ReplicationConfig: the `[replication]` settings and the broker's role, as the replication
//! service uses them. A leaf, like the broker's own config.

use std::time::Duration;

use conveyor_settings::{BrokerRole, SlaveAck};
use serde::{Deserialize, Serialize};

/// Replication settings (RocketMQ's HA settings; see `conveyor_settings::ReplicationSection`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct ReplicationConfig {
    /// SYNC_MASTER, ASYNC_MASTER or SLAVE.
    pub role: BrokerRole,
    /// `"ip:port"` advertised to slaves as `haServerAddr` (filled in at start when empty).
    pub advertised_addr: String,
    /// The broker's cluster (from `[broker]`, filled in by the broker).
    #[serde(skip)]
    pub cluster_name: String,
    /// The broker's advertised remoting address (from `[broker]`, filled in by the broker).
    #[serde(skip)]
    pub broker_addr: String,
    /// A slave follows this address instead of the one the name server gives.
    pub master_address: String,
    /// Copies, the master's included, that must hold a message before SEND_OK (SYNC_MASTER).
    pub in_sync_replicas: usize,
    /// When a slave acknowledges: after the write or after fsync.
    pub slave_ack: SlaveAck,
    /// How long a send waits for its slaves.
    pub slave_timeout_ms: u64,
    /// Most CommitLog bytes per transfer frame.
    pub transfer_batch_bytes: usize,
    /// An idle stream sends a heartbeat this often.
    pub heartbeat_interval_ms: u64,
    /// A stream silent this long is closed.
    pub housekeeping_interval_ms: u64,
    /// A slave further behind than this does not count as available.
    pub max_gap_bytes: u64,
    /// How often a slave copies its master's topics, groups, offsets and delay progress.
    pub metadata_sync_interval_ms: u64,
    /// Controllers deciding the role; empty: the role is `role`.
    pub controller_addrs: Vec<String>,
    /// Sent with every controller request as `controllerScope` when set (see the
    /// `[replication] controller-scope` setting).
    pub controller_scope: Option<String>,
    /// Heartbeat period to the controller.
    pub controller_heartbeat_ms: u64,
    /// Controller mode: what the master registers as id 0 instead of its own address (see
    /// the `[replication] group-address` setting).
    pub group_address: Option<String>,
    /// Controller mode: a master waits for every member of the in-sync set (`true`) or for
    /// nobody (`false`).
    pub synchronous: bool,
    /// Controller mode: a member of the in-sync set that has not caught up (or is not
    /// connected) for this long is dropped from it (`haMaxTimeSlaveNotCatchup`).
    pub max_time_not_caught_up_ms: u64,
    /// With ACL on, the cluster secret: a slave proves it knows it in its hello, and a
    /// master serves only slaves that do ([`super::auth`]).
    pub cluster_secret: Option<String>,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        Self {
            role: BrokerRole::AsyncMaster,
            advertised_addr: String::new(),
            cluster_name: String::new(),
            broker_addr: String::new(),
            master_address: String::new(),
            in_sync_replicas: 2,
            slave_ack: SlaveAck::Write,
            slave_timeout_ms: 3_000,
            transfer_batch_bytes: 256 << 10,
            heartbeat_interval_ms: 5_000,
            housekeeping_interval_ms: 20_000,
            max_gap_bytes: 256 << 20,
            metadata_sync_interval_ms: 10_000,
            controller_addrs: Vec::new(),
            controller_scope: None,
            controller_heartbeat_ms: 500,
            group_address: None,
            synchronous: true,
            max_time_not_caught_up_ms: 15_000,
            cluster_secret: None,
        }
    }
}

impl ReplicationConfig {
    /// `slave_timeout_ms`.
    pub fn slave_timeout(&self) -> Duration {
        Duration::from_millis(self.slave_timeout_ms.max(1))
    }

    /// `heartbeat_interval_ms`.
    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_millis(self.heartbeat_interval_ms.max(10))
    }

    /// `housekeeping_interval_ms`, never shorter than two heartbeats.
    pub fn housekeeping_interval(&self) -> Duration {
        Duration::from_millis(self.housekeeping_interval_ms).max(self.heartbeat_interval() * 2)
    }

    /// True when the controller decides the role.
    pub fn controller_mode(&self) -> bool {
        !self.controller_addrs.is_empty()
    }

    /// True when a master waits for slaves before SEND_OK.
    pub fn synchronous(&self) -> bool {
        if self.controller_mode() {
            self.synchronous
        } else {
            self.role == BrokerRole::SyncMaster
        }
    }

    /// Classic mode: slaves that must acknowledge a message before SEND_OK (none unless
    /// SYNC_MASTER).
    pub fn required_slaves(&self) -> usize {
        match self.role {
            BrokerRole::SyncMaster => self.in_sync_replicas.saturating_sub(1),
            BrokerRole::AsyncMaster | BrokerRole::Slave => 0,
        }
    }

    /// `controller_heartbeat_ms`.
    pub fn controller_heartbeat(&self) -> Duration {
        Duration::from_millis(self.controller_heartbeat_ms.max(10))
    }

    /// `max_time_not_caught_up_ms`.
    pub fn max_time_not_caught_up(&self) -> Duration {
        Duration::from_millis(self.max_time_not_caught_up_ms.max(10))
    }

    /// `metadata_sync_interval_ms`.
    pub fn metadata_sync_interval(&self) -> Duration {
        Duration::from_millis(self.metadata_sync_interval_ms.max(10))
    }

    /// `transfer_batch_bytes`, within what a frame may carry.
    pub fn batch_bytes(&self) -> usize {
        self.transfer_batch_bytes.clamp(
            4096,
            super::frame::MAX_FRAME - super::frame::TRANSFER_HEADER,
        )
    }
}
