//! A clustering consumer: the members of one consumer group share a topic's read queues, as
//! RocketMQ's push consumers do. Every rebalance interval each member heartbeats, asks a
//! broker for the group's members, and takes its share of the queues by RocketMQ's average
//! allocation (sorted queues, sorted client ids, contiguous blocks); it pulls the queues it
//! owns from the group's committed offset and commits after handling each batch. What it
//! handles goes to a handler; a member that stops mid-batch leaves its queue to the next
//! owner from the last commit, so delivery is at least once.

use std::collections::BTreeMap;
use std::time::Duration;

use conveyor_protocol::code::request_code;
use conveyor_protocol::command::{ExtFields, RemotingCommand};
use conveyor_protocol::route::{ConsumerListBody, MessageQueue};
use tokio_util::sync::CancellationToken;

use crate::consumer::{PullConsumer, PullStatus};
use crate::error::Result;
use conveyor_protocol::message::StoredMessage;

/// RocketMQ's AllocateMessageQueueAveragely: the queues `client` owns among `clients`.
/// Both lists are sorted here, so every member computes the same split.
pub fn allocate_averagely(
    queues: &[MessageQueue],
    clients: &[String],
    client: &str,
) -> Vec<MessageQueue> {
    let mut queues = queues.to_vec();
    queues.sort_by(|a, b| (&a.broker_name, a.queue_id).cmp(&(&b.broker_name, b.queue_id)));
    let mut clients = clients.to_vec();
    clients.sort();
    let Some(index) = clients.iter().position(|c| c == client) else {
        return Vec::new();
    };
    let (n, m) = (queues.len(), clients.len());
    if n == 0 {
        return Vec::new();
    }
    let rest = n % m;
    let size = if n <= m {
        1
    } else if rest > 0 && index < rest {
        n / m + 1
    } else {
        n / m
    };
    let start = if rest > 0 && index < rest {
        index * size
    } else {
        index * size + rest
    };
    (0..size.min(n.saturating_sub(start)))
        .map(|i| queues[(start + i) % n].clone())
        .collect()
}

/// How a member runs.
#[derive(Debug, Clone, Copy)]
pub struct MemberConfig {
    /// How often it rebalances (RocketMQ: 20 s; tests use less).
    pub rebalance: Duration,
    /// Time it spends per message (a slow consumer, for tests of backlog).
    pub per_message: Duration,
}

/// Runs `consumer` as a member of its group on `topic` until `stop`: rebalancing every
/// `config.rebalance`, handing every message of its queues to `handle` and committing after
/// each batch. A queue the group has no offset for is read from its start.
pub async fn run_member<F>(
    consumer: &PullConsumer,
    topic: &str,
    config: MemberConfig,
    stop: CancellationToken,
    mut handle: F,
) -> Result<()>
where
    F: FnMut(&StoredMessage),
{
    consumer.subscribe(topic, "*")?;
    // Owned queues with the next offset to pull.
    let mut owned: BTreeMap<(String, i32), (MessageQueue, i64)> = BTreeMap::new();
    let mut next_rebalance = tokio::time::Instant::now();
    while !stop.is_cancelled() {
        if tokio::time::Instant::now() >= next_rebalance {
            next_rebalance = tokio::time::Instant::now() + config.rebalance;
            // A failed rebalance (a broker or name server away) keeps the queues owned and is
            // tried again at the next interval, as RocketMQ's RebalanceService does.
            if let Err(e) = rebalance(consumer, topic, &mut owned).await {
                tracing::warn!(error = %e, topic, "rebalance failed; retrying");
            }
        }
        let mut idle = true;
        let mut lost = Vec::new();
        for (key, (q, offset)) in owned.iter_mut() {
            match pull_once(consumer, q, offset, config.per_message, &mut handle).await {
                Ok(moved) => idle &= !moved,
                // The queue went away (shrunk, or its broker is gone): dropped until a
                // rebalance hands it out again.
                Err(e) => {
                    tracing::warn!(error = %e, queue = ?q, "pull failed; the queue is dropped until the next rebalance");
                    lost.push(key.clone());
                }
            }
        }
        for key in lost {
            owned.remove(&key);
        }
        if idle {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50).min(config.rebalance)) => {}
                _ = stop.cancelled() => {}
            }
        }
    }
    Ok(())
}

