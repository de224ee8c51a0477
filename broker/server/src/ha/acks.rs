//! How far each slave holds the log, and the sends waiting for enough of them (RocketMQ's
//! GroupTransferService and the HA connections' ack offsets). From the acks it derives the
//! high watermark: the end that the required number of slaves all hold. A send under
//! synchronous replication is answered SEND_OK only once the watermark passes its record;
//! consumers never see a record above it.
//!
//! Slaves are keyed by broker id, not by connection, so a slave that reconnects before its
//! old connection is noticed dead counts once (RocketMQ 5 counts both).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use tokio::sync::{oneshot, Notify};

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

/// One slave, connected or last seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlaveProgress {
    /// The slave's broker id.
    pub broker_id: i64,
    /// The connection it uses (a newer one replaces an older one); `None` once closed.
    pub connection: Option<u64>,
    /// End of the log it acknowledged (kept after it disconnects: it still holds that).
    pub acked: u64,
    /// The address its replication connection comes from (`haStatus`), when known.
    pub peer: Option<std::net::SocketAddr>,
    /// Where its current stream started.
    pub stream_from: u64,
    /// Bytes streamed to it per second (`haStatus`).
    pub flow: super::flow::FlowWindow,
}

impl SlaveProgress {
    /// Connected and holding the log below `end`: caught up with a master whose end it is.
    pub fn holds(&self, end: u64) -> bool {
        self.connection.is_some() && self.acked >= end
    }
}

/// Which slaves must hold a record before it is confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// Any this many slaves (classic SYNC_MASTER: `in-sync-replicas` − 1).
    Count(usize),
    /// Every one of these (controller mode: the in-sync set without the master; during a
    /// change of the set, the union of the old and the new).
    Members(BTreeSet<i64>),
}

impl Requirement {
    /// True when no slave is needed.
    pub fn is_none(&self) -> bool {
        match self {
            Requirement::Count(n) => *n == 0,
            Requirement::Members(m) => m.is_empty(),
        }
    }
}

/// The ack table.
#[derive(Debug)]
pub struct ReplicaAcks {
    /// Slaves that must hold a record before it is confirmed; none confirms everything.
    required: Mutex<Requirement>,
    /// A slave further behind the master's end than this is not available.
    max_gap: u64,
    /// Everything that changes.
    state: Mutex<AckState>,
    /// Signalled when a slave's stream closes, so that the in-sync keeper drops it from the
    /// in-sync set at once rather than on its next tick: until then every synchronous send
    /// waits for a slave that is gone.
    left: Notify,
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
    pub fn new(required: Requirement, max_gap: u64, confirmed: u64) -> Self {
        Self {
            required: Mutex::new(required),
            max_gap,
            state: Mutex::new(AckState {
                confirmed,
                ..AckState::default()
            }),
            left: Notify::new(),
        }
    }

