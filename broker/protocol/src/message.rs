//! The stored message record: the one byte layout RocketMQ uses both in its CommitLog and in
//! PULL / VIEW / QUERY response bodies (docs/protocol.md §4.1).
//!
//! It lives in the protocol crate because the broker hands records from the store to clients
//! byte for byte: the store writes exactly what a client decodes, so there is one codec.
//!
//! Besides the RocketMQ fields, Conveyor appends a whole-record checksum as a final pseudo
//! property (`__CRC32#` + 10 digits, no name/value separator) the way RocketMQ 5 does with
//! `enabledAppendPropCRC`: Java and Go clients skip a property entry without a 0x01 separator,
//! and recovery can then detect a damaged byte anywhere in a record, not only in its body.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::Bytes;

use crate::sysflag;

/// Magic code of a v1 record (1-byte topic length).
pub const MAGIC_V1: u32 = 0xDAA3_20A7;
/// Magic code of a v2 record (2-byte topic length), used only for topics longer than 127 bytes.
pub const MAGIC_V2: u32 = 0xDAA3_20AB;
/// Magic code of the end-of-file blank marker that pads a CommitLog segment.
pub const BLANK_MAGIC: u32 = 0xCBD4_3194;
/// The smallest blank marker: total size + magic.
pub const END_FILE_MIN_BLANK_LENGTH: usize = 8;
/// Magic code of Conveyor's damaged-range marker (no RocketMQ equivalent): recovery found
/// bytes that are not a valid record between two valid ones and wrote `[length][magic]` over
/// their start, so that every later walk of the log skips exactly `length` bytes instead of
/// stopping there. A copy of the original bytes is kept in the store's `quarantine/` folder.
pub const DAMAGED_MAGIC: u32 = 0xCBD4_3195;
/// What stands at a CommitLog position instead of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// The end-of-segment blank ([`BLANK_MAGIC`]): the log goes on at the next segment.
    SegmentEnd,
    /// A damaged range of this many bytes ([`DAMAGED_MAGIC`]), records after it.
    Damaged(u64),
}

impl Marker {
    /// The marker at the start of `head` (at least its first 8 bytes), when `rest` bytes of
    /// the segment remain from there: a blank must cover exactly the rest, a damaged range at
    /// least a marker and less than the rest (records follow it).
    pub fn at(head: &[u8], rest: u64) -> Option<Marker> {
        if head.len() < END_FILE_MIN_BLANK_LENGTH {
            return None;
        }
        let size = u64::from(be_u32(head, 0));
        match be_u32(head, 4) {
            BLANK_MAGIC if size == rest => Some(Marker::SegmentEnd),
            DAMAGED_MAGIC if size >= END_FILE_MIN_BLANK_LENGTH as u64 && size < rest => {
                Some(Marker::Damaged(size))
            }
            _ => None,
        }
    }
}

/// Leading bytes shared by both record magics ([`MAGIC_V1`], [`MAGIC_V2`]): what a search for
/// the next record start looks for.
pub const RECORD_MAGIC_PREFIX: [u8; 3] = [0xDA, 0xA3, 0x20];

/// Byte position of QUEUEOFFSET in a record.
pub const QUEUE_OFFSET_POS: usize = 20;
/// Byte position of PHYSICALOFFSET in a record.
pub const PHYSICAL_OFFSET_POS: usize = 28;
/// Byte position of SYSFLAG in a record.
pub const SYS_FLAG_POS: usize = 36;
/// Byte position of BORNTIMESTAMP.
pub const BORN_TIMESTAMP_POS: usize = 40;

/// Name/value separator inside the properties string.
pub const NAME_VALUE_SEPARATOR: u8 = 1;
/// Separator between properties.
pub const PROPERTY_SEPARATOR: u8 = 2;
/// Key of the record checksum trailer (no 0x01 follows it, so clients ignore the entry).
pub const RECORD_CRC_KEY: &[u8] = b"__CRC32#";
/// Length of the checksum trailer: key, 10 decimal digits, separator.
pub const RECORD_CRC_TRAILER_LEN: usize = RECORD_CRC_KEY.len() + 10 + 1;
/// Largest properties string a record can carry (its length is an int16).
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;

