//! Administration (what `mqadmin` does, for Conveyor's CLI and operator): create topics on
//! every broker of a cluster (UPDATE_AND_CREATE_TOPIC 17, §9.6), cluster info, topic list and
//! routes, per-queue offsets (topic status), a consumer group's progress and backlog, moving a
//! group's committed offsets (reset to a time, the start or the end), and message lookup by
//! offset message id (33) or by key (12, §6.8).

use std::time::Duration;

use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::{ExtFields, RemotingCommand};
use conveyor_protocol::message::{decode_records, parse_offset_msg_id, StoredMessage};
use conveyor_protocol::route::{
    perm, ClusterInfo, GroupList, MessageQueue, TopicConfig, TopicFilterType, TopicRouteData,
};

use crate::consumer::{query_consumer_offset, queue_offset_call};
use crate::error::{ClientError, Result};
use crate::namesrv::NameServerClient;
use crate::remoting::{RemotingClient, RemotingConfig, RemotingError};
use crate::route::{master_addr, master_addrs, subscribe_queues};

/// Offsets of one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStatus {
    /// The queue.
    pub queue: MessageQueue,
    /// Min offset.
    pub min_offset: i64,
    /// Max offset (next offset to be written).
    pub max_offset: i64,
}

/// A consumer group's position in one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueProgress {
    /// The queue.
    pub queue: MessageQueue,
    /// The queue's max offset.
    pub broker_offset: i64,
    /// The group's stored offset (`None`: never committed).
    pub consumer_offset: Option<i64>,
    /// Backlog: `broker_offset - consumer_offset` (the whole queue when never committed).
    pub diff: i64,
}

/// A consumer group's progress over a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerProgress {
    /// Per queue, in route order.
    pub queues: Vec<QueueProgress>,
    /// Sum of the per-queue backlogs.
    pub total_diff: i64,
}

/// What to create with [`Admin::create_topic`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// Topic name.
    pub topic: String,
    /// Readable queues per broker.
    pub read_queue_nums: i32,
    /// Writable queues per broker.
    pub write_queue_nums: i32,
    /// [`perm`] bits (normally READ | WRITE).
    pub perm: i32,
    /// Ordered topic.
    pub order: bool,
    /// Attributes string (`+message.type=FIFO,…`), if any.
    pub attributes: Option<String>,
}

impl TopicSpec {
    /// A read/write topic with `queues` queues per broker.
    pub fn new(topic: impl Into<String>, queues: i32) -> Self {
        Self {
            topic: topic.into(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: perm::READ_WRITE,
            order: false,
            attributes: None,
        }
    }

    /// The UPDATE_AND_CREATE_TOPIC header.
    pub fn to_ext_fields(&self) -> ExtFields {
        let mut f = ExtFields::new();
        f.insert("topic".into(), self.topic.clone());
        f.insert("defaultTopic".into(), crate::producer::DEFAULT_TOPIC.into());
        f.insert("readQueueNums".into(), self.read_queue_nums.to_string());
        f.insert("writeQueueNums".into(), self.write_queue_nums.to_string());
        f.insert("perm".into(), self.perm.to_string());
        f.insert("topicFilterType".into(), "SINGLE_TAG".into());
        f.insert("topicSysFlag".into(), "0".into());
        f.insert("order".into(), self.order.to_string());
        if let Some(a) = &self.attributes {
            f.insert("attributes".into(), a.clone());
        }
        f
    }

    /// The same as a [`TopicConfig`].
    pub fn to_config(&self) -> TopicConfig {
        TopicConfig {
            order: self.order,
            perm: self.perm,
            read_queue_nums: self.read_queue_nums,
            topic_filter_type: TopicFilterType::SingleTag,
            topic_name: self.topic.clone(),
            write_queue_nums: self.write_queue_nums,
            ..TopicConfig::default()
        }
    }
}

/// Where [`Admin::reset_offsets`] moves a group's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTo {
    /// Each queue's first offset still stored: consume everything again.
    Earliest,
    /// Each queue's end: skip the backlog (mqadmin's `skipAccumulatedMessage`).
    Latest,
    /// The first message stored at or after this time (ms since the epoch; mqadmin's
    /// `resetOffsetByTime`).
    Time(i64),
}

