//! SubscriptionGroupManager: per consumer group settings (retry queues, max reconsume times,
//! orderly flag), persisted as `config/subscriptionGroup.json` in RocketMQ's shape and created
//! on first use when `autoCreateSubscriptionGroup` is on.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use conveyor_protocol::code::response_code as resp;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::route::DataVersion;
use serde::{Deserialize, Serialize};

use super::auto_create::{AutoCreateGuard, Kind, Refusal};
use super::config_file::{ConfigFile, ConfigFileError};
use super::reply::error_response;

/// One group's settings (RocketMQ's `SubscriptionGroupConfig`, the fields clients and
/// `mqadmin` use).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionGroupConfig {
    /// The group.
    pub group_name: String,
    /// False stops the group from pulling (NO_PERMISSION).
    pub consume_enable: bool,
    /// New members may start from the queue's minimum offset.
    pub consume_from_min_enable: bool,
    /// Broadcasting consumption is allowed.
    pub consume_broadcast_enable: bool,
    /// The group consumes orderly (queue locks).
    pub consume_message_orderly: bool,
    /// Queues of `%RETRY%group`; 0 disables retries.
    pub retry_queue_nums: i32,
    /// Reconsumes before a message goes to `%DLQ%group`.
    pub retry_max_times: i32,
    /// Broker the group pulls from normally.
    pub broker_id: i64,
    /// Broker the group pulls from when consumption is slow.
    pub which_broker_when_consume_slowly: i64,
    /// Members are told (NOTIFY_CONSUMER_IDS_CHANGED) when membership changes.
    pub notify_consumer_ids_changed_enable: bool,
    /// Group SYSFLAG bits.
    pub group_sys_flag: i32,
    /// Minutes before a push consumer's message counts as timed out.
    pub consume_timeout_minute: i32,
}

