//! How far each slave holds the log, and the sends waiting for enough of them (RocketMQ's
//! GroupTransferService and the HA connections' ack offsets). From the acks it derives the
//! high watermark: the end that the required number of slaves all hold. A send under
//! synchronous replication is answered SEND_OK only once the watermark passes its record;
//! consumers never see a record above it.
//!
//! Slaves are keyed by broker id, not by connection, so a slave that reconnects before its
//! old connection is noticed dead counts once (RocketMQ 5 counts both).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use tokio::sync::oneshot;

/// Why a synchronously replicated send is not SEND_OK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Shortfall {
    /// Fewer slaves are connected and close enough than the send needs: answered at once
    /// with SLAVE_NOT_AVAILABLE (the message is stored on the master).
    #[error("not enough slaves are connected and in sync")]
    SlaveNotAvailable,
    /// The slaves did not acknowledge in time: FLUSH_SLAVE_TIMEOUT (stored on the master).
    #[error("the slaves did not acknowledge in time")]
    SlaveTimeout,
}

/// One connected slave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlaveProgress {
    /// The slave's broker id.
    pub broker_id: i64,
    /// The connection it uses (a newer one replaces an older one).
    pub connection: u64,
    /// End of the log it acknowledged.
    pub acked: u64,
}

/// The ack table.
#[derive(Debug)]
pub struct ReplicaAcks {
    /// Slaves that must hold a record before it is confirmed (in-sync replicas minus the
    /// master); 0 confirms everything at once.
    required: usize,
    /// A slave further behind the master's end than this is not available.
    max_gap: u64,
    /// Everything that changes.
    state: Mutex<AckState>,
}

#[derive(Debug, Default)]
struct AckState {
    /// Connected slaves by broker id.
    slaves: HashMap<i64, SlaveProgress>,
    /// Waiting sends by the end they need confirmed.
    waiters: BTreeMap<u64, Vec<oneshot::Sender<()>>>,
    /// The high watermark; never goes down.
    confirmed: u64,
}

