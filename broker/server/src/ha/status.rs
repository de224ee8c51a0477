//! What a broker tells operators about its replication, in RocketMQ 5's bodies:
//! HARuntimeInfo (GET_BROKER_HA_STATUS, `mqadmin haStatus`) and EpochEntryCache
//! (GET_BROKER_EPOCH_CACHE, `mqadmin getBrokerEpoch`). Read-only views over [`Replication`].

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::replication::Replication;

/// RocketMQ's HAConnectionRuntimeInfo: one slave as its master sees it.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HaConnectionInfo {
    /// The slave's replication connection address (`broker <id>` when it is not connected).
    pub addr: String,
    /// End of the log the slave acknowledged.
    pub slave_ack_offset: i64,
    /// How far it is behind the master's end.
    pub diff: i64,
    /// Whether it holds every confirmed record (connected and within the in-sync gap).
    pub in_sync: bool,
    /// Not measured by Conveyor: always 0.
    pub transferred_byte_in_second: i64,
    /// Where its current stream started.
    pub transfer_from_where: i64,
}

/// RocketMQ's HAClientRuntimeInfo: the slave's side of its stream.
#[derive(Debug, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HaClientInfo {
    /// The master's replication address (absent before it is known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master_addr: Option<String>,
    /// Not measured by Conveyor: always 0.
    pub transferred_byte_in_second: i64,
    /// End of this replica's log.
    pub max_offset: i64,
    /// When it last read a transfer (ms since the epoch; 0: never).
    pub last_read_timestamp: i64,
    /// When it last wrote an acknowledgement (ms; 0: never).
    pub last_write_timestamp: i64,
    /// The master's confirmed end as its transfers said (what this replica may serve).
    pub master_flush_offset: i64,
}

/// RocketMQ's HARuntimeInfo.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HaRuntimeInfo {
    /// Whether this broker is its group's master.
    pub master: bool,
    /// End of the master's CommitLog (a master).
    pub master_commit_log_max_offset: i64,
    /// Slaves holding every confirmed record.
    pub in_sync_slave_nums: i32,
    /// The master's slaves.
    pub ha_connection_info: Vec<HaConnectionInfo>,
    /// The slave's stream.
    pub ha_client_runtime_info: HaClientInfo,
}

/// One term of the log (RocketMQ's EpochEntry).
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EpochView {
    /// The master epoch.
    pub epoch: u32,
    /// Where it starts in the CommitLog.
    pub start_offset: i64,
    /// Where it ends (the next term's start; `i64::MAX` for the last, as RocketMQ).
    pub end_offset: i64,
}

/// RocketMQ's EpochEntryCache.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EpochEntryCache {
    /// The cluster.
    pub cluster_name: String,
    /// The broker group.
    pub broker_name: String,
    /// This replica's id.
    pub broker_id: i64,
    /// The terms of its log, oldest first.
    pub epoch_list: Vec<EpochView>,
    /// End of its log.
    pub max_offset: i64,
}

impl Replication {
    /// The HARuntimeInfo of this broker now.
    pub fn runtime_info(&self) -> HaRuntimeInfo {
        let end = self.store.commit_log_max_offset() as i64;
        let master = self.is_master();
        let now = super::flow::now_s();
        let connections: Vec<HaConnectionInfo> = if master {
            self.acks
                .slaves()
                .into_iter()
                .map(|s| HaConnectionInfo {
                    addr: s
                        .peer
                        .map_or_else(|| format!("broker {}", s.broker_id), |p| p.to_string()),
                    slave_ack_offset: s.acked as i64,
                    diff: end - s.acked as i64,
                    in_sync: s.connection.is_some()
                        && end - (s.acked as i64) <= self.config.max_gap_bytes as i64,
                    transferred_byte_in_second: s.flow.per_second(now) as i64,
                    transfer_from_where: s.stream_from as i64,
                })
                .collect()
        } else {
            Vec::new()
        };
        let client = if master {
            HaClientInfo::default()
        } else {
            HaClientInfo {
                master_addr: self.master.borrow().clone(),
                transferred_byte_in_second: self
                    .received
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .per_second(now) as i64,
                max_offset: end,
                last_read_timestamp: self.last_read_ms.load(Ordering::Relaxed),
                last_write_timestamp: self.last_write_ms.load(Ordering::Relaxed),
                master_flush_offset: self.store.confirm_offset() as i64,
            }
        };
        HaRuntimeInfo {
            master,
            master_commit_log_max_offset: if master { end } else { 0 },
            in_sync_slave_nums: connections.iter().filter(|c| c.in_sync).count() as i32,
            ha_connection_info: connections,
            ha_client_runtime_info: client,
        }
    }

    /// The EpochEntryCache of this replica's log.
    pub fn epoch_cache(&self) -> EpochEntryCache {
        let history = self.store.epochs();
        let entries = history.entries();
        let epoch_list = entries
            .iter()
            .enumerate()
            .map(|(i, e)| EpochView {
                epoch: e.epoch,
                start_offset: e.start_offset as i64,
                end_offset: entries
                    .get(i + 1)
                    .map_or(i64::MAX, |next| next.start_offset as i64),
            })
            .collect();
        EpochEntryCache {
            cluster_name: self.config.cluster_name.clone(),
            broker_name: self.broker_name.clone(),
            broker_id: self.broker_id,
            epoch_list,
            max_offset: self.store.commit_log_max_offset() as i64,
        }
    }
}
