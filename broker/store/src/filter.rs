//! Message filters for queue reads: the broker's tag (and later property) filtering plugs in
//! here, so the store can skip entries by tag hash before it touches the CommitLog.

use conveyor_protocol::message::RecordView;

use crate::consume_queue::CqEntry;

/// Decides which messages a read returns. Tag-code filtering happens on the ConsumeQueue
/// entry, before the CommitLog is touched; `matches_record` then sees the record itself (for
/// the exact tag check behind a hash match, or property filters).
pub trait MessageFilter {
    /// Checks the entry (commit-log offset, size, tag hash).
    fn matches_entry(&self, _entry: &CqEntry) -> bool {
        true
    }
    /// Checks the record.
    fn matches_record(&self, _record: &RecordView<'_>) -> bool {
        true
    }
}

/// Accepts every message.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptAll;

impl MessageFilter for AcceptAll {}