/// Well-known property keys (docs/protocol.md §4.3).
pub mod keys {
    /// Application keys of a message, several separated by [`KEY_SEPARATOR`]; indexed for
    /// QUERY_MESSAGE. RocketMQ's KEYS.
    pub const KEYS: &str = "KEYS";
    /// The message's single tag, which tag filtering compares; RocketMQ's TAGS.
    pub const TAGS: &str = "TAGS";
    /// `"true"` / `"false"`: whether the producer wants the SEND answer only after the flush;
    /// RocketMQ's WAIT.
    pub const WAIT_STORE_MSG_OK: &str = "WAIT";
    /// Delay level of a message (1-based index into the broker's delay levels, 1s … 2h by default);
    /// RocketMQ's DELAY.
    pub const DELAY_TIME_LEVEL: &str = "DELAY";
    /// Original topic of a message that now lives in `%RETRY%<group>`; RocketMQ's RETRY_TOPIC.
    pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
    /// Real destination topic of a message parked in the schedule, timer or half topic; RocketMQ's
    /// REAL_TOPIC.
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    /// Real destination queue id of a message parked in the schedule, timer or half topic;
    /// RocketMQ's REAL_QID.
    pub const REAL_QUEUE_ID: &str = "REAL_QID";
    /// `"true"` on a transactional (half) message; RocketMQ's TRAN_MSG.
    pub const TRANSACTION_PREPARED: &str = "TRAN_MSG";
    /// Producer group that sent a transactional message, used to pick a connection for check-backs;
    /// RocketMQ's PGROUP.
    pub const PRODUCER_GROUP: &str = "PGROUP";
    /// Queue's minimum offset, filled in client-side from the PULL response header (never stored);
    /// RocketMQ's MIN_OFFSET.
    pub const MIN_OFFSET: &str = "MIN_OFFSET";
    /// Queue's maximum offset, filled in client-side from the PULL response header (never stored);
    /// RocketMQ's MAX_OFFSET.
    pub const MAX_OFFSET: &str = "MAX_OFFSET";
    /// Message id of the first delivery of a retried message; RocketMQ's ORIGIN_MESSAGE_ID.
    pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
    /// Reconsume count, set when a consumer re-sends a failed message itself as a normal SEND;
    /// RocketMQ's RECONSUME_TIME.
    pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
    /// Consumer's maximum reconsume count, set alongside [`RECONSUME_TIME`]; RocketMQ's
    /// MAX_RECONSUME_TIMES.
    pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
    /// Region of the storing broker, added by brokers and returned as a SEND response ext field;
    /// RocketMQ's MSG_REGION.
    pub const MSG_REGION: &str = "MSG_REGION";
    /// Whether message tracing is on, added by brokers and returned as a SEND response ext field;
    /// RocketMQ's TRACE_ON.
    pub const TRACE_SWITCH: &str = "TRACE_ON";
    /// Client-generated message id, the id applications see; RocketMQ's UNIQ_KEY.
    pub const UNIQ_CLIENT_MESSAGE_ID_KEYIDX: &str = "UNIQ_KEY";
    /// Transaction id (equal to UNIQ_KEY), added to half messages; RocketMQ's `__transactionId__`.
    pub const TRANSACTION_ID: &str = "__transactionId__";
    /// Per-message override of the delay before the first transaction check, in seconds; RocketMQ's
    /// CHECK_IMMUNITY_TIME_IN_SECONDS.
    pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
    /// Broker-internal count of transaction checks done for a half message; RocketMQ's
    /// TRANSACTION_CHECK_TIMES.
    pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
    /// Broker-internal transaction bookkeeping: queue offset of the half message; RocketMQ's
    /// TRAN_PREPARED_QUEUE_OFFSET.
    pub const TRANSACTION_PREPARED_QUEUE_OFFSET: &str = "TRAN_PREPARED_QUEUE_OFFSET";
    /// 5.x timer message: absolute delivery time in ms since the epoch; RocketMQ's
    /// TIMER_DELIVER_MS.
    pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
    /// 5.x timer message: delivery delay in seconds, relative to arrival; RocketMQ's
    /// TIMER_DELAY_SEC.
    pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
    /// 5.x timer message: delivery delay in ms, relative to arrival; RocketMQ's TIMER_DELAY_MS.
    pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
    /// Cluster name of the storing broker, added on store; RocketMQ's CLUSTER.
    pub const CLUSTER: &str = "CLUSTER";
    /// 5.x dead-letter metadata: topic the message had before it went to `%DLQ%<group>`; RocketMQ's
    /// DLQ_ORIGIN_TOPIC.
    pub const DLQ_ORIGIN_TOPIC: &str = "DLQ_ORIGIN_TOPIC";
    /// 5.x dead-letter metadata: id of the message before it went to `%DLQ%<group>`; RocketMQ's
    /// DLQ_ORIGIN_MESSAGE_ID.
    pub const DLQ_ORIGIN_MESSAGE_ID: &str = "DLQ_ORIGIN_MESSAGE_ID";
    /// 5.x Pop: the receipt handle of a popped message, added client-side from the POP
    /// response header (a broker strips it from incoming sends); RocketMQ's POP_CK.
    pub const POP_CK: &str = "POP_CK";
    /// 5.x Pop: when a retried message was first popped (ms); RocketMQ's 1ST_POP_TIME.
    pub const FIRST_POP_TIME: &str = "1ST_POP_TIME";
    /// 5.x FIFO: the message group (sharding key) of a gRPC FIFO message; RocketMQ's
    /// __SHARDINGKEY.
    pub const SHARDING_KEY: &str = "__SHARDINGKEY";
    /// 5.x gRPC: the trace context of a message; RocketMQ's TRACE_CONTEXT.
    pub const TRACE_CONTEXT: &str = "TRACE_CONTEXT";
    /// Separator between several keys in the KEYS property.
    pub const KEY_SEPARATOR: char = ' ';
}

/// Why a byte slice is not a valid record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The slice ends before the record does.
    #[error("record truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// MAGICCODE is none of the known record magics.
    #[error("bad magic code {0:#010x}")]
    BadMagic(u32),
    /// TOTALSIZE is below the minimum or does not fit the record's field lengths.
    #[error("bad total size {0}")]
    BadSize(i64),
    /// BODYCRC does not match the stored body.
    #[error("body CRC mismatch: stored {stored:#x}, computed {computed:#x}")]
    BodyCrc {
        /// CRC in the record.
        stored: u32,
        /// CRC of the body.
        computed: u32,
    },
    /// The checksum trailer does not match the record bytes.
    #[error("record CRC mismatch: stored {stored}, computed {computed}")]
    RecordCrc {
        /// CRC in the trailer.
        stored: u32,
        /// CRC of the record.
        computed: u32,
    },
    /// The record has no intact `__CRC32#` checksum trailer.
    #[error("record checksum trailer missing or damaged")]
    MissingRecordCrc,
    /// The topic bytes are not valid UTF-8.
    #[error("topic is not UTF-8")]
    TopicNotUtf8,
    /// The properties string is not valid UTF-8.
    #[error("properties are not UTF-8")]
    PropertiesNotUtf8,
    /// The properties string (bytes given) exceeds the int16 length limit.
    #[error("properties too long: {0} bytes (max {MAX_PROPERTIES_LEN})")]
    PropertiesTooLong(usize),
    /// The topic (bytes given) is too long for a record's 2-byte topic length.
    #[error("topic too long: {0} bytes")]
    TopicTooLong(usize),
}

