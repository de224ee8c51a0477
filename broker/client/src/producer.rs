//! The producer (docs/protocol.md §5, §9.6, §10.1): sends single messages with
//! SEND_MESSAGE_V2 (310, short header keys `a`…`n`), batches with SEND_BATCH_MESSAGE (320)
//! and oneway messages, choosing queues round-robin over the writable queues of the topic's
//! route.
//!
//! A topic without route is sent through the TBW102 route (the broker auto-creates it); such
//! a borrowed route is re-checked after [`AUTO_CREATE_ROUTE_TTL`] so that the real route
//! takes over quickly. Failed sends are retried on another broker when the failure is a
//! transport error or one of the retryable codes (§3.2); a message keeps its UNIQ_KEY across
//! retries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use conveyor_protocol::batch::{encode_batch, BatchEntry};
use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::{ExtFields, RemotingCommand};
use conveyor_protocol::message::{keys, Properties};
use conveyor_protocol::route::MessageQueue;
use conveyor_protocol::time::now_ms;
use tracing::{debug, warn};

use crate::error::{ClientError, Result};
use crate::identity::FALLBACK_IP;
use crate::message::Message;
use crate::namesrv::{NameServerClient, DEFAULT_ROUTE_TTL};
use crate::remoting::{RemotingClient, RemotingConfig};
use crate::route::{default_topic_queues, master_addrs, publish_queues, QueueSelector};
use crate::uniq_id::UniqIdGenerator;

/// The auto-create template topic.
pub const DEFAULT_TOPIC: &str = "TBW102";
/// Queues per broker requested for auto-created topics (Java producer default).
pub const DEFAULT_TOPIC_QUEUE_NUMS: i32 = 4;
/// How long a route borrowed from TBW102 is used before asking for the real one again.
pub const AUTO_CREATE_ROUTE_TTL: Duration = Duration::from_secs(1);

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Name servers, `"a:9876;b:9876"`.
    pub namesrv: String,
    /// Producer group (header `a`).
    pub group: String,
    /// Limit per send attempt.
    pub send_timeout: Duration,
    /// Extra attempts after a retryable failure (Java default 2).
    pub retry_times: u32,
    /// Template topic for auto-creation (header `c`).
    pub default_topic: String,
    /// Queue count requested for auto-created topics (header `d`).
    pub default_topic_queue_nums: i32,
    /// How long a route is used before it is fetched again.
    pub route_ttl: Duration,
    /// Transport settings.
    pub remoting: RemotingConfig,
}

impl ProducerConfig {
    /// Defaults for the given name servers and group.
    pub fn new(namesrv: impl Into<String>, group: impl Into<String>) -> Self {
        Self {
            namesrv: namesrv.into(),
            group: group.into(),
            send_timeout: Duration::from_secs(3),
            retry_times: 2,
            default_topic: DEFAULT_TOPIC.to_string(),
            default_topic_queue_nums: DEFAULT_TOPIC_QUEUE_NUMS,
            route_ttl: DEFAULT_ROUTE_TTL,
            remoting: RemotingConfig::default(),
        }
    }
}

/// Outcome of a successful send (codes 0, 10, 11, 12 all mean "stored").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    /// Code 0.
    SendOk,
    /// Code 10: stored, but the flush did not finish in time.
    FlushDiskTimeout,
    /// Code 12: stored, but replication did not finish in time.
    FlushSlaveTimeout,
    /// Code 11: stored, but no slave is available.
    SlaveNotAvailable,
}

impl SendStatus {
    /// The status for a response code, `None` for failures.
    pub fn from_code(code: i32) -> Option<Self> {
        match code {
            response_code::SUCCESS => Some(SendStatus::SendOk),
            response_code::FLUSH_DISK_TIMEOUT => Some(SendStatus::FlushDiskTimeout),
            response_code::FLUSH_SLAVE_TIMEOUT => Some(SendStatus::FlushSlaveTimeout),
            response_code::SLAVE_NOT_AVAILABLE => Some(SendStatus::SlaveNotAvailable),
            _ => None,
        }
    }
}

