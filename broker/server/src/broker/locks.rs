//! RebalanceLockManager: the queue locks of orderly consumers (LOCK_BATCH_MQ). A lock is a
//! lease renewed by its owner; a queue is consumed by at most one member of a group at a time,
//! and a crashed member's queues come free once its lease runs out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use conveyor_protocol::route::MessageQueue;

/// How long an orderly consumer's queue lock lives without renewal (RocketMQ: 60 s).
pub const LOCK_LEASE: Duration = Duration::from_secs(60);

/// Owner client id and last renewal of each locked queue.
type LockTable = HashMap<MessageQueue, (String, Instant)>;

/// Queue locks of orderly consumers, per group.
#[derive(Default)]
pub struct RebalanceLockManager {
    /// group → its locked queues.
    table: Mutex<HashMap<String, LockTable>>,
}

impl RebalanceLockManager {
    /// Locks what is free, expired or already held by `client`; returns the queues it holds.
    pub fn lock(
        &self,
        group: &str,
        client: &str,
        queues: &[MessageQueue],
        now: Instant,
    ) -> Vec<MessageQueue> {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let locks = table.entry(group.to_string()).or_default();
        let mut held = Vec::new();
        for mq in queues {
            let free = match locks.get(mq) {
                None => true,
                Some((owner, at)) => owner == client || now.duration_since(*at) > LOCK_LEASE,
            };
            if free {
                locks.insert(mq.clone(), (client.to_string(), now));
                held.push(mq.clone());
            }
        }
        held
    }

    /// Releases the queues `client` holds.
    pub fn unlock(&self, group: &str, client: &str, queues: &[MessageQueue]) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(locks) = table.get_mut(group) {
            for mq in queues {
                if locks.get(mq).is_some_and(|(owner, _)| owner == client) {
                    locks.remove(mq);
                }
            }
        }
    }

    /// The client holding a live lock on `mq` for `group`, if any.
    pub fn holder(&self, group: &str, mq: &MessageQueue, now: Instant) -> Option<String> {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table
            .get(group)?
            .get(mq)
            .filter(|(_, at)| now.duration_since(*at) <= LOCK_LEASE)
            .map(|(c, _)| c.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mq(q: i32) -> MessageQueue {
        MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: q,
        }
    }

    #[test]
    fn locks_are_exclusive_until_the_lease_expires() {
        let locks = RebalanceLockManager::default();
        let t0 = Instant::now();
        assert_eq!(locks.lock("G", "c1", &[mq(0), mq(1)], t0).len(), 2);
        assert_eq!(locks.lock("G", "c2", &[mq(1), mq(2)], t0), vec![mq(2)]);
        // Renewal by the owner is fine; another client gets it only after expiry.
        assert_eq!(locks.lock("G", "c1", &[mq(1)], t0).len(), 1);
        assert_eq!(
            locks.lock(
                "G",
                "c2",
                &[mq(1)],
                t0 + LOCK_LEASE + Duration::from_secs(1)
            ),
            vec![mq(1)]
        );
        locks.unlock("G", "c1", &[mq(0)]);
        assert_eq!(locks.lock("G", "c2", &[mq(0)], t0), vec![mq(0)]);
        assert_eq!(locks.holder("G", &mq(0), t0).as_deref(), Some("c2"));
    }
}
