//! Pure translations between the 5.x gRPC API and what the broker stores and answers, as
//! RocketMQ's proxy makes them (`GrpcConverter`, `SendMessageActivity`): a gRPC message into
//! a SEND request's properties, a stored record into a gRPC message, remoting response codes
//! into gRPC status codes, the settings the server answers a client's settings with, and a
//! topic route into the message queues a client sees.

use std::collections::HashMap;

use conveyor_grpc_api::prost_types::{Duration as PbDuration, Timestamp};
use conveyor_grpc_api::v2::{
    self, retry_policy, settings, Address, AddressScheme, Broker, Code, CustomizedBackoff, Digest,
    DigestType, Encoding, Endpoints, ExponentialBackoff, MessageQueue, MessageType, Permission,
    Resource, RetryPolicy, Settings, Status, SystemProperties,
};
use conveyor_protocol::code::response_code as resp;
use conveyor_protocol::message::{keys, offset_msg_id, Properties, StoredMessage};
use conveyor_protocol::route::{perm, TopicRouteData};
use conveyor_protocol::sysflag;

use crate::broker::parking::TIMER_OUT_MS;

/// Largest body the SDKs are told they may send (the proxy's `maxMessageSize`).
pub const MAX_BODY_SIZE: i32 = 4 << 20;
/// Most user properties of one message.
const MAX_USER_PROPERTIES: usize = 128;
/// Most bytes of user properties, tag and keys of one message.
const MAX_PROPERTIES_BYTES: usize = 16 << 10;
/// Longest message group.
const MAX_MESSAGE_GROUP: usize = 64;
/// Latest delivery time a producer may ask for, from now (the proxy's limit).
pub const MAX_DELIVERY_DELAY_MS: i64 = 24 * 3600 * 1000;
/// The topic attribute naming the message types a topic takes.
pub const MESSAGE_TYPE_ATTRIBUTE: &str = "message.type";

/// Properties the broker sets or reads itself: a producer may not send them as user
/// properties, and they are not handed to consumers as such.
const SYSTEM_KEYS: &[&str] = &[
    keys::KEYS,
    keys::TAGS,
    keys::WAIT_STORE_MSG_OK,
    keys::DELAY_TIME_LEVEL,
    keys::RETRY_TOPIC,
    keys::REAL_TOPIC,
    keys::REAL_QUEUE_ID,
    keys::TRANSACTION_PREPARED,
    keys::PRODUCER_GROUP,
    keys::MIN_OFFSET,
    keys::MAX_OFFSET,
    keys::ORIGIN_MESSAGE_ID,
    keys::RECONSUME_TIME,
    keys::MAX_RECONSUME_TIMES,
    keys::MSG_REGION,
    keys::TRACE_SWITCH,
    keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    keys::TRANSACTION_ID,
    keys::CHECK_IMMUNITY_TIME_IN_SECONDS,
    keys::TRANSACTION_CHECK_TIMES,
    keys::TRANSACTION_PREPARED_QUEUE_OFFSET,
    keys::TIMER_DELIVER_MS,
    keys::TIMER_DELAY_SEC,
    keys::TIMER_DELAY_MS,
    keys::CLUSTER,
    keys::DLQ_ORIGIN_TOPIC,
    keys::DLQ_ORIGIN_MESSAGE_ID,
    keys::POP_CK,
    keys::FIRST_POP_TIME,
    keys::SHARDING_KEY,
    keys::TRACE_CONTEXT,
    "__BORNHOST",
    TIMER_OUT_MS,
    "BORN_TIMESTAMP",
    "__STARTDELIVERTIME",
    "INNER_MULTI_DISPATCH",
    "INNER_MULTI_QUEUE_OFFSET",
    "__ZONE_NAME",
];

/// A status with a code and a message.
pub fn status(code: Code, message: impl Into<String>) -> Status {
    Status {
        code: code as i32,
        message: message.into(),
    }
}

/// The OK status.
pub fn ok() -> Status {
    status(Code::Ok, "OK")
}

