//! `RemotingCommand`: the logical content of one remoting frame (docs/protocol.md §2.1,
//! §2.4, §2.5), independent of how its header is serialized.
//!
//! Request and response headers are plain string maps (`extFields`); the typed getters here
//! turn a missing or malformed field into a [`HeaderError`] whose text the broker can put in
//! the remark of its error response.

use std::collections::BTreeMap;
use std::fmt::Display;

use bytes::Bytes;

use crate::code::{version, LanguageCode, SerializeType};

/// `extFields`: header field name → value, always strings on the wire. Ordered so that
/// encoding is deterministic (alphabetical, like Java's output).
pub type ExtFields = BTreeMap<String, String>;

/// Flag bit 0: the command is a response.
pub const FLAG_RESPONSE: i32 = 1;
/// Flag bit 1: the request is oneway (no response expected).
pub const FLAG_ONEWAY: i32 = 2;

/// A header field was missing or could not be parsed as the required type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// A required field is absent (or empty).
    #[error("the custom field <{0}> is null")]
    Missing(String),
    /// A field is present but not of the expected type.
    #[error("the custom field <{field}> has invalid value \"{value}\" (expected {expected})")]
    Invalid {
        /// Field name.
        field: String,
        /// The raw value received.
        value: String,
        /// What was expected, e.g. `"i32"`.
        expected: &'static str,
    },
}

/// One remoting command (request or response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotingCommand {
    /// Request code ([`crate::code::request_code`]) or response code
    /// ([`crate::code::response_code`]).
    pub code: i32,
    /// Sender's language.
    pub language: LanguageCode,
    /// Sender's version ordinal ([`crate::code::version`]).
    pub version: i32,
    /// Request id, copied into the response.
    pub opaque: i32,
    /// Bit 0 = response, bit 1 = oneway.
    pub flag: i32,
    /// Error text or note. An empty remark is normalised to `None` on decode.
    pub remark: Option<String>,
    /// The custom header.
    pub ext_fields: ExtFields,
    /// The header serialization this command arrived with (informational: encoding always
    /// produces JSON).
    pub serialize_type: SerializeType,
    /// Body bytes (may be empty).
    pub body: Bytes,
}

impl Default for RemotingCommand {
    fn default() -> Self {
        Self {
            code: 0,
            language: LanguageCode::Java,
            version: version::CURRENT,
            opaque: 0,
            flag: 0,
            remark: None,
            ext_fields: ExtFields::new(),
            serialize_type: SerializeType::Json,
            body: Bytes::new(),
        }
    }
}

impl RemotingCommand {
    /// A request with the given code and header fields (opaque 0: the sender assigns it).
    pub fn request(code: i32, ext_fields: ExtFields) -> Self {
        Self {
            code,
            ext_fields,
            ..Self::default()
        }
    }

    /// A response with the given code and remark, not yet bound to a request (opaque 0).
    pub fn response(code: i32, remark: Option<String>) -> Self {
        Self {
            code,
            flag: FLAG_RESPONSE,
            remark,
            ..Self::default()
        }
    }

    /// A response to `request`: same opaque, response bit set, no remark, no fields.
    pub fn response_to(request: &RemotingCommand, code: i32) -> Self {
        Self {
            code,
            opaque: request.opaque,
            flag: FLAG_RESPONSE,
            ..Self::default()
        }
    }

    /// True when flag bit 0 is set.
    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    /// True when flag bit 1 is set. Go never sets it for its "oneway" calls (§2.4).
    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    /// Sets flag bit 0.
    pub fn mark_response(&mut self) {
        self.flag |= FLAG_RESPONSE;
    }

    /// Sets flag bit 1.
    pub fn mark_oneway(&mut self) {
        self.flag |= FLAG_ONEWAY;
    }

    /// Builder: sets the opaque.
    pub fn with_opaque(mut self, opaque: i32) -> Self {
        self.opaque = opaque;
        self
    }

    /// Builder: sets the remark.
    pub fn with_remark(mut self, remark: impl Into<String>) -> Self {
        self.remark = Some(remark.into());
        self
    }

    /// Builder: sets the body.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Builder: sets one header field (numbers as decimal, booleans as `true`/`false`).
    pub fn with_ext(mut self, name: impl Into<String>, value: impl Display) -> Self {
        self.set_ext(name, value);
        self
    }

    /// Sets one header field (numbers as decimal, booleans as `true`/`false`).
    pub fn set_ext(&mut self, name: impl Into<String>, value: impl Display) {
        self.ext_fields.insert(name.into(), value.to_string());
    }

    /// A header field as given, if present.
    pub fn ext(&self, name: &str) -> Option<&str> {
        self.ext_fields.get(name).map(String::as_str)
    }

