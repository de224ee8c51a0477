//! QueueReader: how a consumer's records are read from the store, shared by pulls and pops.
//! Reads never run on a runtime worker (a page fault there would park every connection the
//! worker serves), and reads of data not in memory queue for one permit per core.

use std::sync::Arc;
use std::time::Instant;

use conveyor_store::{GetResult, MessageStore, StoreError};
use tokio::sync::Semaphore;

use super::filter::TagFilter;
use super::stats::BrokerStats;

/// Reads records of a queue for consumers.
pub struct QueueReader {
    /// Where messages are read.
    store: Arc<MessageStore>,
    /// Read latencies are observed here.
    stats: Arc<BrokerStats>,
    /// Reads of records not in memory running at once (one per core): many consumers
    /// catching up from the disk then queue here instead of taking every core with page
    /// faults from the producers and the runtime.
    cold_reads: Semaphore,
}

impl QueueReader {
    /// A reader over the store.
    pub fn new(store: Arc<MessageStore>, stats: Arc<BrokerStats>) -> Self {
        Self {
            store,
            stats,
            cold_reads: Semaphore::new(std::thread::available_parallelism().map_or(1, |n| n.get())),
        }
    }

    /// Reads up to `max_count` records (`max_bytes`) of a queue from `offset` that `filter`
    /// selects ([`Self::read_records`]) and times the read.
    pub async fn read(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
        filter: &TagFilter,
    ) -> Result<GetResult, StoreError> {
        let started = Instant::now();
        let r = self
            .read_records(topic, queue_id, offset, max_count, max_bytes, filter)
            .await;
        self.stats.observe_read(started.elapsed());
        r
    }

    /// Reads from the store, always on the blocking pool, never on a runtime worker: through
    /// the mappings when the entries and records are in memory, with positional reads when
    /// they are not (a block the disk cannot read must come back as an error for this pull,
    /// not as a SIGBUS that ends the broker). "In memory" is mincore's word, and mincore also
    /// counts pages the kernel's readahead has only started to read: a consumer catching up
    /// from the disk finds the pages after its last read "resident" while they are still on
    /// their way, and a read through the mapping then waits for the disk in a page fault.
    /// Measured (tests/bench/cold_reads.sh, docs/benchmarks.md): runtime workers parked in
    /// such faults for tens of milliseconds, and a producer served by that worker waited with
    /// them. On the blocking pool such a wait holds up only this pull. Reads of data not in
    /// memory also queue for one of `cold_reads`' permits (one per core).
    async fn read_records(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
        filter: &TagFilter,
    ) -> Result<GetResult, StoreError> {
        let resident = self
            .store
            .is_resident(topic, queue_id, offset, max_count, max_bytes);
        let read_here = move |store: &MessageStore, topic: &str, filter: &TagFilter| {
            if resident {
                Ok(store.get_messages(topic, queue_id, offset, max_count, max_bytes, filter))
            } else {
                store.get_messages_cold(topic, queue_id, offset, max_count, max_bytes, filter)
            }
        };
        let _permit = if resident {
            None
        } else {
            match self.cold_reads.acquire().await {
                Ok(permit) => Some(permit),
                // Closed only as the broker stops: read here.
                Err(_) => return read_here(&self.store, topic, filter),
            }
        };
        let (store, owned_topic, owned_filter) =
            (self.store.clone(), topic.to_string(), filter.clone());
        let read =
            tokio::task::spawn_blocking(move || read_here(&store, &owned_topic, &owned_filter));
        match read.await {
            Ok(r) => r,
            // The blocking pool is gone (runtime shutting down): read here.
            Err(_) => read_here(&self.store, topic, filter),
        }
    }
}
