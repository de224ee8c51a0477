//! ConsumeAdmin: what operators ask and change about consumption on a broker, from `mqadmin`
//! and `conveyor admin`: a group's progress (`consumerProgress`, `brokerConsumeStats`), who is
//! connected (`consumerConnection`, `producerConnection`, `consumerStatus`), moving offsets
//! (`resetOffsetByTime`, `skipAccumulatedMessage`, `cloneGroupOffset`) and a queue's raw
//! entries (`queryCq`). Kept apart from the topic and group tables of [`super::admin`]: these
//! read the consumption state that the offset, client and store services own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use conveyor_protocol::code::{request_code, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::header::admin::{
    CloneGroupOffsetRequestHeader, GetConsumeStatsRequestHeader,
    GetConsumerConnectionListRequestHeader, GetConsumerRunningInfoRequestHeader,
    GetProducerConnectionListRequestHeader, QueryConsumeQueueRequestHeader,
    ResetOffsetRequestHeader,
};
use conveyor_protocol::json;
use conveyor_protocol::route::SubscriptionData;
use conveyor_protocol::route::{ConsumeFromWhere, ConsumeType, MessageModel, MessageQueue};
use conveyor_store::MessageStore;
use serde::Serialize;

use super::admin::mq_keyed_map;
use super::clients::{ClientChannel, ClientManager};
use super::offsets::ConsumerOffsetManager;
use super::pop::PopService;
use super::reply::{bad_header, error_response, internal, ok, Reply};
use super::topics::TopicConfigManager;
use crate::remoting::CallError;

/// How long the broker waits for a client to answer a question forwarded to it (RocketMQ's
/// broker waits 10 s, longer than mqadmin 5.x's own 5 s, which then reports a bare timeout;
/// under mqadmin's deadline the broker's answer names the client).
const CLIENT_ANSWER_TIMEOUT: Duration = Duration::from_millis(4500);

/// Most ConsumeQueue entries one `queryCq` returns.
const MAX_QUERY_CQ_ENTRIES: i32 = 1000;

/// One queue's line of RocketMQ's ConsumeStats.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OffsetWrapper {
    broker_offset: i64,
    consumer_offset: i64,
    pull_offset: i64,
    last_timestamp: i64,
}

/// RocketMQ's Connection.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConnectionInfo {
    client_id: String,
    client_addr: String,
    language: String,
    version: i32,
}

impl From<&ClientChannel> for ConnectionInfo {
    fn from(c: &ClientChannel) -> Self {
        Self {
            client_id: c.client_id.clone(),
            client_addr: c.conn.peer().to_string(),
            language: c.language.clone(),
            version: c.version,
        }
    }
}

/// RocketMQ's ConsumerConnection.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConsumerConnection {
    connection_set: Vec<ConnectionInfo>,
    subscription_table: BTreeMap<String, SubscriptionData>,
    consume_type: ConsumeType,
    message_model: MessageModel,
    consume_from_where: ConsumeFromWhere,
}

/// RocketMQ's ProducerConnection.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ProducerConnection {
    connection_set: Vec<ConnectionInfo>,
}

/// RocketMQ's ConsumeQueueData: one entry of a ConsumeQueue (its extension fields
/// `extendDataJson`, `bitMap` and `msg` are absent: Conveyor keeps no ConsumeQueue extension).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConsumeQueueData {
    physic_offset: i64,
    physic_size: i32,
    tags_code: i64,
    eval: bool,
}

/// RocketMQ's QueryConsumeQueueResponseBody.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct QueryConsumeQueueBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    subscription_data: Option<SubscriptionData>,
    /// `<group>@<topic> is not online!` when the group named has no live subscription.
    #[serde(skip_serializing_if = "Option::is_none")]
    filter_data: Option<String>,
    queue_data: Vec<ConsumeQueueData>,
    max_queue_index: i64,
    min_queue_index: i64,
}

