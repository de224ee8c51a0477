//! Waiting for durability: when an append counts as done. Under SYNC_FLUSH the records must
//! be on disk; on a SYNC_MASTER enough slaves must hold them too (both waits run together).
//! Sends answer with the first shortfall's code; the delay, timer and transaction services
//! persist their progress only once what it counts as done is durable. One helper so every
//! writer agrees.

use std::sync::Arc;

use conveyor_protocol::code::response_code as resp;
use conveyor_store::{FlushMode, MessageStore};

use crate::ha::{Replication, Shortfall};

/// True when the store uses SYNC_FLUSH.
pub fn sync_flush(store: &MessageStore) -> bool {
    store.config().flush_mode == FlushMode::Sync
}

/// Why an append is stored but not (yet) durable as configured. Each is a degraded success
/// in RocketMQ's protocol (the message is stored): clients see the code, never SEND_OK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotDurable {
    /// The flush did not complete within the store's flush timeout.
    #[error("the disk flush timed out")]
    FlushTimeout,
    /// The slaves did not acknowledge (in time, or are not there).
    #[error("{0}")]
    Replica(Shortfall),
}

impl NotDurable {
    /// The RocketMQ response code: FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE or
    /// FLUSH_SLAVE_TIMEOUT.
    pub fn code(self) -> i32 {
        match self {
            NotDurable::FlushTimeout => resp::FLUSH_DISK_TIMEOUT,
            NotDurable::Replica(Shortfall::SlaveNotAvailable) => resp::SLAVE_NOT_AVAILABLE,
            NotDurable::Replica(Shortfall::SlaveTimeout) => resp::FLUSH_SLAVE_TIMEOUT,
        }
    }
}

/// The durability rule of one broker.
#[derive(Debug)]
pub struct Durability {
    /// The store whose flushes are waited for.
    store: Arc<MessageStore>,
    /// The slaves whose acknowledgements are waited for.
    replication: Arc<Replication>,
}

impl Durability {
    /// The rule for `store` replicated by `replication`.
    pub fn new(store: Arc<MessageStore>, replication: Arc<Replication>) -> Self {
        Self { store, replication }
    }

    /// True when an append has anything to wait for (a send cannot be answered inline).
    pub fn waits(&self) -> bool {
        sync_flush(&self.store) || self.replication.is_sync()
    }

    /// The write permit of the delay, timer and transaction services, `None` once this
    /// broker is no longer master (see [`Replication::own_write_permit`]).
    pub async fn own_write_permit(&self) -> Option<tokio::sync::RwLockReadGuard<'_, ()>> {
        self.replication.own_write_permit().await
    }

    /// True when the store uses SYNC_FLUSH.
    pub fn sync_flush(&self) -> bool {
        sync_flush(&self.store)
    }

    /// Waits until the CommitLog below `end` is durable as configured: flushed (SYNC_FLUSH,
    /// at most the store's flush timeout) and held by enough slaves (SYNC_MASTER, at most the
    /// slave timeout).
    pub async fn wait(&self, end: u64) -> Result<(), NotDurable> {
        let flushed = async {
            if !self.sync_flush() {
                return true;
            }
            let ticket = self.store.request_flush(end);
            let timeout = self.store.config().sync_flush_timeout;
            matches!(tokio::time::timeout(timeout, ticket.wait()).await, Ok(true))
        };
        let (flushed, replicated) = tokio::join!(flushed, self.replication.replicated(end));
        if !flushed {
            return Err(NotDurable::FlushTimeout);
        }
        replicated.map_err(NotDurable::Replica)
    }

    /// [`Durability::wait`] for everything appended so far; true when durable.
    pub async fn wait_all(&self) -> bool {
        self.wait(self.store.commit_log_max_offset()).await.is_ok()
    }
}
