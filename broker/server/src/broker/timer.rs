//! TimerMessageService: 5.x timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC /
//! TIMER_DELAY_MS), delivered at an arbitrary time up to a maximum delay.
//!
//! Design (an equivalent of RocketMQ's timer wheel + timer log): the parked messages themselves
//! are the log — they live in the `rmq_sys_wheel_timer` topic of the store, with their due time
//! in TIMER_OUT_MS. An in-memory min-heap orders the pending ones by due time; it is rebuilt on
//! start by re-reading the topic from a persisted checkpoint (every offset below it is
//! delivered) plus the set of offsets delivered above it. So a restart neither loses timers nor
//! delivers them early; one delivered just before a crash may come again.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conveyor_protocol::message::{keys, RecordView};
use conveyor_protocol::time::now_ms;
use conveyor_store::{AcceptAll, MessageStore};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::config_file::{ConfigFile, ConfigFileError};
use super::durability::durable;
use super::hold::PullHold;
use super::parking::{unpark, TIMER_OUT_MS};
use super::topics::TIMER_TOPIC;

#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    checkpoint: i64,
    delivered: Vec<i64>,
}

#[derive(Debug, Default)]
struct State {
    /// Every queue offset below is delivered.
    checkpoint: i64,
    /// Next queue offset to read into the heap.
    scanned: i64,
    /// Delivered offsets at or above the checkpoint.
    delivered: BTreeSet<i64>,
    /// (due ms, queue offset, commit-log offset) of pending timers.
    pending: BinaryHeap<Reverse<(i64, i64, u64)>>,
}

impl State {
    fn mark_delivered(&mut self, offset: i64) {
        self.delivered.insert(offset);
        while self.delivered.remove(&self.checkpoint) {
            self.checkpoint += 1;
        }
    }
}

/// Timer progress and pending timers.
pub struct TimerMessageService {
    /// `config/timerProgress.json`.
    file: ConfigFile,
    /// Checkpoint, delivered offsets and the heap of pending timers.
    state: Mutex<State>,
    /// Where the timer topic is read and due messages re-appended.
    store: Arc<MessageStore>,
    /// Wakes the loop when the timer topic grows.
    hold: Arc<PullHold>,
}

impl TimerMessageService {
    /// Loads `config/timerProgress.json`, pulled back to the recovered timer queue's end
    /// (after a power loss the log may be shorter than the progress saved).
    pub fn load(
        config_dir: &Path,
        store: Arc<MessageStore>,
        hold: Arc<PullHold>,
    ) -> Result<Self, ConfigFileError> {
        let file = ConfigFile::new(config_dir, "timerProgress.json");
        let p: Persisted = file.load()?.unwrap_or_default();
        let service = Self {
            store,
            hold,
            file,
            state: Mutex::new(State {
                checkpoint: p.checkpoint,
                scanned: p.checkpoint,
                delivered: p
                    .delivered
                    .into_iter()
                    .filter(|o| *o >= p.checkpoint)
                    .collect(),
                pending: BinaryHeap::new(),
            }),
        };
        service.clamp(service.store.max_offset(TIMER_TOPIC, 0));
        Ok(service)
    }

    /// Pulls persisted progress back to the timer queue's end.
    fn clamp(&self, queue_end: i64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.checkpoint = s.checkpoint.min(queue_end);
        s.scanned = s.scanned.min(queue_end);
        s.delivered.retain(|o| *o < queue_end);
    }

    fn snapshot(&self) -> Persisted {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Persisted {
            checkpoint: s.checkpoint,
            delivered: s.delivered.iter().copied().collect(),
        }
    }

    fn write(&self, p: &Persisted) -> Result<(), ConfigFileError> {
        self.file.store(p)
    }