/// One queue's committed offset before and after a reset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetReset {
    /// The queue.
    pub queue: MessageQueue,
    /// The offset committed before (`None`: none).
    pub before: Option<i64>,
    /// The offset committed now.
    pub after: i64,
}

/// Admin client.
#[derive(Debug)]
pub struct Admin {
    remoting: RemotingClient,
    namesrv: NameServerClient,
    timeout: Duration,
}

impl Admin {
    /// An admin client for the name servers `namesrv` (`"a:9876;b:9876"`).
    pub fn new(namesrv: &str) -> Result<Self> {
        Self::with_config(namesrv, RemotingConfig::default())
    }

    /// An admin client with explicit transport settings.
    pub fn with_config(namesrv: &str, config: RemotingConfig) -> Result<Self> {
        let timeout = config.request_timeout;
        let remoting = RemotingClient::new(config);
        let namesrv = NameServerClient::new(remoting.clone(), namesrv)?;
        Ok(Self {
            remoting,
            namesrv,
            timeout,
        })
    }

    /// The transport.
    pub fn remoting(&self) -> &RemotingClient {
        &self.remoting
    }

    /// The name-server client.
    pub fn namesrv(&self) -> &NameServerClient {
        &self.namesrv
    }

    /// Brokers and clusters.
    pub async fn cluster_info(&self) -> Result<ClusterInfo> {
        self.namesrv.cluster_info().await
    }

    /// All topics.
    pub async fn topic_list(&self) -> Result<Vec<String>> {
        self.namesrv.topic_list().await
    }

    /// The current route of `topic` (not cached).
    pub async fn topic_route(&self, topic: &str) -> Result<TopicRouteData> {
        Ok((*self.namesrv.refresh_route(topic).await?).clone())
    }

    /// Master addresses of every broker in `cluster`.
    pub async fn cluster_masters(&self, cluster: &str) -> Result<Vec<String>> {
        let info = self.cluster_info().await?;
        let names = info
            .cluster_addr_table
            .get(cluster)
            .ok_or_else(|| ClientError::InvalidArgument(format!("unknown cluster {cluster}")))?;
        let mut addrs = Vec::new();
        for name in names {
            let addr = info
                .broker_addr_table
                .get(name)
                .and_then(|b| b.master_addr())
                .ok_or_else(|| ClientError::NoBroker {
                    broker_name: name.clone(),
                })?;
            addrs.push(addr.to_string());
        }
        Ok(addrs)
    }

    /// Creates or updates `spec` on the broker at `addr`.
    pub async fn create_topic_on_broker(&self, addr: &str, spec: &TopicSpec) -> Result<()> {
        let request =
            RemotingCommand::request(request_code::UPDATE_AND_CREATE_TOPIC, spec.to_ext_fields());
        self.remoting.invoke_ok(addr, request, self.timeout).await?;
        Ok(())
    }

    /// Creates or updates `spec` on the master of every broker of `cluster`; returns the
    /// addresses updated. The brokers re-register, so the route appears shortly after.
    pub async fn create_topic(&self, cluster: &str, spec: &TopicSpec) -> Result<Vec<String>> {
        let addrs = self.cluster_masters(cluster).await?;
        if addrs.is_empty() {
            return Err(ClientError::InvalidArgument(format!(
                "cluster {cluster} has no broker"
            )));
        }
        for addr in &addrs {
            self.create_topic_on_broker(addr, spec).await?;
        }
        self.namesrv.invalidate(&spec.topic);
        Ok(addrs)
    }