impl Default for SubscriptionGroupConfig {
    fn default() -> Self {
        Self {
            group_name: String::new(),
            consume_enable: true,
            consume_from_min_enable: true,
            consume_broadcast_enable: true,
            consume_message_orderly: false,
            retry_queue_nums: 1,
            retry_max_times: 16,
            broker_id: 0,
            which_broker_when_consume_slowly: 1,
            notify_consumer_ids_changed_enable: true,
            group_sys_flag: 0,
            consume_timeout_minute: 15,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    #[serde(rename = "subscriptionGroupTable", default)]
    table: BTreeMap<String, SubscriptionGroupConfig>,
    #[serde(rename = "dataVersion", default)]
    data_version: DataVersion,
}

/// The group table.
pub struct SubscriptionGroupManager {
    /// `config/subscriptionGroup.json`.
    file: ConfigFile,
    /// The groups and the table's version, as persisted.
    state: RwLock<Persisted>,
    /// `autoCreateSubscriptionGroup`: unknown groups are created on first use (changed at
    /// run time by UPDATE_BROKER_CONFIG).
    auto_create: AtomicBool,
    /// Admits auto-creations (shared with the topic table).
    guard: Arc<AutoCreateGuard>,
    /// Changed by an auto-creation since last persisted (saved in the background by
    /// [`SubscriptionGroupManager::persist_if_dirty`], off the request path).
    dirty: AtomicBool,
}

impl SubscriptionGroupManager {
    /// Loads `config/subscriptionGroup.json`.
    pub fn load(
        config_dir: &Path,
        auto_create: bool,
        guard: Arc<AutoCreateGuard>,
    ) -> Result<Self, ConfigFileError> {
        let file = ConfigFile::new(config_dir, "subscriptionGroup.json");
        let state = file.load()?.unwrap_or_default();
        Ok(Self {
            file,
            state: RwLock::new(state),
            auto_create: AtomicBool::new(auto_create),
            guard,
            dirty: AtomicBool::new(false),
        })
    }

    /// Whether unknown groups are created on first use.
    pub fn auto_create(&self) -> bool {
        self.auto_create.load(Ordering::Acquire)
    }

    /// Turns automatic group creation on or off (not persisted: a restart takes the
    /// configured value). Returns whether it changed.
    pub fn set_auto_create(&self, on: bool) -> bool {
        self.auto_create.swap(on, Ordering::AcqRel) != on
    }

    /// Takes the master's groups as this slave's (SlaveSynchronize) and persists them when
    /// they changed. Returns whether anything changed.
    pub fn replace_all(
        &self,
        table: BTreeMap<String, SubscriptionGroupConfig>,
    ) -> Result<bool, ConfigFileError> {
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        if s.table == table {
            return Ok(false);
        }
        s.table = table;
        s.data_version.counter += 1;
        s.data_version.timestamp = conveyor_protocol::time::now_ms();
        self.file.store(&*s).map(|()| true)
    }

    /// Persists the table if an auto-creation changed it since the last save.
    pub fn persist_if_dirty(&self) -> Result<(), ConfigFileError> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let s = self.state.read().unwrap_or_else(|e| e.into_inner());
        self.file
            .store(&*s)
            .inspect_err(|_| self.dirty.store(true, Ordering::Release))
    }

    /// The group's config; created with defaults when auto-creation is on and the guard admits
    /// it (`Ok(None)` when auto-creation is off). The new group is saved in the background.
    pub fn find_or_create(&self, group: &str) -> Result<Option<SubscriptionGroupConfig>, Refusal> {
        if let Some(c) = self.get(group) {
            return Ok(Some(c));
        }
        if !self.auto_create() {
            return Ok(None);
        }
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = s.table.get(group) {
            return Ok(Some(c.clone()));
        }
        self.guard.admit(Kind::Group, s.table.len())?;
        let config = SubscriptionGroupConfig {
            group_name: group.to_string(),
            ..Default::default()
        };
        s.table.insert(config.group_name.clone(), config.clone());
        s.data_version.counter += 1;
        self.dirty.store(true, Ordering::Release);
        Ok(Some(config))
    }

    /// The group's config (created on first use when allowed), or the error response a
    /// request naming it gets: SUBSCRIPTION_GROUP_NOT_EXIST (with the limit's remark when
    /// auto-creation refused it), or SYSTEM_BUSY when the creation rate is exceeded.
    pub fn require(
        &self,
        req: &RemotingCommand,
        group: &str,
    ) -> Result<SubscriptionGroupConfig, RemotingCommand> {
        match self.find_or_create(group) {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(error_response(
                req,
                resp::SUBSCRIPTION_GROUP_NOT_EXIST,
                format!("subscription group [{group}] does not exist"),
            )),
            Err(r @ Refusal::TableFull { .. }) => Err(error_response(
                req,
                resp::SUBSCRIPTION_GROUP_NOT_EXIST,
                r.remark(group),
            )),
            Err(r @ Refusal::Rate { .. }) => {
                Err(error_response(req, resp::SYSTEM_BUSY, r.remark(group)))
            }
        }
    }

    /// The group's config, if it exists.
    pub fn get(&self, group: &str) -> Option<SubscriptionGroupConfig> {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .table
            .get(group)
            .cloned()
    }

    /// Creates or replaces a group.
    pub fn upsert(&self, config: SubscriptionGroupConfig) -> Result<(), ConfigFileError> {
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        s.table.insert(config.group_name.clone(), config);
        s.data_version.counter += 1;
        self.file.store(&*s)
    }

    /// Removes a group.
    pub fn remove(&self, group: &str) -> Result<(), ConfigFileError> {
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        if s.table.remove(group).is_some() {
            s.data_version.counter += 1;
            self.file.store(&*s)?;
        }
        Ok(())
    }

    /// All groups.
    pub fn all(&self) -> Vec<SubscriptionGroupConfig> {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .table
            .values()
            .cloned()
            .collect()
    }
}
