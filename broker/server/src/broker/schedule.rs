//! ScheduleMessageService: delay levels (docs/protocol.md §7). A message with `DELAY=n` is
//! stored in `SCHEDULE_TOPIC_XXXX` queue n−1 with its real destination in REAL_TOPIC/REAL_QID;
//! one task per level reads that queue in order (a level's messages fall due in store order),
//! sleeps until the head is due, and re-appends it to its real topic and queue. Progress per
//! level is persisted in `config/delayOffset.json`, so a restart neither loses nor re-delivers
//! early; a message delivered just before a crash may be delivered again (at-least-once).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conveyor_protocol::message::{keys, RecordView};
use conveyor_protocol::time::now_ms;
use conveyor_store::{AcceptAll, MessageStore};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::config_file::{ConfigFile, ConfigFileError, SyncBodyError};
use super::durability::Durability;
use super::hold::PullHold;
use super::parking::unpark;
use super::topics::SCHEDULE_TOPIC;

#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    #[serde(rename = "offsetTable", default)]
    offset_table: BTreeMap<i32, i64>,
}

/// Delivery progress per delay level.
struct ScheduleProgress {
    /// `config/delayOffset.json`.
    file: ConfigFile,
    /// level → next queue offset of the level's schedule queue to deliver.
    table: Mutex<BTreeMap<i32, i64>>,
}

impl ScheduleProgress {
    fn load(config_dir: &Path) -> Result<Self, ConfigFileError> {
        let file = ConfigFile::new(config_dir, "delayOffset.json");
        let p: Persisted = file.load()?.unwrap_or_default();
        Ok(Self {
            file,
            table: Mutex::new(p.offset_table),
        })
    }