/// The gRPC code of a remoting answer (the proxy's mapping).
pub fn code_of(remoting: i32) -> Code {
    match remoting {
        resp::SUCCESS => Code::Ok,
        resp::SYSTEM_BUSY | resp::POLLING_FULL | resp::FLOW_CONTROL => Code::TooManyRequests,
        resp::REQUEST_CODE_NOT_SUPPORTED => Code::NotImplemented,
        resp::SUBSCRIPTION_GROUP_NOT_EXIST => Code::ConsumerGroupNotFound,
        resp::TOPIC_NOT_EXIST => Code::TopicNotFound,
        resp::NO_PERMISSION => Code::Forbidden,
        resp::FLUSH_DISK_TIMEOUT => Code::MasterPersistenceTimeout,
        resp::FLUSH_SLAVE_TIMEOUT => Code::SlavePersistenceTimeout,
        resp::SLAVE_NOT_AVAILABLE => Code::HaNotAvailable,
        resp::MESSAGE_ILLEGAL => Code::BadRequest,
        resp::INVALID_PARAMETER => Code::BadRequest,
        resp::SUBSCRIPTION_PARSE_FAILED => Code::IllegalFilterExpression,
        resp::NO_MESSAGE => Code::InvalidReceiptHandle,
        resp::POLLING_TIMEOUT | resp::PULL_NOT_FOUND => Code::MessageNotFound,
        _ => Code::InternalServerError,
    }
}

/// The answer of a remoting call as a status (`Ok` when it succeeded).
pub fn checked(r: &conveyor_protocol::command::RemotingCommand) -> Result<(), Status> {
    if r.code == resp::SUCCESS {
        Ok(())
    } else {
        Err(status_of(r.code, r.remark.as_deref()))
    }
}

/// A status for a remoting answer.
pub fn status_of(code: i32, remark: Option<&str>) -> Status {
    status(code_of(code), remark.unwrap_or_default())
}

