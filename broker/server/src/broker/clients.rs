//! ClientManager: which producer and consumer instances are alive, over which connection,
//! with which subscriptions. Consumers rebalance from GET_CONSUMER_LIST_BY_GROUP, so every
//! change of a group's membership is pushed to its members (NOTIFY_CONSUMER_IDS_CHANGED);
//! transactional checks need a live connection of a producer group.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use conveyor_protocol::code::request_code;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::route::{
    ConsumeFromWhere, ConsumeType, ConsumerData, MessageModel, SubscriptionData,
};

use crate::remoting::{Connection, ConnectionId};

/// Clients not heard from for this long are dropped (RocketMQ: 120 s).
pub const CLIENT_EXPIRY: Duration = Duration::from_secs(120);

/// One client instance on one connection.
#[derive(Debug, Clone)]
pub struct ClientChannel {
    /// The client instance id (`ip@pid` for Java clients).
    pub client_id: String,
    /// The connection its heartbeats arrive on.
    pub conn: Connection,
    /// The client's language, as its requests say.
    pub language: String,
    /// The client's protocol version.
    pub version: i32,
    /// Last heartbeat.
    pub last_update: Instant,
}

/// A consumer group's live state.
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    /// Push or pull, as the latest heartbeat says.
    pub consume_type: ConsumeType,
    /// Clustering or broadcasting.
    pub message_model: MessageModel,
    /// Where a new member starts.
    pub consume_from_where: ConsumeFromWhere,
    /// topic → the group's subscription to it.
    pub subscriptions: HashMap<String, SubscriptionData>,
    /// The members, by connection.
    pub channels: HashMap<ConnectionId, ClientChannel>,
}

#[derive(Default)]
struct State {
    /// Consumer groups by name.
    consumers: HashMap<String, ConsumerGroup>,
    /// Producer group → its live channels.
    producers: HashMap<String, HashMap<ConnectionId, ClientChannel>>,
}

/// Live producers and consumers.
#[derive(Default)]
pub struct ClientManager {
    /// Both tables under one lock: a heartbeat updates them together.
    state: Mutex<State>,
}

/// Sends NOTIFY_CONSUMER_IDS_CHANGED to each channel.
fn notify(group: &str, channels: &[ClientChannel]) {
    for ch in channels {
        let req = RemotingCommand::request(
            request_code::NOTIFY_CONSUMER_IDS_CHANGED,
            Default::default(),
        )
        .with_ext("consumerGroup", group);
        ch.conn.send_oneway(req);
    }
}

impl ClientManager {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a consumer from a heartbeat. Members are told when the group's membership or
    /// subscriptions changed.
    pub fn register_consumer(
        &self,
        data: &ConsumerData,
        channel: ClientChannel,
        notify_enabled: bool,
    ) {
        let to_notify = {
            let mut s = self.lock();
            let group = s.consumers.entry(data.group_name.clone()).or_default();
            group.consume_type = data.consume_type;
            group.message_model = data.message_model;
            group.consume_from_where = data.consume_from_where;
            let conn_id = channel.conn.id();
            let new_member = match group.channels.get_mut(&conn_id) {
                Some(existing) if existing.client_id == channel.client_id => {
                    existing.last_update = channel.last_update;
                    false
                }
                _ => {
                    group.channels.insert(conn_id, channel);
                    true
                }
            };
            let mut subs_changed = false;
            let new_subs: HashMap<String, SubscriptionData> = data
                .subscription_data_set
                .iter()
                .map(|s| (s.topic.clone(), s.clone()))
                .collect();
            for (topic, sub) in &new_subs {
                match group.subscriptions.get(topic) {
                    Some(old)
                        if old.sub_version >= sub.sub_version
                            && old.sub_string == sub.sub_string => {}
                    _ => {
                        group.subscriptions.insert(topic.clone(), sub.clone());
                        subs_changed = true;
                    }
                }
            }
            // Topics no member subscribes to any more go away (RocketMQ keeps the union of
            // the latest heartbeat; with one subscription set per group that is the latest).
            let before = group.subscriptions.len();
            group.subscriptions.retain(|t, _| new_subs.contains_key(t));
            subs_changed |= before != group.subscriptions.len();
            (new_member || subs_changed) && notify_enabled
        };
        if to_notify {
            if let Some(channels) = self.consumer_channels(&data.group_name) {
                notify(&data.group_name, &channels);
            }
        }
    }

