//! ConsumerLag: how far each consumer group is behind on each topic, as RocketMQ 5's
//! ConsumerLagCalculator reports it in `rocketmq_consumer_lag_messages` and
//! `rocketmq_consumer_lag_latency`: for every `topic@group` with committed offsets, the sum
//! over its committed queues of (queue end − committed offset), and the store time of the
//! oldest message not consumed yet. Every group with offsets is reported whether or not a
//! consumer is online, so an autoscaler sees the backlog of a group scaled to zero. A queue the
//! group never committed on counts 0, as in RocketMQ's metric (its admin API's ConsumeStats
//! counts such a queue's whole content instead). Of the lag, what the group pulled and did not
//! commit yet is in flight (`rocketmq_consumer_inflight_messages`), the rest ready
//! (`rocketmq_consumer_ready_messages`).
//!
//! Pop consumers (the 5.x SDKs, and 5.x remoting clients in pop mode) commit a queue's offset
//! when they pop, not when they acknowledge: as RocketMQ 5's calculator does for them, what
//! was popped and is not acknowledged yet ([`Popped`]) is added to the lag and counted in
//! flight, and the oldest of it dates the lag.

use std::collections::HashMap;

use conveyor_store::MessageStore;

use super::offsets::{ConsumerOffsetManager, GroupOffsets};
use super::topics::{
    is_forbidden_for_send, AUTO_CREATE_TOPIC, DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX,
    SELF_TEST_TOPIC,
};

/// One consumer group's lag on one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLag {
    /// The consumer group.
    pub group: String,
    /// The topic (a `%RETRY%` topic is reported on its own, `is_retry`).
    pub topic: String,
    /// Messages stored and not consumed yet.
    pub messages: u64,
    /// Of those, the ones pulled by the group and not committed yet (in flight in its
    /// consumers); the rest are ready to be pulled.
    pub inflight: u64,
    /// STORETIMESTAMP of the oldest of them (`None`: no lag, or it is gone).
    pub oldest_store_ms: Option<i64>,
    /// The topic is the group's retry topic.
    pub is_retry: bool,
    /// The topic or the group belongs to the broker itself.
    pub is_system: bool,
    /// (queue id, messages not consumed) of each committed queue, when asked for.
    pub queues: Vec<(i32, u64)>,
}

impl GroupLag {
    /// Age in ms of the oldest message not consumed at `now_ms` (0 without lag).
    pub fn age_ms(&self, now_ms: i64) -> i64 {
        self.oldest_store_ms.map_or(0, |t| (now_ms - t).max(0))
    }
}

/// A group's messages popped from one queue and not acknowledged yet, beyond its committed
/// offset (concurrent Pop; an orderly pop commits only when its batch is done, so its batch
/// is inside the committed lag already).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoppedQueue {
    /// How many.
    pub unacked: u64,
    /// The queue offset of the oldest.
    pub oldest_offset: i64,
}

/// Per (group, topic), the [`PoppedQueue`] of each queue with popped messages unacknowledged.
pub type Popped = HashMap<(String, String), HashMap<i32, PoppedQueue>>;

/// RocketMQ's system topics and groups (`TopicValidator.isSystemTopic`,
/// `MixAll.isSysConsumerGroup`): the broker's own, not an application's.
pub fn is_system(topic: &str, group: &str) -> bool {
    is_forbidden_for_send(topic)
        || topic == AUTO_CREATE_TOPIC
        || topic == SELF_TEST_TOPIC
        || topic.starts_with("rmq_sys_")
        || topic.starts_with("RMQ_SYS_")
        || group.starts_with("CID_RMQ_SYS_")
        || matches!(
            group,
            "TOOLS_CONSUMER" | "FILTERSRV_CONSUMER" | "SELF_TEST_C_GROUP" | "CID_ONS-HTTP-PROXY"
        )
}

/// The lag of every (group, topic) with committed offsets, sorted by group then topic, with
/// each queue's when `per_queue`; `popped` counts in. DLQ topics are left out: nobody
/// consumes them by default.
pub fn consumer_lag(
    offsets: &ConsumerOffsetManager,
    store: &MessageStore,
    popped: &Popped,
    per_queue: bool,
) -> Vec<GroupLag> {
    // Offsets are kept once per topic@group, so each entry is one (group, topic) row.
    let mut lags: Vec<GroupLag> = offsets
        .entries()
        .into_iter()
        .filter(|e| !e.topic.starts_with(DLQ_GROUP_TOPIC_PREFIX))
        .map(
            |GroupOffsets {
                 topic,
                 group,
                 queues,
             }| {
                let mut lag = GroupLag {
                    is_retry: topic.starts_with(RETRY_GROUP_TOPIC_PREFIX),
                    is_system: is_system(&topic, &group),
                    messages: 0,
                    inflight: 0,
                    oldest_store_ms: None,
                    queues: Vec::new(),
                    group,
                    topic,
                };
                // Looked up once per row, and only when anything is popped at all.
                let popped_row = (!popped.is_empty())
                    .then(|| popped.get(&(lag.group.clone(), lag.topic.clone())))
                    .flatten();
                for (queue, committed) in queues {
                    let end = store.max_offset(&lag.topic, queue);
                    let committed = committed.max(0);
                    let pop = popped_row.and_then(|row| row.get(&queue));
                    let unacked = pop.map_or(0, |p| p.unacked);
                    let left = (end - committed).max(0) as u64 + unacked;
                    if per_queue {
                        lag.queues.push((queue, left));
                    }
                    if left == 0 {
                        continue;
                    }
                    lag.messages += left;
                    lag.inflight += unacked;
                    if let Some(pulled) = offsets.pulled(&lag.group, &lag.topic, queue) {
                        lag.inflight += (pulled.min(end) - committed).max(0) as u64;
                    }
                    let oldest = pop.map_or(committed, |p| p.oldest_offset.min(committed));
                    if let Some(t) = store.store_time_at(&lag.topic, queue, oldest) {
                        lag.oldest_store_ms = Some(lag.oldest_store_ms.map_or(t, |o| o.min(t)));
                    }
                }
                lag
            },
        )
        .collect();
    lags.sort_by(|a, b| (&a.group, &a.topic).cmp(&(&b.group, &b.topic)));
    lags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_topics_and_groups_are_told_apart() {
        assert!(is_system("SCHEDULE_TOPIC_XXXX", "g"));
        assert!(is_system("rmq_sys_wheel_timer", "g"));
        assert!(is_system("TBW102", "g"));
        assert!(is_system("Orders", "CID_RMQ_SYS_TRANS"));
        assert!(is_system("Orders", "TOOLS_CONSUMER"));
        assert!(!is_system("Orders", "orders-consumer"));
        assert!(!is_system("%RETRY%orders-consumer", "orders-consumer"));
    }
}
