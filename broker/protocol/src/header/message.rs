//! Headers of the requests about one stored message: reading it back by commit-log offset
//! (VIEW_MESSAGE_BY_ID) or by key (QUERY_MESSAGE), and deciding a transactional half message
//! (END_TRANSACTION).

use crate::command::{ExtFields, HeaderError, RemotingCommand};

/// VIEW_MESSAGE_BY_ID (33).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewMessageRequestHeader {
    /// `offset`: the commit-log offset an offset message id encodes.
    pub offset: i64,
}

impl ViewMessageRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            offset: req.get_i64("offset")?,
        })
    }

    /// The `extFields`.
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("offset".into(), self.offset.to_string());
        f
    }
}

/// QUERY_MESSAGE (12): messages of a topic whose KEYS (or UNIQ_KEY) match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryMessageRequestHeader {
    /// `topic`.
    pub topic: String,
    /// `key`.
    pub key: String,
    /// `maxNum` (absent: 32).
    pub max_num: i32,
    /// `beginTimestamp` (absent: 0).
    pub begin_timestamp: i64,
    /// `endTimestamp` (absent: no limit).
    pub end_timestamp: i64,
    /// `_UNIQUE_KEY_QUERY`: the key is a UNIQ_KEY (absent: false).
    pub unique_key_query: bool,
}

impl QueryMessageRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            topic: req.get_str("topic")?.to_string(),
            key: req.get_str("key")?.to_string(),
            max_num: req.get_i32_opt("maxNum")?.unwrap_or(32),
            begin_timestamp: req.get_i64_opt("beginTimestamp")?.unwrap_or(0),
            end_timestamp: req.get_i64_opt("endTimestamp")?.unwrap_or(i64::MAX),
            unique_key_query: req.get_bool_opt("_UNIQUE_KEY_QUERY")?.unwrap_or(false),
        })
    }

    /// The `extFields`.
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("topic".into(), self.topic.clone());
        f.insert("key".into(), self.key.clone());
        f.insert("maxNum".into(), self.max_num.to_string());
        f.insert("beginTimestamp".into(), self.begin_timestamp.to_string());
        f.insert("endTimestamp".into(), self.end_timestamp.to_string());
        f.insert(
            "_UNIQUE_KEY_QUERY".into(),
            self.unique_key_query.to_string(),
        );
        f
    }
}

/// END_TRANSACTION (37): a producer's decision on a half message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTransactionRequestHeader {
    /// `producerGroup`.
    pub producer_group: String,
    /// `tranStateTableOffset`: the half message's queue offset in the half topic.
    pub tran_state_table_offset: i64,
    /// `commitLogOffset`: the half message's commit-log offset.
    pub commit_log_offset: i64,
    /// `commitOrRollback`: a SYSFLAG transaction type (commit, rollback or not-type for
    /// "unknown").
    pub commit_or_rollback: i32,
}

impl EndTransactionRequestHeader {
    /// Reads the header of a request.
    pub fn parse(req: &RemotingCommand) -> Result<Self, HeaderError> {
        Ok(Self {
            producer_group: req.get_str("producerGroup")?.to_string(),
            tran_state_table_offset: req.get_i64("tranStateTableOffset")?,
            commit_log_offset: req.get_i64("commitLogOffset")?,
            commit_or_rollback: req.get_i32("commitOrRollback")?,
        })
    }

    /// The `extFields`.
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("producerGroup".into(), self.producer_group.clone());
        f.insert(
            "tranStateTableOffset".into(),
            self.tran_state_table_offset.to_string(),
        );
        f.insert("commitLogOffset".into(), self.commit_log_offset.to_string());
        f.insert(
            "commitOrRollback".into(),
            self.commit_or_rollback.to_string(),
        );
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::request_code;

    #[test]
    fn message_headers_round_trip_and_name_fields() {
        let q = QueryMessageRequestHeader {
            topic: "T".into(),
            key: "K".into(),
            max_num: 5,
            begin_timestamp: 1,
            end_timestamp: 2,
            unique_key_query: true,
        };
        let req = RemotingCommand::request(request_code::QUERY_MESSAGE, q.to_ext_fields());
        assert_eq!(QueryMessageRequestHeader::parse(&req).unwrap(), q);
        let e = EndTransactionRequestHeader::parse(
            &RemotingCommand::request(request_code::END_TRANSACTION, ExtFields::new())
                .with_ext("producerGroup", "PG"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("<tranStateTableOffset>"), "{e}");
    }
}
