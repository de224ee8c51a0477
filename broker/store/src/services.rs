//! The store's background threads: dispatcher, flusher, checkpointer, cleaner, prefaulter and
//! segment allocator, started after recovery and stopped (joined) on shutdown.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::core::StoreCore;
use crate::error::{IoContext, Result};
use crate::{dispatch, prefault, retention};

/// The running threads.
#[derive(Default)]
pub(crate) struct Services {
    /// Join handles, joined on [`Services::stop`].
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Services {
    /// Starts every background thread over `core`.
    pub(crate) fn start(&self, core: &Arc<StoreCore>) -> Result<()> {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let spawn = |name: &str, body: fn(&StoreCore)| {
            let core = core.clone();
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(move || body(&core))
                .ctx(|| format!("spawn {name}"))
        };
        threads.push(spawn("store-allocate", |core| {
            core.commit_log.allocator().run()
        })?);
        core.commit_log.prepare_segments()?;
        let dispatcher = spawn("store-dispatch", dispatch::run)?;
        let _ = core.dispatcher.set(dispatcher.thread().clone());
        threads.push(dispatcher);
        threads.push(spawn("store-flush", |core| {
            core.flush
                .run(&core.commit_log, &core.config, &core.shutdown)
        })?);
        threads.push(spawn("store-checkpoint", |core| {
            while !core.shutdown.is_set() {
                core.shutdown
                    .sleep(core.config.consume_queue_flush_interval);
                if let Err(e) = core.checkpoint() {
                    tracing::error!(error = %e, "checkpoint failed");
                }
            }
        })?);
        threads.push(spawn("store-clean", retention::run)?);
        threads.push(spawn("store-prefault", prefault::run)?);
        Ok(())
    }

    /// Wakes every thread (the shutdown signal must already be set) and joins them.
    pub(crate) fn stop(&self, core: &StoreCore) {
        core.flush.request(u64::MAX);
        core.commit_log.allocator().stop();
        if let Some(t) = core.dispatcher.get() {
            t.unpark();
        }
        let threads: Vec<_> = self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for t in threads {
            let _ = t.join();
        }
    }
}