/// Message properties in insertion order (order carries no meaning, but keeping it makes the
/// encoding of a decoded record byte-identical).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties(Vec<(String, String)>);

impl Properties {
    /// An empty set.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `key`, replacing an earlier value.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let value = value.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let pos = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(pos).1)
    }

    /// Iterates over (key, value) pairs.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of properties.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when no property is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The wire string: `k 0x01 v 0x02` for each property (Java's form, trailing 0x02 included).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out
    }

    /// Length of [`Properties::encode`].
    pub fn encoded_len(&self) -> usize {
        self.0.iter().map(|(k, v)| k.len() + v.len() + 2).sum()
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        for (k, v) in &self.0 {
            out.extend_from_slice(k.as_bytes());
            out.push(NAME_VALUE_SEPARATOR);
            out.extend_from_slice(v.as_bytes());
            out.push(PROPERTY_SEPARATOR);
        }
    }

    /// Parses a properties string the way the Java client does: entries without a name/value
    /// separator (such as the record checksum trailer) are skipped.
    pub fn decode(raw: &[u8]) -> Result<Self, RecordError> {
        let text = std::str::from_utf8(raw).map_err(|_| RecordError::PropertiesNotUtf8)?;
        let mut props = Vec::new();
        for entry in text.split(PROPERTY_SEPARATOR as char) {
            if let Some((k, v)) = entry.split_once(NAME_VALUE_SEPARATOR as char) {
                if !k.is_empty() {
                    props.push((k.to_string(), v.to_string()));
                }
            }
        }
        Ok(Self(props))
    }

    /// Converts into a map (later duplicates win, as in Java).
    pub fn to_map(&self) -> HashMap<String, String> {
        self.0.iter().cloned().collect()
    }
}

impl FromIterator<(String, String)> for Properties {
    fn from_iter<T: IntoIterator<Item = (String, String)>>(iter: T) -> Self {
        let mut p = Properties::new();
        for (k, v) in iter {
            p.insert(k, v);
        }
        p
    }
}

/// A fully decoded record (RocketMQ's `MessageExt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// TOPIC: the topic the message is stored under.
    pub topic: String,
    /// QUEUEID: the queue within the topic.
    pub queue_id: i32,
    /// FLAG: the producer's user flag.
    pub flag: i32,
    /// QUEUEOFFSET: position in the topic-queue's consume queue.
    pub queue_offset: i64,
    /// PHYSICALOFFSET: where the record starts in the CommitLog.
    pub physical_offset: i64,
    /// SYSFLAG: compression, transaction type and IPv6 bits.
    pub sys_flag: i32,
    /// BORNTIMESTAMP: ms since the epoch, producer clock.
    pub born_timestamp: i64,
    /// BORNHOST: address of the producer that sent the message.
    pub born_host: SocketAddr,
    /// STORETIMESTAMP: ms since the epoch, broker clock.
    pub store_timestamp: i64,
    /// STOREHOST: address of the storing broker.
    pub store_host: SocketAddr,
    /// RECONSUMETIMES: how often the message has been redelivered for retry.
    pub reconsume_times: i32,
    /// PREPAREDTRANSACTIONOFFSET: for a committed transactional message, the CommitLog offset of
    /// its half message; else 0.
    pub prepared_transaction_offset: i64,
    /// The body as stored (possibly compressed, see SYSFLAG).
    pub body: Bytes,
    /// The message properties (checksum trailer not included).
    pub properties: Properties,
}

impl StoredMessage {
    /// The client-visible message id: UNIQ_KEY when present, else the offset message id.
    pub fn msg_id(&self) -> String {
        match self.properties.get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX) {
            Some(id) => id.to_string(),
            None => offset_msg_id(self.store_host, self.physical_offset),
        }
    }

    /// Encodes this message as a record with a checksum trailer. QUEUEOFFSET and PHYSICALOFFSET
    /// are written as they are; the store patches them with [`seal_record`] when it appends.
    pub fn encode(&self) -> Result<Vec<u8>, RecordError> {
        let props = self.properties.encode();
        let mut buf = Vec::new();
        encode_record(
            self,
            &props,
            self.store_timestamp,
            self.store_host,
            &mut buf,
        )?;
        Ok(buf)
    }
}

fn host_len(addr: &SocketAddr) -> usize {
    match addr {
        SocketAddr::V4(_) => 8,
        SocketAddr::V6(_) => 20,
    }
}

fn put_host(buf: &mut Vec<u8>, addr: &SocketAddr) {
    match addr.ip() {
        IpAddr::V4(ip) => buf.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => buf.extend_from_slice(&ip.octets()),
    }
    buf.extend_from_slice(&(addr.port() as i32).to_be_bytes());
}