/// What [`ConsumeAdmin`] reads and changes.
pub struct ConsumeAdminDeps {
    /// The broker group's name (`brokerName` of every MessageQueue).
    pub broker_name: String,
    /// The advertised `ip:port` (`brokerAddr` of brokerConsumeStats).
    pub broker_addr: String,
    /// Queue offsets and entries.
    pub store: Arc<MessageStore>,
    /// The topic table (queue counts, order).
    pub topics: Arc<TopicConfigManager>,
    /// Committed offsets.
    pub offsets: Arc<ConsumerOffsetManager>,
    /// Live producers and consumers.
    pub clients: Arc<ClientManager>,
    /// Pop consumers' messages in flight (counted in a group's progress).
    pub pop: Arc<PopService>,
}

/// The consumption admin requests.
pub struct ConsumeAdmin {
    /// The broker group's name.
    broker_name: String,
    /// The advertised address.
    broker_addr: String,
    /// Queue offsets and entries.
    store: Arc<MessageStore>,
    /// The topic table.
    topics: Arc<TopicConfigManager>,
    /// Committed offsets.
    offsets: Arc<ConsumerOffsetManager>,
    /// Live producers and consumers.
    clients: Arc<ClientManager>,
    /// Pop consumers' messages in flight.
    pop: Arc<PopService>,
}

impl ConsumeAdmin {
    /// A processor over the broker's consumption state.
    pub fn new(deps: ConsumeAdminDeps) -> Self {
        Self {
            broker_name: deps.broker_name,
            broker_addr: deps.broker_addr,
            store: deps.store,
            topics: deps.topics,
            offsets: deps.offsets,
            clients: deps.clients,
            pop: deps.pop,
        }
    }

    fn mq(&self, topic: &str, queue_id: i32) -> MessageQueue {
        MessageQueue {
            topic: topic.to_string(),
            broker_name: self.broker_name.clone(),
            queue_id,
        }
    }

    /// Topics a group has offsets on, with those of its live subscriptions.
    fn topics_of_group(&self, group: &str) -> Vec<String> {
        let mut topics: Vec<String> = self
            .offsets
            .offsets_of_group(group)
            .into_iter()
            .map(|(t, _, _)| t)
            .collect();
        if let Some(g) = self.clients.consumer_group(group) {
            topics.extend(g.subscriptions.into_keys());
        }
        topics.sort();
        topics.dedup();
        topics
    }

    /// RocketMQ's ConsumeStats of `group` on `topics` (JSON with MessageQueue keys) and its
    /// total lag.
    fn consume_stats_of(
        &self,
        group: &str,
        topics: &[String],
    ) -> Result<(Vec<u8>, i64), json::JsonError> {
        let mut entries = Vec::new();
        let mut diff = 0;
        let popped = self.pop.popped();
        for topic in topics {
            let Some(config) = self.topics.get(topic) else {
                continue;
            };
            let popped_row = popped.get(&(group.to_string(), topic.clone()));
            for q in 0..config.read_queue_nums.max(config.write_queue_nums) {
                let broker_offset = self.store.max_offset(topic, q);
                let committed = self.offsets.query(group, topic, q).unwrap_or(0).max(0);
                // A pop commits when it pops: as RocketMQ 5's lag calculator, the messages it
                // holds unacknowledged are taken off the consumer offset (so they count in the
                // diff) and shown in flight (pull offset − consumer offset).
                let unacked = popped_row
                    .and_then(|row| row.get(&q))
                    .map_or(0, |p| p.unacked as i64);
                let consumer_offset = (committed - unacked).max(0);
                let last_timestamp = if consumer_offset > 0 {
                    self.store
                        .store_time_at(topic, q, consumer_offset - 1)
                        .unwrap_or(0)
                } else {
                    0
                };
                diff += (broker_offset - consumer_offset).max(0);
                entries.push((
                    self.mq(topic, q),
                    OffsetWrapper {
                        broker_offset,
                        consumer_offset,
                        pull_offset: self
                            .offsets
                            .pulled(group, topic, q)
                            .unwrap_or(committed)
                            .max(committed),
                        last_timestamp,
                    },
                ));
            }
        }
        let body = mq_keyed_map(
            "offsetTable",
            &entries,
            &[("consumeTps", serde_json::json!(0.0))],
        )?;
        Ok((body, diff))
    }