/// What the broker answered to a send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendResult {
    /// Store status.
    pub status: SendStatus,
    /// Client id(s) (UNIQ_KEY); comma-joined for batches.
    pub msg_id: String,
    /// Offset message id(s) from the broker (§4.5); comma-joined for batches.
    pub offset_msg_id: String,
    /// Queue the message was stored in.
    pub queue: MessageQueue,
    /// Logical offset of the (first) message in its queue.
    pub queue_offset: i64,
    /// `transactionId` of the response, if any.
    pub transaction_id: Option<String>,
}

/// The SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request header (§5.1), shared with the broker.
pub use conveyor_protocol::header::SendMessageHeader as SendHeader;

/// Writable queues of a topic and where their brokers are.
#[derive(Debug)]
struct PublishInfo {
    queues: Vec<MessageQueue>,
    addrs: HashMap<String, String>,
    fetched: Instant,
    ttl: Duration,
}

impl PublishInfo {
    /// The queues a route offers `topic` (an error when there are none) and their brokers.
    fn new(
        topic: &str,
        queues: Vec<MessageQueue>,
        route: &conveyor_protocol::route::TopicRouteData,
        ttl: Duration,
    ) -> Result<Self> {
        if queues.is_empty() {
            return Err(ClientError::NoRoute {
                topic: topic.to_string(),
            });
        }
        Ok(Self {
            queues,
            addrs: master_addrs(route),
            fetched: Instant::now(),
            ttl,
        })
    }
}

/// A producer. Share it (`Arc`) between tasks; every method takes `&self`.
#[derive(Debug)]
pub struct Producer {
    config: ProducerConfig,
    remoting: RemotingClient,
    namesrv: NameServerClient,
    selector: QueueSelector,
    publish: Mutex<HashMap<String, Arc<PublishInfo>>>,
    refresh_lock: tokio::sync::Mutex<()>,
    uniq: OnceLock<UniqIdGenerator>,
}

fn props_string(props: &Properties) -> String {
    String::from_utf8_lossy(&props.encode()).into_owned()
}