impl ReplicaAcks {
    /// A table needing `required` slaves; `confirmed` is where the watermark starts (the log
    /// end when the master starts: what it held before counts as confirmed).
    pub fn new(required: usize, max_gap: u64, confirmed: u64) -> Self {
        Self {
            required,
            max_gap,
            state: Mutex::new(AckState {
                confirmed,
                ..AckState::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AckState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Slaves that must acknowledge a record.
    pub fn required(&self) -> usize {
        self.required
    }

    /// A slave connected on `connection`, holding the log below `from`.
    pub fn connected(&self, broker_id: i64, connection: u64, from: u64) {
        self.lock().slaves.insert(
            broker_id,
            SlaveProgress {
                broker_id,
                connection,
                acked: from,
            },
        );
    }

    /// `connection` closed; its slave no longer counts (unless it reconnected meanwhile).
    pub fn disconnected(&self, broker_id: i64, connection: u64) {
        let mut state = self.lock();
        if state
            .slaves
            .get(&broker_id)
            .is_some_and(|s| s.connection == connection)
        {
            state.slaves.remove(&broker_id);
        }
    }

    /// The slave on `connection` holds the log below `offset`. Returns the high watermark
    /// when it moved.
    pub fn acked(&self, broker_id: i64, connection: u64, offset: u64) -> Option<u64> {
        let released = {
            let mut state = self.lock();
            match state.slaves.get_mut(&broker_id) {
                Some(s) if s.connection == connection => s.acked = s.acked.max(offset),
                _ => return None,
            }
            let candidate = watermark(&state.slaves, self.required);
            if candidate <= state.confirmed {
                return None;
            }
            state.confirmed = candidate;
            let later = state.waiters.split_off(&(candidate + 1));
            let done = std::mem::replace(&mut state.waiters, later);
            (candidate, done)
        };
        for tx in released.1.into_values().flatten() {
            let _ = tx.send(());
        }
        Some(released.0)
    }

    /// The high watermark.
    pub fn confirmed(&self) -> u64 {
        self.lock().confirmed
    }

    /// A receiver that completes once the watermark reaches `end`, or why waiting is
    /// pointless: too few slaves are connected within `max_gap` of `master_end`.
    pub fn wait_for(
        &self,
        end: u64,
        master_end: u64,
    ) -> Result<Option<oneshot::Receiver<()>>, Shortfall> {
        let mut state = self.lock();
        if self.required == 0 || state.confirmed >= end {
            return Ok(None);
        }
        let available = state
            .slaves
            .values()
            .filter(|s| master_end.saturating_sub(s.acked) <= self.max_gap)
            .count();
        if available < self.required {
            return Err(Shortfall::SlaveNotAvailable);
        }
        let (tx, rx) = oneshot::channel();
        state.waiters.entry(end).or_default().push(tx);
        Ok(Some(rx))
    }

    /// The connected slaves, by broker id.
    pub fn slaves(&self) -> Vec<SlaveProgress> {
        let mut out: Vec<_> = self.lock().slaves.values().copied().collect();
        out.sort_by_key(|s| s.broker_id);
        out
    }
}

/// The end that `required` slaves all hold: the `required`-th highest ack (0 when fewer are
/// connected; `u64::MAX` when none is required).
fn watermark(slaves: &HashMap<i64, SlaveProgress>, required: usize) -> u64 {
    if required == 0 {
        return u64::MAX;
    }
    let mut acks: Vec<u64> = slaves.values().map(|s| s.acked).collect();
    if acks.len() < required {
        return 0;
    }
    acks.sort_unstable_by(|a, b| b.cmp(a));
    acks[required - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_is_released_only_when_enough_slaves_hold_it() {
        let acks = ReplicaAcks::new(2, 1 << 20, 100);
        acks.connected(1, 10, 100);
        assert_eq!(
            acks.wait_for(150, 150).unwrap_err(),
            Shortfall::SlaveNotAvailable,
            "one slave of two"
        );
        acks.connected(2, 11, 100);
        let mut rx = acks.wait_for(150, 150).unwrap().unwrap();
        assert_eq!(acks.acked(1, 10, 150), None, "one of two acked");
        assert!(rx.try_recv().is_err());
        assert_eq!(acks.acked(2, 11, 140), Some(140));
        assert!(rx.try_recv().is_err(), "140 < 150");
        assert_eq!(acks.acked(2, 11, 160), Some(150));
        assert!(rx.try_recv().is_ok());
        assert!(
            acks.wait_for(150, 160).unwrap().is_none(),
            "already confirmed"
        );
    }

    #[test]
    fn a_reconnected_slave_counts_once_and_its_old_connection_is_ignored() {
        let acks = ReplicaAcks::new(2, 1 << 20, 0);
        acks.connected(1, 10, 0);
        acks.connected(1, 12, 0); // the same slave again
        assert_eq!(acks.slaves().len(), 1);
        assert!(acks.wait_for(10, 10).is_err(), "one slave, two connections");
        assert_eq!(acks.acked(1, 10, 50), None, "the old connection");
        acks.disconnected(1, 10);
        assert_eq!(
            acks.slaves().len(),
            1,
            "the old connection's close leaves the new one"
        );
        acks.disconnected(1, 12);
        assert!(acks.slaves().is_empty());
    }

    #[test]
    fn the_watermark_never_goes_down_and_a_far_behind_slave_is_not_available() {
        let acks = ReplicaAcks::new(1, 1000, 0);
        acks.connected(1, 1, 0);
        assert_eq!(acks.acked(1, 1, 500), Some(500));
        acks.disconnected(1, 1);
        acks.connected(1, 2, 300);
        assert_eq!(acks.acked(1, 2, 400), None);
        assert_eq!(acks.confirmed(), 500);
        assert_eq!(
            acks.wait_for(5000, 5000).unwrap_err(),
            Shortfall::SlaveNotAvailable,
            "4600 bytes behind with a gap limit of 1000"
        );
    }

    #[test]
    fn no_required_slave_confirms_everything() {
        let acks = ReplicaAcks::new(0, 0, 0);
        assert!(acks.wait_for(u64::MAX - 1, 0).unwrap().is_none());
        assert_eq!(watermark(&HashMap::new(), 0), u64::MAX);
    }
}
