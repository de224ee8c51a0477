//! The JSON dialect RocketMQ peers expect (docs/protocol.md §2.2, §9.1).
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
///
/// Also accepts fastjson's default dialect, which Apache RocketMQ still writes in some bodies
/// (GET_BROKER_CLUSTER_INFO, old route formats): integer map keys without quotes
/// (`{"brokerAddrs":{0:"host:port"}}`). Such text is only rewritten when strict parsing fails.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, JsonError> {
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok(v),
        Err(strict) => match quote_bare_integer_keys(bytes) {
            Some(fixed) => serde_json::from_slice(&fixed).map_err(|_| strict.into()),
            None => Err(strict.into()),
        },
    }
}

/// Quotes integer object keys (`{0:` or `,12:` outside strings); `None` if there are none.
fn quote_bare_integer_keys(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len() + 16);
    let (mut in_string, mut escaped, mut changed) = (false, false, false);
    // True right after `{` or `,` (ignoring whitespace) outside a string: a key may follow.
    let mut key_position = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        if key_position && (b.is_ascii_digit() || b == b'-') {
            let start = i;
            let mut end = i + 1;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            let mut colon = end;
            while colon < bytes.len() && bytes[colon].is_ascii_whitespace() {
                colon += 1;
            }
            if colon < bytes.len() && bytes[colon] == b':' {
                out.push(b'"');
                out.extend_from_slice(&bytes[start..end]);
                out.push(b'"');
                changed = true;
                key_position = false;
                i = end;
                continue;
            }
        }
        match b {
            b'"' => in_string = true,
            b'{' | b',' => key_position = true,
            b if b.is_ascii_whitespace() => {}
            _ => key_position = false,
        }
        if b == b'"' {
            key_position = false;
        }
        out.push(b);
        i += 1;
    }
    changed.then_some(out)
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

/// Deserializes a list of integers that a peer may write as numbers (Java: `[2598919]`) or
/// as numeric strings (the Go client's `codeSet`: `["2598919"]`); `null` is empty.
pub(crate) fn ints_or_numeric_strings<'de, D>(deserializer: D) -> Result<Vec<i32>, D::Error>
where
    D: Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum IntOrString {
        Int(i32),
        Str(String),
    }
    let items = Option::<Vec<IntOrString>>::deserialize(deserializer)?.unwrap_or_default();
    items
        .into_iter()
        .map(|item| match item {
            IntOrString::Int(i) => Ok(i),
            IntOrString::Str(s) => s
                .trim()
                .parse::<i32>()
                .map_err(|_| serde::de::Error::custom(format!("{s:?} is not a 32-bit integer"))),
        })
        .collect()
}

#[cfg(test)]
mod tests {

    #[test]
    fn accepts_fastjson_integer_keys() {
        use crate::route::ClusterInfo;
        let text = br#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911", 1 :"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"C"}},"clusterAddrTable":{"C":["broker-a"]}}"#;
        let info: ClusterInfo = from_slice(text).unwrap();
        let addrs = &info.broker_addr_table["broker-a"].broker_addrs;
        assert_eq!(addrs[&0], "127.0.0.1:10911");
        assert_eq!(addrs[&1], "10.0.0.2:10911");
        // Digits inside strings and array values are left alone.
        let v: serde_json::Value = from_slice(br#"{"a":"{0:1}","b":[1,2],"c":{"d":3}}"#).unwrap();
        assert_eq!(v["a"], "{0:1}");
        assert!(quote_bare_integer_keys(br#"{"a":[1,2]}"#).is_none());
    }

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
