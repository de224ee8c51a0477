//! PullHold: long polling. A pull that finds nothing new waits here, woken by the store's
//! dispatcher the moment its queue grows (not by a polling loop), or gives up at the client's
//! suspend timeout.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::sync::Notify;

/// Wake-up points per (topic, queue id).
#[derive(Default)]
pub struct PullHold {
    /// topic → queue id → the notifier held pulls (and delivery loops) wait on.
    queues: RwLock<HashMap<String, HashMap<i32, Arc<Notify>>>>,
}

impl PullHold {
    /// The notifier of a queue (created on first use).
    pub fn notifier(&self, topic: &str, queue_id: i32) -> Arc<Notify> {
        if let Some(n) = self
            .queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .and_then(|q| q.get(&queue_id))
        {
            return n.clone();
        }
        self.queues
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(topic.to_string())
            .or_default()
            .entry(queue_id)
            .or_default()
            .clone()
    }

    /// Wakes every pull waiting on a queue (called from the store's dispatcher thread).
    pub fn arrived(&self, topic: &str, queue_id: i32) {
        if let Some(n) = self
            .queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .and_then(|q| q.get(&queue_id))
        {
            n.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn arrival_wakes_a_registered_waiter() {
        let hold = Arc::new(PullHold::default());
        let n = hold.notifier("T", 1);
        let waiter = n.notified();
        tokio::pin!(waiter);
        waiter.as_mut().enable();
        let h = hold.clone();
        std::thread::spawn(move || h.arrived("T", 1));
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken by the arrival");
    }
}
