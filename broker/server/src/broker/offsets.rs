//! ConsumerOffsetManager: the committed offset of each (group, topic, queue), persisted as
//! `config/consumerOffset.json` (`{"offsetTable":{"topic@group":{"0":12}}}`, RocketMQ's shape)
//! periodically and on shutdown. Consumers resume from here after any restart.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::config_file::{ConfigFile, ConfigFileError};

#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    #[serde(rename = "offsetTable", default)]
    offset_table: BTreeMap<String, BTreeMap<i32, i64>>,
}

/// One `topic@group`'s committed offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffsets {
    /// The topic.
    pub topic: String,
    /// The consumer group.
    pub group: String,
    /// (queue id, committed offset) of each queue it committed on.
    pub queues: Vec<(i32, i64)>,
}

/// Committed consumer offsets.
pub struct ConsumerOffsetManager {
    /// `config/consumerOffset.json`.
    file: ConfigFile,
    /// `topic@group` → queue id → committed offset.
    table: Mutex<HashMap<String, HashMap<i32, i64>>>,
    /// Set by every commit, cleared by a successful persist: idle brokers write nothing.
    dirty: AtomicBool,
    /// group → topic → queue id → the next offset the group's latest pull returned
    /// (RocketMQ's pullOffsetTable: what was handed out but may not be committed yet). Not
    /// persisted. Nested so that the pull path looks it up by `&str` and allocates only for
    /// a group or topic it has not seen.
    pulled: Mutex<HashMap<String, PulledByTopic>>,
}

/// One group's pull offsets: topic → queue id → next offset.
type PulledByTopic = HashMap<String, HashMap<i32, i64>>;

fn key(topic: &str, group: &str) -> String {
    format!("{topic}@{group}")
}

impl ConsumerOffsetManager {
    /// Loads `config/consumerOffset.json`.
    pub fn load(config_dir: &Path) -> Result<Self, ConfigFileError> {
        let file = ConfigFile::new(config_dir, "consumerOffset.json");
        let persisted: Persisted = file.load()?.unwrap_or_default();
        let table = persisted
            .offset_table
            .into_iter()
            .map(|(k, v)| (k, v.into_iter().collect()))
            .collect();
        Ok(Self {
            file,
            table: Mutex::new(table),
            dirty: AtomicBool::new(false),
            pulled: Mutex::new(HashMap::new()),
        })
    }

