//! TopicConfigManager: the broker's topics (queue counts, permissions), persisted as
//! `config/topics.json` in RocketMQ's shape and versioned so the name server can tell a
//! changed table. Also owns the TBW102 auto-create rule (docs/protocol.md §9.6).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use conveyor_protocol::route::{perm, DataVersion, TopicConfig};
use serde::{Deserialize, Serialize};

use super::auto_create::{AutoCreateGuard, Kind, Refusal};
use super::config_file::{ConfigFile, ConfigFileError};
use conveyor_protocol::time::now_ms;

/// The auto-create template topic.
pub const AUTO_CREATE_TOPIC: &str = "TBW102";
/// Topic used by `mqadmin` and clients to probe a broker.
pub const SELF_TEST_TOPIC: &str = "SELF_TEST_TOPIC";
/// Delay-level topic (one queue per level).
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// Timer-message topic (5.x).
pub const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";
/// Transactional half messages.
pub const TRANS_HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// Transaction decisions.
pub const TRANS_OP_HALF_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// Half messages checked too often.
pub const TRANS_CHECK_MAX_TIME_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
/// Prefix of per-group retry topics.
pub const RETRY_GROUP_TOPIC_PREFIX: &str = "%RETRY%";
/// Prefix of per-group dead-letter topics.
pub const DLQ_GROUP_TOPIC_PREFIX: &str = "%DLQ%";

/// System topics clients may not send to directly.
pub fn is_forbidden_for_send(topic: &str) -> bool {
    matches!(
        topic,
        SCHEDULE_TOPIC
            | TIMER_TOPIC
            | TRANS_HALF_TOPIC
            | TRANS_OP_HALF_TOPIC
            | TRANS_CHECK_MAX_TIME_TOPIC
    ) || topic == "OFFSET_MOVED_EVENT"
}

/// The broker's internal topics: those clients may not send to, and RocketMQ's `rmq_sys_`
/// and `RMQ_SYS_` families.
pub fn is_internal(topic: &str) -> bool {
    is_forbidden_for_send(topic) || topic.starts_with("rmq_sys_") || topic.starts_with("RMQ_SYS_")
}

/// Topics whose queues live without an entry in the topic table: per-group retry and
/// dead-letter topics and the broker's internal topics (`cleanUnusedTopic` leaves them).
pub fn is_kept_without_config(topic: &str) -> bool {
    topic.starts_with(RETRY_GROUP_TOPIC_PREFIX)
        || topic.starts_with(DLQ_GROUP_TOPIC_PREFIX)
        || is_internal(topic)
}

/// `%RETRY%group`.
pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_GROUP_TOPIC_PREFIX}{group}")
}

/// `%DLQ%group`.
pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_GROUP_TOPIC_PREFIX}{group}")
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    #[serde(rename = "topicConfigTable", default)]
    topic_config_table: BTreeMap<String, TopicConfig>,
    #[serde(rename = "dataVersion", default)]
    data_version: DataVersion,
    /// Topics deleted and not created again (Conveyor only): recovery may rebuild their
    /// ConsumeQueues from records still in the CommitLog, and they must not be restored.
    #[serde(rename = "deletedTopics", default)]
    deleted: std::collections::BTreeSet<String>,
}

/// The broker's topic table.
pub struct TopicConfigManager {
    /// `config/topics.json`.
    file: ConfigFile,
    /// The topics and the table's version, as persisted.
    state: RwLock<Persisted>,
    /// Admits auto-creations (shared with the group table).
    guard: Arc<AutoCreateGuard>,
    /// Changed since last persisted by an auto-creation (persisted in the background by
    /// [`TopicConfigManager::persist_if_dirty`], off the request path).
    dirty: AtomicBool,
}

/// A topic config with `queues` read/write queues and `perm`.
pub fn topic_config(name: &str, queues: i32, perm: i32) -> TopicConfig {
    TopicConfig {
        topic_name: name.to_string(),
        read_queue_nums: queues,
        write_queue_nums: queues,
        perm,
        ..Default::default()
    }
}

impl TopicConfigManager {
    /// Loads `config/topics.json` and adds the system topics.
    pub fn load(
        config_dir: &Path,
        cluster: &str,
        broker_name: &str,
        auto_create: bool,
        default_queue_nums: i32,
        delay_levels: i32,
        guard: Arc<AutoCreateGuard>,
    ) -> Result<Self, ConfigFileError> {
        let file = ConfigFile::new(config_dir, "topics.json");
        let mut state: Persisted = file.load()?.unwrap_or_default();
        let system = [
            topic_config(SELF_TEST_TOPIC, 1, perm::READ_WRITE),
            topic_config(cluster, 16, perm::READ_WRITE | perm::INHERIT),
            topic_config(broker_name, 1, perm::READ_WRITE | perm::INHERIT),
            topic_config(SCHEDULE_TOPIC, delay_levels, perm::READ_WRITE),
            topic_config(TIMER_TOPIC, 1, perm::READ_WRITE),
            topic_config(TRANS_HALF_TOPIC, 1, perm::READ_WRITE),
            topic_config(TRANS_OP_HALF_TOPIC, 1, perm::READ_WRITE),
        ];
        for t in system {
            state
                .topic_config_table
                .entry(t.topic_name.clone())
                .or_insert(t);
        }
        // TBW102 carries INHERIT only while auto-creation is enabled (§9.6).
        let tbw_perm = if auto_create {
            perm::READ_WRITE | perm::INHERIT
        } else {
            perm::READ_WRITE
        };
        state.topic_config_table.insert(
            AUTO_CREATE_TOPIC.into(),
            topic_config(AUTO_CREATE_TOPIC, default_queue_nums, tbw_perm),
        );
        state.data_version.timestamp = now_ms();
        state.data_version.counter += 1;
        let mgr = Self {
            file,
            state: RwLock::new(state),
            guard,
            dirty: AtomicBool::new(false),
        };
        mgr.persist()?;
        Ok(mgr)
    }

