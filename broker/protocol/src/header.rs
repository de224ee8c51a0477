//! Typed request headers shared by the client (which writes them) and the broker (which reads
//! them), so the two sides cannot drift apart.

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
}
