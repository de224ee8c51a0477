//! InFlight: what Pop consumers hold and have not acknowledged yet. A pure table (no IO) of
//! checkpoints, RocketMQ's `PopCheckPoint`: one per batch popped from one queue, with the
//! queue offsets it delivered, which of them were acknowledged, and when the rest become
//! visible again. The [`super::PopService`] fills it from pops and from the revive log it
//! replays at the start of each master term, and asks it which batches are due.
//!
//! Rules kept here, in one place:
//! - a checkpoint is identified as RocketMQ identifies it: group, topic, queue, the batch's
//!   start offset and its pop time (all in the receipt handle);
//! - an offset is acknowledged at most once; a checkpoint whose offsets are all acknowledged
//!   leaves the table;
//! - a checkpoint is due at pop time + invisible time; due ones are handed out in that order;
//! - for an orderly group a queue with an unacknowledged, not yet due checkpoint is locked:
//!   nothing more is popped from it (one batch in flight per queue).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::broker::lag::{Popped, PoppedQueue};

/// Identifies one checkpoint (RocketMQ: `startOffset popTime` of a queue of a group's topic).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CheckpointKey {
    /// The consumer group.
    pub group: String,
    /// The topic popped (the original topic, or the group's pop retry topic).
    pub topic: String,
    /// The queue popped.
    pub queue_id: i32,
    /// The first queue offset the pop looked at.
    pub start_offset: i64,
    /// When the pop happened (ms since the epoch).
    pub pop_time: i64,
}

/// One popped batch of one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Which batch.
    pub key: CheckpointKey,
    /// How long the batch stays invisible after `pop_time` (ms).
    pub invisible_ms: i64,
    /// Revive queue of the checkpoint's records.
    pub revive_qid: i32,
    /// Where the checkpoint's record sits in its revive queue (the replay starts at the
    /// smallest of these).
    pub revive_offset: i64,
    /// The queue offsets delivered, ascending.
    pub offsets: Vec<i64>,
    /// How often each offset was delivered before by an orderly redelivery (0 for a first
    /// delivery; always 0 for concurrent groups, whose redeliveries go through the retry
    /// topic and count in the message's reconsume times).
    pub attempts: Vec<i32>,
    /// Offsets of `offsets` acknowledged so far.
    pub acked: BTreeSet<i64>,
    /// The group consumes orderly: the queue stays locked while this is in flight.
    pub orderly: bool,
}

impl Checkpoint {
    /// When the unacknowledged offsets become visible again.
    pub fn revive_time(&self) -> i64 {
        self.key.pop_time.saturating_add(self.invisible_ms)
    }

    /// Offsets delivered and not acknowledged, with their orderly attempts.
    pub fn unacked(&self) -> impl Iterator<Item = (i64, i32)> + '_ {
        self.offsets
            .iter()
            .zip(&self.attempts)
            .filter(|(o, _)| !self.acked.contains(o))
            .map(|(o, a)| (*o, *a))
    }

    /// The offset after the batch's last delivered offset.
    pub fn end_offset(&self) -> i64 {
        self.offsets.last().map_or(self.key.start_offset, |o| o + 1)
    }
}

/// What an acknowledgement did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acked {
    /// The offset was in flight and is acknowledged now; `finished` holds the checkpoint if
    /// that was its last unacknowledged offset (it left the table).
    Now {
        /// The checkpoint, when it is done.
        finished: Option<Checkpoint>,
    },
    /// The offset was acknowledged before.
    Already,
    /// No checkpoint holds the offset (revived already, or a handle from elsewhere).
    Unknown,
}

