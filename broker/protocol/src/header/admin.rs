//! Headers of the admin requests `mqadmin` (and Conveyor's admin client) send to a broker,
//! named after RocketMQ's `*RequestHeader` classes. Most carry one field; the topic-creation
//! header carries the whole topic config.

use std::collections::BTreeMap;

use crate::command::{ExtFields, HeaderError, RemotingCommand};
use crate::route::{perm, TopicFilterType};

/// Declares a header made of one required string field.
macro_rules! single_field_header {
    ($(#[$doc:meta])* $name:ident { $field:ident : $key:literal }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            #[doc = concat!("`", $key, "`.")]
            pub $field: String,
        }

        impl $name {
            /// Reads the header of a request.
            pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
                Ok(Self {
                    $field: req.get_str($key)?.to_string(),
                })
            }

            /// The `extFields`.
            pub fn to_ext_fields(&self) -> ExtFields {
                let mut f = ExtFields::new();
                f.insert($key.into(), self.$field.clone());
                f
            }
        }
    };
}

single_field_header!(
    /// DELETE_TOPIC_IN_BROKER (215).
    DeleteTopicRequestHeader { topic: "topic" }
);
single_field_header!(
    /// GET_TOPIC_CONFIG (351).
    GetTopicConfigRequestHeader { topic: "topic" }
);
single_field_header!(
    /// GET_TOPIC_STATS_INFO (202).
    GetTopicStatsInfoRequestHeader { topic: "topic" }
);
single_field_header!(
    /// GET_CONSUMER_CONNECTION_LIST (203).
    GetConsumerConnectionListRequestHeader { consumer_group: "consumerGroup" }
);
single_field_header!(
    /// GET_SUBSCRIPTIONGROUP_CONFIG (352).
    GetSubscriptionGroupConfigRequestHeader { group: "group" }
);
single_field_header!(
    /// DELETE_SUBSCRIPTIONGROUP (207).
    DeleteSubscriptionGroupRequestHeader { group_name: "groupName" }
);
single_field_header!(
    /// QUERY_TOPIC_CONSUME_BY_WHO (300).
    QueryTopicConsumeByWhoRequestHeader { topic: "topic" }
);
single_field_header!(
    /// QUERY_TOPICS_BY_CONSUMER (343).
    QueryTopicsByConsumerRequestHeader { group: "group" }
);

single_field_header!(
    /// GET_PRODUCER_CONNECTION_LIST (204).
    GetProducerConnectionListRequestHeader { producer_group: "producerGroup" }
);

/// GET_CONSUMER_RUNNING_INFO (307), from mqadmin to the broker and from the broker to the
/// client named: the client's own view of its consumption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetConsumerRunningInfoRequestHeader {
    /// `consumerGroup`.
    pub consumer_group: String,
    /// `clientId`.
    pub client_id: String,
    /// `jstackEnable`: the client adds its threads' stacks.
    pub jstack_enable: bool,
}

impl GetConsumerRunningInfoRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: req.get_str("consumerGroup")?.to_string(),
            client_id: req.get_str("clientId")?.to_string(),
            jstack_enable: req.get_bool_opt("jstackEnable")?.unwrap_or(false),
        })
    }

    /// The `extFields`.
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("consumerGroup".into(), self.consumer_group.clone());
        f.insert("clientId".into(), self.client_id.clone());
        f.insert("jstackEnable".into(), self.jstack_enable.to_string());
        f
    }
}

/// CLONE_GROUP_OFFSET (314): copy `src_group`'s committed offsets to `dest_group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneGroupOffsetRequestHeader {
    /// `srcGroup`.
    pub src_group: String,
    /// `destGroup`.
    pub dest_group: String,
    /// `topic`; absent or empty: every topic `src_group` has offsets on.
    pub topic: Option<String>,
    /// `offline`: copy even topics the live source group no longer subscribes to.
    pub offline: bool,
}

