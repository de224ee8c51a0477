//! Headers of the offset requests: a group's committed offsets (QUERY_CONSUMER_OFFSET,
//! UPDATE_CONSUMER_OFFSET) and the queue positions consumers and tools seek by
//! (GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME, SEARCH_OFFSET_BY_TIMESTAMP).

use crate::command::{ExtFields, HeaderError, RemotingCommand};

/// A queue of a topic: the header of GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) and
/// GET_EARLIEST_MSG_STORETIME (32) (RocketMQ has one class per code, all with these fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRequestHeader {
    /// `topic`.
    pub topic: String,
    /// `queueId`.
    pub queue_id: i32,
}

impl QueueRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            topic: req.get_str("topic")?.to_string(),
            queue_id: req.get_i32("queueId")?,
        })
    }

    /// The `extFields`.
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("topic".into(), self.topic.clone());
        f.insert("queueId".into(), self.queue_id.to_string());
        f
    }
}

/// Which message of a timestamp SEARCH_OFFSET_BY_TIMESTAMP answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BoundaryType {
    /// The first message stored at or after the timestamp (RocketMQ's default).
    #[default]
    Lower,
    /// The last message stored at or before it.
    Upper,
}

/// SEARCH_OFFSET_BY_TIMESTAMP (29).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchOffsetRequestHeader {
    /// `topic`.
    pub topic: String,
    /// `queueId`.
    pub queue_id: i32,
    /// `timestamp` (ms).
    pub timestamp: i64,
    /// `boundaryType`: `upper` (any case) or anything else for lower.
    pub boundary_type: BoundaryType,
}

impl SearchOffsetRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            topic: req.get_str("topic")?.to_string(),
            queue_id: req.get_i32("queueId")?,
            timestamp: req.get_i64("timestamp")?,
            boundary_type: match req.get_str_opt("boundaryType") {
                Some(b) if b.eq_ignore_ascii_case("upper") => BoundaryType::Upper,
                _ => BoundaryType::Lower,
            },
        })
    }

    /// The `extFields`.
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("topic".into(), self.topic.clone());
        f.insert("queueId".into(), self.queue_id.to_string());
        f.insert("timestamp".into(), self.timestamp.to_string());
        let boundary = match self.boundary_type {
            BoundaryType::Lower => "LOWER",
            BoundaryType::Upper => "UPPER",
        };
        f.insert("boundaryType".into(), boundary.into());
        f
    }
}

/// QUERY_CONSUMER_OFFSET (14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryConsumerOffsetRequestHeader {
    /// `consumerGroup`.
    pub consumer_group: String,
    /// `topic`.
    pub topic: String,
    /// `queueId`.
    pub queue_id: i32,
    /// `setZeroIfNotFound` (absent: true): a group that never committed starts at 0 on a
    /// queue that still holds its first message.
    pub set_zero_if_not_found: bool,
}

impl QueryConsumerOffsetRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: req.get_str("consumerGroup")?.to_string(),
            topic: req.get_str("topic")?.to_string(),
            queue_id: req.get_i32("queueId")?,
            set_zero_if_not_found: req.get_bool_opt("setZeroIfNotFound")?.unwrap_or(true),
        })
    }

    /// The `extFields`.
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("consumerGroup".into(), self.consumer_group.clone());
        f.insert("topic".into(), self.topic.clone());
        f.insert("queueId".into(), self.queue_id.to_string());
        f.insert(
            "setZeroIfNotFound".into(),
            self.set_zero_if_not_found.to_string(),
        );
        f
    }
}

/// UPDATE_CONSUMER_OFFSET (15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateConsumerOffsetRequestHeader {
    /// `consumerGroup`.
    pub consumer_group: String,
    /// `topic`.
    pub topic: String,
    /// `queueId`.
    pub queue_id: i32,
    /// `commitOffset`.
    pub commit_offset: i64,
}

impl UpdateConsumerOffsetRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: req.get_str("consumerGroup")?.to_string(),
            topic: req.get_str("topic")?.to_string(),
            queue_id: req.get_i32("queueId")?,
            commit_offset: req.get_i64("commitOffset")?,
        })
    }

    /// The `extFields`.
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("consumerGroup".into(), self.consumer_group.clone());
        f.insert("topic".into(), self.topic.clone());
        f.insert("queueId".into(), self.queue_id.to_string());
        f.insert("commitOffset".into(), self.commit_offset.to_string());
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::request_code;

    #[test]
    fn offset_headers_round_trip_and_name_fields() {
        let h = SearchOffsetRequestHeader {
            topic: "T".into(),
            queue_id: 1,
            timestamp: 5,
            boundary_type: BoundaryType::Upper,
        };
        let req =
            RemotingCommand::request(request_code::SEARCH_OFFSET_BY_TIMESTAMP, h.to_ext_fields());
        assert_eq!(SearchOffsetRequestHeader::parse(&req).unwrap(), h);
        let q = QueryConsumerOffsetRequestHeader {
            consumer_group: "G".into(),
            topic: "T".into(),
            queue_id: 0,
            set_zero_if_not_found: false,
        };
        let req = RemotingCommand::request(request_code::QUERY_CONSUMER_OFFSET, q.to_ext_fields());
        assert_eq!(QueryConsumerOffsetRequestHeader::parse(&req).unwrap(), q);

        let missing = RemotingCommand::request(request_code::GET_MAX_OFFSET, ExtFields::new())
            .with_ext("topic", "T");
        let e = QueueRequestHeader::parse(&missing).unwrap_err().to_string();
        assert!(e.contains("<queueId>"), "{e}");
    }
}