/// ms since the epoch as a protobuf timestamp.
pub fn timestamp(ms: i64) -> Timestamp {
    Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// A protobuf timestamp in ms since the epoch.
pub fn millis_of(t: &Timestamp) -> i64 {
    t.seconds.saturating_mul(1000) + i64::from(t.nanos) / 1_000_000
}

/// A protobuf duration in ms.
pub fn duration_ms(d: &PbDuration) -> i64 {
    d.seconds.saturating_mul(1000) + i64::from(d.nanos) / 1_000_000
}

/// ms as a protobuf duration.
pub fn duration(ms: i64) -> PbDuration {
    PbDuration {
        seconds: ms / 1000,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// A resource's name (namespaces are not used by the broker, as in the proxy).
pub fn name(r: &Option<Resource>) -> &str {
    r.as_ref().map_or("", |r| r.name.as_str())
}

/// A resource of `name`.
pub fn resource(name: &str) -> Resource {
    Resource {
        resource_namespace: String::new(),
        name: name.to_string(),
    }
}

/// What a gRPC message becomes for the SEND request: its properties, flags and
/// whether it is half of a transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Outbound {
    /// The SEND header's `properties`.
    pub properties: Properties,
    /// SYSFLAG bits (compression, transaction).
    pub sys_flag: i32,
    /// BORNTIMESTAMP.
    pub born_timestamp: i64,
    /// The message group (FIFO), which picks the queue.
    pub message_group: Option<String>,
    /// The message is a transaction half.
    pub transactional: bool,
}

/// Checks a gRPC message as the proxy does and translates it (`now_ms` for the delivery
/// time check).
pub fn outbound(m: &v2::Message, now_ms: i64) -> Result<Outbound, Status> {
    let sp = m.system_properties.clone().unwrap_or_default();
    if m.body.is_empty() {
        return Err(status(Code::MessageBodyEmpty, "message body is empty"));
    }
    if m.body.len() > MAX_BODY_SIZE as usize {
        return Err(status(
            Code::MessageBodyTooLarge,
            format!(
                "message body of {} bytes is over {MAX_BODY_SIZE}",
                m.body.len()
            ),
        ));
    }
    if sp.message_id.is_empty() {
        return Err(status(Code::IllegalMessageId, "message id is empty"));
    }
    if m.user_properties.len() > MAX_USER_PROPERTIES {
        return Err(status(
            Code::MessagePropertiesTooLarge,
            format!(
                "{} user properties, at most {MAX_USER_PROPERTIES}",
                m.user_properties.len()
            ),
        ));
    }
    let mut size =
        sp.tag.as_ref().map_or(0, String::len) + sp.keys.iter().map(String::len).sum::<usize>();
    let mut properties = Properties::new();
    for (k, v) in &m.user_properties {
        if SYSTEM_KEYS.contains(&k.as_str()) {
            return Err(status(
                Code::IllegalMessagePropertyKey,
                format!("property key {k} is reserved"),
            ));
        }
        if k.is_empty() || has_control(k) || has_control(v) {
            return Err(status(
                Code::IllegalMessagePropertyKey,
                format!("property {k:?} has an empty key or control characters"),
            ));
        }
        size += k.len() + v.len();
        properties.insert(k.as_str(), v.as_str());
    }
    if size > MAX_PROPERTIES_BYTES {
        return Err(status(
            Code::MessagePropertiesTooLarge,
            format!("properties of {size} bytes, at most {MAX_PROPERTIES_BYTES}"),
        ));
    }
    if let Some(tag) = &sp.tag {
        if tag.is_empty() || tag.contains('|') || has_control(tag) || tag.trim() != tag {
            return Err(status(
                Code::IllegalMessageTag,
                format!("tag {tag:?} is not allowed"),
            ));
        }
        properties.insert(keys::TAGS, tag.as_str());
    }
    if !sp.keys.is_empty() {
        if sp
            .keys
            .iter()
            .any(|k| k.is_empty() || k.contains(' ') || has_control(k))
        {
            return Err(status(
                Code::IllegalMessageKey,
                "a key is empty or has spaces or control characters",
            ));
        }
        properties.insert(keys::KEYS, sp.keys.join(" "));
    }
    properties.insert(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX, sp.message_id.as_str());
    let kind = MessageType::try_from(sp.message_type).unwrap_or(MessageType::Normal);
    let mut sys_flag = 0;
    let transactional = kind == MessageType::Transaction;
    if transactional {
        properties.insert(keys::TRANSACTION_PREPARED, "true");
        // gRPC has no producer groups: the topic is the group check-backs go to (the proxy's
        // rule), and the heartbeats register the producer under it.
        properties.insert(keys::PRODUCER_GROUP, name(&m.topic));
        sys_flag |= sysflag::TRANSACTION_PREPARED_TYPE;
        if let Some(d) = &sp.orphaned_transaction_recovery_duration {
            let secs = duration_ms(d) / 1000;
            if !(0..=3600).contains(&secs) {
                return Err(status(
                    Code::BadRequest,
                    "orphaned transaction recovery duration is over 1 h",
                ));
            }
            properties.insert(keys::CHECK_IMMUNITY_TIME_IN_SECONDS, secs.to_string());
        }
    }
    if let Some(t) = &sp.delivery_timestamp {
        let at = millis_of(t);
        if at - now_ms > MAX_DELIVERY_DELAY_MS {
            return Err(status(
                Code::IllegalDeliveryTime,
                format!("delivery time {at} is more than a day ahead"),
            ));
        }
        if transactional {
            return Err(status(
                Code::MessagePropertyConflictWithType,
                "a transactional message cannot have a delivery time",
            ));
        }
        properties.insert(keys::TIMER_DELIVER_MS, at.to_string());
    }
    let message_group = sp.message_group.clone().filter(|g| !g.is_empty());
    if let Some(g) = &message_group {
        if g.len() > MAX_MESSAGE_GROUP || has_control(g) {
            return Err(status(
                Code::IllegalMessageGroup,
                format!("message group {g:?} is not allowed"),
            ));
        }
        if sp.delivery_timestamp.is_some() || transactional {
            return Err(status(
                Code::MessagePropertyConflictWithType,
                "a FIFO message cannot be delayed or transactional",
            ));
        }
        properties.insert(keys::SHARDING_KEY, g.as_str());
    }
    if let Some(tc) = sp.trace_context.as_ref().filter(|t| !t.is_empty()) {
        properties.insert(keys::TRACE_CONTEXT, tc.as_str());
    }
    if !sp.born_host.is_empty() {
        properties.insert("__BORNHOST", sp.born_host.as_str());
    }
    if Encoding::try_from(sp.body_encoding) == Ok(Encoding::Gzip) {
        sys_flag |= sysflag::COMPRESSED;
    }
    let born_timestamp = sp.born_timestamp.as_ref().map_or(now_ms, millis_of);
    Ok(Outbound {
        properties,
        sys_flag,
        born_timestamp,
        message_group,
        transactional,
    })
}

fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// A stored message as a consumer receives it: under `topic` (the one it subscribed to, even
/// when the message comes from a retry topic), with its receipt handle.
pub fn inbound(
    m: &StoredMessage,
    topic: &str,
    receipt_handle: Option<String>,
    invisible_ms: Option<i64>,
) -> v2::Message {
    let p = &m.properties;
    let user_properties: HashMap<String, String> = p
        .iter()
        .filter(|(k, _)| !SYSTEM_KEYS.contains(k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let message_type = if p.get(keys::TRANSACTION_PREPARED) == Some("true") {
        MessageType::Transaction
    } else if p.get(keys::TIMER_DELIVER_MS).is_some()
        || p.get(TIMER_OUT_MS).is_some()
        || p.get(keys::TIMER_DELAY_SEC).is_some()
        || p.get(keys::DELAY_TIME_LEVEL).is_some()
    {
        MessageType::Delay
    } else if p.get(keys::SHARDING_KEY).is_some() {
        MessageType::Fifo
    } else {
        MessageType::Normal
    };
    let message_id = p
        .get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        .map(str::to_string)
        .unwrap_or_else(|| offset_msg_id(m.store_host, m.physical_offset));
    let compressed = m.sys_flag & sysflag::COMPRESSED != 0;
    let dead_letter_queue = p.get(keys::DLQ_ORIGIN_TOPIC).map(|t| v2::DeadLetterQueue {
        topic: t.to_string(),
        message_id: p
            .get(keys::DLQ_ORIGIN_MESSAGE_ID)
            .unwrap_or_default()
            .to_string(),
    });
    let system_properties = SystemProperties {
        tag: p.get(keys::TAGS).map(str::to_string),
        keys: p
            .get(keys::KEYS)
            .map(|k| {
                k.split(keys::KEY_SEPARATOR)
                    .filter(|k| !k.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        message_id,
        body_digest: Some(Digest {
            r#type: DigestType::Md5 as i32,
            checksum: md5_hex(&m.body),
        }),
        body_encoding: if compressed {
            Encoding::Gzip
        } else {
            Encoding::Identity
        } as i32,
        message_type: message_type as i32,
        born_timestamp: Some(timestamp(m.born_timestamp)),
        born_host: p
            .get("__BORNHOST")
            .map_or_else(|| m.born_host.ip().to_string(), str::to_string),
        store_timestamp: Some(timestamp(m.store_timestamp)),
        store_host: m.store_host.to_string(),
        delivery_timestamp: p
            .get(keys::TIMER_DELIVER_MS)
            .or_else(|| p.get(TIMER_OUT_MS))
            .and_then(|t| t.parse::<i64>().ok())
            .map(timestamp),
        receipt_handle,
        queue_id: m.queue_id,
        queue_offset: Some(m.queue_offset),
        invisible_duration: invisible_ms.map(duration),
        delivery_attempt: Some(m.reconsume_times + 1),
        message_group: p.get(keys::SHARDING_KEY).map(str::to_string),
        trace_context: p.get(keys::TRACE_CONTEXT).map(str::to_string),
        orphaned_transaction_recovery_duration: None,
        dead_letter_queue,
        ..Default::default()
    };
    v2::Message {
        topic: Some(resource(topic)),
        user_properties,
        system_properties: Some(system_properties),
        body: m.body.to_vec(),
    }
}

/// Upper-case hex MD5 of a body (the proxy's body digest).
fn md5_hex(body: &[u8]) -> String {
    use md5::{Digest as _, Md5};
    Md5::digest(body)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// RocketMQ's default consumer retry policy: delay levels 3… of `1s 5s 10s 30s 1m 2m … 2h`.
const CONSUMER_BACKOFF_S: [i64; 18] = [
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
];

/// The settings the server answers a client's settings with: the client's, completed with
/// the server's values as the proxy does (a producer's backoff and body limit, a consumer
/// group's order flag, batch size, long polling and retry policy).
pub fn answer_settings(client: &Settings, group_orderly: bool, max_attempts: i32) -> Settings {
    let mut s = client.clone();
    match &mut s.pub_sub {
        Some(settings::PubSub::Publishing(p)) => {
            p.max_body_size = MAX_BODY_SIZE;
            p.validate_message_type = true;
            s.backoff_policy = Some(RetryPolicy {
                max_attempts: 3,
                strategy: Some(retry_policy::Strategy::ExponentialBackoff(
                    ExponentialBackoff {
                        initial: Some(duration(10)),
                        max: Some(duration(1000)),
                        multiplier: 2.0,
                    },
                )),
            });
        }
        Some(settings::PubSub::Subscription(sub)) => {
            sub.fifo = Some(group_orderly);
            sub.receive_batch_size = Some(32);
            if sub.long_polling_timeout.is_none() {
                sub.long_polling_timeout = Some(duration(20_000));
            }
            s.backoff_policy = Some(RetryPolicy {
                max_attempts,
                strategy: Some(retry_policy::Strategy::CustomizedBackoff(
                    CustomizedBackoff {
                        next: CONSUMER_BACKOFF_S
                            .iter()
                            .map(|s| duration(s * 1000))
                            .collect(),
                    },
                )),
            });
        }
        None => {}
    }
    s.metric = Some(v2::Metric {
        on: false,
        endpoints: None,
    });
    s
}

/// The message types a topic takes, from its `message.type` attribute (RocketMQ's
/// `TopicMessageType`); a topic without one takes every type (Conveyor's topics are typeless).
pub fn accepted_types(attribute: Option<&str>) -> Vec<i32> {
    let t = match attribute.map(str::to_ascii_uppercase).as_deref() {
        Some("NORMAL") => vec![MessageType::Normal],
        Some("FIFO") => vec![MessageType::Fifo],
        Some("DELAY") => vec![MessageType::Delay],
        Some("TRANSACTION") => vec![MessageType::Transaction],
        _ => vec![
            MessageType::Normal,
            MessageType::Fifo,
            MessageType::Delay,
            MessageType::Transaction,
        ],
    };
    t.into_iter().map(|t| t as i32).collect()
}

/// Endpoints for `host:port` strings (IPv4, IPv6 or a domain name, as the SDKs require the
/// scheme to say).
pub fn endpoints(addrs: &[(String, u16)]) -> Endpoints {
    let scheme = match addrs.first().map(|(h, _)| h.parse::<std::net::IpAddr>()) {
        Some(Ok(std::net::IpAddr::V4(_))) => AddressScheme::IPv4,
        Some(Ok(std::net::IpAddr::V6(_))) => AddressScheme::IPv6,
        _ => AddressScheme::DomainName,
    };
    Endpoints {
        scheme: scheme as i32,
        addresses: addrs
            .iter()
            .map(|(h, p)| Address {
                host: h.clone(),
                port: i32::from(*p),
            })
            .collect(),
    }
}

/// The message queues a client sees for a route: every queue of every broker group with a
/// master, reachable at `endpoints` (this endpoint serves them all). Queue `i` of a group is
/// readable below its read queue count and writable below its write queue count.
pub fn message_queues(
    topic: &str,
    route: &TopicRouteData,
    endpoints: &Endpoints,
    accept: &dyn Fn(&str) -> Vec<i32>,
) -> Vec<MessageQueue> {
    let mut out = Vec::new();
    for q in &route.queue_datas {
        let has_master = route
            .broker_datas
            .iter()
            .any(|b| b.broker_name == q.broker_name && b.master_addr().is_some());
        if !has_master {
            continue;
        }
        let readable = q.perm & perm::READ != 0;
        let writable = q.perm & perm::WRITE != 0;
        for id in 0..q.read_queue_nums.max(q.write_queue_nums) {
            let r = readable && id < q.read_queue_nums;
            let w = writable && id < q.write_queue_nums;
            let permission = match (r, w) {
                (true, true) => Permission::ReadWrite,
                (true, false) => Permission::Read,
                (false, true) => Permission::Write,
                (false, false) => Permission::None,
            };
            out.push(MessageQueue {
                topic: Some(resource(topic)),
                id,
                permission: permission as i32,
                broker: Some(Broker {
                    name: q.broker_name.clone(),
                    id: 0,
                    endpoints: Some(endpoints.clone()),
                }),
                accept_message_types: accept(&q.broker_name),
            });
        }
    }
    out
}

/// Java's `String.hashCode`, which the proxy uses to map a message group onto a queue.
pub fn java_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// A transaction id the server can decide the half message from: the broker group holding
/// it, its commit-log offset and its queue offset in the half topic.
pub fn transaction_id(broker_name: &str, commit_log_offset: i64, half_queue_offset: i64) -> String {
    format!("{commit_log_offset}:{half_queue_offset}:{broker_name}")
}

/// The parts of a [`transaction_id`]: broker group, commit-log offset, half queue offset.
pub fn parse_transaction_id(id: &str) -> Option<(&str, i64, i64)> {
    let mut parts = id.splitn(3, ':');
    let phys = parts.next()?.parse().ok()?;
    let half = parts.next()?.parse().ok()?;
    Some((parts.next()?, phys, half))
}

#[cfg(test)]
mod tests {
    use super::*;
    use conveyor_protocol::route::{BrokerData, QueueData};

    fn message(f: impl FnOnce(&mut v2::Message)) -> v2::Message {
        let mut m = v2::Message {
            topic: Some(resource("T")),
            user_properties: [("biz".to_string(), "1".to_string())].into(),
            system_properties: Some(SystemProperties {
                tag: Some("TagA".into()),
                keys: vec!["k1".into(), "k2".into()],
                message_id: "01ABC".into(),
                ..Default::default()
            }),
            body: b"hello".to_vec(),
        };
        f(&mut m);
        m
    }

    #[test]
    fn a_message_goes_out_with_its_properties_and_its_checks() {
        let o = outbound(&message(|_| {}), 1000).unwrap();
        assert_eq!(o.properties.get(keys::TAGS), Some("TagA"));
        assert_eq!(o.properties.get(keys::KEYS), Some("k1 k2"));
        assert_eq!(
            o.properties.get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
            Some("01ABC")
        );
        assert_eq!(o.properties.get("biz"), Some("1"));
        assert!(!o.transactional);
        let tx = outbound(
            &message(|m| {
                m.system_properties.as_mut().unwrap().message_type = MessageType::Transaction as i32
            }),
            1000,
        )
        .unwrap();
        assert!(tx.transactional && tx.sys_flag & sysflag::TRANSACTION_PREPARED_TYPE != 0);
        let delayed = outbound(
            &message(|m| {
                m.system_properties.as_mut().unwrap().delivery_timestamp = Some(timestamp(4000))
            }),
            1000,
        )
        .unwrap();
        assert_eq!(delayed.properties.get(keys::TIMER_DELIVER_MS), Some("4000"));
        let refusals = [
            (message(|m| m.body.clear()), Code::MessageBodyEmpty),
            (
                message(|m| m.system_properties.as_mut().unwrap().message_id.clear()),
                Code::IllegalMessageId,
            ),
            (
                message(|m| {
                    m.user_properties.insert("UNIQ_KEY".into(), "x".into());
                }),
                Code::IllegalMessagePropertyKey,
            ),
            (
                message(|m| m.system_properties.as_mut().unwrap().tag = Some("a|b".into())),
                Code::IllegalMessageTag,
            ),
            (
                message(|m| {
                    m.system_properties.as_mut().unwrap().message_group = Some("g".repeat(65))
                }),
                Code::IllegalMessageGroup,
            ),
            (
                message(|m| {
                    m.system_properties.as_mut().unwrap().delivery_timestamp =
                        Some(timestamp(1000 + MAX_DELIVERY_DELAY_MS + 1))
                }),
                Code::IllegalDeliveryTime,
            ),
        ];
        for (m, code) in refusals {
            assert_eq!(outbound(&m, 1000).unwrap_err().code, code as i32, "{m:?}");
        }
    }

    #[test]
    fn a_stored_message_comes_in_under_the_subscribed_topic_with_its_attempt() {
        let mut props = Properties::new();
        props.insert(keys::TAGS, "TagA");
        props.insert(keys::KEYS, "k1 k2");
        props.insert(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "01ABC");
        props.insert(keys::SHARDING_KEY, "g1");
        props.insert("biz", "1");
        let m = StoredMessage {
            topic: "%RETRY%G_T".into(),
            queue_id: 0,
            flag: 0,
            queue_offset: 7,
            physical_offset: 100,
            sys_flag: 0,
            born_timestamp: 1_500,
            born_host: "10.0.0.1:5".parse().unwrap(),
            store_timestamp: 2_250,
            store_host: "10.0.0.2:10911".parse().unwrap(),
            reconsume_times: 2,
            prepared_transaction_offset: 0,
            body: bytes::Bytes::from_static(b"hello"),
            properties: props,
        };
        let g = inbound(&m, "T", Some("h".into()), Some(30_000));
        let sp = g.system_properties.unwrap();
        assert_eq!(g.topic.unwrap().name, "T");
        assert_eq!(g.user_properties.len(), 1, "only user properties");
        assert_eq!(sp.delivery_attempt, Some(3));
        assert_eq!(sp.message_type, MessageType::Fifo as i32);
        assert_eq!(sp.keys, ["k1", "k2"]);
        assert_eq!(
            sp.body_digest.unwrap().checksum,
            "5D41402ABC4B2A76B9719D911017C592"
        );
        assert_eq!(
            sp.store_timestamp,
            Some(Timestamp {
                seconds: 2,
                nanos: 250_000_000
            })
        );
        assert_eq!(sp.queue_offset, Some(7));
    }

    #[test]
    fn routes_show_every_group_with_a_master_and_the_permission_of_each_queue() {
        let route = TopicRouteData {
            broker_datas: vec![
                BrokerData {
                    broker_addrs: [(0, "10.0.0.1:10911".to_string())].into(),
                    broker_name: "a".into(),
                    ..Default::default()
                },
                BrokerData {
                    broker_addrs: [(1, "10.0.0.2:10911".to_string())].into(),
                    broker_name: "b".into(),
                    ..Default::default()
                },
            ],
            queue_datas: vec![
                QueueData {
                    broker_name: "a".into(),
                    perm: perm::READ | perm::WRITE,
                    read_queue_nums: 3,
                    write_queue_nums: 2,
                    topic_sys_flag: 0,
                },
                QueueData {
                    broker_name: "b".into(),
                    perm: perm::READ | perm::WRITE,
                    read_queue_nums: 2,
                    write_queue_nums: 2,
                    topic_sys_flag: 0,
                },
            ],
            ..Default::default()
        };
        let e = endpoints(&[("127.0.0.1".into(), 8081)]);
        assert_eq!(e.scheme, AddressScheme::IPv4 as i32);
        let qs = message_queues("T", &route, &e, &|_| accepted_types(None));
        assert_eq!(qs.len(), 3, "group b has no master");
        assert_eq!(
            qs.iter().map(|q| q.permission).collect::<Vec<_>>(),
            [
                Permission::ReadWrite as i32,
                Permission::ReadWrite as i32,
                Permission::Read as i32
            ]
        );
        assert_eq!(accepted_types(Some("FIFO")), [MessageType::Fifo as i32]);
        assert_eq!(java_hash("abc"), 96354);
        assert_eq!(
            parse_transaction_id(&transaction_id("b:1", 5, 9)),
            Some(("b:1", 5, 9))
        );
        assert_eq!(
            endpoints(&[("conveyor.ns.svc".into(), 8081)]).scheme,
            AddressScheme::DomainName as i32
        );
    }
}
