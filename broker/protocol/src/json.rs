//! The JSON dialect RocketMQ peers expect (protocol-remoting.md §2.2, §9.1).
//!
//! Java writes headers and bodies with fastjson: compact, `null` fields omitted, non-ASCII
//! characters escaped as `\uXXXX`, numeric map keys quoted (standard JSON). The Go client
//! parses `brokerAddrs` by splitting raw text, so any whitespace would corrupt addresses.
//! This module is the single place that produces that text, for frame headers and bodies alike.

use std::io;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

/// A JSON body or header could not be produced or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON: {0}")]
pub struct JsonError(pub String);

impl From<serde_json::Error> for JsonError {
    fn from(e: serde_json::Error) -> Self {
        JsonError(e.to_string())
    }
}

/// Serializes `value` as compact JSON with every non-ASCII character escaped (`\uXXXX`,
/// surrogate pairs above U+FFFF) and integer map keys quoted (`{"0":"host:port"}`).
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, JsonError> {
    let mut out = Vec::with_capacity(128);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, AsciiFormatter);
    value.serialize(&mut ser)?;
    Ok(out)
}

/// Like [`to_vec`], as a `String` (the output is always ASCII).
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, JsonError> {
    let bytes = to_vec(value)?;
    String::from_utf8(bytes).map_err(|e| JsonError(e.to_string()))
}

/// Parses a JSON body. Unknown fields are ignored by every type in this crate.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, JsonError> {
    Ok(serde_json::from_slice(bytes)?)
}

/// Compact formatter that escapes non-ASCII characters like fastjson does.
struct AsciiFormatter;

impl serde_json::ser::Formatter for AsciiFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let bytes = fragment.as_bytes();
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if c.is_ascii() {
                continue;
            }
            writer.write_all(&bytes[start..i])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            start = i + c.len_utf8();
        }
        writer.write_all(&bytes[start..])
    }
}

/// Deserializes `null` (which Go writes for nil slices and maps) as the type's default.
/// Use together with `#[serde(default)]` so a missing field also yields the default.
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn escapes_non_ascii_and_controls() {
        let s = "a\u{1}b\u{2}é€😀\"";
        let json = to_string(s).unwrap();
        assert_eq!(json, r#""a\u0001b\u0002\u00e9\u20ac\ud83d\ude00\"""#);
        let back: String = from_slice(json.as_bytes()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn integer_keys_are_quoted_and_compact() {
        let mut m = BTreeMap::new();
        m.insert(0i64, "10.0.0.5:10911".to_string());
        m.insert(1i64, "10.0.0.6:10911".to_string());
        assert_eq!(
            to_string(&m).unwrap(),
            r#"{"0":"10.0.0.5:10911","1":"10.0.0.6:10911"}"#
        );
    }
}