    /// Registers a producer group's channel.
    pub fn register_producer(&self, group: &str, channel: ClientChannel) {
        self.lock()
            .producers
            .entry(group.to_string())
            .or_default()
            .insert(channel.conn.id(), channel);
    }

    /// Removes a client from a consumer group (UNREGISTER_CLIENT) and tells the others.
    pub fn unregister_consumer(&self, group: &str, conn: ConnectionId) {
        let remaining = {
            let mut s = self.lock();
            let Some(g) = s.consumers.get_mut(group) else {
                return;
            };
            if g.channels.remove(&conn).is_none() {
                return;
            }
            let remaining: Vec<ClientChannel> = g.channels.values().cloned().collect();
            if remaining.is_empty() {
                s.consumers.remove(group);
            }
            remaining
        };
        notify(group, &remaining);
    }

    /// Removes a producer channel.
    pub fn unregister_producer(&self, group: &str, conn: ConnectionId) {
        let mut s = self.lock();
        if let Some(g) = s.producers.get_mut(group) {
            g.remove(&conn);
            if g.is_empty() {
                s.producers.remove(group);
            }
        }
    }

    /// Forgets everything registered over a closed connection.
    pub fn connection_closed(&self, conn: ConnectionId) {
        let groups: Vec<String> = self
            .lock()
            .consumers
            .iter()
            .filter(|(_, g)| g.channels.contains_key(&conn))
            .map(|(n, _)| n.clone())
            .collect();
        for g in groups {
            self.unregister_consumer(&g, conn);
        }
        let mut s = self.lock();
        s.producers.retain(|_, chans| {
            chans.remove(&conn);
            !chans.is_empty()
        });
    }

    /// Drops clients silent for longer than `expiry`.
    pub fn expire(&self, now: Instant, expiry: Duration) {
        let stale: Vec<(String, ConnectionId)> = self
            .lock()
            .consumers
            .iter()
            .flat_map(|(name, g)| {
                g.channels
                    .iter()
                    .filter(|(_, c)| {
                        now.duration_since(c.last_update) > expiry || !c.conn.is_open()
                    })
                    .map(|(id, _)| (name.clone(), *id))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (group, conn) in stale {
            tracing::info!(group, conn, "consumer channel expired");
            self.unregister_consumer(&group, conn);
        }
        let mut s = self.lock();
        s.producers.retain(|_, chans| {
            chans.retain(|_, c| now.duration_since(c.last_update) <= expiry && c.conn.is_open());
            !chans.is_empty()
        });
    }

    /// Channels of a consumer group.
    pub fn consumer_channels(&self, group: &str) -> Option<Vec<ClientChannel>> {
        let s = self.lock();
        let g = s.consumers.get(group)?;
        Some(g.channels.values().cloned().collect())
    }

    /// Client ids of a consumer group, sorted and de-duplicated.
    pub fn consumer_ids(&self, group: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .consumer_channels(group)
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.client_id)
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The live state of a consumer group.
    pub fn consumer_group(&self, group: &str) -> Option<ConsumerGroup> {
        self.lock().consumers.get(group).cloned()
    }

    /// How many consumers of `group` are online (0 for a group never seen).
    pub fn consumer_count(&self, group: &str) -> usize {
        self.lock()
            .consumers
            .get(group)
            .map_or(0, |g| g.channels.len())
    }

    /// The group's subscription to `topic`, if a heartbeat registered one.
    pub fn subscription(&self, group: &str, topic: &str) -> Option<SubscriptionData> {
        self.lock()
            .consumers
            .get(group)?
            .subscriptions
            .get(topic)
            .cloned()
    }

    /// Live consumer groups subscribed to `topic`.
    pub fn groups_subscribing(&self, topic: &str) -> Vec<String> {
        self.lock()
            .consumers
            .iter()
            .filter(|(_, g)| g.subscriptions.contains_key(topic))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The live channels of a producer group (`producerConnection`).
    pub fn producer_channels(&self, group: &str) -> Vec<ClientChannel> {
        self.lock()
            .producers
            .get(group)
            .map(|g| g.values().filter(|c| c.conn.is_open()).cloned().collect())
            .unwrap_or_default()
    }

    /// A live connection of a producer group (transaction checks), preferring recent ones.
    pub fn producer_channel(&self, group: &str) -> Option<ClientChannel> {
        let s = self.lock();
        s.producers
            .get(group)?
            .values()
            .filter(|c| c.conn.is_open())
            .max_by_key(|c| c.last_update)
            .cloned()
    }
}
