//! Remoting frames (docs/protocol.md §2, §2.2, §2.3): the length-prefixed envelope around
//! every command, and the two header serializations a server must accept.
//!
//! ```text
//! int32 length | int32 (serializeType << 24 | hdrLen) | header | body
//! length = 4 + hdrLen + bodyLen (excludes itself)
//! ```
//!
//! Decoding is incremental (`Ok(None)` until a whole frame is buffered) so a tokio-util codec
//! can wrap [`FrameCodec`] directly. Encoding always writes a JSON header, formatted the way
//! the Java server does. Malformed input of any kind yields a [`FrameError`], never a panic.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

use crate::code::{LanguageCode, SerializeType};
use crate::command::{ExtFields, RemotingCommand};
use crate::json;

/// Default largest accepted frame, counting the 4-byte length prefix: 16 MiB, like Netty's
/// `LengthFieldBasedFrameDecoder` in the Java server (`com.rocketmq.remoting.frameMaxLength`).
pub const DEFAULT_MAX_FRAME_SIZE: usize = 16 * 1024 * 1024;

/// The most [`FrameCodec::decode`] reserves ahead for an incomplete frame; the buffer then
/// grows (amortized doubling) only as the frame's bytes really arrive.
const READ_RESERVE_MAX: usize = 64 << 10;

/// Largest header length expressible in the 24-bit field.
pub const MAX_HEADER_LEN: usize = 0x00FF_FFFF;

/// Bytes before the header: length prefix and serialize-type/header-length word.
pub const FRAME_PREFIX_LEN: usize = 8;

/// Why bytes are not a valid frame, or a command cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame (length prefix included) exceeds the configured maximum.
    #[error("frame of {size} bytes exceeds the maximum of {max}")]
    FrameTooLarge {
        /// Frame size including the length prefix.
        size: u64,
        /// Configured maximum.
        max: usize,
    },
    /// The length prefix is smaller than 4 (it must cover the header-length word).
    #[error("invalid frame length {0}")]
    BadLength(i32),
    /// The header length is larger than the frame allows.
    #[error("header length {header_len} exceeds the {available} bytes left in the frame")]
    HeaderTooLong {
        /// Declared header length.
        header_len: usize,
        /// Bytes available after the header-length word.
        available: usize,
    },
    /// The serialize-type byte is neither 0 (JSON) nor 1 (ROCKETMQ).
    #[error("unknown header serialize type {0}")]
    UnknownSerializeType(u8),
    /// The JSON header is not valid JSON or not an object.
    #[error("malformed JSON header: {0}")]
    Json(String),
    /// A required header field is absent.
    #[error("header field `{0}` is missing")]
    MissingField(&'static str),
    /// A header field has the wrong type or an out-of-range value.
    #[error("header field `{field}` is invalid: {reason}")]
    InvalidField {
        /// Field name.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The binary header ends inside a field.
    #[error("binary header truncated in `{0}`")]
    Truncated(&'static str),
    /// A length in the binary header is negative.
    #[error("negative length {len} for `{field}` in binary header")]
    NegativeLength {
        /// Field name.
        field: &'static str,
        /// The length read.
        len: i32,
    },
    /// A string in the binary header is not UTF-8.
    #[error("`{0}` in binary header is not UTF-8")]
    InvalidUtf8(&'static str),
    /// The binary header has bytes after its last field.
    #[error("{0} unexpected bytes after the binary header")]
    TrailingBytes(usize),
    /// The encoded header does not fit the 24-bit header-length field.
    #[error("encoded header of {0} bytes exceeds {MAX_HEADER_LEN}")]
    HeaderTooLarge(usize),
    /// The command cannot be expressed in the requested header format.
    #[error("cannot encode command: {0}")]
    NotEncodable(String),
}

/// Frame encoder/decoder with a frame-size limit. Cheap to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameCodec {
    max_frame_size: usize,
}

impl Default for FrameCodec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_SIZE)
    }
}

impl FrameCodec {
    /// A codec accepting and producing frames of at most `max_frame_size` bytes (length
    /// prefix included).
    pub fn new(max_frame_size: usize) -> Self {
        Self { max_frame_size }
    }

    /// The configured limit.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Total size (prefix included) of the frame starting at `buf[0]`, once its length
    /// prefix is available. Rejects oversized frames before they are buffered.
    fn frame_len(&self, buf: &[u8]) -> Result<Option<usize>, FrameError> {
        let Some(prefix) = buf.get(..4) else {
            return Ok(None);
        };
        let length = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
        if length < 4 {
            return Err(FrameError::BadLength(length));
        }
        let total = length as u64 + 4;
        if total > self.max_frame_size as u64 {
            return Err(FrameError::FrameTooLarge {
                size: total,
                max: self.max_frame_size,
            });
        }
        Ok(Some(total as usize))
    }

