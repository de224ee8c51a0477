//! Typed request headers shared by the client (which writes them) and the broker (which reads
//! them), so the two sides cannot drift apart. Each header is parsed once, up front; a
//! missing or malformed field is a [`HeaderError`] naming it, which the broker answers with
//! INVALID_PARAMETER.
//!
//! - [`SendMessageHeader`]: SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE.
//! - [`PullMessageHeader`]: PULL_MESSAGE / LITE_PULL_MESSAGE.
//! - [`offset`]: consumer offsets and queue positions.
//! - [`consumer`]: send-back, group members, unregistering.
//! - [`message`]: one message by offset or key, END_TRANSACTION.
//! - [`admin`]: the admin requests `mqadmin` sends to a broker.

pub mod admin;
pub mod consumer;
pub mod message;
pub mod offset;

use crate::code::request_code;
use crate::command::{ExtFields, HeaderError, RemotingCommand};

/// The SEND_MESSAGE (10) / SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320) request header
/// (docs/protocol.md §5.1) in its logical form. Code 10 carries long keys
/// (`producerGroup`, …), codes 310/320 the short keys `a`…`n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendMessageHeader {
    /// `a`: producer group.
    pub producer_group: String,
    /// `b`: topic.
    pub topic: String,
    /// `c`: template topic for auto-creation (`TBW102`).
    pub default_topic: String,
    /// `d`: queue count for auto-creation.
    pub default_topic_queue_nums: i32,
    /// `e`: queue id (negative: the broker picks one).
    pub queue_id: i32,
    /// `f`: SYSFLAG.
    pub sys_flag: i32,
    /// `g`: born timestamp (ms).
    pub born_timestamp: i64,
    /// `h`: user flag.
    pub flag: i32,
    /// `i`: properties string.
    pub properties: String,
    /// `j`: reconsume times (re-sends to a retry topic).
    pub reconsume_times: i32,
    /// `k`: unit mode.
    pub unit_mode: bool,
    /// `l`: max reconsume times (retry topics only).
    pub max_reconsume_times: Option<i32>,
    /// `m`: batch.
    pub batch: bool,
    /// `n` (`bname` in long form): target broker name.
    pub broker_name: Option<String>,
}

/// The auto-create template topic a header names when it names none.
const DEFAULT_TOPIC: &str = "TBW102";

impl SendMessageHeader {
    /// Reads the header of a SEND request, whichever key set it uses.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        let short = req.code != request_code::SEND_MESSAGE;
        let k = |long: &'static str, short_key: &'static str| if short { short_key } else { long };
        Ok(Self {
            producer_group: req.get_str(k("producerGroup", "a"))?.to_string(),
            topic: req.get_str(k("topic", "b"))?.to_string(),
            default_topic: req
                .get_str_opt(k("defaultTopic", "c"))
                .unwrap_or(DEFAULT_TOPIC)
                .to_string(),
            default_topic_queue_nums: req
                .get_i32_opt(k("defaultTopicQueueNums", "d"))?
                .unwrap_or(4),
            queue_id: req.get_i32(k("queueId", "e"))?,
            sys_flag: req.get_i32_opt(k("sysFlag", "f"))?.unwrap_or(0),
            born_timestamp: req.get_i64_opt(k("bornTimestamp", "g"))?.unwrap_or(0),
            flag: req.get_i32_opt(k("flag", "h"))?.unwrap_or(0),
            properties: req
                .get_str_opt(k("properties", "i"))
                .unwrap_or_default()
                .to_string(),
            reconsume_times: req.get_i32_opt(k("reconsumeTimes", "j"))?.unwrap_or(0),
            unit_mode: req.get_bool_opt(k("unitMode", "k"))?.unwrap_or(false),
            max_reconsume_times: req.get_i32_opt(k("maxReconsumeTimes", "l"))?,
            batch: req.code == request_code::SEND_BATCH_MESSAGE
                || req.get_bool_opt(k("batch", "m"))?.unwrap_or(false),
            broker_name: req
                .get_str_opt(k("bname", "n"))
                .filter(|b| !b.is_empty())
                .map(str::to_string),
        })
    }

    /// The short-key `extFields` of codes 310/320 (`l` and `n` only when set).
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("a".into(), self.producer_group.clone());
        f.insert("b".into(), self.topic.clone());
        f.insert("c".into(), self.default_topic.clone());
        f.insert("d".into(), self.default_topic_queue_nums.to_string());
        f.insert("e".into(), self.queue_id.to_string());
        f.insert("f".into(), self.sys_flag.to_string());
        f.insert("g".into(), self.born_timestamp.to_string());
        f.insert("h".into(), self.flag.to_string());
        f.insert("i".into(), self.properties.clone());
        f.insert("j".into(), self.reconsume_times.to_string());
        f.insert("k".into(), self.unit_mode.to_string());
        if let Some(max) = self.max_reconsume_times {
            f.insert("l".into(), max.to_string());
        }
        f.insert("m".into(), self.batch.to_string());
        if let Some(b) = &self.broker_name {
            f.insert("n".into(), b.clone());
        }
        f
    }
}

