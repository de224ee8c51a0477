//! BrokerConfig: the broker's settings (RocketMQ's BrokerConfig, the parts Conveyor uses), as
//! read from the settings file. A leaf, so services can take the values they need from it
//! without depending on the broker that owns it.

use serde::{Deserialize, Serialize};

use super::auto_create::AutoCreateLimits;
use super::zone::ZoneSource;
use crate::ha::ReplicationConfig;

/// Broker settings (RocketMQ's BrokerConfig, the parts Conveyor uses).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct BrokerConfig {
    /// Cluster the broker belongs to.
    pub cluster_name: String,
    /// Broker group name (master and slaves share it).
    pub broker_name: String,
    /// 0 = master.
    pub broker_id: i64,
    /// Address clients use to reach this broker ("ip:port"); also the STOREHOST of records.
    pub advertised_addr: String,
    /// Name servers to register with.
    pub namesrv_addrs: Vec<String>,
    /// Create unknown topics on first send from the TBW102 template.
    pub auto_create_topic: bool,
    /// Create unknown consumer groups on first use.
    pub auto_create_subscription_group: bool,
    /// How far auto-creation of topics and groups may go.
    pub auto_create: AutoCreateLimits,
    /// Queues of TBW102 (and so the most an auto-created topic gets).
    pub default_topic_queue_nums: i32,
    /// Registration period (RocketMQ: 30 s, clamped to 10–60 s).
    pub register_interval_ms: u64,
    /// Consumer offsets persistence period.
    pub offset_persist_interval_ms: u64,
    /// How long a SEND may wait for a free slot before the broker answers SYSTEM_BUSY.
    pub send_queue_wait_ms: u64,
    /// Sends in flight across all connections before new ones wait.
    pub max_sends_in_flight: usize,
    /// Delay levels, RocketMQ's `messageDelayLevel`.
    pub delay_levels: String,
    /// Longest delay a timer message may ask for (RocketMQ: 3 days).
    pub timer_max_delay_ms: u64,
    /// Age after which an undecided half message is checked back (RocketMQ: 6 s).
    pub transaction_timeout_ms: u64,
    /// Time between two checks of the same half message.
    pub transaction_check_interval_ms: u64,
    /// Checks before an undecided half message is discarded (RocketMQ: 15).
    pub transaction_check_max: u32,
    /// A slave serves pulls, and masters send lagging consumers to slaves.
    pub slave_read_enable: bool,
    /// `/metrics` also reports each group's backlog per queue (many series; off by default).
    pub metrics_per_queue: bool,
    /// Lag (percent of RAM) past which a consumer is sent to a slave.
    pub access_message_in_memory_max_ratio: u64,
    /// Where this broker's zone comes from (`zone`, `zone-file`).
    pub zone: ZoneSource,
    /// The role and the `[replication]` settings.
    pub replication: ReplicationConfig,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            cluster_name: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            broker_id: 0,
            advertised_addr: "127.0.0.1:10911".into(),
            namesrv_addrs: vec!["127.0.0.1:9876".into()],
            auto_create_topic: true,
            auto_create_subscription_group: true,
            auto_create: AutoCreateLimits::default(),
            default_topic_queue_nums: 8,
            register_interval_ms: 30_000,
            offset_persist_interval_ms: 5_000,
            send_queue_wait_ms: 200,
            max_sends_in_flight: 10_000,
            delay_levels: "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h".into(),
            timer_max_delay_ms: 3 * 24 * 3600 * 1000,
            transaction_timeout_ms: 6_000,
            transaction_check_interval_ms: 30_000,
            transaction_check_max: 15,
            slave_read_enable: false,
            metrics_per_queue: false,
            access_message_in_memory_max_ratio: 40,
            zone: ZoneSource::default(),
            replication: ReplicationConfig::default(),
        }
    }
}