/// The properties part of a record being encoded: raw bytes, or a [`Properties`] written
/// straight into the record (no intermediate string on the store's append path).
enum PropsSource<'a> {
    Raw(&'a [u8]),
    Parsed(&'a Properties),
}

impl PropsSource<'_> {
    fn len(&self) -> usize {
        match self {
            PropsSource::Raw(r) => r.len(),
            PropsSource::Parsed(p) => p.encoded_len(),
        }
    }
    fn needs_separator(&self) -> bool {
        match self {
            PropsSource::Raw(r) => !r.is_empty() && r.last() != Some(&PROPERTY_SEPARATOR),
            // Java's form always ends with a separator.
            PropsSource::Parsed(_) => false,
        }
    }
    fn write(&self, buf: &mut Vec<u8>) {
        match self {
            PropsSource::Raw(r) => buf.extend_from_slice(r),
            PropsSource::Parsed(p) => p.encode_into(buf),
        }
    }
}

/// Appends one record to `buf` and returns its size. `props` is the raw properties string,
/// which must not already carry a checksum trailer; STORETIMESTAMP and STOREHOST are given
/// separately because the store stamps them. SYSFLAG's host-version bits are set from the
/// host addresses. The checksum trailer is filled by [`seal_record`].
pub fn encode_record(
    msg: &StoredMessage,
    props: &[u8],
    store_timestamp: i64,
    store_host: SocketAddr,
    buf: &mut Vec<u8>,
) -> Result<usize, RecordError> {
    encode_with(
        msg,
        PropsSource::Raw(props),
        store_timestamp,
        store_host,
        buf,
    )
}

/// [`encode_record`] with the message's own properties, written directly into `buf`.
pub fn encode_message(
    msg: &StoredMessage,
    store_timestamp: i64,
    store_host: SocketAddr,
    buf: &mut Vec<u8>,
) -> Result<usize, RecordError> {
    encode_with(
        msg,
        PropsSource::Parsed(&msg.properties),
        store_timestamp,
        store_host,
        buf,
    )
}

fn encode_with(
    msg: &StoredMessage,
    props: PropsSource<'_>,
    store_timestamp: i64,
    store_host: SocketAddr,
    buf: &mut Vec<u8>,
) -> Result<usize, RecordError> {
    let needs_sep = props.needs_separator();
    let props_total = props.len() + usize::from(needs_sep) + RECORD_CRC_TRAILER_LEN;
    if props_total > MAX_PROPERTIES_LEN {
        return Err(RecordError::PropertiesTooLong(props_total));
    }
    let topic = msg.topic.as_bytes();
    if topic.len() > i16::MAX as usize {
        return Err(RecordError::TopicTooLong(topic.len()));
    }
    let v2 = topic.len() > 127;
    let total = 84 + host_len(&msg.born_host) - 8 + host_len(&store_host) - 8
        + 4
        + msg.body.len()
        + if v2 { 2 } else { 1 }
        + topic.len()
        + 2
        + props_total;
    let mut sys_flag = msg.sys_flag & !(sysflag::BORNHOST_V6 | sysflag::STOREHOST_V6);
    if msg.born_host.is_ipv6() {
        sys_flag |= sysflag::BORNHOST_V6;
    }
    if store_host.is_ipv6() {
        sys_flag |= sysflag::STOREHOST_V6;
    }
    let start = buf.len();
    buf.reserve(total);
    buf.extend_from_slice(&(total as i32).to_be_bytes());
    buf.extend_from_slice(&(if v2 { MAGIC_V2 } else { MAGIC_V1 }).to_be_bytes());
    buf.extend_from_slice(&body_crc(&msg.body).to_be_bytes());
    buf.extend_from_slice(&msg.queue_id.to_be_bytes());
    buf.extend_from_slice(&msg.flag.to_be_bytes());
    buf.extend_from_slice(&msg.queue_offset.to_be_bytes());
    buf.extend_from_slice(&msg.physical_offset.to_be_bytes());
    buf.extend_from_slice(&sys_flag.to_be_bytes());
    buf.extend_from_slice(&msg.born_timestamp.to_be_bytes());
    put_host(buf, &msg.born_host);
    buf.extend_from_slice(&store_timestamp.to_be_bytes());
    put_host(buf, &store_host);
    buf.extend_from_slice(&msg.reconsume_times.to_be_bytes());
    buf.extend_from_slice(&msg.prepared_transaction_offset.to_be_bytes());
    buf.extend_from_slice(&(msg.body.len() as i32).to_be_bytes());
    buf.extend_from_slice(&msg.body);
    if v2 {
        buf.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    } else {
        buf.push(topic.len() as u8);
    }
    buf.extend_from_slice(topic);
    buf.extend_from_slice(&(props_total as i16).to_be_bytes());
    props.write(buf);
    if needs_sep {
        buf.push(PROPERTY_SEPARATOR);
    }
    buf.extend_from_slice(RECORD_CRC_KEY);
    buf.extend_from_slice(b"0000000000");
    buf.push(PROPERTY_SEPARATOR);
    debug_assert_eq!(buf.len() - start, total);
    Ok(total)
}

/// CRC32 of a body as RocketMQ stores it (masked to 31 bits).
pub fn body_crc(body: &[u8]) -> u32 {
    crc32fast::hash(body) & 0x7FFF_FFFF
}