    /// Whether clients may create topics by sending to them (`autoCreateTopicEnable`): the
    /// template topic TBW102 carries INHERIT exactly then, so its route tells the clients too.
    pub fn auto_create(&self) -> bool {
        self.get(AUTO_CREATE_TOPIC)
            .is_some_and(|t| t.perm & perm::INHERIT != 0)
    }

    /// Turns automatic topic creation on or off at run time (UPDATE_BROKER_CONFIG
    /// `autoCreateTopicEnable`); persisted with the table, but a restart takes the configured
    /// value again. Returns whether it changed (the caller re-registers).
    pub fn set_auto_create(&self, on: bool) -> Result<bool, ConfigFileError> {
        {
            let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
            let Some(tbw) = s.topic_config_table.get_mut(AUTO_CREATE_TOPIC) else {
                return Ok(false);
            };
            let perm_now = if on {
                tbw.perm | perm::INHERIT
            } else {
                tbw.perm & !perm::INHERIT
            };
            if perm_now == tbw.perm {
                return Ok(false);
            }
            tbw.perm = perm_now;
            s.data_version.counter += 1;
            s.data_version.timestamp = now_ms();
        }
        self.persist().map(|()| true)
    }

    fn read(&self) -> RwLockReadGuard<'_, Persisted> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn persist(&self) -> Result<(), ConfigFileError> {
        self.dirty.store(false, Ordering::Release);
        let state = self.read();
        self.file.store(&*state)
    }

    /// Persists the table if an auto-creation changed it since the last save (the broker's
    /// background persister and its shutdown call this).
    pub fn persist_if_dirty(&self) -> Result<(), ConfigFileError> {
        if !self.dirty.load(Ordering::Acquire) {
            return Ok(());
        }
        self.persist()
            .inspect_err(|_| self.dirty.store(true, Ordering::Release))
    }

    /// The config of `topic`.
    pub fn get(&self, topic: &str) -> Option<TopicConfig> {
        self.read().topic_config_table.get(topic).cloned()
    }

    /// Every topic config with the table version (for registration and GET_ALL_TOPIC_CONFIG).
    pub fn snapshot(&self) -> (BTreeMap<String, TopicConfig>, DataVersion) {
        let s = self.read();
        (s.topic_config_table.clone(), s.data_version)
    }

    /// Takes the master's table as this slave's (SlaveSynchronize) and persists it when it
    /// changed; the master's version comes with it. Returns whether anything changed.
    pub fn replace_all(
        &self,
        table: BTreeMap<String, TopicConfig>,
        version: DataVersion,
    ) -> Result<bool, ConfigFileError> {
        {
            let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
            if s.topic_config_table == table {
                return Ok(false);
            }
            for name in table.keys() {
                s.deleted.remove(name);
            }
            s.topic_config_table = table;
            s.data_version = version;
        }
        self.persist().map(|()| true)
    }

    /// Creates or replaces a topic and persists the table.
    pub fn upsert(&self, config: TopicConfig) -> Result<(), ConfigFileError> {
        {
            let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
            s.deleted.remove(&config.topic_name);
            s.topic_config_table
                .insert(config.topic_name.clone(), config);
            s.data_version.counter += 1;
            s.data_version.timestamp = now_ms();
        }
        self.persist()
    }

    /// Removes a topic.
    pub fn remove(&self, topic: &str) -> Result<bool, ConfigFileError> {
        let removed = {
            let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
            let r = s.topic_config_table.remove(topic).is_some();
            s.deleted.insert(topic.to_string());
            if r {
                s.data_version.counter += 1;
                s.data_version.timestamp = now_ms();
            }
            r
        };
        // Saved even when the config was gone already: the tombstone must be durable.
        self.persist()?;
        Ok(removed)
    }

    /// Creates `topic` from the template `default_topic` if the template allows it (INHERIT),
    /// with min(requested, template) queues, as the guard admits. Returns the config (also
    /// when the topic already existed), or `None` when the template does not allow it.
    pub fn create_from_template(
        &self,
        topic: &str,
        default_topic: &str,
        requested_queues: i32,
    ) -> Result<Option<TopicConfig>, Refusal> {
        if let Some(existing) = self.get(topic) {
            return Ok(Some(existing));
        }
        let Some(template) = self.get(default_topic) else {
            return Ok(None);
        };
        if template.perm & perm::INHERIT == 0 {
            return Ok(None);
        }
        let queues = requested_queues.clamp(1, template.write_queue_nums.max(1));
        let mut config = topic_config(topic, queues, template.perm & !perm::INHERIT);
        config.topic_filter_type = template.topic_filter_type;
        let (config, created) = self.create_guarded(config)?;
        if created {
            tracing::info!(topic, queues, "auto-created topic from {default_topic}");
        }
        Ok(Some(config))
    }

    /// Restores the config of every topic the store holds queues of but the table lacks
    /// (unless it was deleted), with as many queues as the store has (read-write), and returns
    /// their names. An
    /// auto-created topic is saved in the background, so a crash right after its first
    /// messages could leave them stored but their topic unknown (consumers would get
    /// TOPIC_NOT_EXIST): the store's queues are the evidence that the topic existed.
    pub fn restore_missing(&self, queues: impl IntoIterator<Item = (String, i32)>) -> Vec<String> {
        let mut highest: BTreeMap<String, i32> = BTreeMap::new();
        for (topic, queue_id) in queues {
            let h = highest.entry(topic).or_insert(queue_id);
            *h = (*h).max(queue_id);
        }
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        let mut restored = Vec::new();
        for (topic, max_queue_id) in highest {
            if s.topic_config_table.contains_key(&topic) || s.deleted.contains(&topic) {
                continue;
            }
            let config = topic_config(&topic, max_queue_id + 1, perm::READ_WRITE);
            self.insert_auto(&mut s, config);
            restored.push(topic);
        }
        restored
    }

    /// Deleted topics (not created again since).
    pub fn deleted(&self) -> Vec<String> {
        self.read().deleted.iter().cloned().collect()
    }

    /// Ensures a system-managed topic (retry, DLQ, transaction checks) exists with `queues`
    /// queues; `true` when it was created now. Not limited: callers create these only for
    /// groups that exist.
    pub fn ensure(&self, topic: &str, queues: i32) -> (TopicConfig, bool) {
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = s.topic_config_table.get(topic) {
            return (existing.clone(), false);
        }
        (
            self.insert_auto(&mut s, topic_config(topic, queues, perm::READ_WRITE)),
            true,
        )
    }

    /// [`TopicConfigManager::ensure`] for a client naming the topic (a SEND to a retry or
    /// dead-letter topic), as the guard admits.
    pub fn ensure_guarded(&self, topic: &str, queues: i32) -> Result<(TopicConfig, bool), Refusal> {
        self.create_guarded(topic_config(topic, queues, perm::READ_WRITE))
    }

    /// Creates `config` unless its topic exists, as the guard admits (under the write lock,
    /// so concurrent creations cannot overshoot the limit).
    fn create_guarded(&self, config: TopicConfig) -> Result<(TopicConfig, bool), Refusal> {
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = s.topic_config_table.get(&config.topic_name) {
            return Ok((existing.clone(), false));
        }
        self.guard.admit(Kind::Topic, s.topic_config_table.len())?;
        Ok((self.insert_auto(&mut s, config), true))
    }

    /// Inserts an auto-created topic and leaves persisting it to the background persister: a
    /// creation on the request path costs no file rewrite.
    fn insert_auto(&self, s: &mut Persisted, config: TopicConfig) -> TopicConfig {
        s.deleted.remove(&config.topic_name);
        s.topic_config_table
            .insert(config.topic_name.clone(), config.clone());
        s.data_version.counter += 1;
        s.data_version.timestamp = now_ms();
        self.dirty.store(true, Ordering::Release);
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::auto_create::AutoCreateLimits;

    #[test]
    fn auto_create_follows_the_template() {
        let dir = tempfile::tempdir().unwrap();
        let guard = || Arc::new(AutoCreateGuard::new(AutoCreateLimits::default()));
        let m = TopicConfigManager::load(dir.path(), "C", "b", true, 8, 18, guard()).unwrap();
        let t = m
            .create_from_template("New", AUTO_CREATE_TOPIC, 4)
            .unwrap()
            .unwrap();
        assert_eq!((t.write_queue_nums, t.perm), (4, 6));
        let t = m
            .create_from_template("Big", AUTO_CREATE_TOPIC, 64)
            .unwrap()
            .unwrap();
        assert_eq!(t.write_queue_nums, 8);
        m.persist_if_dirty().unwrap();
        drop(m);
        // Persisted; and without auto-create the template no longer inherits.
        let m = TopicConfigManager::load(dir.path(), "C", "b", false, 8, 18, guard()).unwrap();
        assert!(m.get("New").is_some());
        assert!(m
            .create_from_template("Other", AUTO_CREATE_TOPIC, 4)
            .unwrap()
            .is_none());
    }
}
