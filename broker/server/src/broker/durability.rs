//! Waiting for durability. Under SYNC_FLUSH a handler answers only once what it wrote is on
//! disk, and the delay, timer and transaction services persist their progress only once what
//! it counts as done is; under ASYNC_FLUSH neither waits. One helper so every writer agrees.

use conveyor_store::{FlushMode, MessageStore};

/// True when the store uses SYNC_FLUSH.
pub fn sync_flush(store: &MessageStore) -> bool {
    store.config().flush_mode == FlushMode::Sync
}

/// Under SYNC_FLUSH, waits (at most the store's flush timeout) until the CommitLog is
/// durable up to `end`; `false` on timeout. Always `true` under ASYNC_FLUSH.
pub async fn durable(store: &MessageStore, end: u64) -> bool {
    if !sync_flush(store) {
        return true;
    }
    let ticket = store.request_flush(end);
    let timeout = store.config().sync_flush_timeout;
    matches!(tokio::time::timeout(timeout, ticket.wait()).await, Ok(true))
}