/// The table of checkpoints in flight.
#[derive(Debug, Default)]
pub struct InFlight {
    /// Every checkpoint, by key.
    checkpoints: HashMap<CheckpointKey, Checkpoint>,
    /// Keys by revive time (then key), for [`InFlight::due`].
    by_revive_time: BTreeSet<(i64, CheckpointKey)>,
    /// Messages not yet acknowledged, over all checkpoints (bounded by the service).
    messages: usize,
    /// Orderly queues locked by a checkpoint: (group, topic, queue) → its key.
    locked: HashMap<(String, String, i32), CheckpointKey>,
    /// Checkpoints per revive queue by their revive-log offset (replay start points).
    by_revive_offset: BTreeMap<(i32, i64), CheckpointKey>,
}

impl InFlight {
    /// Adds a checkpoint (a pop, or one replayed from the revive log). A checkpoint already
    /// in the table is kept as it is.
    pub fn insert(&mut self, ck: Checkpoint) {
        if self.checkpoints.contains_key(&ck.key) || ck.offsets.is_empty() {
            return;
        }
        self.messages += ck.unacked().count();
        self.by_revive_time
            .insert((ck.revive_time(), ck.key.clone()));
        self.by_revive_offset
            .insert((ck.revive_qid, ck.revive_offset), ck.key.clone());
        if ck.orderly {
            self.locked.insert(
                (ck.key.group.clone(), ck.key.topic.clone(), ck.key.queue_id),
                ck.key.clone(),
            );
        }
        self.checkpoints.insert(ck.key.clone(), ck);
    }

    /// Gives checkpoint `key` a new invisible time, counted from its pop time; false when it
    /// is not in the table. An orderly batch changes its time in place: its key, and so every
    /// receipt handle of the batch, stays valid, and the queue's lock moves with it.
    pub fn set_invisible(&mut self, key: &CheckpointKey, invisible_ms: i64) -> bool {
        let Some(ck) = self.checkpoints.get_mut(key) else {
            return false;
        };
        self.by_revive_time.remove(&(ck.revive_time(), key.clone()));
        ck.invisible_ms = invisible_ms;
        self.by_revive_time.insert((ck.revive_time(), key.clone()));
        true
    }

    /// Acknowledges `offset` of checkpoint `key`.
    pub fn ack(&mut self, key: &CheckpointKey, offset: i64) -> Acked {
        let Some(ck) = self.checkpoints.get_mut(key) else {
            return Acked::Unknown;
        };
        if ck.offsets.binary_search(&offset).is_err() {
            return Acked::Unknown;
        }
        if !ck.acked.insert(offset) {
            return Acked::Already;
        }
        self.messages -= 1;
        if ck.acked.len() < ck.offsets.len() {
            return Acked::Now { finished: None };
        }
        Acked::Now {
            finished: self.remove(key),
        }
    }

    /// Takes a checkpoint out of the table (all acknowledged, or revived).
    pub fn remove(&mut self, key: &CheckpointKey) -> Option<Checkpoint> {
        let ck = self.checkpoints.remove(key)?;
        self.messages -= ck.unacked().count();
        self.by_revive_time.remove(&(ck.revive_time(), key.clone()));
        self.by_revive_offset
            .remove(&(ck.revive_qid, ck.revive_offset));
        let queue = (key.group.clone(), key.topic.clone(), key.queue_id);
        if self.locked.get(&queue) == Some(key) {
            self.locked.remove(&queue);
        }
        Some(ck)
    }

    /// The checkpoint holding `offset` for a handle naming `key`. The key itself, or, for an
    /// orderly batch, the queue's lock holder of the same pop time: a handle renewed in place
    /// comes back from clients with the message's offset as its start (RocketMQ's clients and
    /// proxy rebuild it so, as its order lock is per queue, not per batch).
    pub fn resolve(&self, key: &CheckpointKey, offset: i64) -> Option<CheckpointKey> {
        if self.checkpoints.contains_key(key) {
            return Some(key.clone());
        }
        let holder = self.lock_holder(&key.group, &key.topic, key.queue_id)?;
        (holder.key.pop_time == key.pop_time && holder.offsets.binary_search(&offset).is_ok())
            .then(|| holder.key.clone())
    }

