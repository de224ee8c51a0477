//! FlushService: makes the CommitLog durable, outside the append lock.
//!
//! SYNC_FLUSH is RocketMQ's GroupCommitService: appenders register the offset they need
//! durable and wait; one flusher thread msyncs everything written so far and wakes all whose
//! offsets are covered, so concurrent appends share one flush. ASYNC_FLUSH is the
//! FlushRealTimeService: flush on an interval when enough pages are dirty, and fully now and
//! then.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::config::FlushMode;
use crate::store::Inner;

const PAGE: u64 = 4096;

/// Flush requests and their completion.
#[derive(Default)]
pub(crate) struct FlushSignal {
    /// Highest offset an appender is waiting for.
    requested: Mutex<u64>,
    /// Wakes the flusher.
    work: Condvar,
    /// Wakes waiting appenders.
    done: Condvar,
    /// Flush requests since the flusher last started a flush (group-commit batch size).
    requests: AtomicUsize,
}

impl FlushSignal {
    /// Asks the flusher to make everything below `end` durable (does not wait).
    pub(crate) fn request(&self, end: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut req = self.requested.lock().unwrap_or_else(|e| e.into_inner());
        if end > *req {
            *req = end;
            self.work.notify_one();
        }
    }

    /// Blocks until `inner`'s CommitLog is durable up to `end` or `timeout` passes.
    pub(crate) fn wait(&self, inner: &Inner, end: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut req = self.requested.lock().unwrap_or_else(|e| e.into_inner());
        if end > *req {
            *req = end;
            self.work.notify_one();
        }
        while inner.commit_log.flushed_offset() < end {
            let now = Instant::now();
            if now >= deadline || inner.shutdown.load(Ordering::Acquire) {
                return inner.commit_log.flushed_offset() >= end;
            }
            req = self
                .done
                .wait_timeout(req, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    fn wake_all(&self) {
        let _req = self.requested.lock().unwrap_or_else(|e| e.into_inner());
        self.work.notify_all();
        self.done.notify_all();
    }
}

/// Flushes up to the current write position and publishes the result.
fn flush_now(inner: &Inner) {
    let target = inner.commit_log.max_offset();
    match inner.commit_log.flush(target) {
        Ok(flushed) => {
            inner.flushed_tx.send_if_modified(|v| {
                let changed = *v != flushed;
                *v = flushed;
                changed
            });
        }
        Err(e) => tracing::error!(error = %e, "commit log flush failed"),
    }
    let _req = inner
        .flush
        .requested
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    inner.flush.done.notify_all();
}

/// The flusher thread's body.
pub(crate) fn run(inner: &Inner) {
    match inner.config.flush_mode {
        FlushMode::Sync => group_commit(inner),
        FlushMode::Async => realtime(inner),
    }
    // Final flush on shutdown, whatever the mode.
    flush_now(inner);
    inner.flush.wake_all();
}

fn group_commit(inner: &Inner) {
    let signal = &inner.flush;
    // Size and duration of the previous flush: the appenders it released come back with new
    // requests within a fraction of a flush, so the next flush waits a little for them
    // instead of starting with the first one alone (which would keep batches tiny).
    let mut last_batch = 0usize;
    let mut last_duration = Duration::ZERO;
    loop {
        {
            let mut req = signal.requested.lock().unwrap_or_else(|e| e.into_inner());
            while *req <= inner.commit_log.flushed_offset()
                && !inner.shutdown.load(Ordering::Acquire)
            {
                req = signal
                    .work
                    .wait_timeout(req, Duration::from_millis(10))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        if inner.shutdown.load(Ordering::Acquire) {
            return;
        }
        if last_batch > 1 {
            let gather_until = Instant::now() + (last_duration / 2).min(Duration::from_millis(1));
            while signal.requests.load(Ordering::Relaxed) < last_batch
                && Instant::now() < gather_until
            {
                std::thread::park_timeout(Duration::from_micros(50));
            }
        }
        last_batch = signal.requests.swap(0, Ordering::Relaxed);
        let started = Instant::now();
        flush_now(inner);
        last_duration = started.elapsed();
    }
}

fn realtime(inner: &Inner) {
    let cfg = &inner.config;
    let mut last_full = Instant::now();
    loop {
        {
            let req = inner
                .flush
                .requested
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if !inner.shutdown.load(Ordering::Acquire) {
                let _ = inner.flush.work.wait_timeout(req, cfg.flush_interval);
            }
        }
        if inner.shutdown.load(Ordering::Acquire) {
            return;
        }
        let dirty = inner.commit_log.max_offset() - inner.commit_log.flushed_offset();
        let thorough = last_full.elapsed() >= cfg.flush_thorough_interval;
        if dirty >= cfg.flush_least_pages * PAGE || (thorough && dirty > 0) {
            flush_now(inner);
        }
        if thorough {
            last_full = Instant::now();
        }
    }
}