impl CloneGroupOffsetRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            src_group: req.get_str("srcGroup")?.to_string(),
            dest_group: req.get_str("destGroup")?.to_string(),
            topic: req
                .get_str_opt("topic")
                .filter(|t| !t.is_empty())
                .map(str::to_string),
            offline: req.get_bool_opt("offline")?.unwrap_or(false),
        })
    }
}

/// QUERY_CONSUME_QUEUE (321): `count` entries of one ConsumeQueue from `index`, with the
/// group's subscription when `consumer_group` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryConsumeQueueRequestHeader {
    /// `topic`.
    pub topic: String,
    /// `queueId`.
    pub queue_id: i32,
    /// `index`: the first queue offset.
    pub index: i64,
    /// `count`.
    pub count: i32,
    /// `consumerGroup` (optional).
    pub consumer_group: Option<String>,
}

impl QueryConsumeQueueRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            topic: req.get_str("topic")?.to_string(),
            queue_id: req.get_i32("queueId")?,
            index: req.get_i64("index")?,
            count: req.get_i32("count")?,
            consumer_group: req
                .get_str_opt("consumerGroup")
                .filter(|g| !g.is_empty())
                .map(str::to_string),
        })
    }
}

/// INVOKE_BROKER_TO_RESET_OFFSET (222) from mqadmin, and RESET_CONSUMER_CLIENT_OFFSET (220)
/// from the broker to the group's consumers: move `group`'s offsets on `topic` to the first
/// message stored at or after `timestamp` (ms; -1: the queue's end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetOffsetRequestHeader {
    /// `topic`.
    pub topic: String,
    /// `group`.
    pub group: String,
    /// `timestamp`.
    pub timestamp: i64,
    /// `isForce`: move forward too (otherwise only backwards).
    pub is_force: bool,
}

impl ResetOffsetRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            topic: req.get_str("topic")?.to_string(),
            group: req.get_str("group")?.to_string(),
            timestamp: req.get_i64("timestamp")?,
            is_force: req.get_bool_opt("isForce")?.unwrap_or(false),
        })
    }

    /// The `extFields`.
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("topic".into(), self.topic.clone());
        f.insert("group".into(), self.group.clone());
        f.insert("timestamp".into(), self.timestamp.to_string());
        f.insert("isForce".into(), self.is_force.to_string());
        f
    }
}

/// GET_CONSUME_STATS (208): one group's progress, on one topic or all it consumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetConsumeStatsRequestHeader {
    /// `consumerGroup`.
    pub consumer_group: String,
    /// `topic`; absent or empty means every topic of the group.
    pub topic: Option<String>,
}

impl GetConsumeStatsRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: req.get_str("consumerGroup")?.to_string(),
            topic: req
                .get_str_opt("topic")
                .filter(|t| !t.is_empty())
                .map(str::to_string),
        })
    }

    /// The `extFields` (`topic` only when set).
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("consumerGroup".into(), self.consumer_group.clone());
        if let Some(t) = &self.topic {
            f.insert("topic".into(), t.clone());
        }
        f
    }
}

/// UPDATE_AND_CREATE_TOPIC (17): the topic config to create or replace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopicRequestHeader {
    /// `topic`.
    pub topic: String,
    /// `readQueueNums`.
    pub read_queue_nums: i32,
    /// `writeQueueNums`.
    pub write_queue_nums: i32,
    /// `perm` (absent: read and write).
    pub perm: i32,
    /// `topicFilterType` (`MULTI_TAG`; anything else is single-tag).
    pub topic_filter_type: TopicFilterType,
    /// `topicSysFlag` (absent: 0).
    pub topic_sys_flag: i32,
    /// `order` (absent: false).
    pub order: bool,
    /// `attributes`: RocketMQ's `+key=value,+key2=value2` updates; entries without the `+`
    /// (deletions) are not kept.
    pub attributes: BTreeMap<String, String>,
}

