//! TimerMessageService: 5.x timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC /
//! TIMER_DELAY_MS), delivered at an arbitrary time up to a maximum delay.
//!
//! Design (an equivalent of RocketMQ's timer wheel + timer log): the parked messages themselves
//! are the log — they live in the `rmq_sys_wheel_timer` topic of the store, with their due time
//! in TIMER_OUT_MS. An in-memory min-heap orders the pending ones by due time. The persisted
//! progress is how far the topic was read (`scanned`) and the queue offsets below it still
//! pending; on start the heap is rebuilt by re-reading exactly those, then everything from
//! `scanned` on. So a restart neither loses timers nor delivers them early (one delivered just
//! before a crash may come again), and the progress is as large as the set of timers still
//! waiting: one timer due in three days does not make every later delivery stay in memory and
//! in the file, as a "delivered below this offset" checkpoint would.
//!
//! A recall ([`super::recall`]) is a marker record in the same topic, due with the message it
//! names: read, it marks that message recalled; the message, coming due first (it is earlier
//! in the log), is then dropped, and the marker after it ends the recall. Both are pending
//! records like any timer, so a restart re-reads both and the recall holds.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conveyor_protocol::message::{keys, RecordView};
use conveyor_protocol::recall::{delete_key, TIMER_DEL_UNIQKEY};
use conveyor_protocol::time::now_ms;
use conveyor_store::{AcceptAll, MessageStore};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::config_file::{ConfigFile, ConfigFileError, SyncBodyError};
use super::durability::Durability;
use super::hold::PullHold;
use super::parking::{unpark, TIMER_OUT_MS};
use super::topics::TIMER_TOPIC;

/// `config/timerProgress.json`.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct Persisted {
    /// Next queue offset to read; every offset below is delivered or listed in `pending`.
    /// `None` in files of earlier versions, which kept `checkpoint` and `delivered` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scanned: Option<i64>,
    /// Queue offsets below `scanned` not delivered yet.
    #[serde(default)]
    pending: Vec<i64>,
    /// Earlier versions: every offset below was delivered.
    #[serde(default, skip_serializing)]
    checkpoint: i64,
    /// Earlier versions: offsets delivered at or above `checkpoint`.
    #[serde(default, skip_serializing)]
    delivered: Vec<i64>,
}

#[derive(Debug, Default)]
struct State {
    /// Next queue offset to read into the heap.
    scanned: i64,
    /// Queue offsets read and not delivered yet (those in `pending`, by offset).
    waiting: BTreeSet<i64>,
    /// After a restart: offsets below this that need no re-reading unless in `reread`.
    resume_at: i64,
    /// After a restart: offsets below `resume_at` still waiting (from the progress file).
    reread: BTreeSet<i64>,
    /// Earlier versions' files only: offsets already delivered, skipped while re-reading.
    skip: BTreeSet<i64>,
    /// (due ms, queue offset, commit-log offset) of pending timers.
    pending: BinaryHeap<Reverse<(i64, i64, u64)>>,
    /// Recalled messages (`<topic>+<message id>`) → recall markers read and not due yet.
    recalled: HashMap<String, usize>,
    /// Changed since the progress was last written.
    dirty: bool,
}

impl State {
    /// State from the progress file.
    fn from_persisted(p: Persisted) -> Self {
        match p.scanned {
            Some(scanned) => {
                let reread: BTreeSet<i64> =
                    p.pending.into_iter().filter(|o| *o < scanned).collect();
                Self {
                    scanned: reread.first().copied().unwrap_or(scanned),
                    resume_at: scanned,
                    reread,
                    ..Self::default()
                }
            }
            None => Self {
                scanned: p.checkpoint,
                skip: p
                    .delivered
                    .into_iter()
                    .filter(|o| *o >= p.checkpoint)
                    .collect(),
                ..Self::default()
            },
        }
    }

    /// Whether the timer at queue offset `qo` (being read) still has to be delivered.
    fn needs(&self, qo: i64) -> bool {
        if self.skip.contains(&qo) {
            return false;
        }
        qo >= self.resume_at || self.reread.contains(&qo)
    }

    /// A timer read from the topic, due at `due` (`None`: nothing to deliver); `recall`: it
    /// is a recall marker naming that message.
    fn read(&mut self, qo: i64, due: Option<(i64, u64)>, recall: Option<String>) {
        if let (Some((due, phys)), true) = (due, self.needs(qo)) {
            self.waiting.insert(qo);
            self.pending.push(Reverse((due, qo, phys)));
            if let Some(key) = recall {
                *self.recalled.entry(key).or_default() += 1;
            }
        }
        self.scanned = self.scanned.max(qo + 1);
        self.dirty = true;
    }

    /// Reading reached `next` (no more records below it).
    fn scanned_to(&mut self, next: i64) {
        if next > self.scanned {
            self.scanned = next;
            self.dirty = true;
        }
        if self.scanned >= self.resume_at {
            self.reread.clear();
            self.skip.clear();
        }
    }

