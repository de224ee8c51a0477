//! The message a producer sends: topic, body, tags, keys, user properties and flag, and how
//! they become the wire properties string (docs/protocol.md §4.2, §4.3). Tags and keys
//! are ordinary properties on the wire (`TAGS`, `KEYS` space-separated); `WAIT` defaults to
//! `true` as in the Java client, and the producer adds the `UNIQ_KEY` id when sending.

use bytes::Bytes;
use conveyor_protocol::message::{keys, Properties};

/// A message to send. Build with [`Message::new`] and the `with_*` methods.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    /// Destination topic.
    pub topic: String,
    /// Payload (sent uncompressed).
    pub body: Bytes,
    /// Tag used for consumer-side filtering (`TAGS`).
    pub tags: Option<String>,
    /// Business keys, indexed by the broker for QUERY_MESSAGE (`KEYS`, space-separated).
    pub keys: Vec<String>,
    /// Other properties (user properties and system ones such as `DELAY`).
    pub properties: Properties,
    /// User flag, stored with the message.
    pub flag: i32,
}

impl Message {
    /// A message for `topic` with `body`.
    pub fn new(topic: impl Into<String>, body: impl Into<Bytes>) -> Self {
        Self {
            topic: topic.into(),
            body: body.into(),
            ..Self::default()
        }
    }

    /// Builder: sets the tag.
    pub fn with_tags(mut self, tags: impl Into<String>) -> Self {
        self.tags = Some(tags.into());
        self
    }

    /// Builder: adds one key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.keys.push(key.into());
        self
    }

    /// Builder: adds several keys.
    pub fn with_keys<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.keys.extend(keys.into_iter().map(Into::into));
        self
    }

    /// Builder: sets a property.
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key, value);
        self
    }

    /// Builder: sets the user flag.
    pub fn with_flag(mut self, flag: i32) -> Self {
        self.flag = flag;
        self
    }

    /// Builder: delivers the message after delay level `level` (1..18, §7).
    pub fn with_delay_level(self, level: i32) -> Self {
        self.with_property(keys::DELAY_TIME_LEVEL, level.to_string())
    }

    /// The properties as sent: user properties, then `TAGS`, `KEYS`, `WAIT` (unless set) and
    /// `UNIQ_KEY` (when given and not already set).
    pub fn wire_properties(&self, uniq_key: Option<&str>) -> Properties {
        let mut props = self.properties.clone();
        if let Some(tags) = self.tags.as_deref().filter(|t| !t.is_empty()) {
            props.insert(keys::TAGS, tags);
        }
        if !self.keys.is_empty() {
            props.insert(keys::KEYS, self.keys.join(" "));
        }
        if props.get(keys::WAIT_STORE_MSG_OK).is_none() {
            props.insert(keys::WAIT_STORE_MSG_OK, "true");
        }
        if let Some(id) = uniq_key {
            if props.get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX).is_none() {
                props.insert(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX, id);
            }
        }
        props
    }

    /// Rejects what no broker accepts: empty topic, topic characters outside
    /// `[%|a-zA-Z0-9_-]`, topic longer than 127 bytes (255 for `%RETRY%`/`%DLQ%` topics),
    /// or properties containing the separators 0x01/0x02.
    pub fn validate(&self) -> Result<(), String> {
        validate_topic(&self.topic)?;
        let bad = |s: &str| s.bytes().any(|b| b == 1 || b == 2);
        if self.tags.as_deref().is_some_and(bad)
            || self.keys.iter().any(|k| bad(k))
            || self.properties.iter().any(|(k, v)| bad(k) || bad(v))
        {
            return Err("properties must not contain the characters 0x01 or 0x02".into());
        }
        Ok(())
    }
}

/// Checks a topic name like the broker does (§5.1 step 1; the rule lives in
/// [`conveyor_protocol::naming`]).
pub fn validate_topic(topic: &str) -> Result<(), String> {
    conveyor_protocol::naming::validate_topic(topic).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_properties() {
        let m = Message::new("T", "hi")
            .with_tags("TagA")
            .with_key("k1")
            .with_keys(["k2"])
            .with_property("color", "red")
            .with_delay_level(3)
            .with_flag(9);
        let p = m.wire_properties(Some("ID1"));
        assert_eq!(p.get("TAGS"), Some("TagA"));
        assert_eq!(p.get("KEYS"), Some("k1 k2"));
        assert_eq!(p.get("WAIT"), Some("true"));
        assert_eq!(p.get("UNIQ_KEY"), Some("ID1"));
        assert_eq!(p.get("color"), Some("red"));
        assert_eq!(p.get("DELAY"), Some("3"));
        assert_eq!(m.flag, 9);
        let p = Message::new("T", "x")
            .with_property("WAIT", "false")
            .wire_properties(None);
        assert_eq!(p.get("WAIT"), Some("false"));
        assert_eq!(p.get("UNIQ_KEY"), None);
        assert_eq!(p.get("TAGS"), None);
    }

    #[test]
    fn validation() {
        assert!(Message::new("Topic_1-a%|", "").validate().is_ok());
        assert!(Message::new("", "").validate().is_err());
        assert!(Message::new("a b", "").validate().is_err());
        assert!(Message::new("x".repeat(128), "").validate().is_err());
        assert!(Message::new(format!("%RETRY%{}", "g".repeat(200)), "")
            .validate()
            .is_ok());
        assert!(Message::new("T", "")
            .with_tags("a\u{1}")
            .validate()
            .is_err());
    }
}
