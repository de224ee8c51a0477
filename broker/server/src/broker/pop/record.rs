//! ReviveRecord: how Pop state is kept durable. Every pop appends a checkpoint record and
//! every acknowledgement an ack record to the revive topic (`rmq_sys_REVIVE_LOG_<cluster>`,
//! RocketMQ's design), in the same CommitLog as the messages. So the state has the store's
//! durability (SYNC flush, crash recovery) and reaches the slaves with the log: a promoted
//! slave replays it and goes on redelivering what the old master's consumers did not
//! acknowledge. Records are small JSON bodies, told apart by their tag.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::inflight::{Checkpoint, CheckpointKey};

/// Prefix of the revive topic (RocketMQ's `PopAckConstants.REVIVE_TOPIC`); the cluster name
/// follows.
pub const REVIVE_TOPIC_PREFIX: &str = "rmq_sys_REVIVE_LOG_";
/// Queues of the revive topic (RocketMQ's `reviveQueueNum`).
pub const REVIVE_QUEUES: i32 = 8;
/// Tag of a checkpoint record (RocketMQ's `PopAckConstants.CK_TAG`).
pub const CK_TAG: &str = "ck";
/// Tag of an ack record (RocketMQ's `PopAckConstants.ACK_TAG`).
pub const ACK_TAG: &str = "ack";

/// The revive topic of a cluster.
pub fn revive_topic(cluster: &str) -> String {
    format!("{REVIVE_TOPIC_PREFIX}{cluster}")
}

/// A record of the revive log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviveRecord {
    /// A batch was popped.
    Checkpoint(CheckpointBody),
    /// Offsets of a batch were acknowledged (by a consumer, or because they were revived:
    /// redelivered through the retry topic, or moved to the dead-letter queue).
    Ack(AckBody),
}

/// A checkpoint as written (RocketMQ's `PopCheckPoint` field names, shortened likewise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointBody {
    /// Consumer group.
    #[serde(rename = "c")]
    pub group: String,
    /// Topic popped.
    #[serde(rename = "t")]
    pub topic: String,
    /// Queue popped.
    #[serde(rename = "q")]
    pub queue_id: i32,
    /// Start offset of the batch.
    #[serde(rename = "so")]
    pub start_offset: i64,
    /// Pop time (ms).
    #[serde(rename = "pt")]
    pub pop_time: i64,
    /// Invisible time (ms).
    #[serde(rename = "it")]
    pub invisible_ms: i64,
    /// Queue offsets delivered.
    #[serde(rename = "d")]
    pub offsets: Vec<i64>,
    /// Orderly attempts per offset (empty: all 0).
    #[serde(rename = "at", default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<i32>,
    /// Orderly group.
    #[serde(rename = "o", default)]
    pub orderly: bool,
}

/// An acknowledgement as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckBody {
    /// Consumer group.
    #[serde(rename = "c")]
    pub group: String,
    /// Topic popped.
    #[serde(rename = "t")]
    pub topic: String,
    /// Queue popped.
    #[serde(rename = "q")]
    pub queue_id: i32,
    /// Start offset of the batch.
    #[serde(rename = "so")]
    pub start_offset: i64,
    /// Pop time of the batch (ms).
    #[serde(rename = "pt")]
    pub pop_time: i64,
    /// The offsets acknowledged.
    #[serde(rename = "ao")]
    pub offsets: Vec<i64>,
}

/// Why a revive record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The tag is neither `ck` nor `ack`.
    #[error("revive record with unknown tag {0:?}")]
    Tag(Option<String>),
    /// The body is not the JSON of its kind.
    #[error("revive record body: {0}")]
    Body(#[from] serde_json::Error),
}

impl CheckpointBody {
    /// The record of a checkpoint.
    pub fn of(ck: &Checkpoint) -> Self {
        Self {
            group: ck.key.group.clone(),
            topic: ck.key.topic.clone(),
            queue_id: ck.key.queue_id,
            start_offset: ck.key.start_offset,
            pop_time: ck.key.pop_time,
            invisible_ms: ck.invisible_ms,
            offsets: ck.offsets.clone(),
            attempts: if ck.attempts.iter().all(|a| *a == 0) {
                Vec::new()
            } else {
                ck.attempts.clone()
            },
            orderly: ck.orderly,
        }
    }

