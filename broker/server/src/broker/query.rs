//! QueryMessageProcessor: messages looked up rather than consumed — by commit-log offset
//! (VIEW_MESSAGE_BY_ID, what an offset message id encodes) or by key (QUERY_MESSAGE, KEYS and
//! UNIQ_KEY through the store's index) (docs/protocol.md §6.8).

use std::sync::Arc;

use bytes::BytesMut;
use conveyor_protocol::code::response_code as resp;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::header::message::{QueryMessageRequestHeader, ViewMessageRequestHeader};
use conveyor_protocol::time::now_ms;
use conveyor_store::MessageStore;

use super::reply::{bad_header, error_response, ok, Reply};

/// Messages a unique-key query returns at most (RocketMQ's default max query number).
const UNIQUE_KEY_QUERY_MAX: usize = 32;
/// Largest `maxNum` honoured for key queries.
const KEY_QUERY_MAX: usize = 64;

/// VIEW_MESSAGE_BY_ID and QUERY_MESSAGE.
pub struct QueryMessageProcessor {
    /// Where records and the key index are read.
    store: Arc<MessageStore>,
}

impl QueryMessageProcessor {
    /// A processor reading `store`.
    pub fn new(store: Arc<MessageStore>) -> Self {
        Self { store }
    }

    /// VIEW_MESSAGE_BY_ID: the record at a commit-log offset.
    pub fn view_message(&self, req: &RemotingCommand) -> Reply {
        let offset = ViewMessageRequestHeader::parse(req)
            .map_err(bad_header(req))?
            .offset;
        let record = u64::try_from(offset)
            .ok()
            .and_then(|o| self.store.message_at(o))
            .ok_or_else(|| {
                error_response(
                    req,
                    resp::SYSTEM_ERROR,
                    format!("can not find message by the offset, {offset}"),
                )
            })?;
        Ok(ok(req).with_body(bytes::Bytes::copy_from_slice(&record)))
    }

    /// QUERY_MESSAGE: messages whose KEYS or UNIQ_KEY match.
    pub fn query_message(&self, req: &RemotingCommand) -> Reply {
        let h = QueryMessageRequestHeader::parse(req).map_err(bad_header(req))?;
        let (topic, key) = (h.topic.as_str(), h.key.as_str());
        let max_num = h.max_num.max(1) as usize;
        let (begin, end, unique) = (h.begin_timestamp, h.end_timestamp, h.unique_key_query);
        let max = if unique {
            UNIQUE_KEY_QUERY_MAX
        } else {
            max_num.min(KEY_QUERY_MAX)
        };
        let found = self.store.query_by_key(topic, key, max, begin, end);
        if found.is_empty() {
            return Err(error_response(
                req,
                resp::QUERY_NOT_FOUND,
                format!(
                    "can not find message, maybe time range not correct: topic {topic}, key {key}"
                ),
            )
            .with_ext("indexLastUpdateTimestamp", 0)
            .with_ext("indexLastUpdatePhyoffset", 0));
        }
        let mut body = BytesMut::new();
        for r in &found {
            body.extend_from_slice(r);
        }
        Ok(ok(req)
            .with_ext("indexLastUpdateTimestamp", now_ms())
            .with_ext("indexLastUpdatePhyoffset", self.store.dispatched_offset())
            .with_body(body.freeze()))
    }
}