/// The queues owned by `owned` become this member's share: heartbeat, the group's members,
/// the topic's read queues, the average allocation; a newly owned queue starts at the
/// group's committed offset (its first offset when there is none).
async fn rebalance(
    consumer: &PullConsumer,
    topic: &str,
    owned: &mut BTreeMap<(String, i32), (MessageQueue, i64)>,
) -> Result<()> {
    let brokers = consumer.heartbeat().await?;
    let queues = consumer.fetch_queues(topic).await?;
    let members = match brokers.first() {
        Some(addr) => members(consumer, addr).await?,
        None => Vec::new(),
    };
    let mine = allocate_averagely(&queues, &members, consumer.client_id());
    owned.retain(|k, _| {
        mine.iter()
            .any(|q| (&q.broker_name, q.queue_id) == (&k.0, k.1))
    });
    for q in mine {
        if let std::collections::btree_map::Entry::Vacant(slot) =
            owned.entry((q.broker_name.clone(), q.queue_id))
        {
            let from = match consumer.query_offset(&q).await? {
                Some(o) => o,
                None => consumer.min_offset(&q).await?,
            };
            slot.insert((q, from));
        }
    }
    Ok(())
}

/// One pull of `q` from `offset`: handles the messages, takes the per-message time, commits,
/// and moves `offset`. True when the offset moved.
async fn pull_once<F>(
    consumer: &PullConsumer,
    q: &MessageQueue,
    offset: &mut i64,
    per_message: Duration,
    handle: &mut F,
) -> Result<bool>
where
    F: FnMut(&StoredMessage),
{
    let r = consumer.pull(q, *offset, 32, Duration::ZERO).await?;
    if r.status == PullStatus::OffsetIllegal {
        *offset = r.next_begin_offset;
        return Ok(true);
    }
    for m in &r.messages {
        handle(m);
    }
    if !per_message.is_zero() && !r.messages.is_empty() {
        tokio::time::sleep(per_message * r.messages.len() as u32).await;
    }
    if r.next_begin_offset == *offset {
        return Ok(false);
    }
    *offset = r.next_begin_offset;
    consumer.commit_offset(q, *offset).await?;
    Ok(true)
}

/// The client ids of the group's live members, as a broker knows them.
async fn members(consumer: &PullConsumer, addr: &str) -> Result<Vec<String>> {
    let request =
        RemotingCommand::request(request_code::GET_CONSUMER_LIST_BY_GROUP, ExtFields::new())
            .with_ext("consumerGroup", &consumer.config().group);
    let response = consumer
        .remoting()
        .invoke_ok(addr, request, consumer.config().request_timeout)
        .await?;
    let body: ConsumerListBody = conveyor_protocol::json::from_slice(&response.body)?;
    Ok(body.consumer_id_list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(n: i32) -> Vec<MessageQueue> {
        (0..n)
            .map(|i| MessageQueue {
                topic: "T".into(),
                broker_name: if i % 2 == 0 { "b0" } else { "b1" }.into(),
                queue_id: i / 2,
            })
            .collect()
    }

    #[test]
    fn every_queue_is_owned_by_exactly_one_member() {
        for n in 1..12 {
            for m in 1..6 {
                let clients: Vec<String> = (0..m).map(|i| format!("c{i}")).collect();
                let mut all: Vec<_> = clients
                    .iter()
                    .flat_map(|c| allocate_averagely(&queues(n), &clients, c))
                    .collect();
                all.sort_by(|a, b| (&a.broker_name, a.queue_id).cmp(&(&b.broker_name, b.queue_id)));
                let mut want = queues(n);
                want.sort_by(|a, b| {
                    (&a.broker_name, a.queue_id).cmp(&(&b.broker_name, b.queue_id))
                });
                if n as usize >= m {
                    assert_eq!(all, want, "{n} queues, {m} members");
                } else {
                    assert_eq!(
                        all.len(),
                        n as usize,
                        "{n} queues, {m} members: one each, the rest idle"
                    );
                }
            }
        }
    }

    #[test]
    fn blocks_are_contiguous_and_the_first_members_take_the_remainder() {
        let clients = ["c0".to_string(), "c1".into(), "c2".into()];
        let ids = |c: &str| -> Vec<(String, i32)> {
            allocate_averagely(&queues(8), &clients, c)
                .into_iter()
                .map(|q| (q.broker_name, q.queue_id))
                .collect()
        };
        // Sorted: b0/0 b0/1 b0/2 b0/3 b1/0 b1/1 b1/2 b1/3; 8 = 3 + 3 + 2.
        assert_eq!(
            ids("c0"),
            [("b0".into(), 0), ("b0".into(), 1), ("b0".into(), 2)]
        );
        assert_eq!(
            ids("c1"),
            [("b0".into(), 3), ("b1".into(), 0), ("b1".into(), 1)]
        );
        assert_eq!(ids("c2"), [("b1".into(), 2), ("b1".into(), 3)]);
        assert!(allocate_averagely(&queues(8), &clients, "stranger").is_empty());
    }
}
