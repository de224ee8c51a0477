//! SendMsgBackProcessor: CONSUMER_SEND_MSG_BACK (36). A consumer failed to process a message.
//! The broker re-reads the original by its commit-log offset and stores a copy in
//! `%RETRY%<group>` with a growing delay level (3 + reconsume times) so it comes back later,
//! or, past the group's max reconsume times, parks it in `%DLQ%<group>` (docs/protocol.md
//! §6.7).

use std::net::SocketAddr;
use std::sync::Arc;

use conveyor_protocol::code::{response_code as resp, version};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::header::consumer::ConsumerSendMsgBackRequestHeader;
use conveyor_protocol::message::{keys, offset_msg_id, RecordView, StoredMessage};
use conveyor_protocol::time::now_ms;
use conveyor_store::MessageStore;
use rand::Rng;

use super::durability::Durability;
use super::groups::SubscriptionGroupManager;
use super::parking::ParkingRules;
use super::register::NameServerRegistrar;
use super::reply::{bad_header, error_response, ok, store_error_response, Reply};
use super::topics::{self, TopicConfigManager};

/// Marks `msg`, about to be copied for redelivery (a retry topic) or into the dead-letter
/// queue (`to_dlq`), the way RocketMQ marks it: the topic it was first sent to
/// (`RETRY_TOPIC`, kept from an earlier retry) and the id of its first delivery
/// (`ORIGIN_MESSAGE_ID`, `origin`: the caller knows which id counts) travel with it; a copy for the
/// dead-letter queue also names them as its DLQ origin. Any delay level is cleared (the caller
/// sets the next one). Used by the remoting send-back and by Pop's revive.
pub fn mark_redelivery(
    msg: &mut StoredMessage,
    original_topic: &str,
    origin: String,
    to_dlq: bool,
) {
    if msg.properties.get(keys::RETRY_TOPIC).is_none() {
        msg.properties
            .insert(keys::RETRY_TOPIC, original_topic.to_string());
    }
    msg.properties
        .insert(keys::ORIGIN_MESSAGE_ID, origin.clone());
    msg.properties.remove(keys::DELAY_TIME_LEVEL);
    if to_dlq {
        msg.properties
            .insert(keys::DLQ_ORIGIN_TOPIC, original_topic.to_string());
        msg.properties.insert(keys::DLQ_ORIGIN_MESSAGE_ID, origin);
    }
}

/// CONSUMER_SEND_MSG_BACK.
pub struct SendMsgBackProcessor {
    /// Where the original is read and the copy appended.
    store: Arc<MessageStore>,
    /// When the copy counts as written.
    durability: Arc<Durability>,
    /// Retry and dead-letter topics are created here.
    topics: Arc<TopicConfigManager>,
    /// Retry queues and max reconsume times per group.
    groups: Arc<SubscriptionGroupManager>,
    /// Told when a retry or dead-letter topic was created.
    registrar: Arc<NameServerRegistrar>,
    /// The copy is parked on its delay level like any delayed send.
    parking: ParkingRules,
    /// STOREHOST of the copy.
    store_host: SocketAddr,
}

impl SendMsgBackProcessor {
    /// A processor over the broker's services.
    pub fn new(
        store: Arc<MessageStore>,
        durability: Arc<Durability>,
        topics: Arc<TopicConfigManager>,
        groups: Arc<SubscriptionGroupManager>,
        registrar: Arc<NameServerRegistrar>,
        parking: ParkingRules,
        store_host: SocketAddr,
    ) -> Self {
        Self {
            store,
            durability,
            topics,
            groups,
            registrar,
            parking,
            store_host,
        }
    }

    /// Handles CONSUMER_SEND_MSG_BACK.
    pub async fn handle(&self, req: &RemotingCommand) -> Reply {
        let h = ConsumerSendMsgBackRequestHeader::parse(req).map_err(bad_header(req))?;
        let (offset, group, delay_level) = (h.offset, h.group.as_str(), h.delay_level);
        let origin_msg_id = h.origin_msg_id.as_deref();
        let header_max = h.max_reconsume_times;

        let group_cfg = self.groups.require(req, group)?;
        if group_cfg.retry_queue_nums <= 0 {
            return Ok(ok(req));
        }
        let record = u64::try_from(offset)
            .ok()
            .and_then(|o| self.store.message_at(o))
            .ok_or_else(|| {
                error_response(
                    req,
                    resp::SYSTEM_ERROR,
                    format!("look message by offset failed, {offset}"),
                )
            })?;
        let view = RecordView::parse(&record).map_err(|e| {
            error_response(
                req,
                resp::SYSTEM_ERROR,
                format!("message at {offset} is unreadable: {e}"),
            )
        })?;
        let mut msg = view
            .to_message()
            .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;

        let max = match header_max {
            Some(m) if req.version >= version::V3_4_9 => m,
            _ => group_cfg.retry_max_times,
        };
        let to_dlq = msg.reconsume_times >= max || delay_level < 0;
        let original_topic = msg
            .properties
            .get(keys::RETRY_TOPIC)
            .map_or_else(|| msg.topic.clone(), str::to_string);
        let origin = origin_msg_id
            .map(str::to_string)
            .or_else(|| {
                msg.properties
                    .get(keys::ORIGIN_MESSAGE_ID)
                    .map(str::to_string)
            })
            .unwrap_or_else(|| offset_msg_id(msg.store_host, msg.physical_offset));
        mark_redelivery(&mut msg, &original_topic, origin, to_dlq);
        let (topic, queues) = if to_dlq {
            (topics::dlq_topic(group), 1)
        } else {
            let level = if delay_level > 0 {
                delay_level
            } else {
                3 + msg.reconsume_times
            };
            msg.properties
                .insert(keys::DELAY_TIME_LEVEL, level.to_string());
            (topics::retry_topic(group), group_cfg.retry_queue_nums)
        };
        let (config, created) = self.topics.ensure(&topic, queues);
        if created {
            self.registrar.register_soon();
        }
        msg.topic = topic;
        msg.queue_id = rand::rng().random_range(0..config.write_queue_nums.max(1));
        msg.reconsume_times += 1;
        msg.store_host = self.store_host;
        self.parking
            .prepare(&mut msg, now_ms())
            .map_err(|e| error_response(req, resp::MESSAGE_ILLEGAL, e.to_string()))?;
        if to_dlq {
            tracing::info!(
                group,
                reconsume_times = msg.reconsume_times,
                "message moved to the dead-letter queue"
            );
        }
        let (placed, _) = self
            .store
            .append(std::slice::from_ref(&msg))
            .map_err(|e| store_error_response(req, &e))?;
        // The consumer moves its offset past the original once this is answered: the copy
        // must be durable first (on disk under SYNC flush, on the slaves of a SYNC_MASTER).
        if let Some(p) = placed.last() {
            if let Err(e) = self
                .durability
                .wait(p.physical_offset + p.size as u64)
                .await
            {
                return Err(error_response(
                    req,
                    e.code(),
                    format!("the retry copy is stored but not durable: {e}"),
                ));
            }
        }
        Ok(ok(req))
    }
}
