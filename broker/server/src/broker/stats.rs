//! BrokerStats: the traffic counters `/metrics` and GET_BROKER_RUNTIME_INFO report. The send
//! and pull paths count; the probes and admin only read a [`StatsSnapshot`].

use std::sync::atomic::{AtomicU64, Ordering};

/// Messages and bytes in and out since the broker started.
#[derive(Debug, Default)]
pub struct BrokerStats {
    /// Messages stored by sends.
    messages_in: AtomicU64,
    /// Bytes of the records stored by sends.
    bytes_in: AtomicU64,
    /// Messages returned by pulls.
    messages_out: AtomicU64,
    /// Bytes of the records returned by pulls.
    bytes_out: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Messages stored by sends.
    pub messages_in: u64,
    /// Bytes of the records stored by sends.
    pub bytes_in: u64,
    /// Messages returned by pulls.
    pub messages_out: u64,
    /// Bytes of the records returned by pulls.
    pub bytes_out: u64,
}

impl BrokerStats {
    /// Counts stored messages.
    pub fn record_in(&self, messages: usize, bytes: usize) {
        self.messages_in
            .fetch_add(messages as u64, Ordering::Relaxed);
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts delivered messages.
    pub fn record_out(&self, messages: usize, bytes: usize) {
        self.messages_out
            .fetch_add(messages as u64, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The current values.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            messages_in: self.messages_in.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            messages_out: self.messages_out.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
        }
    }
}
