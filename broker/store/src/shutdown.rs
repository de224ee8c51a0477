//! The store's stop signal: background threads check it between rounds and sleep on it, so
//! that shutdown wakes them at once instead of waiting out their intervals.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Set once when the store shuts down.
#[derive(Default)]
pub(crate) struct ShutdownSignal {
    /// The store is shutting down.
    stopping: AtomicBool,
    /// Interval sleeps wait on this condition variable.
    sleeper: (Mutex<()>, Condvar),
}

impl ShutdownSignal {
    /// True once shutdown began.
    pub(crate) fn is_set(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Begins shutdown and wakes every sleeper. Returns false if it had begun already.
    pub(crate) fn set(&self) -> bool {
        if self.stopping.swap(true, Ordering::AcqRel) {
            return false;
        }
        let _g = self.sleeper.0.lock().unwrap_or_else(|e| e.into_inner());
        self.sleeper.1.notify_all();
        true
    }

    /// Sleeps for `d` unless shutdown begins first.
    pub(crate) fn sleep(&self, d: Duration) {
        let guard = self.sleeper.0.lock().unwrap_or_else(|e| e.into_inner());
        if !self.is_set() {
            let _ = self.sleeper.1.wait_timeout(guard, d);
        }
    }
}
