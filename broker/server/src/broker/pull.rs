//! PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361): check the group, topic and subscription,
//! store a piggy-backed offset commit, read from the store with tag filtering and, when
//! nothing is there yet, hold the request until a message arrives or the client's suspend
//! timeout passes (docs/protocol.md §6.5).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use conveyor_protocol::code::response_code as resp;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::message::{keys, tag_hash_code, RecordView};
use conveyor_protocol::route::{perm, EXPRESSION_TYPE_SQL92};
use conveyor_store::{CqEntry, GetResult, GetStatus, MessageFilter};

use super::{bad_header, ok, Broker, Reply};
use crate::remoting::error_response;

/// PullSysFlag bits.
mod pull_flag {
    pub const COMMIT_OFFSET: i32 = 0x1;
    pub const SUSPEND: i32 = 0x2;
    pub const SUBSCRIPTION: i32 = 0x4;
}

/// Most messages one pull returns.
const MAX_PULL_COUNT: usize = 256;
/// Default and largest pull body.
const DEFAULT_PULL_BYTES: usize = 256 << 10;
const MAX_PULL_BYTES: usize = 4 << 20;
/// Longest hold a client may ask for.
const MAX_SUSPEND: Duration = Duration::from_secs(60);

/// A tag subscription: `*` (everything) or `TagA || TagB`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagFilter {
    all: bool,
    tags: HashSet<String>,
    codes: HashSet<i64>,
}

impl TagFilter {
    /// Parses a subscription expression.
    pub fn parse(expression: &str) -> Self {
        let expression = expression.trim();
        if expression.is_empty() || expression == "*" {
            return Self {
                all: true,
                tags: HashSet::new(),
                codes: HashSet::new(),
            };
        }
        let tags: HashSet<String> = expression
            .split("||")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect();
        let codes = tags.iter().map(|t| tag_hash_code(t)).collect();
        Self {
            all: tags.is_empty(),
            tags,
            codes,
        }
    }
}

impl MessageFilter for TagFilter {
    fn matches_entry(&self, entry: &CqEntry) -> bool {
        self.all || self.codes.contains(&entry.tag_code)
    }
    fn matches_record(&self, record: &RecordView<'_>) -> bool {
        // The hash matched; check the tag itself so colliding tags are not delivered.
        self.all
            || record
                .property(keys::TAGS)
                .is_some_and(|t| self.tags.contains(t))
    }
}

/// The PULL response code and next offset for a store result (the mapping table of §6.5).
pub fn pull_code(r: &GetResult, requested: i64) -> (i32, i64) {
    match r.status {
        GetStatus::Found => (resp::SUCCESS, r.next_begin_offset),
        GetStatus::NoMatchedMessage | GetStatus::OffsetFoundNull => {
            (resp::PULL_RETRY_IMMEDIATELY, r.next_begin_offset)
        }
        GetStatus::OffsetOverflowOne => (resp::PULL_NOT_FOUND, requested),
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue if requested == 0 => {
            (resp::PULL_NOT_FOUND, 0)
        }
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue => {
            (resp::PULL_OFFSET_MOVED, 0)
        }
        GetStatus::OffsetTooSmall | GetStatus::OffsetOverflowBadly => {
            (resp::PULL_OFFSET_MOVED, r.next_begin_offset)
        }
    }
}

