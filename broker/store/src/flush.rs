//! FlushService: makes the CommitLog durable, outside the append lock.
//!
//! SYNC_FLUSH is RocketMQ's GroupCommitService: appenders register the offset they need
//! durable and wait; one flusher thread msyncs everything written so far and wakes all whose
//! offsets are covered, so concurrent appends share one flush. ASYNC_FLUSH is the
//! FlushRealTimeService: flush on an interval when enough pages are dirty, and fully now and
//! then. Async callers (the broker's handlers) hold a [`FlushTicket`] instead of parking a
//! thread: waiters are kept by the offset they need, and a flush completes exactly those it
//! covers (RocketMQ's GroupCommitRequest futures), so a flush costs one wake-up per released
//! waiter, not one per waiter.
//!
//! A failed flush is never retried. On Linux a failed msync/fsync may already have dropped the
//! dirty pages it could not write (and cleared the error), so a retry can "succeed" for data
//! that never reached the disk. After the first failure the service is *failed*: nothing
//! counts as durable any more, every waiter is released as not flushed, and the store refuses
//! appends until it is reopened and recovery re-verifies the log.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

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
    /// Async waiters by the offset they need durable.
    tickets: Mutex<BTreeMap<u64, Vec<oneshot::Sender<()>>>>,
    /// The first flush error, once one happened (see the module doc: never cleared).
    failure: Mutex<Option<String>>,
    /// `failure.is_some()`, readable without the lock on the append path.
    failed: AtomicBool,
    /// How long each CommitLog flush (msync) took, in seconds.
    latency: prometheus::Histogram,
}

/// Buckets of the flush latency histogram, in seconds: 100 µs to 2.5 s.
pub const FLUSH_LATENCY_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

impl Default for FlushService {
    fn default() -> Self {
        Self {
            requested: Mutex::new(0),
            work: Condvar::new(),
            done: Condvar::new(),
            requests: AtomicUsize::new(0),
            tickets: Mutex::new(BTreeMap::new()),
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
            latency: prometheus::Histogram::with_opts(
                prometheus::HistogramOpts::new(
                    "conveyor_store_flush_latency_seconds",
                    "Time each CommitLog flush (msync of what was written) took.",
                )
                .buckets(FLUSH_LATENCY_BUCKETS.to_vec()),
            )
            .expect("constant, valid histogram options"),
        }
    }
}

/// Completes once the CommitLog is durable up to the offset it was taken for.
#[derive(Debug)]
pub struct FlushTicket(oneshot::Receiver<()>);

impl FlushTicket {
    /// Waits for the flush; `false` if the store shut down before it (callers bound the wait
    /// with their own timeout).
    pub async fn wait(self) -> bool {
        self.0.await.is_ok()
    }
}

impl FlushService {
    /// The flush latency histogram (shares its counts with the service).
    pub(crate) fn latency(&self) -> prometheus::Histogram {
        self.latency.clone()
    }

    /// The first flush error, if a flush failed: the store must stop acknowledging writes.
    pub(crate) fn failure(&self) -> Option<String> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Asks the flusher to make everything below `end` durable (does not wait).
    pub(crate) fn request(&self, end: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut req = self.requested.lock().unwrap_or_else(|e| e.into_inner());
        if end > *req {
            *req = end;
            self.work.notify_one();
        }
    }

    /// A ticket that completes once `log` is durable up to `end`, and a request for that flush.
    pub(crate) fn ticket(&self, log: &CommitLog, end: u64) -> FlushTicket {
        let (tx, rx) = oneshot::channel();
        {
            // Checked under the lock the flusher completes tickets under, so a flush that
            // lands between the check and the insert still sees this ticket.
            let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
            if log.flushed_offset() >= end {
                let _ = tx.send(());
                return FlushTicket(rx);
            }
            if self.failed.load(Ordering::Acquire) {
                // Dropping the sender completes the ticket as not flushed.
                return FlushTicket(rx);
            }
            tickets.entry(end).or_default().push(tx);
        }
        self.request(end);
        FlushTicket(rx)
    }

    /// Completes every ticket for an offset at or below `flushed`.
    fn complete_tickets(&self, flushed: u64) {
        let done = {
            let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
            let later = tickets.split_off(&(flushed + 1));
            std::mem::replace(&mut *tickets, later)
        };
        for tx in done.into_values().flatten() {
            let _ = tx.send(());
        }
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
            if now >= deadline || shutdown.is_set() || self.failed.load(Ordering::Acquire) {
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

    /// Flushes up to the current write position and publishes the result. After a failure it
    /// does nothing: see the module doc.
    fn flush_now(&self, log: &CommitLog) {
        if self.failed.load(Ordering::Acquire) {
            return;
        }
        let target = log.max_offset();
        let started = Instant::now();
        let flushed = log.flush(target);
        self.latency.observe(started.elapsed().as_secs_f64());
        match flushed {
            Ok(flushed) => self.complete_tickets(flushed),
            Err(e) => self.fail(e.to_string()),
        }
        let _req = self.requested.lock().unwrap_or_else(|e| e.into_inner());
        self.done.notify_all();
    }

    /// Enters the failed state: records the error and releases every waiter as not flushed.
    fn fail(&self, error: String) {
        tracing::error!(
            %error,
            "commit log flush failed: the store refuses writes until it is reopened"
        );
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
        self.failed.store(true, Ordering::Release);
        let waiting = std::mem::take(&mut *self.tickets.lock().unwrap_or_else(|e| e.into_inner()));
        drop(waiting);
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
            let requested = {
                let req = self.requested.lock().unwrap_or_else(|e| e.into_inner());
                if shutdown.is_set() {
                    *req
                } else {
                    *self
                        .work
                        .wait_timeout(req, cfg.flush_interval)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
            if shutdown.is_set() {
                return;
            }
            let dirty = log.max_offset() - log.flushed_offset();
            let thorough = last_full.elapsed() >= cfg.flush_thorough_interval;
            // Someone waits on a ticket (a slave that acknowledges after fsync): flush now.
            let asked = requested > log.flushed_offset();
            if asked || dirty >= cfg.flush_least_pages * PAGE || (thorough && dirty > 0) {
                self.flush_now(log);
            }
            if thorough {
                last_full = Instant::now();
            }
        }
    }
}