    /// A checkpoint in the table.
    pub fn get(&self, key: &CheckpointKey) -> Option<&Checkpoint> {
        self.checkpoints.get(key)
    }

    /// Checkpoints whose revive time is at or before `now`, earliest first (at most `max`).
    pub fn due(&self, now: i64, max: usize) -> Vec<CheckpointKey> {
        self.by_revive_time
            .iter()
            .take_while(|(t, _)| *t <= now)
            .take(max)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// The earliest revive time in the table.
    pub fn next_revive_time(&self) -> Option<i64> {
        self.by_revive_time.iter().next().map(|(t, _)| *t)
    }

    /// True when an orderly group's queue has a batch in flight that is not due yet at `now`
    /// (RocketMQ's order lock: nothing more is popped from it).
    pub fn is_locked(&self, group: &str, topic: &str, queue_id: i32, now: i64) -> bool {
        self.locked
            .get(&(group.to_string(), topic.to_string(), queue_id))
            .and_then(|k| self.checkpoints.get(k))
            .is_some_and(|ck| ck.revive_time() > now)
    }

    /// The orderly checkpoint holding a queue, due or not.
    pub fn lock_holder(&self, group: &str, topic: &str, queue_id: i32) -> Option<&Checkpoint> {
        self.locked
            .get(&(group.to_string(), topic.to_string(), queue_id))
            .and_then(|k| self.checkpoints.get(k))
    }

    /// Unacknowledged messages over all checkpoints.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// Unacknowledged messages of a group on a topic (for backlog and metrics).
    pub fn messages_of(&self, group: &str, topic: &str) -> usize {
        self.checkpoints
            .values()
            .filter(|ck| ck.key.group == group && ck.key.topic == topic)
            .map(|ck| ck.unacked().count())
            .sum()
    }

    /// What concurrent groups popped beyond their committed offsets and did not acknowledge,
    /// per queue (orderly batches lie below the committed offset: not counted here).
    pub fn popped(&self) -> Popped {
        let mut out = Popped::new();
        for ck in self.checkpoints.values().filter(|ck| !ck.orderly) {
            let mut unacked = ck.unacked().map(|(o, _)| o);
            let Some(first) = unacked.next() else {
                continue;
            };
            let q = out
                .entry((ck.key.group.clone(), ck.key.topic.clone()))
                .or_default()
                .entry(ck.key.queue_id)
                .or_insert(PoppedQueue {
                    unacked: 0,
                    oldest_offset: first,
                });
            q.unacked += 1 + unacked.count() as u64;
            q.oldest_offset = q.oldest_offset.min(first);
        }
        out
    }

    /// Where the replay of revive queue `qid` must start: the record of its oldest
    /// checkpoint in flight, or `end` when none is.
    pub fn replay_start(&self, qid: i32, end: i64) -> i64 {
        self.by_revive_offset
            .range((qid, i64::MIN)..=(qid, i64::MAX))
            .next()
            .map_or(end, |((_, o), _)| *o)
    }

    /// Empties the table (the broker stopped being master).
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ck(queue_id: i32, start: i64, offsets: &[i64], pop_time: i64, orderly: bool) -> Checkpoint {
        Checkpoint {
            key: CheckpointKey {
                group: "g".into(),
                topic: "t".into(),
                queue_id,
                start_offset: start,
                pop_time,
            },
            invisible_ms: 1000,
            revive_qid: 0,
            revive_offset: start,
            offsets: offsets.to_vec(),
            attempts: vec![0; offsets.len()],
            acked: BTreeSet::new(),
            orderly,
        }
    }

    /// A table holding one orderly batch of queue 1: offsets 5 and 6, popped at 0 for 1 s.
    fn one_orderly_batch() -> (InFlight, CheckpointKey) {
        let mut t = InFlight::default();
        let c = ck(1, 5, &[5, 6], 0, true);
        let key = c.key.clone();
        t.insert(c);
        (t, key)
    }

    #[test]
    fn a_checkpoint_leaves_when_its_last_offset_is_acknowledged_and_never_twice() {
        let mut t = InFlight::default();
        let c = ck(1, 10, &[10, 12], 0, false);
        let key = c.key.clone();
        t.insert(c);
        assert_eq!(t.messages(), 2);
        assert_eq!(
            t.ack(&key, 11),
            Acked::Unknown,
            "not delivered by this batch"
        );
        assert_eq!(t.ack(&key, 10), Acked::Now { finished: None });
        assert_eq!(t.ack(&key, 10), Acked::Already);
        let Acked::Now {
            finished: Some(done),
        } = t.ack(&key, 12)
        else {
            panic!("the last ack finishes the checkpoint");
        };
        assert_eq!(done.end_offset(), 13);
        assert_eq!(t.messages(), 0);
        assert_eq!(t.ack(&key, 12), Acked::Unknown, "gone");
        assert!(t.due(i64::MAX, 10).is_empty());
    }

    #[test]
    fn due_checkpoints_come_in_revive_time_order() {
        let mut t = InFlight::default();
        t.insert(ck(1, 0, &[0], 500, false));
        t.insert(ck(2, 0, &[0], 100, false));
        t.insert(ck(3, 0, &[0], 900, false));
        let due = t.due(1600, 10);
        assert_eq!(
            due.iter().map(|k| k.queue_id).collect::<Vec<_>>(),
            vec![2, 1]
        );
        assert_eq!(t.next_revive_time(), Some(1100));
        t.remove(&due[0]);
        assert_eq!(t.next_revive_time(), Some(1500));
    }

    #[test]
    fn an_orderly_queue_is_locked_until_its_batch_is_acknowledged_or_due() {
        let (mut t, key) = one_orderly_batch();
        assert!(t.is_locked("g", "t", 1, 999));
        assert!(
            !t.is_locked("g", "t", 1, 1000),
            "due: the batch is redelivered"
        );
        assert!(!t.is_locked("g", "t", 2, 0), "another queue");
        t.ack(&key, 5);
        assert!(t.is_locked("g", "t", 1, 0), "one of two acknowledged");
        t.ack(&key, 6);
        assert!(!t.is_locked("g", "t", 1, 0));
    }

    #[test]
    fn an_orderly_batch_extended_in_place_keeps_its_key_and_its_lock() {
        let (mut t, key) = one_orderly_batch();
        assert!(t.set_invisible(&key, 5000));
        assert!(t.is_locked("g", "t", 1, 4999), "locked until the new time");
        assert_eq!(t.due(4999, 10), Vec::<CheckpointKey>::new());
        assert_eq!(t.due(5000, 10), vec![key.clone()]);
        assert_eq!(t.ack(&key, 5), Acked::Now { finished: None }, "same key");
        let rebuilt = CheckpointKey {
            start_offset: 6,
            ..key.clone()
        };
        assert_eq!(t.resolve(&rebuilt, 6), Some(key.clone()), "start = offset");
        assert_eq!(t.resolve(&rebuilt, 7), None, "not in the batch");
        assert!(!t.set_invisible(&CheckpointKey { pop_time: 1, ..key }, 10));
    }

    #[test]
    fn replay_starts_at_the_oldest_record_still_in_flight() {
        let mut t = InFlight::default();
        let mut a = ck(1, 0, &[0], 0, false);
        a.revive_offset = 7;
        let mut b = ck(2, 0, &[0], 0, false);
        b.revive_offset = 3;
        let bk = b.key.clone();
        t.insert(a);
        t.insert(b);
        assert_eq!(t.replay_start(0, 20), 3);
        assert_eq!(t.replay_start(1, 20), 20, "another revive queue");
        t.remove(&bk);
        assert_eq!(t.replay_start(0, 20), 7);
    }
}
