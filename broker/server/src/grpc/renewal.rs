//! Renewals: the messages a push consumer is still working on, kept invisible until it
//! answers (the proxy's auto-renew). A PushConsumer receives with `auto_renew` and no
//! invisible duration; its listener may run longer than any fixed duration, so the endpoint
//! pushes each message's invisible time out shortly before it ends, for up to
//! [`MAX_RENEW_MS`], until the client acks, nacks (ChangeInvisibleDuration) or dead-letters
//! it. A renewal changes the receipt handle, while the client answers with the one it was
//! given: its answers therefore go out with the handle renewed last ([`Renewals::take`]).
//! A client that goes away gets its messages back to the group after
//! [`RELEASE_INVISIBLE_MS`], not after a whole invisible time.
//!
//! This set is pure; `renewer` renews it and releases a departing client's messages.

use std::collections::HashMap;

/// The invisible time each renewal gives (the proxy's for push consumers).
pub const RENEW_INVISIBLE_MS: i64 = 60_000;
/// How long before a renewed message's invisible time ends it is renewed (the proxy's).
pub const RENEW_AHEAD_MS: i64 = 10_000;

/// How long before its time ends a message invisible `invisible_ms` per renewal is renewed:
/// [`RENEW_AHEAD_MS`], or half the time when that is shorter.
pub fn renew_ahead_ms(invisible_ms: i64) -> i64 {
    RENEW_AHEAD_MS.min(invisible_ms / 2)
}
/// How long one message is renewed at most (the proxy's 3 h); then it becomes visible again
/// when its time ends and is redelivered.
pub const MAX_RENEW_MS: i64 = 3 * 3600 * 1000;
/// The invisible time a departing client's messages get: back to the group at once.
pub const RELEASE_INVISIBLE_MS: i64 = 1_000;

/// One message kept invisible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// The topic the client received it from (its answers name it).
    pub topic: String,
    /// Its receipt handle as renewed last (the endpoint's format).
    pub handle: String,
    /// When it becomes visible again unless renewed (ms since the epoch).
    pub revive_at: i64,
    /// When it was delivered (ms since the epoch).
    pub delivered_at: i64,
}

/// A message of a group, by its message id.
pub type RenewalKey = (String, String);

/// The messages one client has in its push consumers' hands.
#[derive(Debug, Default)]
pub struct Renewals {
    /// By (consumer group, message id).
    by_message: HashMap<RenewalKey, Renewal>,
}

impl Renewals {
    /// Starts renewing a message just delivered (a redelivery of one already tracked
    /// replaces it).
    pub fn track(&mut self, group: &str, message_id: &str, renewal: Renewal) {
        self.by_message
            .insert((group.to_string(), message_id.to_string()), renewal);
    }

    /// Stops renewing a message the client answered; its latest handle, if it was renewed.
    pub fn take(&mut self, group: &str, message_id: &str) -> Option<Renewal> {
        self.by_message
            .remove(&(group.to_string(), message_id.to_string()))
    }

    /// The messages to renew now (their time ends within `ahead_ms`); forgets those renewed for [`MAX_RENEW_MS`] and those
    /// whose time passed unrenewed (both are the group's again).
    pub fn due(&mut self, now: i64, ahead_ms: i64) -> Vec<(RenewalKey, Renewal)> {
        self.by_message
            .retain(|_, r| r.revive_at > now && now - r.delivered_at < MAX_RENEW_MS);
        self.by_message
            .iter()
            .filter(|(_, r)| r.revive_at - now <= ahead_ms)
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect()
    }

    /// Records a renewal's new handle.
    pub fn renewed(&mut self, key: &RenewalKey, handle: String, revive_at: i64) {
        if let Some(r) = self.by_message.get_mut(key) {
            r.handle = handle;
            r.revive_at = revive_at;
        }
    }

    /// Stops renewing a message that can no longer be renewed (acked meanwhile, or gone).
    pub fn forget(&mut self, key: &RenewalKey) {
        self.by_message.remove(key);
    }

    /// Every message, forgotten.
    pub fn drain(&mut self) -> Vec<(RenewalKey, Renewal)> {
        self.by_message.drain().collect()
    }

    /// How many messages are kept invisible.
    pub fn len(&self) -> usize {
        self.by_message.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_message.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renewal(revive_at: i64, delivered_at: i64) -> Renewal {
        Renewal {
            topic: "T".into(),
            handle: format!("h{revive_at}"),
            revive_at,
            delivered_at,
        }
    }

    #[test]
    fn a_message_is_due_shortly_before_its_time_ends() {
        let mut r = Renewals::default();
        r.track("G", "m1", renewal(100_000, 40_000));
        assert!(r
            .due(100_000 - RENEW_AHEAD_MS - 1, RENEW_AHEAD_MS)
            .is_empty());
        let due = r.due(100_000 - RENEW_AHEAD_MS, RENEW_AHEAD_MS);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].0, ("G".to_string(), "m1".to_string()));
    }

    #[test]
    fn a_renewed_handle_is_what_the_answer_takes() {
        let mut r = Renewals::default();
        r.track("G", "m1", renewal(100_000, 40_000));
        let key = ("G".to_string(), "m1".to_string());
        r.renewed(&key, "new".into(), 160_000);
        assert!(
            r.due(100_000, RENEW_AHEAD_MS).is_empty(),
            "renewed: not due at the old time"
        );
        let taken = r.take("G", "m1").expect("tracked");
        assert_eq!((taken.handle.as_str(), taken.revive_at), ("new", 160_000));
        assert!(r.take("G", "m1").is_none(), "answered once");
        assert!(r.is_empty());
    }

    #[test]
    fn messages_past_their_time_or_renewed_too_long_are_given_up() {
        let mut r = Renewals::default();
        r.track("G", "late", renewal(50_000, 0));
        r.track("G", "old", renewal(MAX_RENEW_MS + 5_000, 0));
        r.track("G", "fresh", renewal(MAX_RENEW_MS + 5_000, 10_000));
        let due: Vec<String> = r
            .due(MAX_RENEW_MS + 1, RENEW_AHEAD_MS)
            .into_iter()
            .map(|(k, _)| k.1)
            .collect();
        assert_eq!(due, vec!["fresh".to_string()]);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn groups_keep_their_own_messages() {
        let mut r = Renewals::default();
        r.track("G1", "m", renewal(1, 0));
        r.track("G2", "m", renewal(2, 0));
        assert_eq!(r.take("G2", "m").map(|x| x.revive_at), Some(2));
        assert_eq!(r.drain().len(), 1);
    }

    #[test]
    fn short_invisible_times_are_renewed_at_half_time() {
        assert_eq!(renew_ahead_ms(60_000), RENEW_AHEAD_MS);
        assert_eq!(renew_ahead_ms(4_000), 2_000);
    }
}
