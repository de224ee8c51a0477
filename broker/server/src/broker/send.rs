//! SendMessageProcessor: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).
//! Validate, resolve or auto-create the topic, route retries past their limit to the dead-
//! letter queue, stamp the broker's properties, park what must wait (one decision, in
//! `parking`), append, and under SYNC flush answer only once the records are durable
//! (docs/protocol.md §5.1). Parked messages are delivered later by the schedule, timer and
//! transaction services, which never come back here.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use conveyor_protocol::batch::decode_batch;
use conveyor_protocol::code::{response_code as resp, version};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::message::{
    keys, offset_msg_id, Properties, StoredMessage, MAX_PROPERTIES_LEN,
};
use conveyor_protocol::recall::RecallHandle;
use conveyor_protocol::route::{perm, TopicConfig};
use conveyor_protocol::time::now_ms;
use conveyor_protocol::uniq_id::UniqIdGenerator;
use conveyor_store::{MessageStore, Placement};
use rand::Rng;
use tokio::sync::Semaphore;

use super::auto_create::Refusal;
use super::config::BrokerConfig;
use super::durability::Durability;
use super::groups::SubscriptionGroupManager;
use super::parking::{ParkingRules, TIMER_OUT_MS};
use super::register::NameServerRegistrar;
use super::reply::{bad_header, error_response, ok, store_error_response, Reply};
use super::stats::{BrokerStats, MessageType};
use super::topics::{self, TopicConfigManager, DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX};
use crate::remoting::Connection;

/// Delay levels are parsed where parking is decided; re-exported for `conveyor-tools`.
pub use super::parking::parse_delay_levels;
/// The SEND request header (shared with the client in the protocol crate).
pub use conveyor_protocol::header::SendMessageHeader as SendHeader;

/// A UNIQ_KEY message id in the Java client's layout (§4.6) for a message that arrives
/// without one; one generator per process, keyed by the broker's address.
pub fn new_uniq_id(ip: IpAddr) -> String {
    static GENERATOR: OnceLock<UniqIdGenerator> = OnceLock::new();
    GENERATOR.get_or_init(|| UniqIdGenerator::new(ip)).next_id()
}

/// What a SendMessageProcessor needs from the rest of the broker.
pub struct SendDeps {
    /// Where messages are appended.
    pub store: Arc<MessageStore>,
    /// When an appended message counts as stored.
    pub durability: Arc<Durability>,
    /// Topic lookup and auto-creation.
    pub topics: Arc<TopicConfigManager>,
    /// Retry limits of consumer groups.
    pub groups: Arc<SubscriptionGroupManager>,
    /// Told when a send created a topic.
    pub registrar: Arc<NameServerRegistrar>,
    /// Counts stored messages.
    pub stats: Arc<BrokerStats>,
    /// Delay-level and timer rules.
    pub parking: ParkingRules,
}

/// SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE.
pub struct SendMessageProcessor {
    /// Where messages are appended.
    store: Arc<MessageStore>,
    /// When an appended message counts as stored (flush, slaves).
    durability: Arc<Durability>,
    /// Topic lookup and auto-creation.
    topics: Arc<TopicConfigManager>,
    /// Retry limits of consumer groups (DLQ redirection).
    groups: Arc<SubscriptionGroupManager>,
    /// Told when a send created a topic, so routes follow.
    registrar: Arc<NameServerRegistrar>,
    /// Counts stored messages.
    stats: Arc<BrokerStats>,
    /// Where delayed, timer and half messages are parked.
    parking: ParkingRules,
    /// Sends in flight; a send that waits longer than `send_queue_wait` for one is refused.
    slots: Semaphore,
    /// `send_queue_wait_ms`.
    send_queue_wait: Duration,
    /// Stamped into every message's CLUSTER property.
    cluster_name: String,
    /// The broker group, named in the recall handles of timer messages.
    broker_name: String,
    /// STOREHOST of the records and the address in their offset message ids.
    store_host: SocketAddr,
}

impl SendMessageProcessor {
    /// A processor over the broker's services.
    pub fn new(config: &BrokerConfig, store_host: SocketAddr, deps: SendDeps) -> Self {
        Self {
            store: deps.store,
            durability: deps.durability,
            topics: deps.topics,
            groups: deps.groups,
            registrar: deps.registrar,
            stats: deps.stats,
            parking: deps.parking,
            slots: Semaphore::new(config.max_sends_in_flight),
            send_queue_wait: Duration::from_millis(config.send_queue_wait_ms),
            cluster_name: config.cluster_name.clone(),
            broker_name: config.broker_name.clone(),
            store_host,
        }
    }

