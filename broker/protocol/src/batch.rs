//! The SEND_BATCH_MESSAGE (320) body (docs/protocol.md §5.2): several messages for one
//! topic/queue, each with its own flag, body and properties.
//!
//! Layout of each entry, big-endian:
//! `int32 totalSize | int32 magic (0) | int32 bodyCRC (0) | int32 flag | int32 bodyLen | body |
//! int16 propsLen | props`.
//! Like the Java broker, decoding walks the entries field by field and does not rely on
//! `totalSize`, `magic` or `bodyCRC`.

use bytes::Bytes;

use crate::message::{Properties, RecordError, MAX_PROPERTIES_LEN};

/// Fixed bytes of one entry besides body and properties.
pub const ENTRY_OVERHEAD: usize = 4 + 4 + 4 + 4 + 4 + 2;

/// One message of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchEntry {
    /// User flag.
    pub flag: i32,
    /// Body (possibly compressed by the producer; Java never compresses batch bodies).
    pub body: Bytes,
    /// The message's own properties (including its own `UNIQ_KEY`).
    pub properties: Properties,
}

/// Why a batch body could not be decoded or encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// The body ends inside entry `index`.
    #[error("batch entry {index} truncated")]
    Truncated {
        /// Zero-based entry index.
        index: usize,
    },
    /// A length field of entry `index` is negative.
    #[error("batch entry {index} has negative {field} length {len}")]
    NegativeLength {
        /// Zero-based entry index.
        index: usize,
        /// `"body"` or `"properties"`.
        field: &'static str,
        /// The length read.
        len: i32,
    },
    /// The properties of entry `index` are malformed.
    #[error("batch entry {index}: {source}")]
    Properties {
        /// Zero-based entry index.
        index: usize,
        /// Underlying error.
        source: RecordError,
    },
    /// An entry is too large to encode.
    #[error("batch entry {index} too large: {what}")]
    TooLarge {
        /// Zero-based entry index.
        index: usize,
        /// What overflowed.
        what: &'static str,
    },
}

/// Decodes a batch body. Bodies share `body`'s allocation.
pub fn decode_batch(body: &Bytes) -> Result<Vec<BatchEntry>, BatchError> {
    let mut entries = Vec::new();
    let mut pos = 0usize;
    while pos < body.len() {
        let index = entries.len();
        let truncated = BatchError::Truncated { index };
        let read_i32 = |at: usize| -> Result<i32, BatchError> {
            body.get(at..at + 4)
                .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or(BatchError::Truncated { index })
        };
        // totalSize, magic and bodyCRC are ignored, as by the Java broker.
        let flag = read_i32(pos + 12)?;
        let body_len = read_i32(pos + 16)?;
        let body_len = usize::try_from(body_len).map_err(|_| BatchError::NegativeLength {
            index,
            field: "body",
            len: body_len,
        })?;
        let body_start = pos + 20;
        let body_end = body_start
            .checked_add(body_len)
            .filter(|&e| e <= body.len())
            .ok_or(truncated.clone())?;
        let props_len = body
            .get(body_end..body_end + 2)
            .map(|b| i16::from_be_bytes([b[0], b[1]]))
            .ok_or(truncated.clone())?;
        let props_len = usize::try_from(props_len).map_err(|_| BatchError::NegativeLength {
            index,
            field: "properties",
            len: i32::from(props_len),
        })?;
        let props_start = body_end + 2;
        let props_raw = body
            .get(props_start..props_start + props_len)
            .ok_or(truncated)?;
        let properties = Properties::decode(props_raw)
            .map_err(|source| BatchError::Properties { index, source })?;
        entries.push(BatchEntry {
            flag,
            body: body.slice(body_start..body_end),
            properties,
        });
        pos = props_start + props_len;
    }
    Ok(entries)
}