    /// GET_CONSUME_STATS (`consumerProgress`): a group's progress on every queue of its topics.
    pub fn consume_stats(&self, req: &RemotingCommand) -> Reply {
        let h = GetConsumeStatsRequestHeader::parse(req).map_err(bad_header(req))?;
        let group = h.consumer_group.as_str();
        let topics = match &h.topic {
            Some(t) => vec![t.clone()],
            None => self.topics_of_group(group),
        };
        let (body, _) = self
            .consume_stats_of(group, &topics)
            .map_err(internal(req))?;
        Ok(ok(req).with_body(body))
    }

    /// GET_BROKER_CONSUME_STATS (`brokerConsumeStats`): the progress of every group with
    /// offsets on this broker, one ConsumeStats per (group, topic); with `isOrder` only ordered
    /// topics. A live group is shown only on the topics it subscribes to now (as RocketMQ).
    pub fn broker_consume_stats(&self, req: &RemotingCommand) -> Reply {
        let only_ordered = req
            .get_bool_opt("isOrder")
            .map_err(bad_header(req))?
            .unwrap_or(false);
        let mut total_diff = 0i64;
        let mut groups_json = Vec::new();
        for group in self.offsets.groups() {
            let live = self.clients.consumer_group(&group);
            let mut stats = Vec::new();
            let mut topics: Vec<String> = self
                .offsets
                .offsets_of_group(&group)
                .into_iter()
                .map(|(t, _, _)| t)
                .collect();
            topics.sort();
            topics.dedup();
            for topic in topics {
                let Some(config) = self.topics.get(&topic) else {
                    continue;
                };
                if only_ordered && !config.order {
                    continue;
                }
                if let Some(g) = &live {
                    if !g.subscriptions.is_empty() && !g.subscriptions.contains_key(&topic) {
                        continue;
                    }
                }
                let (body, diff) = self
                    .consume_stats_of(&group, std::slice::from_ref(&topic))
                    .map_err(internal(req))?;
                total_diff += diff;
                stats.push(String::from_utf8_lossy(&body).into_owned());
            }
            groups_json.push(format!(
                "{{{}:[{}]}}",
                json::to_string(&group).map_err(internal(req))?,
                stats.join(",")
            ));
        }
        let body = format!(
            "{{\"brokerAddr\":{},\"consumeStatsList\":[{}],\"totalDiff\":{},\"totalInflightDiff\":0}}",
            json::to_string(&self.broker_addr).map_err(internal(req))?,
            groups_json.join(","),
            total_diff
        );
        Ok(ok(req).with_body(body.into_bytes()))
    }

    /// INVOKE_BROKER_TO_RESET_OFFSET (mqadmin `resetOffsetByTime`, `skipAccumulatedMessage`):
    /// the group's offset on every readable queue of the topic moves to the first message
    /// stored at or after `timestamp` (-1: the queue's end); without `isForce` only backwards, as
    /// RocketMQ's `Broker2Client.resetOffset`. RocketMQ walks the write queues only; a topic
    /// whose queues are being shrunk (read above write) keeps a backlog on its read-only queues
    /// that consumers still read, so those move too. The broker commits the new offsets itself (as
    /// RocketMQ 5 with `useServerSideResetOffset`), so the reset holds with no consumer online,
    /// and tells every running consumer of the group (RESET_CONSUMER_CLIENT_OFFSET, the
    /// offsets in the body), which jump to them. The answer lists the offsets.
    pub fn reset_offset(&self, req: &RemotingCommand) -> Reply {
        let h = ResetOffsetRequestHeader::parse(req).map_err(bad_header(req))?;
        let Some(config) = self.topics.get(&h.topic) else {
            return Err(error_response(
                req,
                resp::SYSTEM_ERROR,
                format!(
                    "[reset-offset] reset offset failed, no topic in this broker. topic={}",
                    h.topic
                ),
            ));
        };
        // As RocketMQ: a group without offsets on the topic has nothing to reset. A queue it
        // never committed on counts from 0.
        let has_offsets = self
            .offsets
            .offsets_of_group(&h.group)
            .iter()
            .any(|(t, _, _)| *t == h.topic);
        if !has_offsets {
            return Err(error_response(
                req,
                resp::SYSTEM_ERROR,
                format!(
                    "the consumer group <{}> has no offsets on topic {}: nothing to reset",
                    h.group, h.topic
                ),
            ));
        }
        let mut table = Vec::new();
        for q in 0..config.read_queue_nums.max(config.write_queue_nums) {
            let committed = self.offsets.query(&h.group, &h.topic, q).unwrap_or(0);
            let target = if h.timestamp == -1 {
                self.store.max_offset(&h.topic, q)
            } else {
                self.store.offset_by_time(&h.topic, q, h.timestamp)
            }
            .max(0);
            let offset = if h.is_force || target < committed {
                target
            } else {
                committed
            };
            table.push((self.mq(&h.topic, q), offset));
        }
        for (mq, offset) in &table {
            self.offsets
                .commit(&h.group, &h.topic, mq.queue_id, *offset);
        }
        let body = mq_keyed_map("offsetTable", &table, &[]).map_err(internal(req))?;
        let notice = RemotingCommand::request(
            request_code::RESET_CONSUMER_CLIENT_OFFSET,
            h.to_ext_fields(),
        )
        .with_body(body.clone());
        if let Some(group) = self.clients.consumer_group(&h.group) {
            for channel in group.channels.values() {
                channel.conn.send_oneway(notice.clone());
            }
        }
        tracing::info!(group = %h.group, topic = %h.topic, timestamp = h.timestamp, force = h.is_force, "consumer offsets reset");
        Ok(ok(req).with_body(body))
    }

