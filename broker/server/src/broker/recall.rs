//! RecallMessageProcessor: RECALL_MESSAGE (370), RocketMQ 5.3's cancellation of a timer
//! message that is not due yet, with the handle its send returned. The recall is itself a
//! timer record: a marker parked in the timer topic, due when the message is, naming it
//! ([`conveyor_protocol::recall::TIMER_DEL_UNIQKEY`]). So it is as durable and replicated as
//! the message, and the timer service ([`super::timer`]) skips the message when both come due
//! — after a restart too, as both are re-read from the log.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use conveyor_protocol::code::response_code as resp;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::message::{keys, Properties, StoredMessage};
use conveyor_protocol::recall::{RecallHandle, TIMER_DEL_UNIQKEY};
use conveyor_protocol::time::now_ms;
use conveyor_store::MessageStore;

use super::durability::Durability;
use super::parking::ParkingRules;
use super::reply::{error_response, ok, store_error_response, Reply};
use super::topics::TopicConfigManager;
use crate::remoting::Connection;

/// The tag of recall markers (RocketMQ's `_RECALL_TAG_`).
const RECALL_TAG: &str = "_RECALL_TAG_";

/// What the processor works with.
pub struct RecallDeps {
    /// Where markers are appended.
    pub store: Arc<MessageStore>,
    /// When an appended marker counts as stored.
    pub durability: Arc<Durability>,
    /// Topic lookup.
    pub topics: Arc<TopicConfigManager>,
    /// Parks the marker in the timer topic.
    pub parking: ParkingRules,
}

/// RECALL_MESSAGE.
pub struct RecallMessageProcessor {
    /// Where markers are appended.
    store: Arc<MessageStore>,
    /// When an appended marker counts as stored.
    durability: Arc<Durability>,
    /// Topic lookup.
    topics: Arc<TopicConfigManager>,
    /// Parks the marker in the timer topic.
    parking: ParkingRules,
    /// This broker group: a handle naming another is not ours to recall.
    broker_name: String,
    /// STOREHOST of the markers.
    store_host: SocketAddr,
}

impl RecallMessageProcessor {
    /// A processor for the broker group `broker_name`.
    pub fn new(broker_name: &str, store_host: SocketAddr, deps: RecallDeps) -> Self {
        Self {
            store: deps.store,
            durability: deps.durability,
            topics: deps.topics,
            parking: deps.parking,
            broker_name: broker_name.to_string(),
            store_host,
        }
    }

    /// Checks the handle as RocketMQ does (topic exists, handle readable, same topic, this
    /// broker group, due in the future and within the longest timer delay), then parks the
    /// marker. Answers `msgId` = the recalled message's id.
    pub async fn handle(&self, conn: &Connection, req: &RemotingCommand) -> Reply {
        let field = |name: &str| req.get_str_opt(name).unwrap_or_default().to_string();
        let (topic, group, raw) = (
            field("topic"),
            field("producerGroup"),
            field("recallHandle"),
        );
        if self.topics.get(&topic).is_none() {
            return Err(error_response(
                req,
                resp::TOPIC_NOT_EXIST,
                format!("recall failed, the topic[{topic}] not exist"),
            ));
        }
        let illegal = |remark: String| error_response(req, resp::ILLEGAL_OPERATION, remark);
        let handle = RecallHandle::decode(&raw).map_err(|e| illegal(e.to_string()))?;
        if handle.topic != topic {
            return Err(illegal("recall failed, topic not match".into()));
        }
        if handle.broker_name != self.broker_name {
            return Err(illegal(format!(
                "recall failed, the handle is of broker {}, this is {}",
                handle.broker_name, self.broker_name
            )));
        }
        let left = handle.deliver_ms - now_ms();
        if left <= 0 || left >= self.parking.timer_max_delay_ms {
            return Err(illegal(
                "recall failed, timestamp invalid (the message is due or delivered)".into(),
            ));
        }
        let mut marker = self.marker(&handle, &group, conn.peer());
        self.parking
            .prepare(&mut marker, now_ms())
            .map_err(|e| illegal(format!("recall failed: {e}")))?;
        let (placed, _) = self
            .store
            .append(std::slice::from_ref(&marker))
            .map_err(|e| store_error_response(req, &e))?;
        if let Some(p) = placed.last() {
            // Answered once the marker is as durable as a send would be. Stored but not yet
            // flushed or replicated in time still answers success, as RocketMQ's recall does
            // (the marker is in the log and takes effect).
            if let Err(e) = self
                .durability
                .wait(p.physical_offset + p.size as u64)
                .await
            {
                tracing::warn!(code = e.code(), "recall marker stored, not yet durable");
            }
        }
        Ok(ok(req).with_ext("msgId", handle.message_id))
    }

    /// The marker: a message of the handle's topic due when the recalled one is, naming it.
    fn marker(&self, handle: &RecallHandle, group: &str, born: SocketAddr) -> StoredMessage {
        let mut properties = Properties::new();
        properties.insert(TIMER_DEL_UNIQKEY, handle.delete_key());
        properties.insert(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX, &handle.message_id);
        properties.insert(keys::TIMER_DELIVER_MS, handle.deliver_ms.to_string());
        properties.insert(keys::TAGS, RECALL_TAG);
        if !group.is_empty() {
            properties.insert(keys::PRODUCER_GROUP, group);
        }
        let now = now_ms();
        StoredMessage {
            topic: handle.topic.clone(),
            queue_id: 0,
            flag: 0,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: 0,
            born_timestamp: now,
            born_host: born,
            store_timestamp: 0,
            store_host: self.store_host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Bytes::from_static(b"0"),
            properties,
        }
    }
}