impl CreateTopicRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        let topic_filter_type = match req.get_str_opt("topicFilterType") {
            Some("MULTI_TAG") => TopicFilterType::MultiTag,
            _ => TopicFilterType::SingleTag,
        };
        Ok(Self {
            topic: req.get_str("topic")?.to_string(),
            read_queue_nums: req.get_i32("readQueueNums")?,
            write_queue_nums: req.get_i32("writeQueueNums")?,
            perm: req.get_i32_opt("perm")?.unwrap_or(perm::READ_WRITE),
            topic_filter_type,
            topic_sys_flag: req.get_i32_opt("topicSysFlag")?.unwrap_or(0),
            order: req.get_bool_opt("order")?.unwrap_or(false),
            attributes: parse_attributes(req.get_str_opt("attributes").unwrap_or_default()),
        })
    }

    /// The `extFields`.
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("topic".into(), self.topic.clone());
        f.insert("readQueueNums".into(), self.read_queue_nums.to_string());
        f.insert("writeQueueNums".into(), self.write_queue_nums.to_string());
        f.insert("perm".into(), self.perm.to_string());
        let filter = match self.topic_filter_type {
            TopicFilterType::MultiTag => "MULTI_TAG",
            TopicFilterType::SingleTag => "SINGLE_TAG",
        };
        f.insert("topicFilterType".into(), filter.into());
        f.insert("topicSysFlag".into(), self.topic_sys_flag.to_string());
        f.insert("order".into(), self.order.to_string());
        if !self.attributes.is_empty() {
            let attrs: Vec<String> = self
                .attributes
                .iter()
                .map(|(k, v)| format!("+{k}={v}"))
                .collect();
            f.insert("attributes".into(), attrs.join(","));
        }
        f
    }
}

/// The `+key=value` entries of an `attributes` field.
fn parse_attributes(text: &str) -> BTreeMap<String, String> {
    text.split(',')
        .filter_map(|a| a.strip_prefix('+')?.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::request_code;

    #[test]
    fn create_topic_round_trips_and_names_missing_fields() {
        let mut attributes = BTreeMap::new();
        attributes.insert("message.type".to_string(), "NORMAL".to_string());
        let h = CreateTopicRequestHeader {
            topic: "T".into(),
            read_queue_nums: 4,
            write_queue_nums: 4,
            perm: 6,
            topic_filter_type: TopicFilterType::MultiTag,
            topic_sys_flag: 0,
            order: true,
            attributes,
        };
        let req =
            RemotingCommand::request(request_code::UPDATE_AND_CREATE_TOPIC, h.to_ext_fields());
        assert_eq!(CreateTopicRequestHeader::parse(&req).unwrap(), h);

        let bare =
            RemotingCommand::request(request_code::UPDATE_AND_CREATE_TOPIC, ExtFields::new())
                .with_ext("topic", "T")
                .with_ext("readQueueNums", 1);
        let e = CreateTopicRequestHeader::parse(&bare)
            .unwrap_err()
            .to_string();
        assert!(e.contains("<writeQueueNums>"), "{e}");
        let h = CreateTopicRequestHeader::parse(&bare.with_ext("writeQueueNums", 2)).unwrap();
        assert_eq!((h.perm, h.order), (perm::READ_WRITE, false));
        assert_eq!(h.topic_filter_type, TopicFilterType::SingleTag);
    }

    #[test]
    fn attributes_keep_only_additions() {
        let a = parse_attributes("+a=1,-b,+c=x=y,d=2");
        assert_eq!(a.len(), 2);
        assert_eq!(a["a"], "1");
        assert_eq!(a["c"], "x=y");
    }

    #[test]
    fn single_field_headers_name_their_field() {
        let req =
            RemotingCommand::request(request_code::DELETE_SUBSCRIPTIONGROUP, ExtFields::new());
        let e = DeleteSubscriptionGroupRequestHeader::parse(&req)
            .unwrap_err()
            .to_string();
        assert!(e.contains("<groupName>"), "{e}");
        let stats = GetConsumeStatsRequestHeader::parse(
            &req.with_ext("consumerGroup", "G").with_ext("topic", ""),
        )
        .unwrap();
        assert_eq!(stats.topic, None);
    }
}