    /// Decodes one frame from the start of `buf` without consuming it. Returns the command
    /// and the number of bytes it occupied, or `Ok(None)` if more bytes are needed.
    /// The body is copied; prefer [`FrameCodec::decode`] on a `BytesMut` to avoid that.
    pub fn decode_slice(&self, buf: &[u8]) -> Result<Option<(RemotingCommand, usize)>, FrameError> {
        let Some(total) = self.frame_len(buf)? else {
            return Ok(None);
        };
        let Some(frame) = buf.get(..total) else {
            return Ok(None);
        };
        let (mut cmd, body_start) = decode_frame_header(frame)?;
        cmd.body = Bytes::copy_from_slice(&frame[body_start..]);
        Ok(Some((cmd, total)))
    }

    /// Decodes and removes one frame from the front of `buf`, or returns `Ok(None)` (and
    /// reserves room for the rest of the frame) if it is not complete yet. The body shares
    /// `buf`'s allocation. After an error the buffer content is unspecified; close the
    /// connection.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<RemotingCommand>, FrameError> {
        let Some(total) = self.frame_len(buf)? else {
            return Ok(None);
        };
        if buf.len() < total {
            // Grow with what arrives, not with what the length prefix announces: a peer that
            // announces a 16 MiB frame and sends nothing more must not cost 16 MiB.
            buf.reserve((total - buf.len()).min(READ_RESERVE_MAX));
            return Ok(None);
        }
        let frame = buf.split_to(total).freeze();
        let (mut cmd, body_start) = decode_frame_header(&frame)?;
        cmd.body = frame.slice(body_start..);
        Ok(Some(cmd))
    }

    /// Appends `cmd` as a frame with a JSON header to `dst`.
    pub fn encode(&self, cmd: &RemotingCommand, dst: &mut BytesMut) -> Result<(), FrameError> {
        self.encode_as(cmd, SerializeType::Json, dst)
    }

    /// Appends `cmd` as a frame with the given header serialization to `dst`. The server
    /// always answers in JSON; the binary form exists to act like a Java client configured
    /// with `ROCKETMQ` serialization (tests, benchmarks).
    pub fn encode_as(
        &self,
        cmd: &RemotingCommand,
        serialize_type: SerializeType,
        dst: &mut BytesMut,
    ) -> Result<(), FrameError> {
        let prefix = self.encode_prefix_as(cmd, serialize_type)?;
        dst.reserve(prefix.len() + cmd.body.len());
        dst.put_slice(&prefix);
        dst.put_slice(&cmd.body);
        Ok(())
    }

    /// Everything of `cmd`'s frame except the body (length prefix, type/length word, JSON
    /// header), so a server can write a large body without copying it.
    pub fn encode_prefix(&self, cmd: &RemotingCommand) -> Result<Vec<u8>, FrameError> {
        self.encode_prefix_as(cmd, SerializeType::Json)
    }

    fn encode_prefix_as(
        &self,
        cmd: &RemotingCommand,
        serialize_type: SerializeType,
    ) -> Result<Vec<u8>, FrameError> {
        let header = match serialize_type {
            SerializeType::Json => encode_json_header(cmd)?,
            SerializeType::RocketMq => encode_rocketmq_header(cmd)?,
        };
        if header.len() > MAX_HEADER_LEN {
            return Err(FrameError::HeaderTooLarge(header.len()));
        }
        let total = (FRAME_PREFIX_LEN + header.len()) as u64 + cmd.body.len() as u64;
        if total > self.max_frame_size as u64 || total - 4 > i32::MAX as u64 {
            return Err(FrameError::FrameTooLarge {
                size: total,
                max: self.max_frame_size,
            });
        }
        let mut out = Vec::with_capacity(FRAME_PREFIX_LEN + header.len());
        out.extend_from_slice(&((total - 4) as u32).to_be_bytes());
        let word = (u32::from(serialize_type.as_byte()) << 24) | header.len() as u32;
        out.extend_from_slice(&word.to_be_bytes());
        out.extend_from_slice(&header);
        Ok(out)
    }
}

/// Encodes `cmd` as one frame with a JSON header, with the default size limit.
pub fn encode_frame(cmd: &RemotingCommand) -> Result<Bytes, FrameError> {
    let mut dst = BytesMut::new();
    FrameCodec::default().encode(cmd, &mut dst)?;
    Ok(dst.freeze())
}