    /// The committed offset, if any.
    pub fn query(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key(topic, group))?
            .get(&queue_id)
            .copied()
    }

    /// Records a commit.
    pub fn commit(&self, group: &str, topic: &str, queue_id: i32, offset: i64) {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key(topic, group))
            .or_default()
            .insert(queue_id, offset);
        self.dirty.store(true, Ordering::Release);
    }

    /// Pulls every offset above its queue's end (`max_offset(topic, queue)`) back to that end,
    /// and returns how many moved. On start: a power loss can cut the log below offsets that
    /// were already persisted, and an offset past the end would skip the messages written
    /// after the restart.
    pub fn clamp_to_queue_ends(&self, max_offset: impl Fn(&str, i32) -> i64) -> usize {
        let mut moved = 0;
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        for (k, queues) in table.iter_mut() {
            let Some((topic, _group)) = k.split_once('@') else {
                continue;
            };
            for (queue_id, offset) in queues.iter_mut() {
                let end = max_offset(topic, *queue_id);
                if *offset > end {
                    tracing::warn!(
                        key = %k,
                        queue_id,
                        saved = *offset,
                        queue_end = end,
                        "consumer offset past the recovered queue end; pulled back"
                    );
                    *offset = end;
                    moved += 1;
                }
            }
        }
        if moved > 0 {
            self.dirty.store(true, Ordering::Release);
        }
        moved
    }

    /// Every (topic, queue) offset of a group.
    pub fn offsets_of_group(&self, group: &str) -> Vec<(String, i32, i64)> {
        let suffix = format!("@{group}");
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (k, queues) in table.iter() {
            if let Some(topic) = k.strip_suffix(&suffix) {
                for (q, o) in queues {
                    out.push((topic.to_string(), *q, *o));
                }
            }
        }
        out
    }

    /// A pull of `group` on a queue handed out messages up to `next` (RocketMQ's
    /// `commitPullOffset`).
    pub fn record_pull(&self, group: &str, topic: &str, queue_id: i32, next: i64) {
        let mut pulled = self.pulled.lock().unwrap_or_else(|e| e.into_inner());
        if !pulled.contains_key(group) {
            pulled.insert(group.to_string(), HashMap::new());
        }
        let Some(topics) = pulled.get_mut(group) else {
            return;
        };
        if !topics.contains_key(topic) {
            topics.insert(topic.to_string(), HashMap::new());
        }
        if let Some(queues) = topics.get_mut(topic) {
            queues.insert(queue_id, next);
        }
    }

    /// The next offset the group's latest pull on a queue returned, if it pulled there since
    /// the broker started.
    pub fn pulled(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        self.pulled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(group)?
            .get(topic)?
            .get(&queue_id)
            .copied()
    }

    /// Every `topic@group` with its committed offsets.
    pub fn entries(&self) -> Vec<GroupOffsets> {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table
            .iter()
            .filter_map(|(k, queues)| {
                let (topic, group) = k.split_once('@')?;
                Some(GroupOffsets {
                    topic: topic.to_string(),
                    group: group.to_string(),
                    queues: queues.iter().map(|(q, o)| (*q, *o)).collect(),
                })
            })
            .collect()
    }

    /// Every group with committed offsets.
    pub fn groups(&self) -> Vec<String> {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let mut groups: Vec<String> = table
            .keys()
            .filter_map(|k| k.split_once('@').map(|(_, g)| g.to_string()))
            .collect();
        groups.sort();
        groups.dedup();
        groups
    }

    /// Groups with committed offsets for `topic`.
    pub fn groups_of_topic(&self, topic: &str) -> Vec<String> {
        let prefix = format!("{topic}@");
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix).map(str::to_string))
            .collect()
    }

    /// Removes a group's offsets for a topic.
    pub fn remove(&self, group: &str, topic: &str) {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key(topic, group));
        self.dirty.store(true, Ordering::Release);
    }

    /// Every committed offset as RocketMQ's `ConsumerOffsetSerializeWrapper` body
    /// (`{"offsetTable":{"topic@group":{"0":12}}}`, GET_ALL_CONSUMER_OFFSET).
    pub fn to_json(&self) -> Result<Vec<u8>, conveyor_protocol::json::JsonError> {
        conveyor_protocol::json::to_vec(&self.snapshot())
    }

    /// Takes the master's offsets (a GET_ALL_CONSUMER_OFFSET body) as this slave's
    /// (SlaveSynchronize); they are persisted with the next periodic write.
    pub fn replace_from_json(&self, body: &[u8]) -> Result<(), conveyor_protocol::json::JsonError> {
        let p: Persisted = conveyor_protocol::json::from_slice(body)?;
        let table = p
            .offset_table
            .into_iter()
            .map(|(k, v)| (k, v.into_iter().collect()))
            .collect();
        *self.table.lock().unwrap_or_else(|e| e.into_inner()) = table;
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    fn snapshot(&self) -> Persisted {
        Persisted {
            offset_table: self
                .table
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|(k, v)| (k.clone(), v.iter().map(|(q, o)| (*q, *o)).collect()))
                .collect(),
        }
    }

    /// Writes the table if it changed since the last write.
    pub fn persist(&self) -> Result<(), ConfigFileError> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let snapshot = self.snapshot();
        self.file.store(&snapshot).inspect_err(|_| {
            self.dirty.store(true, Ordering::Release);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_survive_a_reload_in_rocketmq_shape() {
        let dir = tempfile::tempdir().unwrap();
        let m = ConsumerOffsetManager::load(dir.path()).unwrap();
        m.commit("G", "T", 3, 42);
        m.persist().unwrap();
        let text = std::fs::read_to_string(dir.path().join("consumerOffset.json")).unwrap();
        assert!(text.contains("\"T@G\""), "{text}");
        let m = ConsumerOffsetManager::load(dir.path()).unwrap();
        assert_eq!(m.query("G", "T", 3), Some(42));
        assert_eq!(m.query("G", "T", 4), None);
        assert_eq!(m.offsets_of_group("G"), vec![("T".to_string(), 3, 42)]);
    }
}