    /// Runs the timer delivery loop until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let notifier = self.hold.notifier(TIMER_TOPIC, 0);
        let mut last_persist = tokio::time::Instant::now();
        loop {
            let arrived = notifier.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            self.scan_timers();
            let next_due = self.deliver_due_timers();
            if last_persist.elapsed() >= Duration::from_secs(1) {
                self.persist_timers().await;
                last_persist = tokio::time::Instant::now();
            }
            let wait = next_due.map_or(Duration::from_secs(1), |due| {
                Duration::from_millis((due - now_ms()).clamp(0, 1000) as u64)
            });
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = &mut arrived => {}
                _ = shutdown.cancelled() => break,
            }
        }
        self.persist_timers().await;
    }

    /// Writes the timer progress once what it counts as delivered is durable.
    async fn persist_timers(&self) {
        let snapshot = self.snapshot();
        if durable(&self.store, self.store.commit_log_max_offset()).await {
            if let Err(e) = self.write(&snapshot) {
                tracing::error!(error = %e, "persisting timer progress failed");
            }
        }
    }

    /// Reads newly parked timer messages into the heap.
    fn scan_timers(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let min = self.store.min_offset(TIMER_TOPIC, 0);
        if s.checkpoint < min {
            // Retention removed them; nothing left to deliver below.
            s.checkpoint = min;
            s.delivered = s.delivered.split_off(&min);
        }
        s.scanned = s.scanned.max(s.checkpoint);
        loop {
            let r = self
                .store
                .get_messages(TIMER_TOPIC, 0, s.scanned, 256, 4 << 20, &AcceptAll);
            if r.messages.is_empty() {
                s.scanned = s.scanned.max(
                    r.next_begin_offset
                        .min(self.store.max_offset(TIMER_TOPIC, 0)),
                );
                return;
            }
            for (slice, qo) in r.messages.iter().zip(&r.queue_offsets) {
                if s.delivered.contains(qo) {
                    continue;
                }
                let due = RecordView::parse(slice)
                    .ok()
                    .and_then(|v| v.property(TIMER_OUT_MS).and_then(|d| d.parse::<i64>().ok()));
                match due {
                    Some(due) => s.pending.push(Reverse((due, *qo, slice_phys(slice)))),
                    None => s.mark_delivered(*qo),
                }
            }
            s.scanned = r.next_begin_offset;
        }
    }

    /// Delivers every due timer; returns the next due time.
    fn deliver_due_timers(&self) -> Option<i64> {
        let now = now_ms();
        loop {
            let next = {
                let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
                match s.pending.peek() {
                    Some(Reverse((due, _, _))) if *due <= now => s.pending.pop(),
                    Some(Reverse((due, _, _))) => return Some(*due),
                    None => return None,
                }
            };
            let Reverse((due, qo, phys)) = next?;
            match self.deliver_timer(phys) {
                Ok(()) => self
                    .state
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .mark_delivered(qo),
                Err(e) => {
                    tracing::warn!(error = %e, "delivering a timer message failed; retrying");
                    self.state
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .pending
                        .push(Reverse((due, qo, phys)));
                    return Some(now + 500);
                }
            }
        }
    }

    fn deliver_timer(&self, phys: u64) -> Result<(), String> {
        let Some(record) = self.store.message_at(phys) else {
            // Deleted by retention: nothing to deliver.
            return Ok(());
        };
        let mut m = RecordView::parse(&record)
            .and_then(|v| v.to_message())
            .map_err(|e| e.to_string())?;
        if !unpark(&mut m) {
            tracing::warn!("timer message without REAL_TOPIC/REAL_QID dropped");
            return Ok(());
        }
        for k in [
            keys::TIMER_DELIVER_MS,
            keys::TIMER_DELAY_SEC,
            keys::TIMER_DELAY_MS,
        ] {
            m.properties.remove(k);
        }
        self.store
            .append(std::slice::from_ref(&m))
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

fn slice_phys(record: &[u8]) -> u64 {
    RecordView::parse(record).map_or(0, |v| v.physical_offset() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_advances_over_contiguous_deliveries() {
        let mut s = State::default();
        s.mark_delivered(1);
        assert_eq!(s.checkpoint, 0);
        s.mark_delivered(0);
        assert_eq!(s.checkpoint, 2);
        assert!(s.delivered.is_empty());
    }
}
