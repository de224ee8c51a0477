//! RocketMQ's naming rules for topics and groups, in one place: the store refuses records for
//! badly named topics, the broker answers sends for them with INVALID_PARAMETER, and the
//! client refuses them before sending (docs/protocol.md §5.1, RocketMQ's `TopicValidator`).

use std::fmt;

/// Longest ordinary topic name (`maxTopicLength`).
pub const TOPIC_MAX_LENGTH: usize = 127;
/// Longest name of a retry (`%RETRY%group`) or dead-letter (`%DLQ%group`) topic, and of a
/// group: the group part may be up to 255 characters long.
pub const RETRY_DLQ_TOPIC_MAX_LENGTH: usize = 255;
/// Prefix of a consumer group's retry topic.
pub const RETRY_GROUP_TOPIC_PREFIX: &str = "%RETRY%";
/// Prefix of a consumer group's dead-letter topic.
pub const DLQ_GROUP_TOPIC_PREFIX: &str = "%DLQ%";

/// Why a topic name was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidName {
    /// The name is empty.
    Empty,
    /// The name is longer than the limit it is held to.
    TooLong {
        /// The limit.
        max: usize,
    },
    /// The name has a character outside `[%|a-zA-Z0-9_-]`.
    IllegalCharacter,
}

impl fmt::Display for InvalidName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("the topic name is empty"),
            Self::TooLong { max } => write!(f, "the topic name is longer than {max} characters"),
            Self::IllegalCharacter => f.write_str(
                "the topic name may only contain characters matching ^[%|a-zA-Z0-9_-]+$",
            ),
        }
    }
}

impl std::error::Error for InvalidName {}

/// Whether `topic` is a consumer group's retry or dead-letter topic.
pub fn is_retry_or_dlq_topic(topic: &str) -> bool {
    topic.starts_with(RETRY_GROUP_TOPIC_PREFIX) || topic.starts_with(DLQ_GROUP_TOPIC_PREFIX)
}

/// Checks a topic name: not empty, characters `[%|a-zA-Z0-9_-]`, at most 127 characters, or
/// 255 for retry and dead-letter topics.
pub fn validate_topic(topic: &str) -> Result<(), InvalidName> {
    if topic.is_empty() {
        return Err(InvalidName::Empty);
    }
    let max = if is_retry_or_dlq_topic(topic) {
        RETRY_DLQ_TOPIC_MAX_LENGTH
    } else {
        TOPIC_MAX_LENGTH
    };
    if topic.len() > max {
        return Err(InvalidName::TooLong { max });
    }
    if !topic
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
    {
        return Err(InvalidName::IllegalCharacter);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_rules() {
        assert_eq!(validate_topic("Topic_1-a%|"), Ok(()));
        assert_eq!(validate_topic(""), Err(InvalidName::Empty));
        assert_eq!(validate_topic("a b"), Err(InvalidName::IllegalCharacter));
        assert_eq!(validate_topic(&"x".repeat(127)), Ok(()));
        assert_eq!(
            validate_topic(&"x".repeat(128)),
            Err(InvalidName::TooLong { max: 127 })
        );
        let retry = format!("%RETRY%{}", "g".repeat(248));
        assert_eq!(retry.len(), 255);
        assert_eq!(validate_topic(&retry), Ok(()));
        assert_eq!(
            validate_topic(&format!("{retry}g")),
            Err(InvalidName::TooLong { max: 255 })
        );
        assert_eq!(validate_topic(&format!("%DLQ%{}", "g".repeat(250))), Ok(()));
    }
}