/// Parses the type/length word and header of a complete frame. Returns the command (empty
/// body) and the offset where the body starts.
fn decode_frame_header(frame: &[u8]) -> Result<(RemotingCommand, usize), FrameError> {
    let word = frame
        .get(4..8)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
        .ok_or(FrameError::Truncated("header length"))?;
    let type_byte = (word >> 24) as u8;
    let header_len = (word & 0x00FF_FFFF) as usize;
    let available = frame.len() - FRAME_PREFIX_LEN;
    if header_len > available {
        return Err(FrameError::HeaderTooLong {
            header_len,
            available,
        });
    }
    let serialize_type =
        SerializeType::from_byte(type_byte).ok_or(FrameError::UnknownSerializeType(type_byte))?;
    let header = &frame[FRAME_PREFIX_LEN..FRAME_PREFIX_LEN + header_len];
    let cmd = decode_header(serialize_type, header)?;
    Ok((cmd, FRAME_PREFIX_LEN + header_len))
}

/// Decodes a header of the given serialization into a command with an empty body.
pub fn decode_header(
    serialize_type: SerializeType,
    header: &[u8],
) -> Result<RemotingCommand, FrameError> {
    match serialize_type {
        SerializeType::Json => decode_json_header(header),
        SerializeType::RocketMq => decode_rocketmq_header(header),
    }
}

// ---------------------------------------------------------------------------------------------
// JSON (type 0)

/// The JSON header as Java writes it: fields in alphabetical order, `remark` omitted when
/// absent, `extFields` always present, every ext value a string.
#[derive(Serialize)]
struct JsonHeaderOut<'a> {
    code: i32,
    #[serde(rename = "extFields")]
    ext_fields: &'a ExtFields,
    flag: i32,
    language: &'static str,
    opaque: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    remark: Option<&'a str>,
    #[serde(rename = "serializeTypeCurrentRPC")]
    serialize_type: &'static str,
    version: i32,
}

/// Encodes the header of `cmd` as compact JSON (§2.2): alphabetical fields, ASCII only,
/// `serializeTypeCurrentRPC` = `"JSON"`, `extFields` always present (Java NPEs on SEND
/// responses without it; Go always writes it too).
pub fn encode_json_header(cmd: &RemotingCommand) -> Result<Vec<u8>, FrameError> {
    let out = JsonHeaderOut {
        code: cmd.code,
        ext_fields: &cmd.ext_fields,
        flag: cmd.flag,
        language: cmd.language.name(),
        opaque: cmd.opaque,
        remark: cmd.remark.as_deref(),
        serialize_type: SerializeType::Json.name(),
        version: cmd.version,
    };
    json::to_vec(&out).map_err(|e| FrameError::NotEncodable(e.0))
}

/// Decodes a JSON header (§2.2), leniently: any field order, unknown fields ignored,
/// `code` required, other fields optional (`language` defaults to JAVA, numbers to 0),
/// `language` as a name or a number, integers also as strings, `extFields` values as
/// strings, numbers or booleans (normalised to strings; `null` values dropped), empty
/// `remark` treated as absent.
///
/// The header is parsed in one streaming pass straight into the command (no intermediate
/// JSON tree): this runs once per request on the broker's hot path.
pub fn decode_json_header(header: &[u8]) -> Result<RemotingCommand, FrameError> {
    let mut de = serde_json::Deserializer::from_slice(header);
    let field = std::cell::Cell::new(None);
    let parsed = serde::Deserializer::deserialize_map(&mut de, lenient::HeaderVisitor(&field))
        .map_err(|e| match (e.classify(), field.get()) {
            // A well-formed value of the wrong kind: name the field.
            (serde_json::error::Category::Data, Some(field)) => FrameError::InvalidField {
                field,
                reason: e.to_string(),
            },
            _ => FrameError::Json(e.to_string()),
        })?;
    de.end().map_err(|e| FrameError::Json(e.to_string()))?;
    let code = parsed.code.ok_or(FrameError::MissingField("code"))?;
    Ok(RemotingCommand {
        code,
        language: parsed.language.unwrap_or(LanguageCode::Java),
        version: parsed.version.unwrap_or(0),
        opaque: parsed.opaque.unwrap_or(0),
        flag: parsed.flag.unwrap_or(0),
        remark: parsed.remark.filter(|r| !r.is_empty()),
        ext_fields: parsed.ext_fields,
        serialize_type: SerializeType::Json,
        body: Bytes::new(),
    })
}

/// Serde visitors that accept what the various clients write.
mod lenient {
    use std::fmt;

    use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

    use crate::code::LanguageCode;
    use crate::command::ExtFields;