    /// Finds the topic, creating it when the rules allow (§5.1 step 2).
    fn resolve_send_topic(
        &self,
        req: &RemotingCommand,
        h: &SendHeader,
    ) -> Result<TopicConfig, RemotingCommand> {
        if let Some(t) = self.topics.get(&h.topic) {
            return Ok(t);
        }
        // A client may name a retry or dead-letter topic only of a group that exists (a
        // consumer's fallback when its send-back fails); every auto-creation is limited.
        let group_of = h
            .topic
            .strip_prefix(RETRY_GROUP_TOPIC_PREFIX)
            .or_else(|| h.topic.strip_prefix(DLQ_GROUP_TOPIC_PREFIX));
        let created = if let Some(group) = group_of {
            self.groups.get(group).map(|g| {
                let queues = if h.topic.starts_with(RETRY_GROUP_TOPIC_PREFIX) {
                    g.retry_queue_nums.max(1)
                } else {
                    1
                };
                self.topics.ensure_guarded(&h.topic, queues).map(|(t, _)| t)
            })
        } else if self.topics.auto_create() {
            self.topics
                .create_from_template(&h.topic, &h.default_topic, h.default_topic_queue_nums)
                .transpose()
        } else {
            None
        };
        match created {
            Some(Ok(t)) => {
                self.registrar.register_soon();
                Ok(t)
            }
            Some(Err(r @ Refusal::TableFull { .. })) => Err(error_response(
                req,
                resp::TOPIC_NOT_EXIST,
                r.remark(&h.topic),
            )),
            Some(Err(r @ Refusal::Rate { .. })) => {
                Err(error_response(req, resp::SYSTEM_BUSY, r.remark(&h.topic)))
            }
            None => Err(error_response(
                req,
                resp::TOPIC_NOT_EXIST,
                format!(
                    "topic[{}] not exist, apply first please! (auto-creation is {})",
                    h.topic,
                    if self.topics.auto_create() {
                        "on but the default topic does not allow it"
                    } else {
                        "disabled"
                    }
                ),
            )),
        }
    }

    /// Redirects a retry message that exhausted its attempts to `%DLQ%group` (§5.1 step 4).
    fn retry_destination(
        &self,
        req: &RemotingCommand,
        h: &mut SendHeader,
        props: &mut Properties,
    ) -> Result<(), RemotingCommand> {
        let Some(group) = h
            .topic
            .strip_prefix(RETRY_GROUP_TOPIC_PREFIX)
            .map(str::to_string)
        else {
            return Ok(());
        };
        let group_cfg = self.groups.require(req, &group)?;
        let max = match h.max_reconsume_times {
            Some(m) if req.version >= version::V3_4_9 => m,
            _ => group_cfg.retry_max_times,
        };
        if h.reconsume_times > max {
            let dlq = topics::dlq_topic(&group);
            self.topics.ensure(&dlq, 1);
            tracing::info!(
                group,
                reconsume_times = h.reconsume_times,
                "retry limit reached: message goes to {dlq}"
            );
            h.topic = dlq;
            h.queue_id = 0;
            props.remove(keys::DELAY_TIME_LEVEL);
        }
        Ok(())
    }