    /// A recall marker came due: the message it names is due too, and was dropped.
    fn recall_done(&mut self, key: &str) {
        if let Some(n) = self.recalled.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.recalled.remove(key);
            }
        }
    }

    fn mark_delivered(&mut self, offset: i64) {
        self.waiting.remove(&offset);
        self.dirty = true;
    }

    /// Offsets below `min` were removed by retention: nothing to deliver there any more.
    fn drop_below(&mut self, min: i64) {
        if self.scanned < min {
            self.scanned = min;
            self.dirty = true;
        }
        self.waiting = self.waiting.split_off(&min);
        self.reread = self.reread.split_off(&min);
    }

    /// Pulls the progress back to the timer queue's end (after a power loss the log may be
    /// shorter than the progress saved).
    fn clamp(&mut self, queue_end: i64) {
        self.scanned = self.scanned.min(queue_end);
        self.resume_at = self.resume_at.min(queue_end);
        self.reread.retain(|o| *o < queue_end);
        self.waiting.retain(|o| *o < queue_end);
    }

    /// What the progress file holds.
    fn persisted(&self) -> Persisted {
        let scanned = self.scanned.max(self.resume_at);
        Persisted {
            scanned: Some(scanned),
            pending: self
                .waiting
                .iter()
                .chain(self.reread.iter().filter(|o| **o >= self.scanned))
                .copied()
                .collect::<BTreeSet<i64>>()
                .into_iter()
                .collect(),
            ..Persisted::default()
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
    /// When a delivered copy counts as written.
    durability: Arc<Durability>,
    /// Wakes the loop when the timer topic grows.
    hold: Arc<PullHold>,
}

impl TimerMessageService {
    /// Timer messages stored and not delivered yet: those read and waiting, plus those not
    /// read yet (an upper bound after a restart, until the re-reading is done).
    pub fn pending(&self) -> u64 {
        let end = self.store.max_offset(TIMER_TOPIC, 0);
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let unread = if s.scanned < s.resume_at {
            s.reread.range(s.scanned..).count() as i64 + (end - s.resume_at).max(0)
        } else {
            (end - s.scanned).max(0)
        };
        s.waiting.len() as u64 + unread as u64
    }

    /// Loads `config/timerProgress.json`, pulled back to the recovered timer queue's end
    /// (after a power loss the log may be shorter than the progress saved).
    pub fn load(
        config_dir: &Path,
        store: Arc<MessageStore>,
        durability: Arc<Durability>,
        hold: Arc<PullHold>,
    ) -> Result<Self, ConfigFileError> {
        let file = ConfigFile::new(config_dir, "timerProgress.json");
        let p: Persisted = file.load()?.unwrap_or_default();
        let service = Self {
            store,
            durability,
            hold,
            file,
            state: Mutex::new(State::from_persisted(p)),
        };
        service
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clamp(service.store.max_offset(TIMER_TOPIC, 0));
        Ok(service)
    }

    /// The progress to write, if it changed since the last write (clearing the mark).
    fn snapshot(&self) -> Option<Persisted> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut s.dirty).then(|| s.persisted())
    }

    fn write(&self, p: &Persisted) -> Result<(), ConfigFileError> {
        self.file.store(p)
    }

    /// The progress as saved (GET_TIMER_CHECK_POINT, Conveyor's JSON body): written only
    /// once the deliveries it counts are durable and replicated, so a slave taking it never
    /// skips a timer whose delivered copy it lacks.
    pub fn progress_json(&self) -> Result<Vec<u8>, SyncBodyError> {
        let saved: Persisted = self.file.load()?.unwrap_or_default();
        Ok(conveyor_protocol::json::to_vec(&saved)?)
    }

    /// Takes the master's progress (a GET_TIMER_CHECK_POINT body) as this slave's and saves
    /// it (SlaveSynchronize): a promoted slave re-reads the timers the master had pending and
    /// goes on from where it had read; a timer delivered since the last sync is delivered
    /// again (duplicates, never a skip).
    pub fn replace_progress(&self, body: &[u8]) -> Result<(), SyncBodyError> {
        let p: Persisted = conveyor_protocol::json::from_slice(body)?;
        self.reset_to(p)
    }

    /// The log was cut back (see `Replication::on_truncate`): the heap may point at records
    /// that are gone; progress is pulled back to the timer queue's new end and the heap is
    /// rebuilt from it when this broker next runs the timers.
    pub fn truncated(&self) {
        let p = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .persisted();
        if let Err(e) = self.reset_to(p) {
            tracing::error!(error = %e, "saving the timer progress after a truncation failed");
        }
    }

    /// Replaces the state by `p` pulled back to the timer queue's end, and saves it.
    fn reset_to(&self, p: Persisted) -> Result<(), SyncBodyError> {
        let mut state = State::from_persisted(p);
        state.clamp(self.store.max_offset(TIMER_TOPIC, 0));
        let saved = state.persisted();
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
        Ok(self.write(&saved)?)
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
            let Some(permit) = self.durability.own_write_permit().await else {
                // No longer master: the service is being stopped.
                shutdown.cancelled().await;
                break;
            };
            let next_due = self.deliver_due_timers();
            drop(permit);
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

    /// Writes the timer progress (when it changed) once what it counts as delivered is
    /// durable.
    async fn persist_timers(&self) {
        let Some(snapshot) = self.snapshot() else {
            return;
        };
        let written = self.durability.wait_all().await
            && match self.write(&snapshot) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(error = %e, "persisting timer progress failed");
                    false
                }
            };
        if !written {
            // Try again next time.
            self.state.lock().unwrap_or_else(|e| e.into_inner()).dirty = true;
        }
    }

    /// Reads newly parked timer messages into the heap.
    fn scan_timers(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.drop_below(self.store.min_offset(TIMER_TOPIC, 0));
        loop {
            let from = s.scanned;
            let r = self
                .store
                .get_messages(TIMER_TOPIC, 0, from, 256, 4 << 20, &AcceptAll);
            if r.messages.is_empty() {
                s.scanned_to(
                    r.next_begin_offset
                        .min(self.store.max_offset(TIMER_TOPIC, 0)),
                );
                return;
            }
            for (slice, qo) in r.messages.iter().zip(&r.queue_offsets) {
                let view = RecordView::parse(slice).ok();
                let due = view
                    .as_ref()
                    .and_then(|v| v.property(TIMER_OUT_MS).and_then(|d| d.parse::<i64>().ok()));
                let recall = view
                    .as_ref()
                    .and_then(|v| v.property(TIMER_DEL_UNIQKEY).map(str::to_string));
                s.read(*qo, due.map(|d| (d, slice_phys(slice))), recall);
            }
            s.scanned_to(r.next_begin_offset);
            if s.scanned < s.resume_at {
                // Re-reading after a restart: jump to the next offset still waiting.
                let next = s.reread.range(s.scanned..).next().copied();
                let to = next.unwrap_or(s.resume_at);
                s.scanned_to(to);
            }
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
        if let Some(key) = m.properties.get(TIMER_DEL_UNIQKEY) {
            // A recall marker: the message it names came due just before it.
            let key = key.to_string();
            self.state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .recall_done(&key);
            return Ok(());
        }
        if !unpark(&mut m) {
            tracing::warn!("timer message without REAL_TOPIC/REAL_QID dropped");
            return Ok(());
        }
        if let Some(id) = m.properties.get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX) {
            let recalled = {
                let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
                // No key built for the usual case: nothing recalled.
                !s.recalled.is_empty() && s.recalled.contains_key(&delete_key(&m.topic, id))
            };
            if recalled {
                tracing::info!(topic = %m.topic, id, "recalled timer message not delivered");
                return Ok(());
            }
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

    /// Issue 9, defect 8: with a "delivered below this offset" checkpoint, one timer due far
    /// ahead kept every later delivery in memory and in the progress file. The progress now
    /// holds only what still waits.
    #[test]
    fn one_long_timer_does_not_keep_every_later_delivery() {
        let mut s = State::default();
        s.read(0, Some((i64::MAX, 0)), None);
        for qo in 1..10_000 {
            s.read(qo, Some((0, qo as u64)), None);
            s.mark_delivered(qo);
        }
        s.scanned_to(10_000);
        let p = s.persisted();
        assert_eq!(p.scanned, Some(10_000));
        assert_eq!(p.pending, vec![0]);
        assert_eq!(s.waiting.len(), 1);
    }

    #[test]
    fn a_restart_rereads_exactly_the_waiting_timers() {
        let p = Persisted {
            scanned: Some(100),
            pending: vec![3, 50],
            ..Persisted::default()
        };
        let mut s = State::from_persisted(p);
        assert_eq!(s.scanned, 3, "re-reading starts at the first waiting timer");
        for qo in 3..120 {
            s.read(qo, Some((0, qo as u64)), None);
        }
        s.scanned_to(120);
        let waiting: Vec<i64> = s.waiting.iter().copied().collect();
        let mut expected = vec![3, 50];
        expected.extend(100..120);
        assert_eq!(
            waiting, expected,
            "delivered timers below 100 are not delivered again"
        );
        // Delivered, the progress shrinks back to what waits.
        for qo in expected {
            s.mark_delivered(qo);
        }
        assert!(s.persisted().pending.is_empty());
    }

    #[test]
    fn progress_files_of_earlier_versions_still_load() {
        let legacy: Persisted =
            serde_json::from_str(r#"{"checkpoint": 10, "delivered": [12, 13]}"#).unwrap();
        let mut s = State::from_persisted(legacy);
        for qo in 10..15 {
            s.read(qo, Some((0, qo as u64)), None);
        }
        s.scanned_to(15);
        let waiting: Vec<i64> = s.waiting.iter().copied().collect();
        assert_eq!(waiting, vec![10, 11, 14]);
        let written = serde_json::to_string(&s.persisted()).unwrap();
        assert!(!written.contains("delivered"), "{written}");
    }

    #[test]
    fn unchanged_progress_is_not_rewritten() {
        let mut s = State::default();
        s.read(0, Some((5, 0)), None);
        assert!(std::mem::take(&mut s.dirty));
        s.scanned_to(1);
        assert!(!s.dirty, "nothing changed: no rewrite and fsync");
    }
}