    fn get(&self, level: i32) -> i64 {
        *self
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&level)
            .unwrap_or(&0)
    }

    fn set(&self, level: i32, offset: i64) {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(level, offset);
    }

    /// Pulls a level's persisted progress back to its queue's end.
    fn clamp(&self, level: i32, queue_end: i64) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(o) = t.get_mut(&level) {
            *o = (*o).min(queue_end);
        }
    }

    fn snapshot(&self) -> Persisted {
        Persisted {
            offset_table: self.table.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    fn write(&self, snapshot: &Persisted) -> Result<(), ConfigFileError> {
        self.file.store(snapshot)
    }
}

/// Delivers delay-level messages when they fall due.
pub struct ScheduleMessageService {
    /// Where the schedule topic is read and due messages re-appended.
    store: Arc<MessageStore>,
    /// When a delivered copy counts as written.
    durability: Arc<Durability>,
    /// Wakes a level's task when its queue grows.
    hold: Arc<PullHold>,
    /// The delay of each level (level n at index n − 1).
    delay_levels: Vec<Duration>,
    /// Delivery progress per level.
    progress: ScheduleProgress,
}

impl ScheduleMessageService {
    /// Delay-level messages stored and not delivered yet, over every level (what a drained
    /// group still has to hand to its consumers).
    pub fn pending(&self) -> u64 {
        (1..=self.delay_levels.len() as i32)
            .map(|level| {
                let end = self.store.max_offset(SCHEDULE_TOPIC, level - 1);
                (end - self.progress.get(level)).max(0) as u64
            })
            .sum()
    }

    /// Loads `config/delayOffset.json` and brings it in line with the recovered store:
    /// progress saved past a log that a power loss cut short is pulled back.
    pub fn load(
        config_dir: &Path,
        store: Arc<MessageStore>,
        durability: Arc<Durability>,
        hold: Arc<PullHold>,
        delay_levels: Vec<Duration>,
    ) -> Result<Self, ConfigFileError> {
        let progress = ScheduleProgress::load(config_dir)?;
        for level in 1..=delay_levels.len() as i32 {
            progress.clamp(level, store.max_offset(SCHEDULE_TOPIC, level - 1));
        }
        Ok(Self {
            store,
            durability,
            hold,
            delay_levels,
            progress,
        })
    }

    /// The delivery progress as RocketMQ's `delayOffset.json` body (GET_ALL_DELAY_OFFSET):
    /// what the file holds, which is written only once the delivered copies it counts are
    /// durable and replicated. (The progress in memory runs ahead of that: a slave taking it
    /// could skip a delivery whose copy it never received.)
    pub fn progress_json(&self) -> Result<Vec<u8>, SyncBodyError> {
        let saved: Persisted = self.progress.file.load()?.unwrap_or_default();
        Ok(conveyor_protocol::json::to_vec(&saved)?)
    }

    /// The log was cut back (see `Replication::on_truncate`): each level's progress is
    /// pulled back to its queue's new end, in memory and in the file.
    pub fn truncated(&self) {
        for level in 1..=self.delay_levels.len() as i32 {
            self.progress
                .clamp(level, self.store.max_offset(SCHEDULE_TOPIC, level - 1));
        }
        if let Err(e) = self.progress.write(&self.progress.snapshot()) {
            tracing::error!(error = %e, "saving the delay progress after a truncation failed");
        }
    }

    /// Takes the master's progress (a GET_ALL_DELAY_OFFSET body) as this slave's and saves
    /// it (SlaveSynchronize), so that a promoted slave delivers from about where the master
    /// was (a delayed message may be delivered twice, never skipped: progress lags).
    pub fn replace_progress(&self, body: &[u8]) -> Result<(), SyncBodyError> {
        let p: Persisted = conveyor_protocol::json::from_slice(body)?;
        *self
            .progress
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = p.offset_table;
        let snapshot = self.progress.snapshot();
        Ok(self.progress.write(&snapshot)?)
    }

    /// Runs one delivery task per level until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tasks = Vec::new();
        for (i, delay) in self.delay_levels.iter().enumerate() {
            let me = self.clone();
            let stop = shutdown.clone();
            let delay = *delay;
            tasks.push(tokio::spawn(async move {
                me.deliver_level(i as i32 + 1, delay, stop).await
            }));
        }
        let mut persist = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = persist.tick() => {}
                _ = shutdown.cancelled() => break,
            }
            self.persist_schedule().await;
        }
        for t in tasks {
            let _ = t.await;
        }
        self.persist_schedule().await;
    }

    /// Writes the delay progress once what it counts as delivered is durable.
    async fn persist_schedule(&self) {
        let snapshot = self.progress.snapshot();
        if self.durability.wait_all().await {
            if let Err(e) = self.progress.write(&snapshot) {
                tracing::error!(error = %e, "persisting delay progress failed");
            }
        }
    }

    async fn deliver_level(&self, level: i32, delay: Duration, shutdown: CancellationToken) {
        let queue_id = level - 1;
        let notifier = self.hold.notifier(SCHEDULE_TOPIC, queue_id);
        loop {
            // Register for arrivals before looking, so none slips in between.
            let arrived = notifier.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let Some(permit) = self.durability.own_write_permit().await else {
                // No longer master: the service is being stopped.
                return shutdown.cancelled().await;
            };
            let mut offset = self.progress.get(level);
            let r =
                self.store
                    .get_messages(SCHEDULE_TOPIC, queue_id, offset, 32, 1 << 20, &AcceptAll);
            let now = now_ms();
            let mut head_due_in = None;
            for (slice, qo) in r.messages.iter().zip(&r.queue_offsets) {
                let Ok(view) = RecordView::parse(slice) else {
                    offset = qo + 1;
                    continue;
                };
                let due = view.store_timestamp() + delay.as_millis() as i64;
                if due > now {
                    head_due_in = Some(Duration::from_millis((due - now) as u64));
                    break;
                }
                if let Err(e) = self.deliver(&view) {
                    tracing::warn!(level, error = %e, "delivering a delayed message failed; retrying");
                    head_due_in = Some(Duration::from_millis(500));
                    break;
                }
                offset = qo + 1;
            }
            if r.messages.is_empty() {
                // Skips entries retention removed (the store says where reading can resume);
                // never past messages that were read but are not due yet.
                let max = self.store.max_offset(SCHEDULE_TOPIC, queue_id);
                offset = offset.max(r.next_begin_offset.min(max));
            }
            self.progress.set(level, offset);
            drop(permit);
            let wait = match head_due_in {
                Some(w) => w,
                // Delivered a full batch: more may be due right now.
                None if !r.messages.is_empty() => continue,
                // Empty queue: an arrival wakes us; the timer only guards against surprises.
                None => Duration::from_secs(1),
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = &mut arrived, if head_due_in.is_none() => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Re-appends a due message to its real topic and queue.
    fn deliver(&self, view: &RecordView<'_>) -> Result<(), conveyor_store::StoreError> {
        let mut m = view.to_message()?;
        if !unpark(&mut m) {
            tracing::warn!("delayed message without REAL_TOPIC/REAL_QID dropped");
            return Ok(());
        }
        m.properties.remove(keys::DELAY_TIME_LEVEL);
        self.store.append(std::slice::from_ref(&m))?;
        Ok(())
    }
}