/// Encodes a batch body the way the Java client does (magic and body CRC written as 0).
pub fn encode_batch(entries: &[BatchEntry]) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    for (index, e) in entries.iter().enumerate() {
        let props = e.properties.encode();
        if props.len() > MAX_PROPERTIES_LEN {
            return Err(BatchError::TooLarge {
                index,
                what: "properties",
            });
        }
        let total = i32::try_from(ENTRY_OVERHEAD + e.body.len() + props.len()).map_err(|_| {
            BatchError::TooLarge {
                index,
                what: "body",
            }
        })?;
        out.reserve(total as usize);
        out.extend_from_slice(&total.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&e.flag.to_be_bytes());
        out.extend_from_slice(&(e.body.len() as i32).to_be_bytes());
        out.extend_from_slice(&e.body);
        out.extend_from_slice(&(props.len() as i16).to_be_bytes());
        out.extend_from_slice(&props);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn byte_exact_vector() {
        // Two entries built by hand per §5.2.
        let mut raw = Vec::new();
        // entry 0: flag 7, body "hi", props "UNIQ_KEY\x01A\x02"
        let props0 = b"UNIQ_KEY\x01A\x02";
        raw.extend_from_slice(&(22 + 2 + props0.len() as i32).to_be_bytes());
        raw.extend_from_slice(&[0; 8]);
        raw.extend_from_slice(&7i32.to_be_bytes());
        raw.extend_from_slice(&2i32.to_be_bytes());
        raw.extend_from_slice(b"hi");
        raw.extend_from_slice(&(props0.len() as i16).to_be_bytes());
        raw.extend_from_slice(props0);
        // entry 1: flag 0, empty body, no props
        raw.extend_from_slice(&22i32.to_be_bytes());
        raw.extend_from_slice(&[0; 12]);
        raw.extend_from_slice(&0i32.to_be_bytes());
        raw.extend_from_slice(&0i16.to_be_bytes());

        let raw = Bytes::from(raw);
        let entries = decode_batch(&raw).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].flag, 7);
        assert_eq!(&entries[0].body[..], b"hi");
        assert_eq!(entries[0].properties.get("UNIQ_KEY"), Some("A"));
        assert_eq!(entries[1].flag, 0);
        assert!(entries[1].body.is_empty());
        assert!(entries[1].properties.is_empty());
        assert_eq!(encode_batch(&entries).unwrap(), raw.to_vec());
    }

    #[test]
    fn errors() {
        assert_eq!(decode_batch(&Bytes::new()).unwrap(), vec![]);
        let short = Bytes::from_static(&[0, 0, 0, 22, 0, 0]);
        assert_eq!(
            decode_batch(&short),
            Err(BatchError::Truncated { index: 0 })
        );
        let mut neg = vec![0u8; 16];
        neg.extend_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            decode_batch(&Bytes::from(neg)),
            Err(BatchError::NegativeLength { field: "body", .. })
        ));
    }

    fn entry() -> impl Strategy<Value = BatchEntry> {
        (
            any::<i32>(),
            proptest::collection::vec(any::<u8>(), 0..64),
            proptest::collection::vec(("[A-Za-z_]{1,8}", "[ -~]{0,8}"), 0..4),
        )
            .prop_map(|(flag, body, props)| BatchEntry {
                flag,
                body: Bytes::from(body),
                properties: props.into_iter().collect(),
            })
    }

    proptest! {
        #[test]
        fn round_trip(entries in proptest::collection::vec(entry(), 0..6)) {
            let raw = Bytes::from(encode_batch(&entries).unwrap());
            prop_assert_eq!(decode_batch(&raw).unwrap(), entries);
        }

        #[test]
        fn arbitrary_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_batch(&Bytes::from(raw));
        }

        /// Uniform bytes rarely form even one entry: start from a valid batch and edit it
        /// (byte flips, length fields overwritten with boundary values, truncations, junk).
        #[test]
        fn edited_batches_never_panic(
            entries in proptest::collection::vec(entry(), 1..4),
            edits in proptest::collection::vec((0u8..4, 0.0f64..1.0, any::<u32>()), 1..5),
        ) {
            let mut raw = encode_batch(&entries).unwrap();
            for &(kind, frac, v) in &edits {
                if raw.is_empty() {
                    break;
                }
                let len = raw.len();
                let pos = ((len as f64 * frac) as usize).min(len - 1);
                let value: i32 = match v % 7 {
                    0 => 0,
                    1 => -1,
                    2 => i32::MAX,
                    3 => i32::MIN,
                    4 => len as i32,
                    5 => i32::from(i16::MAX),
                    _ => (v % 300) as i32,
                };
                match kind {
                    0 => raw[pos] ^= (v as u8) | 1,
                    1 if pos + 4 <= len => raw[pos..pos + 4].copy_from_slice(&value.to_be_bytes()),
                    2 if pos + 2 <= len => {
                        raw[pos..pos + 2].copy_from_slice(&(value as i16).to_be_bytes())
                    }
                    3 => raw.truncate(pos),
                    _ => raw.extend((0..v % 32).map(|i| (v >> (i % 24)) as u8)),
                }
            }
            let _ = decode_batch(&Bytes::from(raw));
        }
    }
}
