//! Headers of the consumer-side requests that are not about offsets: handing a failed
//! message back (CONSUMER_SEND_MSG_BACK), the members of a group
//! (GET_CONSUMER_LIST_BY_GROUP) and leaving (UNREGISTER_CLIENT).

use crate::command::{ExtFields, HeaderError, RemotingCommand};

/// CONSUMER_SEND_MSG_BACK (36).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSendMsgBackRequestHeader {
    /// `offset`: commit-log offset of the message that failed.
    pub offset: i64,
    /// `group`: the consumer group.
    pub group: String,
    /// `delayLevel` (absent: 0, the broker picks 3 + reconsume times; negative: straight
    /// to the dead-letter queue).
    pub delay_level: i32,
    /// `originMsgId` (absent or empty: none).
    pub origin_msg_id: Option<String>,
    /// `maxReconsumeTimes`: the client's limit (honoured from V3_4_9 on).
    pub max_reconsume_times: Option<i32>,
}

impl ConsumerSendMsgBackRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            offset: req.get_i64("offset")?,
            group: req.get_str("group")?.to_string(),
            delay_level: req.get_i32_opt("delayLevel")?.unwrap_or(0),
            origin_msg_id: req
                .get_str_opt("originMsgId")
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            max_reconsume_times: req.get_i32_opt("maxReconsumeTimes")?,
        })
    }

    /// The `extFields` (optional ones only when set).
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("offset".into(), self.offset.to_string());
        f.insert("group".into(), self.group.clone());
        f.insert("delayLevel".into(), self.delay_level.to_string());
        if let Some(id) = &self.origin_msg_id {
            f.insert("originMsgId".into(), id.clone());
        }
        if let Some(max) = self.max_reconsume_times {
            f.insert("maxReconsumeTimes".into(), max.to_string());
        }
        f
    }
}

/// GET_CONSUMER_LIST_BY_GROUP (38).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetConsumerListByGroupRequestHeader {
    /// `consumerGroup`.
    pub consumer_group: String,
}

impl GetConsumerListByGroupRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: req.get_str("consumerGroup")?.to_string(),
        })
    }

    /// The `extFields`.
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("consumerGroup".into(), self.consumer_group.clone());
        f
    }
}

/// UNREGISTER_CLIENT (35): a client instance leaves its producer and/or consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnregisterClientRequestHeader {
    /// `clientID`.
    pub client_id: Option<String>,
    /// `producerGroup` (absent or empty: none).
    pub producer_group: Option<String>,
    /// `consumerGroup` (absent or empty: none).
    pub consumer_group: Option<String>,
}

impl UnregisterClientRequestHeader {
    /// Reads the header of a request (every field is optional).
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        let opt = |k: &str| {
            req.get_str_opt(k)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        Ok(Self {
            client_id: opt("clientID"),
            producer_group: opt("producerGroup"),
            consumer_group: opt("consumerGroup"),
        })
    }

    /// The `extFields` (set fields only).
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        for (k, v) in [
            ("clientID", &self.client_id),
            ("producerGroup", &self.producer_group),
            ("consumerGroup", &self.consumer_group),
        ] {
            if let Some(v) = v {
                f.insert(k.into(), v.clone());
            }
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::request_code;

    #[test]
    fn send_back_round_trips_and_names_fields() {
        let h = ConsumerSendMsgBackRequestHeader {
            offset: 42,
            group: "G".into(),
            delay_level: -1,
            origin_msg_id: Some("ID".into()),
            max_reconsume_times: Some(3),
        };
        let req = RemotingCommand::request(request_code::CONSUMER_SEND_MSG_BACK, h.to_ext_fields());
        assert_eq!(ConsumerSendMsgBackRequestHeader::parse(&req).unwrap(), h);
        let bad = req.with_ext("offset", "x");
        let e = ConsumerSendMsgBackRequestHeader::parse(&bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("<offset>"), "{e}");
    }

    #[test]
    fn unregister_ignores_empty_groups() {
        let req = RemotingCommand::request(request_code::UNREGISTER_CLIENT, ExtFields::new())
            .with_ext("producerGroup", "")
            .with_ext("consumerGroup", "CG");
        let h = UnregisterClientRequestHeader::parse(&req).unwrap();
        assert_eq!(h.producer_group, None);
        assert_eq!(h.consumer_group.as_deref(), Some("CG"));
    }
}