    /// Waits until the name server returns a route for `topic` with at least one readable
    /// queue, polling every 100 ms up to `timeout`.
    pub async fn wait_for_route(&self, topic: &str, timeout: Duration) -> Result<TopicRouteData> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.topic_route(topic).await {
                Ok(route) if !subscribe_queues(topic, &route).is_empty() => return Ok(route),
                Ok(_) => {}
                Err(e) if e.code() == Some(response_code::TOPIC_NOT_EXIST) => {}
                Err(e) => return Err(e),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ClientError::NoRoute {
                    topic: topic.to_string(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Min and max offset of every readable queue of `topic`.
    pub async fn topic_status(&self, topic: &str) -> Result<Vec<QueueStatus>> {
        let route = self.namesrv.refresh_route(topic).await?;
        let mut out = Vec::new();
        for queue in subscribe_queues(topic, &route) {
            let addr = queue_addr(&route, &queue)?;
            let min_offset = queue_offset_call(
                &self.remoting,
                addr,
                request_code::GET_MIN_OFFSET,
                &queue,
                None,
                self.timeout,
            )
            .await?;
            let max_offset = queue_offset_call(
                &self.remoting,
                addr,
                request_code::GET_MAX_OFFSET,
                &queue,
                None,
                self.timeout,
            )
            .await?;
            out.push(QueueStatus {
                queue,
                min_offset,
                max_offset,
            });
        }
        Ok(out)
    }

    /// For each queue of `topic`: max offset, `group`'s stored offset, and the backlog.
    pub async fn consumer_progress(&self, group: &str, topic: &str) -> Result<ConsumerProgress> {
        let route = self.namesrv.refresh_route(topic).await?;
        let mut queues = Vec::new();
        let mut total_diff = 0;
        for queue in subscribe_queues(topic, &route) {
            let addr = queue_addr(&route, &queue)?;
            let broker_offset = queue_offset_call(
                &self.remoting,
                addr,
                request_code::GET_MAX_OFFSET,
                &queue,
                None,
                self.timeout,
            )
            .await?;
            let consumer_offset =
                query_consumer_offset(&self.remoting, addr, group, &queue, self.timeout).await?;
            let diff = (broker_offset - consumer_offset.unwrap_or(0)).max(0);
            total_diff += diff;
            queues.push(QueueProgress {
                queue,
                broker_offset,
                consumer_offset,
                diff,
            });
        }
        Ok(ConsumerProgress { queues, total_diff })
    }

    /// The consumer groups of `topic`: subscribed now or with committed offsets, on any of
    /// its brokers (QUERY_TOPIC_CONSUME_BY_WHO to each master).
    pub async fn topic_consumers(&self, topic: &str) -> Result<Vec<String>> {
        let route = self.namesrv.refresh_route(topic).await?;
        let mut groups = Vec::new();
        for addr in master_addrs(&route).into_values() {
            let request = RemotingCommand::request(
                request_code::QUERY_TOPIC_CONSUME_BY_WHO,
                ExtFields::new(),
            )
            .with_ext("topic", topic);
            let response = self
                .remoting
                .invoke_ok(&addr, request, self.timeout)
                .await?;
            let list: GroupList = conveyor_protocol::json::from_slice(&response.body)?;
            groups.extend(list.group_list);
        }
        groups.sort();
        groups.dedup();
        Ok(groups)
    }

    /// Moves `group`'s offsets on every queue of `topic`, on every master of the topic, with
    /// INVOKE_BROKER_TO_RESET_OFFSET (mqadmin's `resetOffsetByTime -f true`): the broker
    /// commits the new offsets and tells the group's running consumers, which jump to them.
    /// A broker that refuses it (an Apache RocketMQ 4.x broker with the group offline answers
    /// CONSUMER_NOT_ONLINE) gets the offsets committed directly (UPDATE_CONSUMER_OFFSET, as
    /// mqadmin's `resetOffsetByTimeOld`).
    pub async fn reset_offsets(
        &self,
        group: &str,
        topic: &str,
        to: ResetTo,
    ) -> Result<Vec<OffsetReset>> {
        let route = self.namesrv.refresh_route(topic).await?;
        let queues = subscribe_queues(topic, &route);
        let mut before = Vec::with_capacity(queues.len());
        for queue in &queues {
            let addr = queue_addr(&route, queue)?;
            before.push(
                query_consumer_offset(&self.remoting, addr, group, queue, self.timeout).await?,
            );
        }
        let timestamp = match to {
            ResetTo::Earliest => 0,
            ResetTo::Latest => -1,
            ResetTo::Time(t) => t,
        };
        for (broker_name, addr) in master_addrs(&route) {
            let request = RemotingCommand::request(
                request_code::INVOKE_BROKER_TO_RESET_OFFSET,
                ExtFields::new(),
            )
            .with_ext("topic", topic)
            .with_ext("group", group)
            .with_ext("timestamp", timestamp)
            .with_ext("isForce", true);
            match self.remoting.invoke_ok(&addr, request, self.timeout).await {
                Ok(_) => {}
                // Refused where RocketMQ's tools fall back too: a group offline (Apache 4.x)
                // or without offsets on the topic yet.
                Err(RemotingError::Server { code, .. })
                    if code == response_code::CONSUMER_NOT_ONLINE
                        || code == response_code::SYSTEM_ERROR =>
                {
                    self.commit_reset(group, topic, to, &route, &broker_name)
                        .await?
                }
                Err(e) => return Err(e.into()),
            }
        }
        let mut out = Vec::with_capacity(queues.len());
        for (queue, before) in queues.into_iter().zip(before) {
            let addr = queue_addr(&route, &queue)?;
            let after = query_consumer_offset(&self.remoting, addr, group, &queue, self.timeout)
                .await?
                .unwrap_or(0);
            out.push(OffsetReset {
                queue,
                before,
                after,
            });
        }
        Ok(out)
    }

    /// Commits the offsets of a reset straight to one broker's queues of `topic`.
    async fn commit_reset(
        &self,
        group: &str,
        topic: &str,
        to: ResetTo,
        route: &TopicRouteData,
        broker_name: &str,
    ) -> Result<()> {
        for queue in subscribe_queues(topic, route)
            .into_iter()
            .filter(|q| q.broker_name == broker_name)
        {
            let addr = queue_addr(route, &queue)?;
            let (code, timestamp) = match to {
                ResetTo::Earliest => (request_code::GET_MIN_OFFSET, None),
                ResetTo::Latest => (request_code::GET_MAX_OFFSET, None),
                ResetTo::Time(t) => (request_code::SEARCH_OFFSET_BY_TIMESTAMP, Some(t)),
            };
            let offset =
                queue_offset_call(&self.remoting, addr, code, &queue, timestamp, self.timeout)
                    .await?;
            let request =
                RemotingCommand::request(request_code::UPDATE_CONSUMER_OFFSET, ExtFields::new())
                    .with_ext("consumerGroup", group)
                    .with_ext("topic", topic)
                    .with_ext("queueId", queue.queue_id)
                    .with_ext("commitOffset", offset);
            self.remoting.invoke_ok(addr, request, self.timeout).await?;
        }
        Ok(())
    }

    /// Takes away (`writable` false, mqadmin's `wipeWritePerm`) or gives back (`addWritePerm`)
    /// the write permission of broker group `broker_name`'s topics in every name server:
    /// producers stop choosing the group once they refresh its routes, consumers keep reading
    /// it. Returns each name server with the number of topics it changed.
    pub async fn set_write_permission(
        &self,
        broker_name: &str,
        writable: bool,
    ) -> Result<Vec<(String, i64)>> {
        let (code, count) = if writable {
            (request_code::ADD_WRITE_PERM_OF_BROKER, "addTopicCount")
        } else {
            (request_code::WIPE_WRITE_PERM_OF_BROKER, "wipeTopicCount")
        };
        let mut out = Vec::new();
        for addr in self.namesrv.addrs() {
            let request = RemotingCommand::request(code, ExtFields::new())
                .with_ext("brokerName", broker_name);
            let response = self.remoting.invoke_ok(addr, request, self.timeout).await?;
            out.push((addr.clone(), response.get_i64(count)?));
        }
        Ok(out)
    }

    /// The message with offset message id `msg_id` (VIEW_MESSAGE_BY_ID to the store host the
    /// id names).
    pub async fn view_message(&self, msg_id: &str) -> Result<StoredMessage> {
        let (store_host, offset) = parse_offset_msg_id(msg_id).ok_or_else(|| {
            ClientError::InvalidArgument(format!("{msg_id:?} is not an offset message id"))
        })?;
        let request = RemotingCommand::request(request_code::VIEW_MESSAGE_BY_ID, ExtFields::new())
            .with_ext("offset", offset);
        let response = self
            .remoting
            .invoke_ok(&store_host.to_string(), request, self.timeout)
            .await?;
        decode_records(&response.body)?
            .into_iter()
            .next()
            .ok_or_else(|| {
                ClientError::server(response_code::SYSTEM_ERROR, Some("empty body".into()))
            })
    }

    /// Messages of `topic` whose KEYS contain `key` (or, with `unique_key`, whose UNIQ_KEY is
    /// `key`), stored between the two timestamps (ms), from every broker of the topic.
    pub async fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        max_num: i32,
        begin_timestamp: i64,
        end_timestamp: i64,
        unique_key: bool,
    ) -> Result<Vec<StoredMessage>> {
        let route = self.namesrv.refresh_route(topic).await?;
        let mut found = Vec::new();
        let mut addrs: Vec<String> = master_addrs(&route).into_values().collect();
        addrs.sort();
        for addr in addrs {
            let mut request =
                RemotingCommand::request(request_code::QUERY_MESSAGE, ExtFields::new())
                    .with_ext("topic", topic)
                    .with_ext("key", key)
                    .with_ext("maxNum", max_num)
                    .with_ext("beginTimestamp", begin_timestamp)
                    .with_ext("endTimestamp", end_timestamp);
            if unique_key {
                request.set_ext("_UNIQUE_KEY_QUERY", "true");
            }
            let response = self
                .remoting
                .invoke_timeout(&addr, request, self.timeout)
                .await?;
            match response.code {
                response_code::SUCCESS => found.extend(decode_records(&response.body)?),
                response_code::QUERY_NOT_FOUND => {}
                code => return Err(ClientError::server(code, response.remark)),
            }
        }
        Ok(found)
    }
}

fn queue_addr<'a>(route: &'a TopicRouteData, queue: &MessageQueue) -> Result<&'a str> {
    master_addr(route, &queue.broker_name).ok_or_else(|| ClientError::NoBroker {
        broker_name: queue.broker_name.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_topic_header() {
        let mut spec = TopicSpec::new("T", 8);
        spec.attributes = Some("+message.type=FIFO".into());
        let f = spec.to_ext_fields();
        let get = |k: &str| f.get(k).map(String::as_str);
        assert_eq!(get("topic"), Some("T"));
        assert_eq!(get("defaultTopic"), Some("TBW102"));
        assert_eq!(get("readQueueNums"), Some("8"));
        assert_eq!(get("writeQueueNums"), Some("8"));
        assert_eq!(get("perm"), Some("6"));
        assert_eq!(get("topicFilterType"), Some("SINGLE_TAG"));
        assert_eq!(get("order"), Some("false"));
        assert_eq!(get("attributes"), Some("+message.type=FIFO"));
        assert_eq!(spec.to_config().write_queue_nums, 8);
    }
}