    /// CLONE_GROUP_OFFSET (`cloneGroupOffset`): `destGroup` gets `srcGroup`'s committed offsets
    /// on the topic (every topic of `srcGroup` without one). Unless `offline`, a topic the live
    /// source group no longer subscribes to is skipped (as RocketMQ).
    pub fn clone_group_offset(&self, req: &RemotingCommand) -> Reply {
        let h = CloneGroupOffsetRequestHeader::parse(req).map_err(bad_header(req))?;
        let source = self.offsets.offsets_of_group(&h.src_group);
        let live = (!h.offline)
            .then(|| self.clients.consumer_group(&h.src_group))
            .flatten()
            .filter(|g| !g.subscriptions.is_empty());
        let mut cloned = 0;
        for (topic, queue_id, offset) in source {
            if h.topic.as_ref().is_some_and(|t| *t != topic) || self.topics.get(&topic).is_none() {
                continue;
            }
            if live
                .as_ref()
                .is_some_and(|g| !g.subscriptions.contains_key(&topic))
            {
                continue;
            }
            self.offsets.commit(&h.dest_group, &topic, queue_id, offset);
            cloned += 1;
        }
        tracing::info!(src = %h.src_group, dest = %h.dest_group, topic = ?h.topic, queues = cloned, "consumer offsets cloned");
        Ok(ok(req))
    }

    /// QUERY_CONSUME_QUEUE (`queryCq`): up to `count` entries of a ConsumeQueue from `index`,
    /// with the group's live subscription when a group is named (RocketMQ's answer: entries are
    /// not evaluated against it without a ConsumeQueue extension, so `eval` is false).
    pub fn query_consume_queue(&self, req: &RemotingCommand) -> Reply {
        let h = QueryConsumeQueueRequestHeader::parse(req).map_err(bad_header(req))?;
        let exists = self
            .topics
            .get(&h.topic)
            .is_some_and(|c| (0..c.read_queue_nums.max(c.write_queue_nums)).contains(&h.queue_id));
        if !exists {
            return Err(error_response(
                req,
                resp::SYSTEM_ERROR,
                format!("{}@{} is not exist!", h.queue_id, h.topic),
            ));
        }
        let subscription = h
            .consumer_group
            .as_ref()
            .and_then(|g| self.clients.subscription(g, &h.topic));
        let filter_data = match (&h.consumer_group, &subscription) {
            (Some(g), None) => Some(format!("{g}@{} is not online!", h.topic)),
            _ => None,
        };
        let (min, max) = (
            self.store.min_offset(&h.topic, h.queue_id),
            self.store.max_offset(&h.topic, h.queue_id),
        );
        let from = h.index.max(min);
        let to = max.min(from.saturating_add(h.count.clamp(0, MAX_QUERY_CQ_ENTRIES) as i64));
        let queue_data = (from..to)
            .filter_map(|o| self.store.queue_entry(&h.topic, h.queue_id, o))
            .map(|e| ConsumeQueueData {
                physic_offset: e.physical_offset as i64,
                physic_size: e.size as i32,
                tags_code: e.tag_code,
                eval: false,
            })
            .collect();
        let body = QueryConsumeQueueBody {
            subscription_data: subscription,
            filter_data,
            queue_data,
            max_queue_index: max,
            min_queue_index: min,
        };
        Ok(ok(req).with_body(json::to_vec(&body).map_err(internal(req))?))
    }

