//! RecallHandle: what a producer gets back for a timer message (SEND_MESSAGE's
//! `recallHandle`, gRPC's `SendResultEntry.recall_handle`) and hands to RECALL_MESSAGE /
//! RecallMessage to cancel it before it is delivered. Opaque to clients; RocketMQ 5.3 makes it
//! URL-safe Base64 of `"v1 <topic> <brokerName> <deliverTimeMs> <messageId>"`, so a handle
//! from either broker reads the same, and the gRPC endpoint finds the group that holds the
//! message from the handle alone.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::{alphabet, Engine};

/// URL-safe Base64 written with padding (Java's `getUrlEncoder`), read with or without.
const URL_SAFE: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Property of a recall marker: `<topic>+<message id>` of the timer message it cancels
/// (RocketMQ's TIMER_DEL_UNIQKEY).
pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";

/// A decoded recall handle (version 1, the only one RocketMQ defines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecallHandle {
    /// The topic the message was sent to.
    pub topic: String,
    /// The broker group holding it.
    pub broker_name: String,
    /// When it is due (ms since the epoch).
    pub deliver_ms: i64,
    /// Its message id (UNIQ_KEY).
    pub message_id: String,
}

/// Why a recall handle cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("recall handle is invalid: {0}")]
pub struct RecallHandleError(&'static str);

impl RecallHandle {
    /// The handle as clients carry it.
    pub fn encode(&self) -> String {
        URL_SAFE.encode(format!(
            "v1 {} {} {} {}",
            self.topic, self.broker_name, self.deliver_ms, self.message_id
        ))
    }

    /// Reads a handle.
    pub fn decode(handle: &str) -> Result<Self, RecallHandleError> {
        let bytes = URL_SAFE
            .decode(handle.trim())
            .map_err(|_| RecallHandleError("not base64"))?;
        let text = String::from_utf8(bytes).map_err(|_| RecallHandleError("not text"))?;
        let parts: Vec<&str> = text.split(' ').collect();
        match parts.as_slice() {
            ["v1", topic, broker_name, deliver_ms, message_id]
                if !topic.is_empty() && !broker_name.is_empty() && !message_id.is_empty() =>
            {
                Ok(Self {
                    topic: topic.to_string(),
                    broker_name: broker_name.to_string(),
                    deliver_ms: deliver_ms
                        .parse()
                        .map_err(|_| RecallHandleError("the time is not a number"))?,
                    message_id: message_id.to_string(),
                })
            }
            ["v1", ..] => Err(RecallHandleError("v1 needs topic, broker, time and id")),
            _ => Err(RecallHandleError("unknown version")),
        }
    }

    /// The marker's [`TIMER_DEL_UNIQKEY`] value for the message this handle names.
    pub fn delete_key(&self) -> String {
        delete_key(&self.topic, &self.message_id)
    }
}

/// `<topic>+<message id>`: what a recall marker names and a timer message is looked up by.
pub fn delete_key(topic: &str, message_id: &str) -> String {
    format!("{topic}+{message_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_reads_back_as_written() {
        let h = RecallHandle {
            topic: "Orders".into(),
            broker_name: "broker-a".into(),
            deliver_ms: 1_765_000_000_123,
            message_id: "7F0000010001000000000000000A".into(),
        };
        assert_eq!(RecallHandle::decode(&h.encode()), Ok(h.clone()));
        // Without padding too, and what Java's URL encoder writes.
        let unpadded = h.encode().trim_end_matches('=').to_string();
        assert_eq!(RecallHandle::decode(&unpadded), Ok(h));
        let java = "djEgdG9waWMgYnJva2VyLWEgMTAwMCBpZA==";
        assert_eq!(
            RecallHandle::decode(java).map(|h| (h.topic, h.deliver_ms)),
            Ok(("topic".to_string(), 1000))
        );
    }

    #[test]
    fn bad_handles_are_refused_with_a_reason() {
        for bad in ["", "!!!", "djI=", "djEgdCBiIHg="] {
            assert!(RecallHandle::decode(bad).is_err(), "{bad}");
        }
    }
}