/// Writes QUEUEOFFSET and PHYSICALOFFSET into an encoded record and fills its checksum
/// trailer. The checksum covers every byte before the trailer's digits.
pub fn seal_record(record: &mut [u8], queue_offset: i64, physical_offset: i64) {
    record[QUEUE_OFFSET_POS..QUEUE_OFFSET_POS + 8].copy_from_slice(&queue_offset.to_be_bytes());
    record[PHYSICAL_OFFSET_POS..PHYSICAL_OFFSET_POS + 8]
        .copy_from_slice(&physical_offset.to_be_bytes());
    let digits_at = record.len() - 11;
    let crc = crc32fast::hash(&record[..digits_at]);
    write_digits(&mut record[digits_at..digits_at + 10], crc);
}

fn write_digits(out: &mut [u8], mut value: u32) {
    for slot in out.iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

fn parse_digits(digits: &[u8]) -> Option<u32> {
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u64::from(d - b'0');
    }
    u32::try_from(v).ok()
}

/// A zero-copy view of one record, for the store's hot paths (dispatch, recovery, reads).
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    buf: &'a [u8],
    store_host_pos: usize,
    body_pos: usize,
    body_len: usize,
    topic_pos: usize,
    topic_len: usize,
    props_pos: usize,
    props_len: usize,
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    be_u32(b, at) as i32
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl<'a> RecordView<'a> {
    /// Parses the structure of the record at the start of `buf` (which may extend beyond it),
    /// checking sizes and magic but not checksums. The view covers exactly the record.
    pub fn parse(buf: &'a [u8]) -> Result<Self, RecordError> {
        let need = |n: usize, have: usize| {
            if have < n {
                Err(RecordError::Truncated { need: n, have })
            } else {
                Ok(())
            }
        };
        need(8, buf.len())?;
        let total = be_i32(buf, 0);
        let magic = be_u32(buf, 4);
        if magic != MAGIC_V1 && magic != MAGIC_V2 {
            return Err(RecordError::BadMagic(magic));
        }
        if total < 84 {
            return Err(RecordError::BadSize(total as i64));
        }
        let total = total as usize;
        need(total, buf.len())?;
        let buf = &buf[..total];
        let sys_flag = be_i32(buf, SYS_FLAG_POS);
        let born_len = if sys_flag & sysflag::BORNHOST_V6 != 0 {
            20
        } else {
            8
        };
        let store_len = if sys_flag & sysflag::STOREHOST_V6 != 0 {
            20
        } else {
            8
        };
        let store_ts_pos = 48 + born_len;
        let store_host_pos = store_ts_pos + 8;
        let body_len_pos = store_host_pos + store_len + 4 + 8;
        let bad = || RecordError::BadSize(total as i64);
        if body_len_pos + 4 > total {
            return Err(bad());
        }
        let body_len = be_i32(buf, body_len_pos);
        if body_len < 0 {
            return Err(bad());
        }
        let body_pos = body_len_pos + 4;
        let mut pos = body_pos.checked_add(body_len as usize).ok_or_else(bad)?;
        let (topic_len, topic_field) = if magic == MAGIC_V2 {
            if pos + 2 > total {
                return Err(bad());
            }
            (u16::from_be_bytes([buf[pos], buf[pos + 1]]) as usize, 2)
        } else {
            if pos + 1 > total {
                return Err(bad());
            }
            (buf[pos] as usize, 1)
        };
        pos += topic_field;
        let topic_pos = pos;
        pos += topic_len;
        if pos + 2 > total {
            return Err(bad());
        }
        let props_len = u16::from_be_bytes([buf[pos], buf[pos + 1]]) as usize;
        pos += 2;
        let props_pos = pos;
        if pos + props_len != total {
            return Err(bad());
        }
        Ok(Self {
            buf,
            store_host_pos,
            body_pos,
            body_len: body_len as usize,
            topic_pos,
            topic_len,
            props_pos,
            props_len,
        })
    }

    /// Parses and verifies the checksums (see [`RecordView::verify`]).
    pub fn parse_verified(buf: &'a [u8], require_record_crc: bool) -> Result<Self, RecordError> {
        let view = Self::parse(buf)?;
        view.verify(require_record_crc)?;
        Ok(view)
    }

    /// Verifies the body CRC and the whole-record checksum. Conveyor writes the checksum on
    /// every record, so its store passes `require_record_crc = true`: a record whose trailer is
    /// missing or mangled is damaged. Records written by Apache RocketMQ have no trailer.
    pub fn verify(&self, require_record_crc: bool) -> Result<(), RecordError> {
        match self.record_crc() {
            // The record checksum covers the body too: one pass over the bytes is enough.
            Some((stored, covered)) => {
                let computed = crc32fast::hash(&self.buf[..covered]);
                if stored != computed {
                    return Err(RecordError::RecordCrc { stored, computed });
                }
            }
            None if require_record_crc => return Err(RecordError::MissingRecordCrc),
            None => {
                let stored = be_u32(self.buf, 8);
                let computed = body_crc(self.body());
                if stored != computed {
                    return Err(RecordError::BodyCrc { stored, computed });
                }
            }
        }
        std::str::from_utf8(self.topic_bytes()).map_err(|_| RecordError::TopicNotUtf8)?;
        Ok(())
    }

    /// The stored record checksum and how many leading bytes it covers, if the record has one.
    fn record_crc(&self) -> Option<(u32, usize)> {
        if self.props_len < RECORD_CRC_TRAILER_LEN {
            return None;
        }
        let t = self.buf.len() - RECORD_CRC_TRAILER_LEN;
        let preceded_ok = t == self.props_pos || self.buf[t - 1] == PROPERTY_SEPARATOR;
        if !preceded_ok
            || &self.buf[t..t + RECORD_CRC_KEY.len()] != RECORD_CRC_KEY
            || self.buf[self.buf.len() - 1] != PROPERTY_SEPARATOR
        {
            return None;
        }
        let digits_at = t + RECORD_CRC_KEY.len();
        parse_digits(&self.buf[digits_at..digits_at + 10]).map(|crc| (crc, digits_at))
    }

    /// The whole record.
    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }
    /// TOTALSIZE.
    pub fn total_size(&self) -> usize {
        self.buf.len()
    }
    /// QUEUEID.
    pub fn queue_id(&self) -> i32 {
        be_i32(self.buf, 12)
    }
    /// FLAG: the producer's user flag.
    pub fn flag(&self) -> i32 {
        be_i32(self.buf, 16)
    }
    /// QUEUEOFFSET: position in the consume queue.
    pub fn queue_offset(&self) -> i64 {
        be_i64(self.buf, QUEUE_OFFSET_POS)
    }
    /// PHYSICALOFFSET: where the record starts in the CommitLog.
    pub fn physical_offset(&self) -> i64 {
        be_i64(self.buf, PHYSICAL_OFFSET_POS)
    }
    /// SYSFLAG.
    pub fn sys_flag(&self) -> i32 {
        be_i32(self.buf, SYS_FLAG_POS)
    }
    /// BORNTIMESTAMP: ms, producer clock.
    pub fn born_timestamp(&self) -> i64 {
        be_i64(self.buf, BORN_TIMESTAMP_POS)
    }
    /// STORETIMESTAMP: ms, broker clock.
    pub fn store_timestamp(&self) -> i64 {
        be_i64(self.buf, self.store_host_pos - 8)
    }
    /// RECONSUMETIMES.
    pub fn reconsume_times(&self) -> i32 {
        let at = self.body_pos - 4 - 8 - 4;
        be_i32(self.buf, at)
    }
    /// PREPAREDTRANSACTIONOFFSET: CommitLog offset of the half message of a committed transaction,
    /// else 0.
    pub fn prepared_transaction_offset(&self) -> i64 {
        be_i64(self.buf, self.body_pos - 4 - 8)
    }
    /// The body as stored (possibly compressed).
    pub fn body(&self) -> &'a [u8] {
        &self.buf[self.body_pos..self.body_pos + self.body_len]
    }
    /// The raw topic bytes.
    pub fn topic_bytes(&self) -> &'a [u8] {
        &self.buf[self.topic_pos..self.topic_pos + self.topic_len]
    }
    /// The topic; a record that passed [`RecordView::verify`] always has a UTF-8 topic.
    pub fn topic(&self) -> &'a str {
        std::str::from_utf8(self.topic_bytes()).unwrap_or("")
    }
    /// The raw properties string, checksum trailer included.
    pub fn properties_raw(&self) -> &'a [u8] {
        &self.buf[self.props_pos..self.props_pos + self.props_len]
    }
    /// Looks up one property without decoding the others.
    pub fn property(&self, key: &str) -> Option<&'a str> {
        let raw = self.properties_raw();
        raw.split(|b| *b == PROPERTY_SEPARATOR).find_map(|entry| {
            let sep = entry.iter().position(|b| *b == NAME_VALUE_SEPARATOR)?;
            if &entry[..sep] == key.as_bytes() {
                std::str::from_utf8(&entry[sep + 1..]).ok()
            } else {
                None
            }
        })
    }

    fn host(&self, at: usize, v6: bool) -> SocketAddr {
        let (ip, port_at) = if v6 {
            let mut o = [0u8; 16];
            o.copy_from_slice(&self.buf[at..at + 16]);
            (IpAddr::V6(Ipv6Addr::from(o)), at + 16)
        } else {
            let o = [
                self.buf[at],
                self.buf[at + 1],
                self.buf[at + 2],
                self.buf[at + 3],
            ];
            (IpAddr::V4(Ipv4Addr::from(o)), at + 4)
        };
        SocketAddr::new(ip, be_i32(self.buf, port_at) as u16)
    }
    /// BORNHOST: the producer's address.
    pub fn born_host(&self) -> SocketAddr {
        self.host(48, self.sys_flag() & sysflag::BORNHOST_V6 != 0)
    }
    /// STOREHOST: the storing broker's address.
    pub fn store_host(&self) -> SocketAddr {
        self.host(
            self.store_host_pos,
            self.sys_flag() & sysflag::STOREHOST_V6 != 0,
        )
    }

    /// Decodes into an owned message.
    pub fn to_message(&self) -> Result<StoredMessage, RecordError> {
        let topic = std::str::from_utf8(self.topic_bytes())
            .map_err(|_| RecordError::TopicNotUtf8)?
            .to_string();
        Ok(StoredMessage {
            topic,
            queue_id: self.queue_id(),
            flag: self.flag(),
            queue_offset: self.queue_offset(),
            physical_offset: self.physical_offset(),
            sys_flag: self.sys_flag(),
            born_timestamp: self.born_timestamp(),
            born_host: self.born_host(),
            store_timestamp: self.store_timestamp(),
            store_host: self.store_host(),
            reconsume_times: self.reconsume_times(),
            prepared_transaction_offset: self.prepared_transaction_offset(),
            body: Bytes::copy_from_slice(self.body()),
            properties: Properties::decode(self.properties_raw())?,
        })
    }
}

