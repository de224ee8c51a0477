//! TagFilter: which messages of a queue a tag subscription (`*`, `TagA || TagB`) selects. The
//! consume queue stores only a tag's hash code, so the filter first matches codes (cheap, no
//! record read) and then the tag itself, so colliding tags are not delivered.

use std::collections::HashSet;

use conveyor_protocol::message::{keys, tag_hash_code, RecordView};
use conveyor_store::{CqEntry, MessageFilter};

/// A tag subscription: `*` (everything) or `TagA || TagB`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagFilter {
    /// `*` or empty: every message matches.
    all: bool,
    /// The tags subscribed to.
    tags: HashSet<String>,
    /// Their hash codes, which the consume queue stores.
    codes: HashSet<i64>,
}

impl TagFilter {
    /// Parses a subscription expression.
    pub fn parse(expression: &str) -> Self {
        let expression = expression.trim();
        if expression.is_empty() || expression == "*" {
            return Self {
                all: true,
                tags: HashSet::new(),
                codes: HashSet::new(),
            };
        }
        let tags: HashSet<String> = expression
            .split("||")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect();
        let codes = tags.iter().map(|t| tag_hash_code(t)).collect();
        Self {
            all: tags.is_empty(),
            tags,
            codes,
        }
    }
}

impl MessageFilter for TagFilter {
    fn matches_entry(&self, entry: &CqEntry) -> bool {
        self.all || self.codes.contains(&entry.tag_code)
    }
    fn matches_record(&self, record: &RecordView<'_>) -> bool {
        // The hash matched; check the tag itself so colliding tags are not delivered.
        self.all
            || record
                .property(keys::TAGS)
                .is_some_and(|t| self.tags.contains(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_expressions() {
        assert!(TagFilter::parse("*").all);
        assert!(TagFilter::parse("").all);
        let f = TagFilter::parse("TagA || TagB ||");
        assert!(!f.all);
        assert_eq!(f.tags.len(), 2);
        assert!(f.matches_entry(&CqEntry {
            physical_offset: 0,
            size: 1,
            tag_code: tag_hash_code("TagB")
        }));
        assert!(!f.matches_entry(&CqEntry {
            physical_offset: 0,
            size: 1,
            tag_code: tag_hash_code("TagC")
        }));
    }
}
