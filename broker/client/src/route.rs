//! From a topic route (docs/protocol.md §9.1) to the queues a client may use, and the
//! producer's round-robin choice among them.
//!
//! Publish queues: for each queue data with WRITE permission whose broker has a master,
//! queue ids `0..writeQueueNums`. Subscribe queues: READ permission, `0..readQueueNums`.
//! Brokers are taken in name order so every client sees the same list.
//! When a topic has no route yet, producers borrow the TBW102 route with at most
//! `defaultTopicQueueNums` queues per broker (§9.6) and the broker auto-creates the topic.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use conveyor_protocol::route::{perm, QueueData, TopicRouteData};

use conveyor_protocol::route::MessageQueue;

/// Broker name → master address, for every broker of the route that has a master.
pub fn master_addrs(route: &TopicRouteData) -> HashMap<String, String> {
    route
        .broker_datas
        .iter()
        .filter_map(|b| Some((b.broker_name.clone(), b.master_addr()?.to_string())))
        .collect()
}

/// The master address of `broker_name` in `route`.
pub fn master_addr<'a>(route: &'a TopicRouteData, broker_name: &str) -> Option<&'a str> {
    route
        .broker_datas
        .iter()
        .find(|b| b.broker_name == broker_name)
        .and_then(|b| b.master_addr())
}

fn sorted_queue_datas(route: &TopicRouteData) -> Vec<&QueueData> {
    let mut qds: Vec<&QueueData> = route.queue_datas.iter().collect();
    qds.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
    qds
}

fn has_master(route: &TopicRouteData, broker_name: &str) -> bool {
    master_addr(route, broker_name).is_some()
}

fn expand(topic: &str, broker_name: &str, count: i32) -> Vec<MessageQueue> {
    (0..count.max(0))
        .map(|queue_id| MessageQueue {
            broker_name: broker_name.to_string(),
            queue_id,
            topic: topic.to_string(),
        })
        .collect()
}

/// Queues a producer may send `topic`'s messages to.
pub fn publish_queues(topic: &str, route: &TopicRouteData) -> Vec<MessageQueue> {
    sorted_queue_datas(route)
        .into_iter()
        .filter(|qd| qd.perm & perm::WRITE != 0 && has_master(route, &qd.broker_name))
        .flat_map(|qd| expand(topic, &qd.broker_name, qd.write_queue_nums))
        .collect()
}

/// Queues a consumer may pull `topic`'s messages from.
pub fn subscribe_queues(topic: &str, route: &TopicRouteData) -> Vec<MessageQueue> {
    sorted_queue_datas(route)
        .into_iter()
        .filter(|qd| qd.perm & perm::READ != 0)
        .flat_map(|qd| expand(topic, &qd.broker_name, qd.read_queue_nums))
        .collect()
}

/// Queues for sending to a `topic` without route through the default (TBW102) route:
/// every broker serving the default topic writably, with `min(queue_nums, readQueueNums)`
/// queues each.
pub fn default_topic_queues(
    topic: &str,
    default_route: &TopicRouteData,
    queue_nums: i32,
) -> Vec<MessageQueue> {
    sorted_queue_datas(default_route)
        .into_iter()
        .filter(|qd| qd.perm & perm::WRITE != 0 && has_master(default_route, &qd.broker_name))
        .flat_map(|qd| expand(topic, &qd.broker_name, queue_nums.min(qd.read_queue_nums)))
        .collect()
}

/// Round-robin queue choice, starting at a random position so that many short-lived
/// producers spread over the queues.
#[derive(Debug)]
pub struct QueueSelector {
    next: AtomicUsize,
}

impl Default for QueueSelector {
    fn default() -> Self {
        Self::new()
    }
}

impl QueueSelector {
    /// A selector starting at a random position.
    pub fn new() -> Self {
        Self::starting_at(rand::random::<u16>() as usize)
    }

    /// A selector starting at `start` (deterministic, for tests).
    pub fn starting_at(start: usize) -> Self {
        Self {
            next: AtomicUsize::new(start),
        }
    }

