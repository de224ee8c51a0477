//! ConsumeQueueTable (RocketMQ's consumeQueueTable): every ConsumeQueue of the store by topic
//! and queue id, loaded from `consumequeue/<topic>/<queueId>/` on open and created on first
//! dispatch.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use conveyor_protocol::naming::validate_topic;

use crate::consume_queue::ConsumeQueue;
use crate::error::{IoContext, Result};
use crate::mapped_file::sync_dir;

/// Queues by topic, then queue id.
type Table = HashMap<String, HashMap<i32, Arc<ConsumeQueue>>>;

/// The store's ConsumeQueues.
pub(crate) struct ConsumeQueueTable {
    /// `<root>/consumequeue`.
    dir: PathBuf,
    /// Entries per ConsumeQueue file.
    entries_per_file: u64,
    /// The queues.
    queues: RwLock<Table>,
}

impl ConsumeQueueTable {
    /// Opens every queue under `root/consumequeue` (without recovering them).
    pub(crate) fn load(root: &Path, entries_per_file: u64) -> Result<Self> {
        let dir = root.join("consumequeue");
        let mut queues: Table = HashMap::new();
        if let Ok(topics) = std::fs::read_dir(&dir) {
            for topic in topics.flatten() {
                let Ok(name) = topic.file_name().into_string() else {
                    continue;
                };
                if validate_topic(&name).is_err() {
                    continue;
                }
                let Ok(qdirs) = std::fs::read_dir(topic.path()) else {
                    continue;
                };
                for q in qdirs.flatten() {
                    let Some(qid) = q.file_name().to_str().and_then(|s| s.parse::<i32>().ok())
                    else {
                        continue;
                    };
                    let cq = ConsumeQueue::open(&q.path(), &name, qid, entries_per_file)?;
                    queues
                        .entry(name.clone())
                        .or_default()
                        .insert(qid, Arc::new(cq));
                }
            }
        }
        Ok(Self {
            dir,
            entries_per_file,
            queues: RwLock::new(queues),
        })
    }

    /// The queue of (topic, queue id), if it exists.
    pub(crate) fn get(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)?
            .get(&queue_id)
            .cloned()
    }

    /// The queue of (topic, queue id), created empty if needed.
    pub(crate) fn get_or_create(&self, topic: &str, queue_id: i32) -> Result<Arc<ConsumeQueue>> {
        if let Some(q) = self.get(topic, queue_id) {
            return Ok(q);
        }
        let mut queues = self.queues.write().unwrap_or_else(|e| e.into_inner());
        let per_topic = queues.entry(topic.to_string()).or_default();
        if let Some(q) = per_topic.get(&queue_id) {
            return Ok(q.clone());
        }
        let dir = self.dir.join(topic).join(queue_id.to_string());
        let q = Arc::new(ConsumeQueue::open(
            &dir,
            topic,
            queue_id,
            self.entries_per_file,
        )?);
        per_topic.insert(queue_id, q.clone());
        Ok(q)
    }

    /// Every queue.
    pub(crate) fn all(&self) -> Vec<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    /// Removes every queue of `topic` and deletes their files and directories (RocketMQ's
    /// deleteTopics). Readers still holding a queue keep its mappings until they drop it; a
    /// message for the topic dispatched later starts it afresh.
    pub(crate) fn remove_topic(&self, topic: &str) -> Result<usize> {
        let removed = self
            .queues
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(topic)
            .unwrap_or_default();
        for cq in removed.values() {
            cq.delete_files()?;
        }
        let topic_dir = self.dir.join(topic);
        if topic_dir.exists() {
            std::fs::remove_dir_all(&topic_dir)
                .ctx(|| format!("delete {}", topic_dir.display()))?;
            sync_dir(&self.dir)?;
        }
        Ok(removed.len())
    }
}