    /// Handles SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE.
    pub async fn handle(&self, conn: &Connection, req: &RemotingCommand) -> Reply {
        let _slot =
            match tokio::time::timeout(self.send_queue_wait, self.slots.acquire()).await {
                Ok(Ok(permit)) => permit,
                _ => return Err(error_response(
                    req,
                    resp::SYSTEM_BUSY,
                    "[TIMEOUT_CLEAN_QUEUE]broker busy, too many sends in flight; try again later",
                )),
            };
        let mut h = SendHeader::parse(req).map_err(bad_header(req))?;
        conveyor_store::validate_topic(&h.topic)
            .map_err(|e| error_response(req, resp::INVALID_PARAMETER, e.to_string()))?;
        if topics::is_forbidden_for_send(&h.topic) {
            return Err(error_response(
                req,
                resp::NO_PERMISSION,
                format!("sending message to topic[{}] is forbidden", h.topic),
            ));
        }
        // Checked before decoding: a client must not make the broker build a property map
        // for a string it will refuse anyway (RocketMQ's 32,767-byte limit).
        if h.properties.len() > MAX_PROPERTIES_LEN {
            return Err(error_response(
                req,
                resp::MESSAGE_ILLEGAL,
                format!(
                    "message properties are {} bytes, more than the limit of {MAX_PROPERTIES_LEN}",
                    h.properties.len()
                ),
            ));
        }
        let mut props = Properties::decode(h.properties.as_bytes())
            .map_err(|e| error_response(req, resp::MESSAGE_ILLEGAL, e.to_string()))?;
        self.retry_destination(req, &mut h, &mut props)?;
        let topic = self.resolve_send_topic(req, &h)?;
        if topic.perm & perm::WRITE == 0 {
            return Err(error_response(
                req,
                resp::NO_PERMISSION,
                format!("the topic[{}] sending message is forbidden", h.topic),
            ));
        }
        let queues = topic.write_queue_nums.max(topic.read_queue_nums);
        if h.queue_id < 0 {
            h.queue_id = rand::rng().random_range(0..topic.write_queue_nums.max(1));
        } else if h.queue_id >= queues {
            return Err(error_response(
                req,
                resp::INVALID_PARAMETER,
                format!(
                    "request queueId[{}] is illegal, topic {} has {queues} queues",
                    h.queue_id, h.topic
                ),
            ));
        }
        let mut messages = if h.batch {
            let entries = decode_batch(&req.body).map_err(|e| {
                error_response(req, resp::MESSAGE_ILLEGAL, format!("bad batch body: {e}"))
            })?;
            if entries.is_empty() {
                return Err(error_response(req, resp::MESSAGE_ILLEGAL, "empty batch"));
            }
            entries
                .into_iter()
                .map(|e| self.message(&h, conn, e.flag, e.body, e.properties))
                .collect::<Vec<_>>()
        } else {
            vec![self.message(&h, conn, h.flag, req.body.clone(), props)]
        };
        // Its type as sent (parking moves delayed and half messages to system topics).
        let kind = messages
            .first()
            .map_or(MessageType::Normal, |m| MessageType::of(&m.properties));
        let now = now_ms();
        for m in &mut messages {
            self.parking
                .prepare(m, now)
                .map_err(|e| error_response(req, resp::MESSAGE_ILLEGAL, e.to_string()))?;
        }
        let (placements, _) = self
            .store
            .append(&messages)
            .map_err(|e| store_error_response(req, &e))?;
        let mut code = resp::SUCCESS;
        if let Some(last) = placements.last() {
            let end = last.physical_offset + last.size as u64;
            let wait = messages[0].properties.get(keys::WAIT_STORE_MSG_OK) != Some("false");
            if wait {
                if let Err(e) = self.durability.wait(end).await {
                    code = e.code();
                }
            }
        }
        let bytes: usize = placements.iter().map(|p| p.size).sum();
        self.stats
            .record_in(&h.topic, kind, placements.len(), bytes);
        Ok(self.send_response(req, code, &h, &messages, &placements))
    }

    fn message(
        &self,
        h: &SendHeader,
        conn: &Connection,
        flag: i32,
        body: Bytes,
        mut properties: Properties,
    ) -> StoredMessage {
        if properties
            .get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            .is_none()
        {
            properties.insert(
                keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
                new_uniq_id(self.store_host.ip()),
            );
        }
        properties.insert(keys::CLUSTER, &self.cluster_name);
        properties.remove(keys::POP_CK);
        StoredMessage {
            topic: h.topic.clone(),
            queue_id: h.queue_id,
            flag,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: h.sys_flag,
            born_timestamp: h.born_timestamp,
            born_host: conn.peer(),
            store_timestamp: 0,
            store_host: self.store_host,
            reconsume_times: h.reconsume_times,
            prepared_transaction_offset: 0,
            body,
            properties,
        }
    }

    fn send_response(
        &self,
        req: &RemotingCommand,
        code: i32,
        h: &SendHeader,
        messages: &[StoredMessage],
        placements: &[Placement],
    ) -> RemotingCommand {
        let msg_ids: Vec<String> = placements
            .iter()
            .map(|p| offset_msg_id(self.store_host, p.physical_offset as i64))
            .collect();
        let first = placements.first().map_or(0, |p| p.queue_offset);
        let uniq = messages
            .first()
            .and_then(|m| m.properties.get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX))
            .unwrap_or_default();
        let mut r = ok(req)
            .with_ext("msgId", msg_ids.join(","))
            .with_ext("queueId", h.queue_id)
            .with_ext("queueOffset", first)
            .with_ext("transactionId", uniq)
            .with_ext(keys::MSG_REGION, "DefaultRegion")
            .with_ext(keys::TRACE_SWITCH, "true");
        // A timer message can be recalled until it is due (RocketMQ 5.3): one sent alone gets
        // the handle that names it.
        if let [m] = messages {
            if m.topic == topics::TIMER_TOPIC {
                if let Some(due) = m.properties.get(TIMER_OUT_MS).and_then(|d| d.parse().ok()) {
                    let handle = RecallHandle {
                        topic: h.topic.clone(),
                        broker_name: self.broker_name.clone(),
                        deliver_ms: due,
                        message_id: uniq.to_string(),
                    };
                    r = r.with_ext("recallHandle", handle.encode());
                }
            }
        }
        r.code = code;
        if code == resp::FLUSH_DISK_TIMEOUT {
            r.remark = Some("the message is stored but the disk flush timed out".into());
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniq_ids_are_32_hex_chars_and_distinct() {
        let a = new_uniq_id("10.1.2.3".parse().unwrap());
        let b = new_uniq_id("10.1.2.3".parse().unwrap());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