/// Decodes every record in a PULL/QUERY body (records back to back).
pub fn decode_records(mut buf: &[u8]) -> Result<Vec<StoredMessage>, RecordError> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let view = RecordView::parse(buf)?;
        out.push(view.to_message()?);
        buf = &buf[view.total_size()..];
    }
    Ok(out)
}

/// The offset message id (§4.5): hex of store host IP, port and commit-log offset.
pub fn offset_msg_id(store_host: SocketAddr, physical_offset: i64) -> String {
    let mut raw = Vec::with_capacity(28);
    put_host(&mut raw, &store_host);
    raw.extend_from_slice(&physical_offset.to_be_bytes());
    let mut s = String::with_capacity(raw.len() * 2);
    for b in raw {
        s.push(char::from(HEX[(b >> 4) as usize]));
        s.push(char::from(HEX[(b & 15) as usize]));
    }
    s
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Decodes the hex of a message id whose layout starts with an IP (4 bytes when the id is
/// 32 hex characters, 16 when 56): returns the raw bytes and the IP. Shared by offset message
/// ids and client unique ids, whose IP prefixes follow the same rule.
pub fn decode_id_with_ip(id: &str) -> Option<(Vec<u8>, IpAddr)> {
    let raw: Vec<u8> = (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(id.get(i..i + 2)?, 16).ok())
        .collect::<Option<_>>()?;
    let ip = match raw.len() {
        16 => IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3])),
        28 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&raw[..16]);
            IpAddr::V6(Ipv6Addr::from(o))
        }
        _ => return None,
    };
    Some((raw, ip))
}

