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

use crate::remoting::Connection;

use super::reply::{bad_header, error_response, ok, Reply};

/// Messages a unique-key query returns at most (RocketMQ's default max query number).
const UNIQUE_KEY_QUERY_MAX: usize = 32;
/// Largest `maxNum` honoured for key queries.
const KEY_QUERY_MAX: usize = 64;
/// Most record bytes one QUERY_MESSAGE answer carries (at least one record is always sent).
const QUERY_BODY_MAX: usize = 8 << 20;

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

    /// VIEW_MESSAGE_BY_ID: the record at a commit-log offset (copied once the connection's
    /// response budget has room).
    pub async fn view_message(&self, conn: &Connection, req: &RemotingCommand) -> Reply {
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
        conn.reserve(req.opaque, record.len()).await;
        Ok(ok(req).with_body(bytes::Bytes::copy_from_slice(&record)))
    }

    /// QUERY_MESSAGE: messages whose KEYS or UNIQ_KEY match, newest first, at most
    /// [`QUERY_BODY_MAX`] bytes of them (copied once the connection's budget has room).
    pub async fn query_message(&self, conn: &Connection, req: &RemotingCommand) -> Reply {
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
        // Keep to a body well inside the frame limit: 64 records of up to 4 MiB each would not
        // fit, and building it would hold hundreds of MiB for one request.
        let mut total = 0usize;
        let kept = found
            .iter()
            .take_while(|r| {
                total += r.len();
                total <= QUERY_BODY_MAX
            })
            .count()
            .max(1);
        let found = &found[..kept];
        conn.reserve(req.opaque, found.iter().map(|r| r.len()).sum())
            .await;
        let mut body = BytesMut::new();
        for r in found {
            body.extend_from_slice(r);
        }
        Ok(ok(req)
            .with_ext("indexLastUpdateTimestamp", now_ms())
            .with_ext("indexLastUpdatePhyoffset", self.store.dispatched_offset())
            .with_body(body.freeze()))
    }
}
