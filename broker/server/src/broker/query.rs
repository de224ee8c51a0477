//! Read-only lookups: queue offsets (max, min, by timestamp, earliest store time) and
//! messages by commit-log offset (VIEW_MESSAGE_BY_ID) or by key (QUERY_MESSAGE)
//! (docs/protocol.md §6.4, §6.8).

use bytes::BytesMut;
use conveyor_protocol::code::response_code as resp;
use conveyor_protocol::command::RemotingCommand;

use super::now_ms;
use super::{bad_header, ok, Broker, Reply};
use crate::remoting::error_response;

/// Messages a unique-key query returns at most (RocketMQ's default max query number).
const UNIQUE_KEY_QUERY_MAX: usize = 32;
/// Largest `maxNum` honoured for key queries.
const KEY_QUERY_MAX: usize = 64;

impl Broker {
    fn topic_queue<'r>(&self, req: &'r RemotingCommand) -> Result<(&'r str, i32), RemotingCommand> {
        let bad = bad_header(req);
        Ok((
            req.get_str("topic").map_err(&bad)?,
            req.get_i32("queueId").map_err(&bad)?,
        ))
    }

    /// GET_MAX_OFFSET: the next offset to be written.
    pub(crate) fn max_offset(&self, req: &RemotingCommand) -> Reply {
        let (topic, q) = self.topic_queue(req)?;
        Ok(ok(req).with_ext("offset", self.store.max_offset(topic, q)))
    }

    /// GET_MIN_OFFSET.
    pub(crate) fn min_offset(&self, req: &RemotingCommand) -> Reply {
        let (topic, q) = self.topic_queue(req)?;
        Ok(ok(req).with_ext("offset", self.store.min_offset(topic, q)))
    }

    /// SEARCH_OFFSET_BY_TIMESTAMP (lower boundary: first message stored at or after it).
    pub(crate) fn search_offset(&self, req: &RemotingCommand) -> Reply {
        let (topic, q) = self.topic_queue(req)?;
        let ts = req.get_i64("timestamp").map_err(bad_header(req))?;
        let mut offset = self.store.offset_by_time(topic, q, ts);
        if req
            .get_str_opt("boundaryType")
            .is_some_and(|b| b.eq_ignore_ascii_case("upper"))
        {
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
    pub(crate) fn earliest_msg_store_time(&self, req: &RemotingCommand) -> Reply {
        let (topic, q) = self.topic_queue(req)?;
        Ok(ok(req).with_ext(
            "timestamp",
            self.store.earliest_store_time(topic, q).unwrap_or(0),
        ))
    }

    /// VIEW_MESSAGE_BY_ID: the record at a commit-log offset.
    pub(crate) fn view_message(&self, req: &RemotingCommand) -> Reply {
        let offset = req.get_i64("offset").map_err(bad_header(req))?;
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
    pub(crate) fn query_message(&self, req: &RemotingCommand) -> Reply {
        let bad = bad_header(req);
        let topic = req.get_str("topic").map_err(&bad)?;
        let key = req.get_str("key").map_err(&bad)?;
        let max_num = req
            .get_i32_opt("maxNum")
            .map_err(&bad)?
            .unwrap_or(32)
            .max(1) as usize;
        let begin = req
            .get_i64_opt("beginTimestamp")
            .map_err(&bad)?
            .unwrap_or(0);
        let end = req
            .get_i64_opt("endTimestamp")
            .map_err(&bad)?
            .unwrap_or(i64::MAX);
        let unique = req
            .get_bool_opt("_UNIQUE_KEY_QUERY")
            .map_err(&bad)?
            .unwrap_or(false);
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