    /// The next queue in turn. With `avoid_broker` (the broker of a failed attempt), queues
    /// of that broker are skipped unless no other broker has one.
    pub fn select<'a>(
        &self,
        queues: &'a [MessageQueue],
        avoid_broker: Option<&str>,
    ) -> Option<&'a MessageQueue> {
        if queues.is_empty() {
            return None;
        }
        let n = queues.len();
        if let Some(avoid) = avoid_broker {
            for _ in 0..n {
                let i = self.next.fetch_add(1, Ordering::Relaxed) % n;
                if queues[i].broker_name != avoid {
                    return Some(&queues[i]);
                }
            }
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % n;
        Some(&queues[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conveyor_protocol::route::BrokerData;
    use std::collections::BTreeMap;

    fn broker(name: &str, master: Option<&str>) -> BrokerData {
        let mut addrs = BTreeMap::new();
        if let Some(m) = master {
            addrs.insert(0, m.to_string());
        }
        addrs.insert(1, format!("{name}-slave:10911"));
        BrokerData {
            broker_addrs: addrs,
            broker_name: name.into(),
            cluster: "DefaultCluster".into(),
            ..Default::default()
        }
    }

    fn qd(name: &str, perm: i32, read: i32, write: i32) -> QueueData {
        QueueData {
            broker_name: name.into(),
            perm,
            read_queue_nums: read,
            write_queue_nums: write,
            topic_sys_flag: 0,
        }
    }

    fn route() -> TopicRouteData {
        TopicRouteData {
            broker_datas: vec![
                broker("broker-b", Some("b:10911")),
                broker("broker-a", Some("a:10911")),
                broker("broker-c", None),
                broker("broker-d", Some("d:10911")),
            ],
            queue_datas: vec![
                qd("broker-b", perm::READ_WRITE, 2, 3),
                qd("broker-a", perm::READ_WRITE, 2, 2),
                qd("broker-c", perm::READ_WRITE, 1, 1), // no master
                qd("broker-d", perm::READ, 1, 4),       // read-only
            ],
            ..Default::default()
        }
    }

    fn ids(qs: &[MessageQueue]) -> Vec<(String, i32)> {
        qs.iter()
            .map(|q| (q.broker_name.clone(), q.queue_id))
            .collect()
    }

    #[test]
    fn publish_and_subscribe_lists() {
        let r = route();
        let p = publish_queues("T", &r);
        assert!(p.iter().all(|q| q.topic == "T"));
        assert_eq!(
            ids(&p),
            vec![
                ("broker-a".into(), 0),
                ("broker-a".into(), 1),
                ("broker-b".into(), 0),
                ("broker-b".into(), 1),
                ("broker-b".into(), 2),
            ]
        );
        let s = subscribe_queues("T", &r);
        assert_eq!(
            ids(&s),
            vec![
                ("broker-a".into(), 0),
                ("broker-a".into(), 1),
                ("broker-b".into(), 0),
                ("broker-b".into(), 1),
                ("broker-c".into(), 0),
                ("broker-d".into(), 0),
            ]
        );
        let addrs = master_addrs(&r);
        assert_eq!(addrs.get("broker-a").map(String::as_str), Some("a:10911"));
        assert!(!addrs.contains_key("broker-c"));
        assert_eq!(master_addr(&r, "broker-d"), Some("d:10911"));
        assert_eq!(master_addr(&r, "nope"), None);
    }

    #[test]
    fn tbw102_fallback_caps_queue_count() {
        let tbw = TopicRouteData {
            broker_datas: vec![broker("broker-a", Some("a:10911"))],
            queue_datas: vec![qd("broker-a", perm::READ_WRITE | perm::INHERIT, 8, 8)],
            ..Default::default()
        };
        let q = default_topic_queues("NewTopic", &tbw, 4);
        assert_eq!(q.len(), 4);
        assert!(q.iter().all(|q| q.topic == "NewTopic"));
        let q = default_topic_queues("NewTopic", &tbw, 16);
        assert_eq!(q.len(), 8);
    }

    #[test]
    fn round_robin_and_avoidance() {
        let r = route();
        let p = publish_queues("T", &r);
        let sel = QueueSelector::starting_at(0);
        let picked: Vec<i32> = (0..6)
            .map(|_| sel.select(&p, None).map(|q| q.queue_id).unwrap_or(-1))
            .collect();
        assert_eq!(picked, vec![0, 1, 0, 1, 2, 0]);
        // after a failure on broker-a, only broker-b queues are chosen
        let sel = QueueSelector::starting_at(0);
        for _ in 0..10 {
            let q = sel
                .select(&p, Some("broker-a"))
                .map(|q| q.broker_name.clone());
            assert_eq!(q.as_deref(), Some("broker-b"));
        }
        // if the avoided broker is the only one, it is still used
        let only_a: Vec<_> = p
            .iter()
            .filter(|q| q.broker_name == "broker-a")
            .cloned()
            .collect();
        assert!(sel.select(&only_a, Some("broker-a")).is_some());
        assert!(sel.select(&[], None).is_none());
    }
}