/// The PULL_MESSAGE (11) / LITE_PULL_MESSAGE (361) request header (docs/protocol.md §6.5),
/// RocketMQ's `PullMessageRequestHeader`. Java marks most fields required; the broker has
/// always accepted their absence with RocketMQ's defaults, so only the queue coordinates are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullMessageHeader {
    /// `consumerGroup`.
    pub consumer_group: String,
    /// `topic`.
    pub topic: String,
    /// `queueId`.
    pub queue_id: i32,
    /// `queueOffset`: first offset wanted.
    pub queue_offset: i64,
    /// `maxMsgNums` (absent: 32).
    pub max_msg_nums: i32,
    /// `sysFlag`: PullSysFlag bits (absent: 0).
    pub sys_flag: i32,
    /// `commitOffset`: offset to commit while pulling (absent: -1, none).
    pub commit_offset: i64,
    /// `suspendTimeoutMillis`: how long the broker may hold the pull (absent: 0).
    pub suspend_timeout_millis: i64,
    /// `subscription`: the expression, when the SUBSCRIPTION flag is set.
    pub subscription: Option<String>,
    /// `subVersion`: the subscription's version (absent: 0).
    pub sub_version: i64,
    /// `expressionType`: `TAG` or `SQL92`.
    pub expression_type: Option<String>,
    /// `maxMsgBytes` (5.x): most bytes to return.
    pub max_msg_bytes: Option<i32>,
}

impl PullMessageHeader {
    /// Reads the header of a PULL request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: req.get_str("consumerGroup")?.to_string(),
            topic: req.get_str("topic")?.to_string(),
            queue_id: req.get_i32("queueId")?,
            queue_offset: req.get_i64("queueOffset")?,
            max_msg_nums: req.get_i32_opt("maxMsgNums")?.unwrap_or(32),
            sys_flag: req.get_i32_opt("sysFlag")?.unwrap_or(0),
            commit_offset: req.get_i64_opt("commitOffset")?.unwrap_or(-1),
            suspend_timeout_millis: req.get_i64_opt("suspendTimeoutMillis")?.unwrap_or(0),
            sub_version: req.get_i64_opt("subVersion")?.unwrap_or(0),
            max_msg_bytes: req.get_i32_opt("maxMsgBytes")?,
            subscription: req.get_str_opt("subscription").map(str::to_string),
            expression_type: req.get_str_opt("expressionType").map(str::to_string),
        })
    }

    /// The `extFields` (long keys; optional ones only when set).
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("consumerGroup".into(), self.consumer_group.clone());
        f.insert("topic".into(), self.topic.clone());
        f.insert("queueId".into(), self.queue_id.to_string());
        f.insert("queueOffset".into(), self.queue_offset.to_string());
        f.insert("maxMsgNums".into(), self.max_msg_nums.to_string());
        f.insert("sysFlag".into(), self.sys_flag.to_string());
        f.insert("commitOffset".into(), self.commit_offset.to_string());
        f.insert(
            "suspendTimeoutMillis".into(),
            self.suspend_timeout_millis.to_string(),
        );
        f.insert("subVersion".into(), self.sub_version.to_string());
        if let Some(s) = &self.subscription {
            f.insert("subscription".into(), s.clone());
        }
        if let Some(t) = &self.expression_type {
            f.insert("expressionType".into(), t.clone());
        }
        if let Some(b) = self.max_msg_bytes {
            f.insert("maxMsgBytes".into(), b.to_string());
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_and_long_headers_read_the_same() {
        let v2 = RemotingCommand::request(request_code::SEND_MESSAGE_V2, ExtFields::new())
            .with_ext("a", "PG")
            .with_ext("b", "T")
            .with_ext("c", "TBW102")
            .with_ext("d", 4)
            .with_ext("e", 2)
            .with_ext("f", 0)
            .with_ext("g", 1)
            .with_ext("h", 0)
            .with_ext("i", "TAGS\u{1}a\u{2}");
        let long = RemotingCommand::request(request_code::SEND_MESSAGE, ExtFields::new())
            .with_ext("producerGroup", "PG")
            .with_ext("topic", "T")
            .with_ext("defaultTopic", "TBW102")
            .with_ext("defaultTopicQueueNums", 4)
            .with_ext("queueId", 2)
            .with_ext("sysFlag", 0)
            .with_ext("bornTimestamp", 1)
            .with_ext("flag", 0)
            .with_ext("properties", "TAGS\u{1}a\u{2}");
        let a = SendMessageHeader::parse(&v2).unwrap();
        let b = SendMessageHeader::parse(&long).unwrap();
        assert_eq!(a, b);
        // What the client writes, the broker reads back unchanged.
        let round = RemotingCommand::request(request_code::SEND_MESSAGE_V2, a.to_ext_fields());
        assert_eq!(SendMessageHeader::parse(&round).unwrap(), a);
        let missing = RemotingCommand::request(request_code::SEND_MESSAGE_V2, ExtFields::new());
        assert!(SendMessageHeader::parse(&missing)
            .unwrap_err()
            .to_string()
            .contains("<a>"));
    }

    #[test]
    fn pull_header_defaults_and_field_named_errors() {
        let req = RemotingCommand::request(request_code::PULL_MESSAGE, ExtFields::new())
            .with_ext("consumerGroup", "G")
            .with_ext("topic", "T")
            .with_ext("queueId", 1)
            .with_ext("queueOffset", 7);
        let h = PullMessageHeader::parse(&req).unwrap();
        assert_eq!((h.max_msg_nums, h.sys_flag, h.commit_offset), (32, 0, -1));
        assert_eq!((h.suspend_timeout_millis, h.sub_version), (0, 0));
        assert_eq!((h.subscription.as_deref(), h.max_msg_bytes), (None, None));
        let round = RemotingCommand::request(request_code::PULL_MESSAGE, h.to_ext_fields());
        assert_eq!(PullMessageHeader::parse(&round).unwrap(), h);

        let mut missing = req.clone();
        missing.ext_fields.remove("queueOffset");
        let e = PullMessageHeader::parse(&missing).unwrap_err().to_string();
        assert!(e.contains("<queueOffset>"), "{e}");
        let bad = req.with_ext("maxMsgNums", "many");
        let e = PullMessageHeader::parse(&bad).unwrap_err().to_string();
        assert!(e.contains("<maxMsgNums>"), "{e}");
    }
}
