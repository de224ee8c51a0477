//! FlushService: makes the CommitLog durable, outside the append lock.
//!
//! SYNC_FLUSH is RocketMQ's GroupCommitService: appenders register the offset they need
//! durable and wait; one flusher thread msyncs everything written so far and wakes all whose
//! offsets are covered, so concurrent appends share one flush. ASYNC_FLUSH is the
//! FlushRealTimeService: flush on an interval when enough pages are dirty, and fully now and
//! then. The flushed offset is also published on a `tokio::sync::watch`, so async callers
//! await group commit without parking a thread.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::commit_log::CommitLog;
use crate::config::{FlushMode, StoreConfig};
use crate::shutdown::ShutdownSignal;

const PAGE: u64 = 4096;

/// Flush requests, their completion, and the flusher's loop.
pub(crate) struct FlushService {
    /// Highest offset an appender is waiting for.
    requested: Mutex<u64>,
    /// Wakes the flusher.
    work: Condvar,
    /// Wakes waiting appenders.
    done: Condvar,
    /// Flush requests since the flusher last started a flush (group-commit batch size).
    requests: AtomicUsize,
    /// The flushed offset, for async waiters.
    flushed_tx: watch::Sender<u64>,
}

impl Default for FlushService {
    fn default() -> Self {
        Self {
            requested: Mutex::new(0),
            work: Condvar::new(),
            done: Condvar::new(),
            requests: AtomicUsize::new(0),
            flushed_tx: watch::channel(0).0,
        }
    }
}

impl FlushService {
    /// Asks the flusher to make everything below `end` durable (does not wait).
    pub(crate) fn request(&self, end: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut req = self.requested.lock().unwrap_or_else(|e| e.into_inner());
        if end > *req {
            *req = end;
            self.work.notify_one();
        }
    }

    /// A receiver of the flushed offset.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.flushed_tx.subscribe()
    }

    /// Publishes `offset` as flushed (recovery: the recovered log is durable).
    pub(crate) fn publish(&self, offset: u64) {
        self.flushed_tx.send_replace(offset);
    }

    /// Blocks until `log` is durable up to `end`, `timeout` passes or shutdown begins.
    pub(crate) fn wait(
        &self,
        log: &CommitLog,
        shutdown: &ShutdownSignal,
        end: u64,
        timeout: Duration,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut req = self.requested.lock().unwrap_or_else(|e| e.into_inner());
        if end > *req {
            *req = end;
            self.work.notify_one();
        }
        while log.flushed_offset() < end {
            let now = Instant::now();
            if now >= deadline || shutdown.is_set() {
                return log.flushed_offset() >= end;
            }
            req = self
                .done
                .wait_timeout(req, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Wakes the flusher and every waiter (shutdown).
    pub(crate) fn wake_all(&self) {
        let _req = self.requested.lock().unwrap_or_else(|e| e.into_inner());
        self.work.notify_all();
        self.done.notify_all();
    }

    /// Flushes up to the current write position and publishes the result.
    fn flush_now(&self, log: &CommitLog) {
        let target = log.max_offset();
        match log.flush(target) {
            Ok(flushed) => {
                self.flushed_tx.send_if_modified(|v| {
                    let changed = *v != flushed;
                    *v = flushed;
                    changed
                });
            }
            Err(e) => tracing::error!(error = %e, "commit log flush failed"),
        }
        let _req = self.requested.lock().unwrap_or_else(|e| e.into_inner());
        self.done.notify_all();
    }

    /// The flusher thread's body: runs until shutdown, then flushes everything once more.
    pub(crate) fn run(&self, log: &CommitLog, config: &StoreConfig, shutdown: &ShutdownSignal) {
        match config.flush_mode {
            FlushMode::Sync => self.group_commit(log, shutdown),
            FlushMode::Async => self.realtime(log, config, shutdown),
        }
        // Final flush on shutdown, whatever the mode.
        self.flush_now(log);
        self.wake_all();
    }

    fn group_commit(&self, log: &CommitLog, shutdown: &ShutdownSignal) {
        // Size and duration of the previous flush: the appenders it released come back with new
        // requests within a fraction of a flush, so the next flush waits a little for them
        // instead of starting with the first one alone (which would keep batches tiny).
        let mut last_batch = 0usize;
        let mut last_duration = Duration::ZERO;
        loop {
            {
                let mut req = self.requested.lock().unwrap_or_else(|e| e.into_inner());
                while *req <= log.flushed_offset() && !shutdown.is_set() {
                    req = self
                        .work
                        .wait_timeout(req, Duration::from_millis(10))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
            if shutdown.is_set() {
                return;
            }
            if last_batch > 1 {
                let gather_until =
                    Instant::now() + (last_duration / 2).min(Duration::from_millis(1));
                while self.requests.load(Ordering::Relaxed) < last_batch
                    && Instant::now() < gather_until
                {
                    std::thread::park_timeout(Duration::from_micros(50));
                }
            }
            last_batch = self.requests.swap(0, Ordering::Relaxed);
            let started = Instant::now();
            self.flush_now(log);
            last_duration = started.elapsed();
        }
    }

    fn realtime(&self, log: &CommitLog, cfg: &StoreConfig, shutdown: &ShutdownSignal) {
        let mut last_full = Instant::now();
        loop {
            {
                let req = self.requested.lock().unwrap_or_else(|e| e.into_inner());
                if !shutdown.is_set() {
                    let _ = self.work.wait_timeout(req, cfg.flush_interval);
                }
            }
            if shutdown.is_set() {
                return;
            }
            let dirty = log.max_offset() - log.flushed_offset();
            let thorough = last_full.elapsed() >= cfg.flush_thorough_interval;
            if dirty >= cfg.flush_least_pages * PAGE || (thorough && dirty > 0) {
                self.flush_now(log);
            }
            if thorough {
                last_full = Instant::now();
            }
        }
    }
}