impl Broker {
    /// Handles PULL_MESSAGE and LITE_PULL_MESSAGE.
    pub(crate) async fn pull(self: &Arc<Self>, req: &RemotingCommand) -> Reply {
        let bad = bad_header(req);
        let group = req.get_str("consumerGroup").map_err(&bad)?;
        let topic = req.get_str("topic").map_err(&bad)?;
        let queue_id = req.get_i32("queueId").map_err(&bad)?;
        let offset = req.get_i64("queueOffset").map_err(&bad)?;
        let max_nums = req.get_i32_opt("maxMsgNums").map_err(&bad)?.unwrap_or(32);
        let sys_flag = req.get_i32_opt("sysFlag").map_err(&bad)?.unwrap_or(0);
        let commit_offset = req.get_i64_opt("commitOffset").map_err(&bad)?.unwrap_or(-1);
        let suspend_ms = req
            .get_i64_opt("suspendTimeoutMillis")
            .map_err(&bad)?
            .unwrap_or(0);
        let sub_version = req.get_i64_opt("subVersion").map_err(&bad)?.unwrap_or(0);
        let max_bytes = req
            .get_i32_opt("maxMsgBytes")
            .map_err(&bad)?
            .filter(|b| *b > 0)
            .map_or(DEFAULT_PULL_BYTES, |b| (b as usize).min(MAX_PULL_BYTES));

        let group_cfg = self.group_config(req, group)?;
        if !group_cfg.consume_enable {
            return Err(error_response(
                req,
                resp::NO_PERMISSION,
                format!("subscription group no permission, {group}"),
            ));
        }
        let topic_cfg = self.topics.get(topic).ok_or_else(|| {
            error_response(
                req,
                resp::TOPIC_NOT_EXIST,
                format!("topic[{topic}] not exist, apply first please!"),
            )
        })?;
        if topic_cfg.perm & perm::READ == 0 {
            return Err(error_response(
                req,
                resp::NO_PERMISSION,
                format!("the topic[{topic}] pulling message is forbidden"),
            ));
        }
        if queue_id < 0 || queue_id >= topic_cfg.read_queue_nums.max(topic_cfg.write_queue_nums) {
            return Err(error_response(
                req,
                resp::INVALID_PARAMETER,
                format!("queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{}]", topic_cfg.read_queue_nums),
            ));
        }
        let filter = if sys_flag & pull_flag::SUBSCRIPTION != 0 {
            if req.get_str_opt("expressionType") == Some(EXPRESSION_TYPE_SQL92) {
                return Err(error_response(
                    req,
                    resp::SUBSCRIPTION_PARSE_FAILED,
                    "SQL92 filtering is not supported by this broker; subscribe by tag",
                ));
            }
            TagFilter::parse(req.get_str_opt("subscription").unwrap_or("*"))
        } else {
            let sub = self.clients.subscription(group, topic).ok_or_else(|| {
                error_response(
                    req,
                    resp::SUBSCRIPTION_NOT_EXIST,
                    format!("the consumer's subscription not exist, group: {group} topic: {topic}"),
                )
            })?;
            if sub.sub_version < sub_version {
                return Err(error_response(
                    req,
                    resp::SUBSCRIPTION_NOT_LATEST,
                    format!("the consumer's subscription not latest, group: {group}"),
                ));
            }
            if sub.expression_type == EXPRESSION_TYPE_SQL92 {
                return Err(error_response(
                    req,
                    resp::SUBSCRIPTION_PARSE_FAILED,
                    "SQL92 filtering is not supported by this broker; subscribe by tag",
                ));
            }
            TagFilter::parse(&sub.sub_string)
        };
        if sys_flag & pull_flag::COMMIT_OFFSET != 0
            && commit_offset >= 0
            && self.config.broker_id == 0
        {
            self.offsets.commit(group, topic, queue_id, commit_offset);
        }

        let max_count = (max_nums.max(1) as usize).min(MAX_PULL_COUNT);
        let may_hold = sys_flag & pull_flag::SUSPEND != 0 && suspend_ms > 0;
        let deadline =
            Instant::now() + Duration::from_millis(suspend_ms.max(0) as u64).min(MAX_SUSPEND);
        let notifier = self.hold.notifier(topic, queue_id);
        loop {
            let arrived = notifier.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let r = self
                .store
                .get_messages(topic, queue_id, offset, max_count, max_bytes, &filter);
            let (code, next) = pull_code(&r, offset);
            if code == resp::PULL_NOT_FOUND && may_hold && Instant::now() < deadline {
                let woken = tokio::select! {
                    r = tokio::time::timeout_at(deadline.into(), arrived) => r.is_ok(),
                    _ = self.stopping.cancelled() => false,
                };
                if woken {
                    continue;
                }
                // Timed out: one last look, then answer.
                let r = self
                    .store
                    .get_messages(topic, queue_id, offset, max_count, max_bytes, &filter);
                let (code, next) = pull_code(&r, offset);
                return Ok(self.pull_response(req, code, next, &r));
            }
            return Ok(self.pull_response(req, code, next, &r));
        }
    }

    fn pull_response(
        &self,
        req: &RemotingCommand,
        code: i32,
        next: i64,
        r: &GetResult,
    ) -> RemotingCommand {
        let mut response = ok(req)
            .with_ext("suggestWhichBrokerId", 0)
            .with_ext("nextBeginOffset", next)
            .with_ext("minOffset", r.min_offset)
            .with_ext("maxOffset", r.max_offset);
        response.code = code;
        response.remark = Some(format!("{:?}", r.status));
        if code == resp::SUCCESS {
            let total: usize = r.messages.iter().map(|m| m.len()).sum();
            let mut body = BytesMut::with_capacity(total);
            for m in &r.messages {
                body.extend_from_slice(m);
            }
            response.body = body.freeze();
            self.stats
                .messages_out
                .fetch_add(r.messages.len() as u64, Ordering::Relaxed);
            self.stats
                .bytes_out
                .fetch_add(total as u64, Ordering::Relaxed);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_expressions() {
        assert!(TagFilter::parse("*").all);
        assert!(TagFilter::parse("").all);
        let f = TagFilter::parse("TagA || TagB ||");
        assert!(!f.all);
        assert_eq!(f.tags.len(), 2);
        assert!(f.matches_entry(&CqEntry {
            physical_offset: 0,
            size: 1,
            tag_code: tag_hash_code("TagB")
        }));
        assert!(!f.matches_entry(&CqEntry {
            physical_offset: 0,
            size: 1,
            tag_code: tag_hash_code("TagC")
        }));
    }

    fn result(status: GetStatus, next: i64) -> GetResult {
        GetResult {
            status,
            messages: vec![],
            queue_offsets: vec![],
            next_begin_offset: next,
            min_offset: 3,
            max_offset: 10,
        }
    }

    #[test]
    fn status_mapping_follows_rocketmq() {
        assert_eq!(
            pull_code(&result(GetStatus::OffsetOverflowOne, 10), 10),
            (resp::PULL_NOT_FOUND, 10)
        );
        assert_eq!(
            pull_code(&result(GetStatus::OffsetTooSmall, 3), 1),
            (resp::PULL_OFFSET_MOVED, 3)
        );
        assert_eq!(
            pull_code(&result(GetStatus::OffsetOverflowBadly, 10), 50),
            (resp::PULL_OFFSET_MOVED, 10)
        );
        assert_eq!(
            pull_code(&result(GetStatus::NoMessageInQueue, 0), 0),
            (resp::PULL_NOT_FOUND, 0)
        );
        assert_eq!(
            pull_code(&result(GetStatus::NoMessageInQueue, 0), 7),
            (resp::PULL_OFFSET_MOVED, 0)
        );
        assert_eq!(
            pull_code(&result(GetStatus::NoMatchedMessage, 9), 4),
            (resp::PULL_RETRY_IMMEDIATELY, 9)
        );
    }
}
