//! A manual pull consumer (docs/protocol.md §6): the caller chooses queue and offset and
//! calls PULL_MESSAGE (11) with an optional long-poll hold; offsets are stored in the broker
//! per group (QUERY/UPDATE_CONSUMER_OFFSET 14/15); HEART_BEAT (34) registers the group and
//! its subscriptions. Every pull carries its subscription (PullSysFlag SUBSCRIPTION), so
//! pulling works without a prior heartbeat.
//!
//! Bodies are returned as stored: a message a Java producer compressed (SYSFLAG bit 0x1) is
//! not decompressed here. Conveyor producers never compress.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::{ExtFields, RemotingCommand};
use conveyor_protocol::json;
use conveyor_protocol::message::{decode_records, keys, StoredMessage};
use conveyor_protocol::route::{
    ConsumeFromWhere, ConsumeType, ConsumerData, HeartbeatData, MessageModel, MessageQueue,
    EXPRESSION_TYPE_TAG,
};

use crate::error::{ClientError, Result};
use crate::identity::{new_client_id, FALLBACK_IP};
use crate::namesrv::{NameServerClient, DEFAULT_ROUTE_TTL};
use crate::remoting::{expect_success, RemotingClient, RemotingConfig};
use crate::route::{master_addr, master_addrs, subscribe_queues};
use crate::subscription::Subscription;

/// PULL request `sysFlag` bits (§4.4 PullSysFlag).
pub mod pull_sys_flag {
    /// `commitOffset` is valid and should be stored.
    pub const COMMIT_OFFSET: i32 = 0x1;
    /// Long polling allowed.
    pub const SUSPEND: i32 = 0x2;
    /// The header carries the subscription to use.
    pub const SUBSCRIPTION: i32 = 0x4;
    /// Legacy class filter.
    pub const CLASS_FILTER: i32 = 0x8;
    /// Lite pull.
    pub const LITE_PULL: i32 = 0x10;
}

/// Pull consumer settings.
#[derive(Debug, Clone)]
pub struct PullConsumerConfig {
    /// Name servers, `"a:9876;b:9876"`.
    pub namesrv: String,
    /// Consumer group.
    pub group: String,
    /// Limit for non-pull requests, and the margin added to a pull's long-poll hold.
    pub request_timeout: Duration,
    /// How long a route is used before it is fetched again.
    pub route_ttl: Duration,
    /// Transport settings.
    pub remoting: RemotingConfig,
}

impl PullConsumerConfig {
    /// Defaults for the given name servers and group.
    pub fn new(namesrv: impl Into<String>, group: impl Into<String>) -> Self {
        Self {
            namesrv: namesrv.into(),
            group: group.into(),
            request_timeout: Duration::from_secs(3),
            route_ttl: DEFAULT_ROUTE_TTL,
            remoting: RemotingConfig::default(),
        }
    }
}

/// How a pull ended (§6.5 status/code mapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullStatus {
    /// Code 0: messages returned.
    Found,
    /// Code 19: nothing at this offset yet (after the long-poll hold, if any).
    NoNewMsg,
    /// Code 20: entries were examined but none matched the subscription.
    NoMatchedMsg,
    /// Code 21: the offset is outside the queue; continue from `next_begin_offset`.
    OffsetIllegal,
}

/// Result of one pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullResult {
    /// Outcome.
    pub status: PullStatus,
    /// Offset to pull from next.
    pub next_begin_offset: i64,
    /// Queue's minimum offset.
    pub min_offset: i64,
    /// Queue's maximum offset (next offset to be written).
    pub max_offset: i64,
    /// Broker id the broker suggests pulling from next (0 = master).
    pub suggest_which_broker_id: i64,
    /// Messages (re-filtered by tag on the client), empty unless `Found`.
    pub messages: Vec<StoredMessage>,
}