    /// GET_CONSUMER_CONNECTION_LIST (`consumerConnection`): a live group's members and
    /// subscriptions.
    pub fn consumer_connections(&self, req: &RemotingCommand) -> Reply {
        let h = GetConsumerConnectionListRequestHeader::parse(req).map_err(bad_header(req))?;
        let group = h.consumer_group.as_str();
        let Some(g) = self.clients.consumer_group(group) else {
            return Err(error_response(
                req,
                resp::CONSUMER_NOT_ONLINE,
                format!("the consumer group[{group}] not online"),
            ));
        };
        let body = ConsumerConnection {
            connection_set: g.channels.values().map(ConnectionInfo::from).collect(),
            subscription_table: g.subscriptions.into_iter().collect(),
            consume_type: g.consume_type,
            message_model: g.message_model,
            consume_from_where: g.consume_from_where,
        };
        Ok(ok(req).with_body(json::to_vec(&body).map_err(internal(req))?))
    }

    /// GET_PRODUCER_CONNECTION_LIST (`producerConnection`): a producer group's live clients.
    pub fn producer_connections(&self, req: &RemotingCommand) -> Reply {
        let h = GetProducerConnectionListRequestHeader::parse(req).map_err(bad_header(req))?;
        let channels = self.clients.producer_channels(&h.producer_group);
        if channels.is_empty() {
            return Err(error_response(
                req,
                resp::SYSTEM_ERROR,
                format!("the producer group[{}] not exist", h.producer_group),
            ));
        }
        let body = ProducerConnection {
            connection_set: channels.iter().map(ConnectionInfo::from).collect(),
        };
        Ok(ok(req).with_body(json::to_vec(&body).map_err(internal(req))?))
    }

    /// GET_CONSUMER_RUNNING_INFO (`consumerStatus`, `consumerConnection -s`): asked of the
    /// client itself over its connection (only it knows its process queues and threads); its
    /// answer is passed back as it came.
    pub async fn consumer_running_info(&self, req: &RemotingCommand) -> Reply {
        let h = GetConsumerRunningInfoRequestHeader::parse(req).map_err(bad_header(req))?;
        let channel = self
            .clients
            .consumer_channels(&h.consumer_group)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.client_id == h.client_id)
            .ok_or_else(|| {
                error_response(
                    req,
                    resp::SYSTEM_ERROR,
                    format!(
                        "The Consumer <{}> <{}> not online",
                        h.consumer_group, h.client_id
                    ),
                )
            })?;
        let question =
            RemotingCommand::request(request_code::GET_CONSUMER_RUNNING_INFO, h.to_ext_fields());
        let answer = channel
            .conn
            .call(question, CLIENT_ANSWER_TIMEOUT)
            .await
            .map_err(|e| match e {
                CallError::TimedOut(_) => error_response(
                    req,
                    resp::CONSUME_MSG_TIMEOUT,
                    format!(
                        "consumer <{}> <{}> Timeout: {e}",
                        h.consumer_group, h.client_id
                    ),
                ),
                _ => error_response(
                    req,
                    resp::SYSTEM_ERROR,
                    format!(
                        "invoke consumer <{}> <{}> Exception: {e}",
                        h.consumer_group, h.client_id
                    ),
                ),
            })?;
        let mut response = RemotingCommand::response_to(req, answer.code).with_body(answer.body);
        response.remark = answer.remark;
        Ok(response)
    }
}