    /// Completes once a slave's stream closed since the last time it completed (a close
    /// while nobody waits is remembered).
    pub fn slave_left(&self) -> tokio::sync::futures::Notified<'_> {
        self.left.notified()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AckState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Slaves that must acknowledge a record.
    pub fn required(&self) -> Requirement {
        self.required
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Changes who must acknowledge (the in-sync set changed, or the role did). The watermark
    /// does not go back; waiting sends are released if the new requirement already holds.
    pub fn set_required(&self, required: Requirement, master_end: u64) {
        *self.required.lock().unwrap_or_else(|e| e.into_inner()) = required.clone();
        let mut state = self.lock();
        let candidate = if required.is_none() {
            master_end
        } else {
            watermark(&state.slaves, &required)
        };
        self.release(&mut state, candidate);
    }

    /// Starts over for a new term: `required` from now on, the watermark at `confirmed`
    /// (it may be lower than before: a log cut back is confirmed only as far as it goes),
    /// no slave known, and every waiting send released as not replicated.
    pub fn reset(&self, required: Requirement, confirmed: u64) {
        *self.required.lock().unwrap_or_else(|e| e.into_inner()) = required;
        let mut state = self.lock();
        state.slaves.clear();
        state.waiters.clear();
        state.confirmed = confirmed;
    }

    /// Raises the watermark to `candidate` and completes the waiters it covers.
    fn release(&self, state: &mut AckState, candidate: u64) -> Option<u64> {
        if candidate <= state.confirmed {
            return None;
        }
        state.confirmed = candidate;
        let later = state.waiters.split_off(&(candidate + 1));
        for tx in std::mem::replace(&mut state.waiters, later)
            .into_values()
            .flatten()
        {
            let _ = tx.send(());
        }
        Some(candidate)
    }

    /// A slave connected on `connection` from `peer`, holding the log below `from`.
    pub fn connected(
        &self,
        broker_id: i64,
        connection: u64,
        from: u64,
        peer: Option<std::net::SocketAddr>,
    ) {
        self.lock().slaves.insert(
            broker_id,
            SlaveProgress {
                broker_id,
                connection: Some(connection),
                acked: from,
                peer,
                stream_from: from,
                flow: Default::default(),
            },
        );
    }

    /// `bytes` of the log were streamed on `connection` during second `now_s`.
    pub fn transferred(&self, broker_id: i64, connection: u64, bytes: u64, now_s: u64) {
        if let Some(s) = self.lock().slaves.get_mut(&broker_id) {
            if s.connection == Some(connection) {
                s.flow.record(bytes, now_s);
            }
        }
    }

    /// `connection` closed; its slave no longer counts (unless it reconnected meanwhile).
    pub fn disconnected(&self, broker_id: i64, connection: u64) {
        let left = {
            let mut state = self.lock();
            match state.slaves.get_mut(&broker_id) {
                Some(s) if s.connection == Some(connection) => {
                    s.connection = None;
                    true
                }
                _ => false,
            }
        };
        if left {
            self.left.notify_one();
        }
    }

    /// The slave on `connection` holds the log below `offset`. Returns the high watermark
    /// when it moved.
    pub fn acked(&self, broker_id: i64, connection: u64, offset: u64) -> Option<u64> {
        let required = self.required();
        let mut state = self.lock();
        match state.slaves.get_mut(&broker_id) {
            Some(s) if s.connection == Some(connection) => s.acked = s.acked.max(offset),
            _ => return None,
        }
        if required.is_none() {
            return None;
        }
        let candidate = watermark(&state.slaves, &required);
        self.release(&mut state, candidate)
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
        let required = self.required();
        let mut state = self.lock();
        if required.is_none() || state.confirmed >= end {
            return Ok(None);
        }
        let available = |s: &SlaveProgress| self.is_available(s, master_end);
        // Controller mode: a member that is not connected is waited for, not refused at once.
        // The master drops it from the in-sync set on its next heartbeat (its stream closed),
        // and the change releases this wait; refusing would fail every send in between (a
        // slave restarting in a rolling upgrade). One connected but too far behind is refused.
        let lagging = |s: &SlaveProgress| s.connection.is_some() && !available(s);
        let enough = match &required {
            Requirement::Count(n) => state.slaves.values().filter(|s| available(s)).count() >= *n,
            Requirement::Members(m) => {
                !m.iter().any(|id| state.slaves.get(id).is_some_and(lagging))
            }
        };
        if !enough {
            return Err(Shortfall::SlaveNotAvailable);
        }
        let (tx, rx) = oneshot::channel();
        state.waiters.entry(end).or_default().push(tx);
        Ok(Some(rx))
    }

    /// A slave is available to a master whose log ends at `master_end` while it is connected
    /// and at most `max_gap` bytes behind.
    fn is_available(&self, s: &SlaveProgress, master_end: u64) -> bool {
        s.connection.is_some() && master_end.saturating_sub(s.acked) <= self.max_gap
    }

    /// True while slave `broker_id` is available (see [`ReplicaAcks::wait_for`]).
    pub fn available(&self, broker_id: i64, master_end: u64) -> bool {
        self.lock()
            .slaves
            .get(&broker_id)
            .is_some_and(|s| self.is_available(s, master_end))
    }

    /// Slave `broker_id` is connected and holds the log below `end`.
    pub fn holds(&self, broker_id: i64, end: u64) -> bool {
        self.lock()
            .slaves
            .get(&broker_id)
            .is_some_and(|s| s.holds(end))
    }

    /// The slaves known (connected or last seen), by broker id.
    pub fn slaves(&self) -> Vec<SlaveProgress> {
        let mut out: Vec<_> = self.lock().slaves.values().copied().collect();
        out.sort_by_key(|s| s.broker_id);
        out
    }
}

/// The end that the required slaves all hold: the n-th highest ack, or the lowest ack of the
/// members (0 when some are unknown; `u64::MAX` when none is required).
fn watermark(slaves: &HashMap<i64, SlaveProgress>, required: &Requirement) -> u64 {
    match required {
        Requirement::Count(0) => u64::MAX,
        Requirement::Count(n) => {
            let mut acks: Vec<u64> = slaves.values().map(|s| s.acked).collect();
            if acks.len() < *n {
                return 0;
            }
            acks.sort_unstable_by(|a, b| b.cmp(a));
            acks[n - 1]
        }
        Requirement::Members(m) if m.is_empty() => u64::MAX,
        Requirement::Members(m) => m
            .iter()
            .map(|id| slaves.get(id).map_or(0, |s| s.acked))
            .min()
            .unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_stream_wakes_the_keeper_once_even_if_nobody_waited() {
        let acks = ReplicaAcks::new(Requirement::Count(1), 1 << 20, 0);
        acks.connected(1, 10, 0, None);
        acks.disconnected(1, 9); // an older connection: nothing left
        acks.disconnected(1, 10);
        let woke = tokio::time::timeout(std::time::Duration::from_secs(5), acks.slave_left());
        assert!(woke.await.is_ok(), "the close was remembered");
        let again =
            tokio::time::timeout(std::time::Duration::from_millis(50), acks.slave_left()).await;
        assert!(again.is_err(), "one close wakes once");
    }

    #[test]
    fn transfers_count_per_slave_connection_and_restart_with_a_new_one() {
        let acks = ReplicaAcks::new(Requirement::Count(1), 1 << 20, 100);
        acks.connected(1, 10, 0, None);
        acks.transferred(1, 10, 4096, 7);
        acks.transferred(1, 10, 1024, 7);
        acks.transferred(1, 9, 1 << 20, 7); // an older connection of the slave
        let flow = |acks: &ReplicaAcks| acks.slaves()[0].flow.per_second(8);
        assert_eq!(flow(&acks), 5120);
        acks.connected(1, 11, 5120, None);
        assert_eq!(flow(&acks), 0, "a new stream counts afresh");
    }

    #[test]
    fn a_send_is_released_only_when_enough_slaves_hold_it() {
        let acks = ReplicaAcks::new(Requirement::Count(2), 1 << 20, 100);
        acks.connected(1, 10, 100, None);
        assert_eq!(
            acks.wait_for(150, 150).unwrap_err(),
            Shortfall::SlaveNotAvailable,
            "one slave of two"
        );
        acks.connected(2, 11, 100, None);
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
        let acks = ReplicaAcks::new(Requirement::Count(2), 1 << 20, 0);
        acks.connected(1, 10, 0, None);
        acks.connected(1, 12, 0, None); // the same slave again
        assert_eq!(acks.slaves().len(), 1);
        assert!(acks.wait_for(10, 10).is_err(), "one slave, two connections");
        assert_eq!(acks.acked(1, 10, 50), None, "the old connection");
        acks.disconnected(1, 10);
        assert_eq!(
            acks.slaves()[0].connection,
            Some(12),
            "the old connection's close leaves the new one"
        );
        acks.disconnected(1, 12);
        assert_eq!(acks.slaves()[0].connection, None);
    }

    #[test]
    fn every_member_of_the_in_sync_set_must_hold_a_record() {
        let acks = ReplicaAcks::new(Requirement::Members(BTreeSet::from([1, 2])), 1 << 20, 0);
        acks.connected(1, 1, 0, None);
        // Member 2 is not connected: the send waits (for 2, or for the set to drop it).
        let mut waiting = acks.wait_for(10, 10).unwrap().unwrap();
        assert!(waiting.try_recv().is_err());
        // A member connected but further behind than the gap limit is refused at once.
        acks.connected(2, 2, 0, None);
        assert_eq!(
            acks.wait_for(10, 2 << 20).unwrap_err(),
            Shortfall::SlaveNotAvailable
        );
        acks.connected(3, 3, 0, None); // not in the set: its acks do not count
        let mut rx = acks.wait_for(10, 10).unwrap().unwrap();
        assert_eq!(acks.acked(3, 3, 10), None);
        assert_eq!(acks.acked(1, 1, 10), None);
        assert!(rx.try_recv().is_err());
        assert_eq!(acks.acked(2, 2, 10), Some(10));
        assert!(rx.try_recv().is_ok());
        // The set shrinks to {1}: a send waiting on 2 is released by 1's ack alone.
        let mut rx = acks.wait_for(20, 20).unwrap().unwrap();
        acks.acked(1, 1, 20);
        assert!(rx.try_recv().is_err());
        acks.set_required(Requirement::Members(BTreeSet::from([1])), 20);
        assert!(rx.try_recv().is_ok());
        assert_eq!(acks.confirmed(), 20);
    }

    #[test]
    fn the_watermark_never_goes_down_and_a_far_behind_slave_is_not_available() {
        let acks = ReplicaAcks::new(Requirement::Count(1), 1000, 0);
        acks.connected(1, 1, 0, None);
        assert_eq!(acks.acked(1, 1, 500), Some(500));
        acks.disconnected(1, 1);
        acks.connected(1, 2, 300, None);
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
        let acks = ReplicaAcks::new(Requirement::Count(0), 0, 0);
        assert!(acks.wait_for(u64::MAX - 1, 0).unwrap().is_none());
        assert_eq!(watermark(&HashMap::new(), &Requirement::Count(0)), u64::MAX);
    }
}