    /// A required string field. Present-but-empty is accepted (it is a valid string).
    pub fn get_str(&self, name: &str) -> Result<&str, HeaderError> {
        self.ext(name)
            .ok_or_else(|| HeaderError::Missing(name.to_string()))
    }

    /// An optional string field.
    pub fn get_str_opt(&self, name: &str) -> Option<&str> {
        self.ext(name)
    }

    /// A required `int` field.
    pub fn get_i32(&self, name: &str) -> Result<i32, HeaderError> {
        self.get_i32_opt(name)?
            .ok_or_else(|| HeaderError::Missing(name.to_string()))
    }

    /// An optional `int` field: `Ok(None)` when absent or empty, an error when malformed.
    pub fn get_i32_opt(&self, name: &str) -> Result<Option<i32>, HeaderError> {
        self.parse_opt(name, "i32", |s| s.parse().ok())
    }

    /// A required `long` field.
    pub fn get_i64(&self, name: &str) -> Result<i64, HeaderError> {
        self.get_i64_opt(name)?
            .ok_or_else(|| HeaderError::Missing(name.to_string()))
    }

    /// An optional `long` field: `Ok(None)` when absent or empty, an error when malformed.
    pub fn get_i64_opt(&self, name: &str) -> Result<Option<i64>, HeaderError> {
        self.parse_opt(name, "i64", |s| s.parse().ok())
    }

    /// A required boolean field (`true`/`false` in any case, or `1`/`0`).
    pub fn get_bool(&self, name: &str) -> Result<bool, HeaderError> {
        self.get_bool_opt(name)?
            .ok_or_else(|| HeaderError::Missing(name.to_string()))
    }

    /// An optional boolean field: `Ok(None)` when absent or empty, an error when malformed.
    pub fn get_bool_opt(&self, name: &str) -> Result<Option<bool>, HeaderError> {
        self.parse_opt(name, "bool", |s| {
            if s.eq_ignore_ascii_case("true") || s == "1" {
                Some(true)
            } else if s.eq_ignore_ascii_case("false") || s == "0" {
                Some(false)
            } else {
                None
            }
        })
    }

    fn parse_opt<T>(
        &self,
        name: &str,
        expected: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, HeaderError> {
        let Some(raw) = self.ext(name) else {
            return Ok(None);
        };
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Ok(None);
        }
        parse(trimmed)
            .map(Some)
            .ok_or_else(|| HeaderError::Invalid {
                field: name.to_string(),
                value: raw.to_string(),
                expected,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::{request_code, response_code};

    fn req() -> RemotingCommand {
        RemotingCommand::request(request_code::PULL_MESSAGE, ExtFields::new())
            .with_opaque(42)
            .with_ext("queueId", 3)
            .with_ext("queueOffset", -1_i64)
            .with_ext("big", 1_i64 << 40)
            .with_ext("t", true)
            .with_ext("one", "1")
            .with_ext("zero", " 0 ")
            .with_ext("empty", "")
            .with_ext("junk", "x1")
    }

    #[test]
    fn flags() {
        let mut r = req();
        assert!(!r.is_response());
        assert!(!r.is_oneway());
        r.mark_oneway();
        assert!(r.is_oneway());
        assert_eq!(r.flag, 2);
        let resp = RemotingCommand::response_to(&r, response_code::SUCCESS);
        assert!(resp.is_response());
        assert!(!resp.is_oneway());
        assert_eq!(resp.opaque, 42);
        assert_eq!(resp.version, version::CURRENT);
        assert_eq!(resp.language, LanguageCode::Java);
        let e = RemotingCommand::response(response_code::SYSTEM_ERROR, Some("boom".into()));
        assert_eq!(e.flag, 1);
        assert_eq!(e.remark.as_deref(), Some("boom"));
    }

    #[test]
    fn typed_getters() {
        let r = req();
        assert_eq!(r.get_i32("queueId"), Ok(3));
        assert_eq!(r.get_i64("queueOffset"), Ok(-1));
        assert_eq!(r.get_i64("big"), Ok(1 << 40));
        assert!(matches!(r.get_i32("big"), Err(HeaderError::Invalid { .. })));
        assert_eq!(r.get_bool("t"), Ok(true));
        assert_eq!(r.get_bool("one"), Ok(true));
        assert_eq!(r.get_bool("zero"), Ok(false));
        assert_eq!(r.get_bool_opt("absent"), Ok(None));
        assert_eq!(r.get_i32_opt("empty"), Ok(None));
        assert_eq!(r.get_str("empty"), Ok(""));
        assert_eq!(
            r.get_i32("empty"),
            Err(HeaderError::Missing("empty".to_string()))
        );
        let err = r.get_str("topic").unwrap_err();
        assert_eq!(err.to_string(), "the custom field <topic> is null");
        let err = r.get_i32("junk").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the custom field <junk> has invalid value \"x1\" (expected i32)"
        );
        assert!(r.get_bool("queueId").is_err());
    }
}