/// Parameters of one pull beyond queue and offset.
#[derive(Debug, Clone, Default)]
pub struct PullOptions {
    /// Most messages to return (0 means 32).
    pub max_msgs: i32,
    /// Long-poll hold; zero disables suspension.
    pub suspend: Duration,
    /// Subscription; `None` uses the one registered with [`PullConsumer::subscribe`], or all.
    pub subscription: Option<Subscription>,
    /// Offset to store as the group's consumed offset while pulling (COMMIT_OFFSET).
    pub commit_offset: Option<i64>,
}

/// The PULL_MESSAGE request header (§6.5): the protocol crate's type, shared with the broker.
pub use conveyor_protocol::header::PullMessageHeader as PullHeader;

/// A group-aware manual pull consumer. Share it (`Arc`) between tasks.
#[derive(Debug)]
pub struct PullConsumer {
    config: PullConsumerConfig,
    remoting: RemotingClient,
    namesrv: NameServerClient,
    subscriptions: Mutex<BTreeMap<String, Subscription>>,
    sub_version: i64,
    client_id: OnceLock<String>,
}

/// Default `maxMsgNums` (Java default).
pub const DEFAULT_MAX_MSGS: i32 = 32;

impl PullConsumer {
    /// A consumer with its own connections. No IO happens until the first call.
    pub fn new(config: PullConsumerConfig) -> Result<Self> {
        let remoting = RemotingClient::new(config.remoting.clone());
        let namesrv = NameServerClient::new(remoting.clone(), &config.namesrv)?
            .with_route_ttl(config.route_ttl);
        let sub_version = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        Ok(Self {
            config,
            remoting,
            namesrv,
            subscriptions: Mutex::new(BTreeMap::new()),
            sub_version,
            client_id: OnceLock::new(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &PullConsumerConfig {
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

    /// The client id sent in heartbeats (fixed at first use).
    pub fn client_id(&self) -> &str {
        self.client_id
            .get_or_init(|| new_client_id(self.remoting.local_ip().unwrap_or(FALLBACK_IP)))
    }

    /// Registers a subscription to `topic` with a TAG expression (`*`, `A || B`). It is used
    /// by pulls without an explicit subscription and announced by [`PullConsumer::heartbeat`].
    pub fn subscribe(&self, topic: &str, expression: &str) -> Result<()> {
        let sub = Subscription::parse(expression)?;
        self.subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(topic.to_string(), sub);
        Ok(())
    }

    fn subscription_for(&self, topic: &str) -> Subscription {
        self.subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(topic)
            .cloned()
            .unwrap_or_default()
    }

    /// The readable queues of `topic`, from a freshly fetched route.
    pub async fn fetch_queues(&self, topic: &str) -> Result<Vec<MessageQueue>> {
        let route = self.namesrv.refresh_route(topic).await?;
        Ok(subscribe_queues(topic, &route))
    }

    /// The master address of the broker holding `queue`.
    pub async fn broker_addr(&self, queue: &MessageQueue) -> Result<String> {
        let route = self.namesrv.topic_route(&queue.topic).await?;
        if let Some(addr) = master_addr(&route, &queue.broker_name) {
            return Ok(addr.to_string());
        }
        let route = self.namesrv.refresh_route(&queue.topic).await?;
        master_addr(&route, &queue.broker_name)
            .map(str::to_string)
            .ok_or_else(|| ClientError::NoBroker {
                broker_name: queue.broker_name.clone(),
            })
    }

    /// Pulls up to `max_msgs` messages from `queue` starting at `offset`, holding the request
    /// at the broker for up to `suspend` when nothing is available (zero: answer at once).
    pub async fn pull(
        &self,
        queue: &MessageQueue,
        offset: i64,
        max_msgs: i32,
        suspend: Duration,
    ) -> Result<PullResult> {
        self.pull_with(
            queue,
            offset,
            PullOptions {
                max_msgs,
                suspend,
                ..PullOptions::default()
            },
        )
        .await
    }

    /// [`PullConsumer::pull`] with every option.
    pub async fn pull_with(
        &self,
        queue: &MessageQueue,
        offset: i64,
        options: PullOptions,
    ) -> Result<PullResult> {
        let subscription = options
            .subscription
            .unwrap_or_else(|| self.subscription_for(&queue.topic));
        let mut sys_flag = pull_sys_flag::SUBSCRIPTION;
        if !options.suspend.is_zero() {
            sys_flag |= pull_sys_flag::SUSPEND;
        }
        if options.commit_offset.is_some() {
            sys_flag |= pull_sys_flag::COMMIT_OFFSET;
        }
        let header = PullHeader {
            consumer_group: self.config.group.clone(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            queue_offset: offset,
            max_msg_nums: if options.max_msgs > 0 {
                options.max_msgs
            } else {
                DEFAULT_MAX_MSGS
            },
            sys_flag,
            commit_offset: options.commit_offset.unwrap_or(0),
            suspend_timeout_millis: options.suspend.as_millis() as i64,
            subscription: Some(subscription.expression().to_string()),
            sub_version: self.sub_version,
            expression_type: Some(EXPRESSION_TYPE_TAG.to_string()),
            max_msg_bytes: None,
        };
        let addr = self.broker_addr(queue).await?;
        let request = RemotingCommand::request(request_code::PULL_MESSAGE, header.to_ext_fields());
        let timeout = options.suspend + self.config.request_timeout;
        let response = self
            .remoting
            .invoke_timeout(&addr, request, timeout)
            .await?;
        parse_pull_response(response, &subscription)
    }

    /// The group's stored offset for `queue` (QUERY_CONSUMER_OFFSET); `None` when the broker
    /// has none (code 22).
    pub async fn query_offset(&self, queue: &MessageQueue) -> Result<Option<i64>> {
        let addr = self.broker_addr(queue).await?;
        query_consumer_offset(
            &self.remoting,
            &addr,
            &self.config.group,
            queue,
            self.config.request_timeout,
        )
        .await
    }

    /// Stores `offset` as the group's consumed offset for `queue` (UPDATE_CONSUMER_OFFSET).
    pub async fn commit_offset(&self, queue: &MessageQueue, offset: i64) -> Result<()> {
        let addr = self.broker_addr(queue).await?;
        let request =
            RemotingCommand::request(request_code::UPDATE_CONSUMER_OFFSET, ExtFields::new())
                .with_ext("consumerGroup", &self.config.group)
                .with_ext("topic", &queue.topic)
                .with_ext("queueId", queue.queue_id)
                .with_ext("commitOffset", offset);
        self.remoting
            .invoke_ok(&addr, request, self.config.request_timeout)
            .await?;
        Ok(())
    }

    /// The queue's max offset (GET_MAX_OFFSET): the next offset to be written.
    pub async fn max_offset(&self, queue: &MessageQueue) -> Result<i64> {
        let addr = self.broker_addr(queue).await?;
        queue_offset_call(
            &self.remoting,
            &addr,
            request_code::GET_MAX_OFFSET,
            queue,
            None,
            self.config.request_timeout,
        )
        .await
    }

    /// The queue's min offset (GET_MIN_OFFSET).
    pub async fn min_offset(&self, queue: &MessageQueue) -> Result<i64> {
        let addr = self.broker_addr(queue).await?;
        queue_offset_call(
            &self.remoting,
            &addr,
            request_code::GET_MIN_OFFSET,
            queue,
            None,
            self.config.request_timeout,
        )
        .await
    }

    /// The first offset whose message was stored at or after `timestamp_ms`
    /// (SEARCH_OFFSET_BY_TIMESTAMP).
    pub async fn search_offset(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<i64> {
        let addr = self.broker_addr(queue).await?;
        queue_offset_call(
            &self.remoting,
            &addr,
            request_code::SEARCH_OFFSET_BY_TIMESTAMP,
            queue,
            Some(timestamp_ms),
            self.config.request_timeout,
        )
        .await
    }

    /// The heartbeat body announcing this consumer's group and subscriptions.
    pub fn heartbeat_data(&self) -> HeartbeatData {
        let subs = self
            .subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(topic, sub)| sub.to_data(topic, self.sub_version))
            .collect();
        HeartbeatData {
            client_id: self.client_id().to_string(),
            consumer_data_set: vec![ConsumerData {
                consume_from_where: ConsumeFromWhere::FirstOffset,
                consume_type: ConsumeType::Actively,
                group_name: self.config.group.clone(),
                message_model: MessageModel::Clustering,
                subscription_data_set: subs,
                unit_mode: false,
            }],
            heartbeat_fingerprint: None,
            producer_data_set: Vec::new(),
            without_sub: None,
        }
    }

    /// Sends HEART_BEAT to `addr`.
    pub async fn heartbeat_to(&self, addr: &str) -> Result<()> {
        let body = json::to_vec(&self.heartbeat_data())?;
        let request =
            RemotingCommand::request(request_code::HEART_BEAT, ExtFields::new()).with_body(body);
        self.remoting
            .invoke_ok(addr, request, self.config.request_timeout)
            .await?;
        Ok(())
    }

    /// Sends HEART_BEAT to the master of every broker serving a subscribed topic, so the
    /// broker knows the group. Returns the addresses reached.
    pub async fn heartbeat(&self) -> Result<Vec<String>> {
        let topics: Vec<String> = self
            .subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        if topics.is_empty() {
            return Err(ClientError::InvalidArgument(
                "heartbeat needs at least one subscription".into(),
            ));
        }
        let mut addrs: Vec<String> = Vec::new();
        for topic in &topics {
            let route = self.namesrv.topic_route(topic).await?;
            for addr in master_addrs(&route).into_values() {
                if !addrs.contains(&addr) {
                    addrs.push(addr);
                }
            }
        }
        for addr in &addrs {
            self.heartbeat_to(addr).await?;
        }
        Ok(addrs)
    }

    /// Closes all connections.
    pub fn close(&self) {
        self.remoting.close();
    }
}

/// QUERY_CONSUMER_OFFSET against `addr`; `Ok(None)` on code 22.
pub async fn query_consumer_offset(
    remoting: &RemotingClient,
    addr: &str,
    group: &str,
    queue: &MessageQueue,
    timeout: Duration,
) -> Result<Option<i64>> {
    let request = RemotingCommand::request(request_code::QUERY_CONSUMER_OFFSET, ExtFields::new())
        .with_ext("consumerGroup", group)
        .with_ext("topic", &queue.topic)
        .with_ext("queueId", queue.queue_id);
    let response = remoting.invoke_timeout(addr, request, timeout).await?;
    if response.code == response_code::QUERY_NOT_FOUND {
        return Ok(None);
    }
    Ok(Some(expect_success(response)?.get_i64("offset")?))
}

/// GET_MAX_OFFSET / GET_MIN_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP (with `timestamp`) against
/// `addr`: the `offset` of the response.
pub async fn queue_offset_call(
    remoting: &RemotingClient,
    addr: &str,
    code: i32,
    queue: &MessageQueue,
    timestamp: Option<i64>,
    timeout: Duration,
) -> Result<i64> {
    let mut request = RemotingCommand::request(code, ExtFields::new())
        .with_ext("topic", &queue.topic)
        .with_ext("queueId", queue.queue_id);
    if let Some(ts) = timestamp {
        request.set_ext("timestamp", ts);
    }
    let response = remoting.invoke_ok(addr, request, timeout).await?;
    Ok(response.get_i64("offset")?)
}

/// Interprets a PULL_MESSAGE response (§6.5): codes 0/19/20/21 become a [`PullResult`]
/// (messages decoded and re-filtered by `subscription`), anything else
/// [`ClientError::Server`].
pub fn parse_pull_response(
    response: RemotingCommand,
    subscription: &Subscription,
) -> Result<PullResult> {
    let status = match response.code {
        response_code::SUCCESS => PullStatus::Found,
        response_code::PULL_NOT_FOUND => PullStatus::NoNewMsg,
        response_code::PULL_RETRY_IMMEDIATELY => PullStatus::NoMatchedMsg,
        response_code::PULL_OFFSET_MOVED => PullStatus::OffsetIllegal,
        code => return Err(ClientError::server(code, response.remark)),
    };
    let messages = if status == PullStatus::Found {
        let mut msgs = decode_records(&response.body)?;
        if !subscription.is_all() {
            msgs.retain(|m| subscription.matches(m.properties.get(keys::TAGS)));
        }
        msgs
    } else {
        Vec::new()
    };
    Ok(PullResult {
        status,
        next_begin_offset: response.get_i64("nextBeginOffset")?,
        min_offset: response.get_i64_opt("minOffset")?.unwrap_or(0),
        max_offset: response.get_i64_opt("maxOffset")?.unwrap_or(0),
        suggest_which_broker_id: response.get_i64_opt("suggestWhichBrokerId")?.unwrap_or(0),
        messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use conveyor_protocol::message::Properties;

    #[test]
    fn pull_header_keys() {
        let h = PullHeader {
            consumer_group: "CG".into(),
            topic: "T".into(),
            queue_id: 3,
            queue_offset: 100,
            max_msg_nums: 32,
            sys_flag: pull_sys_flag::SUBSCRIPTION | pull_sys_flag::SUSPEND,
            commit_offset: 0,
            suspend_timeout_millis: 15_000,
            subscription: Some("A || B".into()),
            sub_version: 5,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
        };
        let f = h.to_ext_fields();
        let expected = [
            ("commitOffset", "0"),
            ("consumerGroup", "CG"),
            ("expressionType", "TAG"),
            ("maxMsgNums", "32"),
            ("queueId", "3"),
            ("queueOffset", "100"),
            ("subVersion", "5"),
            ("subscription", "A || B"),
            ("suspendTimeoutMillis", "15000"),
            ("sysFlag", "6"),
            ("topic", "T"),
        ];
        let got: Vec<(&str, &str)> = f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, expected);
    }

    fn record(offset: i64, tag: Option<&str>) -> Vec<u8> {
        let mut props = Properties::new();
        if let Some(t) = tag {
            props.insert("TAGS", t);
        }
        StoredMessage {
            topic: "T".into(),
            queue_id: 0,
            flag: 0,
            queue_offset: offset,
            physical_offset: offset * 100,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: "127.0.0.1:1".parse().unwrap(),
            store_timestamp: 2,
            store_host: "127.0.0.1:10911".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Bytes::from_static(b"x"),
            properties: props,
        }
        .encode()
        .unwrap()
    }

    #[test]
    fn pull_response_statuses_and_filtering() {
        let mut body = record(0, Some("A"));
        body.extend(record(1, Some("B")));
        body.extend(record(2, None));
        let resp = |code: i32| {
            RemotingCommand::response(code, None)
                .with_ext("nextBeginOffset", 3)
                .with_ext("minOffset", 0)
                .with_ext("maxOffset", 3)
                .with_ext("suggestWhichBrokerId", 0)
        };
        let all =
            parse_pull_response(resp(0).with_body(body.clone()), &Subscription::all()).unwrap();
        assert_eq!(all.status, PullStatus::Found);
        assert_eq!(all.messages.len(), 3);
        assert_eq!(all.next_begin_offset, 3);
        let only_a = Subscription::parse("A").unwrap();
        let a = parse_pull_response(resp(0).with_body(body), &only_a).unwrap();
        assert_eq!(a.messages.len(), 1);
        assert_eq!(a.messages[0].queue_offset, 0);
        for (code, st) in [
            (19, PullStatus::NoNewMsg),
            (20, PullStatus::NoMatchedMsg),
            (21, PullStatus::OffsetIllegal),
        ] {
            let r = parse_pull_response(resp(code), &only_a).unwrap();
            assert_eq!(r.status, st);
            assert!(r.messages.is_empty());
            assert_eq!(r.max_offset, 3);
        }
        let e = parse_pull_response(resp(24).with_remark("no sub"), &only_a).unwrap_err();
        assert_eq!(e.code(), Some(24));
    }
}
