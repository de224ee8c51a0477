//! Tag subscription expressions (docs/protocol.md §6.1): `*` (or empty) for everything,
//! otherwise tags separated by `||`. The same parsed form feeds the heartbeat's
//! `subscriptionDataSet`, the PULL header's `subscription`, and the client-side re-filtering
//! of pulled messages (the broker filters by tag hash code, which can collide).

use conveyor_protocol::message::tag_hash_code;
use conveyor_protocol::route::{SubscriptionData, EXPRESSION_TYPE_TAG};

use crate::error::ClientError;

/// The expression meaning "all tags".
pub const SUB_ALL: &str = "*";

/// A parsed TAG subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    expression: String,
    tags: Vec<String>,
}

impl Default for Subscription {
    fn default() -> Self {
        Self::all()
    }
}

impl Subscription {
    /// Subscribes to every message.
    pub fn all() -> Self {
        Self {
            expression: SUB_ALL.to_string(),
            tags: Vec::new(),
        }
    }

    /// Parses `*`, an empty string, or `TagA || TagB` (whitespace around tags ignored,
    /// duplicates dropped). An expression with separators but no tag is rejected.
    pub fn parse(expression: &str) -> Result<Self, ClientError> {
        let trimmed = expression.trim();
        if trimmed.is_empty() || trimmed == SUB_ALL {
            return Ok(Self::all());
        }
        let mut tags: Vec<String> = Vec::new();
        for tag in trimmed.split("||").map(str::trim).filter(|t| !t.is_empty()) {
            if !tags.iter().any(|t| t == tag) {
                tags.push(tag.to_string());
            }
        }
        if tags.is_empty() {
            return Err(ClientError::InvalidArgument(format!(
                "subscription expression {expression:?} names no tag"
            )));
        }
        Ok(Self {
            expression: tags.join(" || "),
            tags,
        })
    }

    /// True for the "all tags" subscription.
    pub fn is_all(&self) -> bool {
        self.tags.is_empty()
    }

    /// The normalised expression sent to the broker (`*` or `A || B`).
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The tags (empty for "all").
    pub fn tags(&self) -> &[String] {
        &self.tags
    }

    /// Java `String.hashCode` of each tag, as in `codeSet`.
    pub fn code_set(&self) -> Vec<i32> {
        self.tags.iter().map(|t| tag_hash_code(t) as i32).collect()
    }

    /// Whether a message with tag `tag` is wanted. Untagged messages only match "all".
    pub fn matches(&self, tag: Option<&str>) -> bool {
        self.is_all() || tag.is_some_and(|t| self.tags.iter().any(|s| s == t))
    }

    /// The heartbeat form for `topic`.
    pub fn to_data(&self, topic: &str, sub_version: i64) -> SubscriptionData {
        SubscriptionData {
            class_filter_mode: false,
            code_set: self.code_set(),
            expression_type: EXPRESSION_TYPE_TAG.to_string(),
            sub_string: self.expression.clone(),
            sub_version,
            tags_set: self.tags.clone(),
            topic: topic.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_all() {
        for e in ["*", "", "  *  ", "   "] {
            let s = Subscription::parse(e).unwrap();
            assert!(s.is_all());
            assert_eq!(s.expression(), "*");
            assert!(s.matches(None));
            assert!(s.matches(Some("x")));
        }
    }

    #[test]
    fn parse_tags() {
        let s = Subscription::parse(" TagA ||TagB||  TagA || ").unwrap();
        assert_eq!(s.tags(), ["TagA".to_string(), "TagB".to_string()]);
        assert_eq!(s.expression(), "TagA || TagB");
        assert!(s.matches(Some("TagB")));
        assert!(!s.matches(Some("TagC")));
        assert!(!s.matches(None));
        // Java String.hashCode("TagA") = 2598919
        assert_eq!(s.code_set()[0], 2_598_919);
        let d = s.to_data("T", 7);
        assert_eq!(d.topic, "T");
        assert_eq!(d.sub_string, "TagA || TagB");
        assert_eq!(d.tags_set.len(), 2);
        assert_eq!(d.code_set, vec![2_598_919, 2_598_920]);
        assert_eq!(d.expression_type, "TAG");
        assert_eq!(d.sub_version, 7);
        let single = Subscription::parse("A").unwrap();
        assert_eq!(single.expression(), "A");
        assert!(Subscription::parse("||").is_err());
        assert!(Subscription::parse(" || || ").is_err());
    }
}