    /// The checkpoint this record stands for, found at `revive_offset` of queue `revive_qid`.
    pub fn into_checkpoint(self, revive_qid: i32, revive_offset: i64) -> Checkpoint {
        let attempts = if self.attempts.len() == self.offsets.len() {
            self.attempts
        } else {
            vec![0; self.offsets.len()]
        };
        let mut pairs: Vec<(i64, i32)> = self.offsets.into_iter().zip(attempts).collect();
        pairs.sort_unstable();
        pairs.dedup_by_key(|(o, _)| *o);
        let (offsets, attempts) = pairs.into_iter().unzip();
        Checkpoint {
            key: CheckpointKey {
                group: self.group,
                topic: self.topic,
                queue_id: self.queue_id,
                start_offset: self.start_offset,
                pop_time: self.pop_time,
            },
            invisible_ms: self.invisible_ms,
            revive_qid,
            revive_offset,
            offsets,
            attempts,
            acked: BTreeSet::new(),
            orderly: self.orderly,
        }
    }
}

impl AckBody {
    /// An ack of `offsets` of checkpoint `key`.
    pub fn of(key: &CheckpointKey, offsets: Vec<i64>) -> Self {
        Self {
            group: key.group.clone(),
            topic: key.topic.clone(),
            queue_id: key.queue_id,
            start_offset: key.start_offset,
            pop_time: key.pop_time,
            offsets,
        }
    }

    /// The checkpoint acknowledged.
    pub fn key(&self) -> CheckpointKey {
        CheckpointKey {
            group: self.group.clone(),
            topic: self.topic.clone(),
            queue_id: self.queue_id,
            start_offset: self.start_offset,
            pop_time: self.pop_time,
        }
    }
}

impl ReviveRecord {
    /// The record's tag and body.
    pub fn encode(&self) -> (&'static str, Vec<u8>) {
        match self {
            // Serialising these plain structs cannot fail.
            Self::Checkpoint(c) => (CK_TAG, serde_json::to_vec(c).unwrap_or_default()),
            Self::Ack(a) => (ACK_TAG, serde_json::to_vec(a).unwrap_or_default()),
        }
    }

    /// Reads a record from its tag and body.
    pub fn decode(tag: Option<&str>, body: &[u8]) -> Result<Self, RecordError> {
        match tag {
            Some(CK_TAG) => Ok(Self::Checkpoint(serde_json::from_slice(body)?)),
            Some(ACK_TAG) => Ok(Self::Ack(serde_json::from_slice(body)?)),
            other => Err(RecordError::Tag(other.map(str::to_string))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_tag_and_body() {
        let ck = CheckpointBody {
            group: "g".into(),
            topic: "t".into(),
            queue_id: 3,
            start_offset: 10,
            pop_time: 1_700_000_000_000,
            invisible_ms: 30_000,
            offsets: vec![10, 11, 13],
            attempts: vec![],
            orderly: false,
        };
        let r = ReviveRecord::Checkpoint(ck.clone());
        let (tag, body) = r.encode();
        assert_eq!(tag, "ck");
        assert_eq!(ReviveRecord::decode(Some(tag), &body).unwrap(), r);
        let c = ck.into_checkpoint(2, 99);
        assert_eq!((c.revive_qid, c.revive_offset, c.end_offset()), (2, 99, 14));
        assert_eq!(c.attempts, vec![0, 0, 0]);
        let a = ReviveRecord::Ack(AckBody::of(&c.key, vec![11]));
        let (tag, body) = a.encode();
        assert_eq!(ReviveRecord::decode(Some(tag), &body).unwrap(), a);
        assert!(ReviveRecord::decode(Some("x"), b"{}").is_err());
        assert!(ReviveRecord::decode(Some("ck"), b"not json").is_err());
    }
}