/// Parses an offset message id back into (store host, commit-log offset).
pub fn parse_offset_msg_id(id: &str) -> Option<(SocketAddr, i64)> {
    let (raw, ip) = decode_id_with_ip(id)?;
    let ip_len = if ip.is_ipv4() { 4 } else { 16 };
    let port = be_i32(&raw, ip_len);
    let offset = be_i64(&raw, ip_len + 4);
    Some((SocketAddr::new(ip, port as u16), offset))
}

/// Java's `String.hashCode()` of a tag, sign-extended: the tag code RocketMQ keeps in
/// ConsumeQueue entries and subscription data.
pub fn tag_hash_code(tag: &str) -> i64 {
    let mut h: i32 = 0;
    for unit in tag.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(unit as i32);
    }
    h as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(topic: &str, body: Vec<u8>, props: Properties, v6: bool) -> StoredMessage {
        let host: SocketAddr = if v6 {
            "[2001:db8::1]:10911".parse().unwrap()
        } else {
            "10.1.2.3:10911".parse().unwrap()
        };
        StoredMessage {
            topic: topic.into(),
            queue_id: 3,
            flag: 7,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: "192.168.0.9:5555".parse().unwrap(),
            store_timestamp: 1_700_000_000_123,
            store_host: host,
            reconsume_times: 2,
            prepared_transaction_offset: 0,
            body: Bytes::from(body),
            properties: props,
        }
    }

    #[test]
    fn java_string_hash_code() {
        assert_eq!(tag_hash_code("TagA"), 2_598_919);
        assert_eq!(tag_hash_code(""), 0);
        // Overflow wraps like Java's int arithmetic.
        assert_eq!(tag_hash_code("a-rather-long-tag-name"), -379_181_890);
        // UTF-16 code units, surrogate pairs included (value from a JVM).
        assert_eq!(tag_hash_code("é😀"), 1_996_812);
    }

    #[test]
    fn offset_msg_id_round_trip() {
        let host: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        let id = offset_msg_id(host, 1234);
        assert_eq!(id.len(), 32);
        assert_eq!(id, "7F00000100002A9F00000000000004D2");
        assert_eq!(parse_offset_msg_id(&id), Some((host, 1234)));
        assert_eq!(parse_offset_msg_id("XYZ"), None);
    }

    #[test]
    fn detects_corruption_outside_the_body() {
        let mut props = Properties::new();
        props.insert("KEYS", "k1");
        let mut rec = sample("T", b"hello".to_vec(), props, false)
            .encode()
            .unwrap();
        seal_record(&mut rec, 5, 100);
        RecordView::parse_verified(&rec, true).unwrap();
        // Flip a byte of the queue id: only the record checksum sees it.
        rec[13] ^= 0x40;
        assert!(matches!(
            RecordView::parse_verified(&rec, true),
            Err(RecordError::RecordCrc { .. })
        ));
    }

    #[test]
    fn clients_do_not_see_the_trailer() {
        let mut props = Properties::new();
        props.insert("TAGS", "a");
        let mut rec = sample("T", vec![], props.clone(), false).encode().unwrap();
        seal_record(&mut rec, 0, 0);
        let view = RecordView::parse(&rec).unwrap();
        assert_eq!(view.to_message().unwrap().properties, props);
        assert_eq!(view.property("TAGS"), Some("a"));
    }

    fn arb_props() -> impl Strategy<Value = Properties> {
        prop::collection::vec(
            ("[A-Za-z_][A-Za-z0-9_#]{0,12}", "[^\u{1}\u{2}]{0,40}"),
            0..8,
        )
        .prop_map(|kv| kv.into_iter().collect())
    }

    proptest! {
        #[test]
        fn record_round_trip(
            topic in "[%|a-zA-Z0-9_-]{1,200}",
            body in prop::collection::vec(any::<u8>(), 0..2048),
            props in arb_props(),
            v6 in any::<bool>(),
            qoff in 0i64..i64::MAX,
            phys in 0i64..i64::MAX,
        ) {
            let msg = sample(&topic, body, props, v6);
            let mut rec = msg.encode().unwrap();
            seal_record(&mut rec, qoff, phys);
            let view = RecordView::parse_verified(&rec, true).unwrap();
            prop_assert_eq!(view.total_size(), rec.len());
            let decoded = view.to_message().unwrap();
            let mut expected = msg.clone();
            expected.queue_offset = qoff;
            expected.physical_offset = phys;
            expected.sys_flag = decoded.sys_flag;
            prop_assert_eq!(&decoded, &expected);
            // Re-encoding the decoded message gives the same bytes.
            let mut again = decoded.encode().unwrap();
            seal_record(&mut again, qoff, phys);
            prop_assert_eq!(again, rec);
        }

        #[test]
        fn any_single_byte_flip_is_detected(
            body in prop::collection::vec(any::<u8>(), 0..256),
            pos_frac in 0.0f64..1.0,
            xor in 1u8..=255,
        ) {
            let mut props = Properties::new();
            props.insert("UNIQ_KEY", "ABC");
            let mut rec = sample("TopicX", body, props, false).encode().unwrap();
            seal_record(&mut rec, 1, 2);
            let pos = ((rec.len() as f64) * pos_frac) as usize % rec.len();
            rec[pos] ^= xor;
            prop_assert!(RecordView::parse_verified(&rec, true).is_err());
        }

        #[test]
        fn parse_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = RecordView::parse_verified(&bytes, true);
            let _ = decode_records(&bytes);
        }

        /// Uniform bytes fail the magic check at byte 4; these start from valid sealed records
        /// (two in a row, as a pull answer carries them) and apply random edits: byte flips,
        /// i32/u16 overwrites with boundary values, truncations, appended junk, then maybe the
        /// total size rewritten to the new length and the record re-sealed, so that parsing
        /// gets past the size, magic and checksum checks into the field layout.
        #[test]
        fn parse_of_edited_records_never_panics(
            a in (prop::collection::vec(any::<u8>(), 0..300), arb_props(), any::<bool>()),
            b in (prop::collection::vec(any::<u8>(), 0..64), arb_props(), any::<bool>()),
            topic in "[a-zA-Z0-9_-]{1,40}",
            edits in prop::collection::vec(arb_edit(), 1..5),
            fix_total in any::<bool>(),
            reseal in any::<bool>(),
        ) {
            let mut buf = Vec::new();
            for (body, props, v6) in [a, b] {
                let mut rec = sample(&topic, body, props, v6).encode().unwrap();
                seal_record(&mut rec, 1, buf.len() as i64);
                buf.extend_from_slice(&rec);
            }
            let first_len = be_i32(&buf, 0) as usize;
            let mut first = buf[..first_len].to_vec();
            for e in &edits {
                apply_edit(&mut first, e);
            }
            if fix_total && first.len() >= 4 {
                let n = first.len() as i32;
                first[..4].copy_from_slice(&n.to_be_bytes());
            }
            if reseal && first.len() >= 84 {
                seal_record(&mut first, 1, 0);
            }
            exercise(&first);
            let mut both = first.clone();
            both.extend_from_slice(&buf[first_len..]);
            exercise(&both);
        }
    }

    /// One random edit: kind, where (a fraction of the length), and a value.
    fn arb_edit() -> impl Strategy<Value = (u8, f64, u32)> {
        (0u8..5, 0.0f64..1.0, any::<u32>())
    }

    fn apply_edit(rec: &mut Vec<u8>, &(kind, frac, v): &(u8, f64, u32)) {
        if rec.is_empty() {
            return;
        }
        let len = rec.len();
        let pos = ((len as f64 * frac) as usize).min(len - 1);
        let interesting = |v: u32| -> i64 {
            match v % 8 {
                0 => 0,
                1 => -1,
                2 => i64::from(i32::MAX),
                3 => i64::from(i32::MIN),
                4 => len as i64,
                5 => len as i64 - 1,
                6 => len as i64 + 1,
                _ => i64::from(v % 512),
            }
        };
        match kind {
            0 => rec[pos] ^= (v as u8) | 1,
            1 if pos + 4 <= len => {
                let x = interesting(v) as i32;
                rec[pos..pos + 4].copy_from_slice(&x.to_be_bytes());
            }
            2 if pos + 2 <= len => {
                let x = interesting(v) as u16;
                rec[pos..pos + 2].copy_from_slice(&x.to_be_bytes());
            }
            3 => rec.truncate(pos),
            4 => rec.extend((0..v % 64).map(|i| (v >> (i % 24)) as u8)),
            _ => {}
        }
    }

    /// Everything a reader may call on what parsing accepted.
    fn exercise(bytes: &[u8]) {
        for require in [false, true] {
            let _ = RecordView::parse_verified(bytes, require);
        }
        if let Ok(view) = RecordView::parse(bytes) {
            let _ = view.verify(false);
            let _ = (
                view.total_size(),
                view.body(),
                view.topic(),
                view.properties_raw(),
            );
            let _ = (
                view.queue_id(),
                view.sys_flag(),
                view.born_host(),
                view.store_host(),
            );
            let _ = (view.property("UNIQ_KEY"), view.property("TAGS"));
            let _ = view.to_message();
        }
        let _ = decode_records(bytes);
    }
}