impl Producer {
    /// A producer with its own connections. No IO happens until the first send.
    pub fn new(config: ProducerConfig) -> Result<Self> {
        let remoting = RemotingClient::new(config.remoting.clone());
        let namesrv = NameServerClient::new(remoting.clone(), &config.namesrv)?
            .with_route_ttl(config.route_ttl);
        Ok(Self {
            config,
            remoting,
            namesrv,
            selector: QueueSelector::new(),
            publish: Mutex::new(HashMap::new()),
            refresh_lock: tokio::sync::Mutex::new(()),
            uniq: OnceLock::new(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &ProducerConfig {
        &self.config
    }

    /// The transport (for raw requests and server-request hooks).
    pub fn remoting(&self) -> &RemotingClient {
        &self.remoting
    }

    /// The name-server client.
    pub fn namesrv(&self) -> &NameServerClient {
        &self.namesrv
    }

    /// Closes all connections (they reopen on the next send).
    pub fn close(&self) {
        self.remoting.close();
    }

    /// A new UNIQ_KEY. The IP part is the local address of the first connection made
    /// (127.0.0.1 before any).
    pub fn new_uniq_id(&self) -> String {
        self.uniq
            .get_or_init(|| UniqIdGenerator::new(self.remoting.local_ip().unwrap_or(FALLBACK_IP)))
            .next_id()
    }

    /// The writable queues of `topic` (fetching its route, or TBW102's, if needed).
    pub async fn publish_queues(&self, topic: &str) -> Result<Vec<MessageQueue>> {
        Ok(self.publish_info(topic).await?.queues.clone())
    }

    /// Sends one message synchronously, retrying on other queues (§3.2 retryable codes).
    pub async fn send(&self, msg: &Message) -> Result<SendResult> {
        msg.validate().map_err(ClientError::InvalidArgument)?;
        let mut info = self.publish_info(&msg.topic).await?;
        let uniq = self.new_uniq_id();
        let props = msg.wire_properties(Some(&uniq));
        let mut avoid: Option<String> = None;
        let mut attempt = 0;
        loop {
            let queue = self
                .selector
                .select(&info.queues, avoid.as_deref())
                .cloned()
                .ok_or_else(|| ClientError::NoRoute {
                    topic: msg.topic.clone(),
                })?;
            let result = self.send_single(&info, msg, &props, &uniq, &queue).await;
            match result {
                Ok(r) => return Ok(r),
                Err(e) if e.is_retryable_send() && attempt < self.config.retry_times => {
                    warn!(topic = %msg.topic, broker = %queue.broker_name, queue = queue.queue_id,
                          error = %e, "send failed; retrying on another queue");
                    attempt += 1;
                    avoid = Some(queue.broker_name.clone());
                    if e.code() == Some(response_code::TOPIC_NOT_EXIST) || e.is_transport() {
                        self.invalidate(&msg.topic);
                        info = self.publish_info(&msg.topic).await?;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends one message to a given queue, without retries.
    pub async fn send_to_queue(&self, msg: &Message, queue: &MessageQueue) -> Result<SendResult> {
        msg.validate().map_err(ClientError::InvalidArgument)?;
        let info = self.publish_info(&queue.topic).await?;
        let uniq = self.new_uniq_id();
        let props = msg.wire_properties(Some(&uniq));
        self.send_single(&info, msg, &props, &uniq, queue).await
    }

    /// Sends a message without waiting for (or getting) a response, to the next queue.
    pub async fn send_oneway(&self, msg: &Message) -> Result<()> {
        msg.validate().map_err(ClientError::InvalidArgument)?;
        let info = self.publish_info(&msg.topic).await?;
        let queue = self.next_queue(&info, &msg.topic, None)?;
        let addr = broker_addr(&info, &queue)?;
        let uniq = self.new_uniq_id();
        let props = msg.wire_properties(Some(&uniq));
        let header = self.header(&msg.topic, &queue, msg.flag, &props, false);
        let request =
            RemotingCommand::request(request_code::SEND_MESSAGE_V2, header.to_ext_fields())
                .with_body(msg.body.clone());
        Ok(self.remoting.invoke_oneway(addr, request).await?)
    }

    /// Sends several messages of one topic as one SEND_BATCH_MESSAGE to one queue; they get
    /// consecutive offsets. Retries like [`Producer::send`].
    pub async fn send_batch(&self, msgs: &[Message]) -> Result<SendResult> {
        let first = msgs
            .first()
            .ok_or_else(|| ClientError::InvalidArgument("empty batch".into()))?;
        let topic = first.topic.clone();
        let mut ids = Vec::with_capacity(msgs.len());
        let mut entries = Vec::with_capacity(msgs.len());
        for m in msgs {
            m.validate().map_err(ClientError::InvalidArgument)?;
            if m.topic != topic {
                return Err(ClientError::InvalidArgument(
                    "all messages of a batch must have the same topic".into(),
                ));
            }
            if m.properties.get(keys::DELAY_TIME_LEVEL).is_some() {
                return Err(ClientError::InvalidArgument(
                    "delayed messages cannot be batched".into(),
                ));
            }
            let id = self.new_uniq_id();
            entries.push(BatchEntry {
                flag: m.flag,
                body: m.body.clone(),
                properties: m.wire_properties(Some(&id)),
            });
            ids.push(id);
        }
        let body = Bytes::from(encode_batch(&entries)?);
        let batch_id = self.new_uniq_id();
        let batch_props =
            Message::new(topic.clone(), Bytes::new()).wire_properties(Some(&batch_id));
        let msg_id = ids.join(",");

        let mut info = self.publish_info(&topic).await?;
        let mut avoid: Option<String> = None;
        let mut attempt = 0;
        loop {
            let queue = self
                .selector
                .select(&info.queues, avoid.as_deref())
                .cloned()
                .ok_or_else(|| ClientError::NoRoute {
                    topic: topic.clone(),
                })?;
            let addr = broker_addr(&info, &queue)?.to_string();
            let header = self.header(&topic, &queue, 0, &batch_props, true);
            let request =
                RemotingCommand::request(request_code::SEND_BATCH_MESSAGE, header.to_ext_fields())
                    .with_body(body.clone());
            let result = match self
                .remoting
                .invoke_timeout(&addr, request, self.config.send_timeout)
                .await
            {
                Ok(resp) => parse_send_response(resp, &queue, msg_id.clone()),
                Err(e) => Err(e.into()),
            };
            match result {
                Ok(r) => return Ok(r),
                Err(e) if e.is_retryable_send() && attempt < self.config.retry_times => {
                    warn!(%topic, broker = %queue.broker_name, error = %e, "batch send failed; retrying");
                    attempt += 1;
                    avoid = Some(queue.broker_name.clone());
                    if e.code() == Some(response_code::TOPIC_NOT_EXIST) || e.is_transport() {
                        self.invalidate(&topic);
                        info = self.publish_info(&topic).await?;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The next queue round-robin, avoiding `avoid`'s broker when others exist.
    fn next_queue(
        &self,
        info: &PublishInfo,
        topic: &str,
        avoid: Option<&str>,
    ) -> Result<MessageQueue> {
        self.selector
            .select(&info.queues, avoid)
            .cloned()
            .ok_or_else(|| ClientError::NoRoute {
                topic: topic.to_string(),
            })
    }

    /// Sends a transactional half message: stored, but invisible to consumers until
    /// [`Producer::end_transaction`] commits it (or the broker's check-back resolves it).
    pub async fn send_half(&self, msg: &Message) -> Result<SendResult> {
        msg.validate().map_err(ClientError::InvalidArgument)?;
        let info = self.publish_info(&msg.topic).await?;
        let queue = self.next_queue(&info, &msg.topic, None)?;
        let uniq = self.new_uniq_id();
        let mut props = msg.wire_properties(Some(&uniq));
        props.insert(keys::TRANSACTION_PREPARED, "true");
        props.insert(keys::PRODUCER_GROUP, self.config.group.clone());
        let addr = broker_addr(&info, &queue)?;
        let mut header = self.header(&msg.topic, &queue, msg.flag, &props, false);
        header.sys_flag = conveyor_protocol::sysflag::TRANSACTION_PREPARED_TYPE;
        let request =
            RemotingCommand::request(request_code::SEND_MESSAGE_V2, header.to_ext_fields())
                .with_body(msg.body.clone());
        let response = self
            .remoting
            .invoke_timeout(addr, request, self.config.send_timeout)
            .await?;
        parse_send_response(response, &queue, uniq)
    }

    /// Commits (`true`) or rolls back a half message sent with [`Producer::send_half`].
    pub async fn end_transaction(&self, half: &SendResult, commit: bool) -> Result<()> {
        let (_, phys) = conveyor_protocol::message::parse_offset_msg_id(&half.offset_msg_id)
            .ok_or_else(|| {
                ClientError::InvalidArgument(format!(
                    "bad offset message id {:?}",
                    half.offset_msg_id
                ))
            })?;
        let info = self.publish_info(&half.queue.topic).await?;
        let addr = broker_addr(&info, &half.queue)?;
        let decision = if commit {
            conveyor_protocol::sysflag::TRANSACTION_COMMIT_TYPE
        } else {
            conveyor_protocol::sysflag::TRANSACTION_ROLLBACK_TYPE
        };
        let request = RemotingCommand::request(request_code::END_TRANSACTION, ExtFields::new())
            .with_ext("producerGroup", &self.config.group)
            .with_ext("tranStateTableOffset", half.queue_offset)
            .with_ext("commitLogOffset", phys)
            .with_ext("commitOrRollback", decision)
            .with_ext("fromTransactionCheck", "false")
            .with_ext("msgId", &half.msg_id)
            .with_ext(
                "transactionId",
                half.transaction_id.as_deref().unwrap_or(&half.msg_id),
            );
        let response = self
            .remoting
            .invoke_timeout(addr, request, self.config.send_timeout)
            .await?;
        crate::remoting::expect_success(response)?;
        Ok(())
    }

    fn header(
        &self,
        topic: &str,
        queue: &MessageQueue,
        flag: i32,
        props: &Properties,
        batch: bool,
    ) -> SendHeader {
        SendHeader {
            producer_group: self.config.group.clone(),
            topic: topic.to_string(),
            default_topic: self.config.default_topic.clone(),
            default_topic_queue_nums: self.config.default_topic_queue_nums,
            queue_id: queue.queue_id,
            sys_flag: 0,
            born_timestamp: now_ms(),
            flag,
            properties: props_string(props),
            reconsume_times: 0,
            unit_mode: false,
            max_reconsume_times: None,
            batch,
            broker_name: Some(queue.broker_name.clone()),
        }
    }

    async fn send_single(
        &self,
        info: &PublishInfo,
        msg: &Message,
        props: &Properties,
        uniq: &str,
        queue: &MessageQueue,
    ) -> Result<SendResult> {
        let addr = broker_addr(info, queue)?;
        let header = self.header(&msg.topic, queue, msg.flag, props, false);
        let request =
            RemotingCommand::request(request_code::SEND_MESSAGE_V2, header.to_ext_fields())
                .with_body(msg.body.clone());
        let response = self
            .remoting
            .invoke_timeout(addr, request, self.config.send_timeout)
            .await?;
        parse_send_response(response, queue, uniq.to_string())
    }

    fn invalidate(&self, topic: &str) {
        self.publish
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(topic);
    }

    fn cached_info(&self, topic: &str) -> Option<Arc<PublishInfo>> {
        self.publish
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(topic)
            .cloned()
    }

    /// The publish info of `topic`: cached while fresh; otherwise the topic's route, or the
    /// default topic's route when the topic has none (auto-create). If the name server cannot
    /// be reached, a stale entry is still used.
    async fn publish_info(&self, topic: &str) -> Result<Arc<PublishInfo>> {
        let cached = self.cached_info(topic);
        if let Some(info) = cached.as_ref().filter(|i| i.fetched.elapsed() < i.ttl) {
            return Ok(info.clone());
        }
        let _guard = self.refresh_lock.lock().await;
        let cached = self.cached_info(topic);
        if let Some(info) = cached.as_ref().filter(|i| i.fetched.elapsed() < i.ttl) {
            return Ok(info.clone());
        }
        let fresh = match self.fetch_publish_info(topic).await {
            Ok(info) => Arc::new(info),
            Err(e) => match cached {
                Some(stale) if e.is_transport() => {
                    warn!(topic, error = %e, "route refresh failed; using the previous route");
                    return Ok(stale);
                }
                _ => return Err(e),
            },
        };
        self.publish
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(topic.to_string(), fresh.clone());
        Ok(fresh)
    }

    async fn fetch_publish_info(&self, topic: &str) -> Result<PublishInfo> {
        match self.namesrv.refresh_route(topic).await {
            Ok(route) => {
                let queues = publish_queues(topic, &route);
                PublishInfo::new(topic, queues, &route, self.config.route_ttl)
            }
            Err(e) if e.code() == Some(response_code::TOPIC_NOT_EXIST) => {
                debug!(topic, default = %self.config.default_topic, "no route; using the default topic's route");
                let route = self.namesrv.topic_route(&self.config.default_topic).await?;
                let queues =
                    default_topic_queues(topic, &route, self.config.default_topic_queue_nums);
                let ttl = AUTO_CREATE_ROUTE_TTL.min(self.config.route_ttl);
                PublishInfo::new(topic, queues, &route, ttl)
            }
            Err(e) => Err(e),
        }
    }
}

fn broker_addr<'a>(info: &'a PublishInfo, queue: &MessageQueue) -> Result<&'a str> {
    info.addrs
        .get(&queue.broker_name)
        .map(String::as_str)
        .ok_or_else(|| ClientError::NoBroker {
            broker_name: queue.broker_name.clone(),
        })
}

/// Interprets a SEND response (§5.1): codes 0/10/11/12 are stored messages, anything else is
/// [`ClientError::Server`].
pub fn parse_send_response(
    response: RemotingCommand,
    queue: &MessageQueue,
    msg_id: String,
) -> Result<SendResult> {
    let Some(status) = SendStatus::from_code(response.code) else {
        return Err(ClientError::server(response.code, response.remark));
    };
    let queue_id = response.get_i32("queueId")?;
    Ok(SendResult {
        status,
        msg_id,
        offset_msg_id: response.get_str("msgId")?.to_string(),
        queue: MessageQueue {
            broker_name: queue.broker_name.clone(),
            queue_id,
            topic: queue.topic.clone(),
        },
        queue_offset: response.get_i64("queueOffset")?,
        transaction_id: response
            .get_str_opt("transactionId")
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_header_uses_exact_short_keys() {
        let h = SendHeader {
            producer_group: "PG".into(),
            topic: "TopicTest".into(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: 4,
            queue_id: 1,
            sys_flag: 0,
            born_timestamp: 1_717_000_000_000,
            flag: 0,
            properties: "UNIQ_KEY\u{1}AC\u{2}WAIT\u{1}true\u{2}TAGS\u{1}TagA\u{2}".into(),
            reconsume_times: 0,
            unit_mode: false,
            max_reconsume_times: None,
            batch: false,
            broker_name: Some("broker-a".into()),
        };
        let f = h.to_ext_fields();
        let keys: Vec<&str> = f.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "n"]
        );
        let get = |k: &str| f.get(k).map(String::as_str);
        assert_eq!(get("a"), Some("PG"));
        assert_eq!(get("b"), Some("TopicTest"));
        assert_eq!(get("c"), Some("TBW102"));
        assert_eq!(get("d"), Some("4"));
        assert_eq!(get("e"), Some("1"));
        assert_eq!(get("f"), Some("0"));
        assert_eq!(get("g"), Some("1717000000000"));
        assert_eq!(get("h"), Some("0"));
        assert_eq!(
            get("i"),
            Some("UNIQ_KEY\u{1}AC\u{2}WAIT\u{1}true\u{2}TAGS\u{1}TagA\u{2}")
        );
        assert_eq!(get("j"), Some("0"));
        assert_eq!(get("k"), Some("false"));
        assert_eq!(get("m"), Some("false"));
        assert_eq!(get("n"), Some("broker-a"));
        // The JSON header matches the doc's example layout (alphabetical, all strings).
        let cmd = RemotingCommand::request(request_code::SEND_MESSAGE_V2, f).with_opaque(42);
        let json = String::from_utf8(
            conveyor_protocol::frame::encode_json_header(&cmd).unwrap_or_default(),
        )
        .unwrap_or_default();
        assert!(json.starts_with(
            r#"{"code":310,"extFields":{"a":"PG","b":"TopicTest","c":"TBW102","d":"4","e":"1","f":"0","g":"1717000000000","h":"0","i":"UNIQ_KEY\u0001AC\u0002"#
        ), "{json}");
    }

    #[test]
    fn send_response_parsing() {
        let q = MessageQueue {
            broker_name: "broker-a".into(),
            queue_id: -1,
            topic: "T".into(),
        };
        let ok = RemotingCommand::response(10, None)
            .with_ext("msgId", "0A0102030000277F0000000000000100")
            .with_ext("queueId", 2)
            .with_ext("queueOffset", 17)
            .with_ext("transactionId", "");
        let r = parse_send_response(ok, &q, "U".into()).unwrap();
        assert_eq!(r.status, SendStatus::FlushDiskTimeout);
        assert_eq!(r.queue.queue_id, 2);
        assert_eq!(r.queue.broker_name, "broker-a");
        assert_eq!(r.queue_offset, 17);
        assert_eq!(r.msg_id, "U");
        assert_eq!(r.transaction_id, None);
        let err = RemotingCommand::response(14, Some("busy".into()));
        let e = parse_send_response(err, &q, "U".into()).unwrap_err();
        assert_eq!(e.code(), Some(14));
        assert!(e.is_retryable_send());
        let missing = RemotingCommand::response(0, None);
        assert!(matches!(
            parse_send_response(missing, &q, "U".into()),
            Err(ClientError::Header(_))
        ));
    }
}