    #[derive(Default)]
    pub(super) struct Parsed {
        pub code: Option<i32>,
        pub language: Option<LanguageCode>,
        pub version: Option<i32>,
        pub opaque: Option<i32>,
        pub flag: Option<i32>,
        pub remark: Option<String>,
        pub ext_fields: ExtFields,
    }

    /// Records the field being parsed, so a type error can name it.
    pub(super) struct HeaderVisitor<'c>(pub &'c std::cell::Cell<Option<&'static str>>);

    impl<'de> Visitor<'de> for HeaderVisitor<'_> {
        type Value = Parsed;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object header")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
            let mut p = Parsed::default();
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                let field = match key.as_ref() {
                    "code" => "code",
                    "version" => "version",
                    "opaque" => "opaque",
                    "flag" => "flag",
                    "language" => "language",
                    "remark" => "remark",
                    "extFields" => "extFields",
                    _ => "",
                };
                self.0.set((!field.is_empty()).then_some(field));
                match field {
                    "code" => p.code = map.next_value::<Int32>()?.0,
                    "version" => p.version = map.next_value::<Int32>()?.0,
                    "opaque" => p.opaque = map.next_value::<Int32>()?.0,
                    "flag" => p.flag = map.next_value::<Int32>()?.0,
                    "language" => p.language = map.next_value::<Language>()?.0,
                    "remark" => p.remark = map.next_value::<Option<String>>()?,
                    "extFields" => p.ext_fields = map.next_value::<Ext>()?.0,
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                self.0.set(None);
            }
            Ok(p)
        }
    }

    /// An int32 written as a number or a string; `null` is absent.
    struct Int32(Option<i32>);

    impl<'de> de::Deserialize<'de> for Int32 {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Int32;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a 32-bit integer")
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Int32, E> {
                    i32::try_from(v)
                        .map(|v| Int32(Some(v)))
                        .map_err(|_| E::custom(format!("{v} is not a 32-bit integer")))
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Int32, E> {
                    i32::try_from(v)
                        .map(|v| Int32(Some(v)))
                        .map_err(|_| E::custom(format!("{v} is not a 32-bit integer")))
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Int32, E> {
                    v.trim()
                        .parse()
                        .map(|v| Int32(Some(v)))
                        .map_err(|_| E::custom(format!("{v:?} is not a 32-bit integer")))
                }
                fn visit_unit<E: de::Error>(self) -> Result<Int32, E> {
                    Ok(Int32(None))
                }
            }
            d.deserialize_any(V)
        }
    }

    /// The sender's language as a name or a code byte.
    struct Language(Option<LanguageCode>);

    impl<'de> de::Deserialize<'de> for Language {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Language;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a language name or code")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Language, E> {
                    Ok(Language(Some(LanguageCode::from_name(v))))
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Language, E> {
                    Ok(Language(Some(
                        u8::try_from(v).map_or(LanguageCode::Other, LanguageCode::from_byte),
                    )))
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Language, E> {
                    Ok(Language(Some(
                        u8::try_from(v).map_or(LanguageCode::Other, LanguageCode::from_byte),
                    )))
                }
                fn visit_unit<E: de::Error>(self) -> Result<Language, E> {
                    Ok(Language(None))
                }
            }
            d.deserialize_any(V)
        }
    }

    /// `extFields`: values as strings, numbers or booleans, normalised to strings.
    struct Ext(ExtFields);

    impl<'de> de::Deserialize<'de> for Ext {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Ext;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("an object of header fields")
                }
                fn visit_unit<E: de::Error>(self) -> Result<Ext, E> {
                    Ok(Ext(ExtFields::new()))
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ext, A::Error> {
                    let mut out = ExtFields::new();
                    while let Some(k) = map.next_key::<String>()? {
                        if let Some(v) = map.next_value::<Scalar>()?.0 {
                            out.insert(k, v);
                        }
                    }
                    Ok(Ext(out))
                }
            }
            d.deserialize_any(V)
        }
    }

    /// A scalar header value as a string; `null` is absent.
    struct Scalar(Option<String>);

    impl<'de> de::Deserialize<'de> for Scalar {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Scalar;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a string, number or boolean")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                    Ok(Scalar(Some(v.to_string())))
                }
                fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
                    Ok(Scalar(Some(v)))
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                    Ok(Scalar(Some(v.to_string())))
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                    Ok(Scalar(Some(v.to_string())))
                }
                fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                    Ok(Scalar(Some(v.to_string())))
                }
                fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                    Ok(Scalar(Some(v.to_string())))
                }
                fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
                    Ok(Scalar(None))
                }
            }
            d.deserialize_any(V)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ROCKETMQ binary (type 1)

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], FrameError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(FrameError::Truncated(field))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], FrameError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, FrameError> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, FrameError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    fn len32(&mut self, field: &'static str) -> Result<usize, FrameError> {
        let len = self.i32(field)?;
        usize::try_from(len).map_err(|_| FrameError::NegativeLength { field, len })
    }

    fn len16(&mut self, field: &'static str) -> Result<usize, FrameError> {
        let len = self.i16(field)?;
        usize::try_from(len).map_err(|_| FrameError::NegativeLength {
            field,
            len: i32::from(len),
        })
    }

    fn str(&mut self, n: usize, field: &'static str) -> Result<&'a str, FrameError> {
        std::str::from_utf8(self.take(n, field)?).map_err(|_| FrameError::InvalidUtf8(field))
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
}

/// Decodes a ROCKETMQ binary header (§2.3). `code` and `version` are sign-extended int16s;
/// zero-length remark, keys and values are treated as absent, as Java does.
pub fn decode_rocketmq_header(header: &[u8]) -> Result<RemotingCommand, FrameError> {
    let mut r = Reader {
        buf: header,
        pos: 0,
    };
    let code = i32::from(r.i16("code")?);
    let language = LanguageCode::from_byte(r.array::<1>("language")?[0]);
    let version = i32::from(r.i16("version")?);
    let opaque = r.i32("opaque")?;
    let flag = r.i32("flag")?;
    let remark_len = r.len32("remark")?;
    let remark = r.str(remark_len, "remark")?;
    let remark = (!remark.is_empty()).then(|| remark.to_string());
    let ext_len = r.len32("extFields")?;
    let mut fields = Reader {
        buf: r.take(ext_len, "extFields")?,
        pos: 0,
    };
    let mut ext_fields = ExtFields::new();
    while fields.remaining() > 0 {
        let key_len = fields.len16("extFields key")?;
        let key = fields.str(key_len, "extFields key")?;
        let value_len = fields.len32("extFields value")?;
        let value = fields.str(value_len, "extFields value")?;
        if !key.is_empty() && !value.is_empty() {
            ext_fields.insert(key.to_string(), value.to_string());
        }
    }
    if r.remaining() > 0 {
        return Err(FrameError::TrailingBytes(r.remaining()));
    }
    Ok(RemotingCommand {
        code,
        language,
        version,
        opaque,
        flag,
        remark,
        ext_fields,
        serialize_type: SerializeType::RocketMq,
        body: Bytes::new(),
    })
}

/// Encodes the header of `cmd` in the ROCKETMQ binary format (§2.3). Fails if `code` or
/// `version` does not fit an int16 (e.g. POP codes) or a key exceeds 32767 bytes.
pub fn encode_rocketmq_header(cmd: &RemotingCommand) -> Result<Vec<u8>, FrameError> {
    let code = i16::try_from(cmd.code).map_err(|_| {
        FrameError::NotEncodable(format!("code {} does not fit an int16", cmd.code))
    })?;
    let version = i16::try_from(cmd.version).map_err(|_| {
        FrameError::NotEncodable(format!("version {} does not fit an int16", cmd.version))
    })?;
    let remark = cmd.remark.as_deref().unwrap_or("").as_bytes();
    let too_long = |what: &str| FrameError::NotEncodable(format!("{what} too long"));
    let mut ext = Vec::new();
    for (k, v) in &cmd.ext_fields {
        let key_len = i16::try_from(k.len()).map_err(|_| too_long("extFields key"))?;
        let value_len = i32::try_from(v.len()).map_err(|_| too_long("extFields value"))?;
        ext.extend_from_slice(&key_len.to_be_bytes());
        ext.extend_from_slice(k.as_bytes());
        ext.extend_from_slice(&value_len.to_be_bytes());
        ext.extend_from_slice(v.as_bytes());
    }
    let remark_len = i32::try_from(remark.len()).map_err(|_| too_long("remark"))?;
    let ext_len = i32::try_from(ext.len()).map_err(|_| too_long("extFields"))?;
    let mut out = Vec::with_capacity(21 + remark.len() + ext.len());
    out.extend_from_slice(&code.to_be_bytes());
    out.push(cmd.language.as_byte());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&cmd.opaque.to_be_bytes());
    out.extend_from_slice(&cmd.flag.to_be_bytes());
    out.extend_from_slice(&remark_len.to_be_bytes());
    out.extend_from_slice(remark);
    out.extend_from_slice(&ext_len.to_be_bytes());
    out.extend_from_slice(&ext);
    Ok(out)
}

#[cfg(test)]
mod tests;
