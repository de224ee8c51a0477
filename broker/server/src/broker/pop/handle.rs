//! ReceiptHandle: what a Pop consumer gets with each message and sends back to acknowledge it
//! or change its invisible time. It is RocketMQ's "extra info" string (`ExtraInfoUtil`), so
//! the 5.x remoting clients, which build it themselves from the POP response header, and the
//! gRPC SDKs, which echo it opaquely, both work: space-separated
//! `ckQueueOffset popTime invisibleTime reviveQid topicType brokerName queueId queueOffset`,
//! with topicType `0` for the topic itself and `1` (`2`: RocketMQ's V2 retry naming) for the
//! group's pop retry topic. A commit-log offset may follow; it is not needed.

use std::fmt;

/// Topic type of a handle whose message came from the topic itself.
pub const NORMAL_TOPIC: &str = "0";
/// Topic type of a handle whose message came from the group's pop retry topic.
pub const RETRY_TOPIC: &str = "1";
/// Same, for RocketMQ's V2 retry topic names (`%RETRY%group+topic`).
pub const RETRY_TOPIC_V2: &str = "2";

/// A parsed receipt handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptHandle {
    /// The checkpoint's start offset (RocketMQ's `ckQueueOffset`).
    pub start_offset: i64,
    /// When the batch was popped (ms since the epoch).
    pub pop_time: i64,
    /// Invisible time of the batch (ms).
    pub invisible_ms: i64,
    /// Revive queue of the checkpoint.
    pub revive_qid: i32,
    /// The message came from the group's pop retry topic.
    pub retry: bool,
    /// The broker (group) that popped it.
    pub broker_name: String,
    /// The queue popped.
    pub queue_id: i32,
    /// The message's queue offset.
    pub offset: i64,
}

/// Why a receipt handle was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid receipt handle {0:?}: expected 'startOffset popTime invisibleTime reviveQid topicType brokerName queueId offset'")]
pub struct InvalidHandle(pub String);

impl ReceiptHandle {
    /// Parses a handle (a remoting client's `extraInfo`, with the queue offset either inside
    /// it or given apart as `offset`).
    pub fn parse(text: &str, offset: Option<i64>) -> Result<Self, InvalidHandle> {
        let bad = || InvalidHandle(text.chars().take(200).collect());
        let f: Vec<&str> = text.split(' ').collect();
        if f.len() < 7 {
            return Err(bad());
        }
        let num = |i: usize| f[i].parse::<i64>().map_err(|_| bad());
        let retry = match f[4] {
            NORMAL_TOPIC => false,
            RETRY_TOPIC | RETRY_TOPIC_V2 => true,
            _ => return Err(bad()),
        };
        let offset = match (f.get(7), offset) {
            (Some(o), _) => o.parse::<i64>().map_err(|_| bad())?,
            (None, Some(o)) => o,
            (None, None) => return Err(bad()),
        };
        let handle = Self {
            start_offset: num(0)?,
            pop_time: num(1)?,
            invisible_ms: num(2)?,
            revive_qid: i32::try_from(num(3)?).map_err(|_| bad())?,
            retry,
            broker_name: f[5].to_string(),
            queue_id: i32::try_from(num(6)?).map_err(|_| bad())?,
            offset,
        };
        if handle.start_offset < 0 || handle.offset < 0 || handle.invisible_ms < 0 {
            return Err(bad());
        }
        Ok(handle)
    }

    /// When the message becomes visible again.
    pub fn revive_time(&self) -> i64 {
        self.pop_time.saturating_add(self.invisible_ms)
    }
}

impl fmt::Display for ReceiptHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {} {} {}",
            self.start_offset,
            self.pop_time,
            self.invisible_ms,
            self.revive_qid,
            if self.retry {
                RETRY_TOPIC
            } else {
                NORMAL_TOPIC
            },
            self.broker_name,
            self.queue_id,
            self.offset
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_round_trips_and_bad_ones_are_refused() {
        let h = ReceiptHandle {
            start_offset: 10,
            pop_time: 1_700_000_000_000,
            invisible_ms: 30_000,
            revive_qid: 3,
            retry: true,
            broker_name: "broker-a".into(),
            queue_id: 2,
            offset: 12,
        };
        let text = h.to_string();
        assert_eq!(text, "10 1700000000000 30000 3 1 broker-a 2 12");
        assert_eq!(ReceiptHandle::parse(&text, None).unwrap(), h);
        assert_eq!(h.revive_time(), 1_700_000_030_000);
        // The remoting client's form: the offset apart, a commit-log offset may follow.
        let short = "10 1700000000000 30000 3 1 broker-a 2";
        assert_eq!(ReceiptHandle::parse(short, Some(12)).unwrap(), h);
        assert_eq!(
            ReceiptHandle::parse(&format!("{text} 4096"), None).unwrap(),
            h
        );
        for bad in [
            "",
            "1 2 3",
            "x 1 2 3 0 b 1 1",
            "1 2 3 4 9 b 1 1",
            "-1 2 3 4 0 b 1 1",
        ] {
            assert!(ReceiptHandle::parse(bad, Some(1)).is_err(), "{bad:?}");
        }
        assert!(
            ReceiptHandle::parse(short, None).is_err(),
            "no offset anywhere"
        );
    }
}
