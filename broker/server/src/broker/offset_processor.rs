//! OffsetProcessor: a group's committed offsets (QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET,
//! as RocketMQ's ConsumerManageProcessor answers them) and the queue offsets consumers and
//! tools position themselves by (GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
//! GET_EARLIEST_MSG_STORETIME) (docs/protocol.md §6.4).

use std::sync::Arc;

use conveyor_protocol::code::response_code as resp;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::header::offset::{
    BoundaryType, QueryConsumerOffsetRequestHeader, QueueRequestHeader, SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};
use conveyor_store::MessageStore;

use super::offsets::ConsumerOffsetManager;
use super::reply::{bad_header, error_response, ok, Reply};
use super::topics::TopicConfigManager;

/// The offset requests.
pub struct OffsetProcessor {
    /// Queue offsets and store times.
    store: Arc<MessageStore>,
    /// Commits name existing topics only.
    topics: Arc<TopicConfigManager>,
    /// Committed offsets.
    offsets: Arc<ConsumerOffsetManager>,
}

impl OffsetProcessor {
    /// A processor over the broker's services.
    pub fn new(
        store: Arc<MessageStore>,
        topics: Arc<TopicConfigManager>,
        offsets: Arc<ConsumerOffsetManager>,
    ) -> Self {
        Self {
            store,
            topics,
            offsets,
        }
    }

    fn queue(req: &RemotingCommand) -> Result<QueueRequestHeader, RemotingCommand> {
        QueueRequestHeader::parse(req).map_err(bad_header(req))
    }

    /// GET_MAX_OFFSET: the next offset to be written.
    pub fn max_offset(&self, req: &RemotingCommand) -> Reply {
        let h = Self::queue(req)?;
        Ok(ok(req).with_ext("offset", self.store.max_offset(&h.topic, h.queue_id)))
    }

    /// GET_MIN_OFFSET.
    pub fn min_offset(&self, req: &RemotingCommand) -> Reply {
        let h = Self::queue(req)?;
        Ok(ok(req).with_ext("offset", self.store.min_offset(&h.topic, h.queue_id)))
    }

    /// SEARCH_OFFSET_BY_TIMESTAMP (lower boundary: first message stored at or after it).
    pub fn search_offset(&self, req: &RemotingCommand) -> Reply {
        let h = SearchOffsetRequestHeader::parse(req).map_err(bad_header(req))?;
        let (topic, q, ts) = (h.topic.as_str(), h.queue_id, h.timestamp);
        let mut offset = self.store.offset_by_time(topic, q, ts);
        if h.boundary_type == BoundaryType::Upper {
            // Upper boundary: the last message stored at or before `ts`.
            let max = self.store.max_offset(topic, q);
            let mut o = offset;
            while o < max
                && self
                    .store
                    .store_time_at(topic, q, o)
                    .is_some_and(|t| t <= ts)
            {
                o += 1;
            }
            offset = (o - 1).max(self.store.min_offset(topic, q));
        }
        Ok(ok(req).with_ext("offset", offset))
    }

    /// GET_EARLIEST_MSG_STORETIME.
    pub fn earliest_msg_store_time(&self, req: &RemotingCommand) -> Reply {
        let h = Self::queue(req)?;
        Ok(ok(req).with_ext(
            "timestamp",
            self.store
                .earliest_store_time(&h.topic, h.queue_id)
                .unwrap_or(0),
        ))
    }

    /// QUERY_CONSUMER_OFFSET, with RocketMQ's answer for groups that never committed (§6.4).
    pub fn query_consumer_offset(&self, req: &RemotingCommand) -> Reply {
        let h = QueryConsumerOffsetRequestHeader::parse(req).map_err(bad_header(req))?;
        let (group, topic, queue_id) = (h.consumer_group.as_str(), h.topic.as_str(), h.queue_id);
        if let Some(offset) = self.offsets.query(group, topic, queue_id) {
            return Ok(ok(req).with_ext("offset", offset));
        }
        let zero_if_not_found = h.set_zero_if_not_found;
        let young_queue = self.store.min_offset(topic, queue_id) == 0
            && self.store.max_offset(topic, queue_id) > 0;
        if zero_if_not_found && young_queue {
            return Ok(ok(req).with_ext("offset", 0));
        }
        Err(error_response(
            req,
            resp::QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
        ))
    }

    /// UPDATE_CONSUMER_OFFSET.
    pub fn update_consumer_offset(&self, req: &RemotingCommand) -> Reply {
        let h = UpdateConsumerOffsetRequestHeader::parse(req).map_err(bad_header(req))?;
        let (group, topic, queue_id) = (h.consumer_group.as_str(), h.topic.as_str(), h.queue_id);
        let offset = h.commit_offset;
        if self.topics.get(topic).is_none() {
            return Err(error_response(
                req,
                resp::TOPIC_NOT_EXIST,
                format!("topic[{topic}] not exist"),
            ));
        }
        self.offsets.commit(group, topic, queue_id, offset);
        Ok(ok(req))
    }
}
