//! SlaveSynchronize: a slave copies its master's metadata that is not in the CommitLog — the
//! topic table, the subscription groups, the committed consumer offsets and the delay-level
//! progress — every `metadata-sync-interval-ms` (RocketMQ: 10 s in controller mode), with
//! the requests RocketMQ's slaves use (GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
//! GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET, GET_TIMER_CHECK_POINT). A promoted slave
//! therefore serves the same topics and groups, consumers resume from offsets at most one
//! interval old, and delayed and timer messages delivered in the last interval are delivered
//! again: duplicates, never loss. Transaction progress needs no copy: the decisions are op
//! records in the log, which a promoted slave re-reads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::json;
use conveyor_protocol::route::TopicConfigSerializeWrapper;
use conveyor_remoting::{RemotingClient, RemotingConfig};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::groups::{SubscriptionGroupConfig, SubscriptionGroupManager};
use super::offsets::ConsumerOffsetManager;
use super::schedule::ScheduleMessageService;
use super::timer::TimerMessageService;
use super::topics::TopicConfigManager;
use crate::ha::Replication;

/// How long one metadata request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The metadata a slave keeps in step with its master.
pub struct SlaveSynchronize {
    /// The role and the master's remoting address.
    pub replication: Arc<Replication>,
    /// Replaced by the master's topic table.
    pub topics: Arc<TopicConfigManager>,
    /// Replaced by the master's groups.
    pub groups: Arc<SubscriptionGroupManager>,
    /// Replaced by the master's committed offsets.
    pub offsets: Arc<ConsumerOffsetManager>,
    /// Its delay progress replaced by the master's.
    pub schedule: Arc<ScheduleMessageService>,
    /// Its timer progress replaced by the master's.
    pub timer: Arc<TimerMessageService>,
}

/// Why one synchronisation failed.
#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error("{what}: {source}")]
    Call {
        what: &'static str,
        #[source]
        source: conveyor_remoting::RemotingError,
    },
    #[error("{what}: the master answered {code} {remark:?}")]
    Refused {
        what: &'static str,
        code: i32,
        remark: Option<String>,
    },
    #[error("{what}: {reason}")]
    Body { what: &'static str, reason: String },
}

#[derive(Deserialize)]
struct GroupTable {
    #[serde(rename = "subscriptionGroupTable", default)]
    table: BTreeMap<String, SubscriptionGroupConfig>,
}

impl SlaveSynchronize {
    /// Runs until `shutdown`, synchronising while the broker is a slave.
    pub async fn run(self, interval: Duration, shutdown: CancellationToken) {
        let client = RemotingClient::new(RemotingConfig::default());
        let mut tick = tokio::time::interval(interval);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            if self.replication.is_master() {
                continue;
            }
            let Some(master) = self.replication.master_broker() else {
                continue;
            };
            if let Err(e) = self.sync_once(&client, &master).await {
                tracing::warn!(master, error = %e, "metadata sync from the master failed");
            }
        }
    }

    async fn sync_once(&self, client: &RemotingClient, master: &str) -> Result<(), SyncError> {
        let body = fetch(client, master, rc::GET_ALL_TOPIC_CONFIG, "topics").await?;
        let wrapper: TopicConfigSerializeWrapper = parse("topics", &body)?;
        let changed = self
            .topics
            .replace_all(wrapper.topic_config_table, wrapper.data_version)
            .map_err(|e| body_error("topics", e))?;
        if changed {
            tracing::info!(master, "topic table synchronised from the master");
        }
        let body = fetch(
            client,
            master,
            rc::GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
            "groups",
        )
        .await?;
        let groups: GroupTable = parse("groups", &body)?;
        self.groups
            .replace_all(groups.table)
            .map_err(|e| body_error("groups", e))?;
        let body = fetch(client, master, rc::GET_ALL_CONSUMER_OFFSET, "offsets").await?;
        self.offsets
            .replace_from_json(&body)
            .map_err(|e| body_error("offsets", e))?;
        let body = fetch(client, master, rc::GET_ALL_DELAY_OFFSET, "delay progress").await?;
        self.schedule
            .replace_progress(&body)
            .map_err(|e| body_error("delay progress", e))?;
        let body = fetch(client, master, rc::GET_TIMER_CHECK_POINT, "timer progress").await?;
        self.timer
            .replace_progress(&body)
            .map_err(|e| body_error("timer progress", e))?;
        Ok(())
    }
}

async fn fetch(
    client: &RemotingClient,
    master: &str,
    code: i32,
    what: &'static str,
) -> Result<bytes::Bytes, SyncError> {
    let r = client
        .invoke_timeout(
            master,
            RemotingCommand::request(code, Default::default()),
            REQUEST_TIMEOUT,
        )
        .await
        .map_err(|source| SyncError::Call { what, source })?;
    if r.code != resp::SUCCESS {
        return Err(SyncError::Refused {
            what,
            code: r.code,
            remark: r.remark,
        });
    }
    Ok(r.body)
}

fn parse<T: serde::de::DeserializeOwned>(what: &'static str, body: &[u8]) -> Result<T, SyncError> {
    json::from_slice(body).map_err(|e| body_error(what, e))
}

fn body_error(what: &'static str, e: impl std::fmt::Display) -> SyncError {
    SyncError::Body {
        what,
        reason: e.to_string(),
    }
}
